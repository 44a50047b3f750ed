//! POST /outbound, the delivery queue and GET /outbox: delivery across houses and at home,
//! deferred delivery, a destination down for an hour or for days, expiry in the queue, duplicate
//! and lost answers, delivery receipts, leases, and every refusal of /outbound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_house::store::queue::{Held, lease};
use nyx5_proto::card::{Delegation, Scope};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value, seal};

/// Two houses, `a.test` (ana, cy) and `b.test` (bo), registered by their operators.
struct Setup {
    w: World,
    a: std::rc::Rc<TestHouse>,
    b: std::rc::Rc<TestHouse>,
    ana: Agent,
    cy: Agent,
    bo: Agent,
}

fn setup() -> Setup {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let cy = Agent::new("cy@a.test", 11);
    let bo = Agent::new("bo@b.test", 20);
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(cy.register_admin(&a).status, 201);
    assert_eq!(bo.register_admin(&b).status, 201);
    Setup { w, a, b, ana, cy, bo }
}

/// A signed clear envelope with the draft adjusted by `f`.
fn envelope(from: &Agent, id: &str, to: &[&Address], f: impl FnOnce(&mut Draft)) -> Envelope {
    let mut d = Draft::new(
        id.into(),
        from.address.clone(),
        to.iter().map(|a| (*a).clone()).collect(),
        Timestamp(START),
        Content::new("text/plain", "hello".into()),
    );
    f(&mut d);
    d.build().unwrap().sign(&from.sig).unwrap()
}

/// A signed clear envelope.
fn signed(from: &Agent, id: &str, to: &[&Address], body: &str) -> Envelope {
    from.draft(id, to, body).sign(&from.sig).unwrap()
}

fn o(v: &Value) -> &Object {
    v.as_object().unwrap()
}

fn ids(envs: &[Envelope]) -> Vec<String> {
    envs.iter().map(|e| e.id().to_owned()).collect()
}

/// `agent`'s outbox page, newest first.
fn outbox(house: &TestHouse, agent: &Agent) -> Vec<Value> {
    let v = json(&agent.get(house, &format!("/outbox/{}", agent.address.local())), 200);
    o(&v)["envelopes"].as_array().unwrap().to_vec()
}

/// The jobs of the envelope `id` in `agent`'s outbox.
fn jobs(house: &TestHouse, agent: &Agent, id: &str) -> Vec<Object> {
    let all = outbox(house, agent);
    let env = all.iter().find(|e| o(e)["id"].as_str() == Some(id)).expect("envelope in the outbox");
    o(env)["jobs"].as_array().unwrap().iter().map(|j| o(j).clone()).collect()
}

fn text(o: &Object, name: &str) -> String {
    o[name].as_str().unwrap_or_else(|| panic!("{name} is not a string in {o:?}")).to_owned()
}

/// Checks a postmaster notice: signed by `house`'s domain key, about `original`, with `status`.
fn check_notice(house: &TestHouse, notice: &Envelope, original: &Envelope, status: &str) -> Object {
    let verified = notice.clone().verify_with_key(&house.config.key.public()).expect("signed by the domain key");
    assert_eq!(verified.from().as_str(), format!("postmaster@{}", house.config.domain));
    assert_eq!(verified.kind(), Kind::Receipt);
    assert_eq!(verified.in_reply_to(), Some(original.id()));
    assert_eq!(verified.to(), vec![original.from().clone()]);
    let content = verified.content().unwrap();
    assert_eq!(content.media, nyx5_proto::receipt::NOTICE_MEDIA);
    let body = content.body.as_object().unwrap().clone();
    assert_eq!(text(&body, "of"), original.id());
    assert_eq!(text(&body, "sha256"), original.sha256_hex());
    assert_eq!(text(&body, "status"), status);
    body
}

fn job_count(house: &TestHouse, state: &str) -> i64 {
    let rows = block_on(house.db.query(stmt!("SELECT count(*) AS n FROM jobs WHERE state = ?", state))).unwrap();
    rows[0].int("n").unwrap()
}

#[test]
fn sends_across_houses_and_at_home() {
    let s = setup();
    let env = s.ana.seal(s.ana.draft("e1", &[&s.bo.address, &s.cy.address], "hi both"), &[&s.bo, &s.cy]);
    let resp = s.ana.send(&s.a, &env);
    assert!(resp.kick, "the adapter must run a tick after answering");
    let v = json(&resp, 202);
    assert_eq!(o(&v)["code"].as_safe_integer(), Some(202));
    assert_eq!(text(o(&v), "id"), "e1");
    let listed: Vec<(String, Vec<Value>)> = o(&v)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (text(o(j), "domain"), o(j)["recipients"].as_array().unwrap().to_vec()))
        .collect();
    assert_eq!(
        listed,
        [("b.test".to_owned(), vec![Value::from("bo@b.test")]), ("a.test".to_owned(), vec![Value::from("cy@a.test")])]
    );
    assert_eq!(text(o(&o(&v)["jobs"].as_array().unwrap()[0]), "next_attempt"), s.a.now().to_rfc3339());
    // Nothing is delivered before a tick.
    assert!(mailbox(&s.b, &s.bo).is_empty());
    assert_eq!(jobs(&s.a, &s.ana, "e1")[0]["state"].as_str(), Some("pending"));

    let r = s.w.tick_all();
    assert_eq!((r.attempted, r.delivered, r.retried, r.bounced), (2, 2, 0, 0));
    let got = mailbox(&s.b, &s.bo);
    assert_eq!(ids(&got), ["e1"]);
    let content = seal::open(&got[0], &s.bo.address, &s.bo.enc).unwrap();
    assert_eq!(content.body.as_str(), Some("hi both"));
    assert_eq!(ids(&mailbox(&s.a, &s.cy)), ["e1"]);
    // The local recipient was served without HTTP; the remote one with one POST /inbound.
    assert_eq!(s.w.sent_to("a.test/inbound"), 0);
    assert_eq!(s.w.sent_to("b.test/inbound"), 1);
    // No receipt was asked for: the sender's mailbox stays empty.
    assert!(mailbox(&s.a, &s.ana).is_empty());

    for j in jobs(&s.a, &s.ana, "e1") {
        assert_eq!(j["state"].as_str(), Some("delivered"));
        assert!(j["finished"].as_str().is_some());
        assert!(j["next_attempt"].is_null());
        assert_eq!(j["attempts"].as_safe_integer(), Some(1));
    }
    assert_eq!(text(o(&outbox(&s.a, &s.ana)[0]), "sha256"), env.sha256_hex());

    // The same envelope again: "exists", nothing queued twice.
    let v = json(&s.ana.send(&s.a, &env), 200);
    assert_eq!(o(&v)["exists"], Value::Bool(true));
    assert_eq!(o(&v)["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(s.w.tick_all().attempted, 0);
    assert_eq!(mailbox(&s.b, &s.bo).len(), 1);
    // Another envelope under a used id is a conflict.
    let other = s.ana.draft("e1", &[&s.bo.address], "different").sign(&s.ana.sig).unwrap();
    assert_eq!(s.ana.send(&s.a, &other).status, 409);
    assert_eq!(outbox(&s.a, &s.ana).len(), 1);
}

/// A house queues an envelope once, for good: it forgets a finished envelope a week after its
/// jobs end (the tick purges its outbox row), so it takes none created more than 6 days ago, nor
/// one created more than 5 minutes ahead of its clock (found by the `libro_sequence` fuzz target:
/// an operation sent again after the purge was queued and delivered a second time).
#[test]
fn an_envelope_too_old_to_be_remembered_is_not_queued() {
    let s = setup();
    let env = signed(&s.ana, "e1", &[&s.bo.address], "once");
    json(&s.ana.send(&s.a, &env), 202);
    assert_eq!(s.w.tick_all().delivered, 1);
    // Eight days on, the tick forgets it; the same envelope again is refused, not queued.
    s.w.clock.advance(8 * DAY);
    s.w.tick_all();
    assert!(outbox(&s.a, &s.ana).is_empty(), "the outbox row was purged");
    let again = json(&s.ana.send(&s.a, &env), 400);
    assert_eq!(text(o(&again), "error"), "created_too_old", "{again:?}");
    assert_eq!((job_count(&s.a, "pending"), s.w.tick_all().attempted), (0, 0));
    assert_eq!(mailbox(&s.b, &s.bo).len(), 1);
    // Fresh envelopes go: one created now, one exactly 6 days old; not one a minute ahead of
    // the tolerance.
    let now = s.a.now().millis();
    let fresh = s.ana.draft_at("e2", &[&s.bo.address], "now", Timestamp(now)).sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &fresh), 202);
    let six = s.ana.draft_at("e3", &[&s.bo.address], "old", Timestamp(now - 6 * DAY)).sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &six), 202);
    let ahead = s.ana.draft_at("e4", &[&s.bo.address], "ahead", Timestamp(now + 6 * MINUTE)).sign(&s.ana.sig).unwrap();
    let refused = json(&s.ana.send(&s.a, &ahead), 400);
    assert_eq!(text(o(&refused), "error"), "created_in_future", "{refused:?}");
    assert_eq!(outbox(&s.a, &s.ana).len(), 2);
    // One the house still holds (deferred ten days) is answered "exists" a week on, however old:
    // a client retrying a lost answer learns it was queued, and is not told to sign it anew.
    let later = envelope(&s.ana, "e5", &[&s.bo.address], |d| {
        d.created = Timestamp(now);
        d.deliver_after = Some(Timestamp(now + 10 * DAY));
    });
    json(&s.ana.send(&s.a, &later), 202);
    s.w.clock.advance(7 * DAY);
    s.w.tick_all();
    let v = json(&s.ana.send(&s.a, &later), 200);
    assert_eq!(o(&v)["exists"], Value::Bool(true));
    // And another envelope under that id is still a conflict.
    let other = envelope(&s.ana, "e5", &[&s.bo.address], |d| {
        d.created = Timestamp(now);
        d.deliver_after = Some(Timestamp(now + 11 * DAY));
    });
    assert_eq!(s.ana.send(&s.a, &other).status, 409);
}

#[test]
fn replies_thread_back() {
    let s = setup();
    let first = s.ana.draft("t1", &[&s.bo.address], "question").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &first), 202);
    s.w.tick_all();
    let reply = envelope(&s.bo, "t2", &[&s.ana.address], |d| {
        d.thread = Some("t1".into());
        d.in_reply_to = Some("t1".into());
    });
    json(&s.bo.send(&s.b, &reply), 202);
    s.w.tick_all();
    let got = mailbox(&s.a, &s.ana);
    assert_eq!(ids(&got), ["t2"]);
    assert_eq!(got[0].in_reply_to(), Some("t1"));
}

#[test]
fn deferred_delivery_waits_for_its_time() {
    let s = setup();
    let at = Timestamp(s.a.now().millis() + HOUR);
    let env = envelope(&s.ana, "later", &[&s.bo.address, &s.cy.address], |d| d.deliver_after = Some(at));
    let v = json(&s.ana.send(&s.a, &env), 202);
    assert_eq!(text(o(&o(&v)["jobs"].as_array().unwrap()[0]), "next_attempt"), at.to_rfc3339());
    for _ in 0..59 {
        assert_eq!(s.w.tick_all().attempted, 0);
        assert!(mailbox(&s.b, &s.bo).is_empty());
        assert!(mailbox(&s.a, &s.cy).is_empty());
        s.w.clock.advance(MINUTE);
    }
    s.w.clock.advance(MINUTE - 1);
    assert_eq!(s.w.tick_all().attempted, 0);
    s.w.clock.advance(1);
    assert_eq!(s.w.tick_all().delivered, 2);
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["later"]);
    assert_eq!(ids(&mailbox(&s.a, &s.cy)), ["later"]);
    // A deliver_after in the past means now.
    let past = envelope(&s.ana, "past", &[&s.bo.address], |d| d.deliver_after = Some(Timestamp(START - DAY)));
    json(&s.ana.send(&s.a, &past), 202);
    assert_eq!(s.w.tick_all().delivered, 1);
}

/// The kick a request leaves (the Worker's, which has no timer between cron minutes) tries a
/// delivery that failed for now once more after the first retry's delay: a request lost once
/// is delivered within the kick; lost twice, the job waits for the next tick; a kick that
/// attempted two deliveries leaves its failure to the next tick.
///
/// Kills `House::kick`: the second tick deleted, run when nothing was retried (the second
/// case's attempts would be three), or run after two attempts (a wait).
#[test]
fn a_kick_tries_a_delivery_that_failed_for_now_once_more() {
    let s = setup();
    s.w.drop_next("b.test", 1);
    json(&s.ana.send(&s.a, &signed(&s.ana, "once", &[&s.bo.address], "hi")), 202);
    let report = block_on(s.a.kick()).unwrap();
    assert_eq!((report.attempted, report.delivered), (1, 1), "{report:?}");
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["once"]);

    s.w.drop_next("b.test", 2);
    let before = s.a.now().millis();
    json(&s.ana.send(&s.a, &signed(&s.ana, "twice", &[&s.bo.address], "hi")), 202);
    let report = block_on(s.a.kick()).unwrap();
    assert_eq!((report.attempted, report.retried, report.delivered), (1, 1, 0), "{report:?}");
    assert_eq!(s.a.now().millis() - before, 1_000, "one wait, of the first retry's delay");
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["once"]);
    // Delivered: nothing to retry, no wait, one tick.
    let report = block_on(s.a.kick()).unwrap();
    assert_eq!((report.attempted, report.delivered), (0, 0), "{report:?}");
    s.w.clock.advance(2_000);
    assert_eq!(block_on(s.a.kick()).unwrap().delivered, 1);
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["once", "twice"]);
    // A kick that attempted more than one delivery leaves its failures to the cron (the second
    // tick would cost the invocation a whole tick's subrequests more): one envelope for b.test,
    // delivered, and for c.test, which is down.
    s.w.down("c.test", true);
    let far = Address::parse("cy@c.test").unwrap();
    json(&s.ana.send(&s.a, &signed(&s.ana, "both", &[&s.bo.address, &far], "hi")), 202);
    let before = s.a.now().millis();
    let report = block_on(s.a.kick()).unwrap();
    assert_eq!((report.attempted, report.retried, report.delivered), (2, 1, 1), "{report:?}");
    assert_eq!(s.a.now().millis(), before, "no wait");
}

/// How many probes a schedule of ticks every `step` ms sends in `span` ms to a domain that is down.
fn probes_in(span: i64) -> usize {
    let retry = nyx5_house::config::Retry::default();
    let (mut t, mut n) = (0, 0);
    while t < span {
        n += 1;
        t += retry.backoff_ms(n as i64);
    }
    n
}

#[test]
fn destination_down_for_an_hour_then_back() {
    let s = setup();
    // Warm b.test's card in a.test's cache, then take b.test down.
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "0")), 202);
    s.w.tick_all();
    let before = s.w.sent_to("http://b.test/");
    s.w.down("b.test", true);

    let started = s.a.now().millis();
    let mut sent = Vec::new();
    let mut step = 0;
    while s.a.now().millis() - started < HOUR {
        // Three envelopes arrive while it is down: at 0, 10 and 30 minutes.
        if [0, 600, 1800].contains(&step) {
            let id = format!("d{step}");
            json(&s.ana.send(&s.a, &signed(&s.ana, &id, &[&s.bo.address], &id)), 202);
            sent.push(id);
        }
        let r = s.w.tick_all();
        assert!(r.attempted <= 1, "only one probe at a time: {r:?}");
        assert_eq!(r.delivered, 0);
        s.w.clock.advance(SECOND);
        step += 1;
    }
    let probes = s.w.sent_to("http://b.test/") - before;
    assert_eq!(probes, probes_in(HOUR), "one probe per backoff step");
    assert!(mailbox(&s.b, &s.bo).iter().all(|e| e.id() == "warm"));
    let j = &jobs(&s.a, &s.ana, "d0")[0];
    assert_eq!(j["state"].as_str(), Some("retrying"));
    assert!(j["last_error"].as_str().is_some());
    assert!(j["next_attempt"].as_str().is_some());
    assert_eq!(jobs(&s.a, &s.ana, "d600")[0]["state"].as_str(), Some("pending"));

    // Back up: the next probe succeeds and the rest follow at once, in order of arrival.
    s.w.down("b.test", false);
    let mut delivered = 0;
    for _ in 0..61 {
        delivered += s.w.tick_all().delivered;
        if delivered == 3 {
            break;
        }
        s.w.clock.advance(SECOND);
    }
    assert_eq!(delivered, 3);
    let got = ids(&mailbox(&s.b, &s.bo));
    assert_eq!(got, ["warm", "d0", "d600", "d1800"]);
    assert_eq!(s.w.tick_all().attempted, 0);
    let rows = block_on(s.a.db.query(stmt!("SELECT count(*) AS n FROM domain_health"))).unwrap();
    assert_eq!(rows[0].int("n"), Some(0));
    for id in &sent {
        assert_eq!(jobs(&s.a, &s.ana, id)[0]["state"].as_str(), Some("delivered"));
    }
}

#[test]
fn down_past_three_days_bounces_to_the_sender() {
    let s = setup();
    s.w.down("b.test", true);
    let env = s.ana.draft("lost", &[&s.bo.address], "anyone?").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &env), 202);
    let mut bounced = 0;
    let mut elapsed = 0;
    while elapsed <= 3 * DAY {
        let r = s.w.tick_all();
        bounced += r.bounced;
        if elapsed < 3 * DAY {
            assert_eq!(bounced, 0, "bounced early, at {elapsed} ms");
        }
        s.w.clock.advance(10 * MINUTE);
        elapsed += 10 * MINUTE;
    }
    assert_eq!(bounced, 1);
    // The domain's health went with its last job, in the tick that bounced it (not at the next
    // minute's purge: CI's e2e found the row left behind).
    assert_eq!(health_rows(&s.a), 0, "a domain with no pending job is still marked failing");
    let notices = mailbox(&s.a, &s.ana);
    assert_eq!(notices.len(), 1);
    let body = check_notice(&s.a, &notices[0], &env, "bounced");
    assert_eq!(body["code"].as_safe_integer(), Some(503));
    assert_eq!(body["recipients"], Value::Array(vec!["bo@b.test".into()]));
    assert!(text(&body, "reason").contains("72 h"));
    let j = &jobs(&s.a, &s.ana, "lost")[0];
    assert_eq!(j["state"].as_str(), Some("bounced"));
    assert_eq!(j["code"].as_safe_integer(), Some(503));
    assert!(j["reason"].as_str().is_some());
    assert_eq!(job_count(&s.a, "bounced"), 1);
    // Back up later: nothing is delivered, nothing is bounced twice.
    s.w.down("b.test", false);
    s.w.tick_all();
    assert!(mailbox(&s.b, &s.bo).is_empty());
    assert_eq!(mailbox(&s.a, &s.ana).len(), 1);
}

#[test]
fn expiry_in_the_queue_bounces_at_once() {
    let s = setup();
    s.w.down("b.test", true);
    let expires = Timestamp(s.a.now().millis() + 10 * MINUTE);
    let env = envelope(&s.ana, "brief", &[&s.bo.address], |d| d.expires = Some(expires));
    json(&s.ana.send(&s.a, &env), 202);
    // Retries run every minute at most; the job wakes exactly at expiry to bounce.
    while s.a.now() < expires {
        assert_eq!(s.w.tick_all().bounced, 0);
        s.w.clock.advance((7 * SECOND).min(expires.millis() - s.a.now().millis()));
    }
    assert_eq!(s.w.tick_all().bounced, 1);
    let notices = mailbox(&s.a, &s.ana);
    let body = check_notice(&s.a, &notices[0], &env, "bounced");
    assert_eq!(body["code"].as_safe_integer(), Some(410));
    assert_eq!(jobs(&s.a, &s.ana, "brief")[0]["code"].as_safe_integer(), Some(410));

    // A deferred envelope whose expiry passes while it waits, at home this time.
    let s = setup();
    let at = Timestamp(s.a.now().millis() + HOUR);
    let env = envelope(&s.ana, "memo", &[&s.cy.address], |d| {
        d.deliver_after = Some(at);
        d.expires = Some(Timestamp(at.millis() + 1));
    });
    json(&s.ana.send(&s.a, &env), 202);
    s.w.clock.advance(HOUR + 1);
    assert_eq!(s.w.tick_all().bounced, 1);
    assert!(mailbox(&s.a, &s.cy).is_empty());
    check_notice(&s.a, &mailbox(&s.a, &s.ana)[0], &env, "bounced");
}

#[test]
fn duplicate_and_lost_answers_leave_one_copy() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "0")), 202);
    s.w.tick_all();
    // The destination stores it but the answer is lost: the retry finds it there (200).
    s.w.lose_answers("b.test", 1);
    json(&s.ana.send(&s.a, &signed(&s.ana, "once", &[&s.bo.address], "1")), 202);
    let r = s.w.tick_all();
    assert_eq!((r.attempted, r.retried), (1, 1));
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "once"]);
    s.w.clock.advance(SECOND);
    let r = s.w.tick_all();
    assert_eq!((r.attempted, r.delivered), (1, 1));
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "once"]);
    assert_eq!(jobs(&s.a, &s.ana, "once")[0]["attempts"].as_safe_integer(), Some(2));
    // The network delivers one request twice: still one copy.
    s.w.duplicate_next("b.test", 1);
    json(&s.ana.send(&s.a, &signed(&s.ana, "twice", &[&s.bo.address], "2")), 202);
    assert_eq!(s.w.tick_all().delivered, 1);
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "once", "twice"]);
    // And the relay itself answers 200 to a second delivery.
    let env = s.ana.draft("twice", &[&s.bo.address], "2").sign(&s.ana.sig).unwrap();
    let header = nyx5_proto::relay::RelayHeader::sign("a.test", &env, "b.test", &s.a.config.key).to_header();
    let resp = call_raw(&s.b, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical());
    assert_eq!(json(&resp, 200).as_object().unwrap()["duplicate"], Value::Bool(true));
}

#[test]
fn delivery_receipts_only_when_asked() {
    let s = setup();
    let asked = envelope(&s.ana, "ack-me", &[&s.bo.address, &s.cy.address], |d| {
        d.extra.insert("receipt".into(), "delivered".into());
        d.thread = Some("th-1".into());
    });
    let plain = s.ana.draft("quiet", &[&s.bo.address], "x").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &asked), 202);
    json(&s.ana.send(&s.a, &plain), 202);
    s.w.tick_all();
    let notices = mailbox(&s.a, &s.ana);
    assert_eq!(notices.len(), 2, "one receipt per destination job");
    let mut named = Vec::new();
    for n in &notices {
        let body = check_notice(&s.a, n, &asked, "delivered");
        assert_eq!(n.thread(), Some("th-1"));
        named.extend(body["recipients"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()));
    }
    named.sort();
    assert_eq!(named, ["bo@b.test", "cy@a.test"]);
    // Ticking again sends no second receipt.
    s.w.clock.advance(MINUTE);
    s.w.tick_all();
    assert_eq!(mailbox(&s.a, &s.ana).len(), 2);
}

#[test]
fn refused_recipients_bounce_and_the_rest_are_delivered() {
    let s = setup();
    let nobody = Address::parse("nobody@b.test").unwrap();
    let env = s.ana.draft("mixed", &[&s.bo.address, &nobody], "hi").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &env), 202);
    let r = s.w.tick_all();
    assert_eq!((r.delivered, r.bounced), (1, 0));
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["mixed"]);
    let notices = mailbox(&s.a, &s.ana);
    assert_eq!(notices.len(), 1);
    let body = check_notice(&s.a, &notices[0], &env, "bounced");
    assert_eq!(body["code"].as_safe_integer(), Some(404));
    assert_eq!(body["recipients"], Value::Array(vec!["nobody@b.test".into()]));
    let j = &jobs(&s.a, &s.ana, "mixed")[0];
    assert_eq!(j["state"].as_str(), Some("delivered"));
    assert_eq!(j["delivered"], Value::Array(vec!["bo@b.test".into()]));
    assert_eq!(o(&j["bounced"].as_array().unwrap()[0])["code"].as_safe_integer(), Some(404));

    // Nobody there at all: the whole job bounces, here and at home.
    let lost = Address::parse("ghost@a.test").unwrap();
    let env = s.ana.draft("nobody", &[&nobody, &lost], "hi").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &env), 202);
    let r = s.w.tick_all();
    assert_eq!(r.bounced, 2);
    for j in jobs(&s.a, &s.ana, "nobody") {
        assert_eq!(j["state"].as_str(), Some("bounced"));
        assert_eq!(j["code"].as_safe_integer(), Some(404));
    }
    assert_eq!(mailbox(&s.a, &s.ana).len(), 3);
}

/// Bounces are told once per code and reason: two recipients refused for two reasons (each
/// "no agent" names its address) get a notice each, so neither reads the other's reason. Kills
/// `notices`' grouping `*c == b.code && *r == b.reason` with `&&` → `||` or the reason's `==` →
/// `!=` (one notice for both, under the first reason).
#[test]
fn bounces_with_different_reasons_are_told_apart() {
    let s = setup();
    let (x, y) = (Address::parse("x@b.test").unwrap(), Address::parse("y@b.test").unwrap());
    let env = s.ana.draft("two-refusals", &[&x, &y], "hi").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &env), 202);
    assert_eq!(s.w.tick_all().bounced, 1);
    let mut told: Vec<(Value, String)> = mailbox(&s.a, &s.ana)
        .iter()
        .map(|n| {
            let body = check_notice(&s.a, n, &env, "bounced");
            assert_eq!(body["code"].as_safe_integer(), Some(404));
            (body["recipients"].clone(), text(&body, "reason"))
        })
        .collect();
    told.sort_by_key(|(_, reason)| reason.clone());
    assert_eq!(
        told,
        [
            (Value::Array(vec!["x@b.test".into()]), "no agent x@b.test".to_owned()),
            (Value::Array(vec!["y@b.test".into()]), "no agent y@b.test".to_owned()),
        ]
    );
}

/// A finished envelope stays listed in its sender's outbox for seven days, then the tick purges
/// it. Kills `OUTBOX_KEEP_MS`'s `7 * 24` → `7 + 24` (a day and a few milliseconds).
#[test]
fn a_finished_envelope_is_listed_for_a_week() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "kept", &[&s.bo.address], "hi")), 202);
    assert_eq!(s.w.tick_all().delivered, 1);
    let listed = |s: &Setup| outbox(&s.a, &s.ana).iter().any(|e| o(e)["id"].as_str() == Some("kept"));
    s.w.clock.advance(6 * 24 * 3_600_000);
    s.w.tick_all();
    assert!(listed(&s), "purged before its week");
    s.w.clock.advance(24 * 3_600_000 + MINUTE);
    s.w.tick_all();
    assert!(!listed(&s), "still listed after its week");
}

/// `GET /health` tells the queue's depth and how long its oldest due job has waited. Kills
/// `store::queue::depth` → an empty row (always 0 and null).
#[test]
fn health_tells_the_queue_depth_and_the_oldest_due_job() {
    let s = setup();
    let health = |s: &Setup| {
        let v = json(&call_raw(&s.a, "GET", "/health", &[], vec![]), 200);
        (o(&v)["queue_depth"].as_safe_integer(), o(&v)["oldest_due_ms"].as_safe_integer())
    };
    assert_eq!(health(&s), (Some(0), None));
    s.w.down("b.test", true);
    json(&s.ana.send(&s.a, &signed(&s.ana, "waits", &[&s.bo.address], "hi")), 202);
    s.w.tick_all();
    let next = job_row(&s.a, "waits").1;
    assert!(next > s.a.now().millis(), "a retry is planned");
    assert_eq!(health(&s), (Some(1), None), "pending, not yet due");
    s.w.clock.advance(next - s.a.now().millis() + 5 * SECOND);
    assert_eq!(health(&s), (Some(1), Some(5 * SECOND)), "due five seconds ago");
    s.w.down("b.test", false);
    s.w.tick_all();
    assert_eq!(health(&s), (Some(0), None));
}

/// A job whose every recipient is already settled (its progress written, its state not yet) is
/// finished by the next tick without another attempt: nothing is posted for nobody. Kills
/// `work`'s `attempting` (`&&` → `||`) and its `None if !attempting` guard → `false`.
#[test]
fn a_job_with_nobody_left_is_finished_without_an_attempt() {
    let s = setup();
    s.w.down("b.test", true);
    json(&s.ana.send(&s.a, &signed(&s.ana, "settled", &[&s.bo.address], "hi")), 202);
    s.w.tick_all();
    assert_eq!(job_row(&s.a, "settled").0, "pending");
    // Its one recipient is settled in its progress, as if a tick had died after writing it.
    let progress = r#"{"bounced":[],"delivered":["bo@b.test"]}"#;
    block_on(s.a.db.query(stmt!("UPDATE jobs SET result = ? WHERE envelope_id = 'settled'", progress))).unwrap();
    s.w.down("b.test", false);
    let posted = s.w.sent_to("b.test/inbound");
    s.w.clock.advance(HOUR);
    let r = s.w.tick_all();
    assert_eq!((r.attempted, s.w.sent_to("b.test/inbound")), (0, posted), "no attempt for nobody");
    assert_eq!(job_row(&s.a, "settled").0, "delivered");
    assert!(mailbox(&s.b, &s.bo).is_empty());
}

#[test]
fn leases_keep_ticks_apart() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "0")), 202);
    s.w.tick_all();

    // A job another tick holds is left alone until its lease lapses.
    json(&s.ana.send(&s.a, &signed(&s.ana, "held", &[&s.bo.address], "1")), 202);
    // Not by the kick of its send (whose process ended first), but by a tick's lease, due now.
    assert_eq!(s.a.drop_kick(), 1);
    let now = s.a.now().millis();
    block_on(s.a.db.batch(vec![stmt!(
        "UPDATE jobs SET lease_until = ?, next_attempt = ? WHERE envelope_id = 'held'",
        now + 30 * SECOND,
        now
    )]))
    .unwrap();
    assert_eq!(s.w.tick_all().attempted, 0);
    s.w.clock.advance(30 * SECOND + 1);
    assert_eq!(s.w.tick_all().delivered, 1);

    // Two ticks at once (the cron and the kick): the one that waits on the network holds the
    // lease, the other finds nothing to do.
    json(&s.ana.send(&s.a, &signed(&s.ana, "race", &[&s.bo.address], "2")), 202);
    s.w.stall_next("b.test", 1);
    let sent = s.w.sent_to("b.test/inbound");
    let (r1, r2) = block_on_both(s.a.tick(), s.a.tick());
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(r1.attempted + r2.attempted, 1);
    assert_eq!(r1.delivered + r2.delivered, 1);
    assert_eq!(s.w.sent_to("b.test/inbound") - sent, 1);
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "held", "race"]);

    // The lease itself: a second take of the same job changes nothing, and a tick whose lease
    // was taken over cannot finish the job or drop notices.
    json(&s.ana.send(&s.a, &signed(&s.ana, "stale", &[&s.bo.address], "3")), 202);
    // The send took the job's first attempt for its kick; no kick runs here, and the lease is
    // given back by hand, as though it had lapsed.
    assert_eq!(s.a.drop_kick(), 1);
    block_on(
        s.a.db.batch(vec![stmt!("UPDATE jobs SET lease_until = 0, next_attempt = 0 WHERE envelope_id = 'stale'")]),
    )
    .unwrap();
    let id = ("stale", "b.test");
    let now = s.a.now().millis();
    let taken = |stmt| block_on(s.a.db.write_returning(stmt)).unwrap().len();
    assert_eq!(taken(lease(id, now, now + 30 * SECOND, None, None, None, None)), 1);
    assert_eq!(taken(lease(id, now, now + 30 * SECOND, None, None, None, None)), 0);
    s.w.clock.advance(31 * SECOND);
    let later = s.a.now().millis();
    let rows = block_on(s.a.db.write_returning(lease(id, later, later + 30 * SECOND, None, None, None, None))).unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].text("envelope").is_some_and(|e| e.contains("\"stale\"")),
        "the lease reads the envelope it is for"
    );
    let stale = Held { envelope_id: "stale", domain: "b.test", lease: now + 30 * SECOND };
    let stmts = vec![
        nyx5_house::store::queue::insert_notice(stale, "ana", "n-1", "postmaster@a.test", "{}", later),
        nyx5_house::store::queue::finish(stale, nyx5_house::queue::JobState::Bounced, Some("x"), "{}", later),
    ];
    assert_eq!(block_on(s.a.db.batch(stmts)).unwrap(), [0, 0]);
    assert_eq!(job_count(&s.a, "pending"), 1);
    assert!(mailbox(&s.a, &s.ana).is_empty());

    // Nor reschedule it, mark its domain failing, or (when the domain is failing) clear its
    // health and pull the domain's waiting jobs forward.
    use nyx5_house::store::queue::{domain_failed, domain_recovered, retry};
    let before = job_row(&s.a, "stale");
    let stmts = vec![
        retry(stale, later + 3_600 * SECOND, "stolen", "{}", Some(later)),
        domain_failed(stale, "b.test", later, 1, later + 60 * SECOND, "stolen"),
    ];
    assert_eq!(block_on(s.a.db.batch(stmts)).unwrap(), [0, 0]);
    assert_eq!(job_row(&s.a, "stale"), before, "a stale retry rescheduled the job");
    assert_eq!(health_rows(&s.a), 0, "a stale tick marked the domain failing");

    // The domain is failing and another job waits for its probe; the stale tick's recovery
    // changes neither.
    block_on(s.a.db.batch(vec![stmt!(
        "INSERT INTO domain_health (domain, failing_since, failures, next_probe, last_error)
         VALUES ('b.test', ?, 3, ?, 'down')",
        later,
        later + 600 * SECOND
    )]))
    .unwrap();
    json(&s.ana.send(&s.a, &signed(&s.ana, "waiting", &[&s.bo.address], "4")), 202);
    block_on(
        s.a.db
            .batch(vec![stmt!("UPDATE jobs SET next_attempt = ? WHERE envelope_id = 'waiting'", later + 600 * SECOND)]),
    )
    .unwrap();
    let waiting = job_row(&s.a, "waiting");
    assert_eq!(block_on(s.a.db.batch(domain_recovered(stale, "b.test", later))).unwrap(), [0, 0]);
    assert_eq!(health_rows(&s.a), 1, "a stale tick forgot the domain's failures");
    assert_eq!(job_row(&s.a, "waiting"), waiting, "a stale tick made the domain's jobs due");

    // The tick that holds the lease does both.
    let held = Held { envelope_id: "stale", domain: "b.test", lease: later + 30 * SECOND };
    assert_eq!(block_on(s.a.db.batch(domain_recovered(held, "b.test", later))).unwrap(), [1, 1]);
    assert_eq!(health_rows(&s.a), 0);
    assert_eq!(job_row(&s.a, "waiting").1, later);
}

/// The job of envelope `id`: its state, next attempt, attempts, last error and lease.
fn job_row(house: &TestHouse, id: &str) -> (String, i64, i64, Option<String>, i64) {
    let rows = block_on(house.db.query(stmt!(
        "SELECT state, next_attempt, attempts, last_error, lease_until FROM jobs WHERE envelope_id = ?",
        id
    )))
    .unwrap();
    let r = &rows[0];
    (
        r.text("state").unwrap().to_owned(),
        r.int("next_attempt").unwrap(),
        r.int("attempts").unwrap(),
        r.text("last_error").map(str::to_owned),
        r.int("lease_until").unwrap(),
    )
}

fn health_rows(house: &TestHouse) -> i64 {
    let rows = block_on(house.db.query(stmt!("SELECT count(*) AS n FROM domain_health"))).unwrap();
    rows[0].int("n").unwrap()
}

#[test]
fn outbox_pages_and_belongs_to_its_owner() {
    let s = setup();
    for i in 0..5 {
        json(&s.ana.send(&s.a, &signed(&s.ana, &format!("p{i}"), &[&s.bo.address], "x")), 202);
    }
    let v = json(&s.ana.get(&s.a, "/outbox/ana?limit=2"), 200);
    let page: Vec<String> = o(&v)["envelopes"].as_array().unwrap().iter().map(|e| text(o(e), "id")).collect();
    assert_eq!(page, ["p4", "p3"]);
    let next = o(&v)["next"].as_safe_integer().unwrap();
    let v = json(&s.ana.get(&s.a, &format!("/outbox/ana?before={next}&limit=10")), 200);
    let page: Vec<String> = o(&v)["envelopes"].as_array().unwrap().iter().map(|e| text(o(e), "id")).collect();
    assert_eq!(page, ["p2", "p1", "p0"]);
    assert!(o(&v)["next"].is_null());
    // Only the owner reads it.
    assert_eq!(s.cy.get(&s.a, "/outbox/ana").status, 403);
    assert_eq!(call_raw(&s.a, "GET", "/outbox/ana", &[], vec![]).status, 401);
    assert_eq!(s.ana.get(&s.a, "/outbox/ana?limit=x").status, 400);
    assert_eq!(call_raw(&s.a, "DELETE", "/outbox/ana", &[], vec![]).status, 405);
    assert_eq!(call_raw(&s.a, "GET", "/outbound", &[], vec![]).status, 405);
}

#[test]
fn outbound_refusals() {
    let s = setup();
    let ok = s.ana.draft("r0", &[&s.bo.address], "x").sign(&s.ana.sig).unwrap();

    // Someone else's `from` (even with a valid signature by that someone).
    let cy_env = s.cy.draft("r1", &[&s.bo.address], "x").sign(&s.cy.sig).unwrap();
    assert_eq!(s.ana.send(&s.a, &cy_env).status, 403);
    // A signature by the wrong key, and no signature at all.
    let forged = s.ana.draft("r2", &[&s.bo.address], "x").sign(&s.cy.sig).unwrap();
    assert_eq!(s.ana.send(&s.a, &forged).status, 403);
    assert_eq!(s.ana.send(&s.a, &s.ana.draft("r3", &[&s.bo.address], "x")).status, 403);
    // Tampered after signing.
    let mut raw = ok.object().clone();
    raw.insert("to".into(), Value::Array(vec!["cy@a.test".into()]));
    let tampered = Envelope::from_object(raw).unwrap();
    assert_eq!(s.ana.send(&s.a, &tampered).status, 403);
    // Expired, and never deliverable.
    let old = envelope(&s.ana, "r4", &[&s.bo.address], |d| d.expires = Some(Timestamp(START + SECOND)));
    s.w.clock.advance(MINUTE);
    assert_eq!(s.ana.send(&s.a, &old).status, 410);
    let mut raw = ok.object().clone();
    raw.insert("expires".into(), Timestamp(START + HOUR).to_rfc3339().into());
    raw.insert("deliver_after".into(), Timestamp(START + HOUR).to_rfc3339().into());
    let body = Value::Object(raw).canonical();
    let token = s.ana.token(&s.a, "POST", "/outbound", &body);
    let resp = call_raw(&s.a, "POST", "/outbound", &[("authorization", &token)], body);
    assert_eq!(resp.status, 400);
    // Malformed JSON.
    let token = s.ana.token(&s.a, "POST", "/outbound", b"{\"nyx5\":");
    assert_eq!(call_raw(&s.a, "POST", "/outbound", &[("authorization", &token)], b"{\"nyx5\":".to_vec()).status, 400);
    // An intro over 4 KB, and an envelope over the house's limit.
    let intro = envelope(&s.ana, "r5", &[&s.bo.address], |d| {
        d.kind = Kind::Intro;
        d.content = Content::new("text/plain", "x".repeat(5000).into());
    });
    assert_eq!(s.ana.send(&s.a, &intro).status, 413);
    let big = envelope(&s.ana, "r6", &[&s.bo.address], |d| {
        d.content = Content::new("text/plain", "x".repeat(1_100_000).into());
    });
    assert_eq!(s.ana.send(&s.a, &big).status, 413);

    // Tokens: replayed, for another path, host, method, query or body, none.
    let body = ok.canonical();
    let token = s.ana.token(&s.a, "POST", "/outbound", &body);
    let send = |t: &str| call_raw(&s.a, "POST", "/outbound", &[("authorization", t)], ok.canonical());
    assert_eq!(send(&token).status, 202);
    assert_eq!(send(&token).status, 200, "a replay is the same envelope again: \"exists\", nothing queued");
    assert_eq!(send(&s.ana.token(&s.a, "POST", "/mailbox/ana/ack", &body)).status, 401);
    assert_eq!(send(&s.ana.token(&s.b, "POST", "/outbound", &body)).status, 401);
    assert_eq!(send(&s.ana.token(&s.a, "GET", "/outbound", &body)).status, 401);
    assert_eq!(send(&s.ana.token(&s.a, "POST", "/outbound?x=1", &body)).status, 401);
    assert_eq!(send(&s.ana.token(&s.a, "POST", "/outbound", b"{}")).status, 401);
    assert_eq!(call_raw(&s.a, "POST", "/outbound", &[], ok.canonical()).status, 401);
    // An agent of another house cannot send through this one.
    let bo_env = s.bo.draft("r7", &[&s.ana.address], "x").sign(&s.bo.sig).unwrap();
    assert_eq!(s.bo.send(&s.a, &bo_env).status, 401);
    // Only r0 was queued.
    assert_eq!(outbox(&s.a, &s.ana).len(), 1);
    assert_eq!(job_count(&s.a, "pending"), 1);
}

#[test]
fn delegated_cards_send_only_within_scope() {
    let s = setup();
    let child = Agent::new("tester.ana@a.test", 30);
    let scope = Scope {
        types: Some(vec!["message".into()]),
        to_domains: Some(vec!["a.test".into()]),
        cap: None,
        authority: None,
    };
    let d = Delegation::sign(&s.ana.address, &child.address, &child.sig.public(), &scope, None, s.a.now(), &s.ana.sig)
        .unwrap();
    let reg = child.registration(&s.a, &[("delegation", d.to_value())]);
    assert_eq!(call(&s.a, "POST", "/agents", &[], &reg).status, 201);

    let home = child.draft("s1", &[&s.cy.address], "x").sign(&child.sig).unwrap();
    json(&child.send(&s.a, &home), 202);
    // Another domain, even together with an allowed one.
    let away = child.draft("s2", &[&s.cy.address, &s.bo.address], "x").sign(&child.sig).unwrap();
    assert_eq!(child.send(&s.a, &away).status, 403);
    // A type the delegation does not list.
    let task = envelope(&child, "s3", &[&s.cy.address], |d| d.kind = Kind::Task);
    assert_eq!(child.send(&s.a, &task).status, 403);
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.a, &s.cy)), ["s1"]);
}

#[test]
fn a_rate_limited_recipient_retries_alone() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut config = w.config("b.test", Registration::Admin);
    config.inbound_per_domain_per_minute = 2;
    let b = w.start(config);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    let dee = Agent::new("dee@b.test", 21);
    ana.register_admin(&a);
    bo.register_admin(&b);
    dee.register_admin(&b);
    for id in ["f1", "f2"] {
        json(&ana.send(&a, &signed(&ana, id, &[&bo.address], id)), 202);
    }
    assert_eq!(w.tick_all().delivered, 2);
    // bo's window from a.test is full; dee's is not.
    json(&ana.send(&a, &signed(&ana, "f3", &[&bo.address, &dee.address], "f3")), 202);
    let r = w.tick_all();
    assert_eq!((r.delivered, r.retried), (0, 1));
    assert_eq!(ids(&mailbox(&b, &dee)), ["f3"]);
    let j = &jobs(&a, &ana, "f3")[0];
    assert_eq!(j["state"].as_str(), Some("retrying"));
    assert_eq!(j["delivered"], Value::Array(vec!["dee@b.test".into()]));
    assert!(j["last_error"].as_str().unwrap().contains("429"));
    // The window passes: bo gets it, dee keeps one copy, nobody bounced.
    let mut delivered = 0;
    for _ in 0..120 {
        w.clock.advance(SECOND);
        delivered += w.tick_all().delivered;
        if delivered > 0 {
            break;
        }
    }
    assert_eq!(delivered, 1);
    assert_eq!(ids(&mailbox(&b, &bo)), ["f1", "f2", "f3"]);
    assert_eq!(ids(&mailbox(&b, &dee)), ["f3"]);
    assert!(mailbox(&a, &ana).is_empty());
    let j = &jobs(&a, &ana, "f3")[0];
    assert_eq!(j["state"].as_str(), Some("delivered"));
    assert_eq!(j["bounced"], Value::Array(vec![]));
}

#[test]
fn a_tick_takes_at_most_its_batch() {
    let w = World::new();
    let mut ca = w.config("a.test", Registration::Admin);
    ca.tick_batch = 2;
    let a = w.start(ca);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    ana.register_admin(&a);
    bo.register_admin(&b);
    for i in 0..5 {
        json(&ana.send(&a, &signed(&ana, &format!("b{i}"), &[&bo.address], "x")), 202);
    }
    let attempted: Vec<usize> = (0..4)
        .map(|i| {
            let r = block_on(a.tick()).unwrap().attempted;
            if i == 0 {
                // The three the first tick could not take were given back untried: no attempt
                // counted, nobody marked as maybe reached, due now for the scan.
                let rows = block_on(a.db.query(stmt!(
                    "SELECT count(*) AS n FROM jobs WHERE attempts = 0 AND result IS NULL AND lease_until = 0"
                )))
                .unwrap();
                assert_eq!(rows[0].int("n"), Some(3));
            }
            r
        })
        .collect();
    assert_eq!(attempted, [2, 2, 1, 0]);
    assert_eq!(mailbox(&b, &bo).len(), 5);
}

#[test]
fn an_envelope_over_the_destinations_limit_bounces_unsent() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut config = w.config("b.test", Registration::Admin);
    config.max_bytes = 2048;
    let b = w.start(config);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(bo.register_admin(&b).status, 201);
    let env = signed(&ana, "big", &[&bo.address], &"x".repeat(3000));
    json(&ana.send(&a, &env), 202);
    w.tick_all();
    // b.test's card says 2048 bytes: the queue bounces the envelope without posting it.
    assert_eq!(w.sent_to("b.test/inbound"), 0, "the envelope was sent over the card's max_bytes");
    let (state, _, attempts, last_error, _) = job_row(&a, "big");
    assert_eq!((state.as_str(), attempts), ("bounced", 1));
    assert!(last_error.unwrap().contains("b.test's limit of 2048"));
    let notices = mailbox(&a, &ana);
    assert_eq!(notices.len(), 1);
    let body = check_notice(&a, &notices[0], &env, "bounced");
    assert_eq!(body["code"].as_safe_integer(), Some(413));
    assert!(mailbox(&b, &bo).is_empty());

    // Exactly the card's 2048 bytes is within it: sent and delivered (`deliver_there`'s `>`).
    let base = signed(&ana, "fits", &[&bo.address], "").canonical().len();
    let fits = signed(&ana, "fits", &[&bo.address], &"x".repeat(2048 - base));
    assert_eq!(fits.canonical().len(), 2048);
    json(&ana.send(&a, &fits), 202);
    assert_eq!(w.tick_all().delivered, 1);
    assert_eq!(ids(&mailbox(&b, &bo)), ["fits"]);
}

#[test]
fn a_deferred_envelope_keeps_its_time_through_a_recovery_and_gives_up_from_it() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "0")), 202);
    s.w.tick_all();
    // b.test fails an attempt: it is marked failing.
    s.w.down("b.test", true);
    json(&s.ana.send(&s.a, &signed(&s.ana, "first", &[&s.bo.address], "1")), 202);
    assert_eq!(s.w.tick_all().attempted, 1);
    assert_eq!(health_rows(&s.a), 1);
    // An envelope for two days from now: its give-up time counts from then, not from its sending.
    let at = s.a.now().millis() + 2 * DAY;
    let env = envelope(&s.ana, "later", &[&s.bo.address], |d| d.deliver_after = Some(Timestamp(at)));
    json(&s.ana.send(&s.a, &env), 202);
    let deadline = |id: &str| {
        let rows = block_on(s.a.db.query(stmt!("SELECT deadline FROM jobs WHERE envelope_id = ?", id))).unwrap();
        rows[0].int("deadline").unwrap()
    };
    assert_eq!(deadline("later"), at + s.a.config.retry.give_up_after_ms);
    // b.test comes back: the probe delivers, the domain's waiting jobs become due, but the
    // deferred one keeps its time.
    s.w.down("b.test", false);
    let mut delivered = 0;
    for _ in 0..120 {
        delivered += s.w.tick_all().delivered;
        if delivered > 0 {
            break;
        }
        s.w.clock.advance(MINUTE);
    }
    assert_eq!(delivered, 1);
    assert_eq!(health_rows(&s.a), 0);
    assert_eq!(job_row(&s.a, "later").1, at, "a recovery moved a deferred job before its deliver_after");
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "first"]);
    assert_eq!(s.w.tick_all().attempted, 0);
}

#[test]
fn an_envelope_that_arrived_unanswered_is_not_bounced_when_it_expires() {
    // Found by the simulator (seed 119): an attempt arrived but its answer was lost; the
    // destination was then out of reach until the envelope expired, and the sender bounced what
    // had been delivered.
    let s = setup();
    // Warm: a.test knows b.test's card, so the next request to b.test is the delivery itself.
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "0")), 202);
    s.w.tick_all();
    let expires = Timestamp(s.a.now().millis() + 10 * MINUTE);
    let env = envelope(&s.ana, "brief", &[&s.bo.address], |d| d.expires = Some(expires));
    json(&s.ana.send(&s.a, &env), 202);
    s.w.lose_answers("b.test", 1);
    assert_eq!(s.w.tick_all().retried, 1);
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "brief"]);
    s.w.down("b.test", true);
    while s.a.now() <= expires {
        assert_eq!(s.w.tick_all().bounced, 0, "bounced while the first attempt's fate is unknown");
        s.w.clock.advance(MINUTE);
    }
    // Back: asked again past expiry, the destination says it holds it. Delivered, no bounce.
    s.w.down("b.test", false);
    s.w.clock.advance(2 * MINUTE);
    assert_eq!(s.w.tick_all().delivered, 1);
    assert!(mailbox(&s.a, &s.ana).is_empty(), "no bounce notice");
    assert_eq!(text(&jobs(&s.a, &s.ana, "brief")[0], "state"), "delivered");

    // (An attempt that surely never arrived — the host down — leaves the deadline as it was:
    // `expiry_in_the_queue_bounces_at_once`.)
}

/// The tick forgets what the authority keeps for a while: counts of money movements once their
/// hour has passed, and approvals a month after they were decided (with their approvers); a
/// count within its hour and an approval still waiting, or decided within the month, stay.
#[test]
fn the_tick_forgets_authority_counts_after_their_hour_and_decided_approvals_after_a_month() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let now = a.now().millis();
    let month = nyx5_house::libro::KEEP_DECIDED_MS;
    let hour = nyx5_proto::authority::HOUR_MS;
    let mut put = vec![
        stmt!(
            "INSERT INTO libro_uses (subject, at, envelope, amount) VALUES ('ana@a.test', ?, 'old', 1)",
            now - hour - 1
        ),
        stmt!(
            "INSERT INTO libro_uses (subject, at, envelope, amount) VALUES ('ana@a.test', ?, 'new', 1)",
            now - hour + MINUTE
        ),
    ];
    for (id, state, updated) in [
        ("gone", "approved", now - month - 1),
        ("kept", "declined", now - month + MINUTE),
        ("waits", "pending", now - 2 * month),
    ] {
        put.push(stmt!(
            "INSERT INTO libro_pending (id, operator, state, expires, created, updated, envelope, record)
             VALUES (?, 'ana@a.test', ?, ?, 0, ?, '{}', '{}')",
            id,
            state,
            now + month,
            updated
        ));
        put.push(stmt!("INSERT INTO libro_pending_approvers (pending, approver) VALUES (?, 'bo@a.test')", id));
    }
    block_on(a.db.batch(put)).unwrap();
    w.tick_all();
    let ids = |sql: &'static str| -> Vec<String> {
        block_on(a.db.query(stmt!(sql))).unwrap().iter().map(|r| r.text("id").unwrap().to_owned()).collect()
    };
    assert_eq!(ids("SELECT envelope AS id FROM libro_uses ORDER BY envelope"), ["new"]);
    assert_eq!(ids("SELECT id FROM libro_pending ORDER BY id"), ["kept", "waits"]);
    assert_eq!(ids("SELECT pending AS id FROM libro_pending_approvers ORDER BY pending"), ["kept", "waits"]);
}

/// A send counts in its root agent's minute of the clock from its own outbox row (`rate_n`, the
/// how-manyth of the minute), with no `rate_windows` row to rewrite (migration 0024): a row
/// written fewer per envelope on D1. Another agent counts in its own minute.
#[test]
fn a_send_counts_in_this_minutes_outbound_window() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "w1", &[&s.bo.address], "hi")), 202);
    json(&s.cy.send(&s.a, &signed(&s.cy, "w2", &[&s.bo.address], "hi")), 202);
    json(&s.ana.send(&s.a, &signed(&s.ana, "w3", &[&s.bo.address], "hi")), 202);
    let windows = block_on(s.a.db.query(stmt!("SELECT count(*) AS n FROM rate_windows"))).unwrap();
    assert_eq!(windows[0].int("n"), Some(0), "no window row is written");
    let rows =
        block_on(s.a.db.query(stmt!("SELECT envelope_id, rate_n, seq, created_at FROM outbox ORDER BY seq"))).unwrap();
    let counted: Vec<(String, i64)> =
        rows.iter().map(|r| (r.text("envelope_id").unwrap().to_owned(), r.int("rate_n").unwrap())).collect();
    assert_eq!(counted, [("w1".to_owned(), 1), ("w2".to_owned(), 1), ("w3".to_owned(), 2)]);
    // The key is in the order of time: the purge and the count read it by ranges.
    for r in &rows {
        assert!(r.int("seq").unwrap() >= r.int("created_at").unwrap() * nyx5_house::store::queue::SEQ_PER_MS);
    }
}

/// Issue 36 §1: an envelope queued for one destination changes two rows (its outbox row and its
/// job, inserted with its first attempt's lease; the token's nonce was a third until its
/// envelope's id served as the nonce, and a `rate_windows` row a fourth before migration 0024),
/// and the kick that delivers it one (the job's end; the lease was a second). D1 counts index
/// entries too: `schema::an_outbound_envelope_writes_its_rows_and_three_index_entries` holds
/// those, and docs/decisions/0070-a-send-takes-its-first-attempt.md has the figures.
#[test]
fn an_outbound_envelope_changes_two_rows_and_its_delivery_one() {
    let s = setup();
    // The first delivery to b.test also pins its key and caches its card.
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "hi")), 202);
    assert_eq!(block_on(s.a.tick()).unwrap().delivered, 1);
    let changes = || block_on(s.a.db.query(stmt!("SELECT total_changes() AS n"))).unwrap()[0].int("n").unwrap();
    for i in 0..3 {
        let before = changes();
        json(&s.ana.send(&s.a, &signed(&s.ana, &format!("c{i}"), &[&s.bo.address], "hi")), 202);
        assert_eq!(changes() - before, 2, "send {i}");
        let before = changes();
        assert_eq!(block_on(s.a.tick()).unwrap().delivered, 1);
        assert_eq!(changes() - before, 1, "delivery {i}");
    }
    assert_eq!(mailbox(&s.b, &s.bo).len(), 4);
}

/// Issue 35 §1: an attempt arrived but its answer was lost, and the destination then stayed out
/// of reach for the whole give-up time. The sender must not be told "not delivered" (it was):
/// the notice, the outbox and the job say "undetermined (it may have been delivered)", never
/// "bounced". A recipient of another job, that no attempt reached, still bounces.
#[test]
fn an_envelope_that_arrived_unanswered_and_then_got_no_answer_for_days_is_undetermined() {
    let s = setup();
    let far = Address::parse("far@c.test").unwrap();
    json(&s.ana.send(&s.a, &signed(&s.ana, "warm", &[&s.bo.address], "0")), 202);
    s.w.tick_all();
    let env = signed(&s.ana, "brief", &[&s.bo.address, &far], "hello");
    json(&s.ana.send(&s.a, &env), 202);
    s.w.lose_answers("b.test", 1);
    s.w.down("c.test", true);
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["warm", "brief"], "the first attempt arrived");
    let maybe = jobs(&s.a, &s.ana, "brief");
    assert_eq!(maybe[0]["maybe"], Value::Array(vec![s.bo.address.as_str().into()]), "{maybe:?}");
    s.w.down("b.test", true);
    for _ in 0..(73 * 4) {
        s.w.clock.advance(15 * MINUTE);
        s.w.tick_all();
    }
    assert_eq!(job_count(&s.a, "pending"), 0, "both jobs ended");
    let notices = mailbox(&s.a, &s.ana);
    let statuses: Vec<(String, Value)> = notices
        .iter()
        .map(|n| {
            let body = n.content().unwrap().body.as_object().unwrap().clone();
            (text(&body, "status"), body["recipients"].clone())
        })
        .collect();
    let bo = Value::Array(vec![s.bo.address.as_str().into()]);
    let far_list = Value::Array(vec![far.as_str().into()]);
    assert!(statuses.contains(&("undetermined".to_owned(), bo.clone())), "{statuses:?}");
    assert!(statuses.contains(&("bounced".to_owned(), far_list)), "{statuses:?}");
    assert!(!statuses.contains(&("bounced".to_owned(), bo)), "told bounced what was delivered: {statuses:?}");
    let notice =
        notices.iter().find(|n| n.content().unwrap().body.canonical_string().contains("undetermined")).unwrap();
    let body = check_notice(&s.a, notice, &env, "undetermined");
    assert!(text(&body, "reason").starts_with("undetermined (it may have been delivered)"), "{body:?}");
    let shown = jobs(&s.a, &s.ana, "brief");
    let b_job = shown.iter().find(|j| text(j, "domain") == "b.test").unwrap();
    assert_eq!(text(b_job, "state"), "undetermined", "{b_job:?}");
    assert_eq!(b_job["undetermined"], Value::Array(vec![s.bo.address.as_str().into()]));
    assert!(text(b_job, "reason").contains("it may have been delivered"), "{b_job:?}");
    let c_job = shown.iter().find(|j| text(j, "domain") == "c.test").unwrap();
    assert_eq!(text(c_job, "state"), "bounced", "{c_job:?}");
}

/// Issue 35 §4: a house whose clock ran more than a day ahead purged, from there, what it had
/// queued a week before that; set right, it took a resend of one of those envelopes (still
/// within the 6 days `created` may be old) and queued it a second time. It remembers how far
/// back it may have forgotten, and refuses what it cannot tell from new (400), while a fresh
/// envelope goes as ever.
#[test]
fn a_clock_that_ran_days_ahead_and_was_set_right_queues_nothing_twice() {
    let s = setup();
    let env = signed(&s.ana, "once", &[&s.bo.address], "hi");
    json(&s.ana.send(&s.a, &env), 202);
    assert_eq!(s.w.tick_all().delivered, 1);
    s.w.clock.advance(5 * DAY);
    let jump = 2 * DAY + HOUR;
    s.w.clock.advance(jump);
    s.w.tick_all();
    let held = block_on(s.a.db.query(stmt!("SELECT count(*) AS n FROM outbox WHERE envelope_id = 'once'"))).unwrap();
    assert_eq!(held[0].int("n"), Some(0), "the tick, a week on by its clock, forgot it");
    s.w.clock.advance(-jump);
    let again = s.ana.send(&s.a, &env);
    let v = json(&again, 400);
    assert_eq!(text(o(&v), "error"), "created_too_old", "{v:?}");
    // Refused for what the house may have forgotten, not for the envelope's age.
    assert!(text(o(&v), "reason").contains("may have forgotten"), "{v:?}");
    assert_eq!(job_count(&s.a, "pending"), 0, "nothing queued twice");
    // A new envelope, created now, goes.
    let fresh = s.ana.draft_at("fresh", &[&s.bo.address], "hi", s.a.now()).sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &fresh), 202);
}

/// Issue 35 §1: a tick whose clock ran days ahead died holding a job's lease; set right, the
/// lease (days ahead of any lease a tick takes) holds nothing, and the job goes at once rather
/// than days later.
#[test]
fn a_lease_taken_while_the_clock_ran_ahead_holds_nothing_once_it_is_set_right() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "held", &[&s.bo.address], "hi")), 202);
    // The send's process ended before its kick (the first attempt it took lapses like any).
    assert_eq!(s.a.drop_kick(), 1);
    let id = ("held", "b.test");
    let ahead = s.a.now().millis() + 3 * DAY;
    let taken = block_on(s.a.db.write_returning(lease(id, ahead, ahead + 120_000, None, None, None, None))).unwrap();
    assert_eq!(taken.len(), 1, "leased by a tick three days ahead, which then died");
    // Past the wait of the first attempt the send took (it counts as one that died).
    s.w.clock.advance(300 * SECOND);
    assert_eq!(s.w.tick_all().delivered, 1, "the job went now, not in three days");
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["held"]);
}

/// The forgetting horizon refuses only what the house may have forgotten: an envelope it still
/// holds (here deferred, so never purged) sent again past the horizon is "exists", as ever.
#[test]
fn an_envelope_still_held_past_the_forgetting_horizon_is_answered_exists() {
    let s = setup();
    let later = Timestamp(START + 20 * DAY);
    let env = envelope(&s.ana, "deferred", &[&s.bo.address], |d| d.deliver_after = Some(later));
    json(&s.ana.send(&s.a, &env), 202);
    let jump = 9 * DAY;
    s.w.clock.advance(jump);
    s.w.tick_all();
    s.w.clock.advance(-jump + DAY);
    let again = json(&s.ana.send(&s.a, &env), 200);
    assert_eq!(o(&again)["exists"], Value::Bool(true), "{again:?}");
    assert_eq!(job_count(&s.a, "pending"), 1);
}

/// The tick's purges run once a minute per process, not at every kick; each purge is capped
/// (100 rows). A purge that removed its whole cap keeps the upkeep due at the next tick, so the
/// purges keep up with any traffic (hostile review of issue 35, M2: 300 bodies acknowledged past
/// their week were dropped at 100 a minute).
#[test]
fn purges_that_left_a_backlog_carry_on_at_the_next_tick() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 1);
    assert_eq!(ana.register_admin(&a).status, 201);
    let q = |s: nyx5_house::ports::Stmt| block_on(a.db.query(s)).unwrap();
    let mbox = q(stmt!("SELECT mbox FROM agents WHERE local = 'ana'"))[0].int("mbox").unwrap();
    let old = w.clock.now().millis() - 8 * DAY;
    let mut stmts: Vec<_> = (1..=300_i64)
        .map(|i| {
            stmt!(
                "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at, bytes)
                 VALUES (?, 'ana', ?, 'x@b.test', 'body', ?, 4)",
                (mbox << 30) + 1000 + i,
                format!("m{i}"),
                old
            )
        })
        .collect();
    stmts.push(stmt!("UPDATE mailbox SET seq = -seq, acked_at = ? WHERE local = 'ana' AND seq > 0", old));
    block_on(a.db.batch(stmts)).unwrap();
    let left = || q(stmt!("SELECT count(*) AS n FROM mailbox WHERE acked_at IS NOT NULL AND bytes != 0"))[0].int("n");
    assert_eq!(left(), Some(300));
    // Ticks a second apart, as `nyx5 serve` runs them by default, all within one minute.
    for _ in 0..5 {
        block_on(a.tick()).unwrap();
        w.clock.advance(SECOND);
    }
    assert_eq!(left(), Some(0), "every body past its week is dropped within the minute");
    // With nothing left behind, the next ticks of the minute purge nothing more (their batch
    // is not even run): a body acknowledged past its week now waits for the next minute.
    let before = a.db.calls();
    block_on(a.tick()).unwrap();
    let idle = a.db.calls() - before;
    w.clock.advance(nyx5_house::queue::UPKEEP_EVERY_MS);
    let before = a.db.calls();
    block_on(a.tick()).unwrap();
    // The next minute's first tick runs the purge batch and the minute's upkeep (pins without a
    // site, the Libro's dues, bonds and approvals: a read each); the others only deliver.
    assert_eq!(idle, 1, "a tick within the minute reads what is due, and nothing else");
    assert_eq!(a.db.calls() - before, idle + 5, "the next minute's first tick runs the purge batch and the upkeep");
}

/// The minute's upkeep runs before the deliveries, so deliveries that fail (or hang until the
/// runtime ends the invocation) cannot starve it; and a part of it that took a whole batch runs
/// again at the next tick of the same minute rather than the next minute (hostile review of
/// issue 36, M1). Here: 100 pins made before their site was recorded, 64 a turn.
#[test]
fn the_minutes_upkeep_runs_before_the_deliveries_and_catches_up_within_its_minute() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let pins: Vec<_> = (0..100)
        .map(|i| stmt!("INSERT INTO pins (domain, sig, first_seen) VALUES (?, 'k', 0)", format!("p{i}.example")))
        .collect();
    block_on(a.db.batch(pins)).unwrap();
    let unsited = || {
        block_on(a.db.query(stmt!("SELECT count(*) AS n FROM pins WHERE site IS NULL"))).unwrap()[0].int("n").unwrap()
    };
    assert_eq!(unsited(), 100);
    // The deliveries fail at their first read: the upkeep has run all the same.
    a.db.fail_read(nyx5_house::store::queue::DUE_SQL, 0);
    assert!(block_on(a.tick()).is_err(), "the tick fails at its deliveries");
    assert_eq!(unsited(), 100 - nyx5_house::store::resolver::PIN_SITES_PER_TICK);
    // Within the same minute, the next tick carries on where the full batch stopped...
    w.clock.advance(SECOND);
    block_on(a.tick()).unwrap();
    assert_eq!(unsited(), 0);
    // ...and with nothing left behind, the one after reads only what is due.
    w.clock.advance(SECOND);
    let before = a.db.calls();
    block_on(a.tick()).unwrap();
    assert_eq!(a.db.calls() - before, 1);
}

/// A clock that ran ahead once (a year, for one send) and was set right drags no later row after
/// it: each outbox `seq` lies in its own millisecond's slots, so the envelopes sent afterwards
/// are forgotten a week after they end, as every other (found by the hostile review of issue
/// 36: every later row took the high `seq` plus one, and the purge, which reads the key by time,
/// kept them for the year).
#[test]
fn a_clock_that_ran_ahead_once_keeps_no_later_envelope_past_its_week() {
    let s = setup();
    let jump = 365 * DAY;
    s.w.clock.advance(jump);
    let ahead = s.ana.draft_at("ahead", &[&s.bo.address], "hi", s.a.now()).sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &ahead), 202);
    s.w.clock.advance(-jump);
    for i in 0..5 {
        let env = s.ana.draft_at(&format!("later{i}"), &[&s.bo.address], "hi", s.a.now()).sign(&s.ana.sig).unwrap();
        json(&s.ana.send(&s.a, &env), 202);
    }
    assert_eq!(s.w.tick_all().delivered, 5);
    let seqs =
        block_on(s.a.db.query(stmt!("SELECT seq, created_at FROM outbox WHERE envelope_id LIKE 'later%'"))).unwrap();
    for r in &seqs {
        let (seq, created) = (r.int("seq").unwrap(), r.int("created_at").unwrap());
        assert_eq!(seq / nyx5_house::store::queue::SEQ_PER_MS, created, "a seq in its own millisecond's slots");
    }
    for _ in 0..30 {
        s.w.clock.advance(DAY);
        s.w.tick_all();
    }
    let left = block_on(s.a.db.query(stmt!("SELECT count(*) AS n FROM outbox WHERE envelope_id LIKE 'later%'")))
        .unwrap()[0]
        .int("n")
        .unwrap();
    assert_eq!(left, 0, "envelopes delivered a month ago are still in the outbox");
}

/// Hostile review (move in steps, HIGH 2): the tick steps the mailbox moves under way after its
/// deliveries, so a step that uses up the invocation's queries (D1's 50 on the Free plan) never
/// leaves the queue delivering nothing.
#[test]
fn a_move_step_past_the_query_budget_does_not_starve_the_deliveries() {
    let s = setup();
    let env = s.ana.seal(s.ana.draft("e1", &[&s.bo.address], "hi"), &[&s.bo]);
    json(&s.ana.send(&s.a, &env), 202);
    s.a.db.moves_exhaust_the_budget(true);
    let r = kit::block_on(s.a.tick());
    s.a.db.refill();
    s.a.db.moves_exhaust_the_budget(false);
    eprintln!("the tick with a move past the budget: {r:?}");
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["e1"], "delivered before the move's step");
    assert!(r.unwrap().settle_error.is_some_and(|e| e.contains("Too many")), "the move's failure reported");
}

/// A tick whose deliveries fail early leaves its minute undone: the next tick, within the same
/// minute, runs the minute's upkeep again and with it the step of the mailbox moves, which
/// comes after the deliveries (the second hostile review of moves in steps: a destination that
/// failed every minute starved the moves).
#[test]
fn a_tick_whose_deliveries_failed_leaves_the_moves_step_to_the_next() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    a.db.fail_read(nyx5_house::store::queue::DUE_SQL, 0);
    assert!(block_on(a.tick()).is_err(), "the tick fails at its deliveries");
    // The next tick, a second later: the moves' step runs (here it spends the budget, and says so).
    w.clock.advance(SECOND);
    a.db.moves_exhaust_the_budget(true);
    let r = block_on(a.tick());
    a.db.refill();
    a.db.moves_exhaust_the_budget(false);
    let stepped = r.is_ok_and(|r| r.settle_error.is_some_and(|e| e.contains("Too many")));
    assert!(stepped, "the moves' step ran in the next tick");
}

/// A tick works the jobs sends took in the same turns as the due scan's query orders the rest
/// (`nyx5_rules::queue::fair_order`, issue 36): over jobs of several domains, senders (a
/// subagent under its root), times and attempts, the function and the query agree.
#[test]
fn the_tick_orders_turns_as_the_due_scan_does() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    block_on(a.db.query(stmt!("PRAGMA foreign_keys = OFF"))).unwrap();
    let senders = ["ana@a.test", "x.ana@a.test", "bo@a.test", "cy@a.test"];
    let domains = ["b.test", "c.test", "d.test"];
    let mut seed = 7_u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut stmts = Vec::new();
    for id in 1..=60_i64 {
        // Even ids are sent by ana's tree, odd by bo or cy: the pair of one `seq` has two roots.
        let sender = senders[(id % 2 * 2) as usize + next(2) as usize];
        let domain = domains[next(3) as usize];
        let (due, attempts) = (i64::try_from(next(20)).unwrap(), i64::try_from(next(3)).unwrap());
        let env = format!("e{id}");
        // Two roots' envelopes may share a `seq` (and so a `made`): the envelope's id orders them.
        let seq = id / 2;
        stmts.push(stmt!(
            "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, created_at)
             VALUES (?, ?, ?, ?, '{}', '', 0)",
            nyx5_house::store::queue::root_address(sender),
            seq,
            env.clone(),
            sender
        ));
        stmts.push(stmt!(
            "INSERT INTO jobs (made, envelope_id, domain, recipients, state, attempts, next_attempt, not_before, deadline, created_at)
             VALUES (?, ?, ?, '[]', 'pending', ?, ?, 0, 1000, 0)",
            seq * 256,
            env,
            domain,
            attempts,
            due
        ));
    }
    block_on(a.db.batch(stmts)).unwrap();
    let rows = block_on(nyx5_house::store::queue::due(&a.db, 100, 100)).unwrap();
    assert_eq!(rows.len(), 60);
    let roots: Vec<String> = rows.iter().map(|r| r.text("root").unwrap().to_owned()).collect();
    assert!(roots.iter().all(|r| !r.starts_with("x.")), "a subagent counts under its root");
    let places: Vec<nyx5_rules::queue::Place<'_>> = rows
        .iter()
        .zip(&roots)
        .map(|(r, root)| nyx5_rules::queue::Place {
            domain: r.text("domain").unwrap(),
            root,
            next_attempt: r.int("next_attempt").unwrap(),
            made: r.int("made").unwrap(),
            envelope_id: r.text("envelope_id").unwrap(),
            attempts: r.int("attempts").unwrap(),
        })
        .collect();
    // The rows come in the query's order; the function, given them shuffled, puts them back.
    let mut shuffled: Vec<usize> = (0..places.len()).collect();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, next(i as u64 + 1) as usize);
    }
    let given: Vec<_> = shuffled.iter().map(|&i| places[i]).collect();
    let ordered: Vec<&str> = nyx5_rules::queue::fair_order(&given).into_iter().map(|i| given[i].envelope_id).collect();
    let queried: Vec<&str> = places.iter().map(|p| p.envelope_id).collect();
    assert_eq!(ordered, queried);
}

/// A kick that comes after half its send's lease (a process busy elsewhere) does not attempt the
/// job under that lease: it gives the first attempt back untried before its scan, which then
/// finds the job due as one never tried. Here the destination is down: the job ends the tick
/// with the one attempt it really had, and nobody is marked as maybe reached (the send's mark
/// would have made a later failure "undetermined"; hostile review of decision 0070).
#[test]
fn a_kick_that_comes_late_gives_the_sends_attempt_back_untried() {
    let s = setup();
    json(&s.ana.send(&s.a, &signed(&s.ana, "late", &[&s.bo.address], "hi")), 202);
    let leased = job_row(&s.a, "late");
    assert_eq!((leased.2, leased.4 > 0), (1, true), "the send took the first attempt");
    s.w.clock.advance(nyx5_house::queue::LEASE_MS / 2);
    s.w.down("b.test", true);
    assert_eq!(block_on(s.a.tick()).unwrap().attempted, 1);
    let after = job_row(&s.a, "late");
    assert_eq!((after.0.as_str(), after.2), ("pending", 1), "one attempt, the one made");
    let result = block_on(s.a.db.query(stmt!("SELECT result FROM jobs WHERE envelope_id = 'late'"))).unwrap();
    let progress = nyx5_house::queue::Progress::parse(result[0].text("result"));
    assert!(progress.maybe.is_empty(), "nobody marked as maybe reached: {progress:?}");
}
