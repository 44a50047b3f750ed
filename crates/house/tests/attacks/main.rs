//! Attacks on the trust checks (issue 9): each test performs one attack through the public
//! routes of houses on real SQLite, with real keys, and shows it now fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "../kit/mod.rs"]
mod kit;

mod auth;
mod delegation;
mod registration;
mod rotation;

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

/// The error reason of a refused request, with its status checked.
pub(crate) fn refused(resp: &Response, status: u16) -> String {
    let v = json(resp, status);
    v.as_object().unwrap()["reason"].as_str().unwrap().to_owned()
}
