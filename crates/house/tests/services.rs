//! The house's own agents (spec §22, §23; docs/SPEC.md §22, §23) through public routes, on real
//! SQLite: `verifica@` judging escrows that name it (a verdict that releases, one that refunds,
//! one that could not be reached and decides nothing until it can), the refusals at accept, and
//! `tareas@` with its catalogue, its caps and its comparisons. Evidence servers are the kit's
//! fakes, reached through the house's outbound policy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::cell::Cell;
use std::rc::Rc;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::LIBRO;
use nyx5_house::libro::verifica::ChecksReport;
use nyx5_house::ports::{Db, OutResponse};
use nyx5_house::stmt;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{self, ContractKind, Quote, QuoteDraft};
use nyx5_proto::{Address, Envelope, Object, Value};

const ADMIN: &str = "Bearer admin-a.test";

fn house(w: &World, verifica: bool, tareas: bool) -> Rc<TestHouse> {
    let mut c = w.config("a.test", Registration::Admin);
    c.verifica_enabled = verifica;
    c.tareas_enabled = tareas;
    w.start(c)
}

fn register(h: &TestHouse, agent: &Agent) {
    assert_eq!(agent.register_admin(h).status, 201);
}

fn terms(json: &str) -> Object {
    Value::parse_str(json).unwrap().as_object().unwrap().clone()
}

fn verifica() -> Address {
    Address::parse("verifica@a.test").unwrap()
}

#[allow(clippy::too_many_arguments)]
fn quote_of(
    w: &World,
    seller: &Agent,
    buyer: &Address,
    id: &str,
    price: i64,
    terms: Option<Object>,
    arbiter: Option<Address>,
    contract: ContractKind,
) -> Quote {
    QuoteDraft {
        id: id.into(),
        house: "a.test".into(),
        seller: seller.address.clone(),
        buyer: buyer.clone(),
        contract,
        price,
        currency: "tok".into(),
        concept: "a deployment".into(),
        terms,
        arbiter,
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&seller.sig)
    .unwrap()
}

/// Sends an operation through `/outbound` and answers its status there and the refusal's code in
/// the operator's mailbox (0 when a receipt came).
fn operate(w: &World, h: &TestHouse, who: &Agent, id: &str, body: Object) -> u16 {
    let r = who.send(h, &signed_op(w, who, "a.test", id, body));
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    w.tick_all();
    for e in mailbox(h, who) {
        if e.in_reply_to() == Some(id) && e.from().local() == LIBRO {
            return 0;
        }
        let body = e.content().and_then(|c| c.body.as_object().cloned()).unwrap_or_default();
        if e.from().local() == "postmaster" && body.get("of").and_then(Value::as_str) == Some(id) {
            return u16::try_from(body["code"].as_safe_integer().unwrap()).unwrap();
        }
    }
    panic!("no answer to {id}");
}

fn accept(w: &World, h: &TestHouse, buyer: &Agent, q: &Quote) -> u16 {
    operate(
        w,
        h,
        buyer,
        &format!("accept-{}", q.id),
        obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))]),
    )
}

fn deliver(w: &World, h: &TestHouse, seller: &Agent, contract: &str, evidence: Option<&str>) -> u16 {
    let mut body = obj([("op", "deliver".into()), ("contract", contract.into())]);
    if let Some(e) = evidence {
        body.insert("evidence_sha256".into(), e.into());
    }
    operate(w, h, seller, &format!("deliver-{contract}"), body)
}

fn contract(h: &TestHouse, id: &str) -> Object {
    let rows = block_on(h.db.sqlite.query(stmt!("SELECT record FROM libro_contracts WHERE id = ?", id))).unwrap();
    let text = rows[0].text("record").unwrap().to_owned();
    Value::parse_str(&text).unwrap().as_object().unwrap().clone()
}

fn check_row(h: &TestHouse, id: &str) -> Option<(String, i64)> {
    let rows = block_on(h.db.sqlite.query(stmt!("SELECT state, attempts FROM verifica_checks WHERE contract = ?", id)))
        .unwrap();
    rows.first().map(|r| (r.text("state").unwrap().to_owned(), r.int("attempts").unwrap()))
}

/// The verdict notices (undecided) `who` holds from `verifica@`.
fn notices(h: &TestHouse, who: &Agent) -> Vec<Object> {
    mailbox(h, who)
        .into_iter()
        .filter(|e| *e.from() == verifica())
        .map(|e| e.content().unwrap().body.as_object().unwrap().clone())
        .collect()
}

fn serve(w: &World, host: &str, status: u16, body: &'static [u8]) {
    w.fake(host, move |_| OutResponse { status, body: body.to_vec() });
}

/// ana buys from bo with verifica@ arbitrating `tests`; answers the quote.
fn escrow(w: &World, h: &TestHouse, ana: &Agent, bo: &Agent, id: &str, tests: &str) -> (Quote, u16) {
    let t = terms(&format!(r#"{{"verify":{tests}}}"#));
    let q = quote_of(w, bo, &ana.address, id, 50, Some(t), Some(verifica()), ContractKind::Escrow);
    let code = accept(w, h, ana, &q);
    (q, code)
}

fn people(h: &TestHouse) -> (Agent, Agent) {
    let ana = Agent::new("ana@a.test", 70);
    let bo = Agent::new("bo@a.test", 71);
    register(h, &ana);
    register(h, &bo);
    topup(h, "ana@a.test", 100);
    (ana, bo)
}

#[test]
fn a_verdict_that_passes_releases_the_escrow_with_its_reasons() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    serve(&w, "site.example", 200, b"deployed v2");
    let tests = format!(
        r#"[{{"type":"http_status","url":"https://site.example/"}},{{"type":"sha256","url":"https://site.example/v2","expect":"{}"}}]"#,
        hex(&sha256(b"deployed v2"))
    );
    let (q, code) = escrow(&w, &h, &ana, &bo, "q-pass", &tests);
    assert_eq!(code, 0);
    assert_eq!(balance(&h, "escrow:q-pass"), 50);
    // Nothing is checked before the delivery.
    w.tick_all();
    assert_eq!(w.sent_to("site.example"), 0);
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    // The delivery's tick ran the check: two fetches, the verdict through libro@.
    assert_eq!(w.sent_to("site.example"), 2);
    let c = contract(&h, "q-pass");
    assert_eq!(c["state"].as_str(), Some("released"));
    let verdict = c["verdict"].as_object().unwrap();
    assert_eq!(verdict["outcome"].as_str(), Some("passed"));
    assert_eq!(verdict["verifier"].as_str(), Some("verifica@a.test"));
    let results: Vec<_> = verdict["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_object().unwrap()["result"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(results, ["pass", "pass"]);
    let history = c["history"].as_array().unwrap();
    let last = history.last().unwrap().as_object().unwrap();
    assert_eq!((last["op"].as_str(), last["by"].as_str()), (Some("release"), Some("verifica@a.test")));
    assert_eq!(last["verdict"].as_object().unwrap()["outcome"].as_str(), Some("passed"));
    assert_eq!(balance(&h, "escrow:q-pass"), 0);
    assert_eq!(balance(&h, "bo@a.test"), 45, "the price less the house's 10 %");
    assert!(check_row(&h, "q-pass").is_none(), "the check is done");
    // Both parties hold the release's receipt; verifica@ holds no mailbox.
    for who in [&ana, &bo] {
        let receipts: Vec<_> = mailbox(&h, who)
            .into_iter()
            .filter(|e| e.from().local() == LIBRO)
            .filter_map(|e| e.content().and_then(|c| c.body.as_object().cloned()))
            .filter(|b| b.get("op").and_then(Value::as_str) == Some("release"))
            .collect();
        assert_eq!(receipts.len(), 1, "{}", who.address);
        assert_eq!(receipts[0]["from"].as_str(), Some("verifica@a.test"));
    }
    // Another tick changes nothing: one verdict per contract.
    w.tick_all();
    assert_eq!(w.sent_to("site.example"), 2);
}

#[test]
fn a_verdict_that_fails_refunds_the_buyer() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    serve(&w, "site.example", 404, b"not here");
    let (q, _) = escrow(&w, &h, &ana, &bo, "q-fail", r#"[{"type":"http_status","url":"https://site.example/"}]"#);
    assert_eq!(balance(&h, "ana@a.test"), 50);
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    let c = contract(&h, "q-fail");
    assert_eq!(c["state"].as_str(), Some("refunded"));
    let verdict = c["verdict"].as_object().unwrap();
    assert_eq!(verdict["outcome"].as_str(), Some("failed"));
    let test = verdict["tests"].as_array().unwrap()[0].as_object().unwrap();
    assert_eq!(test["status"].as_safe_integer(), Some(404));
    assert!(test["reason"].as_str().unwrap().contains("404"));
    assert_eq!(balance(&h, "ana@a.test"), 100, "refunded without fee");
    assert_eq!(balance(&h, "bo@a.test"), 0);
}

#[test]
fn a_test_that_cannot_run_decides_nothing_until_it_can() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    // gone.example answers nobody yet: no route.
    let body_hash = hex(&sha256(b"artifact"));
    let (q, _) = escrow(
        &w,
        &h,
        &ana,
        &bo,
        "q-wait",
        &format!(r#"[{{"type":"sha256","url":"https://gone.example/a","expect":"{body_hash}"}}]"#),
    );
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    assert_eq!(contract(&h, "q-wait")["state"].as_str(), Some("delivered"), "nothing decided");
    assert_eq!(balance(&h, "escrow:q-wait"), 50);
    assert_eq!(check_row(&h, "q-wait"), Some(("due".to_owned(), 1)));
    for who in [&ana, &bo] {
        let n = notices(&h, who);
        assert_eq!(n.len(), 1, "{} is told why", who.address);
        assert_eq!(n[0]["verdict"].as_object().unwrap()["outcome"].as_str(), Some("undecided"));
        assert!(n[0]["next"].as_str().is_some());
    }
    // Not due again before its wait: a tick now fetches nothing.
    let before = w.sent_to("gone.example");
    w.tick_all();
    assert_eq!(w.sent_to("gone.example"), before);
    // A server that answers 503 is still undecided.
    serve(&w, "gone.example", 503, b"");
    w.clock.advance(61_000);
    let report = block_on(h.libro().run_checks(4)).unwrap();
    assert_eq!(report, ChecksReport { decided: 0, undecided: 1, fetches: 1 });
    assert_eq!(check_row(&h, "q-wait"), Some(("due".to_owned(), 2)));
    assert_eq!(contract(&h, "q-wait")["state"].as_str(), Some("delivered"));
    // Once it serves the artifact, the next try releases.
    serve(&w, "gone.example", 200, b"artifact");
    w.clock.advance(10 * 60_000);
    let report = block_on(h.libro().run_checks(4)).unwrap();
    assert_eq!(report, ChecksReport { decided: 1, undecided: 0, fetches: 1 });
    assert_eq!(contract(&h, "q-wait")["state"].as_str(), Some("released"));
    assert_eq!(balance(&h, "bo@a.test"), 45);
    assert!(check_row(&h, "q-wait").is_none());
}

/// A pass of the checks makes at most its budget of fetches, except that its first check always
/// runs, whatever it needs (or a check of more tests than the budget would never run).
#[test]
fn a_pass_of_the_checks_stays_within_its_fetches() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    topup(&h, "ana@a.test", 100);
    // Three escrows of two fetches each, first undecided: later.example answers nobody yet.
    let two = r#"[{"type":"http_status","url":"https://later.example/a"},{"type":"http_status","url":"https://later.example/b"}]"#;
    for id in ["q-b1", "q-b2", "q-b3"] {
        let (q, code) = escrow(&w, &h, &ana, &bo, id, two);
        assert_eq!(code, 0);
        assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
        assert_eq!(check_row(&h, id), Some(("due".to_owned(), 1)));
    }
    serve(&w, "later.example", 200, b"");
    w.clock.advance(61_000);
    let released =
        || ["q-b1", "q-b2", "q-b3"].iter().filter(|id| contract(&h, id)["state"].as_str() == Some("released")).count();
    // Four fetches: two checks; the third would make six.
    assert_eq!(block_on(h.libro().run_checks(4)).unwrap(), ChecksReport { decided: 2, undecided: 0, fetches: 4 });
    assert_eq!(released(), 2);
    // One fetch: the first check still runs, on its two.
    assert_eq!(block_on(h.libro().run_checks(1)).unwrap(), ChecksReport { decided: 1, undecided: 0, fetches: 2 });
    assert_eq!(released(), 3);
    assert_eq!(
        w.sent_to("later.example/"),
        6 + 6,
        "two fetches per check: three undecided first tries, then the three that passed"
    );
}

/// The escrow of a check that came out undecided once, `race.example` then serving its page:
/// the check is due again, its test's fetch answered by `on_fetch` first.
fn check_due_again(w: &World, h: &Rc<TestHouse>, ana: &Agent, bo: &Agent, on_fetch: impl Fn() + 'static) {
    let (q, _) = escrow(w, h, ana, bo, "q-race", r#"[{"type":"http_status","url":"https://race.example/"}]"#);
    assert_eq!(deliver(w, h, bo, &q.id, None), 0);
    assert_eq!(check_row(h, "q-race"), Some(("due".to_owned(), 1)));
    w.fake("race.example", move |_| {
        on_fetch();
        OutResponse { status: 200, body: vec![] }
    });
    w.clock.advance(61_000);
}

/// The Libro refuses a verdict for good when the contract moved on while its tests ran: the
/// check ends there, the refusal kept with it, and is never tried again.
#[test]
fn a_verdict_the_libro_refuses_for_good_ends_the_check() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let release =
        signed_op(&w, &ana, "a.test", "ana-rel", obj([("op", "release".into()), ("contract", "q-race".into())]));
    let (inner, buyer) = (h.clone(), ana.address.clone());
    check_due_again(&w, &h, &ana, &bo, move || {
        // The buyer releases while verifica@ is fetching.
        let card = block_on(inner.lookup().local_card(buyer.local())).unwrap().unwrap();
        let v = release.clone().verify(&card, inner.now()).unwrap();
        let out = block_on(inner.mailbox().accept(&v, &card, v.to())).unwrap();
        assert_eq!(out[0].1, nyx5_house::mailbox::Outcome::Accepted);
    });
    let report = block_on(h.libro().run_checks(4)).unwrap();
    assert_eq!(report, ChecksReport { decided: 0, undecided: 0, fetches: 1 });
    assert_eq!(check_row(&h, "q-race"), Some(("undecided".to_owned(), 2)), "ended, not postponed");
    let rows =
        block_on(h.db.sqlite.query(stmt!("SELECT last FROM verifica_checks WHERE contract = 'q-race'"))).unwrap();
    let last = Value::parse_str(rows[0].text("last").unwrap()).unwrap();
    assert_eq!(last.as_object().unwrap()["refused"].as_object().unwrap()["code"].as_safe_integer(), Some(409));
    let c = contract(&h, "q-race");
    assert_eq!(c["state"].as_str(), Some("released"));
    assert!(!c.contains_key("verdict"), "the buyer's release stands alone");
    // Due no more.
    w.clock.advance(86_400_000);
    assert_eq!(block_on(h.libro().run_checks(4)).unwrap(), ChecksReport::default());
}

/// The Libro cannot take a verdict just now (its database refused the write): the check is put
/// off by its wait and decides next time.
#[test]
fn a_verdict_the_libro_cannot_take_now_is_tried_again() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let inner = h.clone();
    let failed = Rc::new(std::cell::Cell::new(false));
    let once = failed.clone();
    check_due_again(&w, &h, &ana, &bo, move || {
        if once.replace(true) {
            return;
        }
        // The Libro's write after this fetch fails; the writes after it do not.
        let again = inner.clone();
        inner.db.before_next_batch(move |db| {
            block_on(db.query(stmt!("PRAGMA query_only = ON"))).unwrap();
            again.db.before_next_batch(|db| {
                block_on(db.query(stmt!("PRAGMA query_only = OFF"))).unwrap();
            });
        });
    });
    let report = block_on(h.libro().run_checks(4)).unwrap();
    assert!(failed.get());
    assert_eq!(report, ChecksReport { decided: 0, undecided: 0, fetches: 1 });
    assert_eq!(check_row(&h, "q-race"), Some(("due".to_owned(), 2)), "put off, not ended");
    assert_eq!(contract(&h, "q-race")["state"].as_str(), Some("delivered"));
    // Not before its wait of 10 minutes; then it releases.
    w.clock.advance(9 * 60_000);
    assert_eq!(block_on(h.libro().run_checks(4)).unwrap(), ChecksReport::default());
    w.clock.advance(60_000);
    assert_eq!(block_on(h.libro().run_checks(4)).unwrap(), ChecksReport { decided: 1, undecided: 0, fetches: 1 });
    assert_eq!(contract(&h, "q-race")["state"].as_str(), Some("released"));
}

#[test]
fn missing_evidence_is_undecided_and_is_given_up_after_the_last_attempt() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let expect = hex(&sha256(b"the report"));
    let (q, _) = escrow(&w, &h, &ana, &bo, "q-ev", &format!(r#"[{{"type":"sha256","expect":"{expect}"}}]"#));
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    let refund = |id: &str| operate(&w, &h, &ana, id, obj([("op", "refund".into()), ("contract", "q-ev".into())]));
    assert_eq!(refund("early-refund"), 403, "a buyer does not refund a delivery still being checked");
    for _ in 0..10 {
        w.clock.advance(13 * 3_600_000);
        w.tick_all();
    }
    assert_eq!(
        check_row(&h, "q-ev"),
        Some(("undecided".to_owned(), nyx5_house::libro::verifica::MAX_ATTEMPTS)),
        "given up after its attempts"
    );
    assert_eq!(contract(&h, "q-ev")["state"].as_str(), Some("delivered"));
    assert_eq!(balance(&h, "escrow:q-ev"), 50, "an undecided verdict moves nothing");
    let n = notices(&h, &bo);
    assert_eq!(n.len(), usize::try_from(nyx5_house::libro::verifica::MAX_ATTEMPTS).unwrap());
    assert!(n.last().unwrap()["next"].is_null(), "the last notice says no try follows");
    let reason = n[0]["verdict"].as_object().unwrap()["tests"].as_array().unwrap()[0].as_object().unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reason.contains("evidence_sha256"), "{reason}");
    // A delivery nobody could check is no delivery: now the buyer may take its money back.
    assert_eq!(refund("late-refund"), 0);
    assert_eq!(contract(&h, "q-ev")["state"].as_str(), Some("refunded"));
    assert_eq!(balance(&h, "ana@a.test"), 100);
}

#[test]
fn the_delivered_evidence_hash_is_judged_without_a_fetch() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let expect = hex(&sha256(b"the report"));
    let (q, _) = escrow(&w, &h, &ana, &bo, "q-hash", &format!(r#"[{{"type":"sha256","expect":"{expect}"}}]"#));
    assert_eq!(deliver(&w, &h, &bo, &q.id, Some(&expect)), 0);
    assert_eq!(contract(&h, "q-hash")["state"].as_str(), Some("released"));
    let (q2, _) = escrow(&w, &h, &ana, &bo, "q-hash2", &format!(r#"[{{"type":"sha256","expect":"{expect}"}}]"#));
    assert_eq!(deliver(&w, &h, &bo, &q2.id, Some(&hex(&sha256(b"another")))), 0);
    assert_eq!(contract(&h, "q-hash2")["state"].as_str(), Some("refunded"));
}

#[test]
fn a_party_that_settles_first_ends_the_check() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let (q, _) = escrow(&w, &h, &ana, &bo, "q-first", r#"[{"type":"http_status","url":"https://nowhere.example/"}]"#);
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    assert_eq!(check_row(&h, "q-first"), Some(("due".to_owned(), 1)));
    // The buyer is content and releases itself; the next due check finds nothing to judge.
    assert_eq!(operate(&w, &h, &ana, "rel", obj([("op", "release".into()), ("contract", "q-first".into())])), 0);
    w.clock.advance(61_000);
    w.tick_all();
    assert!(check_row(&h, "q-first").is_none());
    assert_eq!(contract(&h, "q-first")["state"].as_str(), Some("released"));
    assert!(!contract(&h, "q-first").contains_key("verdict"));
}

#[test]
fn a_contract_verifica_would_not_judge_is_refused_at_accept() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let cases = [
        ("q1", r#"[{"type":"exit_0","argv":["make","test"]}]"#),
        ("q2", r#"[{"type":"http_status","url":"http://site.example/"}]"#),
        ("q3", r#"[{"type":"http_status","url":"https://127.0.0.1/"}]"#),
        ("q4", r#"[{"type":"http_status","url":"https://metadata.google.internal/"}]"#),
        ("q5", r#"[]"#),
        ("q6", r#"[{"type":"lighthouse","score":90}]"#),
    ];
    for (id, tests) in cases {
        let (_, code) = escrow(&w, &h, &ana, &bo, id, tests);
        assert_eq!(code, 400, "{id}: {tests}");
    }
    // No terms.verify at all, and a spot contract.
    let q = quote_of(&w, &bo, &ana.address, "q7", 5, None, Some(verifica()), ContractKind::Escrow);
    assert_eq!(accept(&w, &h, &ana, &q), 400);
    let t = terms(r#"{"verify":[{"type":"http_status","url":"https://site.example/"}]}"#);
    let q = quote_of(&w, &bo, &ana.address, "q8", 5, Some(t), Some(verifica()), ContractKind::Spot);
    assert_eq!(accept(&w, &h, &ana, &q), 400);
    assert_eq!(balance(&h, "ana@a.test"), 100, "nothing was held");
    // verifica@ reads no mail.
    let env = ana.draft("to-verifica", &[&verifica()], "please check").sign(&ana.sig).unwrap();
    assert_eq!(ana.send(&h, &env).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &ana, "to-verifica"), 403);
}

#[test]
fn a_house_without_verifica_takes_no_contract_naming_it() {
    let w = World::new();
    let h = house(&w, false, false);
    let (ana, bo) = people(&h);
    let (_, code) = escrow(&w, &h, &ana, &bo, "q1", r#"[{"type":"http_status","url":"https://site.example/"}]"#);
    assert_eq!(code, 400);
    // Its card still says what it would run: a card is served for every system agent.
    let card = json(&call(&h, "GET", "/agents/verifica", &[], &Value::Null), 200);
    let caps = card.as_object().unwrap()["capabilities"].as_object().unwrap()["verifica"].as_object().unwrap().clone();
    assert_eq!(caps["tests"].canonical_string(), r#"["http_status","sha256"]"#);
    assert_eq!(caps["unsupported"].canonical_string(), r#"["exit_0"]"#);
}

#[test]
fn only_the_arbiter_gives_a_verdict_and_it_must_say_what_it_does() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let (q, _) = escrow(&w, &h, &ana, &bo, "q-v", r#"[{"type":"http_status","url":"https://nowhere.example/"}]"#);
    let verdict = |outcome: &str| Value::Object(obj([("outcome", outcome.into()), ("contract", "q-v".into())]));
    let body = obj([("op", "release".into()), ("contract", q.id.as_str().into()), ("verdict", verdict("passed"))]);
    assert_eq!(operate(&w, &h, &ana, "fake-verdict", body), 403);
    let body = obj([("op", "refund".into()), ("contract", q.id.as_str().into()), ("verdict", verdict("undecided"))]);
    assert_eq!(operate(&w, &h, &bo, "undecided-verdict", body), 400);
    assert_eq!(contract(&h, "q-v")["state"].as_str(), Some("held"));
}

/// A house running verifica@, with ana (topped up), bo, and carla, a third agent who may
/// arbitrate in verifica@'s place.
fn with_carla(w: &World) -> (Rc<TestHouse>, Agent, Agent, Agent) {
    let h = house(w, true, false);
    let (ana, bo) = people(&h);
    let carla = Agent::new("carla@a.test", 77);
    register(&h, &carla);
    (h, ana, bo, carla)
}

/// verifica@ owes a check only to an escrow that names this house's verifica@ and declares
/// `terms.verify`: delivered, an escrow judged by someone else (whatever its terms say), by
/// another house's verifica@, or by nobody leaves no check behind; the one it owes does.
#[test]
fn verifica_checks_only_what_names_it_here() {
    let w = World::new();
    let (h, ana, bo, carla) = with_carla(&w);
    let tests = r#"{"verify":[{"type":"http_status","url":"https://site.example/"}]}"#;
    let cases = [
        ("n1", Some(terms(tests)), Some(carla.address.clone())),
        ("n2", None, Some(carla.address.clone())),
        ("n3", Some(terms(tests)), Some(Address::parse("verifica@b.test").unwrap())),
        ("n4", Some(terms(tests)), None),
    ];
    for (id, t, arbiter) in cases {
        let q = quote_of(&w, &bo, &ana.address, id, 5, t, arbiter, ContractKind::Escrow);
        assert_eq!(accept(&w, &h, &ana, &q), 0, "{id}");
        assert_eq!(deliver(&w, &h, &bo, id, None), 0, "{id}");
        assert_eq!(contract(&h, id)["state"].as_str(), Some("delivered"), "{id}");
        assert_eq!(check_row(&h, id), None, "{id}: a check nobody owes");
    }
    let (_, code) = escrow(&w, &h, &ana, &bo, "n5", r#"[{"type":"http_status","url":"https://site.example/"}]"#);
    assert_eq!(code, 0);
    assert_eq!(deliver(&w, &h, &bo, "n5", None), 0);
    assert!(check_row(&h, "n5").is_some(), "the check verifica@ owes");
}

// ---- tareas@ ----

fn tareas(w: &World) -> Rc<TestHouse> {
    let mut c = w.config("a.test", Registration::Admin);
    c.verifica_enabled = true;
    c.tareas_enabled = true;
    c.tareas_per_agent_per_day = 2;
    c.tareas_per_day = 3;
    // Where the tasks' work is published: every path serves "x".
    serve(w, "work.example", 200, b"x");
    w.start(c)
}

/// A house with the desk funded with 1000 tok, and one of its agents, cy.
fn desk_and_agent(w: &World) -> (Rc<TestHouse>, Agent) {
    let h = tareas(w);
    let cy = Agent::new("cy@a.test", 72);
    register(&h, &cy);
    topup(&h, "tareas@a.test", 1000);
    (h, cy)
}

/// A task's test: the page at `https://work.example/<the contract's id>` hashes to `hash`.
fn work(hash: &str) -> String {
    format!(r#"[{{"type":"sha256","url":"https://work.example/{{contract}}","expect":"{hash}"}}]"#)
}

fn add_task(h: &TestHouse, id: &str, price: i64, verify: &str) -> u16 {
    let body = obj([
        ("id", id.into()),
        ("price", price.into()),
        ("statement", format!("do task {id}").into()),
        ("verify", Value::parse_str(verify).unwrap()),
    ]);
    call(h, "POST", "/tareas", &[("authorization", ADMIN)], &Value::Object(body)).status
}

/// A quote id for the desk (a UUID), made from a name the test reads.
fn qid(name: &str) -> String {
    let h = hex(&sha256(name.as_bytes()));
    format!("{}-{}-4{}-8{}-{}", &h[..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32])
}

fn desk() -> Address {
    Address::parse("tareas@a.test").unwrap()
}

/// The catalogue's terms of task `id`.
fn catalogue_terms(h: &TestHouse, id: &str) -> Object {
    let v = json(&call(h, "GET", "/tareas", &[], &Value::Null), 200);
    let tasks = v.as_object().unwrap()["tasks"].as_array().unwrap().to_vec();
    let t = tasks.iter().find(|t| t.as_object().unwrap()["id"].as_str() == Some(id)).unwrap();
    t.as_object().unwrap()["terms"].as_object().unwrap().clone()
}

/// `who` sends `q` to tareas@ in the clear; answers the bounce's code after a tick (0: taken),
/// or the status of `/outbound` when it refused the envelope itself.
fn take(w: &World, h: &TestHouse, who: &Agent, id: &str, q: &Quote) -> u16 {
    let d = Draft::new(
        id.into(),
        who.address.clone(),
        vec![desk()],
        w.clock.now(),
        Content::new(quote::MEDIA, Value::Object(q.object().clone())),
    );
    let env: Envelope = d.build().unwrap().sign(&who.sig).unwrap();
    let r = who.send(h, &env);
    if !matches!(r.status, 200 | 202) {
        return r.status;
    }
    w.tick_all();
    bounce(h, who, id)
}

fn task_quote(w: &World, h: &TestHouse, who: &Agent, qid: &str, task: &str, price: i64) -> Quote {
    quote_of(w, who, &desk(), qid, price, Some(catalogue_terms(h, task)), Some(verifica()), ContractKind::Escrow)
}

#[test]
fn a_task_is_taken_judged_and_paid_once() {
    let w = World::new();
    let (h, cy) = desk_and_agent(&w);
    let hash = hex(&sha256(b"x"));
    assert_eq!(add_task(&h, "hello", 20, &work(&hash)), 201);
    assert_eq!(add_task(&h, "hello", 20, &work(&hash)), 200, "the same task again");
    assert_eq!(add_task(&h, "hello", 21, &work(&hash)), 409);
    assert_eq!(add_task(&h, "bad", 5, r#"[{"type":"exit_0","argv":["true"]}]"#), 400);
    // The catalogue: public, each task whole.
    let page = json(&call(&h, "GET", "/tareas", &[], &Value::Null), 200);
    let page = page.as_object().unwrap();
    assert_eq!(page["desk"].as_str(), Some("tareas@a.test"));
    assert_eq!(page["arbiter"].as_str(), Some("verifica@a.test"));
    assert_eq!(page["per_agent_per_day"].as_safe_integer(), Some(2));
    assert_eq!(page["left_today"].as_safe_integer(), Some(3));
    let t = catalogue_terms(&h, "hello");
    assert_eq!(t["task"].as_str(), Some("hello"));
    assert_eq!(t["verify"].as_array().unwrap().len(), 1);

    let q = task_quote(&w, &h, &cy, &qid("t1"), "hello", 20);
    assert_eq!(take(&w, &h, &cy, "take-1", &q), 0);
    assert_eq!(balance(&h, &format!("escrow:{}", qid("t1"))), 20);
    assert_eq!(balance(&h, "tareas@a.test"), 980);
    let c = contract(&h, &qid("t1"));
    assert_eq!((c["buyer"].as_str(), c["seller"].as_str()), (Some("tareas@a.test"), Some("cy@a.test")));
    // The same envelope again is the same take.
    assert_eq!(take(&w, &h, &cy, "take-1", &q), 0);
    assert_eq!(balance(&h, "tareas@a.test"), 980);
    // A second task while the first is in flight.
    assert_eq!(add_task(&h, "other", 5, &work(&hash)), 201);
    let q2 = task_quote(&w, &h, &cy, &qid("t2"), "other", 5);
    assert_eq!(take(&w, &h, &cy, "take-2", &q2), 409);
    // Delivered with the right evidence: verifica@ releases.
    assert_eq!(deliver(&w, &h, &cy, &qid("t1"), None), 0);
    assert_eq!(contract(&h, &qid("t1"))["state"].as_str(), Some("released"));
    assert_eq!(balance(&h, "cy@a.test"), 18);
    // Paid once, even another day.
    w.clock.advance(2 * 86_400_000);
    let again = task_quote(&w, &h, &cy, &qid("t3"), "hello", 20);
    assert_eq!(take(&w, &h, &cy, "take-3", &again), 409);
    // The cy's receipt of the accept came from tareas@'s operation.
    let accepted = mailbox(&h, &cy).into_iter().any(|e| {
        e.from().local() == LIBRO
            && e.content().and_then(|c| c.body.as_object().cloned()).is_some_and(|b| {
                b.get("op").and_then(Value::as_str) == Some("accept")
                    && b.get("from").and_then(Value::as_str) == Some("tareas@a.test")
            })
    });
    assert!(accepted);
    let rows = block_on(h.db.sqlite.query(stmt!("SELECT count(*) AS n FROM tareas_claims"))).unwrap();
    assert_eq!(rows[0].int("n"), Some(1));
}

/// A take delivered twice (its sender's house never heard the first answer) is answered as the
/// first was, though the first has spent the agent's slot since.
#[test]
fn the_same_take_delivered_again_is_answered_as_done_whatever_the_quota_says() {
    let w = World::new();
    let (h, cy) = desk_and_agent(&w);
    assert_eq!(add_task(&h, "a", 10, &work(&hex(&sha256(b"x")))), 201);
    let q = task_quote(&w, &h, &cy, &qid("twice"), "a", 10);
    let env: Envelope = Draft::new(
        "take-twice".into(),
        cy.address.clone(),
        vec![desk()],
        w.clock.now(),
        Content::new(quote::MEDIA, Value::Object(q.object().clone())),
    )
    .build()
    .unwrap()
    .sign(&cy.sig)
    .unwrap();
    let card = block_on(h.lookup().local_card("cy")).unwrap().unwrap();
    let verified = env.verify(&card, h.now()).unwrap();
    let first = block_on(h.mailbox().accept(&verified, &card, verified.to())).unwrap();
    assert_eq!(first[0].1, nyx5_house::mailbox::Outcome::Accepted);
    let again = block_on(h.mailbox().accept(&verified, &card, verified.to())).unwrap();
    assert_eq!(again[0].1, nyx5_house::mailbox::Outcome::Duplicate);
    assert_eq!(balance(&h, "tareas@a.test"), 990);
}

#[test]
fn a_quote_that_differs_from_the_catalogue_is_refused() {
    let w = World::new();
    let (h, cy) = desk_and_agent(&w);
    let hash = hex(&sha256(b"x"));
    assert_eq!(add_task(&h, "x", 20, &work(&hash)), 201);
    let good = catalogue_terms(&h, "x");
    let mut other = good.clone();
    other.insert("deadline".into(), "2030-01-01".into());
    let mut wrong_task = good.clone();
    wrong_task.insert("task".into(), "nope".into());
    let cases = [
        (quote_of(&w, &cy, &desk(), &qid("d1"), 21, Some(good.clone()), Some(verifica()), ContractKind::Escrow), 400),
        (quote_of(&w, &cy, &desk(), &qid("d2"), 20, Some(other), Some(verifica()), ContractKind::Escrow), 400),
        (quote_of(&w, &cy, &desk(), &qid("d3"), 20, Some(good.clone()), None, ContractKind::Escrow), 400),
        (quote_of(&w, &cy, &desk(), &qid("d4"), 20, Some(good.clone()), Some(verifica()), ContractKind::Spot), 400),
        (quote_of(&w, &cy, &desk(), &qid("d5"), 20, Some(wrong_task), Some(verifica()), ContractKind::Escrow), 404),
        // An id the seller chose to name a page that exists already.
        (quote_of(&w, &cy, &desk(), "index.html", 20, Some(good.clone()), Some(verifica()), ContractKind::Escrow), 400),
        // A UUID in upper case: lower case only, as pinned (issue 34 §4).
        (
            quote_of(
                &w,
                &cy,
                &desk(),
                &qid("d7").to_ascii_uppercase(),
                20,
                Some(good.clone()),
                Some(verifica()),
                ContractKind::Escrow,
            ),
            400,
        ),
    ];
    for (i, (q, code)) in cases.iter().enumerate() {
        assert_eq!(take(&w, &h, &cy, &format!("d-{i}"), q), *code, "case {i}");
    }
    // A quote someone else signed as cy's.
    let mallory = Agent::new("mal@a.test", 73);
    register(&h, &mallory);
    let forged = quote_of(&w, &cy, &desk(), &qid("d6"), 20, Some(good), Some(verifica()), ContractKind::Escrow);
    assert_eq!(take(&w, &h, &mallory, "d-forged", &forged), 403);
    assert_eq!(balance(&h, "tareas@a.test"), 1000, "nothing was held");
    // Retired, the task is gone from the catalogue and from the desk.
    assert_eq!(call(&h, "POST", "/tareas/x/retire", &[("authorization", ADMIN)], &Value::Null).status, 200);
    assert_eq!(call(&h, "POST", "/tareas/x/retire", &[], &Value::Null).status, 401);
    let page = json(&call(&h, "GET", "/tareas", &[], &Value::Null), 200);
    assert!(page.as_object().unwrap()["tasks"].as_array().unwrap().is_empty());
}

#[test]
fn the_caps_answer_409_per_agent_and_for_the_house() {
    let w = World::new();
    let h = tareas(&w);
    topup(&h, "tareas@a.test", 1000);
    let hash = hex(&sha256(b"x"));
    for id in ["a", "b", "c", "d"] {
        assert_eq!(add_task(&h, id, 10, &work(&hash)), 201);
    }
    let agents: Vec<Agent> = (0..3).map(|i| Agent::new(&format!("ag{i}@a.test"), 80 + i)).collect();
    for a in &agents {
        register(&h, a);
    }
    let n = Cell::new(0);
    let take_and_finish = |who: &Agent, task: &str| -> u16 {
        n.set(n.get() + 1);
        let q = task_quote(&w, &h, who, &qid(&format!("c{}", n.get())), task, 10);
        let code = take(&w, &h, who, &format!("take-c{}", n.get()), &q);
        if code == 0 {
            assert_eq!(deliver(&w, &h, who, &q.id, None), 0);
            assert_eq!(contract(&h, &q.id)["state"].as_str(), Some("released"));
        }
        code
    };
    // ag0 takes two tasks today (its cap), the third is refused.
    assert_eq!(take_and_finish(&agents[0], "a"), 0);
    assert_eq!(take_and_finish(&agents[0], "b"), 0);
    assert_eq!(take_and_finish(&agents[0], "c"), 409);
    // ag1 takes one: the house's three for today are out; ag2 is refused.
    assert_eq!(take_and_finish(&agents[1], "a"), 0);
    assert_eq!(take_and_finish(&agents[2], "a"), 409);
    let page = json(&call(&h, "GET", "/tareas", &[], &Value::Null), 200);
    assert_eq!(page.as_object().unwrap()["left_today"].as_safe_integer(), Some(0));
    // Tomorrow there is quota again.
    w.clock.advance(86_400_000);
    assert_eq!(take_and_finish(&agents[2], "a"), 0);
}

/// The house's quota for today is spent by others while the take is on its way (the hook runs
/// before the first batch, which is the sender's outbox): the desk's check refuses it and
/// nothing is held. The race that reaches the claim's own guard, after the check, is
/// `libro_races::a_task_whose_quota_went_in_a_race_is_refused_with_the_desks_reason`.
#[test]
fn a_take_after_the_days_quota_went_to_others_is_refused_and_holds_nothing() {
    let w = World::new();
    let h = tareas(&w);
    topup(&h, "tareas@a.test", 1000);
    let hash = hex(&sha256(b"x"));
    assert_eq!(add_task(&h, "a", 10, &work(&hash)), 201);
    let cy = Agent::new("cy@a.test", 72);
    register(&h, &cy);
    let q = task_quote(&w, &h, &cy, &qid("race"), "a", 10);
    // Before the take reaches the desk, the house's quota for today is spent.
    let day = w.clock.now().millis().div_euclid(86_400_000);
    h.db.before_next_batch(move |db| {
        for i in 0..3 {
            let c = format!("other-{i}");
            let stmts = vec![stmt!(
                "INSERT INTO tareas_claims (contract, task, agent, day, at, within) VALUES (?, 'a', ?, ?, 0, 1)",
                c.as_str(),
                format!("x{i}@a.test"),
                day
            )];
            block_on(nyx5_house::ports::Db::batch(db, stmts)).unwrap();
        }
    });
    assert_eq!(take(&w, &h, &cy, "take-race", &q), 409);
    assert_eq!(balance(&h, "tareas@a.test"), 1000, "nothing was held");
    let rows =
        block_on(h.db.sqlite.query(stmt!("SELECT count(*) AS n FROM libro_contracts WHERE id = ?", qid("race"))))
            .unwrap();
    assert_eq!(rows[0].int("n"), Some(0));
}

#[test]
fn a_desk_without_funds_answers_402_and_a_house_without_tareas_404() {
    let w = World::new();
    let h = tareas(&w);
    let cy = Agent::new("cy@a.test", 72);
    register(&h, &cy);
    let hash = hex(&sha256(b"x"));
    assert_eq!(add_task(&h, "a", 10, &work(&hash)), 201);
    let q = task_quote(&w, &h, &cy, &qid("poor"), "a", 10);
    assert_eq!(take(&w, &h, &cy, "take-poor", &q), 402);
    // Exactly the price is enough.
    topup(&h, "tareas@a.test", 10);
    let q = task_quote(&w, &h, &cy, &qid("exact"), "a", 10);
    assert_eq!(take(&w, &h, &cy, "take-exact", &q), 0);
    assert_eq!(balance(&h, "tareas@a.test"), 0);
    assert_eq!(balance(&h, &format!("escrow:{}", qid("exact"))), 10);

    let w2 = World::new();
    let plain = house(&w2, true, false);
    assert_eq!(call(&plain, "GET", "/tareas", &[], &Value::Null).status, 404);
    assert_eq!(add_task(&plain, "a", 10, &work(&hash)), 404);
}

#[test]
fn a_subagent_spends_its_roots_quota() {
    let w = World::new();
    let h = tareas(&w);
    topup(&h, "tareas@a.test", 1000);
    let hash = hex(&sha256(b"x"));
    for id in ["a", "b"] {
        assert_eq!(add_task(&h, id, 10, &work(&hash)), 201);
    }
    let ana = Agent::new("ana@a.test", 74);
    register(&h, &ana);
    let bot = Agent::new("bot.ana@a.test", 75);
    let scope = nyx5_proto::card::Scope { types: None, to_domains: None, cap: None, authority: None };
    let d = nyx5_proto::card::Delegation::sign(
        &ana.address,
        &bot.address,
        &bot.sig.public(),
        &scope,
        None,
        h.now(),
        &ana.sig,
    )
    .unwrap();
    let body = bot.registration(&h, &[("delegation", d.to_value())]);
    assert_eq!(call(&h, "POST", "/agents", &[("authorization", ADMIN)], &body).status, 201);
    // ana's task in flight is its subagent's too.
    let q = task_quote(&w, &h, &ana, &qid("r1"), "a", 10);
    assert_eq!(take(&w, &h, &ana, "take-r1", &q), 0);
    let q = task_quote(&w, &h, &bot, &qid("r2"), "b", 10);
    assert_eq!(take(&w, &h, &bot, "take-r2", &q), 409, "one task in flight for ana and its subagents");
    assert_eq!(deliver(&w, &h, &ana, &qid("r1"), None), 0);
    // Task a was paid to ana: not to its subagent either; b is its second task of the day.
    let q = task_quote(&w, &h, &bot, &qid("r3"), "a", 10);
    assert_eq!(take(&w, &h, &bot, "take-r3", &q), 409);
    let q = task_quote(&w, &h, &bot, &qid("r4"), "b", 10);
    assert_eq!(take(&w, &h, &bot, "take-r4", &q), 0);
    let rows = block_on(h.db.sqlite.query(stmt!("SELECT DISTINCT agent FROM tareas_claims"))).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].text("agent"), Some("ana@a.test"));
}

#[test]
fn the_catalogue_is_bounded() {
    let w = World::new();
    let h = tareas(&w);
    let hash = hex(&sha256(b"x"));
    let verify = work(&hash);
    for i in 0..nyx5_house::libro::tareas::MAX_TASKS {
        assert_eq!(add_task(&h, &format!("t{i}"), 1, &verify), 201);
    }
    let body = obj([
        ("id", "one-more".into()),
        ("price", 1.into()),
        ("statement", "s".into()),
        ("verify", Value::parse_str(&verify).unwrap()),
    ]);
    let refused = json(&call(&h, "POST", "/tareas", &[("authorization", ADMIN)], &Value::Object(body)), 409);
    let reason = refused.as_object().unwrap()["reason"].as_str().unwrap().to_owned();
    assert!(reason.ends_with("tasks are offered; retire one first"), "{reason}");
    assert_eq!(call(&h, "POST", "/tareas/t0/retire", &[("authorization", ADMIN)], &Value::Null).status, 200);
    assert_eq!(add_task(&h, "one-more", 1, &verify), 201);
}

#[test]
fn the_largest_verdict_still_reaches_the_contract() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    serve(&w, "site.example", 200, b"ok");
    // As many tests as a contract may have, with URLs near their most: the verdict repeats them
    // all, more than 8 KiB.
    let long = "x".repeat(2000);
    let tests: Vec<String> = (0..nyx5_house::libro::verifica::MAX_TESTS)
        .map(|i| format!(r#"{{"type":"http_status","url":"https://site.example/{i}/{long}"}}"#))
        .collect();
    let (q, code) = escrow(&w, &h, &ana, &bo, "q-big", &format!("[{}]", tests.join(",")));
    assert_eq!(code, 0);
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    // More fetches than one tick's budget: the check runs alone, whole.
    for _ in 0..3 {
        w.tick_all();
    }
    let c = contract(&h, "q-big");
    assert_eq!(c["state"].as_str(), Some("released"));
    assert_eq!(c["verdict"].as_object().unwrap()["tests"].as_array().unwrap().len(), 4);
    assert!(c["verdict"].canonical().len() > 8192);
}

#[test]
fn a_task_pays_only_for_work_that_names_the_claim() {
    let w = World::new();
    let h = tareas(&w);
    let hash = hex(&sha256(b"x"));
    let cases = [
        // The delivery's own hash, when the catalogue publishes what it must be.
        format!(r#"[{{"type":"sha256","expect":"{hash}"}}]"#),
        // A page every agent passes alike.
        format!(r#"[{{"type":"sha256","url":"https://work.example/page","expect":"{hash}"}}]"#),
        r#"[{"type":"http_status","url":"https://work.example/"}]"#.to_owned(),
        // The claim in the host.
        r#"[{"type":"http_status","url":"https://{contract}.work.example/"}]"#.to_owned(),
    ];
    for verify in &cases {
        assert_eq!(add_task(&h, "t", 5, verify), 400, "{verify}");
    }
    assert_eq!(add_task(&h, "t", 5, r#"[{"type":"http_status","url":"https://work.example/u/{seller}"}]"#), 201);
}

#[test]
fn the_tests_fetch_the_claims_own_urls() {
    let w = World::new();
    let h = house(&w, true, false);
    let (ana, bo) = people(&h);
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    w.fake("site.example", move |r| {
        log.borrow_mut().push(r.url.clone());
        OutResponse { status: 200, body: b"ok".to_vec() }
    });
    let (q, _) = escrow(
        &w,
        &h,
        &ana,
        &bo,
        "q-own",
        r#"[{"type":"http_status","url":"https://site.example/{seller}/{contract}?c={contract}"}]"#,
    );
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    assert_eq!(*seen.borrow(), ["https://site.example/bo@a.test/q-own?c=q-own"]);
    assert_eq!(contract(&h, "q-own")["state"].as_str(), Some("released"));
    // The contract keeps the test as declared, its placeholders unfilled.
    let t = contract(&h, "q-own")["terms"].as_object().unwrap()["verify"].canonical_string();
    assert!(t.contains("{contract}"), "{t}");
}

#[test]
fn the_desk_pays_this_houses_agents_only() {
    let w = World::new();
    let h = tareas(&w);
    let b = w.house("b.test", Registration::Admin);
    topup(&h, "tareas@a.test", 100);
    assert_eq!(add_task(&h, "a", 10, &work(&hex(&sha256(b"x")))), 201);
    let far = Agent::new("far@b.test", 76);
    assert_eq!(far.register_admin(&b).status, 201);
    let q = task_quote(&w, &h, &far, &qid("far-1"), "a", 10);
    let d = Draft::new(
        "take-far".into(),
        far.address.clone(),
        vec![desk()],
        w.clock.now(),
        Content::new(quote::MEDIA, Value::Object(q.object().clone())),
    );
    let env: Envelope = d.build().unwrap().sign(&far.sig).unwrap();
    assert_eq!(far.send(&b, &env).status, 202);
    w.tick_all();
    assert_eq!(bounce(&b, &far, "take-far"), 403);
    assert_eq!(balance(&h, "tareas@a.test"), 100);
}

#[test]
fn a_task_taken_and_never_delivered_goes_back_to_the_desk() {
    let w = World::new();
    let h = tareas(&w);
    topup(&h, "tareas@a.test", 100);
    assert_eq!(add_task(&h, "a", 10, &work(&hex(&sha256(b"x")))), 201);
    assert_eq!(add_task(&h, "b", 10, &work(&hex(&sha256(b"x")))), 201);
    let cy = Agent::new("cy@a.test", 72);
    register(&h, &cy);
    let q = task_quote(&w, &h, &cy, &qid("idle"), "a", 10);
    assert_eq!(take(&w, &h, &cy, "take-idle", &q), 0);
    assert_eq!(balance(&h, "tareas@a.test"), 90);
    // docs/SPEC.md §23: "not delivered within 2 days".
    let two_days = 2 * 86_400_000;
    w.clock.advance(two_days - 60_000);
    assert_eq!(w.tick_all().reclaimed, 0);
    assert_eq!(contract(&h, &qid("idle"))["state"].as_str(), Some("held"), "not before its hold ends");
    w.clock.advance(120_000);
    assert_eq!(w.tick_all().reclaimed, 1);
    let c = contract(&h, &qid("idle"));
    assert_eq!(c["state"].as_str(), Some("refunded"));
    assert_eq!(
        c["history"].as_array().unwrap().last().unwrap().as_object().unwrap()["by"].as_str(),
        Some("tareas@a.test")
    );
    assert_eq!(balance(&h, "tareas@a.test"), 100);
    // The agent is free again; the task it let go may be taken again (it was never paid).
    let q = task_quote(&w, &h, &cy, &qid("again"), "a", 10);
    assert_eq!(take(&w, &h, &cy, "take-again", &q), 0);
}

#[test]
fn an_arbiter_speaks_for_itself_in_its_verdict() {
    let w = World::new();
    let (h, ana, bo, carla) = with_carla(&w);
    let q = quote_of(&w, &bo, &ana.address, "q-carla", 20, None, Some(carla.address.clone()), ContractKind::Escrow);
    assert_eq!(accept(&w, &h, &ana, &q), 0);
    let verdict = |verifier: &str| {
        Value::Object(obj([
            ("tipo", "veredicto".into()),
            ("outcome", "passed".into()),
            ("contract", "q-carla".into()),
            ("verifier", verifier.into()),
        ]))
    };
    let body = |v: Value| obj([("op", "release".into()), ("contract", "q-carla".into()), ("verdict", v)]);
    assert_eq!(operate(&w, &h, &carla, "as-verifica", body(verdict("verifica@a.test"))), 400);
    assert_eq!(contract(&h, "q-carla")["state"].as_str(), Some("held"));
    assert_eq!(operate(&w, &h, &carla, "as-carla", body(verdict("carla@a.test"))), 0);
    assert_eq!(contract(&h, "q-carla")["verdict"].as_object().unwrap()["verifier"].as_str(), Some("carla@a.test"));
}

#[test]
fn a_task_verifica_gave_up_on_goes_back_to_the_desk() {
    let w = World::new();
    let (h, cy) = desk_and_agent(&w);
    // Its page is where nothing answers: every check is undecided.
    let verify = r#"[{"type":"http_status","url":"https://nowhere.example/{contract}"}]"#;
    assert_eq!(add_task(&h, "a", 10, verify), 201);
    let q = task_quote(&w, &h, &cy, &qid("given-up"), "a", 10);
    assert_eq!(take(&w, &h, &cy, "take-given-up", &q), 0);
    assert_eq!(deliver(&w, &h, &cy, &qid("given-up"), None), 0);
    for _ in 0..7 {
        let (_, attempts) = check_row(&h, &qid("given-up")).unwrap();
        let state = contract(&h, &qid("given-up"))["state"].as_str().unwrap().to_owned();
        assert!(state == "delivered" || attempts == nyx5_house::libro::verifica::MAX_ATTEMPTS, "{state} at {attempts}");
        w.clock.advance(13 * 3_600_000);
        w.tick_all();
    }
    assert_eq!(contract(&h, &qid("given-up"))["state"].as_str(), Some("refunded"));
    assert_eq!(
        check_row(&h, &qid("given-up")),
        Some(("undecided".to_owned(), nyx5_house::libro::verifica::MAX_ATTEMPTS))
    );
    assert_eq!(balance(&h, "tareas@a.test"), 1000);
}

#[test]
fn the_tests_reach_private_origins_only_when_the_hosts_file_names_them() {
    let w = World::new();
    let mut c = w.config("a.test", Registration::Admin);
    c.verifica_enabled = true;
    c.allow_http = false;
    // The operator names a private evidence server in its hosts file, and a private DNS resolver.
    c.hosts.insert("evidence.test".into(), nyx5_house::config::HostEntry { url: "https://10.0.0.7".into(), sig: None });
    c.doh_url = Some("https://10.0.0.53/dns-query".into());
    let h = w.start(c);
    let (ana, bo) = people(&h);
    w.fake("10.0.0.7", |_| OutResponse { status: 200, body: b"ok".to_vec() });
    let (_, code) =
        escrow(&w, &h, &ana, &bo, "q-dns", r#"[{"type":"http_status","url":"https://10.0.0.53/{contract}"}]"#);
    assert_eq!(code, 400, "the resolver is the house's, not a target for anyone's test");
    let (_, code) =
        escrow(&w, &h, &ana, &bo, "q-lan", r#"[{"type":"http_status","url":"https://10.0.0.8/{contract}"}]"#);
    assert_eq!(code, 400, "a private address the operator did not name");
    let (q, code) =
        escrow(&w, &h, &ana, &bo, "q-named", r#"[{"type":"http_status","url":"https://10.0.0.7/{contract}"}]"#);
    assert_eq!(code, 0);
    assert_eq!(deliver(&w, &h, &bo, &q.id, None), 0);
    assert_eq!(contract(&h, "q-named")["state"].as_str(), Some("released"));
}

/// A task's price, statement and terms are checked at their bounds.
#[test]
fn a_task_is_refused_past_its_bounds() {
    use nyx5_house::libro::tareas::MAX_STATEMENT_BYTES;
    let w = World::new();
    let (h, _) = desk_and_agent(&w);
    let verify = Value::parse_str(&work(&hex(&sha256(b"x")))).unwrap();
    let add = |id: &str, price: i64, statement: &str, terms: Option<Object>| {
        let mut body = obj([
            ("id", id.into()),
            ("price", price.into()),
            ("statement", statement.into()),
            ("verify", verify.clone()),
        ]);
        if let Some(t) = terms {
            body.insert("terms".into(), Value::Object(t));
        }
        call(&h, "POST", "/tareas", &[("authorization", ADMIN)], &Value::Object(body)).status
    };
    let max = nyx5_proto::limits::MAX_AMOUNT;
    assert_eq!(add("p0", 0, "s", None), 400);
    assert_eq!(add("p-max", max + 1, "s", None), 400);
    assert_eq!(add("p-top", max, "s", None), 201, "the largest price");
    assert_eq!(add("s-blank", 1, "  ", None), 400);
    assert_eq!(add("s-long", 1, &"s".repeat(MAX_STATEMENT_BYTES + 1), None), 400);
    assert_eq!(add("s-top", 1, &"s".repeat(MAX_STATEMENT_BYTES), None), 201, "the longest statement");
    // The house writes `task` and `verify` into the terms; anything else is the operator's.
    assert_eq!(add("t-task", 1, "s", Some(obj([("task", "other".into())]))), 400);
    assert_eq!(add("t-verify", 1, "s", Some(obj([("verify", Value::Array(vec![]))]))), 400);
    assert_eq!(add("t-own", 1, "s", Some(obj([("deadline_days", 3.into())]))), 201);
    assert_eq!(catalogue_terms(&h, "t-own")["deadline_days"].as_safe_integer(), Some(3));
    // The terms as kept are at most a quarter of a document (16 KiB of canonical JSON).
    let note = |n: usize| Some(obj([("note", "x".repeat(n).into())]));
    assert_eq!(add("n-a", 1, "s", note(1)), 201);
    let base = Value::Object(catalogue_terms(&h, "n-a")).canonical_string().len();
    let fits = 16 * 1024 - base + 1;
    assert_eq!(add("n-b", 1, "s", note(fits + 1)), 400);
    assert_eq!(add("n-c", 1, "s", note(fits)), 201);
    assert_eq!(Value::Object(catalogue_terms(&h, "n-c")).canonical_string().len(), 16 * 1024);
}
