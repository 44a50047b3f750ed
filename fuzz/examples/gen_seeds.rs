//! Writes the seed corpora under `fuzz/seeds/<target>/`: a few valid inputs per target, all
//! deterministic (fixed keys, fixed instants, counter entropy), so re-running changes nothing.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds` (from the repository root).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};

use nyx5_proto::auth::AuthHeader;
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::card::{AgentCardDraft, Delegation, DomainCardDraft, Scope};
use nyx5_proto::crypto::{EncSecret, SigningKey};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{Value, obj};
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, AgentCard, DomainCard, Envelope, Timestamp, seal};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
    println!("{}/{name} ({} bytes)", dir.display(), bytes.len());
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let now = Timestamp::from_millis(1_788_548_400_123); // 2026-09-04T19:00:00.123Z
    let mut counter = 0u8;
    let mut rng = move |buf: &mut [u8]| {
        for b in buf {
            counter = counter.wrapping_add(0x9d);
            *b = counter;
        }
    };

    let domain_key = SigningKey::from_seed([1; 32]);
    let ana_key = SigningKey::from_seed([2; 32]);
    let bob_key = SigningKey::from_seed([3; 32]);
    let bob_enc = EncSecret::from_bytes([4; 32]);
    let ana = Address::parse("ana@sigo.uk").unwrap();
    let bob = Address::parse("bob@example.org").unwrap();
    let sub = Address::parse("tester.ana@sigo.uk").unwrap();

    // canonical_json: small documents exercising every value kind and number formatting.
    let dir = root.join("canonical_json");
    write(&dir, "object.json", br#"{"b":[1,2.5,-0,1e21,1e-7],"a":{"x":null,"y":true,"z":false}}"#);
    write(
        &dir,
        "strings.json",
        "[\"\\u0001\\u001f/\\\"\\\\\\b\\n\",\"\u{e9}\u{20ac}\",\"\\ud83d\\ude00\",\"\u{fb01}\"]".as_bytes(),
    );
    write(
        &dir,
        "numbers.json",
        b"[0, -1, 9007199254740991, 123.456, 1424953923781206.25, 5e-324, 1.7976931348623157e308]",
    );
    write(&dir, "utf16_order.json", "{\"\u{fb01}\":1,\"\u{1f600}\":2,\"a\":3,\"\":4}".as_bytes());
    // Regression: integral values beyond 2^53 written with an exponent or a fraction used to be
    // accepted while their canonical form (an integer literal) was refused.
    write(&dir, "regress_big_integral.json", b"[1e16,-1e16,90071992543923781206.25,1071992543923781206.5]");

    // envelope: clear, signed, with optional members, and sealed.
    let dir = root.join("envelope");
    let mut draft = Draft::new(
        "0b6f3c1e-8d0a-4c1a-9d5e-1f2a3b4c5d6e".into(),
        ana.clone(),
        vec![bob.clone()],
        now,
        Content::new("text/plain", "hola, bob".into()),
    );
    let clear = draft.clone().build().unwrap();
    write(&dir, "clear.json", &clear.canonical());
    let signed = clear.clone().sign(&ana_key).unwrap();
    write(&dir, "signed.json", &signed.canonical());
    draft.kind = Kind::Task;
    draft.expires = Some(now.plus_ms(86_400_000));
    draft.deliver_after = Some(now.plus_ms(60_000));
    draft.thread = Some("thread-1".into());
    draft.in_reply_to = Some("msg.0".into());
    draft.content = Content::new(
        "application/json",
        Value::Object(obj([("task", "sum".into()), ("args", Value::Array(vec![1.into(), 2.into()]))])),
    );
    draft.extra = obj([
        ("receipt", "delivered".into()),
        ("stamp", Value::Object(obj([("house", "sigo.uk".into()), ("amount", 5.into())]))),
        ("pow", Value::Object(obj([("bits", 12.into()), ("nonce", "abc123".into())]))),
        (
            "attachments",
            Value::Array(vec![Value::Object(obj([
                ("url", "https://sigo.uk/a/1".into()),
                ("sha256", "ab".repeat(32).into()),
                ("bytes", 1024.into()),
            ]))]),
        ),
        ("extensions", Value::Object(obj([("x-test", true.into())]))),
        ("unknown_member", "kept and signed".into()),
    ]);
    let full = draft.build().unwrap().sign(&ana_key).unwrap();
    write(&dir, "full.json", &full.canonical());
    let sealed = seal::seal(clear, &[(bob.clone(), bob_enc.public())], &mut rng).unwrap().sign(&ana_key).unwrap();
    write(&dir, "sealed.json", &sealed.canonical());

    // card: a domain card, an agent card, a delegated agent card.
    let dir = root.join("card");
    let domain_card = DomainCardDraft {
        domain: "sigo.uk".into(),
        estafeta: "https://sigo.uk/nyx5".into(),
        other_keys: Vec::new(),
        previous: Vec::new(),
        policy: obj([("max_bytes", 262_144.into())]),
        extensions: vec!["quotes".into()],
        issued: now,
    }
    .sign(&domain_key, now)
    .unwrap();
    write(&dir, "domain.json", &domain_card.to_value().canonical());
    let agent = AgentCardDraft::new(ana.clone(), ana_key.public(), Some(EncSecret::from_bytes([5; 32]).public()), now)
        .certify(&domain_key)
        .unwrap();
    write(&dir, "agent.json", &agent.to_value().canonical());
    let sub_key = SigningKey::from_seed([6; 32]);
    let scope =
        Scope { types: Some(vec!["message".into()]), to_domains: Some(vec!["example.org".into()]), cap: Some(100), authority: None };
    let delegation =
        Delegation::sign(&ana, &sub, &sub_key.public(), &scope, Some(now.plus_ms(3_600_000)), now, &ana_key).unwrap();
    let mut sub_draft = AgentCardDraft::new(sub.clone(), sub_key.public(), None, now);
    sub_draft.delegation = Some(delegation);
    let delegated = sub_draft.certify(&domain_key).unwrap();
    write(&dir, "delegated.json", &delegated.to_value().canonical());

    // auth_header: two signed tokens.
    let dir = root.join("auth_header");
    let claims = Claims {
        address: ana.clone(),
        ts: now,
        nonce: "AAECAwQFBgcICQoLDA0ODw".into(),
        target: Target::new("get", "/mailbox/ana", "limit=10", "sigo.uk", b""),
    };
    write(&dir, "get.txt", claims.sign(&ana_key).as_bytes());
    let claims = Claims {
        address: bob.clone(),
        ts: now.plus_ms(1),
        nonce: "nonce-nonce-nonce-nonce".into(),
        target: Target::new("POST", "/outbound", "", "example.org:8787", b"{}"),
    };
    write(&dir, "post.txt", claims.sign(&bob_key).as_bytes());

    // relay_header: as written, and reordered with extra spaces.
    let dir = root.join("relay_header");
    let relay = RelayHeader::sign("sigo.uk", &signed, "example.org", &domain_key);
    write(&dir, "signed.txt", relay.to_header().as_bytes());
    let reordered =
        format!("  nyx51  sig={} ;kid={};domain = sigo.uk ", nyx5_proto::b64::encode(&relay.sig), relay.kid.to_b64());
    write(&dir, "reordered.txt", reordered.as_bytes());

    // libro: an operation's body of each kind, a signed quote, receipt and entry.
    let dir = root.join("libro");
    for (name, text) in [
        ("op-release.json", r#"{"contract":"c-1","op":"release"}"#),
        (
            "op-bond.json",
            r#"{"amount":5,"claim":"the build is green","expires":"2026-09-05T19:00:00Z","op":"bond","verifier":"bob@example.org","vouchee":"ana@sigo.uk"}"#,
        ),
        (
            "op-mandate.json",
            r#"{"cap":30,"grantee":"bob@example.org","op":"mandate","parent":"m-1","scope":{"concepts":["gpu"]}}"#,
        ),
        ("op-charge.json", r#"{"amount":3,"concept":"gpu","mandate":"m-1","op":"charge"}"#),
        ("op-statement.json", r#"{"limit":5,"op":"statement"}"#),
    ] {
        write(&dir, name, text.as_bytes());
    }
    let quote = nyx5_proto::quote::QuoteDraft {
        id: "q-1".into(),
        house: "sigo.uk".into(),
        seller: bob.clone(),
        buyer: ana.clone(),
        contract: nyx5_proto::quote::ContractKind::Escrow,
        price: 40,
        currency: "tok".into(),
        concept: "a deploy check".into(),
        terms: Some(obj([("deadline", "2026-09-15".into())])),
        arbiter: None,
        referrer: Some(nyx5_proto::quote::Referrer {
            address: Address::parse("ref@sigo.uk").unwrap(),
            share_bps: 1500,
        }),
        issued: now,
        expires: None,
        extra: nyx5_proto::Object::new(),
    }
    .sign(&bob_key)
    .unwrap();
    write(&dir, "quote.json", &quote.to_value().canonical());
    let accept = Value::Object(obj([("op", "accept".into()), ("quote", quote.to_value())]));
    write(&dir, "op-accept.json", &accept.canonical());
    let entry = nyx5_proto::libro::EntryDraft {
        id: "e-1".into(),
        at: now,
        house: "sigo.uk".into(),
        concept: "a deploy check".into(),
        lines: vec![nyx5_proto::libro::Line::new("ana@sigo.uk", -40), nyx5_proto::libro::Line::new("escrow:q-1", 40)],
        meta: obj([("primitive", "hold".into())]),
        refs: obj([("contract", "q-1".into()), ("op", "op-1".into())]),
    }
    .sign(1, nyx5_proto::libro::GENESIS, &domain_key)
    .unwrap();
    write(&dir, "entry.json", &entry.to_value().canonical());
    let receipt = nyx5_proto::receipt::Receipt::sign(
        "sigo.uk",
        "op-1",
        "accept",
        &"a".repeat(64),
        &ana,
        now,
        nyx5_proto::receipt::Status::Done,
        obj([("asiento", entry.to_value()), ("cotizacion_sha256", quote.sha256_hex().into())]),
        &domain_key,
    )
    .unwrap();
    write(&dir, "receipt.json", &receipt.to_value().canonical());

    // libro_sequence: `arbitrary` draws its scripts, so it needs no valid inputs. Regression: a
    // one-byte input (the empty script) leaked the simulated world, as every script did, through
    // an `Rc` cycle between the network's state and its houses.
    write(&root.join("libro_sequence"), "regress_world_leak", b"\n");

    // verifica: terms.verify as quotes carry them (docs/SPEC.md §22).
    let dir = root.join("verifica");
    let hash = nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(b"deployed"));
    write(&dir, "status.json", br#"{"verify":[{"type":"http_status","url":"https://site.example/{contract}"}]}"#);
    // Regression (the first campaign): `https:/host/…`, one slash, was taken as it was written
    // while a parser reads it as `https://host/…`. Refused now; kept so every run tries it.
    write(&dir, "regress_single_slash", br#"{"verify":[{"type":"http_status","url":"https:/ilst/amxeep,,.'e/"}]}"#);
    write(
        &dir,
        "both.json",
        format!(
            r#"{{"deadline":"2030-01-01","task":"t1","verify":[{{"expect":204,"type":"http_status","url":"https://a.example/x"}},{{"expect":"{hash}","type":"sha256","url":"https://a.example/y"}},{{"expect":"{hash}","type":"sha256"}}]}}"#
        )
        .as_bytes(),
    );

    // Every seed must be accepted by the parser its target exercises.
    for (target, accepts) in [
        ("canonical_json", (|b: &[u8]| Value::parse(b, MAX_ENVELOPE_BYTES).is_ok()) as fn(&[u8]) -> bool),
        ("envelope", |b| Envelope::parse(b, MAX_ENVELOPE_BYTES).is_ok()),
        ("card", |b| DomainCard::parse(b).is_ok() || AgentCard::parse(b).is_ok()),
        ("auth_header", |b| std::str::from_utf8(b).is_ok_and(|t| AuthHeader::parse(t).is_ok())),
        ("relay_header", |b| std::str::from_utf8(b).is_ok_and(|t| RelayHeader::parse(t).is_ok())),
        ("libro", |b| {
            let Ok(Value::Object(o)) = Value::parse(b, MAX_ENVELOPE_BYTES) else { return false };
            nyx5_rules::libro::op::Op::parse(&o).is_ok()
                || nyx5_proto::quote::Quote::from_object(o.clone()).is_ok()
                || nyx5_proto::receipt::Receipt::from_object(o.clone()).is_ok()
                || nyx5_proto::libro::Entry::from_object(o).is_ok()
        }),
        ("verifica", |b| {
            let Ok(Value::Object(o)) = Value::parse(b, MAX_ENVELOPE_BYTES) else { return false };
            nyx5_house::libro::verifica::parse_tests(&o, None).is_ok()
        }),
    ] {
        for entry in std::fs::read_dir(root.join(target)).unwrap() {
            let path = entry.unwrap().path();
            // A regression input is one the parser once took wrongly; it may well refuse it now.
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("regress_")) {
                continue;
            }
            assert!(accepts(&std::fs::read(&path).unwrap()), "{} is refused", path.display());
        }
    }
}
