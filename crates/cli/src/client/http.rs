//! How the client talks to houses: one blocking HTTP call behind [`Transport`], the agent's
//! signed token (spec §8), and reading answers into JSON objects or failures that say what to
//! do next.

use nyx5_proto::address::uuid_v4;
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::json::{Object, Value, field};
use nyx5_proto::{Address, Timestamp, b64};

use crate::error::Failure;
use crate::sys::OsRng;

/// One blocking HTTP request: `(status, body)` for any answer, `Err` with a one-line reason when
/// no answer came. The binary uses [`Http`]; the trait keeps verbs independent of the client.
pub(crate) trait Transport {
    fn call(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>), String>;
}

/// The binary's HTTP client (`crate::net`: rustls, a deadline, no redirects).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Http;

impl Transport for Http {
    fn call(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        crate::net::request(method, url, headers, body)
    }
}

/// `host[:port]` of a URL, lower case: what tokens are bound to.
pub(crate) fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest.get(..end).unwrap_or(rest).to_ascii_lowercase()
}

/// The path of a URL without its query: what tokens are bound to.
pub(crate) fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').and_then(|i| rest.get(i..)).unwrap_or("/");
    let end = path.find(['?', '#']).unwrap_or(path.len());
    path.get(..end).unwrap_or(path).to_owned()
}

/// Checks and normalizes a house base URL: http(s), no trailing slash, no query.
pub(crate) fn house_url(text: &str) -> Result<String, Failure> {
    let url = text.trim().trim_end_matches('/');
    let ok_scheme = url.starts_with("https://") || url.starts_with("http://");
    let host = host_of(url);
    if !ok_scheme || host.is_empty() || url.contains(['?', '#', ' ']) {
        return Err(Failure::usage(format!(
            "{text:?} is not a house URL; give its base URL, such as https://mail.example.org"
        )));
    }
    Ok(url.to_owned())
}

/// The query of a URL without `?` (empty when there is none): what tokens are bound to.
pub(crate) fn query_of(url: &str) -> &str {
    let end = url.find('#').unwrap_or(url.len());
    let url = url.get(..end).unwrap_or(url);
    url.split_once('?').map_or("", |(_, q)| q)
}

/// `Authorization: Nyx5 <token>.<sig>` for one request to `url` carrying `body` (spec §8).
pub(crate) fn token(
    address: &Address,
    key: &SigningKey,
    method: &str,
    url: &str,
    body: &[u8],
    now: Timestamp,
) -> Result<String, Failure> {
    let mut rng = OsRng::new();
    let nonce: [u8; 16] = rng.bytes();
    rng.check()?;
    let claims = Claims {
        address: address.clone(),
        ts: now,
        nonce: b64::encode(&nonce),
        target: Target::new(method, &path_of(url), query_of(url), &host_of(url), body),
    };
    Ok(claims.sign(key))
}

/// A fresh UUID v4 from the operating system's randomness.
pub(crate) fn new_id() -> Result<String, Failure> {
    let mut rng = OsRng::new();
    let id = uuid_v4(rng.bytes());
    rng.check()?;
    Ok(id)
}

/// Sends a request; a transport failure becomes exit 3 with what to do next.
pub(crate) fn send(
    net: &dyn Transport,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    what: &str,
) -> Result<(u16, Vec<u8>), Failure> {
    net.call(method, url, headers, body).map_err(|e| {
        Failure::network(format!("{what}: no answer ({e})"))
            .hint("check the URL and that the house is up, then run the same command again")
    })
}

/// Reads a 2xx JSON object answer; anything else becomes a failure naming the house's reason and
/// what to do next (4xx exit 4, other statuses exit 3).
pub(crate) fn read_object(status: u16, body: &[u8], what: &str) -> Result<Object, Failure> {
    let parsed = Value::parse(body, body.len().max(1));
    if (200..300).contains(&status) {
        return match parsed {
            Ok(Value::Object(o)) => Ok(o),
            _ => Err(Failure::network(format!(
                "{what}: the house answered {status} with something that is not a JSON object; is the URL a Nyx5 house?"
            ))),
        };
    }
    let (slug, reason) = match &parsed {
        Ok(Value::Object(o)) => (
            field::opt_str(o, "error").ok().flatten().unwrap_or("").to_owned(),
            field::opt_str(o, "reason").ok().flatten().unwrap_or("").to_owned(),
        ),
        _ => (String::new(), String::new()),
    };
    let said = if reason.is_empty() { format!("answered {status}") } else { format!("{reason} ({status})") };
    Err(Failure::http(status, &slug, format!("{what}: {said}")).hint(next_step(status)))
}

/// What to do after a refusal with `status`.
pub(crate) fn next_step(status: u16) -> &'static str {
    match status {
        400 => "the request was malformed: check the arguments",
        401 => {
            "the house did not accept this agent's token: check that the agent is registered there \
             (`nyx5 register`) and that this machine's clock is right"
        }
        402 => "the recipient asks for a stamp or proof of work",
        403 => "refused: the reason says why; this will not change by retrying",
        404 => "not found: check the address, the id or the house URL",
        405 => "this house does not offer that route: is it a Nyx5 house, and up to date?",
        409 => "conflict: that name or id is already taken",
        410 => "expired: it can no longer be delivered",
        413 => "too large: send less, or refer to the data with an attachment URL",
        421 => "sent to the wrong house: check the house URL",
        429 => "too many requests: wait a minute and run the same command again",
        500..=599 => "the house has trouble: run the same command again later",
        _ => "unexpected answer: check the house URL",
    }
}
