//! Requests in and responses out, as the engine sees them: no runtime types.

use nyx5_proto::{Error, Refusal, Value};

/// An HTTP request to the house.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path, without query string.
    pub path: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    /// The query string as it came, without `?` (what an agent's token binds).
    pub raw_query: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// Builds a request from a method, a `path?query` target, headers and a body.
    pub fn new(method: &str, target: &str, headers: Vec<(String, String)>, body: Vec<u8>) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.to_ascii_uppercase(),
            path: path.to_owned(),
            query: parse_query(query),
            raw_query: query.to_owned(),
            headers: headers.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect(),
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Decodes `a=1&b=x%20y` (with `+` as space); malformed escapes are kept as they are.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let hex = |j: usize| b.get(j).and_then(|h| (*h as char).to_digit(16));
        match c {
            b'+' => out.push(b' '),
            b'%' => match (hex(i + 1), hex(i + 2)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(c),
            },
            _ => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The house's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Headers beyond the type and the length, names in lower case. `House::handle` adds the
    /// ones every answer carries (`web::common_headers`); a page adds its cache validators and
    /// its Content-Security-Policy.
    pub headers: Vec<(&'static str, String)>,
    /// Run a queue tick after the response is sent (the Worker's `waitUntil`).
    pub kick: bool,
    /// A stream: after `body`, the runtime writes what `House::follow` gives until it gives
    /// nothing (`crate::a2a_stream`).
    pub follow: Option<nyx5_rules::a2a::Follow>,
}

impl Response {
    /// An answer with no headers beyond the type.
    pub fn bytes(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response { status, content_type, body, headers: Vec::new(), kick: false, follow: None }
    }

    pub fn json(status: u16, value: &Value) -> Response {
        Response::bytes(status, "application/json", value.canonical())
    }

    pub fn text(status: u16, content_type: &'static str, body: &str) -> Response {
        Response::bytes(status, content_type, body.as_bytes().to_vec())
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The value of a header this answer carries (not the type).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The one error shape: `{ok:false, code, error, reason}` with the code as status.
    pub fn error(e: &Error) -> Response {
        let r = Response::json(e.code(), &e.to_wire());
        match e.kind {
            // A mailbox moving between databases: a moment (spec §8b).
            nyx5_proto::ErrorKind::MailboxMoving => r.with_header("retry-after", "5"),
            _ => r,
        }
    }

    /// This answer, followed by a stream's chunks.
    pub fn following(mut self, f: nyx5_rules::a2a::Follow) -> Response {
        self.follow = Some(f);
        self
    }

    pub fn kick(mut self) -> Response {
        self.kick = true;
        self
    }

    /// The body parsed as JSON (for tests and clients).
    pub fn value(&self) -> Result<Value, Error> {
        Value::parse(&self.body, nyx5_proto::limits::MAX_ENVELOPE_BYTES * 2)
    }
}

/// 404 for an unknown route.
pub fn no_route(req: &Request) -> Error {
    Refusal::NoRoute.because(format!("no route {} {}", req.method, req.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_decodes_pairs_in_order_and_keeps_what_it_cannot_decode() {
        let q = parse_query("a=1&b=x%20y+z&&c&d=%zz&e=%4&f=%C3%B1&g=%ff&a=2&h=a=b");
        let pairs: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("a", "1"),
                ("b", "x y z"),
                ("c", ""),
                ("d", "%zz"),
                ("e", "%4"),
                ("f", "ñ"),
                ("g", "\u{fffd}"),
                ("a", "2"),
                ("h", "a=b")
            ]
        );
        assert_eq!(percent_decode("a%2Bb+c%25"), "a+b c%");
        assert_eq!(parse_query(""), []);
    }

    #[test]
    fn a_request_keeps_its_raw_query_and_finds_the_first_of_a_name() {
        let headers = vec![("X-Nyx5-Relay".to_owned(), "r".to_owned())];
        let req = Request::new("post", "/mailbox/ana?after=b%2Bc&after=2", headers, b"{}".to_vec());
        assert_eq!(
            (req.method.as_str(), req.path.as_str(), req.raw_query.as_str()),
            ("POST", "/mailbox/ana", "after=b%2Bc&after=2")
        );
        assert_eq!(req.query("after"), Some("b+c"));
        assert_eq!(req.query("before"), None);
        assert_eq!(req.header("x-nyx5-relay"), Some("r"));
        assert_eq!(req.headers[0].0, "x-nyx5-relay");
        let plain = Request::new("GET", "/health", vec![], vec![]);
        assert_eq!((plain.raw_query.as_str(), plain.query.len()), ("", 0));
    }
}
