//! The client's side of the one resolver (`nyx5_house::resolver`, docs/SPEC.md §6.1): the same
//! order of sources, pinning and continuity as a house — the hosts file, then a house named by
//! URL or the agent's own house for its own domain, then the DNS TXT record `_nyx5.<domain>` over
//! DNS-over-HTTPS, then the well-known URL — with the pins kept in the profile ([`ProfilePins`])
//! and requests sent through the verb's blocking [`Transport`]. A verb is synchronous and
//! nothing here ever waits, so the resolver's futures are driven by [`block_on`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use nyx5_house::config::HostEntry;
use nyx5_house::outbound::{Guarded, Policy};
use nyx5_house::ports::{Net, OutRequest, OutResponse, PortError};
use nyx5_house::resolver::{self as core, CacheEntry, CachedCard, Memo, PinStore, Resolved, Sources};
use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Error, ErrorKind, Timestamp, Value, Verified};

use super::http::Transport;
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
    /// now), `rotation` (followed the pinned key's handover), `repin`, or `none` (no profile to
    /// pin it in).
    pub(crate) anchor: &'static str,
}

impl Domain {
    pub(crate) fn summary(&self) -> Value {
        let key = self.card.signer().map(|k| k.to_b64()).unwrap_or_default();
        Value::Object(obj([
            ("domain", self.card.domain().into()),
            ("url", self.url.as_str().into()),
            ("via", self.via.into()),
            ("anchor", self.anchor.into()),
            ("key", key.into()),
        ]))
    }

    fn resolved(&self) -> Resolved {
        Resolved { url: self.url.clone(), card: Arc::new(self.card.clone()), via: self.via, anchor: self.anchor }
    }
}

/// Runs a future that never waits (the client's network and pin store answer at once).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// The engine's `Net` port over a verb's blocking [`Transport`].
#[derive(Clone, Copy)]
struct TransportNet<'a>(&'a dyn Transport);

impl Net for TransportNet<'_> {
    async fn send(&self, r: OutRequest) -> Result<OutResponse, PortError> {
        let headers: Vec<(&str, &str)> = r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.0
            .call(&r.method, &r.url, &headers, &r.body)
            .map(|(status, body)| OutResponse { status, body })
            .map_err(PortError::Failed)
    }
}

/// Pins kept in the profile file (or, without a profile, for this command only). The client
/// keeps no card cache between commands and no pending keys: a refused key is reported.
#[derive(Debug)]
pub(crate) struct ProfilePins {
    path: Option<PathBuf>,
    pins: RefCell<BTreeMap<String, String>>,
}

fn profile_error(f: &Failure) -> Error {
    Error::new(ErrorKind::Internal, format!("the profile: {}", f.one_line()))
}

impl ProfilePins {
    /// Writes `domain → to` when the pin is `from` (or absent, for `None`); whether it did.
    fn set(&self, domain: &str, from: Option<&SigPublic>, to: &SigPublic) -> Result<bool, Error> {
        let (from, to) = (from.map(SigPublic::to_b64), to.to_b64());
        let matches = |p: &BTreeMap<String, String>| p.get(domain).cloned() == from;
        let done = match &self.path {
            Some(path) => Profile::update(path, |p| {
                let ok = matches(&p.pins);
                if ok {
                    p.pins.insert(domain.to_owned(), to.clone());
                }
                Ok(ok)
            })
            .map_err(|f| profile_error(&f))?,
            None => matches(&self.pins.borrow()),
        };
        if done {
            self.pins.borrow_mut().insert(domain.to_owned(), to);
        }
        Ok(done)
    }
}

impl PinStore for &ProfilePins {
    async fn pin(&self, domain: &str) -> Result<Option<SigPublic>, Error> {
        Ok(self.pins.borrow().get(domain).and_then(|k| SigPublic::parse(k).ok()))
    }

    async fn first_pin(&self, domain: &str, key: &SigPublic, _: CacheEntry<'_>) -> Result<bool, Error> {
        self.set(domain, None, key)
    }

    async fn move_pin(&self, domain: &str, from: &SigPublic, to: &SigPublic, _: CacheEntry<'_>) -> Result<bool, Error> {
        self.set(domain, Some(from), to)
    }

    async fn refuse(&self, _: &str, _: &SigPublic, _: i64) -> Result<(), Error> {
        Ok(())
    }

    async fn cached(&self, _: &str, _: i64) -> Result<Option<CachedCard>, Error> {
        Ok(None)
    }

    async fn cache(&self, _: CacheEntry<'_>) -> Result<(), Error> {
        Ok(())
    }
}

/// Resolves and verifies cards, remembering them for the life of one command.
pub(crate) struct Resolver<'a> {
    net: TransportNet<'a>,
    hosts: &'a BTreeMap<String, HostEntry>,
    doh: Option<&'a str>,
    /// The acting agent's domain and house URL, if any.
    own: Option<(String, String)>,
    pins: ProfilePins,
    /// Accept a changed domain key and pin it anew.
    repin: bool,
    now: Timestamp,
    memo: Memo,
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

/// A resolver's error as the client reports it: temporary → network (exit 3), not found → 404
/// (exit 4), a changed key → verification (exit 1) with what to do, the rest → verification.
fn failure(what: &str, domain: &str, e: &Error) -> Failure {
    match e.kind {
        ErrorKind::NotFound => Failure::http(404, "not_found", format!("{}; check the address", e.reason)),
        // Before the temporary ones: an internal error (the profile) is temporary on the wire,
        // but here it is the user's to fix, not the network's.
        ErrorKind::Internal => Failure::usage(format!("{what}: {}", e.reason)),
        k if k.is_temporary() => Failure::network(format!("{what}: {}", e.reason))
            .hint("try again later; set NYX5_DOH=off to skip DNS, or name the house in a hosts file (--hosts)"),
        _ if e.reason.contains("pinned") => {
            Failure::rejected(format!("{what} does not verify: {}", e.reason)).hint(format!(
                "if the house of {domain} rotated its key on purpose and you checked the new key, run \
                 `nyx5 resolve <address at {domain}> --repin`"
            ))
        }
        _ => Failure::rejected(format!("{what} does not verify: {}", e.reason)),
    }
}

impl<'a> Resolver<'a> {
    pub(crate) fn new(s: Setup<'a>) -> Resolver<'a> {
        let (path, pins) = match s.profile {
            Some((p, pins)) => (Some(p), pins),
            None => (None, BTreeMap::new()),
        };
        Resolver {
            net: TransportNet(s.net),
            hosts: s.hosts,
            doh: s.doh,
            own: s.own,
            pins: ProfilePins { path, pins: RefCell::new(pins) },
            repin: s.repin,
            now: s.now,
            memo: Memo::default(),
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

    /// Runs `f` with the engine's resolver over this command's sources, pins and memo.
    fn with<T>(&self, f: impl AsyncFnOnce(&core::Resolver<'_, Guarded<TransportNet<'a>>, &ProfilePins>) -> T) -> T {
        let mut known = BTreeMap::new();
        if let Some((domain, url)) = &self.own {
            known.insert(domain.clone(), (url.clone(), "profile"));
        }
        for (domain, url) in self.given.borrow().iter() {
            known.insert(domain.clone(), (url.clone(), "url"));
        }
        // The user named these houses; what cards and DNS say is held to the outbound policy.
        let named = self.hosts.values().map(|h| h.url.as_str()).chain(known.values().map(|(u, _)| u.as_str()));
        let policy = Policy::new(named.chain(self.doh), false, false);
        let net = Guarded { net: self.net, policy };
        let r = core::Resolver {
            net: &net,
            store: &self.pins,
            memo: &self.memo,
            sources: Sources { hosts: self.hosts, known: &known, doh: self.doh, allow_http: false },
            repin: self.repin,
            now: self.now,
        };
        block_on(f(&r))
    }

    /// The verified card of `domain` and where its estafeta answers.
    pub(crate) fn domain(&self, domain: &str) -> Result<Domain, Failure> {
        nyx5_proto::address::check_domain(domain)
            .map_err(|why| Failure::usage(format!("{domain:?} is not a domain: {why}")))?;
        let r = self
            .with(async |r| r.domain(domain, false).await)
            .map_err(|e| failure(&format!("the domain card of {domain}"), domain, &e))?;
        let anchor = match r.anchor {
            "first-use" | "repin" if self.pins.path.is_none() => "none",
            a => a,
        };
        Ok(Domain { url: r.url, card: (*r.card).clone(), via: r.via, anchor })
    }

    /// The verified card of `address` (with its parents' for a subagent).
    pub(crate) fn agent(&self, address: &Address) -> Result<Verified<AgentCard>, Failure> {
        self.with(async |r| r.agent(address, false).await)
            .map(|c| (*c).clone())
            .map_err(|e| failure(&format!("the card of {address}"), address.domain(), &e))
    }

    /// Verifies a card fetched from `domain` (a directory page, a registration answer), with
    /// its parent when it is delegated.
    pub(crate) fn verify_card(&self, card: AgentCard, domain: &Domain) -> Result<Verified<AgentCard>, Failure> {
        let what = format!("the card of {}", card.address());
        let resolved = domain.resolved();
        self.with(async |r| r.verify_card(card, &resolved).await).map_err(|e| failure(&what, domain.card.domain(), &e))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use nyx5_proto::crypto::SigningKey;

    use super::*;
    use crate::client::testing::{HouseB, domain_card};
    use crate::error::{EXIT_NETWORK, EXIT_REJECTED, EXIT_USAGE};

    fn hint(f: &Failure) -> Option<String> {
        f.to_value().as_object().and_then(|o| o.get("hint")).and_then(Value::as_str).map(str::to_owned)
    }

    #[test]
    fn each_kind_of_resolver_error_is_reported_as_what_it_is() {
        let f = failure("card", "x.test", &Error::new(ErrorKind::NotFound, "gone"));
        assert_eq!(f.status(), Some(404));
        let f = failure("card", "x.test", &Error::new(ErrorKind::Unavailable, "down"));
        assert_eq!(f.code(), EXIT_NETWORK);
        // A broken profile is the user's to fix, not a forgery.
        let f = failure("card", "x.test", &Error::new(ErrorKind::Internal, "the profile: pinned keys unreadable"));
        assert_eq!((f.code(), hint(&f)), (EXIT_USAGE, None));
        // A changed key says how to accept it once checked; other refusals do not.
        let f = failure("card", "x.test", &Error::forbidden("signed by another key (pinned A, now B)"));
        assert_eq!(f.code(), EXIT_REJECTED);
        assert!(hint(&f).is_some_and(|h| h.contains("--repin") && h.contains("x.test")), "{:?}", hint(&f));
        let f = failure("card", "x.test", &Error::forbidden("certification does not verify"));
        assert_eq!((f.code(), hint(&f)), (EXIT_REJECTED, None));
    }

    #[test]
    fn without_a_profile_nothing_is_pinned_and_the_anchor_says_so() {
        let now = Timestamp(1_800_000_000_000);
        let key = SigningKey::from_seed([40; 32]);
        let net = HouseB::serving(&domain_card(&key, now));
        let hosts = BTreeMap::new();
        let res =
            Resolver::new(Setup { net: &net, hosts: &hosts, doh: None, own: None, profile: None, repin: false, now });
        res.at("b.test", "http://b");
        let d = res.domain("b.test").unwrap();
        assert_eq!((d.via, d.anchor), ("url", "none"));
    }
}
