//! Mailbox items in: checked against the sender's card (a postmaster's notice against its
//! domain card) and opened, as `nyx5 inbox` shows them. Mail without a signature (it came by
//! email) is `unverified`, never signed; a signature that fails is `invalid`; a sender whose
//! cards the browser could not fetch is `unchecked`.

use nyx5_proto::envelope::Payload;
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::{Address, Envelope, Error, Timestamp, seal};

use crate::keys::Keys;
use crate::trust::{agent_card, domain_card_text, parents};
use crate::util::{about, address, object, value};

/// The local part postmaster notices come from (docs/SPEC.md §7).
const POSTMASTER: &str = "postmaster";
/// The email bridge's extension (docs/SPEC.md, "Email bridge").
const EXT_EMAIL: &str = "urn:nyx5:ext:email";

/// `verified`, `unverified`, `invalid` or `unchecked`, with the reason.
type Trust = (&'static str, Option<String>);

fn invalid(why: impl Into<String>) -> Trust {
    ("invalid", Some(why.into()))
}

fn unchecked(why: impl Into<String>) -> Trust {
    ("unchecked", Some(why.into()))
}

/// The sender's card argument: the card, or `{card, parent}` for a subagent (its parent's
/// card, or the array of cards up its delegation).
fn sender_card(text: &str) -> Result<(Value, Vec<Value>), Error> {
    let v = value(text, "sender card")?;
    match &v {
        Value::Object(o) if !o.contains_key("nyx5") && o.contains_key("card") => {
            let card = o.get("card").cloned().unwrap_or(Value::Null);
            Ok((card, parents(o.get("parent"))))
        }
        _ => Ok((v, Vec::new())),
    }
}

/// Whether `env` was signed by its sender, as `nyx5 inbox` decides it.
fn check(env: &Envelope, notice: bool, card_json: &str, domain_json: &str, now: Timestamp) -> Trust {
    let Some(sig) = env.signature() else {
        return (
            "unverified",
            Some(
                "not signed: it came in without a Nyx5 signature (e.g. by email); anyone could have written it".into(),
            ),
        );
    };
    let from = env.from();
    if domain_json.trim().is_empty() {
        return unchecked(format!("the domain card of {} was not given", from.domain()));
    }
    let domain = match domain_card_text(domain_json, now) {
        Ok(d) => d,
        Err(e) => return invalid(e.reason),
    };
    if domain.domain() != from.domain() {
        return unchecked(format!("the domain card given is of {}, not of {}", domain.domain(), from.domain()));
    }
    if notice {
        if !domain.accepts_key(&sig.kid, now) {
            return invalid(format!("not signed by a key of {}", from.domain()));
        }
        return match env.clone().verify_with_key(&sig.kid) {
            Ok(_) => ("verified", None),
            Err(e) => invalid(e.reason),
        };
    }
    if card_json.trim().is_empty() {
        return unchecked(format!("the card of {from} was not given"));
    }
    let (card, up) = match sender_card(card_json) {
        Ok(c) => c,
        Err(e) => return invalid(e.reason),
    };
    let given = card.as_object().and_then(|o| o.get("address")).and_then(Value::as_str).unwrap_or("");
    if given != from.as_str() {
        return unchecked(format!("the card given is of {given:?}, not of {from}"));
    }
    match agent_card(&card, &domain, &up, now) {
        Ok(card) => match env.clone().verify(&card, now) {
            Ok(_) => ("verified", None),
            Err(e) => invalid(format!("the signature is not by {from}: {}", e.reason)),
        },
        Err(e) => invalid(e.reason),
    }
}

/// Opens a sealed payload with each secret in turn (the current keys first).
fn open(env: &Envelope, me: &Address, keys: &[Keys]) -> Result<Value, String> {
    match env.payload() {
        Payload::Clear(c) => Ok(c.to_value()),
        Payload::Sealed(_) => {
            let mut last = String::from("no key");
            for k in keys {
                match seal::open(env, me, &k.enc) {
                    Ok(c) => return Ok(c.to_value()),
                    Err(e) => last = e.reason.to_string(),
                }
            }
            Err(last)
        }
    }
}

/// The keys that may open mail: an array of key objects, the current ones first.
fn keys_list(text: &str) -> Result<Vec<Keys>, Error> {
    let list = value(text, "keys list")?;
    let list = list.as_array().ok_or_else(|| Error::malformed("the keys list must be an array of key objects"))?;
    list.iter()
        .enumerate()
        .map(|(i, k)| {
            let what = format!("keys list [{i}]");
            let o = k.as_object().ok_or_else(|| Error::malformed(format!("{what} must be an object")))?;
            Keys::from_object(o).map_err(about(&what))
        })
        .collect()
}

/// What [`open_item`] is given.
#[derive(Debug)]
pub(crate) struct Item<'a> {
    pub(crate) keys_list: &'a str,
    pub(crate) address: &'a str,
    pub(crate) item: &'a str,
    pub(crate) sender_card: &'a str,
    pub(crate) sender_domain: &'a str,
}

/// `open_item`: see the crate's documentation. Fails only on its own arguments (the keys, the
/// address, an item that is not a JSON object); a bad envelope is reported as `invalid`.
pub(crate) fn open_item(a: &Item<'_>, now: Timestamp) -> Result<Value, Error> {
    let keys = keys_list(a.keys_list)?;
    let me = address(a.address, "address")?;
    let item = object(a.item, "mailbox item")?;
    let mut m = Object::new();
    m.insert("seq".into(), item.get("seq").cloned().unwrap_or(Value::Null));
    m.insert("received".into(), item.get("received").cloned().unwrap_or(Value::Null));
    let raw = match item.get("envelope") {
        Some(Value::Object(o)) => o.clone(),
        _ => {
            m.insert("trust".into(), "invalid".into());
            m.insert("trust_reason".into(), "the mailbox item holds no envelope".into());
            return Ok(Value::Object(m));
        }
    };
    m.insert("id".into(), raw.get("id").cloned().unwrap_or(Value::Null));
    m.insert("from".into(), raw.get("from").cloned().unwrap_or(Value::Null));
    // Mail that came in by email: its real sender, subject and the house's verdicts, shown for
    // what they are (recorded by the house, never verified).
    if raw.get("via").and_then(Value::as_str) == Some("email")
        && let Some(email) = raw.get("extensions").and_then(Value::as_object).and_then(|x| x.get(EXT_EMAIL))
    {
        m.insert("email".into(), email.clone());
    }
    let env = match Envelope::from_object(raw) {
        Ok(e) => e,
        Err(e) => {
            m.insert("trust".into(), "invalid".into());
            m.insert("trust_reason".into(), format!("malformed envelope: {}", e.reason).into());
            return Ok(Value::Object(m));
        }
    };
    m.insert("to".into(), Value::Array(env.to().iter().map(|a| a.as_str().into()).collect()));
    m.insert("created".into(), env.created().to_rfc3339().into());
    m.insert("type".into(), env.kind().as_str().into());
    m.insert("thread".into(), env.thread().map(str::to_owned).into());
    m.insert("in_reply_to".into(), env.in_reply_to().map(str::to_owned).into());
    m.insert("sha256".into(), env.sha256_hex().into());
    let notice = env.from().local() == POSTMASTER;
    m.insert("notice".into(), Value::Bool(notice));
    if notice {
        // Which house says so: the agent's own, or another (a remote house's bounce or receipt).
        m.insert("notice_house".into(), env.from().domain().into());
        m.insert("own_house".into(), Value::Bool(env.from().domain() == me.domain()));
    }
    let (trust, why) = check(&env, notice, a.sender_card, a.sender_domain, now);
    m.insert("trust".into(), trust.into());
    if let Some(w) = why {
        m.insert("trust_reason".into(), w.into());
    }
    m.insert("sealed".into(), Value::Bool(matches!(env.payload(), Payload::Sealed(_))));
    match open(&env, &me, &keys) {
        Ok(c) => {
            m.insert("content".into(), c);
        }
        Err(why) => {
            m.insert("content".into(), Value::Null);
            m.insert("open_error".into(), why.into());
        }
    }
    Ok(Value::Object(m))
}

/// `peek`: who an item says it is from, unverified, so the browser knows which cards to fetch.
pub(crate) fn peek(item_json: &str) -> Result<Value, Error> {
    let item = object(item_json, "mailbox item")?;
    let env = item.get("envelope").and_then(Value::as_object);
    let from = env.and_then(|e| e.get("from")).and_then(Value::as_str);
    let parsed = from.and_then(|f| Address::parse(f).ok());
    Ok(Value::Object(obj([
        ("from", from.map(str::to_owned).into()),
        ("notice", Value::Bool(parsed.as_ref().is_some_and(|a| a.local() == POSTMASTER))),
        ("signed", Value::Bool(env.is_some_and(|e| e.contains_key("signature")))),
        ("parent", parsed.and_then(|a| a.parent()).map(|p| p.as_str().to_owned()).into()),
    ])))
}
