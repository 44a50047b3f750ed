//! Small helpers the attack modules share: registration, envelopes, relays.

use nyx5_house::Registration;
use nyx5_house::http::Response;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, Envelope, Timestamp, Value};

use crate::kit::*;

pub(crate) fn admin(house: &TestHouse) -> String {
    format!("Bearer admin-{}", house.config.domain)
}

/// Registers `agent` through the operator with extra registration members.
pub(crate) fn register(house: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) -> Response {
    let body = agent.registration(house, extra);
    call(house, "POST", "/agents", &[("authorization", &admin(house))], &body)
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

/// Two houses on one network, both registering through their operators.
pub(crate) fn two_houses() -> (World, std::rc::Rc<TestHouse>, std::rc::Rc<TestHouse>) {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    (w, a, b)
}
