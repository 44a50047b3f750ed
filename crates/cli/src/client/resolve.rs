//! The client's side of the one resolver (`nyx5_client::resolver`, docs/SPEC.md §6.1): the same
//! order of sources, pinning and continuity as a house — the hosts file, then a house named by
//! URL or the agent's own house for its own domain, then the DNS TXT record `_nyx5.<domain>` over
//! DNS-over-HTTPS, then the well-known URL — with the pins kept in the profile ([`ProfilePins`])
//! and requests sent through the verb's blocking [`Transport`]. A verb is synchronous and
//! nothing here ever waits, so the resolver's futures are driven by [`block_on`] (the client
//! crate's, over its [`Blocking`] network).
//!
//! Verified cards are kept in the card file beside the profile (`nyx5_client::cards`, in
//! `<profile>.cards`) and verified again when read: within their five minutes they are used
//! without asking the network (as a house uses its cache); older ones are fetched anew.
//! [`Resolver::agent_or_kept`] (what `send` seals to) goes one step further: when that fetch
//! fails for a temporary reason (the house is down), a kept card still within its `valid_until`
//! (and `nyx5_client::cards::MAX_STALE_MS`) is used, and stderr says so.
//! The acting agent's own domain is never read from the file: its house is the one every verb
//! talks to, and its own card changes under it (`register`, `rotate-key`).
//!
//! A domain's key is pinned in the profile, and its card kept, only when the card came from
//! that domain's own chain: the one way in is the client crate's `ProfilePins::keep_domain`
//! (`nyx5_client::pins`), which takes a `ChainCard` that only the resolver makes. A house named
//! by a URL given for another purpose (`directory URL`, `search --index URL`, `app verify --catalogue URL`:
//! [`Resolver::at`]) serves that one command; whatever the server there claims to be, the
//! profile does not change.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use nyx5_client::hosts::HostEntry;
use nyx5_client::outbound::{Guarded, Policy};
use nyx5_client::ports::{Blocking, block_on};
use nyx5_client::resolver::{self as core, Memo, Resolved, Sources};
use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Error, ErrorKind, Refusal, Timestamp, Value, Verified};

use super::http::Transport;
use super::profile::Files;
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
    /// pin it in, or found at a URL given for another purpose with no pin to hold it to:
    /// nothing vouches that the house there is the domain's).
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

/// Pins kept in the profile file, and verified cards in the card file beside it (or, without a
/// profile, both for this command only): the client crate's, over the profile's [`Files`].
pub(crate) type ProfilePins = nyx5_client::pins::ProfilePins<Files>;

/// Resolves and verifies cards, remembering them for the life of one command and, verified, in
/// the card file.
pub(crate) struct Resolver<'a> {
    net: &'a dyn Transport,
    hosts: &'a nyx5_proto::vecmap::VecMap<String, HostEntry>,
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
    /// Cards fetched anew in this command for a key they did not accept: `<key> <kid>`. Each is
    /// fetched so once per command, however many envelopes name that key.
    refreshed: RefCell<std::collections::BTreeSet<String>>,
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
    pub(crate) hosts: &'a nyx5_proto::vecmap::VecMap<String, HostEntry>,
    pub(crate) doh: Option<&'a str>,
    pub(crate) own: Option<(String, String)>,
    pub(crate) profile: Option<(PathBuf, BTreeMap<String, String>)>,
    pub(crate) repin: bool,
    /// Read no kept card: every card as its house serves it now (`card`, `resolve`).
    pub(crate) fresh: bool,
    pub(crate) now: Timestamp,
}

/// A resolver's error as the client reports it: temporary → network (exit 3), not found → 404
/// (exit 4), a changed key → verification (exit 1) with what to do, the rest → verification.
fn failure(what: &str, domain: &str, e: &Error) -> Failure {
    let failure = match e.kind {
        ErrorKind::NotFound => Failure::http(404, e.name(), format!("{}; check the address", e.reason)),
        // Before the temporary ones: an internal error (the profile) is temporary on the wire,
        // but here it is the user's to fix, not the network's.
        ErrorKind::Internal => Failure::usage(format!("{what}: {}", e.reason)),
        k if k.is_temporary() => Failure::network(format!("{what}: {}", e.reason))
            .hint("try again later; set NYX5_DOH=off to skip DNS, or name the house in a hosts file (--hosts)"),
        _ if e.refusal() == Some(Refusal::PinMismatch) => {
            Failure::rejected(format!("{what} does not verify: {}", e.reason)).hint(format!(
                "if the house of {domain} rotated its key on purpose and you checked the new key, run \
                 `nyx5 resolve <address at {domain}> --repin`"
            ))
        }
        _ => Failure::rejected(format!("{what} does not verify: {}", e.reason)),
    };
    failure.named(e.name())
}

impl<'a> Resolver<'a> {
    /// For tests: a resolver with no profile, no DNS and no house of its own, reading nothing kept.
    #[cfg(test)]
    pub(crate) fn bare(
        net: &'a dyn Transport,
        hosts: &'a nyx5_proto::vecmap::VecMap<String, HostEntry>,
        now: Timestamp,
    ) -> Resolver<'a> {
        Resolver::new(Setup { net, hosts, doh: None, own: None, profile: None, repin: false, fresh: true, now })
    }

    pub(crate) fn new(s: Setup<'a>) -> Resolver<'a> {
        let (path, pins) = match s.profile {
            Some((p, pins)) => (Some(p), pins),
            None => (None, BTreeMap::new()),
        };
        let pins = ProfilePins::new(path.as_deref().map(Files::beside), pins, s.now.millis())
            .own_domain(s.own.as_ref().map(|(d, _)| d.clone()))
            .fresh(s.fresh || s.repin);
        for (d, h) in s.hosts.iter() {
            pins.name(d, &h.url);
        }
        Resolver {
            net: s.net,
            hosts: s.hosts,
            doh: s.doh,
            own: s.own,
            pins,
            repin: s.repin,
            now: s.now,
            memo: Memo::default(),
            given: RefCell::new(BTreeMap::new()),
            refreshed: RefCell::new(std::collections::BTreeSet::new()),
        }
    }

    /// Whether a card of `key` may still be fetched anew in this command for `kid` (once).
    fn first_refresh(&self, key: &str, kid: &SigPublic) -> bool {
        self.refreshed.borrow_mut().insert(format!("{key} {}", kid.to_b64()))
    }

    /// Looks for `domain`'s card at `url` (a house the user named by its URL for this command:
    /// its directory, index or catalogue, whose answer names `domain`) unless the hosts file says
    /// otherwise. The server there only says it is `domain`: its card is held to the domain's pin
    /// when the profile has one, and otherwise checked against nothing (anchor `none`); it is
    /// never pinned nor kept.
    pub(crate) fn at(&self, domain: &str, url: &str) {
        self.given.borrow_mut().insert(domain.to_owned(), url.to_owned());
        if !self.hosts.contains_key(domain) {
            self.pins.name(domain, url);
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.now
    }

    /// Runs `f` with the engine's resolver over this command's sources, pins and memo.
    fn with<T>(&self, f: impl AsyncFnOnce(&core::Resolver<'_, Guarded<Blocking<'a>>, &ProfilePins>) -> T) -> T {
        self.with_net(false, f)
    }

    /// As [`Resolver::with`]; `offline`, from kept cards alone, however old (see the client
    /// crate's `ProfilePins::cached`).
    fn with_net<T>(
        &self,
        offline: bool,
        f: impl AsyncFnOnce(&core::Resolver<'_, Guarded<Blocking<'a>>, &ProfilePins>) -> T,
    ) -> T {
        let mut known = nyx5_proto::vecmap::VecMap::new();
        if let Some((domain, url)) = &self.own {
            known.insert(domain.clone(), (url.clone(), "profile"));
        }
        let given: nyx5_proto::vecmap::VecMap<String, String> =
            self.given.borrow().iter().map(|(d, u)| (d.clone(), u.clone())).collect();
        // The user named these houses; what cards and DNS say is held to the outbound policy.
        let named = self
            .hosts
            .values()
            .map(|h| h.url.as_str())
            .chain(known.values().map(|(u, _)| u.as_str()))
            .chain(given.values().map(String::as_str));
        let policy = Policy::new(named.chain(self.doh), false, false);
        let net = Guarded { net: Blocking { net: self.net, offline }, policy };
        let r = core::Resolver {
            net: &net,
            budget: None,
            store: &self.pins,
            memo: &self.memo,
            sources: Sources { hosts: self.hosts, known: &known, given: &given, doh: self.doh, allow_http: false },
            repin: self.repin,
            now: self.now,
        };
        self.pins.set_stale(offline);
        let out = block_on(f(&r));
        self.pins.set_stale(false);
        out
    }

    /// The verified card of `domain` and where its estafeta answers.
    pub(crate) fn domain(&self, domain: &str) -> Result<Domain, Failure> {
        self.domain_for(domain, None)
    }

    /// As [`Resolver::domain`], to check something signed by `kid` (a notice): a kept card that
    /// does not accept `kid` — the domain rotated its key since — is fetched anew, once.
    pub(crate) fn domain_knowing(&self, domain: &str, kid: &SigPublic) -> Result<Domain, Failure> {
        self.domain_for(domain, Some(kid))
    }

    fn domain_for(&self, domain: &str, kid: Option<&SigPublic>) -> Result<Domain, Failure> {
        nyx5_proto::address::check_domain(domain)
            .map_err(|why| Failure::usage(format!("{domain:?} is not a domain: {why}")))?;
        let r = self
            .with(async |r| match kid {
                Some(kid) if self.first_refresh(domain, kid) => r.domain_knowing(domain, kid).await,
                _ => r.domain(domain, false).await,
            })
            .map_err(|e| failure(&format!("the domain card of {domain}"), domain, &e))?;
        let anchor = match r.anchor {
            "first-use" | "repin" if !self.pins.keeps() => "none",
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

    /// As [`Resolver::agent`], to check something signed by `kid` (an envelope): a kept card
    /// that does not accept `kid` — the agent rotated its key since — is fetched anew, once.
    pub(crate) fn agent_knowing(&self, address: &Address, kid: &SigPublic) -> Result<Verified<AgentCard>, Failure> {
        let once = self.first_refresh(address.as_str(), kid);
        self.with(async |r| if once { r.agent_knowing(address, kid).await } else { r.agent(address, false).await })
            .map(|c| (*c).clone())
            .map_err(|e| failure(&format!("the card of {address}"), address.domain(), &e))
    }

    /// As [`Resolver::agent`], and when the card cannot be fetched for a temporary reason (its
    /// house or DNS does not answer), the card kept from an earlier fetch if it still verifies
    /// now (its `valid_until` not passed) and is younger than `nyx5_client::cards::MAX_STALE_MS`,
    /// with the time it was fetched; stderr says so. Without one, the first failure, saying that nothing is kept.
    pub(crate) fn agent_or_kept(&self, address: &Address) -> Result<(Verified<AgentCard>, Option<Timestamp>), Failure> {
        let what = format!("the card of {address}");
        let e = match self.with(async |r| r.agent(address, false).await) {
            Ok(c) => return Ok(((*c).clone(), None)),
            Err(e) if e.kind.is_temporary() => e,
            Err(e) => return Err(failure(&what, address.domain(), &e)),
        };
        match self.with_net(true, async |r| r.agent(address, false).await) {
            Ok(c) => {
                let kept = [address.as_str(), address.domain()].into_iter().filter_map(|k| self.pins.used_stale(k));
                let at = Timestamp(kept.min().unwrap_or(self.now.millis()));
                let until = c.valid_until().map_or("no end".to_owned(), |u| format!("until {}", u.to_rfc3339()));
                eprintln!(
                    "nyx5: {what} could not be fetched now ({}); using the one verified at {} and kept since \
                     (valid {until})",
                    crate::sanitise::line(&e.reason),
                    at.to_rfc3339()
                );
                Ok(((*c).clone(), Some(at)))
            }
            Err(_) => Err(failure(&what, address.domain(), &e).hint(format!(
                "no card of {address} kept from an earlier contact is still valid, so nothing can be sealed for \
                 it until {} answers; try again later",
                address.domain()
            ))),
        }
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
        let f = failure("card", "x.test", &nyx5_proto::Refusal::UnknownAgent.because("gone"));
        assert_eq!(f.status(), Some(404));
        // The resolver's name is passed on (`--json`'s `error`).
        assert_eq!(f.to_value().as_object().and_then(|o| o.get("error")), Some(&Value::from("unknown_agent")));
        let f = failure("card", "x.test", &Error::new(ErrorKind::Unavailable, "down"));
        assert_eq!(f.code(), EXIT_NETWORK);
        // A broken profile is the user's to fix, not a forgery.
        let f = failure("card", "x.test", &Error::new(ErrorKind::Internal, "the profile: pinned keys unreadable"));
        assert_eq!((f.code(), hint(&f)), (EXIT_USAGE, None));
        // A changed key (by its name, whatever the words) says how to accept it once checked;
        // other refusals do not, even when their words mention a pin.
        let f = failure("card", "x.test", &Refusal::PinMismatch.because("signed by another key (A, now B)"));
        assert_eq!(f.code(), EXIT_REJECTED);
        assert!(hint(&f).is_some_and(|h| h.contains("--repin") && h.contains("x.test")), "{:?}", hint(&f));
        let f = failure("card", "x.test", &Refusal::UntrustedKey.because("certification does not verify (pinned)"));
        assert_eq!((f.code(), hint(&f)), (EXIT_REJECTED, None));
    }

    #[test]
    fn without_a_profile_nothing_is_pinned_and_the_anchor_says_so() {
        let now = Timestamp(1_800_000_000_000);
        let key = SigningKey::from_seed([40; 32]);
        let net = HouseB::serving(&domain_card(&key, now));
        let hosts = nyx5_proto::vecmap::VecMap::new();
        let res = Resolver::bare(&net, &hosts, now);
        res.at("b.test", "http://b");
        let d = res.domain("b.test").unwrap();
        assert_eq!((d.via, d.anchor), ("url", "none"));
    }

    /// A house named by URL for another purpose (`directory URL`…) is used for the command:
    /// without a pin it is checked against nothing and pins nothing, keeps nothing; with one it
    /// is held to it, and the pin stays.
    #[test]
    fn a_house_named_by_url_pins_and_keeps_nothing_and_is_held_to_the_pin() {
        let now = Timestamp(NOW);
        let dir = std::env::temp_dir().join(format!("nyx5-given-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let profile = dir.join("agents.json");
        let (served, other) = (SigningKey::from_seed([40; 32]), SigningKey::from_seed([41; 32]));
        let net = HouseB::serving(&domain_card(&served, now));
        let hosts = nyx5_proto::vecmap::VecMap::new();
        let resolver = |pins: BTreeMap<String, String>| {
            Resolver::new(Setup {
                net: &net,
                hosts: &hosts,
                doh: None,
                own: None,
                profile: Some((profile.clone(), pins)),
                repin: false,
                fresh: false,
                now,
            })
        };
        let res = resolver(BTreeMap::new());
        res.at("b.test", "http://b");
        let d = res.domain("b.test").unwrap();
        assert_eq!((d.via, d.anchor), ("url", "none"));
        assert!(res.pins.pins().is_empty());
        assert!(!profile.exists(), "nothing is written to the profile");
        assert!(nyx5_client::cards::load(&Files::beside(&profile)).is_empty(), "nothing is kept");

        // Pinned to another key (from the domain's own chain, earlier): refused, pin unchanged.
        let pinned = BTreeMap::from([("b.test".to_owned(), other.public().to_b64())]);
        let res = resolver(pinned.clone());
        res.at("b.test", "http://b");
        let f = res.domain("b.test").unwrap_err();
        assert_eq!(f.code(), EXIT_REJECTED);
        assert!(f.one_line().contains("URL given") && !f.one_line().contains("--repin"), "{}", f.one_line());
        assert_eq!(res.pins.pins(), pinned);
        // Pinned to the key it serves: held to it and passes, still keeping nothing.
        let res = resolver(BTreeMap::from([("b.test".to_owned(), served.public().to_b64())]));
        res.at("b.test", "http://b");
        assert_eq!(res.domain("b.test").unwrap().anchor, "pin");
        assert!(!profile.exists() && nyx5_client::cards::load(&Files::beside(&profile)).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    const NOW: i64 = 1_800_000_000_000;
    // The kept cards' rules (five minutes, the offline try, the own domain) are the client
    // crate's, tested there over an in-memory store (`nyx5_client::pins`).
}
