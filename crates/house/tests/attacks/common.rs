//! Small helpers the attack modules share: registration, envelopes, relays.

use nyx5_house::Registration;
use nyx5_house::http::Response;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, AgentCard, Envelope, Timestamp, Value};

use crate::kit::*;

/// Registers `agent` through the operator with extra registration members.
pub(crate) fn enrol(house: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) -> Response {
    register(house, agent, &[("authorization", &admin(house))], extra)
}

/// A signed clear envelope from `from`; `edit` adjusts the draft first.
pub(crate) fn envelope(from: &Agent, id: &str, to: &[&Address], edit: impl FnOnce(&mut Draft)) -> Envelope {
    let mut d = Draft::new(
        id.into(),
        from.address.clone(),
        to.iter().map(|a| (*a).clone()).collect(),
        Timestamp(START),
        Content::new("text/plain", "hello".into()),
    );
    edit(&mut d);
    d.build().unwrap().sign(&from.sig).unwrap()
}

/// Relays `env` from house `from` to house `to` with a genuine relay header, as the queue
/// would (and as a sending house that skipped its own checks could).
pub(crate) fn deliver(from: &TestHouse, to: &TestHouse, env: &Envelope) -> Response {
    let header = RelayHeader::sign(&from.config.domain, env, &to.config.domain, &from.config.key).to_header();
    call_raw(to, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical())
}

/// The reason of an error answer.
pub(crate) fn reason(resp: &Response) -> String {
    resp.value().unwrap().as_object().unwrap()["reason"].as_str().unwrap_or_default().to_owned()
}

/// The refusal's name (the wire's `error`) of an error answer.
pub(crate) fn error(resp: &Response) -> String {
    resp.value().unwrap().as_object().unwrap()["error"].as_str().unwrap_or_default().to_owned()
}

/// Two houses on one network, both registering through their operators.
pub(crate) fn two_houses() -> (World, std::rc::Rc<TestHouse>, std::rc::Rc<TestHouse>) {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    (w, a, b)
}

/// The operator's `Authorization` header for `house`.
pub(crate) fn admin(house: &TestHouse) -> String {
    format!("Bearer admin-{}", house.config.domain)
}

/// The card `house` serves for `local` (parsed, not verified).
pub(crate) fn served_card(house: &TestHouse, local: &str) -> AgentCard {
    let v = json(&call_raw(house, "GET", &format!("/agents/{local}"), &[], vec![]), 200);
    AgentCard::from_object(v.as_object().unwrap().clone()).unwrap()
}

/// POST /agents with `agent`'s registration body (signed by its key) and the given headers.
pub(crate) fn register(
    house: &TestHouse,
    agent: &Agent,
    headers: &[(&str, &str)],
    extra: &[(&str, Value)],
) -> Response {
    call(house, "POST", "/agents", headers, &agent.registration(house, extra))
}

/// POST /agents with `agent`'s registration body and a token by `owner` for exactly that body
/// (the owner's current key, or a thief's old one).
pub(crate) fn register_by(house: &TestHouse, owner: &Agent, agent: &Agent, extra: &[(&str, Value)]) -> Response {
    let body = agent.registration(house, extra);
    let token = owner.token(house, "POST", "/agents", &body.canonical());
    call(house, "POST", "/agents", &[("authorization", &token)], &body)
}

/// The error reason of a refused request, with its status checked.
pub(crate) fn refused(resp: &Response, status: u16) -> String {
    let v = json(resp, status);
    v.as_object().unwrap()["reason"].as_str().unwrap().to_owned()
}

/// The refusal's name (the wire's `error`) of a refused request, with its status checked; the
/// reason is in the panic message of a mismatch.
pub(crate) fn refused_as(resp: &Response, status: u16) -> (String, String) {
    let v = json(resp, status);
    let o = v.as_object().unwrap();
    (o["error"].as_str().unwrap().to_owned(), o["reason"].as_str().unwrap_or_default().to_owned())
}

/// The single integer `n` that `sql` (one `?`, bound to `param`) selects from `house`'s database:
/// what a refusal must have left behind, read from the tables rather than from the answer.
pub(crate) fn rows<P>(house: &TestHouse, sql: &'static str, param: P) -> i64
where
    nyx5_house::ports::SqlValue: From<P>,
{
    use nyx5_house::ports::Db;
    let found = block_on(house.db.query(nyx5_house::stmt!(sql, param))).unwrap();
    found.first().and_then(|r| r.int("n")).unwrap_or(0)
}

/// How many agents named `local` the house holds (0 or 1).
pub(crate) fn agents_named(house: &TestHouse, local: &str) -> i64 {
    rows(house, "SELECT count(*) AS n FROM agents WHERE local = ?", local)
}
