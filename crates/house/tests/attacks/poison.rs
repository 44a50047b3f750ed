//! Issue 10 §2: no destination can poison the queue. Against `712cee6` a destination that
//! answered 200 with anything (a captive portal, a default web page) had the mail counted as
//! delivered; one destination's backlog filled every tick while others waited; and a tick that
//! died inside an attempt had tried nothing, so the next tick went straight back to the same
//! hanging destination.

use std::pin::pin;
use std::task::{Context, Poll, Waker};

use nyx5_house::Registration;
use nyx5_house::config::Retry;
use nyx5_house::ports::{Db, OutRequest, OutResponse};
use nyx5_house::stmt;
use nyx5_proto::Address;
use nyx5_proto::crypto::SigningKey;

use crate::kit::*;
use crate::resolver_state::domain_card;

fn job_row(house: &TestHouse) -> (i64, i64, String) {
    let rows = block_on(house.db.query(stmt!("SELECT attempts, next_attempt, state FROM jobs"))).unwrap();
    let r = &rows[0];
    (r.int("attempts").unwrap(), r.int("next_attempt").unwrap(), r.text("state").unwrap().to_owned())
}

#[test]
fn a_destination_answering_200_with_anything_else_delivers_nothing() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    json(&alice.register_admin(&a), 201);
    let key = SigningKey::from_seed([70; 32]);
    let card = domain_card("portal.test", "http://portal.test", &key, vec![], w.clock.now()).to_value().canonical();
    w.fake("portal.test", move |req: &OutRequest| match req.url.ends_with("/.well-known/nyx5.json") {
        true => OutResponse { status: 200, body: card.clone() },
        false => OutResponse { status: 200, body: b"<html>Welcome! Please log in.</html>".to_vec() },
    });
    let bob = Address::parse("bob@portal.test").unwrap();
    json(&alice.send(&a, &alice.draft("p1", &[&bob], "hello").sign(&alice.sig).unwrap()), 202);
    let r = w.tick_all();
    assert_eq!(w.sent_to("://portal.test/inbound"), 1);
    assert_eq!((r.delivered, r.retried), (0, 1), "a web page is not a delivery");
    assert_eq!(job_row(&a).2, "pending");
}

#[test]
fn a_failing_destinations_backlog_does_not_starve_the_others() {
    let w = World::new();
    let mut config = w.config("a.test", Registration::Admin);
    config.tick_batch = 3;
    let a = w.start(config);
    let c = w.house("c.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let carol = Agent::new("carol@c.test", 30);
    json(&alice.register_admin(&a), 201);
    json(&carol.register_admin(&c), 201);
    // Five envelopes queue for a destination that is down, then one for a healthy one.
    for i in 0..5 {
        let to = Address::parse(&format!("u{i}@down.test")).unwrap();
        json(&alice.send(&a, &alice.draft(&format!("d{i}"), &[&to], "x").sign(&alice.sig).unwrap()), 202);
        w.clock.advance(SECOND);
    }
    json(&alice.send(&a, &alice.draft("c1", &[&carol.address], "hi").sign(&alice.sig).unwrap()), 202);
    let r = block_on(a.tick()).unwrap();
    assert_eq!(r.delivered, 1, "the healthy destination had its turn: {r:?}");
    assert_eq!(mailbox(&c, &carol).len(), 1);
}

/// Polls `f` once: far enough to send a request that stalls, then the future is dropped, as a
/// runtime that kills a hanging invocation would.
fn poll_once_and_drop<F: Future>(f: F) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    matches!(pin!(f).as_mut().poll(&mut cx), Poll::Pending)
}

#[test]
fn a_tick_that_dies_inside_an_attempt_has_counted_it_and_waits_its_backoff() {
    let w = World::new();
    let mut config = w.config("a.test", Registration::Admin);
    config.retry = Retry { first_ms: 10 * MINUTE, max_ms: HOUR, ..Retry::default() };
    let a = w.start(config);
    let b = w.house("b.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    json(&alice.register_admin(&a), 201);
    json(&bob.register_admin(&b), 201);
    json(&alice.send(&a, &alice.draft("h1", &[&bob.address], "hi").sign(&alice.sig).unwrap()), 202);
    let sent_at = w.clock.now().millis();

    w.stall_next("b.test", 1);
    assert!(poll_once_and_drop(a.tick()), "the tick was inside the attempt");
    let (attempts, next_attempt, state) = job_row(&a);
    assert_eq!((attempts, state.as_str()), (1, "pending"), "the attempt was counted when it began");
    assert_eq!(next_attempt, sent_at + 10 * MINUTE, "and the job moved by its backoff");

    // The lease lapses; the job is still not due, so the next tick does not go back at once.
    w.clock.advance(MINUTE);
    assert_eq!(block_on(a.tick()).unwrap().attempted, 0);
    w.clock.advance(10 * MINUTE);
    let r = block_on(a.tick()).unwrap();
    assert_eq!((r.attempted, r.delivered), (1, 1));
    assert_eq!(mailbox(&b, &bob).len(), 1);
}

#[test]
fn a_webhook_is_pushed_after_the_answer_and_the_tick_never_inside_them() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@a.test", 11);
    json(&alice.register_admin(&a), 201);
    let body = bob.registration(&a, &[("webhook", "http://hook.test/bob".into())]);
    json(&call(&a, "POST", "/agents", &[("authorization", "Bearer admin-a.test")], &body), 201);
    w.fake("hook.test", |_| OutResponse { status: 200, body: vec![] });
    let env = alice.draft("w1", &[&bob.address], "hi").sign(&alice.sig).unwrap();
    json(&alice.send(&a, &env), 202);
    // The tick delivers to bob's mailbox; the push waits for the tick to be over.
    let r = block_on(a.tick()).unwrap();
    assert_eq!(r.delivered, 1);
    assert_eq!(w.sent_to("://hook.test/"), 0, "pushed inside the tick");
    assert!(a.mailbox().has_pushes());
    block_on(a.mailbox().send_pushes());
    assert_eq!(w.sent_to("://hook.test/"), 1);
    assert!(!a.mailbox().has_pushes());
}

#[test]
fn one_webhook_cannot_take_every_pending_push() {
    let w = World::new();
    let mut config = w.config("a.test", Registration::Admin);
    config.tick_batch = 32;
    let a = w.start(config);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@a.test", 11);
    json(&alice.register_admin(&a), 201);
    let body = bob.registration(&a, &[("webhook", "http://slow.test/bob".into())]);
    json(&call(&a, "POST", "/agents", &[("authorization", "Bearer admin-a.test")], &body), 201);
    w.fake("slow.test", |_| OutResponse { status: 200, body: vec![] });
    for i in 0..20 {
        let env = alice.draft(&format!("m{i}"), &[&bob.address], "hi").sign(&alice.sig).unwrap();
        json(&alice.send(&a, &env), 202);
    }
    assert_eq!(block_on(a.tick()).unwrap().delivered, 20);
    block_on(a.mailbox().send_pushes());
    assert_eq!(w.sent_to("://slow.test/"), nyx5_house::mailbox::MAX_PUSHES_PER_WEBHOOK);
}
