//! Attacks on the house's trust (issue 9; `email`: issue 10 §5; `storage`: issue 10 §3), one
//! named test each: every test performs an attack through public routes against real SQLite and
//! real crypto, and the attack must now fail. Each module's header says what the attack did before
//! it was closed (against `712cee6`; `email` against `f847391`; `storage` against `0a8888f`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../kit/mod.rs"]
mod kit;

mod auth;
mod binding;
mod common;
mod delegation;
mod email;
mod libro;
mod poison;
mod registration;
mod resolver;
mod resolver_state;
mod rotation;
mod scope;
mod signatures;
mod ssrf;
mod storage;
mod webhook;
