//! §3 of issue 9: no signature of the domain key can be repurposed.
//!
//! Against `712cee6` the webhook push was the domain key's bare signature over the pushed
//! envelope's canonical bytes. An agent with a webhook could send itself an envelope whose extra
//! top-level members made it an agent card for someone else with the agent's own keys; the push
//! signature then verified as that card's certification. Now every signature carries its kind
//! in the signed bytes, and a push signs a wrapper the house wrote.

use std::cell::RefCell;
use std::rc::Rc;

use nyx5_house::Registration;
use nyx5_house::ports::{OutRequest, OutResponse};
use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::{Context, SigPublic};
use nyx5_proto::json::{Object, canonical_without, obj};
use nyx5_proto::receipt::Receipt;
use nyx5_proto::relay::{RelayHeader, relay_message};
use nyx5_proto::sign::Signature;
use nyx5_proto::{Address, Timestamp, Value, b64};

use crate::common::*;
use crate::kit::*;

/// A house whose agent `mallory` has a webhook on `hook.test`; answers the pushes seen.
fn with_webhook() -> (World, Rc<TestHouse>, Agent, Rc<RefCell<Vec<OutRequest>>>) {
    let w = World::new();
    let h = w.house("h.test", Registration::Admin);
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = seen.clone();
    w.fake("hook.test", move |req| {
        log.borrow_mut().push(req.clone());
        OutResponse { status: 200, body: vec![] }
    });
    let mallory = Agent::new("mallory@h.test", 30);
    assert_eq!(enrol(&h, &mallory, &[("webhook", "http://hook.test/m".into())]).status, 201);
    (w, h, mallory, seen)
}

/// The push's body and its signature.
fn push_of(req: &OutRequest) -> (Vec<u8>, [u8; 64]) {
    let sig = req.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-nyx5-push")).unwrap();
    (req.body.clone(), b64::decode_array(&sig.1).unwrap())
}

#[test]
fn agent_cannot_turn_its_own_push_into_a_certification_for_someone_else() {
    let (w, h, mallory, seen) = with_webhook();
    // The envelope carries, besides its own members, everything an agent card needs: alice's
    // address with mallory's keys.
    let card_members: [(&str, Value); 7] = [
        ("address", "alice@h.test".into()),
        ("sig", mallory.sig.public().to_b64().into()),
        ("enc", mallory.enc.public().to_b64().into()),
        ("capabilities", Value::Object(Object::new())),
        ("inbox", Value::Object(obj([("policy", "open".into())]))),
        ("valid_from", Timestamp(START).to_rfc3339().into()),
        ("valid_until", Value::Null),
    ];
    let env = envelope(&mallory, "shaped", &[&mallory.address], |d| {
        for (k, v) in card_members.clone() {
            d.extra.insert(k.into(), v);
        }
        d.extra.insert("previous".into(), Value::Array(vec![]));
    });
    json(&mallory.send(&h, &env), 202);
    w.tick_all();
    let pushes = seen.borrow();
    assert_eq!(pushes.len(), 1, "the envelope reached mallory's mailbox and was pushed");
    let (body, sig) = push_of(&pushes[0]);

    // The forgery of 712cee6: the envelope as it came, with the push signature as certification.
    let mut forged = env.object().clone();
    forged.insert("certification".into(), Signature { kid: h.config.key.public(), value: sig }.to_value());
    // What the forged card's certification covers is exactly the envelope mallory shaped: the
    // bytes the old push signed.
    assert_eq!(canonical_without(&forged, "certification"), env.canonical());
    let card = AgentCard::from_object(forged).expect("it reads as an agent card");
    assert!(card.verify(h.card(), None, h.now()).is_err(), "the push is no certification");

    // The push is a wrapper the house chose, signed as a push and as nothing else.
    let wrapper = Value::parse(&body, 4 << 20).unwrap();
    let wrapper = wrapper.as_object().unwrap();
    assert_eq!(wrapper["type"].as_str(), Some("nyx5.push"));
    assert_eq!(wrapper["envelope"].canonical(), env.canonical());
    let key = h.config.key.public();
    assert!(key.verify(Context::Push, &body, &sig));
    for other in Context::ALL.into_iter().filter(|c| *c != Context::Push) {
        assert!(!key.verify(other, &body, &sig), "a push verifies as {other:?}");
        assert!(!key.verify(other, &env.canonical(), &sig), "a push over the envelope as {other:?}");
    }
    let mut from_wrapper = wrapper.clone();
    from_wrapper.insert("certification".into(), Signature { kid: key, value: sig }.to_value());
    assert!(AgentCard::from_object(from_wrapper).and_then(|c| c.verify(h.card(), None, h.now())).is_err());
}

/// One signature seen in the wild: its kind, its signer, the bytes it covers, and its value.
struct Signed {
    kind: Context,
    key: SigPublic,
    message: Vec<u8>,
    sig: [u8; 64],
}

fn member(doc: &Object, name: &str, kind: Context) -> Signed {
    let s = Signature::read(doc, name).unwrap();
    Signed { kind, key: s.kid, message: canonical_without(doc, name), sig: s.value }
}

#[test]
fn no_signature_verifies_as_a_document_of_another_kind() {
    let (w, h, mallory, seen) = with_webhook();
    let b = w.house("b.test", Registration::Admin);
    let mut all = Vec::new();

    // Domain card and agent card, as the house serves them.
    all.push(member(h.card().object(), "signature", Context::DomainCard));
    let card = block_on(h.lookup().local_card("mallory")).unwrap().unwrap();
    all.push(member(card.object(), "certification", Context::AgentCard));
    // A registration body (proof of possession).
    let reg = mallory.registration(&h, &[]);
    all.push(member(reg.as_object().unwrap(), "signature", Context::Registration));
    // An envelope, and the relay header the house signs for it.
    let env = envelope(&mallory, "e1", &[&Address::parse("ghost@b.test").unwrap()], |_| {});
    all.push(member(env.object(), "signature", Context::Envelope));
    let relay = RelayHeader::sign("h.test", &env, "b.test", &h.config.key);
    let message = relay_message(env.id(), "b.test", &env.sha256_hex()).into_bytes();
    all.push(Signed { kind: Context::Relay, key: relay.kid, message, sig: relay.sig });
    // A token, as the agent sends it.
    let token = mallory.token(&h, "GET", "/mailbox/mallory", &[]);
    let (t, s) = token.strip_prefix("Nyx5 ").unwrap().split_once('.').unwrap();
    all.push(Signed {
        kind: Context::Token,
        key: mallory.sig.public(),
        message: b64::decode(t).unwrap(),
        sig: b64::decode_array(s).unwrap(),
    });
    // A notice: the bounce of an envelope to nobody, from postmaster@, signed by the domain key.
    let _ = b;
    json(&mallory.send(&h, &env), 202);
    w.tick_all();
    let notice = mailbox(&h, &mallory).into_iter().find(|e| e.from().local() == "postmaster").expect("a bounce");
    all.push(member(notice.object(), "signature", Context::Envelope));
    // A Libro receipt.
    let receipt = Receipt::sign(
        "h.test",
        "e1",
        "pay",
        &"0".repeat(64),
        &mallory.address,
        h.now(),
        nyx5_proto::receipt::Status::Done,
        Object::new(),
        &h.config.key,
    )
    .unwrap();
    all.push(member(receipt.object(), "signature", Context::Receipt));
    // A push, as the webhook got it: mallory writes to herself.
    json(&mallory.send(&h, &envelope(&mallory, "e2", &[&mallory.address], |_| {})), 202);
    w.tick_all();
    let (body, sig) = push_of(seen.borrow().last().expect("a push"));
    all.push(Signed { kind: Context::Push, key: h.config.key.public(), message: body, sig });

    for s in &all {
        for kind in Context::ALL {
            assert_eq!(
                s.key.verify(kind, &s.message, &s.sig),
                kind == s.kind,
                "a {:?} signature checked as {kind:?}",
                s.kind
            );
        }
    }
}
