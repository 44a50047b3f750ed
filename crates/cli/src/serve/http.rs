//! HTTP/1.1 on the wire (RFC 9112), as `nyx5 serve` speaks it: a request head read with
//! httparse, how its body is framed, a chunked body decoded, and an answer written with its
//! length. Pure functions over bytes (`conn.rs` does the waiting). Every refusal is an
//! [`Error`] of the engine's one table, so it goes out in the JSON error shape.

use nyx5_house::http::Response as HouseResponse;
use nyx5_proto::{Error, Refusal, limits};

/// Requests larger than this are refused with 413 before more of their body is read (the same
/// limit as the Worker's: twice the largest envelope).
pub(super) const MAX_REQUEST_BYTES: usize = 2 * limits::MAX_ENVELOPE_BYTES;
/// The largest request head (request line and header fields): 431 beyond it.
pub(super) const MAX_HEAD_BYTES: usize = 32 * 1024;
/// The most header fields in one request: 431 beyond it.
pub(super) const MAX_HEADERS: usize = 64;
/// The longest line of chunked framing (a size with its extensions, a trailer field).
const MAX_CHUNK_LINE: usize = 4096;
/// Fields the engine reads as one value (`Request::header` takes the first): a second one is
/// refused rather than ignored, as the Worker, whose runtime joins repeated fields into one
/// unreadable value, refuses it too. Host is checked on its own (exactly one in HTTP/1.1).
const SINGLE_FIELDS: [&str; 2] = ["authorization", "x-nyx5-relay"];
/// The most trailer bytes after a chunked body (they are read and dropped).
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body.
    Empty,
    /// `content-length` bytes.
    Length(usize),
    /// `transfer-encoding: chunked`.
    Chunked,
}

/// A request head, parsed and checked.
#[derive(Debug, Clone)]
pub(super) struct Head {
    pub(super) method: String,
    /// The target in origin form: `/path?query`.
    pub(super) target: String,
    /// Header fields, names in lower case; values that are not UTF-8 are read lossily (and
    /// refused by whoever parses them).
    pub(super) headers: Vec<(String, String)>,
    /// Bytes the head took in the buffer, the empty line included.
    pub(super) len: usize,
    /// Whether the connection may carry another request after this one.
    pub(super) keep_alive: bool,
    pub(super) body: Framing,
    /// The client waits for `100 Continue` before it sends the body.
    pub(super) expect_continue: bool,
    /// HTTP/1.1 (else 1.0, which reads no chunked answer).
    pub(super) http11: bool,
}

impl Head {
    /// Whether the answer goes without its body (`HEAD`).
    pub(super) fn head_only(&self) -> bool {
        self.method == "HEAD"
    }
}

fn malformed(why: impl Into<String>) -> Error {
    Refusal::BadHttp.because(why.into())
}

fn head_too_large() -> Error {
    Refusal::HeadTooLarge.because(format!(
        "request head larger than {MAX_HEAD_BYTES} bytes or with more than {MAX_HEADERS} header fields"
    ))
}

pub(super) fn body_too_large(max: usize) -> Error {
    Refusal::BodyTooLarge.because(format!("request body larger than {max} bytes"))
}

/// The comma-separated tokens of every `name` field, trimmed and in lower case.
fn tokens<'a>(headers: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = String> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n == name)
        .flat_map(|(_, v)| v.split(','))
        .map(|t| trim_ows(t).to_ascii_lowercase())
        .filter(|t| !t.is_empty())
}

/// Trims HTTP's optional whitespace (spaces and tabs) only: `str::trim` would also strip Unicode
/// spaces such as U+00A0, and read `chunked\u{a0}` as `chunked` where a proxy in front might not.
fn trim_ows(t: &str) -> &str {
    t.trim_matches([' ', '\t'])
}

/// The origin form of a request target: as it is when it starts with `/`; the path and query of
/// an absolute URL; anything else is malformed.
fn origin_form(target: &str) -> Result<String, Error> {
    if target.starts_with('/') {
        return Ok(target.to_owned());
    }
    let lower = target.to_ascii_lowercase();
    if let Some(rest) =
        ["http://", "https://"].iter().find_map(|s| lower.starts_with(s).then(|| target.get(s.len()..)).flatten())
    {
        let start = rest.find(['/', '?']).unwrap_or(rest.len());
        let path = rest.get(start..).unwrap_or("");
        return Ok(if path.starts_with('/') { path.to_owned() } else { format!("/{path}") });
    }
    Err(malformed(format!("request target {:?} is not a path", target.chars().take(64).collect::<String>())))
}

/// Whether `buf` holds the empty line that ends a head, looking only at what arrived after
/// `scanned` bytes (and the three before, where the line may have started).
pub(super) fn head_ends(buf: &[u8], scanned: usize) -> bool {
    let from = scanned.saturating_sub(3);
    buf.get(from..).is_some_and(|tail| tail.windows(2).any(|w| w == b"\n\n") || tail.windows(3).any(|w| w == b"\n\r\n"))
}

/// Reads a request head from the start of `buf`: `Ok(None)` while it is incomplete (and under
/// [`MAX_HEAD_BYTES`]); the head, checked, when complete. A body longer than `max_body` is
/// refused here, from its declared length, before any of it is read.
pub(super) fn parse_head(buf: &[u8], max_body: usize) -> Result<Option<Head>, Error> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => return Err(head_too_large()),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(head_too_large()),
        Err(e) => return Err(malformed(format!("not an HTTP/1.1 request: {e}"))),
    };
    if len > MAX_HEAD_BYTES {
        return Err(head_too_large());
    }
    // httparse also takes a bare LF as a line end; a proxy in front may not, and two readers that
    // split lines differently are how requests get smuggled.
    let head = buf.get(..len).unwrap_or_default();
    if std::iter::once(&0u8).chain(head).zip(head).any(|(before, b)| *b == b'\n' && *before != b'\r') {
        return Err(malformed("header lines must end in CRLF"));
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(malformed("not an HTTP/1.1 request"));
    };
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let http11 = minor == 1;
    if http11 && headers.iter().filter(|(n, _)| n == "host").count() != 1 {
        return Err(malformed("an HTTP/1.1 request needs exactly one host header"));
    }
    if let Some(name) = SINGLE_FIELDS.iter().find(|f| headers.iter().filter(|(n, _)| n == *f).count() > 1) {
        return Err(malformed(format!("{name} given more than once")));
    }
    let coding: Vec<String> = tokens(&headers, "transfer-encoding").collect();
    let has_length = headers.iter().any(|(n, _)| n == "content-length");
    let body = if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        if !http11 {
            return Err(malformed("transfer-encoding in an HTTP/1.0 request"));
        }
        if has_length {
            return Err(malformed("both content-length and transfer-encoding"));
        }
        if coding != ["chunked"] {
            return Err(malformed(format!(
                "transfer-encoding {:?} is not supported: send a content-length, or chunked alone",
                coding.join(", ")
            )));
        }
        Framing::Chunked
    } else if has_length {
        let mut declared = None;
        for value in headers.iter().filter(|(n, _)| n == "content-length").flat_map(|(_, v)| v.split(',')) {
            let value = trim_ows(value);
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed("content-length is not a number"));
            }
            // Beyond usize is beyond any limit: saturate, then refuse by size.
            let n = value.parse::<usize>().unwrap_or(usize::MAX);
            if declared.is_some_and(|d| d != n) {
                return Err(malformed("content-length given twice, differently"));
            }
            declared = Some(n);
        }
        match declared {
            Some(n) if n > max_body => return Err(body_too_large(max_body)),
            Some(0) | None => Framing::Empty,
            Some(n) => Framing::Length(n),
        }
    } else {
        Framing::Empty
    };
    let connection: Vec<String> = tokens(&headers, "connection").collect();
    let keep_alive = http11 && !connection.iter().any(|t| t == "close");
    let expect_continue = http11 && tokens(&headers, "expect").any(|t| t == "100-continue");
    Ok(Some(Head {
        method: method.to_owned(),
        target: origin_form(target)?,
        headers,
        len,
        keep_alive,
        body,
        expect_continue,
        http11,
    }))
}

/// Where a chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading a chunk-size line.
    Size,
    /// This many data bytes to go.
    Data(usize),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Reading trailer lines after the last chunk.
    Trailer,
    Done,
}

/// A chunked body decoder (RFC 9112 §7.1): fed bytes as they come, it appends the data to its
/// output and stops at the body's end, so what follows belongs to the next request. Lines end
/// in CRLF exactly; extensions and trailers are read and dropped.
#[derive(Debug)]
pub(super) struct Chunked {
    state: ChunkState,
    line: Vec<u8>,
    trailer_bytes: usize,
    max: usize,
}

impl Chunked {
    /// A decoder whose data may not exceed `max` bytes (413 beyond).
    pub(super) fn new(max: usize) -> Chunked {
        Chunked { state: ChunkState::Size, line: Vec::new(), trailer_bytes: 0, max }
    }

    pub(super) fn done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Takes a line ending in CRLF from `input`, into `self.line`; whether it is complete, and
    /// how many bytes were taken.
    fn take_line(&mut self, input: &[u8]) -> Result<(bool, usize), Error> {
        let end = input.iter().position(|&b| b == b'\n');
        let taken = end.map_or(input.len(), |i| i + 1);
        self.line.extend_from_slice(input.get(..taken).unwrap_or(input));
        if self.line.len() > MAX_CHUNK_LINE {
            return Err(malformed("a line of the chunked body is too long"));
        }
        if end.is_none() {
            return Ok((false, taken));
        }
        if !self.line.ends_with(b"\r\n") {
            return Err(malformed("a line of the chunked body does not end in CRLF"));
        }
        self.line.truncate(self.line.len() - 2);
        // Nothing in a size line, its extensions or a trailer may be a control character but a
        // tab (RFC 9112 §7.1.1, RFC 9110 §5.5): a reader that took a bare CR as a line end would
        // frame the body differently from this one.
        if self.line.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(malformed("a line of the chunked body holds a control character (a bare CR?)"));
        }
        Ok((true, taken))
    }

    /// Decodes what it can of `input` into `out`; answers the bytes it took (fewer than given
    /// only once the body is done).
    pub(super) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, Error> {
        let mut at = 0;
        while at < input.len() && self.state != ChunkState::Done {
            let rest = input.get(at..).unwrap_or_default();
            match self.state {
                ChunkState::Size => {
                    let (complete, taken) = self.take_line(rest)?;
                    at += taken;
                    if complete {
                        let line = std::mem::take(&mut self.line);
                        let size = line.split(|&b| b == b';').next().unwrap_or_default();
                        let size = std::str::from_utf8(size)
                            .ok()
                            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
                            .and_then(|s| usize::from_str_radix(s, 16).ok())
                            .ok_or_else(|| malformed("a chunk size is not a hexadecimal number"))?;
                        if out.len().saturating_add(size) > self.max {
                            return Err(body_too_large(self.max));
                        }
                        self.state = if size == 0 { ChunkState::Trailer } else { ChunkState::Data(size) };
                    }
                }
                ChunkState::Data(left) => {
                    let n = left.min(rest.len());
                    out.extend_from_slice(rest.get(..n).unwrap_or_default());
                    at += n;
                    self.state = if n == left { ChunkState::DataEnd } else { ChunkState::Data(left - n) };
                }
                ChunkState::DataEnd => {
                    let (complete, taken) = self.take_line(rest)?;
                    at += taken;
                    if complete {
                        if !self.line.is_empty() {
                            return Err(malformed("a chunk is longer than its size says"));
                        }
                        self.state = ChunkState::Size;
                    }
                }
                ChunkState::Trailer => {
                    // No more than one byte past the trailers' budget is looked at, so a long
                    // line is judged at the same byte whether the bytes come at once or apart.
                    let budget = MAX_TRAILER_BYTES.saturating_sub(self.trailer_bytes).saturating_add(1);
                    let (complete, taken) = self.take_line(rest.get(..budget.min(rest.len())).unwrap_or(rest))?;
                    at += taken;
                    self.trailer_bytes += taken;
                    if self.trailer_bytes > MAX_TRAILER_BYTES {
                        return Err(head_too_large());
                    }
                    if complete {
                        let empty = self.line.is_empty();
                        self.line.clear();
                        if empty {
                            self.state = ChunkState::Done;
                        }
                    }
                }
                ChunkState::Done => {}
            }
        }
        Ok(at)
    }
}

/// The reason phrase of the statuses the engine answers (an empty one is allowed otherwise).
fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// `ms` since the epoch as an HTTP date (IMF-fixdate, RFC 9110 §5.6.7).
pub(super) fn http_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let c = nyx5_proto::Timestamp(ms).civil();
    let weekday = usize::try_from(c.weekday).ok().and_then(|i| DAYS.get(i)).unwrap_or(&"Mon");
    let month = usize::try_from(c.month - 1).ok().and_then(|i| MONTHS.get(i)).unwrap_or(&"Jan");
    let secs = c.ms_of_day / 1000;
    format!(
        "{weekday}, {:02} {month} {:04} {:02}:{:02}:{:02} GMT",
        c.day,
        c.year,
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// An answer on the wire: status line, date, type, length (`connection: close` when the
/// connection ends after it), and the body unless `head_only`.
pub(super) fn answer(resp: &HouseResponse, close: bool, head_only: bool, now_ms: i64) -> Vec<u8> {
    // 204 and 304 have no body, and RFC 9110 gives a 204 no length; a 304's validators are enough.
    let framing = if matches!(resp.status, 204 | 304) {
        None
    } else {
        Some(format!("content-type: {}\r\ncontent-length: {}\r\n", resp.content_type, resp.body.len()))
    };
    let mut out = head(resp, now_ms, framing.as_deref().unwrap_or_default(), close);
    if !head_only {
        out.extend_from_slice(&resp.body);
    }
    out
}

/// The head of a streamed answer, closed after, and its first chunk, `first`: a chunked body
/// (`chunked`), else (an HTTP/1.0 client) a body that ends when the connection does.
pub(super) fn stream_head(resp: &HouseResponse, now_ms: i64, first: &[u8], chunked: bool) -> Vec<u8> {
    let coding = if chunked { "transfer-encoding: chunked\r\n" } else { "" };
    let mut out = head(resp, now_ms, &format!("content-type: {}\r\n{coding}", resp.content_type), true);
    if chunked {
        out.extend(chunk(first));
    } else {
        out.extend_from_slice(first);
    }
    out
}

/// A head: the status line and date, the body's `framing` lines, the engine's headers, and
/// `connection: close` when the connection ends after it.
fn head(resp: &HouseResponse, now_ms: i64, framing: &str, close: bool) -> Vec<u8> {
    let mut head =
        format!("HTTP/1.1 {} {}\r\ndate: {}\r\n{framing}", resp.status, reason_phrase(resp.status), http_date(now_ms));
    for (name, value) in &resp.headers {
        // The engine writes these names and values itself; a line break in one would be a bug,
        // and is dropped rather than sent as a second header.
        if !value.contains(['\r', '\n']) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    if close {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// `bytes` as one chunk of a chunked body (none for no bytes: an empty chunk would end it).
pub(super) fn chunk(bytes: &[u8]) -> Vec<u8> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// The end of a chunked body.
pub(super) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// What a server says before reading a body it was asked to accept first.
pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn head(text: &str) -> Result<Option<Head>, Error> {
        parse_head(text.as_bytes(), MAX_REQUEST_BYTES)
    }

    fn code(text: &str) -> u16 {
        head(text).unwrap_err().code()
    }

    #[test]
    fn the_end_of_a_head_is_found_however_it_was_split() {
        let head = b"GET / HTTP/1.1\r\nhost: a\r\n\r\n";
        // Fed one byte at a time, each look covers only what is new (and three bytes before).
        let mut scanned = 0;
        let found = (1..=head.len()).find(|&n| {
            let ended = head_ends(&head[..n], scanned);
            scanned = n;
            ended
        });
        assert_eq!(found, Some(head.len()));
        assert!(!head_ends(b"GET / HTTP/1.1\r\nhost: a\r\n", 0));
        assert!(head_ends(b"GET / HTTP/1.1\nhost: a\n\n", 10), "a bare-LF head ends too (and is refused)");
    }

    #[test]
    fn reads_a_head_and_its_framing() {
        let text = "POST /mailbox/ana?after=3 HTTP/1.1\r\nHost: a\r\nX-Nyx5-Relay: abc\r\nContent-Length: 2\r\n\r\n";
        let h = head(&format!("{text}{{}}")).unwrap().unwrap();
        assert_eq!((h.method.as_str(), h.target.as_str()), ("POST", "/mailbox/ana?after=3"));
        assert!(h.headers.contains(&("x-nyx5-relay".into(), "abc".into())));
        assert_eq!((h.body, h.keep_alive, h.expect_continue), (Framing::Length(2), true, false));
        assert_eq!(h.len, text.len());
        assert!(head("GET / HTTP/1.1\r\nhost: a\r\n").unwrap().is_none(), "incomplete");
        let h = head("GET http://a.test/x?y=1 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.target.as_str(), h.keep_alive, h.body), ("/x?y=1", false, Framing::Empty));
        let h = head("PUT /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: Chunked\r\nexpect: 100-continue\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.body, h.expect_continue), (Framing::Chunked, true));
        let h = head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive, "HTTP/1.0 closes");
        let h = head("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5, 5\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.body, Framing::Length(5));
    }

    #[test]
    fn a_field_the_house_reads_once_is_refused_twice() {
        // Found by the hostile sweep (tests/e2e/sweep.mjs): a valid token followed by another
        // Authorization field was served on the first one's authority.
        for field in ["Authorization", "X-Nyx5-Relay"] {
            for (a, b) in [("Nyx5 a.b", "Nyx5 c.d"), ("Nyx5 a.b", "Nyx5 a.b")] {
                let text = format!("GET / HTTP/1.1\r\nhost: a\r\n{field}: {a}\r\n{field}: {b}\r\n\r\n");
                assert_eq!(code(&text), 400, "{field}: {a} then {b}");
            }
            let once = format!("GET / HTTP/1.1\r\nhost: a\r\n{field}: x\r\n\r\n");
            assert!(head(&once).unwrap().is_some(), "{field} once is read");
        }
    }

    #[test]
    fn refuses_what_it_cannot_frame_or_read() {
        assert_eq!(code("NOT HTTP AT ALL\r\n\r\n"), 400);
        // Lines end in CRLF, each of them.
        assert_eq!(code("GET / HTTP/1.1\nhost: a\n\n"), 400);
        assert_eq!(code("GET / HTTP/1.1\r\nhost: a\nx: y\r\n\r\n"), 400);
        // Only spaces and tabs are whitespace around a framing token: a non-breaking space that
        // `str::trim` would strip makes the coding unknown and the length not a number.
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\u{a0}\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\u{a0}\r\n\r\nhello"), 400);
        assert_eq!(code("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 400);
        assert_eq!(code("GET / HTTP/1.1\r\n\r\n"), 400, "no host");
        assert_eq!(code("GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n"), 400);
        assert_eq!(code("GET nowhere HTTP/1.1\r\nhost: a\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1x\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: -1\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: gzip, chunked\r\n\r\n"), 400);
        assert_eq!(code("POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n"), 400);
        let big = format!("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: {}\r\n\r\n", MAX_REQUEST_BYTES + 1);
        assert_eq!(code(&big), 413);
        assert_eq!(code("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 99999999999999999999999\r\n\r\n"), 413);
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: y\r\n")).collect();
        assert_eq!(code(&format!("GET / HTTP/1.1\r\nhost: a\r\n{many}\r\n")), 431);
        let long = format!("GET / HTTP/1.1\r\nhost: a\r\nx: {}", "y".repeat(MAX_HEAD_BYTES));
        assert_eq!(code(&long), 431, "too long before it is even complete");
        let e = head("GET / HTTP/1.1\r\nhost: a\r\n\r\n\0").map(|h| h.unwrap().len);
        assert_eq!(e, Ok(27), "what follows the head is not part of it");
    }

    fn decode(parts: &[&[u8]]) -> Result<(Vec<u8>, usize), Error> {
        let mut d = Chunked::new(64);
        let mut out = Vec::new();
        let mut taken = 0;
        for p in parts {
            taken += d.feed(p, &mut out)?;
        }
        assert!(d.done(), "the body ended");
        Ok((out, taken))
    }

    #[test]
    fn decodes_chunked_bodies_byte_by_byte_and_stops_at_their_end() {
        let body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        let (out, taken) = decode(&[body]).unwrap();
        assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&body[taken..], b"NEXT");
        let bytes: Vec<&[u8]> = body[..body.len() - 4].chunks(1).collect();
        assert_eq!(decode(&bytes).unwrap().0, b"Wikipedia in\r\n\r\nchunks.");
        let code = |b: &[u8]| decode(&[b]).unwrap_err().code();
        assert_eq!(code(b"z\r\n"), 400);
        assert_eq!(code(b"\r\n"), 400);
        assert_eq!(code(b"3\r\nabcd\r\n0\r\n\r\n"), 400, "longer than its size");
        assert_eq!(code(b"3\nabc\r\n0\r\n\r\n"), 400, "CRLF exactly");
        assert_eq!(code(b"41\r\n"), 413, "over the limit before any data");
        assert_eq!(code(b"ffffffffffffffffffffffff\r\n"), 400);
    }

    /// Issue 34 §2: a bare CR in a chunk line or its extension was taken as data of the line; a
    /// reader that ends lines at a CR frames the body otherwise. Refused, whole or byte by byte.
    #[test]
    fn a_bare_cr_or_other_control_in_a_chunk_line_is_refused() {
        let bad: [&[u8]; 7] = [
            b"3;ext=1\r\r\nabc\r\n0\r\n\r\n",
            b"3;a\rb=1\r\nabc\r\n0\r\n\r\n",
            b"3\r;x\r\nabc\r\n0\r\n\r\n",
            b"3;e=\"a\rb\"\r\nabc\r\n0\r\n\r\n",
            b"0;x\r\r\n\r\n",
            b"0\r\nx-t: a\rb\r\n\r\n",
            b"3;e=\0\r\nabc\r\n0\r\n\r\n",
        ];
        for body in bad {
            let mut whole = Chunked::new(64);
            let at_once = whole.feed(body, &mut Vec::new()).map(|_| whole.done());
            let mut apart = Chunked::new(64);
            let mut out = Vec::new();
            let byte_by_byte = body.chunks(1).find_map(|b| apart.feed(b, &mut out).err());
            assert_eq!(at_once.unwrap_err().code(), 400, "{:?}", String::from_utf8_lossy(body));
            assert_eq!(byte_by_byte.unwrap().code(), 400, "{:?}", String::from_utf8_lossy(body));
        }
        // A tab is whitespace there, and an extension is still read and dropped.
        assert_eq!(decode(&[b"3;\tx=\"a b\"\r\nabc\r\n0\r\nx-t: a\tb\r\n\r\n"]).unwrap().0, b"abc");
    }

    /// Found by fuzz/serve_http: trailers of four 4,000-byte lines and one of 5,000 were refused
    /// as a long line (400) when they came at once and as too many trailer bytes (431) when they
    /// came apart. The same bytes get the same answer however they arrive.
    #[test]
    fn trailers_are_refused_alike_however_their_bytes_arrive() {
        let line = |n: usize| format!("x-t: {}\r\n", "a".repeat(n - 7));
        let cases = [
            (format!("0\r\n{}{}\r\n", line(4000).repeat(4), line(5000)), 431),
            (format!("0\r\n{}\r\n", line(5000)), 400),
            (format!("0\r\n{}{}\r\n", line(4000).repeat(3), line(4097)), 400),
        ];
        for (body, status) in cases {
            let mut whole = Chunked::new(64);
            let at_once = whole.feed(body.as_bytes(), &mut Vec::new()).unwrap_err().code();
            let mut apart = Chunked::new(64);
            let mut out = Vec::new();
            let byte_by_byte = body.as_bytes().chunks(1).find_map(|b| apart.feed(b, &mut out).err()).unwrap().code();
            assert_eq!((at_once, byte_by_byte), (status, status), "{} bytes", body.len());
        }
    }

    #[test]
    fn answers_carry_a_length_and_a_date() {
        assert_eq!(http_date(784_111_777_000), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400_000), "Tue, 29 Feb 2000 00:00:00 GMT");
        let e = Refusal::HeadTooLarge.because("x");
        let out = String::from_utf8(answer(&HouseResponse::error(&e), true, false, 0)).unwrap();
        assert!(out.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{out}");
        assert!(out.contains("content-type: application/json\r\n") && out.contains("connection: close\r\n"));
        let (_, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(out.contains(&format!("content-length: {}\r\n", body.len())));
        assert_eq!(body, r#"{"code":431,"error":"head_too_large","ok":false,"reason":"x"}"#);
        let head_only = answer(&HouseResponse::error(&e), false, true, 0);
        assert!(head_only.ends_with(b"\r\n\r\n") && !String::from_utf8(head_only).unwrap().contains("connection"));
    }

    #[test]
    fn a_stream_is_a_chunked_body_that_closes_and_an_empty_chunk_never_ends_it_early() {
        let resp = HouseResponse::bytes(200, "text/event-stream", b"data: 1\n\n".to_vec())
            .with_header("cache-control", "no-store");
        let out = String::from_utf8(stream_head(&resp, 0, &resp.body, true)).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(head.contains("\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"));
        assert!(head.contains("\r\ncache-control: no-store\r\n") && head.ends_with("\r\nconnection: close"));
        assert!(!head.contains("content-length"));
        assert_eq!(body, "9\r\ndata: 1\n\n\r\n");
        assert_eq!(chunk(&[b'x'; 26]), [b"1a\r\n".as_slice(), &[b'x'; 26], b"\r\n"].concat());
        assert!(chunk(b"").is_empty(), "a zero-length chunk would end the body");
        // HTTP/1.0 reads no chunks: the body is the events, ended by the close.
        let plain = String::from_utf8(stream_head(&resp, 0, &resp.body, false)).unwrap();
        assert!(!plain.contains("transfer-encoding") && plain.ends_with("connection: close\r\n\r\ndata: 1\n\n"));
    }
}
