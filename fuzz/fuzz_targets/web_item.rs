//! `nyx5-web` on what strangers hand the browser: any bytes as a mailbox item for `open_item` and
//! `peek`, and as a profile file for `profile_import`. Nothing panics; `open_item` fails only on
//! an item that is not a JSON object; an item it calls `verified` carries an envelope that
//! verifies with the sender card it was given (one fixed agent of one fixed house); and an
//! imported profile exports and imports again to the same agents.
#![no_main]
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nyx5_proto::card::{AgentCardDraft, DomainCardDraft};
use nyx5_proto::crypto::{EncSecret, SigningKey};
use nyx5_proto::json::{Value, obj};
use nyx5_proto::{Address, AgentCard, Envelope, Timestamp, b64};

const NOW: Timestamp = Timestamp(1_800_000_000_000);
const NOW_MS: f64 = 1_800_000_000_000.0;

struct Fixture {
    keys_list: String,
    domain: String,
    card: String,
}

/// One house, `a.example`, and one agent of it, `al@a.example`.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let key = SigningKey::from_seed([7; 32]);
        let domain = DomainCardDraft {
            domain: "a.example".into(),
            estafeta: "https://a.example".into(),
            other_keys: vec![],
            previous: vec![],
            policy: obj([("inbound", "verified".into())]),
            extensions: vec![],
            issued: Timestamp(NOW.millis() - 86_400_000),
        }
        .sign(&key, Timestamp(NOW.millis() - 86_400_000))
        .unwrap()
        .verify(None)
        .unwrap();
        // Fixed test keys, so the seeds (fuzz/seeds/make_web_item.mjs) can be signed by this agent.
        let keys = include_str!("web_item_keys.json").trim().to_owned();
        let o = Value::parse_str(&keys).unwrap();
        let o = o.as_object().unwrap();
        let secret = |k: &str| b64::decode_array::<32>(o.get(k).and_then(Value::as_str).unwrap()).unwrap();
        let sig = SigningKey::from_seed(secret("sig_secret"));
        let enc = EncSecret::from_bytes(secret("enc_secret"));
        let card = AgentCardDraft::new(Address::parse("al@a.example").unwrap(), sig.public(), Some(enc.public()), NOW)
            .certify(&key)
            .unwrap()
            .verify(&domain, None, NOW)
            .unwrap();
        Fixture {
            keys_list: format!("[{keys}]"),
            domain: domain.to_value().canonical_string(),
            card: card.to_value().canonical_string(),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let text = String::from_utf8_lossy(data);
    let _ = nyx5_web::peek(&text);
    let is_object = matches!(Value::parse(text.as_bytes(), 16 << 20), Ok(Value::Object(_)));
    match nyx5_web::open_item(&f.keys_list, "al@a.example", &text, &f.card, &f.domain, NOW_MS) {
        Ok(view) => {
            assert!(is_object, "open_item accepted an item that is not an object");
            let view = Value::parse_str(&view).expect("open_item answers JSON");
            let view = view.as_object().expect("open_item answers an object");
            if view.get("trust").and_then(Value::as_str) == Some("verified") {
                let item = Value::parse(text.as_bytes(), 16 << 20).unwrap();
                let env = item.as_object().and_then(|o| o.get("envelope")).and_then(Value::as_object).unwrap();
                let env = Envelope::from_object(env.clone()).expect("a verified item holds an envelope");
                if env.from().local() != "postmaster" {
                    let card = AgentCard::parse(f.card.as_bytes()).unwrap();
                    assert_eq!(env.from(), card.address(), "verified mail from another sender");
                    let domain = nyx5_proto::DomainCard::parse(f.domain.as_bytes()).unwrap().verify(None).unwrap();
                    let card = card.verify(&domain, None, NOW).unwrap();
                    env.verify(&card, NOW).expect("verified mail whose signature does not verify");
                }
            }
        }
        Err(e) => assert!(!is_object || e.starts_with("400 "), "open_item refused an object item: {e}"),
    }
    if let Ok(imported) = nyx5_web::profile_import(&text) {
        let v = Value::parse_str(&imported).unwrap();
        let o = v.as_object().unwrap();
        let agents = o.get("agents").unwrap().canonical_string();
        let pins = o.get("pins").map_or_else(|| "{}".to_owned(), Value::canonical_string);
        let file = nyx5_web::profile_export(&agents, &pins).expect("an imported profile exports");
        let again = nyx5_web::profile_import(&file).expect("an exported profile imports");
        assert_eq!(again, imported, "a profile changed on its way out and back in");
    }
});
