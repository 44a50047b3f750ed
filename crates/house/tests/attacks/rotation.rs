//! §1 Rotating a key revokes it: a previous key in its grace period reads and acks the mailbox
//! and does nothing else; owners and the operator can drop previous keys, the operator can reset.

use nyx5_house::Registration;
use nyx5_house::http::Response;
use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_proto::Value;
use nyx5_proto::json::obj;

use crate::common::{admin, refused, refused_as, register, register_by, served_card};
use crate::kit::*;

const HOOK: &str = "https://hook.test/ana";

/// ana registers with `old` (and a webhook), then the owner rotates to `new` with a token by `old`
/// (naming the webhook again: a rotation clears one it does not set).
fn rotated(w: &World) -> (std::rc::Rc<TestHouse>, Agent, Agent) {
    let h = w.house("a.test", Registration::Open);
    let old = Agent::new("ana@a.test", 10);
    json(&register(&h, &old, &[], &[("webhook", HOOK.into())]), 201);
    let new = Agent::new("ana@a.test", 11);
    json(&register_by(&h, &old, &new, &[("webhook", HOOK.into())]), 200);
    (h, old, new)
}

fn webhook(h: &TestHouse) -> Option<String> {
    block_on(h.db.query(stmt!("SELECT webhook FROM agents WHERE local = 'ana'"))).unwrap()[0]
        .text("webhook")
        .map(str::to_owned)
}

fn needs_current_key(resp: &Response) {
    let (name, why) = refused_as(resp, 403);
    assert_eq!(name, "needs_current_key", "{why}");
}

#[test]
fn thief_with_rotated_out_key_cannot_update_card() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    let thief = Agent::new("ana@a.test", 66);
    // The thief holds `old`: a token by it, a body for the thief's own key, or for `old` again.
    for body_key in [&thief, &old] {
        needs_current_key(&register_by(&h, &old, body_key, &[("webhook", "https://evil.test".into())]));
    }
    let card = served_card(&h, "ana");
    assert_eq!(card.sig(), new.sig.public());
    assert_eq!(webhook(&h).as_deref(), Some(HOOK));
    // The owner's current key still updates.
    json(&register_by(&h, &new, &new, &[]), 200);
}

#[test]
fn thief_with_rotated_out_key_cannot_change_lists_or_read_outbox() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    let block = Value::Object(obj([("block", Value::Object(obj([("add", Value::Array(vec!["b.test".into()]))])))]));
    needs_current_key(&old.post(&h, "/lists/ana", &block));
    needs_current_key(&old.get(&h, "/lists/ana"));
    needs_current_key(&old.get(&h, "/outbox/ana"));
    let lists = json(&new.get(&h, "/lists/ana"), 200);
    assert!(lists.canonical_string().contains("\"block\":[]"), "{}", lists.canonical_string());
}

#[test]
fn thief_with_rotated_out_key_cannot_send() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    // An envelope signed by the old key (still valid for envelopes made before the rotation).
    let env = old.draft("stolen-1", &[&new.address], "wire the money").sign(&old.sig).unwrap();
    needs_current_key(&old.send(&h, &env));
    let mail = Value::Object(obj([("to", "boss@example.com".into()), ("body", "hi".into())]));
    needs_current_key(&old.post(&h, "/email/out", &mail));
    let n = block_on(h.db.query(stmt!("SELECT count(*) AS n FROM outbox"))).unwrap()[0].int("n");
    assert_eq!(n, Some(0));
}

#[test]
fn thief_rotating_again_and_again_cannot_push_the_owners_key_out() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    // Today's attack: each rotation by the old key puts the owner's key in `previous`, nine of
    // them push it out. Every one is refused now.
    for i in 0..9u8 {
        let next = Agent::new("ana@a.test", 100 + i);
        needs_current_key(&register_by(&h, &old, &next, &[]));
    }
    let card = served_card(&h, "ana");
    assert_eq!(card.sig(), new.sig.public());
    assert_eq!(card.previous().len(), 1);
    assert_eq!(card.previous()[0].sig, old.sig.public());
}

#[test]
fn old_key_still_reads_and_acks_the_mailbox_within_grace_only() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    let env = new.draft("e1", &[&new.address], "hi").sign(&new.sig).unwrap();
    let text = env.to_value().canonical_string();
    block_on(h.db.batch(vec![nyx5_house::store::libro::deliver_local("ana", "e1", "ana@a.test", &text, 0, "[]")]))
        .unwrap();
    assert_eq!(mailbox(&h, &old).len(), 1);
    let ack = Value::Object(obj([("ids", Value::Array(vec!["e1".into()]))]));
    let v = json(&old.post(&h, "/mailbox/ana/ack", &ack), 200);
    assert_eq!(v.as_object().unwrap()["acked"].as_safe_integer(), Some(1));
    // After the grace period the old key reads nothing.
    w.clock.advance(7 * DAY + 1);
    assert_eq!(old.get(&h, "/mailbox/ana").status, 401);
    assert_eq!(new.get(&h, "/mailbox/ana").status, 200);
}

#[test]
fn operator_reset_leaves_no_previous_key_and_no_webhook() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    let fresh = Agent::new("ana@a.test", 12);
    // Only the operator resets.
    let (name, why) = refused_as(&register_by(&h, &new, &fresh, &[("reset", Value::Bool(true))]), 403);
    assert_eq!(name, "operator_only", "{why}");
    w.clock.advance(MINUTE);
    let v = json(&register(&h, &fresh, &[("authorization", &admin(&h))], &[("reset", Value::Bool(true))]), 200);
    let card = v.as_object().unwrap()["card"].as_object().unwrap();
    assert_eq!(card["previous"], Value::Array(vec![]));
    assert_eq!(card["valid_from"].as_str(), Some(h.now().to_rfc3339().as_str()));
    assert_eq!(webhook(&h), None);
    // Neither the stolen key nor the one the reset replaced reads anything now.
    assert_eq!(old.get(&h, "/mailbox/ana").status, 401);
    assert_eq!(new.get(&h, "/mailbox/ana").status, 401);
    assert_eq!(fresh.get(&h, "/mailbox/ana").status, 200);
    // A plain operator update still carries previous keys forward.
    let next = Agent::new("ana@a.test", 13);
    let v = json(&register(&h, &next, &[("authorization", &admin(&h))], &[]), 200);
    let previous = v.as_object().unwrap()["card"].as_object().unwrap()["previous"].as_array().unwrap().len();
    assert_eq!(previous, 1);
    assert_eq!(fresh.get(&h, "/mailbox/ana").status, 200);
}

#[test]
fn owner_and_operator_drop_named_previous_keys() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    // A key the card does not list is a 400, whoever asks.
    let stranger = Agent::new("x@a.test", 50).sig.public().to_b64();
    let drop = |keys: &[String]| Value::Array(keys.iter().map(|k| Value::from(k.as_str())).collect());
    refused(&register_by(&h, &new, &new, &[("drop_previous", drop(std::slice::from_ref(&stranger)))]), 400);
    refused(&register(&h, &new, &[("authorization", &admin(&h))], &[("drop_previous", drop(&[stranger]))]), 400);
    assert_eq!(served_card(&h, "ana").previous().len(), 1);
    // The owner drops the stolen key at once.
    let v = json(&register_by(&h, &new, &new, &[("drop_previous", drop(&[old.sig.public().to_b64()]))]), 200);
    assert_eq!(v.as_object().unwrap()["card"].as_object().unwrap()["previous"], Value::Array(vec![]));
    assert_eq!(old.get(&h, "/mailbox/ana").status, 401);
    // Rotating and dropping the replaced key in one request (a key known to be stolen); here by
    // the operator.
    let next = Agent::new("ana@a.test", 14);
    let v = json(
        &register(
            &h,
            &next,
            &[("authorization", &admin(&h))],
            &[("drop_previous", drop(&[new.sig.public().to_b64()]))],
        ),
        200,
    );
    assert_eq!(v.as_object().unwrap()["card"].as_object().unwrap()["previous"], Value::Array(vec![]));
    assert_eq!(new.get(&h, "/mailbox/ana").status, 401);
    assert_eq!(next.get(&h, "/mailbox/ana").status, 200);
}

#[test]
fn previous_keys_past_their_grace_are_not_carried_forward() {
    let w = World::new();
    let (h, old, new) = rotated(&w);
    // Exactly at `until` the grace is over (a key counts while now < until).
    w.clock.advance(7 * DAY);
    let v = json(&register_by(&h, &new, &new, &[]), 200);
    assert_eq!(v.as_object().unwrap()["card"].as_object().unwrap()["previous"], Value::Array(vec![]));
    // Nor does a key past its grace come back through a rotation to it.
    let v = json(&register_by(&h, &new, &old, &[]), 200);
    let previous = v.as_object().unwrap()["card"].as_object().unwrap()["previous"].as_array().unwrap().len();
    assert_eq!(previous, 1);
    assert_eq!(served_card(&h, "ana").previous()[0].sig, new.sig.public());
}
