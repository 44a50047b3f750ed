//! Attacks on the house's trust (issue 9), one named test each: every test performs an attack
//! through public routes against real SQLite and real crypto, and the attack must now fail. Each
//! module's header says what the attack did against `712cee6`, before it was closed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../kit/mod.rs"]
mod kit;

mod auth;
mod binding;
mod common;
mod delegation;
mod registration;
mod resolver;
mod rotation;
mod scope;
mod signatures;

use kit::{Agent, TestHouse, call, json};
use nyx5_house::http::Response;
use nyx5_proto::{AgentCard, Value};

/// The operator's `Authorization` header for `house`.
pub(crate) fn admin(house: &TestHouse) -> String {
    format!("Bearer admin-{}", house.config.domain)
}

/// The card `house` serves for `local` (parsed, not verified).
pub(crate) fn served_card(house: &TestHouse, local: &str) -> AgentCard {
    let v = json(&kit::call_raw(house, "GET", &format!("/agents/{local}"), &[], vec![]), 200);
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
