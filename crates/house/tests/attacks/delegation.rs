//! §2 A delegated subagent stays inside its delegation: a dotted name needs its parent's
//! delegation in every mode, a subagent cannot shed it, and an older delegation is not replayed.

use nyx5_house::Registration;
use nyx5_proto::Value;
use nyx5_proto::card::{Delegation, Scope};

use crate::kit::*;
use crate::{admin, refused, register, register_by, served_card};

fn delegation(parent: &Agent, child: &Agent, cap: i64, house: &TestHouse) -> Value {
    let scope = Scope { types: Some(vec!["message".into()]), to_domains: None, cap: Some(cap) };
    Delegation::sign(&parent.address, &child.address, &child.sig.public(), &scope, None, house.now(), &parent.sig)
        .unwrap()
        .to_value()
}

#[test]
fn dotted_name_without_delegation_is_refused_in_every_mode() {
    for mode in [Registration::Open, Registration::Invite, Registration::Admin] {
        let w = World::new();
        let h = w.house("a.test", mode);
        let ceo = Agent::new("ceo@a.test", 10);
        json(&ceo.register_admin(&h), 201);
        let fake = Agent::new("assistant.ceo@a.test", 66);
        // Self-service (with an invitation where one is needed), and the operator.
        let code = json(
            &call(&h, "POST", "/invitations", &[("authorization", &admin(&h))], &Value::Object(Default::default())),
            201,
        )
        .as_object()
        .unwrap()["invitation"]
            .as_object()
            .unwrap()["code"]
            .as_str()
            .unwrap()
            .to_owned();
        let status = register(&h, &fake, &[], &[("invite", code.as_str().into())]).status;
        assert_eq!(status, 403, "{mode:?}");
        refused(&fake.register_admin(&h), 403);
        assert_eq!(call_raw(&h, "GET", "/agents/assistant.ceo", &[], vec![]).status, 404, "{mode:?}");
    }
}

#[test]
fn subagent_cannot_drop_its_delegation_to_become_a_full_agent() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ceo = Agent::new("ceo@a.test", 10);
    json(&ceo.register_admin(&h), 201);
    let child = Agent::new("assistant.ceo@a.test", 11);
    json(&register(&h, &child, &[], &[("delegation", delegation(&ceo, &child, 10, &h))]), 201);
    // The subagent updates its own card without the delegation: refused.
    refused(&register_by(&h, &child, &child, &[]), 403);
    // Nor may the operator turn it into a full agent.
    refused(&child.register_admin(&h), 403);
    // Nor does a delegation signed by another agent keep it (its parent is in its name).
    let mallory = Agent::new("mallory@a.test", 12);
    json(&mallory.register_admin(&h), 201);
    refused(&register_by(&h, &child, &child, &[("delegation", delegation(&mallory, &child, 99, &h))]), 403);
    let card = served_card(&h, "assistant.ceo");
    assert_eq!(card.delegation().unwrap().by, ceo.address);
    assert_eq!(card.scope().unwrap().cap, Some(10));
}

#[test]
fn subagent_cannot_replay_an_older_broader_delegation() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ceo = Agent::new("ceo@a.test", 10);
    json(&ceo.register_admin(&h), 201);
    let child = Agent::new("assistant.ceo@a.test", 11);
    let broad = delegation(&ceo, &child, 1_000, &h);
    json(&register(&h, &child, &[], &[("delegation", broad.clone())]), 201);
    // The parent narrows the delegation later; the operator applies it.
    w.clock.advance(MINUTE);
    let narrow = delegation(&ceo, &child, 10, &h);
    json(&register(&h, &child, &[("authorization", &admin(&h))], &[("delegation", narrow.clone())]), 200);
    // The subagent replays the older, broader one: refused, for the operator as well.
    let why = refused(&register_by(&h, &child, &child, &[("delegation", broad.clone())]), 403);
    assert!(why.contains("issued before"), "{why}");
    refused(&register(&h, &child, &[("authorization", &admin(&h))], &[("delegation", broad)]), 403);
    assert_eq!(served_card(&h, "assistant.ceo").scope().unwrap().cap, Some(10));
    // The same delegation again, or a newer one, is fine.
    json(&register_by(&h, &child, &child, &[("delegation", narrow)]), 200);
}

#[test]
fn full_agent_name_cannot_carry_a_delegation() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let ceo = Agent::new("ceo@a.test", 10);
    json(&ceo.register_admin(&h), 201);
    // An undotted name with a delegation "by" ceo: no parent in its name, so no delegation.
    let plain = Agent::new("assistant@a.test", 11);
    let why = refused(&register(&h, &plain, &[], &[("delegation", delegation(&ceo, &plain, 10, &h))]), 400);
    assert!(why.contains("<name>.<parent>"), "{why}");
}
