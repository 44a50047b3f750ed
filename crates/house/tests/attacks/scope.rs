//! §2 of issue 9: a delegated subagent stays inside its delegation.
//!
//! Against `712cee6`: `Scope::within` compared only caps, so a grandchild could be delegated types
//! and domains its parent never had; the receiving house checked no scope at all, so a sending
//! house that skipped the check (or a hostile one) delivered whatever a subagent sent; and a card
//! named `<name>.<parent>` without any delegation verified as a full agent.

use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_proto::card::{AgentCardDraft, Delegation, Scope};
use nyx5_proto::{Address, Timestamp, Value};

use crate::common::*;
use crate::kit::*;

/// The refusal's name (the wire's `error`) and reason of an error answer.
fn name_of(resp: &nyx5_house::http::Response) -> (String, String) {
    let v = resp.value().unwrap();
    let o = v.as_object().unwrap();
    (o["error"].as_str().unwrap_or_default().to_owned(), o["reason"].as_str().unwrap_or_default().to_owned())
}

/// `child` registers at `house` with a delegation from `parent` for `scope`.
fn delegate(house: &TestHouse, parent: &Agent, child: &Agent, scope: Scope) -> nyx5_house::http::Response {
    let d =
        Delegation::sign(&parent.address, &child.address, &child.sig.public(), &scope, None, house.now(), &parent.sig)
            .unwrap();
    let body = child.registration(house, &[("delegation", d.to_value())]);
    call(house, "POST", "/agents", &[], &body)
}

fn types(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn a_grandchild_cannot_be_given_types_or_domains_its_parent_lacks() {
    let (_w, a, _b) = two_houses();
    let alice = Agent::new("alice@a.test", 10);
    enrol(&a, &alice, &[]);
    let helper = Agent::new("helper.alice@a.test", 11);
    let narrow = Scope { types: types(&["message"]), to_domains: types(&["a.test"]), cap: None, authority: None };
    json(&delegate(&a, &alice, &helper, narrow), 201);

    let wider_types =
        Scope { types: types(&["message", "task"]), to_domains: types(&["a.test"]), cap: None, authority: None };
    let wider_domains =
        Scope { types: types(&["message"]), to_domains: types(&["a.test", "b.test"]), cap: None, authority: None };
    let any = Scope::default();
    for (i, scope) in [wider_types, wider_domains, any].into_iter().enumerate() {
        let grandchild = Agent::new("sub.helper.alice@a.test", 12 + i as u8);
        let resp = delegate(&a, &helper, &grandchild, scope.clone());
        let (name, why) = name_of(&resp);
        assert_eq!(
            (resp.status, name.as_str()),
            (403, "bad_delegation"),
            "{scope:?} is wider than its parent's: {why}"
        );
        assert_eq!(agents_named(&a, "sub.helper.alice"), 0, "a refused delegation left a card behind");
    }
    // Within the parent's scope it works.
    let fine = Agent::new("sub.helper.alice@a.test", 20);
    json(
        &delegate(
            &a,
            &helper,
            &fine,
            Scope { types: types(&["message"]), to_domains: types(&["a.test"]), cap: None, authority: None },
        ),
        201,
    );
}

#[test]
fn the_receiving_house_refuses_mail_outside_the_senders_delegation() {
    let (_w, a, b) = two_houses();
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    enrol(&a, &alice, &[]);
    enrol(&b, &bob, &[]);
    let local_only = Agent::new("local.alice@a.test", 11);
    let scope = Scope { types: None, to_domains: types(&["a.test"]), cap: None, authority: None };
    json(&delegate(&a, &alice, &local_only, scope), 201);

    let env = envelope(&local_only, "s1", &[&bob.address], |_| {});
    // Its own house refuses to send it, and queues nothing ...
    assert_eq!(local_only.send(&a, &env).status, 403);
    assert_eq!(rows(&a, "SELECT count(*) AS n FROM outbox WHERE envelope_id = ?", "s1"), 0);
    assert_eq!(rows(&a, "SELECT count(*) AS n FROM jobs WHERE envelope_id = ?", "s1"), 0);
    // ... and a house that relays it anyway (skipping that check) does not get it delivered.
    let resp = deliver(&a, &b, &env);
    let (name, why) = name_of(&resp);
    assert_eq!((resp.status, name.as_str()), (403, "outside_delegation"), "{why}");
    assert!(mailbox(&b, &bob).is_empty());

    // A type the delegation leaves out is refused the same way, even to an allowed domain.
    let messages_only = Agent::new("msg.alice@a.test", 12);
    json(
        &delegate(
            &a,
            &alice,
            &messages_only,
            Scope { types: types(&["message"]), to_domains: None, cap: None, authority: None },
        ),
        201,
    );
    let task = envelope(&messages_only, "s2", &[&bob.address], |d| d.kind = nyx5_proto::envelope::Kind::Task);
    assert_eq!(deliver(&a, &b, &task).status, 403);
    let message = envelope(&messages_only, "s3", &[&bob.address], |_| {});
    json(&deliver(&a, &b, &message), 202);
}

#[test]
fn a_dotted_name_without_a_delegation_is_nobody() {
    let (_w, a, b) = two_houses();
    let ceo = Agent::new("ceo@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    enrol(&a, &ceo, &[]);
    enrol(&b, &bob, &[]);
    // A full card for `assistant.ceo`, certified by a.test, as 712cee6's open registration wrote it.
    let impostor = Agent::new("assistant.ceo@a.test", 66);
    let address = Address::parse("assistant.ceo@a.test").unwrap();
    let card = AgentCardDraft::new(address, impostor.sig.public(), Some(impostor.enc.public()), Timestamp(START))
        .certify(&a.config.key)
        .unwrap();
    assert!(card.clone().verify(a.card(), None, a.now()).is_err(), "no delegation, no card");
    let text = Value::Object(card.object().clone()).canonical_string();
    block_on(a.db.batch(vec![stmt!(
        "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES (?, ?, ?, 'open', ?, ?)",
        "assistant.ceo",
        text,
        impostor.sig.public().to_b64(),
        START,
        START
    )]))
    .unwrap();
    // Mail it signs is refused by bob's house, which resolves and checks the card itself.
    let env = envelope(&impostor, "i1", &[&bob.address], |_| {});
    let resp = deliver(&a, &b, &env);
    assert_eq!(resp.status, 403);
    assert!(mailbox(&b, &bob).is_empty());
    // And its own house does not let it act either.
    assert_eq!(impostor.send(&a, &env).status, 401);
}

#[test]
fn a_subagent_cannot_escape_its_delegation_through_the_email_bridge() {
    let (_w, a, _b) = two_houses();
    let ceo = Agent::new("ceo@a.test", 10);
    enrol(&a, &ceo, &[]);
    let assistant = Agent::new("assistant.ceo@a.test", 11);
    let scope = Scope { types: types(&["task"]), to_domains: types(&["partner.test"]), cap: None, authority: None };
    json(&delegate(&a, &ceo, &assistant, scope), 201);
    let email = |to: &str| Value::Object(nyx5_proto::json::obj([("to", to.into()), ("body", "hi".into())]));
    // Neither a domain its delegation leaves out, nor a type it leaves out (email is a message).
    let resp = assistant.post(&a, "/email/out", &email("anyone@gmail.example"));
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert_eq!(assistant.post(&a, "/email/out", &email("boss@partner.test")).status, 403);
    // A subagent allowed to write messages there may.
    let writer = Agent::new("writer.ceo@a.test", 12);
    let scope = Scope { types: types(&["message"]), to_domains: types(&["partner.test"]), cap: None, authority: None };
    json(&delegate(&a, &ceo, &writer, scope), 201);
    assert_eq!(writer.post(&a, "/email/out", &email("boss@partner.test")).status, 202);
    assert_eq!(writer.post(&a, "/email/out", &email("anyone@gmail.example")).status, 403);
}
