//! §5 of issue 10: email trust from evidence, not headers.
//!
//! Against `f847391`: the bridge matched the allowlist, and exempted from the rate limit, on the
//! `From` header (or the SMTP sender), which anyone writes; `Authentication-Results` was only
//! recorded. Rate windows were per claimed sender address, so a spoofer rotating addresses was
//! never counted twice. An email's id was derived from its Message-ID alone, and any mailbox row
//! holding that id made it a "duplicate": a forged email carrying the real one's Message-ID,
//! arriving first, silently suppressed it. Without a Message-ID the id hashed the raw bytes,
//! trace headers included, so the same message redelivered through a receiver landed twice.
//!
//! Here the house receives email as the Worker's `email` event does: `mx.h.test` stands for
//! Cloudflare's `mx.cloudflare.net`, the receiver that wrote the topmost `Authentication-Results`.

use nyx5_house::Registration;
use nyx5_house::email::{EXT_EMAIL, EmailOutcome};
use nyx5_proto::json::obj;
use nyx5_proto::{Envelope, Error, Value};

use crate::common::*;
use crate::kit::*;

/// The trusted receiver's authserv-id, as the Worker passes Cloudflare's.
const MX: &str = "mx.h.test";

/// The trusted receiver's verdict, written on top of the message as it arrives.
fn stamped(verdict: &str, message: &str) -> Vec<u8> {
    format!("Received: from sender by {MX}; Mon, 30 Nov 2026 10:00:00 +0000\r\nAuthentication-Results: {MX}; {verdict}\r\n{message}")
        .into_bytes()
}

/// A message as its sender wrote it (CRLF line ends added).
fn message(from: &str, message_id: &str, extra: &str, body: &str) -> String {
    format!(
        "From: {from}\r\nTo: ana@h.test\r\nSubject: payment\r\nMessage-ID: <{message_id}>\r\n\
         Date: Mon, 30 Nov 2026 09:59:00 +0000\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    )
}

fn receive(house: &TestHouse, raw: &[u8], envelope_from: &str) -> Result<EmailOutcome, Error> {
    block_on(house.email().receive_email(raw, envelope_from, "ana@h.test", &[MX]))
}

fn code(r: &Result<EmailOutcome, Error>) -> u16 {
    match r {
        Ok(EmailOutcome::Accepted { .. }) => 202,
        Ok(EmailOutcome::Duplicate { .. }) => 200,
        Err(e) => e.code(),
    }
}

/// A house with ana, whose inbox has `policy`, and `boss@bank.test` on her allowlist.
fn house_with_ana(policy: &str) -> (World, std::rc::Rc<TestHouse>, Agent) {
    let world = World::new();
    let house = world.house("h.test", Registration::Admin);
    let ana = Agent::new("ana@h.test", 40);
    let inbox = ("inbox", Value::Object(obj([("policy", policy.into())])));
    assert_eq!(enrol(&house, &ana, &[inbox]).status, 201);
    let allow =
        Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["boss@bank.test".into()]))])))]));
    json(&ana.post(&house, "/lists/ana", &allow), 200);
    (world, house, ana)
}

fn email_ext(env: &Envelope) -> nyx5_proto::Object {
    env.object()["extensions"].as_object().unwrap()[EXT_EMAIL].as_object().unwrap().clone()
}

#[test]
fn a_forged_from_of_an_allowlisted_sender_is_not_let_in() {
    let (_world, house, ana) = house_with_ana("allowlist");
    // No DMARC pass anywhere: the receiver found none (the spoofer's domain is not bank.test).
    let forged = stamped(
        "spf=pass smtp.mailfrom=spoofer.test; dmarc=fail header.from=bank.test",
        &message("Boss <boss@bank.test>", "f1@bank.test", "", "Wire 10,000 to account 666."),
    );
    let r = receive(&house, &forged, "x@spoofer.test");
    assert_eq!(code(&r), 403, "{r:?}");
    assert_eq!(r.unwrap_err().refusal(), Some(nyx5_proto::Refusal::NotOnAllowlist));
    // Nor does naming the allowlisted address as the SMTP sender help.
    assert_eq!(code(&receive(&house, &forged, "boss@bank.test")), 403);
    assert!(mailbox(&house, &ana).is_empty());
    // The real boss, vouched for by the receiver, is let in.
    let real = stamped(
        "dkim=pass header.d=bank.test; dmarc=pass header.from=bank.test",
        &message("Boss <boss@bank.test>", "r1@bank.test", "", "Lunch?"),
    );
    assert_eq!(code(&receive(&house, &real, "boss@bank.test")), 202);
    let got = mailbox(&house, &ana);
    assert_eq!(got.len(), 1);
    assert_eq!(email_ext(&got[0])["authenticated_domain"].as_str(), Some("bank.test"));
}

#[test]
fn a_forged_from_of_an_allowlisted_sender_gets_no_rate_exemption() {
    let (_world, house, ana) = house_with_ana("open");
    let cap = house.config.email_per_sender_per_minute;
    for i in 0..cap {
        let forged =
            stamped("dmarc=none header.from=bank.test", &message("boss@bank.test", &format!("n{i}@x"), "", "hi"));
        assert_eq!(code(&receive(&house, &forged, "")), 202, "email {i}");
    }
    let over = stamped("dmarc=none header.from=bank.test", &message("boss@bank.test", "over@x", "", "hi"));
    assert_eq!(code(&receive(&house, &over, "")), 429);
    assert_eq!(mailbox(&house, &ana).len(), cap as usize);
    // The real, authenticated boss is still exempt: the spoofer's flood does not hold him back.
    let real = stamped("dmarc=pass header.from=bank.test", &message("boss@bank.test", "real@bank.test", "", "hi"));
    assert_eq!(code(&receive(&house, &real, "")), 202);
}

#[test]
fn a_forged_authentication_result_is_not_believed() {
    let (_world, house, ana) = house_with_ana("allowlist");
    let pass = "dmarc=pass header.from=bank.test";
    let from = "Boss <boss@bank.test>";
    let cases = [
        // Only an untrusted receiver's pass, at the top (the trusted receiver wrote nothing).
        format!("Authentication-Results: mx.spoofer.test; {pass}\r\n{}", message(from, "a1@x", "", "1")),
        // The trusted id, but written by the sender: the receiver's own verdict is above it.
        String::from_utf8(stamped(
            "spf=pass smtp.mailfrom=spoofer.test; dmarc=fail header.from=bank.test",
            &message(from, "a2@x", &format!("Authentication-Results: {MX}; {pass}\r\n"), "2"),
        ))
        .unwrap(),
        // An untrusted pass below a trusted header that has no DMARC result.
        String::from_utf8(stamped(
            "spf=pass smtp.mailfrom=spoofer.test",
            &message(from, "a3@x", &format!("Authentication-Results: mx.spoofer.test; {pass}\r\n"), "3"),
        ))
        .unwrap(),
        // An untrusted header on top of the trusted id's pass (which the sender wrote).
        format!(
            "Authentication-Results: mx.spoofer.test; none\r\nAuthentication-Results: {MX}; {pass}\r\n{}",
            message(from, "a4@x", "", "4")
        ),
        // The pass in a comment, in a quoted string, or for another domain.
        String::from_utf8(stamped(
            "dmarc=fail (dmarc=pass header.from=bank.test) header.from=bank.test",
            &message(from, "a5@x", "", "5"),
        ))
        .unwrap(),
        String::from_utf8(stamped(
            "dmarc=none reason=\"dmarc=pass header.from=bank.test\" header.from=bank.test",
            &message(from, "a6@x", "", "6"),
        ))
        .unwrap(),
        String::from_utf8(stamped("dmarc=pass header.from=spoofer.test", &message(from, "a7@x", "", "7"))).unwrap(),
        // A second From the receiver did not judge.
        String::from_utf8(stamped(pass, &message(from, "a8@x", "From: eve@spoofer.test\r\n", "8"))).unwrap(),
    ];
    for (i, raw) in cases.iter().enumerate() {
        assert_eq!(code(&receive(&house, raw.as_bytes(), "")), 403, "case {i}: {raw}");
    }
    assert!(mailbox(&house, &ana).is_empty());
    // Mail fed by the operator (`POST /email/in`) trusts only the operator's authserv-ids: the
    // Worker's receiver means nothing there.
    let real = stamped(pass, &message(from, "op@bank.test", "", "via the operator"));
    let resp = call_raw(&house, "POST", "/email/in?to=ana%40h.test", &[("authorization", &admin(&house))], real);
    assert_eq!(resp.status, 403);
}

#[test]
fn a_forged_email_reusing_a_message_id_does_not_suppress_the_real_one() {
    let (_world, house, ana) = house_with_ana("open");
    let real_text = message("Boss <boss@bank.test>", "q3-report@bank.test", "", "The Q3 numbers are attached.");
    // The spoofer learns the Message-ID (a mailing list, a CC) and gets there first.
    let forged = message("Boss <boss@bank.test>", "q3-report@bank.test", "", "Ignore the Q3 report; wire funds.");
    let f = receive(&house, &stamped("dmarc=fail header.from=bank.test", &forged), "").unwrap();
    assert!(matches!(f, EmailOutcome::Accepted { .. }));
    // Even a word-for-word copy, unauthenticated, does not take the real one's place.
    let copy = receive(&house, &stamped("dmarc=fail header.from=bank.test", &real_text), "").unwrap();
    assert!(matches!(copy, EmailOutcome::Accepted { .. }));
    let real = receive(&house, &stamped("dmarc=pass header.from=bank.test", &real_text), "").unwrap();
    assert!(matches!(real, EmailOutcome::Accepted { .. }), "{real:?}");
    let ids: Vec<&str> = vec![f.id(), copy.id(), real.id()];
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "{ids:?}");
    let got = mailbox(&house, &ana);
    assert_eq!(got.len(), 3);
    let landed = got.iter().find(|e| e.id() == real.id()).unwrap();
    assert_eq!(landed.content().unwrap().body.as_str(), Some("The Q3 numbers are attached.\n"));
    assert_eq!(email_ext(landed)["authenticated_domain"].as_str(), Some("bank.test"));
}

#[test]
fn the_same_message_delivered_twice_lands_once() {
    let (world, house, ana) = house_with_ana("open");
    // Without a Message-ID, and retried through the receiver: new trace headers, a new verdict line.
    let sent = "From: Boss <boss@bank.test>\r\nTo: ana@h.test\r\nSubject: no id\r\n\r\nPing.\r\n";
    let first = receive(&house, &stamped("dmarc=pass header.from=bank.test", sent), "boss@bank.test").unwrap();
    world.clock.advance(5 * 60_000);
    let retried = format!(
        "Received: from sender by {MX}; Mon, 30 Nov 2026 10:05:00 +0000\r\nAuthentication-Results: {MX}; \
         dkim=pass header.d=bank.test header.b=Xy; dmarc=pass header.from=bank.test policy.dmarc=none\r\n\
         X-Spam-Score: 1\r\n{sent}"
    );
    let again = receive(&house, retried.as_bytes(), "bounce+1@bank.test").unwrap();
    assert_eq!(again, EmailOutcome::Duplicate { id: first.id().to_owned() });
    // With a Message-ID, and the same bytes handed over twice (a retried event).
    let with_id = stamped("dmarc=pass header.from=bank.test", &message("boss@bank.test", "twice@bank.test", "", "x"));
    let one = receive(&house, &with_id, "").unwrap();
    assert_eq!(receive(&house, &with_id, "").unwrap(), EmailOutcome::Duplicate { id: one.id().to_owned() });
    assert_eq!(mailbox(&house, &ana).len(), 2);
}

#[test]
fn a_spoofer_rotating_from_addresses_stays_rate_limited() {
    let (_world, house, ana) = house_with_ana("open");
    let cap = house.config.email_per_sender_per_minute;
    // Unauthenticated: a new From and a new SMTP sender each time.
    for i in 0..cap {
        let raw = stamped("dmarc=none", &message(&format!("p{i}@spam{i}.test"), &format!("s{i}@x"), "", "buy"));
        assert_eq!(code(&receive(&house, &raw, &format!("b{i}@spam{i}.test"))), 202, "email {i}");
    }
    let raw = stamped("dmarc=none", &message("fresh@new-domain.test", "s-over@x", "", "buy"));
    assert_eq!(code(&receive(&house, &raw, "fresh@new-domain.test")), 429);
    // Authenticated for its own domain, rotating local parts: one domain, one window.
    for i in 0..cap {
        let raw = stamped(
            "dmarc=pass header.from=spam.test",
            &message(&format!("u{i}@spam.test"), &format!("d{i}@x"), "", "buy"),
        );
        assert_eq!(code(&receive(&house, &raw, "")), 202, "email {i}");
    }
    let raw = stamped("dmarc=pass header.from=spam.test", &message("u-over@spam.test", "d-over@x", "", "buy"));
    assert_eq!(code(&receive(&house, &raw, "")), 429);
    // Another authenticated domain is not held back by either.
    let raw = stamped("dmarc=pass header.from=bank.test", &message("carol@bank.test", "c@bank.test", "", "hi"));
    assert_eq!(code(&receive(&house, &raw, "")), 202);
    assert_eq!(mailbox(&house, &ana).len(), 2 * cap as usize + 1);
}

#[test]
fn a_signed_envelope_holding_an_emails_id_does_not_swallow_it() {
    let (world, house, ana) = house_with_ana("open");
    let raw = stamped("dmarc=pass header.from=bank.test", &message("boss@bank.test", "held@bank.test", "", "mine"));
    // Someone who knows the message computes its id and sends a signed envelope under it first.
    let parsed = nyx5_rules::email::parse::parse(&raw, house.config.max_bytes / 2).unwrap();
    let id = nyx5_rules::email::parse::envelope_id("h.test", &parsed, Some("bank.test"));
    let other = world.house("o.test", Registration::Admin);
    let mallory = Agent::new("mallory@o.test", 41);
    assert_eq!(mallory.register_admin(&other).status, 201);
    let env = envelope(&mallory, &id, &[&ana.address], |_| {});
    assert_eq!(deliver(&other, &house, &env).status, 202);
    // The email is refused for what it is, a clash, not reported stored as a "duplicate".
    let r = receive(&house, &raw, "");
    assert_eq!(code(&r), 409, "{r:?}");
    assert!(mailbox(&house, &ana).iter().all(|e| e.object().get("via").is_none()));
}
