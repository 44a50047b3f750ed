//! nyx5-proto: the Nyx5/1 protocol as data and pure functions.
//!
//! No I/O, no clock and no randomness of its own: callers pass `now` ([`Timestamp`]) and an
//! [`crypto::Entropy`]. Documents keep the JSON object they were parsed from, so unknown members
//! survive and stay signed; only `verify` functions make a [`sign::Verified`] value.
//!
//! | module | spec | what |
//! |---|---|---|
//! | [`json`] | §5 | strict parser, canonical form (RFC 8785 semantics) |
//! | [`b64`], [`time`], [`address`] | §1 | base64url, RFC 3339 instants, `local@domain`, ids |
//! | [`crypto`], [`sign`] | §3–§5 | keys, primitives, detached signatures |
//! | [`card`] | §3, §4 | domain, agent and delegated cards |
//! | [`envelope`], [`seal`] | §5 | envelope codec, sign/verify, encryption |
//! | [`auth`], [`relay`], [`pow`] | §8, §6, §9 | agent tokens, relay header, proof of work |
//! | [`quote`], [`receipt`] | §15, §20, §7 | quotes, Libro receipts, delivery notices |
//! | [`libro`] | §14 | Libro entries, accounts, the journal audit |
//! | [`ops`] | §16 | the Libro's operations as a client writes them |
//! | [`authority`] | docs §16b | authority levels, consequences, limits, evidence kinds |
//! | [`mailbox`] | §8c | a mailbox item as a client shows it |
//! | [`app`] | docs "Apps" | App Cards, primitives, the broker's lines, catalogues |
//! | [`error`], [`refusal`], [`limits`] | §6 | the error table, the refusals by name, every limit |
#![forbid(unsafe_code)]

pub mod address;
pub mod app;
pub mod auth;
pub mod authority;
pub mod b64;
pub mod card;
pub mod crypto;
pub mod envelope;
pub mod error;
pub mod json;
pub mod jws;
pub mod kind;
pub mod libro;
pub mod limits;
pub mod mailbox;
pub mod ops;
pub mod pow;
pub mod quote;
pub mod receipt;
pub mod refusal;
pub mod relay;
pub mod seal;
pub mod sealed;
pub mod sign;
pub mod time;
pub mod vecmap;

pub use address::Address;
pub use card::{AgentCard, DomainCard};
pub use envelope::Envelope;
pub use error::{Error, ErrorKind};
pub use json::{Object, Value};
pub use refusal::Refusal;
pub use sign::Verified;
pub use time::Timestamp;
