//! The live inbox (docs/SPEC.md §8 `wait`; issue 38 §5): a mailbox read that finds nothing waits
//! for mail, answers as soon as this house writes some (not at its next recheck), finds mail
//! another process wrote at its recheck, and answers an empty page when its wait is over.
//! Time here is the test clock's, which moves only when a wait ends: how far it moved says
//! whether the bell or the recheck answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::live::RECHECK_MS;
use nyx5_house::sqlite::SqliteDb;
use nyx5_proto::{Address, Value};

/// The envelope ids of a page's answer.
fn page_ids(v: &Value) -> Vec<String> {
    v.as_object().unwrap()["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_object().unwrap()["envelope"].as_object().unwrap()["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_waiting_read_answers_when_its_house_writes_the_mail() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let (ana, cy) = (Agent::new("ana@a.test", 10), Agent::new("cy@a.test", 11));
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(cy.register_admin(&a).status, 201);
    let cy_addr = Address::parse("cy@a.test").unwrap();
    let env = ana.seal(ana.draft("live-1", &[&cy_addr], "now"), &[&cy]);
    let target = "/mailbox/cy?wait=20";
    let token = cy.token(&a, "GET", target, &[]);
    let started = a.now().millis();
    assert_eq!(a.bell().waiting(), 0);
    let (read, sent) = block_on_both(
        a.handle(nyx5_house::http::Request::new("GET", target, vec![("authorization".into(), token)], vec![])),
        async {
            let resp = ana.send(&a, &env);
            w.tick_all();
            resp
        },
    );
    assert_eq!(sent.status, 202, "{:?}", sent.value());
    assert_eq!(page_ids(&json(&read, 200)), ["live-1"]);
    let waited = a.now().millis() - started;
    assert!(waited < RECHECK_MS, "answered by the bell, not a recheck ({waited} ms of test time)");
}

#[test]
fn a_waiting_read_finds_mail_another_process_wrote_at_its_recheck_and_ends_empty() {
    let dir = std::env::temp_dir().join(format!("nyx5-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.db");
    let _ = std::fs::remove_file(&path);
    let w = World::new();
    let config = w.config("a.test", Registration::Admin);
    // Two processes of one house on one database: `one` serves the read, `two` takes the mail.
    let one = w.start_on(config.clone(), SqliteDb::open(&path).unwrap());
    let two = w.start_on(config, SqliteDb::open(&path).unwrap());
    let (ana, cy) = (Agent::new("ana@a.test", 10), Agent::new("cy@a.test", 11));
    assert_eq!(ana.register_admin(&two).status, 201);
    assert_eq!(cy.register_admin(&two).status, 201);
    let cy_addr = Address::parse("cy@a.test").unwrap();

    // Nothing arrives: an empty page once the wait is over, never before.
    let started = one.now().millis();
    let empty = json(&cy.get(&one, "/mailbox/cy?wait=3"), 200);
    assert!(page_ids(&empty).is_empty());
    assert!(one.now().millis() - started >= 3_000, "the read waited its 3 s");
    assert_eq!(one.bell().waiting(), 0, "the waiter is gone with its answer");

    let env = ana.seal(ana.draft("live-2", &[&cy_addr], "from the other process"), &[&cy]);
    let target = "/mailbox/cy?wait=20";
    let token = cy.token(&one, "GET", target, &[]);
    let started = one.now().millis();
    let (read, sent) = block_on_both(
        one.handle(nyx5_house::http::Request::new("GET", target, vec![("authorization".into(), token)], vec![])),
        async {
            let resp = ana.send(&two, &env);
            w.tick_all();
            resp
        },
    );
    assert_eq!(sent.status, 202);
    assert_eq!(page_ids(&json(&read, 200)), ["live-2"]);
    let waited = one.now().millis() - started;
    assert!((RECHECK_MS..2 * RECHECK_MS).contains(&waited), "found at the first recheck ({waited} ms)");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wait_is_a_whole_number_of_seconds_up_to_25() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let cy = Agent::new("cy@a.test", 11);
    assert_eq!(cy.register_admin(&a).status, 201);
    for bad in ["26", "-1", "1.5", "x", ""] {
        let v = json(&cy.get(&a, &format!("/mailbox/cy?wait={bad}")), 400);
        assert_eq!(v.as_object().unwrap()["error"].as_str(), Some("bad_query"), "wait={bad}");
    }
    // A read that waits 0 answers at once, as one without `wait` does.
    let started = a.now().millis();
    assert!(page_ids(&json(&cy.get(&a, "/mailbox/cy?wait=0"), 200)).is_empty());
    assert_eq!(a.now().millis(), started);
    // The longest wait with nothing arriving: within the Free plan's 50 queries of one Worker
    // invocation (the token's card, its nonce and the first page, then the rechecks), and over
    // once its 25 s have passed.
    let (calls, started) = (a.db.calls(), a.now().millis());
    assert!(page_ids(&json(&cy.get(&a, "/mailbox/cy?wait=25"), 200)).is_empty());
    let used = a.db.calls() - calls;
    assert!(used <= 45, "{used} queries for one waiting read");
    assert!((25_000..25_000 + nyx5_house::live::RECHECK_MS * 2).contains(&(a.now().millis() - started)));
}
