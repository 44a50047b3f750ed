//! Drafts a person approves (docs/SPEC.md §7c), in the browser: the approvers' keys a held send
//! carries, and a draft opened by its approver — as `nyx5 send` and `nyx5 drafts show` do them.

use nyx5_proto::crypto::EncPublic;
use nyx5_proto::json::{Value, obj};
use nyx5_proto::{Envelope, Error, Refusal, Timestamp, seal};

use crate::mail::keys_list;
use crate::send::recipients;
use crate::util::{OsRandom, about, address, object, value};

/// `readers_for`: the `readers` query value for `envelope_json`, sent by `address` (opened with
/// one of its keys, current first), wrapped for each approver of `approvers_json`
/// (`[{card, domain, parent?}]`, verified as recipients are): `{"readers": "<base64url>"}`.
pub(crate) fn readers_for(
    keys_list_json: &str,
    address_text: &str,
    envelope_json: &str,
    approvers_json: &str,
    now: Timestamp,
) -> Result<Value, Error> {
    let keys = keys_list(keys_list_json)?;
    let me = address(address_text, "address")?;
    let env = Envelope::from_object(object(envelope_json, "envelope")?).map_err(about("envelope"))?;
    let approvers = recipients(&value(approvers_json, "approvers")?, now)?;
    let mut wraps: Vec<(nyx5_proto::Address, EncPublic)> = Vec::new();
    for card in &approvers {
        let enc = card.enc().ok_or_else(|| {
            Refusal::CannotSeal.because(format!("the approver {} publishes no encryption key", card.address()))
        })?;
        wraps.push((card.address().clone(), enc));
    }
    let mut rng = OsRandom::default();
    let q = nyx5_client::send::readers_query(&env, &me, keys.iter().map(|k| &k.enc), &wraps, &mut rng)?;
    rng.check()?;
    Ok(Value::Object(obj([("readers", q.into())])))
}

/// `open_draft`: a draft (`GET /drafts/:local/:id`'s `draft`) as its approver `address` reads
/// it: `{"content", "carries"}` opened (`carries`: the whole envelope as its recipients will read
/// it, every member beside the body) (clear, or with the key its sender wrapped for the approver, checked
/// against the envelope's commitment), or `{"unreadable": why}`.
pub(crate) fn open_draft(keys_list_json: &str, address_text: &str, draft_json: &str) -> Result<Value, Error> {
    let keys = keys_list(keys_list_json)?;
    address(address_text, "address")?;
    let draft = object(draft_json, "draft")?;
    let unreadable = |why: String| Ok(Value::Object(obj([("unreadable", why.into())])));
    let Some(env) = draft.get("envelope").and_then(Value::as_object) else {
        return unreadable("the draft carries no envelope: only its approver sees it".into());
    };
    let env = match Envelope::from_object(env.clone()) {
        Ok(env) => env,
        Err(e) => return unreadable(e.reason.to_string()),
    };
    let read = |c: &nyx5_proto::envelope::Content| {
        Ok(Value::Object(obj([("content", c.to_value()), ("carries", nyx5_client::send::as_read(&env, c))])))
    };
    if let Some(c) = env.content() {
        return read(c);
    }
    let Some(key) = draft.get("key") else {
        return unreadable("its sender gave no key for you: you cannot read what you would approve; decline it".into());
    };
    let key = match seal::ReaderKey::from_value(key, "key") {
        Ok(k) => k,
        Err(e) => return unreadable(e.reason.to_string()),
    };
    let mut last = String::from("no key of yours opens it");
    for k in &keys {
        match seal::open_as_reader(&env, &key, &k.enc) {
            Ok(c) => return read(&c),
            Err(e) => last = e.reason.to_string(),
        }
    }
    unreadable(format!("cannot open it ({last}): decline it"))
}
