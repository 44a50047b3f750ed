//! The email bridge's outbound half: an agent's email, queued by `POST /email/out` in
//! `email_out`, sent by the queue tick through the provider (Resend over HTTP, through `Net`).
//!
//! Decide, then do: [`provider_request`] builds the provider call and [`read_answer`] reads what
//! it said (both pure); [`Email::send_emails`] leases each due email, calls, and writes the
//! outcome in one statement. 2xx is sent; 408, 429, 5xx and transport failures are retried with
//! the delivery backoff until the give-up time; any other answer fails the email with its reason.
//! Without a provider nothing is sent and every email stays `pending`.

use nyx5_proto::json::obj;
use nyx5_proto::{Error, Timestamp, Value};
use nyx5_rules::queue::EmailState;

use super::Email;
use super::MAX_PROVIDER_ANSWER_BYTES;
use crate::config::Config;
use crate::ports::{Db, Net, OutRequest, Row};
use crate::queue::LEASE_MS;
use crate::{port_error, store};

/// One email to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutEmail {
    pub id: String,
    /// The agent's address: the Reply-To, so the human's answer comes back through inbound.
    pub sender: String,
    pub recipient: String,
    pub subject: String,
    pub body: String,
    /// `<message-id>` of the email answered.
    pub in_reply_to: Option<String>,
    /// `<id> <id> …`.
    pub refs: Option<String>,
}

impl OutEmail {
    fn from_row(r: &Row) -> Option<OutEmail> {
        Some(OutEmail {
            id: r.text("id")?.to_owned(),
            sender: r.text("sender")?.to_owned(),
            recipient: r.text("recipient")?.to_owned(),
            subject: r.text("subject")?.to_owned(),
            body: r.text("body")?.to_owned(),
            in_reply_to: r.text("in_reply_to").map(str::to_owned),
            refs: r.text("refs").map(str::to_owned),
        })
    }
}

/// What the provider said about one email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Accepted, with the provider's id for it when it gave one.
    Sent(Option<String>),
    /// Try again later.
    Temporary(String),
    /// Refused for good: the email fails with this code and reason.
    Permanent(u16, String),
}

/// Whether this house has an outbound provider (a key and a sender address).
pub fn has_provider(config: &Config) -> bool {
    config.resend_key.is_some() && config.email_sender.is_some()
}

/// The `From` the provider is asked for: the configured sender as it is when it already names a
/// mailbox (`Name <addr>`), else the agent's address as the display name of the sender.
fn from_header(sender: &str, agent: &str) -> String {
    if sender.contains('<') { sender.to_owned() } else { format!("\"{agent}\" <{sender}>") }
}

/// The provider call for `email` (Resend: `POST /emails` with a bearer key; `Idempotency-Key` is
/// the email's id, so a retry after a lost answer does not send twice). `None` without provider.
pub fn provider_request(config: &Config, email: &OutEmail) -> Option<OutRequest> {
    let (key, sender) = (config.resend_key.as_deref()?, config.email_sender.as_deref()?);
    let mut headers = nyx5_proto::Object::new();
    if let Some(id) = &email.in_reply_to {
        headers.insert("In-Reply-To".into(), id.as_str().into());
        headers.insert("References".into(), email.refs.as_deref().unwrap_or(id).into());
    }
    let mut body = obj([
        ("from", from_header(sender, &email.sender).into()),
        ("to", Value::Array(vec![email.recipient.as_str().into()])),
        ("subject", email.subject.as_str().into()),
        ("text", email.body.as_str().into()),
        ("reply_to", email.sender.as_str().into()),
    ]);
    if !headers.is_empty() {
        body.insert("headers".into(), Value::Object(headers));
    }
    Some(OutRequest {
        method: "POST".into(),
        url: config.email_provider_url.clone(),
        headers: vec![
            ("authorization".into(), format!("Bearer {key}")),
            ("content-type".into(), "application/json".into()),
            ("idempotency-key".into(), email.id.clone()),
        ],
        body: Value::Object(body).canonical(),
    })
}

/// Reads the provider's answer: 2xx sent (with `id` when the body names one); 408, 429, 5xx and
/// anything not 2xx–4xx temporary; other 4xx permanent, with the provider's `message` as reason.
pub fn read_answer(status: u16, body: &[u8]) -> Sent {
    let parsed = Value::parse(body, MAX_PROVIDER_ANSWER_BYTES).ok();
    let member = |name: &str| {
        parsed.as_ref().and_then(Value::as_object).and_then(|o| o.get(name)).and_then(Value::as_str).map(|s| {
            nyx5_rules::email::parse::header_text(s)
                .map(|t| nyx5_rules::email::parse::clip_chars(&t, crate::queue::MAX_REASON_LEN))
        })
    };
    let reason = member("message").flatten().unwrap_or_else(|| format!("HTTP {status}"));
    match status {
        200..=299 => Sent::Sent(member("id").flatten()),
        408 | 429 => Sent::Temporary(format!("provider {status}: {reason}")),
        400..=499 => Sent::Permanent(status, format!("provider refused it: {reason}")),
        _ => Sent::Temporary(format!("provider {status}: {reason}")),
    }
}

impl<'h, D: Db, N: Net> Email<'h, D, N> {
    /// Sends the due emails (at most `tick_batch`), each under a lease. Without a provider it
    /// does nothing: emails wait, `pending`, for one to be configured.
    pub async fn send_emails(&self, now: Timestamp) -> Result<usize, Error> {
        if !has_provider(self.config) {
            return Ok(0);
        }
        let limit = self.config.tick_batch.clamp(1, crate::queue::MAX_TICK_BATCH);
        let rows = store::email::due_out(self.db, now.millis(), limit).await?;
        let mut attempted = 0;
        for r in &rows {
            let Some(email) = OutEmail::from_row(r) else { continue };
            let lease = now.millis().saturating_add(LEASE_MS);
            let taken = self
                .db
                .batch(vec![store::email::lease_out(&email.id, now.millis(), lease)])
                .await
                .map_err(port_error)?;
            if taken.first() != Some(&1) {
                continue;
            }
            let deadline = r.int("deadline").unwrap_or(i64::MAX);
            let stmt = if now.millis() >= deadline {
                let hours = self.config.retry.give_up_after_ms / 3_600_000;
                let last = r.text("last_error").unwrap_or("no attempt succeeded");
                let why = format!("not sent within {hours} h: {last}");
                store::email::finish_out(&email.id, lease, EmailState::Failed, Some(&why), None, now.millis())
            } else {
                let Some(request) = provider_request(self.config, &email) else { continue };
                attempted += 1;
                let sent = match self.net.send(request).await {
                    Ok(answer) => read_answer(answer.status, &answer.body),
                    Err(e) => Sent::Temporary(format!("provider unreachable: {e}")),
                };
                match sent {
                    Sent::Sent(pid) => {
                        store::email::finish_out(&email.id, lease, EmailState::Sent, None, pid.as_deref(), now.millis())
                    }
                    Sent::Permanent(code, reason) => {
                        let why = format!("{code} {reason}");
                        store::email::finish_out(&email.id, lease, EmailState::Failed, Some(&why), None, now.millis())
                    }
                    Sent::Temporary(why) => {
                        let attempts = r.int("attempts").unwrap_or(0).saturating_add(1);
                        let next = now.millis().saturating_add(self.config.retry.backoff_ms(attempts)).min(deadline);
                        store::email::retry_out(&email.id, lease, next, &why)
                    }
                }
            };
            self.db.batch(vec![stmt]).await.map_err(port_error)?;
        }
        Ok(attempted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        assert_eq!(read_answer(200, br#"{"id":"re_1"}"#), Sent::Sent(Some("re_1".into())));
        assert_eq!(read_answer(202, b""), Sent::Sent(None));
        assert!(matches!(read_answer(429, b""), Sent::Temporary(_)));
        assert!(matches!(read_answer(503, b"<html>"), Sent::Temporary(_)));
        assert_eq!(
            read_answer(422, br#"{"message":"Invalid `to` field"}"#),
            Sent::Permanent(422, "provider refused it: Invalid `to` field".into())
        );
    }

    #[test]
    fn a_provider_takes_a_key_and_a_sender() {
        let mut c = Config::new("h.test", "http://h", nyx5_proto::crypto::SigningKey::from_seed([1; 32]), Timestamp(0));
        assert!(!has_provider(&c));
        c.resend_key = Some("re_key".into());
        assert!(!has_provider(&c), "a key without a sender");
        c.resend_key = None;
        c.email_sender = Some("mail@h.test".into());
        assert!(!has_provider(&c), "a sender without a key");
        c.resend_key = Some("re_key".into());
        assert!(has_provider(&c));
    }

    #[test]
    fn from_names_the_agent() {
        assert_eq!(from_header("mail@h.test", "ana@h.test"), "\"ana@h.test\" <mail@h.test>");
        assert_eq!(from_header("Nyx5 <mail@h.test>", "ana@h.test"), "Nyx5 <mail@h.test>");
    }
}
