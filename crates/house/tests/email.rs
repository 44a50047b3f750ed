//! The email bridge, inbound (docs/SPEC.md "Email bridge"): `Email::receive_email` and
//! `POST /email/in` against real SQLite — the unsigned envelope in the mailbox, idempotency by
//! Message-ID and content, the size limit, unknown recipients, lists, policies and the rate per
//! authenticated domain — and hostile mail, each with a clear outcome and no panic. The houses
//! here trust `mx.h.test` (`Config::email_authserv_ids`); the attacks on that trust are in
//! `tests/attacks/email.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::email::{EXT_EMAIL, EmailOutcome};
use nyx5_proto::json::obj;
use nyx5_proto::{Object, Refusal, Value};

const ADMIN: &str = "Bearer admin-h.test";

fn setup() -> (World, std::rc::Rc<TestHouse>, Agent) {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    config.email_authserv_ids = vec!["mx.h.test".into()];
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    (world, house, ana)
}

fn mail(id: &str, subject: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Bob Example <Bob@Example.COM>\r\nTo: ana@h.test\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\n\
         Date: Mon, 30 Nov 2026 10:00:00 +0100\r\nAuthentication-Results: mx.h.test; spf=pass smtp.mailfrom=example.com; \
         dkim=pass header.d=example.com; dmarc=pass header.from=example.com\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    )
    .into_bytes()
}

/// The `email` event, as the Worker runs it: the message, then the pushes once it is taken.
fn receive(house: &TestHouse, raw: &[u8], from: &str, to: &str) -> Result<EmailOutcome, nyx5_proto::Error> {
    let outcome = block_on(house.email().receive_email(raw, from, to, &[]));
    block_on(house.mailbox().send_pushes());
    outcome
}

fn code(r: Result<EmailOutcome, nyx5_proto::Error>) -> u16 {
    match r {
        Ok(EmailOutcome::Accepted { .. }) => 202,
        Ok(EmailOutcome::Duplicate { .. }) => 200,
        Err(e) => e.code(),
    }
}

/// The envelopes in ana's mailbox.
fn mailbox(house: &TestHouse, ana: &Agent) -> Vec<Value> {
    let v = json(&ana.get(house, "/mailbox/ana"), 200);
    v.as_object().unwrap()["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_object().unwrap()["envelope"].clone())
        .collect()
}

fn ext(env: &Value) -> &Object {
    env.as_object().unwrap()["extensions"].as_object().unwrap()[EXT_EMAIL].as_object().unwrap()
}

#[test]
fn an_email_becomes_an_unsigned_envelope_once() {
    let (_world, house, ana) = setup();
    let raw = mail("m1@example.com", "Hola =?utf-8?q?se=C3=B1or?=", "Hi Ana.\r\nSecond line.");
    let first = receive(&house, &raw, "bounce@example.com", "Ana@H.test").unwrap();
    assert!(matches!(first, EmailOutcome::Accepted { .. }));
    // Redelivery of the same message (with a receiver's trace header on top) changes nothing.
    let redelivered = [b"Received: from mx by h.test; Mon, 30 Nov 2026 10:05:00 +0000\r\n".as_slice(), &raw].concat();
    let again = receive(&house, &redelivered, "bounce@example.com", "ana@h.test").unwrap();
    assert_eq!(again, EmailOutcome::Duplicate { id: first.id().to_owned() });
    let got = mailbox(&house, &ana);
    assert_eq!(got.len(), 1);
    let env = got[0].as_object().unwrap();
    assert_eq!(env["id"].as_str(), Some(first.id()));
    assert_eq!(env["from"].as_str(), Some("email@h.test"));
    assert_eq!(env["to"], Value::Array(vec!["ana@h.test".into()]));
    assert_eq!(env["type"].as_str(), Some("message"));
    assert_eq!(env["from_verified"], Value::Bool(false));
    assert_eq!(env["via"].as_str(), Some("email"));
    assert!(!env.contains_key("signature"));
    let content = env["content"].as_object().unwrap();
    assert_eq!(content["media"].as_str(), Some("text/plain"));
    assert_eq!(content["body"].as_str(), Some("Hi Ana.\nSecond line.\n"));
    let e = ext(&got[0]);
    assert_eq!(e["from"].as_str(), Some("bob@example.com"));
    assert_eq!(e["from_name"].as_str(), Some("Bob Example"));
    assert_eq!(e["envelope_from"].as_str(), Some("bounce@example.com"));
    assert_eq!(e["to"].as_str(), Some("ana@h.test"));
    assert_eq!(e["subject"].as_str(), Some("Hola señor"));
    assert_eq!(e["message_id"].as_str(), Some("m1@example.com"));
    assert_eq!(e["date"].as_str(), Some("2026-11-30T10:00:00+01:00"));
    assert_eq!(e["verified"], Value::Bool(false));
    assert_eq!(e["authenticated_domain"].as_str(), Some("example.com"));
    assert_eq!(
        e["authentication"],
        Value::Object(obj([
            ("authserv_id", "mx.h.test".into()),
            ("spf", "pass".into()),
            ("dkim", "pass".into()),
            ("dmarc", "pass".into())
        ]))
    );
    assert_eq!(e["attachments"], Value::Array(vec![]));
}

#[test]
fn without_a_store_attachments_are_described_only() {
    let (_world, house, ana) = setup();
    let raw = b"From: bob@example.com\r\nTo: ana@h.test\r\nSubject: files\r\nMessage-ID: <att@example.com>\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/html\r\n\r\n\
<p>See <b>the</b> file</p>\r\n--b\r\nContent-Type: application/pdf; name=\"r.pdf\"\r\nContent-Disposition: attachment; \
filename=\"r.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8=\r\n--b--\r\n";
    assert_eq!(code(receive(&house, raw, "", "ana@h.test")), 202);
    let got = mailbox(&house, &ana);
    let e = ext(&got[0]);
    let att = e["attachments"].as_array().unwrap()[0].as_object().unwrap();
    assert_eq!(att["name"].as_str(), Some("r.pdf"));
    assert_eq!(att["media"].as_str(), Some("application/pdf"));
    assert_eq!(att["bytes"].as_safe_integer(), Some(5));
    // sha256("hello")
    assert_eq!(att["sha256"].as_str(), Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"));
    let body = got[0].as_object().unwrap()["content"].as_object().unwrap()["body"].as_str().unwrap().to_owned();
    assert!(body.contains("See the file"), "{body:?}");
    assert!(!body.contains('<'));
}

#[test]
fn refusals_have_codes_and_reasons() {
    let (world, house, ana) = setup();
    let raw = mail("r1@example.com", "hi", "hello");
    assert_eq!(code(receive(&house, &raw, "", "nobody@h.test")), 404);
    // A subaddress reaches the agent.
    assert_eq!(code(receive(&house, &mail("tag@example.com", "t", "b"), "", "Ana+News@h.test")), 202);
    assert_eq!(code(receive(&house, &raw, "", "+x@h.test")), 404);
    // Each refusal by its name (and so its code).
    let named = |raw: &[u8], to: &str| receive(&house, raw, "", to).unwrap_err().refusal();
    assert_eq!(named(&raw, "nobody@h.test"), Some(Refusal::UnknownAgent));
    assert_eq!(named(&raw, "not an address"), Some(Refusal::UnknownAgent));
    assert_eq!(named(&raw, "ana@elsewhere.test"), Some(Refusal::NotAtThisHouse));
    assert_eq!(named(&raw, "postmaster@h.test"), Some(Refusal::TakesNoEmail));
    assert_eq!(named(&raw, "email@h.test"), Some(Refusal::TakesNoEmail));
    assert_eq!(named(b"", "ana@h.test"), Some(Refusal::BadEmail));
    assert_eq!(code(receive(&house, &raw, "", "not an address")), 404);
    assert_eq!(code(receive(&house, &raw, "", "ana@elsewhere.test")), 421);
    assert_eq!(code(receive(&house, &raw, "", "postmaster@h.test")), 404);
    assert_eq!(code(receive(&house, &raw, "", "email@h.test")), 404);
    assert_eq!(code(receive(&house, b"", "", "ana@h.test")), 400);
    // Over the house's max_bytes: refused before it is parsed.
    let big = vec![b'a'; house.config.max_bytes + 1];
    let e = receive(&house, &big, "", "ana@h.test").unwrap_err();
    assert_eq!((e.code(), e.refusal()), (413, Some(Refusal::EmailTooLarge)), "{e}");
    // The blocklist by address and by domain, From or envelope sender.
    let block = |entry: &str| {
        let body = Value::Object(obj([("block", Value::Object(obj([("add", Value::Array(vec![entry.into()]))])))]));
        json(&ana.post(&house, "/lists/ana", &body), 200);
    };
    block("example.com");
    let e = receive(&house, &raw, "", "ana@h.test").unwrap_err();
    assert_eq!((e.code(), e.refusal()), (403, Some(Refusal::SenderBlocked)), "{e}");
    let other = mail("r2@example.com", "hi", "x");
    let other = String::from_utf8(other).unwrap().replace("Bob@Example.COM", "carol@other.test");
    assert_eq!(code(receive(&house, other.as_bytes(), "", "ana@h.test")), 202);
    block("spam@relay.test");
    let via = String::from_utf8(mail("r3@example.com", "hi", "x")).unwrap().replace("Bob@Example.COM", "dan@fine.test");
    assert_eq!(code(receive(&house, via.as_bytes(), "spam@relay.test", "ana@h.test")), 403);
    drop(world);
}

#[test]
fn the_rate_is_per_authenticated_domain_per_minute_and_policies_apply() {
    let (world, house, ana) = setup();
    let cap = house.config.email_per_sender_per_minute;
    for i in 0..cap {
        assert_eq!(code(receive(&house, &mail(&format!("n{i}@example.com"), "s", "b"), "", "ana@h.test")), 202);
    }
    let e = receive(&house, &mail("over@example.com", "s", "b"), "", "ana@h.test").unwrap_err();
    assert_eq!(e.code(), 429);
    // Another sender (unauthenticated: the verdict is for example.com) is not held back; a
    // duplicate is still a duplicate.
    let carol =
        String::from_utf8(mail("c@other.test", "s", "b")).unwrap().replace("Bob@Example.COM", "carol@other.test");
    assert_eq!(code(receive(&house, carol.as_bytes(), "", "ana@h.test")), 202);
    assert_eq!(code(receive(&house, &mail("n0@example.com", "s", "b"), "", "ana@h.test")), 200);
    world.clock.advance(60_000);
    assert_eq!(code(receive(&house, &mail("over@example.com", "s", "b"), "", "ana@h.test")), 202);

    // An allowlist mailbox takes email only from its allowlist.
    let eve = Agent::new("eve@h.test", 41);
    let body = eve.registration(&house, &[("inbox", Value::Object(obj([("policy", "allowlist".into())])))]);
    assert_eq!(call(&house, "POST", "/agents", &[("authorization", ADMIN)], &body).status, 201);
    assert_eq!(code(receive(&house, &mail("e1@example.com", "s", "b"), "", "eve@h.test")), 403);
    let allow =
        Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["@example.com".into()]))])))]));
    json(&eve.post(&house, "/lists/eve", &allow), 200);
    assert_eq!(code(receive(&house, &mail("e1@example.com", "s", "b"), "", "eve@h.test")), 202);
    drop(ana);
}

#[test]
fn the_admin_route_takes_raw_mail() {
    let (_world, house, ana) = setup();
    let raw = mail("route@example.com", "via route", "body");
    let target = "/email/in?to=ana%40h.test&from=bob%40example.com";
    let resp = call_raw(&house, "POST", target, &[], raw.clone());
    assert_eq!(resp.status, 401);
    let resp = call_raw(&house, "POST", target, &[("authorization", ADMIN)], raw.clone());
    let v = json(&resp, 202);
    let id = v.as_object().unwrap()["id"].as_str().unwrap().to_owned();
    let v = json(&call_raw(&house, "POST", target, &[("authorization", ADMIN)], raw.clone()), 200);
    assert_eq!(v.as_object().unwrap()["duplicate"], Value::Bool(true));
    assert_eq!(v.as_object().unwrap()["id"].as_str(), Some(id.as_str()));
    json(&call_raw(&house, "POST", "/email/in?to=zed%40h.test", &[("authorization", ADMIN)], raw), 404);
    json(&call_raw(&house, "POST", "/email/in", &[("authorization", ADMIN)], vec![]), 400);
    assert_eq!(call_raw(&house, "GET", "/email/in", &[], vec![]).status, 405);
    assert_eq!(mailbox(&house, &ana).len(), 1);
}

#[test]
fn the_gateway_name_is_reserved() {
    let (_world, house, _ana) = setup();
    let gate = Agent::new("email@h.test", 42);
    assert_eq!(gate.register_admin(&house).status, 403);
}

// Hostile mail: each has a clear outcome and no panic.

#[test]
fn hostile_mail_has_clear_outcomes() {
    let (_world, house, ana) = setup();
    // No Subject, no Message-ID, no Date: accepted, the id comes from the bytes.
    let bare = b"From: x@example.com\r\n\r\nno subject here\r\n";
    let first = receive(&house, bare, "", "ana@h.test").unwrap();
    assert_eq!(receive(&house, bare, "", "ana@h.test").unwrap(), EmailOutcome::Duplicate { id: first.id().to_owned() });

    // 10,000 recipients in To: accepted; only the real recipient is named.
    let mut many = String::from("From: x@example.com\r\nMessage-ID: <many@example.com>\r\nTo: ");
    for i in 0..10_000 {
        many.push_str(&format!("r{i}@example.com, "));
    }
    many.push_str("ana@h.test\r\nSubject: many\r\n\r\nhi\r\n");
    assert!(many.len() < house.config.max_bytes);
    assert_eq!(code(receive(&house, many.as_bytes(), "", "ana@h.test")), 202);

    // A 50 MB body: refused by size before parsing.
    let mut huge = b"From: x@example.com\r\nSubject: big\r\n\r\n".to_vec();
    huge.resize(50 * 1024 * 1024, b'a');
    assert_eq!(code(receive(&house, &huge, "", "ana@h.test")), 413);

    // Deeply nested multiparts (2,000 levels): accepted or refused, bounded.
    let mut nested = String::from("From: x@example.com\r\nMessage-ID: <deep@example.com>\r\n");
    for i in 0..2_000 {
        nested.push_str(&format!("Content-Type: multipart/mixed; boundary=\"b{i}\"\r\n\r\n--b{i}\r\n"));
    }
    nested.push_str("Content-Type: text/plain\r\n\r\ndeep inside\r\n");
    let c = code(receive(&house, nested.as_bytes(), "", "ana@h.test"));
    assert!(c == 202 || c == 400 || c == 413, "{c}");

    // Broken boundaries: the declared one never appears, or never closes.
    let broken = b"From: x@example.com\r\nMessage-ID: <broken@example.com>\r\nContent-Type: multipart/mixed; boundary=\"zz\"\r\n\r\n\
--yy\r\nContent-Type: text/plain\r\n\r\ntext without its boundary\r\n--zz\r\nContent-Type: text/plain\r\n\r\nunclosed";
    assert_eq!(code(receive(&house, broken, "", "ana@h.test")), 202);

    // Invalid and unknown charsets: decoded as well as can be, never refused for it.
    let charsets = b"From: x@example.com\r\nMessage-ID: <cs@example.com>\r\nSubject: =?x-unknown?B?AAEC?= =?utf-8?B?/w==?=\r\n\
Content-Type: text/plain; charset=\"no-such-charset\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\ncaf=E9 =FF=FE=\r\n";
    assert_eq!(code(receive(&house, charsets, "", "ana@h.test")), 202);

    // Header injection in Reply-To: not recorded as an address to reply to.
    let inject = b"From: x@example.com\r\nMessage-ID: <inj@example.com>\r\nReply-To: =?utf-8?Q?a@example.com=0D=0ABcc:_victim@example.net?=\r\n\
Subject: =?utf-8?Q?hi=0D=0ABcc:_victim@example.net?=\r\n\r\nbody\r\n";
    assert_eq!(code(receive(&house, inject, "", "ana@h.test")), 202);

    let got = mailbox(&house, &ana);
    assert_eq!(got.len(), 6);
    for env in &got {
        let e = ext(env);
        for name in ["subject", "reply_to", "from", "message_id"] {
            if let Some(t) = e[name].as_str() {
                assert!(!t.chars().any(char::is_control), "{name}: {t:?}");
            }
        }
    }
    let injected = got.iter().find(|e| ext(e)["message_id"].as_str() == Some("inj@example.com")).unwrap();
    assert_eq!(ext(injected)["reply_to"], Value::Null);
    assert_eq!(ext(injected)["subject"].as_str(), Some("hi Bcc: victim@example.net"));
    let bare_env = got.iter().find(|e| e.as_object().unwrap()["id"].as_str() == Some(first.id())).unwrap();
    assert_eq!(ext(bare_env)["subject"], Value::Null);
}

#[test]
fn a_text_body_larger_than_the_budget_is_cut_and_marked() {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    config.max_bytes = 64 * 1024;
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    let body = "x".repeat(60 * 1024);
    let raw = mail("long@example.com", "long", &body);
    assert_eq!(code(receive(&house, &raw, "", "ana@h.test")), 202);
    let got = mailbox(&house, &ana);
    assert_eq!(ext(&got[0])["truncated"], Value::Bool(true));
    let text = got[0].as_object().unwrap()["content"].as_object().unwrap()["body"].as_str().unwrap().len();
    assert_eq!(text, 32 * 1024);
    // Control characters that JSON escapes six-fold cannot push the envelope past the limit.
    let ctl = mail("ctl@example.com", "ctl", &"\u{1}".repeat(30 * 1024));
    let c = code(receive(&house, &ctl, "", "ana@h.test"));
    assert!(c == 202 || c == 413, "{c}");
}

#[test]
fn a_webhook_gets_the_new_email_once() {
    let world = World::new();
    let house = world.house("h.test", Registration::Admin);
    let ana = Agent::new("ana@h.test", 40);
    let body = ana.registration(&house, &[("webhook", "http://hook.test/ana".into())]);
    assert_eq!(call(&house, "POST", "/agents", &[("authorization", ADMIN)], &body).status, 201);
    let pushed = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = pushed.clone();
    world.fake("hook.test", move |req| {
        seen.borrow_mut().push(req.clone());
        nyx5_house::ports::OutResponse { status: 200, body: vec![] }
    });
    let raw = mail("hook@example.com", "pushed", "hi");
    assert_eq!(code(receive(&house, &raw, "", "ana@h.test")), 202);
    assert_eq!(code(receive(&house, &raw, "", "ana@h.test")), 200);
    let pushed = pushed.borrow();
    assert_eq!(pushed.len(), 1);
    let sig = pushed[0].headers.iter().find(|(k, _)| k == "X-Nyx5-Push").map(|(_, v)| v.clone()).unwrap();
    let sig: [u8; 64] = nyx5_proto::b64::decode(&sig).unwrap().try_into().unwrap();
    assert!(house.config.key.public().verify(nyx5_proto::crypto::Context::Push, &pushed[0].body, &sig));
    let push = Value::parse(&pushed[0].body, 1 << 20).unwrap();
    let push = push.as_object().unwrap();
    assert_eq!(push["type"].as_str(), Some("nyx5.push"));
    assert_eq!(push["to"].as_str(), Some("ana@h.test"));
    assert_eq!(push["envelope"].as_object().unwrap()["via"].as_str(), Some("email"));
}

#[test]
fn the_domain_card_declares_the_bridge() {
    let (_world, house, _ana) = setup();
    assert!(house.card().extensions().iter().any(|e| e == EXT_EMAIL));
}

/// Found by fuzz/email: broken nesting that reaches a `debug_assert!(false)` in mail-parser 0.11.
/// The root Cargo.toml builds mail-parser without debug assertions in every profile, so this is
/// read (and recovered from) as in release instead of panicking in debug builds.
#[test]
fn broken_nesting_that_trips_mail_parser_is_read() {
    let (_world, house, _ana) = setup();
    let raw = include_bytes!("email/mail-parser-debug-assert.eml");
    assert_eq!(code(receive(&house, raw, "", "ana@h.test")), 202);
}

#[test]
fn a_house_with_the_bridge_off_refuses_email_both_ways() {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    config.email_enabled = false;
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    let card = json(&call_raw(&house, "GET", "/.well-known/nyx5.json", &[], vec![]), 200);
    let extensions = card.as_object().unwrap()["extensions"].as_array().unwrap().to_vec();
    assert!(!extensions.contains(&Value::from(EXT_EMAIL)));
    assert_eq!(code(receive(&house, &mail("off@x", "hi", "hello"), "bob@example.com", "ana@h.test")), 403);
    assert!(mailbox(&house, &ana).is_empty());
    let out = Value::Object(obj([("to", "bob@example.com".into()), ("body", "hi".into())]));
    assert_eq!(ana.post(&house, "/email/out", &out).status, 403);
}

#[test]
fn the_email_size_cap_can_be_lower_than_the_envelope_limit() {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    config.email_max_bytes = 1_000;
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    let small = mail("small@x", "hi", "short");
    assert!(small.len() < 1_000, "{}", small.len());
    assert_eq!(code(receive(&house, &small, "bob@example.com", "ana@h.test")), 202);
    let big = mail("big@x", "hi", &"y".repeat(1_000));
    assert_eq!(code(receive(&house, &big, "bob@example.com", "ana@h.test")), 413);
    assert_eq!(mailbox(&house, &ana).len(), 1);
    // The raw message's cap holds at exactly its size: a message of 1,000 bytes passes it (and
    // is then refused as an envelope over the same cap), one of 1,001 does not.
    let pad = 1_000 - mail("edge@x", "hi", "").len();
    let edge = mail("edge@x", "hi", &"z".repeat(pad));
    assert_eq!(edge.len(), 1_000);
    let refused = |raw: &[u8]| receive(&house, raw, "bob@example.com", "ana@h.test").unwrap_err();
    // Refused as an envelope (the envelope's own name), not as an email over the raw cap.
    let e = refused(&edge);
    assert_eq!(e.code(), 413, "{e}");
    assert_ne!(e.refusal(), Some(Refusal::EmailTooLarge), "{e}");
    let over = mail("over@x", "hi", &"z".repeat(pad + 1));
    let e = refused(&over);
    assert_eq!((e.code(), e.refusal()), (413, Some(Refusal::EmailTooLarge)), "{e}");
    assert_eq!(mailbox(&house, &ana).len(), 1);
}

/// How many envelopes `local`'s mailbox holds, and how many the rate windows counted for it.
fn held_and_counted(house: &TestHouse, local: &str) -> (i64, i64) {
    use nyx5_house::ports::Db;
    let n = |sql: &'static str| {
        let rows = block_on(house.db.query(nyx5_house::stmt!(sql, local))).unwrap();
        rows[0].int("n").unwrap_or(0)
    };
    (
        n("SELECT count(*) AS n FROM mailbox WHERE local = ?"),
        n("SELECT coalesce(sum(count), 0) AS n FROM rate_windows WHERE bucket LIKE 'email:' || ? || ':%'"),
    )
}

#[test]
fn an_allowlisted_sender_is_not_held_to_the_rate() {
    let (_world, house, ana) = setup();
    let cap = house.config.email_per_sender_per_minute;
    // example.com fills its window while it is still a stranger.
    for i in 0..cap {
        assert_eq!(code(receive(&house, &mail(&format!("s{i}@example.com"), "s", "b"), "", "ana@h.test")), 202);
    }
    assert_eq!(code(receive(&house, &mail("over@example.com", "s", "b"), "", "ana@h.test")), 429);
    assert_eq!(held_and_counted(&house, "ana"), (cap, cap));
    // Listed now, within the same minute: the full window does not hold it back, and nothing
    // more is counted against it.
    let allow =
        Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["@example.com".into()]))])))]));
    json(&ana.post(&house, "/lists/ana", &allow), 200);
    for i in 0..cap + 2 {
        assert_eq!(code(receive(&house, &mail(&format!("a{i}@example.com"), "s", "b"), "", "ana@h.test")), 202);
    }
    assert_eq!(held_and_counted(&house, "ana"), (2 * cap + 2, cap));
    // A stranger still is counted.
    let carol =
        String::from_utf8(mail("c@other.test", "s", "b")).unwrap().replace("Bob@Example.COM", "carol@other.test");
    assert_eq!(code(receive(&house, carol.as_bytes(), "", "ana@h.test")), 202);
    assert_eq!(held_and_counted(&house, "ana"), (2 * cap + 3, cap + 1));
}

#[test]
fn an_expired_card_takes_no_email() {
    let (world, house, _ana) = setup();
    let eve = Agent::new("eve@h.test", 41);
    let until = nyx5_proto::Timestamp(house.now().millis() + 3_600_000);
    let body = eve.registration(&house, &[("valid_until", until.to_rfc3339().into())]);
    assert_eq!(call(&house, "POST", "/agents", &[("authorization", ADMIN)], &body).status, 201);
    assert_eq!(code(receive(&house, &mail("v1@example.com", "s", "b"), "", "eve@h.test")), 202);
    world.clock.advance(3_600_000);
    let e = receive(&house, &mail("v2@example.com", "s", "b"), "", "eve@h.test").unwrap_err();
    assert_eq!((e.code(), e.refusal()), (404, Some(Refusal::RecipientCardExpired)), "{e}");
    assert_eq!(held_and_counted(&house, "eve").0, 1);
}

/// The gateway and the house's own names take no email, whether or not an agent could have
/// such a name: 404 before anything is parsed or stored.
#[test]
fn the_gateway_and_the_reserved_names_take_no_email() {
    let (world, house, ana) = setup();
    for to in ["email@h.test", "libro@h.test", "postmaster@h.test", "casa@h.test", "libro+tag@h.test"] {
        let refused = receive(&house, &mail(&format!("r-{to}"), "hi", "hello"), "bob@example.com", to).unwrap_err();
        assert_eq!((refused.code(), refused.refusal()), (404, Some(Refusal::TakesNoEmail)), "{to}: {refused}");
    }
    assert_eq!(mailbox(&house, &ana).len(), 0);
    assert_eq!(code(receive(&house, &mail("ok@x", "hi", "hello"), "bob@example.com", "ana@h.test")), 202);
    // What was taken counts in this minute's window, as signed mail does.
    use nyx5_house::ports::Db;
    let rows = block_on(house.db.query(nyx5_house::stmt!("SELECT bucket, window FROM rate_windows"))).unwrap();
    let windows: Vec<(String, i64)> =
        rows.iter().map(|r| (r.text("bucket").unwrap().to_owned(), r.int("window").unwrap())).collect();
    assert_eq!(windows, [("email:ana:domain:example.com".to_owned(), world.clock.now().millis() / 60_000)]);
}

/// The rate and the mailbox filled by others between the house's read and its batch: each is
/// refused for what it is (429 with its own reason), and nothing is stored.
#[test]
fn an_email_that_loses_a_race_for_the_rate_or_the_mailbox_is_refused_for_that() {
    for race in ["rate", "quota"] {
        let (world, house, ana) = setup();
        let window = world.clock.now().millis() / 60_000;
        let cap = house.config.email_per_sender_per_minute;
        let max = house.config.quota().max_envelopes;
        house.db.before_next_batch(move |db| {
            let fill = if race == "rate" {
                nyx5_house::stmt!(
                    "INSERT INTO rate_windows (bucket, window, count, cap) VALUES ('email:ana:domain:example.com', ?, ?, ?)",
                    window,
                    cap,
                    cap
                )
            } else {
                nyx5_house::stmt!(
                    "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes) VALUES ('ana', ?, 0, ?, 100000000)
                     ON CONFLICT (local) DO UPDATE SET envelopes = excluded.envelopes",
                    max,
                    max
                )
            };
            block_on(nyx5_house::ports::Db::batch(db, vec![fill])).unwrap();
        });
        let refused =
            receive(&house, &mail(&format!("{race}@x"), "hi", "hello"), "bob@example.com", "ana@h.test").unwrap_err();
        assert_eq!(refused.code(), 429, "{race}: {refused}");
        // Each by its own name: the sender's rate, or the mailbox's quota (the mailbox's name).
        if race == "rate" {
            assert_eq!(refused.refusal(), Some(Refusal::TooManyEmails), "{race}: {refused}");
        } else {
            assert_ne!(refused.refusal(), Some(Refusal::TooManyEmails), "{race}: {refused}");
            assert!(refused.reason.contains("full"), "{race}: {refused}");
        }
        assert_eq!(mailbox(&house, &ana).len(), 0, "{race}");
    }
}

/// A recipient that is no address is named in the refusal, at most 100 characters of it.
#[test]
fn a_recipient_that_is_no_address_is_named_clipped() {
    let (_world, house, _ana) = setup();
    let raw = mail("nobody@x", "hi", "hello");
    let refused = receive(&house, &raw, "bob@example.com", "not an address").unwrap_err();
    assert_eq!((refused.code(), refused.refusal()), (404, Some(Refusal::UnknownAgent)));
    // The prose is what is under test here: it names the recipient, clipped.
    assert_eq!(refused.reason, "no such recipient \"not an address\"");
    let long = "x".repeat(300);
    let refused = receive(&house, &raw, "bob@example.com", &long).unwrap_err();
    assert_eq!(refused.reason, format!("no such recipient {:?}", "x".repeat(100)));
}

#[test]
fn a_reply_carries_its_new_text_beside_the_full_body() {
    let (_world, house, ana) = setup();
    // Gmail's text/plain reply: the body keeps the history, `new_text` is what Bob wrote now.
    let body = "Thursday works for me.\r\n\r\nBob\r\n\r\nOn Tue, Dec 1, 2026 at 9:14 AM Ana <ana@h.test> wrote:\r\n\
                > Could we meet on Thursday?\r\n>\r\n> Ana";
    assert_eq!(code(receive(&house, &mail("re1@example.com", "Re: meet", body), "", "ana@h.test")), 202);
    // An HTML-only reply from Outlook on the web, in Portuguese, quoted-printable.
    let html = "From: bia@example.com\r\nTo: ana@h.test\r\nSubject: RE: reuniao\r\nMessage-ID: <re2@example.com>\r\n\
                MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
                <div>Combinado, at=C3=A9 amanh=C3=A3.</div><div>Enviado do meu iPhone</div><div id=3D\"appendonsend\"></div>\
                <hr><div id=3D\"divRplyFwdMsg\"><b>De:</b> Ana<br><b>Enviado:</b> ter=C3=A7a<br><b>Para:</b> Bia</div>\
                <div>Nos vemos amanh=C3=A3?</div>\r\n";
    assert_eq!(code(receive(&house, html.as_bytes(), "", "ana@h.test")), 202);
    // A message with no history: no member, the body is the new text.
    assert_eq!(code(receive(&house, &mail("plain@example.com", "hi", "Just a note."), "", "ana@h.test")), 202);
    let got = mailbox(&house, &ana);
    let by_id = |id: &str| got.iter().find(|e| ext(e)["message_id"].as_str() == Some(id)).unwrap();
    let body_of =
        |e: &Value| e.as_object().unwrap()["content"].as_object().unwrap()["body"].as_str().unwrap().to_owned();
    let gmail = by_id("re1@example.com");
    assert!(body_of(gmail).contains("> Could we meet on Thursday?"));
    assert_eq!(ext(gmail)["new_text"].as_str(), Some("Thursday works for me.\n\nBob"));
    let outlook = by_id("re2@example.com");
    assert!(body_of(outlook).contains("Nos vemos amanhã?"));
    assert_eq!(ext(outlook)["new_text"].as_str(), Some("Combinado, até amanhã."));
    assert!(!ext(by_id("plain@example.com")).contains_key("new_text"));
}

#[test]
fn the_new_text_shares_the_body_budget() {
    let world = World::new();
    let mut config = world.config("h.test", Registration::Admin);
    config.max_bytes = 64 * 1024;
    let house = world.start(config);
    let ana = Agent::new("ana@h.test", 40);
    assert_eq!(ana.register_admin(&house).status, 201);
    // 20 KiB new and 10 KiB quoted fit the 32 KiB body, but not twice: the member is left out
    // (the envelope grows by no more than the body's budget allowed before), the body is whole.
    let body =
        format!("{}\r\n\r\nOn Tue, Dec 1, 2026 Ana wrote:\r\n> {}", "n".repeat(20 * 1024), "q".repeat(10 * 1024));
    assert_eq!(code(receive(&house, &mail("big@example.com", "Re: big", &body), "", "ana@h.test")), 202);
    let small = "Yes.\r\n\r\nOn Tue, Dec 1, 2026 Ana wrote:\r\n> Coming?";
    assert_eq!(code(receive(&house, &mail("small@example.com", "Re: small", small), "", "ana@h.test")), 202);
    let got = mailbox(&house, &ana);
    let by_id = |id: &str| got.iter().find(|e| ext(e)["message_id"].as_str() == Some(id)).unwrap();
    let big = by_id("big@example.com");
    assert!(!ext(big).contains_key("new_text"));
    assert!(!ext(big).contains_key("truncated"));
    assert_eq!(ext(by_id("small@example.com"))["new_text"].as_str(), Some("Yes."));
}
