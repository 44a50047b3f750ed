//! Mailbox items in: checked against the sender's card (a postmaster's notice against its
//! domain card) and opened into the view `nyx5 inbox` shows too (`nyx5_proto::mailbox::view`). Mail without a signature (it came by
//! email) is `unverified`, never signed; a signature that fails is `invalid`; a sender whose
//! cards the browser could not fetch is `unchecked`.

use nyx5_proto::json::{Value, obj};
use nyx5_proto::mailbox::{POSTMASTER, Trust};
use nyx5_proto::{Address, Envelope, Error, Refusal, Timestamp};

use crate::cards::{agent_card, domain_card_text, parents};
use crate::keys::Keys;
use crate::util::{about, address, object, value};

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
    if env.signature().is_none() {
        return nyx5_proto::mailbox::unsigned();
    }
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
        return nyx5_client::inbox::notice_verdict(env, &domain, now);
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
        Ok(card) => nyx5_client::inbox::agent_verdict(env, &card, now),
        Err(e) => invalid(e.reason),
    }
}

/// The keys that may open mail: an array of key objects, the current ones first.
pub(crate) fn keys_list(text: &str) -> Result<Vec<Keys>, Error> {
    let list = value(text, "keys list")?;
    let list =
        list.as_array().ok_or_else(|| Refusal::BadKeySet.because("the keys list must be an array of key objects"))?;
    list.iter()
        .enumerate()
        .map(|(i, k)| {
            let what = format!("keys list [{i}]");
            let o = k.as_object().ok_or_else(|| Refusal::BadKeySet.because(format!("{what} must be an object")))?;
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
    Ok(nyx5_proto::mailbox::view(
        &item,
        &me,
        |env, notice| check(env, notice, a.sender_card, a.sender_domain, now),
        |env| nyx5_proto::mailbox::open_with(env, &me, keys.iter().map(|k| &k.enc)),
    ))
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

/// `own_view`: an envelope the agent sent, as its mailbox would show it (opened with its own
/// keys: an envelope is sealed to its sender too), to be kept on its side. The page built and
/// signed it a moment ago: its trust is `verified`, as `nyx5 send` keeps it.
pub(crate) fn own_view(keys_list: &str, address_text: &str, envelope_json: &str) -> Result<Value, Error> {
    let keys = self::keys_list(keys_list)?;
    let me = address(address_text, "address")?;
    let envelope = object(envelope_json, "envelope")?;
    let item = obj([("seq", Value::Null), ("envelope", Value::Object(envelope))]);
    Ok(nyx5_proto::mailbox::view(
        &item,
        &me,
        |_, _| ("verified", None),
        |env| nyx5_proto::mailbox::open_with(env, &me, keys.iter().map(|k| &k.enc)),
    ))
}

/// `kept_record`: what the page's store keeps of a message view (`nyx5_client::kept`, the
/// rules the command's store follows): `{id, dir, at, seq, from, to, kind, subject, body, keys,
/// view}`, or null for a view with no id.
pub(crate) fn kept_record(view_json: &str, dir: &str, now: Timestamp) -> Result<Value, Error> {
    use nyx5_client::kept::{self, Dir};
    let v = value(view_json, "view")?;
    let dir = match dir {
        "in" => Dir::In,
        "out" => Dir::Out,
        _ => return Err(Refusal::BadInput.because(format!("dir {dir:?}: in or out"))),
    };
    let Some(k) = kept::kept(&v, dir, now) else { return Ok(Value::Null) };
    let strings = |list: Vec<String>| Value::Array(list.into_iter().map(Value::from).collect());
    Ok(Value::Object(obj([
        ("id", k.id.into()),
        ("dir", dir.as_str().into()),
        ("at", k.at.into()),
        ("seq", k.seq.into()),
        ("from", k.from.into()),
        ("to", strings(k.to)),
        ("sender", k.sender.into()),
        ("parties", strings(k.parties)),
        ("kind", k.kind.into()),
        ("subject", k.subject.into()),
        ("body", k.body.into()),
        ("keys", strings(k.keys)),
        ("view", k.view),
    ])))
}
