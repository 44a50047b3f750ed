//! POST /inbound between houses (spec §6), the resolver (§2: hosts, DNS over HTTPS, TOFU pins,
//! cache and key rotation), inbound policies (§9) and mailbox lists — against real SQLite with the
//! shared migrations. Envelopes are relayed by hand: the test signs the relay header with the
//! sending house's key, as its queue would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::cell::RefCell;
use std::rc::Rc;

use kit::*;
use nyx5_house::http::Response;
use nyx5_house::ports::{Db, OutRequest, OutResponse};
use nyx5_house::{Registration, stmt};
use nyx5_proto::card::{AgentCardDraft, Delegation, Scope};
use nyx5_proto::crypto::{Context, SigningKey};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::obj;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value, b64, pow};

fn admin(house: &TestHouse) -> String {
    format!("Bearer admin-{}", house.config.domain)
}

/// Registers `agent` through the operator with extra registration members.
fn register(house: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) {
    let body = agent.registration(house, extra);
    let resp = call(house, "POST", "/agents", &[("authorization", &admin(house))], &body);
    assert!(
        resp.status == 201 || resp.status == 200,
        "registration failed: {}",
        resp.value().unwrap().canonical_string()
    );
}

fn inbox(policy: &str, extra: &[(&str, Value)]) -> (&'static str, Value) {
    let mut o = obj([("policy", policy.into())]);
    for (k, v) in extra {
        o.insert((*k).to_owned(), v.clone());
    }
    ("inbox", Value::Object(o))
}

/// A signed envelope from `from`; `edit` adjusts the draft first.
fn envelope(from: &Agent, id: &str, to: &[&Address], body: &str, edit: impl FnOnce(&mut Draft)) -> Envelope {
    let mut d = Draft::new(
        id.into(),
        from.address.clone(),
        to.iter().map(|a| (*a).clone()).collect(),
        Timestamp(START),
        Content::new("text/plain", body.into()),
    );
    edit(&mut d);
    d.build().unwrap().sign(&from.sig).unwrap()
}

fn message(from: &Agent, id: &str, to: &[&Address]) -> Envelope {
    envelope(from, id, to, "hello", |_| {})
}

/// The relay header `from` signs for `env` to `destination`.
fn relay(from: &TestHouse, env: &Envelope, destination: &str) -> String {
    RelayHeader::sign(&from.config.domain, env, destination, &from.config.key).to_header()
}

/// Relays `env` from house `from` to house `to`, as the queue would.
fn deliver(from: &TestHouse, to: &TestHouse, env: &Envelope) -> Response {
    let header = relay(from, env, &to.config.domain);
    call_raw(to, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical())
}

fn body(resp: &Response) -> Object {
    resp.value().unwrap().as_object().unwrap().clone()
}

fn strings(o: &Object, name: &str) -> Vec<String> {
    o[name].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// `(to, code)` of each rejection.
fn rejected(o: &Object) -> Vec<(String, i64)> {
    o["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_object().unwrap();
            (r["to"].as_str().unwrap().to_owned(), r["code"].as_safe_integer().unwrap())
        })
        .collect()
}

fn reason(resp: &Response) -> String {
    body(resp)["reason"].as_str().unwrap_or_default().to_owned()
}

/// The refusal's name (the wire's `error`).
fn error(resp: &Response) -> String {
    body(resp)["error"].as_str().unwrap_or_default().to_owned()
}

fn held(house: &TestHouse, local: &str) -> i64 {
    let rows = block_on(house.db.query(stmt!("SELECT count(*) AS n FROM mailbox WHERE local = ?", local))).unwrap();
    rows[0].int("n").unwrap()
}

/// Two houses: alice@a.test sends, bob@b.test receives (b pins a's key through `hosts`).
struct Pair {
    w: World,
    a: Rc<TestHouse>,
    b: Rc<TestHouse>,
    alice: Agent,
    bob: Agent,
}

fn pair_with(edit_b: impl FnOnce(&mut nyx5_house::Config), bob_extra: &[(&str, Value)]) -> Pair {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut cb = w.config("b.test", Registration::Admin);
    edit_b(&mut cb);
    let b = w.start(cb);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    register(&a, &alice, &[]);
    register(&b, &bob, bob_extra);
    Pair { w, a, b, alice, bob }
}

fn pair() -> Pair {
    pair_with(|_| {}, &[])
}

#[test]
fn accepts_a_relayed_envelope_with_per_recipient_answers() {
    let p = pair();
    let nobody = Address::parse("nobody@b.test").unwrap();
    let carol = Address::parse("carol@c.test").unwrap();
    let env = message(&p.alice, "e1", &[&p.bob.address, &nobody, &carol]);
    let resp = deliver(&p.a, &p.b, &env);
    let o = json_body(&resp, 202);
    assert_eq!(o["code"].as_safe_integer(), Some(202));
    assert_eq!(strings(&o, "accepted"), ["bob@b.test"]);
    assert_eq!(rejected(&o), [("nobody@b.test".to_owned(), 404)]);
    assert_eq!(held(&p.b, "bob"), 1);
    let rows = block_on(p.b.db.query(stmt!("SELECT envelope, sender FROM mailbox WHERE local = 'bob'"))).unwrap();
    assert_eq!(rows[0].text("envelope").unwrap().as_bytes(), env.canonical().as_slice());
    assert_eq!(rows[0].text("sender"), Some("alice@a.test"));

    // A sealed envelope travels the same way; the house never opens it.
    let sealed = p.alice.seal(p.alice.draft("e2", &[&p.bob.address], "secret"), &[&p.bob]);
    json_body(&deliver(&p.a, &p.b, &sealed), 202);
    assert_eq!(held(&p.b, "bob"), 2);
    assert_eq!(call_raw(&p.b, "GET", "/inbound", &[], vec![]).status, 405);
}

fn json_body(resp: &Response, status: u16) -> Object {
    json(resp, status).as_object().unwrap().clone()
}

#[test]
fn duplicate_delivery_answers_200_and_keeps_one_copy() {
    let p = pair();
    let env = message(&p.alice, "e1", &[&p.bob.address]);
    json_body(&deliver(&p.a, &p.b, &env), 202);
    let o = json_body(&deliver(&p.a, &p.b, &env), 200);
    assert_eq!(o["duplicate"], Value::Bool(true));
    assert_eq!(o["code"].as_safe_integer(), Some(200));
    assert_eq!(strings(&o, "accepted"), ["bob@b.test"]);
    assert_eq!(held(&p.b, "bob"), 1);

    // The same id from another sender is not a duplicate of it: it is refused.
    let mallory = Agent::new("mallory@a.test", 11);
    register(&p.a, &mallory, &[]);
    let clash = message(&mallory, "e1", &[&p.bob.address]);
    let resp = deliver(&p.a, &p.b, &clash);
    assert_eq!(resp.status, 409);
    assert_eq!(held(&p.b, "bob"), 1);
}

#[test]
fn spoofed_relays_are_refused() {
    let p = pair();
    let c = p.w.house("c.test", Registration::Admin);
    let env = message(&p.alice, "e1", &[&p.bob.address]);
    let post = |header: &str| call_raw(&p.b, "POST", "/inbound", &[("x-nyx5-relay", header)], env.canonical());

    // Signed by a key a.test does not have.
    let wrong_key = RelayHeader::sign("a.test", &env, "b.test", &SigningKey::from_seed([99; 32])).to_header();
    assert_eq!(post(&wrong_key).status, 403);
    // Signed by a.test, but for another destination.
    let elsewhere = RelayHeader::sign("a.test", &env, "c.test", &p.a.config.key).to_header();
    assert_eq!(post(&elsewhere).status, 403);
    // Signed by a.test for another envelope.
    let other = message(&p.alice, "e2", &[&p.bob.address]);
    let other_id = RelayHeader::sign("a.test", &other, "b.test", &p.a.config.key).to_header();
    assert_eq!(post(&other_id).status, 403);
    // A real house relaying for a sender of another domain.
    let resp = post(&relay(&c, &env, "b.test"));
    assert_eq!(resp.status, 403);
    assert_eq!(error(&resp), "bad_relay", "{}", reason(&resp));
    // Not a relay header at all.
    assert_eq!(post("nyx51 domain=a.test").status, 403);
    assert_eq!(post("hello").status, 403);
    // Missing, while b requires it (the default).
    assert_eq!(call_raw(&p.b, "POST", "/inbound", &[], env.canonical()).status, 403);
    assert_eq!(held(&p.b, "bob"), 0);
    // The genuine relay passes.
    json_body(&post(&relay(&p.a, &env, "b.test")), 202);
}

#[test]
fn a_house_without_require_relay_takes_the_agent_signature_alone() {
    let p = pair_with(|c| c.require_relay = false, &[]);
    let env = message(&p.alice, "e1", &[&p.bob.address]);
    json_body(&call_raw(&p.b, "POST", "/inbound", &[], env.canonical()), 202);
    // A header that is present is still checked.
    let env2 = message(&p.alice, "e2", &[&p.bob.address]);
    let bad = RelayHeader::sign("a.test", &env2, "b.test", &SigningKey::from_seed([99; 32])).to_header();
    assert_eq!(call_raw(&p.b, "POST", "/inbound", &[("x-nyx5-relay", &bad)], env2.canonical()).status, 403);
}

#[test]
fn forged_certification_is_refused() {
    let p = pair();
    // a.test serves a card for mallory certified by a key that is not a.test's.
    let mallory = Agent::new("mallory@a.test", 12);
    let evil = SigningKey::from_seed([77; 32]);
    let forged =
        AgentCardDraft::new(mallory.address.clone(), mallory.sig.public(), None, p.a.now()).certify(&evil).unwrap();
    let text = forged.to_value().canonical_string();
    block_on(p.a.db.batch(vec![stmt!(
        "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES ('mallory', ?, ?, 'admin', 0, 0)",
        text,
        mallory.sig.public().to_b64()
    )]))
    .unwrap();
    let env = message(&mallory, "e1", &[&p.bob.address]);
    let resp = deliver(&p.a, &p.b, &env);
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert_eq!(error(&resp), "untrusted_key", "{}", reason(&resp));
    assert!(reason(&resp).contains("mallory@a.test"), "the reason names the sender");
    assert_eq!(held(&p.b, "bob"), 0);
}

#[test]
fn an_impostor_house_is_refused_by_the_pinned_key() {
    // b pins the real key of a.test; an impostor answers for a.test with its own key.
    let w = World::new();
    let real = w.config("a.test", Registration::Admin);
    let mut cb = w.config("b.test", Registration::Admin);
    cb.hosts.insert(
        "a.test".into(),
        nyx5_house::config::HostEntry { url: "http://a.test".into(), sig: Some(real.key.public()) },
    );
    let b = w.start(cb);
    let impostor = w.house("a.test", Registration::Admin);
    assert_ne!(impostor.config.key.public(), real.key.public());
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    register(&impostor, &alice, &[]);
    register(&b, &bob, &[]);
    let env = message(&alice, "e1", &[&bob.address]);
    let resp = deliver(&impostor, &b, &env);
    assert_eq!(resp.status, 403);
    assert_eq!(error(&resp), "anchor_mismatch", "{}", reason(&resp));
    assert_eq!(held(&b, "bob"), 0);
}

#[test]
fn unknown_recipients_are_404_and_other_domains_421() {
    let p = pair();
    let nobody = Address::parse("nobody@b.test").unwrap();
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&nobody]));
    assert_eq!(resp.status, 404);
    let o = body(&resp);
    assert_eq!(o["ok"], Value::Bool(false));
    assert_eq!(strings(&o, "accepted"), Vec::<String>::new());
    assert_eq!(rejected(&o), [("nobody@b.test".to_owned(), 404)]);

    let carol = Address::parse("carol@c.test").unwrap();
    let env = message(&p.alice, "e2", &[&carol]);
    assert_eq!(deliver(&p.a, &p.b, &env).status, 421);
}

#[test]
fn a_re_addressed_envelope_fails_its_signature() {
    let p = pair();
    let eve = Agent::new("eve@b.test", 21);
    register(&p.b, &eve, &[]);
    let env = message(&p.alice, "e1", &[&p.bob.address]);
    let mut raw = env.into_object();
    raw.insert("to".into(), Value::Array(vec!["eve@b.test".into()]));
    let readdressed = Envelope::from_object(raw).unwrap();
    let resp = deliver(&p.a, &p.b, &readdressed);
    assert_eq!(resp.status, 403);
    assert_eq!(held(&p.b, "eve"), 0);

    // So does an unsigned one.
    let unsigned = p.alice.draft("e2", &[&p.bob.address], "hi");
    assert_eq!(deliver(&p.a, &p.b, &unsigned).status, 403);
}

#[test]
fn key_rotation_is_followed_with_one_refresh_and_a_grace() {
    let p = pair();
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address])), 202);
    let fetched = p.w.sent_to("a.test/agents/alice");
    assert_eq!(fetched, 1);

    // alice rotates at her house: the body carries the new key, the token is by the old one.
    let rotated = Agent::new("alice@a.test", 13);
    let body = rotated.registration(&p.a, &[]);
    let token = p.alice.token(&p.a, "POST", "/agents", &body.canonical());
    json(&call(&p.a, "POST", "/agents", &[("authorization", &token)], &body), 200);

    // b still has the old card cached; the new key makes it refresh once, then it verifies.
    json_body(&deliver(&p.a, &p.b, &message(&rotated, "e2", &[&p.bob.address])), 202);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), fetched + 1);
    // The old key still signs within its grace, from the refreshed cache.
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e3", &[&p.bob.address])), 202);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), fetched + 1);
    // A key the card never had: within the refresh's half minute, temporary and no fetch;
    // after it, one refresh, then 403.
    let stranger = Agent::new("alice@a.test", 14);
    assert_eq!(deliver(&p.a, &p.b, &message(&stranger, "e4", &[&p.bob.address])).status, 503);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), fetched + 1);
    p.w.clock.advance(30_000);
    assert_eq!(deliver(&p.a, &p.b, &message(&stranger, "e4", &[&p.bob.address])).status, 403);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), fetched + 2);
    // Past the grace (seven days), the old key is refused: for ten days after its end only
    // temporarily (this house's clock may be the one ahead), then for good.
    p.w.clock.advance(8 * DAY);
    let lately = deliver(&p.a, &p.b, &message(&p.alice, "e5", &[&p.bob.address]));
    assert_eq!(lately.status, 503, "{}", reason(&lately));
    assert_eq!(error(&lately), "key_ended_lately", "{}", reason(&lately));
    p.w.clock.advance(nyx5_proto::limits::TIME_REFUSAL_DOUBT_MS);
    assert_eq!(deliver(&p.a, &p.b, &message(&p.alice, "e5", &[&p.bob.address])).status, 403);
    json_body(&deliver(&p.a, &p.b, &message(&rotated, "e6", &[&p.bob.address])), 202);
    assert_eq!(held(&p.b, "bob"), 4);
}

#[test]
fn cards_are_cached_for_five_minutes() {
    let p = pair();
    for (i, wait) in [0, MINUTE, 3 * MINUTE].into_iter().enumerate() {
        p.w.clock.advance(wait);
        json_body(&deliver(&p.a, &p.b, &message(&p.alice, &format!("e{i}"), &[&p.bob.address])), 202);
    }
    assert_eq!(p.w.sent_to("a.test/.well-known/nyx5.json"), 1);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), 1);
    p.w.clock.advance(2 * MINUTE);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e9", &[&p.bob.address])), 202);
    assert_eq!(p.w.sent_to("a.test/.well-known/nyx5.json"), 2);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), 2);
    let rows = block_on(p.b.db.query(stmt!("SELECT key FROM card_slots ORDER BY key"))).unwrap();
    let keys: Vec<_> = rows.iter().map(|r| r.text("key").unwrap().to_owned()).collect();
    assert_eq!(keys, ["a.test", "alice@a.test"]);
}

#[test]
fn an_unreachable_sending_house_is_temporary() {
    let p = pair();
    p.w.down("a.test", true);
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address]));
    assert_eq!(resp.status, 503);
    p.w.down("a.test", false);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address])), 202);
}

fn pins(house: &TestHouse) -> Vec<Object> {
    let v = json(&call_raw(house, "GET", "/pins", &[("authorization", &admin(house))], vec![]), 200);
    v.as_object().unwrap()["pins"].as_array().unwrap().iter().map(|p| p.as_object().unwrap().clone()).collect()
}

#[test]
fn tofu_pins_the_first_key_and_refuses_a_change_until_confirmed() {
    let w = World::new();
    // b starts first, so it knows nothing of a.test: the well-known fallback and TOFU.
    let b = w.house("b.test", Registration::Admin);
    let a = w.house("a.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let bob = Agent::new("bob@b.test", 20);
    register(&a, &alice, &[]);
    register(&b, &bob, &[]);
    json_body(&deliver(&a, &b, &message(&alice, "e1", &[&bob.address])), 202);
    let pinned = pins(&b);
    assert_eq!(pinned.len(), 1);
    assert_eq!(pinned[0]["domain"].as_str(), Some("a.test"));
    assert_eq!(pinned[0]["sig"].as_str(), Some(a.config.key.public().to_b64().as_str()));
    assert!(pinned[0]["pending"].is_null());

    // a.test comes back with another key (a new house on the same name).
    let a2 = w.house("a.test", Registration::Admin);
    register(&a2, &alice, &[]);
    w.clock.advance(6 * MINUTE);
    let env = message(&alice, "e2", &[&bob.address]);
    let resp = deliver(&a2, &b, &env);
    assert_eq!(resp.status, 403);
    assert_eq!(error(&resp), "pin_mismatch", "{}", reason(&resp));
    let pinned = pins(&b);
    assert_eq!(pinned[0]["sig"].as_str(), Some(a.config.key.public().to_b64().as_str()));
    assert_eq!(pinned[0]["pending"].as_str(), Some(a2.config.key.public().to_b64().as_str()));
    // Still refused on a second try.
    assert_eq!(deliver(&a2, &b, &env).status, 403);

    // Only the operator confirms, and only the key that is pending.
    let confirm = |auth: &str, body: Vec<u8>| {
        call_raw(&b, "POST", "/pins/a.test/confirm", &[("authorization", auth)], body).status
    };
    assert_eq!(confirm("Bearer nope", vec![]), 401);
    let other = format!(r#"{{"sig":"{}"}}"#, SigningKey::from_seed([55; 32]).public().to_b64());
    assert_eq!(confirm(&admin(&b), other.into_bytes()), 409);
    let right = format!(r#"{{"sig":"{}"}}"#, a2.config.key.public().to_b64());
    // A confirmation names the key it means: the pending one can change after GET /pins.
    assert_eq!(confirm(&admin(&b), vec![]), 400);
    assert_eq!(confirm(&admin(&b), b"{}".to_vec()), 400);
    assert_eq!(confirm(&admin(&b), right.clone().into_bytes()), 200);
    assert_eq!(confirm(&admin(&b), right.clone().into_bytes()), 409);
    let z = call_raw(&b, "POST", "/pins/z.test/confirm", &[("authorization", &admin(&b))], right.into_bytes());
    assert_eq!(z.status, 404);
    assert_eq!(call_raw(&b, "GET", "/pins/a.test/confirm", &[], vec![]).status, 405);
    assert_eq!(call_raw(&b, "GET", "/pins", &[], vec![]).status, 401);

    json_body(&deliver(&a2, &b, &env), 202);
    let pinned = pins(&b);
    assert_eq!(pinned[0]["sig"].as_str(), Some(a2.config.key.public().to_b64().as_str()));
    assert!(pinned[0]["pending"].is_null());
}

/// Confirming a domain's new key drops every card remembered under the old one, at once: mail
/// from the old house, whose cards the five-minute memo would still believe, is refused right
/// after the confirmation; other domains' cards stay remembered.
#[test]
fn confirming_a_new_key_forgets_the_cards_of_the_old_one() {
    let w = World::new();
    let b = w.house("b.test", Registration::Admin);
    let a = w.house("a.test", Registration::Admin);
    let c = w.house("c.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    let cy = Agent::new("cy@c.test", 12);
    let bob = Agent::new("bob@b.test", 20);
    register(&a, &alice, &[]);
    register(&c, &cy, &[]);
    register(&b, &bob, &[]);
    json_body(&deliver(&a, &b, &message(&alice, "e1", &[&bob.address])), 202);

    // a.test comes back with another key, and alice with another key under it: refused, and
    // the key waits for the operator.
    let a2 = w.house("a.test", Registration::Admin);
    let alice2 = Agent::new("alice@a.test", 11);
    register(&a2, &alice2, &[]);
    w.clock.advance(6 * MINUTE);
    assert_eq!(deliver(&a2, &b, &message(&alice2, "e2", &[&bob.address])).status, 403);
    let pending = pins(&b).into_iter().find(|p| p["domain"].as_str() == Some("a.test")).unwrap();
    assert_eq!(pending["pending"].as_str(), Some(a2.config.key.public().to_b64().as_str()));

    // The old house answers on the name again for a while: still the pinned key, so its cards
    // are fetched and remembered, and c.test's too.
    w.serve(&a);
    json_body(&deliver(&a, &b, &message(&alice, "e3", &[&bob.address])), 202);
    json_body(&deliver(&c, &b, &message(&cy, "c1", &[&bob.address])), 202);

    let right = format!(r#"{{"sig":"{}"}}"#, a2.config.key.public().to_b64());
    let confirmed = call_raw(&b, "POST", "/pins/a.test/confirm", &[("authorization", &admin(&b))], right.into_bytes());
    assert_eq!(confirmed.status, 200);
    // Within the same minute: the old house's cards are gone with its key.
    let fetches = w.sent_to("http://a.test/");
    assert_eq!(deliver(&a, &b, &message(&alice, "e4", &[&bob.address])).status, 403);
    assert!(w.sent_to("http://a.test/") > fetches, "a.test's card was fetched again");
    w.serve(&a2);
    json_body(&deliver(&a2, &b, &message(&alice2, "e5", &[&bob.address])), 202);
    // c.test's cards stay: cy is heard without a fetch.
    let fetches = w.sent_to("http://c.test/");
    json_body(&deliver(&c, &b, &message(&cy, "c2", &[&bob.address])), 202);
    assert_eq!(w.sent_to("http://c.test/"), fetches);
}

#[test]
fn dns_txt_records_locate_and_anchor_domains() {
    let w = World::new();
    let ca = w.config("a.test", Registration::Admin);
    let cc = w.config("c.test", Registration::Admin);
    let a_key = ca.key.public().to_b64();
    let lookups = Rc::new(RefCell::new(Vec::new()));
    let seen = lookups.clone();
    w.fake("dns.test", move |req: &OutRequest| {
        seen.borrow_mut().push(req.clone());
        let name = req.url.split("name=").nth(1).unwrap().split('&').next().unwrap().to_owned();
        let answer = |data: &str| {
            let data = Value::from(data).canonical_string();
            format!(r#"{{"Status":0,"Answer":[{{"name":"{name}.","type":16,"TTL":300,"data":{data}}}]}}"#)
        };
        let text = match name.as_str() {
            // Split into two character-strings, as long records are.
            "_nyx5.a.test" => answer(&format!(r#""v=nyx51; url=http://a.test; " "sig={a_key}""#)),
            // A record whose key is not c.test's.
            "_nyx5.c.test" => answer(&format!(
                r#""v=nyx51; url=http://c.test; sig={}""#,
                SigningKey::from_seed([66; 32]).public().to_b64()
            )),
            "_nyx5.e.test" => r#"{"Status":2}"#.to_owned(),
            _ => r#"{"Status":3}"#.to_owned(),
        };
        OutResponse { status: 200, body: text.into_bytes() }
    });
    let mut cb = w.config("b.test", Registration::Admin);
    cb.doh_url = Some("https://dns.test/dns-query".into());
    let b = w.start(cb);
    let a = w.start(ca);
    let c = w.start(cc);
    let d = w.house("d.test", Registration::Admin);
    let e = w.house("e.test", Registration::Admin);
    let bob = Agent::new("bob@b.test", 20);
    register(&b, &bob, &[]);
    let send = |house: &TestHouse, id: &str| {
        let agent = Agent::new(&format!("x@{}", house.config.domain), 30);
        register(house, &agent, &[]);
        deliver(house, &b, &message(&agent, id, &[&bob.address]))
    };

    json_body(&send(&a, "e1"), 202);
    let first = lookups.borrow()[0].clone();
    assert_eq!(first.url, "https://dns.test/dns-query?name=_nyx5.a.test&type=TXT");
    assert!(first.headers.iter().any(|(k, v)| k == "accept" && v == "application/dns-json"));
    assert_eq!(send(&c, "e2").status, 403);
    // No record: the well-known fallback, pinned on first use.
    json_body(&send(&d, "e3"), 202);
    // The DNS lookup fails: temporary.
    assert_eq!(send(&e, "e4").status, 503);
    // Only the domain without an anchor was pinned.
    let pinned: Vec<_> = pins(&b).iter().map(|p| p["domain"].as_str().unwrap().to_owned()).collect();
    assert_eq!(pinned, ["d.test"]);
}

#[test]
fn a_delegated_sender_is_verified_through_its_parent() {
    let p = pair();
    let helper = Agent::new("helper.alice@a.test", 15);
    let scope = Scope { types: Some(vec!["message".into()]), to_domains: None, cap: None, authority: None };
    let d = Delegation::sign(
        &p.alice.address,
        &helper.address,
        &helper.sig.public(),
        &scope,
        None,
        p.a.now(),
        &p.alice.sig,
    )
    .unwrap();
    json(&call(&p.a, "POST", "/agents", &[], &helper.registration(&p.a, &[("delegation", d.to_value())])), 201);
    json_body(&deliver(&p.a, &p.b, &message(&helper, "e1", &[&p.bob.address])), 202);
    assert_eq!(p.w.sent_to("a.test/agents/alice"), 1);
    assert_eq!(p.w.sent_to("a.test/agents/helper.alice"), 1);
}

#[test]
fn open_mailboxes_rate_limit_each_sending_domain() {
    let p = pair_with(|c| c.inbound_per_domain_per_minute = 3, &[]);
    for i in 0..3 {
        json_body(&deliver(&p.a, &p.b, &message(&p.alice, &format!("e{i}"), &[&p.bob.address])), 202);
    }
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e3", &[&p.bob.address]));
    assert_eq!(resp.status, 429);
    assert_eq!(rejected(&body(&resp)), [("bob@b.test".to_owned(), 429)]);
    // A duplicate is not counted, and still answers 200.
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e0", &[&p.bob.address])), 200);
    // Another domain has its own window.
    let c = p.w.house("c.test", Registration::Admin);
    let carol = Agent::new("carol@c.test", 16);
    register(&c, &carol, &[]);
    // (b knows c only through the well-known fallback: c started after b.)
    json_body(&deliver(&c, &p.b, &message(&carol, "c1", &[&p.bob.address])), 202);
    // Allowlisted senders are not counted.
    json(
        &p.bob.post(
            &p.b,
            "/lists/bob",
            &Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["alice@a.test".into()]))])))])),
        ),
        200,
    );
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e4", &[&p.bob.address])), 202);
    // The next minute opens a new window.
    p.w.clock.advance(MINUTE);
    json(
        &p.bob.post(
            &p.b,
            "/lists/bob",
            &Value::Object(obj([(
                "allow",
                Value::Object(obj([("remove", Value::Array(vec!["alice@a.test".into()]))])),
            )])),
        ),
        200,
    );
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e5", &[&p.bob.address])), 202);
    assert_eq!(held(&p.b, "bob"), 6);
}

fn change(kind: &str, op: &str, entries: &[&str]) -> Value {
    let list = Value::Array(entries.iter().map(|e| Value::from(*e)).collect());
    Value::Object(obj([(kind, Value::Object(obj([(op, list)])))]))
}

#[test]
fn allowlist_mailboxes_take_listed_senders_and_small_intros() {
    let p = pair_with(|_| {}, &[inbox("allowlist", &[])]);
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address]));
    assert_eq!(resp.status, 403);
    assert_eq!(error(&resp), "not_on_allowlist", "{}", reason(&resp));
    // A stranger's intro of up to 4 KB passes.
    let intro = envelope(&p.alice, "e2", &[&p.bob.address], "may I write to you?", |d| d.kind = Kind::Intro);
    json_body(&deliver(&p.a, &p.b, &intro), 202);
    let big = envelope(&p.alice, "e3", &[&p.bob.address], &"x".repeat(4000), |d| d.kind = Kind::Intro);
    assert!(big.canonical().len() > 4096);
    assert_eq!(deliver(&p.a, &p.b, &big).status, 413);
    // Exactly 4096 bytes is an intro still; one byte more is not.
    let sized = |id: &str, len: usize| {
        let probe = envelope(&p.alice, id, &[&p.bob.address], "", |d| d.kind = Kind::Intro);
        let body = "x".repeat(len - probe.canonical().len());
        let env = envelope(&p.alice, id, &[&p.bob.address], &body, |d| d.kind = Kind::Intro);
        assert_eq!(env.canonical().len(), len);
        env
    };
    json_body(&deliver(&p.a, &p.b, &sized("e3a", 4096)), 202);
    assert_eq!(deliver(&p.a, &p.b, &sized("e3b", 4097)).status, 413);
    // Vouching with a bond waits for the Libro.
    let vouched = envelope(&p.alice, "e4", &[&p.bob.address], "hi", |d| {
        d.extra.insert(
            "extensions".into(),
            Value::Object(obj([("urn:nyx5:ext:aval", Value::Object(obj([("voucher", "x@b.test".into())])))])),
        );
    });
    assert_eq!(deliver(&p.a, &p.b, &vouched).status, 402);
    // Once bob lists alice's domain, her messages pass.
    json(&p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &["@a.test"])), 200);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e5", &[&p.bob.address])), 202);
    assert_eq!(held(&p.b, "bob"), 3, "the two intros and the listed sender's message");
}

#[test]
fn pow_mailboxes_ask_for_work_except_from_allowlisted_senders() {
    let p = pair_with(|_| {}, &[inbox("pow", &[("pow_bits", 8.into())])]);
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address]));
    assert_eq!(resp.status, 402);
    assert_eq!(error(&resp), "pow_required", "{}", reason(&resp));
    assert!(reason(&resp).contains("8 bits"), "the reason says how much work");
    // Not enough work.
    let with = |id: &str, weak: bool| {
        let env = envelope(&p.alice, id, &[&p.bob.address], "hi", |_| {});
        let digest = env.work_digest();
        let nonce = if weak {
            (0..).map(|n| n.to_string()).find(|n| !pow::check(&digest, n, 8)).unwrap()
        } else {
            pow::mint(&digest, 8, 0, 1 << 20).unwrap()
        };
        env.with_pow(8, &nonce).unwrap().sign(&p.alice.sig).unwrap()
    };
    assert_eq!(deliver(&p.a, &p.b, &with("e2", true)).status, 402);
    json_body(&deliver(&p.a, &p.b, &with("e3", false)), 202);
    // Allowlisted senders are exempt.
    json(&p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &["alice@a.test"])), 200);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e4", &[&p.bob.address])), 202);
}

#[test]
fn the_blocklist_comes_before_everything() {
    let p = pair_with(|_| {}, &[inbox("allowlist", &[])]);
    json(&p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &["alice@a.test"])), 200);
    json(&p.bob.post(&p.b, "/lists/bob", &change("block", "add", &["a.test"])), 200);
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address]));
    assert_eq!(resp.status, 403);
    assert_eq!(error(&resp), "sender_blocked", "{}", reason(&resp));
    // Intros too.
    let intro = envelope(&p.alice, "e2", &[&p.bob.address], "hi", |d| d.kind = Kind::Intro);
    assert_eq!(deliver(&p.a, &p.b, &intro).status, 403);
    json(&p.bob.post(&p.b, "/lists/bob", &change("block", "remove", &["@a.test"])), 200);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address])), 202);

    // On an open mailbox, one recipient's block does not touch another's.
    let eve = Agent::new("eve@b.test", 21);
    register(&p.b, &eve, &[]);
    json(&eve.post(&p.b, "/lists/eve", &change("block", "add", &["alice@a.test"])), 200);
    let o = json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e3", &[&p.bob.address, &eve.address])), 202);
    assert_eq!(strings(&o, "accepted"), ["bob@b.test"]);
    assert_eq!(rejected(&o), [("eve@b.test".to_owned(), 403)]);
}

#[test]
fn stamp_mailboxes_wait_for_the_libro() {
    let p = pair_with(|_| {}, &[inbox("stamp", &[("price", 5.into())])]);
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address]));
    assert_eq!(resp.status, 402);
    assert_eq!(error(&resp), "stamp_required", "{}", reason(&resp));
    // Allowlisted senders need no stamp.
    json(&p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &["alice@a.test"])), 200);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e2", &[&p.bob.address])), 202);
}

#[test]
fn expired_envelopes_are_410() {
    let p = pair();
    let env = envelope(&p.alice, "e1", &[&p.bob.address], "soon stale", |d| {
        d.expires = Some(Timestamp(START + MINUTE));
    });
    // Expired lately by this house's clock: temporary (the clock may be the one ahead).
    p.w.clock.advance(2 * MINUTE);
    let resp = deliver(&p.a, &p.b, &env);
    assert_eq!(resp.status, 503);
    assert_eq!(held(&p.b, "bob"), 0);
    // Long ago: for good.
    p.w.clock.advance(nyx5_proto::limits::TIME_REFUSAL_DOUBT_MS);
    let resp = deliver(&p.a, &p.b, &env);
    assert_eq!(resp.status, 410);
    assert_eq!(rejected(&body(&resp)), [("bob@b.test".to_owned(), 410)]);
    assert_eq!(held(&p.b, "bob"), 0);
}

#[test]
fn too_large_is_413_and_malformed_is_400() {
    let p = pair_with(|c| c.max_bytes = 2048, &[]);
    let big = envelope(&p.alice, "e1", &[&p.bob.address], &"x".repeat(3000), |_| {});
    assert_eq!(deliver(&p.a, &p.b, &big).status, 413);
    let post = |body: &[u8]| call_raw(&p.b, "POST", "/inbound", &[], body.to_vec()).status;
    assert_eq!(post(b"not json"), 400);
    assert_eq!(post(b"{}"), 400);
    assert_eq!(post(br#"{"a":1,"a":2}"#), 400);
    assert_eq!(post(b"[]"), 400);
    assert_eq!(post(&[0xff, 0xfe]), 400);
    let resp = call_raw(&p.b, "POST", "/inbound", &[], b"{".to_vec());
    assert_eq!(body(&resp)["error"].as_str(), Some("bad_json"));
}

#[test]
fn lists_belong_to_their_owner() {
    let p = pair();
    let eve = Agent::new("eve@b.test", 21);
    register(&p.b, &eve, &[]);
    let v = json(&p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &["Alice@A.test", "@c.test", "d.test"])), 200);
    let o = v.as_object().unwrap();
    assert_eq!(strings(o, "allow"), ["alice@a.test", "c.test", "d.test"]);
    assert_eq!(strings(o, "block"), Vec::<String>::new());
    let v = json(&p.bob.get(&p.b, "/lists/bob"), 200);
    assert_eq!(strings(v.as_object().unwrap(), "allow"), ["alice@a.test", "c.test", "d.test"]);
    let both = Value::Object(obj([(
        "block",
        Value::Object(obj([
            ("add", Value::Array(vec!["x.test".into()])),
            ("remove", Value::Array(vec!["x.test".into()])),
        ])),
    )]));
    assert_eq!(p.bob.post(&p.b, "/lists/bob", &both).status, 400);
    assert_eq!(p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &["not a domain"])).status, 400);
    assert_eq!(p.bob.post(&p.b, "/lists/bob", &change("deny", "add", &["x.test"])).status, 400);
    assert_eq!(p.bob.post(&p.b, "/lists/bob", &change("allow", "put", &["x.test"])).status, 400);
    let many: Vec<String> = (0..101).map(|i| format!("d{i}.test")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(p.bob.post(&p.b, "/lists/bob", &change("allow", "add", &many)).status, 413);
    // Someone else, or nobody, may not read or change them.
    assert_eq!(eve.get(&p.b, "/lists/bob").status, 403);
    assert_eq!(eve.post(&p.b, "/lists/bob", &change("allow", "remove", &["c.test"])).status, 403);
    assert_eq!(call_raw(&p.b, "GET", "/lists/bob", &[], vec![]).status, 401);
    assert_eq!(call_raw(&p.b, "PUT", "/lists/bob", &[], vec![]).status, 405);
    let v = json(&p.bob.post(&p.b, "/lists/bob", &change("allow", "remove", &["c.test", "zz.test"])), 200);
    assert_eq!(strings(v.as_object().unwrap(), "allow"), ["alice@a.test", "d.test"]);
}

#[test]
fn webhooks_get_a_push_signed_by_the_domain() {
    let p = pair_with(|_| {}, &[("webhook", "http://hook.test/bob".into())]);
    let pushed = Rc::new(RefCell::new(Vec::<OutRequest>::new()));
    let seen = pushed.clone();
    p.w.fake("hook.test", move |req: &OutRequest| {
        seen.borrow_mut().push(req.clone());
        // A failing webhook changes nothing: the mailbox is authoritative.
        OutResponse { status: 500, body: vec![] }
    });
    let env = message(&p.alice, "e1", &[&p.bob.address]);
    json_body(&deliver(&p.a, &p.b, &env), 202);
    json_body(&deliver(&p.a, &p.b, &env), 200);
    let pushed = pushed.borrow();
    assert_eq!(pushed.len(), 1, "a duplicate is not pushed again");
    let req = &pushed[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, "http://hook.test/bob");
    // The house's own wrapper around the envelope, signed as a push.
    let push = Value::parse(&req.body, 2 << 20).unwrap();
    let push = push.as_object().unwrap();
    assert_eq!(push["type"].as_str(), Some("nyx5.push"));
    assert_eq!(push["house"].as_str(), Some("b.test"));
    assert_eq!(push["to"].as_str(), Some("bob@b.test"));
    assert_eq!(push["envelope"].canonical(), env.canonical());
    assert_eq!(Value::Object(push.clone()).canonical(), req.body, "the body is canonical");
    let sig = req.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-nyx5-push")).unwrap();
    let sig: [u8; 64] = b64::decode_array(&sig.1).unwrap();
    assert!(p.b.config.key.public().verify(Context::Push, &req.body, &sig));
    assert!(!p.b.config.key.public().verify(Context::AgentCard, &req.body, &sig));
    assert_eq!(held(&p.b, "bob"), 1);
}

#[test]
fn the_resolver_answers_for_its_own_house_and_agents() {
    let p = pair();
    let own = block_on(p.b.lookup().resolve_domain("b.test")).unwrap();
    assert_eq!(own.url, "http://b.test");
    assert_eq!(own.card.domain(), "b.test");
    let bob = block_on(p.b.lookup().resolve_agent(&p.bob.address, false)).unwrap();
    assert_eq!(bob.sig(), p.bob.sig.public());
    let nobody = Address::parse("nobody@b.test").unwrap();
    assert_eq!(block_on(p.b.lookup().resolve_agent(&nobody, false)).unwrap_err().code(), 404);
    let remote_nobody = Address::parse("nobody@a.test").unwrap();
    assert_eq!(block_on(p.b.lookup().resolve_agent(&remote_nobody, false)).unwrap_err().code(), 404);
    let alice = block_on(p.b.lookup().resolve_agent(&p.alice.address, false)).unwrap();
    assert_eq!(alice.sig(), p.alice.sig.public());
    assert_eq!(block_on(p.b.lookup().resolve_domain("A.test")).unwrap_err().code(), 400);
    // No house answers for this one.
    assert_eq!(block_on(p.b.lookup().resolve_domain("nowhere.test")).unwrap_err().code(), 503);
}

#[test]
fn a_changed_inbox_policy_applies_to_the_next_envelope() {
    let p = pair();
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e1", &[&p.bob.address])), 202);
    // Bob's card changes to an allowlist: the house reads the new policy, not a remembered one.
    p.w.clock.advance(SECOND);
    register(&p.b, &p.bob, &[inbox("allowlist", &[])]);
    assert_eq!(deliver(&p.a, &p.b, &message(&p.alice, "e2", &[&p.bob.address])).status, 403);
    p.w.clock.advance(SECOND);
    register(&p.b, &p.bob, &[inbox("open", &[])]);
    json_body(&deliver(&p.a, &p.b, &message(&p.alice, "e3", &[&p.bob.address])), 202);
}

#[test]
fn a_recipient_whose_card_expired_receives_nothing() {
    let until = Timestamp(START).plus_ms(MINUTE).to_rfc3339();
    let p = pair_with(|_| {}, &[("valid_until", until.into())]);
    assert_eq!(deliver(&p.a, &p.b, &message(&p.alice, "before", &[&p.bob.address])).status, 202);
    p.w.clock.advance(MINUTE);
    let resp = deliver(&p.a, &p.b, &message(&p.alice, "after", &[&p.bob.address]));
    assert_eq!(resp.status, 404, "{}", reason(&resp));
    assert_eq!(error(&resp), "recipient_card_expired", "{}", reason(&resp));
    assert_eq!(held(&p.b, "bob"), 1);
}

#[test]
fn the_operators_hosts_url_wins_over_the_estafeta_a_card_names() {
    // b.test's card names an estafeta nobody can reach; a.test's hosts file says where b.test is.
    let w = World::new();
    let mut cb = w.config("b.test", Registration::Admin);
    cb.public_url = "http://unreachable.test".into();
    let b = w.start(cb);
    let mut ca = w.config("a.test", Registration::Admin);
    let entry = nyx5_house::config::HostEntry { url: "http://b.test".into(), sig: Some(b.config.key.public()) };
    ca.hosts.insert("b.test".into(), entry);
    let a = w.start(ca);
    let (alice, bob) = (Agent::new("alice@a.test", 10), Agent::new("bob@b.test", 20));
    register(&a, &alice, &[]);
    register(&b, &bob, &[]);
    assert_eq!(b.card().estafeta(), "http://unreachable.test");
    let resolved = block_on(a.lookup().resolve_domain("b.test")).unwrap();
    assert_eq!(resolved.url, "http://b.test", "the hosts file is the last word on where a house is");
    json(&alice.send(&a, &message(&alice, "h1", &[&bob.address])), 202);
    w.tick_all();
    assert_eq!(held(&b, "bob"), 1);
    assert_eq!(w.sent_to("unreachable.test"), 0);
}

#[test]
fn a_list_holds_its_bound_exactly_and_each_list_its_own() {
    use nyx5_rules::policy::{MAX_LIST_CHANGES, MAX_LIST_ENTRIES};
    let p = pair();
    let names = |from: usize, n: usize| -> Vec<String> { (from..from + n).map(|i| format!("d{i}.test")).collect() };
    let post = |kind: &str, entries: &[String]| {
        let entries: Vec<&str> = entries.iter().map(String::as_str).collect();
        p.bob.post(&p.b, "/lists/bob", &change(kind, "add", &entries)).status
    };
    // A hundred changes at once, not one more.
    assert_eq!(post("allow", &names(0, MAX_LIST_CHANGES)), 200);
    assert_eq!(post("allow", &names(MAX_LIST_CHANGES, MAX_LIST_CHANGES + 1)), 413);
    // Filled to its bound exactly: a thousand entries stand, one more is refused.
    for start in (MAX_LIST_CHANGES..MAX_LIST_ENTRIES).step_by(MAX_LIST_CHANGES) {
        assert_eq!(post("allow", &names(start, MAX_LIST_CHANGES)), 200, "{start}");
    }
    let v = json(&p.bob.get(&p.b, "/lists/bob"), 200);
    assert_eq!(strings(v.as_object().unwrap(), "allow").len(), MAX_LIST_ENTRIES);
    assert_eq!(post("allow", &names(MAX_LIST_ENTRIES, 1)), 413);
    // The full allowlist takes nothing from the blocklist's room.
    assert_eq!(post("block", &names(5_000, 1)), 200);
}

/// Issue 35 §2: a.test (trusted on first use by b.test, not pinned in its hosts) and b.test,
/// alice and bob registered, and b holding a's domain card from a first envelope.
fn tofu_pair() -> (World, Rc<TestHouse>, Rc<TestHouse>, Agent, Agent) {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut cb = w.config("b.test", Registration::Admin);
    cb.hosts.insert("a.test".into(), nyx5_house::config::HostEntry { url: "http://a.test".into(), sig: None });
    let b = w.start(cb);
    let (alice, bob) = (Agent::new("alice@a.test", 10), Agent::new("bob@b.test", 20));
    register(&a, &alice, &[]);
    register(&b, &bob, &[]);
    json_body(&deliver(&a, &b, &message(&alice, "first", &[&bob.address])), 202);
    (w, a, b, alice, bob)
}

/// Restarts a.test under a new domain key, the old one listed with its handover for 30 days
/// (`nyx5 serve --rotate-domain-key`, or a Worker's new `NYX5_DOMAIN_KEY`).
fn rotate_domain_key(w: &World, a: Rc<TestHouse>) -> Rc<TestHouse> {
    let old = a.config.key.clone();
    drop(a);
    let mut config = w.config("a.test", Registration::Admin);
    config.previous_keys =
        vec![nyx5_house::config::PreviousDomainKey { key: old, created: None, until: w.clock.now().plus_ms(30 * DAY) }];
    w.restart(config)
}

/// A relay header under a domain key the peer's cached card does not list makes the peer fetch
/// that card anew (once) and follow the handover: the first envelope after a rotation is
/// delivered, not refused for good.
#[test]
fn a_domain_key_rotation_is_followed_at_the_first_envelope_after_it() {
    let (w, a, b, alice, bob) = tofu_pair();
    let fetched = || w.sent_to("a.test/.well-known/nyx5.json");
    let before = fetched();
    let a = rotate_domain_key(&w, a);
    w.clock.advance(1_000);
    let resp = deliver(&a, &b, &message(&alice, "after", &[&bob.address]));
    assert_eq!(resp.status, 202, "{}", reason(&resp));
    assert_eq!(fetched(), before + 1, "the card is fetched anew once");
    json_body(&deliver(&a, &b, &message(&alice, "after-2", &[&bob.address])), 202);
    assert_eq!(fetched(), before + 1, "and then read from the cache");
    let pin = block_on(b.db.query(stmt!("SELECT sig FROM pins WHERE domain = 'a.test'"))).unwrap();
    assert_eq!(pin[0].text("sig"), Some(a.config.key.public().to_b64().as_str()), "the pin followed the handover");
    assert_eq!(held(&b, "bob"), 3);
}

/// An agent card certified by the new domain key, met while the peer holds the domain card from
/// before the rotation: the domain card is fetched anew and the agent card verifies.
#[test]
fn a_certification_by_a_rotated_domain_key_is_followed() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut cb = w.config("b.test", Registration::Admin);
    cb.hosts.insert("a.test".into(), nyx5_house::config::HostEntry { url: "http://a.test".into(), sig: None });
    let b = w.start(cb);
    let alice = Agent::new("alice@a.test", 10);
    register(&a, &alice, &[]);
    // b holds a's domain card (not alice's); a rotates and certifies alice's card again.
    block_on(b.lookup().resolve_domain("a.test")).unwrap();
    let a = rotate_domain_key(&w, a);
    w.clock.advance(1_000);
    assert_eq!(block_on(a.registry().recertify_some(w.clock.now())).unwrap(), 1);
    let card = block_on(b.lookup().resolve_agent(&alice.address, false)).unwrap();
    assert_eq!(card.certifier().unwrap(), a.config.key.public());
    assert_eq!(block_on(b.lookup().resolve_domain("a.test")).unwrap().card.signer().unwrap(), a.config.key.public());
}

/// The refresh is bounded: relay headers under made-up keys make the peer fetch the card once
/// per key per cache window, and at most 30 times a minute for the site, however many keys; a
/// refusal the peer did not fetch a card for is temporary (503/429), one it did is 403.
#[test]
fn unknown_domain_keys_refresh_the_card_at_most_once_a_window_whatever_the_key() {
    let (w, _a, b, alice, bob) = tofu_pair();
    let fetched = || w.sent_to("a.test/.well-known/nyx5.json");
    let before = fetched();
    let forged = |seed: u8, id: &str| {
        let env = message(&alice, id, &[&bob.address]);
        let key = SigningKey::from_seed([seed; 32]);
        let header = RelayHeader::sign("a.test", &env, "b.test", &key).to_header();
        call_raw(&b, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical())
    };
    // A key the fresh card does not list either: refused for good, after one fetch.
    assert_eq!(forged(100, "f0").status, 403);
    assert_eq!(fetched(), before + 1);
    // The same key again within the window: no fetch, and temporary.
    let again = forged(100, "f1");
    assert_eq!(again.status, 503, "{}", reason(&again));
    assert_eq!(error(&again), "card_refetched_lately", "{}", reason(&again));
    assert_eq!(fetched(), before + 1);
    // Many made-up keys within one minute: at most a fetch or two of the card (hostile review
    // H2b: each key was a fetch, and spent the site's budget of new names).
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for seed in 101..=160u8 {
        *codes.entry(forged(seed, &format!("g{seed}")).status).or_default() += 1;
    }
    let spent = fetched() - before;
    eprintln!("60 made-up keys: {codes:?}, {spent} fetches");
    assert!(spent <= 2, "{spent} fetches");
    assert!(codes.keys().all(|c| *c == 403 || *c == 503), "{codes:?}");
    let budget = block_on(
        b.db.query(stmt!("SELECT coalesce(sum(count), 0) AS n FROM rate_windows WHERE bucket LIKE 'resolve:%'")),
    )
    .unwrap();
    assert_eq!(budget[0].int("n").unwrap(), 0, "the site's new-name budget is untouched");
    assert_eq!(held(&b, "bob"), 1);
    // The next window: the same key is looked for once more (the card held has expired too,
    // and is fetched first).
    w.clock.advance(5 * MINUTE);
    assert_eq!(forged(100, "f2").status, 403);
    assert_eq!(fetched(), before + spent + 2);
    assert_eq!(forged(100, "f3").status, 503);
    assert_eq!(fetched(), before + spent + 2);
}
