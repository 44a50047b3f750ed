//! The federated index (spec §13, docs/SPEC.md §13): registration as the gate, the crawl by
//! ticks within a budget and resuming where it stopped, cards that stop being listed or
//! certified leaving the index, the signed and ranked search — houses on real SQLite, talking
//! over the kit's network.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod kit;

use kit::*;
use nyx5_house::index::{self, CrawlReport};
use nyx5_house::ports::Stmt;
use nyx5_house::{Registration, stmt};
use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::{Context, SigningKey};
use nyx5_proto::json::obj;
use nyx5_proto::sign::verify_object;
use nyx5_proto::{Object, Value};

fn caps(listed: bool, description: &str, skills: &[&str]) -> Value {
    let mut o = obj([("listed", Value::Bool(listed)), ("description", description.into())]);
    o.insert("accepts".into(), Value::Array(vec!["text/plain".into()]));
    for s in skills {
        o.insert((*s).to_owned(), Value::Bool(true));
    }
    Value::Object(o)
}

/// Registers `agent` at `house` (open registration) with `capabilities`, or updates its card.
fn join(house: &TestHouse, agent: &Agent, capabilities: Value) -> u16 {
    let body = agent.registration(house, &[("capabilities", capabilities)]);
    let admin = format!("Bearer admin-{}", house.config.domain);
    let first = call(house, "POST", "/agents", &[("authorization", &admin)], &body);
    if first.status != 409 {
        return first.status;
    }
    let token = agent.token(house, "POST", "/agents", &body.canonical());
    call(house, "POST", "/agents", &[("authorization", &token)], &body).status
}

fn index_house(w: &World, domain: &str, fetches: u32) -> std::rc::Rc<TestHouse> {
    let mut c = w.config(domain, Registration::Open);
    c.index_enabled = true;
    c.index_fetches = fetches;
    w.start(c)
}

fn register(idx: &TestHouse, domain: &str) -> (u16, Object) {
    let r = call(idx, "POST", "/index/houses", &[], &Value::Object(obj([("domain", domain.into())])));
    (r.status, r.value().unwrap().as_object().unwrap().clone())
}

/// Runs the index's crawl until nothing is due (or 200 ticks), adding up what it did.
fn crawl(idx: &TestHouse) -> CrawlReport {
    let mut total = CrawlReport::default();
    for _ in 0..200 {
        let r = block_on(idx.index().crawl_index(idx.config.index_fetches)).unwrap();
        total.steps += r.steps;
        total.fetches += r.fetches;
        total.failed += r.failed;
        if r.steps == 0 {
            break;
        }
    }
    total
}

/// A search's answer, its signature checked against the index's key.
fn search(idx: &TestHouse, query: &str) -> Object {
    let v = json(&call_raw(idx, "GET", &format!("/index/agents{query}"), &[], vec![]), 200);
    let o = v.as_object().unwrap().clone();
    let key = idx.config.key.public();
    verify_object(&o, "signature", Context::IndexAnswer, |k| *k == key).expect("signed by the index's house");
    o
}

fn found(answer: &Object) -> Vec<String> {
    answer["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_object().unwrap()["address"].as_str().unwrap().to_owned())
        .collect()
}

fn run(idx: &TestHouse, sql: &str) {
    // Statements hold `&'static str`; a test's few leaked strings are nothing.
    let sql: &'static str = sql.to_owned().leak();
    block_on(idx.db.sqlite.batch(vec![Stmt::new(sql, vec![])])).unwrap();
}

fn count(idx: &TestHouse, sql: &'static str) -> i64 {
    block_on(idx.db.sqlite.query(stmt!(sql))).unwrap()[0].int("n").unwrap()
}

use nyx5_house::ports::Db as _;

/// Two houses with agents, and an index that knows them.
struct Town {
    w: World,
    a: std::rc::Rc<TestHouse>,
    b: std::rc::Rc<TestHouse>,
    idx: std::rc::Rc<TestHouse>,
}

fn town(fetches: u32) -> Town {
    let w = World::new();
    let a = w.house("a.test", Registration::Open);
    let b = w.house("b.test", Registration::Open);
    assert_eq!(join(&a, &Agent::new("translator@a.test", 10), caps(true, "Spanish to English", &["translate"])), 201);
    assert_eq!(join(&a, &Agent::new("quiet@a.test", 11), caps(false, "translates too, unlisted", &["translate"])), 201);
    assert_eq!(join(&b, &Agent::new("poet@b.test", 12), caps(true, "writes verse; can translate", &["write"])), 201);
    assert_eq!(join(&b, &Agent::new("translate@b.test", 13), caps(true, "a name that says it", &["summarize"])), 201);
    let idx = index_house(&w, "idx.test", fetches);
    Town { w, a, b, idx }
}

#[test]
fn an_index_finds_listed_cards_of_the_houses_registered_with_it_and_signs_its_answers() {
    let t = town(5);
    let (status, row) = register(&t.idx, "a.test");
    assert_eq!(status, 201, "{row:?}");
    assert_eq!(row["key"].as_str(), Some(t.a.config.key.public().to_b64().as_str()));
    assert_eq!(register(&t.idx, "b.test").0, 201);
    assert_eq!(register(&t.idx, "a.test").0, 200, "registering twice is no error and adds nothing");
    // Nothing is searchable before a crawl.
    assert!(found(&search(&t.idx, "?q=translate")).is_empty());
    let report = crawl(&t.idx);
    assert_eq!(report.failed, 0);
    assert!(report.fetches >= 4, "two domain cards and two directories at least: {report:?}");
    // The unlisted agent is not enumerated; the ranking puts a capability named `translate`
    // first, then the address, then the description.
    let answer = search(&t.idx, "?q=translate");
    assert_eq!(found(&answer), ["translator@a.test", "translate@b.test", "poet@b.test"]);
    for c in answer["agents"].as_array().unwrap() {
        let mut card = c.as_object().unwrap().clone();
        let origin = card.remove("_house").unwrap();
        let card = AgentCard::from_object(card).unwrap();
        assert_eq!(origin.as_str(), Some(card.address().domain()));
        // The card is the origin's, certified by the origin: it verifies against its domain card.
        let home = if card.address().domain() == "a.test" { &t.a } else { &t.b };
        card.verify(home.card(), None, t.idx.now()).unwrap();
    }
    assert_eq!(answer["index"].as_str(), Some("idx.test"));
    assert_eq!(answer["query"].as_object().unwrap()["q"].as_str(), Some("translate"));
    // Filters: the house, a capability, a media type.
    assert_eq!(found(&search(&t.idx, "?house=b.test")), ["poet@b.test", "translate@b.test"]);
    assert_eq!(found(&search(&t.idx, "?capability=write")), ["poet@b.test"]);
    assert!(found(&search(&t.idx, "?accepts=image/png")).is_empty());
    // A tampered answer does not verify.
    let mut forged = search(&t.idx, "?q=poet");
    forged.insert("agents".into(), Value::Array(vec![]));
    let key = t.idx.config.key.public();
    assert!(verify_object(&forged, "signature", Context::IndexAnswer, |k| *k == key).is_err());
    assert!(verify_object(&search(&t.idx, ""), "signature", Context::Historial, |k| *k == key).is_err());
    // The listing tells what was crawled.
    let v = json(&call_raw(&t.idx, "GET", "/index/houses", &[], vec![]), 200);
    let houses = v.as_object().unwrap()["houses"].as_array().unwrap();
    assert_eq!(houses.len(), 2);
    assert_eq!(houses[0].as_object().unwrap()["cards"].as_safe_integer(), Some(1));
    assert_eq!(houses[1].as_object().unwrap()["cards"].as_safe_integer(), Some(2));
    assert_eq!(houses[0].as_object().unwrap()["passes"].as_safe_integer(), Some(1));
    drop(t.w);
}

#[test]
fn registration_is_gated_by_a_verified_domain_card_and_bounded() {
    let t = town(5);
    // Not a house (nothing answers), not a name, not JSON, not an index.
    let (status, _) = register(&t.idx, "nowhere.test");
    assert!((400..600).contains(&status) && status != 201 && status != 200, "{status}");
    assert_eq!(register(&t.idx, "not a domain").0, 400);
    assert_eq!(call_raw(&t.idx, "POST", "/index/houses", &[], b"{".to_vec()).status, 400);
    assert_eq!(
        call(&t.a, "POST", "/index/houses", &[], &Value::Object(obj([("domain", "b.test".into())]))).status,
        404
    );
    assert_eq!(call_raw(&t.a, "GET", "/index/agents", &[], vec![]).status, 404);
    assert_eq!(call_raw(&t.idx, "DELETE", "/index/agents", &[], vec![]).status, 405);
    // A search term is at most 256 bytes (docs/SPEC.md §13).
    for name in ["q", "capability", "accepts", "house"] {
        let at =
            |n: usize| call_raw(&t.idx, "GET", &format!("/index/agents?{name}={}", "x".repeat(n)), &[], vec![]).status;
        assert_eq!((at(256), at(257)), (200, 400), "{name}");
    }
    // A house whose domain card is signed by a key other than the one the index knows for it.
    t.w.fake("evil.test", |_| nyx5_house::ports::OutResponse { status: 200, body: b"{}".to_vec() });
    assert!(register(&t.idx, "evil.test").0 >= 400);
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses"), 0, "nothing failed is kept");
    // The table is bounded: at the bound, a new house is refused (one already there is not).
    assert_eq!(register(&t.idx, "a.test").0, 201);
    for i in 1..index::MAX_HOUSES {
        run(
            &t.idx,
            &format!("INSERT INTO index_houses (domain, url, added_at, next_at) VALUES ('h{i}.example', 'x', 0, 9e15)"),
        );
    }
    let (status, refusal) = register(&t.idx, "b.test");
    assert_eq!(status, 409);
    assert_eq!(refusal["error"].as_str(), Some("index_full"));
    assert_eq!(
        refusal["reason"].as_str(),
        Some("this index crawls 1000 houses already and takes no more"),
        "the bound is named, not the constraint"
    );
    assert_eq!(register(&t.idx, "a.test").0, 200);
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses"), index::MAX_HOUSES);
}

#[test]
fn a_crawl_resumes_where_the_last_tick_stopped_and_keeps_to_its_budget() {
    let w = World::new();
    let a = w.house("a.test", Registration::Open);
    for i in 0..120u8 {
        let agent = Agent::new(&format!("agent{i:03}@a.test"), i.wrapping_add(20));
        assert_eq!(join(&a, &agent, caps(true, "one of many", &["work"])), 201);
    }
    let idx = index_house(&w, "idx.test", 1);
    assert_eq!(register(&idx, "a.test").0, 201);
    let cards = || count(&idx, "SELECT count(*) AS n FROM index_cards");
    // One fetch a tick: the domain card, then a page of 50, another, the last 20.
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = block_on(idx.tick()).unwrap();
        assert!(r.crawl.fetches <= 1, "{r:?}");
        seen.push(cards());
    }
    assert_eq!(seen, [0, 50, 100, 120]);
    // The history of every card is read, one a tick, and the pass ends.
    for _ in 0..120 {
        block_on(idx.tick()).unwrap();
    }
    assert_eq!(count(&idx, "SELECT count(*) AS n FROM index_cards WHERE history_at IS NULL"), 0);
    assert_eq!(count(&idx, "SELECT count(*) AS n FROM index_cards WHERE history = 0"), 120, "no sales yet, published");
    let r = block_on(idx.tick()).unwrap();
    assert_eq!(r.crawl, CrawlReport::default(), "nothing is due until the next pass");
    // Paging the answers is stable: pages of 7 add up to the whole, in order, without overlap.
    let whole = found(&search(&idx, "?limit=100&q=work"));
    let mut paged = Vec::new();
    for p in 0..18 {
        paged.extend(found(&search(&idx, &format!("?limit=7&offset={}&q=work", p * 7))));
    }
    assert_eq!(whole.len(), 100);
    assert_eq!(paged[..100], whole[..]);
    assert_eq!(paged.len(), 120);
}

#[test]
fn cards_leave_the_index_when_their_origin_stops_listing_or_certifying_them() {
    let t = town(5);
    assert_eq!(register(&t.idx, "a.test").0, 201);
    assert_eq!(register(&t.idx, "b.test").0, 201);
    crawl(&t.idx);
    assert_eq!(found(&search(&t.idx, "?house=b.test")), ["poet@b.test", "translate@b.test"]);
    // The poet unlists itself; nothing changes until the next pass, which drops it.
    assert_eq!(join(&t.b, &Agent::new("poet@b.test", 12), caps(false, "gone quiet", &["write"])), 200);
    assert_eq!(crawl(&t.idx).steps, 0, "the next pass is not due yet");
    t.w.clock.advance(index::RECRAWL_MS);
    crawl(&t.idx);
    assert_eq!(found(&search(&t.idx, "?house=b.test")), ["translate@b.test"]);
    // b.test starts signing with a key that does not continue from the one the index knows:
    // its domain no longer certifies what the index holds, and every card of it goes.
    t.w.clock.advance(index::RECRAWL_MS);
    let mut other = t.b.config.clone();
    other.key = SigningKey::from_seed([99; 32]);
    drop(t.b);
    let _b = t.w.restart(other);
    let r = crawl(&t.idx);
    assert!(r.failed >= 1, "{r:?}");
    assert!(found(&search(&t.idx, "?house=b.test")).is_empty());
    assert_eq!(found(&search(&t.idx, "")), ["translator@a.test"]);
    let v = json(&call_raw(&t.idx, "GET", "/index/houses", &[], vec![]), 200);
    let b = v.as_object().unwrap()["houses"].as_array().unwrap()[1].as_object().unwrap().clone();
    assert_eq!(b["domain"].as_str(), Some("b.test"));
    assert!(b["last_error"].as_str().is_some_and(|e| !e.is_empty()));
    assert_eq!(b["cards"].as_safe_integer(), Some(0));
    // A house that never verifies again is forgotten after a week of failing.
    for _ in 0..40 {
        t.w.clock.advance(index::RETRY_MAX_MS);
        crawl(&t.idx);
    }
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses WHERE domain = 'b.test'"), 0);
    assert_eq!(found(&search(&t.idx, "")), ["translator@a.test"], "a.test is crawled all along");
}

#[test]
fn an_unreachable_house_keeps_its_cards_and_is_tried_again_later() {
    let t = town(5);
    assert_eq!(register(&t.idx, "a.test").0, 201);
    crawl(&t.idx);
    t.w.clock.advance(index::RECRAWL_MS);
    t.w.down("a.test", true);
    let r = crawl(&t.idx);
    assert_eq!(r.failed, 1, "one failure, then a wait: {r:?}");
    assert_eq!(found(&search(&t.idx, "")), ["translator@a.test"], "a network failure is no reason to drop anything");
    t.w.clock.advance(index::retry_after(0) - 1);
    assert_eq!(crawl(&t.idx).steps, 0, "not before its retry");
    t.w.down("a.test", false);
    t.w.clock.advance(1);
    let r = crawl(&t.idx);
    assert_eq!(r.failed, 0);
    let v = json(&call_raw(&t.idx, "GET", "/index/houses", &[], vec![]), 200);
    let a = v.as_object().unwrap()["houses"].as_array().unwrap()[0].as_object().unwrap().clone();
    assert_eq!(a["failures"].as_safe_integer(), Some(0));
    assert_eq!(a["passes"].as_safe_integer(), Some(2));
}

#[test]
fn a_hostile_directory_gets_only_what_its_domain_certifies_into_the_index() {
    let w = World::new();
    let a = w.house("a.test", Registration::Open);
    assert_eq!(join(&a, &Agent::new("honest@a.test", 10), caps(true, "honest", &["work"])), 201);
    let idx = index_house(&w, "idx.test", 5);
    assert_eq!(register(&idx, "a.test").0, 201);
    // Take a real card and its domain's directory, then serve a doctored directory in a.test's
    // place: a card of another house, a card with a changed description, an unlisted card, junk.
    let page = json(&call_raw(&a, "GET", "/agents", &[], vec![]), 200);
    let honest = page.as_object().unwrap()["agents"].as_array().unwrap()[0].clone();
    let mut doctored = honest.as_object().unwrap().clone();
    doctored.insert("capabilities".into(), caps(true, "doctored", &["work"]));
    let mut elsewhere = honest.as_object().unwrap().clone();
    elsewhere.insert("address".into(), "honest@b.test".into());
    let agents =
        vec![honest.clone(), Value::Object(doctored), Value::Object(elsewhere), Value::Null, Value::from(7i64)];
    let body = Value::Object(obj([("house", "a.test".into()), ("agents", Value::Array(agents))])).canonical();
    let card_body = a.card().to_value().canonical();
    w.fake("a.test", move |req| {
        let body = if req.url.contains("/.well-known/") {
            card_body.clone()
        } else if req.url.contains("/agents?") {
            body.clone()
        } else {
            return nyx5_house::ports::OutResponse { status: 404, body: b"{}".to_vec() };
        };
        nyx5_house::ports::OutResponse { status: 200, body }
    });
    crawl(&idx);
    let v = json(&call_raw(&idx, "GET", "/index/houses", &[], vec![]), 200);
    assert_eq!(found(&search(&idx, "")), ["honest@a.test"], "{}", v.canonical_string());
    let answer = search(&idx, "");
    let agents = answer["agents"].as_array().unwrap().to_vec();
    let mut card = agents[0].as_object().unwrap().clone();
    card.remove("_house");
    assert_eq!(Value::Object(card), honest);
}

#[test]
fn an_index_crawls_its_own_house_without_fetching_and_ranks_by_history_on_a_tie() {
    let w = World::new();
    let idx = index_house(&w, "idx.test", 5);
    for (i, name) in ["alpha", "beta", "gamma"].iter().enumerate() {
        let agent = Agent::new(&format!("{name}@idx.test"), 40 + u8::try_from(i).unwrap());
        assert_eq!(join(&idx, &agent, caps(true, "does work", &["work"])), 201);
    }
    assert_eq!(register(&idx, "idx.test").0, 201);
    let r = crawl(&idx);
    assert_eq!(r.fetches, 0, "its own directory and histories come from itself: {r:?}");
    assert_eq!(found(&search(&idx, "?q=work")), ["alpha@idx.test", "beta@idx.test", "gamma@idx.test"]);
    // The history (released sales in the origin's signed §21 document) breaks ties of the text
    // score; it never outranks a better text match.
    run(&idx, "UPDATE index_cards SET history = 5 WHERE address = 'gamma@idx.test'");
    run(&idx, "UPDATE index_cards SET history = 2 WHERE address = 'beta@idx.test'");
    assert_eq!(found(&search(&idx, "?q=work")), ["gamma@idx.test", "beta@idx.test", "alpha@idx.test"]);
    assert_eq!(found(&search(&idx, "?q=alpha")), ["alpha@idx.test"]);
}

#[test]
fn only_a_history_signed_by_the_origin_for_that_agent_counts() {
    let w = World::new();
    let a = w.house("a.test", Registration::Open);
    let ana = Agent::new("ana@a.test", 10);
    assert_eq!(join(&a, &ana, caps(true, "x", &[])), 201);
    let body = call_raw(&a, "GET", "/agents/ana/historial", &[], vec![]).body;
    let domain = block_on(a.lookup().resolve_domain("a.test")).unwrap();
    let now = a.now();
    assert_eq!(index::released_sales(&body, &ana.address, &domain, now), Some(0));
    let other = nyx5_proto::Address::parse("bob@a.test").unwrap();
    assert_eq!(index::released_sales(&body, &other, &domain, now), None, "another agent's history");
    let mut doc = Value::parse(&body, 1 << 20).unwrap().as_object().unwrap().clone();
    let mut selling = doc["vendiendo"].as_object().unwrap().clone();
    selling.insert("liberados".into(), 1000.into());
    doc.insert("vendiendo".into(), Value::Object(selling));
    let forged = Value::Object(doc.clone()).canonical();
    assert_eq!(index::released_sales(&forged, &ana.address, &domain, now), None, "a changed count");
    nyx5_proto::sign::sign_object(&mut doc, "signature", Context::Historial, &SigningKey::from_seed([7; 32]));
    let resigned = Value::Object(doc).canonical();
    assert_eq!(index::released_sales(&resigned, &ana.address, &domain, now), None, "signed by a stranger");
    assert_eq!(index::released_sales(b"[]", &ana.address, &domain, now), None);
}

#[test]
fn the_crawl_keeps_the_times_the_spec_gives() {
    const MIN: i64 = 60 * 1000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;
    // Retries: ten minutes, doubling, to a day (docs/SPEC.md §13).
    let waits: Vec<i64> = [-1, 0, 1, 2, 7, 8, 16, 100].into_iter().map(index::retry_after).collect();
    assert_eq!(waits, [10 * MIN, 10 * MIN, 20 * MIN, 40 * MIN, 1280 * MIN, DAY, DAY, DAY]);

    let t = town(5);
    assert_eq!(register(&t.idx, "a.test").0, 201);
    crawl(&t.idx);
    assert_eq!(t.w.sent_to("/historial"), 1, "the listed card's history, read in the first pass");
    // A pass ends an hour before the next begins.
    t.w.clock.advance(HOUR - 1);
    assert_eq!(crawl(&t.idx).steps, 0, "not before the hour");
    t.w.clock.advance(1);
    assert!(crawl(&t.idx).steps > 0, "due at the hour");
    // A history is read again once it is older than a day: not in the passes of the first day.
    for _ in 1..24 {
        t.w.clock.advance(HOUR);
        crawl(&t.idx);
    }
    assert_eq!(t.w.sent_to("/historial"), 1, "24 hours old, not older");
    t.w.clock.advance(HOUR);
    crawl(&t.idx);
    assert_eq!(t.w.sent_to("/historial"), 2);

    // A house unreachable for a week without a verified pass is forgotten, not sooner.
    let verified = t.w.clock.now().millis();
    t.w.down("a.test", true);
    t.w.clock.advance(HOUR);
    assert_eq!(crawl(&t.idx).failed, 1);
    t.w.clock.advance(verified + 7 * DAY - t.w.clock.now().millis());
    assert_eq!(crawl(&t.idx).failed, 1);
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses"), 1, "a week to the millisecond");
    assert_eq!(found(&search(&t.idx, "")), ["translator@a.test"], "its cards are kept meanwhile");
    t.w.clock.advance(DAY);
    crawl(&t.idx);
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses"), 0);
    assert!(found(&search(&t.idx, "")).is_empty());
}

#[test]
fn a_tick_takes_at_most_its_steps() {
    let w = World::new();
    let idx = index_house(&w, "idx.test", 1_000);
    // Seventy houses due now, none of which answers: each step is one failed fetch.
    let now = w.clock.now().millis();
    for i in 0..70 {
        run(
            &idx,
            &format!(
                "INSERT INTO index_houses (domain, url, added_at, next_at) VALUES ('h{i}.test', 'https://h{i}.test', {now}, {now})"
            ),
        );
    }
    let r = block_on(idx.index().crawl_index(1_000)).unwrap();
    assert_eq!((r.steps, r.failed), (index::MAX_STEPS, index::MAX_STEPS), "{r:?}");
    let r = block_on(idx.index().crawl_index(1_000)).unwrap();
    assert_eq!((r.steps, r.failed), (6, 6), "the rest, the next tick");
}

/// A card as its house holds it, as a directory shows it.
fn card_of(house: &TestHouse, local: &str) -> Value {
    block_on(house.lookup().local_card(local)).unwrap().unwrap().to_value()
}

#[test]
fn a_pass_drops_what_fails_to_verify_and_keeps_what_it_cannot_check_now() {
    use nyx5_house::ports::OutResponse;
    use nyx5_proto::card::{Delegation, Scope};
    use std::cell::Cell;
    use std::rc::Rc;
    let w = World::new();
    let b = w.house("b.test", Registration::Open);
    let c = w.house("c.test", Registration::Open);
    let boss = Agent::new("boss@b.test", 20);
    assert_eq!(join(&b, &boss, caps(true, "runs things", &["work"])), 201);
    let helper = Agent::new("helper.boss@b.test", 21);
    let d = Delegation::sign(
        &boss.address,
        &helper.address,
        &helper.sig.public(),
        &Scope::default(),
        None,
        b.now(),
        &boss.sig,
    )
    .unwrap();
    let body =
        helper.registration(&b, &[("delegation", d.to_value()), ("capabilities", caps(true, "helps", &["work"]))]);
    assert_eq!(call(&b, "POST", "/agents", &[], &body).status, 201);
    assert_eq!(join(&b, &Agent::new("solo@b.test", 22), caps(true, "alone", &["work"])), 201);
    assert_eq!(join(&b, &Agent::new("quiet@b.test", 23), caps(false, "unlisted", &["work"])), 201);
    assert_eq!(join(&c, &Agent::new("other@c.test", 24), caps(true, "elsewhere", &["work"])), 201);
    let idx = index_house(&w, "idx.test", 20);
    assert_eq!(register(&idx, "b.test").0, 201);
    assert_eq!(register(&idx, "c.test").0, 201);
    crawl(&idx);
    let all = ["boss@b.test", "helper.boss@b.test", "other@c.test", "solo@b.test"];
    assert_eq!(found(&search(&idx, "")), all);

    // b.test turns hostile: its directory shows solo's card doctored, quiet's real card though
    // it is unlisted, and c.test's real card; the boss's own card cannot be fetched for now (so
    // its helper's delegation cannot be checked), nor any history.
    let mut doctored = card_of(&b, "solo").as_object().unwrap().clone();
    doctored.insert("capabilities".into(), caps(true, "doctored", &["work"]));
    let page = vec![
        card_of(&b, "boss"),
        card_of(&b, "helper.boss"),
        Value::Object(doctored),
        card_of(&b, "quiet"),
        card_of(&c, "other"),
    ];
    let page = Value::Object(obj([("house", "b.test".into()), ("agents", Value::Array(page))])).canonical();
    let domain_card = b.card().to_value().canonical();
    let history = Rc::new(Cell::new(503u16));
    let status = history.clone();
    w.fake("b.test", move |req| {
        let (status, body) = if req.url.contains("/.well-known/") {
            (200, domain_card.clone())
        } else if req.url.contains("/agents?") {
            (200, page.clone())
        } else if req.url.contains("/historial") {
            (status.get(), b"{}".to_vec())
        } else {
            (503, b"{}".to_vec())
        };
        OutResponse { status, body }
    });
    w.clock.advance(index::RECRAWL_MS);
    crawl(&idx);
    assert_eq!(
        found(&search(&idx, "")),
        ["boss@b.test", "helper.boss@b.test", "other@c.test"],
        "the doctored card is dropped; the helper, unchecked for now, stays; quiet and c.test's card are not b's to add or drop"
    );

    // Histories: an unreachable one keeps the last reading; one that is gone counts none.
    run(&idx, "UPDATE index_cards SET history = 5 WHERE address = 'boss@b.test'");
    let boss_history =
        || count(&idx, "SELECT coalesce(history, -1) AS n FROM index_cards WHERE address = 'boss@b.test'");
    w.clock.advance(index::HISTORY_MS + index::RECRAWL_MS);
    crawl(&idx);
    assert_eq!(boss_history(), 5, "a 503 keeps what was read");
    history.set(404);
    w.clock.advance(index::HISTORY_MS + index::RECRAWL_MS);
    crawl(&idx);
    assert_eq!(boss_history(), -1, "a 404 says there is none");
}

#[test]
fn a_house_last_verified_long_ago_gets_one_more_try_before_it_is_forgotten() {
    let t = town(5);
    assert_eq!(register(&t.idx, "a.test").0, 201);
    crawl(&t.idx);
    // The index does not run for eight days; then a.test does not answer its first try.
    t.w.clock.advance(8 * 24 * index::RECRAWL_MS);
    t.w.down("a.test", true);
    assert_eq!(crawl(&t.idx).failed, 1);
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses"), 1, "one failure forgets nothing");
    t.w.clock.advance(index::retry_after(1));
    assert_eq!(crawl(&t.idx).failed, 1);
    assert_eq!(count(&t.idx, "SELECT count(*) AS n FROM index_houses"), 0, "the second forgets it");
}
