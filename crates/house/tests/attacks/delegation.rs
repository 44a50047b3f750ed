//! §2 A delegated subagent stays inside its delegation: a dotted name needs its parent's
//! delegation in every mode, a subagent cannot shed it, and an older delegation is not replayed.

use nyx5_house::Registration;
use nyx5_proto::Value;
use nyx5_proto::card::{Delegation, Scope};

use crate::common::{admin, refused, register, register_by, served_card};
use crate::kit::*;

/// The refusal's name (the wire's `error`) and reason of a refused request, its status checked.
fn refused_as(resp: &nyx5_house::http::Response, status: u16) -> (String, String) {
    let v = json(resp, status);
    let o = v.as_object().unwrap();
    (o["error"].as_str().unwrap().to_owned(), o["reason"].as_str().unwrap_or_default().to_owned())
}

fn delegation(parent: &Agent, child: &Agent, cap: i64, house: &TestHouse) -> Value {
    let scope = Scope { types: Some(vec!["message".into()]), to_domains: None, cap: Some(cap), authority: None };
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
        let (name, why) = refused_as(&register(&h, &fake, &[], &[("invite", code.as_str().into())]), 403);
        // An admin-mode house refuses self-service before looking at the name.
        if !matches!(mode, Registration::Admin) {
            assert_eq!(name, "subagent_without_delegation", "{mode:?}: {why}");
        }
        let (name, why) = refused_as(&fake.register_admin(&h), 403);
        assert_eq!(name, "subagent_without_delegation", "{mode:?}: {why}");
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
    let (name, why) = refused_as(&register_by(&h, &child, &child, &[("delegation", broad.clone())]), 403);
    assert_eq!(name, "delegation_stale", "{why}");
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
    let (name, why) = refused_as(&register(&h, &plain, &[], &[("delegation", delegation(&ceo, &plain, 10, &h))]), 400);
    assert_eq!(name, "bad_subagent_name", "{why}");
}

/// A delegation from `parent` signed with `key` (its current key or not), issued at `issued`.
fn delegation_by(
    parent: &Agent,
    key: &nyx5_proto::crypto::SigningKey,
    child: &Agent,
    issued: nyx5_proto::Timestamp,
) -> Value {
    Delegation::sign(&parent.address, &child.address, &child.sig.public(), &Scope::default(), None, issued, key)
        .unwrap()
        .to_value()
}

#[test]
fn thief_with_the_parents_replaced_key_cannot_enrol_a_subagent() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let old = Agent::new("ceo@a.test", 10);
    json(&old.register_admin(&h), 201);
    let new = Agent::new("ceo@a.test", 11);
    json(&register_by(&h, &old, &new, &[]), 200);
    // The thief keeps the old key, still in its grace, and delegates to a key of its own.
    let puppet = Agent::new("puppet.ceo@a.test", 66);
    let stolen = delegation_by(&old, &old.sig, &puppet, h.now());
    let (name, why) = refused_as(&register(&h, &puppet, &[], &[("delegation", stolen.clone())]), 403);
    assert_eq!(name, "needs_current_key", "{why}");
    // Not through the operator either, and nothing was written.
    refused(&register(&h, &puppet, &[("authorization", &admin(&h))], &[("delegation", stolen)]), 403);
    assert_eq!(call_raw(&h, "GET", "/agents/puppet.ceo", &[], vec![]).status, 404);
    // The parent's current key enrols it.
    let genuine = delegation_by(&new, &new.sig, &puppet, h.now());
    json(&register(&h, &puppet, &[], &[("delegation", genuine)]), 201);
}

#[test]
fn a_delegation_issued_in_the_future_cannot_lock_out_later_ones() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ceo = Agent::new("ceo@a.test", 10);
    json(&ceo.register_admin(&h), 201);
    let child = Agent::new("assistant.ceo@a.test", 11);
    let far = nyx5_proto::Timestamp(START + 3650 * DAY);
    let (name, why) =
        refused_as(&register(&h, &child, &[], &[("delegation", delegation_by(&ceo, &ceo.sig, &child, far))]), 403);
    assert_eq!(name, "delegation_in_future", "{why}");
    // Within the clock window it is fine, to the millisecond.
    let just_over = h.now().plus_ms(5 * MINUTE + 1);
    refused(&register(&h, &child, &[], &[("delegation", delegation_by(&ceo, &ceo.sig, &child, just_over))]), 403);
    let soon = h.now().plus_ms(5 * MINUTE);
    json(&register(&h, &child, &[], &[("delegation", delegation_by(&ceo, &ceo.sig, &child, soon))]), 201);
    // The operator's reset may install an older one (recovery), which a plain update may not.
    let earlier = delegation_by(&ceo, &ceo.sig, &child, h.now());
    refused(&register(&h, &child, &[("authorization", &admin(&h))], &[("delegation", earlier.clone())]), 403);
    let reset = [("delegation", earlier), ("reset", Value::Bool(true))];
    json(&register(&h, &child, &[("authorization", &admin(&h))], &reset), 200);
}

#[test]
fn subagents_are_enrolled_at_a_bounded_rate_per_parent() {
    let w = World::new();
    let mut config = w.config("a.test", Registration::Admin);
    config.open_registrations_per_minute = 3;
    let h = w.start(config);
    let ceo = Agent::new("ceo@a.test", 10);
    json(&ceo.register_admin(&h), 201);
    let enrol = |i: u8| {
        let child = Agent::new(&format!("s{i}.ceo@a.test"), 20 + i);
        register(&h, &child, &[], &[("delegation", delegation_by(&ceo, &ceo.sig, &child, h.now()))])
    };
    for i in 0..3 {
        json(&enrol(i), 201);
    }
    refused(&enrol(3), 429);
    // Its last millisecond is the same minute.
    w.clock.to_end_of_minute();
    refused(&enrol(3), 429);
    w.clock.advance(1);
    json(&enrol(4), 201);
}
