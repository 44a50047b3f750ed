//! A2A agent cards (A2A 1.0 discovery, docs/SPEC.md "The house on the web"), derived from Nyx5
//! cards so A2A tooling finds Nyx5 agents. A Nyx5 agent is reached by mail, not by an A2A
//! JSON-RPC call: its one interface is the house's estafeta with the protocol binding `NYX5`, and
//! the required extension `urn:nyx5:ext:a2a` says how (its address, its Nyx5 card, its keys).
//! An A2A task travels as an envelope with media `application/a2a-task+json` (spec §10).

use nyx5_proto::json::{Object, obj};
use nyx5_proto::{AgentCard, Error, Refusal, Value};

use super::home::{HOME_AGENTS, accepts, charge, description, listed};
use super::page;
use crate::House;
use crate::http::Response;
use crate::ports::{Db, Net, Reads};

/// The extension a Nyx5 card names in A2A (the gateway's, `nyx5_rules::a2a`), the A2A version
/// these cards follow, and the media of an A2A task carried in an envelope.
pub use nyx5_rules::a2a::{EXT as EXT_A2A, TASK_MEDIA, VERSION as A2A_VERSION};
/// The binding of the Nyx5 interface.
pub const BINDING: &str = "NYX5";

/// How long a cache keeps an A2A card.
const CARD_MAX_AGE: u32 = 300;

/// Capability members that describe the card rather than name a skill.
const NOT_SKILLS: &[&str] = &["listed", "description", "accepts", "name", "a2a", "mcp"];

fn strings(list: &[&str]) -> Value {
    Value::Array(list.iter().map(|s| (*s).into()).collect())
}

fn interface<D: Db, N: Net>(house: &House<D, N>) -> Value {
    Value::Object(obj([
        ("url", house.config.public_url.as_str().into()),
        ("protocolBinding", BINDING.into()),
        ("protocolVersion", "1".into()),
    ]))
}

/// The standard binding of a listed agent: A2A 1.0 JSON-RPC at `/agents/:local/a2a` (the
/// gateway, `crate::a2a`).
fn json_rpc<D: Db, N: Net>(house: &House<D, N>, local: &str) -> Value {
    Value::Object(obj([
        ("url", format!("{}/agents/{local}/a2a", house.config.public_url).into()),
        ("protocolBinding", "JSONRPC".into()),
        ("protocolVersion", A2A_VERSION.into()),
    ]))
}

/// What A2A's canonical form of a card keeps (A2A 1.0 §8.4.1: its SDKs read the card into
/// their types and write it back, dropping empty strings, lists, objects and nulls before RFC
/// 8785): a card already in that form signs the same bytes they verify.
fn clean(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) => {
            let kept: Vec<Value> = a.into_iter().filter_map(clean).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(o) => {
            let mut kept = Object::new();
            for (k, v) in o {
                if let Some(v) = clean(v) {
                    kept.insert(k, v);
                }
            }
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other),
    }
}

/// Where the house publishes the keys its A2A cards are signed with.
fn jwks_url<D: Db, N: Net>(house: &House<D, N>) -> String {
    format!("{}/.well-known/jwks.json", house.config.public_url)
}

/// The card, in A2A's canonical form, with A2A's own signature: a detached JWS (EdDSA, the
/// domain key, `kid` the key and `jku` the house's key set) over its RFC 8785 bytes without
/// `signatures`.
fn signed<D: Db, N: Net>(house: &House<D, N>, card: Value) -> Value {
    let Some(Value::Object(mut card)) = clean(card) else { return Value::Null };
    card.remove("signatures");
    let payload = Value::Object(card.clone()).canonical();
    let key = &house.config.key;
    let header = nyx5_proto::jws::header(&key.public(), "a2a-card", Some(&jwks_url(house)));
    let jws = nyx5_proto::jws::sign_detached(key, &header, &payload);
    let sig = obj([("protected", jws.protected.into()), ("signature", jws.signature.into())]);
    card.insert("signatures".into(), Value::Array(vec![Value::Object(sig)]));
    Value::Object(card)
}

/// GET /.well-known/jwks.json — the domain keys A2A cards are signed with (RFC 7517, RFC
/// 8037): the active key and the previous ones still within their grace.
pub fn jwks<D: Db, N: Net>(house: &House<D, N>) -> Response {
    let now = house.now();
    let mut keys = vec![nyx5_proto::jws::jwk(&house.config.key.public())];
    for p in house.config.previous_keys.iter().filter(|p| p.until > now) {
        keys.push(nyx5_proto::jws::jwk(&p.key.public()));
    }
    let body = Value::Object(obj([("keys", Value::Array(keys))]));
    page("application/json", body.canonical(), CARD_MAX_AGE)
}

fn provider<D: Db, N: Net>(house: &House<D, N>) -> Value {
    Value::Object(obj([
        ("organization", house.config.domain.as_str().into()),
        ("url", format!("{}/", house.config.public_url).into()),
    ]))
}

/// Streaming and push notifications where the JSON-RPC binding is, an agent's card
/// (`gateway`); the Nyx5 extension, `required` only where Nyx5 mail is the one way in (the
/// house's own card).
fn capabilities(params: Object, description: &str, gateway: bool) -> Value {
    let mut ext =
        obj([("uri", EXT_A2A.into()), ("description", description.into()), ("params", Value::Object(params))]);
    let mut caps = Object::new();
    if gateway {
        caps.insert("streaming".into(), Value::Bool(true));
        caps.insert("pushNotifications".into(), Value::Bool(true));
    } else {
        ext.insert("required".into(), Value::Bool(true));
    }
    caps.insert("extensions".into(), Value::Array(vec![Value::Object(ext)]));
    Value::Object(caps)
}

/// The skills an agent's capabilities name (each member that is not false), else one: mail.
fn skills(card: &AgentCard) -> Vec<Value> {
    let address = card.address().as_str();
    let mut out: Vec<Value> = card
        .capabilities()
        .iter()
        .filter(|(k, v)| !NOT_SKILLS.contains(&k.as_str()) && !matches!(v, Value::Bool(false) | Value::Null))
        .take(32)
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                _ => format!("{k}, as {address} offers it"),
            };
            Value::Object(obj([
                ("id", k.as_str().into()),
                ("name", k.as_str().into()),
                ("description", text.into()),
                ("tags", strings(&["nyx5", k.as_str()])),
            ]))
        })
        .collect();
    if out.is_empty() {
        out.push(Value::Object(obj([
            ("id", "mail".into()),
            ("name", "Mail".into()),
            ("description", format!("Write to {address} with a signed, sealed Nyx5 envelope.").into()),
            ("tags", strings(&["nyx5", "mail"])),
        ])));
    }
    out
}

fn modes(card: &AgentCard) -> Value {
    let media = accepts(card);
    if media.is_empty() { strings(&["text/plain", "application/json", TASK_MEDIA]) } else { strings(&media) }
}

/// The A2A card of one listed agent.
pub fn agent_card<D: Db, N: Net>(house: &House<D, N>, card: &AgentCard) -> Value {
    let address = card.address().as_str();
    let url = &house.config.public_url;
    let local = card.address().local();
    let mut params = obj([
        ("address", address.into()),
        ("estafeta", url.as_str().into()),
        ("card", format!("{url}/agents/{local}").into()),
        ("domain_card", format!("{url}/.well-known/nyx5.json").into()),
        ("sig", card.sig().to_b64().into()),
        ("inbox", Value::Object(card.inbox().clone())),
    ]);
    if let Some(enc) = card.enc() {
        params.insert("enc".into(), enc.to_b64().into());
    }
    let description = description(card)
        .unwrap_or_else(|| format!("A Nyx5 agent at {}; writing to it: {}.", house.config.domain, charge(card)));
    Value::Object(obj([
        ("name", address.into()),
        ("description", description.into()),
        ("version", card.valid_from().to_rfc3339().into()),
        ("supportedInterfaces", Value::Array(vec![json_rpc(house, local), interface(house)])),
        ("provider", provider(house)),
        ("documentationUrl", format!("{url}/spec").into()),
        (
            "capabilities",
            capabilities(
                params,
                "Call this agent by A2A JSON-RPC (it holds the task while offline), or write to it by Nyx5 mail. \
                 A Nyx5 caller proves itself, and may pay with an escrow, in the message's metadata under this URI.",
                true,
            ),
        ),
        ("defaultInputModes", modes(card)),
        ("defaultOutputModes", modes(card)),
        ("skills", Value::Array(skills(card))),
    ]))
}

/// The house's own A2A card: the house as a provider, each listed agent (of the directory's
/// first page) as a skill that names its own card.
pub fn house_card<D: Db, N: Net>(house: &House<D, N>, agents: &[AgentCard]) -> Value {
    let url = &house.config.public_url;
    let skills: Vec<Value> = agents
        .iter()
        .map(|c| {
            let local = c.address().local();
            let text = description(c).unwrap_or_else(|| format!("writing to it: {}", charge(c)));
            Value::Object(obj([
                ("id", c.address().as_str().into()),
                ("name", c.address().as_str().into()),
                ("description", text.into()),
                ("tags", strings(&["nyx5", "agent"])),
                ("examples", strings(&[&format!("{url}/agents/{local}/agent-card.json")])),
            ]))
        })
        .collect();
    let params = obj([
        ("domain", house.config.domain.as_str().into()),
        ("estafeta", url.as_str().into()),
        ("domain_card", format!("{url}/.well-known/nyx5.json").into()),
        ("directory", format!("{url}/agents").into()),
        ("registration", house.config.registration.as_str().into()),
    ]);
    Value::Object(obj([
        ("name", house.config.domain.as_str().into()),
        ("description", format!("The Nyx5 house {}: mail and a ledger for AI agents. Each skill is one of its listed agents, with its own card.", house.config.domain).into()),
        ("version", house.card().issued().to_rfc3339().into()),
        ("supportedInterfaces", Value::Array(vec![interface(house)])),
        ("provider", provider(house)),
        ("documentationUrl", format!("{url}/spec").into()),
        (
            "capabilities",
            capabilities(params, "The agents of this house are reached by Nyx5 mail, or by A2A at their own cards.", false),
        ),
        ("defaultInputModes", strings(&["text/plain", "application/json", TASK_MEDIA])),
        ("defaultOutputModes", strings(&["text/plain", "application/json", TASK_MEDIA])),
        ("skills", Value::Array(skills)),
    ]))
}

/// GET /agents/:local/agent-card.json — listed agents only: the card is for discovery.
pub async fn get_agent<D: Db, N: Net>(house: &House<D, N>, local: &str) -> Result<Response, Error> {
    let missing = || Refusal::UnknownAgent.because(format!("no listed agent {local}@{}", house.config.domain));
    // On the primary, as GET /agents/:local: the card after a reset, never before it.
    let text = house.registry().card_text(local).await?.ok_or_else(missing)?;
    let card = AgentCard::parse(text.as_bytes())?;
    if !card.listed() {
        return Err(missing());
    }
    Ok(page("application/json", signed(house, agent_card(house, &card)).canonical(), CARD_MAX_AGE))
}

/// GET /.well-known/agent-card.json — the house's own card.
pub async fn get_house<D: Db, N: Net>(house: &House<D, N>, reads: &Reads) -> Result<Response, Error> {
    let agents = listed(house, reads, HOME_AGENTS).await?;
    Ok(page("application/json", signed(house, house_card(house, &agents)).canonical(), CARD_MAX_AGE))
}
