//! Receiving one real email for one local recipient: [`House::receive_email`]. The Worker's
//! `email` event, `POST /email/in` and `nyx5 email-in` all come here.
//!
//! Order: size (413, before anything is parsed), recipient (404 unknown, 421 another domain),
//! parse (400 when it is not a message at all), already held (a duplicate, whatever else holds
//! now), blocklist (403), the recipient's policy (an `open` mailbox takes email from anyone, any
//! other policy only from allowlisted senders: 403), the per-sender rate (429), then one batch:
//! the rate count (guarded by the `rate_cap` CHECK) and the unsigned envelope. A recipient with a
//! webhook gets the new envelope pushed, as for signed mail.

use nyx5_proto::card::AgentCard;
use nyx5_proto::{Address, Error, ErrorKind, Value};

use super::GATEWAY_LOCAL;
use super::parse::{self, Arrival};
use crate::policy::Policy;
use crate::ports::{Db, Net, PortError};
use crate::{House, port_error, store};

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

/// The rate window of emails from `sender` to `local`.
fn bucket(local: &str, sender: &str) -> String {
    format!("email:{local}:{sender}")
}

/// The list entries an email's senders match: each address and its domain.
fn entries(senders: &[String]) -> String {
    let mut list: Vec<Value> = Vec::new();
    for s in senders {
        let domain = s.rsplit_once('@').map(|(_, d)| d.to_owned());
        for e in std::iter::once(s.clone()).chain(domain) {
            if !list.iter().any(|v| v.as_str() == Some(e.as_str())) {
                list.push(e.into());
            }
        }
    }
    Value::Array(list).canonical_string()
}

impl<D: Db, N: Net> House<D, N> {
    /// The house's gateway address, `email@<domain>`: the `from` of every email envelope.
    pub fn email_gateway(&self) -> Result<Address, Error> {
        Address::new(GATEWAY_LOCAL, &self.config.domain)
    }

    /// Receives one raw RFC 5322 message for `rcpt_to` (a local address), sent by
    /// `envelope_from` (the SMTP MAIL FROM; may be empty). Refusals are errors with their code
    /// and a reason fit for the sending MTA.
    pub async fn receive_email(&self, raw: &[u8], envelope_from: &str, rcpt_to: &str) -> Result<EmailOutcome, Error> {
        if !self.config.email_enabled {
            return Err(Error::forbidden("this house does not take email (its email bridge is off)"));
        }
        let max = self.config.email_max_bytes.min(self.config.max_bytes);
        if raw.len() > max {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!("message of {} bytes exceeds this house's limit of {max}", raw.len()),
            ));
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
            .map_err(|_| Error::new(ErrorKind::NotFound, format!("no such recipient {:?}", clip(rcpt_to))))?;
        if to.domain() != self.config.domain {
            return Err(Error::new(ErrorKind::Misdirected, format!("{to} is not at this house")));
        }
        if to.local() == GATEWAY_LOCAL || crate::RESERVED.contains(&to.local()) {
            return Err(Error::new(ErrorKind::NotFound, format!("{to} takes no email")));
        }
        let parsed = parse::parse(raw, max / 2)?;
        let envelope_from = Some(envelope_from.trim()).filter(|s| !s.is_empty() && *s != "<>");
        let sender = parsed.sender(envelope_from);
        let id = parse::envelope_id(&self.config.domain, parsed.message_id.as_deref(), raw);
        let mut senders: Vec<String> = sender.iter().cloned().collect();
        if let Some(e) = envelope_from.and_then(parse::mail_address)
            && !senders.contains(&e)
        {
            senders.push(e);
        }
        let now = self.now();
        let window = now.millis() / 60_000;
        let rate_key = bucket(to.local(), sender.as_deref().unwrap_or("unknown"));
        let facts = store::email::facts(&self.db, to.local(), &id, &entries(&senders), &rate_key, window)
            .await?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no agent {to}")))?;
        if facts.text("holder").is_some() {
            return Ok(EmailOutcome::Duplicate { id });
        }
        let who = sender.as_deref().unwrap_or("this sender");
        if facts.int("blocked").unwrap_or(0) != 0 {
            return Err(Error::forbidden(format!("{who} is blocked by the recipient")));
        }
        let allowed = facts.int("allowed").unwrap_or(0) != 0;
        let card = AgentCard::parse(facts.text("card").unwrap_or_default().as_bytes())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("stored card: {e}")))?;
        if card.valid_until().is_some_and(|until| now >= until) {
            return Err(Error::new(ErrorKind::NotFound, format!("the card of {to} has expired")));
        }
        if Policy::of(card.inbox()) != Policy::Open && !allowed {
            return Err(Error::forbidden(format!("{to} takes email only from senders on its allowlist")));
        }
        let cap = self.config.email_per_sender_per_minute;
        if !allowed && facts.int("rate_count").unwrap_or(0) >= cap {
            return Err(rate_limited(who));
        }
        let gateway = self.email_gateway()?;
        let arrival = Arrival { gateway: &gateway, to: &to, envelope_from, now };
        let env = parsed.envelope(id.clone(), &arrival)?;
        env.check_size(max)?;
        let mut stmts = Vec::with_capacity(2);
        if !allowed {
            stmts.push(store::agents::count_in_window(&rate_key, window, cap));
        }
        // The same mailbox row as signed mail; what marks it unsigned is the envelope itself.
        stmts.push(store::mailbox::insert(to.local(), &id, gateway.as_str(), env.canonical_str(), now.millis()));
        let changes = match self.db.batch(stmts).await {
            Ok(c) => c,
            Err(PortError::Constraint { name }) if name == store::constraint::RATE_CAP => {
                return Err(rate_limited(who));
            }
            Err(e) => return Err(port_error(e)),
        };
        if changes.last() != Some(&1) {
            return Ok(EmailOutcome::Duplicate { id });
        }
        // Pushed like any newly accepted envelope (docs/SPEC.md §9d); failures are ignored.
        if let Some(hook) = facts.text("webhook") {
            self.push(hook, &to, &env).await;
        }
        Ok(EmailOutcome::Accepted { id })
    }
}

fn rate_limited(who: &str) -> Error {
    Error::new(ErrorKind::RateLimited, format!("too many emails from {who} this minute, try again shortly"))
}

fn clip(text: &str) -> String {
    parse::clip_chars(text, 100)
}
