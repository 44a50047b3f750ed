//! Attacks on storage (issue 10 §3), one named test each, through public routes against real
//! SQLite. Against `0a8888f`: `GET /mailbox` answered up to 200 envelopes in one body (200 MiB
//! of 1 MiB envelopes), re-parsing each; a mailbox took envelopes without end; acknowledged
//! envelopes kept their bodies for ever; every new name under one site was fetched, pinned and
//! cached, and its mail counted in a rate window of its own; a block of `evil.example` let
//! `x.evil.example` through; an agent queued envelopes without limit, due in year 9999; and one
//! client could take every open registration of the minute.

use std::rc::Rc;

use crate::common::{admin, deliver, error, reason};
use crate::kit::*;
use crate::resolver_state::{domain_card, serve};
use nyx5_house::http::Request;
use nyx5_house::ports::Db;
use nyx5_house::routes::mailbox::PAGE_MAX_BYTES;
use nyx5_house::{Registration, stmt};
use nyx5_proto::card::{Delegation, Scope};
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, Envelope, Timestamp, Value};

/// A count from one house's database.
fn count(house: &TestHouse, sql: &'static str) -> i64 {
    block_on(house.db.query(stmt!(sql))).unwrap()[0].int("n").unwrap()
}

/// What `local`'s mailbox holds towards its quota, envelopes and bytes: its tally less what
/// `mailbox_usage` says acknowledgments and dropped bodies took off (migration 0022).
fn held(house: &TestHouse, local: &str) -> (i64, i64) {
    let rows = block_on(nyx5_house::store::mailbox::usage(&house.db, &format!("[\"{local}\"]"))).unwrap();
    (rows[0].int("envelopes").unwrap(), rows[0].int("bytes").unwrap())
}

/// Houses a.test (ana) and b.test (bob), b.test started from `config`.
fn pair(edit: impl FnOnce(&mut nyx5_house::Config)) -> (World, Rc<TestHouse>, Rc<TestHouse>, Agent, Agent) {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut c = w.config("b.test", Registration::Admin);
    edit(&mut c);
    let b = w.start(c);
    let ana = Agent::new("ana@a.test", 1);
    let bob = Agent::new("bob@b.test", 2);
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(bob.register_admin(&b).status, 201);
    (w, a, b, ana, bob)
}

fn signed(from: &Agent, id: &str, to: &Address, body: &str) -> Envelope {
    from.draft(id, &[to], body).sign(&from.sig).unwrap()
}

fn ack(house: &TestHouse, agent: &Agent, ids: &[&str]) -> i64 {
    let body = Value::Object(obj([("ids", Value::Array(ids.iter().map(|i| Value::from(*i)).collect()))]));
    let v = json(&agent.post(house, &format!("/mailbox/{}/ack", agent.address.local()), &body), 200);
    v.as_object().unwrap()["acked"].as_safe_integer().unwrap()
}

#[test]
fn a_mailbox_of_1_mib_envelopes_is_read_page_by_page_within_the_byte_budget() {
    let (_w, a, b, ana, bob) = pair(|_| {});
    let big = "x".repeat(1_040_000);
    let mut sent = Vec::new();
    for i in 0..60 {
        let env = signed(&ana, &format!("big{i:02}"), &bob.address, &big);
        assert!(env.canonical().len() > 1_000_000);
        assert_eq!(deliver(&a, &b, &env).status, 202);
        sent.push(env);
    }
    // A few small ones among them, read many to a page.
    for i in 0..5 {
        assert_eq!(deliver(&a, &b, &signed(&ana, &format!("small{i}"), &bob.address, "hi")).status, 202);
    }

    let mut seen: Vec<String> = Vec::new();
    let (mut after, mut pages) = (0_i64, 0);
    loop {
        let resp = bob.get(&b, &format!("/mailbox/bob?limit=200&after={after}"));
        assert!(resp.body.len() <= PAGE_MAX_BYTES, "a page of {} bytes", resp.body.len());
        // Valid JSON, and exactly what writing the parsed page canonically gives.
        let page = json(&resp, 200);
        pages += 1;
        if pages == 1 {
            assert_eq!(page.canonical(), resp.body, "the page is canonical JSON");
        }
        let o = page.as_object().unwrap();
        let items = o["envelopes"].as_array().unwrap();
        assert!(!items.is_empty() || o["next"] == Value::Null);
        for item in items {
            let env = item.as_object().unwrap()["envelope"].as_object().unwrap();
            let id = env["id"].as_str().unwrap().to_owned();
            if id == "big00" {
                let env = Envelope::from_object(env.clone()).unwrap();
                assert_eq!(env.canonical(), sent[0].canonical(), "the stored text, as it was accepted");
            }
            seen.push(id);
        }
        match o["next"].as_safe_integer() {
            Some(next) => after = next,
            None => break,
        }
        assert!(pages < 100, "paging makes progress");
    }
    assert_eq!(seen.len(), 65);
    let mut distinct = seen.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 65, "every envelope exactly once");
    assert!((30..=32).contains(&pages), "two 1 MiB envelopes a page: {pages} pages");
}

#[test]
fn an_ack_lists_from_one_to_500_ids() {
    let (_w, _a, b, _ana, bob) = pair(|_| {});
    let ids: Vec<String> = (0..=nyx5_house::routes::mailbox::ACK_MAX).map(|i| format!("id-{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let most = nyx5_house::routes::mailbox::ACK_MAX;
    assert_eq!(most, 500);
    assert_eq!(ack(&b, &bob, &refs[..most]), 0, "500 unknown ids: none acked, none refused");
    let body =
        |ids: &[&str]| Value::Object(obj([("ids", Value::Array(ids.iter().map(|i| Value::from(*i)).collect()))]));
    assert_eq!(bob.post(&b, "/mailbox/bob/ack", &body(&refs)).status, 400, "501");
    assert_eq!(bob.post(&b, "/mailbox/bob/ack", &body(&[])).status, 400, "none");
}

/// The store cuts a page by each envelope's recorded size plus what wraps it in the answer (at
/// most 236 bytes); two envelopes of 1,048,000 bytes fill one page with room for their frames,
/// so a page holds both (a larger allowance per envelope would read them one at a time).
#[test]
fn two_envelopes_that_fill_a_page_to_its_frames_are_read_together() {
    let (_w, a, b, ana, bob) = pair(|_| {});
    let bare = signed(&ana, "fill0", &bob.address, "").canonical().len();
    let size = 1_048_000;
    for i in 0..3 {
        let env = signed(&ana, &format!("fill{i}"), &bob.address, &"f".repeat(size - bare));
        assert_eq!(env.canonical().len(), size);
        assert_eq!(deliver(&a, &b, &env).status, 202);
    }
    let page = json(&bob.get(&b, "/mailbox/bob?limit=200"), 200);
    let o = page.as_object().unwrap();
    let ids: Vec<&str> = o["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_object().unwrap()["envelope"].as_object().unwrap()["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fill0", "fill1"]);
    assert!(o["next"].as_safe_integer().is_some());
}

#[test]
fn a_full_mailbox_refuses_for_now_and_the_sender_retries_instead_of_bouncing() {
    let (w, a, b, ana, bob) = pair(|c| c.mailbox_max_envelopes = 2);
    for id in ["q1", "q2", "q3"] {
        assert_eq!(ana.send(&a, &signed(&ana, id, &bob.address, "hello")).status, 202);
    }
    let report = w.tick_all();
    assert_eq!((report.delivered, report.bounced), (2, 0));
    assert_eq!(mailbox(&b, &bob).len(), 2);
    let row = block_on(a.db.query(stmt!("SELECT state, last_error FROM jobs WHERE envelope_id = 'q3'"))).unwrap();
    assert_eq!(row[0].text("state"), Some("pending"), "not bounced");
    let why = row[0].text("last_error").unwrap().to_owned();
    assert!(why.starts_with("429") && why.contains("full"), "{why}");

    // The answer names the recipient with the temporary code.
    let direct = deliver(&a, &b, &signed(&ana, "q4", &bob.address, "hello"));
    let v = json(&direct, 429);
    let rejected = v.as_object().unwrap()["rejected"].as_array().unwrap()[0].as_object().unwrap().clone();
    assert_eq!(rejected["code"].as_safe_integer(), Some(429));
    assert_eq!(rejected["to"].as_str(), Some("bob@b.test"));

    // Once bob reads and acknowledges, the retry gets in.
    assert_eq!(ack(&b, &bob, &["q1", "q1", "nope"]), 1);
    w.clock.advance(2 * MINUTE);
    let report = w.tick_all();
    assert_eq!((report.delivered, report.bounced), (1, 0));
    assert_eq!(mailbox(&b, &bob).iter().map(|e| e.id().to_owned()).collect::<Vec<_>>(), ["q2", "q3"]);
    // A duplicate of something held never needs room.
    assert_eq!(deliver(&a, &b, &signed(&ana, "q2", &bob.address, "hello")).status, 200);

    // By bytes too.
    let (_w, a, b, ana, bob) = pair(|c| c.mailbox_max_bytes = 3_000);
    let body = "y".repeat(1_500);
    assert_eq!(deliver(&a, &b, &signed(&ana, "b1", &bob.address, &body)).status, 202);
    let full = deliver(&a, &b, &signed(&ana, "b2", &bob.address, &body));
    assert_eq!(full.status, 429);
    assert_eq!(error(&full), "mailbox_full", "{}", reason(&full));
    // The operator's settings show the quotas under their names.
    let s = json(&call_raw(&b, "GET", "/agents/bob/settings", &[("authorization", &admin(&b))], vec![]), 200);
    let quotas = s.as_object().unwrap()["quotas"].as_object().unwrap().clone();
    assert_eq!(quotas["mailbox_max_bytes"].as_safe_integer(), Some(3_000));
    assert_eq!(quotas["mailbox_max_envelopes"].as_safe_integer(), Some(10_000));
}

#[test]
fn two_deliveries_racing_for_the_last_place_take_it_once() {
    let (_w, a, b, ana, bob) = pair(|c| c.mailbox_max_envelopes = 1);
    let relayed = |env: &Envelope| {
        let header = RelayHeader::sign("a.test", env, "b.test", &a.config.key).to_header();
        Request::new("POST", "/inbound", vec![("x-nyx5-relay".into(), header)], env.canonical())
    };
    let (first, second) = (signed(&ana, "race1", &bob.address, "me"), signed(&ana, "race2", &bob.address, "no, me"));
    // Both read an empty mailbox before either writes.
    b.db.stall(true);
    let (one, two) = block_on_both(b.handle(relayed(&first)), b.handle(relayed(&second)));
    b.db.stall(false);
    let mut statuses = [one.status, two.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [202, 429]);
    assert_eq!(mailbox(&b, &bob).len(), 1);
    assert_eq!(held(&b, "bob").0, 1);
}

#[test]
fn one_envelope_delivered_twice_at_once_is_taken_once() {
    let (_w, a, b, ana, bob) = pair(|_| {});
    let env = signed(&ana, "twice", &bob.address, "once");
    let relayed = || {
        let header = RelayHeader::sign("a.test", &env, "b.test", &a.config.key).to_header();
        Request::new("POST", "/inbound", vec![("x-nyx5-relay".into(), header)], env.canonical())
    };
    // Both find no copy before either writes; one insert takes, the other answers a duplicate.
    b.db.stall(true);
    let (one, two) = block_on_both(b.handle(relayed()), b.handle(relayed()));
    b.db.stall(false);
    let mut statuses = [one.status, two.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 202], "the second copy must not be accepted again");
    assert_eq!(mailbox(&b, &bob).len(), 1);
    assert_eq!(held(&b, "bob").0, 1);
    assert_eq!(count(&b, "SELECT count(*) AS n FROM mailbox WHERE envelope_id = 'twice'"), 1);
}

#[test]
fn an_acknowledged_body_is_dropped_after_the_window_and_its_id_stays_a_duplicate() {
    let (w, a, b, ana, bob) = pair(|_| {});
    let env = signed(&ana, "kept", &bob.address, &"z".repeat(10_000));
    assert_eq!(deliver(&a, &b, &env).status, 202);
    assert_eq!(ack(&b, &bob, &["kept"]), 1);
    let body = || count(&b, "SELECT length(envelope) AS n FROM mailbox WHERE envelope_id = 'kept'");
    w.tick_all();
    assert!(body() > 10_000, "kept for a while after the ack");
    // Seven days, written out (the constant's own product is what is checked): six days on it
    // is still there, and a day later it is gone.
    assert_eq!(nyx5_house::mailbox::ACKED_BODY_KEEP_MS, 7 * 86_400_000);
    w.clock.advance(6 * 86_400_000);
    w.tick_all();
    assert!(body() > 10_000, "kept for its week");
    w.clock.advance(86_400_000 + MINUTE);
    w.tick_all();
    assert_eq!(body(), 0, "the body is gone");
    assert_eq!(count(&b, "SELECT count(*) AS n FROM mailbox WHERE envelope_id = 'kept'"), 1, "the id stays");
    // The sender's house delivers it again: a duplicate, and nothing comes back.
    let again = deliver(&a, &b, &env);
    assert_eq!(json(&again, 200).as_object().unwrap()["duplicate"], Value::Bool(true));
    assert!(mailbox(&b, &bob).is_empty());
}

/// A mailbox has no index of its own for pages (an accepted envelope writes three rows): a page
/// walks the mailbox's range of the table's key past its watermark, which holds only what waits,
/// since an acknowledged envelope is under the watermark or has moved to the range's mirror below
/// zero. However the acknowledgements
/// come (in order, out of order, of the oldest last), a page reads the waiting envelopes and
/// nothing else, numbered from 1 in each mailbox, and a new envelope comes after every one ever
/// taken, acknowledged or not.
#[test]
fn a_page_walks_only_what_waits_however_it_was_acknowledged() {
    let (_w, a, b, ana, bob) = pair(|_| {});
    let send = |id: &str| assert_eq!(deliver(&a, &b, &signed(&ana, id, &bob.address, "hi")).status, 202);
    for i in 1..=6 {
        send(&format!("m{i}"));
    }
    let page = |after: i64| -> Vec<(i64, String)> {
        let v = json(&bob.get(&b, &format!("/mailbox/bob?after={after}")), 200);
        v.as_object().unwrap()["envelopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let o = item.as_object().unwrap();
                let id = o["envelope"].as_object().unwrap()["id"].as_str().unwrap().to_owned();
                (o["seq"].as_safe_integer().unwrap(), id)
            })
            .collect()
    };
    let shown = |after: i64| page(after).into_iter().map(|(_, id)| id).collect::<Vec<_>>();
    // Where each row of bob's mailbox is: (n, waiting) by id.
    let rows = || -> Vec<(String, i64, bool)> {
        block_on(b.db.query(stmt!(
            "SELECT envelope_id, abs(seq) - (1 << 30) AS n, seq > 0 AS waiting FROM mailbox WHERE local = 'bob' ORDER BY abs(seq)"
        )))
        .unwrap()
        .iter()
        .map(|r| (r.text("envelope_id").unwrap().to_owned(), r.int("n").unwrap(), r.int("waiting") == Some(1)))
        .collect()
    };
    assert_eq!(page(0), (1..=6).map(|i| (i, format!("m{i}"))).collect::<Vec<_>>());

    assert_eq!(ack(&b, &bob, &["m2", "m5"]), 2);
    assert_eq!(shown(0), ["m1", "m3", "m4", "m6"]);
    assert_eq!(shown(3), ["m4", "m6"], "after a seq");
    assert_eq!(ack(&b, &bob, &["m3", "m4", "m6", "m2"]), 3);
    assert_eq!(shown(0), ["m1"], "the oldest, never acknowledged, alone");
    assert_eq!(
        rows(),
        (1..=6).map(|i| (format!("m{i}"), i, i == 1)).collect::<Vec<_>>(),
        "every row kept, its n kept, its side saying whether it waits"
    );
    // The highest n was acknowledged; the next envelope still comes after it.
    send("m7");
    assert_eq!(page(0), [(1, "m1".to_owned()), (7, "m7".to_owned())]);
    assert_eq!(ack(&b, &bob, &["m1", "m7"]), 2);
    assert!(page(0).is_empty());
    // Acknowledged, then delivered again: a duplicate, kept out of the mailbox.
    let again = deliver(&a, &b, &signed(&ana, "m3", &bob.address, "hi"));
    assert_eq!(json(&again, 200).as_object().unwrap()["duplicate"], Value::Bool(true));
    send("m8");
    assert_eq!(page(0), [(8, "m8".to_owned())]);
    assert_eq!(page(8), []);
    // The next mailbox's range starts where bob's ends: a seq past any a mailbox can have is
    // just after everything in it, never into cy's.
    let cy = Agent::new("cy@b.test", 3);
    assert_eq!(cy.register_admin(&b).status, 201);
    for id in ["c1", "c2", "c3"] {
        assert_eq!(deliver(&a, &b, &signed(&ana, id, &cy.address, "hi")).status, 202);
    }
    assert_eq!(page(i64::MAX), []);
    assert_eq!(page((1 << 30) - 2), []);
    assert_eq!(page(0), [(8, "m8".to_owned())]);
}

/// Acknowledging what was read, in order, rewrites no envelope's row (issue 36 §1): the
/// mailbox's watermark rises over them, one row, where each row used to move below zero (three
/// rows written per envelope on D1: the row, its `UNIQUE` entry, its `mailbox_acked` entry). The
/// rows changed by the ack are counted by SQLite itself (`total_changes()`): the usage row, the
/// raise, the token's nonce — not one per envelope. Still acknowledged all the same: the page is
/// empty, a redelivery is a duplicate, and the bodies go 7 days later by the raise.
#[test]
fn acknowledging_a_page_in_order_rewrites_no_envelope() {
    let (w, a, b, ana, bob) = pair(|_| {});
    let ids: Vec<String> = (1..=40).map(|i| format!("p{i}")).collect();
    for id in &ids {
        assert_eq!(deliver(&a, &b, &signed(&ana, id, &bob.address, "hello")).status, 202);
    }
    let changes = || count(&b, "SELECT total_changes() AS n");
    let before = changes();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(ack(&b, &bob, &refs), 40);
    let written = changes() - before;
    eprintln!("rows changed by an ack of 40 in order: {written}");
    assert!(written <= 4, "an ack of 40 in order changed {written} rows");
    assert_eq!(count(&b, "SELECT count(*) AS n FROM mailbox WHERE local = 'bob' AND seq < 0"), 0, "none moved");
    assert!(mailbox(&b, &bob).is_empty(), "nothing waits");
    assert_eq!(held(&b, "bob").0, 0);
    assert_eq!(ack(&b, &bob, &refs), 0, "twice changes nothing");
    let again = deliver(&a, &b, &signed(&ana, "p7", &bob.address, "hello"));
    assert_eq!(json(&again, 200).as_object().unwrap()["duplicate"], Value::Bool(true));
    // A new envelope comes after the watermark and waits.
    assert_eq!(deliver(&a, &b, &signed(&ana, "p41", &bob.address, "hello")).status, 202);
    assert_eq!(mailbox(&b, &bob).len(), 1);
    // Seven days on, the raise drops their bodies and their bytes, and is forgotten.
    w.clock.advance(7 * 86_400_000 + MINUTE);
    w.tick_all();
    assert_eq!(count(&b, "SELECT count(*) AS n FROM mailbox WHERE local = 'bob' AND envelope != ''"), 1);
    assert_eq!(count(&b, "SELECT count(*) AS n FROM mailbox_acks"), 0);
    assert_eq!(held(&b, "bob").1, mailbox_bytes(&b, "p41"));
}

fn mailbox_bytes(house: &TestHouse, id: &str) -> i64 {
    block_on(house.db.query(stmt!("SELECT bytes AS n FROM mailbox WHERE envelope_id = ?", id))).unwrap()[0]
        .int("n")
        .unwrap()
}

/// An accepted envelope changes two rows (issue 36 §1): its own, and its sender's rate window.
/// The mailbox's count is the envelope's row itself, a running tally, where it used to be a usage
/// row rewritten by every envelope (on D1, four rows written with the `UNIQUE` entry; now three).
/// The quota still holds to the envelope: the sixth of a five-envelope mailbox is refused, and an
/// acknowledgment makes room again.
#[test]
fn an_accepted_envelope_rewrites_no_usage_row() {
    let (_w, a, b, ana, bob) = pair(|c| c.mailbox_max_envelopes = 5);
    assert_eq!(deliver(&a, &b, &signed(&ana, "t0", &bob.address, "warm")).status, 202);
    let changes = || count(&b, "SELECT total_changes() AS n");
    for i in 1..=4 {
        let before = changes();
        assert_eq!(deliver(&a, &b, &signed(&ana, &format!("t{i}"), &bob.address, "hello")).status, 202);
        let written = changes() - before;
        assert_eq!(written, 2, "envelope {i} changed {written} rows");
    }
    assert_eq!(held(&b, "bob").0, 5);
    let full = deliver(&a, &b, &signed(&ana, "t5", &bob.address, "hello"));
    assert_eq!(full.status, 429, "{}", reason(&full));
    assert_eq!(ack(&b, &bob, &["t0", "t1"]), 2);
    assert_eq!(held(&b, "bob").0, 3);
    assert_eq!(deliver(&a, &b, &signed(&ana, "t5", &bob.address, "hello")).status, 202);
    assert_eq!(held(&b, "bob").0, 4);
}

/// Two acknowledgments of one mailbox at once: the one decided from what the other changed is
/// undone whole by its guard (`mailbox_ack_raced`), and the route reads and decides again, so
/// the count is taken off once and the answer counts only what it acknowledged.
#[test]
fn an_acknowledgment_decided_on_a_stale_read_is_undone() {
    use nyx5_house::store::inbox;
    let (_w, a, b, ana, bob) = pair(|_| {});
    for id in ["r1", "r2", "r3"] {
        assert_eq!(deliver(&a, &b, &signed(&ana, id, &bob.address, "hello")).status, 202);
    }
    let ids = r#"["r1","r2"]"#;
    let facts = |ids: &str| {
        let rows = block_on(inbox::ack_facts(&b.db, "bob", ids)).unwrap();
        let waiting: Vec<(String, i64, bool)> = rows
            .iter()
            .map(|r| (r.text("id").unwrap().to_owned(), r.int("n").unwrap(), r.int("counted").unwrap() != 0))
            .collect();
        let read = rows.first().and_then(|r| r.int("w")).unwrap_or(0);
        nyx5_house::mailbox::plan_ack(read, rows.first().and_then(|r| r.int("other")), &waiting)
    };
    let stale = facts(ids);
    assert_eq!((stale.through, stale.acked), (2, 2));
    // Another acknowledgment of r1 gets in between.
    assert_eq!(ack(&b, &bob, &["r1"]), 1);
    let quota = b.config.quota();
    match block_on(b.db.batch(inbox::ack("bob", ids, &stale, 0, quota))) {
        Err(nyx5_house::ports::PortError::Constraint { name }) => assert_eq!(name, "mailbox_ack_raced"),
        other => panic!("the stale ack went through: {other:?}"),
    }
    assert_eq!(held(&b, "bob").0, 2, "r2, r3 wait");
    // One moved out of order under a watermark that did not move is caught as well.
    let stale = facts(r#"["r3"]"#);
    assert_eq!(stale.moved.as_deref(), Some(r#"["r3"]"#));
    assert_eq!(ack(&b, &bob, &["r3"]), 1);
    match block_on(b.db.batch(inbox::ack("bob", r#"["r3"]"#, &stale, 0, quota))) {
        Err(nyx5_house::ports::PortError::Constraint { name }) => assert_eq!(name, "mailbox_ack_raced"),
        other => panic!("the stale ack went through: {other:?}"),
    }
    assert_eq!(held(&b, "bob").0, 1, "r2 waits");
    assert_eq!(ack(&b, &bob, &["r1", "r2", "r3"]), 1);
    assert_eq!(held(&b, "bob").0, 0);
}

/// The attacker's house of names: every `r<i>.evil.example` a house of its own, one key.
struct Evil {
    key: SigningKey,
}

impl Evil {
    /// Serves `r<i>.evil.example` and its agent `m@…`; answers an envelope from that agent to
    /// `to`, signed and relayed as a real house would.
    fn envelope(&self, w: &World, i: usize, to: &Address) -> (String, Envelope) {
        let host = format!("r{i}.evil.example");
        let now = w.clock.now();
        let remote = serve(w, &host, &domain_card(&host, &format!("http://{host}"), &self.key, vec![], now), &self.key);
        let agent = SigningKey::from_seed([7; 32]);
        remote.agent(&format!("m@{host}"), &agent, None, None, now);
        let from = Address::parse(&format!("m@{host}")).unwrap();
        let env = Draft::new(
            format!("flood{i}"),
            from,
            vec![to.clone()],
            Timestamp(START),
            Content::new("text/plain", "buy".into()),
        )
        .build()
        .unwrap()
        .sign(&agent)
        .unwrap();
        (host, env)
    }

    fn send(&self, w: &World, house: &TestHouse, i: usize, to: &Address) -> nyx5_house::http::Response {
        let (host, env) = self.envelope(w, i, to);
        let header = RelayHeader::sign(&host, &env, &house.config.domain, &self.key).to_header();
        call_raw(house, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical())
    }
}

#[test]
fn a_flood_of_subdomains_is_one_site_that_grows_no_table_without_bound() {
    let (w, _a, b, _ana, bob) = pair(|c| c.inbound_per_domain_per_minute = 10);
    let evil = Evil { key: SigningKey::from_seed([66; 32]) };
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..1000 {
        *statuses.entry(evil.send(&w, &b, i, &bob.address).status).or_default() += 1;
    }
    // One minute: the site's budget of new names, and of those the site's one rate window.
    let budget = nyx5_house::resolver::NEW_NAMES_PER_SITE_PER_MINUTE as usize;
    assert_eq!(statuses.get(&202), Some(&10), "{statuses:?}");
    assert_eq!(statuses.get(&429), Some(&990), "{statuses:?}");
    assert_eq!(mailbox(&b, &bob).len(), 10);
    let pins = || count(&b, "SELECT count(*) AS n FROM pins");
    let cached = || count(&b, "SELECT count(*) AS n FROM card_slots");
    assert_eq!(pins(), budget as i64);
    assert!(cached() <= 2 * budget as i64, "{} cached cards", cached());
    assert_eq!(w.sent_to("evil.example/.well-known"), budget, "names past the budget are not even fetched");

    // Minute after minute, the site never holds more than its pins.
    let mut i = 1000;
    for _ in 0..4 {
        w.clock.advance(MINUTE);
        for _ in 0..budget {
            let status = evil.send(&w, &b, i, &bob.address).status;
            assert!(matches!(status, 202 | 429 | 503), "{status}");
            i += 1;
        }
    }
    assert_eq!(pins(), nyx5_house::resolver::MAX_PINS_PER_SITE);
    // Past its bound the site is not refused (issue 35 §3): its new name is trusted unpinned,
    // and no pin is pushed out.
    w.clock.advance(MINUTE);
    let pinned = || count(&b, "SELECT count(*) AS n FROM pins WHERE domain = 'r2000.evil.example'");
    let past = evil.send(&w, &b, 2000, &bob.address);
    assert_eq!(past.status, 202);
    assert_eq!(pins(), nyx5_house::resolver::MAX_PINS_PER_SITE);
    assert_eq!(pinned(), 0);

    // And the tick forgets cached cards past their five minutes.
    w.clock.advance(nyx5_proto::limits::CARD_CACHE_MS + SECOND);
    w.tick_all();
    assert_eq!(cached(), 0);
}

#[test]
fn a_block_of_a_site_blocks_every_name_under_it() {
    let (w, _a, b, _ana, bob) = pair(|_| {});
    let evil = Evil { key: SigningKey::from_seed([66; 32]) };
    let body =
        Value::Object(obj([("block", Value::Object(obj([("add", Value::Array(vec!["evil.example".into()]))])))]));
    json(&bob.post(&b, "/lists/bob", &body), 200);
    let resp = evil.send(&w, &b, 3, &bob.address);
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert!(mailbox(&b, &bob).is_empty());
}

#[test]
fn deliver_after_in_year_9999_is_refused() {
    let (_w, a, _b, ana, bob) = pair(|_| {});
    let far = |id: &str, when: &str| {
        let mut d = Draft::new(
            id.into(),
            ana.address.clone(),
            vec![bob.address.clone()],
            Timestamp(START),
            Content::new("text/plain", "later".into()),
        );
        d.deliver_after = Some(Timestamp::parse(when).unwrap());
        d.build().unwrap().sign(&ana.sig).unwrap()
    };
    let resp = ana.send(&a, &far("millennia", "9999-12-31T00:00:00Z"));
    assert_eq!(resp.status, 400, "{}", reason(&resp));
    assert_eq!(error(&resp), "deliver_after_too_far", "{}", reason(&resp));
    assert_eq!(count(&a, "SELECT count(*) AS n FROM outbox"), 0);
    assert_eq!(count(&a, "SELECT count(*) AS n FROM jobs"), 0);
    // Within the cap it queues as before.
    assert_eq!(ana.send(&a, &far("soon", "2026-10-01T00:00:00Z")).status, 202);
}

#[test]
fn an_agent_over_its_outbound_rate_gets_429() {
    let w = World::new();
    let mut c = w.config("a.test", Registration::Admin);
    c.outbound_per_agent_per_minute = 3;
    let a = w.start(c);
    let ana = Agent::new("ana@a.test", 1);
    assert_eq!(ana.register_admin(&a).status, 201);
    let to = Address::parse("bob@b.test").unwrap();
    let envs: Vec<Envelope> = (0..4).map(|i| signed(&ana, &format!("o{i}"), &to, "spam")).collect();
    for env in &envs[..3] {
        assert_eq!(ana.send(&a, env).status, 202);
    }
    let over = ana.send(&a, &envs[3]);
    assert_eq!(over.status, 429);
    assert_eq!(error(&over), "too_many_sends", "{}", reason(&over));
    // A resend of a queued envelope is not a new one: it answers "exists", uncounted.
    assert_eq!(ana.send(&a, &envs[0]).status, 200);
    assert_eq!(count(&a, "SELECT count(*) AS n FROM outbox"), 3);
    w.clock.advance(MINUTE);
    assert_eq!(ana.send(&a, &envs[3]).status, 202);

    // Subagents share their root's minute: enrolling them does not multiply the rate.
    w.clock.advance(MINUTE);
    let scope = Scope { types: Some(vec!["message".into()]), to_domains: None, cap: Some(10), authority: None };
    let mut subs = Vec::new();
    for (i, name) in ["s1.ana@a.test", "s2.ana@a.test"].into_iter().enumerate() {
        let sub = Agent::new(name, 50 + u8::try_from(i).unwrap());
        let delegation =
            Delegation::sign(&ana.address, &sub.address, &sub.sig.public(), &scope, None, a.now(), &ana.sig).unwrap();
        let body = sub.registration(&a, &[("delegation", delegation.to_value())]);
        json(&call(&a, "POST", "/agents", &[("authorization", &admin(&a))], &body), 201);
        subs.push(sub);
    }
    let statuses: Vec<u16> = (0..4)
        .map(|i| {
            let sub = &subs[i % 2];
            sub.send(&a, &signed(sub, &format!("sub{i}"), &to, "spam")).status
        })
        .collect();
    assert_eq!(statuses, [202, 202, 202, 429], "two subagents together get their root's three");
}

#[test]
fn one_client_cannot_take_the_whole_open_registration_budget() {
    let w = World::new();
    let mut c = w.config("a.test", Registration::Open);
    c.open_registrations_per_minute = 10;
    let h = w.start(c);
    let register = |name: &str, seed: u8, ip: &str| {
        let agent = Agent::new(&format!("{name}@a.test"), seed);
        call(&h, "POST", "/agents", &[("cf-connecting-ip", ip)], &agent.registration(&h, &[])).status
    };
    // A fifth of ten each: the greedy client gets two, from any address in its /64.
    assert_eq!(register("g1", 10, "2001:db8:1:2::1"), 201);
    assert_eq!(register("g2", 11, "2001:db8:1:2::2"), 201);
    assert_eq!(register("g3", 12, "2001:db8:1:2:ffff::3"), 429);
    assert_eq!(register("g4", 13, "2001:db8:1:2::4"), 429);
    // Everyone else still can.
    for (i, ip) in ["198.51.100.1", "198.51.100.2", "198.51.100.3", "2001:db8:9::1"].iter().enumerate() {
        assert_eq!(register(&format!("u{i}"), 20 + i as u8, ip), 201);
    }
    w.clock.advance(MINUTE);
    assert_eq!(register("g3", 12, "2001:db8:1:2::1"), 201);
}

#[test]
fn acknowledging_at_once_does_not_open_the_mailbox_to_an_unending_stream() {
    let (w, a, b, ana, bob) = pair(|c| c.mailbox_max_bytes = 3_000);
    let body = "y".repeat(1_500);
    assert_eq!(deliver(&a, &b, &signed(&ana, "s1", &bob.address, &body)).status, 202);
    assert_eq!(ack(&b, &bob, &["s1"]), 1);
    // Acknowledged, its body is still stored: it still takes its room.
    let full = deliver(&a, &b, &signed(&ana, "s2", &bob.address, &body));
    assert_eq!(full.status, 429, "{}", reason(&full));
    // Once the tick has dropped the body, the room is free again.
    w.clock.advance(nyx5_house::mailbox::ACKED_BODY_KEEP_MS + MINUTE);
    w.tick_all();
    assert_eq!(held(&b, "bob").1, 0);
    assert_eq!(deliver(&a, &b, &signed(&ana, "s2", &bob.address, &body)).status, 202);
}

#[test]
fn a_full_pin_table_shuts_no_new_domain_out_and_keeps_every_pin() {
    let (w, _a, b, _ana, bob) = pair(|_| {});
    // Strangers have filled the table from many sites.
    block_on(b.db.batch(vec![stmt!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         INSERT INTO pins (domain, site, sig, first_seen) SELECT 'f' || i || '.example', 'f' || i || '.example', 'x', 0 FROM n",
        nyx5_house::resolver::MAX_PINS
    )]))
    .unwrap();
    let newcomer = Evil { key: SigningKey::from_seed([77; 32]) };
    let resp = newcomer.send(&w, &b, 1, &bob.address);
    assert_eq!(resp.status, 202, "{}", reason(&resp));
    assert_eq!(
        count(&b, "SELECT count(*) AS n FROM pins"),
        nyx5_house::resolver::MAX_PINS,
        "nothing pinned, nothing pushed out"
    );
}

/// An envelope to two mailboxes whose batch loses a race on one of them — its sender's minute
/// there filled, or the mailbox filled, by another delivery between the read and the write —
/// reads again and is taken by the other: the loser's refusal is its own, not everyone's. The
/// competing delivery is played by a hook that fills bob's share just before the batch. Kills
/// `accept`'s `last && lost_rate` / `last && lost_quota` → `||` (every recipient refused on the
/// first retry) and the two race guards → `false` (the batch's failure answered as an error).
#[test]
fn a_lost_race_for_one_mailbox_is_that_mailboxs_refusal_alone() {
    for (race, cause) in [("rate", "too many"), ("quota", "is full")] {
        let (_w, a, b, ana, bob) = pair(|c| {
            c.inbound_per_domain_per_minute = 5;
            c.mailbox_max_envelopes = 5;
        });
        let cy = Agent::new("cy@b.test", 3);
        assert_eq!(cy.register_admin(&b).status, 201);
        // One envelope first, so b.test holds a.test's cards and the next batch is the accept's.
        assert_eq!(deliver(&a, &b, &signed(&ana, &format!("warm-{race}"), &cy.address, "0")).status, 202);
        let fill: &'static str = match race {
            "rate" => "INSERT INTO rate_windows (bucket, window, count, cap) VALUES ('inbound:bob:a.test', ?, 5, 5)
                       ON CONFLICT (bucket, window) DO UPDATE SET count = 5",
            _ => "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes) VALUES ('bob', 5, 0, 5, 1000000)
                  ON CONFLICT (local) DO UPDATE SET envelopes = 5",
        };
        let window = b.now().millis() / 60_000;
        b.db.before_next_batch(move |db| {
            let stmt = if fill.contains("rate_windows") { stmt!(fill, window) } else { stmt!(fill) };
            block_on(db.batch(vec![stmt])).unwrap();
        });
        let env = ana.draft(&format!("lost-{race}"), &[&bob.address, &cy.address], "hi").sign(&ana.sig).unwrap();
        let answer = json(&deliver(&a, &b, &env), 202);
        let answer = answer.as_object().unwrap();
        assert_eq!(answer["accepted"], Value::Array(vec!["cy@b.test".into()]), "{race}: {answer:?}");
        let rejected = answer["rejected"].as_array().unwrap();
        assert_eq!(rejected.len(), 1, "{race}");
        let r = rejected[0].as_object().unwrap();
        assert_eq!((r["to"].as_str(), r["code"].as_safe_integer()), (Some("bob@b.test"), Some(429)), "{race}");
        assert!(r["reason"].as_str().unwrap().contains(cause), "{race}: {r:?}");
        assert_eq!(mailbox(&b, &cy).len(), 2);
        assert!(mailbox(&b, &bob).is_empty());
    }
}

/// A sending site's envelopes to one mailbox are counted per minute of the clock: two at the
/// cap of two fill it, a third a second later is refused (429), and the next minute takes more.
/// Kills `accept`'s `window = now / 60_000` → `*` (every millisecond its own window).
#[test]
fn a_sites_minute_is_a_minute_of_the_clock() {
    let (w, a, b, ana, bob) = pair(|c| c.inbound_per_domain_per_minute = 2);
    // At the start of a minute, so the three below share it.
    let into_minute = b.now().millis() % MINUTE;
    w.clock.advance(MINUTE - into_minute);
    let send = |id: &str| deliver(&a, &b, &signed(&ana, id, &bob.address, "hi")).status;
    assert_eq!((send("m1"), send("m2")), (202, 202));
    w.clock.advance(SECOND);
    assert_eq!(send("m3"), 429);
    w.clock.advance(MINUTE);
    assert_eq!(send("m4"), 202);
    assert_eq!(mailbox(&b, &bob).len(), 3);
}
