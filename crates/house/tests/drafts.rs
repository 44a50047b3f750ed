//! Drafts a person approves (docs/SPEC.md §7c; issue 38 §3): holds kept at the house, the
//! approver's reading of a sealed draft, exactly one departure, who may set and lift a hold, and
//! a hold set while a send is being decided.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::ports::Db;
use nyx5_house::stmt;
use nyx5_proto::card::{Delegation, Scope};
use nyx5_proto::envelope::Payload;
use nyx5_proto::{Address, Envelope, Object, Value, b64, seal};

struct Setup {
    w: World,
    a: std::rc::Rc<TestHouse>,
    b: std::rc::Rc<TestHouse>,
    ana: Agent,
    kid: Agent,
    cy: Agent,
    bo: Agent,
}

/// `a.test` with ana, her subagent `kid.ana` and cy; `b.test` with bo.
fn setup() -> Setup {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let cy = Agent::new("cy@a.test", 11);
    let bo = Agent::new("bo@b.test", 20);
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(cy.register_admin(&a).status, 201);
    assert_eq!(bo.register_admin(&b).status, 201);
    let kid = Agent::new("kid.ana@a.test", 30);
    let scope = Scope { types: None, to_domains: None, cap: None, authority: None };
    let d = Delegation::sign(&ana.address, &kid.address, &kid.sig.public(), &scope, None, a.now(), &ana.sig).unwrap();
    let reg = kid.registration(&a, &[("delegation", d.to_value())]);
    assert_eq!(call(&a, "POST", "/agents", &[], &reg).status, 201);
    Setup { w, a, b, ana, kid, cy, bo }
}

fn o(v: &Value) -> &Object {
    v.as_object().unwrap()
}

fn op(house: &TestHouse) -> String {
    format!("Bearer admin-{}", house.config.domain)
}

/// PUT /agents/:local/hold by `who` (an agent's token, or the operator's when `None`).
fn set_hold(house: &TestHouse, who: Option<&Agent>, local: &str, body: &Value) -> nyx5_house::http::Response {
    let path = format!("/agents/{local}/hold");
    let auth = match who {
        Some(a) => a.token(house, "PUT", &path, &body.canonical()),
        None => op(house),
    };
    call(house, "PUT", &path, &[("authorization", &auth)], body)
}

fn lift_hold(house: &TestHouse, who: Option<&Agent>, local: &str) -> nyx5_house::http::Response {
    let path = format!("/agents/{local}/hold");
    let auth = match who {
        Some(a) => a.token(house, "DELETE", &path, b""),
        None => op(house),
    };
    call_raw(house, "DELETE", &path, &[("authorization", &auth)], vec![])
}

fn hold(approver: &str, rule: &str) -> Value {
    Value::parse_str(&format!(r#"{{"approver":"{approver}","rule":{rule}}}"#)).unwrap()
}

fn refusal(resp: &nyx5_house::http::Response) -> (u16, String) {
    let v = resp.value().unwrap();
    (resp.status, o(&v)["error"].as_str().unwrap_or_default().to_owned())
}

fn ids(list: &[Envelope]) -> Vec<&str> {
    list.iter().map(Envelope::id).collect()
}

#[test]
fn a_held_agents_mail_waits_for_its_approver_and_leaves_exactly_once() {
    let s = setup();
    // ana holds what her subagent sends to strangers; cy (this house) and friends pass.
    json(&set_hold(&s.a, Some(&s.ana), "kid.ana", &hold("ana@a.test", r#"{"strangers":true}"#)), 200);

    // To cy, at home: no stranger, so it is queued as any send and delivered.
    let home = s.kid.draft("home-1", &[&s.cy.address], "hi cy").sign(&s.kid.sig).unwrap();
    json(&s.kid.send(&s.a, &home), 202);
    // To bo at another house: held. Nothing is queued, and nothing reaches bo.
    let away = s.kid.draft("away-1", &[&s.bo.address], "hello bo").sign(&s.kid.sig).unwrap();
    let held = json(&s.kid.send(&s.a, &away), 202);
    let draft = o(&o(&held)["draft"]);
    assert_eq!(
        (draft["state"].as_str(), draft["asks"].canonical_string().as_str()),
        (Some("pending"), r#"["ana@a.test"]"#)
    );
    s.w.tick_all();
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.a, &s.cy)), ["home-1"]);
    assert!(mailbox(&s.b, &s.bo).is_empty());
    let outbox = json(&s.kid.get(&s.a, "/outbox/kid.ana"), 200);
    assert_eq!(o(&outbox)["envelopes"].as_array().unwrap().len(), 1, "only the unheld one is in the outbox");

    // The same envelope again: the draft, not a second one.
    let again = json(&s.kid.send(&s.a, &away), 200);
    assert_eq!(o(&again)["exists"], Value::Bool(true));

    // ana sees it listed, and read alone with the envelope; the sender sees its own without.
    let listed = json(&s.ana.get(&s.a, "/drafts/ana"), 200);
    let asked = o(&listed)["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(o(&asked[0])["id"].as_str(), Some("away-1"));
    let one = json(&s.ana.get(&s.a, "/drafts/ana/away-1"), 200);
    assert_eq!(o(&o(&o(&one)["draft"])["envelope"])["id"].as_str(), Some("away-1"));
    let mine = json(&s.kid.get(&s.a, "/drafts/kid.ana"), 200);
    let sent = o(&mine)["sent"].as_array().unwrap();
    assert_eq!((sent.len(), o(&sent[0]).contains_key("envelope")), (1, false));
    // Someone else sees nothing of it.
    assert_eq!(refusal(&s.cy.get(&s.a, "/drafts/cy/away-1")), (404, "unknown_draft".into()));

    // The sender cannot approve its own draft.
    let by_kid = s.kid.post(&s.a, "/drafts/kid.ana/away-1/approve", &Value::Object(Object::new()));
    assert_eq!(refusal(&by_kid), (403, "not_the_approver".into()));

    // ana approves: it is queued in the same batch, and leaves once.
    let ok = json(&s.ana.post(&s.a, "/drafts/ana/away-1/approve", &Value::Object(Object::new())), 200);
    assert_eq!(o(&o(&ok)["draft"])["state"].as_str(), Some("approved"));
    assert_eq!(o(&ok)["jobs"].as_array().unwrap().len(), 1);
    s.w.tick_all();
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["away-1"]);
    // Twice is refused; the envelope sent again is the outbox's "exists"; bo still has one.
    let twice = s.ana.post(&s.a, "/drafts/ana/away-1/approve", &Value::Object(Object::new()));
    assert_eq!(refusal(&twice), (409, "draft_decided".into()));
    assert_eq!(o(&json(&s.kid.send(&s.a, &away), 200))["exists"], Value::Bool(true));
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["away-1"]);

    // A declined draft never leaves; the sender may withdraw its own.
    let no = s.kid.draft("away-2", &[&s.bo.address], "and this").sign(&s.kid.sig).unwrap();
    json(&s.kid.send(&s.a, &no), 202);
    let body = Value::parse_str(r#"{"note":"not to bo, please"}"#).unwrap();
    let declined = json(&s.ana.post(&s.a, "/drafts/ana/away-2/decline", &body), 200);
    assert_eq!(o(&o(&declined)["draft"])["note"].as_str(), Some("not to bo, please"));
    let late = s.ana.post(&s.a, "/drafts/ana/away-2/approve", &Value::Object(Object::new()));
    assert_eq!(refusal(&late), (409, "draft_decided".into()));
    let gone = s.kid.draft("away-3", &[&s.bo.address], "withdrawn").sign(&s.kid.sig).unwrap();
    json(&s.kid.send(&s.a, &gone), 202);
    json(&s.kid.post(&s.a, "/drafts/kid.ana/away-3/decline", &Value::Object(Object::new())), 200);
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["away-1"]);
}

#[test]
fn a_draft_expires_undecided_and_the_purge_takes_it_a_week_later() {
    let s = setup();
    json(&set_hold(&s.a, None, "ana", &hold("cy@a.test", r#"{"all":true}"#)), 200);
    let env = s.ana.draft_at("e-1", &[&s.bo.address], "x", s.a.now()).sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &env), 202);
    // A day (NYX5_APPROVAL_SECONDS' default) and a minute later it is expired, and stays so.
    s.w.clock.advance(86_400_000 + 60_000);
    let late = s.cy.post(&s.a, "/drafts/cy/e-1/approve", &Value::Object(Object::new()));
    assert_eq!(refusal(&late), (410, "draft_expired".into()));
    let listed = json(&s.cy.get(&s.a, "/drafts/cy"), 200);
    assert_eq!(o(&o(&listed)["asked"].as_array().unwrap()[0])["state"].as_str(), Some("expired"));
    // A week past its expiry the upkeep removes it and its ask.
    s.w.clock.advance(7 * 86_400_000 + 60_000);
    s.w.tick_all();
    let count = |sql: &'static str| block_on(s.a.db.query(stmt!(sql))).unwrap()[0].int("n").unwrap();
    assert_eq!(count("SELECT count(*) AS n FROM drafts"), 0);
    assert_eq!(count("SELECT count(*) AS n FROM draft_asks"), 0);
}

#[test]
fn a_sealed_draft_carries_each_approvers_key_and_they_read_what_leaves() {
    let s = setup();
    json(&set_hold(&s.a, Some(&s.ana), "kid.ana", &hold("ana@a.test", r#"{"domains":["b.test"]}"#)), 200);
    let clear = s.kid.draft("sealed-1", &[&s.bo.address], "the secret plan");
    let sealed = s.kid.seal(clear.clone(), &[&s.bo, &s.kid]);
    // The sender wraps its envelope's key for ana, apart, from its own copy.
    let cek = seal::content_key(&sealed, &s.kid.address, &s.kid.enc).unwrap();
    let mut n = 3u64;
    let mut rng = move |buf: &mut [u8]| {
        for b in buf.iter_mut() {
            n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            *b = (n >> 33) as u8;
        }
    };
    let readers =
        seal::wrap_for_readers(&sealed, &cek, &[(s.ana.address.clone(), s.ana.enc.public())], &mut rng).unwrap();
    // Without the approver's key: refused, nothing kept.
    assert_eq!(refusal(&s.kid.send(&s.a, &sealed)), (400, "approver_cannot_read".into()));
    // A key for someone else only: refused too.
    let wrong = seal::readers_to_value(&readers).canonical_string().replace("ana@a.test", "cy@a.test");
    let path = format!("/outbound?readers={}", b64::encode(wrong.as_bytes()));
    let token = s.kid.token(&s.a, "POST", &path, &sealed.canonical());
    let resp = call_raw(&s.a, "POST", &path, &[("authorization", &token)], sealed.canonical());
    assert_eq!(refusal(&resp), (400, "approver_cannot_read".into()));
    // With it: held.
    let path =
        format!("/outbound?readers={}", b64::encode(seal::readers_to_value(&readers).canonical_string().as_bytes()));
    let token = s.kid.token(&s.a, "POST", &path, &sealed.canonical());
    json(&call_raw(&s.a, "POST", &path, &[("authorization", &token)], sealed.canonical()), 202);
    // ana reads it with her key, and it is what bo will read.
    let one = json(&s.ana.get(&s.a, "/drafts/ana/sealed-1"), 200);
    let draft = o(&o(&one)["draft"]);
    let env = Envelope::from_object(o(&draft["envelope"]).clone()).unwrap();
    let key = seal::ReaderKey::from_value(&draft["key"], "key").unwrap();
    let read = seal::open_as_reader(&env, &key, &s.ana.enc).unwrap();
    assert_eq!(&read, clear.content().unwrap());
    assert!(matches!(env.payload(), Payload::Sealed(_)));
    // Approved, it reaches bo, who opens the same text.
    json(&s.ana.post(&s.a, "/drafts/ana/sealed-1/approve", &Value::Object(Object::new())), 200);
    s.w.tick_all();
    s.w.tick_all();
    let got = mailbox(&s.b, &s.bo);
    assert_eq!(ids(&got), ["sealed-1"]);
    assert_eq!(seal::open(&got[0], &s.bo.address, &s.bo.enc).unwrap(), read);
}

#[test]
fn who_may_set_change_and_lift_a_hold() {
    let s = setup();
    let strangers = hold("ana@a.test", r#"{"strangers":true}"#);
    // Someone outside the tree, or a subagent over its parent: no.
    assert_eq!(refusal(&set_hold(&s.a, Some(&s.cy), "kid.ana", &strangers)), (403, "not_your_hold".into()));
    assert_eq!(
        refusal(&set_hold(&s.a, Some(&s.kid), "ana", &hold("cy@a.test", r#"{"all":true}"#))),
        (403, "not_your_hold".into())
    );
    // The agent itself, once: then it can neither change nor lift it.
    json(&set_hold(&s.a, Some(&s.kid), "kid.ana", &strangers), 200);
    assert_eq!(
        refusal(&set_hold(&s.a, Some(&s.kid), "kid.ana", &hold("ana@a.test", r#"{"types":["task"]}"#))),
        (403, "hold_irrevocable".into())
    );
    assert_eq!(refusal(&lift_hold(&s.a, Some(&s.kid), "kid.ana")), (403, "hold_irrevocable".into()));
    // Its parent can, naming cy only once cy agreed (cy's allow list names ana); the operator can
    // lift anything, and what it sets the parent cannot lift.
    let by_cy = hold("cy@a.test", r#"{"all":true}"#);
    assert_eq!(refusal(&set_hold(&s.a, Some(&s.ana), "kid.ana", &by_cy)), (400, "bad_hold".into()));
    json(&s.cy.post(&s.a, "/lists/cy", &Value::parse_str(r#"{"allow":{"add":["ana@a.test"]}}"#).unwrap()), 200);
    json(&set_hold(&s.a, Some(&s.ana), "kid.ana", &by_cy), 200);
    assert_eq!(o(&json(&lift_hold(&s.a, Some(&s.ana), "kid.ana"), 200))["lifted"], Value::Bool(true));
    json(&set_hold(&s.a, None, "kid.ana", &strangers), 200);
    assert_eq!(refusal(&lift_hold(&s.a, Some(&s.ana), "kid.ana")), (403, "not_your_hold".into()));
    json(&lift_hold(&s.a, None, "kid.ana"), 200);
    // The approver is someone else of this house, and exists.
    for (approver, why) in
        [("kid.ana@a.test", "itself"), ("bo@b.test", "another house"), ("nobody@a.test", "no such agent")]
    {
        assert_eq!(
            refusal(&set_hold(&s.a, Some(&s.ana), "kid.ana", &hold(approver, r#"{"all":true}"#))),
            (400, "bad_hold".into()),
            "{why}"
        );
    }
    assert_eq!(
        refusal(&set_hold(&s.a, None, "ana", &hold("kid.ana@a.test", r#"{"all":true}"#))),
        (400, "bad_hold".into())
    );
    // A hold on ana covers her subagent too, and the holds over kid.ana are listed nearest first.
    json(&set_hold(&s.a, None, "ana", &hold("cy@a.test", r#"{"types":["task"]}"#)), 200);
    json(&set_hold(&s.a, Some(&s.ana), "kid.ana", &strangers), 200);
    let shown = json(&s.kid.get(&s.a, "/agents/kid.ana/hold"), 200);
    let on: Vec<&str> = o(&shown)["holds"].as_array().unwrap().iter().map(|h| o(h)["on"].as_str().unwrap()).collect();
    assert_eq!(on, ["kid.ana@a.test", "ana@a.test"]);
    assert_eq!(refusal(&s.cy.get(&s.a, "/agents/kid.ana/hold")), (403, "not_your_hold".into()));
    // A task to bo from kid.ana is held by both: it waits for ana and for cy.
    let task = {
        let mut d = nyx5_proto::envelope::Draft::new(
            "t-1".into(),
            s.kid.address.clone(),
            vec![s.bo.address.clone()],
            s.a.now(),
            nyx5_proto::envelope::Content::new("text/plain", "do it".into()),
        );
        d.kind = nyx5_proto::envelope::Kind::Task;
        d.build().unwrap().sign(&s.kid.sig).unwrap()
    };
    let held = json(&s.kid.send(&s.a, &task), 202);
    assert_eq!(o(&o(&held)["draft"])["asks"].canonical_string(), r#"["ana@a.test","cy@a.test"]"#);
    let first = json(&s.cy.post(&s.a, "/drafts/cy/t-1/approve", &Value::Object(Object::new())), 200);
    assert_eq!(o(&o(&first)["draft"])["state"].as_str(), Some("pending"), "one yes of two");
    s.w.tick_all();
    assert!(mailbox(&s.b, &s.bo).is_empty());
    json(&s.ana.post(&s.a, "/drafts/ana/t-1/approve", &Value::Object(Object::new())), 200);
    s.w.tick_all();
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["t-1"]);
    let _ = &s.b;
}

/// A hold set between the house's judging of a send and its batch: the outbox's trigger sees
/// the tree's holds changed, and the send fails whole instead of slipping past the new hold.
#[test]
fn a_hold_set_while_a_send_is_judged_fails_that_send() {
    let s = setup();
    // A hold that does not cover plain messages: sends are judged and pass.
    json(&set_hold(&s.a, None, "ana", &hold("cy@a.test", r#"{"types":["task"]}"#)), 200);
    let first = s.kid.draft("r-1", &[&s.bo.address], "one").sign(&s.kid.sig).unwrap();
    json(&s.kid.send(&s.a, &first), 202);
    // Now, between the judging and the queueing batch (the second batch of the send), a hold
    // on kid.ana that covers everything is set.
    // The first batch (the outbox refusing an unjudged row) passes untouched; the hook it runs
    // sets the one before the next.
    let a = s.a.clone();
    s.a.db.before_next_batch(move |_| {
        a.db.before_next_batch(move |db| {
            let stmts = vec![stmt!(
                "INSERT INTO mail_holds (local, root, approver, rule, set_by, set_at) \
                 VALUES ('kid.ana', 'ana@a.test', 'ana@a.test', '{\"all\":true}', 'operator', 0)"
            )];
            block_on(db.batch(stmts)).unwrap();
        });
    });
    let second = s.kid.draft("r-2", &[&s.bo.address], "two").sign(&s.kid.sig).unwrap();
    let raced = s.kid.send(&s.a, &second);
    assert_eq!(refusal(&raced), (409, "hold_changed".into()));
    // Sent again, it is held for ana now; only r-1 ever reaches bo.
    let again = json(&s.kid.send(&s.a, &second), 202);
    assert_eq!(o(&o(&again)["draft"])["state"].as_str(), Some("pending"));
    s.w.tick_all();
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.b, &s.bo)), ["r-1"]);
    // No path into the outbox skips the hold: a row written straight in, unjudged, is refused.
    let straight = block_on(s.a.db.batch(vec![stmt!(
        "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, created_at) \
         VALUES ('ana@a.test', 1, 'sneak', 'kid.ana@a.test', '{}', 'x', 0)"
    )]));
    assert!(format!("{straight:?}").contains("outbox_held"), "{straight:?}");
}

/// Email through the bridge meets the same holds: one a hold covers is refused (an email cannot
/// wait as a draft), any other is sent as before; and its table too refuses a row of a held tree
/// written without judging.
#[test]
fn an_email_a_hold_covers_is_refused_and_others_go() {
    let s = setup();
    json(&set_hold(&s.a, Some(&s.ana), "kid.ana", &hold("ana@a.test", r#"{"domains":["example.com"]}"#)), 200);
    let email = |to: &str| Value::parse_str(&format!(r#"{{"to":"{to}","body":"hello"}}"#)).unwrap();
    assert_eq!(refusal(&s.kid.post(&s.a, "/email/out", &email("pat@example.com"))), (403, "email_held".into()));
    json(&s.kid.post(&s.a, "/email/out", &email("pat@other.org")), 202);
    // A hold on the parent covers the subagent's email too.
    json(&set_hold(&s.a, None, "ana", &hold("cy@a.test", r#"{"all":true}"#)), 200);
    assert_eq!(refusal(&s.kid.post(&s.a, "/email/out", &email("pat@other.org"))), (403, "email_held".into()));
    // cy's mail is not held at all.
    json(&s.cy.post(&s.a, "/email/out", &email("pat@example.com")), 202);
    let count = |sql: &'static str| block_on(s.a.db.query(stmt!(sql))).unwrap()[0].int("n").unwrap();
    assert_eq!(count("SELECT count(*) AS n FROM email_out"), 2);
    let straight = block_on(s.a.db.batch(vec![stmt!(
        "INSERT INTO email_out (id, sender, recipient, subject, body, request, state, next_attempt, deadline, created_at) \
         VALUES ('sneak', 'kid.ana@a.test', 'pat@example.com', 's', 'b', 'r', 'pending', 0, 0, 0)"
    )]));
    assert!(format!("{straight:?}").contains("email_out_held"), "{straight:?}");
}

/// A subagent of `parent` named `name.<parent>`, registered with its parent's delegation.
fn subagent(house: &TestHouse, parent: &Agent, name: &str, seed: u8) -> Agent {
    let child = Agent::new(&format!("{name}.{}", parent.address), seed);
    let scope = Scope { types: None, to_domains: None, cap: None, authority: None };
    let d =
        Delegation::sign(&parent.address, &child.address, &child.sig.public(), &scope, None, house.now(), &parent.sig)
            .unwrap();
    let reg = child.registration(house, &[("delegation", d.to_value())]);
    assert_eq!(call(house, "POST", "/agents", &[], &reg).status, 201, "{}", child.address);
    child
}

/// The ways out the hostile review found: a subagent deeper than any chain walked, a local
/// recipient whose webhook pushes elsewhere, an operation whose receipts reach whoever it names,
/// and the agent's own envelope handed straight to `/inbound`. Each waits for approval.
#[test]
fn no_way_out_skips_a_hold() {
    let s = setup();
    json(&set_hold(&s.a, None, "ana", &hold("cy@a.test", r#"{"strangers":true}"#)), 200);
    // 18 labels deep: still under ana's hold.
    let mut deep = Agent::new("ana@a.test", 10);
    for i in 0..17u8 {
        deep = subagent(&s.a, &deep, "d", 40 + i);
    }
    assert_eq!(deep.address.local().split('.').count(), 18);
    let away = deep.draft("deep-1", &[&s.bo.address], "out").sign(&deep.sig).unwrap();
    assert_eq!(o(&json(&deep.send(&s.a, &away), 202))["draft"].as_object().unwrap()["state"].as_str(), Some("pending"));
    let email = Value::parse_str(r#"{"to":"pat@example.com","body":"hello"}"#).unwrap();
    assert_eq!(refusal(&deep.post(&s.a, "/email/out", &email)), (403, "email_held".into()));

    // A local agent whose webhook pushes elsewhere is a stranger there.
    let hooked = Agent::new("hook@a.test", 60);
    let body = hooked.registration(&s.a, &[("webhook", "https://evil.example/h".into())]);
    assert_eq!(call(&s.a, "POST", "/agents", &[("authorization", &op(&s.a))], &body).status, 201);
    let to_hook = s.ana.draft("hook-1", &[&hooked.address], "secret").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &to_hook), 202);
    // One without a webhook is no stranger.
    let to_cy = s.ana.draft("cy-1", &[&s.cy.address], "hi").sign(&s.ana.sig).unwrap();
    let queued = json(&s.ana.send(&s.a, &to_cy), 202);
    assert!(o(&queued).contains_key("jobs") && !o(&queued).contains_key("draft"));

    // An operation for the Libro reaches whoever it names.
    let libro = Address::parse("libro@a.test").unwrap();
    let mut d = nyx5_proto::envelope::Draft::new(
        "op-1".into(),
        s.ana.address.clone(),
        vec![libro],
        s.a.now(),
        nyx5_proto::envelope::Content::new(nyx5_proto::ops::MEDIA, Value::parse_str(r#"{"op":"balance"}"#).unwrap()),
    );
    d.kind = nyx5_proto::envelope::Kind::Task;
    let op_env = d.build().unwrap().sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &op_env), 202);
    let listed = json(&s.cy.get(&s.a, "/drafts/cy"), 200);
    let mut ids: Vec<&str> =
        o(&listed)["asked"].as_array().unwrap().iter().map(|d| o(d)["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["deep-1", "hook-1", "op-1"]);

    // Handed straight to /inbound, past the outbox: refused while a hold stands.
    let direct = s.ana.draft("direct-1", &[&s.cy.address], "direct").sign(&s.ana.sig).unwrap();
    let resp = call_raw(&s.a, "POST", "/inbound", &[], direct.canonical());
    assert_eq!(refusal(&resp), (403, "relay_required".into()));
    s.w.tick_all();
    s.w.tick_all();
    assert!(mailbox(&s.b, &s.bo).is_empty());
    assert_eq!(ids_of(&mailbox(&s.a, &hooked)), Vec::<&str>::new());
}

fn ids_of(list: &[Envelope]) -> Vec<&str> {
    list.iter().map(Envelope::id).collect()
}

/// A hold that changes declines what waited under the old one (its old approver can no longer
/// let it go, nor read it); an agent holding itself names only someone above it or someone who
/// agreed; drafts count in the sender's minute; the house's own agents neither approve nor are
/// held.
#[test]
fn a_changed_hold_declines_what_waited_and_approvers_agree_first() {
    let w = World::new();
    let mut config = w.config("a.test", Registration::Admin);
    config.outbound_per_agent_per_minute = 3;
    let a = w.start(config);
    let ana = Agent::new("ana@a.test", 10);
    let cy = Agent::new("cy@a.test", 11);
    let dee = Agent::new("dee@a.test", 12);
    for x in [&ana, &cy, &dee] {
        assert_eq!(x.register_admin(&a).status, 201);
    }
    let kid = subagent(&a, &ana, "kid", 30);
    let bo = Address::parse("bo@b.test").unwrap();
    let allow_ana = Value::parse_str(r#"{"allow":{"add":["ana@a.test"]}}"#).unwrap();
    json(&cy.post(&a, "/lists/cy", &allow_ana), 200);
    json(&dee.post(&a, "/lists/dee", &allow_ana), 200);
    json(&set_hold(&a, Some(&ana), "kid.ana", &hold("cy@a.test", r#"{"all":true}"#)), 200);
    let env = kid.draft_at("w-1", &[&bo], "x", a.now()).sign(&kid.sig).unwrap();
    json(&kid.send(&a, &env), 202);
    // The parent replaces the approver: the draft is declined, and cy sees no envelope of it.
    json(&set_hold(&a, Some(&ana), "kid.ana", &hold("dee@a.test", r#"{"all":true}"#)), 200);
    let by_cy = cy.post(&a, "/drafts/cy/w-1/approve", &Value::Object(Object::new()));
    assert_eq!(refusal(&by_cy), (409, "draft_decided".into()));
    let seen = json(&cy.get(&a, "/drafts/cy/w-1"), 200);
    let draft = o(&o(&seen)["draft"]);
    assert_eq!(draft["state"].as_str(), Some("declined"));
    assert!(!draft.contains_key("envelope") && !draft.contains_key("key"));
    assert!(draft["note"].as_str().unwrap().contains("send it as a new envelope"));
    // Sent again (a new id), it waits for dee.
    let again = kid.draft_at("w-2", &[&bo], "x", a.now()).sign(&kid.sig).unwrap();
    assert_eq!(o(&o(&json(&kid.send(&a, &again), 202))["draft"])["asks"].canonical_string(), r#"["dee@a.test"]"#);

    // Drafts count in the minute: 3 a minute here (w-2 was the second).
    let third = kid.draft_at("w-3", &[&bo], "x", a.now()).sign(&kid.sig).unwrap();
    json(&kid.send(&a, &third), 202);
    let fourth = kid.draft_at("w-4", &[&bo], "x", a.now()).sign(&kid.sig).unwrap();
    assert_eq!(refusal(&kid.send(&a, &fourth)), (429, "too_many_sends".into()));
    // The same envelope again is still the draft kept, not a refusal.
    assert_eq!(o(&json(&kid.send(&a, &third), 200))["exists"], Value::Bool(true));

    // dee holding herself may name ana only once ana agreed (her allow list).
    let self_hold = hold("ana@a.test", r#"{"all":true}"#);
    let refused = set_hold(&a, Some(&dee), "dee", &self_hold);
    assert_eq!(refusal(&refused), (400, "bad_hold".into()));
    let allow = Value::parse_str(r#"{"allow":{"add":["dee@a.test"]}}"#).unwrap();
    json(&ana.post(&a, "/lists/ana", &allow), 200);
    json(&set_hold(&a, Some(&dee), "dee", &self_hold), 200);
    // The house's own agents neither approve nor are held.
    assert_eq!(refusal(&set_hold(&a, None, "ana", &hold("libro@a.test", r#"{"all":true}"#))), (400, "bad_hold".into()));
    assert_eq!(refusal(&set_hold(&a, None, "libro", &hold("ana@a.test", r#"{"all":true}"#))), (400, "bad_hold".into()));
}

/// The second review's ways out: a webhook read as the fetch reads it (a backslash ends the
/// host), a webhook set after the send (judged when the push happens), and members the approver
/// is not shown (inside `signature`); and what lists and decisions answer carries no envelope.
#[test]
fn webhooks_are_judged_as_fetched_and_when_pushed() {
    let s = setup();
    json(&set_hold(&s.a, None, "ana", &hold("cy@a.test", r#"{"strangers":true}"#)), 200);
    let pushed = std::rc::Rc::new(std::cell::RefCell::new(0usize));
    let seen = pushed.clone();
    s.w.fake("hook.test", move |_| {
        *seen.borrow_mut() += 1;
        nyx5_house::ports::OutResponse { status: 200, body: vec![] }
    });
    // A webhook whose host a naive reading takes for this house's: the fetch goes to evil.example.
    let tricky = Agent::new("tricky@a.test", 61);
    let body = tricky.registration(&s.a, &[("webhook", "https://evil.example\\@a.test/".into())]);
    assert_eq!(call(&s.a, "POST", "/agents", &[("authorization", &op(&s.a))], &body).status, 201);
    let env = s.ana.draft("t-1", &[&tricky.address], "x").sign(&s.ana.sig).unwrap();
    assert!(o(&json(&s.ana.send(&s.a, &env), 202)).contains_key("draft"), "held: its webhook is a stranger's");
    // A webhook set after the send: the mail is delivered, and not pushed.
    let sink = Agent::new("sink@a.test", 62);
    assert_eq!(sink.register_admin(&s.a).status, 201);
    let env = s.ana.draft("late-1", &[&sink.address], "for the sink").sign(&s.ana.sig).unwrap();
    assert!(o(&json(&s.ana.send(&s.a, &env), 202)).contains_key("jobs"), "no webhook yet: no stranger");
    let update = sink.registration(&s.a, &[("webhook", "http://hook.test/sink".into())]);
    let token = sink.token(&s.a, "POST", "/agents", &update.canonical());
    assert_eq!(call(&s.a, "POST", "/agents", &[("authorization", &token)], &update).status, 200);
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.a, &sink)), ["late-1"], "delivered: the mailbox is the record");
    assert_eq!(*pushed.borrow(), 0, "not pushed past ana's hold");
    // Mail from cy, who is not held, is pushed as ever.
    let free = s.cy.draft("free-1", &[&sink.address], "hello").sign(&s.cy.sig).unwrap();
    json(&s.cy.send(&s.a, &free), 202);
    s.w.tick_all();
    assert_eq!(*pushed.borrow(), 1);
    // An approved draft is judged at the push too: ana's hold said strangers, and the sink's
    // webhook is one, whoever approved the mail for the sink.
    let nosy = Agent::new("nosy@a.test", 63);
    let body = nosy.registration(&s.a, &[("webhook", "https://evil.example/n".into())]);
    assert_eq!(call(&s.a, "POST", "/agents", &[("authorization", &op(&s.a))], &body).status, 201);
    let approved = s.ana.draft("ok-1", &[&nosy.address], "approved for nosy").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &approved), 202);
    json(&s.cy.post(&s.a, "/drafts/cy/ok-1/approve", &Value::Object(Object::new())), 200);
    s.w.tick_all();
    assert_eq!(ids(&mailbox(&s.a, &nosy)), ["ok-1"], "delivered to the mailbox it was approved for");
    assert_eq!(s.w.sent_to("evil.example"), 0, "and not pushed past the hold");

    // A held envelope carrying a member of its own in `signature` is refused: nobody would see it.
    let plain = s.ana.draft("sig-1", &[&s.bo.address], "hi").sign(&s.ana.sig).unwrap();
    let mut raw = plain.object().clone();
    let mut sig = raw["signature"].as_object().unwrap().clone();
    sig.insert("x".into(), "the secret".into());
    raw.insert("signature".into(), Value::Object(sig));
    let smuggled = Envelope::from_object(raw).unwrap();
    assert_eq!(refusal(&s.ana.send(&s.a, &smuggled)), (400, "bad_member".into()));

    // Lists and decisions never carry the envelope; one draft, read alone, does.
    let held = s.ana.draft("list-1", &[&s.bo.address], "listed").sign(&s.ana.sig).unwrap();
    json(&s.ana.send(&s.a, &held), 202);
    let listed = json(&s.cy.get(&s.a, "/drafts/cy"), 200);
    for d in o(&listed)["asked"].as_array().unwrap() {
        assert!(!o(d).contains_key("envelope") && o(d)["to"].as_array().is_some(), "{d:?}");
    }
    assert!(o(&o(&json(&s.cy.get(&s.a, "/drafts/cy/list-1"), 200))["draft"]).contains_key("envelope"));
    let decided = json(&s.cy.post(&s.a, "/drafts/cy/list-1/approve", &Value::Object(Object::new())), 200);
    assert!(!o(&o(&decided)["draft"]).contains_key("envelope"));
}
