//! The network port the client and the engine share: an [`OutRequest`] sent over [`Net`] gets an
//! [`OutResponse`] or a [`PortError`]. The caller supplies the transport: the Worker's `fetch`,
//! the CLI's blocking client, a test's in-memory houses.
#![allow(async_fn_in_trait)] // Single-threaded runtimes (workerd, the test kit, a CLI verb): no Send bound.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// What a port reports when it fails (the house's database port reports with it too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortError {
    /// A constraint (UNIQUE, CHECK, NOT NULL, FOREIGN KEY) refused the write; the whole batch was
    /// undone. `name` is what the database names it (the house's `ports::constraint_name`): a named CHECK's
    /// name (`rate_cap`), or the columns of a UNIQUE or NOT NULL (`nonces.address, nonces.nonce`).
    /// Compare it with the constants of `store::constraint`, never by searching the text.
    Constraint { name: String },
    /// Anything else: the database or network is unavailable or misbehaved. For a request, its
    /// fate is unknown: it may have arrived and its answer been lost.
    Failed(String),
    /// The request certainly never reached its destination (no route, connection refused): a
    /// transport that can tell says so, and the queue then knows nothing arrived. One that cannot
    /// tell answers [`PortError::Failed`].
    Unreached(String),
    /// The outbound policy refused the target before anything was sent ([`crate::outbound`]);
    /// permanent, unlike a transport failure. The text names the rule, not the URL.
    Refused(String),
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Constraint { name } => write!(f, "constraint failed: {name}"),
            PortError::Failed(m) => write!(f, "failed: {m}"),
            PortError::Unreached(m) => write!(f, "unreachable: {m}"),
            PortError::Refused(m) => write!(f, "refused by the outbound policy: {m}"),
        }
    }
}

/// An HTTP request the house or the client sends (deliveries, card fetches, DNS-over-HTTPS,
/// webhooks, an agent's verbs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The answer to an [`OutRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The network. An `Err` is a transport failure (refused, timed out, DNS): always temporary.
pub trait Net {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError>;
}

/// One blocking HTTP request: `(status, body)` for any answer, `Err` with a one-line reason when
/// no answer came. A native client's verbs send through one (the CLI's is ureq); [`Blocking`]
/// makes it a [`Net`] for the resolver.
pub trait Transport {
    fn call(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>), String>;
}

impl fmt::Debug for dyn Transport + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Transport")
    }
}

/// The [`Net`] port over a blocking [`Transport`]; `offline`, it asks nobody (a second try from
/// kept cards alone). Its futures never wait: drive them with [`block_on`].
#[derive(Clone, Copy)]
pub struct Blocking<'a> {
    pub net: &'a dyn Transport,
    pub offline: bool,
}

impl fmt::Debug for Blocking<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blocking").field("offline", &self.offline).finish_non_exhaustive()
    }
}

impl Net for Blocking<'_> {
    async fn send(&self, r: OutRequest) -> Result<OutResponse, PortError> {
        if self.offline {
            return Err(PortError::Failed("not asked: kept cards only".into()));
        }
        let headers: Vec<(&str, &str)> = r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.net
            .call(&r.method, &r.url, &headers, &r.body)
            .map(|(status, body)| OutResponse { status, body })
            .map_err(PortError::Failed)
    }
}

/// Runs a future that never waits (a [`Blocking`] network and a pin store that answer at once).
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl Transport for Echo {
        fn call(
            &self,
            method: &str,
            url: &str,
            headers: &[(&str, &str)],
            body: &[u8],
        ) -> Result<(u16, Vec<u8>), String> {
            match headers {
                [("accept", "application/json")] => Ok((200, format!("{method} {url} {}", body.len()).into_bytes())),
                _ => Err("no answer".into()),
            }
        }
    }

    /// A blocking transport is a `Net` whose futures are ready at once; offline it asks nobody.
    #[test]
    fn a_blocking_transport_answers_at_once_and_offline_asks_nobody() {
        let request = |accept: &str| OutRequest {
            method: "GET".into(),
            url: "https://a.test/x".into(),
            headers: vec![("accept".into(), accept.into())],
            body: vec![1, 2],
        };
        let net = Blocking { net: &Echo, offline: false };
        let answer = block_on(net.send(request("application/json"))).unwrap();
        assert_eq!((answer.status, answer.body), (200, b"GET https://a.test/x 2".to_vec()));
        assert_eq!(block_on(net.send(request("text/html"))), Err(PortError::Failed("no answer".into())));
        let offline = Blocking { net: &Echo, offline: true };
        assert!(matches!(block_on(offline.send(request("application/json"))), Err(PortError::Failed(_))));
    }

    #[test]
    fn a_port_error_says_what_kind_it_is() {
        let texts: Vec<String> = [
            PortError::Constraint { name: "rate_cap".into() },
            PortError::Failed("x".into()),
            PortError::Unreached("y".into()),
            PortError::Refused("z".into()),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            texts,
            ["constraint failed: rate_cap", "failed: x", "unreachable: y", "refused by the outbound policy: z"]
        );
    }
}
