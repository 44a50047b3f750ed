//! A mailbox item as a client shows it (docs/SPEC.md §8c): `{seq, received, envelope}` from
//! `GET /mailbox/:local` turned into one JSON view — who, when, what kind, whether it is a house's
//! notice, how far it can be trusted and, when it opens, its content. `nyx5 inbox` and the
//! browser (`nyx5-web`) both build it with [`view`]; they differ only in how they find the
//! sender's card (the CLI's resolver, the cards the page fetched), which they pass as `check`.

use crate::crypto::EncSecret;
use crate::envelope::Payload;
use crate::json::{Object, Value};
use crate::{Address, Envelope, seal};

/// The local part a house's notices (bounces, delivery receipts) come from (docs/SPEC.md §7).
pub const POSTMASTER: &str = "postmaster";
/// The email bridge's extension: an email's real sender, subject and the house's verdicts.
pub const EXT_EMAIL: &str = "urn:nyx5:ext:email";

/// The local part of a house's email gateway, the `from` of the envelopes its email bridge makes.
pub const EMAIL_GATEWAY: &str = "email";

/// How far a message can be trusted: `verified`, `unverified` (not signed), `invalid` (signed,
/// but not by its sender) or `unchecked` (its sender's card could not be had), and why.
pub type Trust = (&'static str, Option<String>);

/// The trust of an envelope with no signature: anyone could have written it.
pub fn unsigned() -> Trust {
    (
        "unverified",
        Some("not signed: it came in without a Nyx5 signature (e.g. by email); anyone could have written it".into()),
    )
}

/// Opens a sealed envelope for `me` with each secret in turn (the current one first, then
/// retired ones): its content, or why the last secret could not open it.
pub fn open_with<'a>(
    env: &Envelope,
    me: &Address,
    secrets: impl IntoIterator<Item = &'a EncSecret>,
) -> Result<Value, String> {
    let mut last = String::from("no key");
    for secret in secrets {
        match seal::open(env, me, secret) {
            Ok(c) => return Ok(c.to_value()),
            Err(e) => last = e.reason.to_string(),
        }
    }
    Err(last)
}

/// The view of one mailbox item for `me`. `check(env, notice)` judges the signature of an
/// envelope that has one (`notice`: from a house's postmaster, signed by a domain key);
/// `open(env)` opens a sealed one with whatever keys the caller holds. Never fails: an item
/// that holds no envelope, or a malformed one, is shown as `invalid` with the reason.
pub fn view(
    item: &Object,
    me: &Address,
    check: impl FnOnce(&Envelope, bool) -> Trust,
    open: impl FnOnce(&Envelope) -> Result<Value, String>,
) -> Value {
    let mut m = Object::new();
    m.insert("seq".into(), item.get("seq").cloned().unwrap_or(Value::Null));
    m.insert("received".into(), item.get("received").cloned().unwrap_or(Value::Null));
    let invalid = |mut m: Object, why: String| {
        m.insert("trust".into(), "invalid".into());
        m.insert("trust_reason".into(), why.into());
        Value::Object(m)
    };
    let raw = match item.get("envelope") {
        Some(Value::Object(o)) => o.clone(),
        _ => return invalid(m, "the mailbox item holds no envelope".into()),
    };
    m.insert("id".into(), raw.get("id").cloned().unwrap_or(Value::Null));
    m.insert("from".into(), raw.get("from").cloned().unwrap_or(Value::Null));
    // Mail that came in by email: its real sender, subject and the house's verdicts, shown for
    // what they are (recorded by the house, never verified). Only an unsigned envelope from the
    // agent's own house's gateway (`email@<its domain>`) is such mail: a house refuses unsigned
    // envelopes from anyone else, so only the house wrote it. A signed envelope that says `via:
    // "email"` and carries the extension is its signer's claim, never shown as email (the second
    // hostile review of kept mail: a stranger posed as email from someone else).
    let gateway = format!("{EMAIL_GATEWAY}@{}", me.domain());
    if raw.get("via").and_then(Value::as_str) == Some("email")
        && !raw.contains_key("signature")
        && raw.get("from").and_then(Value::as_str).is_some_and(|f| f.eq_ignore_ascii_case(&gateway))
        && let Some(email) = raw.get("extensions").and_then(Value::as_object).and_then(|x| x.get(EXT_EMAIL))
    {
        m.insert("email".into(), email.clone());
    }
    let env = match Envelope::from_object(raw) {
        Ok(e) => e,
        Err(e) => return invalid(m, format!("malformed envelope: {}", e.reason)),
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
    let (trust, why) = if env.signature().is_some() { check(&env, notice) } else { unsigned() };
    m.insert("trust".into(), trust.into());
    if let Some(w) = why {
        m.insert("trust_reason".into(), w.into());
    }
    let sealed = matches!(env.payload(), Payload::Sealed(_));
    m.insert("sealed".into(), Value::Bool(sealed));
    let content = match env.payload() {
        Payload::Clear(c) => Ok(c.to_value()),
        Payload::Sealed(_) => open(&env),
    };
    match content {
        Ok(c) => {
            m.insert("content".into(), c);
        }
        Err(why) => {
            m.insert("content".into(), Value::Null);
            m.insert("open_error".into(), why.into());
        }
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::crypto::SigningKey;
    use crate::envelope::{Content, Draft};
    use crate::json::obj;
    use crate::time::Timestamp;

    fn envelope(from: &str, extra: &[(&str, Value)], signed: bool) -> Object {
        let mut d = Draft::new(
            "m-1".into(),
            Address::parse(from).unwrap(),
            vec![Address::parse("al@a.example").unwrap()],
            Timestamp(1_800_000_000_000),
            Content::new("text/plain", "hi".into()),
        );
        for (k, v) in extra {
            d.extra.insert((*k).into(), v.clone());
        }
        let env = d.build().unwrap();
        let env = if signed { env.sign(&SigningKey::from_seed([3; 32])).unwrap() } else { env };
        env.to_value().as_object().unwrap().clone()
    }

    fn item(env: Object) -> Object {
        obj([("seq", 7.into()), ("received", "2027-01-15T08:00:00.000Z".into()), ("envelope", Value::Object(env))])
    }

    fn show(item: &Object, trust: Trust) -> Object {
        let me = Address::parse("al@a.example").unwrap();
        let v = view(item, &me, |_, _| trust, |_| Err("no key".into()));
        v.as_object().unwrap().clone()
    }

    fn s<'a>(o: &'a Object, k: &str) -> &'a str {
        o.get(k).and_then(Value::as_str).unwrap_or("")
    }

    #[test]
    fn a_signed_item_is_judged_by_the_caller_and_an_unsigned_one_is_unverified() {
        let signed = show(&item(envelope("bo@b.example", &[], true)), ("verified", None));
        assert_eq!((s(&signed, "trust"), signed.get("trust_reason")), ("verified", None));
        assert_eq!(s(&signed, "from"), "bo@b.example");
        assert_eq!(signed.get("seq"), Some(&Value::from(7)));
        assert_eq!(signed.get("notice"), Some(&Value::Bool(false)));
        assert_eq!(signed.get("content").and_then(|c| c.as_object()).map(|c| s(c, "body")), Some("hi"));
        // Unsigned mail is never handed to the caller's judge, whatever it would say.
        let unsigned = show(&item(envelope("bo@b.example", &[], false)), ("verified", None));
        assert_eq!(s(&unsigned, "trust"), "unverified");
        assert!(s(&unsigned, "trust_reason").starts_with("not signed"));
        let refused = show(&item(envelope("bo@b.example", &[], true)), ("invalid", Some("not by bo".into())));
        assert_eq!((s(&refused, "trust"), s(&refused, "trust_reason")), ("invalid", "not by bo"));
    }

    #[test]
    fn notices_say_whose_house_and_email_is_shown_only_for_mail_that_came_by_email() {
        let own = show(&item(envelope("postmaster@a.example", &[], true)), ("verified", None));
        assert_eq!(own.get("notice"), Some(&Value::Bool(true)));
        assert_eq!((s(&own, "notice_house"), own.get("own_house")), ("a.example", Some(&Value::Bool(true))));
        let other = show(&item(envelope("postmaster@b.example", &[], true)), ("verified", None));
        assert_eq!(other.get("own_house"), Some(&Value::Bool(false)));
        let ext = Value::Object(obj([(EXT_EMAIL, Value::Object(obj([("from", "p@mail.example".into())])))]));
        let email = |from: &str, signed: bool| {
            show(
                &item(envelope(from, &[("via", "email".into()), ("extensions", ext.clone())], signed)),
                ("verified", None),
            )
        };
        // `show` reads as a.example's agent: its gateway is email@a.example.
        let by_email = email("email@a.example", false);
        assert_eq!(by_email.get("email").and_then(|e| e.as_object()).map(|e| s(e, "from")), Some("p@mail.example"));
        let not_email = show(&item(envelope("p@a.example", &[("extensions", ext.clone())], false)), ("verified", None));
        assert_eq!(not_email.get("email"), None);
        // Posing as email: signed by its sender, or from another house's gateway, or anyone's.
        for posed in [email("email@a.example", true), email("eve@e.example", true), email("email@e.example", false)] {
            assert_eq!(posed.get("email"), None, "{posed:?}");
        }
    }

    #[test]
    fn sealed_mail_opens_with_whichever_secret_it_was_sealed_to() {
        let al = Address::parse("al@a.example").unwrap();
        let (old, new) = (EncSecret::from_bytes([5; 32]), EncSecret::from_bytes([6; 32]));
        let env = Envelope::from_object(envelope("bo@b.example", &[], false)).unwrap();
        let mut n = 0u8;
        let mut rng = |b: &mut [u8]| {
            b.iter_mut().for_each(|x| {
                n = n.wrapping_add(1);
                *x = n;
            })
        };
        let sealed = seal::seal(env, &[(al.clone(), old.public())], &mut rng).unwrap();
        let content = open_with(&sealed, &al, [&new, &old]).unwrap();
        assert_eq!(content.as_object().map(|c| s(c, "body")), Some("hi"));
        assert!(open_with(&sealed, &al, [&new]).is_err());
        assert_eq!(open_with(&sealed, &al, []).unwrap_err(), "no key");
    }

    #[test]
    fn what_holds_no_envelope_or_a_broken_one_is_invalid() {
        let none = show(&obj([("seq", 1.into())]), ("verified", None));
        assert_eq!((s(&none, "trust"), s(&none, "trust_reason")), ("invalid", "the mailbox item holds no envelope"));
        let mut broken = envelope("bo@b.example", &[], true);
        broken.insert("to".into(), Value::Null);
        let broken = show(&item(broken), ("verified", None));
        assert_eq!(s(&broken, "trust"), "invalid");
        assert!(s(&broken, "trust_reason").starts_with("malformed envelope"));
    }
}
