//! The refusals, by name: the one table of what a house (or a client, or a wrapped server's
//! gate) says when it refuses, each with its wire code and a stable machine name (the `error`
//! member of the wire body). Agents branch on the name; people read the reason beside it; tests
//! match names, never prose. docs/SPEC.md ("Refusals by name") lists the same table, and a test
//! holds the two together.
//!
//! A name is for ever: a refusal whose meaning changes gets a new name. Where a cause has no name
//! of its own yet, an `Error` carries its kind's name ([`ErrorKind::slug`]), which is still a
//! name from this table's first column.

use crate::kind::ErrorKind;

/// Declares the table: each row a variant, its kind (and so its wire code), its name and what it
/// means (the doc comment, which `Refusal::meaning` returns for the SPEC's table).
macro_rules! refusals {
    ($( $(#[doc = $doc:literal])+ $variant:ident($kind:ident) = $name:literal, )*) => {
        /// A cause of refusal with a stable name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Refusal {
            $( $(#[doc = $doc])+ $variant, )*
        }

        /// Every name, one after another in the table's order.
        const NAMES: &str = concat!($($name),*);
        /// Where each row's name ends in [`NAMES`] (it starts where the row before it ends).
        const ENDS: [u16; Refusal::ALL.len()] = ends([$($name.len()),*]);
        /// Each row's name as the table writes it, for the test that [`Refusal::name`] cuts it out.
        #[cfg(test)]
        const WRITTEN: &[&str] = &[$($name),*];

        impl Refusal {
            /// Every refusal, in the table's order.
            pub const ALL: &[Refusal] = &[$(Refusal::$variant),*];

            /// The stable machine name: the wire's `error`. Cut out of `NAMES` at `ENDS`: a
            /// `match` of string literals made a table of 233 slices (8 bytes each in wasm32) beside
            /// the text, where two bytes an entry say the same.
            pub fn name(self) -> &'static str {
                let at = self as usize;
                let start = at.checked_sub(1).and_then(|before| ENDS.get(before)).copied().unwrap_or(0);
                let end = ENDS.get(at).copied().unwrap_or(0);
                NAMES.get(usize::from(start)..usize::from(end)).unwrap_or_default()
            }

            /// Its kind, and so its wire code.
            pub const fn kind(self) -> ErrorKind {
                match self { $(Refusal::$variant => ErrorKind::$kind,)* }
            }

            /// What it means, in a line (the row's doc comment).
            pub fn meaning(self) -> &'static str {
                match self { $(Refusal::$variant => concat!($($doc),+).trim_ascii(),)* }
            }
        }
    };
}

/// The running sums of `lens`, as the compiler works them out: each row's end in [`NAMES`].
#[allow(clippy::indexing_slicing)] // evaluated at build time: an index out of bounds fails the build
const fn ends<const N: usize>(lens: [usize; N]) -> [u16; N] {
    let mut out = [0u16; N];
    let mut at = 0;
    let mut i = 0;
    while i < N {
        at += lens[i];
        assert!(at <= u16::MAX as usize, "the names outgrow two-byte offsets");
        out[i] = at as u16;
        i += 1;
    }
    out
}

impl Refusal {
    /// The refusal of this name, if it is one of the table's.
    pub fn from_name(name: &str) -> Option<Refusal> {
        Refusal::ALL.iter().copied().find(|r| r.name() == name)
    }
}

refusals! {
    // ---- proto: documents, signatures, tokens ----
    /// The JSON is not well formed, or not canonical where it must be.
    BadJson(Malformed) = "bad_json",
    /// A request body or document is over the size limit for it.
    BodyTooLarge(TooLarge) = "body_too_large",
    /// An address is not `name@domain` as the protocol allows it.
    BadAddress(Malformed) = "bad_address",
    /// An id (of an envelope, thread or quote) is not 1 to 128 letters, digits, `.`, `_` or `-`, starting with a letter or digit.
    BadId(Malformed) = "bad_id",
    /// A timestamp is not RFC 3339.
    BadTimestamp(Malformed) = "bad_timestamp",
    /// A key is not a 32-byte base64url public key (or not a usable one).
    BadKey(Malformed) = "bad_key",
    /// A digest is not 64 lowercase hex digits.
    BadDigest(Malformed) = "bad_digest",
    /// A document names a protocol version this build does not speak.
    UnsupportedVersion(Malformed) = "unsupported_version",
    /// A signature block names an unknown algorithm, or its value is not 64 bytes of base64url.
    UnreadableSignature(Malformed) = "unreadable_signature",
    /// A signature does not verify by the key that should have made it.
    BadSignature(Forbidden) = "bad_signature",
    /// A signature is made by a key the document (or its signer's card) does not trust.
    UntrustedKey(Forbidden) = "untrusted_key",
    /// A document is signed for another party than the one it names (the signer's card is another's).
    WrongSigner(Forbidden) = "wrong_signer",
    /// The request's token is outside its five-minute window.
    TokenExpired(Unauthenticated) = "token_expired",
    /// The token is bound to another address, method, path, query, house or body than this request's.
    TokenForAnotherRequest(Unauthenticated) = "token_for_another_request",
    /// The token's signature does not verify by any key the agent may use for it.
    TokenSignatureInvalid(Unauthenticated) = "token_signature_invalid",
    /// An agent or domain card (or a scope in it) does not parse.
    BadCard(Malformed) = "bad_card",
    /// An agent card is certified for another domain than its address's.
    NotCertifiedByDomain(Forbidden) = "not_certified_by_domain",
    /// An agent card's `valid_from` is ahead of our clock: try again later.
    CardNotYetValid(Unavailable) = "card_not_yet_valid",
    /// An agent card is past its `valid_until`.
    CardExpired(Forbidden) = "card_expired",
    /// A delegated card came without its parent's card.
    ParentCardRequired(Forbidden) = "parent_card_required",
    /// A subagent's card (a dotted name), or its registration, carries no delegation from its
    /// parent.
    SubagentWithoutDelegation(Forbidden) = "subagent_without_delegation",
    /// A card's delegation is not its parent's, delegates another key, has expired or is wider than its parent's.
    BadDelegation(Forbidden) = "bad_delegation",
    /// A delegated card's scope does not allow this kind of envelope to this domain.
    OutsideDelegation(Forbidden) = "outside_delegation",
    /// An envelope does not parse (a member is missing, wrong or contradicts another).
    BadEnvelope(Malformed) = "bad_envelope",
    /// An envelope is over the size limit of the house that reads it.
    EnvelopeTooLarge(TooLarge) = "envelope_too_large",
    /// An envelope is past its `expires`.
    EnvelopeExpired(Expired) = "envelope_expired",
    /// An envelope's `encrypted` member does not parse.
    BadEncrypted(Malformed) = "bad_encrypted",
    /// An envelope cannot be sealed as asked (already sealed, no usable recipient key).
    CannotSeal(Malformed) = "cannot_seal",
    /// An envelope asked to be opened is not encrypted.
    NotEncrypted(Malformed) = "not_encrypted",
    /// A sealed envelope wraps no key for this recipient.
    NotSealedForRecipient(Forbidden) = "not_sealed_for_recipient",
    /// A sealed envelope's content cannot be opened with this key, or does not authenticate.
    CannotOpen(Forbidden) = "cannot_open",
    /// The `Nyx5-Relay` header does not parse.
    BadRelayHeader(Forbidden) = "bad_relay_header",
    /// The relay key is not a key of the sending domain, or is past its end.
    RelayKeyNotValid(Forbidden) = "relay_key_not_valid",
    /// A quote does not parse.
    BadQuote(Malformed) = "bad_quote",
    /// A quote is over its size limit.
    QuoteTooLarge(TooLarge) = "quote_too_large",
    /// A quote is past its `expires`.
    QuoteExpired(Expired) = "quote_expired",
    /// A receipt does not parse.
    BadReceipt(Malformed) = "bad_receipt",
    /// A Libro entry does not parse or does not balance.
    BadEntry(Malformed) = "bad_entry",
    /// An entry of a Libro's chain does not check (number, house, chain, signature or balance).
    EntryDoesNotCheck(Forbidden) = "entry_does_not_check",
    /// An authority (or a mandate's) does not parse, or contradicts itself.
    BadAuthority(Malformed) = "bad_authority",
    /// An authority declared under a parent names something looser than the parent's.
    AuthorityTooLoose(Forbidden) = "authority_too_loose",
    /// The authority prohibits this movement.
    ProhibitedByAuthority(Forbidden) = "prohibited_by_authority",
    /// The authority's cap counts another currency than this movement's.
    AuthorityOtherCurrency(Forbidden) = "authority_other_currency",
    /// A contract's evidence terms do not parse, or an evidence kind is not one the protocol knows.
    BadEvidence(Malformed) = "bad_evidence",
    /// The terms require evidence this claim does not carry (none, no hash, or a kind they do not accept).
    EvidenceRequired(Malformed) = "evidence_required",
    /// An App Card does not parse.
    BadAppCard(Malformed) = "bad_app_card",
    /// An app's id is not 1 to 64 lowercase letters, digits, `.`, `-` or `_`.
    BadAppId(Malformed) = "bad_app_id",
    /// An App Card is over its size limit.
    AppCardTooLarge(TooLarge) = "app_card_too_large",
    /// An App Card declares a primitive Nyx5 does not have.
    UnknownPrimitive(Malformed) = "unknown_primitive",
    /// A file of an app is over the size limit.
    AppFileTooLarge(TooLarge) = "app_file_too_large",
    /// A file of an app is missing, or its bytes are not the ones its card's `entry.integrity` lists.
    AppFileMismatch(Forbidden) = "app_file_mismatch",
    /// The catalogue does not list this app.
    AppNotListed(NotFound) = "app_not_listed",
    /// The App Card is not the one the catalogue lists (its hash differs).
    AppNotAsListed(Forbidden) = "app_not_as_listed",
    /// A member of the request body is missing, of the wrong type or out of range; the reason names it.
    BadMember(Malformed) = "bad_member",
    /// The envelope is not signed.
    UnsignedEnvelope(Forbidden) = "unsigned_envelope",
    /// The relay header names a house that is not the sender's.
    BadRelay(Forbidden) = "bad_relay",
    /// A domain card is not signed by the key the operator's hosts file anchors, nor by one it handed over to.
    AnchorMismatch(Forbidden) = "anchor_mismatch",
    /// A domain's key contradicts the key pinned for it on first use; refused until the operator confirms it.
    PinMismatch(Forbidden) = "pin_mismatch",
    /// This act needs the agent's current key; a replaced (previous) key may not do it.
    NeedsCurrentKey(Forbidden) = "needs_current_key",
    /// An intro from a sender not on the allowlist is over its size.
    IntroTooLarge(TooLarge) = "intro_too_large",
    /// A member of the operation's body is missing or out of range (the reason names it).
    BadOperation(Malformed) = "bad_operation",
    // ---- end proto ----

    // ---- house: auth, registration, cards, mailbox, inbound, outbound ----
    /// The `Authorization` token is missing or cannot be read.
    BadToken(Unauthenticated) = "bad_token",
    /// The token's nonce was used before: a token is good for one request only.
    NonceUsed(Unauthenticated) = "nonce_used",
    /// The token names an agent of another house; this route takes tokens of its own agents only.
    TokenWrongHouse(Unauthenticated) = "token_wrong_house",
    /// The token's agent has no card here that verifies: no such agent, a house address, or a card that cannot be resolved or verified.
    TokenSignerUnknown(Unauthenticated) = "token_signer_unknown",
    /// The operator's bearer token is missing or wrong.
    OperatorTokenRequired(Unauthenticated) = "operator_token_required",
    /// The authenticated agent is not the one the resource belongs to.
    NotTheOwner(Forbidden) = "not_the_owner",
    /// The envelope's `from` is not the agent whose card or token sent it.
    NotTheSender(Forbidden) = "not_the_sender",
    /// No agent of that name at this house (or at the house asked).
    UnknownAgent(NotFound) = "unknown_agent",
    /// No route at this path.
    NoRoute(NotFound) = "no_route",
    /// The route exists, but not with this method.
    WrongMethod(MethodNotAllowed) = "wrong_method",
    /// A query parameter is out of range or too long; the reason names it.
    BadQuery(Malformed) = "bad_query",
    /// A setting of the house's configuration cannot be read; the reason names it.
    BadConfig(Malformed) = "bad_config",
    /// The bookmark header is not one this house gave.
    BadBookmark(Malformed) = "bad_bookmark",
    /// A domain name given is not a valid domain.
    BadDomain(Malformed) = "bad_domain",
    /// The name asked for is not a valid local part of an address.
    BadLocalPart(Malformed) = "bad_local_part",
    /// A delegated agent must be named `<name>.<parent>`.
    BadSubagentName(Malformed) = "bad_subagent_name",
    /// The webhook URL is refused by the house's outbound policy.
    BadWebhook(Malformed) = "bad_webhook",
    /// An allow or block list entry is not an address, a domain or `*.domain`.
    BadListEntry(Malformed) = "bad_list_entry",
    /// The recipient's mailbox holds as much as its quota allows; try later.
    MailboxFull(RateLimited) = "mailbox_full",
    /// The recipient's card has expired.
    RecipientCardExpired(NotFound) = "recipient_card_expired",
    /// No recipient of the envelope is an agent of this house.
    NotAtThisHouse(Misdirected) = "not_at_this_house",
    /// The envelope expired only lately by this house's clock (clocks may differ); the sender's house may try again.
    ExpiredLately(Unavailable) = "expired_lately",
    /// The envelope is signed by a key whose end passed only lately by this house's clock; try again.
    KeyEndedLately(Unavailable) = "key_ended_lately",
    /// This system address takes no mail.
    TakesNoMail(Forbidden) = "takes_no_mail",
    /// The envelope id is already used, by another sender or for another envelope.
    EnvelopeIdTaken(Conflict) = "envelope_id_taken",
    /// The stamp is over the cap of the sender's delegation.
    OverDelegationCap(Forbidden) = "over_delegation_cap",
    /// The sender's delegation does not let it pay this stamp alone.
    StampNotAuthorised(Forbidden) = "stamp_not_authorised",
    /// The sender's balance does not cover the stamp.
    StampUnaffordable(PaymentRequired) = "stamp_unaffordable",
    /// The Libro is busy with other writes; try again.
    LibroBusy(Unavailable) = "libro_busy",
    /// The movement would take a balance past 2^53 - 1 tok; nothing moved.
    BalanceMax(Conflict) = "balance_max",
    /// Another move of this mailbox between databases is under way.
    MoveUnderWay(Conflict) = "move_under_way",
    /// A guard of the store refused the write (it raced another, or breaks a rule).
    ConstraintRefused(Conflict) = "constraint_refused",
    /// The house's storage or network is unavailable; try again.
    StorageUnavailable(Unavailable) = "storage_unavailable",
    /// The house's outbound policy refuses to fetch that URL (a private or reserved address).
    UrlRefused(Forbidden) = "url_refused",
    /// A registration's `ts` is outside its 5-minute window.
    RegistrationStale(Forbidden) = "registration_stale",
    /// The delegation is issued in the future.
    DelegationInFuture(Forbidden) = "delegation_in_future",
    /// The delegation was issued before the one the card holds.
    DelegationStale(Forbidden) = "delegation_stale",
    /// The name is reserved for the house's own addresses.
    ReservedName(Forbidden) = "reserved_name",
    /// Only the house's operator may do this.
    OperatorOnly(Forbidden) = "operator_only",
    /// This house registers agents only through its operator.
    RegistrationClosed(Forbidden) = "registration_closed",
    /// This house registers agents by invitation: an invitation code is required.
    InviteRequired(Forbidden) = "invite_required",
    /// The invitation code is unknown, used up or expired.
    BadInvite(Forbidden) = "bad_invite",
    /// The agent's card no longer verifies here; only the operator may update it.
    CardNoLongerVerifies(Forbidden) = "card_no_longer_verifies",
    /// The registration must be signed by the key being registered.
    SignatureRequired(Forbidden) = "signature_required",
    /// The parent of a subagent is not registered here.
    UnknownParent(NotFound) = "unknown_parent",
    /// What this request changes was changed by another meanwhile; try again.
    ChangedMeanwhile(Conflict) = "changed_meanwhile",
    /// Too many registrations this minute; try again shortly.
    TooManyRegistrations(RateLimited) = "too_many_registrations",
    /// The name is registered; only its owner or the house may update it.
    AgentTaken(Conflict) = "agent_taken",
    /// This house holds as many agents as it can give mailboxes to.
    HouseFull(Conflict) = "house_full",
    /// A domain's Nyx5 DNS TXT record cannot be read, or there are several.
    BadDnsRecord(Forbidden) = "bad_dns_record",
    /// DNS-over-HTTPS did not answer usefully; try again.
    DnsUnavailable(Unavailable) = "dns_unavailable",
    /// Cards of that site are being fetched already; try again in a moment.
    FetchBusy(Unavailable) = "fetch_busy",
    /// Too many card fetches of new names under one site this minute; try again shortly.
    TooManyFetches(RateLimited) = "too_many_fetches",
    /// The card does not list the token's key and was fetched anew a moment ago; try again shortly.
    CardRefetchedLately(Unavailable) = "card_refetched_lately",
    /// Another house could not be reached, or answered with a temporary failure; try again later.
    PeerUnavailable(Unavailable) = "peer_unavailable",
    /// Another house says it has no such thing.
    PeerNotFound(NotFound) = "peer_not_found",
    /// Another house answered with a status that is not a usable answer.
    PeerRefused(Forbidden) = "peer_refused",
    /// Another house's answer is over the size this house reads.
    PeerAnswerTooLarge(Forbidden) = "peer_answer_too_large",
    /// A card fetched from another house (an agent's or its domain's) does not parse or verify, for a
    /// cause with no name of its own (a 403 cause keeps its name); the reason says why.
    UnverifiableCard(Forbidden) = "unverifiable_card",
    /// The sender of an envelope cannot be verified, for a cause with no name of its own (a 403
    /// cause keeps its name); the reason says why.
    UnverifiableSender(Forbidden) = "unverifiable_sender",
    /// A delegation is nested too deep.
    DelegationTooDeep(Forbidden) = "delegation_too_deep",
    /// A card fetched is not the one asked for (another address or domain, or not the one its house holds).
    WrongCard(Forbidden) = "wrong_card",
    /// The domain is not a public house domain (a public suffix, or under no public suffix).
    NotPublicDomain(Forbidden) = "not_public_domain",
    /// The pin of a domain changed meanwhile; try again.
    PinChangedMeanwhile(Unavailable) = "pin_changed_meanwhile",
    /// No key is pinned for that domain.
    NoPin(NotFound) = "no_pin",
    /// No such key is pending confirmation for that domain.
    NoPendingKey(Conflict) = "no_pending_key",
    /// A house's directory page cannot be read or names another house.
    BadDirectory(Forbidden) = "bad_directory",
    /// `deliver_after` is further ahead than a house holds an envelope.
    DeliverAfterTooFar(Malformed) = "deliver_after_too_far",
    /// The envelope's `created` is ahead of this house's clock by more than the allowed skew.
    CreatedInFuture(Malformed) = "created_in_future",
    /// The envelope's `created` is too old to queue: sign it again under the same id.
    CreatedTooOld(Malformed) = "created_too_old",
    /// The agent (with its subagents) sent as many envelopes as it may this minute.
    TooManySends(RateLimited) = "too_many_sends",
    /// This house requires the relay header on inbound envelopes.
    RelayRequired(Forbidden) = "relay_required",
    /// An allow or block list would hold more entries than it may.
    ListTooLong(TooLarge) = "list_too_long",
    /// Too many list changes in one request.
    TooManyChanges(TooLarge) = "too_many_changes",
    /// This house runs no index.
    NoIndex(NotFound) = "no_index",
    /// The index crawls as many houses as it takes.
    IndexFull(Conflict) = "index_full",
    /// The mailbox is being acknowledged by another request; try again.
    AckBusy(Unavailable) = "ack_busy",
    /// This house has one database: there is nowhere to move a mailbox.
    SingleDatabase(Conflict) = "single_database",
    /// Too many envelopes from the sender's domain this minute; try again shortly.
    TooManyFromDomain(RateLimited) = "too_many_from_domain",
    /// The recipient blocks the sender.
    SenderBlocked(Forbidden) = "sender_blocked",
    /// The vouch (aval) an envelope carries in place of a stamp does not hold.
    BadVouch(PaymentRequired) = "bad_vouch",
    /// The sender is not on the recipient's allowlist; send an intro.
    NotOnAllowlist(Forbidden) = "not_on_allowlist",
    /// The recipient asks for proof of work that is missing or short.
    PowRequired(PaymentRequired) = "pow_required",
    /// The recipient asks for a stamp and there is none.
    StampRequired(PaymentRequired) = "stamp_required",
    /// The stamp must be paid in the Libro of the recipient's house.
    StampWrongHouse(PaymentRequired) = "stamp_wrong_house",
    /// The stamp is less than the mailbox asks.
    StampTooSmall(PaymentRequired) = "stamp_too_small",
    /// The recipient's inbox policy is not one this house supports.
    UnsupportedPolicy(Forbidden) = "unsupported_policy",
    /// A card found at a URL given for another purpose is signed by a key the domain's pin neither
    /// is nor was handed over to; nothing kept changes (and repinning would not mend it).
    GivenUrlWrongKey(Forbidden) = "given_url_wrong_key",
    /// The mailbox is moving between the house's databases (mailbox shards); try again in a few
    /// seconds (the answer carries `Retry-After`).
    MailboxMoving(MailboxMoving) = "mailbox_moving",
    /// The hold for approval is not well formed: its approver is not an agent of this house
    /// outside the held agent's own tree, or its rule names nothing to hold (docs/SPEC.md §7c).
    BadHold(Malformed) = "bad_hold",
    /// The asker may not set or lift this hold: only the agent itself (setting one where none
    /// is), an agent above it, or the operator may, and only one at least as high as who set it.
    NotYourHold(Forbidden) = "not_your_hold",
    /// An agent cannot lift or change a hold on itself: only an agent above it or the operator can.
    HoldIrrevocable(Forbidden) = "hold_irrevocable",
    /// The envelope waits for approval, and it is sealed without the content key for an approver
    /// (the `readers` of `POST /outbound`): the person could not read what they approve.
    ApproverCannotRead(Malformed) = "approver_cannot_read",
    /// The hold changed while this request decided on it; ask again.
    HoldChanged(Conflict) = "hold_changed",
    /// The agent's mail waits for a person's approval (a hold), and an email cannot wait: send an
    /// envelope instead, or have the hold lifted.
    EmailHeld(Forbidden) = "email_held",
    /// No such draft waits here for this agent (as its sender or an approver).
    UnknownDraft(NotFound) = "unknown_draft",
    /// The agent is not one of the draft's approvers.
    NotTheApprover(Forbidden) = "not_the_approver",
    /// The draft is decided already (approved, declined).
    DraftDecided(Conflict) = "draft_decided",
    /// The draft changed while this request decided it (another approver); ask again.
    DraftChanged(Conflict) = "draft_changed",
    /// The draft's time to be approved has passed; it will never leave.
    DraftExpired(Expired) = "draft_expired",
    /// The agent (with its subagents) has the most drafts waiting or kept it may; wait for some
    /// to be decided or to expire.
    TooManyDrafts(Conflict) = "too_many_drafts",
    /// This house keeps no attachments (it has no store for them).
    AttachmentsOff(NotFound) = "attachments_off",
    /// An attachment's description or part is not as the spec's "Attachments" says.
    BadAttachment(Malformed) = "bad_attachment",
    /// An attachment is larger than the house keeps (25 MiB of file).
    AttachmentTooLarge(TooLarge) = "attachment_too_large",
    /// The agent keeps as many attachments, or as many bytes of them, as it may: wait for some
    /// to expire.
    AttachmentsFull(Conflict) = "attachments_full",
    /// No such attachment here that this agent may read (or it expired).
    UnknownAttachment(NotFound) = "unknown_attachment",
    /// Not every part of the attachment is stored yet.
    AttachmentIncomplete(Conflict) = "attachment_incomplete",
    /// An A2A call's body is not JSON.
    BadA2aJson(Malformed) = "bad_a2a_json",
    /// An A2A call is not a JSON-RPC 2.0 request of A2A 1.0's shape, or its params are not.
    BadA2aRequest(Malformed) = "bad_a2a_request",
    /// The A2A method is not one this house answers.
    UnknownA2aMethod(NotFound) = "unknown_a2a_method",
    /// No such A2A task for this agent.
    UnknownA2aTask(NotFound) = "unknown_a2a_task",
    /// The A2A task has ended (or is not open to this call): it cannot be canceled or answered.
    TaskNotCancelable(Conflict) = "task_not_cancelable",
    /// An A2A push notification URL the house's outbound policy does not allow (a private or
    /// loopback address the operator did not name, a scheme other than https).
    BadA2aPushUrl(Malformed) = "bad_a2a_push_url",
    /// The A2A operation (the extended card) is not one this house offers.
    A2aUnsupported(Malformed) = "a2a_unsupported",
    /// A Nyx5 caller's proof on an A2A message does not verify (signature, time, address).
    BadCallerProof(Unauthenticated) = "bad_caller_proof",
    /// Too many A2A calls to this agent from this caller's site (or from unverified callers)
    /// this minute.
    TooManyA2aCalls(RateLimited) = "too_many_a2a_calls",
    /// The agent holds as many A2A tasks as it may.
    TooManyA2aTasks(Conflict) = "too_many_a2a_tasks",
    /// The escrow an A2A task names cannot pay for it (not held, not between this caller and
    /// this agent, not arbitrated by `a2a@`, or bound to another task).
    BadTaskPayment(Conflict) = "bad_task_payment",
    /// Only the task's own agent answers it.
    NotTheTasksAgent(Forbidden) = "not_the_tasks_agent",
    // ---- end house ----

    // ---- libro: operations, contracts, mandates, authority, stamps ----
    /// The operation is not one the Libro knows.
    UnknownOperation(Malformed) = "unknown_operation",
    /// The operator has no account at this Libro: a stranger creates nothing here until a top-up
    /// opens one.
    NoLibroAccount(PaymentRequired) = "no_libro_account",
    /// The paying account's balance is less than the operation moves.
    InsufficientFunds(PaymentRequired) = "insufficient_funds",
    /// No such contract here, or the operator is not one of its parties.
    UnknownContract(NotFound) = "unknown_contract",
    /// The operator takes part in the contract, quote or mandate, but not as the party that may
    /// do this (only the seller delivers, only the grantee charges, …).
    WrongParty(Forbidden) = "wrong_party",
    /// The contract is of a kind this operation does not apply to (delivering a spot contract,
    /// forfeiting what is not a bond, …).
    WrongContractKind(Conflict) = "wrong_contract_kind",
    /// The contract's state does not allow this operation (released already, not yet delivered, …).
    WrongContractState(Conflict) = "wrong_contract_state",
    /// The arbiter's verdict is not well formed, or not about this contract, or says the opposite
    /// of what the operation does.
    BadVerdict(Malformed) = "bad_verdict",
    /// The bond has expired: it returns to its bondholder and can no longer be forfeited.
    BondExpired(Expired) = "bond_expired",
    /// The quote cannot be accepted as it is (a seller selling to itself, an arbiter who is a
    /// party, a currency other than tok, a fee and share over the whole, a bond offered).
    UnacceptableQuote(Malformed) = "unacceptable_quote",
    /// The quote was accepted before: a contract of its id exists.
    QuoteAlreadyAccepted(Conflict) = "quote_already_accepted",
    /// A contract id that would name a hold's account (it may not start with the hold prefix).
    ReservedContractId(Malformed) = "reserved_contract_id",
    /// The bond cannot be posted as it is (an `expires` in the past, a bondholder verifying or
    /// arbitrating its own bond).
    BadBond(Malformed) = "bad_bond",
    /// The mandate cannot be granted as it is (granted to its grantor, an `expires` in the past).
    BadMandate(Malformed) = "bad_mandate",
    /// The grantor holds the most active mandates it may; revoke one first.
    TooManyMandates(Conflict) = "too_many_mandates",
    /// No such mandate here.
    UnknownMandate(NotFound) = "unknown_mandate",
    /// The mandate, or one above it in its chain, is revoked.
    MandateRevoked(Conflict) = "mandate_revoked",
    /// The mandate, or one above it in its chain, has expired.
    MandateExpired(Expired) = "mandate_expired",
    /// A sub-mandate asks for more than its parent leaves: a higher cap, a later end, other
    /// concepts.
    BeyondParentMandate(Forbidden) = "beyond_parent_mandate",
    /// The charge's concept is outside what a mandate of its chain covers.
    ConceptNotCovered(Forbidden) = "concept_not_covered",
    /// The charge is more than a mandate of its chain has left of its cap.
    MandateExhausted(PaymentRequired) = "mandate_exhausted",
    /// The charge would have the root grantor of the mandate pay itself.
    PaysItself(Malformed) = "pays_itself",
    /// The mandate's payer cannot cover the charge now (its balance is not told).
    PayerCannotCover(PaymentRequired) = "payer_cannot_cover",
    /// The movement needs approval, and nobody but its own operator could give it.
    NoApprover(Forbidden) = "no_approver",
    /// The operator has the most movements waiting for approval it may; wait for some to be decided.
    TooManyPending(Conflict) = "too_many_pending",
    /// The operator has asked for the most approvals it may in 30 days.
    TooManyApprovals(Conflict) = "too_many_approvals",
    /// An approved movement asks for approval again (something changed): decline it and ask anew.
    ApprovalAskedAgain(Conflict) = "approval_asked_again",
    /// No such approval waits here, or the operator is not one of its parties.
    UnknownApproval(NotFound) = "unknown_approval",
    /// The approval is decided already (approved, declined or expired).
    ApprovalDecided(Conflict) = "approval_decided",
    /// The approval has expired; its hold returns.
    ApprovalExpired(Expired) = "approval_expired",
    /// The operator may not approve this movement (only the approvers it names may).
    NotAnApprover(Forbidden) = "not_an_approver",
    /// The operator has approved this movement already.
    AlreadyApproved(Conflict) = "already_approved",
    /// A bond or an approval is not due to expire yet (the house's own sweep).
    NotDue(Conflict) = "not_due",
    /// The quote's seller cannot be verified (its card cannot be found or does not verify).
    UnverifiableSeller(Forbidden) = "unverifiable_seller",
    /// verifica@ arbitrates nothing at this house: it does not run one.
    NoVerifica(Malformed) = "no_verifica",
    /// A contract's `terms.verify` (verifica@'s tests) is not one this house runs; the reason
    /// names the test and its member.
    BadVerifyTerms(Malformed) = "bad_verify_terms",
    /// An operation that would wait for approval is larger than the house keeps whole.
    PendingTooLarge(TooLarge) = "pending_too_large",
    /// A bond's id (its envelope's) is taken by another contract; send it under another id.
    ContractIdTaken(Conflict) = "contract_id_taken",
    /// The operation was signed or first received more than its life (an hour) ago, or waited in
    /// the house's queue that long; sign it again under a new id.
    OperationExpired(Expired) = "operation_expired",
    /// The operator's site has used its budget of operations of this kind for this minute.
    TooManyOperations(RateLimited) = "too_many_operations",
    /// A top-up is not well formed (its amount, account or note).
    BadTopUp(Malformed) = "bad_top_up",
    /// The top-up's id was used before for another amount or account.
    TopUpIdTaken(Conflict) = "top_up_id_taken",
    /// This house offers no tareas@.
    NoTareas(NotFound) = "no_tareas",
    /// No such task is offered here.
    UnknownTask(NotFound) = "unknown_task",
    /// A task posted to the catalogue is not well formed (its price, statement, terms or tests).
    BadTask(Malformed) = "bad_task",
    /// A task of that id exists with other contents.
    TaskIdTaken(Conflict) = "task_id_taken",
    /// The catalogue holds the most tasks it may; retire one first.
    TooManyTasks(Conflict) = "too_many_tasks",
    /// The quote sent to tareas@ is not what its catalogue says (its buyer, id, contract,
    /// arbiter, price, referrer or terms).
    QuoteNotAsCatalogued(Malformed) = "quote_not_as_catalogued",
    /// tareas@ pays only the agents of its own house.
    TareasLocalOnly(Forbidden) = "tareas_local_only",
    /// A quote sent to tareas@ comes from someone other than its seller.
    NotTheSeller(Forbidden) = "not_the_seller",
    /// This task was paid to the agent before, or is in flight: each task pays once per agent.
    TaskTakenBefore(Conflict) = "task_taken_before",
    /// The agent has a task in flight: it delivers it (or has it refunded) before taking another.
    TaskInFlight(Conflict) = "task_in_flight",
    /// The day's quota of tasks (the agent's, or the house's) is used; come back tomorrow (UTC).
    TaskQuotaUsed(Conflict) = "task_quota_used",
    /// The quote is made out to another buyer.
    QuoteNotYours(Forbidden) = "quote_not_yours",
    /// The quote is to be accepted at another house's Libro.
    QuoteWrongHouse(Malformed) = "quote_wrong_house",
    // ---- end libro ----

    // ---- edges: email bridge, apps, index, web, cli, worker ----
    /// The message is not an email the bridge can read.
    BadEmail(Malformed) = "bad_email",
    /// This house's email bridge is off: it neither takes nor sends email.
    EmailBridgeOff(Forbidden) = "email_bridge_off",
    /// The email is larger than this house takes or sends.
    EmailTooLarge(TooLarge) = "email_too_large",
    /// The address is at this house but takes no email (the email gateway, a reserved name).
    TakesNoEmail(NotFound) = "takes_no_email",
    /// Too many emails this minute (from one sender in, or from one agent out); try again shortly.
    TooManyEmails(RateLimited) = "too_many_emails",
    /// The outgoing email's id is already used for another email.
    EmailIdTaken(Conflict) = "email_id_taken",
    /// No email of that id in the agent's mailbox.
    NoSuchEmail(NotFound) = "no_such_email",
    /// A protocol document this build leaves to static assets that lack it.
    NoSuchDocument(NotFound) = "no_such_document",
    /// The app catalogue is full; remove an app first.
    CatalogueFull(Conflict) = "catalogue_full",
    /// The HTTP request cannot be read as HTTP/1.1 (request line, header fields, framing).
    BadHttp(Malformed) = "bad_http",
    /// The request's head has too many bytes or header fields.
    HeadTooLarge(HeadersTooLarge) = "head_too_large",
    /// The request's body cannot be read whole, or does not match its `Content-Length`.
    BodyUnreadable(Malformed) = "body_unreadable",
    /// The request's URL cannot be read.
    BadUrl(Malformed) = "bad_url",
    /// The request came too slowly or not in time; it may be sent again.
    RequestTooSlow(Timeout) = "request_too_slow",
    /// Too many connections from one address or network at once.
    TooManyConnections(RateLimited) = "too_many_connections",
    /// Too many of one client's requests are being answered at once.
    TooManyRequests(RateLimited) = "too_many_requests",
    /// The house is at its capacity (connections, bodies, answers) now; try again in a moment.
    HouseBusy(Unavailable) = "house_busy",
    /// The house could not load its Public Suffix List; try again later.
    PslUnavailable(Unavailable) = "psl_unavailable",
    /// A signature self-test's body is not a list of cases.
    BadSelftest(Malformed) = "bad_selftest",
    /// A signature self-test asks more cases than it may.
    TooManyCases(TooLarge) = "too_many_cases",
    /// An input to a browser client function is not well formed (the reason names it).
    BadInput(Malformed) = "bad_input",
    /// An agent profile (the browser's saved agents and pins) is not well formed.
    BadProfile(Malformed) = "bad_profile",
    /// An agent's key set is not well formed, or its public keys are not its secrets'.
    BadKeySet(Malformed) = "bad_key_set",
    /// No cryptographic randomness is available here.
    NoRandomness(Unavailable) = "no_randomness",
    /// A recipient asks more proof of work than this client mints (send it with `nyx5`).
    PowTooHard(PaymentRequired) = "pow_too_hard",
    /// No proof of work was found within the search's bounds; try again.
    PowNotFound(Unavailable) = "pow_not_found",
    /// A recipient's card publishes no encryption key, so nothing can be sealed for it.
    NoEncryptionKey(Forbidden) = "no_encryption_key",
    /// A message was given where a Libro operation goes (they are sent with `libro_op`).
    LibroOpAsMessage(Malformed) = "libro_op_as_message",
    // The same rows as other sections' branches hold (same cause, same name and kind): the
    // merge keeps one of each.
    // ---- end edges ----
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique, snake_case, and never a kind's own name with another kind (a client
    /// reading `not_found` must not get a 403).
    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Refusal::ALL {
            let name = r.name();
            assert!(seen.insert(name), "{name} twice");
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
            assert!(!r.meaning().is_empty(), "{name} says nothing");
            if let Some(k) = ErrorKind::ALL.iter().find(|k| k.slug() == name) {
                assert_eq!(*k, r.kind(), "{name} is a kind's name with another kind");
            }
            assert_eq!(Refusal::from_name(name), Some(*r));
        }
    }

    /// The names are cut out of one string at two-byte ends: each is the one its row writes.
    #[test]
    fn each_name_is_cut_out_as_its_row_writes_it() {
        assert_eq!(Refusal::ALL.len(), WRITTEN.len());
        for (r, written) in Refusal::ALL.iter().zip(WRITTEN) {
            assert_eq!(r.name(), *written);
        }
        assert_eq!(NAMES.len(), WRITTEN.iter().map(|n| n.len()).sum::<usize>());
    }

    #[test]
    fn a_named_refusal_goes_on_the_wire_by_name() {
        let e = Refusal::BadToken.because("no token");
        assert_eq!(e.code(), 401);
        assert_eq!(e.name(), "bad_token");
        assert_eq!(e.refusal(), Some(Refusal::BadToken));
        assert_eq!(
            e.to_wire().canonical_string(),
            r#"{"code":401,"error":"bad_token","ok":false,"reason":"no token"}"#
        );
        assert_eq!(e.to_string(), "401 (bad_token): no token");
    }
}
