//! nyx5-web: the browser's side of Nyx5/1. A web client is a thin JavaScript shell that fetches
//! and stores; every protocol decision — keys, registration bodies, request tokens, checking
//! cards and the pins behind them, sealing, proof of work, signing, opening and judging mail,
//! Libro operations, the profile file — is made here, by `nyx5-proto`, the same code the `nyx5`
//! command and the houses run. So what the browser sends is the kind of envelope `nyx5 send`
//! sends, and what it trusts it trusts for the same reasons.
//!
//! The contract of every function:
//!
//! - Arguments are strings (JSON text where they carry a document), the request body of
//!   [`token`] as bytes, and every time is `now_ms`, milliseconds since the epoch as
//!   `Date.now()` gives them: nothing here reads a clock. Randomness comes from the platform
//!   (`crypto.getRandomValues` in a browser).
//! - An answer is canonical JSON text (a [`token`] is the `Authorization` header's value, a
//!   [`profile_export`] the file's text, [`version`] the crate version).
//! - A failure is `Err("<code> <name>: <reason>")`: the wire code and the refusal's stable name
//!   from `nyx5_proto::Refusal`, the wire's `error` (e.g. `403 untrusted_key: domain card of
//!   b.example: …`), kept through every re-wording of the reason; the wasm build
//!   throws it as an `Error` whose message is that string. [`open_item`] fails only on its own
//!   arguments: a bad item is reported as `trust: "invalid"`.
//! - Keys are `{"sig","enc","sig_secret","enc_secret"}` in base64url, as in a key file
//!   (other members, such as a key file's `nyx5` and `kind`, are ignored); the public keys must
//!   match the secrets.
//! - Wherever a domain card is an argument, [`verify_domain`]'s answer `{domain, pin, card}` may
//!   be passed instead, and is held to its pin again; a bare card is trusted on first use for its
//!   own domain. A subagent's parent card goes where a function takes one: a card, or an array of
//!   cards up the delegation, nearest first.
//!
//! The functions are plain Rust, tested natively; `bind` (wasm32 only) exports each under the
//! same name through wasm-bindgen.
#![forbid(unsafe_code)]

mod auth;
mod cards;
mod drafts;
mod keys;
mod mail;
mod profile;
mod send;
mod util;

#[cfg(target_arch = "wasm32")]
pub mod bind;

use util::{answer, now, wire};

/// Fresh Ed25519 and X25519 keys: `{"sig","enc","sig_secret","enc_secret"}`.
pub fn new_keys() -> Result<String, String> {
    answer(keys::new_keys())
}

/// The signed body of `POST /agents` (docs/SPEC.md §8b), as `nyx5 register` makes it: the members
/// of `extra_json` (`""` or an object: `invite`, `capabilities`, `inbox`, `valid_until`,
/// `webhook`, `delegation` …) with `local`, `sig`, `enc` and `ts`, signed by `keys`. POST this
/// text as it is.
pub fn registration_body(keys: &str, local: &str, extra_json: &str, now_ms: f64) -> Result<String, String> {
    answer(now(now_ms).and_then(|now| auth::registration_body(keys, local, extra_json, now)))
}

/// The whole `Authorization` header value, `Nyx5 <token>.<sig>` (spec §8), for one request by
/// `address`: `method`, `path` (no query), `query` (without `?`, `""` for none), `host`
/// (`host[:port]` as the URL names it) and the exact body bytes sent (empty for none). A fresh
/// nonce each call: a token is good once.
#[allow(clippy::too_many_arguments)] // the request's parts, as the browser has them
pub fn token(
    keys: &str,
    address: &str,
    method: &str,
    path: &str,
    query: &str,
    host: &str,
    body_bytes: &[u8],
    now_ms: f64,
) -> Result<String, String> {
    now(now_ms)
        .and_then(|now| auth::token(keys, address, method, path, query, host, body_bytes, now))
        .map_err(|e| wire(&e))
}

/// Checks the domain card `card_json` (`/.well-known/nyx5.json`) of `domain`: `pin` is `""`
/// (trust on first use) or the domain key remembered earlier, and a card signed by another key
/// passes only through that key's valid handover. Answers `{"domain","pin","rotated","card"}`:
/// `pin` is the key to remember from now on, `rotated` whether it moved from the old pin.
pub fn verify_domain(card_json: &str, domain: &str, pin: &str, now_ms: f64) -> Result<String, String> {
    answer(now(now_ms).and_then(|now| cards::verify_domain(card_json, domain, pin, now)))
}

/// Checks an agent card against its domain card (and, for a subagent, its parent's card;
/// `""` otherwise). Answers `{"address","sig","enc","capabilities","inbox","card"}`, `enc` null
/// for a card that publishes none.
pub fn verify_agent(
    card_json: &str,
    domain_card_json: &str,
    parent_card_json: &str,
    now_ms: f64,
) -> Result<String, String> {
    answer(now(now_ms).and_then(|now| cards::verify_agent(card_json, domain_card_json, parent_card_json, now)))
}

/// A new message from `from`, as `nyx5 send` builds it: `recipients_json` is `[{"card",
/// "domain", "parent"?}]` (each checked as [`verify_agent`] checks it); `media` `""` is
/// `text/plain; charset=utf-8` (a JSON media type makes `body_text` JSON), `kind` `""` is
/// `message`, `thread` and `in_reply_to` `""` are none. Sealed for every recipient and the
/// sender, with proof of work when an inbox asks for it, signed. A recipient whose inbox asks
/// for a stamp is refused (402): this client pays none. Answers `{"id","sha256","envelope",
/// "text"}`; POST `text` to `/outbound`.
#[allow(clippy::too_many_arguments)] // the message's parts, as the browser has them
pub fn seal_message(
    keys: &str,
    from: &str,
    recipients_json: &str,
    body_text: &str,
    media: &str,
    kind: &str,
    thread: &str,
    in_reply_to: &str,
    now_ms: f64,
) -> Result<String, String> {
    let m =
        send::Message { keys, from, recipients: recipients_json, body: body_text, media, kind, thread, in_reply_to };
    answer(now(now_ms).and_then(|now| send::seal_message(&m, now)))
}

/// An operation for the Libro of `house_domain` (docs/SPEC.md §16): an envelope from `from` to
/// `libro@<house_domain>`, `type: task`, `media: application/nyx5.libro+json`, in clear, whose
/// body is `op_json` (`{"op": …, …}`, its members checked as `nyx5` checks them). An `accept`
/// must be the quote's buyer's, at the house the quote names. Answers as [`seal_message`].
pub fn libro_op(keys: &str, from: &str, house_domain: &str, op_json: &str, now_ms: f64) -> Result<String, String> {
    answer(now(now_ms).and_then(|now| send::libro_op(keys, from, house_domain, op_json, now)))
}

/// One mailbox item `{seq, received, envelope}` checked and opened as `address`, as `nyx5 inbox`
/// shows it. `keys_list_json`: the agent's key objects, current first, then retired ones;
/// `sender_card_json`: the sender's agent card (or `{"card","parent"}` for a subagent), `""`
/// when it could not be fetched; `sender_domain_json`: the sender's domain card (alone, for a
/// postmaster's notice). Answers `seq, received, id, from, to, created, type, thread,
/// in_reply_to, sha256, notice` (with `notice_house` and `own_house` for a notice), `trust`
/// (`verified`, `unverified`, `invalid` or `unchecked`) and `trust_reason` unless verified,
/// `sealed`, `content` (null when it cannot be opened, then `open_error` says why) and `email`
/// for mail that came by email.
pub fn open_item(
    keys_list_json: &str,
    address: &str,
    item_json: &str,
    sender_card_json: &str,
    sender_domain_json: &str,
    now_ms: f64,
) -> Result<String, String> {
    let item = mail::Item {
        keys_list: keys_list_json,
        address,
        item: item_json,
        sender_card: sender_card_json,
        sender_domain: sender_domain_json,
    };
    answer(now(now_ms).and_then(|now| mail::open_item(&item, now)))
}

/// What a mailbox item says of itself, unverified, so the browser knows which cards to fetch:
/// `{"from","notice","signed","parent"}` (`parent`: a subagent sender's parent, else null).
pub fn peek(item_json: &str) -> Result<String, String> {
    answer(mail::peek(item_json))
}

/// An envelope the agent sent (`envelope_json`, as [`seal_message`] made it), as its mailbox
/// would show it, opened with its own keys, to be kept on its side: [`open_item`]'s members.
pub fn own_view(keys_list_json: &str, address: &str, envelope_json: &str) -> Result<String, String> {
    answer(mail::own_view(keys_list_json, address, envelope_json))
}

/// What the page keeps of a message view ([`open_item`]'s or [`own_view`]'s answer) that it read
/// (`dir` `"in"`) or sent (`"out"`): `{id, dir, at, seq, from, to, sender, parties, kind,
/// subject, body, keys, view}` (`keys`: what joins it to its conversation, with whom a message
/// that shares one must be `sender` and `parties` of one another, as the `nyx5` command joins them;
/// `at` in milliseconds, `now_ms` when the view has no time), or null for a view without an id
/// (docs/SPEC.md, "Kept mail").
pub fn kept_record(view_json: &str, dir: &str, now_ms: f64) -> Result<String, String> {
    answer(now(now_ms).and_then(|now| mail::kept_record(view_json, dir, now)))
}

/// The CLI's profile file (docs/SPEC.md, "Client profile") for `agents_json`
/// (`[{address, house, keys, previous?}]`, as [`profile_import`] answers them) and `pins_json`
/// (`{domain: key}` or `""`): canonical JSON and a newline, with empty `pending` and `sent`.
pub fn profile_export(agents_json: &str, pins_json: &str) -> Result<String, String> {
    profile::export(agents_json, pins_json).map_err(|e| wire(&e))
}

/// Reads a profile file as the CLI does (each key pair checked, each address once; unknown
/// members ignored): `{"agents":[{address, house, keys, previous}], "pins"}`.
pub fn profile_import(text: &str) -> Result<String, String> {
    answer(profile::import(text))
}

/// The `readers` a held send carries (docs/SPEC.md §7c): the content key of `envelope_json`
/// (which `address` sent, sealed to itself too), opened with one of `keys_list_json` (current
/// first) and wrapped for each approver of `approvers_json` (`[{"card", "domain", "parent"?}]`,
/// each checked as [`verify_agent`] checks it). Answers `{"readers"}`: POST the same envelope to
/// `/outbound?readers=<it>`.
pub fn readers_for(
    keys_list_json: &str,
    address: &str,
    envelope_json: &str,
    approvers_json: &str,
    now_ms: f64,
) -> Result<String, String> {
    answer(now(now_ms).and_then(|now| drafts::readers_for(keys_list_json, address, envelope_json, approvers_json, now)))
}

/// A draft as its approver `address` reads it (`draft_json`: `GET /drafts/:local/:id`'s
/// `draft`): `{"content", "carries"}` opened (`carries`: the whole envelope as its recipients
/// will read it), or `{"unreadable"}` saying why not.
pub fn open_draft(keys_list_json: &str, address: &str, draft_json: &str) -> Result<String, String> {
    answer(drafts::open_draft(keys_list_json, address, draft_json))
}

/// This crate's version.
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
