//! Every function of nyx5-web round-trips with nyx5-proto: what the browser makes verifies and
//! opens with the protocol's own functions, and what it checks it checks as they do. Real
//! crypto, real randomness.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use nyx5_proto::address::check_id;
use nyx5_proto::auth::{AuthHeader, Keys, Target};
use nyx5_proto::card::{AgentCardDraft, Delegation, DomainCardDraft, PreviousDomainKey, Scope};
use nyx5_proto::crypto::{Context, EncPublic, EncSecret, SigPublic, SigningKey};
use nyx5_proto::envelope::{Content, Draft, Payload};
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::quote::{ContractKind, QuoteDraft};
use nyx5_proto::sign::verify_object;
use nyx5_proto::{Address, AgentCard, DomainCard, Envelope, Timestamp, Verified, b64, pow, seal};
use nyx5_web as web;

const NOW: Timestamp = Timestamp(1_800_000_000_000);
const NOW_MS: f64 = 1_800_000_000_000.0;
const DAY: i64 = 86_400_000;

fn parse(text: &str) -> Object {
    match Value::parse_str(text) {
        Ok(Value::Object(o)) => o,
        other => panic!("not a JSON object: {text:?} ({other:?})"),
    }
}

fn s<'a>(o: &'a Object, name: &str) -> &'a str {
    o.get(name).and_then(Value::as_str).unwrap_or_else(|| panic!("no string `{name}` in {o:?}"))
}

fn text(v: &Value) -> String {
    v.canonical_string()
}

/// A house: its domain key and its signed domain card.
struct House {
    key: SigningKey,
    card: Verified<DomainCard>,
}

impl House {
    fn new(domain: &str, seed: u8) -> House {
        let key = SigningKey::from_seed([seed; 32]);
        let card = domain_draft(domain, vec![]).sign(&key, Timestamp(NOW.millis() - DAY)).unwrap();
        House { key, card: card.verify(None).unwrap() }
    }

    fn domain(&self) -> String {
        text(&self.card.to_value())
    }
}

fn domain_draft(domain: &str, previous: Vec<PreviousDomainKey>) -> DomainCardDraft {
    DomainCardDraft {
        domain: domain.into(),
        estafeta: format!("https://{domain}"),
        other_keys: vec![],
        previous,
        policy: obj([("inbound", "verified".into())]),
        extensions: vec![],
        issued: Timestamp(NOW.millis() - DAY),
    }
}

/// An agent: its key object (from `new_keys`) and its certified card.
struct Agent {
    keys: String,
    sig: SigningKey,
    enc: EncSecret,
    card: Verified<AgentCard>,
}

fn keys() -> (String, SigningKey, EncSecret) {
    let keys = web::new_keys().unwrap();
    let o = parse(&keys);
    let sig = SigningKey::from_seed(b64::decode_array(s(&o, "sig_secret")).unwrap());
    let enc = EncSecret::from_bytes(b64::decode_array(s(&o, "enc_secret")).unwrap());
    (keys, sig, enc)
}

fn agent(h: &House, address: &str, inbox: Option<Object>) -> Agent {
    let (keys, sig, enc) = keys();
    let mut draft = AgentCardDraft::new(Address::parse(address).unwrap(), sig.public(), Some(enc.public()), NOW);
    if let Some(i) = inbox {
        draft.inbox = i;
    }
    let card = draft.certify(&h.key).unwrap().verify(&h.card, None, NOW).unwrap();
    Agent { keys, sig, enc, card }
}

impl Agent {
    fn card(&self) -> String {
        text(&self.card.to_value())
    }

    fn recipient(&self, h: &House) -> Value {
        Value::Object(obj([("card", self.card.to_value()), ("domain", h.card.to_value())]))
    }
}

fn error_of<T: std::fmt::Debug>(r: Result<T, String>) -> String {
    r.expect_err("expected a refusal")
}

/// A refusal's wire code and stable name, from its `"<code> <name>: <reason>"` string.
fn named(e: &str) -> (u16, &str) {
    let (code, rest) = e.split_once(' ').expect("a code");
    let (name, _) = rest.split_once(": ").expect("a name");
    (code.parse().expect("a code"), name)
}

// ---------- keys, registration, tokens ----------

#[test]
fn new_keys_are_fresh_and_their_public_keys_match() {
    let (a, sig, enc) = keys();
    let o = parse(&a);
    assert_eq!(o.keys().map(String::as_str).collect::<Vec<_>>(), ["enc", "enc_secret", "sig", "sig_secret"]);
    assert_eq!(s(&o, "sig"), sig.public().to_b64());
    assert_eq!(s(&o, "enc"), enc.public().to_b64());
    assert_ne!(keys().0, a, "fresh keys each call");
    assert_eq!(web::version(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn a_registration_body_verifies_as_a_registration_by_its_key() {
    let (k, sig, enc) = keys();
    let extra = r#"{"invite":"abc123","capabilities":{"listed":true,"description":"hi"},"inbox":{"policy":"open"}}"#;
    let body = web::registration_body(&k, "Ana", extra, NOW_MS).unwrap();
    let o = parse(&body);
    assert_eq!(body, Value::Object(o.clone()).canonical_string(), "canonical text");
    assert_eq!(s(&o, "local"), "ana");
    assert_eq!(s(&o, "sig"), sig.public().to_b64());
    assert_eq!(s(&o, "enc"), enc.public().to_b64());
    assert_eq!(s(&o, "ts"), NOW.to_rfc3339());
    assert_eq!(s(&o, "invite"), "abc123");
    assert_eq!(o.get("inbox"), Some(&Value::Object(obj([("policy", "open".into())]))));
    let signer = verify_object(&o, "signature", Context::Registration, |kid| *kid == sig.public()).unwrap();
    assert_eq!(signer, sig.public());
    assert!(verify_object(&o, "signature", Context::Token, |_| true).is_err(), "a registration is no token");
    let mut changed = o.clone();
    changed.insert("local".into(), "bo".into());
    assert!(verify_object(&changed, "signature", Context::Registration, |_| true).is_err());
    // Without extra members: the body alone.
    let bare = parse(&web::registration_body(&k, "ana", "", NOW_MS).unwrap());
    assert_eq!(bare.keys().map(String::as_str).collect::<Vec<_>>(), ["enc", "local", "sig", "signature", "ts"]);
}

#[test]
fn keys_whose_public_keys_do_not_match_are_refused() {
    let (a, _, _) = keys();
    let (b, _, _) = keys();
    let mut mixed = parse(&a);
    mixed.insert("sig".into(), parse(&b).get("sig").cloned().unwrap());
    let e = error_of(web::registration_body(&text(&Value::Object(mixed)), "ana", "", NOW_MS));
    assert_eq!(named(&e), (400, "bad_key_set"), "{e}");
    let e = error_of(web::registration_body("{}", "ana", "", NOW_MS));
    assert_eq!(named(&e).0, 400, "{e}");
    let e = error_of(web::registration_body(&a, "ana", "", f64::NAN));
    assert_eq!(named(&e), (400, "bad_input"), "{e}");
}

#[test]
fn a_token_verifies_for_its_request_and_no_other() {
    let h = House::new("a.example", 1);
    let al = agent(&h, "al@a.example", None);
    let body = br#"{"ids":["x"]}"#;
    let t =
        web::token(&al.keys, "al@a.example", "post", "/mailbox/al/ack", "", "A.example:8787", body, NOW_MS).unwrap();
    assert!(t.starts_with("Nyx5 "), "{t}");
    let header = AuthHeader::parse(&t).unwrap();
    let target = |path: &str, body: &[u8]| Target::new("POST", path, "", "a.example:8787", body);
    let claim = header.verify(&al.card, &target("/mailbox/al/ack", body), Keys::Current, NOW).unwrap();
    assert_eq!(claim.address.as_str(), "al@a.example");
    assert!(b64::decode(&claim.nonce).is_some_and(|n| n.len() == 16));
    let e = header.verify(&al.card, &target("/mailbox/bo/ack", body), Keys::Current, NOW).unwrap_err();
    assert_eq!(e.code(), 401);
    assert!(header.verify(&al.card, &target("/mailbox/al/ack", b"{}"), Keys::Current, NOW).is_err());
    let far = NOW.plus_ms(10 * 60_000);
    assert!(header.verify(&al.card, &target("/mailbox/al/ack", body), Keys::Current, far).is_err());
    // A query is bound as given, without its `?`.
    let q = web::token(&al.keys, "al@a.example", "GET", "/mailbox/al", "?after=3", "a.example", b"", NOW_MS).unwrap();
    let got = AuthHeader::parse(&q).unwrap();
    let _claim = got
        .verify(&al.card, &Target::new("GET", "/mailbox/al", "after=3", "a.example", b""), Keys::Current, NOW)
        .unwrap();
    // A fresh nonce each time.
    let again =
        web::token(&al.keys, "al@a.example", "POST", "/mailbox/al/ack", "", "a.example:8787", body, NOW_MS).unwrap();
    assert_ne!(AuthHeader::parse(&again).unwrap().claims.nonce, header.claims.nonce);
    let e = error_of(web::token(&al.keys, "al@a.example", "GET", "/mailbox/al?after=3", "", "a.example", b"", NOW_MS));
    assert_eq!(named(&e), (400, "bad_input"), "{e}");
}

// ---------- cards ----------

#[test]
fn a_domain_card_is_pinned_on_first_use_and_held_to_its_pin() {
    let h = House::new("b.example", 2);
    let first = parse(&web::verify_domain(&h.domain(), "B.Example.", "", NOW_MS).unwrap());
    assert_eq!(s(&first, "domain"), "b.example");
    assert_eq!(s(&first, "pin"), h.key.public().to_b64());
    assert_eq!(first.get("rotated"), Some(&Value::Bool(false)));
    assert_eq!(first.get("card"), Some(&h.card.to_value()));
    let pin = s(&first, "pin").to_owned();
    assert!(web::verify_domain(&h.domain(), "b.example", &pin, NOW_MS).is_ok());

    // Another key, no handover from the pin: refused.
    let stranger = House::new("b.example", 3);
    let e = error_of(web::verify_domain(&stranger.domain(), "b.example", &pin, NOW_MS));
    assert_eq!(named(&e).0, 403, "{e}");
    assert!(e.contains("changed since it was pinned"), "{e}");
    // Listing the pinned key without its handover proves nothing either.
    let listed = DomainCardDraft {
        other_keys: vec![nyx5_proto::card::DomainKey::new(h.key.public(), None)],
        ..domain_draft("b.example", vec![])
    }
    .sign(&stranger.key, NOW)
    .unwrap();
    assert!(web::verify_domain(&text(&listed.to_value()), "b.example", &pin, NOW_MS).is_err());
    // Trusted on first use, the stranger's card passes: that is what the pin is for.
    assert!(web::verify_domain(&stranger.domain(), "b.example", "", NOW_MS).is_ok());

    // A handover signed by the pinned key is followed, and the pin moves.
    let previous = PreviousDomainKey { key: h.key.clone(), created: None, until: NOW.plus_ms(30 * DAY) };
    let rotated = domain_draft("b.example", vec![previous]).sign(&stranger.key, NOW).unwrap();
    let moved = parse(&web::verify_domain(&text(&rotated.to_value()), "b.example", &pin, NOW_MS).unwrap());
    assert_eq!(s(&moved, "pin"), stranger.key.public().to_b64());
    assert_eq!(moved.get("rotated"), Some(&Value::Bool(true)));
    // … until the handover ends.
    let late = (NOW.millis() + 31 * DAY) as f64;
    assert!(web::verify_domain(&text(&rotated.to_value()), "b.example", &pin, late).is_err());

    // A card for another domain, or a damaged one.
    let e = error_of(web::verify_domain(&h.domain(), "c.example", "", NOW_MS));
    assert_eq!(named(&e), (403, "wrong_card"), "{e}");
    let mut damaged = h.card.object().clone();
    damaged.insert("estafeta".into(), "https://evil.example".into());
    assert!(web::verify_domain(&text(&Value::Object(damaged)), "b.example", "", NOW_MS).is_err());
}

#[test]
fn an_agent_card_verifies_against_its_domain_and_parent() {
    let h = House::new("b.example", 2);
    let bo = agent(&h, "bo@b.example", None);
    let a = parse(&web::verify_agent(&bo.card(), &h.domain(), "", NOW_MS).unwrap());
    assert_eq!(s(&a, "address"), "bo@b.example");
    assert_eq!(s(&a, "sig"), bo.sig.public().to_b64());
    assert_eq!(s(&a, "enc"), bo.enc.public().to_b64());
    assert_eq!(a.get("inbox"), Some(&Value::Object(obj([("policy", "open".into())]))));
    assert_eq!(a.get("card"), Some(&bo.card.to_value()));

    // verify_domain's answer may stand for the domain card, and is held to its pin.
    let answer = web::verify_domain(&h.domain(), "b.example", "", NOW_MS).unwrap();
    assert!(web::verify_agent(&bo.card(), &answer, "", NOW_MS).is_ok());
    let other = House::new("b.example", 9);
    let mut pinned_elsewhere = parse(&answer);
    pinned_elsewhere.insert("pin".into(), other.key.public().to_b64().into());
    assert!(web::verify_agent(&bo.card(), &text(&Value::Object(pinned_elsewhere)), "", NOW_MS).is_err());

    // Certified by another house's key, or checked against another domain: refused.
    let e = error_of(web::verify_agent(&bo.card(), &other.domain(), "", NOW_MS));
    assert_eq!(named(&e).0, 403, "{e}");
    assert!(e.contains("card of bo@b.example"), "{e}");
    let c = House::new("c.example", 4);
    assert!(web::verify_agent(&bo.card(), &c.domain(), "", NOW_MS).is_err());

    // A subagent needs its parent's card, and the delegation must be the parent's.
    let (child_keys, child_sig, _) = keys();
    let child = Address::parse("tester.bo@b.example").unwrap();
    let d = Delegation::sign(bo.card.address(), &child, &child_sig.public(), &Scope::default(), None, NOW, &bo.sig)
        .unwrap();
    let mut draft = AgentCardDraft::new(child.clone(), child_sig.public(), None, NOW);
    draft.delegation = Some(d);
    let card = text(&draft.certify(&h.key).unwrap().to_value());
    let sub = parse(&web::verify_agent(&card, &h.domain(), &bo.card(), NOW_MS).unwrap());
    assert_eq!(s(&sub, "address"), "tester.bo@b.example");
    assert_eq!(sub.get("enc"), Some(&Value::Null));
    let e = error_of(web::verify_agent(&card, &h.domain(), "", NOW_MS));
    assert_eq!(named(&e), (403, "parent_card_required"), "{e}");
    let cy = agent(&h, "cy@b.example", None);
    assert!(web::verify_agent(&card, &h.domain(), &cy.card(), NOW_MS).is_err());
    // The child signs with its own keys: a token by them verifies against its card.
    let verified = AgentCard::from_object(parse(&card)).unwrap().verify(&h.card, Some(&bo.card), NOW).unwrap();
    let t = web::token(&child_keys, "tester.bo@b.example", "GET", "/mailbox/tester.bo", "", "b.example", b"", NOW_MS)
        .unwrap();
    let target = Target::new("GET", "/mailbox/tester.bo", "", "b.example", b"");
    let _claim = AuthHeader::parse(&t).unwrap().verify(&verified, &target, Keys::Current, NOW).unwrap();
}

// ---------- sending ----------

fn open_as(env: &Envelope, who: &Agent) -> Content {
    seal::open(env, who.card.address(), &who.enc).unwrap()
}

#[test]
fn a_sealed_message_opens_for_every_recipient_and_the_sender_and_verifies() {
    let a = House::new("a.example", 1);
    let b = House::new("b.example", 2);
    let al = agent(&a, "al@a.example", None);
    let bo = agent(&b, "bo@b.example", Some(obj([("policy", "pow".into()), ("pow_bits", 8.into())])));
    let cy = agent(&b, "cy@b.example", None);
    let to = Value::Array(vec![bo.recipient(&b), cy.recipient(&b), bo.recipient(&b)]);
    let out =
        web::seal_message(&al.keys, "al@a.example", &text(&to), "hello bo\nsecond line", "", "", "t-1", "", NOW_MS)
            .unwrap();
    let out = parse(&out);
    let id = s(&out, "id").to_owned();
    check_id(&id).unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let envelope = out.get("envelope").unwrap().as_object().unwrap().clone();
    let env = Envelope::from_object(envelope).unwrap();
    assert_eq!(s(&out, "text"), env.canonical_str(), "the text to POST is the canonical envelope");
    assert_eq!(s(&out, "sha256"), env.sha256_hex());
    assert_eq!(env.id(), id);
    assert_eq!(env.to().iter().map(Address::as_str).collect::<Vec<_>>(), ["bo@b.example", "cy@b.example"]);
    assert_eq!(env.kind().as_str(), "message");
    assert_eq!(env.thread(), Some("t-1"));
    assert_eq!(env.in_reply_to(), None);
    assert_eq!(env.created(), NOW);
    assert!(matches!(env.payload(), Payload::Sealed(_)));
    for who in [&bo, &cy, &al] {
        let c = open_as(&env, who);
        assert_eq!(c.media, "text/plain; charset=utf-8");
        assert_eq!(c.body, Value::from("hello bo\nsecond line"));
    }
    let stranger = agent(&b, "dee@b.example", None);
    assert!(seal::open(&env, stranger.card.address(), &stranger.enc).is_err());
    // bo's inbox asks for 8 bits of work: the proof is there, bound to this envelope.
    let p = env.pow().unwrap();
    assert_eq!(p.bits, 8);
    assert!(pow::check(&env.work_digest(), &p.nonce, 8));
    // Signed by al, as its card says.
    let verified = env.clone().verify(&al.card, NOW).unwrap();
    assert_eq!(verified.from().as_str(), "al@a.example");
    assert!(env.verify(&bo.card, NOW).is_err());
}

#[test]
fn a_json_message_carries_json_and_no_pow_is_minted_for_open_inboxes() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let bo = agent(&a, "bo@a.example", None);
    let to = text(&Value::Array(vec![bo.recipient(&a)]));
    let out = web::seal_message(
        &al.keys,
        "al@a.example",
        &to,
        r#"{"task":"count","n":3}"#,
        "application/json",
        "task",
        "",
        "m-0",
        NOW_MS,
    )
    .unwrap();
    let env = Envelope::parse(s(&parse(&out), "text").as_bytes(), 1 << 20).unwrap();
    assert!(env.pow().is_none());
    assert_eq!(env.kind().as_str(), "task");
    assert_eq!(env.in_reply_to(), Some("m-0"));
    let c = open_as(&env, &bo);
    assert_eq!(c.media, "application/json");
    assert_eq!(text(&c.body), r#"{"n":3,"task":"count"}"#);
    assert!(
        web::seal_message(&al.keys, "al@a.example", &to, "{not json", "application/json", "", "", "", NOW_MS).is_err()
    );
}

#[test]
fn a_message_is_refused_when_it_cannot_be_sent_as_the_cli_would() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let send = |to: &[Value]| {
        web::seal_message(&al.keys, "al@a.example", &text(&Value::Array(to.to_vec())), "hi", "", "", "", "", NOW_MS)
    };
    // A stamp is money: never paid unasked.
    let shop = agent(&a, "shop@a.example", Some(obj([("policy", "stamp".into()), ("price", 3.into())])));
    let e = error_of(send(&[shop.recipient(&a)]));
    assert_eq!(named(&e), (402, "stamp_required"), "{e}");
    // The Libro is written to by libro_op only.
    let libro = agent(&a, "libro@a.example", None);
    assert_eq!(named(&error_of(send(&[libro.recipient(&a)]))), (400, "libro_op_as_message"));
    // No encryption key, nothing sealed.
    let (_, sig, _) = keys();
    let card = AgentCardDraft::new(Address::parse("mute@a.example").unwrap(), sig.public(), None, NOW)
        .certify(&a.key)
        .unwrap();
    let mute = Value::Object(obj([("card", card.to_value()), ("domain", a.card.to_value())]));
    assert_eq!(named(&error_of(send(&[mute]))), (403, "no_encryption_key"));
    // A card its domain did not certify.
    let other = House::new("a.example", 7);
    let forged = Value::Object(obj([
        ("card", agent(&other, "bo@a.example", None).card.to_value()),
        ("domain", a.card.to_value()),
    ]));
    // The reason names the recipient (its place in the list); the name is the cause's.
    let e = error_of(send(&[forged]));
    assert!(e.contains("recipient 1"), "{e}");
    assert_eq!(named(&e).0, 403, "{e}");
    assert_eq!(named(&error_of(send(&[]))), (400, "bad_input"));
    let bo = agent(&a, "bo@a.example", None);
    let e = error_of(web::seal_message(
        &al.keys,
        "al@a.example",
        &text(&Value::Array(vec![bo.recipient(&a)])),
        "hi",
        "",
        "chat",
        "",
        "",
        NOW_MS,
    ));
    assert!(e.contains("unknown envelope type"), "{e}");
}

#[test]
fn a_libro_operation_goes_in_clear_to_the_houses_libro() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let out =
        web::libro_op(&al.keys, "al@a.example", "A.example", r#"{"op":"release","contract":"c-1"}"#, NOW_MS).unwrap();
    let out = parse(&out);
    let env = Envelope::parse(s(&out, "text").as_bytes(), 1 << 20).unwrap();
    assert_eq!(env.to().iter().map(Address::as_str).collect::<Vec<_>>(), ["libro@a.example"]);
    assert_eq!(env.kind().as_str(), "task");
    let c = env.content().expect("an operation travels in clear");
    assert_eq!(c.media, "application/nyx5.libro+json");
    assert_eq!(text(&c.body), r#"{"contract":"c-1","op":"release"}"#);
    assert!(env.clone().verify(&al.card, NOW).is_ok());
    assert_eq!(s(&out, "id"), env.id());

    // Members are read as nyx5 reads them: addresses and digests lower-cased, times rewritten.
    let h = "AB".repeat(32);
    let bond = format!(
        r#"{{"op":"bond","amount":50,"claim":"up","verifier":"Vera@B.example","expires":"2027-01-16T08:00:00Z","evidence_sha256":"{h}"}}"#
    );
    let out = parse(&web::libro_op(&al.keys, "al@a.example", "a.example", &bond, NOW_MS).unwrap());
    let env = Envelope::from_object(out.get("envelope").unwrap().as_object().unwrap().clone()).unwrap();
    assert_eq!(
        text(&env.content().unwrap().body),
        format!(
            r#"{{"amount":50,"claim":"up","evidence_sha256":"{}","expires":"2027-01-16T08:00:00.000Z","op":"bond","verifier":"vera@b.example"}}"#,
            h.to_lowercase()
        )
    );
    for (op, name) in [
        (r#"{"op":"teleport"}"#, "unknown_operation"),
        (r#"{"op":"release"}"#, "bad_operation"),
        (r#"{"op":"release","contract":"c","amount":1}"#, "bad_operation"),
        (r#"{"op":"charge","mandate":"m","amount":0,"concept":"x"}"#, "bad_operation"),
        (r#"{"op":"release","contract":"a:b"}"#, "bad_operation"),
    ] {
        let e = error_of(web::libro_op(&al.keys, "al@a.example", "a.example", op, NOW_MS));
        assert!(e.starts_with(&format!("400 {name}: ")), "{op}: {e}");
    }
}

#[test]
fn an_accept_is_the_buyers_at_the_house_its_quote_names() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let seller = agent(&a, "sel@a.example", None);
    let quote = |buyer: &str, house: &str, expires: Option<Timestamp>| {
        QuoteDraft {
            id: "q-1".into(),
            house: house.into(),
            seller: seller.card.address().clone(),
            buyer: Address::parse(buyer).unwrap(),
            contract: ContractKind::Escrow,
            price: 10,
            currency: "tok".into(),
            concept: "a report".into(),
            terms: None,
            arbiter: None,
            referrer: None,
            issued: NOW,
            expires,
            extra: Object::new(),
        }
        .sign(&seller.sig)
        .unwrap()
    };
    let accept =
        |q: &nyx5_proto::quote::Quote| text(&Value::Object(obj([("op", "accept".into()), ("quote", q.to_value())])));
    let good = quote("al@a.example", "a.example", Some(NOW.plus_ms(DAY)));
    let out = parse(&web::libro_op(&al.keys, "al@a.example", "a.example", &accept(&good), NOW_MS).unwrap());
    let env = Envelope::from_object(out.get("envelope").unwrap().as_object().unwrap().clone()).unwrap();
    assert_eq!(env.content().unwrap().body, Value::Object(obj([("op", "accept".into()), ("quote", good.to_value())])));
    let e = error_of(web::libro_op(
        &al.keys,
        "al@a.example",
        "a.example",
        &accept(&quote("bo@a.example", "a.example", None)),
        NOW_MS,
    ));
    assert_eq!(named(&e), (403, "quote_not_yours"), "{e}");
    let e = error_of(web::libro_op(
        &al.keys,
        "al@a.example",
        "a.example",
        &accept(&quote("al@a.example", "b.example", None)),
        NOW_MS,
    ));
    assert_eq!(named(&e), (400, "quote_wrong_house"), "{e}");
    let e = error_of(web::libro_op(
        &al.keys,
        "al@a.example",
        "a.example",
        &accept(&quote("al@a.example", "a.example", Some(NOW))),
        NOW_MS,
    ));
    assert_eq!(named(&e), (410, "quote_expired"), "{e}");
}

// ---------- the mailbox ----------

fn item(env: &Value) -> String {
    text(&Value::Object(obj([("seq", 7.into()), ("received", NOW.to_rfc3339().into()), ("envelope", env.clone())])))
}

fn keys_list(list: &[&str]) -> String {
    format!("[{}]", list.join(","))
}

#[test]
fn open_item_verifies_opens_and_reports_what_it_cannot_trust() {
    let a = House::new("a.example", 1);
    let b = House::new("b.example", 2);
    let al = agent(&a, "al@a.example", None);
    let bo = agent(&b, "bo@b.example", None);
    let to = text(&Value::Array(vec![bo.recipient(&b)]));
    let sent = parse(&web::seal_message(&al.keys, "al@a.example", &to, "hi bo", "", "", "", "", NOW_MS).unwrap());
    let env = sent.get("envelope").unwrap().clone();
    let open = |env: &Value, card: &str, domain: &str| {
        parse(&web::open_item(&keys_list(&[&bo.keys]), "bo@b.example", &item(env), card, domain, NOW_MS).unwrap())
    };

    let m = open(&env, &al.card(), &a.domain());
    assert_eq!(s(&m, "trust"), "verified", "{m:?}");
    assert!(!m.contains_key("trust_reason"));
    assert_eq!(m.get("seq"), Some(&Value::from(7)));
    assert_eq!(s(&m, "received"), NOW.to_rfc3339());
    assert_eq!(s(&m, "id"), s(&sent, "id"));
    assert_eq!(s(&m, "from"), "al@a.example");
    assert_eq!(m.get("to"), Some(&Value::Array(vec!["bo@b.example".into()])));
    assert_eq!(s(&m, "created"), NOW.to_rfc3339());
    assert_eq!(s(&m, "type"), "message");
    assert_eq!(m.get("thread"), Some(&Value::Null));
    assert_eq!(m.get("in_reply_to"), Some(&Value::Null));
    assert_eq!(s(&m, "sha256"), s(&sent, "sha256"));
    assert_eq!(m.get("notice"), Some(&Value::Bool(false)));
    assert_eq!(m.get("sealed"), Some(&Value::Bool(true)));
    let content = m.get("content").unwrap().as_object().unwrap();
    assert_eq!(content.get("body"), Some(&Value::from("hi bo")));
    assert!(!m.contains_key("open_error"));

    // One byte of the signature changed: invalid, and still opened (the content is shown as data).
    let mut tampered = env.as_object().unwrap().clone();
    let sig = tampered.get_mut("signature").unwrap();
    let Value::Object(sig) = sig else { panic!("signature") };
    let mut value = b64::decode(sig.get("value").unwrap().as_str().unwrap()).unwrap();
    value[5] ^= 1;
    sig.insert("value".into(), b64::encode(&value).into());
    let m = open(&Value::Object(tampered), &al.card(), &a.domain());
    assert_eq!(s(&m, "trust"), "invalid", "{m:?}");
    assert!(s(&m, "trust_reason").contains("does not verify"), "{m:?}");

    // The sender's card could not be fetched: unchecked, never verified.
    let m = open(&env, "", &a.domain());
    assert_eq!(s(&m, "trust"), "unchecked");
    let m = open(&env, &al.card(), "");
    assert_eq!(s(&m, "trust"), "unchecked");
    // A card for someone else is no answer; a card its domain did not certify is a refusal.
    let m = open(&env, &bo.card(), &a.domain());
    assert_eq!(s(&m, "trust"), "unchecked", "{m:?}");
    let forged = agent(&House::new("a.example", 8), "al@a.example", None);
    let m = open(&env, &forged.card(), &a.domain());
    assert_eq!(s(&m, "trust"), "invalid", "{m:?}");

    // Signed by the right key of a card whose key has since changed: not by that card.
    let al2 = agent(&a, "al@a.example", None);
    assert_eq!(s(&open(&env, &al2.card(), &a.domain()), "trust"), "invalid");

    // Not ours to open: the content stays closed and says why.
    let other = keys().0;
    let m = parse(
        &web::open_item(&keys_list(&[&other]), "bo@b.example", &item(&env), &al.card(), &a.domain(), NOW_MS).unwrap(),
    );
    assert_eq!(m.get("content"), Some(&Value::Null));
    assert!(m.contains_key("open_error"));
    assert_eq!(s(&m, "trust"), "verified");
}

#[test]
fn open_item_opens_mail_sealed_to_a_previous_key() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let old = agent(&a, "bo@a.example", None);
    let to = text(&Value::Array(vec![old.recipient(&a)]));
    let sent = parse(
        &web::seal_message(&al.keys, "al@a.example", &to, "before the rotation", "", "", "", "", NOW_MS).unwrap(),
    );
    let env = sent.get("envelope").unwrap();
    let current = keys().0;
    let m = parse(
        &web::open_item(
            &keys_list(&[&current, &old.keys]),
            "bo@a.example",
            &item(env),
            &al.card(),
            &a.domain(),
            NOW_MS,
        )
        .unwrap(),
    );
    assert_eq!(s(&m, "trust"), "verified");
    let body = m.get("content").unwrap().as_object().unwrap().get("body").unwrap();
    assert_eq!(body, &Value::from("before the rotation"));
    // With the current keys alone it stays closed.
    let m = parse(
        &web::open_item(&keys_list(&[&current]), "bo@a.example", &item(env), &al.card(), &a.domain(), NOW_MS).unwrap(),
    );
    assert_eq!(m.get("content"), Some(&Value::Null));
}

#[test]
fn notices_unsigned_mail_and_bad_items_are_judged_as_the_cli_judges_them() {
    let b = House::new("b.example", 2);
    let bo = agent(&b, "bo@b.example", None);
    let mine = keys_list(&[&bo.keys]);
    let draft = |from: &str| {
        Draft::new(
            "n-1".into(),
            Address::parse(from).unwrap(),
            vec![bo.card.address().clone()],
            NOW,
            Content::new("text/plain", "bounced".into()),
        )
        .build()
        .unwrap()
    };
    let judge = |env: &Envelope, card: &str, domain: &str| {
        parse(&web::open_item(&mine, "bo@b.example", &item(&env.to_value()), card, domain, NOW_MS).unwrap())
    };
    // A notice is verified by a key of its domain, alone.
    let notice = draft("postmaster@b.example").sign(&b.key).unwrap();
    let m = judge(&notice, "", &b.domain());
    assert_eq!(s(&m, "trust"), "verified", "{m:?}");
    assert_eq!(m.get("notice"), Some(&Value::Bool(true)));
    assert_eq!(s(&m, "notice_house"), "b.example");
    assert_eq!(m.get("own_house"), Some(&Value::Bool(true)));
    assert_eq!(m.get("sealed"), Some(&Value::Bool(false)));
    let forged = draft("postmaster@b.example").sign(&SigningKey::from_seed([41; 32])).unwrap();
    assert_eq!(s(&judge(&forged, "", &b.domain()), "trust"), "invalid");
    assert_eq!(s(&judge(&notice, "", ""), "trust"), "unchecked");

    // Unsigned mail (by email) is unverified, whatever cards are given; its email record shown.
    // (From the house's gateway: bo's house is b.example.)
    let mut by_email = draft("email@b.example").into_object();
    by_email.insert("via".into(), "email".into());
    let record = obj([("from", "Person <person@mail.example>".into()), ("subject", "hello".into())]);
    by_email.insert("extensions".into(), Value::Object(obj([("urn:nyx5:ext:email", Value::Object(record.clone()))])));
    let env = Envelope::from_object(by_email).unwrap();
    let m = judge(&env, &bo.card(), &b.domain());
    assert_eq!(s(&m, "trust"), "unverified");
    assert!(s(&m, "trust_reason").contains("not signed"));
    assert_eq!(m.get("email"), Some(&Value::Object(record)));

    // Bad items never fail: they are invalid.
    for bad in [r#"{"seq":1}"#.to_owned(), item(&Value::Object(obj([("nyx5", "1".into())])))] {
        let m = parse(&web::open_item(&mine, "bo@b.example", &bad, "", "", NOW_MS).unwrap());
        assert_eq!(s(&m, "trust"), "invalid", "{bad}");
    }
    // Bad arguments do.
    assert!(web::open_item("[{}]", "bo@b.example", &item(&notice.to_value()), "", "", NOW_MS).is_err());
    assert!(web::open_item(&mine, "bo@b.example", "[]", "", "", NOW_MS).is_err());

    // peek says which cards to fetch.
    let p = parse(&web::peek(&item(&notice.to_value())).unwrap());
    assert_eq!(
        p,
        obj([
            ("from", "postmaster@b.example".into()),
            ("notice", true.into()),
            ("signed", true.into()),
            ("parent", Value::Null)
        ])
    );
    let sub = draft("tester.al@a.example").sign(&bo.sig).unwrap();
    let p = parse(&web::peek(&item(&sub.to_value())).unwrap());
    assert_eq!(s(&p, "parent"), "al@a.example");
    assert_eq!(p.get("notice"), Some(&Value::Bool(false)));
    let p = parse(&web::peek(&item(&env.to_value())).unwrap());
    assert_eq!(p.get("signed"), Some(&Value::Bool(false)));
    let p = parse(&web::peek(r#"{"seq":1}"#).unwrap());
    assert_eq!(p.get("from"), Some(&Value::Null));
}

#[test]
fn a_subagents_mail_verifies_with_its_parents_card() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let bo = agent(&a, "bo@a.example", None);
    let (child_keys, child_sig, child_enc) = keys();
    let child = Address::parse("tester.al@a.example").unwrap();
    let d = Delegation::sign(al.card.address(), &child, &child_sig.public(), &Scope::default(), None, NOW, &al.sig)
        .unwrap();
    let mut draft = AgentCardDraft::new(child.clone(), child_sig.public(), Some(child_enc.public()), NOW);
    draft.delegation = Some(d);
    let card = draft.certify(&a.key).unwrap().to_value();
    let to = text(&Value::Array(vec![bo.recipient(&a)]));
    let sent = parse(
        &web::seal_message(&child_keys, "tester.al@a.example", &to, "from the child", "", "", "", "", NOW_MS).unwrap(),
    );
    let env = sent.get("envelope").unwrap();
    let with_parent = text(&Value::Object(obj([("card", card.clone()), ("parent", al.card.to_value())])));
    let m = parse(
        &web::open_item(&keys_list(&[&bo.keys]), "bo@a.example", &item(env), &with_parent, &a.domain(), NOW_MS)
            .unwrap(),
    );
    assert_eq!(s(&m, "trust"), "verified", "{m:?}");
    let m = parse(
        &web::open_item(&keys_list(&[&bo.keys]), "bo@a.example", &item(env), &text(&card), &a.domain(), NOW_MS)
            .unwrap(),
    );
    assert_eq!(s(&m, "trust"), "invalid", "{m:?}");
    // And a subagent recipient is sealed to with its parent's card beside it.
    let recipient = Value::Object(obj([("card", card), ("domain", a.card.to_value()), ("parent", al.card.to_value())]));
    let out = parse(
        &web::seal_message(
            &bo.keys,
            "bo@a.example",
            &text(&Value::Array(vec![recipient])),
            "hi",
            "",
            "",
            "",
            "",
            NOW_MS,
        )
        .unwrap(),
    );
    let env = Envelope::from_object(out.get("envelope").unwrap().as_object().unwrap().clone()).unwrap();
    assert_eq!(seal::open(&env, &child, &child_enc).unwrap().body, Value::from("hi"));
}

// ---------- the profile ----------

fn agents_value(list: &[(&str, &str, &str, &[&str])]) -> Value {
    Value::Array(
        list.iter()
            .map(|(address, house, keys, previous)| {
                let prev = previous.iter().map(|p| Value::Object(parse(p))).collect();
                Value::Object(obj([
                    ("address", (*address).into()),
                    ("house", (*house).into()),
                    ("keys", Value::Object(parse(keys))),
                    ("previous", Value::Array(prev)),
                ]))
            })
            .collect(),
    )
}

#[test]
fn profile_export_then_import_is_the_identity() {
    let (k1, _, _) = keys();
    let (k2, _, _) = keys();
    let (old, _, _) = keys();
    let mut retired = parse(&old);
    retired.insert("retired".into(), NOW.to_rfc3339().into());
    let retired = text(&Value::Object(retired));
    let agents = agents_value(&[
        ("al@a.example", "https://a.example", &k1, &[&retired, &old]),
        ("tester.al@a.example", "http://127.0.0.1:8787", &k2, &[]),
    ]);
    let pins = Value::Object(obj([("b.example", SigningKey::from_seed([2; 32]).public().to_b64().into())]));
    let file = web::profile_export(&text(&agents), &text(&pins)).unwrap();
    assert!(file.ends_with("}\n") && !file.ends_with("\n\n"));
    let doc = parse(&file);
    assert_eq!(file, format!("{}\n", Value::Object(doc.clone()).canonical_string()), "canonical JSON and a newline");
    assert_eq!(s(&doc, "nyx5"), "1");
    assert_eq!(s(&doc, "kind"), "agent-profile");
    let first = doc.get("agents").unwrap().as_array().unwrap()[0].as_object().unwrap();
    assert_eq!(
        first.keys().map(String::as_str).collect::<Vec<_>>(),
        ["address", "enc", "enc_secret", "house", "pending", "previous", "sent", "sig", "sig_secret"]
    );
    assert_eq!(first.get("pending"), Some(&Value::Object(Object::new())));
    let second = doc.get("agents").unwrap().as_array().unwrap()[1].as_object().unwrap();
    assert!(!second.contains_key("previous"), "no previous keys, no member");

    let back = web::profile_import(&file).unwrap();
    assert_eq!(back, text(&Value::Object(obj([("agents", agents.clone()), ("pins", pins.clone())]))));
    // And the other way round: a file read and written again is the same file.
    let back = parse(&back);
    let again = web::profile_export(&text(back.get("agents").unwrap()), &text(back.get("pins").unwrap())).unwrap();
    assert_eq!(again, file);

    // Unknown members are ignored; lenient input is written as the CLI writes it.
    let mut extra = doc.clone();
    extra.insert("editor".into(), "vim".into());
    assert_eq!(web::profile_import(&text(&Value::Object(extra))).unwrap(), text(&Value::Object(back)));
    let typed = agents_value(&[(" Al@A.Example ", "https://a.example/", &k1, &[])]);
    let written = parse(&web::profile_export(&text(&typed), "").unwrap());
    let a = written.get("agents").unwrap().as_array().unwrap()[0].as_object().unwrap();
    assert_eq!((s(a, "address"), s(a, "house")), ("al@a.example", "https://a.example"));
    assert_eq!(written.get("pins"), Some(&Value::Object(Object::new())));
}

#[test]
fn a_profile_with_a_mismatched_key_pair_is_refused_both_ways() {
    let (k1, _, _) = keys();
    let (k2, _, _) = keys();
    let mut mixed = parse(&k1);
    mixed.insert("enc".into(), parse(&k2).get("enc").cloned().unwrap());
    let mixed = text(&Value::Object(mixed));
    let e =
        error_of(web::profile_export(&text(&agents_value(&[("al@a.example", "https://a.example", &mixed, &[])])), ""));
    assert_eq!(named(&e), (400, "bad_key_set"), "{e}");
    assert!(e.contains("al@a.example"), "the reason names the agent: {e}");
    let e = error_of(web::profile_export(
        &text(&agents_value(&[("al@a.example", "https://a.example", &k1, &[&mixed])])),
        "",
    ));
    assert_eq!(named(&e), (400, "bad_key_set"), "{e}");
    assert!(e.contains("previous"), "the reason names the key set: {e}");

    let file =
        web::profile_export(&text(&agents_value(&[("al@a.example", "https://a.example", &k1, &[&k2])])), "").unwrap();
    let good_enc = parse(&k1).get("enc").unwrap().as_str().unwrap().to_owned();
    let bad_enc = parse(&k2).get("enc").unwrap().as_str().unwrap().to_owned();
    // The agent's own pair.
    let broken = file.replacen(&format!(r#""enc":"{good_enc}""#), &format!(r#""enc":"{bad_enc}""#), 1);
    assert_ne!(broken, file);
    let e = error_of(web::profile_import(&broken));
    assert_eq!(named(&e), (400, "bad_key_set"), "{e}");
    // A previous pair, a `next` pair, a second entry for one address, a bad pin, another kind.
    let mut doc = parse(&file);
    let agent = doc.get("agents").unwrap().as_array().unwrap()[0].as_object().unwrap().clone();
    let mut with_next = agent.clone();
    with_next.insert("next".into(), Value::Object(parse(&mixed)));
    doc.insert("agents".into(), Value::Array(vec![Value::Object(with_next)]));
    let e = error_of(web::profile_import(&text(&Value::Object(doc.clone()))));
    assert_eq!(named(&e), (400, "bad_key_set"), "{e}");
    assert!(e.contains("next"), "the reason names the key set: {e}");
    doc.insert("agents".into(), Value::Array(vec![Value::Object(agent.clone()), Value::Object(agent)]));
    assert_eq!(named(&error_of(web::profile_import(&text(&Value::Object(doc.clone()))))), (400, "bad_profile"));
    let e = error_of(web::profile_export(
        &text(&agents_value(&[("al@a.example", "https://a.example", &k1, &[])])),
        r#"{"b.example":"nope"}"#,
    ));
    assert!(e.contains("pin of b.example"), "{e}");
    let e = error_of(web::profile_import(&file.replace("agent-profile", "agent-keys")));
    assert_eq!(named(&e), (400, "bad_profile"), "{e}");
    let e = error_of(web::profile_export(&text(&agents_value(&[("al@a.example", "a.example", &k1, &[])])), ""));
    assert_eq!(named(&e), (400, "bad_profile"), "{e}");
}

#[test]
fn keys_read_back_are_the_keys_written() {
    // The public halves a card publishes come from the same key objects the profile holds.
    let (k, sig, enc) = keys();
    let o = parse(&k);
    assert_eq!(SigPublic::parse(s(&o, "sig")).unwrap(), sig.public());
    assert_eq!(EncPublic::parse(s(&o, "enc")).unwrap(), enc.public());
}

#[test]
fn a_proof_of_work_the_page_could_not_finish_is_refused_before_any_search() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    for (bits, ok) in [(22, true), (23, false), (32, false)] {
        let bo = agent(&a, "bo@a.example", Some(obj([("policy", "pow".into()), ("pow_bits", bits.into())])));
        let to = text(&Value::Array(vec![bo.recipient(&a)]));
        let out = web::seal_message(&al.keys, "al@a.example", &to, "hi", "", "", "", "", NOW_MS);
        if ok {
            // 22 bits is allowed: not minted here (seconds of work), only not refused up front.
            continue;
        }
        let why = out.unwrap_err();
        assert_eq!(named(&why), (402, "pow_too_hard"), "{why}");
    }
}

#[test]
fn a_profile_whose_house_is_no_house_url_is_refused_on_import_as_on_export() {
    // Found by the `web_item` fuzz target: import took any `house`, which export then refused.
    let (k, _, _) = keys();
    let file =
        web::profile_export(&text(&agents_value(&[("al@a.example", "https://a.example/", &k, &[])])), "").unwrap();
    let again = web::profile_import(&file).unwrap();
    assert!(again.contains(r#""house":"https://a.example""#), "{again}");
    let broken = file.replacen("https://a.example", "hutps://a.example", 1);
    let e = error_of(web::profile_import(&broken));
    assert_eq!(named(&e), (400, "bad_profile"), "{e}");
}

/// What the page keeps of the mail it sent and read (issue 38 §1): its own view of a sealed
/// envelope it sent, opened with its own keys, and the record of a view, with the keys that
/// join its conversation, as the `nyx5` command's store keeps it.
#[test]
fn the_page_keeps_what_it_sent_and_read_as_the_command_does() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let bo = agent(&a, "bo@a.example", None);
    let to = Value::Array(vec![bo.recipient(&a)]);
    let out = parse(
        &web::seal_message(
            &al.keys,
            "al@a.example",
            &text(&to),
            "the invoice, attached",
            "",
            "",
            "inv-3",
            "q0",
            NOW_MS,
        )
        .unwrap(),
    );
    let envelope = text(out.get("envelope").unwrap());
    let mine = parse(&web::own_view(&keys_list(&[&al.keys]), "al@a.example", &envelope).unwrap());
    assert_eq!((s(&mine, "trust"), s(&mine, "thread"), s(&mine, "in_reply_to")), ("verified", "inv-3", "q0"));
    assert_eq!(
        mine.get("content").unwrap().as_object().unwrap().get("body"),
        Some(&Value::from("the invoice, attached"))
    );
    // Not sealed to this key: nothing opens.
    let other = parse(&web::own_view(&keys_list(&[&bo.keys]), "al@a.example", &envelope).unwrap());
    assert!(other.get("content").unwrap().is_null());

    let record = parse(&web::kept_record(&text(&Value::Object(mine.clone())), "out", NOW_MS).unwrap());
    assert_eq!(
        (s(&record, "id"), s(&record, "dir"), s(&record, "body")),
        (s(&out, "id"), "out", "the invoice, attached")
    );
    assert_eq!(record.get("at").and_then(Value::as_safe_integer), Some(NOW.millis()), "written at its creation");
    let keys: Vec<&str> = record.get("keys").unwrap().as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(keys, [format!("id:{}", s(&out, "id")).as_str(), "id:q0", "thread:inv-3"]);
    assert_eq!(s(record.get("view").unwrap().as_object().unwrap(), "dir"), "out");
    assert_eq!(s(&record, "sender"), "al@a.example");
    let parties: Vec<&str> =
        record.get("parties").unwrap().as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(parties, ["al@a.example", "bo@a.example"]);
    assert_eq!(web::kept_record(r#"{"trust":"invalid"}"#, "in", NOW_MS).unwrap(), "null");
    assert!(web::kept_record("{}", "sideways", NOW_MS).is_err());
}

/// A held send in the browser (docs/SPEC.md §7c): the sender wraps its sealed envelope's key for
/// the approver; the approver opens the draft as the house lists it, and a stranger's key or a
/// draft without a key opens nothing.
#[test]
fn a_held_draft_is_read_by_its_approver_with_the_key_its_sender_wrapped() {
    let a = House::new("a.example", 1);
    let al = agent(&a, "al@a.example", None);
    let boss = agent(&a, "boss@a.example", None);
    let bo = agent(&a, "bo@a.example", None);
    let to = Value::Array(vec![bo.recipient(&a)]);
    let out = parse(
        &web::seal_message(&al.keys, "al@a.example", &text(&to), "for the boss", "", "", "", "", NOW_MS).unwrap(),
    );
    let envelope = text(out.get("envelope").unwrap());
    let keys = format!("[{}]", al.keys);
    let approvers = text(&Value::Array(vec![boss.recipient(&a)]));
    let readers = parse(&web::readers_for(&keys, "al@a.example", &envelope, &approvers, NOW_MS).unwrap());
    let q = s(&readers, "readers");
    let wraps = Value::parse(&b64::decode(q).unwrap(), 1 << 16).unwrap();
    let key = wraps.as_object().unwrap().get("boss@a.example").unwrap().clone();
    // The draft as `GET /drafts/boss/:id` shows it to its approver.
    let draft = text(&Value::Object(obj([("envelope", Value::parse_str(&envelope).unwrap()), ("key", key)])));
    let opened = parse(&web::open_draft(&format!("[{}]", boss.keys), "boss@a.example", &draft).unwrap());
    assert_eq!(
        opened.get("content").and_then(Value::as_object).and_then(|c| c.get("body")),
        Some(&Value::from("for the boss"))
    );
    // bo's keys do not open the boss's wrap; a draft without a key says so.
    let other = parse(&web::open_draft(&format!("[{}]", bo.keys), "bo@a.example", &draft).unwrap());
    assert!(s(&other, "unreadable").starts_with("cannot open it"), "{other:?}");
    let bare = text(&Value::Object(obj([("envelope", Value::parse_str(&envelope).unwrap())])));
    let none = parse(&web::open_draft(&format!("[{}]", boss.keys), "boss@a.example", &bare).unwrap());
    assert!(s(&none, "unreadable").contains("gave no key"), "{none:?}");
    // A stranger's keys cannot make the wraps: the envelope is not sealed to them.
    let dee = agent(&a, "dee@a.example", None);
    let e = error_of(web::readers_for(&format!("[{}]", dee.keys), "dee@a.example", &envelope, &approvers, NOW_MS));
    assert_eq!(named(&e).0, 403, "{e}");
}
