//! The client's resolver (spec §2, docs/SPEC.md §6.1): from a domain or an address to a verified
//! card, in the order a house uses — the hosts file, then the agent's own house for its own
//! domain, then the DNS TXT record `_nyx5.<domain>` over DNS-over-HTTPS, then the well-known URL
//! — verifying every chain (domain → agent → parent). Without an anchor (a hosts or DNS `sig`)
//! the domain key is pinned in the profile on first use and a different key later is refused.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;

use nyx5_house::config::HostEntry;
use nyx5_house::resolver::{DNS_PREFIX, MAX_DELEGATION_DEPTH, parse_doh};
use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::obj;
use nyx5_proto::sign::Signature;
use nyx5_proto::{Address, ErrorKind, Timestamp, Value, Verified, limits};

use super::http::{Transport, send};
use super::profile::Profile;
use crate::error::Failure;

/// A resolved domain: where its estafeta answers, its verified card, and how we know.
#[derive(Debug, Clone)]
pub(crate) struct Domain {
    pub(crate) url: String,
    pub(crate) card: Verified<DomainCard>,
    /// Where the URL came from: `hosts`, `url` (given), `profile`, `dns` or `well-known`.
    pub(crate) via: &'static str,
    /// What the card's key was checked against: `hosts`, `dns`, `pin`, `first-use` (pinned
    /// now) or `none` (no profile to pin it in).
    pub(crate) anchor: &'static str,
}

impl Domain {
    pub(crate) fn summary(&self) -> Value {
        let key = Signature::read(self.card.object(), "signature").map(|s| s.kid.to_b64()).unwrap_or_default();
        Value::Object(obj([
            ("domain", self.card.domain.as_str().into()),
            ("url", self.url.as_str().into()),
            ("via", self.via.into()),
            ("anchor", self.anchor.into()),
            ("key", key.into()),
        ]))
    }
}

/// Resolves and verifies cards, remembering them for the life of one command.
pub(crate) struct Resolver<'a> {
    net: &'a dyn Transport,
    hosts: &'a BTreeMap<String, HostEntry>,
    doh: Option<&'a str>,
    /// The acting agent's domain and house URL, if any.
    own: Option<(String, String)>,
    /// The profile that records pins (none when there is no profile file yet).
    profile: Option<PathBuf>,
    pins: RefCell<BTreeMap<String, String>>,
    /// Accept a changed domain key and pin it anew.
    repin: bool,
    now: Timestamp,
    domains: RefCell<BTreeMap<String, Domain>>,
    agents: RefCell<BTreeMap<String, Verified<AgentCard>>>,
    /// Houses named by URL on the command line: domain → URL, consulted after the hosts file.
    given: RefCell<BTreeMap<String, String>>,
}

impl std::fmt::Debug for Resolver<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").field("own", &self.own).finish_non_exhaustive()
    }
}

/// Options a resolver is built with.
#[derive(Debug)]
pub(crate) struct Setup<'a> {
    pub(crate) net: &'a dyn Transport,
    pub(crate) hosts: &'a BTreeMap<String, HostEntry>,
    pub(crate) doh: Option<&'a str>,
    pub(crate) own: Option<(String, String)>,
    pub(crate) profile: Option<(PathBuf, BTreeMap<String, String>)>,
    pub(crate) repin: bool,
    pub(crate) now: Timestamp,
}

impl std::fmt::Debug for dyn Transport + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transport")
    }
}

fn unverified(what: &str, e: &nyx5_proto::Error) -> Failure {
    match e.kind {
        k if k.is_temporary() => Failure::network(format!("{what}: {}", e.reason)),
        _ => Failure::rejected(format!("{what} does not verify: {}", e.reason)),
    }
}

impl<'a> Resolver<'a> {
    pub(crate) fn new(s: Setup<'a>) -> Resolver<'a> {
        let (profile, pins) = match s.profile {
            Some((p, pins)) => (Some(p), pins),
            None => (None, BTreeMap::new()),
        };
        Resolver {
            net: s.net,
            hosts: s.hosts,
            doh: s.doh,
            own: s.own,
            profile,
            pins: RefCell::new(pins),
            repin: s.repin,
            now: s.now,
            domains: RefCell::new(BTreeMap::new()),
            agents: RefCell::new(BTreeMap::new()),
            given: RefCell::new(BTreeMap::new()),
        }
    }

    /// Looks for `domain`'s card at `url` (a house the user named by its URL) unless the hosts
    /// file says otherwise. Nothing anchors it there: the key is pinned on first use.
    pub(crate) fn at(&self, domain: &str, url: &str) {
        self.given.borrow_mut().insert(domain.to_owned(), url.to_owned());
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.now
    }

    /// Where `domain`'s card is and the key it must be signed by, if known.
    fn locate(&self, domain: &str) -> Result<(String, Option<SigPublic>, &'static str), Failure> {
        if let Some(h) = self.hosts.get(domain) {
            return Ok((h.url.clone(), h.sig, "hosts"));
        }
        if let Some(url) = self.given.borrow().get(domain) {
            return Ok((url.clone(), None, "url"));
        }
        if let Some((d, url)) = &self.own
            && d == domain
        {
            return Ok((url.clone(), None, "profile"));
        }
        if let Some(doh) = self.doh {
            let sep = if doh.contains('?') { '&' } else { '?' };
            let url = format!("{doh}{sep}name={DNS_PREFIX}{domain}&type=TXT");
            let what = format!("DNS lookup of {DNS_PREFIX}{domain}");
            let (status, body) = send(self.net, "GET", &url, &[("accept", "application/dns-json")], &[], &what)
                .map_err(|f| {
                    f.hint("try again, or set NYX5_DOH=off to skip DNS, or name the house in a hosts file (--hosts)")
                })?;
            if status != 200 {
                return Err(Failure::network(format!(
                    "{what}: DNS-over-HTTPS answered {status}; try again, or set NYX5_DOH to another resolver"
                )));
            }
            match parse_doh(&body) {
                Ok(Some(record)) => return Ok((record.url, record.sig, "dns")),
                Ok(None) => {}
                Err(e) if e.kind == ErrorKind::Unavailable => {
                    return Err(Failure::network(format!("{what}: {}; try again later", e.reason)));
                }
                Err(e) => return Err(Failure::rejected(format!("{what}: {}", e.reason))),
            }
        }
        Ok((format!("https://{domain}"), None, "well-known"))
    }

    /// GET `url`: 2xx up to 64 KiB; 404/410 refused (exit 4); 3xx, 421, 429, 5xx and transport
    /// failures unavailable (exit 3).
    fn fetch(&self, url: &str, what: &str) -> Result<Vec<u8>, Failure> {
        let (status, body) = send(self.net, "GET", url, &[("accept", "application/json")], &[], what)?;
        match status {
            200..=299 if body.len() <= limits::MAX_DOCUMENT_BYTES => Ok(body),
            200..=299 => Err(Failure::rejected(format!("{what} is larger than a card may be"))),
            404 | 410 => Err(Failure::http(404, "not_found", format!("{what}: not found at {url}; check the address"))),
            300..=399 | 421 | 429 | 500.. => {
                Err(Failure::network(format!("{what}: {url} answered {status}; try again later")))
            }
            s => Err(Failure::http(s, "", format!("{what}: {url} answered {s}"))),
        }
    }

    /// The verified card of `domain` and where its estafeta answers.
    pub(crate) fn domain(&self, domain: &str) -> Result<Domain, Failure> {
        nyx5_proto::address::check_domain(domain)
            .map_err(|why| Failure::usage(format!("{domain:?} is not a domain: {why}")))?;
        if let Some(d) = self.domains.borrow().get(domain) {
            return Ok(d.clone());
        }
        let (located, anchor, via) = self.locate(domain)?;
        let what = format!("the domain card of {domain}");
        let body = self.fetch(&format!("{located}/.well-known/nyx5.json"), &what)?;
        let card = DomainCard::parse(&body).map_err(|e| Failure::rejected(format!("{what}: {}", e.reason)))?;
        if card.domain != domain {
            return Err(Failure::rejected(format!("{what} names another domain ({})", card.domain)));
        }
        let url = match &card.estafeta {
            e if via == "well-known" && (e.starts_with("https://") || e.starts_with("http://")) => {
                e.trim_end_matches('/').to_owned()
            }
            _ => located,
        };
        let card = card.verify(anchor.as_ref()).map_err(|e| unverified(&what, &e))?;
        let anchor_kind = match (anchor, via) {
            (Some(_), "dns") => "dns",
            (Some(_), _) => "hosts",
            (None, _) => self.check_pin(domain, &card)?,
        };
        let d = Domain { url, card, via, anchor: anchor_kind };
        self.domains.borrow_mut().insert(domain.to_owned(), d.clone());
        Ok(d)
    }

    /// Trust on first use: the key that signed the card against the profile's pin.
    fn check_pin(&self, domain: &str, card: &DomainCard) -> Result<&'static str, Failure> {
        let kid = Signature::read(card.object(), "signature")
            .map_err(|e| Failure::rejected(format!("the domain card of {domain}: {}", e.reason)))?
            .kid
            .to_b64();
        let pinned = self.pins.borrow().get(domain).cloned();
        match pinned {
            Some(p) if p == kid => return Ok("pin"),
            Some(p) if !self.repin => {
                return Err(Failure::rejected(format!(
                    "the key of {domain} changed since it was pinned ({p} then, {kid} now); if its house \
                     rotated its key on purpose, run `nyx5 resolve <address at {domain}> --repin`"
                )));
            }
            _ => {}
        }
        let Some(path) = &self.profile else { return Ok("none") };
        Profile::update(path, |p| {
            p.pins.insert(domain.to_owned(), kid.clone());
            Ok(())
        })?;
        self.pins.borrow_mut().insert(domain.to_owned(), kid);
        Ok("first-use")
    }

    /// The verified card of `address` (with its parents' for a subagent).
    pub(crate) fn agent(&self, address: &Address) -> Result<Verified<AgentCard>, Failure> {
        self.agent_at(address, 0)
    }

    fn agent_at(&self, address: &Address, depth: usize) -> Result<Verified<AgentCard>, Failure> {
        if let Some(c) = self.agents.borrow().get(address.as_str()) {
            return Ok(c.clone());
        }
        if depth > MAX_DELEGATION_DEPTH {
            return Err(Failure::rejected(format!("the delegation of {address} is nested too deep")));
        }
        let domain = self.domain(address.domain())?;
        let what = format!("the card of {address}");
        let body = self.fetch(&format!("{}/agents/{}", domain.url, address.local()), &what)?;
        let card = AgentCard::parse(&body).map_err(|e| Failure::rejected(format!("{what}: {}", e.reason)))?;
        if card.address != *address {
            return Err(Failure::rejected(format!("asked for the card of {address}, got {}", card.address)));
        }
        let card = self.verify_card(card, &domain, depth)?;
        self.agents.borrow_mut().insert(address.as_str().to_owned(), card.clone());
        Ok(card)
    }

    /// Verifies a card fetched from `domain` (a directory page, a registration answer), with
    /// its parent when it is delegated.
    pub(crate) fn verify_card(
        &self,
        card: AgentCard,
        domain: &Domain,
        depth: usize,
    ) -> Result<Verified<AgentCard>, Failure> {
        let what = format!("the card of {}", card.address);
        let parent = match (&card.delegation, card.address.parent()) {
            (Some(_), Some(p)) => Some(self.agent_at(&p, depth + 1).map_err(|f| f.context(&what))?),
            _ => None,
        };
        card.verify(&domain.card, parent.as_ref(), self.now).map_err(|e| unverified(&what, &e))
    }
}
