//! §5 Registration without races: a new name is an insert that fails on conflict, an update is
//! guarded by the card it replaces, a failed invitation guard undoes its whole batch, and the
//! operator can re-certify a card after the domain key changed.

use nyx5_house::Registration;
use nyx5_house::http::Request;
use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_proto::Value;
use nyx5_proto::json::obj;

use crate::common::{admin, refused, refused_as, register, register_by, served_card};
use crate::kit::*;

fn post_agents(agent: &Agent, house: &TestHouse, headers: Vec<(String, String)>, extra: &[(&str, Value)]) -> Request {
    Request::new("POST", "/agents", headers, agent.registration(house, extra).canonical())
}

/// The owner's update request: `agent`'s registration body with a token for exactly it.
fn post_agents_by(agent: &Agent, house: &TestHouse, extra: &[(&str, Value)]) -> Request {
    let body = agent.registration(house, extra).canonical();
    let token = agent.token(house, "POST", "/agents", &body);
    Request::new("POST", "/agents", vec![("authorization".into(), token)], body)
}

fn count(h: &TestHouse, sql: &'static str) -> i64 {
    block_on(h.db.query(stmt!(sql))).unwrap()[0].int("n").unwrap()
}

#[test]
fn two_first_registrations_of_one_name_race_and_exactly_one_wins() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let first = Agent::new("ana@a.test", 10);
    let second = Agent::new("ana@a.test", 11);
    let (a, b) = (post_agents(&first, &h, vec![], &[]), post_agents(&second, &h, vec![], &[]));
    // Both read "no such agent" before either writes.
    h.db.stall(true);
    let (ra, rb) = block_on_both(h.handle(a), h.handle(b));
    h.db.stall(false);
    let mut statuses = [ra.status, rb.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409]);
    let winner = if ra.status == 201 { &first } else { &second };
    assert_eq!(served_card(&h, "ana").sig(), winner.sig.public());
    assert_eq!(count(&h, "SELECT count(*) AS n FROM registrations"), 1);
}

#[test]
fn two_concurrent_updates_of_one_card_race_and_exactly_one_wins() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let ana = Agent::new("ana@a.test", 10);
    json(&register(&h, &ana, &[], &[]), 201);
    let caps = |d: &str| Value::Object(obj([("description", d.into())]));
    let a = post_agents_by(&ana, &h, &[("capabilities", caps("first"))]);
    let b = post_agents_by(&ana, &h, &[("capabilities", caps("second"))]);
    h.db.stall(true);
    let (ra, rb) = block_on_both(h.handle(a), h.handle(b));
    h.db.stall(false);
    let mut statuses = [ra.status, rb.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409]);
    let (won, lost) = if ra.status == 200 { (ra, rb) } else { (rb, ra) };
    let (name, why) = refused_as(&lost, 409);
    assert_eq!(name, "changed_meanwhile", "{why}");
    // What is stored is exactly the card the winner was answered.
    let answered = json(&won, 200).as_object().unwrap()["card"].clone();
    assert_eq!(served_card(&h, "ana").to_value(), answered);
    assert_eq!(count(&h, "SELECT count(*) AS n FROM registrations"), 2);
}

#[test]
fn invitation_withdrawn_mid_registration_leaves_no_agent_behind() {
    let w = World::new();
    let h = w.house("a.test", Registration::Invite);
    let body = Value::Object(obj([("uses", 1.into())]));
    let inv = json(&call(&h, "POST", "/invitations", &[("authorization", &admin(&h))], &body), 201);
    let code = inv.as_object().unwrap()["invitation"].as_object().unwrap()["code"].as_str().unwrap().to_owned();
    let ana = Agent::new("ana@a.test", 10);
    // The code disappears between the request's start and its write.
    let gone = code.clone();
    h.db.before_next_batch(move |db| {
        block_on(db.batch(vec![stmt!("DELETE FROM invitations WHERE code = ?", gone.as_str())])).unwrap();
    });
    let (name, why) = refused_as(&register(&h, &ana, &[], &[("invite", code.as_str().into())]), 403);
    assert_eq!(name, "bad_invite", "{why}");
    assert_eq!(call_raw(&h, "GET", "/agents/ana", &[], vec![]).status, 404);
    assert_eq!(count(&h, "SELECT count(*) AS n FROM agents"), 0);
    assert_eq!(count(&h, "SELECT count(*) AS n FROM registrations"), 0);
}

#[test]
fn used_up_or_expired_invitation_writes_nothing() {
    let w = World::new();
    let h = w.house("a.test", Registration::Invite);
    let expires = h.now().plus_ms(MINUTE).to_rfc3339();
    let body = Value::Object(obj([("uses", 1.into()), ("expires", expires.into())]));
    let inv = json(&call(&h, "POST", "/invitations", &[("authorization", &admin(&h))], &body), 201);
    let code = inv.as_object().unwrap()["invitation"].as_object().unwrap()["code"].as_str().unwrap().to_owned();
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@a.test", 11);
    json(&register(&h, &ana, &[], &[("invite", code.as_str().into())]), 201);
    refused(&register(&h, &bo, &[], &[("invite", code.as_str().into())]), 403);
    block_on(h.db.batch(vec![stmt!("UPDATE invitations SET uses = 5")])).unwrap();
    w.clock.advance(2 * MINUTE);
    refused(&register(&h, &bo, &[], &[("invite", code.as_str().into())]), 403);
    assert_eq!(count(&h, "SELECT count(*) AS n FROM agents"), 1);
    assert_eq!(count(&h, "SELECT used AS n FROM invitations"), 1);
}

#[test]
fn operator_recertifies_a_card_after_the_domain_key_changed() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    json(&ana.register_admin(&h), 201);
    drop(h);
    // The house comes back on the same database with another domain key.
    let h = w.restart(w.config("a.test", Registration::Admin));
    // The stored certification no longer verifies: the owner is refused cleanly, not with a 500.
    let (name, why) = refused_as(&register_by(&h, &ana, &ana, &[]), 403);
    assert_eq!(name, "card_no_longer_verifies", "{why}");
    assert_eq!(ana.get(&h, "/mailbox/ana").status, 401);
    // The operator re-certifies it with the new key; then the owner is back.
    let v = json(&ana.register_admin(&h), 200);
    let card = nyx5_proto::AgentCard::from_object(v.as_object().unwrap()["card"].as_object().unwrap().clone()).unwrap();
    card.verify(h.card(), None, h.now()).unwrap();
    assert_eq!(ana.get(&h, "/mailbox/ana").status, 200);
}

#[test]
fn open_registration_cap_holds_for_the_whole_minute() {
    let w = World::new();
    let mut c = w.config("a.test", Registration::Open);
    c.open_registrations_per_minute = 1;
    let h = w.start(c);
    json(&register(&h, &Agent::new("ana@a.test", 10), &[], &[]), 201);
    // Later in the same minute: still over the cap, and nothing written.
    w.clock.advance(30 * SECOND);
    refused(&register(&h, &Agent::new("bo@a.test", 11), &[], &[]), 429);
    assert_eq!(count(&h, "SELECT count(*) AS n FROM agents"), 1);
}
