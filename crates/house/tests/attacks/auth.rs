//! §8 A wrong value of the right shape is refused: an operator token of the right length, a
//! nonce used once already, a signature by the right key over other bytes.

use nyx5_house::Registration;
use nyx5_proto::Value;
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::json::obj;

use crate::common::{admin, agents_named, refused, register, rows};
use crate::kit::*;

fn invitations(h: &TestHouse, authorization: &str) -> u16 {
    call_raw(h, "GET", "/invitations", &[("authorization", authorization)], vec![]).status
}

#[test]
fn operator_token_of_the_right_length_but_wrong_is_refused() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let right = admin(&h);
    assert_eq!(invitations(&h, &right), 200);
    let token = right.strip_prefix("Bearer ").unwrap();
    let mut wrong = Vec::new();
    // One byte off at the start, in the middle, at the end; every byte off; the right token
    // shifted by one.
    for at in [0, token.len() / 2, token.len() - 1] {
        let mut t = token.as_bytes().to_vec();
        t[at] ^= 1;
        wrong.push(String::from_utf8(t).unwrap());
    }
    wrong.push("x".repeat(token.len()));
    wrong.push(format!("{}{}", &token[1..], &token[..1]));
    for t in &wrong {
        assert_eq!(t.len(), token.len());
        assert_eq!(invitations(&h, &format!("Bearer {t}")), 401, "{t}");
    }
    // Shorter, longer, or without the scheme.
    for t in [&token[..token.len() - 1], &format!("{token}x"), ""] {
        assert_eq!(invitations(&h, &format!("Bearer {t}")), 401, "{t}");
    }
    assert_eq!(invitations(&h, token), 401);
    // And a wrong token is no operator on POST /agents either: a dotted-free name, admin mode.
    let ana = Agent::new("ana@a.test", 10);
    let t = format!("Bearer {}", wrong[2]);
    refused(&register(&h, &ana, &[("authorization", &t)], &[]), 403);
    assert_eq!(agents_named(&h, "ana"), 0, "a refused registration left an agent behind");
}

#[test]
fn token_nonce_reused_once_is_refused_on_any_path() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    json(&ana.register_admin(&h), 201);
    let token = |path: &str| {
        Claims {
            address: ana.address.clone(),
            ts: h.now(),
            nonce: "the-same-nonce-0001".into(),
            target: Target::new("GET", path, "", &h.config.host(), b""),
        }
        .sign(&ana.sig)
    };
    let first = token("/mailbox/ana");
    assert_eq!(call_raw(&h, "GET", "/mailbox/ana", &[("authorization", &first)], vec![]).status, 200);
    assert_eq!(call_raw(&h, "GET", "/mailbox/ana", &[("authorization", &first)], vec![]).status, 401);
    // A fresh token for another path that reuses the nonce is a replay too.
    let other = token("/lists/ana");
    assert_eq!(call_raw(&h, "GET", "/lists/ana", &[("authorization", &other)], vec![]).status, 401);
    // The house keeps the nonce once, for ana, until the token could no longer be fresh.
    let kept = "SELECT count(*) AS n FROM nonces WHERE nonce = 'the-same-nonce-0001' AND address = ?";
    assert_eq!(rows(&h, kept, "ana@a.test"), 1);
    let live = "SELECT count(*) AS n FROM nonces WHERE nonce = 'the-same-nonce-0001' AND keep_until > ?";
    assert_eq!(rows(&h, live, h.now().millis()), 1, "the nonce is kept past now");
}

#[test]
fn token_signature_by_the_right_key_over_other_bytes_is_refused() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    json(&ana.register_admin(&h), 201);
    // The signature of a token for GET /mailbox/ana, on the claims of a token for GET /lists/ana.
    let mailbox = ana.token(&h, "GET", "/mailbox/ana", b"");
    let lists = ana.token(&h, "GET", "/lists/ana", b"");
    let (_, mailbox_sig) = mailbox.rsplit_once('.').unwrap();
    let (lists_claims, _) = lists.rsplit_once('.').unwrap();
    let spliced = format!("{lists_claims}.{mailbox_sig}");
    assert_eq!(call_raw(&h, "GET", "/lists/ana", &[("authorization", &spliced)], vec![]).status, 401);
    // The unspliced token still works: only the splice was refused.
    assert_eq!(call_raw(&h, "GET", "/lists/ana", &[("authorization", &lists)], vec![]).status, 200);
}

#[test]
fn registration_body_signed_by_the_key_over_other_bytes_is_refused() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let ana = Agent::new("ana@a.test", 10);
    // A signed body with one member changed after signing (a webhook slipped in).
    let mut body = ana.registration(&h, &[]).as_object().unwrap().clone();
    body.insert("webhook".into(), "https://evil.test".into());
    assert_eq!(call(&h, "POST", "/agents", &[], &Value::Object(body)).status, 403);
    let caps = Value::Object(obj([("listed", Value::Bool(true))]));
    let mut body = ana.registration(&h, &[("capabilities", caps)]).as_object().unwrap().clone();
    body.insert("capabilities".into(), Value::Object(obj([])));
    assert_eq!(call(&h, "POST", "/agents", &[], &Value::Object(body)).status, 403);
    assert_eq!(call_raw(&h, "GET", "/agents/ana", &[], vec![]).status, 404);
}

#[test]
fn registration_ts_is_good_for_five_minutes_and_not_a_millisecond_more() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@a.test", 11);
    let (ana_body, bo_body) = (ana.registration(&h, &[]), bo.registration(&h, &[]));
    w.clock.advance(5 * MINUTE);
    assert_eq!(call(&h, "POST", "/agents", &[], &ana_body).status, 201);
    w.clock.advance(1);
    assert_eq!(call(&h, "POST", "/agents", &[], &bo_body).status, 403);
    assert_eq!((agents_named(&h, "ana"), agents_named(&h, "bo")), (1, 0));
}
