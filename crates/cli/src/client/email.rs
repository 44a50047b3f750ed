//! The email bridge from the command line. `nyx5 email` asks the agent's house to email a person
//! (`POST /email/out`); `nyx5 email-in` hands one raw email on standard input to a house's
//! `POST /email/in` with the operator's token, so an MTA (a Postfix pipe transport, say) can feed
//! a `nyx5 serve` house.

use nyx5_proto::json::obj;
use nyx5_proto::{Value, json::field};

use super::http::{Http, house_url, read_object, send};
use crate::error::Failure;

/// The largest message read from standard input: what `nyx5 serve` accepts in one request. The
/// house refuses anything over its own `max_bytes` with a 413 that says so.
pub(crate) const MAX_EMAIL_BYTES: usize = 2 * nyx5_proto::limits::MAX_ENVELOPE_BYTES;

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// POST the message to `<house>/email/in?to=…&from=…`; answers `{id, to, duplicate}`.
pub(crate) fn email_in(house: &str, token: &str, to: &str, from: Option<&str>, raw: &[u8]) -> Result<Value, Failure> {
    if raw.len() > MAX_EMAIL_BYTES {
        return Err(Failure::refusal(
            nyx5_proto::Refusal::EmailTooLarge,
            format!("the message is over {MAX_EMAIL_BYTES} bytes"),
        ));
    }
    let base = house_url(house)?;
    let mut url = format!("{base}/email/in?to={}", encode(to.trim()));
    if let Some(from) = from.filter(|f| !f.trim().is_empty()) {
        url.push_str(&format!("&from={}", encode(from.trim())));
    }
    let auth = format!("Bearer {token}");
    let what = "delivering the email";
    let headers = [("authorization", auth.as_str()), ("content-type", "message/rfc822")];
    let (status, answer) = send(&Http::default(), "POST", &url, &headers, raw, what)?;
    let o = read_object(status, &answer, what)?;
    let id = field::opt_str(&o, "id").ok().flatten().unwrap_or_default().to_owned();
    let duplicate = o.get("duplicate") == Some(&Value::Bool(true));
    Ok(Value::Object(obj([
        ("id", id.into()),
        ("to", to.trim().to_ascii_lowercase().into()),
        ("duplicate", Value::Bool(duplicate)),
    ])))
}

/// `<sysexits.h>` codes an MTA's pipe understands: 67 no such user, 69 refused for good, 75 try
/// again later (a rate limit, an unreachable house, a wrong token or option: the mail waits
/// rather than bounces while the operator fixes it).
pub(crate) const EX_NOUSER: u8 = 67;
pub(crate) const EX_UNAVAILABLE: u8 = 69;
pub(crate) const EX_TEMPFAIL: u8 = 75;

/// The exit code `email-in --sysexits` gives a failure.
pub(crate) fn sysexit(f: &Failure) -> u8 {
    match f.status() {
        Some(404) => EX_NOUSER,
        Some(401 | 408 | 429) => EX_TEMPFAIL,
        Some(s) if (400..500).contains(&s) => EX_UNAVAILABLE,
        _ => EX_TEMPFAIL,
    }
}

pub(crate) fn email_in_human(v: &Value) -> String {
    let o = v.as_object();
    let text = |name: &str| o.and_then(|o| o.get(name)).and_then(Value::as_str).unwrap_or_default().to_owned();
    let dup = o.and_then(|o| o.get("duplicate")) == Some(&Value::Bool(true));
    let what = if dup { "already in the mailbox of" } else { "delivered to" };
    format!("{what} {} as {}\n", super::output::safe(&text("to")), text("id"))
}

/// POST /email/out `{to, subject?, body, in_reply_to?}` as the acting agent.
pub(crate) fn email(
    ctx: &super::Ctx,
    to: &str,
    subject: Option<&str>,
    body: &str,
    in_reply_to: Option<&str>,
) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let mut req = obj([("to", to.trim().into()), ("body", body.into())]);
    if let Some(s) = subject {
        req.insert("subject".into(), s.into());
    }
    if let Some(id) = in_reply_to {
        req.insert("in_reply_to".into(), id.into());
    }
    let (_, answer) = ctx.call(&me, "POST", "/email/out", Some(&Value::Object(req)), "sending email").map_err(|f| {
        if f.status() == Some(404) && in_reply_to.is_none() {
            f.hint("this house may not run the email bridge; reach agents with `nyx5 send`")
        } else {
            f
        }
    })?;
    Ok(Value::Object(answer))
}

pub(crate) fn email_human(v: &Value) -> String {
    let o = v.as_object();
    let text = |name: &str| o.and_then(|o| o.get(name)).and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut out = format!("email {} queued ({})\n", text("id"), text("state"));
    let reason = text("reason");
    if !reason.is_empty() {
        out.push_str(&format!("{}\n", super::output::safe(&reason)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode("ana@h.test"), "ana%40h.test");
        assert_eq!(encode("a b&c=d"), "a%20b%26c%3Dd");
    }
}
