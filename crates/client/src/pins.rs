//! The pins an agent's client keeps in its profile (docs/SPEC.md, "Client profile": `pins`,
//! domain → the Ed25519 key found on the domain's own chain), and the resolver's [`PinStore`]
//! over them and over the kept cards ([`crate::cards`]), all through the storage port
//! ([`Store`]): what `nyx5` keeps in its files and what the browser's export and import read.
//!
//! A domain's key is pinned, and its card kept, only when the card came from that domain's own
//! chain: the one way in is `ProfilePins::keep_domain`, which takes a [`ChainCard`] that only
//! the resolver makes. A pin moves only while it is what the caller read ([`set`], under the
//! store's lock). Kept cards are read within their five minutes, or, when the caller asks for the
//! offline try ([`ProfilePins::set_stale`]), up to [`MAX_STALE_MS`]; never those of the acting
//! agent's own domain, nor a domain card kept from a URL other than the one the caller names.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Error, ErrorKind, Refusal};

use crate::cards::{self, Kept, MAX_STALE_MS};
use crate::profile::{KIND, SLOT, VERSION};
use crate::resolver::{CacheEntry, CachedCard, ChainCard, PinStore};
use crate::store::Store;

/// The pins of a profile (its `pins` member, absent for none): domain → key, each key read as an
/// Ed25519 public key. Refused as `bad_profile` when a pin is not a string, and as the key's own
/// refusal, named after its domain, when it is not a key.
pub fn read(o: Option<&Object>) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for (domain, key) in o.into_iter().flatten() {
        let key = key.as_str().ok_or_else(|| Refusal::BadProfile.because("pins are domain → key strings"))?;
        SigPublic::parse(key).map_err(|e| {
            let reason = format!("pin of {domain}: {}", e.reason);
            e.with_reason(reason)
        })?;
        out.insert(domain.clone(), key.to_owned());
    }
    Ok(out)
}

/// The `pins` member of `pins`.
pub fn to_value(pins: &BTreeMap<String, String>) -> Value {
    Value::Object(pins.iter().map(|(d, k)| (d.clone(), Value::from(k.as_str()))).collect())
}

/// Pins `to` for `domain` in the profile kept in `store`, only while its pin there is `from`
/// (absent, for `None`), under the store's lock; a missing profile is created holding the pin
/// alone. Whether it was written. The rest of the profile is written back as it was read.
pub fn set(store: &impl Store, domain: &str, from: Option<&str>, to: &str) -> Result<bool, Error> {
    store.update(&SLOT, |doc| {
        let mut profile = match doc? {
            Some(Value::Object(o)) => o,
            Some(_) => return Err(Refusal::BadProfile.because("a profile is a JSON object")),
            None => obj([("agents", Value::Array(Vec::new())), ("kind", KIND.into()), ("nyx5", VERSION.into())]),
        };
        if field::str(&profile, "nyx5")? != VERSION {
            return Err(Refusal::BadProfile.because(format!("`nyx5` must be {VERSION:?}")));
        }
        if field::str(&profile, "kind")? != KIND {
            return Err(Refusal::BadProfile.because(format!("`kind` must be {KIND:?}")));
        }
        let mut pins = read(field::opt_object(&profile, "pins")?)?;
        if pins.get(domain).map(String::as_str) != from {
            return Ok((None, false));
        }
        pins.insert(domain.to_owned(), to.to_owned());
        profile.insert("pins".into(), to_value(&pins));
        Ok((Some(Value::Object(profile)), true))
    })
}

/// Pins kept in the profile, and verified cards kept beside it, in a [`Store`] (or, without one,
/// both for this run only). No pending keys: a refused key is reported.
#[derive(Debug)]
pub struct ProfilePins<S> {
    store: Option<S>,
    pins: RefCell<BTreeMap<String, String>>,
    /// The kept cards as read once per run (and as written since).
    kept: RefCell<Option<BTreeMap<String, Kept>>>,
    /// Read no kept card of this domain or its agents (the acting agent's own).
    own_domain: Option<String>,
    /// Where the caller says domains answer (a hosts file, a URL given): a kept domain card from
    /// elsewhere is not read.
    named: RefCell<BTreeMap<String, String>>,
    /// Read no kept card at all (the card as it is now).
    fresh: bool,
    /// Hand out kept cards past their five minutes (up to [`MAX_STALE_MS`]).
    stale: Cell<bool>,
    /// Kept cards handed out past their five minutes: key → when they were fetched.
    used_stale: RefCell<BTreeMap<String, i64>>,
    now: i64,
}

impl<S: Store> ProfilePins<S> {
    /// Pins as `pins` (the profile's, as read), kept in `store` when there is one, at `now` (ms).
    pub fn new(store: Option<S>, pins: BTreeMap<String, String>, now: i64) -> ProfilePins<S> {
        ProfilePins {
            store,
            pins: RefCell::new(pins),
            kept: RefCell::new(None),
            own_domain: None,
            named: RefCell::new(BTreeMap::new()),
            fresh: false,
            stale: Cell::new(false),
            used_stale: RefCell::new(BTreeMap::new()),
            now,
        }
    }

    /// Reads no kept card of `domain` or its agents (the acting agent's own: its house is the one
    /// every verb talks to, and its own card changes under it).
    pub fn own_domain(mut self, domain: Option<String>) -> ProfilePins<S> {
        self.own_domain = domain;
        self
    }

    /// Reads no kept card at all (`fresh`): every card as its house serves it now.
    pub fn fresh(mut self, fresh: bool) -> ProfilePins<S> {
        self.fresh = fresh;
        self
    }

    /// That `domain` answers at `url` (a hosts file, a URL given for this run): a kept domain card
    /// fetched elsewhere is not read.
    pub fn name(&self, domain: &str, url: &str) {
        self.named.borrow_mut().insert(domain.to_owned(), url.to_owned());
    }

    /// Whether kept cards older than five minutes are handed out (the offline try).
    pub fn set_stale(&self, stale: bool) {
        self.stale.set(stale);
    }

    /// When the kept card of `key` handed out past its five minutes was fetched.
    pub fn used_stale(&self, key: &str) -> Option<i64> {
        self.used_stale.borrow().get(key).copied()
    }

    /// The pins as they are now (as read, and as pinned since).
    pub fn pins(&self) -> BTreeMap<String, String> {
        self.pins.borrow().clone()
    }

    /// Whether pins and cards outlive the run (there is a store).
    pub fn keeps(&self) -> bool {
        self.store.is_some()
    }

    /// The one way a domain card reaches the profile: with `pin`, the pin of its domain moved
    /// from `from` (or set where there is none, for `None`) to `to`, guarded by the pin as it is
    /// kept ([`set`]); then the card kept (when the pin was written, or without `pin`). Only a
    /// card found on the domain's own chain gets here ([`ChainCard`]). Whether the pin was
    /// written.
    fn keep_domain(&self, pin: Option<(Option<&SigPublic>, &SigPublic)>, card: ChainCard<'_>) -> Result<bool, Error> {
        let done = match pin {
            Some((from, to)) => self.set(&card, from, to)?,
            None => true,
        };
        if done {
            self.keep(&card.entry());
        }
        Ok(done)
    }

    /// Writes `domain → to`, for the domain of `card`, when the pin is `from` (or absent, for
    /// `None`); whether it did. A store that cannot be changed is the profile's error (internal:
    /// the user's to fix).
    fn set(&self, card: &ChainCard<'_>, from: Option<&SigPublic>, to: &SigPublic) -> Result<bool, Error> {
        let domain = card.entry().key;
        let (from, to) = (from.map(SigPublic::to_b64), to.to_b64());
        let done = match &self.store {
            Some(store) => set(store, domain, from.as_deref(), &to)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("the profile: {}", e.reason)))?,
            None => self.pins.borrow().get(domain).cloned() == from,
        };
        if done {
            self.pins.borrow_mut().insert(domain.to_owned(), to);
        }
        Ok(done)
    }

    /// The kept cards, read from the store on first use.
    fn kept(&self) -> std::cell::RefMut<'_, Option<BTreeMap<String, Kept>>> {
        let mut kept = self.kept.borrow_mut();
        if kept.is_none() {
            *kept = Some(self.store.as_ref().map(cards::load).unwrap_or_default());
        }
        kept
    }

    /// Whether kept cards under `key` (a domain or an address) may be read.
    fn readable(&self, key: &str) -> bool {
        let domain = key.rsplit_once('@').map_or(key, |(_, d)| d);
        !self.fresh && self.own_domain.as_deref() != Some(domain)
    }

    /// Keeps a verified card: in memory, and in the store when there is one. A store that cannot
    /// be written costs nothing but the cache.
    fn keep(&self, c: &CacheEntry<'_>) {
        let kept = Kept { card: c.card.to_owned(), url: c.url.to_owned(), at: c.at };
        let written = self.store.as_ref().map(|s| cards::put(s, c.key, kept.clone()));
        let mut now = self.kept();
        match written {
            Some(Ok(all)) => *now = Some(all),
            _ => cards::keep(now.get_or_insert_default(), c.key, kept),
        }
    }
}

impl<S: Store> PinStore for &ProfilePins<S> {
    async fn pin(&self, domain: &str) -> Result<Option<SigPublic>, Error> {
        Ok(self.pins.borrow().get(domain).and_then(|k| SigPublic::parse(k).ok()))
    }

    async fn first_pin(&self, domain: &str, key: &SigPublic, card: ChainCard<'_>) -> Result<bool, Error> {
        debug_assert_eq!(domain, card.entry().key);
        self.keep_domain(Some((None, key)), card)
    }

    async fn move_pin(
        &self,
        domain: &str,
        from: &SigPublic,
        to: &SigPublic,
        card: ChainCard<'_>,
    ) -> Result<bool, Error> {
        debug_assert_eq!(domain, card.entry().key);
        self.keep_domain(Some((Some(from), to)), card)
    }

    async fn refuse(&self, _: &str, _: &SigPublic, _: i64) -> Result<(), Error> {
        Ok(())
    }

    /// A kept card fetched after `fresh_after` — or, on the offline try, any kept card younger
    /// than [`MAX_STALE_MS`]; the resolver verifies it again (`valid_until` included) and holds
    /// a kept domain card to the domain's pin, which this answers with it.
    async fn cached(&self, key: &str, fresh_after: i64) -> Result<Option<CachedCard>, Error> {
        if !self.readable(key) {
            return Ok(None);
        }
        let Some(k) = self.kept().as_ref().and_then(|m| m.get(key)).cloned() else { return Ok(None) };
        let fresh = k.at > fresh_after;
        if k.at > self.now || !(fresh || self.stale.get() && self.now - k.at < MAX_STALE_MS) {
            return Ok(None);
        }
        if self.named.borrow().get(key).is_some_and(|url| url.trim_end_matches('/') != k.url) {
            return Ok(None);
        }
        if !fresh {
            self.used_stale.borrow_mut().insert(key.to_owned(), k.at);
        }
        let pin = if key.contains('@') { None } else { self.pins.borrow().get(key).cloned() };
        Ok(Some(CachedCard { card: k.card, url: k.url, at: k.at, pin }))
    }

    /// Keeps an agent card (the resolver verifies it again, against its domain as resolved
    /// then, when it is read). A domain card comes through `ProfilePins::keep_domain` alone.
    async fn cache(&self, card: CacheEntry<'_>) -> Result<(), Error> {
        if card.key.contains('@') {
            self.keep(&card);
        }
        Ok(())
    }

    async fn cache_domain(&self, card: ChainCard<'_>) -> Result<(), Error> {
        self.keep_domain(None, card).map(drop)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use nyx5_proto::crypto::SigningKey;
    use nyx5_proto::limits::CARD_CACHE_MS;

    use super::*;
    use crate::ports::block_on;
    use crate::store::Memory;

    const NOW: i64 = 1_800_000_000_000;
    const MINUTE: i64 = 60_000;

    fn key(n: u8) -> String {
        SigningKey::from_seed([n; 32]).public().to_b64()
    }

    /// Over an in-memory port: a pin is written only while it is what the caller read, a
    /// missing profile is created with the pin alone, the rest of a profile is written back as
    /// it was, and a profile that is not one is refused, unchanged.
    #[test]
    fn a_pin_moves_only_from_what_was_read_and_the_profile_keeps_the_rest() {
        let store = Memory::default();
        assert!(set(&store, "b.test", None, &key(1)).unwrap(), "first use");
        let doc = store.read(&SLOT).unwrap().unwrap();
        let o = doc.as_object().unwrap();
        assert_eq!(read(field::opt_object(o, "pins").unwrap()).unwrap(), BTreeMap::from([("b.test".into(), key(1))]));
        assert_eq!(field::array(o, "agents").unwrap().len(), 0);
        assert!(!set(&store, "b.test", None, &key(2)).unwrap(), "pinned already: no first use");
        assert!(!set(&store, "b.test", Some(&key(3)), &key(2)).unwrap(), "moved from another key: refused");
        assert!(set(&store, "b.test", Some(&key(1)), &key(2)).unwrap(), "a rotation from the pin");

        // What the profile holds besides its pins is written back as it was.
        let mut o = store.read(&SLOT).unwrap().unwrap().as_object().unwrap().clone();
        o.insert("apps".into(), Value::Object(obj([("x", "y".into())])));
        store.put_bytes(&SLOT, Value::Object(o.clone()).canonical());
        assert!(set(&store, "c.test", None, &key(4)).unwrap());
        let after = store.read(&SLOT).unwrap().unwrap().as_object().unwrap().clone();
        assert_eq!(after.get("apps"), o.get("apps"));
        assert_eq!(read(field::opt_object(&after, "pins").unwrap()).unwrap().len(), 2);

        // Not a profile, or a broken pin: refused by name, nothing written.
        let other = obj([("nyx5", "1".into()), ("kind", "card-cache".into())]);
        store.put_bytes(&SLOT, Value::Object(other).canonical());
        let e = set(&store, "d.test", None, &key(5)).unwrap_err();
        assert_eq!(e.name(), Refusal::BadProfile.name());
        let broken = obj([("pins", Value::Object(obj([("b.test", Value::Bool(true))])))]);
        assert_eq!(read(Some(&broken)).unwrap_err().reason, "pins are domain → key strings");
        let bad = obj([("b.test", "nope".into())]);
        assert!(read(Some(&bad)).unwrap_err().reason.starts_with("pin of b.test: "));
    }

    fn pins(store: &Memory) -> ProfilePins<&Memory> {
        let p = ProfilePins::new(Some(store), BTreeMap::from([("b.test".to_owned(), key(1))]), NOW)
            .own_domain(Some("a.test".into()));
        p.name("c.test", "http://c");
        p
    }

    fn kept(p: &ProfilePins<&Memory>, key: &str) -> bool {
        block_on((&p).cached(key, NOW - CARD_CACHE_MS)).unwrap().is_some()
    }

    /// Over an in-memory port: kept cards are read within their five minutes, or on the offline
    /// try up to [`MAX_STALE_MS`]; never the acting agent's own domain's, nor a domain card from
    /// elsewhere than where the caller says it answers; another run reads what this one kept.
    #[test]
    fn kept_cards_are_read_within_five_minutes_or_offline_and_never_for_the_own_domain() {
        let store = Memory::default();
        let p = pins(&store);
        for (key, url, age) in [
            ("bo@b.test", "http://b", MINUTE),
            ("old@b.test", "http://b", 10 * MINUTE),
            ("ancient@b.test", "http://b", MAX_STALE_MS + MINUTE),
            ("yesterday@b.test", "http://b", 24 * 60 * MINUTE),
            ("me@a.test", "http://a", MINUTE),
            ("b.test", "http://b", MINUTE),
            ("c.test", "http://elsewhere", MINUTE),
        ] {
            p.keep(&CacheEntry { key, card: "{}", url, at: NOW - age });
        }
        assert!(kept(&p, "bo@b.test"), "within five minutes");
        assert!(!kept(&p, "old@b.test"), "older: fetched anew");
        assert!(!kept(&p, "me@a.test"), "the own domain is never read from the store");
        // A kept domain card comes with the domain's pin, which the resolver holds it to.
        let pinned = block_on((&p).cached("b.test", NOW - CARD_CACHE_MS)).unwrap().and_then(|c| c.pin);
        assert_eq!(pinned, p.pins().get("b.test").cloned());
        assert!(pinned.is_some());
        assert!(!kept(&p, "c.test"), "a domain the caller puts elsewhere");
        p.set_stale(true);
        assert!(kept(&p, "old@b.test"), "offline, an older card");
        assert_eq!(p.used_stale("old@b.test"), Some(NOW - 10 * MINUTE));
        assert!(!kept(&p, "ancient@b.test"), "never older than MAX_STALE_MS");
        // Issue 35 §2: hours, not days (a card from yesterday may ask for what it no longer does).
        assert!(!kept(&p, "yesterday@b.test"), "a card kept a day is not sealed to");
        assert_eq!(p.used_stale("bo@b.test"), None);

        // Another run reads what this one kept; a fresh one reads nothing.
        let again = pins(&store);
        assert!(kept(&again, "bo@b.test"));
        let fresh = pins(&store).fresh(true);
        assert!(!kept(&fresh, "bo@b.test"));
        assert_eq!(cards::load(&store).len(), 7);
    }
}
