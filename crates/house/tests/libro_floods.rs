//! The Libro under floods, time, and what it delivers to others (issue 34 §4): several agents
//! of one house in one process, a real SQLite, operations sent through `/outbound` (or
//! `/inbound` from another house) and worked by the house's own tick.
//!
//! - Operations are counted per local agent (a subagent with its root) and per foreign site, and
//!   reads, settlements and the rest each have their own budget; the queue lets each sender take
//!   its turn. Two agents flooding their house's Libro delay a third agent's refund by at most
//!   one tick.
//! - An operation is judged at the time the house first received it: a forfeit queued before a
//!   bond expires forfeits it, however late the tick; a bondholder's flood cannot make the
//!   deadline pass first.
//! - What an operation's sender makes the Libro deliver to someone else is bounded as its mail
//!   is: block list (a subagent counted as its root), inbox policy, quota.
//! - An operation lives an hour from its first receipt: a copy that comes later is refused for
//!   good (410, kept), so an accept refused while its sender had no money never goes through
//!   after a top-up.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::print_stdout)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::LIBRO;
use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, Quote, QuoteDraft};
use nyx5_proto::{Envelope, Object, Timestamp, Value};

const A: &str = "a.test";
const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;

fn register(h: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) {
    let body = agent.registration(h, extra);
    let admin = format!("Bearer admin-{}", h.config.domain);
    assert_eq!(call(h, "POST", "/agents", &[("authorization", &admin)], &body).status, 201);
}

fn agent(h: &TestHouse, address: &str, seed: u8) -> Agent {
    let a = Agent::new(address, seed);
    register(h, &a, &[]);
    a
}

/// `address`, a subagent of `parent` (no authority of its own), registered.
fn subagent(h: &TestHouse, parent: &Agent, address: &str, seed: u8) -> Agent {
    use nyx5_proto::card::{Delegation, Scope};
    let child = Agent::new(address, seed);
    let d = Delegation::sign(
        &parent.address,
        &child.address,
        &child.sig.public(),
        &Scope::default(),
        None,
        h.now(),
        &parent.sig,
    )
    .unwrap();
    register(h, &child, &[("delegation", d.to_value())]);
    child
}

fn quote(w: &World, seller: &Agent, buyer: &Agent, id: &str, kind: ContractKind, price: i64) -> Quote {
    QuoteDraft {
        id: id.into(),
        house: A.into(),
        seller: seller.address.clone(),
        buyer: buyer.address.clone(),
        contract: kind,
        price,
        currency: "tok".into(),
        concept: "work".into(),
        terms: None,
        arbiter: None,
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&seller.sig)
    .unwrap()
}

fn accept_op(q: &Quote) -> Object {
    obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))])
}

/// `who` hands operation `id` to its house (`POST /outbound`): queued, not yet done.
fn queue_op(w: &World, h: &TestHouse, who: &Agent, id: &str, body: Object) {
    let status = who.send(h, &signed_op(w, who, A, id, body)).status;
    assert_eq!(status, 202, "{id} queued");
}

/// Whether the Libro did operation `id` (its row holds a receipt).
fn done(h: &TestHouse, id: &str) -> bool {
    let rows = block_on(h.db.query(stmt!("SELECT receipt FROM libro_ops WHERE envelope_id = ?", id))).unwrap();
    rows.first().and_then(|r| r.text("receipt")).is_some_and(|r| !r.is_empty())
}

/// The refusal kept for operation `id`, if any: (code, reason).
fn kept_refusal(h: &TestHouse, id: &str) -> Option<(i64, String)> {
    let rows = block_on(h.db.query(stmt!("SELECT refused, reason FROM libro_ops WHERE envelope_id = ?", id))).unwrap();
    rows.first().and_then(|r| Some((r.int("refused")?, r.text("reason")?.to_owned())))
}

fn libro_mail(h: &TestHouse, who: &Agent) -> Vec<Envelope> {
    mailbox(h, who).into_iter().filter(|e| e.from().local() == LIBRO).collect()
}

/// The state of contract `id`.
fn state(h: &TestHouse, id: &str) -> String {
    let rows = block_on(h.db.query(stmt!("SELECT state FROM libro_contracts WHERE id = ?", id))).unwrap();
    rows[0].text("state").unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------------
// Floods

/// Two agents each queue as many free `statement` reads as their house lets them in a minute
/// (60 apiece: 120, the Libro's whole minute under the old count per site); then a third agent,
/// carla, refunds an escrow to its buyer. The next tick does carla's refund: the flood delays it
/// by at most one tick. (Before: every agent of the house shared one bucket of 120 operations a
/// minute, which the reads spent, and the queue worked the flood first, a tick's batch at a
/// time: the refund waited for the flood, then got 429 and waited again.)
#[test]
fn two_flooding_agents_delay_a_third_agents_refund_by_at_most_one_tick() {
    let w = World::new();
    let h = w.start(w.config(A, Registration::Admin));
    let ana = agent(&h, "ana@a.test", 1);
    let bo = agent(&h, "bo@a.test", 2);
    let carla = agent(&h, "carla@a.test", 3);
    let dan = agent(&h, "dan@a.test", 4);
    topup(&h, "dan@a.test", 100);
    queue_op(&w, &h, &dan, "acc-1", accept_op(&quote(&w, &carla, &dan, "job-1", ContractKind::Escrow, 40)));
    w.tick_all();
    assert_eq!(state(&h, "job-1"), "held");
    assert_eq!(balance(&h, "dan@a.test"), 60);

    w.clock.advance(MINUTE);
    let per_agent = h.config.outbound_per_agent_per_minute;
    for i in 0..per_agent {
        for who in [&ana, &bo] {
            let id = format!("{}-read-{i}", who.address.local());
            queue_op(&w, &h, who, &id, obj([("op", "statement".into()), ("limit", 1.into())]));
        }
    }
    w.clock.advance(1);
    queue_op(&w, &h, &carla, "refund-1", obj([("op", "refund".into()), ("contract", "job-1".into())]));

    let mut ticks = 0;
    while !done(&h, "refund-1") && ticks < 20 {
        w.tick_all();
        w.clock.advance(SECOND);
        ticks += 1;
    }
    let reads = block_on(h.db.query(stmt!("SELECT count(*) AS n FROM libro_ops WHERE envelope_id LIKE '%-read-%'")))
        .unwrap()[0]
        .int("n")
        .unwrap();
    println!("flood: {} reads queued, {reads} done; the refund was done after {ticks} tick(s)", 2 * per_agent);
    assert!(done(&h, "refund-1"), "the refund is done");
    assert!(ticks <= 1, "the refund waited {ticks} ticks behind the flood");
    assert_eq!(state(&h, "job-1"), "refunded");
    assert_eq!(balance(&h, "dan@a.test"), 100);
}

/// The same flood from a subagent counts towards its root's budget, not a new one: a flooding
/// agent gains nothing by enrolling subagents; and a flood of reads spends no settlement.
#[test]
fn a_subagent_counts_with_its_root_and_reads_spend_no_settlement() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.inbound_per_domain_per_minute = 3;
    let h = w.start(c);
    let ana = agent(&h, "ana@a.test", 1);
    let bot = subagent(&h, &ana, "bot.ana@a.test", 2);
    let bo = agent(&h, "bo@a.test", 3);
    let card = |who: &Agent| block_on(h.lookup().local_card(who.address.local())).unwrap().unwrap();
    let hand = |who: &Agent, id: &str, body: Object| {
        let env = signed_op(&w, who, A, id, body);
        let c = card(who);
        let v = env.verify(&c, h.now()).unwrap();
        match block_on(h.libro().operate(&v, &c)) {
            nyx5_house::mailbox::Outcome::Rejected(e) => e.code(),
            _ => 200,
        }
    };
    let balance_op = || obj([("op", "balance".into())]);
    assert_eq!(hand(&ana, "r-1", balance_op()), 200);
    assert_eq!(hand(&bot, "r-2", balance_op()), 200);
    assert_eq!(hand(&bot, "r-3", balance_op()), 200);
    assert_eq!(hand(&ana, "r-4", balance_op()), 429, "ana and its subagent share one budget of reads");
    assert_eq!(hand(&bo, "r-5", balance_op()), 200, "bo has a budget of its own");
    // ana's reads spent nothing of its settlements: a refund it cannot do is refused for what it
    // is (404), not for the reads.
    let refund = obj([("op", "refund".into()), ("contract", "none".into())]);
    assert_eq!(hand(&ana, "s-1", refund), 404);
}

// ---------------------------------------------------------------------------------------------
// Receipts to others

/// mallory, with nothing in its account, grants 20 mandates of 1 tok to each of three agents:
/// vic, whose inbox asks a stamp of 50 tok; fay, whose mailbox is full; and gus, who blocked
/// mallory — the grants coming from mallory's subagent. None of them hears of it: what an
/// operation makes the Libro deliver to someone else is bounded as the operator's mail is.
/// (Before: all 60 receipts arrived, carrying mallory's text, past the stamp, the quota and the
/// block.) Parties who agreed to hear from the operator still do: a seller with a stamp inbox
/// hears of its quote's acceptance.
#[test]
fn receipts_to_others_keep_to_their_inbox_policy_quota_and_blocks() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.mailbox_max_envelopes = 3;
    let h = w.start(c);
    let mallory = agent(&h, "mallory@a.test", 1);
    let bot = subagent(&h, &mallory, "bot.mallory@a.test", 2);
    let vic = Agent::new("vic@a.test", 3);
    register(&h, &vic, &[("inbox", Value::Object(obj([("policy", "stamp".into()), ("price", 50.into())])))]);
    let fay = agent(&h, "fay@a.test", 4);
    let gus = agent(&h, "gus@a.test", 5);
    let block = obj([("block", Value::Object(obj([("add", Value::Array(vec!["mallory@a.test".into()]))])))]);
    json(&gus.post(&h, "/lists/gus", &Value::Object(block)), 200);
    // fay's mailbox is full: three messages wait.
    let ed = agent(&h, "ed@a.test", 6);
    for i in 0..3 {
        let d = Draft::new(
            format!("m-{i}"),
            ed.address.clone(),
            vec![fay.address.clone()],
            w.clock.now(),
            Content::new("text/plain", "hello".into()),
        );
        assert_eq!(ed.send(&h, &d.build().unwrap().sign(&ed.sig).unwrap()).status, 202);
    }
    w.tick_all();
    assert_eq!(mailbox(&h, &fay).len(), 3);

    for i in 0..20 {
        for (who, to) in [(&mallory, &vic), (&mallory, &fay), (&bot, &gus)] {
            let id = format!("grant-{}-{i}", to.address.local());
            let body = obj([
                ("op", "mandate".into()),
                ("grantee", to.address.as_str().into()),
                ("cap", 1.into()),
                ("scope", Value::Object(obj([("concepts", Value::Array(vec!["buy gold at evil.example".into()]))]))),
            ]);
            queue_op(&w, &h, who, &id, body);
        }
        w.tick_all();
    }
    let grants = block_on(h.db.query(stmt!("SELECT count(*) AS n FROM libro_mandates"))).unwrap()[0].int("n");
    println!("mandates granted: {grants:?}");
    assert_eq!(grants, Some(60), "every grant is done: what it could not deliver holds up nothing");
    for who in [&vic, &fay, &gus] {
        let got = libro_mail(&h, who).len();
        println!("{}: {got} receipts from the Libro", who.address);
        assert_eq!(got, 0, "{} hears nothing of mallory's grants", who.address);
    }
    assert_eq!(mailbox(&h, &fay).len(), 3, "fay's mailbox holds what it held");
    // The operator hears of its own operations as before.
    assert!(libro_mail(&h, &mallory).len() >= 20);

    // vic sells to fay's neighbour ed: vic agreed to hear from ed by quoting to it.
    topup(&h, "ed@a.test", 10);
    queue_op(&w, &h, &ed, "acc-v", accept_op(&quote(&w, &vic, &ed, "sale-1", ContractKind::Spot, 5)));
    w.tick_all();
    assert!(done(&h, "acc-v"));
    assert_eq!(libro_mail(&h, &vic).len(), 1, "the seller hears of its sale");
}

/// A block of an agent holds its subagents' mail too (a subagent counted as its root).
#[test]
fn a_block_of_an_agent_holds_its_subagents_mail() {
    let w = World::new();
    let h = w.start(w.config(A, Registration::Admin));
    let mallory = agent(&h, "mallory@a.test", 1);
    let bot = subagent(&h, &mallory, "bot.mallory@a.test", 2);
    let gus = agent(&h, "gus@a.test", 3);
    let block = obj([("block", Value::Object(obj([("add", Value::Array(vec!["mallory@a.test".into()]))])))]);
    json(&gus.post(&h, "/lists/gus", &Value::Object(block)), 200);
    let d = Draft::new(
        "m-1".into(),
        bot.address.clone(),
        vec![gus.address.clone()],
        w.clock.now(),
        Content::new("text/plain", "hi".into()),
    );
    assert_eq!(bot.send(&h, &d.build().unwrap().sign(&bot.sig).unwrap()).status, 202);
    w.tick_all();
    assert!(mailbox(&h, &gus).is_empty());
    assert_eq!(bounce(&h, &bot, "m-1"), 403);
}

// ---------------------------------------------------------------------------------------------
// Refusals kept

/// cy offers the desk (`tareas@`) a task while the desk has not its price: refused 402. The
/// operator tops the desk up; the same envelope comes again (a late copy): refused again, with
/// the same code, and nothing is taken. (Before: the desk's 402 was answered before the Libro
/// kept it, and the late copy was taken after the top-up.)
#[test]
fn an_accept_refused_for_want_of_money_stays_refused_after_a_top_up() {
    use nyx5_proto::crypto::{hex, sha256};
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.verifica_enabled = true;
    c.tareas_enabled = true;
    w.fake("work.example", |_| nyx5_house::ports::OutResponse { status: 200, body: b"x".to_vec() });
    let h = w.start(c);
    let cy = agent(&h, "cy@a.test", 7);
    let verify =
        format!(r#"[{{"type":"sha256","url":"https://work.example/{{contract}}","expect":"{}"}}]"#, hex(&sha256(b"x")));
    let task = obj([
        ("id", "a".into()),
        ("price", 10.into()),
        ("statement", "do task a".into()),
        ("verify", Value::parse_str(&verify).unwrap()),
    ]);
    let admin = "Bearer admin-a.test";
    assert_eq!(call(&h, "POST", "/tareas", &[("authorization", admin)], &Value::Object(task)).status, 201);
    let listed = json(&call(&h, "GET", "/tareas", &[], &Value::Null), 200);
    let terms = listed.as_object().unwrap()["tasks"].as_array().unwrap()[0].as_object().unwrap()["terms"]
        .as_object()
        .unwrap()
        .clone();
    let desk = nyx5_proto::Address::parse("tareas@a.test").unwrap();
    let q = QuoteDraft {
        id: "0f1e2d3c-4b5a-4968-8776-65544332211f".into(),
        house: A.into(),
        seller: cy.address.clone(),
        buyer: desk.clone(),
        contract: ContractKind::Escrow,
        price: 10,
        currency: "tok".into(),
        concept: "task a".into(),
        terms: Some(terms),
        arbiter: Some(nyx5_proto::Address::parse("verifica@a.test").unwrap()),
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&cy.sig)
    .unwrap();
    let env = Draft::new(
        "take-1".into(),
        cy.address.clone(),
        vec![desk.clone()],
        w.clock.now(),
        Content::new(nyx5_proto::quote::MEDIA, Value::Object(q.object().clone())),
    )
    .build()
    .unwrap()
    .sign(&cy.sig)
    .unwrap();
    assert_eq!(cy.send(&h, &env).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &cy, "take-1"), 402);

    topup(&h, "tareas@a.test", 100);
    // The same envelope again, as a copy the network held would bring it.
    let card = block_on(h.lookup().local_card("cy")).unwrap().unwrap();
    let v = env.clone().verify(&card, h.now()).unwrap();
    let answers = block_on(h.mailbox().accept(&v, &card, std::slice::from_ref(&desk))).unwrap();
    let (code, name) = match &answers[0].1 {
        nyx5_house::mailbox::Outcome::Rejected(e) => (e.code(), e.name().to_string()),
        other => panic!("the late copy was {other:?}"),
    };
    // The same answer: its code and its name (kept with it since migration 0026), not the
    // code's own name.
    assert_eq!((code, name.as_str()), (402, "insufficient_funds"));
    assert_eq!(balance(&h, "tareas@a.test"), 100, "nothing was taken");
    let contracts = block_on(h.db.query(stmt!("SELECT count(*) AS n FROM libro_contracts"))).unwrap();
    assert_eq!(contracts[0].int("n"), Some(0));
}

// ---------------------------------------------------------------------------------------------
// Time: judged when first received

fn bond_op(amount: i64, verifier: &str, expires: Timestamp) -> Object {
    obj([
        ("op", "bond".into()),
        ("amount", amount.into()),
        ("claim", "the service stays up".into()),
        ("verifier", verifier.into()),
        ("expires", expires.to_rfc3339().into()),
    ])
}

/// ana posts a bond that vera verifies, and floods the Libro with reads as it nears its expiry;
/// vera hands in her forfeit a second before the bond expires, ana her release (a bondholder's
/// take-back) a second after. The house's tick comes later still: the forfeit is judged at the
/// time the house received it, before the expiry, and the bond is forfeited; ana's release finds
/// it so. (Before: the flood held the forfeit with 429 until the bond expired, and ana got it
/// back; and even unflooded, a forfeit the tick worked after the expiry was refused as late.)
#[test]
fn a_forfeit_received_before_the_bond_expires_forfeits_it_however_late_the_tick() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.inbound_per_domain_per_minute = 30;
    let h = w.start(c);
    let ana = agent(&h, "ana@a.test", 1);
    let vera = agent(&h, "vera@a.test", 2);
    topup(&h, "ana@a.test", 100);
    let expires = Timestamp(w.clock.now().millis() + 2 * MINUTE);
    queue_op(&w, &h, &ana, "bond-1", bond_op(50, "vera@a.test", expires));
    w.tick_all();
    assert_eq!(state(&h, "bond-1"), "posted");
    assert_eq!(balance(&h, "ana@a.test"), 50);

    w.clock.advance(2 * MINUTE - 2 * SECOND);
    for i in 0..40 {
        queue_op(&w, &h, &ana, &format!("read-{i}"), obj([("op", "balance".into())]));
    }
    w.clock.advance(SECOND);
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "it went down".into())]);
    queue_op(&w, &h, &vera, "forfeit-1", forfeit);
    w.clock.advance(2 * SECOND);
    queue_op(&w, &h, &ana, "take-back", obj([("op", "release".into()), ("contract", "bond-1".into())]));
    w.clock.advance(10 * SECOND);
    w.tick_all();
    println!("forfeit: done {}; bond {}", done(&h, "forfeit-1"), state(&h, "bond-1"));
    assert!(done(&h, "forfeit-1"), "the forfeit is done: {:?}", kept_refusal(&h, "forfeit-1"));
    assert_eq!(state(&h, "bond-1"), "forfeited");
    assert_eq!(balance(&h, "ana@a.test"), 50, "ana did not get the bond back");
    for _ in 0..3 {
        w.tick_all();
    }
    assert_eq!(state(&h, "bond-1"), "forfeited");
    assert_eq!(balance(&h, "ana@a.test"), 50);
}

/// `env` from `b` relayed to `a`'s `/inbound`: 202, or the code `a` refused it with.
fn relay(a: &TestHouse, b: &TestHouse, env: &Envelope) -> u16 {
    let header = nyx5_proto::relay::RelayHeader::sign(&b.config.domain, env, &a.config.domain, &b.config.key);
    let resp = call_raw(a, "POST", "/inbound", &[(nyx5_proto::relay::HEADER, &header.to_header())], env.canonical());
    if resp.status == 202 {
        return 202;
    }
    let v = Value::parse_str(std::str::from_utf8(&resp.body).unwrap()).unwrap();
    let rejected = v.as_object().unwrap()["rejected"].as_array().unwrap()[0].as_object().unwrap().clone();
    u16::try_from(rejected["code"].as_safe_integer().unwrap()).unwrap()
}

/// A verifier at another house whose site is at its cap of settlements: its forfeit, a second
/// before the bond expires, is refused 429; its house tries again after the expiry, and the
/// forfeit is judged at its first arrival: the bond is forfeited.
#[test]
fn a_forfeit_refused_429_before_the_expiry_is_judged_at_its_first_arrival() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.inbound_per_domain_per_minute = 2;
    let a = w.start(c);
    let b = w.house("b.test", Registration::Admin);
    let ana = agent(&a, "ana@a.test", 1);
    let bea = agent(&b, "bea@b.test", 2);
    topup(&a, "ana@a.test", 100);
    let expires = Timestamp(w.clock.now().millis() + 2 * MINUTE);
    queue_op(&w, &a, &ana, "bond-1", bond_op(50, "bea@b.test", expires));
    w.tick_all();
    assert_eq!(state(&a, "bond-1"), "posted");

    w.clock.advance(2 * MINUTE - 5 * SECOND);
    // b.test spends its settlements this minute (two forfeits of bonds that do not exist: 404).
    for i in 0..2 {
        let none = obj([("op", "forfeit".into()), ("contract", format!("none-{i}").into()), ("reason", "x".into())]);
        assert_eq!(relay(&a, &b, &signed_op(&w, &bea, A, &format!("f-{i}"), none)), 404);
    }
    w.clock.advance(4 * SECOND);
    // A settlement of what names its sender counts under its own address (issue 34 review, M1):
    // that window is at its cap this minute too.
    let minute = w.clock.now().millis() / MINUTE;
    let full = stmt!(
        "INSERT INTO rate_windows (bucket, window, count, cap) VALUES ('libro:settle:bea@b.test', ?, 2, 2)",
        minute
    );
    block_on(a.db.batch(vec![full])).unwrap();
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "it went down".into())]);
    let env = signed_op(&w, &bea, A, "forfeit-1", forfeit);
    assert_eq!(relay(&a, &b, &env), 429);
    // The next minute, past the expiry, the same envelope comes again.
    w.clock.advance(MINUTE);
    assert_eq!(relay(&a, &b, &env), 202);
    assert_eq!(state(&a, "bond-1"), "forfeited");
    assert_eq!(balance(&a, "ana@a.test"), 50);
}

/// An operation lives an hour: bea's accept, refused 429 while its site was at its cap (a
/// refusal for a passing reason, not kept), comes again after bea is topped up and an hour has
/// gone: refused for good (410, kept), and again the same. A copy signed more than an hour
/// before it first arrives is refused so too. (Before: the late copy went through after the
/// top-up, long after bea's house had told it the accept bounced.)
#[test]
fn an_operation_refused_for_a_passing_reason_never_goes_through_after_its_hour() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.inbound_per_domain_per_minute = 1;
    let a = w.start(c);
    let b = w.house("b.test", Registration::Admin);
    let ana = agent(&a, "ana@a.test", 1);
    let bea = agent(&b, "bea@b.test", 2);
    topup(&a, "bea@b.test", 1);
    // b.test's one creating operation this minute.
    let first = bond_op(1, "ana@a.test", Timestamp(w.clock.now().millis() + 10 * MINUTE));
    assert_eq!(relay(&a, &b, &signed_op(&w, &bea, A, "bond-0", first)), 202);
    let q = quote(&w, &ana, &bea, "sale-1", ContractKind::Spot, 50);
    let env = signed_op(&w, &bea, A, "acc-1", accept_op(&q));
    assert_eq!(relay(&a, &b, &env), 429);
    topup(&a, "bea@b.test", 100);
    w.clock.advance(61 * MINUTE);
    assert_eq!(relay(&a, &b, &env), 410);
    assert_eq!(kept_refusal(&a, "acc-1").map(|r| r.0), Some(410));
    w.clock.advance(MINUTE);
    assert_eq!(relay(&a, &b, &env), 410);
    assert_eq!(balance(&a, "bea@b.test"), 100);
    assert!(!done(&a, "acc-1"));
    // Signed an hour ago and never seen here: refused so too.
    let old = signed_op(&w, &bea, A, "acc-2", accept_op(&quote(&w, &ana, &bea, "sale-2", ContractKind::Spot, 5)));
    w.clock.advance(66 * MINUTE);
    w.tick_all();
    assert_eq!(relay(&a, &b, &old), 410);
    assert_eq!(kept_refusal(&a, "acc-2").map(|r| r.0), Some(410));
    assert!(!done(&a, "acc-2"));
}

/// mallory@a.test grants mandates to zed@b.test, who blocked mallory: the receipts come to
/// b.test from `libro@a.test`, and b.test holds them by their operator (the receipt's `from`) as
/// it would hold mallory's mail. (Before: zed's block named mallory, not `libro@a.test`, and all
/// five arrived.) A seller at b.test still hears of its sale to someone it did not block.
#[test]
fn another_houses_receipts_keep_to_the_block_of_their_operator() {
    let w = World::new();
    let a = w.house(A, Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let mallory = agent(&a, "mallory@a.test", 1);
    let bot = subagent(&a, &mallory, "bot.mallory@a.test", 3);
    let ed = agent(&a, "ed@a.test", 4);
    let zed = agent(&b, "zed@b.test", 2);
    let block = obj([("block", Value::Object(obj([("add", Value::Array(vec!["mallory@a.test".into()]))])))]);
    json(&zed.post(&b, "/lists/zed", &Value::Object(block)), 200);
    for i in 0..5 {
        let body = || obj([("op", "mandate".into()), ("grantee", "zed@b.test".into()), ("cap", 1.into())]);
        queue_op(&w, &a, &mallory, &format!("grant-{i}"), body());
        queue_op(&w, &a, &bot, &format!("bot-grant-{i}"), body());
    }
    w.tick_all();
    w.tick_all();
    assert!(done(&a, "grant-4") && done(&a, "bot-grant-4"));
    assert_eq!(libro_mail(&b, &zed).len(), 0, "zed hears nothing of mallory's grants, nor its subagent's");
    // zed sells to ed, whom it did not block.
    topup(&a, "ed@a.test", 10);
    let q = QuoteDraft {
        id: "sale-z".into(),
        house: A.into(),
        seller: zed.address.clone(),
        buyer: ed.address.clone(),
        contract: ContractKind::Spot,
        price: 5,
        currency: "tok".into(),
        concept: "work".into(),
        terms: None,
        arbiter: None,
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&zed.sig)
    .unwrap();
    queue_op(&w, &a, &ed, "acc-z", accept_op(&q));
    w.tick_all();
    w.tick_all();
    assert!(done(&a, "acc-z"));
    assert_eq!(libro_mail(&b, &zed).len(), 1, "the seller hears of its sale");
}

/// Two agents flood the Libro through 20 subagents each (60 reads a minute per root, spread over
/// them): the queue gives turns per root, so a third agent's refund is still done in the first
/// tick (review of issue 34, H1a).
#[test]
fn subagents_do_not_multiply_their_roots_turns_in_the_queue() {
    let w = World::new();
    let h = w.start(w.config(A, Registration::Admin));
    let ana = agent(&h, "ana@a.test", 1);
    let bo = agent(&h, "bo@a.test", 2);
    let carla = agent(&h, "carla@a.test", 3);
    let dan = agent(&h, "dan@a.test", 4);
    topup(&h, "dan@a.test", 100);
    queue_op(&w, &h, &dan, "acc-1", accept_op(&quote(&w, &carla, &dan, "job-1", ContractKind::Escrow, 40)));
    w.tick_all();
    assert_eq!(state(&h, "job-1"), "held");
    let mut subs = Vec::new();
    let mut seed = 10u8;
    for root in [&ana, &bo] {
        for i in 0..20 {
            let addr = format!("s{i}.{}", root.address.as_str());
            subs.push(subagent(&h, root, &addr, seed));
            seed += 1;
            if i % 10 == 9 {
                w.clock.advance(MINUTE);
            }
        }
    }
    w.clock.advance(MINUTE);
    for i in 0..3 {
        for s in &subs {
            let id = format!("{}-read-{i}", s.address.local());
            queue_op(&w, &h, s, &id, obj([("op", "statement".into()), ("limit", 1.into())]));
        }
    }
    w.clock.advance(1);
    queue_op(&w, &h, &carla, "refund-1", obj([("op", "refund".into()), ("contract", "job-1".into())]));
    let mut ticks = 0;
    while !done(&h, "refund-1") && ticks < 20 {
        w.tick_all();
        w.clock.advance(SECOND);
        ticks += 1;
    }
    println!("{} subagents flooding: the refund was done after {ticks} tick(s)", subs.len());
    assert!(ticks <= 1, "the refund waited {ticks} ticks behind the flood");
    assert_eq!(state(&h, "job-1"), "refunded");
}

/// The bondholder enrols 40 subagents and has each queue a read just before the expiry; the
/// verifier's forfeit, queued a second before it, waits behind them. The tick that returns
/// expired bonds does not return this one while the forfeit waits: the forfeit is decided first
/// and forfeits it (review of issue 34, H1b).
#[test]
fn the_tick_returns_no_bond_while_a_forfeit_received_before_its_expiry_waits() {
    let w = World::new();
    let h = w.start(w.config(A, Registration::Admin));
    let ana = agent(&h, "ana@a.test", 1);
    let vera = agent(&h, "vera@a.test", 2);
    topup(&h, "ana@a.test", 100);
    let mut subs = Vec::new();
    for i in 0..40u8 {
        subs.push(subagent(&h, &ana, &format!("s{i}.ana@a.test"), 10 + i));
        if i % 10 == 9 {
            w.clock.advance(MINUTE);
        }
    }
    let expires = Timestamp(w.clock.now().millis() + 2 * MINUTE);
    queue_op(&w, &h, &ana, "bond-1", bond_op(50, "vera@a.test", expires));
    w.tick_all();
    assert_eq!(state(&h, "bond-1"), "posted");
    w.clock.advance(2 * MINUTE - 2 * SECOND);
    for s in &subs {
        queue_op(&w, &h, s, &format!("{}-read", s.address.local()), obj([("op", "balance".into())]));
    }
    w.clock.advance(SECOND);
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "it went down".into())]);
    queue_op(&w, &h, &vera, "forfeit-1", forfeit);
    w.clock.advance(10 * SECOND);
    for _ in 0..4 {
        w.tick_all();
        w.clock.advance(SECOND);
    }
    println!(
        "forfeit done {}, refusal {:?}; bond {}; ana holds {}",
        done(&h, "forfeit-1"),
        kept_refusal(&h, "forfeit-1"),
        state(&h, "bond-1"),
        balance(&h, "ana@a.test")
    );
    assert!(done(&h, "forfeit-1"), "the forfeit was refused: {:?}", kept_refusal(&h, "forfeit-1"));
    assert_eq!(state(&h, "bond-1"), "forfeited");
    assert_eq!(balance(&h, "ana@a.test"), 50, "the bond did not return to its holder");
}

/// A wall of reads scheduled with `deliver_after` at each of the last 20 seconds before the
/// expiry, ticks every second; the verifier's forfeit queued half a second before the expiry
/// still forfeits the bond (review of issue 34, H1c).
#[test]
fn a_wall_of_deferred_reads_does_not_let_the_bond_expire_under_a_forfeit() {
    let w = World::new();
    let h = w.start(w.config(A, Registration::Admin));
    let ana = agent(&h, "ana@a.test", 1);
    let vera = agent(&h, "vera@a.test", 2);
    topup(&h, "ana@a.test", 100);
    let mut subs = Vec::new();
    for i in 0..40u8 {
        subs.push(subagent(&h, &ana, &format!("s{i}.ana@a.test"), 10 + i));
        if i % 10 == 9 {
            w.clock.advance(MINUTE);
        }
    }
    let expires = Timestamp(w.clock.now().millis() + 25 * MINUTE);
    queue_op(&w, &h, &ana, "bond-1", bond_op(50, "vera@a.test", expires));
    w.tick_all();
    for k in 1..=20i64 {
        for s in &subs {
            let body = obj([("op", "balance".into())]);
            let mut d = libro_op(&s.address, A, &format!("{}-w{k}", s.address.local()), w.clock.now(), body);
            d.deliver_after = Some(Timestamp(expires.millis() - k * SECOND));
            let env = d.build().unwrap().sign(&s.sig).unwrap();
            assert_eq!(s.send(&h, &env).status, 202);
        }
        w.clock.advance(MINUTE);
    }
    let now = w.clock.now().millis();
    w.clock.advance(expires.millis() - 20 * SECOND - now);
    for _ in 0..20 {
        w.tick_all();
        w.clock.advance(SECOND);
    }
    w.clock.advance(-(SECOND / 2));
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "it went down".into())]);
    queue_op(&w, &h, &vera, "forfeit-1", forfeit);
    for _ in 0..10 {
        w.clock.advance(SECOND);
        w.tick_all();
    }
    println!(
        "forfeit done {}, refusal {:?}; bond {}",
        done(&h, "forfeit-1"),
        kept_refusal(&h, "forfeit-1"),
        state(&h, "bond-1")
    );
    assert_eq!(state(&h, "bond-1"), "forfeited");
}

/// Another agent of the verifier's own site spends the site's settlement budget and its
/// first-arrival window with forfeits of bonds that do not exist (404, then 429); the verifier's
/// real forfeit, four seconds before the expiry, is still done: a settlement of what names its
/// sender counts under the sender's own address (review of issue 34, M1).
#[test]
fn an_agent_of_the_same_site_cannot_spend_the_verifiers_settlement_budget() {
    let w = World::new();
    let a = w.start(w.config(A, Registration::Admin));
    let b = w.house("b.test", Registration::Admin);
    let ana = agent(&a, "ana@a.test", 1);
    let bea = agent(&b, "bea@b.test", 2);
    let mal = agent(&b, "mal@b.test", 3);
    topup(&a, "ana@a.test", 100);
    let expires = Timestamp(w.clock.now().millis() + 2 * MINUTE);
    queue_op(&w, &a, &ana, "bond-1", bond_op(50, "bea@b.test", expires));
    w.tick_all();
    assert_eq!(state(&a, "bond-1"), "posted");
    w.clock.advance(2 * MINUTE - 5 * SECOND);
    let cap = a.config.inbound_per_domain_per_minute;
    let mut codes = std::collections::BTreeMap::new();
    for i in 0..(2 * cap + 5) {
        let none = obj([("op", "forfeit".into()), ("contract", format!("none-{i}").into()), ("reason", "x".into())]);
        *codes.entry(relay(&a, &b, &signed_op(&w, &mal, A, &format!("m-{i}"), none))).or_insert(0) += 1;
    }
    assert!(codes.get(&429).copied().unwrap_or(0) > 0, "mal reached the site's cap: {codes:?}");
    w.clock.advance(SECOND);
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "it went down".into())]);
    let env = signed_op(&w, &bea, A, "forfeit-1", forfeit);
    let first = relay(&a, &b, &env);
    w.clock.advance(10 * SECOND);
    w.tick_all();
    println!("mal's codes {codes:?}; bea's forfeit {first}; bond {}", state(&a, "bond-1"));
    assert_eq!(first, 202, "the verifier's forfeit is done");
    assert_eq!(state(&a, "bond-1"), "forfeited");
}

/// A verifier's forfeit refused 429 (its own address at its cap) four seconds before the expiry,
/// while another agent of its site filled the site's first-arrival window: its first arrival is
/// still remembered, the tick does not return the bond while it may come back, and its retry
/// after the expiry forfeits it (review of issue 34, M1 and H1).
#[test]
fn a_settlement_naming_its_sender_is_remembered_and_holds_the_expiry() {
    let w = World::new();
    let a = w.start(w.config(A, Registration::Admin));
    let b = w.house("b.test", Registration::Admin);
    let ana = agent(&a, "ana@a.test", 1);
    let bea = agent(&b, "bea@b.test", 2);
    let mal = agent(&b, "mal@b.test", 3);
    topup(&a, "ana@a.test", 100);
    let expires = Timestamp(w.clock.now().millis() + 2 * MINUTE);
    queue_op(&w, &a, &ana, "bond-1", bond_op(50, "bea@b.test", expires));
    w.tick_all();
    w.clock.advance(2 * MINUTE - 5 * SECOND);
    let cap = a.config.inbound_per_domain_per_minute;
    for i in 0..(2 * cap + 5) {
        let none = obj([("op", "forfeit".into()), ("contract", format!("none-{i}").into()), ("reason", "x".into())]);
        relay(&a, &b, &signed_op(&w, &mal, A, &format!("m-{i}"), none));
    }
    // bea's own address is at its settlement budget this minute.
    let bucket = format!("libro:settle:{}", bea.address);
    let minute = w.clock.now().millis() / MINUTE;
    block_on(a.db.batch(vec![stmt!(
        "INSERT INTO rate_windows (bucket, window, count, cap) VALUES (?, ?, ?, ?)",
        bucket.as_str(),
        minute,
        cap,
        cap
    )]))
    .unwrap();
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "it went down".into())]);
    let env = signed_op(&w, &bea, A, "forfeit-1", forfeit);
    let first = relay(&a, &b, &env);
    let remembered =
        block_on(a.db.query(stmt!("SELECT count(*) AS n FROM libro_received WHERE envelope_id = 'forfeit-1'")))
            .unwrap()[0]
            .int("n")
            .unwrap();
    w.clock.advance(10 * SECOND);
    w.tick_all();
    let between = state(&a, "bond-1");
    w.clock.advance(MINUTE);
    let again = relay(&a, &b, &env);
    println!("bea first {first}, remembered {remembered}; bond after the tick {between}; retry {again}");
    assert_eq!(first, 429);
    assert_eq!(remembered, 1, "the first arrival of a settlement naming its sender is remembered");
    assert_eq!(between, "posted", "the tick does not return a bond a remembered forfeit names");
    assert_eq!(again, 202);
    assert_eq!(state(&a, "bond-1"), "forfeited");
}

/// A seller whose mailbox others filled still hears of its sale, and a bondholder of the forfeit
/// of its bond: the Libro has a bounded lane past the quota for parties who agreed to hear from
/// the operator (review of issue 34, M3). A stranger still hears nothing past its quota.
#[test]
fn a_full_mailbox_still_gets_the_receipts_its_owner_agreed_to() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.mailbox_max_envelopes = 3;
    let h = w.start(c);
    let fay = agent(&h, "fay@a.test", 4);
    let ed = agent(&h, "ed@a.test", 6);
    let spam = agent(&h, "spam@a.test", 7);
    for i in 0..3 {
        let d = Draft::new(
            format!("m-{i}"),
            spam.address.clone(),
            vec![fay.address.clone()],
            w.clock.now(),
            Content::new("text/plain", "hello".into()),
        );
        assert_eq!(spam.send(&h, &d.build().unwrap().sign(&spam.sig).unwrap()).status, 202);
    }
    w.tick_all();
    assert_eq!(mailbox(&h, &fay).len(), 3);
    topup(&h, "ed@a.test", 10);
    queue_op(&w, &h, &ed, "acc-v", accept_op(&quote(&w, &fay, &ed, "sale-1", ContractKind::Spot, 5)));
    w.tick_all();
    assert!(done(&h, "acc-v"), "{:?}", kept_refusal(&h, "acc-v"));
    let sale = libro_mail(&h, &fay).len();
    topup(&h, "fay@a.test", 100);
    let bond =
        obj([("op", "bond".into()), ("amount", 50.into()), ("claim", "x".into()), ("verifier", "ed@a.test".into())]);
    queue_op(&w, &h, &fay, "bond-f", bond);
    w.tick_all();
    let before = libro_mail(&h, &fay).len();
    queue_op(
        &w,
        &h,
        &ed,
        "forfeit-f",
        obj([("op", "forfeit".into()), ("contract", "bond-f".into()), ("reason", "r".into())]),
    );
    w.tick_all();
    let after = libro_mail(&h, &fay).len();
    println!("fay: {sale} receipt(s) of the sale; Libro mail {before} before the forfeit, {after} after");
    assert_eq!(state(&h, "bond-f"), "forfeited");
    assert_eq!(sale, 1, "the seller hears of its sale");
    assert_eq!(after, before + 1, "the bondholder hears of the forfeit");
    // A stranger to ed (a mandate's grantee) still hears nothing past its quota.
    let grant = obj([("op", "mandate".into()), ("grantee", "fay@a.test".into()), ("cap", 1.into())]);
    queue_op(&w, &h, &ed, "grant-f", grant);
    w.tick_all();
    assert!(done(&h, "grant-f"));
    assert_eq!(libro_mail(&h, &fay).len(), after, "a grant fay never asked for stays out of a full mailbox");
}

/// An operation of this house's agent that waited in the queue more than an hour (here: no tick
/// ran) is refused 410 and the refusal kept, as another house's is (review of issue 34, L3).
#[test]
fn a_local_operation_lives_an_hour_in_the_queue() {
    let w = World::new();
    let h = w.start(w.config(A, Registration::Admin));
    let ana = agent(&h, "ana@a.test", 1);
    queue_op(&w, &h, &ana, "old-read", obj([("op", "balance".into())]));
    queue_op(&w, &h, &ana, "new-read", obj([("op", "balance".into())]));
    w.clock.advance(59 * MINUTE);
    w.tick_all();
    assert!(done(&h, "old-read") || done(&h, "new-read"));
    queue_op(&w, &h, &ana, "late-read", obj([("op", "balance".into())]));
    w.clock.advance(61 * MINUTE);
    w.tick_all();
    let refusal = kept_refusal(&h, "late-read");
    println!("late-read: done {}, refusal {refusal:?}", done(&h, "late-read"));
    assert!(!done(&h, "late-read"));
    assert_eq!(refusal.map(|(code, _)| code), Some(410));
}
