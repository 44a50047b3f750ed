//! The email bridge, outbound (docs/SPEC.md "Email bridge"): `POST /email/out` queues an agent's
//! email; the queue tick sends it through the provider (a fake Resend on the in-memory network)
//! with Reply-To the agent and the thread of the email answered; without a provider it stays
//! pending and GET /outbox says so; 5xx and transport failures retry, 4xx fails with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::ports::{OutRequest, OutResponse};
use nyx5_proto::json::obj;
use nyx5_proto::{Object, Value};

const PROVIDER: &str = "http://resend.test/emails";

/// A fake provider answering `status` and recording each request.
struct Provider {
    status: Rc<Cell<u16>>,
    seen: Rc<RefCell<Vec<OutRequest>>>,
}

fn world(with_provider: bool) -> (World, Rc<TestHouse>, Agent, Provider) {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    if with_provider {
        config.resend_key = Some("re_test_key".into());
        config.email_sender = Some("mail@h.test".into());
    }
    config.email_provider_url = PROVIDER.into();
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    let provider = Provider { status: Rc::new(Cell::new(200)), seen: Rc::new(RefCell::new(Vec::new())) };
    let (status, seen) = (provider.status.clone(), provider.seen.clone());
    world.fake("resend.test", move |req| {
        seen.borrow_mut().push(req.clone());
        let n = seen.borrow().len();
        OutResponse {
            status: status.get(),
            body: format!(r#"{{"id":"re_{n}","message":"said {}"}}"#, status.get()).into_bytes(),
        }
    });
    (world, house, ana, provider)
}

fn out(members: &[(&str, Value)]) -> Value {
    let mut o = Object::new();
    for (k, v) in members {
        o.insert((*k).to_owned(), v.clone());
    }
    Value::Object(o)
}

fn emails(house: &TestHouse, ana: &Agent) -> Vec<Object> {
    let v = json(&ana.get(house, "/outbox/ana"), 200);
    v.as_object().unwrap()["emails"].as_array().unwrap().iter().map(|e| e.as_object().unwrap().clone()).collect()
}

fn body_of(req: &OutRequest) -> Object {
    Value::parse(&req.body, 1 << 20).unwrap().as_object().unwrap().clone()
}

fn header<'a>(req: &'a OutRequest, name: &str) -> Option<&'a str> {
    req.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

#[test]
fn without_a_provider_email_stays_pending() {
    let (world, house, ana, provider) = world(false);
    let v =
        json(&ana.post(&house, "/email/out", &out(&[("to", "Pat@Example.com".into()), ("body", "hello".into())])), 202);
    let v = v.as_object().unwrap();
    assert_eq!(v["state"].as_str(), Some("pending"));
    assert_eq!(v["provider"], Value::Bool(false));
    assert!(v["reason"].as_str().unwrap().contains("no email provider"));
    world.tick_all();
    world.clock.advance(3_600_000);
    world.tick_all();
    assert!(provider.seen.borrow().is_empty());
    let list = emails(&house, &ana);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["state"].as_str(), Some("pending"));
    assert_eq!(list[0]["next_attempt"], Value::Null, "no provider: no attempt is due");
    assert_eq!(list[0]["to"].as_str(), Some("pat@example.com"));
    assert_eq!(list[0]["subject"].as_str(), Some("Message from ana@h.test"));
    assert!(list[0]["reason"].as_str().unwrap().contains("no email provider"));
}

#[test]
fn the_provider_gets_the_right_request_and_the_outbox_says_sent() {
    let (world, house, ana, provider) = world(true);
    let req = out(&[
        ("to", "pat@example.com".into()),
        ("subject", "Hi\r\nBcc: x@y.test".into()),
        ("body", "Hello Pat".into()),
    ]);
    let v = json(&ana.post(&house, "/email/out", &req), 202);
    let id = v.as_object().unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(v.as_object().unwrap()["provider"], Value::Bool(true));
    world.tick_all();
    let seen = provider.seen.borrow();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!((r.method.as_str(), r.url.as_str()), ("POST", PROVIDER));
    assert_eq!(header(r, "authorization"), Some("Bearer re_test_key"));
    assert_eq!(header(r, "content-type"), Some("application/json"));
    assert_eq!(header(r, "idempotency-key"), Some(id.as_str()));
    let b = body_of(r);
    assert_eq!(b["from"].as_str(), Some("\"ana@h.test\" <mail@h.test>"));
    assert_eq!(b["to"], Value::Array(vec!["pat@example.com".into()]));
    assert_eq!(b["subject"].as_str(), Some("Hi Bcc: x@y.test"));
    assert_eq!(b["text"].as_str(), Some("Hello Pat"));
    assert_eq!(b["reply_to"].as_str(), Some("ana@h.test"));
    assert!(!b.contains_key("headers"));
    drop(seen);
    let list = emails(&house, &ana);
    assert_eq!(list[0]["state"].as_str(), Some("sent"));
    assert_eq!(list[0]["provider_id"].as_str(), Some("re_1"));
    assert_eq!(list[0]["next_attempt"], Value::Null, "sent: nothing is due");
    assert!(!list[0].contains_key("reason"));
    // Sent once: later ticks leave it alone.
    world.clock.advance(120_000);
    world.tick_all();
    assert_eq!(provider.seen.borrow().len(), 1);
    // Listed for 7 days after it finished, like envelopes; then forgotten.
    world.clock.advance(7 * 24 * 3_600_000 - 180_000);
    world.tick_all();
    assert_eq!(emails(&house, &ana).len(), 1);
    world.clock.advance(120_000);
    world.tick_all();
    assert!(emails(&house, &ana).is_empty());
}

#[test]
fn a_reply_keeps_the_thread() {
    let (world, house, ana, provider) = world(true);
    let raw = b"From: Pat <pat@example.com>\r\nTo: ana@h.test\r\nSubject: question\r\nMessage-ID: <q2@example.com>\r\n\
References: <q0@example.com> <q1@example.com>\r\n\r\nCan you help?\r\n";
    let got = block_on(house.email().receive_email(raw, "pat@example.com", "ana@h.test", &[])).unwrap();
    let req = out(&[
        ("to", "pat@example.com".into()),
        ("subject", "Re: question".into()),
        ("body", "Yes.".into()),
        ("in_reply_to", got.id().into()),
    ]);
    json(&ana.post(&house, "/email/out", &req), 202);
    world.tick_all();
    let b = body_of(&provider.seen.borrow()[0]);
    let headers = b["headers"].as_object().unwrap();
    assert_eq!(headers["In-Reply-To"].as_str(), Some("<q2@example.com>"));
    assert_eq!(headers["References"].as_str(), Some("<q0@example.com> <q1@example.com> <q2@example.com>"));
    // Only emails in the agent's own mailbox can be answered.
    let bad = out(&[("to", "pat@example.com".into()), ("body", "x".into()), ("in_reply_to", "no-such-id".into())]);
    assert_eq!(error_of(&json(&ana.post(&house, "/email/out", &bad), 404)), "no_such_email");
}

#[test]
fn failures_retry_or_fail_with_a_reason() {
    let (world, house, ana, provider) = world(true);
    provider.status.set(503);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", "one".into())])), 202);
    world.tick_all();
    let list = emails(&house, &ana);
    assert_eq!(list[0]["state"].as_str(), Some("retrying"));
    assert_eq!(list[0]["last_error"].as_str(), Some("provider 503: said 503"));
    // A retry is due at a time, and a house with a provider owes no reason for the wait.
    assert!(list[0]["next_attempt"].as_str().is_some(), "{:?}", list[0]);
    assert!(!list[0].contains_key("reason"));
    // Not before the backoff.
    world.tick_all();
    assert_eq!(provider.seen.borrow().len(), 1);
    provider.status.set(200);
    world.clock.advance(1_000);
    world.tick_all();
    assert_eq!(emails(&house, &ana)[0]["state"].as_str(), Some("sent"));

    // 4xx: failed, with the provider's reason.
    provider.status.set(422);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", "two".into())])), 202);
    world.tick_all();
    let list = emails(&house, &ana);
    assert_eq!(list[0]["state"].as_str(), Some("failed"));
    assert_eq!(list[0]["last_error"].as_str(), Some("422 provider refused it: said 422"));

    // Always 5xx: failed at the give-up time.
    provider.status.set(500);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", "three".into())])), 202);
    for _ in 0..80 {
        world.tick_all();
        world.clock.advance(3_600_000);
    }
    world.tick_all();
    let list = emails(&house, &ana);
    assert_eq!(list[0]["state"].as_str(), Some("failed"));
    assert!(list[0]["last_error"].as_str().unwrap().starts_with("not sent within 72 h: provider 500"), "{:?}", list[0]);
}

#[test]
fn an_unreachable_provider_is_retried() {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    config.resend_key = Some("k".into());
    config.email_sender = Some("mail@h.test".into());
    config.email_provider_url = "http://nowhere.test/emails".into();
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", "x".into())])), 202);
    world.tick_all();
    let list = emails(&house, &ana);
    assert_eq!(list[0]["state"].as_str(), Some("retrying"));
    assert!(list[0]["last_error"].as_str().unwrap().starts_with("provider unreachable"));
}

#[test]
fn requests_are_checked_and_idempotent_by_id() {
    let (_world, house, ana, _provider) = world(false);
    let req = out(&[("to", "pat@example.com".into()), ("body", "hi".into()), ("id", "mail-1".into())]);
    json(&ana.post(&house, "/email/out", &req), 202);
    let again = json(&ana.post(&house, "/email/out", &req), 200);
    assert_eq!(again.as_object().unwrap()["exists"], Value::Bool(true));
    let other = out(&[("to", "pat@example.com".into()), ("body", "changed".into()), ("id", "mail-1".into())]);
    assert_eq!(error_of(&json(&ana.post(&house, "/email/out", &other), 409)), "email_id_taken");
    assert_eq!(emails(&house, &ana).len(), 1);
    let bad =
        json(&ana.post(&house, "/email/out", &out(&[("to", "not an address".into()), ("body", "x".into())])), 400);
    assert_eq!(error_of(&bad), "bad_member");
    json(
        &ana.post(&house, "/email/out", &out(&[("to", "a@b.test\r\nBcc: c@d.test".into()), ("body", "x".into())])),
        400,
    );
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into())])), 400);
    json(
        &ana.post(
            &house,
            "/email/out",
            &out(&[("to", "pat@example.com".into()), ("body", "x".into()), ("cc", "x".into())]),
        ),
        400,
    );
    // At most 32 KiB (docs/SPEC.md, "Email bridge").
    assert_eq!(nyx5_house::email::MAX_OUT_BODY_BYTES, 32 * 1024);
    let big = "x".repeat(nyx5_house::email::MAX_OUT_BODY_BYTES + 1);
    let big =
        json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", big.into())])), 413);
    assert_eq!(error_of(&big), "email_too_large");
    let exact = "x".repeat(nyx5_house::email::MAX_OUT_BODY_BYTES);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", exact.into())])), 202);
    let resp = call(&house, "POST", "/email/out", &[], &Value::Object(obj([("to", "pat@example.com".into())])));
    assert_eq!(resp.status, 401);
    assert_eq!(call(&house, "GET", "/email/out", &[], &Value::Null).status, 405);
}

#[test]
fn an_agent_may_queue_so_many_emails_a_minute() {
    let (world, house, ana, _provider) = world(false);
    let cap = house.config.email_out_per_agent_per_minute;
    // One a second: the window is the UTC minute, not the instant.
    for i in 0..cap {
        let body = out(&[("to", "pat@example.com".into()), ("body", format!("n{i}").into())]);
        json(&ana.post(&house, "/email/out", &body), 202);
        world.clock.advance(1_000);
    }
    let over = out(&[("to", "pat@example.com".into()), ("body", "over".into()), ("id", "over-1".into())]);
    assert_eq!(error_of(&json(&ana.post(&house, "/email/out", &over), 429)), "too_many_emails");
    world.clock.advance(60_000 - cap * 1_000);
    json(&ana.post(&house, "/email/out", &over), 202);
    assert_eq!(emails(&house, &ana).len() as i64, cap + 1);
}

#[test]
fn a_reply_to_an_email_whose_body_was_dropped_still_goes_out() {
    let (world, house, ana, _provider) = world(true);
    let raw =
        b"From: Pat <pat@example.com>\r\nTo: ana@h.test\r\nSubject: old\r\nMessage-ID: <old@example.com>\r\n\r\nHi\r\n";
    let got = block_on(house.email().receive_email(raw, "pat@example.com", "ana@h.test", &[])).unwrap();
    json(
        &ana.post(
            &house,
            &format!("/mailbox/{}/ack", ana.address.local()),
            &Value::Object(nyx5_proto::json::obj([("ids", Value::Array(vec![got.id().into()]))])),
        ),
        200,
    );
    // Past the retention window the tick drops the acknowledged body, and keeps its id.
    world.clock.advance(8 * DAY);
    world.tick_all();
    let req =
        out(&[("to", "pat@example.com".into()), ("body", "Late, but yes.".into()), ("in_reply_to", got.id().into())]);
    json(&ana.post(&house, "/email/out", &req), 202);
}

#[test]
fn a_new_email_asks_for_a_tick_only_where_a_provider_can_send_it() {
    let body = out(&[("id", "e-1".into()), ("to", "pat@example.com".into()), ("body", "hi".into())]);
    let (_w, house, ana, _p) = world(true);
    assert!(ana.post(&house, "/email/out", &body).kick, "new, and a provider to send it: a tick now");
    assert!(!ana.post(&house, "/email/out", &body).kick, "the same email again: nothing new to send");
    let (_w, house, ana, _p) = world(false);
    let r = ana.post(&house, "/email/out", &body);
    assert_eq!((r.status, r.kick), (202, false), "no provider: it waits");
}

#[test]
fn a_pass_over_the_outbox_says_how_many_it_tried() {
    let (_world, house, ana, provider) = world(true);
    for to in ["pat@example.com", "sam@example.com"] {
        assert_eq!(ana.post(&house, "/email/out", &out(&[("to", to.into()), ("body", "hi".into())])).status, 202);
    }
    assert_eq!(block_on(house.email().send_emails(house.now())).unwrap(), 2);
    assert_eq!(provider.seen.borrow().len(), 2);
    assert_eq!(block_on(house.email().send_emails(house.now())).unwrap(), 0, "both sent: nothing left to try");
}

/// The `error` member of a refusal: the refusal's stable name.
fn error_of(v: &Value) -> &str {
    v.as_object().and_then(|o| o.get("error")).and_then(Value::as_str).unwrap_or_default()
}

/// A stored state none the house knows (a hand-edited database, a downgrade) is the house's own
/// fault: the outbox answers 500, never a guess such as "pending" (review of issue 37 §5).
#[test]
fn an_email_or_job_in_a_state_the_house_does_not_know_is_a_500_not_a_guess() {
    use nyx5_house::Db;
    use nyx5_house::ports::Stmt;
    let (world, house, ana, _provider) = world(false);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", "hello".into())])), 202);
    assert_eq!(emails(&house, &ana)[0]["state"].as_str(), Some("pending"));
    let raw = |sql: &'static str| block_on(house.db.query(Stmt::new(sql, vec![]))).unwrap();
    raw("PRAGMA ignore_check_constraints = ON");
    raw("UPDATE email_out SET state = 'mislaid'");
    let v = json(&ana.get(&house, "/outbox/ana"), 500);
    assert_eq!(v.as_object().unwrap()["error"].as_str(), Some("internal"), "{v:?}");
    raw("UPDATE email_out SET state = 'pending'");
    json(&ana.get(&house, "/outbox/ana"), 200);
    drop(world);
}

/// The tick steps the mailbox moves last: a step that uses up the invocation's queries (D1's 50
/// on the Free plan) leaves the email of that tick sent (the second hostile review of moves in
/// steps: the step ran before the email and the services, and starved them).
#[test]
fn a_move_step_past_the_query_budget_does_not_starve_the_email() {
    let (_world, house, ana, provider) = world(true);
    json(&ana.post(&house, "/email/out", &out(&[("to", "pat@example.com".into()), ("body", "hello".into())])), 202);
    house.db.moves_exhaust_the_budget(true);
    let r = block_on(house.tick());
    house.db.refill();
    house.db.moves_exhaust_the_budget(false);
    assert_eq!(provider.seen.borrow().len(), 1, "sent before the move's step");
    assert!(r.unwrap().settle_error.is_some_and(|e| e.contains("Too many")), "the move's failure reported");
    assert_eq!(emails(&house, &ana)[0]["state"].as_str(), Some("sent"));
}
