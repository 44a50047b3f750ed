//! Tables that stop growing (issue 35 §3) and deadline notices that know the contract settled
//! (§4): a month of a steady workload with every table's row count printed each day, and one
//! test per grower that was found.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::print_stdout)]

mod kit;

use std::collections::BTreeMap;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::LIBRO;
use nyx5_house::ports::{Db, PortError, Stmt};
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::stmt;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, Quote, QuoteDraft};
use nyx5_proto::{Envelope, Object, Timestamp, Value};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

fn admin(h: &TestHouse) -> String {
    format!("Bearer admin-{}", h.config.domain)
}

/// Registers (or updates) `agent` through the operator, with `extra` members.
fn enrol(h: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) -> u16 {
    call(h, "POST", "/agents", &[("authorization", &admin(h))], &agent.registration(h, extra)).status
}

/// POST /agents with `agent`'s body and a token by `owner` (a rotation when the keys differ).
fn register_by(h: &TestHouse, owner: &Agent, agent: &Agent, extra: &[(&str, Value)]) -> u16 {
    let body = agent.registration(h, extra);
    let token = owner.token(h, "POST", "/agents", &body.canonical());
    call(h, "POST", "/agents", &[("authorization", &token)], &body).status
}

fn count(db: &impl Db, sql: &'static str) -> i64 {
    block_on(db.query(stmt!(sql))).unwrap()[0].int("n").unwrap()
}

/// The row count of every table of `h` (SQLite's own and the migrations' bookkeeping aside),
/// by name, in one query.
fn table_rows(h: &TestHouse) -> BTreeMap<String, i64> {
    let names = block_on(h.db.query(stmt!(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%migrations' ORDER BY name"
    )))
    .unwrap();
    let sql: Vec<String> = names
        .iter()
        .map(|r| r.text("name").unwrap())
        .map(|t| format!("SELECT '{t}' AS name, count(*) AS n FROM \"{t}\""))
        .collect();
    // A test's query: built once a day from the schema's own names.
    let sql: &'static str = Box::leak(sql.join(" UNION ALL ").into_boxed_str());
    let rows = block_on(h.db.query(Stmt::new(sql, vec![]))).unwrap();
    rows.iter().map(|r| (r.text("name").unwrap().to_owned(), r.int("n").unwrap())).collect()
}

/// A quote from `seller` to `buyer` at `house`, signed now.
fn quote(
    w: &World,
    house: &str,
    seller: &Agent,
    buyer: &Agent,
    id: &str,
    kind: ContractKind,
    terms: Option<Object>,
) -> Quote {
    QuoteDraft {
        id: id.into(),
        house: house.into(),
        seller: seller.address.clone(),
        buyer: buyer.address.clone(),
        contract: kind,
        price: 3,
        currency: "tok".into(),
        concept: "work".into(),
        terms,
        arbiter: None,
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&seller.sig)
    .unwrap()
}

/// Sends an operation to the Libro of `h` and ticks until its receipt is back.
fn operate(w: &World, h: &TestHouse, who: &Agent, id: &str, body: Object) {
    assert_eq!(who.send(h, &signed_op(w, who, &h.config.domain, id, body)).status, 202, "{id}");
    w.tick_all();
}

/// A clear message from `from` to `to`, created now, due `after` ms from now (0: at once).
fn message(w: &World, from: &Agent, to: &[&Agent], id: &str, after: i64) -> Envelope {
    let mut d = Draft::new(
        id.into(),
        from.address.clone(),
        to.iter().map(|a| a.address.clone()).collect(),
        w.clock.now(),
        Content::new("text/plain", "hello there".into()),
    );
    if after > 0 {
        d.deliver_after = Some(Timestamp(w.clock.now().millis() + after));
    }
    d.build().unwrap().sign(&from.sig).unwrap()
}

/// Reads `who`'s whole mailbox and acknowledges all of it.
fn read_and_ack(h: &TestHouse, who: &Agent) -> usize {
    let ids: Vec<Value> = mailbox(h, who).iter().map(|e| Value::from(e.id())).collect();
    for chunk in ids.chunks(100) {
        let body = Value::Object(obj([("ids", Value::Array(chunk.to_vec()))]));
        json(&who.post(h, &format!("/mailbox/{}/ack", who.address.local()), &body), 200);
    }
    ids.len()
}

/// The Libro's notices in `who`'s mailbox.
fn notices(h: &TestHouse, who: &Agent) -> Vec<Object> {
    mailbox(h, who)
        .into_iter()
        .filter(|e| {
            e.from().local() == LIBRO && e.content().is_some_and(|c| c.media == nyx5_house::libro::NOTICE_MEDIA)
        })
        .filter_map(|e| e.content().and_then(|c| c.body.as_object().cloned()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// registrations

/// An agent that updates its card every few minutes leaves its first registration and its latest
/// few, not a row per update. Without the bound: 51 rows.
#[test]
fn card_updates_keep_a_bounded_record_of_registrations() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@a.test", 11);
    assert_eq!(enrol(&h, &ana, &[]), 201);
    assert_eq!(enrol(&h, &bo, &[]), 201);
    for i in 0..50 {
        w.clock.advance(3 * MINUTE);
        let about = Value::Object(obj([("description", format!("version {i}").into())]));
        assert_eq!(register_by(&h, &ana, &ana, &[("capabilities", about)]), 200);
    }
    let kept =
        block_on(h.db.query(stmt!("SELECT via, at FROM registrations WHERE local = 'ana' ORDER BY id"))).unwrap();
    println!("ana's registrations kept: {}", kept.len());
    assert_eq!(kept.len() as i64, nyx5_house::store::agents::REGISTRATIONS_KEPT);
    // The first (how the name was enrolled) and the latest updates.
    assert_eq!(kept[0].text("via"), Some("admin"));
    assert_eq!(kept.last().unwrap().int("at"), Some(w.clock.now().millis()));
    // bo's record is not touched by ana's updates.
    assert_eq!(count(&h.db, "SELECT count(*) AS n FROM registrations WHERE local = 'bo'"), 1);
}

// ---------------------------------------------------------------------------------------------
// reset

/// The operator's reset (the owner lost the key, or a thief holds it) starts afresh: the lists a
/// thief could have set go with the webhook. Without the fix the block list outlives the reset
/// and the owner's mail from a.test is still refused.
#[test]
fn the_operators_reset_clears_the_lists_with_the_webhook() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    assert_eq!(enrol(&h, &ana, &[("webhook", "http://hook.test/x".into())]), 201);
    let lists = Value::parse_str(r#"{"allow":{"add":["friend.test"]},"block":{"add":["@a.test"]}}"#).unwrap();
    json(&ana.post(&h, "/lists/ana", &lists), 200);
    assert_eq!(count(&h.db, "SELECT count(*) AS n FROM lists WHERE local = 'ana'"), 2);
    // The owner's new key, by the operator, with `reset`.
    let fresh = Agent::new("ana@a.test", 44);
    assert_eq!(enrol(&h, &fresh, &[("reset", Value::Bool(true))]), 200);
    let settings = json(&fresh.get(&h, "/agents/ana/settings"), 200);
    let settings = settings.as_object().unwrap();
    assert_eq!(settings["webhook"], Value::Null);
    assert_eq!(settings["lists"].canonical_string(), r#"{"allow":[],"block":[]}"#, "{settings:?}");
    assert_eq!(count(&h.db, "SELECT count(*) AS n FROM lists WHERE local = 'ana'"), 0);
    // An update that is not a reset keeps the lists.
    json(&fresh.post(&h, "/lists/ana", &lists), 200);
    assert_eq!(register_by(&h, &fresh, &fresh, &[]), 200);
    assert_eq!(count(&h.db, "SELECT count(*) AS n FROM lists WHERE local = 'ana'"), 2);
}

// ---------------------------------------------------------------------------------------------
// pins

fn pin(domain: &str, site: &str, at: i64) -> Vec<Stmt> {
    vec![nyx5_house::store::resolver::insert_pin(domain, site, "key", at, 4, 1_000)]
}

fn pins_of(db: &SqliteDb, site: &str) -> Vec<String> {
    let rows = block_on(db.query(stmt!("SELECT domain FROM pins WHERE site = ? ORDER BY domain", site))).unwrap();
    rows.iter().map(|r| r.text("domain").unwrap().to_owned()).collect()
}

/// A site at its bound of pins is not refused a new domain: the batch goes through and pins
/// nothing (the resolver then trusts the card unpinned, as past the total), and no pin already
/// there is pushed out. Without the fix the fifth pin fails the batch (`guard`, a 503).
#[test]
fn a_site_at_its_bound_of_pins_is_not_refused_and_keeps_its_pins() {
    let db = SqliteDb::memory().unwrap();
    block_on(db.batch(pin("other.test", "other.test", 0))).unwrap();
    // A pin and its counter's update: two rows, as D1 counts a statement's.
    for i in 1..=4 {
        assert_eq!(block_on(db.batch(pin(&format!("n{i}.mint.test"), "mint.test", i))).unwrap(), [2]);
    }
    let changes = match block_on(db.batch(pin("n5.mint.test", "mint.test", 5))) {
        Ok(c) => c,
        Err(PortError::Constraint { name }) => panic!("refused ({name}) rather than served unpinned"),
        Err(e) => panic!("{e:?}"),
    };
    assert_eq!(changes, [0], "nothing pinned");
    assert_eq!(pins_of(&db, "mint.test"), ["n1.mint.test", "n2.mint.test", "n3.mint.test", "n4.mint.test"]);
    // Another site is not held to mint.test's share.
    assert_eq!(block_on(db.batch(pin("x.other.test", "other.test", 6))).unwrap(), [2]);
    assert_eq!(count(&db, "SELECT n FROM row_counts WHERE name = 'pins'"), 6);
}

/// Pinning reads the table's size from the counter row the triggers keep, not by counting up
/// to 100,000 pins in every insert: the counter follows inserts and deletes, and it alone
/// decides whether the table is full. Without the fix the insert counts the table (and pins).
#[test]
fn the_total_of_pins_is_a_counter_row_not_a_count_per_insert() {
    let db = SqliteDb::memory().unwrap();
    for i in 0..3 {
        block_on(db.batch(pin(&format!("d{i}.test"), &format!("d{i}.test"), i))).unwrap();
    }
    block_on(db.batch(vec![stmt!("DELETE FROM pins WHERE domain = 'd0.test'")])).unwrap();
    assert_eq!(count(&db, "SELECT n FROM row_counts WHERE name = 'pins'"), 2);
    // The counter says the table is full (as it would hold 1,000 pins): nothing is pinned.
    block_on(db.batch(vec![stmt!("UPDATE row_counts SET n = 1000 WHERE name = 'pins'")])).unwrap();
    assert_eq!(block_on(db.batch(pin("new.test", "new.test", 7))).unwrap(), [0]);
    assert_eq!(count(&db, "SELECT count(*) AS n FROM pins"), 2);
}

/// Pins made before migration 0005 had no site, so they counted towards no site's bound: the
/// tick gives them their site (here `example.co.uk` for a name under it).
#[test]
fn pins_without_a_site_are_given_theirs_by_the_tick() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    block_on(h.db.batch(vec![stmt!(
        "INSERT INTO pins (domain, sig, first_seen) VALUES ('mail.example.co.uk', 'k', 0), ('old.test', 'k', 0)"
    )]))
    .unwrap();
    w.tick_all();
    assert_eq!(count(&h.db, "SELECT count(*) AS n FROM pins WHERE site IS NULL"), 0);
    assert_eq!(
        count(&h.db, "SELECT count(*) AS n FROM pins WHERE domain = 'mail.example.co.uk' AND site = 'example.co.uk'"),
        1
    );
}

// ---------------------------------------------------------------------------------------------
// re-certification

/// Stored cards the house cannot certify again (changed behind its back) do not hold the places
/// of a pass for ever: with as many of them as a pass takes, sorted first, the cards after them
/// are still certified with the new key. Without the cursor no pass ever reaches them.
#[test]
fn tampered_cards_do_not_stall_re_certification() {
    use nyx5_house::config::PreviousDomainKey;
    use nyx5_house::domain_keys::RECERTIFY_PER_TICK;
    use nyx5_proto::card::AgentCard;
    use nyx5_proto::crypto::SigningKey;
    let w = World::new();
    let old = SigningKey::from_seed([70; 32]);
    let mut config = w.config("b.test", Registration::Admin);
    config.key = old.clone();
    let b = w.start(config);
    let n = usize::try_from(RECERTIFY_PER_TICK).unwrap();
    for i in 0..n + 3 {
        assert_eq!(enrol(&b, &Agent::new(&format!("a{i:02}@b.test"), 30 + i as u8), &[]), 201);
    }
    // The first pass's worth of cards, tampered with in the database.
    for i in 0..n {
        let local = format!("a{i:02}");
        let text = block_on(b.db.query(stmt!("SELECT card FROM agents WHERE local = ?", local.as_str()))).unwrap()[0]
            .text("card")
            .unwrap()
            .to_owned();
        let mut card = AgentCard::parse(text.as_bytes()).unwrap().object().clone();
        card.insert("capabilities".into(), Value::Object(obj([("description", "changed".into())])));
        let changed = Value::Object(card).canonical_string();
        block_on(b.db.batch(vec![stmt!(
            "UPDATE agents SET card = ? WHERE local = ?",
            changed.as_str(),
            local.as_str()
        )]))
        .unwrap();
    }
    drop(b);
    let mut config = w.config("b.test", Registration::Admin);
    let current = config.key.public().to_b64();
    config.previous_keys =
        vec![PreviousDomainKey { key: old, created: None, until: Timestamp(w.clock.now().millis() + DAY) }];
    let b = w.restart(config);
    let mut done = 0;
    for _ in 0..4 {
        done += block_on(b.registry().recertify_some(b.now())).unwrap();
    }
    assert_eq!(done, 3, "the three good cards are certified again");
    let moved = block_on(b.db.query(stmt!(
        "SELECT count(*) AS n FROM agents WHERE json_extract(card, '$.certification.kid') = ?",
        current.as_str()
    )))
    .unwrap()[0]
        .int("n")
        .unwrap();
    assert_eq!(moved, 3);
}

// ---------------------------------------------------------------------------------------------
// deadline notices (§4)

/// An escrow released before its deadline sends no deadline notice saying "due": its notices
/// are cancelled in the batch that settles it, for a local party and one at another house. An
/// escrow still open at its deadline is warned of as before. Without the fix both parties of the
/// released escrow get `{"state": "due"}` at the deadline.
#[test]
fn a_settled_escrow_sends_no_deadline_notice() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 80);
    let bo = Agent::new("bo@b.test", 81);
    let cy = Agent::new("cy@a.test", 82);
    assert_eq!(enrol(&a, &ana, &[]), 201);
    assert_eq!(enrol(&b, &bo, &[]), 201);
    assert_eq!(enrol(&a, &cy, &[]), 201);
    topup(&a, "ana@a.test", 50);
    let deadline = Timestamp(w.clock.now().millis() + 3 * HOUR);
    let terms = || Some(obj([("deadline", deadline.to_rfc3339().into())]));
    let accept = |q: Quote| obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))]);
    // Two escrows with the same deadline: one ana releases at once, one left open.
    operate(&w, &a, &ana, "acc-1", accept(quote(&w, "a.test", &bo, &ana, "q-settled", ContractKind::Escrow, terms())));
    operate(&w, &a, &ana, "acc-2", accept(quote(&w, "a.test", &cy, &ana, "q-open", ContractKind::Escrow, terms())));
    let queued = count(&a.db, "SELECT count(*) AS n FROM jobs WHERE state = 'pending'");
    assert_eq!(queued, 4, "a notice for each party of each escrow");
    operate(&w, &a, &ana, "rel-1", obj([("op", "release".into()), ("contract", "q-settled".into())]));
    assert_eq!(count(&a.db, "SELECT count(*) AS n FROM jobs WHERE state = 'pending'"), 2, "the settled one's are gone");
    w.clock.advance(3 * HOUR + 1_000);
    for _ in 0..3 {
        w.tick_all();
    }
    let told = |h: &TestHouse, who: &Agent| -> Vec<String> {
        notices(h, who)
            .iter()
            .filter(|n| n.contains_key("deadline"))
            .map(|n| format!("{}:{}", n["contract"].as_str().unwrap(), n["state"].as_str().unwrap()))
            .collect()
    };
    assert_eq!(told(&a, &ana), ["q-open:due"]);
    assert_eq!(told(&a, &cy), ["q-open:due"]);
    assert!(told(&b, &bo).is_empty(), "{:?}", told(&b, &bo));
    // Nothing half-cancelled is left in the queue.
    assert_eq!(
        count(&a.db, "SELECT count(*) AS n FROM outbox WHERE envelope_id NOT IN (SELECT envelope_id FROM jobs)"),
        0
    );
}

// ---------------------------------------------------------------------------------------------
// a month of a steady workload

/// Tables that legitimately grow with use, and why (README, "What a house keeps and for how
/// long"). Each is allowed at most `per_day` rows a day per unit of the day's work, nothing else.
const GROW_WITH_USE: &[(&str, &str)] = &[
    ("mailbox", "an envelope's id stays a duplicate for ever (its body is dropped 7 days after the ack)"),
    ("libro_entries", "the journal is append-only and hash-chained"),
    ("libro_lines", "the journal's lines, one per account an entry moves, each with the account's balance after it"),
    ("libro_ops", "an operation's id and receipt answer its replays for ever"),
    ("libro_contracts", "a contract is the parties' record of what was agreed and how it ended"),
];

/// Rows of every table of each house at the end of each day.
type Counts = BTreeMap<String, Vec<i64>>;

/// 30 simulated days of a steady population (two houses, four agents each) sending local and
/// remote mail (some deferred a day), reading and acknowledging it, trading (spot and escrow with
/// deadlines, some released before them), updating cards and lists and rotating keys, with the
/// tick running every 20 minutes. Every table's rows are
/// printed each day. A table plateaus when its largest count over days 20–30 is no more than its
/// largest over days 10–19 plus a margin (10 % + 10 rows); the tables of [`GROW_WITH_USE`] are
/// named, and may grow, but only by a bounded number of rows per unit of work each day.
#[test]
fn a_month_of_steady_use_leaves_every_table_on_a_plateau() {
    const DAYS: usize = 30;
    const AGENTS: usize = 4;
    let started = std::time::Instant::now();
    let w = World::new();
    let houses = [w.house("a.test", Registration::Admin), w.house("b.test", Registration::Admin)];
    // Each agent, and the key seed it holds now (a rotation takes the next one).
    let mut agents: Vec<(usize, Agent)> = Vec::new();
    let mut seeds: Vec<u8> = Vec::new();
    for (hi, h) in houses.iter().enumerate() {
        for i in 0..AGENTS {
            let seed = u8::try_from(10 + hi * 100 + i).unwrap();
            let agent = Agent::new(&format!("ag{i}@{}", h.config.domain), seed);
            assert_eq!(enrol(h, &agent, &[]), 201);
            topup(h, agent.address.as_str(), 1_000_000);
            agents.push((hi, agent));
            seeds.push(seed);
        }
    }
    // An agent of a.test whose mail waits for ag0's approval (the operator's hold, docs/SPEC.md
    // §7c): its drafts must plateau too.
    let held = Agent::new("held@a.test", 250);
    assert_eq!(enrol(&houses[0], &held, &[]), 201);
    let hold = Value::parse_str(r#"{"approver":"ag0@a.test","rule":{"all":true}}"#).unwrap();
    assert_eq!(
        call(&houses[0], "PUT", "/agents/held/hold", &[("authorization", &admin(&houses[0]))], &hold).status,
        200
    );
    let mut counts: [Counts; 2] = [Counts::new(), Counts::new()];
    let mut work_per_day = Vec::new();
    let mut n = 0u64;
    for day in 1..=DAYS {
        let mut work = 0i64;
        // Four rounds a day, six hours apart.
        for round in 0..4 {
            for k in 0..agents.len() {
                let (hi, ref from) = agents[k];
                let (_, ref local_peer) = agents[(k + 1) % agents.len()];
                let (_, ref remote_peer) = agents[(k + AGENTS) % agents.len()];
                n += 1;
                // One envelope in eight is deferred by a day.
                let after = if n.is_multiple_of(8) { DAY } else { 0 };
                let env = message(&w, from, &[local_peer, remote_peer], &format!("m-{n}"), after);
                assert_eq!(from.send(&houses[hi], &env).status, 202);
                work += 2;
            }
            // One trade per house per round: a spot, or an escrow with a deadline two days on
            // that is released the same day half the time.
            for (hi, h) in houses.iter().enumerate() {
                let buyer = &agents[hi * AGENTS + round % AGENTS].1;
                let seller = &agents[hi * AGENTS + (round + 1) % AGENTS].1;
                n += 1;
                let id = format!("q-{n}");
                let kind = if round % 2 == 0 { ContractKind::Spot } else { ContractKind::Escrow };
                let deadline = Timestamp(w.clock.now().millis() + 2 * DAY).to_rfc3339();
                let terms = (kind == ContractKind::Escrow).then(|| obj([("deadline", deadline.into())]));
                let q = quote(&w, &h.config.domain, seller, buyer, &id, kind, terms);
                operate(
                    &w,
                    h,
                    buyer,
                    &format!("acc-{n}"),
                    obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))]),
                );
                if kind == ContractKind::Escrow && n % 4 == 1 {
                    operate(
                        &w,
                        h,
                        buyer,
                        &format!("rel-{n}"),
                        obj([("op", "release".into()), ("contract", id.into())]),
                    );
                }
                work += 1;
            }
            // The day's ticks: every 20 minutes for six hours.
            for _ in 0..18 {
                w.clock.advance(20 * MINUTE);
                w.tick_all();
            }
            for (hi, agent) in &agents {
                read_and_ack(&houses[*hi], agent);
            }
        }
        // Three drafts a day from the held agent: one approved (it leaves), one declined, one left
        // to expire; the upkeep removes each a week after it expires.
        for fate in ["approve", "decline", "expire"] {
            n += 1;
            let id = format!("h-{n}");
            let env = message(&w, &held, &[&agents[AGENTS].1], &id, 0);
            assert_eq!(held.send(&houses[0], &env).status, 202);
            if fate != "expire" {
                let path = format!("/drafts/ag0/{id}/{fate}");
                json(&agents[0].1.post(&houses[0], &path, &Value::Object(Default::default())), 200);
            }
            work += 1;
        }
        // Each day every agent updates its card and changes its block list (today's stranger
        // in, yesterday's out), and one rotates its key.
        for (hi, agent) in &agents {
            let about = Value::Object(obj([("description", format!("day {day}").into())]));
            assert_eq!(register_by(&houses[*hi], agent, agent, &[("capabilities", about)]), 200);
            let change = format!(r#"{{"block":{{"add":["spam{day}.test"],"remove":["spam{}.test"]}}}}"#, day - 1);
            let path = format!("/lists/{}", agent.address.local());
            json(&agent.post(&houses[*hi], &path, &Value::parse_str(&change).unwrap()), 200);
        }
        let r = (day * 3) % agents.len();
        let (hi, ref old) = agents[r];
        seeds[r] = seeds[r].wrapping_add(8);
        let seed = seeds[r];
        let new = Agent::new(old.address.as_str(), seed);
        assert_eq!(register_by(&houses[hi], old, &new, &[]), 200);
        agents[r].1 = new;
        work_per_day.push(work);
        for (hi, h) in houses.iter().enumerate() {
            for (t, rows) in table_rows(h) {
                counts[hi].entry(t).or_default().push(rows);
            }
        }
    }
    for (hi, h) in houses.iter().enumerate() {
        println!("{} (rows at the end of each day 1–{DAYS}):", h.config.domain);
        for (t, c) in &counts[hi] {
            println!("  {t:<28} {c:?}");
        }
    }
    println!("work a day: {:?}; {:.1} s", work_per_day, started.elapsed().as_secs_f64());
    let max_work = *work_per_day.iter().max().unwrap();
    let mut broken = Vec::new();
    for (hi, h) in houses.iter().enumerate() {
        for (t, c) in &counts[hi] {
            let before = *c[9..19].iter().max().unwrap();
            let after = *c[19..].iter().max().unwrap();
            if let Some((_, why)) = GROW_WITH_USE.iter().find(|(g, _)| g == t) {
                // Grows with use: by at most one row a day per unit of the day's work (an
                // envelope's recipient, an operation), and no faster late than early.
                let growth: Vec<i64> = c.windows(2).map(|p| p[1] - p[0]).collect();
                let (early, late) = (growth[9..18].iter().max().unwrap(), growth[18..].iter().max().unwrap());
                println!("  {t} grows by at most {late} rows a day: {why}");
                if *late > max_work || late > early {
                    broken.push(format!(
                        "{}: {t} grew {late} rows in a day (days 10–19: {early}; work a day: {max_work})",
                        h.config.domain
                    ));
                }
            } else if after > before + before / 10 + 10 {
                broken.push(format!(
                    "{}: {t} did not plateau: days 10–19 at most {before}, days 20–30 {after}",
                    h.config.domain
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}
