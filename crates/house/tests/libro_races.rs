//! The Libro's orchestration at its door (`Libro::operate`, `Libro::issue`, the tick's share):
//! two copies of one operation at once, a site at its operations' cap, refusals kept or not
//! kept, batches that lose a race (or seem to), the hour an authority counts, approvals decided
//! and expired, and the house's own agents.
//!
//! Each test names the cargo-mutants mutants of `libro/mod.rs` and `libro/authority.rs` it kills
//! (tests/README.md, "Survivors of the cargo-mutants runs"). Operations are handed straight to
//! `Libro::operate` (or `Mailbox::accept` for mail), so the clock moves only when a test moves it
//! and no tick purges the hour's counts in between. Two requests at once use the kit's stalling
//! database: every query and batch waits once, so both read before either writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::NOTICE_MEDIA;
use nyx5_house::mailbox::Outcome;
use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_proto::authority::Authority;
use nyx5_proto::card::{AgentCard, Delegation, Scope};
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, Quote, QuoteDraft};
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value, Verified};

const A: &str = "a.test";
/// What ana@a.test hears at its cap of reads.
const TOO_MANY: &str = "429 too_many_operations";

// ---------------------------------------------------------------------------------------------
// Setup

/// A house for `a.test` whose sites may do `cap` operations a minute.
fn house(w: &World, cap: i64) -> Rc<TestHouse> {
    let mut c = w.config(A, Registration::Admin);
    c.inbound_per_domain_per_minute = cap;
    w.start(c)
}

/// A house whose sites may do `cap` operations a minute, with ana@ registered.
fn with_ana(cap: i64) -> (World, Rc<TestHouse>, Agent) {
    let w = World::new();
    let h = house(&w, cap);
    let ana = Agent::new("ana@a.test", 11);
    register(&h, &ana, &[]);
    (w, h, ana)
}

/// The same with bo@ registered too.
fn with_ana_and_bo(cap: i64) -> (World, Rc<TestHouse>, Agent, Agent) {
    let (w, h, ana) = with_ana(cap);
    let bo = Agent::new("bo@a.test", 12);
    register(&h, &bo, &[]);
    (w, h, ana, bo)
}

/// ana@a.test with 100 to spend, and bo@, a seller at another house, b.test.
fn buyer_and_remote_seller() -> (World, Rc<TestHouse>, Rc<TestHouse>, Agent, Agent) {
    let w = World::new();
    let h = house(&w, 100);
    let b = w.house("b.test", Registration::Admin);
    let (ana, bo) = (Agent::new("ana@a.test", 11), Agent::new("bo@b.test", 12));
    register(&h, &ana, &[]);
    register(&b, &bo, &[]);
    topup(&h, "ana@a.test", 100);
    (w, h, b, ana, bo)
}

fn register(h: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) {
    let body = agent.registration(h, extra);
    let admin = format!("Bearer admin-{}", h.config.domain);
    assert_eq!(call(h, "POST", "/agents", &[("authorization", &admin)], &body).status, 201);
}

/// `address`, a subagent of `parent` whose delegation carries `authority` (JSON), registered.
fn subagent(h: &TestHouse, parent: &Agent, address: &str, seed: u8, authority: &str) -> Agent {
    let child = Agent::new(address, seed);
    let scope = Scope {
        authority: Some(Authority::from_value(&Value::parse_str(authority).unwrap()).unwrap()),
        ..Scope::default()
    };
    let d = Delegation::sign(&parent.address, &child.address, &child.sig.public(), &scope, None, h.now(), &parent.sig)
        .unwrap();
    register(h, &child, &[("delegation", d.to_value())]);
    child
}

/// An operation by `who` for the Libro of `a.test`, signed now, that `expires` if given.
fn op_until(w: &World, who: &Agent, id: &str, body: Object, expires: Option<Timestamp>) -> Envelope {
    let mut d = libro_op(&who.address, A, id, w.clock.now(), body);
    d.expires = expires;
    d.build().unwrap().sign(&who.sig).unwrap()
}

fn op(w: &World, who: &Agent, id: &str, body: Object) -> Envelope {
    op_until(w, who, id, body, None)
}

fn balance_op() -> Object {
    obj([("op", "balance".into())])
}

fn bond_op(amount: i64, verifier: &Agent) -> Object {
    obj([
        ("op", "bond".into()),
        ("amount", amount.into()),
        ("claim", "it holds".into()),
        ("verifier", verifier.address.as_str().into()),
    ])
}

fn accept_op(q: &Quote) -> Object {
    obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))])
}

/// A quote `seller` signs for `buyer` at `a.test`.
fn quote(
    w: &World,
    seller: &Agent,
    buyer: &Agent,
    id: &str,
    kind: ContractKind,
    price: i64,
    expires: Option<Timestamp>,
) -> Quote {
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
        expires,
        extra: Object::new(),
    }
    .sign(&seller.sig)
    .unwrap()
}

/// The operator's card as `h` knows it: its own agent's, or resolved.
fn card_of(h: &TestHouse, who: &Address) -> Verified<AgentCard> {
    if who.domain() == h.config.domain {
        block_on(h.lookup().local_card(who.local())).unwrap().unwrap()
    } else {
        (*block_on(h.lookup().resolve_agent(who, false)).unwrap()).clone()
    }
}

/// `env` handed to the Libro of `h` (`Libro::operate`), and its answer: its code and name.
fn hand(h: &TestHouse, env: &Envelope) -> String {
    told(operate(h, env))
}

/// `env` handed to the Libro of `h`, and its answer in words: its code and reason.
fn hand_in_words(h: &TestHouse, env: &Envelope) -> String {
    match operate(h, env) {
        Outcome::Rejected(e) => format!("{} {}", e.code(), e.reason),
        other => told(other),
    }
}

fn operate(h: &TestHouse, env: &Envelope) -> Outcome {
    let card = card_of(h, env.from());
    let v = env.clone().verify(&card, h.now()).unwrap();
    block_on(h.libro().operate(&v, &card))
}

fn told(o: Outcome) -> String {
    match o {
        Outcome::Accepted => "done".into(),
        Outcome::Duplicate => "done before".into(),
        Outcome::Rejected(e) => format!("{} {}", e.code(), e.name()),
    }
}

/// A future that is pending `n` times before it is ready: a request that starts later.
struct Later(u32);

impl Future for Later {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            Poll::Pending
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the database holds

fn ints(h: &TestHouse, sql: nyx5_house::ports::Stmt, col: &str) -> Vec<i64> {
    block_on(h.db.query(sql)).unwrap().iter().map(|r| r.int(col).unwrap()).collect()
}

/// The Libro's windows in the rate table, every budget and counter together: (minute,
/// operations counted).
fn windows(h: &TestHouse) -> Vec<(i64, i64)> {
    let sql = "SELECT window, sum(count) AS count FROM rate_windows WHERE bucket LIKE 'libro:%' GROUP BY window
               ORDER BY window";
    block_on(h.db.query(stmt!(sql)))
        .unwrap()
        .iter()
        .map(|r| (r.int("window").unwrap(), r.int("count").unwrap()))
        .collect()
}

/// Every operation row: (envelope id, refused code or 0, reason).
fn ops(h: &TestHouse) -> Vec<(String, i64, String)> {
    block_on(h.db.query(stmt!("SELECT envelope_id, refused, reason FROM libro_ops ORDER BY envelope_id")))
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.text("envelope_id").unwrap().to_owned(),
                r.int("refused").unwrap_or(0),
                r.text("reason").unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pending_count(h: &TestHouse) -> i64 {
    ints(h, stmt!("SELECT count(*) AS n FROM libro_pending"), "n")[0]
}

/// The entry posted for `cause` (an operation's envelope id).
fn entry(h: &TestHouse, cause: &str) -> Object {
    let rows = block_on(h.db.query(stmt!("SELECT entry FROM libro_entries WHERE cause = ?", cause))).unwrap();
    assert_eq!(rows.len(), 1, "one entry for {cause}");
    Value::parse_str(rows[0].text("entry").unwrap()).unwrap().as_object().unwrap().clone()
}

/// The `authority` an entry's `meta` carries.
fn authority_of(h: &TestHouse, cause: &str) -> Object {
    entry(h, cause)["meta"].as_object().unwrap()["authority"].as_object().unwrap().clone()
}

// ---------------------------------------------------------------------------------------------
// The site's minute

/// A site does `inbound_per_domain_per_minute` operations a minute, counted in the window of
/// the minute (`at / 60_000`): two a second apart share it, a third is refused with 429 and not
/// kept; an operation the Libro would refuse anyway, when the site is at its cap, is refused for
/// the cap (429) and not kept either; the next minute the same envelope goes.
///
/// Kills `count_operation`: `/` → `%` and `/` → `*` (each millisecond its own window);
/// `keep_refusal`: the `RATE_CAP` guard → `false`, `==` → `!=` (the kernel's 402 answered instead).
#[test]
fn a_site_does_its_operations_per_minute_and_at_its_cap_every_answer_is_429() {
    let (w, h, ana, bo) = with_ana_and_bo(2);
    assert_eq!(hand(&h, &op(&w, &ana, "r-1", balance_op())), "done");
    w.clock.advance(SECOND);
    assert_eq!(hand(&h, &op(&w, &ana, "r-2", balance_op())), "done");
    assert_eq!(windows(&h), [(START / MINUTE, 2)]);
    w.clock.advance(SECOND);
    let third = op(&w, &ana, "r-3", balance_op());
    assert_eq!(hand(&h, &third), TOO_MANY);
    // A contract ana cannot read: refused for the cap, not as unknown, and not kept.
    let _ = &bo;
    let unknown = obj([("op", "contract".into()), ("contract", "nothing".into())]);
    assert_eq!(hand(&h, &op(&w, &ana, "r-4", unknown)), TOO_MANY);
    assert_eq!(ops(&h).iter().map(|o| o.0.as_str()).collect::<Vec<_>>(), ["r-1", "r-2"]);
    assert_eq!(windows(&h), [(START / MINUTE, 2)]);
    w.clock.advance(MINUTE);
    assert_eq!(hand(&h, &third), "done");
    assert_eq!(windows(&h), [(START / MINUTE, 2), (START / MINUTE + 1, 1)]);
}

/// A house whose agents may send `outbound` envelopes a minute and whose Libro takes `cap`
/// operations a minute of each kind, with ana@ registered.
fn with_ana_sending(outbound: i64, cap: i64) -> (World, Rc<TestHouse>, Agent) {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.inbound_per_domain_per_minute = cap;
    c.outbound_per_agent_per_minute = outbound;
    let h = w.start(c);
    let ana = Agent::new("ana@a.test", 11);
    register(&h, &ana, &[]);
    (w, h, ana)
}

/// `env` sent by `who` through `POST /outbound`, and the ticks that do it.
fn send_and_tick(h: &TestHouse, who: &Agent, env: &Envelope) {
    assert_eq!(who.send(h, env).status, 202);
    block_on(h.tick()).unwrap();
}

/// An operation the house queued for its own agent, done in the minute it was sent in, was
/// counted in the agent's envelopes a minute when it was sent (`POST /outbound`), and is not
/// counted again by the Libro: two sends are both done and no Libro window is written. The
/// Libro counts what that count did not bound: the same agent handing operations straight to
/// the Libro (as `POST /inbound` does), refused at its cap; an operation done in a later minute
/// than it was sent in (deferred with `deliver_after`, or at the minute's turn); and any queued
/// operation of a house whose envelopes a minute are more than its operations a minute.
///
/// Kills `count_operation`: `&& !counted` deleted (a window written, and the second send
/// refused 429), `!counted` → `counted`; `counted_when_sent`: the same minute or the caps'
/// comparison dropped (an operation done in a later minute, or at the looser house, left
/// uncounted; its own unit test holds a clock set back).
#[test]
fn an_operation_the_house_queued_is_counted_once_when_it_was_sent() {
    let (w, h, ana) = with_ana_sending(2, 2);
    for id in ["s-1", "s-2"] {
        send_and_tick(&h, &ana, &op(&w, &ana, id, balance_op()));
        w.clock.advance(SECOND);
    }
    assert_eq!(ops(&h).iter().map(|o| (o.0.as_str(), o.1)).collect::<Vec<_>>(), [("s-1", 0), ("s-2", 0)]);
    assert_eq!(windows(&h), [], "the outbox counted them");
    assert_eq!(hand(&h, &op(&w, &ana, "d-1", balance_op())), "done");
    assert_eq!(hand(&h, &op(&w, &ana, "d-2", balance_op())), "done");
    assert_eq!(hand(&h, &op(&w, &ana, "d-3", balance_op())), TOO_MANY);
    assert_eq!(windows(&h), [(START / MINUTE, 2)]);

    // Sent now, done two minutes on: counted by the Libro, in the minute it is done.
    w.clock.advance(MINUTE);
    let mut later = libro_op(&ana.address, A, "l-1", w.clock.now(), balance_op());
    later.deliver_after = Some(Timestamp(w.clock.now().millis() + 2 * MINUTE));
    send_and_tick(&h, &ana, &later.build().unwrap().sign(&ana.sig).unwrap());
    w.clock.advance(2 * MINUTE + SECOND);
    block_on(h.tick()).unwrap();
    assert_eq!(ops(&h).iter().filter(|o| o.0 == "l-1").count(), 1, "done once it was due");
    let due = (w.clock.now().millis()) / MINUTE;
    assert_eq!(windows(&h).last(), Some(&(due, 1)), "counted when done");

    // Sent in the last millisecond of a minute and done in the next: counted when done, so the
    // Libro's minute never leaves more uncounted than the outbox's minute let by.
    let (w, h, ana) = with_ana_sending(2, 2);
    w.clock.to_end_of_minute();
    assert_eq!(ana.send(&h, &op(&w, &ana, "m-1", balance_op())).status, 202);
    w.clock.advance(1);
    block_on(h.tick()).unwrap();
    assert_eq!(windows(&h), [(START / MINUTE + 1, 1)]);

    // A house that lets more envelopes a minute than operations: the Libro counts them all.
    let (w, h, ana) = with_ana_sending(3, 2);
    for id in ["t-1", "t-2", "t-3"] {
        send_and_tick(&h, &ana, &op(&w, &ana, id, balance_op()));
    }
    assert_eq!(ops(&h).iter().map(|o| (o.0.as_str(), o.1 == 0)).collect::<Vec<_>>(), [("t-1", true), ("t-2", true)]);
    assert_eq!(windows(&h), [(START / MINUTE, 2)]);
}

/// An operation whose batch finds the site at its cap is refused for the cap (429) and not kept,
/// even when the minute turns before the refusal could be written: a refusal for the cap is
/// temporary, and the same envelope goes in the new minute.
///
/// Kills `operate_checked`: the `RATE_CAP` guard → `false` (the cap read as an unknown
/// constraint, 409, kept in the new minute's window).
#[test]
fn an_operation_over_the_cap_is_never_kept_even_when_the_minute_turns_under_it() {
    let (w, h, ana) = with_ana(1);
    assert_eq!(hand(&h, &op(&w, &ana, "t-1", balance_op())), "done");
    let second = op(&w, &ana, "t-2", balance_op());
    // The minute turns between the operation's batch and anything after it.
    let clock = w.clock.clone();
    h.db.before_next_batch(move |_| clock.advance(MINUTE));
    assert_eq!(hand(&h, &second), TOO_MANY);
    assert_eq!(ops(&h).len(), 1, "the refusal for the cap is not kept");
    assert_eq!(windows(&h), [(START / MINUTE, 1)]);
    assert_eq!(hand(&h, &second), "done");
    assert_eq!(windows(&h), [(START / MINUTE, 1), (START / MINUTE + 1, 1)]);
}

/// An operation done before is answered "done before" from the operation's row when its
/// envelope comes again, without deciding it again: the repeat is not counted in the site's
/// minute, even when deciding it again now would refuse it (ana has nothing left to bond).
///
/// Kills `facts_of`: delete the arm `Some(Value::Object(o))` of `done` (the repeat decided again,
/// refused, and counted through `keep_refusal` before it answers "done before").
#[test]
fn an_operation_done_before_is_answered_from_its_row_and_not_counted_again() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    topup(&h, "ana@a.test", 10);
    let env = op(&w, &ana, "k-1", bond_op(10, &bo));
    assert_eq!(hand(&h, &env), "done");
    assert_eq!(windows(&h), [(START / MINUTE, 1)]);
    assert_eq!(hand(&h, &env), "done before");
    assert_eq!(windows(&h), [(START / MINUTE, 1)], "a repeat is answered, not counted");
    assert_eq!(ops(&h), [("k-1".to_owned(), 0, String::new())]);
    assert_eq!(balance(&h, "ana@a.test"), 0);
}

// ---------------------------------------------------------------------------------------------
// Two copies at once

/// Two copies of one envelope at once: both read before either writes; one is done, the other
/// loses on the operation's row and answers "done before", and the site's minute counts one.
///
/// Kills `operate_checked`: the `OP_DONE` guard → `false` (the loser goes through
/// `keep_refusal`, which answers the same but counts the operation twice).
#[test]
fn two_copies_at_once_are_done_once_and_counted_once() {
    let (w, h, ana) = with_ana(100);
    let env = op(&w, &ana, "c-1", balance_op());
    let card = card_of(&h, &ana.address);
    let v = env.verify(&card, h.now()).unwrap();
    h.db.stall(true);
    let (a, b) = block_on_both(h.libro().operate(&v, &card), h.libro().operate(&v, &card));
    h.db.stall(false);
    assert_eq!((told(a), told(b)), ("done".to_owned(), "done before".to_owned()));
    assert_eq!(windows(&h), [(START / MINUTE, 1)]);
    assert_eq!(ops(&h).len(), 1);
}

/// A copy that read before another copy was done, and was refused (it came after the envelope's
/// `expires`), answers what the other copy's row says: done before. The refusal it would have
/// kept is not the envelope's answer, since the envelope already had one.
///
/// Kills `keep_refusal`: the guard `changes.first() == Some(&0)` → `false`, `==` → `!=`, and
/// delete the arm `Ok(Some(row))` (each answers the late copy's own 410).
#[test]
fn a_late_copy_refused_while_another_copy_was_done_answers_done_before() {
    let (w, h, ana) = with_ana(100);
    let env = op_until(&w, &ana, "x-1", balance_op(), Some(Timestamp(START + 30 * SECOND)));
    let card = card_of(&h, &ana.address);
    let v = env.verify(&card, h.now()).unwrap();
    h.db.stall(true);
    let clock = w.clock.clone();
    // The second copy starts once the first has read the clock: a minute later, past `expires`.
    let late = async {
        clock.advance(MINUTE);
        h.libro().operate(&v, &card).await
    };
    let (a, b) = block_on_both(h.libro().operate(&v, &card), late);
    h.db.stall(false);
    assert_eq!((told(a), told(b)), ("done".to_owned(), "done before".to_owned()));
    assert_eq!(ops(&h), [("x-1".to_owned(), 0, String::new())]);
}

// ---------------------------------------------------------------------------------------------
// Refusals kept, and not

/// A refusal for a passing reason is not kept: an accept whose seller's house cannot be reached
/// is refused with 503 and no row, and the same envelope is done once the house is back.
///
/// Kills `operate`: the guard `e.kind.is_temporary() || e.kind == ErrorKind::Internal` → `false`,
/// and `||` → `&&` (the 503 kept as the envelope's answer for good).
#[test]
fn a_temporary_refusal_is_not_kept_and_the_envelope_goes_later() {
    let (w, h, _b, ana, bo) = buyer_and_remote_seller();
    let env = op(&w, &ana, "acc-1", accept_op(&quote(&w, &bo, &ana, "q-1", ContractKind::Spot, 10, None)));
    w.down("b.test", true);
    let first = hand(&h, &env);
    assert!(first.starts_with("503 "), "{first}");
    assert!(ops(&h).is_empty(), "nothing kept");
    w.down("b.test", false);
    assert_eq!(hand(&h, &env), "done");
    assert_eq!(balance(&h, "ana@a.test"), 90);
}

/// A bond's contract id is its envelope's; under an id a contract already has, it is refused for
/// good (409, kept), at once rather than after four attempts.
///
/// Kills `operate_checked`: the guard `name == "libro_contracts.id" && matches!(op, Op::Bond(_))`
/// → `false` (read as a lost race: four attempts, then 503, not kept).
#[test]
fn a_bond_under_a_taken_contract_id_is_refused_for_good() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    topup(&h, "ana@a.test", 100);
    let q = quote(&w, &bo, &ana, "b-1", ContractKind::Spot, 5, None);
    assert_eq!(hand(&h, &op(&w, &ana, "acc-b1", accept_op(&q))), "done");
    let reason = "contract id b-1 is taken; send the bond again under another envelope id";
    assert_eq!(hand(&h, &op(&w, &ana, "b-1", bond_op(10, &bo))), "409 contract_id_taken");
    assert_eq!(ops(&h)[1], ("b-1".to_owned(), 409, reason.to_owned()));
    assert_eq!(balance(&h, "ana@a.test"), 95);
}

/// Makes every insert into `libro_ops` for which `when` holds fail with the constraint `name`, as
/// SQLite names a failed CHECK (a TEMP trigger: this connection only).
fn fail_ops(h: &TestHouse, when: &str, name: &str) {
    let sql = format!(
        "CREATE TEMP TRIGGER fail_ops BEFORE INSERT ON libro_ops WHEN {when}
         BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: {name}'); END"
    );
    // A statement's text is `'static`; a test leaks its one trigger.
    let sql: &'static str = Box::leak(sql.into_boxed_str());
    block_on(h.db.sqlite.batch(vec![nyx5_house::ports::Stmt::new(sql, Vec::new())])).unwrap();
}

/// A constraint the Libro does not know is no lost race: the operation is refused at once with
/// 409 naming it, and when the refusal cannot be written either, that 409 is still the answer
/// (not a rate limit).
///
/// Kills `operate_checked`: the guard `store::RACES.contains(..)` → `true` (four attempts, then
/// 503); `keep_refusal`: the `RATE_CAP` guard → `true` (a failed write answered as 429).
#[test]
fn a_constraint_no_race_explains_refuses_at_once() {
    let (w, h, ana) = with_ana(100);
    fail_ops(&h, "NEW.envelope_id = 'u-1'", "house_test");
    // The reason names the constraint: what an operator reads to find it.
    assert_eq!(hand_in_words(&h, &op(&w, &ana, "u-1", balance_op())), "409 refused by a constraint: house_test");
    assert!(ops(&h).is_empty());
    assert!(windows(&h).is_empty());
}

/// An operation that loses its batch on the payer's balance every time it is tried is refused
/// with 402 (not "busy"), and that refusal is kept.
///
/// Kills `operate_checked`: delete the arm `Some("balance_negative")` of the last lost race.
#[test]
fn an_operation_that_loses_every_attempt_on_the_balance_is_refused_with_402() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    topup(&h, "ana@a.test", 100);
    // Each attempt's batch fails as if another movement had just spent ana's balance.
    fail_ops(&h, "NEW.refused IS NULL", "balance_negative");
    let reason = "not enough balance for this operation at this moment";
    assert_eq!(hand(&h, &op(&w, &ana, "n-1", bond_op(10, &bo))), "402 insufficient_funds");
    assert_eq!(ops(&h), [("n-1".to_owned(), 402, reason.to_owned())]);
    assert_eq!(balance(&h, "ana@a.test"), 100);
}

// ---------------------------------------------------------------------------------------------
// The desk's quota

/// An operation taking `tareas@`'s last quota after another claim took it is refused with the
/// desk's own reason, kept as the envelope's answer.
///
/// Kills `operate_checked`: the `TAREAS_QUOTA` guard → `false` (kept as "refused by a
/// constraint: tareas_quota").
#[test]
fn a_task_whose_quota_went_in_a_race_is_refused_with_the_desks_reason() {
    use nyx5_proto::crypto::{hex, sha256};
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.verifica_enabled = true;
    c.tareas_enabled = true;
    c.tareas_per_agent_per_day = 2;
    c.tareas_per_day = 3;
    w.fake("work.example", |_| nyx5_house::ports::OutResponse { status: 200, body: b"x".to_vec() });
    let h = w.start(c);
    topup(&h, "tareas@a.test", 1000);
    let work =
        format!(r#"[{{"type":"sha256","url":"https://work.example/{{contract}}","expect":"{}"}}]"#, hex(&sha256(b"x")));
    let task = obj([
        ("id", "a".into()),
        ("price", 10.into()),
        ("statement", "do task a".into()),
        ("verify", Value::parse_str(&work).unwrap()),
    ]);
    let admin = [("authorization", "Bearer admin-a.test")];
    assert_eq!(call(&h, "POST", "/tareas", &admin, &Value::Object(task)).status, 201);
    let cy = Agent::new("cy@a.test", 72);
    register(&h, &cy, &[]);
    let page = json(&call(&h, "GET", "/tareas", &[], &Value::Null), 200);
    let terms = page.as_object().unwrap()["tasks"].as_array().unwrap()[0].as_object().unwrap()["terms"]
        .as_object()
        .unwrap()
        .clone();
    let qid = "0a1b2c3d-0000-4000-8000-000000000001";
    let q = QuoteDraft {
        id: qid.into(),
        house: A.into(),
        seller: cy.address.clone(),
        buyer: Address::parse("tareas@a.test").unwrap(),
        contract: ContractKind::Escrow,
        price: 10,
        currency: "tok".into(),
        concept: "a deployment".into(),
        terms: Some(terms),
        arbiter: Some(Address::parse("verifica@a.test").unwrap()),
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&cy.sig)
    .unwrap();
    // Between the desk's check and the accept's batch, the house's quota for today is spent.
    let day = w.clock.now().millis().div_euclid(DAY);
    h.db.before_next_batch(move |db| {
        for i in 0..3 {
            let stmts = vec![stmt!(
                "INSERT INTO tareas_claims (contract, task, agent, day, at, within) VALUES (?, 'a', ?, ?, 0, 1)",
                format!("other-{i}"),
                format!("x{i}@a.test"),
                day
            )];
            block_on(db.batch(stmts)).unwrap();
        }
    });
    let desk = Address::parse("tareas@a.test").unwrap();
    let d = Draft::new(
        "take-1".into(),
        cy.address.clone(),
        vec![desk.clone()],
        w.clock.now(),
        Content::new(nyx5_proto::quote::MEDIA, Value::Object(q.object().clone())),
    );
    let env = d.build().unwrap().sign(&cy.sig).unwrap();
    let card = card_of(&h, &cy.address);
    let v = env.verify(&card, h.now()).unwrap();
    let reason = "no quota is left for this task now (another claim came first)";
    let out = block_on(h.mailbox().accept(&v, &card, &[desk])).unwrap();
    assert_eq!(told(out.into_iter().next().unwrap().1), "409 task_quota_used");
    let refused: Vec<(i64, String)> = ops(&h).into_iter().filter(|o| o.1 != 0).map(|o| (o.1, o.2)).collect();
    assert_eq!(refused, [(409, reason.to_owned())]);
    assert_eq!(balance(&h, "tareas@a.test"), 1000);
}

// ---------------------------------------------------------------------------------------------
// Issues posted once

/// Two top-ups under one cause at once, the second reading the journal's head after the first
/// posted: the second's entry is refused by the cause's uniqueness, and it answers the first's
/// entry; one entry, posted once.
///
/// Kills `post_once`: the guard `name == store::CAUSE_DONE || store::RACES.contains(..)` →
/// `false`, `||` → `&&`, `==` → `!=` (each answers 409 to the second).
#[test]
fn two_issues_under_one_cause_at_once_post_one_entry_and_both_answer_it() {
    let (_w, h, ana) = with_ana(100);
    let to = ana.address.clone();
    h.db.stall(true);
    let second = async {
        Later(1).await;
        h.libro().issue("topup:t-1", &to, 10, "top-up", Vec::new()).await
    };
    let (a, b) = block_on_both(h.libro().issue("topup:t-1", &to, 10, "top-up", Vec::new()), second);
    h.db.stall(false);
    let (a, b) = (a.unwrap(), b.unwrap_or_else(|e| panic!("the second answers the first's entry: {e:?}")));
    assert_eq!(a, b);
    assert_eq!(balance(&h, "ana@a.test"), 10);
    assert_eq!(ints(&h, stmt!("SELECT count(*) AS n FROM libro_entries WHERE cause = 'topup:t-1'"), "n"), [1]);
}

/// What a caller writes with an issue (`also`) failing on its own constraint fails the issue at
/// once (409 naming it), and nothing is posted: it is no race to try again.
///
/// Kills `post_once`: the guard `name == store::CAUSE_DONE || ..` → `true` (four attempts, then
/// 503).
#[test]
fn an_issue_whose_companion_statement_fails_is_refused_at_once() {
    let (_w, h, ana) = with_ana(100);
    // A window whose cap is 0: counting once in it fails `rate_cap`.
    let also = vec![nyx5_house::store::agents::count_in_window("test", 1, 0)];
    let e = block_on(h.libro().issue("topup:t-2", &ana.address, 5, "top-up", also)).unwrap_err();
    assert_eq!((e.code(), e.reason.as_ref()), (409, "refused by a constraint: rate_cap"));
    assert_eq!(balance(&h, "ana@a.test"), 0);
}

/// An issue owed again for a cause already posted (a welcome's row restored from a backup) is
/// cleared by the tick, not posted twice and not left owed.
///
/// Kills `post_once`: delete `!` in `if !also.is_empty()` (the companion statements skipped when
/// the entry exists: the row stays owed, tick after tick).
#[test]
fn an_issue_owed_again_after_its_entry_is_cleared_not_posted_twice() {
    let w = World::new();
    let mut c = w.config(A, Registration::Admin);
    c.welcome = 10;
    let h = w.start(c);
    let ana = Agent::new("ana@a.test", 11);
    register(&h, &ana, &[]);
    assert_eq!(balance(&h, "ana@a.test"), 10);
    let owed = || ints(&h, stmt!("SELECT count(*) AS n FROM libro_due"), "n")[0];
    assert_eq!(owed(), 0);
    let again = nyx5_house::store::libro::owe("welcome:ana@a.test", "ana@a.test", 10, "welcome", h.now().millis());
    block_on(h.db.batch(vec![again])).unwrap();
    assert_eq!(owed(), 1);
    block_on(h.libro().libro_upkeep()).unwrap();
    assert_eq!(owed(), 0);
    assert_eq!(balance(&h, "ana@a.test"), 10);
}

// ---------------------------------------------------------------------------------------------
// The house's own agents

/// `tareas@` is one of the house's own agents: its card is served, and it is told apart from
/// the agents of this house and from another house's `tareas@`.
///
/// Kills `system_card`: delete the arm `tareas::TAREAS`; `is_system` → `false`, `==` → `!=`.
#[test]
fn the_house_knows_its_own_agents() {
    let w = World::new();
    let h = house(&w, 100);
    let resp = call(&h, "GET", "/agents/tareas", &[], &Value::Null);
    assert_eq!(resp.status, 200);
    let card = AgentCard::parse(&resp.body).unwrap();
    assert_eq!(card.address().as_str(), "tareas@a.test");
    for (address, own) in [
        ("tareas@a.test", true),
        ("libro@a.test", true),
        ("verifica@a.test", true),
        ("tareas@b.test", false),
        ("ana@a.test", false),
    ] {
        assert_eq!(h.libro().is_system(&Address::parse(address).unwrap()), own, "{address}");
    }
}

// ---------------------------------------------------------------------------------------------
// Authority: the hour, approvals

const HOURLY: &str =
    r#"{"level":"autonomous","consequence":"costly","max_amount":10,"currency":"tok","max_per_hour":1}"#;

/// What an entry shows of the card authority that allowed it: the authority whole, whose it is,
/// and the hour's movements with this one.
fn allowed(hour_ops: i64) -> Value {
    let Value::Object(mut o) = Authority::from_value(&Value::parse_str(HOURLY).unwrap()).unwrap().to_value() else {
        panic!("an authority is an object")
    };
    o.insert("of".into(), "card:bot.bo@a.test".into());
    o.insert("hour_ops".into(), hour_ops.into());
    Value::Array(vec![Value::Object(o)])
}

/// A subagent that may move 10 alone once an hour: its entries say which authority allowed them
/// and how many movements its hour holds with them; a larger movement waits, and once approved
/// (an hour and a minute after the last movement) before its quote lapses it goes, its entry
/// naming both the authority (with the hour counted back from now) and the approver; a movement
/// an hour and a minute after that goes alone again (the hour is the past 3,600 s, not all
/// time); one whose quote lapsed while it waited is not approved.
///
/// Kills `Gate::apply`: `hour_ops + 1` → `- 1`, `* 1`, and delete the arm `Value::Object(o)`;
/// `operate_checked`: `now - HOUR_MS` → `/`; `approved`: `now - HOUR_MS` → `/`, `now >= e` →
/// `now < e`; `mark_approved`: delete the arm `Some(Value::Object(o))` (the note replacing
/// `allowed_by`).
#[test]
fn a_subagents_hour_counts_its_past_hour_and_an_approval_goes_before_its_quote_lapses() {
    let w = World::new();
    let h = house(&w, 100);
    let (bo, sa) = (Agent::new("bo@a.test", 12), Agent::new("sa@a.test", 13));
    register(&h, &bo, &[]);
    register(&h, &sa, &[]);
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, HOURLY);
    topup(&h, "bot.bo@a.test", 100);
    let spot = |id: &str, price: i64, expires: Option<Timestamp>| {
        accept_op(&quote(&w, &sa, &bot, id, ContractKind::Spot, price, expires))
    };
    assert_eq!(hand(&h, &op(&w, &bot, "acc-1", spot("q-1", 5, None))), "done");
    assert_eq!(authority_of(&h, "acc-1"), obj([("allowed_by", allowed(1))]));
    // 20 waits for bo; approved an hour and a minute later (no tick has pruned acc-1's count),
    // within the quote's two hours, it goes, and acc-1 is no longer in its hour.
    let expires = Some(Timestamp(w.clock.now().millis() + 2 * HOUR));
    assert_eq!(hand(&h, &op(&w, &bot, "acc-3", spot("q-3", 20, expires))), "done");
    assert_eq!(pending_count(&h), 1);
    assert_eq!(balance(&h, "bot.bo@a.test"), 75);
    w.clock.advance(HOUR + MINUTE);
    let approve =
        |id: &str, pending: &str| op(&w, &bo, id, obj([("op", "approve".into()), ("pending", pending.into())]));
    assert_eq!(hand(&h, &approve("ap-3", "acc-3")), "done");
    let mut shown = authority_of(&h, "ap-3");
    assert_eq!(shown.remove("allowed_by"), Some(allowed(1)), "nothing else in the past hour");
    assert_eq!(shown["approved_by"], Value::Array(vec!["bo@a.test".into()]));
    assert_eq!((shown["pending"].as_str(), shown["approval"].as_str()), (Some("acc-3"), Some("ap-3")));
    assert_eq!(balance(&h, &nyx5_rules::libro::model::hold_account("acc-3")), 0);
    assert_eq!(balance(&h, "bot.bo@a.test"), 75);
    // Another hour and a minute later, 5 goes alone: the approved movement's count is past.
    w.clock.advance(HOUR + MINUTE);
    assert_eq!(hand(&h, &op(&w, &bot, "acc-2", spot("q-2", 5, None))), "done");
    assert_eq!(authority_of(&h, "acc-2"), obj([("allowed_by", allowed(1))]));
    assert_eq!(balance(&h, "bot.bo@a.test"), 70);
    // A quote that lapses while its accept waits: the approval is refused, and the hold stays.
    let expires = Some(Timestamp(w.clock.now().millis() + HOUR));
    assert_eq!(hand(&h, &op(&w, &bot, "acc-4", spot("q-4", 20, expires))), "done");
    w.clock.advance(2 * HOUR);
    assert_eq!(hand(&h, &approve("ap-4", "acc-4")), "410 quote_expired");
    assert_eq!(pending_count(&h), 2, "acc-3 approved, acc-4 still waiting with its 20 held");
    assert_eq!(balance(&h, "bot.bo@a.test"), 50);
}

/// A stamp a subagent pays under an authority that allows one movement an hour: an hour and a
/// minute after the last one (no tick in between to prune the count), the next stamp is paid.
///
/// Kills `stamp_facts`: `now - HOUR_MS` → `/` (every stamp ever counted in the hour).
#[test]
fn a_stamp_an_hour_after_the_last_is_paid() {
    let w = World::new();
    let h = house(&w, 100);
    let ana = Agent::new("ana@a.test", 11);
    let bo = Agent::new("bo@a.test", 12);
    register(&h, &ana, &[("inbox", Value::Object(obj([("policy", "stamp".into()), ("price", 5.into())])))]);
    register(&h, &bo, &[]);
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, HOURLY);
    topup(&h, "bot.bo@a.test", 100);
    let to = [ana.address.clone()];
    let mail = |id: &str| {
        let mut d = Draft::new(
            id.into(),
            bot.address.clone(),
            vec![ana.address.clone()],
            w.clock.now(),
            Content::new("text/plain", "hello".into()),
        );
        d.extra = obj([("stamp", Value::Object(obj([("house", A.into()), ("amount", 5.into())])))]);
        let env = d.build().unwrap().sign(&bot.sig).unwrap();
        let card = card_of(&h, &bot.address);
        let v = env.verify(&card, h.now()).unwrap();
        let out = block_on(h.mailbox().accept(&v, &card, &to)).unwrap();
        told(out.into_iter().next().unwrap().1)
    };
    assert_eq!(mail("m-1"), "done");
    assert_eq!(balance(&h, "bot.bo@a.test"), 95);
    w.clock.advance(HOUR + MINUTE);
    assert_eq!(mail("m-2"), "done");
    assert_eq!(balance(&h, "bot.bo@a.test"), 90);
}

/// An escrow's arbiter releasing it moves nothing of its own: a subagent arbiter whose authority
/// makes every costly movement wait releases at once.
///
/// Kills `movement`: the second `&&` → `||` in the release's filter (an arbiter's release
/// judged as the buyer's, and made to wait).
#[test]
fn an_arbiter_subagent_releases_without_waiting() {
    let w = World::new();
    let h = house(&w, 100);
    let (ana, bo, sa) = (Agent::new("ana@a.test", 11), Agent::new("bo@a.test", 12), Agent::new("sa@a.test", 13));
    for a in [&ana, &bo, &sa] {
        register(&h, a, &[]);
    }
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, r#"{"level":"needs_approval","consequence":"costly"}"#);
    topup(&h, "ana@a.test", 100);
    let mut q = QuoteDraft {
        id: "q-r".into(),
        house: A.into(),
        seller: sa.address.clone(),
        buyer: ana.address.clone(),
        contract: ContractKind::Escrow,
        price: 30,
        currency: "tok".into(),
        concept: "work".into(),
        terms: None,
        arbiter: None,
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    };
    q.arbiter = Some(bot.address.clone());
    let q = q.sign(&sa.sig).unwrap();
    assert_eq!(hand(&h, &op(&w, &ana, "acc-r", accept_op(&q))), "done");
    assert_eq!(balance(&h, "escrow:q-r"), 30);
    let release = obj([("op", "release".into()), ("contract", "q-r".into())]);
    assert_eq!(hand(&h, &op(&w, &bot, "rel-r", release)), "done");
    assert_eq!(pending_count(&h), 0);
    assert_eq!(balance(&h, "escrow:q-r"), 0);
    assert!(balance(&h, "sa@a.test") > 0);
}

/// A charge is judged by its mandate's chain, not by its operator's card: a subagent's waiting
/// charge keeps no card rule in its approval.
///
/// Kills `judged_by_card` → `true` (the card's rule looked up and kept for a charge).
#[test]
fn a_waiting_charge_keeps_no_card_rule() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, HOURLY);
    topup(&h, "ana@a.test", 100);
    let grant = obj([
        ("op", "mandate".into()),
        ("grantee", bot.address.as_str().into()),
        ("cap", 50.into()),
        ("authority", Value::parse_str(r#"{"level":"needs_approval","consequence":"costly"}"#).unwrap()),
    ]);
    assert_eq!(hand(&h, &op(&w, &ana, "m-1", grant)), "done");
    let charge =
        obj([("op", "charge".into()), ("mandate", "m-1".into()), ("amount", 5.into()), ("concept", "gpu".into())]);
    assert_eq!(hand(&h, &op(&w, &bot, "ch-1", charge)), "done");
    let rows = block_on(h.db.query(stmt!("SELECT record FROM libro_pending WHERE id = 'ch-1'"))).unwrap();
    let record = Value::parse_str(rows[0].text("record").unwrap()).unwrap();
    let record = record.as_object().unwrap();
    assert_eq!(record["state"].as_str(), Some("pending"));
    assert!(!record.contains_key("card"), "{}", Value::Object(record.clone()).canonical_string());
}

/// An approval nobody decides in time expires on the tick: its hold returns, and its operator and
/// its approver each get the notice saying so.
///
/// Kills `expire_approvals`: delete `!` in the filter of the notices' recipients.
#[test]
fn an_expired_approval_is_told_to_its_operator_and_its_approver() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, r#"{"level":"needs_approval","consequence":"costly"}"#);
    topup(&h, "bot.bo@a.test", 100);
    assert_eq!(hand(&h, &op(&w, &bot, "bd-1", bond_op(30, &ana))), "done");
    assert_eq!(balance(&h, "bot.bo@a.test"), 70);
    w.clock.advance(h.config.approval_ttl_ms + SECOND);
    block_on(h.libro().libro_upkeep()).unwrap();
    assert_eq!(balance(&h, "bot.bo@a.test"), 100);
    for who in [&bot, &bo] {
        let notices: Vec<Object> = mailbox(&h, who)
            .into_iter()
            .filter(|e| e.from().as_str() == "libro@a.test")
            .filter_map(|e| e.content().filter(|c| c.media == NOTICE_MEDIA).and_then(|c| c.body.as_object().cloned()))
            .collect();
        assert_eq!(notices.len(), 1, "{}", who.address);
        assert_eq!(notices[0]["state"].as_str(), Some("expired"));
        assert_eq!(notices[0]["pending"].as_object().unwrap()["id"].as_str(), Some("bd-1"));
    }
}

/// An approval's expiry reaches its parties as the operator's operations do: an approver who
/// blocked the operator hears nothing of it, the operator still does (review of issue 34, L1).
#[test]
fn an_expired_approvals_notice_keeps_to_the_block_of_its_operator() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, r#"{"level":"needs_approval","consequence":"costly"}"#);
    topup(&h, "bot.bo@a.test", 100);
    assert_eq!(hand(&h, &op(&w, &bot, "bd-1", bond_op(30, &ana))), "done");
    let block = obj([("block", Value::Object(obj([("add", Value::Array(vec!["bot.bo@a.test".into()]))])))]);
    json(&bo.post(&h, "/lists/bo", &Value::Object(block)), 200);
    w.clock.advance(h.config.approval_ttl_ms + SECOND);
    block_on(h.libro().libro_upkeep()).unwrap();
    assert_eq!(balance(&h, "bot.bo@a.test"), 100);
    let notices = |who: &Agent| {
        mailbox(&h, who)
            .into_iter()
            .filter(|e| e.from().as_str() == "libro@a.test")
            .filter(|e| e.content().is_some_and(|c| c.media == NOTICE_MEDIA))
            .count()
    };
    assert_eq!(notices(&bot), 1);
    assert_eq!(notices(&bo), 0, "a block of the operator holds its approval's expiry notice");
}

/// An operation that waits is kept whole up to exactly 64 KiB of canonical envelope: one of
/// 65,536 bytes waits, one of 65,537 is refused with 413.
///
/// Kills `write_decision`: `>` → `>=`; `MAX_PENDING_ENVELOPE_BYTES`: `*` → `+`.
#[test]
fn an_operation_of_exactly_64_kib_waits_and_one_byte_more_does_not() {
    let (w, h, ana, bo) = with_ana_and_bo(100);
    let bot = subagent(&h, &bo, "bot.bo@a.test", 14, r#"{"level":"needs_approval","consequence":"costly"}"#);
    topup(&h, "bot.bo@a.test", 100);
    let padded = |id: &str, pad: usize| {
        let mut body = bond_op(10, &ana);
        body.insert("pad".into(), "x".repeat(pad).into());
        op(&w, &bot, id, body)
    };
    let pad = 64 * 1024 - padded("big-1", 0).canonical().len();
    let exact = padded("big-1", pad);
    assert_eq!(exact.canonical().len(), 65_536);
    assert_eq!(hand(&h, &exact), "done");
    assert_eq!(pending_count(&h), 1);
    let over = padded("big-2", pad + 1);
    assert_eq!(over.canonical().len(), 65_537);
    assert_eq!(hand(&h, &over), "413 pending_too_large");
    assert_eq!(pending_count(&h), 1);
    assert_eq!(balance(&h, "bot.bo@a.test"), 90);
}

/// The tick keeps a decided approval readable for 30 days: one decided two days ago stays, one
/// decided 31 days ago goes.
///
/// Kills `KEEP_DECIDED_MS`: `30 * 86_400_000` → `30 + 86_400_000` (a day and 30 ms).
#[test]
fn a_decided_approval_is_kept_for_thirty_days() {
    let w = World::new();
    let h = house(&w, 100);
    let now = h.now().millis();
    let mut put = Vec::new();
    for (id, updated) in [("recent", now - 2 * DAY), ("old", now - 31 * DAY)] {
        put.push(stmt!(
            "INSERT INTO libro_pending (id, operator, state, expires, created, updated, envelope, record)
             VALUES (?, 'ana@a.test', 'declined', ?, 0, ?, '{}', '{}')",
            id,
            updated + HOUR,
            updated
        ));
    }
    block_on(h.db.batch(put)).unwrap();
    block_on(h.tick()).unwrap();
    let ids: Vec<String> = block_on(h.db.query(stmt!("SELECT id FROM libro_pending ORDER BY id")))
        .unwrap()
        .iter()
        .map(|r| r.text("id").unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["recent"]);
}

// ---------------------------------------------------------------------------------------------
// A seller's rotated key

/// A quote signed with the seller's new key, while the Libro's house still holds the seller's
/// card from before the rotation: the house fetches the card again, finds the new key current,
/// and the accept is done.
///
/// Kills `check_operator`: delete `!` in `!seller.accepts_key(..)` (the card fetched again only
/// when it already accepts the key: the new key is refused with 403).
#[test]
fn a_quote_under_the_sellers_new_key_refreshes_its_card() {
    let (w, h, b, ana, bo) = buyer_and_remote_seller();
    let q1 = quote(&w, &bo, &ana, "q-1", ContractKind::Spot, 5, None);
    assert_eq!(hand(&h, &op(&w, &ana, "acc-1", accept_op(&q1))), "done");
    // bo rotates to a new key at its house.
    let new = Agent::new("bo@b.test", 13);
    let body = new.registration(&b, &[]);
    let token = bo.token(&b, "POST", "/agents", &body.canonical());
    assert_eq!(call(&b, "POST", "/agents", &[("authorization", &token)], &body).status, 200);
    let q2 = quote(&w, &new, &ana, "q-2", ContractKind::Spot, 5, None);
    let env = op(&w, &ana, "acc-2", accept_op(&q2));
    let card = card_of(&h, &ana.address);
    let v = env.verify(&card, h.now()).unwrap();
    assert_eq!(told(block_on(h.libro().operate(&v, &card))), "done");
    assert_eq!(balance(&h, "ana@a.test"), 90);
}

// ---------------------------------------------------------------------------------------------
// A revoke and a sub-mandate at once (issue 34 §4)

/// cy grants eve a sub-mandate under ana's mandate while ana revokes that mandate: both read
/// before either writes, and the grant writes between the revoke's reads and its batch, which
/// then finds one more
/// mandate under it than it read (and told): its guard fails, it reads again, and eve, whose
/// sub-mandate the cascade stops, gets the revoke's receipt as cy does.
#[test]
fn a_sub_mandate_granted_while_its_parent_is_revoked_hears_of_the_revoke() {
    let (w, h, ana, cy) = with_ana_and_bo(100);
    let eve = Agent::new("eve@a.test", 13);
    register(&h, &eve, &[]);
    let grant = obj([("op", "mandate".into()), ("grantee", cy.address.as_str().into()), ("cap", 10.into())]);
    assert_eq!(hand(&h, &op(&w, &ana, "m-1", grant)), "done");
    let sub = obj([
        ("op", "mandate".into()),
        ("grantee", eve.address.as_str().into()),
        ("cap", 5.into()),
        ("parent", "m-1".into()),
    ]);
    let sub = op(&w, &cy, "m-2", sub);
    let revoke = op(&w, &ana, "r-1", obj([("op", "revoke".into()), ("mandate", "m-1".into())]));
    let (cy_card, ana_card) = (card_of(&h, &cy.address), card_of(&h, &ana.address));
    let (sub, revoke) = (sub.verify(&cy_card, h.now()).unwrap(), revoke.verify(&ana_card, h.now()).unwrap());
    h.db.stall(true);
    // The revoke reads what is under the mandate (nothing yet) just before the grant's batch.
    let (b, a) = block_on_both(h.libro().operate(&revoke, &ana_card), h.libro().operate(&sub, &cy_card));
    h.db.stall(false);
    assert_eq!((told(a), told(b)), ("done".to_owned(), "done".to_owned()));
    let states = ints(&h, stmt!("SELECT state = 'revoked' AS r FROM libro_mandates ORDER BY id"), "r");
    assert_eq!(states, [1, 1], "the cascade took the sub-mandate");
    let receipts = |who: &Agent| {
        mailbox(&h, who).into_iter().filter(|e| e.from().local() == "libro" && e.in_reply_to() == Some("r-1")).count()
    };
    assert_eq!((receipts(&ana), receipts(&cy), receipts(&eve)), (1, 1, 1), "everyone the revoke stopped heard of it");
}
