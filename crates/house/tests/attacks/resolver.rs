//! Attacks on the resolver and the domain key (issue 9, §5 and §6), each performed through a
//! house's public routes against real SQLite: a man in the middle who lists the pinned key
//! without its holder's handover, a DNS record contradicting a pin, a plain-http DNS-over-HTTPS
//! endpoint, and a domain key that lives past its end; beside them, the legitimate rotation that
//! must keep working without an operator.

use std::path::PathBuf;
use std::rc::Rc;

use crate::kit::*;
use nyx5_house::http::Response;
use nyx5_house::ports::{Db, OutRequest, OutResponse};
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::{Config, Registration, stmt};
use nyx5_proto::card::{AgentCard, DomainCard, DomainKey, PreviousDomainKey, handover_message};
use nyx5_proto::crypto::{Context, SigningKey};
use nyx5_proto::json::obj;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::sign::Signature;
use nyx5_proto::{Envelope, Object, Timestamp, Value};

fn admin(house: &TestHouse) -> String {
    format!("Bearer admin-{}", house.config.domain)
}

fn register(house: &TestHouse, agent: &Agent) {
    let body = agent.registration(house, &[]);
    let resp = call(house, "POST", "/agents", &[("authorization", &admin(house))], &body);
    assert!(resp.status == 201 || resp.status == 200, "registration failed: {}", resp.status);
}

/// Relays `env` to `to` with a relay header signed by `key` for `domain`, as a queue would.
fn deliver_by(key: &SigningKey, domain: &str, to: &TestHouse, env: &Envelope) -> Response {
    let header = RelayHeader::sign(domain, env, &to.config.domain, key).to_header();
    call_raw(to, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical())
}

/// A signed envelope from `from`.
fn msg(from: &Agent, id: &str, to: &[&nyx5_proto::Address], body: &str) -> Envelope {
    from.draft(id, to, body).sign(&from.sig).unwrap()
}

fn deliver(from: &TestHouse, to: &TestHouse, env: &Envelope) -> Response {
    deliver_by(&from.config.key, &from.config.domain, to, env)
}

fn reason(resp: &Response) -> String {
    resp.value().unwrap().as_object().unwrap()["reason"].as_str().unwrap_or_default().to_owned()
}

/// The refusal's name (the wire's `error`).
fn error(resp: &Response) -> String {
    resp.value().unwrap().as_object().unwrap()["error"].as_str().unwrap_or_default().to_owned()
}

fn pins(house: &TestHouse) -> Vec<Object> {
    let v = json(&call_raw(house, "GET", "/pins", &[("authorization", &admin(house))], vec![]), 200);
    v.as_object().unwrap()["pins"].as_array().unwrap().iter().map(|p| p.as_object().unwrap().clone()).collect()
}

fn pin_of(house: &TestHouse, domain: &str) -> (String, Option<String>) {
    let p = pins(house).into_iter().find(|p| p["domain"].as_str() == Some(domain)).expect("a pin");
    (p["sig"].as_str().unwrap().to_owned(), p["pending"].as_str().map(str::to_owned))
}

/// Serves `card` as `host`'s domain card; everything else there is 404.
fn serve_card(w: &World, host: &str, card: &DomainCard) {
    let text = card.to_value().canonical();
    w.fake(host, move |req: &OutRequest| {
        if req.url.ends_with("/.well-known/nyx5.json") {
            OutResponse { status: 200, body: text.clone() }
        } else {
            OutResponse { status: 404, body: b"{}".to_vec() }
        }
    });
}

/// A domain card for `domain` signed by `key`, listing `others` after it.
fn card_by(domain: &str, key: &SigningKey, others: Vec<DomainKey>, now: Timestamp) -> DomainCard {
    crate::resolver_state::domain_card(domain, &format!("http://{domain}"), key, others, now)
}

/// b.test started first, so it knows a.test only through the well-known URL: it pins a.test's
/// key on first use when alice's first envelope arrives.
struct Tofu {
    w: World,
    a: Rc<TestHouse>,
    b: Rc<TestHouse>,
    alice: Agent,
    bob: Agent,
}

fn tofu() -> Tofu {
    let w = World::new();
    let b = w.house("b.test", Registration::Admin);
    let a = w.house("a.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    register(&a, &alice);
    register(&b, &bob);
    json(&deliver(&a, &b, &msg(&alice, "e1", &[&bob.address], "first")), 202);
    assert_eq!(pin_of(&b, "a.test"), (a.config.key.public().to_b64(), None));
    Tofu { w, a, b, alice, bob }
}

/// A config for `domain` signed by `key`, keeping `previous` listed with a handover.
fn rotated(w: &World, domain: &str, key: &SigningKey, previous: Vec<PreviousDomainKey>) -> Config {
    let mut c = w.config(domain, Registration::Admin);
    c.key = key.clone();
    c.key_created = w.clock.now();
    c.previous_keys = previous;
    c
}

#[test]
fn mitm_card_listing_pinned_key_without_handover_is_refused() {
    let t = tofu();
    let now = t.w.clock.now();
    let pinned = t.a.config.key.clone();
    let mitm = SigningKey::from_seed([201; 32]);
    let until = Timestamp(now.millis() + 30 * DAY);
    let env = msg(&t.alice, "e2", &[&t.bob.address], "from the middle");

    // The legitimate house rotates to k3: its card carries the pinned key's handover to k3.
    let k3 = SigningKey::from_seed([202; 32]);
    let real = rotated(&t.w, "a.test", &k3, vec![PreviousDomainKey { key: pinned.clone(), created: None, until }]);
    let real = t.w.start(real);
    let copied = real.card().keys().iter().find(|k| k.sig == pinned.public()).unwrap().clone();
    assert!(copied.handover.is_some());

    let attempts: Vec<(&str, Vec<DomainKey>)> = vec![
        // 1. The pinned key listed as it is: anyone can copy a public key.
        ("listed", vec![DomainKey::new(pinned.public(), None)]),
        // 2. Listed with an end, but no handover.
        ("no handover", vec![DomainKey { until: Some(until), ..DomainKey::new(pinned.public(), None) }]),
        // 3. A "handover" the man in the middle signed himself.
        (
            "self-signed handover",
            vec![DomainKey {
                until: Some(until),
                handover: Some(mitm.sign(
                    Context::DomainKeyHandover,
                    &handover_message("a.test", &pinned.public(), &mitm.public(), until),
                )),
                ..DomainKey::new(pinned.public(), None)
            }],
        ),
        // 4. The real handover, copied from the real card: it endorses k3, not the attacker.
        ("copied handover", vec![copied]),
        // 5. A real handover by the pinned key, but over other bytes (another domain).
        (
            "handover for another domain",
            vec![DomainKey {
                until: Some(until),
                handover: Some(pinned.sign(
                    Context::DomainKeyHandover,
                    &handover_message("c.test", &pinned.public(), &mitm.public(), until),
                )),
                ..DomainKey::new(pinned.public(), None)
            }],
        ),
    ];
    for (i, (what, others)) in attempts.into_iter().enumerate() {
        serve_card(&t.w, "a.test", &card_by("a.test", &mitm, others, now));
        t.w.clock.advance(6 * MINUTE);
        let env = msg(&t.alice, &format!("m{i}"), &[&t.bob.address], "from the middle");
        let resp = deliver_by(&mitm, "a.test", &t.b, &env);
        assert_eq!(resp.status, 403, "{what}: {}", reason(&resp));
        assert_eq!(error(&resp), "pin_mismatch", "{what}: {}", reason(&resp));
        // Refused and reported: the pin stays, the attacker's key waits for the operator.
        assert_eq!(pin_of(&t.b, "a.test"), (pinned.public().to_b64(), Some(mitm.public().to_b64())), "{what}");
    }
    assert_eq!(deliver_by(&mitm, "a.test", &t.b, &env).status, 403);
    assert_eq!(block_on(t.b.db.query(stmt!("SELECT count(*) AS n FROM mailbox"))).unwrap()[0].int("n"), Some(1));
}

#[test]
fn legitimate_rotation_with_handover_is_followed() {
    let t = tofu();
    let old = t.a.config.key.clone();
    let new = SigningKey::from_seed([210; 32]);
    let until = Timestamp(t.w.clock.now().millis() + 30 * DAY);
    // a.test restarts with a new key; the old one stays listed with its handover.
    let a2 =
        t.w.start(rotated(&t.w, "a.test", &new, vec![PreviousDomainKey { key: old.clone(), created: None, until }]));
    register(&a2, &t.alice);
    let entry = a2.card().keys().iter().find(|k| k.sig == old.public()).unwrap();
    assert_eq!(entry.until, Some(until));
    t.w.clock.advance(6 * MINUTE);

    // No operator: b follows the handover and moves its pin.
    json(&deliver(&a2, &t.b, &msg(&t.alice, "e2", &[&t.bob.address], "after rotation")), 202);
    assert_eq!(pin_of(&t.b, "a.test"), (new.public().to_b64(), None));
    assert_eq!(mailbox(&t.b, &t.bob).len(), 2);

    // A handover past its end is no longer followed: a rotation two days after a one-day grace.
    let newer = SigningKey::from_seed([211; 32]);
    let short = Timestamp(t.w.clock.now().millis() + DAY);
    let a3 = t.w.start(rotated(
        &t.w,
        "a.test",
        &newer,
        vec![PreviousDomainKey { key: new.clone(), created: None, until: short }],
    ));
    register(&a3, &t.alice);
    let card = a3.card().clone().into_inner();
    t.w.clock.advance(2 * DAY);
    serve_card(&t.w, "a.test", &card);
    let resp = deliver(&a3, &t.b, &msg(&t.alice, "e3", &[&t.bob.address], "too late"));
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert_eq!(pin_of(&t.b, "a.test"), (new.public().to_b64(), Some(newer.public().to_b64())));
}

#[test]
fn dns_anchor_contradicting_pin_is_reported() {
    let w = World::new();
    let records = Rc::new(std::cell::RefCell::new(String::from(r#"{"Status":3}"#)));
    let answer = records.clone();
    w.fake("dns.test", move |_: &OutRequest| OutResponse { status: 200, body: answer.borrow().clone().into_bytes() });
    let mut cb = w.config("b.test", Registration::Admin);
    cb.doh_url = Some("https://dns.test/dns-query".into());
    let b = w.start(cb);
    let a = w.house("a.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    register(&a, &alice);
    register(&b, &bob);
    // No record yet: the well-known URL, pinned on first use.
    json(&deliver(&a, &b, &msg(&alice, "e1", &[&bob.address], "first")), 202);
    let pinned = a.config.key.public().to_b64();
    assert_eq!(pin_of(&b, "a.test"), (pinned.clone(), None));

    // Then a TXT record appears pointing at another estafeta with another key.
    let evil = SigningKey::from_seed([220; 32]);
    serve_card(&w, "evil.test", &card_by("a.test", &evil, vec![], w.clock.now()));
    let data = Value::from(format!("v=nyx51; url=http://evil.test; sig={}", evil.public().to_b64()).as_str());
    *records.borrow_mut() = format!(r#"{{"Status":0,"Answer":[{{"type":16,"data":{}}}]}}"#, data.canonical_string());
    w.clock.advance(6 * MINUTE);
    let resp = deliver_by(&evil, "a.test", &b, &msg(&alice, "e2", &[&bob.address], "anchored elsewhere"));
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert_eq!(error(&resp), "pin_mismatch", "{}", reason(&resp));
    assert!(reason(&resp).contains("DNS"), "the reason says it was the DNS record: {}", reason(&resp));
    assert_eq!(pin_of(&b, "a.test"), (pinned, Some(evil.public().to_b64())));
    assert_eq!(mailbox(&b, &bob).len(), 1);
}

#[test]
fn http_doh_endpoint_is_refused() {
    let w = World::new();
    let house = |doh: &str| {
        let mut c = w.config("b.test", Registration::Admin);
        c.doh_url = Some(doh.into());
        nyx5_house::House::new(
            c,
            SqliteDb::memory().unwrap(),
            w.net.clone(),
            Box::new(w.clock.clone()),
            Box::new(TestRngSeed),
        )
        .map(drop)
    };
    for bad in ["http://dns.test/dns-query", "HTTP://dns.test", "https://", "ftp://dns.test", "dns.test/dns-query"] {
        let err = house(bad).unwrap_err();
        assert_eq!(err.name(), "bad_config", "{bad}: {}", err.reason);
    }
    assert!(house("https://dns.test/dns-query").is_ok());
    assert!(nyx5_house::resolver::check_doh_url("http://cloudflare-dns.com/dns-query").is_err());
}

/// Randomness for a house built by hand (never used by these checks).
struct TestRngSeed;

impl nyx5_house::ports::Rng for TestRngSeed {
    fn fill(&self, buf: &mut [u8]) {
        buf.fill(7);
    }
}

/// A database file two houses can open in turn.
fn db_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("nyx5-attacks-{name}-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

/// The domain key that certified the stored card of `local`.
fn certifier(house: &TestHouse, local: &str) -> String {
    let rows = block_on(house.db.query(stmt!("SELECT card FROM agents WHERE local = ?", local))).unwrap();
    let card = AgentCard::parse(rows[0].text("card").unwrap().as_bytes()).unwrap();
    Signature::read(card.object(), "certification").unwrap().kid.to_b64()
}

#[test]
fn expired_previous_domain_key_no_longer_certifies() {
    let w = World::new();
    let path = db_file("expired");
    // a starts first: it knows b.test by its well-known URL and pins b's key on first use.
    let a = w.house("a.test", Registration::Admin);
    let b = w.start_on(w.config("b.test", Registration::Admin), SqliteDb::open(&path).unwrap());
    let bob = Agent::new("bob@b.test", 20);
    let alice = Agent::new("alice@a.test", 10);
    register(&b, &bob);
    register(&a, &alice);
    let old = b.config.key.clone();
    // b rotates with a one-hour grace and never ticks, so bob's card stays certified by the old key.
    let new = SigningKey::from_seed([230; 32]);
    let until = Timestamp(w.clock.now().millis() + 3_600_000);
    let b2 = w.start_on(
        rotated(&w, "b.test", &new, vec![PreviousDomainKey { key: old.clone(), created: None, until }]),
        SqliteDb::open(&path).unwrap(),
    );
    assert_eq!(certifier(&b2, "bob"), old.public().to_b64());
    // Within the grace: bob's card verifies, and so does a relay header by the old key.
    json(&deliver(&b2, &a, &msg(&bob, "e1", &[&alice.address], "in grace")), 202);
    let resp = deliver_by(&old, "b.test", &a, &msg(&bob, "e2", &[&alice.address], "old relay key"));
    json(&resp, 202);

    // Past its end, the old key certifies nothing: not bob's card (here or at a), not a relay header.
    w.clock.advance(3_600_000 + 6 * MINUTE);
    assert_eq!(bob.get(&b2, "/mailbox/bob").status, 401);
    let resp = deliver(&b2, &a, &msg(&bob, "e3", &[&alice.address], "past the end"));
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    let resp = deliver_by(&old, "b.test", &a, &msg(&bob, "e4", &[&alice.address], "old relay key, late"));
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert_eq!(mailbox(&a, &alice).len(), 2);
}

#[test]
fn rotated_domain_key_keeps_agents_working_and_recertifies() {
    let w = World::new();
    let path = db_file("recertify");
    // a starts first: it knows b.test only by its well-known URL, and pins b's key on first use.
    let a = w.house("a.test", Registration::Admin);
    let b = w.start_on(w.config("b.test", Registration::Admin), SqliteDb::open(&path).unwrap());
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    register(&a, &alice);
    register(&b, &bob);
    let others: Vec<Agent> = (0..20).map(|i| Agent::new(&format!("x{i}@b.test"), 100 + i)).collect();
    for o in &others {
        register(&b, o);
    }
    json(&alice.send(&a, &msg(&alice, "e1", &[&bob.address], "before")), 202);
    w.tick_all();
    assert_eq!(mailbox(&b, &bob).len(), 1);
    let old = b.config.key.clone();
    assert_eq!(pin_of(&a, "b.test").0, old.public().to_b64());

    // b rotates (what `nyx5 serve --rotate-domain-key` does): the old key is listed for 30 days.
    let new = SigningKey::from_seed([240; 32]);
    let until = Timestamp(w.clock.now().millis() + 30 * DAY);
    let b2 = w.start_on(
        rotated(&w, "b.test", &new, vec![PreviousDomainKey { key: old.clone(), created: None, until }]),
        SqliteDb::open(&path).unwrap(),
    );
    drop(b);
    w.clock.advance(6 * MINUTE);
    // Stored cards still certified by the old key keep working at once, here and at a.
    assert_eq!(certifier(&b2, "bob"), old.public().to_b64());
    json(&bob.get(&b2, "/mailbox/bob"), 200);
    json(&bob.send(&b2, &msg(&bob, "r1", &[&alice.address], "still me")), 202);
    json(&alice.send(&a, &msg(&alice, "e2", &[&bob.address], "after")), 202);

    // Ticks certify them again, a bounded number at a time, each guarded by the text it replaces.
    let stale = |h: &TestHouse| {
        let rows = block_on(h.db.query(stmt!(
            "SELECT count(*) AS n FROM agents WHERE json_extract(card, '$.certification.kid') = ?",
            old.public().to_b64()
        )))
        .unwrap();
        rows[0].int("n").unwrap()
    };
    assert_eq!(stale(&b2), 21);
    // A stored card changed behind the house's back is not laundered by the new key.
    let text = block_on(b2.db.query(stmt!("SELECT card FROM agents WHERE local = 'x9'"))).unwrap()[0]
        .text("card")
        .unwrap()
        .to_owned();
    let mut tampered = AgentCard::parse(text.as_bytes()).unwrap().object().clone();
    tampered.insert("capabilities".into(), Value::Object(obj([("listed", Value::Bool(true))])));
    let tampered = Value::Object(tampered).canonical_string();
    block_on(b2.db.batch(vec![stmt!("UPDATE agents SET card = ? WHERE local = 'x9'", tampered.as_str())])).unwrap();
    w.tick_all();
    assert_eq!(stale(&b2), 21 - nyx5_house::domain_keys::RECERTIFY_PER_TICK);
    // At exactly its `until` the old key is past: a pass then re-certifies nothing.
    assert_eq!(block_on(b2.registry().recertify_some(until)).unwrap(), 0);
    assert_eq!(stale(&b2), 21 - nyx5_house::domain_keys::RECERTIFY_PER_TICK);
    // The next pass re-certifies the rest but the tampered card, and says how many it did.
    let done = block_on(b2.registry().recertify_some(b2.now())).unwrap();
    assert_eq!(done as i64, 21 - nyx5_house::domain_keys::RECERTIFY_PER_TICK - 1);
    assert_eq!(stale(&b2), 1);
    assert_eq!(block_on(b2.registry().recertify_some(b2.now())).unwrap(), 0, "nothing left it can re-certify");
    assert_eq!(certifier(&b2, "x9"), old.public().to_b64());
    assert_eq!(certifier(&b2, "bob"), new.public().to_b64());
    // a followed the rotation through the handover, without its operator.
    assert_eq!(pin_of(&a, "b.test"), (new.public().to_b64(), None));
    assert_eq!(mailbox(&b2, &bob).len(), 2);
    assert_eq!(mailbox(&a, &alice).len(), 1);

    // An update made between the read and the write wins: the guarded write changes nothing.
    let before = block_on(b2.db.query(stmt!("SELECT card FROM agents WHERE local = 'x0'"))).unwrap()[0].clone();
    let write = nyx5_house::store::domain_keys::recertify("x0", "not the stored text", "{}", w.clock.now().millis());
    assert_eq!(block_on(b2.db.batch(vec![write])).unwrap(), [0]);
    let after = block_on(b2.db.query(stmt!("SELECT card FROM agents WHERE local = 'x0'"))).unwrap()[0].clone();
    assert_eq!(before, after);
    assert_eq!(certifier(&b2, "x0"), new.public().to_b64());

    // After the grace, nothing depends on the old key.
    w.clock.advance(31 * DAY);
    json(&bob.get(&b2, "/mailbox/bob"), 200);
    let later = alice.draft_at("e3", &[&bob.address], "a month later", w.clock.now()).sign(&alice.sig).unwrap();
    json(&alice.send(&a, &later), 202);
    w.tick_all();
    assert_eq!(mailbox(&b2, &bob).len(), 3);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[test]
fn a_previous_key_list_naming_the_current_key_does_not_stall_re_certification() {
    let w = World::new();
    let old = SigningKey::from_seed([70; 32]);
    let mut config = w.config("b.test", Registration::Admin);
    config.key = old.clone();
    let b = w.start(config);
    register(&b, &Agent::new("zz@b.test", 20));
    drop(b);
    // The operator rotates, and (by mistake) lists the new key among the previous ones too.
    let mut config = w.config("b.test", Registration::Admin);
    let current = config.key.clone();
    config.previous_keys = vec![
        PreviousDomainKey { key: current, created: None, until: Timestamp(START + DAY) },
        PreviousDomainKey { key: old.clone(), created: None, until: Timestamp(START + DAY) },
    ];
    let b = w.restart(config);
    // More cards certified by the current key than one pass takes, all sorting before `zz`.
    for i in 0..nyx5_house::domain_keys::RECERTIFY_PER_TICK {
        register(&b, &Agent::new(&format!("a{i:02}@b.test"), 30 + i as u8));
    }
    assert_eq!(block_on(b.registry().recertify_some(b.now())).unwrap(), 1, "zz is moved to the current key");
    assert_eq!(block_on(b.registry().recertify_some(b.now())).unwrap(), 0);
}

/// A destination that refuses two recipients under two codes, giving no reason of their own (so
/// each takes the answer's): the sender hears of each code in a notice of its own, never one
/// code standing for the other. Kills `queue::notices`' grouping `*c == b.code` → `!=`.
#[test]
fn refusals_under_two_codes_and_one_reason_are_told_apart() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let key = SigningKey::from_seed([77; 32]);
    let card = card_by("c.test", &key, vec![], w.clock.now()).to_value().canonical();
    let refusal = br#"{"ok":false,"code":403,"reason":"not today","rejected":[{"to":"x@c.test","code":404},{"to":"y@c.test","code":403}]}"#;
    w.fake("c.test", move |req: &OutRequest| match req.url.ends_with("/.well-known/nyx5.json") {
        true => OutResponse { status: 200, body: card.clone() },
        false => OutResponse { status: 403, body: refusal.to_vec() },
    });
    let ana = Agent::new("ana@a.test", 10);
    register(&a, &ana);
    let (x, y) = (nyx5_proto::Address::parse("x@c.test").unwrap(), nyx5_proto::Address::parse("y@c.test").unwrap());
    assert_eq!(ana.send(&a, &msg(&ana, "two-codes", &[&x, &y], "hi")).status, 202);
    assert_eq!(w.tick_all().bounced, 1);
    let mut told: Vec<(i64, Value, String)> = mailbox(&a, &ana)
        .iter()
        .map(|n| {
            let body = n.content().unwrap().body.as_object().unwrap().clone();
            let code = body["code"].as_safe_integer().unwrap();
            (code, body["recipients"].clone(), body["reason"].as_str().unwrap().to_owned())
        })
        .collect();
    told.sort_by_key(|t| t.0);
    assert_eq!(
        told,
        [
            (403, Value::Array(vec!["y@c.test".into()]), "not today".to_owned()),
            (404, Value::Array(vec!["x@c.test".into()]), "not today".to_owned()),
        ]
    );
}

/// A sender's domain that can be no public house (`localhost`, a private-use suffix, one label)
/// is refused by name: before the resolver spends its site's budget of new names, and before
/// anything is sent to it. A public name spends one.
#[test]
fn a_domain_that_is_no_public_house_is_refused_before_any_budget_or_fetch() {
    let w = World::new();
    let b = w.house("b.test", Registration::Admin);
    let bob = Agent::new("bob@b.test", 20);
    register(&b, &bob);
    let windows = || {
        let rows = block_on(b.db.query(stmt!("SELECT bucket FROM rate_windows WHERE bucket LIKE 'resolve:%'")));
        rows.unwrap().iter().map(|r| r.text("bucket").unwrap_or_default().to_owned()).collect::<Vec<_>>()
    };
    let key = SigningKey::from_seed([77; 32]);
    for domain in ["printer.local", "api.localhost", "metadata.google.internal", "nas.home.arpa"] {
        let eve = Agent::new(&format!("eve@{domain}"), 21);
        let resp = deliver_by(&key, domain, &b, &msg(&eve, &format!("e-{domain}"), &[&bob.address], "hi"));
        assert_eq!(resp.status, 403, "{domain}");
        assert_eq!(error(&resp), "not_public_domain", "{}", reason(&resp));
        assert!(reason(&resp).contains(domain), "the reason names the domain: {}", reason(&resp));
        assert_eq!(w.sent_to(domain), 0, "{domain}");
    }
    assert_eq!(windows(), Vec::<String>::new());
    // A public name nobody serves: one new name spent under its site, and a fetch tried.
    let eve = Agent::new("eve@mail.nowhere.example", 21);
    let resp = deliver_by(&key, "mail.nowhere.example", &b, &msg(&eve, "e-public", &[&bob.address], "hi"));
    assert_ne!(resp.status, 202);
    assert_eq!(windows(), ["resolve:nowhere.example"]);
    assert!(w.sent_to("nowhere.example") > 0);
}
