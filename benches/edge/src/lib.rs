//! The engine's CPU hot paths, built for wasm32 as the Worker is and timed in V8 (Node) by
//! `scripts/edge-bench`; `benches/README.md` ("Edge") says what each one includes.
//!
//! Each operation is the code the route runs between its database round trips, called through
//! the same public functions the routes call, on fixtures built once by [`setup`]: keys from
//! fixed seeds, cards certified and verified as a house caches them. Nothing here reads a clock;
//! Node times [`run`] from outside, and every figure is read as a ratio to [`Op::Ed25519`]
//! measured in the same process.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::cell::RefCell;
use std::hint::black_box;

use nyx5_house::libro::{LIBRO, OP_MEDIA};
use nyx5_house::mailbox::Outcome;
use nyx5_house::ports::{Row, SqlValue};
use nyx5_house::routes::{inbound, mailbox, outbound};
use nyx5_house::store::queue::{self as queue_store, NewJob, Outgoing};
use nyx5_proto::address::uuid_v4;
use nyx5_proto::auth::{AuthHeader, Claims, Keys, Target};
use nyx5_proto::card::{AgentCard, AgentCardDraft, DomainCard, DomainCardDraft};
use nyx5_proto::crypto::{Context, EncSecret, SigPublic, SigningKey, hex, sha256};
use nyx5_proto::envelope::{Content, Draft, Kind, Payload};
use nyx5_proto::json::{canonical_without, obj};
use nyx5_proto::libro::{EntryDraft, GENESIS, lines_value};
use nyx5_proto::quote::{ContractKind, QuoteDraft};
use nyx5_proto::receipt::Receipt;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value, Verified, limits, seal};
use nyx5_rules::libro::kernel;
use nyx5_rules::libro::model::{Ctx, Facts, Rules};
use nyx5_rules::libro::op::Op as LibroOp;
use wasm_bindgen::prelude::wasm_bindgen;

/// 2026-12-01T00:00:00Z: the clock every fixture reads.
const NOW: Timestamp = Timestamp(1_796_083_200_000);
/// The body of the mail fixtures: 900 characters, as in the native inbound bench.
const BODY_CHARS: usize = 900;
/// Envelopes in a mailbox page (the default page size).
const PAGE: usize = 50;

/// The operations, in the order [`names`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Ed25519,
    Canonicalize,
    Inbound,
    InboundRelay,
    Open,
    Outbound,
    MailboxPage,
    LibroAccept,
}

pub const OPS: [(Op, &str); 8] = [
    (Op::Ed25519, "ed25519_verify"),
    (Op::Canonicalize, "canonicalize"),
    (Op::Inbound, "inbound"),
    (Op::InboundRelay, "inbound_relay"),
    (Op::Open, "sealed_open"),
    (Op::Outbound, "outbound_accept"),
    (Op::MailboxPage, "mailbox_page_50"),
    (Op::LibroAccept, "libro_accept_spot"),
];

/// Everything the operations read, built once.
#[derive(Debug)]
pub struct Fixture {
    /// Raw Ed25519: ana's key, the framed bytes her envelope signature covers, the signature.
    ana_pub: SigPublic,
    framed: Vec<u8>,
    signature: [u8; 64],
    /// Mail from ana@a.test to bo@b.test: the canonical bytes, the relay header a.test signs.
    mail: Vec<u8>,
    mail_value: Value,
    relay: String,
    /// The same mail sealed for bo, signed.
    sealed: Vec<u8>,
    bo: Address,
    bo_enc: EncSecret,
    /// What b.test caches: a.test's domain card and ana's card, verified.
    a_card: Verified<DomainCard>,
    ana_card: Verified<AgentCard>,
    /// At a.test: ana's card as stored (text), a.test's own card, an `/outbound` request of ana
    /// (token and body) and a mailbox read token.
    ana_stored: String,
    outbound_token: String,
    outbound_body: Vec<u8>,
    mailbox_token: String,
    /// Fifty stored envelopes as `inbox::page` returns them.
    page: Vec<Row>,
    /// The Libro of a.test: its key, bo's card (the seller), an `accept` by ana of a spot quote.
    a_key: SigningKey,
    bo_a_card: Verified<AgentCard>,
    accept_op: Vec<u8>,
}

fn domain_card(domain: &str, key: &SigningKey) -> Verified<DomainCard> {
    DomainCardDraft {
        domain: domain.into(),
        estafeta: format!("https://{domain}"),
        other_keys: vec![],
        previous: vec![],
        policy: obj([("inbound", "verified".into())]),
        extensions: vec![],
        issued: NOW,
    }
    .sign(key, NOW)
    .unwrap()
    .verify(Some(&key.public()))
    .unwrap()
}

fn agent_card(address: &Address, sig: &SigningKey, enc: &EncSecret, domain: &SigningKey) -> AgentCard {
    AgentCardDraft::new(address.clone(), sig.public(), Some(enc.public()), NOW).certify(domain).unwrap()
}

fn token(who: &Address, key: &SigningKey, method: &str, path: &str, query: &str, body: &[u8]) -> String {
    Claims {
        address: who.clone(),
        ts: NOW,
        nonce: "bench-nonce-0000000001".into(),
        target: Target::new(method, path, query, "a.test", body),
    }
    .sign(key)
}

fn mail(from: &Address, to: &Address, id: &str) -> Draft {
    Draft::new(
        id.into(),
        from.clone(),
        vec![to.clone()],
        NOW,
        Content::new("text/plain", "x".repeat(BODY_CHARS).into()),
    )
}

/// Builds the fixtures (keys from fixed seeds; sealing from a fixed xorshift stream).
pub fn fixture() -> Fixture {
    // On wasm32 the JSON reader hands every number but an integer of at most 15 digits to the
    // host's `Number` (crates/proto/src/json.rs, `read_number`): here, in V8, it must give the
    // doubles Rust's own parser (rustc, for these literals) gives.
    for (literal, want) in [
        ("0.5", 0.5),
        ("-1.5e-7", -1.5e-7),
        ("1E2", 100.0),
        ("-0.0", -0.0),
        ("1234567890123456", 1234567890123456.0),
        ("100000000000000000000", 100000000000000000000.0),
        ("2.2250738585072014e-308", 2.2250738585072014e-308),
        ("0.30000000000000004", 0.30000000000000004),
    ] {
        let got = nyx5_proto::json::Value::parse_str(literal);
        assert!(
            matches!(got, Ok(nyx5_proto::json::Value::Number(n)) if n.to_bits() == f64::to_bits(want)),
            "{literal}"
        );
    }
    let a_key = SigningKey::from_seed([1; 32]);
    let b_key = SigningKey::from_seed([2; 32]);
    let ana_key = SigningKey::from_seed([10; 32]);
    let ana_enc = EncSecret::from_bytes([138; 32]);
    let bo_key = SigningKey::from_seed([20; 32]);
    let bo_enc = EncSecret::from_bytes([148; 32]);
    let ana = Address::parse("ana@a.test").unwrap();
    let bo = Address::parse("bo@b.test").unwrap();
    let bo_a = Address::parse("bo@a.test").unwrap();
    let a_card = domain_card("a.test", &a_key);
    let _b_card = domain_card("b.test", &b_key);
    let ana_unverified = agent_card(&ana, &ana_key, &ana_enc, &a_key);
    let ana_stored = ana_unverified.to_value().canonical_string();
    let ana_card = ana_unverified.verify(&a_card, None, NOW).unwrap();
    let bo_a_card = agent_card(&bo_a, &bo_key, &bo_enc, &a_key).verify(&a_card, None, NOW).unwrap();

    let env = mail(&ana, &bo, "e-1").build().unwrap().sign(&ana_key).unwrap();
    let framed = Context::Envelope.frame(&canonical_without(env.object(), "signature"));
    let signature = env.signature().unwrap().value;
    let relay = RelayHeader::sign("a.test", &env, "b.test", &a_key).to_header();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rng = move |buf: &mut [u8]| {
        for b in buf.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
    };
    let sealed = seal::seal(mail(&ana, &bo, "e-2").build().unwrap(), &[(bo.clone(), bo_enc.public())], &mut rng)
        .unwrap()
        .sign(&ana_key)
        .unwrap();

    let outbound_body = mail(&ana, &bo, "e-3").build().unwrap().sign(&ana_key).unwrap().canonical();
    let outbound_token = token(&ana, &ana_key, "POST", "/outbound", "", &outbound_body);
    let mailbox_token = token(&ana, &ana_key, "GET", "/mailbox/ana", "", b"");
    let page = (0..PAGE)
        .map(|i| {
            let text = mail(&bo, &ana, &format!("p-{i}")).build().unwrap().sign(&bo_key).unwrap().canonical();
            Row::from_pairs([
                ("seq", SqlValue::Int(i as i64 + 1)),
                ("envelope", SqlValue::Text(String::from_utf8(text).expect("canonical JSON is UTF-8"))),
                ("received_at", SqlValue::Int(NOW.millis())),
                ("stamp", SqlValue::Null),
                ("candidates", SqlValue::Int(PAGE as i64)),
            ])
        })
        .collect();

    let quote = QuoteDraft {
        id: "q-1".into(),
        house: "a.test".into(),
        seller: bo_a.clone(),
        buyer: ana.clone(),
        contract: ContractKind::Spot,
        price: 100,
        currency: "tok".into(),
        concept: "a benchmark".into(),
        terms: None,
        arbiter: None,
        referrer: None,
        issued: NOW,
        expires: None,
        extra: Object::new(),
    }
    .sign(&bo_key)
    .unwrap();
    let body = obj([("op", "accept".into()), ("quote", quote.to_value())]);
    let mut op = Draft::new(
        "op-1".into(),
        ana.clone(),
        vec![Address::new(LIBRO, "a.test").unwrap()],
        NOW,
        Content::new(OP_MEDIA, Value::Object(body)),
    );
    op.kind = Kind::Task;
    let accept_op = op.build().unwrap().sign(&ana_key).unwrap().canonical();

    Fixture {
        ana_pub: ana_key.public(),
        framed,
        signature,
        mail_value: Value::parse(&env.canonical(), limits::MAX_ENVELOPE_BYTES).unwrap(),
        mail: env.canonical(),
        relay,
        sealed: sealed.canonical(),
        bo,
        bo_enc,
        a_card,
        ana_card,
        ana_stored,
        outbound_token,
        outbound_body,
        mailbox_token,
        page,
        a_key,
        bo_a_card,
        accept_op,
    }
}

/// `POST /inbound` at b.test between its reads and its batch: the envelope read, its
/// recipients here, the relay header (when given) checked against the sending house's cached
/// card, the envelope's signature against the sender's cached card, the delegation scope, the
/// sender's site (its rate bucket) and the §6 answer.
fn inbound(f: &Fixture, relay: bool) -> usize {
    inbound_with(&f.mail, &f.a_card, &f.ana_card, relay.then_some(f.relay.as_str()))
}

fn inbound_with(
    mail: &[u8],
    a_card: &Verified<DomainCard>,
    ana_card: &Verified<AgentCard>,
    relay: Option<&str>,
) -> usize {
    let env = Envelope::parse(mail, limits::MAX_ENVELOPE_BYTES).unwrap();
    assert!(env.signature().is_some());
    let recipients: Vec<Address> = env.to().iter().filter(|a| a.domain() == "b.test").cloned().collect();
    if let Some(relay) = relay {
        let header = RelayHeader::parse(relay).unwrap();
        assert_eq!(header.domain, env.from().domain());
        header.verify(a_card, &env, "b.test", NOW).unwrap();
    }
    let env = env.verify(ana_card, NOW).unwrap();
    ana_card.check_send(env.kind().as_str(), "b.test").unwrap();
    let site = nyx5_house::site::site(env.from().domain()).len();
    let answer = inbound::answer(recipients.into_iter().map(|a| (a, Outcome::Accepted)).collect());
    answer.body.len() + site
}

/// A local agent's token as `House::authenticate` checks it: the stored card read and its
/// certification verified, the token read and verified for this request.
fn authenticate(f: &Fixture, token: &str, method: &str, path: &str, body: &[u8], keys: Keys) -> Verified<AgentCard> {
    let parsed = AuthHeader::parse(token).unwrap();
    let card = AgentCard::parse(f.ana_stored.as_bytes()).unwrap().verify(&f.a_card, None, NOW).unwrap();
    let target = Target::new(method, path, "", "a.test", body);
    let _nonce = parsed.verify(&card, &target, keys, NOW).unwrap();
    card
}

/// `POST /outbound` at a.test between its reads and its batch: authentication, the envelope
/// read and verified against the sender's card, the scope per destination, the outbox row,
/// its jobs and the rate windows as statements, and the 202 answer.
fn outbound(f: &Fixture) -> usize {
    let card = authenticate(f, &f.outbound_token, "POST", "/outbound", &f.outbound_body, Keys::Current);
    let env = Envelope::parse(&f.outbound_body, limits::MAX_ENVELOPE_BYTES).unwrap();
    assert_eq!(env.from(), card.address());
    let env = env.verify(&card, NOW).unwrap();
    env.check_not_expired(NOW).unwrap();
    let groups = outbound::by_domain(env.to());
    for (domain, _) in &groups {
        card.check_send(env.kind().as_str(), domain).unwrap();
    }
    let text = String::from_utf8(env.canonical()).unwrap();
    let sha256 = env.sha256_hex();
    outbound::check_due(env.due_at(NOW), NOW).unwrap();
    let not_before = env.due_at(NOW).millis();
    let out = Outgoing {
        envelope_id: env.id(),
        sender: env.from().as_str(),
        envelope: &text,
        sha256: &sha256,
        expires: None,
        now: NOW.millis(),
        not_before,
        deadline: not_before + 86_400_000,
        judged: None,
    };
    let list = |l: &[Address]| Value::Array(l.iter().map(|a| a.as_str().into()).collect());
    let jobs: Vec<NewJob> = groups
        .iter()
        .map(|(domain, l)| NewJob {
            domain: domain.clone(),
            recipients: list(l).canonical_string(),
            // The send takes each job's first attempt (decision 0070), as the route does.
            first: Some(queue_store::First {
                lease_until: NOW.millis() + nyx5_house::queue::LEASE_MS,
                next_attempt: NOW.millis() + 60_000,
                deadline: not_before + 86_400_000,
                result: nyx5_house::queue::Progress::default().with_maybe(l).to_value().canonical_string(),
            }),
        })
        .collect();
    // The outbox row counts the send in its agent's minute (migration 0024).
    let stmts = queue_store::enqueue_remembered(&out, &jobs, NOW.millis(), 60);
    let listed = groups
        .iter()
        .map(|(domain, l)| {
            Value::Object(obj([
                ("domain", domain.as_str().into()),
                ("recipients", list(l)),
                ("next_attempt", Timestamp(not_before).to_rfc3339().into()),
            ]))
        })
        .collect();
    let answer = Value::Object(obj([("id", env.id().into()), ("jobs", Value::Array(listed))])).canonical();
    stmts.len() + answer.len()
}

/// `GET /mailbox/ana` of 50 envelopes at a.test, beside its query: authentication and the
/// page written around the stored texts.
fn mailbox_page(f: &Fixture) -> usize {
    let _card = authenticate(f, &f.mailbox_token, "GET", "/mailbox/ana", b"", Keys::CurrentOrGrace);
    mailbox::write_page(&f.page, PAGE as i64).unwrap().len()
}

/// An id derived with the domain key, as `House::derived_id` makes it.
fn derived_id(key: &SigningKey, what: &str, of: &str, to: &str) -> String {
    let seed = key.sign(Context::NoticeId, format!("nyx5 {what}:{of}:{to}").as_bytes());
    let mut bytes = [0u8; 16];
    for (b, d) in bytes.iter_mut().zip(sha256(&seed)) {
        *b = d;
    }
    uuid_v4(bytes)
}

/// An `accept` of a spot quote by ana at a.test's Libro, beside its reads and its batch, as
/// `House::operate` does it once the queue hands it over: the operation read from its stored
/// bytes and verified against ana's card, the quote verified against the seller's, the kernel's
/// decision, the entry numbered and signed, the receipt signed, and one receipt envelope (its id
/// derived with the domain key) built and signed for each party (ana and bo).
fn libro_accept(f: &Fixture) -> usize {
    let env = Envelope::parse(&f.accept_op, limits::MAX_ENVELOPE_BYTES).unwrap();
    let env = env.verify(&f.ana_card, NOW).unwrap();
    let Payload::Clear(content) = env.payload() else { panic!("clear") };
    let op = LibroOp::parse(content.body.as_object().unwrap()).unwrap();
    let LibroOp::Accept { quote } = &op else { panic!("accept") };
    (**quote).clone().verify(&f.bo_a_card, NOW).unwrap();
    let sha = env.sha256_hex();
    let ctx = Ctx::new(env.from().clone(), env.id().to_owned(), sha.clone(), NOW);
    let rules = Rules { house: "a.test".into(), fee_bps: 100, approval_ttl_ms: 86_400_000 };
    let mut facts = Facts { known: true, ..Facts::default() };
    facts.balances.insert("ana@a.test".into(), 1_000_000);
    let entry_id = "00000000-0000-4000-8000-000000000001";
    let d = kernel::decide(&op, &ctx, &rules, &facts, entry_id).unwrap();
    let p = d.posting.as_ref().unwrap();
    let entry = EntryDraft {
        id: entry_id.into(),
        at: NOW,
        house: "a.test".into(),
        concept: p.concept.clone(),
        lines: p.lines.clone(),
        meta: p.meta.clone(),
        refs: p.refs.clone(),
    }
    .sign(1, GENESIS, &f.a_key)
    .unwrap();
    let entry_text = entry.canonical_string();
    let entry_sha = hex(&sha256(entry_text.as_bytes()));
    let lines = lines_value(&entry.lines).canonical_string();
    let mut extra = d.receipt.clone();
    extra.insert("asiento".into(), entry.to_value());
    let receipt = Receipt::sign(
        "a.test",
        env.id(),
        "accept",
        &sha,
        env.from(),
        NOW,
        nyx5_proto::receipt::Status::Done,
        extra,
        &f.a_key,
    )
    .unwrap();
    let receipt_text = receipt.to_value().canonical_string();
    let libro = Address::new(LIBRO, "a.test").unwrap();
    let mut total = entry_sha.len() + lines.len() + receipt_text.len();
    for party in d.parties.iter().filter(|p| p.local() != "casa") {
        let id = derived_id(&f.a_key, "receipt", env.id(), party.as_str());
        let mut draft = Draft::new(
            id,
            libro.clone(),
            vec![party.clone()],
            NOW,
            Content::new(nyx5_proto::receipt::MEDIA, receipt.to_value()),
        );
        draft.kind = Kind::Receipt;
        draft.in_reply_to = Some(env.id().to_owned());
        let signed = draft.build().unwrap().sign(&f.a_key).unwrap();
        total += String::from_utf8(signed.canonical()).unwrap().len();
    }
    total
}

/// Runs `op` once; the answer is a size, so nothing is optimised away.
pub fn once(f: &Fixture, op: Op) -> usize {
    match op {
        Op::Ed25519 => usize::from(f.ana_pub.verify_raw(&f.framed, &f.signature)),
        Op::Canonicalize => f.mail_value.canonical().len(),
        Op::Inbound => inbound(f, false),
        Op::InboundRelay => inbound(f, true),
        Op::Open => {
            let env = Envelope::parse(&f.sealed, limits::MAX_ENVELOPE_BYTES).unwrap();
            seal::open(&env, &f.bo, &f.bo_enc).unwrap().body.canonical().len()
        }
        Op::Outbound => outbound(f),
        Op::MailboxPage => mailbox_page(f),
        Op::LibroAccept => libro_accept(f),
    }
}

thread_local! {
    static FIXTURE: RefCell<Option<Fixture>> = const { RefCell::new(None) };
}

/// What the Worker does once per isolate before its first event: take the coded Public Suffix
/// List it read from its static assets (`nyx5_house::site::install`: its length and checksum
/// checked, the bytes kept as they are), then look a site up. `cold.mjs` hands over the bytes
/// `nyx5-pages` wrote (wasm-bindgen copies them into the module's memory, as the adapter's read
/// does) and times the call; an empty string means the list was taken.
#[wasm_bindgen]
pub fn first_site(coded: Vec<u8>) -> String {
    if let Err(e) = nyx5_house::site::install(black_box(coded)) {
        return e.to_string();
    }
    match nyx5_house::site::site(black_box("mail.example.co.uk")) {
        "example.co.uk" => String::new(),
        other => format!("wrong site: {other}"),
    }
}

/// What a cold isolate's first inbound envelope reads, for run.mjs to hand to a fresh process
/// (`cold_inbound`): a.test's domain card and ana's card as b.test keeps them in its cache
/// (text), and ana's mail to bo, one per line (canonical JSON holds no line feed). `setup()`
/// first.
#[wasm_bindgen]
pub fn cold_fixture() -> Vec<u8> {
    FIXTURE.with(|c| {
        let f = c.borrow();
        let f = f.as_ref().expect("setup() first");
        let a_card = f.a_card.to_value().canonical_string();
        [a_card.as_bytes(), f.ana_stored.as_bytes(), &f.mail].join(&b'\n')
    })
}

/// What the Worker's start event runs before any request (`nyx5_house::warm`): "" when every
/// step went, else why one did not.
#[wasm_bindgen]
pub fn warm_start() -> String {
    nyx5_house::warm::run().err().map(|e| e.reason.into_owned()).unwrap_or_default()
}

/// One inbound envelope as a fresh isolate meets it, on what `cold_fixture` wrote: the cached
/// domain and agent cards read and verified (an isolate's memo starts empty), then `inbound`.
/// run.mjs calls it first in a fresh process, right after `first_site`, and then again warm; the
/// answer is a size, so nothing is optimised away.
#[wasm_bindgen]
pub fn cold_inbound(fixture: &[u8]) -> usize {
    let mut parts = fixture.split(|&b| b == b'\n');
    let (a_card, ana_card, mail) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let a_card = DomainCard::parse(a_card).unwrap().verify(None).unwrap();
    let ana_card = AgentCard::parse(ana_card).unwrap().verify(&a_card, None, NOW).unwrap();
    inbound_with(mail, &a_card, &ana_card, None)
}

/// The canonical form's number as the wasm build writes it (`nyx5_proto::json::format_number`:
/// integers below 2^53 in Rust, the rest by the host's `String(n)`), for run.mjs to hold against
/// JavaScript's own over edge cases and random doubles before it times anything.
#[wasm_bindgen]
pub fn format_number(n: f64) -> String {
    nyx5_proto::json::format_number(n)
}

/// The operations' names, comma-separated, in their index order.
#[wasm_bindgen]
pub fn names() -> String {
    OPS.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(",")
}

/// Builds the fixtures and runs every operation once, checked (a panic is a failure).
#[wasm_bindgen]
pub fn setup() -> String {
    let f = fixture();
    let sizes: Vec<String> = OPS.iter().map(|(op, name)| format!("{name}={}", once(&f, *op))).collect();
    let info = format!(
        "mail {} B canonical, sealed {} B, Ed25519 message {} B, page {} envelopes; {}",
        f.mail.len(),
        f.sealed.len(),
        f.framed.len(),
        f.page.len(),
        sizes.join(" ")
    );
    FIXTURE.with(|c| *c.borrow_mut() = Some(f));
    info
}

thread_local! {
    /// The JavaScript signer `native_signer` was given.
    static SIGNER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

/// Hands Ed25519 signing to `sign(seed, public, message) → Uint8Array` (run.mjs gives Node's
/// `node:crypto`), through proto's known signatures, as the Worker hands it to workerd's
/// (src/adapter/ed25519.rs): so the operations that sign cost here what they cost there, while
/// verification stays in wasm and stays the ratios' reference. Answers "" when taken, else why
/// it was not.
#[wasm_bindgen]
pub fn native_signer(sign: js_sys::Function) -> String {
    SIGNER.with(|s| *s.borrow_mut() = Some(sign));
    nyx5_proto::crypto::set_native_sign(call_signer).err().unwrap_or_default()
}

thread_local! {
    /// The JavaScript verifier `native_verifier` was given.
    static VERIFIER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

/// Hands Ed25519's equation to `verify(public, message, signature) → bool` (cold.mjs gives
/// Node's `node:crypto`), as the Worker's start event hands it to workerd's
/// (src/adapter/ed25519.rs, `install`: proto's known answers asked first, so this runs at start
/// in a cold process as it does in a fresh isolate). Only cold.mjs uses it: the main run keeps
/// verifying in wasm, the reference of every ratio. Answers "" when taken, else why it was not.
#[wasm_bindgen]
pub fn native_verifier(verify: js_sys::Function) -> String {
    VERIFIER.with(|v| *v.borrow_mut() = Some(verify));
    nyx5_proto::crypto::set_native_verify(call_verifier).err().unwrap_or_default()
}

fn call_verifier(public: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> Option<bool> {
    use js_sys::Uint8Array;
    use wasm_bindgen::JsValue;
    VERIFIER.with(|v| {
        let v = v.borrow();
        let verify = v.as_ref()?;
        let (public, message, signature) =
            (Uint8Array::from(&public[..]), Uint8Array::from(message), Uint8Array::from(&signature[..]));
        verify.call3(&JsValue::NULL, &public, &message, &signature).ok()?.as_bool()
    })
}

fn call_signer(public: &[u8; 32], seed: &dyn Fn(&mut [u8; 32]), message: &[u8]) -> Option<[u8; 64]> {
    use js_sys::Uint8Array;
    use wasm_bindgen::{JsCast, JsValue};
    SIGNER.with(|s| {
        let s = s.borrow();
        let sign = s.as_ref()?;
        // A bench's keys: handed over every time; the script keeps them by public key.
        let mut bytes = [0u8; 32];
        seed(&mut bytes);
        let (seed, public, message) =
            (Uint8Array::from(&bytes[..]), Uint8Array::from(&public[..]), Uint8Array::from(message));
        let out: Uint8Array = sign.call3(&JsValue::NULL, &seed, &public, &message).ok()?.dyn_into().ok()?;
        let mut signature = [0u8; 64];
        if out.length() as usize != signature.len() {
            return None;
        }
        out.copy_to(&mut signature);
        Some(signature)
    })
}

/// Runs operation `index` `iterations` times; answers a checksum of what it produced.
#[wasm_bindgen]
pub fn run(index: u32, iterations: u32) -> u32 {
    let op = OPS[index as usize].0;
    FIXTURE.with(|c| {
        let f = c.borrow();
        let f = f.as_ref().expect("setup() first");
        let mut sum = 0usize;
        for _ in 0..iterations {
            sum = sum.wrapping_add(black_box(once(black_box(f), op)));
        }
        sum as u32
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation succeeds natively too (the same checks as in wasm).
    #[test]
    fn every_operation_runs() {
        let f = fixture();
        for (op, name) in OPS {
            assert!(once(&f, op) > 0, "{name}");
        }
    }
}
