//! §4 of issue 9: what is signed is bound to what it authorizes.
//!
//! Against `712cee6`: a proof of work covered only `<id>:<nonce>`, so one proof opened every `pow`
//! mailbox for any envelope with that id, and such mail skipped the rate limit; a relay header
//! covered `relay:<id>:<destination>`, so it carried any envelope under that id; and an agent's
//! token bound neither the body nor the query, so a leaked, unused token for `POST /agents`
//! registered whatever body came with it.

use nyx5_house::Registration;
use nyx5_proto::Value;
use nyx5_proto::envelope::Draft;
use nyx5_proto::json::obj;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, Envelope, pow};

use crate::common::*;
use crate::kit::*;

/// The refusal's name (the wire's `error`) and reason of an error answer.
fn name_of(resp: &nyx5_house::http::Response) -> (String, String) {
    let v = resp.value().unwrap();
    let o = v.as_object().unwrap();
    (o["error"].as_str().unwrap_or_default().to_owned(), o["reason"].as_str().unwrap_or_default().to_owned())
}

/// `env` with a proof of `bits` for its own work digest, signed by `from`.
fn with_work(from: &Agent, env: Envelope, bits: u32) -> Envelope {
    let nonce = pow::mint(&env.work_digest(), bits, 0, 1 << 24).unwrap();
    env.with_pow(bits, &nonce).unwrap().sign(&from.sig).unwrap()
}

fn pow_inbox(bits: i64) -> (&'static str, Value) {
    ("inbox", Value::Object(obj([("policy", "pow".into()), ("pow_bits", bits.into())])))
}

#[test]
fn one_proof_of_work_does_not_open_other_mailboxes() {
    let (w, a, b) = two_houses();
    let c = w.house("c.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let (bob, carol, dan) =
        (Agent::new("bob@b.test", 20), Agent::new("carol@b.test", 21), Agent::new("dan@c.test", 22));
    enrol(&a, &alice, &[]);
    enrol(&b, &bob, &[pow_inbox(10)]);
    enrol(&b, &carol, &[pow_inbox(10)]);
    enrol(&c, &dan, &[pow_inbox(10)]);

    let to_bob = with_work(&alice, envelope(&alice, "p1", &[&bob.address], |_| {}), 10);
    json(&deliver(&a, &b, &to_bob), 202);
    let nonce = to_bob.pow().unwrap().nonce.clone();
    // The same id and nonce on an envelope to another mailbox here, and to one at another house.
    let reuse = |to: &Address| {
        envelope(&alice, "p1", &[to], |_: &mut Draft| {}).with_pow(10, &nonce).unwrap().sign(&alice.sig).unwrap()
    };
    assert_eq!(deliver(&a, &b, &reuse(&carol.address)).status, 402, "another mailbox");
    assert_eq!(deliver(&a, &c, &reuse(&dan.address)).status, 402, "another house");
    assert!(mailbox(&b, &carol).is_empty() && mailbox(&c, &dan).is_empty());
}

#[test]
fn mail_let_in_by_proof_of_work_still_counts_towards_the_rate() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut config = w.config("b.test", Registration::Admin);
    config.inbound_per_domain_per_minute = 3;
    let b = w.start(config);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    enrol(&a, &alice, &[]);
    enrol(&b, &bob, &[pow_inbox(4)]);
    for i in 0..3 {
        let env = with_work(&alice, envelope(&alice, &format!("w{i}"), &[&bob.address], |_| {}), 4);
        json(&deliver(&a, &b, &env), 202);
    }
    let fourth = with_work(&alice, envelope(&alice, "w3", &[&bob.address], |_| {}), 4);
    assert_eq!(deliver(&a, &b, &fourth).status, 429, "work buys entry, not a flood");
}

#[test]
fn a_captured_relay_header_cannot_carry_another_envelope_with_the_same_id() {
    let (_w, a, b) = two_houses();
    let alice = Agent::new("alice@a.test", 10);
    let (bob, carol) = (Agent::new("bob@b.test", 20), Agent::new("carol@b.test", 21));
    enrol(&a, &alice, &[]);
    enrol(&b, &bob, &[]);
    enrol(&b, &carol, &[]);
    let genuine = envelope(&alice, "r1", &[&bob.address], |_| {});
    let header = RelayHeader::sign("a.test", &genuine, "b.test", &a.config.key).to_header();
    json(&call_raw(&b, "POST", "/inbound", &[("x-nyx5-relay", &header)], genuine.canonical()), 202);
    // The same header (a.test's word that it relays "r1" to b.test) on another envelope "r1".
    let other = envelope(&alice, "r1", &[&carol.address], |d| d.content.body = "unrelayed".into());
    let resp = call_raw(&b, "POST", "/inbound", &[("x-nyx5-relay", &header)], other.canonical());
    let (name, why) = name_of(&resp);
    assert_eq!((resp.status, name.as_str()), (403, "bad_signature"), "{why}");
    let held = mailbox(&b, &carol);
    assert!(held.is_empty(), "carol got nothing");
}

#[test]
fn a_leaked_token_for_post_agents_cannot_carry_another_body() {
    let (_w, a, _b) = two_houses();
    let ana = Agent::new("ana@a.test", 10);
    enrol(&a, &ana, &[]);
    // ana prepares an update (a new description) and its token; the token leaks unused.
    let intended = ana.registration(&a, &[("capabilities", Value::Object(obj([("description", "hi".into())])))]);
    let leaked = ana.token(&a, "POST", "/agents", &intended.canonical());
    // The thief sends it with a body enrolling the thief's own key for ana.
    let thief = Agent::new("ana@a.test", 66);
    let takeover = thief.registration(&a, &[]);
    let resp = call(&a, "POST", "/agents", &[("authorization", &leaked)], &takeover);
    assert_ne!(resp.status, 200);
    assert_ne!(resp.status, 201);
    let card = block_on(a.lookup().local_card("ana")).unwrap().unwrap();
    assert_eq!(card.sig(), ana.sig.public(), "ana keeps her key");
    // The genuine request with that token still works: the binding refuses only other bodies.
    json(&call(&a, "POST", "/agents", &[("authorization", &leaked)], &intended), 200);
}

#[test]
fn a_token_for_one_query_does_not_serve_another() {
    let (_w, a, _b) = two_houses();
    let ana = Agent::new("ana@a.test", 10);
    enrol(&a, &ana, &[]);
    let token = ana.token(&a, "GET", "/mailbox/ana?limit=1", &[]);
    let other = call_raw(&a, "GET", "/mailbox/ana?limit=200", &[("authorization", &token)], vec![]);
    assert_eq!(other.status, 401);
    let same = call_raw(&a, "GET", "/mailbox/ana?limit=1", &[("authorization", &token)], vec![]);
    assert_eq!(same.status, 200);
}
