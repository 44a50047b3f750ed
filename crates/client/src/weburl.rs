//! URLs read as the WHATWG URL standard reads them, by the parser of the platform the house runs
//! on: the `url` crate natively, the host's own `URL` on wasm32 (workerd, Node, a browser).
//!
//! The outbound policy must read a URL exactly as the `fetch` that will send it does, or a
//! stranger could write one that the policy takes for public and `fetch` sends to loopback. On
//! the Worker that `fetch` is workerd's, and so is its `URL`: asking it is agreement by
//! construction, where a second parser compiled into the Worker (the `url` crate was ~15 KB of
//! the gzipped bundle) could only agree by care. Natively the house's requests go through Rust
//! clients, which read URLs with the `url` crate, so that is the parser there.
//!
//! Only what the engine asks of a URL is here: its scheme, host (a name or an address, told apart
//! as the standard does: `http://2130706433/` is 127.0.0.1), port, whether it carries credentials
//! or a fragment, its origin and its serialization. One difference is left between the two: a
//! host written in Unicode is refused natively (docs/decisions/0037-ascii-hosts.md) and read as
//! its `xn--` name on wasm32; either way the name or address the platform's `fetch` would use is
//! the one the policy judges.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A URL's host, as the standard classifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A domain name, lower-cased (or an opaque host, for a scheme the standard has no rules for).
    Domain(String),
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
}

/// A parsed absolute URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebUrl {
    href: String,
    scheme: String,
    host: Option<Host>,
    /// The host as the serialization writes it (`[…]` around an IPv6 address); empty for none.
    host_text: String,
    /// The port written in the URL, `None` when it is absent or the scheme's default.
    port: Option<u16>,
    credentials: bool,
    origin: String,
}

impl WebUrl {
    /// Parses an absolute URL; `None` when it is not one.
    pub fn parse(text: &str) -> Option<WebUrl> {
        platform::parse(text)
    }

    /// The URL as the parser writes it back.
    pub fn as_str(&self) -> &str {
        &self.href
    }

    /// The scheme, lower-cased, without its `:`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// The host as the URL's serialization writes it.
    pub fn host_str(&self) -> Option<&str> {
        (!self.host_text.is_empty()).then_some(self.host_text.as_str())
    }

    /// The port, or the scheme's default (80 for `http`, 443 for `https`, …).
    pub fn port_or_known_default(&self) -> Option<u16> {
        self.port.or(match self.scheme.as_str() {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            "ftp" => Some(21),
            _ => None,
        })
    }

    /// The path and the query (`/a/b?c`), as an HTTP request's target names them: what follows the
    /// authority, up to the fragment. `None` for a URL without an authority (`mailto:…`).
    pub fn path_and_query(&self) -> Option<&str> {
        let (_, rest) = self.href.split_once("://")?;
        let start = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let target = rest.get(start..)?;
        Some(target.split_once('#').map_or(target, |(t, _)| t))
    }

    /// Whether a user name or a password is written in it.
    pub fn has_credentials(&self) -> bool {
        self.credentials
    }

    /// Whether it has a fragment, an empty one (`…#`) too.
    pub fn has_fragment(&self) -> bool {
        // In the serialization `#` only ever starts the fragment: elsewhere it is escaped.
        self.href.contains('#')
    }

    /// Its origin as the standard serializes it (`https://example.com:8443`; `null` for a
    /// scheme without one).
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// The host of a serialization's hostname: `[…]` is an IPv6 address, four dotted decimal
/// numbers an IPv4 one (the parser has written every other form of an address that way), the
/// rest a name.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn host_of(hostname: &str) -> Option<Host> {
    if hostname.is_empty() {
        return None;
    }
    if let Some(inner) = hostname.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse().ok().map(Host::Ipv6);
    }
    Some(hostname.parse().map_or_else(|_| Host::Domain(hostname.to_owned()), Host::Ipv4))
}

#[cfg(not(target_arch = "wasm32"))]
mod platform {
    use super::{Host, WebUrl};

    pub(super) fn parse(text: &str) -> Option<WebUrl> {
        let u = url::Url::parse(text).ok()?;
        let host = u.host().map(|h| match h {
            url::Host::Domain(d) => Host::Domain(d.to_owned()),
            url::Host::Ipv4(a) => Host::Ipv4(a),
            url::Host::Ipv6(a) => Host::Ipv6(a),
        });
        Some(WebUrl {
            scheme: u.scheme().to_owned(),
            host,
            host_text: u.host_str().unwrap_or_default().to_owned(),
            port: u.port(),
            credentials: !u.username().is_empty() || u.password().is_some(),
            origin: u.origin().ascii_serialization(),
            href: u.into(),
        })
    }
}

#[cfg(target_arch = "wasm32")]
mod platform {
    use wasm_bindgen::prelude::*;

    use super::{WebUrl, host_of};

    #[wasm_bindgen]
    extern "C" {
        /// The platform's WHATWG `URL` class.
        type URL;
        #[wasm_bindgen(constructor, catch)]
        fn new(url: &str) -> Result<URL, JsValue>;
        #[wasm_bindgen(method, getter)]
        fn href(this: &URL) -> String;
        #[wasm_bindgen(method, getter)]
        fn protocol(this: &URL) -> String;
        #[wasm_bindgen(method, getter)]
        fn hostname(this: &URL) -> String;
        #[wasm_bindgen(method, getter)]
        fn port(this: &URL) -> String;
        #[wasm_bindgen(method, getter)]
        fn username(this: &URL) -> String;
        #[wasm_bindgen(method, getter)]
        fn password(this: &URL) -> String;
        #[wasm_bindgen(method, getter)]
        fn origin(this: &URL) -> String;
    }

    pub(super) fn parse(text: &str) -> Option<WebUrl> {
        let u = URL::new(text).ok()?;
        let protocol = u.protocol();
        let hostname = u.hostname();
        Some(WebUrl {
            scheme: protocol.strip_suffix(':').unwrap_or(&protocol).to_owned(),
            host: host_of(&hostname),
            host_text: hostname,
            // The standard writes no port that is the scheme's default, and none but digits.
            port: u.port().parse().ok(),
            credentials: !u.username().is_empty() || !u.password().is_empty(),
            origin: u.origin(),
            href: u.href(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_told_from_names_as_the_standard_writes_them() {
        let host = |u: &str| WebUrl::parse(u).and_then(|u| u.host().cloned());
        assert_eq!(host("http://2130706433/"), Some(Host::Ipv4(Ipv4Addr::LOCALHOST)));
        assert_eq!(host("http://0x7f.1/"), Some(Host::Ipv4(Ipv4Addr::LOCALHOST)));
        assert_eq!(host("https://[::1]:8443/x"), Some(Host::Ipv6(Ipv6Addr::LOCALHOST)));
        assert_eq!(host("https://[::ffff:7f00:1]/"), Some(Host::Ipv6("::ffff:127.0.0.1".parse().unwrap())));
        assert_eq!(host("https://Example.COM./a"), Some(Host::Domain("example.com.".to_owned())));
        assert_eq!(host("mailto:ana@example.com"), None);
        assert_eq!(host("not a url"), None);
    }

    #[test]
    fn host_of_reads_what_a_serialization_holds() {
        // The wasm32 parser classifies hostnames with this; natively the url crate does.
        assert_eq!(host_of("127.0.0.1"), Some(Host::Ipv4(Ipv4Addr::LOCALHOST)));
        assert_eq!(host_of("[::1]"), Some(Host::Ipv6(Ipv6Addr::LOCALHOST)));
        assert_eq!(host_of("[::1"), Some(Host::Domain("[::1".to_owned())));
        assert_eq!(host_of("[nope]"), None);
        assert_eq!(host_of("1.2.3"), Some(Host::Domain("1.2.3".to_owned())));
        assert_eq!(host_of("example.com"), Some(Host::Domain("example.com".to_owned())));
        assert_eq!(host_of(""), None);
    }

    #[test]
    fn ports_origins_credentials_and_fragments() {
        let u = WebUrl::parse("HTTPS://user:pw@Example.com:443/a?b#c").unwrap();
        assert_eq!(u.scheme(), "https");
        assert_eq!(u.as_str(), "https://user:pw@example.com/a?b#c");
        assert_eq!((u.port_or_known_default(), u.origin()), (Some(443), "https://example.com"));
        assert!(u.has_credentials() && u.has_fragment());
        let u = WebUrl::parse("http://example.com:8080/#").unwrap();
        assert_eq!((u.port_or_known_default(), u.origin()), (Some(8080), "http://example.com:8080"));
        assert!(!u.has_credentials() && u.has_fragment());
        let u = WebUrl::parse("https://:@example.com/").unwrap();
        assert!(!u.has_credentials() && !u.has_fragment(), "empty credentials are not written");
        assert!(WebUrl::parse("https://:pw@example.com/").unwrap().has_credentials());
        assert_eq!(WebUrl::parse("https://[::1]/").unwrap().host_str(), Some("[::1]"));
        assert_eq!(WebUrl::parse("foo:bar").unwrap().origin(), "null");
    }

    #[test]
    fn the_target_is_the_path_and_query() {
        let target = |u: &str| WebUrl::parse(u).unwrap().path_and_query().map(str::to_owned);
        assert_eq!(target("http://127.0.0.1:8787/inbound?x=1#frag").as_deref(), Some("/inbound?x=1"));
        assert_eq!(target("https://example.com").as_deref(), Some("/"));
        assert_eq!(target("https://example.com/a%3F%23b?").as_deref(), Some("/a%3F%23b?"));
        assert_eq!(target("https://u@example.com/?q=a://b").as_deref(), Some("/?q=a://b"));
        assert_eq!(target("mailto:ana@example.com"), None);
    }
}
