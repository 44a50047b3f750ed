//! Outbound HTTP for the whole binary: the engine's `Net` port for `nyx5 serve` ([`HttpNet`]) and
//! a plain blocking [`request`] for the client verbs. Both run on one ureq agent with rustls and
//! the Mozilla roots: no redirects are followed (the engine decides what a 3xx means), every
//! status is an answer rather than an error, and every request has a deadline, so a dead peer can
//! never hang a queue tick or a command.

use std::io::Read;
use std::sync::OnceLock;
use std::time::Duration;

use nyx5_client::outbound::{self, Policy, ip_is_public};
use nyx5_client::ports::{Net, OutRequest, OutResponse, PortError};
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// The longest any outbound request may take, from connecting to the last byte of the answer
/// (the engine's [`nyx5_client::outbound::TIMEOUT_MS`], as the Worker uses it).
pub(crate) const TIMEOUT: Duration = Duration::from_millis(outbound::TIMEOUT_MS as u64);

/// The largest answer the engine reads ([`nyx5_client::outbound::MAX_ANSWER_BYTES`]); a larger
/// answer is a transport failure, so temporary.
pub(crate) const MAX_ENGINE_ANSWER_BYTES: usize = outbound::MAX_ANSWER_BYTES;

/// The largest answer a client verb reads: a full mailbox page of large envelopes fits.
pub(crate) const MAX_CLIENT_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// One HTTP client: a ureq agent (connection pool, TLS) with a deadline and an answer limit.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    agent: ureq::Agent,
    max_answer_bytes: usize,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fail {
    /// Every address the name resolved to is one the outbound policy refuses.
    Refused(String),
    /// The request never left: the name did not resolve, or no connection could be made.
    Unreached(String),
    /// Anything else: bad URL, timed out, TLS, a connection cut, an answer over the limit.
    Transport(String),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Refused(m) | Fail::Unreached(m) | Fail::Transport(m) => f.write_str(m),
        }
    }
}

/// The error [`PublicOnly`] gives ureq, recognised again in [`Client::request`].
#[derive(Debug)]
struct PolicyRefusal;

impl std::fmt::Display for PolicyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the host resolves only to private, loopback or reserved addresses")
    }
}

impl std::error::Error for PolicyRefusal {}

/// DNS as usual, then the outbound policy on every address, on every connect: a learnt name
/// that resolves to a private address (DNS rebinding included) is never connected to, unless
/// the operator named that host or allowed private networks.
#[derive(Debug)]
struct PublicOnly(Policy);

impl Resolver for PublicOnly {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let all = DefaultResolver::default().resolve(uri, config, timeout)?;
        let host = uri.host().unwrap_or_default();
        let port = all.first().map(std::net::SocketAddr::port).unwrap_or_default();
        if self.0.allows_private_at(uri.scheme_str().unwrap_or_default(), host, port) {
            return Ok(all);
        }
        let mut public = self.empty();
        for addr in all.iter().filter(|a| ip_is_public(a.ip())) {
            public.push(*addr);
        }
        if public.is_empty() { Err(ureq::Error::Other(Box::new(PolicyRefusal))) } else { Ok(public) }
    }
}

impl Client {
    /// A client whose requests end after `timeout` and read at most `max_answer_bytes`.
    pub(crate) fn new(timeout: Duration, max_answer_bytes: usize) -> Client {
        Client { agent: Self::config(timeout).new_agent(), max_answer_bytes }
    }

    /// As [`Client::new`], connecting only where `policy` allows once names are resolved, and
    /// trusting `roots` for https instead of the bundled Mozilla roots when given.
    pub(crate) fn guarded(
        timeout: Duration,
        max_answer_bytes: usize,
        policy: Policy,
        roots: Option<&[ureq::tls::Certificate<'static>]>,
    ) -> Client {
        let mut config = Self::config_builder(timeout);
        if let Some(roots) = roots {
            let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(roots)).build();
            config = config.tls_config(tls);
        }
        let agent = ureq::Agent::with_parts(config.build(), DefaultConnector::new(), PublicOnly(policy));
        Client { agent, max_answer_bytes }
    }

    fn config(timeout: Duration) -> ureq::config::Config {
        Self::config_builder(timeout).build()
    }

    fn config_builder(timeout: Duration) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
        ureq::Agent::config_builder()
            // No proxy from the environment: through a proxy, ureq never resolves the target, and
            // the check after DNS (`PublicOnly`) would see nothing.
            .proxy(None)
            .timeout_global(Some(timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(concat!("nyx5/", env!("CARGO_PKG_VERSION")))
    }

    /// Sends one request and reads the whole answer. `Err` says why no answer came, as one line
    /// naming the URL (for the user's own eyes: the engine passes on neither).
    pub(crate) fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), Fail> {
        self.exchange(method, url, headers, body, None).map(|(status, answer, _)| (status, answer))
    }

    /// As [`Client::request`], and the value of the answer's header `keep`, when asked and there.
    pub(crate) fn exchange(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        keep: Option<&str>,
    ) -> Result<(u16, Vec<u8>, Option<String>), Fail> {
        let fail = |why: &dyn std::fmt::Display| Fail::Transport(format!("{method} {url}: {why}"));
        let fail_run = |e: ureq::Error| match &e {
            // The rule only: the URL and what the name resolved to stay here.
            ureq::Error::Other(inner) if inner.is::<PolicyRefusal>() => Fail::Refused(PolicyRefusal.to_string()),
            // Nothing was sent: the queue then knows the envelope did not arrive.
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => {
                Fail::Unreached(format!("{method} {url}: {e}"))
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                Fail::Unreached(format!("{method} {url}: {e}"))
            }
            _ => fail(&e),
        };
        let mut builder = ureq::http::Request::builder().method(method).uri(url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        // A body-less GET must not carry `content-length: 0`; any other method sends its body,
        // empty or not.
        let result = if body.is_empty() && matches!(method, "GET" | "HEAD" | "DELETE" | "OPTIONS") {
            builder.body(()).map_err(|e| fail(&e)).and_then(|r| self.agent.run(r).map_err(fail_run))
        } else {
            builder.body(body).map_err(|e| fail(&e)).and_then(|r| self.agent.run(r).map_err(fail_run))
        };
        let mut response = result?;
        let status = response.status().as_u16();
        let kept = keep.and_then(|name| response.headers().get(name)).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let cap = u64::try_from(self.max_answer_bytes).unwrap_or(u64::MAX);
        let mut answer = Vec::new();
        response
            .body_mut()
            .as_reader()
            .take(cap.saturating_add(1))
            .read_to_end(&mut answer)
            .map_err(|e| fail(&format!("reading the answer: {e}")))?;
        if answer.len() > self.max_answer_bytes {
            return Err(fail(&format!("answer larger than {} bytes", self.max_answer_bytes)));
        }
        Ok((status, answer, kept))
    }
}

/// The client verbs' shared client: [`TIMEOUT`], answers up to [`MAX_CLIENT_ANSWER_BYTES`].
fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(TIMEOUT, MAX_CLIENT_ANSWER_BYTES))
}

/// The client for a mailbox read the house may hold open (`wait`, docs/SPEC.md §8): [`TIMEOUT`]
/// past the longest wait a house allows.
fn waiting_client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    let wait = Duration::from_secs(nyx5_client::inbox::FOLLOW_WAIT_S.unsigned_abs());
    CLIENT.get_or_init(|| Client::new(TIMEOUT + wait, MAX_CLIENT_ANSWER_BYTES))
}

/// Whether `url` asks the house to hold its answer open: a `wait` of more than 0 in its query.
fn waits(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, q)| {
        q.split('&').any(|p| p.strip_prefix("wait=").is_some_and(|w| w.parse::<u32>().is_ok_and(|w| w > 0)))
    })
}

/// A blocking HTTP request for the client verbs: `(status, body)` for any answer, `Err` with a
/// one-line reason when no answer came (see [`Client::request`]).
#[allow(dead_code)] // The client verbs call it; `nyx5 serve` goes through `HttpNet`.
pub(crate) fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    client().request(method, url, headers, body).map_err(|e| e.to_string())
}

/// As [`request`], and the value of the answer's header `keep` when it has one.
pub(crate) fn request_keeping(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    keep: &str,
) -> Result<(u16, Vec<u8>, Option<String>), String> {
    let client = if method == "GET" && waits(url) { waiting_client() } else { client() };
    client.exchange(method, url, headers, body, Some(keep)).map_err(|e| e.to_string())
}

/// The engine's `Net` port over [`Client`]. Inside a tokio runtime each request runs on the
/// blocking pool, so the server keeps answering while a delivery waits; outside one (a client
/// verb driving engine code), it simply blocks.
#[derive(Debug, Clone)]
pub(crate) struct HttpNet {
    client: Client,
}

impl HttpNet {
    /// The engine's network, checking `policy` again on every connect (the house checks it by
    /// URL before: see `nyx5_client::outbound`).
    /// `roots`, when given, are trusted for https instead of the bundled Mozilla roots.
    pub(crate) fn with_roots(policy: Policy, roots: Option<&[ureq::tls::Certificate<'static>]>) -> HttpNet {
        HttpNet { client: Client::guarded(TIMEOUT, MAX_ENGINE_ANSWER_BYTES, policy, roots) }
    }
}

/// The certificates of a PEM file (`nyx5 serve --tls-roots`): at least one.
pub(crate) fn read_roots(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    let mut roots = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => roots.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("not PEM: {e}")),
        }
    }
    if roots.is_empty() {
        return Err("no certificate in it".into());
    }
    Ok(roots)
}

fn send_blocking(client: &Client, request: &OutRequest) -> Result<OutResponse, PortError> {
    let headers: Vec<(&str, &str)> = request.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    match client.request(&request.method, &request.url, &headers, &request.body) {
        Ok((status, body)) => Ok(OutResponse { status, body }),
        // A name refused after DNS looks to the engine like a host that does not answer: a
        // different answer would tell a stranger what the house's DNS says about a name.
        Err(Fail::Refused(why) | Fail::Transport(why)) => Err(PortError::Failed(why)),
        Err(Fail::Unreached(why)) => Err(PortError::Unreached(why)),
    }
}

impl Net for HttpNet {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return send_blocking(&self.client, &request);
        }
        let client = self.client.clone();
        tokio::task::spawn_blocking(move || send_blocking(&client, &request))
            .await
            .map_err(|e| PortError::Failed(format!("outbound request task: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::time::Instant;

    use super::*;

    /// A one-shot server: answers the first request with `answer` (after reading its head and
    /// a body of `content-length`), or holds the connection open without answering.
    fn server(answer: Option<Vec<u8>>) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            std::io::Read::read_exact(&mut reader, &mut body).unwrap();
            head.push_str(&String::from_utf8_lossy(&body));
            match answer {
                Some(a) => {
                    let mut stream = stream;
                    let _ = stream.write_all(&a);
                }
                None => std::thread::sleep(Duration::from_secs(2)),
            }
            head
        });
        (url, handle)
    }

    fn answer(status: &str, extra: &str, body: &str) -> Option<Vec<u8>> {
        Some(format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n{extra}\r\n{body}", body.len()).into_bytes())
    }

    #[test]
    fn any_status_is_an_answer_and_headers_and_body_go_out() {
        let (url, seen) = server(answer("404 Not Found", "", "{\"ok\":false}"));
        let (status, body) =
            request("POST", &format!("{url}/inbound"), &[("x-nyx5-relay", "r1")], b"{\"a\":1}").unwrap();
        assert_eq!((status, body.as_slice()), (404, &b"{\"ok\":false}"[..]));
        let seen = seen.join().unwrap().to_ascii_lowercase();
        assert!(seen.starts_with("post /inbound http/1.1"), "{seen}");
        assert!(seen.contains("x-nyx5-relay: r1"));
        assert!(seen.ends_with("{\"a\":1}"));
    }

    #[test]
    fn redirects_are_returned_not_followed() {
        let (url, _seen) = server(answer("302 Found", "location: http://127.0.0.1:9/\r\n", ""));
        let (status, _) = request("GET", &url, &[], b"").unwrap();
        assert_eq!(status, 302);
    }

    #[test]
    fn a_silent_peer_times_out() {
        let (url, _seen) = server(None);
        let started = Instant::now();
        let e = Client::new(Duration::from_millis(300), 1024).request("GET", &url, &[], b"").unwrap_err().to_string();
        assert!(started.elapsed() < Duration::from_secs(2), "{e}");
        assert!(e.starts_with(&format!("GET {url}")), "{e}");
    }

    #[test]
    fn an_answer_over_the_limit_is_a_failure() {
        let (url, _seen) = server(answer("200 OK", "", &"x".repeat(2000)));
        let e = Client::new(TIMEOUT, 1000).request("GET", &url, &[], b"").unwrap_err().to_string();
        assert!(e.contains("larger than 1000"), "{e}");
    }

    #[test]
    fn a_learnt_name_that_resolves_inward_is_never_connected_to() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let strict = Client::guarded(TIMEOUT, 1024, Policy::new([], false, false), None);
        // `localhost` passes no check by URL here: only what it resolves to gives it away.
        let e = strict.request("GET", &format!("http://localhost:{port}/"), &[], b"").unwrap_err();
        assert!(matches!(&e, Fail::Refused(why) if !why.contains("localhost")), "{e}");
        assert!(listener.accept().is_err(), "something connected");
        // The operator may name the same place.
        let (url, _seen) = server(answer("200 OK", "", "ok"));
        let named = Client::guarded(TIMEOUT, 1024, Policy::new([url.as_str()], false, false), None);
        assert_eq!(named.request("GET", &url, &[], b"").unwrap(), (200, b"ok".to_vec()));
    }

    #[test]
    fn a_refused_connection_is_a_failure_not_a_panic() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(request("GET", &format!("http://127.0.0.1:{port}/"), &[], b"").is_err());
        assert!(request("GET", "not a url", &[], b"").is_err());
        assert!(request("BAD METHOD", "http://127.0.0.1:9/", &[], b"").is_err());
    }

    #[test]
    fn the_port_works_inside_and_outside_a_runtime() {
        let out = OutRequest { method: "GET".into(), url: String::new(), headers: vec![], body: vec![] };
        let (url, _seen) = server(answer("200 OK", "", "hi"));
        let open = || HttpNet::with_roots(Policy::new([], true, true), None);
        let outside = futures_block_on(open().send(OutRequest { url, ..out.clone() })).unwrap();
        assert_eq!(outside.body, b"hi");
        let (url, _seen) = server(answer("201 Created", "", ""));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let inside = runtime.block_on(open().send(OutRequest { url, ..out })).unwrap();
        assert_eq!(inside.status, 201);
    }

    /// Polls a future that never waits (the blocking path) to its end.
    fn futures_block_on<F: Future>(f: F) -> F::Output {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }
}
