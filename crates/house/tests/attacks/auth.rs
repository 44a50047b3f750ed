//! §8 A wrong value of the right shape is refused: an operator token of the right length, a
//! nonce used once already, a signature by the right key over other bytes.

use nyx5_house::Registration;
use nyx5_proto::Value;
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::json::obj;

use crate::common::{admin, agents_named, refused, refused_as, register, register_by, rows};
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

/// A Libro's account is read by its owner's token, local or foreign (spec §16): a foreign agent
/// is proven through its own house's card, which the reading house fetches again once when the
/// token's key is not the cached card's (the agent rotated), and never otherwise; a token of one
/// agent never reads another's account, and a local agent's token is judged by the local card.
#[test]
fn a_foreign_agent_reads_its_own_account_even_just_after_it_rotated_and_no_other() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 1);
    let bo = Agent::new("bo@b.test", 2);
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(bo.register_admin(&b).status, 201);
    let account = |who: &Agent, of: &str| who.get(&a, &format!("/libro/cuenta/{of}"));
    let read = |r: nyx5_house::http::Response| json(&r, 200).as_object().unwrap()["account"].clone();
    assert_eq!(read(account(&ana, "ana@a.test")), Value::from("ana@a.test"));
    assert_eq!(read(account(&bo, "bo@b.test")), Value::from("bo@b.test"));
    let fetched = || w.sent_to("b.test/agents/bo");
    let before = fetched();
    assert_eq!(read(account(&bo, "bo@b.test")), Value::from("bo@b.test"));
    assert_eq!(fetched(), before, "a known key: the cached card, nothing fetched");
    assert!(refused(&account(&bo, "ana@a.test"), 403).contains("only its own account"));
    assert!(refused(&account(&ana, "bo@b.test"), 403).contains("only its own account"));
    // bo rotates his key; a.test still holds the old card, and fetches it once.
    let bo2 = Agent::new("bo@b.test", 3);
    assert_eq!(register_by(&b, &bo, &bo2, &[]).status, 200);
    assert_eq!(read(account(&bo2, "bo@b.test")), Value::from("bo@b.test"));
    let after = fetched();
    assert_eq!(after, before + 1, "the rotated card was fetched again, once");
    // The old key, now a previous key in its grace, is known and not enough (403): nothing to
    // fetch again for that.
    let (name, why) = refused_as(&account(&bo, "bo@b.test"), 403);
    assert_eq!(name, "needs_current_key", "{why}");
    assert_eq!(fetched(), after);
    // A key no card of bo's ever had is refused as unauthenticated, after one more fetch.
    let impostor = Agent::new("bo@b.test", 4);
    assert_eq!(account(&impostor, "bo@b.test").status, 401);
    assert_eq!(fetched(), after + 1);
}

/// The ack spends its token's nonce in the batch that acknowledges (issue 36 §5: one round trip
/// fewer). A replay of the same request is 401 and acknowledges nothing more; an ack of nothing
/// still spends its nonce, and a malformed one spends none (it never reaches the batch).
#[test]
fn an_ack_token_works_once_and_spends_its_nonce_with_the_ack() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    json(&ana.register_admin(&h), 201);
    for id in ["m1", "m2"] {
        let env = ana.draft(id, &[&ana.address], "to myself").sign(&ana.sig).unwrap();
        json(&ana.send(&h, &env), 202);
    }
    w.tick_all();
    assert_eq!(mailbox(&h, &ana).len(), 2);
    let path = "/mailbox/ana/ack";
    let ack = |ids: &[&str]| {
        let body = Value::Object(obj([("ids", Value::Array(ids.iter().map(|i| Value::from(*i)).collect()))]));
        let token = ana.token(&h, "POST", path, &body.canonical());
        (token, body)
    };
    let (token, body) = ack(&["m1"]);
    let first = call(&h, "POST", path, &[("authorization", &token)], &body);
    let acked = |resp: &nyx5_house::http::Response| json(resp, 200).as_object().unwrap()["acked"].as_safe_integer();
    assert_eq!(acked(&first), Some(1));
    let again = call(&h, "POST", path, &[("authorization", &token)], &body);
    assert_eq!(refused_as(&again, 401).0, "nonce_used");
    assert_eq!(mailbox(&h, &ana).len(), 1);
    // Nothing to acknowledge (m1 is gone): the nonce is spent all the same.
    let nonces = |n: &'static str| rows(&h, "SELECT count(*) AS n FROM nonces WHERE address = ?", n);
    let before = nonces("ana@a.test");
    let (token, body) = ack(&["m1"]);
    assert_eq!(acked(&call(&h, "POST", path, &[("authorization", &token)], &body)), Some(0));
    assert_eq!(nonces("ana@a.test"), before + 1);
    assert_eq!(call(&h, "POST", path, &[("authorization", &token)], &body).status, 401);
    // A malformed ack is refused before the batch: no nonce spent, nothing acknowledged.
    let bad = Value::Object(obj([("ids", Value::Array(vec![]))]));
    let token = ana.token(&h, "POST", path, &bad.canonical());
    assert_eq!(call(&h, "POST", path, &[("authorization", &token)], &bad).status, 400);
    assert_eq!(nonces("ana@a.test"), before + 1);
    assert_eq!(mailbox(&h, &ana).len(), 1);
    // A token that does not verify is told first, and nothing of the mailbox is read for it: a
    // malformed ack under a token for another request, or under none, is 401, not 400 (the
    // hostile review of issue 36 found an ack read the facts of a stranger's request).
    let elsewhere = ana.token(&h, "POST", "/mailbox/ana/ack?x=1", &bad.canonical());
    let name =
        |resp: &nyx5_house::http::Response| json(resp, 401).as_object().unwrap()["error"].as_str().unwrap().to_owned();
    assert_eq!(name(&call(&h, "POST", path, &[("authorization", &elsewhere)], &bad)), "token_for_another_request");
    assert_eq!(name(&call(&h, "POST", path, &[], &bad)), "bad_token");
    let ids: Vec<Value> = (0..500).map(|i| Value::from(format!("id{i}"))).collect();
    let many = Value::Object(obj([("ids", Value::Array(ids))]));
    let before = h.db.calls();
    assert_eq!(name(&call(&h, "POST", path, &[], &many)), "bad_token");
    assert_eq!(h.db.calls() - before, 0, "an ack without a token read the database");
    let stranger = ana.token(&h, "POST", "/mailbox/ana/ack?x=1", &many.canonical());
    let before = h.db.calls();
    assert_eq!(name(&call(&h, "POST", path, &[("authorization", &stranger)], &many)), "token_for_another_request");
    assert_eq!(h.db.calls() - before, 1, "an ack under a token that does not verify read more than the card");
}

/// A send's nonce is its envelope's id (issue 36 §1): the token is bound to the body, so the same
/// request again is the same envelope again, answered "exists" (200) with nothing queued twice
/// and nothing the request itself did not say (its jobs as the 202 listed them, not their
/// progress). No nonce row is written. A send refused before its batch (here over the agent's
/// minute) changed nothing: the same token may be sent again.
#[test]
fn a_send_token_works_once_and_only_a_send_that_took_effect_spends_it() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    json(&ana.register_admin(&h), 201);
    let env = ana.draft("once", &[&ana.address], "hi").sign(&ana.sig).unwrap();
    let body = env.canonical();
    let token = ana.token(&h, "POST", "/outbound", &body);
    let send = || call_raw(&h, "POST", "/outbound", &[("authorization", &token)], body.clone());
    let first = json(&send(), 202);
    assert_eq!(w.tick_all().delivered, 1, "delivered before the replay");
    let again = json(&send(), 200);
    let (first, again) = (first.as_object().unwrap(), again.as_object().unwrap());
    assert_eq!(again["exists"], nyx5_proto::Value::Bool(true));
    assert_eq!(again["jobs"], first["jobs"], "the replay learns the jobs as the send listed them, no progress");
    assert_eq!(rows(&h, "SELECT count(*) AS n FROM outbox WHERE envelope_id = ?", "once"), 1);
    assert_eq!(rows(&h, "SELECT count(*) AS n FROM jobs WHERE envelope_id = ?", "once"), 1);
    assert_eq!(rows(&h, "SELECT count(*) AS n FROM nonces WHERE address = ?", "ana@a.test"), 0, "no nonce row");
    assert_eq!(w.tick_all().attempted, 0, "nothing to deliver twice");
    // The same envelope with a fresh token is "exists" (200), as ever.
    assert_eq!(ana.send(&h, &env).status, 200);

    // Over the minute's cap: refused with 429, nothing queued, the nonce unspent.
    let nonces = || rows(&h, "SELECT count(*) AS n FROM nonces WHERE address = ?", "ana@a.test");
    let mut n = 1;
    let (capped, token) = loop {
        let env = ana.draft(&format!("many-{n}"), &[&ana.address], "hi").sign(&ana.sig).unwrap();
        let body = env.canonical();
        let token = ana.token(&h, "POST", "/outbound", &body);
        let r = call_raw(&h, "POST", "/outbound", &[("authorization", &token)], body.clone());
        if r.status == 429 {
            break (body, token);
        }
        assert_eq!(r.status, 202);
        n += 1;
        assert!(n < 1_000, "no cap on sends a minute");
    };
    let before = nonces();
    let r = call_raw(&h, "POST", "/outbound", &[("authorization", &token)], capped.clone());
    assert_eq!(r.status, 429, "the same refused send again is refused as it was, not as a replay");
    assert_eq!(nonces(), before);
}
