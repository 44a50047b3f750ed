//! Domain key ends and handovers (docs/SPEC.md §4.1, §6.1): a card signed by a new key continues
//! from a pin only with the pinned key's handover to that key, over exactly these bytes, before
//! its end; a key past its `until` verifies nothing.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use nyx5_proto::card::{
    AgentCardDraft, DomainCard, DomainCardDraft, DomainKey, HANDOVER_TYPE, PreviousDomainKey, handover_message,
};
use nyx5_proto::crypto::{Context, SigningKey};
use nyx5_proto::json::{Value, obj};
use nyx5_proto::{Address, Refusal, Timestamp};

const NOW: Timestamp = Timestamp(1_800_000_000_000);
const DAY: i64 = 86_400_000;

fn draft(previous: Vec<PreviousDomainKey>, others: Vec<DomainKey>) -> DomainCardDraft {
    DomainCardDraft {
        domain: "h.test".into(),
        estafeta: "https://h.test".into(),
        other_keys: others,
        previous,
        policy: obj([("inbound", "verified".into())]),
        extensions: vec![],
        issued: NOW,
    }
}

fn rotated(old: &SigningKey, new: &SigningKey, until: Timestamp) -> DomainCard {
    draft(vec![PreviousDomainKey { key: old.clone(), created: Some(Timestamp(0)), until }], vec![])
        .sign(new, NOW)
        .unwrap()
}

#[test]
fn a_handover_is_listed_and_followed_from_the_pin() {
    let (old, new) = (SigningKey::from_seed([1; 32]), SigningKey::from_seed([2; 32]));
    let until = Timestamp(NOW.millis() + 30 * DAY);
    let card = rotated(&old, &new, until);
    assert_eq!(card.keys()[0].sig, new.public());
    assert_eq!(card.keys()[1].sig, old.public());
    assert_eq!(card.keys()[1].until, Some(until));
    // The signed statement is exactly the documented canonical JSON.
    let text = String::from_utf8(handover_message("h.test", &old.public(), &new.public(), until)).unwrap();
    assert_eq!(
        text,
        format!(
            r#"{{"domain":"h.test","from":"{}","to":"{}","type":"{HANDOVER_TYPE}","until":"{}"}}"#,
            old.public().to_b64(),
            new.public().to_b64(),
            until.to_rfc3339()
        )
    );
    assert!(old.public().verify(
        Context::DomainKeyHandover,
        text.as_bytes(),
        card.keys()[1].handover.as_ref().unwrap()
    ));
    // Round trip through the wire keeps it.
    let again = DomainCard::parse(&card.to_value().canonical()).unwrap();
    assert_eq!(again.keys(), card.keys());

    let (v, moved) = card.clone().verify_continuing(&old.public(), NOW).unwrap();
    assert!(moved);
    assert_eq!(v.signer().unwrap(), new.public());
    let (_, moved) = card.clone().verify_continuing(&new.public(), NOW).unwrap();
    assert!(!moved);
    // Past the end, the handover no longer counts, and the old key verifies nothing.
    let late = Timestamp(until.millis());
    assert_eq!(card.clone().verify_continuing(&old.public(), late).unwrap_err().refusal(), Some(Refusal::PinMismatch));
    assert!(card.accepts_key(&old.public(), Timestamp(until.millis() - 1)));
    assert!(!card.accepts_key(&old.public(), late));
    assert!(card.accepts_key(&new.public(), late));
    // A pin the card never heard of.
    let stranger = SigningKey::from_seed([3; 32]).public();
    assert!(card.verify_continuing(&stranger, NOW).is_err());
}

#[test]
fn listing_the_pinned_key_without_its_handover_proves_nothing() {
    let (pinned, mitm) = (SigningKey::from_seed([1; 32]), SigningKey::from_seed([9; 32]));
    let until = Timestamp(NOW.millis() + DAY);
    let with = |k: DomainKey| draft(vec![], vec![k]).sign(&mitm, NOW).unwrap().verify_continuing(&pinned.public(), NOW);
    let bare = DomainKey::new(pinned.public(), None);
    assert!(with(bare.clone()).is_err());
    assert!(with(DomainKey { until: Some(until), ..bare.clone() }).is_err());
    // Signatures of the right shape over other bytes: by the attacker, for another `to`, for
    // another domain, for another `until` than the entry says.
    let msg = |domain: &str, to: &SigningKey, u: Timestamp| handover_message(domain, &pinned.public(), &to.public(), u);
    let other = SigningKey::from_seed([4; 32]);
    for handover in [
        mitm.sign(Context::DomainKeyHandover, &msg("h.test", &mitm, until)),
        pinned.sign(Context::DomainKeyHandover, &msg("h.test", &other, until)),
        pinned.sign(Context::DomainKeyHandover, &msg("x.test", &mitm, until)),
        pinned.sign(Context::DomainKeyHandover, &msg("h.test", &mitm, Timestamp(until.millis() + 1))),
        [0; 64],
    ] {
        let k = DomainKey { until: Some(until), handover: Some(handover), ..bare.clone() };
        assert_eq!(with(k).unwrap_err().refusal(), Some(Refusal::PinMismatch));
    }
    // The right one passes, so the refusals above are about the bytes.
    let k = DomainKey {
        until: Some(until),
        handover: Some(pinned.sign(Context::DomainKeyHandover, &msg("h.test", &mitm, until))),
        ..bare
    };
    assert!(with(k).is_ok());
}

#[test]
fn a_domain_key_past_its_end_certifies_nothing() {
    let (old, new) = (SigningKey::from_seed([1; 32]), SigningKey::from_seed([2; 32]));
    let until = Timestamp(NOW.millis() + DAY);
    let domain = rotated(&old, &new, until).verify(None).unwrap();
    let agent = SigningKey::from_seed([5; 32]).public();
    let card =
        AgentCardDraft::new(Address::parse("a@h.test").unwrap(), agent, None, Timestamp(0)).certify(&old).unwrap();
    assert!(card.clone().verify(&domain, None, NOW).is_ok());
    assert_eq!(card.clone().verify(&domain, None, until).unwrap_err().refusal(), Some(Refusal::UntrustedKey));
    // Certified again by the active key, the same card verifies after the end, members unchanged.
    let again = card.clone().recertify(&new).unwrap();
    assert_eq!(again.certifier().unwrap(), new.public());
    assert_eq!(again.address(), card.address());
    assert!(again.verify(&domain, None, until).is_ok());
}

#[test]
fn malformed_key_entries_are_refused() {
    let new = SigningKey::from_seed([2; 32]);
    let card = draft(vec![], vec![]).sign(&new, NOW).unwrap();
    let mut o = card.object().clone();
    let key = Value::Object(obj([("sig", new.public().to_b64().into()), ("handover", "AAAA".into())]));
    o.insert("keys".into(), Value::Array(vec![key]));
    assert_eq!(DomainCard::from_object(o.clone()).unwrap_err().refusal(), Some(Refusal::BadCard));
    let key = Value::Object(obj([("sig", new.public().to_b64().into())]));
    o.insert("keys".into(), Value::Array(vec![key.clone(), key]));
    assert_eq!(DomainCard::from_object(o).unwrap_err().refusal(), Some(Refusal::BadCard));
}
