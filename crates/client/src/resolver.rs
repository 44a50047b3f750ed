//! The one resolver (spec §2, docs/SPEC.md §6.1): from a domain or an address to a verified
//! card, for the house and for the `nyx5` client alike.
//!
//! A domain's estafeta is found, in order, through the `hosts` override (which may pin the key),
//! locations the caller already knows (the client: a house named by URL, the agent's own house),
//! the DNS TXT record `_nyx5.<domain>` read over DNS-over-HTTPS (https only; its `sig` is the
//! anchor), or the well-known URL of the domain itself. Without an anchor the first key seen is
//! pinned (TOFU). A later card is accepted when it is signed by the pin, or continues from it
//! (the pin lists a handover to the new key: [`DomainCard::verify_continuing`]), and the pin
//! moves; anything else, including a DNS anchor contradicting the pin, is refused (403) and the
//! key is recorded as pending for the operator.
//!
//! A house at a URL given for another purpose ([`Sources::given`]) is no part of that chain: its
//! card serves the one resolution, held to a pin if there is one, and is never pinned nor kept
//! (a store takes only a [`ChainCard`]).
//!
//! The decisions live in [`Resolver`], over the `Net` port and a [`PinStore`]: the house keeps
//! pins and the card cache in its database (`nyx5_house::resolver::DbPins`), the client its pins
//! in the profile. The checks a card must pass are [`crate::trust`]'s, which the browser calls too.
//! Verified cards are cached for [`limits::CARD_CACHE_MS`] twice over: in a [`Memo`] (trusted as
//! verified, no signature checked again) and in the store (the canonical text; re-parsed and
//! re-verified when read, since only `verify` makes a `Verified` card).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nyx5_proto::address::check_domain;
use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::field;
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Address, Error, Refusal, Timestamp, Value, Verified, limits};

use crate::hosts::HostEntry;
use crate::ports::{Net, OutRequest, OutResponse, PortError};
use crate::{outbound, trust};

pub use crate::trust::MAX_DELEGATION_DEPTH;
/// Most entries of each in-process memo (cards of each kind; the house's memo of inbox policies
/// too).
pub const MEMO_MAX_ENTRIES: usize = 1024;
/// The DNS name prefix of a domain's TXT record.
pub const DNS_PREFIX: &str = "_nyx5.";
/// The version tag a TXT record starts with.
pub const DNS_TAG: &str = "nyx51";
/// The DNS type number of TXT records.
const DNS_TYPE_TXT: i64 = 16;

/// Checks a DNS-over-HTTPS endpoint: it must be an `https://` URL. A plain `http://` answer can
/// be rewritten by anyone on the path, and the answer is what anchors a domain's key.
pub fn check_doh_url(url: &str) -> Result<(), Error> {
    let rest = url.strip_prefix("https://").filter(|r| !r.is_empty() && !r.starts_with('/'));
    match rest {
        Some(_) => Ok(()),
        None => Err(Refusal::BadConfig.because(format!("the DNS-over-HTTPS endpoint {url:?} must be an https:// URL"))),
    }
}

/// A resolved domain: where its estafeta answers, its verified card (shared with the cache), and
/// how we know.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub url: String,
    pub card: Arc<Verified<DomainCard>>,
    /// Where the URL came from: `self`, `hosts`, a known location's name (`url`, `profile`),
    /// `dns`, `well-known`, or `cache`.
    pub via: &'static str,
    /// What the card's key was checked against: `self`, `hosts`, `dns`, `pin`, `first-use`
    /// (pinned now), `unpinned` (trusted as on first use, the pin table being full), `rotation`
    /// (followed a handover from the pin), `repin` (the user accepted a changed key), `cache`, or
    /// `none` (found at a URL given for another purpose, with no pin to hold it to).
    pub anchor: &'static str,
}

/// A `_nyx5.<domain>` TXT record: `v=nyx51; url=<estafeta>; sig=<domain key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsRecord {
    pub url: String,
    pub sig: Option<SigPublic>,
}

/// Joins the character-strings of a TXT record's presentation form (`"a" "b"` → `ab`); text
/// without quotes is taken as it is.
pub fn join_txt(data: &str) -> String {
    let data = data.trim();
    if !data.starts_with('"') {
        return data.to_owned();
    }
    let mut out = String::with_capacity(data.len());
    let mut chars = data.chars();
    let mut inside = false;
    while let Some(c) = chars.next() {
        match (inside, c) {
            (false, '"') => inside = true,
            (false, _) => {}
            (true, '"') => inside = false,
            (true, '\\') => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            (true, _) => out.push(c),
        }
    }
    out
}

/// Parses the text of a TXT record. `Ok(None)` when it is not a Nyx5 record (another `v=`);
/// unknown parameters are ignored; `url` must be http(s); a bad `sig` is refused (403).
pub fn parse_txt(txt: &str) -> Result<Option<DnsRecord>, Error> {
    let bad = |why: &str| Refusal::BadDnsRecord.because(format!("bad {DNS_PREFIX} TXT record: {why}"));
    let mut pairs = Vec::new();
    for part in txt.split(';') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, value) = part.split_once('=').ok_or_else(|| bad("parameters are name=value"))?;
        pairs.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    // Sorted once, not inserted one by one: a zone's owner writes the record, and thousands of
    // parameters in descending order would cost a move of the map per insert.
    let params = VecMap::try_from_vec(pairs).map_err(|_| bad("repeated parameter"))?;
    if params.get("v").map(String::as_str) != Some(DNS_TAG) {
        return Ok(None);
    }
    let url = params.get("url").ok_or_else(|| bad("missing url"))?.trim_end_matches('/').to_owned();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(bad("url must be http(s)"));
    }
    let sig = params.get("sig").map(|s| SigPublic::parse(s)).transpose().map_err(|_| bad("sig is not a key"))?;
    Ok(Some(DnsRecord { url, sig }))
}

/// Reads a DNS-over-HTTPS JSON answer (`application/dns-json`): the Nyx5 record, if there is
/// exactly one. NXDOMAIN or no record is `None`; other DNS failures are temporary (503).
pub fn parse_doh(body: &[u8]) -> Result<Option<DnsRecord>, Error> {
    let unavailable = |why: &str| Refusal::DnsUnavailable.because(format!("DNS-over-HTTPS: {why}"));
    let v = Value::parse(body, limits::MAX_DOCUMENT_BYTES).map_err(|_| unavailable("the answer is not JSON"))?;
    let o = v.as_object().ok_or_else(|| unavailable("the answer is not an object"))?;
    match field::integer(o, "Status") {
        Ok(0) => {}
        Ok(3) => return Ok(None),
        _ => return Err(unavailable("the lookup failed")),
    }
    let mut found = None;
    for answer in field::opt_array(o, "Answer").ok().flatten().unwrap_or_default() {
        let Some(a) = answer.as_object() else { continue };
        if field::opt_integer(a, "type").ok().flatten().is_some_and(|t| t != DNS_TYPE_TXT) {
            continue;
        }
        let Some(data) = field::opt_str(a, "data").ok().flatten() else { continue };
        if let Some(record) = parse_txt(&join_txt(data))? {
            if found.as_ref().is_some_and(|f| *f != record) {
                return Err(Refusal::BadDnsRecord.because(format!("several different {DNS_PREFIX} TXT records")));
            }
            found = Some(record);
        }
    }
    Ok(found)
}

/// A number of outbound requests to spend (the index crawl's, per tick): each request takes
/// one, and once none is left a request is refused without being sent, and the budget
/// remembers that it was.
#[derive(Debug)]
pub struct Budget {
    left: Cell<u32>,
    spent: Cell<bool>,
}

impl Budget {
    pub fn new(requests: u32) -> Budget {
        Budget { left: Cell::new(requests), spent: Cell::new(false) }
    }

    /// The requests still allowed.
    pub fn left(&self) -> u32 {
        self.left.get()
    }

    /// Whether a request was refused for want of budget.
    pub fn spent(&self) -> bool {
        self.spent.get()
    }

    fn take(&self) -> Result<(), PortError> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.spent.set(true);
                Err(PortError::Unreached("this tick's crawl budget is spent".into()))
            }
        }
    }
}

/// Cached values by key, each with the time it was fetched.
type Entries<T> = Mutex<VecMap<String, (i64, T)>>;

/// Verified cards kept in this process for their five minutes, keyed by domain or address. A hit
/// hands out the shared card (an `Arc`), not a deep copy of its document.
#[derive(Default)]
pub struct Memo {
    domains: Entries<Resolved>,
    agents: Entries<Arc<Verified<AgentCard>>>,
    /// Card fetches under way per site (see [`site_admission`]): each one's number and when it
    /// started, so that a slot frees itself after [`FETCH_SLOT_MS`].
    sites: Mutex<VecMap<String, Vec<(u64, i64)>>>,
    /// Numbers the fetches in `sites`.
    fetches: AtomicU64,
    /// Counts [`Memo::forget_domain`] calls.
    forgotten: AtomicU64,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

fn memo_get<T: Clone>(map: &Entries<T>, key: &str, now: i64) -> Option<T> {
    let map = map.lock().ok()?;
    map.get(key).filter(|(at, _)| now - *at < limits::CARD_CACHE_MS && *at <= now).map(|(_, v)| v.clone())
}

fn memo_put<T>(map: &Entries<T>, key: &str, at: i64, now: i64, value: T) {
    if let Ok(mut map) = map.lock() {
        if map.len() >= MEMO_MAX_ENTRIES {
            map.retain(|_, (t, _)| now - *t < limits::CARD_CACHE_MS);
            if map.len() >= MEMO_MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(key.to_owned(), (at, value));
    }
}

impl Memo {
    /// Forgets `domain`'s card and its agents' cards. A resolution under way meanwhile (it may
    /// have read the pin this forgetting follows) keeps what it finds out of the memo.
    pub fn forget_domain(&self, domain: &str) {
        self.forgotten.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.domains.lock() {
            m.remove(domain);
        }
        memo_forget(&self.agents, &format!("@{domain}"));
    }

    /// How many times anything was forgotten: a resolution reads it before its first read and
    /// memoises its answer only if it has not moved.
    fn generation(&self) -> u64 {
        self.forgotten.load(Ordering::Relaxed)
    }

    /// Memoises `value` in `map` unless something was forgotten since `generation` was read.
    fn put<T>(&self, generation: u64, map: &Entries<T>, key: &str, at: i64, now: i64, value: T) {
        if self.generation() == generation {
            memo_put(map, key, at, now, value);
        }
    }
}

/// Card fetches from one site (`site.rs`) under way at once: a house that never answers holds
/// at most these requests waiting on it. There is no per-site count per minute: anyone may name
/// a site, so such a count would let a stranger spend a peer's budget and cut the house off from
/// it; new names have their own admission ([`PinStore::admit`]).
pub const AGENT_FETCHES_PER_SITE: u32 = 4;

/// How long a card fetch holds its site's slot at most: three times the outbound deadline. Past
/// it the slot is free again whether or not the fetch's future was ever dropped: a Worker whose
/// client went away may neither poll nor drop it again, and a count that only `Drop` gave back
/// would then hold the site's slots for the isolate's life.
pub const FETCH_SLOT_MS: i64 = 3 * crate::outbound::TIMEOUT_MS as i64;

/// Admits one more card fetch from `site` given the fetches under way there (started at the
/// times in `under_way`, those older than [`FETCH_SLOT_MS`] before `now` no longer counted), or
/// the refusal: 503 while [`AGENT_FETCHES_PER_SITE`] are under way.
pub fn site_admission(under_way: &mut Vec<(u64, i64)>, site: &str, id: u64, now: i64) -> Result<(), Error> {
    under_way.retain(|&(_, started)| {
        started > now.saturating_sub(FETCH_SLOT_MS) && started <= now.saturating_add(FETCH_SLOT_MS)
    });
    if under_way.len() >= AGENT_FETCHES_PER_SITE as usize {
        return Err(Refusal::FetchBusy.because(format!(
            "{AGENT_FETCHES_PER_SITE} cards of {site} are being fetched already; try again in a moment"
        )));
    }
    under_way.push((id, now));
    Ok(())
}

/// A card fetch under way, counted in its site's fetches until dropped or [`FETCH_SLOT_MS`] old
/// (`None`: untracked).
struct Fetching<'a> {
    memo: &'a Memo,
    site: Option<(String, u64)>,
}

impl Drop for Fetching<'_> {
    fn drop(&mut self) {
        if let Some((site, id)) = &self.site
            && let Ok(mut sites) = self.memo.sites.lock()
            && let Some(under_way) = sites.get_mut(site.as_str())
        {
            under_way.retain(|(n, _)| n != id);
            if under_way.is_empty() {
                sites.remove(site.as_str());
            }
        }
    }
}

impl Memo {
    /// Admits a card fetch from `site` at `now` ([`site_admission`]), in one lock. The map holds
    /// only sites with fetches under way; were [`MEMO_MAX_ENTRIES`] sites hanging at once, a
    /// fetch from yet another goes untracked rather than refused, so made-up sites never shut
    /// out a real one.
    fn start_fetch(&self, site: &str, now: i64) -> Result<Fetching<'_>, Error> {
        let Ok(mut sites) = self.sites.lock() else {
            return Ok(Fetching { memo: self, site: None });
        };
        if sites.len() >= MEMO_MAX_ENTRIES && !sites.contains_key(site) {
            let fresh = now.saturating_sub(FETCH_SLOT_MS);
            sites.retain(|_, under_way| under_way.iter().any(|&(_, started)| started > fresh));
            if sites.len() >= MEMO_MAX_ENTRIES {
                return Ok(Fetching { memo: self, site: None });
            }
        }
        let id = self.fetches.fetch_add(1, Ordering::Relaxed);
        site_admission(sites.entry(site.to_owned()).or_default(), site, id, now)?;
        Ok(Fetching { memo: self, site: Some((site.to_owned(), id)) })
    }
}

/// Drops the entries whose key ends with `suffix`.
fn memo_forget<T>(map: &Entries<T>, suffix: &str) {
    if let Ok(mut map) = map.lock() {
        map.retain(|k, _| !k.ends_with(suffix));
    }
}

/// A card to cache: its key (a domain or an address), canonical text, estafeta URL, and time.
#[derive(Debug, Clone, Copy)]
pub struct CacheEntry<'a> {
    pub key: &'a str,
    pub card: &'a str,
    pub url: &'a str,
    pub at: i64,
}

/// A domain card found on its domain's own resolution chain — the hosts file, a house the caller
/// keeps as the domain's own ([`Sources::known`]), the DNS record, or the domain's well-known
/// URL — never at a URL given for another purpose ([`Sources::given`]). Only the resolver makes
/// one (its field is private, and it needs an `OnChain` from `Resolver::locate`), so a
/// [`PinStore`] is asked to pin or keep a domain card only with the proof of where it came from.
#[derive(Debug, Clone, Copy)]
pub struct ChainCard<'a> {
    entry: CacheEntry<'a>,
}

impl<'a> ChainCard<'a> {
    fn of(_: &OnChain, entry: CacheEntry<'a>) -> ChainCard<'a> {
        ChainCard { entry }
    }

    /// The card to pin or keep: its domain, canonical text, estafeta URL and time.
    pub fn entry(&self) -> CacheEntry<'a> {
        self.entry
    }
}

/// That a location is on its domain's own chain (see [`ChainCard`]); made by
/// [`Resolver::locate`] alone.
#[derive(Debug, Clone, Copy)]
struct OnChain(());

/// A cached card as the store gives it back (to be parsed and verified again).
#[derive(Debug, Clone)]
pub struct CachedCard {
    pub card: String,
    pub url: String,
    pub at: i64,
    /// The key the card's domain is pinned to as the card is read, when the store knows: a
    /// cached domain card signed by another key is not trusted (the pin moved after it was
    /// cached). A store that keeps no pins says `None`.
    pub pin: Option<String>,
}

/// Where trust on first use is kept: pinned domain keys, refused keys waiting for someone to
/// look at them, and (optionally) the card cache. Every write that depends on a pin is guarded
/// by it, so two resolutions racing cannot both decide. A domain card is pinned or kept only as a
/// [`ChainCard`]: found on the domain's own chain.
#[allow(async_fn_in_trait)] // Single-threaded runtimes (workerd, the test kit, a CLI verb): no Send bound.
pub trait PinStore {
    /// The key pinned for `domain`, if any.
    async fn pin(&self, domain: &str) -> Result<Option<SigPublic>, Error>;
    /// Pins `key` for `domain` unless it has a pin already (caching `card` with it). `true`
    /// when this call pinned it.
    async fn first_pin(&self, domain: &str, key: &SigPublic, card: ChainCard<'_>) -> Result<bool, Error>;
    /// Moves `domain`'s pin from `from` to `to` (and caches `card`), only while it is still
    /// `from`. `true` when it moved.
    async fn move_pin(
        &self,
        domain: &str,
        from: &SigPublic,
        to: &SigPublic,
        card: ChainCard<'_>,
    ) -> Result<bool, Error>;
    /// Records `key` as refused for `domain` (pending, for the operator).
    async fn refuse(&self, domain: &str, key: &SigPublic, now: i64) -> Result<(), Error>;
    /// A cached card for `key` fetched after `fresh_after`.
    async fn cached(&self, key: &str, fresh_after: i64) -> Result<Option<CachedCard>, Error>;
    /// Caches a verified agent card (the resolver hands domain cards to
    /// [`PinStore::cache_domain`] alone).
    async fn cache(&self, card: CacheEntry<'_>) -> Result<(), Error>;
    /// Caches a verified domain card found on its own chain.
    async fn cache_domain(&self, card: ChainCard<'_>) -> Result<(), Error> {
        self.cache(card.entry()).await
    }
    /// Caches a domain card verified against the pin `pin`, only while the domain is still
    /// pinned to it: a key the operator confirmed between the read and this write keeps the card
    /// out of the cache. A store nobody else writes to may cache it plainly.
    async fn cache_pinned(&self, pin: &SigPublic, card: ChainCard<'_>) -> Result<(), Error> {
        let _ = pin;
        self.cache_domain(card).await
    }
    /// Caches a domain card that verified without a pin (anchored in DNS), and remembers its
    /// name as one that verified ([`PinStore::known`]).
    async fn cache_known(&self, card: ChainCard<'_>) -> Result<(), Error> {
        self.cache_domain(card).await
    }
    /// Remembers that `domain` showed a card that verified at `now` though nothing pins its key
    /// (a site past its share of pins): for the house's `KNOWN_MS`, fetching it again spends none of its
    /// site's new names ([`PinStore::admit`]). Nothing by default.
    async fn known(&self, domain: &str, now: i64) -> Result<(), Error> {
        let _ = (domain, now);
        Ok(())
    }
    /// Whether the resolver may go and fetch `domain`, a name it holds no fresh card for, at
    /// `now`: the house spends one of its site's `NEW_NAMES_PER_SITE_PER_MINUTE` (429 past
    /// them), so a stranger minting names under one site cannot make it fetch, verify and pin
    /// without end. A name pinned spends nothing; one known ([`PinStore::known`]) spends the
    /// site's budget of known names instead: a stranger spending a site's budget on made-up
    /// names cannot cut the house off from a peer it knows there. Any name goes by default (the
    /// client's profile).
    async fn admit(&self, domain: &str, now: i64) -> Result<(), Error> {
        let _ = (domain, now);
        Ok(())
    }
    /// Whether the resolver may fetch the card of `key` (a domain or an address) anew, past its
    /// caches, because something is signed by `kid`, a key the card held does not accept (a
    /// rotation, or a forgery): once per [`REFRESH_WINDOW_MS`] per `key`, whatever the `kid`,
    /// so a stranger writing under made-up keys makes the house fetch the real card (from the
    /// domain's own chain) a couple of times a minute at most, and spends no budget of the
    /// site's new names. Refused with a temporary error (503): the card a later fetch gets may
    /// know the key. Any refresh goes by default (the client's profile: one command, its own
    /// user's).
    async fn admit_refresh(&self, key: &str, kid: &SigPublic, now: i64) -> Result<(), Error> {
        let _ = (key, kid, now);
        Ok(())
    }
}

/// A card is fetched anew for a key it does not list (`PinStore::admit_refresh`) at most once
/// per this window, whatever the key. A divisor of a minute.
pub const REFRESH_WINDOW_MS: i64 = 30_000;

/// Where a resolver looks for a domain before DNS and the well-known URL.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The hosts overrides (their `sig` anchors the key).
    pub hosts: &'a VecMap<String, HostEntry>,
    /// Locations the caller keeps as the domain's own house, after hosts: domain → (URL, name of
    /// the source). No anchor.
    pub known: &'a VecMap<String, (String, &'static str)>,
    /// Houses named by a URL given for another purpose (the client's `directory URL`, `search
    /// --index URL`, `app verify --catalogue URL`): domain → URL, after `known`. The server there
    /// only says it is that domain, so its card is used for this resolution alone: held to the
    /// domain's pin when there is one, and never pinned, moved nor kept (via `url`).
    pub given: &'a VecMap<String, String>,
    /// The DNS-over-HTTPS JSON endpoint (https only; see [`check_doh_url`]).
    pub doh: Option<&'a str>,
    /// Whether the well-known fallback is `http://<domain>` (test setups; see
    /// the house's `Config::allow_http`) rather than `https://`.
    pub allow_http: bool,
}

/// The resolver: sources, the network, pins, a memo, and the time. Cheap to build per call.
#[derive(Debug)]
pub struct Resolver<'a, N, S> {
    pub net: &'a N,
    /// A budget the requests must come out of (the index crawl's), if any.
    pub budget: Option<&'a Budget>,
    pub store: S,
    pub memo: &'a Memo,
    pub sources: Sources<'a>,
    /// Accept a changed key that does not continue from the pin, and pin it anew (the client's
    /// `--repin`, after the user checked the key some other way).
    pub repin: bool,
    pub now: Timestamp,
}

/// Where a domain's card is to be fetched, the key it must be signed by, if known, and how we
/// know.
struct Located {
    url: String,
    anchor: Option<SigPublic>,
    via: &'static str,
    /// Set when the location is on the domain's own chain; `None` for a given URL.
    chain: Option<OnChain>,
}

/// A request that got no answer: refused by the outbound policy (403, permanent), or a
/// transport failure (503, temporary). The reason says what failed, never the URL or the
/// transport's text: a stranger reading it must not learn what answered where.
fn no_answer(e: PortError, what: &str) -> Error {
    match e {
        PortError::Refused(why) => {
            Refusal::UrlRefused.because(format!("{what}: refused by the outbound policy: {why}"))
        }
        _ => Refusal::PeerUnavailable.because(format!("{what}: unreachable, try again later")),
    }
}

/// A remote document that does not parse or verify is the sender's fault: 403. Temporary
/// failures stay temporary; a 403 keeps its name, any other is `unverifiable_card`.
fn refuse(what: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| {
        let reason = format!("{what}: {}", e.reason);
        if e.kind.is_temporary() {
            e
        } else if e.kind == nyx5_proto::ErrorKind::Forbidden {
            e.with_reason(reason)
        } else {
            Refusal::UnverifiableCard.because(reason)
        }
    }
}

/// Verifies a domain card against the key the operator's hosts file names for it, if any: a card
/// signed by that key, or by a key it handed over to (listed with a handover still within its
/// `until`, as a pin on first use follows a rotation). An operator who pinned a peer's key in
/// `hosts` should not see the peer's mail bounce the day it rotates with a handover (issue 35
/// §2); past the handover's end the card is refused until the file names the new key.
fn verify_hosts_anchored(
    card: DomainCard,
    anchor: Option<&SigPublic>,
    now: Timestamp,
) -> Result<Verified<DomainCard>, Error> {
    match anchor {
        None => card.verify(None),
        Some(anchor) => {
            let domain = card.domain().to_owned();
            trust::held_to(card, Some(anchor), now).map(|(card, _)| card).map_err(|e| {
                if e.kind.is_temporary() {
                    return e;
                }
                Refusal::AnchorMismatch.because(format!(
                    "domain card of {domain} is not signed by its anchored key (the hosts file's), nor by a key it \
                     handed over to: {}",
                    e.reason
                ))
            })
        }
    }
}

fn card_text(v: &Value) -> String {
    v.canonical_string()
}

impl<N: Net, S: PinStore> Resolver<'_, N, S> {
    /// The estafeta and verified card of `domain`; `refresh` skips both caches.
    pub async fn domain(&self, domain: &str, refresh: bool) -> Result<Resolved, Error> {
        check_domain(domain).map_err(|why| Refusal::BadDomain.because(format!("domain {domain:?}: {why}")))?;
        let now = self.now.millis();
        let generation = self.memo.generation();
        if !refresh {
            if let Some(r) = memo_get(&self.memo.domains, domain, now) {
                return Ok(r);
            }
            if let Some(row) = self.store.cached(domain, now - limits::CARD_CACHE_MS).await? {
                let anchor = self.sources.hosts.get(domain).and_then(|h| h.sig);
                // Signed by the key the domain is pinned to now, unless the operator's hosts
                // file anchors it (its last word, as in `fetch_domain`).
                let pinned = |k: &SigPublic| anchor.is_some() || row.pin.as_ref().is_none_or(|p| *p == k.to_b64());
                if let Ok(card) = DomainCard::parse(row.card.as_bytes())
                    && let Ok(card) = verify_hosts_anchored(card, anchor.as_ref(), self.now)
                    && trust::domain_signer(&card, domain, self.now).is_ok_and(|k| pinned(&k))
                {
                    let r = Resolved { url: row.url, card: Arc::new(card), via: "cache", anchor: "cache" };
                    self.memo.put(generation, &self.memo.domains, domain, row.at, now, r.clone());
                    return Ok(r);
                }
            }
        }
        let r = self.fetch_domain(domain).await?;
        self.memo.put(generation, &self.memo.domains, domain, now, now, r.clone());
        Ok(r)
    }

    /// The estafeta and verified card of `domain`, to check something signed by `kid`: when the
    /// card held (cached) does not list `kid` — the domain rotated its key since — it is fetched
    /// anew, once per `kid` per cache window ([`PinStore::admit_refresh`]; a refusal is
    /// temporary). A key the held card lists but has ended is no reason to look again (what
    /// ended, ended). A fresh card that does not list `kid` either is answered as it is: the
    /// caller's check refuses it.
    pub async fn domain_knowing(&self, domain: &str, kid: &SigPublic) -> Result<Resolved, Error> {
        let held = self.domain(domain, false).await?;
        if held.card.has_key(kid) {
            return Ok(held);
        }
        self.store.admit_refresh(domain, kid, self.now.millis()).await?;
        self.domain(domain, true).await
    }

    /// The verified card of the remote agent `address`, to check something signed by `kid`: as
    /// [`Resolver::domain_knowing`], the card held is fetched anew (with its whole chain) when it
    /// does not accept `kid` — the agent rotated its key — once per `kid` per cache window.
    pub async fn agent_knowing(&self, address: &Address, kid: &SigPublic) -> Result<Arc<Verified<AgentCard>>, Error> {
        let held = self.agent(address, false).await?;
        if held.accepts_key(kid, self.now) {
            return Ok(held);
        }
        self.store.admit_refresh(address.as_str(), kid, self.now.millis()).await?;
        self.agent(address, true).await
    }

    /// The verified card of the remote agent `address`, fetched from its estafeta and verified
    /// against its domain (and parent) cards. Cached for five minutes unless `refresh`, which
    /// refetches the whole chain.
    pub async fn agent(&self, address: &Address, refresh: bool) -> Result<Arc<Verified<AgentCard>>, Error> {
        self.agent_at(address, refresh, 0).await
    }

    async fn agent_at(
        &self,
        address: &Address,
        refresh: bool,
        depth: usize,
    ) -> Result<Arc<Verified<AgentCard>>, Error> {
        trust::check_depth(address, depth)?;
        let now = self.now;
        let generation = self.memo.generation();
        let key = address.as_str();
        let current = |c: &Arc<Verified<AgentCard>>| c.valid_until().is_none_or(|u| now < u);
        if !refresh {
            if let Some(card) = memo_get(&self.memo.agents, key, now.millis()).filter(current) {
                return Ok(card);
            }
            if let Some(row) = self.store.cached(key, now.millis() - limits::CARD_CACHE_MS).await?
                && let Ok(card) = AgentCard::parse(row.card.as_bytes())
                && card.address() == *address
                && let Ok(domain) = self.domain(address.domain(), false).await
                && let Ok(card) = self.verify_at(card, &domain, false, depth).await
            {
                let card = Arc::new(card);
                self.memo.put(generation, &self.memo.agents, key, row.at, now.millis(), card.clone());
                return Ok(card);
            }
        }
        let domain = self.domain(address.domain(), refresh).await?;
        let url = format!("{}/agents/{}", domain.url, address.local());
        // Admitted per site: a few under way at once.
        let fetching = self.memo.start_fetch(crate::site::site(address.domain()), now.millis())?;
        let body = self.fetch(url, &format!("card of {address}")).await;
        drop(fetching);
        let body = body?;
        let card = AgentCard::parse(&body).map_err(refuse(&format!("card of {address}")))?;
        if card.address() != *address {
            return Err(Refusal::WrongCard.because(format!("asked for the card of {address}, got {}", card.address())));
        }
        // Certified by a key the domain card held does not list: the domain rotated its key
        // since that card was cached (its house certifies its cards again with the new one).
        let domain = match card.certifier() {
            Ok(kid) if !refresh && !domain.card.has_key(&kid) => self.domain_knowing(address.domain(), &kid).await?,
            _ => domain,
        };
        let card = Arc::new(self.verify_at(card, &domain, refresh, depth).await?);
        let text = card_text(&card.to_value());
        self.store.cache(CacheEntry { key, card: &text, url: &domain.url, at: now.millis() }).await?;
        self.memo.put(generation, &self.memo.agents, key, now.millis(), now.millis(), card.clone());
        Ok(card)
    }

    /// Verifies an agent card fetched from `domain` (a directory page, a registration answer)
    /// against the domain card and, when delegated, its parent resolved the same way.
    pub async fn verify_card(&self, card: AgentCard, domain: &Resolved) -> Result<Verified<AgentCard>, Error> {
        self.verify_at(card, domain, false, 0).await
    }

    async fn verify_at(
        &self,
        card: AgentCard,
        domain: &Resolved,
        refresh: bool,
        depth: usize,
    ) -> Result<Verified<AgentCard>, Error> {
        let what = format!("card of {}", card.address());
        let parent = match trust::parent_needed(&card) {
            Some(p) => Some(Box::pin(self.agent_at(&p, refresh, depth + 1)).await.map_err(|e| {
                if e.kind.is_temporary() {
                    e
                } else {
                    let reason = format!("parent of {}: {}", card.address(), e.reason);
                    e.with_reason(reason)
                }
            })?),
            None => None,
        };
        card.verify(&domain.card, parent.as_deref(), self.now).map_err(refuse(&what))
    }

    /// Where `domain`'s card lives: hosts, known locations, DNS over HTTPS, the domain itself.
    async fn locate(&self, domain: &str) -> Result<Located, Error> {
        let chain = Some(OnChain(()));
        if let Some(h) = self.sources.hosts.get(domain) {
            return Ok(Located { url: h.url.clone(), anchor: h.sig, via: "hosts", chain });
        }
        if let Some((url, via)) = self.sources.known.get(domain) {
            return Ok(Located { url: url.clone(), anchor: None, via, chain });
        }
        if let Some(url) = self.sources.given.get(domain) {
            return Ok(Located { url: url.clone(), anchor: None, via: "url", chain: None });
        }
        // Anything further is looked up on the public internet: `localhost` or `127.0.0.1` is
        // a house only when the hosts file says so.
        outbound::check_house_domain(domain)
            .map_err(|r| Refusal::NotPublicDomain.because(format!("{domain} is not a public house domain: {r}")))?;
        if let Some(doh) = self.sources.doh {
            check_doh_url(doh)?;
            let sep = if doh.contains('?') { '&' } else { '?' };
            let url = format!("{doh}{sep}name={DNS_PREFIX}{domain}&type=TXT");
            let resp = self
                .send(OutRequest {
                    method: "GET".into(),
                    url,
                    headers: vec![("accept".into(), "application/dns-json".into())],
                    body: vec![],
                })
                .await
                .map_err(|e| no_answer(e, &format!("the DNS-over-HTTPS lookup of {domain}")))?;
            if resp.status != 200 {
                return Err(
                    Refusal::DnsUnavailable.because(format!("DNS-over-HTTPS answered {} for {domain}", resp.status))
                );
            }
            if let Some(record) = parse_doh(&resp.body)? {
                return Ok(Located { url: record.url, anchor: record.sig, via: "dns", chain });
            }
        }
        let scheme = if self.sources.allow_http { "http" } else { "https" };
        Ok(Located { url: format!("{scheme}://{domain}"), anchor: None, via: "well-known", chain })
    }

    /// Fetches and checks `domain`'s card against its anchor and pin (see the module's text).
    /// A name the operator's hosts file does not give spends its site's budget first
    /// ([`PinStore::admit`]).
    async fn fetch_domain(&self, domain: &str) -> Result<Resolved, Error> {
        let now = self.now.millis();
        if !self.sources.hosts.contains_key(domain) {
            // A name that can be no public house is refused before it spends any budget.
            if !self.sources.known.contains_key(domain) && !self.sources.given.contains_key(domain) {
                outbound::check_house_domain(domain).map_err(|r| {
                    Refusal::NotPublicDomain.because(format!("{domain} is not a public house domain: {r}"))
                })?;
            }
            self.store.admit(domain, now).await?;
        }
        let located = self.locate(domain).await?;
        let what = format!("domain card of {domain}");
        // Admitted per site like an agent card: a house that hangs holds few requests.
        let fetching = self.memo.start_fetch(crate::site::site(domain), now)?;
        let body = self.fetch(format!("{}/.well-known/nyx5.json", located.url), &what).await;
        drop(fetching);
        let body = body?;
        let card = DomainCard::parse(&body).map_err(refuse(&what))?;
        // The rules every domain card meets, as the browser applies them too.
        let kid = trust::domain_signer(&card, domain, self.now).map_err(|f| f.into_error(&what, refuse(&what)))?;
        let url = match &card.estafeta() {
            e if located.via == "well-known" && (e.starts_with("https://") || e.starts_with("http://")) => {
                e.trim_end_matches('/').to_owned()
            }
            _ => located.url.clone(),
        };
        let text = card_text(&card.to_value());
        let done = |card: Verified<DomainCard>, anchor: &'static str| Resolved {
            url: url.clone(),
            card: Arc::new(card),
            via: located.via,
            anchor,
        };
        let Some(chain) = located.chain else {
            let (card, anchor) = self.given_card(domain, card, &kid, &what).await?;
            return Ok(done(card, anchor));
        };
        let entry = ChainCard::of(&chain, CacheEntry { key: domain, card: &text, url: &url, at: now });
        match (located.anchor, located.via) {
            // The operator's hosts file is the last word: its key, or a key it handed over to.
            (Some(anchor), "hosts") => {
                let card = verify_hosts_anchored(card, Some(&anchor), self.now).map_err(refuse(&what))?;
                self.store.cache_domain(entry).await?;
                Ok(done(card, "hosts"))
            }
            // A DNS anchor must agree with a TOFU pin, or continue from it.
            (Some(anchor), _) => {
                let card = card.verify(Some(&anchor)).map_err(refuse(&what))?;
                let pin = match self.store.pin(domain).await? {
                    None => {
                        self.store.cache_known(entry).await?;
                        return Ok(done(card, "dns"));
                    }
                    Some(pin) if pin == anchor => {
                        self.store.cache_pinned(&pin, entry).await?;
                        return Ok(done(card, "dns"));
                    }
                    Some(pin) => pin,
                };
                match trust::held_to(card.into_inner(), Some(&pin), self.now) {
                    Ok((card, _)) if self.store.move_pin(domain, &pin, &kid, entry).await? => {
                        Ok(done(card, "rotation"))
                    }
                    Ok(_) => {
                        Err(Refusal::PinChangedMeanwhile.because(format!("the pin of {domain} changed meanwhile")))
                    }
                    Err(e) => {
                        self.store.refuse(domain, &kid, now).await?;
                        Err(Refusal::PinMismatch.because(format!(
                            "the DNS record of {domain} anchors a key that contradicts the key pinned on first use \
                             ({}); refused until the operator confirms it (POST /pins/{domain}/confirm)",
                            e.reason
                        )))
                    }
                }
            }
            // Trust on first use.
            (None, _) => {
                let pin = match self.store.pin(domain).await? {
                    Some(pin) => pin,
                    None => {
                        let verified = card.clone().verify(None).map_err(refuse(&what))?;
                        if self.store.first_pin(domain, &kid, entry).await? {
                            return Ok(done(verified, "first-use"));
                        }
                        // Another resolution pinned a key a moment ago: hold this card to that
                        // pin. No pin at all: the table (or the site's share of it) is full, and the card is trusted as on
                        // first use without being pinned (see `MAX_PINS`).
                        match self.store.pin(domain).await? {
                            Some(pin) => pin,
                            None => {
                                self.store.known(domain, now).await?;
                                return Ok(done(verified, "unpinned"));
                            }
                        }
                    }
                };
                match trust::held_to(card.clone(), Some(&pin), self.now) {
                    Ok((card, false)) => {
                        self.store.cache_pinned(&pin, entry).await?;
                        Ok(done(card, "pin"))
                    }
                    Ok((card, true)) if self.store.move_pin(domain, &pin, &kid, entry).await? => {
                        Ok(done(card, "rotation"))
                    }
                    Ok(_) => {
                        Err(Refusal::PinChangedMeanwhile.because(format!("the pin of {domain} changed meanwhile")))
                    }
                    Err(e) if self.repin && !e.kind.is_temporary() => {
                        let card = card.verify(None).map_err(refuse(&what))?;
                        if self.store.move_pin(domain, &pin, &kid, entry).await? {
                            Ok(done(card, "repin"))
                        } else {
                            Err(Refusal::PinChangedMeanwhile.because(format!("the pin of {domain} changed meanwhile")))
                        }
                    }
                    Err(e) => {
                        self.store.refuse(domain, &kid, now).await?;
                        Err(Refusal::PinMismatch.because(format!(
                            "{} (pinned {}, now {}); refused until the operator confirms it (POST /pins/{domain}/confirm)",
                            e.reason,
                            pin.to_b64(),
                            kid.to_b64()
                        )))
                    }
                }
            }
        }
    }

    /// A card found at a URL given for another purpose ([`Sources::given`]): the server there only
    /// says it is `domain`. Used for this resolution alone (anchor `none`), held to the domain's
    /// pin when it has one (`pin`, or `rotation` for a handover from it), and never pinned,
    /// moved, recorded as refused nor kept: a stranger's URL decides nothing about `domain`.
    async fn given_card(
        &self,
        domain: &str,
        card: DomainCard,
        kid: &SigPublic,
        what: &str,
    ) -> Result<(Verified<DomainCard>, &'static str), Error> {
        let Some(pin) = self.store.pin(domain).await? else {
            return Ok((card.verify(None).map_err(refuse(what))?, "none"));
        };
        match trust::held_to(card, Some(&pin), self.now) {
            Ok((card, false)) => Ok((card, "pin")),
            Ok((card, true)) => Ok((card, "rotation")),
            Err(e) if e.kind.is_temporary() => Err(e),
            // Not the pin's refusal: it speaks of a pin that moved, which this is not (and
            // `--repin` would not mend it).
            Err(_) => Err(Refusal::GivenUrlWrongKey.because(format!(
                "{what} at the URL given is signed by {}, and the key held for {domain} ({}) neither signed it nor \
                 handed over to it; a URL given for another purpose changes nothing kept for {domain}",
                kid.to_b64(),
                pin.to_b64()
            ))),
        }
    }

    /// Sends `request` over `Net`, out of the budget if there is one.
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        if let Some(budget) = self.budget {
            budget.take()?;
        }
        self.net.send(request).await
    }

    /// GET `url` over `Net`. Transport failures and 5xx, 421, 429 or redirects are temporary
    /// (503); 404 and 410 are 404; other answers are refused (403).
    pub async fn fetch(&self, url: String, what: &str) -> Result<Vec<u8>, Error> {
        let resp = self
            .send(OutRequest {
                method: "GET".into(),
                url: url.clone(),
                headers: vec![("accept".into(), "application/json".to_owned())],
                body: vec![],
            })
            .await
            .map_err(|e| no_answer(e, what))?;
        match resp.status {
            200..=299 if resp.body.len() <= limits::MAX_DOCUMENT_BYTES => Ok(resp.body),
            200..=299 => Err(Refusal::PeerAnswerTooLarge.because(format!("{what} is too large"))),
            404 | 410 => Err(Refusal::PeerNotFound.because(format!("{what}: not found"))),
            300..=399 | 421 | 429 | 500.. => {
                Err(Refusal::PeerUnavailable.because(format!("{what}: its house answered {}", resp.status)))
            }
            s => Err(Refusal::PeerRefused.because(format!("{what}: its house answered {s}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_records() {
        let key = nyx5_proto::crypto::SigningKey::from_seed([3; 32]).public();
        let data = format!("\"v=nyx51; url=https://mail.x/; \" \"sig={}\"", key.to_b64());
        let rec = parse_txt(&join_txt(&data)).unwrap().unwrap();
        assert_eq!(rec, DnsRecord { url: "https://mail.x".into(), sig: Some(key) });
        assert_eq!(parse_txt("v=spf1 -all").unwrap(), None);
        assert_eq!(parse_txt("v=nyx51;url=http://a.test;extra=1").unwrap().unwrap().sig, None);
        assert!(parse_txt("v=nyx51; url=ftp://x").is_err());
        assert!(parse_txt("v=nyx51; url=https://x; sig=nope").is_err());
        assert!(parse_txt("v=nyx51; url=https://x; url=https://y").is_err());
        assert!(parse_txt("v=nyx51; url=https://x; URL=https://y").is_err());
        // Many parameters in descending order read as one sorted map (sorted once).
        let many: String = (0..12_000).rev().map(|i| format!("p{i:05}=;")).collect();
        let rec = parse_txt(&format!("{many}v=nyx51;url=https://x.example")).unwrap().unwrap();
        assert_eq!(rec.url, "https://x.example");
        assert_eq!(join_txt(r#""a\"b" "c""#), "a\"bc");
    }

    #[test]
    fn a_budget_gives_what_it_holds_then_refuses_and_remembers() {
        let budget = Budget::new(2);
        assert!(budget.take().is_ok());
        assert_eq!((budget.left(), budget.spent()), (1, false));
        assert!(budget.take().is_ok());
        assert_eq!((budget.left(), budget.spent()), (0, false));
        assert!(matches!(budget.take(), Err(PortError::Unreached(_))));
        assert_eq!((budget.left(), budget.spent()), (0, true));
        let none = Budget::new(0);
        assert!(none.take().is_err());
        assert!(none.spent());
    }

    fn keys<T>(map: &Entries<T>) -> Vec<String> {
        map.lock().unwrap().keys().cloned().collect()
    }

    /// A remembered card is good for exactly `CARD_CACHE_MS` from its fetch, and never before it
    /// (a clock that went back).
    #[test]
    fn agent_card_fetches_are_admitted_per_site_a_few_at_once_so_many_a_minute() {
        // Issue 34 H1: fresh local parts under one domain were unlimited fetches of 10 s each.
        let memo = Memo::default();
        let held: Vec<_> = (0..AGENT_FETCHES_PER_SITE).map(|_| memo.start_fetch("evil.test", 0).unwrap()).collect();
        let e = memo.start_fetch("evil.test", 0).err().unwrap();
        assert_eq!(e.code(), 503, "{}", e.reason);
        assert!(memo.start_fetch("other.test", 0).is_ok(), "another site is not held up");
        drop(held);
        drop(memo.start_fetch("evil.test", 0).unwrap());
        // A responsive site is fetched from as often as anyone names it: no count a stranger
        // could spend for it (hostile review H2a).
        for _ in 0..1000 {
            drop(memo.start_fetch("peer.test", 0).unwrap());
        }
        assert!(memo.sites.lock().unwrap().is_empty(), "nothing under way is remembered");
    }

    #[test]
    fn made_up_sites_never_shut_a_real_one_out() {
        // Hostile review H1: a full map of sites answered 503 to any other site.
        let memo = Memo::default();
        // Sites that hang, all the map holds (and more), each with a fetch under way.
        let held: Vec<_> =
            (0..MEMO_MAX_ENTRIES + 10).map(|i| memo.start_fetch(&format!("r{i}.com"), 0).unwrap()).collect();
        assert_eq!(memo.sites.lock().unwrap().len(), MEMO_MAX_ENTRIES);
        for _ in 0..10 {
            drop(memo.start_fetch("peer.test", 0).expect("a real site is admitted"));
        }
        drop(held);
        assert!(memo.sites.lock().unwrap().is_empty());
        // Made-up sites fetched from and done (answered at once) leave nothing behind.
        for i in 0..MEMO_MAX_ENTRIES * 2 {
            drop(memo.start_fetch(&format!("s{i}.com"), 0).unwrap());
        }
        let held: Vec<_> = (0..AGENT_FETCHES_PER_SITE).map(|_| memo.start_fetch("peer.test", 0).unwrap()).collect();
        assert_eq!(memo.start_fetch("peer.test", 0).err().unwrap().code(), 503, "the cap still holds");
        drop(held);
    }

    #[test]
    fn a_fetch_never_dropped_frees_its_slot_after_a_while() {
        // Third review (d): on a Worker whose client went away, a fetch's future may never be
        // polled or dropped again; a slot only `Drop` gave back would then be held for good.
        let memo = Memo::default();
        for _ in 0..AGENT_FETCHES_PER_SITE {
            std::mem::forget(memo.start_fetch("peer.test", 0).unwrap());
        }
        assert_eq!(memo.start_fetch("peer.test", FETCH_SLOT_MS - 1).err().unwrap().code(), 503, "held until then");
        drop(memo.start_fetch("peer.test", FETCH_SLOT_MS).expect("free again past the slot's time"));
        // A clock set back far does not keep a slot held either.
        std::mem::forget(memo.start_fetch("back.test", 10 * FETCH_SLOT_MS).unwrap());
        for _ in 0..AGENT_FETCHES_PER_SITE {
            std::mem::forget(memo.start_fetch("back.test", 0).unwrap());
        }
    }

    #[test]
    fn the_memo_keeps_a_card_for_its_five_minutes_exactly() {
        let map = Entries::<u8>::default();
        memo_put(&map, "a.test", 1_000, 1_000, 7);
        assert_eq!(memo_get(&map, "a.test", 1_000), Some(7));
        assert_eq!(memo_get(&map, "a.test", 1_000 + limits::CARD_CACHE_MS - 1), Some(7));
        assert_eq!(memo_get(&map, "a.test", 1_000 + limits::CARD_CACHE_MS), None);
        assert_eq!(memo_get(&map, "a.test", 999), None);
        assert_eq!(memo_get(&map, "b.test", 1_000), None);
    }

    /// The memo holds at most `MEMO_MAX_ENTRIES`: when full, the stale entries go first, and if
    /// none is stale, all of them; the new one is always kept.
    #[test]
    fn a_full_memo_drops_the_stale_entries_first_then_everything() {
        let map = Entries::<usize>::default();
        let fresh_at = limits::CARD_CACHE_MS;
        for i in 0..MEMO_MAX_ENTRIES - 2 {
            memo_put(&map, &format!("old{i}"), 0, 0, i);
        }
        memo_put(&map, "edge", 1, 1, 0);
        memo_put(&map, "young", fresh_at, fresh_at, 0);
        assert_eq!(map.lock().unwrap().len(), MEMO_MAX_ENTRIES);
        // Full: at `fresh_at` every `old…` entry is exactly five minutes old, so stale; `edge`
        // is one millisecond short of it.
        memo_put(&map, "new", fresh_at, fresh_at, 1);
        assert_eq!(keys(&map), ["edge", "new", "young"]);
        // Below the bound nothing is dropped, stale or not.
        memo_put(&map, "later", fresh_at * 3, fresh_at * 3, 2);
        assert_eq!(keys(&map), ["edge", "later", "new", "young"]);
        // Full of fresh entries: all go but the new one.
        let map = Entries::<usize>::default();
        for i in 0..MEMO_MAX_ENTRIES {
            memo_put(&map, &format!("k{i}"), 5, 5, i);
        }
        memo_put(&map, "last", 5, 5, 0);
        assert_eq!(keys(&map), ["last"]);
    }

    #[test]
    fn forgetting_a_domain_drops_its_agents_only() {
        // Nor does the memo's debug text show what it holds.
        assert_eq!(format!("{:?}", Memo::default()), "Memo");
        let map = Entries::<u8>::default();
        for key in ["ana@a.test", "bo@a.test", "cy@b.a.test", "dee@xa.test", "eve@b.test"] {
            memo_put(&map, key, 0, 0, 0);
        }
        memo_forget(&map, "@a.test");
        assert_eq!(keys(&map), ["cy@b.a.test", "dee@xa.test", "eve@b.test"]);
    }

    #[test]
    fn doh_answers() {
        let ok = br#"{"Status":0,"Answer":[{"type":5,"data":"x."},{"type":16,"data":"\"v=nyx51; url=https://m.x\""}]}"#;
        assert_eq!(parse_doh(ok).unwrap().unwrap().url, "https://m.x");
        assert_eq!(parse_doh(br#"{"Status":3}"#).unwrap(), None);
        assert_eq!(parse_doh(br#"{"Status":0}"#).unwrap(), None);
        assert_eq!(parse_doh(br#"{"Status":2}"#).unwrap_err().refusal(), Some(Refusal::DnsUnavailable));
        assert_eq!(parse_doh(b"<html>").unwrap_err().refusal(), Some(Refusal::DnsUnavailable));
        let two = br#"{"Status":0,"Answer":[{"data":"v=nyx51; url=https://a"},{"data":"v=nyx51; url=https://b"}]}"#;
        assert_eq!(parse_doh(two).unwrap_err().refusal(), Some(Refusal::BadDnsRecord));
    }
}
