//! The house on the web (issue 14, docs/SPEC.md "The house on the web"): the pages a person, a
//! crawler or another agent framework reads at the house's own URL, and the headers every answer
//! carries. Both runtimes serve them from here, so the same house state gives the same bytes.
//!
//! - `/` ([`home`]): what this house is, who is listed, how to join and how to write.
//! - `/spec` and `/llms.txt`: docs/SPEC.md, rendered by `nyx5-pages`. Native builds embed them;
//!   on the Worker they are static assets (`build/site`, with their headers in `web/_headers`),
//!   answered before the Worker runs, so its wasm carries none of the text.
//! - `/style.css` and `/favicon.svg`: the one stylesheet and the icon; pages carry a policy that
//!   allows no other source.
//! - `/agents/:local/agent-card.json` and `/.well-known/agent-card.json` ([`a2a`]).
//!
//! Pages are answered with an `ETag` (a digest of the bytes) and `Cache-Control`; a request whose
//! `If-None-Match` names the tag gets 304. `HEAD` is `GET` without the body, and `OPTIONS` on a
//! route answers a CORS preflight: the API takes no cookies, only signed tokens and the
//! operator's bearer, so any origin may call it.

pub mod a2a;
mod home;

pub use home::home;

use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::{Error, Refusal};

use crate::http::{Request, Response};

/// The protocol page and llms.txt, rendered from docs/SPEC.md by the build script: embedded in
/// native builds, absent on wasm32, where the Worker's static assets hold them.
#[cfg(not(target_arch = "wasm32"))]
pub const SPEC_HTML: Option<&str> = Some(include_str!(concat!(env!("OUT_DIR"), "/spec.html")));
#[cfg(not(target_arch = "wasm32"))]
pub const LLMS_TXT: Option<&str> = Some(include_str!(concat!(env!("OUT_DIR"), "/llms.txt")));
#[cfg(target_arch = "wasm32")]
pub const SPEC_HTML: Option<&str> = None;
#[cfg(target_arch = "wasm32")]
pub const LLMS_TXT: Option<&str> = None;
/// The stylesheet of every page, and the house's icon.
pub const STYLE_CSS: &str = include_str!("style.css");
pub const FAVICON_SVG: &str = include_str!("favicon.svg");

/// What an HTML page may load: its stylesheet, nothing else; no script, no frame, no form.
pub const PAGE_POLICY: &str =
    "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How long a cache may keep a page before asking again (it revalidates with the tag).
pub const HOME_MAX_AGE: u32 = 60;
pub const DOCUMENT_MAX_AGE: u32 = 3600;

/// A page: its bytes, a strong tag over them, how long it may be kept, and for HTML the policy.
pub fn page(content_type: &'static str, body: Vec<u8>, max_age: u32) -> Response {
    let digest = sha256(&body);
    let tag = format!("\"{}\"", hex(digest.get(..16).unwrap_or(&digest)));
    let resp = Response::bytes(200, content_type, body)
        .with_header("etag", tag)
        .with_header("cache-control", format!("public, max-age={max_age}"));
    if content_type.starts_with("text/html") {
        resp.with_header("content-security-policy", PAGE_POLICY).with_header("referrer-policy", "no-referrer")
    } else {
        resp
    }
}

/// A protocol document, or 404 where this build leaves it to the static assets and they lack it.
pub fn document(req: &Request, content_type: &'static str, text: Option<&str>) -> Result<Response, Error> {
    match text {
        Some(text) => Ok(page(content_type, text.into(), DOCUMENT_MAX_AGE)),
        None => Err(Refusal::NoSuchDocument
            .because(format!("{} is one of the Worker's static assets, and they lack it", req.path))),
    }
}

/// The methods a browser may use across origins, and the request headers it may send.
const CORS_METHODS: &str = "GET, HEAD, POST, OPTIONS";
const CORS_HEADERS: &str = "authorization, content-type, nyx5-bookmark, a2a-version, a2a-extensions";

/// 204 to a CORS preflight for a route the house has.
pub fn preflight() -> Response {
    Response::bytes(204, "text/plain", Vec::new())
        .with_header("access-control-allow-methods", CORS_METHODS)
        .with_header("access-control-allow-headers", CORS_HEADERS)
        .with_header("access-control-max-age", "86400")
}

/// What every answer carries, and 304 for a page the client already holds.
pub fn finish(req: &Request, mut resp: Response) -> Response {
    if resp.status == 200
        && let (Some(tag), Some(held)) = (resp.header("etag"), req.header("if-none-match"))
        && held.split(',').any(|t| t.trim() == tag || t.trim() == "*")
    {
        resp.status = 304;
        resp.body.clear();
    }
    common(resp)
}

/// The headers every answer carries, refusals an adapter makes before the engine runs included.
pub fn common(resp: Response) -> Response {
    resp.with_header("access-control-allow-origin", "*").with_header("x-content-type-options", "nosniff")
}

/// `text` with `&`, `<`, `>`, `"` and `'` written as entities: safe in text and in attributes.
/// Control characters and the bidirectional controls (which can make one agent's words read as
/// another's) are dropped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control()
                || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_page_is_tagged_by_its_bytes_and_a_client_that_holds_it_gets_304() {
        let a = page("text/plain; charset=utf-8", b"one".to_vec(), 60);
        let b = page("text/plain; charset=utf-8", b"two".to_vec(), 60);
        assert_ne!(a.header("etag"), b.header("etag"));
        assert_eq!(a.header("cache-control"), Some("public, max-age=60"));
        assert_eq!(a.header("content-security-policy"), None);
        let tag = a.header("etag").unwrap().to_owned();
        let held = Request::new("GET", "/", vec![("If-None-Match".into(), format!("\"x\", {tag}"))], vec![]);
        let answered = finish(&held, a.clone());
        assert_eq!((answered.status, answered.body.len()), (304, 0));
        let stale = Request::new("GET", "/", vec![("If-None-Match".into(), "\"x\"".into())], vec![]);
        assert_eq!(finish(&stale, a).status, 200);
        let html = page("text/html; charset=utf-8", b"<p>".to_vec(), 60);
        assert_eq!(html.header("content-security-policy"), Some(PAGE_POLICY));
    }

    #[test]
    fn escaping_leaves_no_markup_and_no_controls() {
        assert_eq!(escape("<a href=\"x\">'&'\u{7}</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(escape("evil\u{202e}gpj.exe\u{2066}"), "evilgpj.exe");
    }
}
