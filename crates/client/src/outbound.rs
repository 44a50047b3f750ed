//! The one outbound policy (issue 10 §1): where the engine may send a request.
//!
//! A house fetches URLs that strangers choose: a remote card's `estafeta`, a DNS record's `url=`,
//! an agent's `webhook`. Left alone, `POST /inbound` naming a made-up domain would make the house
//! fetch its own loopback, the cloud's metadata address or the operator's private network. So:
//!
//! - An origin the operator named (the hosts file, the DNS-over-HTTPS endpoint, the email
//!   provider; for the client, the house it was pointed at) may be anything.
//! - Every other URL is *learnt*: it must be `https` and its host must be public, by name and by
//!   address. IP literals are read as the WHATWG URL standard reads them, by the parser of the
//!   platform's own `fetch` ([`crate::weburl`]: workerd's `URL` on the Worker), so
//!   `http://2130706433/` is 127.0.0.1 here as it is there.
//! - Test setups turn the rules off explicitly ([`Policy::allow_private`], [`Policy::allow_http`]).
//!
//! [`Guarded`] puts the policy in front of a [`Net`]: the house sends every request through it.
//! Where the address is only known after DNS (the native client), [`ip_is_public`] is checked
//! again on every connect (see the CLI's `net.rs`); the Worker cannot see addresses, and relies on
//! the check by name and scheme here.
//!
//! The house and the client share this one policy: the house builds it from its configuration
//! (`nyx5_house::Config::outbound_policy`), the client from the house it was pointed at.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nyx5_proto::vecmap::VecSet;

use crate::ports::{Net, OutRequest, OutResponse, PortError};
use crate::weburl::{Host, WebUrl};

/// The longest any outbound request may take, from connecting to the last byte of the answer.
pub const TIMEOUT_MS: u32 = 10_000;

/// The largest answer the engine reads. Everything it fetches (cards, DNS-over-HTTPS answers,
/// answers to `POST /inbound`) is far smaller; a larger answer is a transport failure.
pub const MAX_ANSWER_BYTES: usize = 2 * nyx5_proto::limits::MAX_ENVELOPE_BYTES;

/// Name suffixes that resolve inside a network, never on the public internet: `localhost`
/// (RFC 6761), mDNS's `local` (RFC 6762), `home.arpa` (RFC 8375), ICANN's private-use
/// `internal` (2024; cloud metadata lives at `metadata.google.internal`), and the `localdomain`
/// of many `/etc/hosts` files.
const PRIVATE_SUFFIXES: [&str; 5] = ["localhost", "local", "home.arpa", "internal", "localdomain"];

/// Where outbound requests may go.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Origins (`scheme://host[:port]`) the operator named: any scheme, any address.
    operator: VecSet<String>,
    /// Those origins as `scheme://host:port`, for the check after DNS.
    operator_hosts: VecSet<String>,
    /// Private and loopback targets allowed everywhere (test setups only).
    pub allow_private: bool,
    /// Plain `http` allowed for learnt URLs (test setups only).
    pub allow_http: bool,
}

/// Why the policy refused a URL. The text names the rule, never the URL or what answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal(pub &'static str);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl Policy {
    /// A policy that trusts the origins of `urls` (unparseable ones are ignored: nothing is
    /// trusted by mistake).
    pub fn new<'a>(urls: impl IntoIterator<Item = &'a str>, allow_private: bool, allow_http: bool) -> Policy {
        let mut p = Policy { allow_private, allow_http, ..Policy::default() };
        for url in urls {
            p.trust(url);
        }
        p
    }

    /// Trusts the origin of `url` as the operator's.
    pub fn trust(&mut self, url: &str) {
        if let Some(u) = WebUrl::parse(url)
            && let Some(host) = u.host_str()
            && let Some(port) = u.port_or_known_default()
        {
            self.operator.insert(u.origin().to_owned());
            self.operator_hosts.insert(format!("{}://{host}:{port}", u.scheme()));
        }
    }

    /// Whether `url`'s origin is one the operator named.
    pub fn operator_named(&self, url: &str) -> bool {
        WebUrl::parse(url).is_some_and(|u| self.operator.contains(u.origin()))
    }

    /// Whether a `scheme` connection to `host:port` may reach a private address (the check
    /// after DNS).
    pub fn allows_private_at(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.allow_private
            || self.operator_hosts.contains(&format!(
                "{}://{}:{port}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            ))
    }

    /// Decides whether the engine may send a request to `url`: the operator's origins, or a
    /// learnt URL that passes [`Policy::check_learnt`].
    pub fn check(&self, url: &str) -> Result<(), Refusal> {
        let u = WebUrl::parse(url).ok_or(Refusal("not a URL"))?;
        if matches!(u.scheme(), "http" | "https") && self.operator.contains(u.origin()) {
            return Ok(());
        }
        check_learnt(&u, self.allow_http, self.allow_private)
    }

    /// Decides whether a URL a stranger chose for its own use (an agent's webhook) may be used:
    /// public `https`, with no exemption for the operator's origins, which are for reaching
    /// houses, DNS and the email provider, not for whatever an agent wants to POST to.
    pub fn check_learnt(&self, url: &str) -> Result<(), Refusal> {
        let u = WebUrl::parse(url).ok_or(Refusal("not a URL"))?;
        check_learnt(&u, self.allow_http, self.allow_private)
    }
}

fn check_learnt(u: &WebUrl, allow_http: bool, allow_private: bool) -> Result<(), Refusal> {
    if !matches!(u.scheme(), "http" | "https") {
        return Err(Refusal("only http(s) URLs are fetched"));
    }
    if u.scheme() != "https" && !allow_http {
        return Err(Refusal("a URL learnt from a peer must be https"));
    }
    if u.has_credentials() {
        return Err(Refusal("a URL learnt from a peer must not carry credentials"));
    }
    if allow_private {
        return Ok(());
    }
    match u.host() {
        Some(Host::Domain(name)) => check_public_name(name),
        Some(Host::Ipv4(ip)) => check_public_ip(IpAddr::V4(*ip)),
        Some(Host::Ipv6(ip)) => check_public_ip(IpAddr::V6(*ip)),
        None => Err(Refusal("the URL has no host")),
    }
}

fn check_public_ip(ip: IpAddr) -> Result<(), Refusal> {
    if ip_is_public(ip) { Ok(()) } else { Err(Refusal("the address is private, loopback or reserved")) }
}

/// Refuses host names that resolve inside a network: one label (search domains), or a private
/// suffix ([`PRIVATE_SUFFIXES`]). IP-shaped names never get here: the URL parser made them
/// addresses.
fn check_public_name(name: &str) -> Result<(), Refusal> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if !name.contains('.') {
        return Err(Refusal("a single-label host name is resolved inside a network"));
    }
    if PRIVATE_SUFFIXES.iter().any(|s| name == *s || name.ends_with(&format!(".{s}"))) {
        return Err(Refusal("the host name is reserved for private networks"));
    }
    Ok(())
}

/// Whether a domain may be looked up as a house on the public internet (not `localhost`, not an
/// address such as `127.0.0.1` or `2130706433`, not a private-use name). The operator's hosts file
/// can still name any domain.
pub fn check_house_domain(domain: &str) -> Result<(), Refusal> {
    match WebUrl::parse(&format!("https://{domain}/")).and_then(|u| u.host().cloned()) {
        Some(Host::Domain(name)) => check_public_name(&name),
        Some(Host::Ipv4(_) | Host::Ipv6(_)) => Err(Refusal("an address is not a house domain")),
        None => Err(Refusal("not a host name")),
    }
}

/// Whether `ip` is reachable on the public internet: not loopback, private (RFC 1918, CGNAT,
/// IPv6 ULA), link-local (which holds cloud metadata at 169.254.169.254), unspecified,
/// multicast, broadcast, documentation, benchmarking, IETF protocol assignments (Teredo among
/// them) or reserved; IPv4 inside IPv6 (mapped, compatible, NAT64, 6to4) is judged by the IPv4
/// address it carries.
pub fn ip_is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_is_public(v4),
        IpAddr::V6(v6) => v6_is_public(v6),
    }
}

fn v4_is_public(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let private = a == 0                                  // "this network"
        || a == 10                                        // RFC 1918
        || (a == 100 && (64..128).contains(&b))           // CGNAT, RFC 6598
        || a == 127                                       // loopback
        || (a == 169 && b == 254)                         // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))            // RFC 1918
        || (a == 192 && b == 0 && c == 0)                 // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)                 // TEST-NET-1
        || (a == 192 && b == 88 && c == 99)               // 6to4 relay anycast (deprecated)
        || (a == 192 && b == 168)                         // RFC 1918
        || (a == 198 && (b == 18 || b == 19))             // benchmarking
        || (a == 198 && b == 51 && c == 100)              // TEST-NET-2
        || (a == 203 && b == 0 && c == 113)               // TEST-NET-3
        || a >= 224; // multicast, reserved, broadcast
    !private
}

fn v6_is_public(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_is_public(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        // Unspecified, loopback, and the deprecated IPv4-compatible ::a.b.c.d.
        [0, 0, 0, 0, 0, 0, hi, lo] => hi != 0 && v4_is_public(embedded(hi, lo)),
        // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => v4_is_public(embedded(hi, lo)),
        // 6to4 (2002::/16) carries one in its second and third segments.
        [0x2002, hi, lo, ..] => v4_is_public(embedded(hi, lo)),
        [first, second, ..] => {
            let reserved = (first & 0xfe00) == 0xfc00           // unique local, fc00::/7
                || (first & 0xffc0) == 0xfe80                   // link-local, fe80::/10
                || (first & 0xffc0) == 0xfec0                   // site-local (deprecated)
                || (first & 0xff00) == 0xff00                   // multicast
                || (first == 0x2001 && second < 0x0200)         // IETF protocol assignments, 2001::/23
                                                                // (Teredo, benchmarking, ORCHID)
                || (first == 0x2001 && second == 0x0db8)        // documentation
                || (first == 0x3fff && second < 0x1000)         // documentation, 3fff::/20
                || first == 0x5f00                              // SRv6 SIDs, 5f00::/16
                || (first == 0x0100 && s[1..4] == [0, 0, 0])    // discard-only, 100::/64
                || (first == 0x64 && second == 0xff9b)          // local-use NAT64, 64:ff9b:1::/48
                || first == 0; // the rest of ::/16 is reserved
            !reserved
        }
    }
}

/// A [`Net`] behind the [`Policy`]: a refused URL never reaches the network, and fails with
/// [`PortError::Refused`] (permanent, unlike a transport failure).
#[derive(Debug, Clone)]
pub struct Guarded<N> {
    pub net: N,
    pub policy: Policy,
}

impl<N: Net> Net for Guarded<N> {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        self.policy.check(&request.url).map_err(|r| PortError::Refused(r.0.to_owned()))?;
        self.net.send(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> Policy {
        Policy::new(["http://127.0.0.1:8788", "https://dns.example/dns-query"], false, false)
    }

    #[test]
    fn learnt_urls_must_be_public_https() {
        let p = strict();
        for ok in ["https://mail.example.com/inbound", "https://93.184.216.34/", "https://[2606:4700::1111]/x"] {
            assert_eq!(p.check(ok), Ok(()), "{ok}");
        }
        let refused = [
            "http://mail.example.com/",    // plain http
            "https://127.0.0.1/",          // loopback
            "https://2130706433/",         // 127.0.0.1 as one number
            "https://0x7f.1/",             // 127.0.0.1 in hex and short form
            "https://0177.0.0.1/",         // octal
            "https://127.1/",              // short form
            "https://169.254.169.254/",    // cloud metadata
            "https://10.0.0.8/",           // RFC 1918
            "https://172.20.1.1/",         // RFC 1918
            "https://192.168.1.1/",        // RFC 1918
            "https://100.100.1.1/",        // CGNAT
            "https://0.0.0.0/",            // unspecified
            "https://[::1]/",              // IPv6 loopback
            "https://[::]/",               // unspecified
            "https://[fd00:ec2::254]/",    // ULA (AWS metadata over IPv6)
            "https://[fe80::1]/",          // link-local
            "https://[::ffff:127.0.0.1]/", // IPv4-mapped loopback
            "https://[::ffff:a9fe:a9fe]/", // IPv4-mapped metadata
            "https://[64:ff9b::a00:1]/",   // NAT64 of 10.0.0.1
            "https://[2002:7f00:1::]/",    // 6to4 of 127.0.0.1
            "https://localhost/",
            "https://api.localhost/",
            "https://printer.local/",
            "https://metadata.google.internal/",
            "https://metadata/", // one label: the search domain decides
            "https://nas.home.arpa./",
            "https://user:pw@mail.example.com/",
            "ftp://mail.example.com/",
            "not a url",
        ];
        for url in refused {
            assert!(p.check(url).is_err(), "{url} should be refused");
        }
    }

    /// Hosts are ASCII (docs/decisions/0037-ascii-hosts.md): `url` runs without a Unicode back
    /// end (`idna_adapter` 1.0, pinned in Cargo.lock), so a host written in Unicode is not a URL
    /// here, fullwidth digits never become an address, and the `xn--` form of the same name
    /// passes. Should the pin be lost, the first of these fails (and the Worker grows ~40 KB).
    #[test]
    fn hosts_are_ascii_or_not_urls() {
        let p = strict();
        for url in [
            "https://bücher.example/",
            "https://１２７.0.0.1/",
            "https://EX\u{AD}AMPLE.com/",
            "https://EX%C2%ADAMPLE.com/",
        ] {
            assert_eq!(p.check(url), Err(Refusal("not a URL")), "{url}");
            assert_eq!(p.check_learnt(url), Err(Refusal("not a URL")), "{url}");
        }
        assert_eq!(p.check("https://xn--bcher-kva.example/inbound"), Ok(()));
        // An `xn--` label is taken as written, even one whose Unicode a browser would refuse (a
        // right-to-left mark): a name like any other, which fetch will refuse; never a panic.
        assert_eq!(p.check("https://xn--3ug.example/"), Ok(()));
        assert_eq!(p.check("https://xn--a-ygn.example/"), Ok(()));
        assert_eq!(p.check("https://MAIL.Example.COM/inbound"), Ok(()));
        assert!(p.check("https://xn--zz.example/").is_err(), "a broken xn-- label");
    }

    #[test]
    fn the_operators_origins_may_be_anything_but_only_those_origins() {
        let p = strict();
        assert_eq!(p.check("http://127.0.0.1:8788/inbound"), Ok(()));
        assert!(p.check("http://127.0.0.1:8789/inbound").is_err(), "another port is another origin");
        assert!(p.check("https://127.0.0.1:8788/inbound").is_err(), "another scheme is another origin");
        assert_eq!(p.check("https://dns.example/dns-query?name=x"), Ok(()));
        assert!(p.operator_named("http://127.0.0.1:8788/x"));
        assert!(!p.operator_named("https://mail.example.com/"));
        assert!(p.allows_private_at("http", "127.0.0.1", 8788));
        assert!(!p.allows_private_at("http", "127.0.0.1", 8789));
        assert!(!p.allows_private_at("https", "127.0.0.1", 8788), "another scheme");
        assert!(p.allows_private_at("HTTPS", "DNS.example", 443));
        // A webhook gets no exemption: the operator's origins are for houses, DNS and email.
        assert!(p.check_learnt("http://127.0.0.1:8788/inbound").is_err());
        assert_eq!(p.check_learnt("https://hooks.example/x"), Ok(()));
    }

    #[test]
    fn test_setups_opt_out_explicitly() {
        let open = Policy::new([], true, true);
        assert_eq!(open.check("http://127.0.0.1:9/"), Ok(()));
        assert_eq!(open.check("http://a.test/inbound"), Ok(()));
        assert!(open.allows_private_at("http", "10.0.0.1", 80));
        let http_only = Policy::new([], false, true);
        assert_eq!(http_only.check("http://a.test/"), Ok(()));
        assert!(http_only.check("http://127.0.0.1/").is_err());
    }

    #[test]
    fn house_domains_are_public_names() {
        for ok in ["example.com", "a.test", "mail.example.co.uk", "xn--bcher-kva.example"] {
            assert_eq!(check_house_domain(ok), Ok(()), "{ok}");
        }
        for bad in ["localhost", "127.0.0.1", "2130706433", "0x7f000001", "printer.local", "x.internal", "box"] {
            assert!(check_house_domain(bad).is_err(), "{bad}");
        }
    }

    /// Each IPv4 range the policy refuses, at both of its ends, and the addresses just outside
    /// them, which are public (each written with zero octets where it can be, so that a rule
    /// matching on the wrong octets shows).
    #[test]
    fn every_private_ipv4_range_ends_where_it_should() {
        let ranges = [
            ("0.0.0.0", "0.255.255.255", None, Some("1.0.0.0")),
            ("10.0.0.0", "10.255.255.255", Some("9.255.255.255"), Some("11.0.0.0")),
            ("100.64.0.0", "100.127.255.255", Some("100.63.255.255"), Some("100.128.0.0")),
            ("127.0.0.0", "127.255.255.255", Some("126.255.255.255"), Some("128.0.0.0")),
            ("169.254.0.0", "169.254.255.255", Some("169.253.255.255"), Some("169.255.0.0")),
            ("172.16.0.0", "172.31.255.255", Some("172.15.255.255"), Some("172.32.0.0")),
            ("192.0.0.0", "192.0.0.255", Some("191.255.255.255"), Some("192.0.1.0")),
            ("192.0.2.0", "192.0.2.255", Some("192.0.1.255"), Some("192.0.3.0")),
            ("192.88.99.0", "192.88.99.255", Some("192.88.98.255"), Some("192.88.100.0")),
            ("192.168.0.0", "192.168.255.255", Some("192.167.255.255"), Some("192.169.0.0")),
            ("198.18.0.0", "198.19.255.255", Some("198.17.255.255"), Some("198.20.0.0")),
            ("198.51.100.0", "198.51.100.255", Some("198.51.99.255"), Some("198.51.101.0")),
            ("203.0.113.0", "203.0.113.255", Some("203.0.112.255"), Some("203.0.114.0")),
            ("224.0.0.0", "255.255.255.255", Some("223.255.255.255"), None),
        ];
        for (first, last, below, above) in ranges {
            for ip in [first, last] {
                assert!(!ip_is_public(ip.parse().unwrap()), "{ip} is in {first}–{last}");
            }
            for ip in [below, above].into_iter().flatten() {
                assert!(ip_is_public(ip.parse().unwrap()), "{ip} is outside {first}–{last}");
            }
        }
        // Octets that match a range's other octets elsewhere: only the whole prefix counts.
        for ip in ["1.0.0.5", "11.0.2.1", "8.88.99.1", "9.168.1.1", "8.18.0.1", "8.51.100.1", "8.0.113.1", "192.1.0.1"]
        {
            assert!(ip_is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    /// IPv6: each reserved block at its edges, and IPv4 carried inside IPv6 judged by the
    /// address it carries, public ones included (a rule that loses the carried address shows).
    #[test]
    fn every_reserved_ipv6_block_and_every_carried_ipv4_address() {
        let private = [
            "::",
            "::1",
            "::a00:1",
            "::ffff:a00:1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "fc00::",
            "fdff:ffff::1",
            "fe80::",
            "febf:ffff::1",
            "fec0::1",
            "feff::1",
            "ff00::",
            "ffff::1",
            "2001:db8::1",
            "2001:db8:ffff::1",
            "100::",
            "100::ffff:ffff:ffff:ffff",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2", // Teredo, carrying 192.0.2.45
            "2001:2::1",
            "2001:10::1",
            "2001:1ff:ffff::1",
            "3fff::1",
            "3fff:fff::1",
            "5f00::1",
            "64:ff9b:1::1",
            "0:1::1",
        ];
        for ip in private {
            assert!(!ip_is_public(ip.parse().unwrap()), "{ip} is reserved");
        }
        let public = [
            "::808:808",        // IPv4-compatible 8.8.8.8
            "::ffff:808:808",   // IPv4-mapped 8.8.8.8
            "64:ff9b::808:404", // NAT64 of 8.8.4.4
            "2002:808:808::1",  // 6to4 of 8.8.8.8
            "fbff:ffff::1",     // below fc00::/7
            "2001:db9::1",      // beside the documentation block
            "2001:200::1",      // past 2001::/23
            "2001:4860::8888",
            "db8::1",
            "100:0:0:1::1", // past 100::/64
            "101::",
            "3fff:1000::1",
            "5f01::1",
            "64:ff9a::1",
            "1::1",
        ];
        for ip in public {
            assert!(ip_is_public(ip.parse().unwrap()), "{ip} is public");
        }
    }

    #[test]
    fn a_learnt_url_with_only_a_user_name_is_refused_and_says_why() {
        let refused = strict().check_learnt("https://user@mail.example.com/").unwrap_err();
        assert_eq!(refused.to_string(), "a URL learnt from a peer must not carry credentials");
        assert!(strict().check_learnt("https://:pw@mail.example.com/").is_err());
    }

    #[test]
    fn addresses_by_range() {
        let public =
            ["1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0", "172.15.0.1", "172.32.0.1", "2606:4700::1"];
        for ip in public {
            assert!(ip_is_public(ip.parse().unwrap()), "{ip}");
        }
        let private = ["198.18.0.1", "192.0.2.1", "224.0.0.1", "255.255.255.255", "2001:db8::1", "ff02::1", "::7f00:1"];
        for ip in private {
            assert!(!ip_is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
