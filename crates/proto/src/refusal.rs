//! The refusals, by name: the one table of what a house (or a client, or a wrapped server's
//! gate) says when it refuses, each with its wire code and a stable machine name (the `error`
//! member of the wire body). Agents branch on the name; people read the reason beside it; tests
//! match names, never prose. docs/SPEC.md ("Refusals by name") lists the same table, and a test
//! holds the two together.
//!
//! A name is for ever: a refusal whose meaning changes gets a new name. Where a cause has no name
//! of its own yet, an [`Error`] carries its kind's name ([`ErrorKind::slug`]), which is still a
//! name from this table's first column.

use std::borrow::Cow;

use crate::error::{Error, ErrorKind};

/// Declares the table: each row a variant, its kind (and so its wire code), its name and what it
/// means (the doc comment, which `Refusal::meaning` returns for the SPEC's table).
macro_rules! refusals {
    ($( $(#[doc = $doc:literal])+ $variant:ident($kind:ident) = $name:literal, )*) => {
        /// A cause of refusal with a stable name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Refusal {
            $( $(#[doc = $doc])+ $variant, )*
        }

        impl Refusal {
            /// Every refusal, in the table's order.
            pub const ALL: &[Refusal] = &[$(Refusal::$variant),*];

            /// The stable machine name: the wire's `error`.
            pub const fn name(self) -> &'static str {
                match self { $(Refusal::$variant => $name,)* }
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

impl Refusal {
    /// This refusal, with the reason a person reads.
    pub fn because(self, reason: impl Into<Cow<'static, str>>) -> Error {
        Error::named(self, reason)
    }

    /// The refusal of this name, if it is one of the table's.
    pub fn from_name(name: &str) -> Option<Refusal> {
        Refusal::ALL.iter().copied().find(|r| r.name() == name)
    }
}

refusals! {
    // ---- proto: documents, signatures, tokens ----
    /// The JSON is not well formed, or not canonical where it must be.
    BadJson(Malformed) = "bad_json",
    // ---- end proto ----

    // ---- house: auth, registration, cards, mailbox, inbound, outbound ----
    /// The `Authorization` token is missing or cannot be read.
    BadToken(Unauthenticated) = "bad_token",
    // ---- end house ----

    // ---- libro: operations, contracts, mandates, authority, stamps ----
    /// The operation is not one the Libro knows.
    UnknownOperation(Malformed) = "unknown_operation",
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
    /// The recipient's mailbox holds as much as its quota allows; try later.
    MailboxFull(RateLimited) = "mailbox_full",
    /// The recipient blocks the sender.
    SenderBlocked(Forbidden) = "sender_blocked",
    /// The sender is not on the recipient's allowlist; send an intro.
    NotOnAllowlist(Forbidden) = "not_on_allowlist",
    /// The recipient's card has expired.
    RecipientCardExpired(NotFound) = "recipient_card_expired",
    /// A delegation is nested too deep.
    DelegationTooDeep(Forbidden) = "delegation_too_deep",
    /// The recipient asks for a stamp and there is none.
    StampRequired(PaymentRequired) = "stamp_required",
    /// A domain name given is not a valid domain.
    BadDomain(Malformed) = "bad_domain",
    /// No recipient of the envelope is an agent of this house.
    NotAtThisHouse(Misdirected) = "not_at_this_house",
    /// The envelope id is already used, by another sender or for another envelope.
    EnvelopeIdTaken(Conflict) = "envelope_id_taken",
    /// No agent of that name at this house (or at the house asked).
    UnknownAgent(NotFound) = "unknown_agent",
    /// A card fetched is not the one asked for (another address or domain, or not the one its house holds).
    WrongCard(Forbidden) = "wrong_card",
    /// A member of the request body is missing, of the wrong type or out of range; the reason names it.
    BadMember(Malformed) = "bad_member",
    /// A request body or document is over the size limit for it.
    BodyTooLarge(TooLarge) = "body_too_large",
    /// An agent or domain card (or a scope in it) does not parse.
    BadCard(Malformed) = "bad_card",
    /// A signature is made by a key the document (or its signer's card) does not trust.
    UntrustedKey(Forbidden) = "untrusted_key",
    /// A delegated card came without its parent's card.
    ParentCardRequired(Forbidden) = "parent_card_required",
    /// The catalogue does not list this app.
    AppNotListed(NotFound) = "app_not_listed",
    /// The quote is made out to another buyer.
    QuoteNotYours(Forbidden) = "quote_not_yours",
    /// The quote is to be accepted at another house's Libro.
    QuoteWrongHouse(Malformed) = "quote_wrong_house",
    /// A quote is past its `expires`.
    QuoteExpired(Expired) = "quote_expired",
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

    #[test]
    fn a_named_refusal_goes_on_the_wire_by_name() {
        let e = Refusal::BadToken.because("no token");
        assert_eq!(e.code(), 401);
        assert_eq!(e.name, "bad_token");
        assert_eq!(e.refusal(), Some(Refusal::BadToken));
        assert_eq!(
            e.to_wire().canonical_string(),
            r#"{"code":401,"error":"bad_token","ok":false,"reason":"no token"}"#
        );
        assert_eq!(e.to_string(), "401 (bad_token): no token");
    }
}
