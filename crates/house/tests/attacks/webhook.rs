//! Issue 10 §4: the webhook is the owner's, visibly.
//!
//! Against `f847391` the stored webhook was `coalesce(new, old)`: an update could set it but
//! never clear it (`webhook: null` read as "keep"), a key rotation carried it forward, and no
//! route showed it. A thief who held the key once and set a webhook kept receiving every new
//! envelope after the owner rotated the key away, and the owner could neither see nor remove
//! it. Now `null` clears it, a new key clears what the update does not set again, and the owner
//! reads it at `GET /agents/:local/settings`.

use nyx5_house::Request;
use nyx5_house::mailbox::{MAX_PENDING_PUSHES, MAX_PUSHES_PER_WEBHOOK};
use nyx5_house::ports::OutResponse;
use nyx5_proto::json::Object;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Envelope, Value, limits};

use crate::common::*;
use crate::kit::*;

const THIEF: &str = "http://thief.test/loot";
const OWNER: &str = "http://owner.test/ana";

/// Two houses; ana lives at b.test (`extra` in her first registration), alice writes from a.test;
/// both webhook hosts answer 200.
fn world(extra: &[(&str, Value)]) -> (World, std::rc::Rc<TestHouse>, std::rc::Rc<TestHouse>, Agent, Agent) {
    let (w, a, b) = two_houses();
    for host in ["thief.test", "owner.test"] {
        w.fake(host, |_| OutResponse { status: 200, body: vec![] });
    }
    let alice = Agent::new("alice@a.test", 10);
    let ana = Agent::new("ana@b.test", 20);
    json(&enrol(&a, &alice, &[]), 201);
    json(&enrol(&b, &ana, extra), 201);
    (w, a, b, alice, ana)
}

/// alice writes to ana; the envelope is accepted into ana's mailbox.
fn mail(a: &TestHouse, b: &TestHouse, alice: &Agent, ana: &Agent, id: &str) {
    json(&deliver(a, b, &envelope(alice, id, &[&ana.address], |_| {})), 202);
}

/// ana's settings as `who` (a token by its key) reads them.
fn settings(b: &TestHouse, who: &Agent) -> Object {
    json(&who.get(b, "/agents/ana/settings"), 200).as_object().unwrap().clone()
}

#[test]
fn a_webhook_set_with_a_stolen_key_is_cleared_by_null() {
    let (w, a, b, alice, ana) = world(&[]);
    // The thief holds ana's current key: to the house it is ana.
    json(&register_by(&b, &ana, &ana, &[("webhook", THIEF.into())]), 200);
    mail(&a, &b, &alice, &ana, "m1");
    assert_eq!(w.sent_to("thief.test"), 1);
    // The owner sees it, and clears it with `null` (before, `null` read as "keep it").
    assert_eq!(settings(&b, &ana)["webhook"].as_str(), Some(THIEF));
    json(&register_by(&b, &ana, &ana, &[("webhook", Value::Null)]), 200);
    assert_eq!(settings(&b, &ana)["webhook"], Value::Null);
    mail(&a, &b, &alice, &ana, "m2");
    mail(&a, &b, &alice, &ana, "m3");
    assert_eq!(w.sent_to("thief.test"), 1, "no push after the owner cleared the webhook");
    assert_eq!(mailbox(&b, &ana).len(), 3, "the mail itself still arrives");
    // A webhook that is neither a URL nor null is refused and changes nothing.
    refused(&register_by(&b, &ana, &ana, &[("webhook", 5.into())]), 400);
    assert_eq!(settings(&b, &ana)["webhook"], Value::Null);
}

#[test]
fn a_rotation_that_does_not_set_the_webhook_stops_the_old_one() {
    let (w, a, b, alice, old) = world(&[("webhook", THIEF.into())]);
    mail(&a, &b, &alice, &old, "m1");
    assert_eq!(w.sent_to("thief.test"), 1);
    // The owner rotates away from the leaked key without naming a webhook.
    let new = Agent::new("ana@b.test", 21);
    json(&register_by(&b, &old, &new, &[]), 200);
    assert_eq!(settings(&b, &new)["webhook"], Value::Null);
    mail(&a, &b, &alice, &new, "m2");
    assert_eq!(w.sent_to("thief.test"), 1, "the thief's webhook did not outlive the rotation");
    // A rotation that names a webhook sets that one.
    let next = Agent::new("ana@b.test", 22);
    json(&register_by(&b, &new, &next, &[("webhook", OWNER.into())]), 200);
    mail(&a, &b, &alice, &next, "m3");
    assert_eq!((w.sent_to("owner.test"), w.sent_to("thief.test")), (1, 1));
    // The operator's rotation (a new key, no reset) clears it the same way.
    let fourth = Agent::new("ana@b.test", 23);
    json(&enrol(&b, &fourth, &[]), 200);
    mail(&a, &b, &alice, &fourth, "m4");
    assert_eq!((w.sent_to("owner.test"), w.sent_to("thief.test")), (1, 1));
    assert_eq!(mailbox(&b, &fourth).len(), 4);
}

#[test]
fn an_update_by_the_same_key_without_webhook_keeps_it() {
    let (w, a, b, alice, ana) = world(&[("webhook", OWNER.into())]);
    let about = Value::Object(nyx5_proto::json::obj([("description", "Plans trips".into())]));
    // The owner's update and the operator's, both with ana's current key and no `webhook`.
    json(&register_by(&b, &ana, &ana, &[("capabilities", about)]), 200);
    assert_eq!(served_card(&b, "ana").capabilities()["description"].as_str(), Some("Plans trips"));
    assert_eq!(settings(&b, &ana)["webhook"].as_str(), Some(OWNER));
    json(&enrol(&b, &ana, &[]), 200);
    assert_eq!(settings(&b, &ana)["webhook"].as_str(), Some(OWNER));
    mail(&a, &b, &alice, &ana, "m1");
    assert_eq!(w.sent_to("owner.test"), 1);
}

#[test]
fn settings_are_shown_to_the_owner_and_refused_to_everyone_else() {
    let (w, a, b, alice, old) = world(&[("webhook", THIEF.into())]);
    let carol = Agent::new("carol@b.test", 30);
    json(&enrol(&b, &carol, &[]), 201);
    let lists = Value::parse_str(r#"{"allow":{"add":["a.test"]},"block":{"add":["@evil.test","x@c.test"]}}"#).unwrap();
    json(&old.post(&b, "/lists/ana", &lists), 200);

    // The owner sees the webhook, the lists and the quotas that apply.
    let s = settings(&b, &old);
    assert_eq!(s["address"].as_str(), Some("ana@b.test"));
    assert_eq!(s["webhook"].as_str(), Some(THIEF));
    assert_eq!(s["lists"].canonical_string(), r#"{"allow":["a.test"],"block":["evil.test","x@c.test"]}"#);
    let quotas = s["quotas"].as_object().unwrap();
    assert_eq!(quotas["max_envelope_bytes"].as_safe_integer(), Some(limits::MAX_ENVELOPE_BYTES as i64));
    assert_eq!(quotas["inbound_per_domain_per_minute"].as_safe_integer(), Some(120));
    // The card never shows it.
    let card = call_raw(&b, "GET", "/agents/ana", &[], vec![]);
    assert!(!String::from_utf8_lossy(&card.body).contains("thief.test"));

    // Nobody else: no token (401), another agent of the house (403), an agent of another house
    // (401: a house authenticates only its own agents).
    assert_eq!(call_raw(&b, "GET", "/agents/ana/settings", &[], vec![]).status, 401);
    let (name, why) = refused_as(&carol.get(&b, "/agents/ana/settings"), 403);
    assert_eq!(name, "not_the_owner", "{why}");
    refused(&alice.get(&b, "/agents/ana/settings"), 401);
    // A token for another agent's path does not open this one either.
    let token = carol.token(&b, "GET", "/agents/carol/settings", &[]);
    assert_eq!(call_raw(&b, "GET", "/agents/ana/settings", &[("authorization", &token)], vec![]).status, 401);

    // After a rotation the replaced key, still in its grace, reads the mailbox but not this.
    let new = Agent::new("ana@b.test", 21);
    json(&register_by(&b, &old, &new, &[("webhook", OWNER.into())]), 200);
    mail(&a, &b, &alice, &new, "m1");
    assert_eq!(mailbox(&b, &old).len(), 1, "the previous key is in its grace");
    let (name, why) = refused_as(&old.get(&b, "/agents/ana/settings"), 403);
    assert_eq!(name, "needs_current_key", "{why}");
    assert_eq!(settings(&b, &new)["webhook"].as_str(), Some(OWNER));
    assert_eq!(w.sent_to("thief.test"), 0);

    // The operator reads them too; an unknown agent is 404; other methods 405.
    let by_operator = json(&call_raw(&b, "GET", "/agents/ana/settings", &[("authorization", &admin(&b))], vec![]), 200);
    assert_eq!(by_operator.as_object().unwrap()["webhook"].as_str(), Some(OWNER));
    refused(&call_raw(&b, "GET", "/agents/nobody/settings", &[("authorization", &admin(&b))], vec![]), 404);
    refused(&call_raw(&b, "POST", "/agents/ana/settings", &[("authorization", &admin(&b))], vec![]), 405);
}

/// `env` relayed from `from` to `to` as a request, handed to the house without sending the
/// pushes it queues (the adapters send them once the answer is out).
fn relayed(from: &TestHouse, to: &TestHouse, env: &Envelope) -> Request {
    let header = RelayHeader::sign(&from.config.domain, env, &to.config.domain, &from.config.key).to_header();
    Request::new("POST", "/inbound", vec![("x-nyx5-relay".into(), header)], env.canonical())
}

/// Pushes wait in the process until the answer is out, so strangers' mail cannot grow them
/// without bound: at most `MAX_PUSHES_PER_WEBHOOK` for one webhook, and `MAX_PENDING_PUSHES`
/// in all; the rest are dropped and the mailbox keeps every envelope. `has_pushes` tells the
/// adapters whether there is anything to send. Kills `push`'s two `<` → `<=` and `==` → `!=`,
/// and `has_pushes` → `true`/`false`, `delete !`.
#[test]
fn pushes_waiting_to_be_sent_are_bounded() {
    let (w, a, b, alice, ana) = world(&[("webhook", OWNER.into())]);
    let n = MAX_PUSHES_PER_WEBHOOK + 4;
    assert!(!b.mailbox().has_pushes());
    for i in 0..n {
        let env = envelope(&alice, &format!("p{i}"), &[&ana.address], |_| {});
        assert_eq!(block_on(b.handle(relayed(&a, &b, &env))).status, 202);
        assert!(b.mailbox().has_pushes());
    }
    block_on(b.mailbox().send_pushes());
    assert!(!b.mailbox().has_pushes());
    assert_eq!(w.sent_to("owner.test"), MAX_PUSHES_PER_WEBHOOK, "one webhook's pushes are bounded");
    assert_eq!(mailbox(&b, &ana).len(), n);

    // In all: 16 agents with a webhook each fill the 256 places; the 17th agent's push is
    // dropped, while the first agent's webhook, another URL, was not counted against it.
    let hooks = MAX_PENDING_PUSHES / MAX_PUSHES_PER_WEBHOOK;
    let agents: Vec<Agent> = (0..=hooks)
        .map(|i| {
            let agent = Agent::new(&format!("hook{i}@b.test"), 40 + u8::try_from(i).unwrap());
            w.fake(&format!("hook{i}.test"), |_| OutResponse { status: 200, body: vec![] });
            json(&enrol(&b, &agent, &[("webhook", format!("http://hook{i}.test/").into())]), 201);
            agent
        })
        .collect();
    for (i, agent) in agents.iter().enumerate() {
        let per = if i < hooks { MAX_PUSHES_PER_WEBHOOK } else { 1 };
        for j in 0..per {
            let env = envelope(&alice, &format!("h{i}-{j}"), &[&agent.address], |_| {});
            assert_eq!(block_on(b.handle(relayed(&a, &b, &env))).status, 202);
        }
    }
    block_on(b.mailbox().send_pushes());
    for i in 0..hooks {
        assert_eq!(w.sent_to(&format!("hook{i}.test")), MAX_PUSHES_PER_WEBHOOK, "hook{i}");
    }
    assert_eq!(w.sent_to(&format!("hook{hooks}.test")), 0, "past the bound in all");
    assert_eq!(mailbox(&b, &agents[hooks]).len(), 1);
}
