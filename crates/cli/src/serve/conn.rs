//! One HTTP/1.1 connection of `nyx5 serve`: requests read one after another (keep-alive, and
//! pipelined ones in order), each within its deadlines, handed to the engine whole, and answered
//! with a length. What cannot be read as HTTP is answered in the engine's JSON error shape (400,
//! 408, 413, 431) and the connection closes.
//!
//! The deadlines ([`Limits`]): a new connection has `header_timeout` to send its first request
//! head; between requests a connection may sit idle `idle_timeout`, then has `header_timeout`
//! for the head once its first byte came; a body has `body_timeout` from the end of its head;
//! an answer `write_timeout`. An idle connection that runs out of time is closed without a
//! word (a client may be sending its next request just then); one that ran out mid-request
//! gets 408.

use std::cell::Cell;
use std::net::IpAddr;
use std::time::Duration;

use nyx5_house::http::{Request as HouseRequest, Response as HouseResponse};
use nyx5_proto::{Error, ErrorKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{Instant, timeout, timeout_at};

use super::http::{self, Chunked, Framing, Head};

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
    /// Connections served at once; more are answered 503 and closed.
    pub(super) max_connections: usize,
    /// Connections from one IP address at once (0: no such limit); more are answered 429.
    pub(super) max_per_ip: usize,
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
        Some(name) => headers
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.rsplit(',').next())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty()),
        None => peer.map(|ip| ip.to_string()),
    };
    headers.retain(|(k, _)| !k.eq_ignore_ascii_case(CLIENT_HEADER));
    if let Some(client) = client {
        headers.push((CLIENT_HEADER.to_owned(), client));
    }
    headers
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

/// What answers a request: the engine, or a stand-in in tests.
pub(super) trait Handler {
    fn handle(&self, req: HouseRequest) -> impl Future<Output = HouseResponse>;
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

/// Why a connection stops reading: the client is gone (nothing to say), or a refusal to send.
enum Halt {
    Gone,
    Refuse(Error),
}

/// Reads what has arrived (at least one byte) onto `buf`; `Gone` at the end of the stream.
async fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), Halt> {
    let mut chunk = [0u8; READ_CHUNK];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => Err(Halt::Gone),
        Ok(n) => {
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
            Ok(())
        }
    }
}

/// Reads until `deadline`, or the refusal `late` when it passes first.
async fn read_by(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant, late: &str) -> Result<(), Halt> {
    match timeout_at(deadline, read_some(stream, buf)).await {
        Ok(r) => r,
        Err(_) => Err(Halt::Refuse(Error::new(ErrorKind::Timeout, late.to_owned()))),
    }
}

/// The body `head` announces: from what is buffered, then from the stream, by `deadline`.
/// Bytes after it stay in `buf` (the next request).
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head: &Head,
    deadline: Instant,
    max: usize,
) -> Result<Vec<u8>, Halt> {
    const LATE: &str = "request body not received in time";
    match head.body {
        Framing::Empty => Ok(Vec::new()),
        Framing::Length(n) => {
            // Read into a body of exactly the length checked already; what a read brings past
            // it (a pipelined request) goes back to `buf`.
            let mut body = Vec::with_capacity(n);
            body.extend(buf.drain(..n.min(buf.len())));
            while body.len() < n {
                read_by(stream, &mut body, deadline, LATE).await?;
            }
            if body.len() > n {
                let rest: Vec<u8> = body.drain(n..).collect();
                buf.splice(0..0, rest);
            }
            Ok(body)
        }
        Framing::Chunked => {
            let mut decoder = Chunked::new(max);
            let mut body = Vec::new();
            loop {
                let taken = decoder.feed(buf, &mut body).map_err(Halt::Refuse)?;
                buf.drain(..taken);
                if decoder.done() {
                    return Ok(body);
                }
                read_by(stream, buf, deadline, LATE).await?;
            }
        }
    }
}

/// Writes `bytes` within the write timeout; whether they went.
async fn write(stream: &mut TcpStream, bytes: &[u8], limits: &Limits) -> bool {
    matches!(timeout(limits.write_timeout, stream.write_all(bytes)).await, Ok(Ok(())))
}

/// Answers `e` and closes: the refusal is written, the sending side shut, and what the client
/// still sends is drained a moment, so it reads the refusal rather than a reset.
async fn refuse(stream: &mut TcpStream, e: &Error, limits: &Limits) {
    let bytes = http::answer(&nyx5_house::web::common(HouseResponse::error(e)), true, false, now_ms());
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

/// Serves one connection until the client closes it, a deadline passes, a request cannot be
/// read, or the server stops.
pub(super) async fn serve<H: Handler>(mut stream: TcpStream, handler: &H, limits: &Limits, stop: &Stop) {
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
                read = timeout(wait, read_some(&mut stream, &mut buf)) => match read {
                    Ok(Ok(())) => {}
                    // Idle too long, or gone: close without a word.
                    Ok(Err(_)) | Err(_) => return,
                },
                () = stopped => return,
            }
            (if first { started } else { Instant::now() }) + limits.header_timeout
        } else {
            Instant::now() + limits.header_timeout
        };
        let read = async {
            // The head is parsed once its end has arrived (or it has grown too large), not again
            // after every read: a client sending a byte at a time costs linear time, not quadratic.
            let mut scanned = 0;
            let head = loop {
                let ended = http::head_ends(&buf, scanned);
                scanned = buf.len();
                if !ended && buf.len() < http::MAX_HEAD_BYTES {
                    read_by(&mut stream, &mut buf, head_deadline, "request head not received in time").await?;
                    continue;
                }
                match http::parse_head(&buf, limits.max_body_bytes) {
                    Ok(Some(head)) => break head,
                    Ok(None) => {
                        read_by(&mut stream, &mut buf, head_deadline, "request head not received in time").await?
                    }
                    Err(e) => return Err(Halt::Refuse(e)),
                }
            };
            buf.drain(..head.len);
            if head.expect_continue && head.body != Framing::Empty && !write(&mut stream, http::CONTINUE, limits).await
            {
                return Err(Halt::Gone);
            }
            let deadline = Instant::now() + limits.body_timeout;
            let body = read_body(&mut stream, &mut buf, &head, deadline, limits.max_body_bytes).await?;
            Ok((head, body))
        };
        let (head, body) = match read.await {
            Ok(request) => request,
            Err(Halt::Gone) => return,
            Err(Halt::Refuse(e)) => return refuse(&mut stream, &e, limits).await,
        };
        first = false;
        let head_only = head.head_only();
        let keep_alive = head.keep_alive;
        // A connection kept alive holds no more than what is buffered for the next request.
        buf.shrink_to(READ_CHUNK);
        let headers = with_client(head.headers, peer, limits.client_header.as_deref());
        let resp = handler.handle(HouseRequest::new(&head.method, &head.target, headers, body)).await;
        let close = !keep_alive || stop.stopping();
        if !write(&mut stream, &http::answer(&resp, close, head_only, now_ms()), limits).await {
            return;
        }
        if close {
            let _ = timeout(limits.write_timeout, stream.shutdown()).await;
            return;
        }
    }
}
