//! One HTTP/1.1 connection of `nyx5 serve`: requests read one after another (keep-alive, and
//! pipelined ones in order), each within its deadlines, handed to the engine whole, and answered
//! with a length. What cannot be read as HTTP is answered in the engine's JSON error shape (400,
//! 408, 413, 431) and the connection closes.
//!
//! The deadlines ([`Limits`]): a new connection has `header_timeout` to send its first request
//! head; between requests a connection may sit idle `idle_timeout`, then has `header_timeout`
//! for the head once its first byte came; a body has `body_timeout` from the end of its head;
//! an answer `write_timeout`. Once its first byte came, a head or a body must also keep up at
//! least [`MIN_RATE`] bytes a second on average after its first two seconds. An idle connection that
//! runs out of time is closed without a word (a client may be sending its next request just
//! then); one that ran out mid-request gets 408.
//!
//! Each connection holds a [`Ticket`] of the server's [`share`](super::share) registry: it says
//! what the connection is doing (so the registry knows what it may evict), reserves a body's
//! memory before allocating it, and wakes the connection when it is evicted; an evicted
//! connection stops at once (503, or quietly between requests).

use std::cell::Cell;
use std::net::IpAddr;
use std::time::Duration;

use nyx5_house::a2a_stream::Follow;
use nyx5_house::http::{Request as HouseRequest, Response as HouseResponse};
use nyx5_proto::{Error, Refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{Instant, timeout, timeout_at};

use super::http::{self, Chunked, Framing, Head};
use super::share::{Phase, Ticket};

/// What one server allows its clients.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    /// For a request head: from a new connection's start, or from the first byte of a later
    /// request.
    pub(super) header_timeout: Duration,
    /// How long a connection may wait between requests.
    pub(super) idle_timeout: Duration,
    /// For a request body, from the end of its head.
    pub(super) body_timeout: Duration,
    /// For writing one answer.
    pub(super) write_timeout: Duration,
    /// The largest request body (413 beyond).
    pub(super) max_body_bytes: usize,
    /// Connections served at once; when all are held, a newcomer takes one (`share`) or is
    /// answered 503.
    pub(super) max_connections: usize,
    /// Connections from one IPv4 address or IPv6 /64 at once (0: no such limit); more are
    /// answered 429.
    pub(super) max_per_ip: usize,
    /// Connections from one IPv6 /48 at once (0: no such limit); more are answered 429.
    pub(super) max_per_site: usize,
    /// Bytes of request bodies being read at once, across all connections (503 beyond, once
    /// no bigger holder can be made to give some back).
    pub(super) body_budget: usize,
    /// Bytes of answers waiting to be written at once, across all connections (a safe
    /// request's answer over it is 503, once no bigger holder can be made to give some back).
    pub(super) answer_budget: usize,
    /// Requests from one IPv4 address or IPv6 /48 the engine answers at once (0: no such
    /// limit); more are answered 429.
    pub(super) max_busy_per_client: usize,
    /// Behind a reverse proxy, the (lower-case) header it writes the client's address in; else
    /// the connection's own address is the client's (see [`with_client`]).
    pub(super) client_header: Option<String>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_body_bytes: http::MAX_REQUEST_BYTES,
            max_connections: 256,
            max_per_ip: 32,
            max_per_site: 4 * 32,
            body_budget: BODY_BUDGET,
            answer_budget: ANSWER_BUDGET,
            max_busy_per_client: BUSY_PER_CLIENT,
            client_header: None,
        }
    }
}

/// The request's headers with the engine's client header
/// ([`nyx5_house::routes::agents::CLIENT_HEADER`], which keys a client's share of open
/// registration) set to the client's address as this server knows it: the connection's, or the
/// last entry of the operator's proxy header. Whatever the client wrote there itself is dropped.
pub(super) fn with_client(
    mut headers: Vec<(String, String)>,
    peer: Option<IpAddr>,
    proxy_header: Option<&str>,
) -> Vec<(String, String)> {
    use nyx5_house::routes::agents::CLIENT_HEADER;
    let client = match proxy_header {
        Some(name) => header_client(&headers, name),
        None => peer.map(|ip| ip.to_string()),
    };
    headers.retain(|(k, _)| !k.eq_ignore_ascii_case(CLIENT_HEADER));
    if let Some(client) = client {
        headers.push((CLIENT_HEADER.to_owned(), client));
    }
    headers
}

/// The client address the proxy's header `name` gives (its last entry), if any.
pub(super) fn header_client(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.rsplit(',').next())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// How long a connection refused mid-request is drained before it closes, so the client reads
/// the refusal rather than a reset.
const LINGER: Duration = Duration::from_millis(500);
/// The most bytes drained then: twice the largest request body, so a client refused for a body
/// of about that size (413) finishes writing it and reads the answer before the close, rather
/// than a reset that may discard the answer unread (the sweep saw it under load; the time bound
/// above keeps a slow client from holding the connection).
const LINGER_BYTES: usize = 4 * nyx5_proto::limits::MAX_ENVELOPE_BYTES;
/// Bytes read at a time.
const READ_CHUNK: usize = 16 * 1024;
/// The slowest a head or a body may arrive, in bytes a second on average, after
/// [`RATE_GRACE`] from its first byte (a head) or from the end of its head (a body).
pub(super) const MIN_RATE: u64 = 1024;
/// The time a head or body has before [`MIN_RATE`] applies.
/// Two seconds rather than one: a client writing a small body in pieces (the e2e sweep's "slow
/// body", six pieces 150 ms apart) must not meet the rate on a loaded host's late timers.
const RATE_GRACE: Duration = Duration::from_secs(2);
/// The default budget for request bodies being read at once: sixteen of the largest.
pub(super) const BODY_BUDGET: usize = 16 * http::MAX_REQUEST_BYTES;
/// The default budget for answers waiting to be written at once (16 MiB: eight answers the
/// size of the largest request).
pub(super) const ANSWER_BUDGET: usize = 8 * http::MAX_REQUEST_BYTES;
/// The default number of requests of one client the engine answers at once. A few: a request
/// may wait on a house the client runs (an agent card fetched to check its token).
pub(super) const BUSY_PER_CLIENT: usize = 8;
/// The smallest step a body buffer grows by (unless its length says it needs less).
const BODY_STEP: usize = 64 * 1024;

/// When a head or body that started at `start` and has brought `received` bytes falls below
/// [`MIN_RATE`]: [`RATE_GRACE`] after its start, plus a second for every [`MIN_RATE`] bytes.
pub(super) fn rate_deadline(start: Instant, received: usize) -> Instant {
    let ms = u64::try_from(received).unwrap_or(u64::MAX).saturating_mul(1000) / MIN_RATE;
    start + RATE_GRACE + Duration::from_millis(ms)
}

/// What answers a request: the engine, or a stand-in in tests.
pub(super) trait Handler {
    fn handle(&self, req: HouseRequest) -> impl Future<Output = HouseResponse>;
    /// The next chunk of a stream an answer began (`HouseResponse::follow`); `None` ends it.
    fn follow(&self, f: &mut Follow) -> impl Future<Output = Option<Vec<u8>>> {
        let _ = f;
        std::future::ready(None)
    }
}

/// The server stopping: connections finish the request under way and close; idle ones close at
/// once.
#[derive(Debug, Default)]
pub(super) struct Stop {
    stopping: Cell<bool>,
    notify: Notify,
}

impl Stop {
    pub(super) fn stop(&self) {
        self.stopping.set(true);
        self.notify.notify_waiters();
    }

    pub(super) fn stopping(&self) -> bool {
        self.stopping.get()
    }
}

/// Milliseconds since the epoch, for the `date` of answers.
pub(super) fn now_ms() -> i64 {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Why a connection stops reading: the client is gone (nothing to say), a refusal to send, or
/// the registry evicted it.
enum Halt {
    Gone,
    Refuse(Error),
    Evicted,
}

/// Reads what has arrived (at least one byte, at most `most`) onto `buf`; `Gone` at the end of
/// the stream.
async fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>, most: usize) -> Result<(), Halt> {
    let mut chunk = [0u8; READ_CHUNK];
    let room = chunk.get_mut(..most.clamp(1, READ_CHUNK)).unwrap_or_default();
    match stream.read(room).await {
        Ok(0) | Err(_) => Err(Halt::Gone),
        Ok(n) => {
            buf.extend_from_slice(room.get(..n).unwrap_or_default());
            Ok(())
        }
    }
}

/// How long a head or a body may take: until `deadline`, and no slower than [`MIN_RATE`] from
/// `start` on.
#[derive(Debug, Clone, Copy)]
struct Pace {
    start: Instant,
    deadline: Instant,
    late: &'static str,
}

impl Pace {
    /// Reads at most `most` bytes onto `buf`, `received` having come so far; the refusal (408)
    /// when the deadline or the minimum rate passes first.
    async fn read(&self, stream: &mut TcpStream, buf: &mut Vec<u8>, most: usize, received: usize) -> Result<(), Halt> {
        let by = self.deadline.min(rate_deadline(self.start, received));
        match timeout_at(by, read_some(stream, buf, most)).await {
            Ok(r) => r,
            Err(_) if by < self.deadline => Err(Halt::Refuse(
                Refusal::RequestTooSlow
                    .because(format!("{}: it came slower than {MIN_RATE} bytes a second", self.late)),
            )),
            Err(_) => Err(Halt::Refuse(Refusal::RequestTooSlow.because(self.late.to_owned()))),
        }
    }
}

/// Makes room in `body` for `need` more bytes, no more than `max` in all, reserving the memory
/// from the budget before it is allocated. It grows by doubling (at least [`BODY_STEP`]), so a
/// body is copied a few times at most.
async fn room(body: &mut Vec<u8>, need: usize, max: usize, ticket: &Ticket) -> Result<(), Halt> {
    let have = body.capacity();
    if need <= have - body.len() {
        return Ok(());
    }
    let want = body.len().saturating_add(need);
    let cap = want.max(have.saturating_mul(2)).max(BODY_STEP).min(max.max(want));
    ticket.reserve(cap - have).await.map_err(Halt::Refuse)?;
    body.reserve_exact(cap - body.len());
    Ok(())
}

/// The body `head` announces: from what is buffered, then from the stream, at its pace. Bytes
/// after it stay in `buf` (the next request). Its memory is reserved as it grows.
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head: &Head,
    pace: Pace,
    max: usize,
    ticket: &Ticket,
) -> Result<Vec<u8>, Halt> {
    match head.body {
        Framing::Empty => Ok(Vec::new()),
        Framing::Length(n) => {
            // What a read brings is never past the length (a pipelined request stays unread).
            let mut body = Vec::new();
            let buffered = n.min(buf.len());
            room(&mut body, buffered, n, ticket).await?;
            body.extend(buf.drain(..buffered));
            while body.len() < n {
                room(&mut body, 1, n, ticket).await?;
                let most = (body.capacity() - body.len()).min(n - body.len());
                let received = body.len();
                pace.read(stream, &mut body, most, received).await?;
            }
            Ok(body)
        }
        Framing::Chunked => {
            let mut decoder = Chunked::new(max);
            let mut body = Vec::new();
            let mut received = buf.len();
            loop {
                // The decoder adds no more data than it is given, and none past `max`.
                let need = buf.len().min(max.saturating_sub(body.len()));
                room(&mut body, need, max, ticket).await?;
                let taken = decoder.feed(buf, &mut body).map_err(Halt::Refuse)?;
                buf.drain(..taken);
                if decoder.done() {
                    return Ok(body);
                }
                let before = buf.len();
                pace.read(stream, buf, READ_CHUNK, received).await?;
                received += buf.len() - before;
            }
        }
    }
}

/// Writes `bytes` within the write timeout; whether they went.
async fn write(stream: &mut TcpStream, bytes: &[u8], limits: &Limits) -> bool {
    matches!(timeout(limits.write_timeout, stream.write_all(bytes)).await, Ok(Ok(())))
}

/// The answer refusing a request or a connection with `e`, closing it; a 503 says when to try
/// again.
pub(super) fn refusal(e: &Error) -> Vec<u8> {
    let mut resp = nyx5_house::web::common(HouseResponse::error(e));
    if e.code() == 503 {
        resp.headers.push(("retry-after", "1".to_owned()));
    }
    http::answer(&resp, true, false, now_ms())
}

/// Answers `e` and closes: the refusal is written, the sending side shut, and what the client
/// still sends is drained a moment, so it reads the refusal rather than a reset.
async fn refuse(stream: &mut TcpStream, e: &Error, limits: &Limits) {
    let bytes = refusal(e);
    if !write(stream, &bytes, limits).await {
        return;
    }
    let _ = timeout(limits.write_timeout, stream.shutdown()).await;
    let _ = timeout(LINGER, async {
        let mut drained = 0usize;
        let mut chunk = [0u8; READ_CHUNK];
        while drained < LINGER_BYTES {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

/// An evicted connection: told so (503) if it is not between requests, without waiting, and closed.
fn shed(stream: &TcpStream, quietly: bool) {
    if !quietly {
        let e = Refusal::HouseBusy.because("this house needed this connection for another client; try again");
        let _ = stream.try_write(&refusal(&e));
    }
}

/// Serves one connection until the client closes it, a deadline passes, a request cannot be
/// read, the server stops, or the registry evicts it.
pub(super) async fn serve<H: Handler>(
    mut stream: TcpStream,
    handler: &H,
    limits: &Limits,
    stop: &Stop,
    ticket: &Ticket,
) {
    let started = Instant::now();
    // Canonical: on a dual-stack listener an IPv4 client arrives as `::ffff:a.b.c.d`.
    let peer = stream.peer_addr().ok().map(|a| a.ip().to_canonical());
    let mut buf: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        // The first byte of the next request, unless one is buffered already (pipelined).
        let head_deadline = if buf.is_empty() {
            let wait = if first { limits.header_timeout } else { limits.idle_timeout };
            let stopped = stop.notify.notified();
            if stop.stopping() {
                return;
            }
            tokio::select! {
                read = timeout(wait, read_some(&mut stream, &mut buf, READ_CHUNK)) => match read {
                    Ok(Ok(())) => {}
                    // Idle too long, or gone: close without a word.
                    Ok(Err(_)) | Err(_) => return,
                },
                () = stopped => return,
                // A new connection hears why; one kept alive between requests closes quietly.
                () = ticket.evicted() => return shed(&stream, !first),
            }
            (if first { started } else { Instant::now() }) + limits.header_timeout
        } else {
            Instant::now() + limits.header_timeout
        };
        ticket.set_phase(Phase::Head);
        let head_pace =
            Pace { start: Instant::now(), deadline: head_deadline, late: "request head not received in time" };
        let read = async {
            // The head is parsed once its end has arrived (or it has grown too large), not again
            // after every read: a client sending a byte at a time costs linear time, not quadratic.
            let mut scanned = 0;
            let head = loop {
                let ended = http::head_ends(&buf, scanned);
                scanned = buf.len();
                if !ended && buf.len() < http::MAX_HEAD_BYTES {
                    let received = buf.len();
                    head_pace.read(&mut stream, &mut buf, READ_CHUNK, received).await?;
                    continue;
                }
                match http::parse_head(&buf, limits.max_body_bytes) {
                    Ok(Some(head)) => break head,
                    Ok(None) => {
                        let received = buf.len();
                        head_pace.read(&mut stream, &mut buf, READ_CHUNK, received).await?
                    }
                    Err(e) => return Err(Halt::Refuse(e)),
                }
            };
            buf.drain(..head.len);
            if head.expect_continue && head.body != Framing::Empty && !write(&mut stream, http::CONTINUE, limits).await
            {
                return Err(Halt::Gone);
            }
            ticket.set_phase(Phase::Body);
            let now = Instant::now();
            let pace =
                Pace { start: now, deadline: now + limits.body_timeout, late: "request body not received in time" };
            let body = read_body(&mut stream, &mut buf, &head, pace, limits.max_body_bytes, ticket).await?;
            Ok((head, body))
        };
        let read = tokio::select! {
            read = read => read,
            () = ticket.evicted() => Err(Halt::Evicted),
        };
        let (head, body) = match read {
            Ok(request) => request,
            Err(Halt::Gone) => return,
            // Refusing, it may still be evicted (a client that reads nothing keeps a write waiting).
            Err(Halt::Refuse(e)) => {
                return tokio::select! {
                    () = refuse(&mut stream, &e, limits) => {}
                    () = ticket.evicted() => {}
                };
            }
            Err(Halt::Evicted) => return shed(&stream, false),
        };
        // Evicted just as the request was read: its place is another's already.
        if ticket.is_evicted() {
            return shed(&stream, false);
        }
        // A client has only a few requests with the engine at once.
        // Behind a proxy, the client is the one its header names.
        let client = limits
            .client_header
            .as_deref()
            .and_then(|name| header_client(&head.headers, name))
            .and_then(|v| v.parse::<IpAddr>().ok());
        // A held read carries no body: its memory would be out of reach for the held time.
        if matches!(head.body, http::Framing::Empty | http::Framing::Length(0))
            && holds_open(&head.method, &head.target)
        {
            ticket.waiting(client);
        } else if let Err(e) = ticket.busy(client) {
            return tokio::select! {
                () = refuse(&mut stream, &e, limits) => {}
                () = ticket.evicted() => {}
            };
        }
        first = false;
        let head_only = head.head_only();
        let keep_alive = head.keep_alive;
        let http11 = head.http11;
        // A connection kept alive holds no more than what is buffered for the next request.
        buf.shrink_to(READ_CHUNK);
        let headers = with_client(head.headers, peer, limits.client_header.as_deref());
        let safe = matches!(head.method.as_str(), "GET" | "HEAD");
        // The body stays reserved while the engine holds it; if a smaller holder needs that
        // memory, the engine's work is dropped (its state changes are single guarded batches).
        let resp = tokio::select! {
            resp = handler.handle(HouseRequest::new(&head.method, &head.target, headers, body)) => resp,
            () = ticket.evicted() => return shed(&stream, false),
        };
        // The body went with the request to the engine, which is done: its memory is free again.
        ticket.release();
        let mut resp = resp;
        if let Some(follow) = resp.follow.take() {
            return stream_out(&mut stream, handler, limits, ticket, resp, follow, http11).await;
        }
        let close = !keep_alive || stop.stopping();
        // A client that does not read its answer may lose the connection to another.
        ticket.set_phase(Phase::Answer);
        let bytes = http::answer(&resp, close, head_only, now_ms());
        drop(resp);
        // The answer's memory, until it is written: a safe request's answer that does not fit
        // is refused; any other goes anyway (what it changed is done).
        let reserved = tokio::select! {
            r = ticket.reserve_answer(bytes.len(), !safe) => r,
            () = ticket.evicted() => return shed(&stream, false),
        };
        if let Err(e) = reserved {
            drop(bytes);
            return tokio::select! {
                () = refuse(&mut stream, &e, limits) => {}
                () = ticket.evicted() => {}
            };
        }
        let written = tokio::select! {
            written = write(&mut stream, &bytes, limits) => written,
            () = ticket.evicted() => false,
        };
        drop(bytes);
        ticket.release_answer();
        if !written {
            return;
        }
        if close {
            let _ = timeout(limits.write_timeout, stream.shutdown()).await;
            return;
        }
        ticket.set_phase(Phase::Idle);
    }
}

/// Writes a streamed answer (A2A's Server-Sent Events): the head and `resp`'s body, then each
/// chunk the engine gives for `follow` as it comes, as a chunked body (an HTTP/1.0 client's
/// ends with the connection); then closes. Between chunks the connection is what a held mailbox
/// read is ([`Phase::Waiting`]): not one of its client's busy requests, and anyone's to take for a
/// slot after the idle ones (a stream's client subscribes again). Each chunk's memory is
/// reserved while it is written, as an answer's is. The server stopping closes the bell, which
/// ends the stream.
async fn stream_out<H: Handler>(
    stream: &mut TcpStream,
    handler: &H,
    limits: &Limits,
    ticket: &Ticket,
    resp: HouseResponse,
    mut follow: Follow,
    chunked: bool,
) {
    let mut bytes = http::stream_head(&resp, now_ms(), &resp.body, chunked);
    drop(resp);
    loop {
        ticket.set_phase(Phase::Answer);
        let reserved = tokio::select! {
            r = ticket.reserve_answer(bytes.len(), true) => r.is_ok(),
            () = ticket.evicted() => false,
        };
        let written = reserved
            && tokio::select! {
                written = write(stream, &bytes, limits) => written,
                () = ticket.evicted() => false,
            };
        if reserved {
            ticket.release_answer();
        }
        if !written {
            return;
        }
        ticket.set_phase(Phase::Waiting);
        let next = tokio::select! {
            next = handler.follow(&mut follow) => next,
            () = ticket.evicted() => return,
        };
        match next {
            Some(c) if chunked => bytes = http::chunk(&c),
            Some(c) => bytes = c,
            None => {
                if chunked {
                    let _ = write(stream, http::LAST_CHUNK, limits).await;
                }
                let _ = timeout(limits.write_timeout, stream.shutdown()).await;
                return;
            }
        }
    }
}

/// Whether a request may be held open by the engine: a mailbox read with a `wait` of more than
/// 0 (docs/SPEC.md §8c). Held, it is not one of its client's busy requests (see `share`).
pub(super) fn holds_open(method: &str, target: &str) -> bool {
    let Some((path, query)) = target.split_once('?') else { return false };
    (method == "GET" || method == "HEAD")
        && path.starts_with("/mailbox/")
        && query.split('&').any(|p| p.strip_prefix("wait=").is_some_and(|w| w.parse::<u32>().is_ok_and(|w| w > 0)))
}
