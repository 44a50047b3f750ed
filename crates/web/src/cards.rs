//! Cards checked by the resolver's own rules ([`nyx5_client::trust`], docs/SPEC.md §6.1), without
//! fetching anything: the browser fetches, the rules decide, and this reads the arguments.
//!
//! A domain card must name the domain asked for and be signed by one of its keys valid now; with
//! a pin, by the pin or by a key the pin handed over to ([`trust::held_to`]).
//! Wherever a domain card is an argument, the answer of [`verify_domain`] (`{domain, pin, card}`)
//! may be given instead of the bare card, and is then held to its pin again.

use nyx5_client::trust;
use nyx5_proto::address::check_domain;
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{AgentCard, DomainCard, Error, Refusal, Timestamp, Verified};

use crate::util::{about, value};

/// A domain as typed: trimmed, without a final dot, lower case, and checked.
pub(crate) fn domain_name(text: &str) -> Result<String, Error> {
    let d = text.trim().trim_end_matches('.').to_ascii_lowercase();
    check_domain(&d).map_err(|why| Refusal::BadDomain.because(format!("domain {text:?}: {why}")))?;
    Ok(d)
}

/// Checks `card` for `domain` at `now`, against `pin` when there is one. Answers the verified
/// card, the key to pin from now on (the card's signer), and whether it moved from the pin.
fn checked(
    card: DomainCard,
    domain: &str,
    pin: Option<&SigPublic>,
    now: Timestamp,
) -> Result<(Verified<DomainCard>, SigPublic, bool), Error> {
    let what = format!("domain card of {domain}");
    let kid = trust::domain_signer(&card, domain, now).map_err(|f| f.into_error(&what, about(&what)))?;
    let (card, moved) = trust::held_to(card, pin, now).map_err(about(&what))?;
    Ok((card, kid, moved))
}

/// `verify_domain`: see the crate's documentation.
pub(crate) fn verify_domain(card_json: &str, domain: &str, pin: &str, now: Timestamp) -> Result<Value, Error> {
    let domain = domain_name(domain)?;
    let card = DomainCard::parse(card_json.as_bytes()).map_err(about(&format!("domain card of {domain}")))?;
    let pin = match pin.trim() {
        "" => None,
        p => Some(SigPublic::parse(p).map_err(about("pin"))?),
    };
    let (card, kid, rotated) = checked(card, &domain, pin.as_ref(), now)?;
    Ok(Value::Object(obj([
        ("domain", domain.as_str().into()),
        ("pin", kid.to_b64().into()),
        ("rotated", Value::Bool(rotated)),
        ("card", card.to_value()),
    ])))
}

/// A domain card given as an argument: the card itself (trusted on first use, for its own
/// domain), or [`verify_domain`]'s answer `{domain, pin, card}` (held to its pin).
pub(crate) fn domain_card(v: &Value, now: Timestamp) -> Result<Verified<DomainCard>, Error> {
    let o = v.as_object().ok_or_else(|| Refusal::BadCard.because("a domain card is a JSON object"))?;
    if o.contains_key("nyx5") || !o.contains_key("card") {
        let card = DomainCard::from_object(o.clone()).map_err(about("domain card"))?;
        let domain = card.domain().to_owned();
        return checked(card, &domain, None, now).map(|(c, _, _)| c);
    }
    let card = DomainCard::from_object(field::object(o, "card")?.clone()).map_err(about("domain card"))?;
    let domain = match field::opt_str(o, "domain")? {
        Some(d) => domain_name(d)?,
        None => card.domain().to_owned(),
    };
    let pin = field::opt_str(o, "pin")?.map(SigPublic::parse).transpose().map_err(about("pin"))?;
    checked(card, &domain, pin.as_ref(), now).map(|(c, _, _)| c)
}

/// [`domain_card`] from JSON text.
pub(crate) fn domain_card_text(text: &str, now: Timestamp) -> Result<Verified<DomainCard>, Error> {
    domain_card(&value(text, "domain card")?, now)
}

/// The parent cards of an argument: none (`""` or `null`), one card, or an array of cards,
/// the parent first, then its parent, and so on.
pub(crate) fn parents(v: Option<&Value>) -> Vec<Value> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.trim().is_empty() => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(other) => vec![other.clone()],
    }
}

/// Verifies the agent card `card` against its verified domain card, following its delegation
/// up `parents` (nearest first) as the resolver does.
pub(crate) fn agent_card(
    card: &Value,
    domain: &Verified<DomainCard>,
    parents: &[Value],
    now: Timestamp,
) -> Result<Verified<AgentCard>, Error> {
    chain(card, domain, parents, now, 0)
}

fn chain(
    card: &Value,
    domain: &Verified<DomainCard>,
    parents: &[Value],
    now: Timestamp,
    depth: usize,
) -> Result<Verified<AgentCard>, Error> {
    let o: &Object = card.as_object().ok_or_else(|| Refusal::BadCard.because("an agent card is a JSON object"))?;
    let card = AgentCard::from_object(o.clone()).map_err(about("agent card"))?;
    let what = format!("card of {}", card.address());
    trust::check_depth(card.address(), depth)?;
    let parent = match trust::parent_needed(&card) {
        Some(p) => {
            let (first, rest) = parents.split_first().ok_or_else(|| {
                Refusal::ParentCardRequired.because(format!("{what}: a delegated card needs its parent's card ({p})"))
            })?;
            let given = first.as_object().and_then(|o| o.get("address")).and_then(Value::as_str).unwrap_or("");
            if given != p.as_str() {
                return Err(
                    Refusal::WrongCard.because(format!("{what}: the parent card given is of {given:?}, not of {p}"))
                );
            }
            Some(chain(first, domain, rest, now, depth + 1).map_err(about(&format!("parent of {}", card.address())))?)
        }
        None => None,
    };
    card.verify(domain, parent.as_ref(), now).map_err(about(&what))
}

/// What the browser keeps of a verified agent card.
pub(crate) fn card_answer(card: &Verified<AgentCard>) -> Value {
    Value::Object(obj([
        ("address", card.address().as_str().into()),
        ("sig", card.sig().to_b64().into()),
        ("enc", card.enc().map(|k| k.to_b64()).into()),
        ("capabilities", Value::Object(card.capabilities().clone())),
        ("inbox", Value::Object(card.inbox().clone())),
        ("card", card.to_value()),
    ]))
}

/// `verify_agent`: see the crate's documentation.
pub(crate) fn verify_agent(
    card_json: &str,
    domain_card_json: &str,
    parent_card_json: &str,
    now: Timestamp,
) -> Result<Value, Error> {
    let domain = domain_card_text(domain_card_json, now)?;
    let card = value(card_json, "agent card")?;
    let parent = match parent_card_json.trim() {
        "" => None,
        text => Some(value(text, "parent card")?),
    };
    let card = agent_card(&card, &domain, &parents(parent.as_ref()), now)?;
    Ok(card_answer(&card))
}
