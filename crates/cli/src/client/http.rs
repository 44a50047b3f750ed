//! How the client talks to houses: one blocking HTTP call behind [`Transport`], the agent's
//! signed token (spec §8), and reading answers into JSON objects or failures that say what to
//! do next.

use nyx5_proto::address::uuid_v4;
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::crypto::SigningKey;
use std::path::Path;

use nyx5_client::bookmark;

use nyx5_proto::json::{Object, Value, field};
use nyx5_proto::{Address, Timestamp, b64};

use super::profile::Files;
use crate::error::Failure;
use crate::sys::OsRng;

/// One blocking HTTP request (the client crate's port); the binary uses [`Http`], the trait keeps
/// verbs independent of the client.
pub(crate) use nyx5_client::ports::Transport;

/// The binary's HTTP client (`crate::net`: rustls, a deadline, no redirects). It keeps the last
/// `nyx5-bookmark` each house answered with and sends it back on the next request to that
/// house, so that what one request wrote the next one reads (docs/SPEC.md "Reading your own
/// writes"): in memory for the process, and, for a profile's commands, in a file beside the
/// profile after each write, so that `nyx5 send` then `nyx5 outbox` read their own writes.
#[derive(Debug, Default)]
pub(crate) struct Http {
    bookmarks: Bookmarks,
}

impl Http {
    /// A client whose bookmarks outlive the command, beside the profile at `profile`.
    pub(crate) fn beside(profile: &Path) -> Http {
        Http { bookmarks: Bookmarks::beside(profile) }
    }
}

impl Transport for Http {
    fn call(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        self.bookmarks.around(method, url, headers, |headers| {
            crate::net::request_keeping(method, url, headers, body, nyx5_client::bookmark::HEADER)
        })
    }
}

/// The last bookmark of each house (by `host[:port]`), as it sent it: sealed, opaque here. With
/// a file (`<profile>.bookmarks`, the client crate's bookmarks slot: `nyx5_client::bookmark`
/// holds what is kept and its bound), it starts from the file and writes the bookmark a write's
/// answer carried to it. The file is a cache: missing or unreadable is empty, a failed write is
/// forgotten (a read then is at worst a moment stale).
#[derive(Debug, Default)]
pub(crate) struct Bookmarks {
    by_host: std::sync::Mutex<Vec<(String, String)>>,
    file: Option<Files>,
}

impl Bookmarks {
    /// Bookmarks kept in `<profile>.bookmarks`, starting from what it holds.
    pub(crate) fn beside(profile: &Path) -> Bookmarks {
        let file = Files::beside(profile);
        let held = bookmark::load(&file);
        Bookmarks { by_host: std::sync::Mutex::new(held), file: Some(file) }
    }

    /// Runs `send` with `headers` and the bookmark of `url`'s house, if one is kept; then keeps
    /// the one the answer carried (in the file too after a write: any method but GET and HEAD).
    /// Only a value a house could have sent is kept, and only for the house that sent it.
    pub(crate) fn around<T>(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        send: impl FnOnce(&[(&str, &str)]) -> Result<(u16, T, Option<String>), String>,
    ) -> Result<(u16, T), String> {
        let host = host_of(url);
        let kept = self.by_host.lock().ok().and_then(|m| m.iter().find(|(h, _)| *h == host).map(|(_, b)| b.clone()));
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if let Some(b) = &kept {
            all.push((bookmark::HEADER, b));
        }
        let (status, body, answered) = send(&all)?;
        if let Some(b) = answered.filter(|b| bookmark::shaped(b)) {
            if let Ok(mut m) = self.by_host.lock() {
                bookmark::put(&mut m, &host, b.clone());
            }
            if let Some(file) = self.file.as_ref().filter(|_| !matches!(method, "GET" | "HEAD")) {
                let _ = bookmark::keep(file, &host, &b);
            }
        }
        Ok((status, body))
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
    // A server named by a URL is anyone: its name is passed on only if it may be believed
    // (`Error::wire_name`: a name, and not one of ours with another code).
    let (slug, reason) = match &parsed {
        Ok(Value::Object(o)) => (
            field::opt_str(o, "error")
                .ok()
                .flatten()
                .and_then(|n| nyx5_proto::Error::wire_name(status, n))
                .unwrap_or("")
                .to_owned(),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HEADER: &str = nyx5_client::bookmark::HEADER;

    /// One exchange through `b`: what was sent as the bookmark, and the answer carrying `answered`.
    fn exchange(b: &Bookmarks, url: &str, answered: Option<&str>) -> Option<String> {
        exchange_as(b, "GET", url, answered)
    }

    fn exchange_as(b: &Bookmarks, method: &str, url: &str, answered: Option<&str>) -> Option<String> {
        let mut sent = None;
        b.around(method, url, &[("authorization", "x")], |headers| {
            assert_eq!(headers.first(), Some(&("authorization", "x")));
            sent = headers.iter().find(|(n, _)| *n == HEADER).map(|(_, v)| (*v).to_owned());
            Ok((200, (), answered.map(str::to_owned)))
        })
        .unwrap();
        sent
    }

    #[test]
    fn the_last_bookmark_of_a_house_goes_back_to_that_house_only() {
        let b = Bookmarks::default();
        assert_eq!(exchange(&b, "https://a.test/outbound", Some("Zm9v_-1")), None);
        // The next request to a.test (the write's reader) carries it; b.test never sees it.
        assert_eq!(exchange(&b, "https://a.test/outbox/ana?limit=1", Some("YmFy")).as_deref(), Some("Zm9v_-1"));
        assert_eq!(exchange(&b, "https://b.test/agents/bo", None), None);
        // The newest is kept; an answer without one leaves it.
        assert_eq!(exchange(&b, "https://a.test/mailbox/ana", None).as_deref(), Some("YmFy"));
        assert_eq!(exchange(&b, "https://A.test/mailbox/ana", None).as_deref(), Some("YmFy"));
        // What no house sends is not kept: not base64url, or past the bound.
        let long = "A".repeat(nyx5_client::bookmark::MAX_HEADER_CHARS + 1);
        for bad in ["a b", "x\r\ny", "", long.as_str()] {
            exchange(&b, "https://a.test/x", Some(bad));
            assert_eq!(exchange(&b, "https://a.test/x", None).as_deref(), Some("YmFy"), "{bad:.20}");
        }
    }

    #[test]
    fn a_writes_bookmark_outlives_the_command_beside_the_profile() {
        let dir = std::env::temp_dir().join(format!("nyx5-bookmarks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let profile = dir.join("profile.json");
        let first = Bookmarks::beside(&profile);
        // A read's bookmark stays in the process; a write's goes to the file.
        exchange_as(&first, "GET", "https://a.test/agents", Some("cmVhZA"));
        assert!(!dir.join("profile.json.bookmarks").exists());
        exchange_as(&first, "POST", "https://a.test/outbound", Some("d3JpdGU"));
        exchange_as(&first, "POST", "https://b.test/outbound", Some("Yg"));
        // The next command (`nyx5 outbox` after `nyx5 send`) starts from it.
        let next = Bookmarks::beside(&profile);
        assert_eq!(exchange(&next, "https://a.test/outbox/ana", None).as_deref(), Some("d3JpdGU"));
        assert_eq!(exchange(&next, "https://b.test/x", None).as_deref(), Some("Yg"));
        // Whatever else is in the file is no bookmark.
        std::fs::write(dir.join("profile.json.bookmarks"), b"{\"kind\":\"other\",\"bookmarks\":{\"a.test\":\"x\"}}")
            .unwrap();
        assert_eq!(exchange(&Bookmarks::beside(&profile), "https://a.test/x", None), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
