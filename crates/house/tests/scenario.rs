//! The whole journey through public routes only: self-registration (invite and open) → the
//! sender resolves and verifies the recipient's card → seal → send → tick → poll → verify the
//! sender's card chain → open → ack → reply in the same thread.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_proto::card::DomainCard;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::{AgentCard, Object, Timestamp, Value, seal};

fn o(v: &Value) -> &Object {
    v.as_object().unwrap()
}

/// What a client does with only HTTP: fetch the domain card and the agent card, verify the chain.
fn fetch_card(house: &TestHouse, local: &str) -> nyx5_proto::Verified<AgentCard> {
    let dc = json(&call_raw(house, "GET", "/.well-known/nyx5.json", &[], vec![]), 200);
    let dc = DomainCard::from_object(o(&dc).clone()).unwrap().verify(Some(&house.config.key.public())).unwrap();
    let ac = json(&call_raw(house, "GET", &format!("/agents/{local}"), &[], vec![]), 200);
    AgentCard::from_object(o(&ac).clone()).unwrap().verify(&dc, None, house.now()).unwrap()
}

#[test]
fn invite_and_open_houses_exchange_sealed_mail_and_a_reply() {
    let w = World::new();
    let a = w.house("a.test", Registration::Invite);
    let b = w.house("b.test", Registration::Open);

    // ana joins a.test with an invitation; bo joins the open b.test by himself.
    let inv = json(
        &call(&a, "POST", "/invitations", &[("authorization", "Bearer admin-a.test")], &Value::Object(obj([]))),
        201,
    );
    let code = o(&o(&inv)["invitation"])["code"].as_str().unwrap().to_owned();
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    json(&call(&a, "POST", "/agents", &[], &ana.registration(&a, &[("invite", code.as_str().into())])), 201);
    json(&call(&b, "POST", "/agents", &[], &bo.registration(&b, &[])), 201);

    // ana learns bo's keys from his house and seals for him.
    let bo_card = fetch_card(&b, "bo");
    assert_eq!(bo_card.enc(), Some(bo.enc.public()));
    let mut draft = Draft::new(
        "q-1".into(),
        ana.address.clone(),
        vec![bo.address.clone()],
        a.now(),
        Content::new("application/json", Value::Object(obj([("question", "¿precio?".into())]))),
    );
    draft.thread = Some("th-1".into());
    let env =
        seal::seal(draft.build().unwrap(), &[(bo.address.clone(), bo_card.enc().unwrap())], &mut |buf: &mut [u8]| {
            buf.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8).wrapping_mul(31).wrapping_add(7))
        })
        .unwrap()
        .sign(&ana.sig)
        .unwrap();
    let resp = ana.send(&a, &env);
    json(&resp, 202);
    assert!(resp.kick);
    assert!(mailbox(&b, &bo).is_empty(), "nothing arrives before the queue runs");
    w.tick_all();

    // bo polls, checks ana's card chain from her house, verifies and opens.
    let got = mailbox(&b, &bo);
    assert_eq!(got.len(), 1);
    let ana_card = fetch_card(&a, "ana");
    let verified = got[0].clone().verify(&ana_card, b.now()).unwrap();
    let content = seal::open(&verified, &bo.address, &bo.enc).unwrap();
    assert_eq!(o(&content.body)["question"].as_str(), Some("¿precio?"));
    let ack = Value::Object(obj([("ids", Value::Array(vec!["q-1".into()]))]));
    assert_eq!(o(&json(&bo.post(&b, "/mailbox/bo/ack", &ack), 200))["acked"].as_safe_integer(), Some(1));
    assert!(mailbox(&b, &bo).is_empty());

    // The same envelope delivered again after the ack does not come back.
    w.duplicate_next("b.test", 1);
    let again = ana.send(&a, &env);
    assert_eq!(again.status, 200);
    w.tick_all();
    assert!(mailbox(&b, &bo).is_empty());

    // bo answers in the thread; ana receives it.
    let mut reply = Draft::new(
        "r-1".into(),
        bo.address.clone(),
        vec![ana.address.clone()],
        Timestamp(b.now().millis()),
        Content::new("text/plain", "40 tokens".into()),
    );
    reply.thread = Some("th-1".into());
    reply.in_reply_to = Some("q-1".into());
    let reply = bo.seal(reply.build().unwrap(), &[&ana]);
    json(&bo.send(&b, &reply), 202);
    w.tick_all();
    let inbox = mailbox(&a, &ana);
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].thread(), Some("th-1"));
    assert_eq!(inbox[0].in_reply_to(), Some("q-1"));
    let bo_card = fetch_card(&b, "bo");
    let v = inbox[0].clone().verify(&bo_card, a.now()).unwrap();
    assert_eq!(seal::open(&v, &ana.address, &ana.enc).unwrap().body.as_str(), Some("40 tokens"));
    // Both outboxes show their envelope delivered.
    for (house, agent, id) in [(&a, &ana, "q-1"), (&b, &bo, "r-1")] {
        let v = json(&agent.get(house, &format!("/outbox/{}", agent.address.local())), 200);
        let env =
            o(&v)["envelopes"].as_array().unwrap().iter().find(|e| o(e)["id"].as_str() == Some(id)).cloned().unwrap();
        assert_eq!(o(&o(&env)["jobs"].as_array().unwrap()[0])["state"].as_str(), Some("delivered"));
    }
}
