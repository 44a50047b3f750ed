//! Receiving one real email for one local recipient: [`Email::receive_email`]. The Worker's
//! `email` event, `POST /email/in` and `nyx5 email-in` all come here.
//!
//! Order: size (413, before anything is parsed), recipient (404 unknown, 421 another domain),
//! parse (400 when it is not a message at all), who it is from ([`standing`]: the From domain only
//! when a trusted receiver says DMARC passed for it), already held (a duplicate when the same
//! message holds the id, whatever else holds now; 409 when something else does), blocklist (403,
//! on anything the email claims), the recipient's policy (an `open` mailbox takes email from
//! anyone, any other policy only from authenticated senders on its allowlist: 403), the rate
//! (429; per authenticated From site, else one bucket for all unauthenticated mail to the
//! mailbox), the mailbox's quota (429, temporary: the MTA keeps the mail queued), then one batch:
//! the rate count (guarded by the `rate_cap` CHECK) and the unsigned envelope, which carries its
//! mailbox's tally on (guarded by the `mailbox_quota` CHECK). A recipient with a webhook gets the new envelope pushed, as for signed mail.

use nyx5_proto::card::AgentCard;
use nyx5_proto::{Address, Error, ErrorKind, Refusal, Value};

use super::Email;
use super::GATEWAY_LOCAL;
use crate::attachments::email_owner;
use crate::ports::{Db, Net, PortError};
use crate::{port_error, store};
use nyx5_rules::email::parse::{self, Arrival, Parsed};
use nyx5_rules::policy::Policy;

/// What happened to an email that was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmailOutcome {
    /// Now in the mailbox under this envelope id.
    Accepted { id: String },
    /// The mailbox held it already (a redelivery): nothing changed.
    Duplicate { id: String },
}

impl EmailOutcome {
    pub fn id(&self) -> &str {
        match self {
            EmailOutcome::Accepted { id } | EmailOutcome::Duplicate { id } => id,
        }
    }
}

/// Who an email is from, as far as the house can tell, and what that means for lists and rates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// The From domain a trusted receiver's DMARC pass vouches for; None: unauthenticated.
    pub authenticated_domain: Option<String>,
    /// What the block list is matched against: every address the email claims (From, the SMTP
    /// envelope sender), their domains and the domains' parents down to their sites (a block of
    /// `evil.example` holds `x.evil.example` too). Blocking on a claim only ever refuses more.
    pub claimed: Vec<String>,
    /// What the allow list is matched against: the From address and its domain when
    /// authenticated, else nothing (a From anyone can write exempts no one).
    pub authenticated: Vec<String>,
    /// The rate window it counts in is `email:<local>` followed by this: `:domain:<site of the
    /// authenticated domain>` (every subdomain of one site shares it), or `:unverified`, shared by
    /// all unauthenticated mail to the mailbox, since every other name for the sender (From, the
    /// SMTP sender) is the sender's free choice.
    pub bucket_suffix: String,
}

/// The prefix of every email rate window (see [`Standing::bucket_suffix`]).
const BUCKET_PREFIX: &str = "email:";

impl Standing {
    /// The rate window this email counts in for mailbox `local`.
    pub fn bucket(&self, local: &str) -> String {
        format!("{BUCKET_PREFIX}{local}{}", self.bucket_suffix)
    }
}

/// Decides an email's [`Standing`] for mailbox `local`. Pure.
pub fn standing(parsed: &Parsed, envelope_from: Option<&str>, trusted: &[String]) -> Standing {
    let authenticated_domain = parsed.authenticated_domain(trusted);
    let from = parsed.from.as_ref().and_then(|m| m.address.clone());
    let claimed = entries(from.iter().cloned().chain(envelope_from.and_then(parse::mail_address)), true);
    let authenticated = match &authenticated_domain {
        Some(_) => entries(from, false),
        None => Vec::new(),
    };
    let bucket_suffix = match &authenticated_domain {
        Some(domain) => format!(":domain:{}", crate::site::site(domain)),
        None => ":unverified".to_owned(),
    };
    Standing { authenticated_domain, claimed, authenticated, bucket_suffix }
}

/// The list entries addresses match: each address and its domain, once; with `parents`, the
/// domain's parents down to its site as well (what a block list matches).
fn entries(addresses: impl IntoIterator<Item = String>, parents: bool) -> Vec<String> {
    let mut list: Vec<String> = Vec::new();
    for a in addresses {
        let domain = a.rsplit_once('@').map(|(_, d)| d.to_owned());
        let domains: Vec<String> = match &domain {
            Some(d) if parents => crate::site::lineage(d).into_iter().map(str::to_owned).collect(),
            Some(d) => vec![d.clone()],
            None => Vec::new(),
        };
        for e in std::iter::once(a).chain(domains) {
            if !list.contains(&e) {
                list.push(e);
            }
        }
    }
    list
}

fn json_list(entries: &[String]) -> String {
    Value::Array(entries.iter().map(|e| e.as_str().into()).collect()).canonical_string()
}

impl<'h, D: Db, N: Net> Email<'h, D, N> {
    /// The house's gateway address, `email@<domain>`: the `from` of every email envelope.
    pub fn email_gateway(&self) -> Result<Address, Error> {
        Address::new(GATEWAY_LOCAL, &self.config.domain)
    }

    /// Seals each of an email's attachments (the first [`crate::attachments::MAX_EMAIL_FILES`])
    /// under a key of its own and keeps it for the recipient `to` alone (docs/SPEC.md §8e), under
    /// an owner apart from `to`'s own files ([`email_owner`]): what the envelope's content says of
    /// them, and the ids kept (to remove when the email does not land). A house without a store,
    /// a recipient whose email files are full, or a store that fails keeps none of them: they
    /// stay described in the extension alone.
    async fn keep_files(&self, parsed: &Parsed, to: &Address) -> (Vec<Value>, Vec<String>) {
        use nyx5_proto::crypto::{hex, sha256};
        let store = crate::attachments::Attachments { core: self.core };
        let owner = email_owner(to);
        let (mut files, mut kept) = (Vec::new(), Vec::new());
        let many = crate::attachments::MAX_EMAIL_FILES;
        for a in parsed.attachments.iter().filter(|a| !a.contents.is_empty()).take(many) {
            let mut rng = |b: &mut [u8]| self.ground.rng.fill(b);
            let sealed = nyx5_proto::seal::seal_file(&a.contents, &mut rng);
            let d = crate::attachments::Description {
                bytes: i64::try_from(sealed.sealed.len()).unwrap_or(i64::MAX),
                sha256: hex(&sha256(&sealed.sealed)),
                readers: vec![to.clone()],
                expires: None,
            };
            let Ok(made) = store.create(&owner, &d).await else { break };
            kept.push(made.id.clone());
            let part = usize::try_from(crate::attachments::PART_BYTES).unwrap_or(usize::MAX);
            let mut whole = true;
            for (n, chunk) in sealed.sealed.chunks(part).enumerate() {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                whole &= store.store_part(&owner, &made.id, n, chunk.to_vec()).await.is_ok();
            }
            if !whole {
                let _ = store.remove_owned(&owner, &made.id).await;
                continue;
            }
            let name = nyx5_client::attach::safe_name(a.name.as_deref().unwrap_or_default());
            files.push(
                nyx5_client::attach::Described {
                    url: made.url,
                    name,
                    media: a.media.clone(),
                    bytes: a.contents.len() as u64,
                    sha256: a.sha256.clone(),
                    key: sealed.key,
                    iv: sealed.iv,
                }
                .to_value(),
            );
        }
        (files, kept)
    }

    /// Receives one raw RFC 5322 message for `rcpt_to` (a local address), sent by
    /// `envelope_from` (the SMTP MAIL FROM; may be empty). `receivers` are the authserv-ids of
    /// whoever received this very message for the caller (the Worker's `email` event: Cloudflare's);
    /// they are trusted for this message besides `Config::email_authserv_ids`. Refusals are
    /// errors with their code and a reason fit for the sending MTA.
    pub async fn receive_email(
        &self,
        raw: &[u8],
        envelope_from: &str,
        rcpt_to: &str,
        receivers: &[&str],
    ) -> Result<EmailOutcome, Error> {
        if !self.config.email_enabled {
            return Err(Refusal::EmailBridgeOff.because("this house does not take email (its email bridge is off)"));
        }
        let max = self.config.email_max_bytes.min(self.config.max_bytes);
        if raw.len() > max {
            return Err(Refusal::EmailTooLarge
                .because(format!("message of {} bytes exceeds this house's limit of {max}", raw.len())));
        }
        // Subaddresses: `name+tag@domain` is `name@domain` (a Nyx5 local part has no `+`).
        let rcpt = rcpt_to.trim();
        let rcpt = match rcpt.rsplit_once('@') {
            Some((local, domain)) => match local.split_once('+') {
                Some((base, _)) => format!("{base}@{domain}"),
                None => rcpt.to_owned(),
            },
            None => rcpt.to_owned(),
        };
        let to = Address::parse_lenient(&rcpt)
            .map_err(|_| Refusal::UnknownAgent.because(format!("no such recipient {:?}", clip(rcpt_to))))?;
        if to.domain() != self.config.domain {
            return Err(Refusal::NotAtThisHouse.because(format!("{to} is not at this house")));
        }
        if to.local() == GATEWAY_LOCAL || crate::auth::RESERVED.contains(&to.local()) {
            return Err(Refusal::TakesNoEmail.because(format!("{to} takes no email")));
        }
        let parsed = parse::parse(raw, max / 2)?;
        let envelope_from = Some(envelope_from.trim()).filter(|s| !s.is_empty() && *s != "<>");
        let sender = parsed.sender(envelope_from);
        let trusted: Vec<String> = self
            .config
            .email_authserv_ids
            .iter()
            .cloned()
            .chain(receivers.iter().map(|r| r.to_ascii_lowercase()))
            .collect();
        let standing = standing(&parsed, envelope_from, &trusted);
        let id = parse::envelope_id(&self.config.domain, &parsed, standing.authenticated_domain.as_deref());
        let gateway = self.email_gateway()?;
        let now = self.now();
        let window = now.millis() / 60_000;
        // The signed path's one lookup, for this one recipient.
        let lookup = store::mailbox::Lookup {
            locals: &json_list(&[to.local().to_owned()]),
            envelope_id: &id,
            blocks: &json_list(&standing.claimed),
            allows: &json_list(&standing.authenticated),
            vouchers: "[]",
            bucket_prefix: BUCKET_PREFIX,
            bucket_suffix: &standing.bucket_suffix,
            window,
        };
        let facts = store::mailbox::inbound_facts(self.db, &lookup)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Refusal::UnknownAgent.because(format!("no agent {to}")))?;
        // The id binds the message's content: held by an email, it is this very message again.
        match facts.text("holder") {
            Some(holder) if holder == gateway.as_str() => return Ok(EmailOutcome::Duplicate { id }),
            Some(_) => {
                return Err(Refusal::EnvelopeIdTaken.because(format!("envelope id {id} is taken by another message")));
            }
            None => {}
        }
        let who = sender.as_deref().unwrap_or("this sender");
        if facts.int("blocked").unwrap_or(0) != 0 {
            return Err(Refusal::SenderBlocked.because(format!("{who} is blocked by the recipient")));
        }
        let allowed = facts.int("allowed").unwrap_or(0) != 0;
        let card = AgentCard::parse(facts.text("card").unwrap_or_default().as_bytes())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("stored card: {e}")))?;
        if card.valid_until().is_some_and(|until| now >= until) {
            return Err(Refusal::RecipientCardExpired.because(format!("the card of {to} has expired")));
        }
        if Policy::of(card.inbox()) != Policy::Open && !allowed {
            return Err(Refusal::NotOnAllowlist.because(match &standing.authenticated_domain {
                Some(_) => format!("{to} takes email only from senders on its allowlist"),
                None => format!(
                    "{to} takes email only from senders on its allowlist, and this sender is not authenticated \
                     (no DMARC pass from a receiver this house trusts)"
                ),
            }));
        }
        let cap = self.config.email_per_sender_per_minute;
        let authenticated_domain = standing.authenticated_domain.as_deref();
        if !allowed && facts.int("rate_count").unwrap_or(0) >= cap {
            return Err(rate_limited(authenticated_domain));
        }
        let arrival = Arrival { gateway: &gateway, to: &to, envelope_from, authenticated_domain, now };
        // The attachments sealed and kept for the recipient, where the house keeps any; removed
        // again when the email does not land (refused, a duplicate, a failure).
        // A mailbox that cannot take it, or an email too large, is refused before any file is
        // sealed and kept (a sender's retries would repeat that work): checked with the room the
        // files' descriptions will take.
        {
            let bare = parsed.envelope(id.clone(), &arrival)?;
            bare.check_size(max)?;
            let files = parsed.attachments.iter().filter(|a| !a.contents.is_empty()).count();
            let room = files.min(crate::attachments::MAX_EMAIL_FILES) * 600;
            let size = i64::try_from(bare.canonical_str().len() + room).unwrap_or(i64::MAX);
            let held = crate::mailbox::Held::of_facts(&facts);
            if let Some(full) = crate::mailbox::quota_full(to.local(), held, size, self.config.quota()) {
                return Err(full);
            }
        }
        let (files, kept) = self.keep_files(&parsed, &to).await;
        let outcome: Result<EmailOutcome, Error> = async {
            let env = parsed.envelope_with(id.clone(), &arrival, files)?;
            env.check_size(max)?;
            let quota = self.config.quota();
            let held = crate::mailbox::Held::of_facts(&facts);
            let size = i64::try_from(env.canonical_str().len()).unwrap_or(i64::MAX);
            if let Some(full) = crate::mailbox::quota_full(to.local(), held, size, quota) {
                return Err(full);
            }
            let mut stmts = Vec::with_capacity(3);
            if !allowed {
                stmts.push(store::agents::count_in_window(&standing.bucket(to.local()), window, cap));
            }
            // The same mailbox row as signed mail; what marks it unsigned is the envelope itself.
            stmts.push(store::mailbox::insert(
                to.local(),
                &id,
                gateway.as_str(),
                env.canonical_str(),
                now.millis(),
                quota,
            ));
            let changes = match crate::live::batch(self.db, self.post.bell, stmts).await {
                Ok(c) => c,
                Err(PortError::Constraint { name }) if name == store::constraint::RATE_CAP => {
                    return Err(rate_limited(authenticated_domain));
                }
                // Filled meanwhile: as full as if it had been when read.
                Err(PortError::Constraint { name }) if name == store::constraint::MAILBOX_QUOTA => {
                    let full = crate::mailbox::Held { envelopes: quota.max_envelopes, bytes: 0 };
                    return Err(crate::mailbox::quota_full(to.local(), full, size, quota)
                        .unwrap_or_else(|| Refusal::MailboxFull.because("the mailbox is full, try again later")));
                }
                Err(e) => return Err(port_error(e)),
            };
            if changes.last() != Some(&1) {
                return Ok(EmailOutcome::Duplicate { id: id.clone() });
            }
            // Pushed like any newly accepted envelope (docs/SPEC.md §9d); failures are ignored.
            if let Some(hook) = facts.text("webhook") {
                self.mailbox().push(hook, &to, &env);
            }
            Ok(EmailOutcome::Accepted { id: id.clone() })
        }
        .await;
        if !matches!(outcome, Ok(EmailOutcome::Accepted { .. })) {
            let store = crate::attachments::Attachments { core: self.core };
            for made in &kept {
                let _ = store.remove_owned(&email_owner(&to), made).await;
            }
        }
        outcome
    }
}

fn rate_limited(authenticated_domain: Option<&str>) -> Error {
    let who = match authenticated_domain {
        Some(domain) => format!("from {domain}"),
        None => "from unauthenticated senders".to_owned(),
    };
    Refusal::TooManyEmails.because(format!("too many emails {who} to this mailbox this minute, try again shortly"))
}

fn clip(text: &str) -> String {
    parse::clip_chars(text, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block list matches the domain's parents down to its site; an allow list only the
    /// address and its own domain (a subdomain is another party's to vouch for).
    #[test]
    fn block_entries_reach_the_site_and_allow_entries_do_not() {
        let sender = || ["m@a.r1.evil.example".to_owned()];
        assert_eq!(
            entries(sender(), true),
            ["m@a.r1.evil.example", "a.r1.evil.example", "r1.evil.example", "evil.example"]
        );
        assert_eq!(entries(sender(), false), ["m@a.r1.evil.example", "a.r1.evil.example"]);
        // Each entry once, whatever claims it twice.
        let twice = ["m@x.example".to_owned(), "n@x.example".to_owned(), "m@x.example".to_owned()];
        assert_eq!(entries(twice, true), ["m@x.example", "x.example", "n@x.example"]);
    }
}
