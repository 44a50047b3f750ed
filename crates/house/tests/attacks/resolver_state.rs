//! The resolver's own state under pressure (issue 9, §6 and §8), driven through
//! [`Resolver`] directly over the in-memory network and real SQLite: how long a verified card is
//! trusted without a fetch, a cache row that names another domain or address, how deep a
//! delegation chain may go, where a well-known card's estafeta is taken from, a DNS anchor that
//! continues from a pin, the client's `--repin`, and an oversized answer.

use std::cell::Cell;
use std::collections::BTreeMap;

use crate::kit::*;
use nyx5_house::config::HostEntry;
use nyx5_house::ports::{Db, OutRequest, OutResponse};
use nyx5_house::resolver::{
    Budget, CacheEntry, CachedCard, ChainCard, DbPins, Memo, PinStore, Resolved, Resolver, Sources,
};
use nyx5_house::sqlite::SqliteDb;
use nyx5_proto::card::handover_message;
use nyx5_proto::card::{AgentCard, AgentCardDraft, Delegation, DomainCard, DomainCardDraft, DomainKey, Scope};
use nyx5_proto::crypto::{Context, SigPublic, SigningKey};
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Error, ErrorKind, Timestamp, Value, limits};

const DOMAIN: &str = "r.test";

/// A remote house played by a closure: its domain card and the agent cards it certifies.
pub(crate) struct Remote {
    key: SigningKey,
    agents: std::rc::Rc<std::cell::RefCell<BTreeMap<String, Vec<u8>>>>,
}

pub(crate) fn domain_card(
    domain: &str,
    estafeta: &str,
    key: &SigningKey,
    others: Vec<DomainKey>,
    now: Timestamp,
) -> DomainCard {
    DomainCardDraft {
        domain: domain.into(),
        estafeta: estafeta.into(),
        other_keys: others,
        previous: vec![],
        policy: obj([("inbound", "verified".into())]),
        extensions: vec![],
        issued: now,
    }
    .sign(key, now)
    .unwrap()
}

/// Serves `card` at `host`'s well-known URL and the agent cards put into the returned remote.
pub(crate) fn serve(w: &World, host: &str, card: &DomainCard, key: &SigningKey) -> Remote {
    let text = card.to_value().canonical();
    let agents = std::rc::Rc::new(std::cell::RefCell::new(BTreeMap::<String, Vec<u8>>::new()));
    let served = agents.clone();
    w.fake(host, move |req: &OutRequest| {
        if req.url.ends_with("/.well-known/nyx5.json") {
            return OutResponse { status: 200, body: text.clone() };
        }
        let local = req.url.rsplit_once("/agents/").map(|(_, l)| l.to_owned()).unwrap_or_default();
        match served.borrow().get(&local) {
            Some(card) => OutResponse { status: 200, body: card.clone() },
            None => OutResponse { status: 404, body: b"{}".to_vec() },
        }
    });
    Remote { key: key.clone(), agents }
}

impl Remote {
    fn put(&self, card: &AgentCard) {
        self.agents.borrow_mut().insert(card.address().local().to_owned(), card.to_value().canonical());
    }

    /// Certifies `address` (delegated by `parent`, when given) and serves its card.
    pub(crate) fn agent(
        &self,
        address: &str,
        key: &SigningKey,
        parent: Option<(&Address, &SigningKey)>,
        until: Option<Timestamp>,
        now: Timestamp,
    ) -> AgentCard {
        let address = Address::parse(address).unwrap();
        let mut draft = AgentCardDraft::new(address.clone(), key.public(), None, now);
        draft.valid_until = until;
        draft.delegation = parent.map(|(by, parent_key)| {
            let scope = Scope { types: Some(vec!["message".into()]), to_domains: None, cap: Some(10), authority: None };
            Delegation::sign(by, &address, &key.public(), &scope, None, now, parent_key).unwrap()
        });
        let card = draft.certify(&self.key).unwrap();
        self.put(&card);
        card
    }
}

/// A pin store over the house's tables that never answers from, nor writes to, its card cache,
/// as a client's profile does: only the in-process memo stands between two resolutions.
struct NoCache<'a>(DbPins<'a, SqliteDb>);

impl PinStore for NoCache<'_> {
    async fn pin(&self, domain: &str) -> Result<Option<SigPublic>, Error> {
        self.0.pin(domain).await
    }
    async fn first_pin(&self, domain: &str, key: &SigPublic, card: ChainCard<'_>) -> Result<bool, Error> {
        self.0.first_pin(domain, key, card).await
    }
    async fn move_pin(&self, d: &str, from: &SigPublic, to: &SigPublic, card: ChainCard<'_>) -> Result<bool, Error> {
        self.0.move_pin(d, from, to, card).await
    }
    async fn refuse(&self, domain: &str, key: &SigPublic, now: i64) -> Result<(), Error> {
        self.0.refuse(domain, key, now).await
    }
    async fn cached(&self, _: &str, _: i64) -> Result<Option<CachedCard>, Error> {
        Ok(None)
    }
    async fn cache(&self, _: CacheEntry<'_>) -> Result<(), Error> {
        Ok(())
    }
}

/// What a resolver is built from, kept by the test between resolutions.
struct Fixture {
    w: World,
    db: SqliteDb,
    hosts: nyx5_proto::vecmap::VecMap<String, HostEntry>,
    known: nyx5_proto::vecmap::VecMap<String, (String, &'static str)>,
    given: nyx5_proto::vecmap::VecMap<String, String>,
    doh: Option<String>,
    repin: Cell<bool>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            w: World::new(),
            db: SqliteDb::memory().unwrap(),
            hosts: nyx5_proto::vecmap::VecMap::new(),
            known: nyx5_proto::vecmap::VecMap::new(),
            given: nyx5_proto::vecmap::VecMap::new(),
            doh: None,
            repin: Cell::new(false),
        }
    }

    fn sources(&self) -> Sources<'_> {
        Sources {
            hosts: &self.hosts,
            known: &self.known,
            given: &self.given,
            doh: self.doh.as_deref(),
            allow_http: true,
        }
    }

    fn resolver<'a, S: PinStore>(&'a self, memo: &'a Memo, store: S) -> Resolver<'a, MemNet, S> {
        Resolver {
            net: &self.w.net,
            budget: None,
            store,
            memo,
            sources: self.sources(),
            repin: self.repin.get(),
            now: self.w.clock.now(),
        }
    }

    fn domain(&self, memo: &Memo, domain: &str) -> Result<Resolved, Error> {
        block_on(self.resolver(memo, DbPins(&self.db)).domain(domain, false))
    }

    fn agent(&self, memo: &Memo, address: &str) -> Result<AgentCard, Error> {
        let address = Address::parse(address).unwrap();
        block_on(self.resolver(memo, DbPins(&self.db)).agent(&address, false)).map(|c| (**c).clone())
    }

    fn agent_uncached(&self, memo: &Memo, address: &str) -> Result<AgentCard, Error> {
        let address = Address::parse(address).unwrap();
        block_on(self.resolver(memo, NoCache(DbPins(&self.db))).agent(&address, false)).map(|c| (**c).clone())
    }

    fn pin(&self, domain: &str) -> Option<SigPublic> {
        block_on(DbPins(&self.db).pin(domain)).unwrap()
    }

    /// Requests sent to `host` so far.
    fn sent(&self, host: &str) -> usize {
        self.w.sent_to(&format!("://{host}/"))
    }
}

#[test]
fn a_verified_card_is_trusted_for_five_minutes_and_then_fetched_again() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    let remote = serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    remote.agent("alice@r.test", &SigningKey::from_seed([2; 32]), None, None, now);

    let memo = Memo::default();
    f.agent(&memo, "alice@r.test").unwrap();
    assert_eq!(f.sent(DOMAIN), 2, "the domain card and the agent card");

    // Another isolate (a fresh memo) within the five minutes reads both from the database.
    f.w.clock.advance(limits::CARD_CACHE_MS - SECOND);
    let other = Memo::default();
    assert_eq!(f.domain(&other, DOMAIN).unwrap().via, "cache");
    f.agent(&Memo::default(), "alice@r.test").unwrap();
    assert_eq!(f.sent(DOMAIN), 2, "nothing fetched within the five minutes");

    // Past them, the store's rows are stale and both cards are fetched again.
    f.w.clock.advance(2 * SECOND);
    f.agent(&Memo::default(), "alice@r.test").unwrap();
    assert_eq!(f.sent(DOMAIN), 4, "both cards fetched again once stale");
}

#[test]
fn the_memo_does_not_hand_out_an_agent_card_past_its_end() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    let remote = serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    let until = Timestamp(now.millis() + 2 * MINUTE);
    remote.agent("alice@r.test", &SigningKey::from_seed([2; 32]), None, Some(until), now);

    let memo = Memo::default();
    f.agent_uncached(&memo, "alice@r.test").unwrap();
    let fetched = f.sent("r.test/agents");
    assert_eq!(fetched, 1);
    // Within its window the memo answers.
    f.w.clock.advance(2 * MINUTE - 1);
    f.agent_uncached(&memo, "alice@r.test").unwrap();
    assert_eq!(f.sent("r.test/agents"), fetched, "the memo answered");
    // At its end it does not: the card is fetched again, and refused as expired.
    f.w.clock.advance(1);
    let err = f.agent_uncached(&memo, "alice@r.test").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Forbidden, "{}", err.reason);
    assert_eq!(err.name(), "card_expired", "{}", err.reason);
    assert_eq!(f.sent("r.test/agents"), fetched + 1);
}

#[test]
fn a_cache_row_holding_another_domains_or_agents_card_is_not_trusted() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    let remote = serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    remote.agent("alice@r.test", &SigningKey::from_seed([2; 32]), None, None, now);
    let mallory = remote.agent("mallory@r.test", &SigningKey::from_seed([3; 32]), None, None, now);
    // A validly signed card of another domain, and mallory's card, filed under r.test and alice.
    let other_key = SigningKey::from_seed([4; 32]);
    let other = domain_card("s.test", "http://s.test", &other_key, vec![], now).to_value().canonical_string();
    let now_ms = now.millis();
    let mallory_text = mallory.to_value().canonical_string();
    block_on(f.db.batch(vec![
        nyx5_house::store::resolver::cache(DOMAIN, &other, "http://s.test", now_ms),
        nyx5_house::store::resolver::cache("alice@r.test", &mallory_text, "http://r.test", now_ms),
    ]))
    .unwrap();

    let r = f.domain(&Memo::default(), DOMAIN).unwrap();
    assert_eq!(r.card.domain(), DOMAIN);
    assert_ne!(r.via, "cache");
    let alice = f.agent(&Memo::default(), "alice@r.test").unwrap();
    assert_eq!(alice.address().as_str(), "alice@r.test");
    assert_eq!(f.w.sent_to("://r.test/agents/alice"), 1, "alice's card was fetched, not taken from mallory's row");
}

/// A chain `l<n>.….l1.l0@r.test`, each delegated by the next, `levels` names long.
fn chain(remote: &Remote, levels: usize, now: Timestamp) -> String {
    let mut local = "l0".to_owned();
    let mut key = SigningKey::from_seed([100; 32]);
    remote.agent(&format!("{local}@{DOMAIN}"), &key, None, None, now);
    for i in 1..levels {
        let parent = Address::parse(&format!("{local}@{DOMAIN}")).unwrap();
        let child_key = SigningKey::from_seed([100 + u8::try_from(i).unwrap(); 32]);
        local = format!("l{i}.{local}");
        remote.agent(&format!("{local}@{DOMAIN}"), &child_key, Some((&parent, &key)), None, now);
        key = child_key;
    }
    format!("{local}@{DOMAIN}")
}

#[test]
fn delegation_is_followed_eight_levels_up_and_no_further() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    let remote = serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);

    // The card itself and eight ancestors above it.
    let deepest = chain(&remote, 1 + nyx5_house::resolver::MAX_DELEGATION_DEPTH, now);
    let card = f.agent(&Memo::default(), &deepest).unwrap();
    assert_eq!(card.address().as_str(), deepest);

    // One more: refused, however it is asked.
    let f = Fixture::new();
    let remote = serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    let too_deep = chain(&remote, 2 + nyx5_house::resolver::MAX_DELEGATION_DEPTH, now);
    let err = f.agent(&Memo::default(), &too_deep).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Forbidden);
    assert_eq!(err.name(), "delegation_too_deep", "{}", err.reason);
}

#[test]
fn a_well_known_card_names_its_estafeta_and_anything_else_keeps_the_domain() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    for (domain, estafeta, expect) in [
        ("w1.test", "https://mail.w1.test/", "https://mail.w1.test"),
        ("w2.test", "http://mail.w2.test", "http://mail.w2.test"),
    ] {
        serve(&f.w, domain, &domain_card(domain, estafeta, &key, vec![], now), &key);
        let r = f.domain(&Memo::default(), domain).unwrap();
        assert_eq!((r.url.as_str(), r.via, r.anchor), (expect, "well-known", "first-use"), "{domain}");
    }
    // A location the caller knows is kept whatever the card names.
    let mut f = f;
    f.known.insert("w3.test".into(), ("http://w3.test".into(), "url"));
    serve(&f.w, "w3.test", &domain_card("w3.test", "https://elsewhere.test", &key, vec![], now), &key);
    let r = f.domain(&Memo::default(), "w3.test").unwrap();
    assert_eq!((r.url.as_str(), r.via), ("http://w3.test", "url"));
}

/// A DNS-over-HTTPS server answering `record` for every name.
pub(crate) fn serve_dns(w: &World, record: Option<String>) {
    let body = match record {
        Some(txt) => Value::Object(obj([
            ("Status", 0.into()),
            ("Answer", Value::Array(vec![Value::Object(obj([("type", 16.into()), ("data", txt.into())]))])),
        ])),
        None => Value::Object(obj([("Status", 3.into())])),
    }
    .canonical();
    w.fake("dns.test", move |_| OutResponse { status: 200, body: body.clone() });
}

/// A budgeted resolver (the index crawl's) spends one unit per request it sends, the DNS lookup
/// and a delegated card's fetch included, and refuses without sending once none is left.
#[test]
fn a_budget_pays_for_every_request_and_refuses_past_it() {
    let mut f = Fixture::new();
    f.doh = Some("https://dns.test/resolve".into());
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    serve_dns(&f.w, None);
    let remote = serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    remote.agent("alice@r.test", &SigningKey::from_seed([2; 32]), None, None, now);
    let alice = Address::parse("alice@r.test").unwrap();
    let memo = Memo::default();
    let budgeted = |budget| Resolver { budget: Some(budget), ..f.resolver(&memo, DbPins(&f.db)) };
    let sent = || f.w.sent_to("://dns.test/") + f.sent(DOMAIN);

    // The DNS lookup, the domain card and the agent card: two units are not enough.
    let two = Budget::new(2);
    let e = block_on(budgeted(&two).agent(&alice, false)).map(|_| ()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.reason);
    assert_eq!((two.left(), two.spent()), (0, true));
    assert_eq!((f.w.sent_to("://dns.test/"), f.sent(DOMAIN)), (1, 1), "the third request was never sent");

    // Enough of them: every request sent came out of the budget, and none was refused.
    let (before, plenty) = (sent(), Budget::new(10));
    block_on(budgeted(&plenty).agent(&alice, false)).unwrap();
    assert!(!plenty.spent());
    assert_eq!(sent() - before, 10 - plenty.left() as usize);
    assert!(plenty.left() < 10);

    // With none at all, nothing is sent.
    let (before, none) = (sent(), Budget::new(0));
    assert!(block_on(budgeted(&none).domain(DOMAIN, true)).is_err());
    assert!(none.spent());
    assert_eq!(sent(), before);
}

#[test]
fn a_dns_anchor_continuing_from_the_pin_moves_it() {
    let mut f = Fixture::new();
    f.doh = Some("https://dns.test/resolve".into());
    let now = f.w.clock.now();
    let old = SigningKey::from_seed([1; 32]);
    // No record yet: the key is pinned on first use.
    serve_dns(&f.w, None);
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &old, vec![], now), &old);
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().anchor, "first-use");
    assert_eq!(f.pin(DOMAIN), Some(old.public()));

    // The domain rotates, hands over from the pinned key, and publishes the new key in DNS.
    let new = SigningKey::from_seed([2; 32]);
    let until = Timestamp(now.millis() + 30 * DAY);
    let handover = old.sign(Context::DomainKeyHandover, &handover_message(DOMAIN, &old.public(), &new.public(), until));
    let listed = DomainKey { until: Some(until), handover: Some(handover), ..DomainKey::new(old.public(), None) };
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &new, vec![listed], now), &new);
    serve_dns(&f.w, Some(format!("v=nyx51; url=http://r.test; sig={}", new.public().to_b64())));
    f.w.clock.advance(limits::CARD_CACHE_MS + SECOND);
    let r = f.domain(&Memo::default(), DOMAIN).unwrap();
    assert_eq!((r.via, r.anchor), ("dns", "rotation"));
    assert_eq!(f.pin(DOMAIN), Some(new.public()), "the pin followed the handover");
    // The card cached with the moved pin is signed by it: another process takes it from the cache.
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().via, "cache");

    // DNS and the pin agree, but the operator pins another key between the read and the write:
    // the card is not cached past the pin it agreed with.
    f.w.clock.advance(limits::CARD_CACHE_MS + SECOND);
    let other = SigningKey::from_seed([9; 32]).public();
    let memo = Memo::default();
    let r = block_on(f.resolver(&memo, Meddled { pins: DbPins(&f.db), to: other, memo: &memo }).domain(DOMAIN, false));
    assert_eq!(r.map(|r| (r.via, r.anchor)).unwrap(), ("dns", "dns"));
    let fresh = block_on(DbPins(&f.db).cached(DOMAIN, f.w.clock.now().millis() - limits::CARD_CACHE_MS)).unwrap();
    assert!(fresh.is_none(), "no cache row for a pin that moved");
}

/// A peer anchored in DNS pins nothing. Once its cached card expired, fetching it again spent
/// one of its site's new names a minute, so a stranger who made the house look up made-up names
/// under that site (each fails) had it refused (429) for as long as the flood lasted, a key
/// rotation's refresh included. A name whose card verified is known for `KNOWN_MS`: it spends
/// nothing, and the made-up names still do.
#[test]
fn made_up_names_under_a_site_do_not_cut_off_the_peer_known_there() {
    let mut f = Fixture::new();
    f.doh = Some("https://dns.test/resolve".into());
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    serve_dns(&f.w, Some(format!("v=nyx51; url=http://r.test; sig={}", key.public().to_b64())));
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().via, "dns");
    assert_eq!(f.pin(DOMAIN), None, "a DNS anchor pins nothing");

    // Minutes later the cache has expired; in one minute a stranger spends the site's budget on
    // names that answer with another domain's card.
    f.w.clock.advance(limits::CARD_CACHE_MS + 1_000);
    let budget = nyx5_house::resolver::NEW_NAMES_PER_SITE_PER_MINUTE;
    for i in 0..budget {
        let e = f.domain(&Memo::default(), &format!("x{i}.{DOMAIN}")).map(|_| ()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Forbidden, "{}", e.reason);
    }
    let past = f.domain(&Memo::default(), &format!("x{budget}.{DOMAIN}")).map(|_| ()).unwrap_err();
    assert_eq!(past.kind, ErrorKind::RateLimited, "{}", past.reason);
    // The peer itself is fetched and verified again.
    let fetched = f.sent(DOMAIN);
    let r = f.domain(&Memo::default(), DOMAIN).unwrap();
    assert_eq!((r.via, f.sent(DOMAIN) - fetched), ("dns", 1));
    // Its fetches have a budget of their own: a known name whose cache keeps missing (its DNS
    // record pointed elsewhere since) cannot make the house fetch without a bound.
    let known_budget = nyx5_house::resolver::KNOWN_FETCHES_PER_SITE_PER_MINUTE;
    let memo = Memo::default();
    for _ in 1..known_budget {
        block_on(f.resolver(&memo, DbPins(&f.db)).domain(DOMAIN, true)).unwrap();
    }
    let e = block_on(f.resolver(&memo, DbPins(&f.db)).domain(DOMAIN, true)).map(|_| ()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited, "{}", e.reason);

    // Known names are forgotten a while after their last verification.
    let known = || {
        let n = block_on(f.db.query(nyx5_house::stmt!("SELECT count(*) AS n FROM known_names"))).unwrap();
        n[0].int("n").unwrap()
    };
    assert_eq!(known(), 1, "made-up names are not known");
    let later = f.w.clock.now().millis() + nyx5_house::resolver::KNOWN_MS + 1;
    block_on(f.db.batch(nyx5_house::queue::upkeep_statements(later).into_iter().map(|(s, _)| s).collect())).unwrap();
    assert_eq!(known(), 0);
}

/// Names known without a pin are bounded per site and in all, as pins are: a site's owner with
/// many names fills its own share, and nothing recorded is pushed out.
#[test]
fn known_names_are_bounded_per_site() {
    let f = Fixture::new();
    let per_site = nyx5_house::resolver::MAX_KNOWN_PER_SITE;
    let remember = |domain: &str, site: &str| {
        let stmt = nyx5_house::store::resolver::remember_name(domain, site, 1, per_site, 100_000);
        // Changed some rows (the name's, and on a first insert the counter's, as D1 counts)?
        block_on(f.db.batch(vec![stmt])).unwrap()[0] > 0
    };
    for i in 0..per_site {
        assert!(remember(&format!("n{i}.big.test"), "big.test"));
    }
    assert!(!remember("one-more.big.test", "big.test"), "past the site's share");
    assert!(remember("n0.big.test", "big.test"), "a known name has its time renewed");
    assert!(remember("other.test", "other.test"), "another site has its own share");
    let total = block_on(f.db.batch(vec![nyx5_house::store::resolver::remember_name("t.test", "t.test", 1, 64, 65)]));
    assert_eq!(total.unwrap()[0], 0, "past the table's bound (the counter row, not a count)");
}

/// An operator who names a peer's key in `hosts` keeps reaching the peer across the peer's
/// rotation while the old key's handover lasts (issue 35 §2: a rotation bounces nothing), as a
/// pin on first use does; a new key without a handover from the named one, or after it ended,
/// is refused as before.
#[test]
fn a_hosts_key_follows_its_handover_and_nothing_else() {
    let mut f = Fixture::new();
    let now = f.w.clock.now();
    let old = SigningKey::from_seed([1; 32]);
    f.hosts.insert(DOMAIN.into(), HostEntry { url: "http://r.test".into(), sig: Some(old.public()) });
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &old, vec![], now), &old);
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().via, "hosts");

    // A new key that the named one never handed over to.
    let new = SigningKey::from_seed([2; 32]);
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &new, vec![], now), &new);
    f.w.clock.advance(limits::CARD_CACHE_MS + 1_000);
    let e = f.domain(&Memo::default(), DOMAIN).map(|_| ()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Forbidden, "{}", e.reason);

    // The rotation done right: the named key hands over to the new one for 30 days.
    let until = Timestamp(now.millis() + 30 * DAY);
    let handover = old.sign(Context::DomainKeyHandover, &handover_message(DOMAIN, &old.public(), &new.public(), until));
    let listed = DomainKey { until: Some(until), handover: Some(handover), ..DomainKey::new(old.public(), None) };
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &new, vec![listed], now), &new);
    let r = f.domain(&Memo::default(), DOMAIN).unwrap();
    assert_eq!(r.via, "hosts");
    assert!(r.card.accepts_key(&new.public(), f.w.clock.now()));
    // From the cache too.
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().via, "cache");

    // Past the handover's end the file must name the new key.
    f.w.clock.advance(30 * DAY);
    let e = f.domain(&Memo::default(), DOMAIN).map(|_| ()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Forbidden, "{}", e.reason);
}

#[test]
fn repin_accepts_a_changed_key_only_when_asked() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let old = SigningKey::from_seed([1; 32]);
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &old, vec![], now), &old);
    f.domain(&Memo::default(), DOMAIN).unwrap();
    let new = SigningKey::from_seed([2; 32]);
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &new, vec![], now), &new);
    f.w.clock.advance(limits::CARD_CACHE_MS + SECOND);

    let err = f.domain(&Memo::default(), DOMAIN).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Forbidden);
    assert_eq!(f.pin(DOMAIN), Some(old.public()));
    f.repin.set(true);
    let r = f.domain(&Memo::default(), DOMAIN).unwrap();
    assert_eq!(r.anchor, "repin");
    assert_eq!(f.pin(DOMAIN), Some(new.public()));

    // A temporary failure is never a reason to repin: the pin stays.
    f.w.clock.advance(limits::CARD_CACHE_MS + SECOND);
    f.w.fake(DOMAIN, |_| OutResponse { status: 503, body: vec![] });
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap_err().kind, ErrorKind::Unavailable);
    assert_eq!(f.pin(DOMAIN), Some(new.public()));
}

#[test]
fn an_answer_larger_than_a_document_is_refused_as_too_large() {
    let f = Fixture::new();
    let big = vec![b' '; limits::MAX_DOCUMENT_BYTES + 1];
    f.w.fake(DOMAIN, move |_| OutResponse { status: 200, body: big.clone() });
    let err = f.domain(&Memo::default(), DOMAIN).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Forbidden);
    assert_eq!(err.name(), "peer_answer_too_large", "{}", err.reason);
}

#[test]
fn a_houses_answer_to_a_card_fetch_maps_to_one_kind() {
    let f = Fixture::new();
    let cases = [
        (404, ErrorKind::NotFound),
        (410, ErrorKind::NotFound),
        (301, ErrorKind::Unavailable),
        (399, ErrorKind::Unavailable),
        (421, ErrorKind::Unavailable),
        (429, ErrorKind::Unavailable),
        (500, ErrorKind::Unavailable),
        (503, ErrorKind::Unavailable),
        (400, ErrorKind::Forbidden),
        (403, ErrorKind::Forbidden),
        (420, ErrorKind::Forbidden),
    ];
    for (status, kind) in cases {
        f.w.fake(DOMAIN, move |_| OutResponse { status, body: vec![] });
        let err = f.domain(&Memo::default(), DOMAIN).unwrap_err();
        assert_eq!(err.kind, kind, "{status}: {}", err.reason);
        assert!(f.pin(DOMAIN).is_none(), "{status} pinned something");
    }
}

/// The house's pin store, with the operator acting between a resolution's read of the pin and
/// its write: each pin read is followed at once by the pin moving to `to`, and the memo of the
/// process forgetting the domain, as `Lookup::confirm_pin` does.
struct Meddled<'a> {
    pins: DbPins<'a, SqliteDb>,
    to: SigPublic,
    memo: &'a Memo,
}

impl PinStore for Meddled<'_> {
    async fn pin(&self, domain: &str) -> Result<Option<SigPublic>, Error> {
        let pin = self.pins.pin(domain).await?;
        let to = self.to.to_b64();
        let moved = nyx5_house::stmt!("UPDATE pins SET sig = ? WHERE domain = ?", to, domain.to_owned());
        self.pins.0.batch(vec![moved]).await.unwrap();
        self.memo.forget_domain(domain);
        Ok(pin)
    }
    async fn first_pin(&self, domain: &str, key: &SigPublic, card: ChainCard<'_>) -> Result<bool, Error> {
        self.pins.first_pin(domain, key, card).await
    }
    async fn move_pin(&self, d: &str, from: &SigPublic, to: &SigPublic, card: ChainCard<'_>) -> Result<bool, Error> {
        self.pins.move_pin(d, from, to, card).await
    }
    async fn refuse(&self, domain: &str, key: &SigPublic, now: i64) -> Result<(), Error> {
        self.pins.refuse(domain, key, now).await
    }
    async fn cached(&self, key: &str, fresh_after: i64) -> Result<Option<CachedCard>, Error> {
        self.pins.cached(key, fresh_after).await
    }
    async fn cache(&self, card: CacheEntry<'_>) -> Result<(), Error> {
        self.pins.cache(card).await
    }
    async fn cache_pinned(&self, pin: &SigPublic, card: ChainCard<'_>) -> Result<(), Error> {
        self.pins.cache_pinned(pin, card).await
    }
}

#[test]
fn a_pin_changed_during_a_resolution_keeps_its_card_out_of_the_cache() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().anchor, "first-use");
    let cached = || {
        let rows =
            block_on(f.db.query(nyx5_house::stmt!("SELECT count(*) AS n FROM card_slots WHERE key = ?", DOMAIN)));
        rows.unwrap()[0].int("n").unwrap()
    };
    assert_eq!(cached(), 1);
    block_on(f.db.batch(vec![nyx5_house::stmt!("DELETE FROM card_slots")])).unwrap();

    // The card continues from the pin the resolution read, but the operator confirmed another
    // key meanwhile: the answer stands for this request; neither the cache nor the memo of the
    // process carries it on.
    let other = SigningKey::from_seed([9; 32]).public();
    let memo = Memo::default();
    let meddled = Meddled { pins: DbPins(&f.db), to: other, memo: &memo };
    let r = block_on(f.resolver(&memo, meddled).domain(DOMAIN, false)).unwrap();
    assert_eq!(r.via, "well-known");
    assert_eq!(r.anchor, "pin");
    assert_eq!(cached(), 0, "cached only while the pin is the one the card was checked against");
    assert_eq!(f.pin(DOMAIN), Some(other));
    // The next resolution, in the same process, meets the operator's pin, and the card that does
    // not continue from it is refused, not served from the memo or the cache.
    let e = f.domain(&memo, DOMAIN).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Forbidden, "{e:?}");
}

#[test]
fn a_cached_card_is_not_trusted_past_a_pin_that_moved() {
    let f = Fixture::new();
    let now = f.w.clock.now();
    let key = SigningKey::from_seed([1; 32]);
    serve(&f.w, DOMAIN, &domain_card(DOMAIN, "http://r.test", &key, vec![], now), &key);
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().anchor, "first-use");
    assert_eq!(f.domain(&Memo::default(), DOMAIN).unwrap().via, "cache");
    // However the row got there, a card signed by a key the domain is no longer pinned to is
    // not taken from the cache: the resolution goes to the source and meets the pin.
    let other = SigningKey::from_seed([9; 32]).public().to_b64();
    let moved = nyx5_house::stmt!("UPDATE pins SET sig = ? WHERE domain = ?", other, DOMAIN);
    block_on(f.db.batch(vec![moved])).unwrap();
    let e = f.domain(&Memo::default(), DOMAIN).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Forbidden, "{e:?}");
    assert_eq!(f.sent(DOMAIN), 2, "fetched again, not served from the cache");
}
