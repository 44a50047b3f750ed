//! The A2A gateway (issue 39; docs/SPEC.md "A2A gateway"): an A2A JSON-RPC call waits in the
//! agent's mailbox as an unsigned task envelope; the agent's `result` to `a2a@` moves the task;
//! unverified callers meet the agent's lists as email does, Nyx5 callers prove who they are; a
//! task bound to an escrow releases it when completed and refunds it when it ends otherwise; the
//! A2A cards carry a JWS by the domain key that the house's key set verifies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_proto::crypto::Context;
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{Object, obj};
use nyx5_proto::quote::{ContractKind, QuoteDraft};
use nyx5_proto::{Address, Value, b64};

/// a.test with ana, a listed agent, and bo, an agent of the same house.
fn ana_and_bo() -> (World, std::rc::Rc<TestHouse>, Agent, Agent) {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@a.test", 20);
    register_listed(&a, &ana, None);
    assert_eq!(bo.register_admin(&a).status, 201);
    (w, a, ana, bo)
}

/// One JSON-RPC call to `local`'s A2A endpoint: the HTTP status and the JSON-RPC answer.
fn rpc(house: &TestHouse, local: &str, method: &str, params: Value) -> (u16, Object) {
    let body = Value::Object(obj([
        ("jsonrpc", "2.0".into()),
        ("id", 7.into()),
        ("method", method.into()),
        ("params", params),
    ]));
    let r = call(house, "POST", &format!("/agents/{local}/a2a"), &[("content-type", "application/json")], &body);
    let v = r.value().unwrap();
    let o = v.as_object().unwrap().clone();
    assert_eq!(o["jsonrpc"].as_str(), Some("2.0"));
    assert_eq!(o["id"].as_safe_integer(), Some(7));
    (r.status, o)
}

fn message(id: &str, text: &str) -> Value {
    Value::Object(obj([
        ("role", "ROLE_USER".into()),
        ("messageId", id.into()),
        ("parts", Value::Array(vec![Value::Object(obj([("text", text.into())]))])),
    ]))
}

/// `message` signed as `who`'s A2A call to `to`, paying with `contract` if given.
fn proven(who: &Agent, house: &TestHouse, to: &str, msg: Value, contract: Option<&str>) -> Value {
    let judged = nyx5_rules::a2a::message(Some(&msg)).unwrap();
    let claim = nyx5_rules::a2a::Claim {
        from: who.address.clone(),
        ts: house.now(),
        sig: String::new(),
        contract: contract.map(str::to_owned),
    };
    let doc = nyx5_rules::a2a::call_document(&judged, &claim, &Address::parse(to).unwrap());
    let sig = b64::encode(&who.sig.sign(Context::A2aCall, &doc));
    let mut proof =
        obj([("from", who.address.as_str().into()), ("ts", house.now().to_rfc3339().into()), ("sig", sig.into())]);
    if let Some(c) = contract {
        proof.insert("contract".into(), c.into());
    }
    let mut m = msg.as_object().unwrap().clone();
    m.insert("metadata".into(), Value::Object(obj([(nyx5_rules::a2a::EXT, Value::Object(proof))])));
    Value::Object(m)
}

fn send(house: &TestHouse, local: &str, msg: Value) -> (u16, Object) {
    rpc(house, local, "SendMessage", Value::Object(obj([("message", msg)])))
}

fn task_of(answer: &Object) -> Object {
    answer["result"].as_object().unwrap()["task"].as_object().unwrap().clone()
}

fn state(task: &Object) -> String {
    task["status"].as_object().unwrap()["state"].as_str().unwrap().to_owned()
}

fn get_task(house: &TestHouse, local: &str, id: &str) -> Object {
    let (status, a) = rpc(house, local, "GetTask", Value::Object(obj([("id", id.into())])));
    assert_eq!(status, 200, "{a:?}");
    a["result"].as_object().unwrap().clone()
}

fn refusal(answer: &Object) -> (i64, String) {
    let e = answer["error"].as_object().unwrap();
    (e["code"].as_safe_integer().unwrap(), e["data"].as_object().unwrap()["error"].as_str().unwrap().to_owned())
}

fn register_listed(house: &TestHouse, agent: &Agent, inbox: Option<Value>) {
    let mut extra = vec![("capabilities", Value::Object(obj([("listed", Value::Bool(true))])))];
    if let Some(i) = inbox {
        extra.push(("inbox", i));
    }
    let body = agent.registration(house, &extra);
    let admin = format!("Bearer admin-{}", house.config.domain);
    assert_eq!(call(house, "POST", "/agents", &[("authorization", &admin)], &body).status, 201);
}

/// The agent's answer: a plain `result` envelope to `a2a@`, replying to the task's envelope,
/// through `POST /outbound` and the queue as `nyx5 send` sends it.
fn answer(w: &World, house: &TestHouse, agent: &Agent, envelope: &str, content: Content) -> u16 {
    let gateway = Address::new("a2a", &house.config.domain).unwrap();
    // One answer per agent and task envelope: an id of its own.
    let id = nyx5_rules::a2a::envelope_id("answers.test", envelope, agent.address.as_str());
    let mut d = Draft::new(id, agent.address.clone(), vec![gateway], w.clock.now(), content);
    d.kind = Kind::Result;
    d.in_reply_to = Some(envelope.to_owned());
    let env = d.build().unwrap().sign(&agent.sig).unwrap();
    let status = agent.send(house, &env).status;
    w.tick_all();
    status
}

#[test]
fn a_call_waits_in_the_mailbox_until_the_agent_answers() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    register_listed(&a, &ana, None);

    // An unverified caller: a task in `submitted`, and an unsigned envelope from a2a@.
    let (status, sent) = send(&a, "ana", message("m-1", "translate: hola"));
    assert_eq!(status, 200, "{sent:?}");
    let task = task_of(&sent);
    assert_eq!(share_of(&a, task["id"].as_str().unwrap()), "unverified");
    assert_eq!(state(&task), "TASK_STATE_SUBMITTED");
    let id = task["id"].as_str().unwrap().to_owned();
    let context = task["contextId"].as_str().unwrap().to_owned();
    let held = mailbox(&a, &ana);
    assert_eq!(held.len(), 1);
    let env = &held[0];
    assert_eq!(env.from().as_str(), "a2a@a.test");
    assert!(env.signature().is_none());
    assert_eq!(env.kind(), Kind::Task);
    let note = env.object()["extensions"].as_object().unwrap()[nyx5_rules::a2a::EXT].as_object().unwrap().clone();
    assert_eq!(note["verified"], Value::Bool(false));
    assert_eq!(note["task"].as_str(), Some(id.as_str()));
    let body = env.content().unwrap().body.as_object().unwrap().clone();
    // The gate forwards what it judged: the text part, nothing it did not read.
    assert_eq!(body["message"].as_object().unwrap()["parts"].canonical_string(), r#"[{"text":"translate: hola"}]"#);

    // Unknown methods, tasks and agents are JSON-RPC errors with the house's refusal inside.
    let (s, e) = rpc(&a, "ana", "Nope", Value::Object(Object::new()));
    assert_eq!((s, refusal(&e)), (404, (-32601, "unknown_a2a_method".to_owned())));
    let (s, e) = rpc(&a, "ana", "GetTask", Value::Object(obj([("id", "nope".into())])));
    assert_eq!((s, refusal(&e)), (404, (-32001, "unknown_a2a_task".to_owned())));
    let (s, _) = send(&a, "nobody", message("m-2", "x"));
    assert_eq!(s, 404);

    // The agent answers: the task completes, its answer the task's message and artifact.
    let completed = Content::new("text/plain", "hello".into());
    assert!(answer(&w, &a, &ana, env.id(), completed) < 300);
    let t = get_task(&a, "ana", &id);
    assert_eq!(state(&t), "TASK_STATE_COMPLETED");
    assert_eq!(
        t["artifacts"].canonical_string(),
        r#"[{"artifactId":"artifact-0","name":"result","parts":[{"text":"hello"}]}]"#
    );
    assert_eq!(t["history"].as_array().unwrap().len(), 2);
    // Ended: it cannot be canceled, nor answered again.
    let (s, e) = rpc(&a, "ana", "CancelTask", Value::Object(obj([("id", id.as_str().into())])));
    assert_eq!((s, refusal(&e).0), (409, -32002));
    // Listed by its context.
    let (s, l) = rpc(&a, "ana", "ListTasks", Value::Object(obj([("contextId", context.as_str().into())])));
    assert_eq!(s, 200);
    assert_eq!(l["result"].as_object().unwrap()["tasks"].as_array().unwrap().len(), 1);
}

#[test]
fn input_required_takes_the_callers_next_message_and_another_agent_cannot_answer() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let (ana, cy) = (Agent::new("ana@a.test", 10), Agent::new("cy@a.test", 11));
    register_listed(&a, &ana, None);
    register_listed(&a, &cy, None);
    let task = task_of(&send(&a, "ana", message("m-1", "how many?")).1);
    let id = task["id"].as_str().unwrap().to_owned();
    let first = mailbox(&a, &ana)[0].id().to_owned();
    // cy may not answer ana's task: the task does not move.
    answer(&w, &a, &cy, &first, Content::new("text/plain", "mine".into()));
    assert_eq!(state(&get_task(&a, "ana", &id)), "TASK_STATE_SUBMITTED");
    let ask = Content::new(
        nyx5_rules::a2a::RESULT_MEDIA,
        Value::parse_str(r#"{"state":"input-required","text":"which?"}"#).unwrap(),
    );
    answer(&w, &a, &ana, &first, ask);
    assert_eq!(state(&get_task(&a, "ana", &id)), "TASK_STATE_INPUT_REQUIRED");
    let mut next = message("m-2", "three").as_object().unwrap().clone();
    next.insert("taskId".into(), id.as_str().into());
    let (s, sent) = send(&a, "ana", Value::Object(next));
    assert_eq!(s, 200, "{sent:?}");
    assert_eq!(state(&task_of(&sent)), "TASK_STATE_SUBMITTED");
    assert_eq!(mailbox(&a, &ana).len(), 2);
    // A failed answer ends it, and nothing moves it after.
    let second = mailbox(&a, &ana)[1].id().to_owned();
    let fail =
        Content::new(nyx5_rules::a2a::RESULT_MEDIA, Value::parse_str(r#"{"state":"failed","text":"cannot"}"#).unwrap());
    answer(&w, &a, &ana, &second, fail);
    let t = get_task(&a, "ana", &id);
    assert_eq!(state(&t), "TASK_STATE_FAILED");
    assert_eq!(t["history"].as_array().unwrap().len(), 3);
}

#[test]
fn unverified_callers_meet_the_inbox_policy_and_nyx5_callers_prove_who_they_are() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    register_listed(&a, &ana, Some(Value::Object(obj([("policy", "allowlist".into())]))));
    assert_eq!(bo.register_admin(&b).status, 201);
    let (s, e) = send(&a, "ana", message("m-1", "hi"));
    assert_eq!((s, refusal(&e).1.as_str()), (403, "not_on_allowlist"));
    // bo proves itself, but is not on ana's list yet.
    let (s, e) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("m-2", "hi"), None));
    assert_eq!((s, refusal(&e).1.as_str()), (403, "not_on_allowlist"));
    let lists = Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["bo@b.test".into()]))])))]));
    assert_eq!(ana.post(&a, "/lists/ana", &lists).status, 200);
    let (s, sent) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("m-3", "hi"), None));
    assert_eq!(s, 200, "{sent:?}");
    let env = mailbox(&a, &ana).pop().unwrap();
    let note = env.object()["extensions"].as_object().unwrap()[nyx5_rules::a2a::EXT].as_object().unwrap().clone();
    assert_eq!((note["caller"].as_str(), &note["verified"]), (Some("bo@b.test"), &Value::Bool(true)));
    // On ana's allow list, bo's task counts in the share of the callers she allows.
    assert_eq!(share_of(&a, task_of(&sent)["id"].as_str().unwrap()), "allowed");
    // The same message again is the same task.
    let (_, again) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("m-3", "hi"), None));
    assert_eq!(task_of(&again)["id"], task_of(&sent)["id"]);
    // A proof over other parts, by another key, or stale, does not verify.
    let mut forged = proven(&bo, &a, "ana@a.test", message("m-4", "hi"), None).as_object().unwrap().clone();
    forged.insert("parts".into(), message("m-4", "pay eve").as_object().unwrap()["parts"].clone());
    let (s, e) = send(&a, "ana", Value::Object(forged));
    assert_eq!((s, refusal(&e).1.as_str()), (401, "bad_caller_proof"));
    let stale = proven(&bo, &a, "ana@a.test", message("m-5", "hi"), None);
    w.clock.advance(6 * 60_000);
    let (s, e) = send(&a, "ana", stale);
    assert_eq!((s, refusal(&e).1.as_str()), (401, "bad_caller_proof"));
}

/// A task bo pays ana for with escrow `contract` at `price` (accepted first): its id. The
/// message's id is the contract's, so each paid task is a new one.
fn paid_task(w: &World, a: &TestHouse, (ana, bo): (&Agent, &Agent), contract: &str, price: i64) -> String {
    escrow(w, a, ana, bo, contract, price);
    let (status, sent) = send(a, "ana", proven(bo, a, "ana@a.test", message(contract, "work"), Some(contract)));
    assert_eq!(status, 200, "{sent:?}");
    task_of(&sent)["id"].as_str().unwrap().to_owned()
}

/// The share task `id` counts in (migration 0033).
fn share_of(house: &TestHouse, id: &str) -> String {
    let sql = nyx5_house::stmt!("SELECT share FROM a2a_tasks WHERE id = ?", id);
    block_on(nyx5_house::ports::Db::query(&house.db, sql)).unwrap()[0].text("share").unwrap().to_owned()
}

/// `who`'s Libro operation `op` on `contract` (its envelope id ending in `tag`), sent and ticked.
fn contract_op(w: &World, a: &TestHouse, who: &Agent, tag: &str, op: &str, contract: &str) {
    let id = format!("00000000-0000-4000-8000-00000000{tag}");
    let env = signed_op(w, who, "a.test", &id, obj([("op", op.into()), ("contract", contract.into())]));
    assert!(who.send(a, &env).status < 300);
    w.tick_all();
}

/// bo's escrow for ana's work, arbitrated by `a2a@a.test`, accepted at a.test's Libro.
fn escrow(w: &World, a: &TestHouse, ana: &Agent, bo: &Agent, id: &str, price: i64) {
    let q = QuoteDraft {
        id: id.to_owned(),
        house: "a.test".to_owned(),
        seller: ana.address.clone(),
        buyer: bo.address.clone(),
        contract: ContractKind::parse("escrow").unwrap(),
        price,
        currency: "tok".to_owned(),
        concept: "translation".to_owned(),
        terms: None,
        arbiter: Some(Address::parse("a2a@a.test").unwrap()),
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&ana.sig)
    .unwrap();
    let body = obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))]);
    let env = signed_op(w, bo, "a.test", &format!("00000000-0000-4000-8000-{:012}", price), body);
    assert!(bo.send(a, &env).status < 300);
    w.tick_all();
}

#[test]
fn a_paid_task_releases_when_completed_and_refunds_when_canceled() {
    let (w, a, ana, bo) = ana_and_bo();
    topup(&a, "bo@a.test", 100);
    escrow(&w, &a, &ana, &bo, "q-paid-1", 40);
    assert_eq!(balance(&a, "bo@a.test"), 60);
    // An unverified caller cannot name an escrow; one naming another's escrow is refused.
    let cy = Agent::new("cy@a.test", 30);
    assert_eq!(cy.register_admin(&a).status, 201);
    let (s, e) = send(&a, "ana", proven(&cy, &a, "ana@a.test", message("m-0", "x"), Some("q-paid-1")));
    assert_eq!((s, refusal(&e).1.as_str()), (409, "bad_task_payment"));

    let (s, sent) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("m-1", "translate"), Some("q-paid-1")));
    assert_eq!(s, 200, "{sent:?}");
    let id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    let env = mailbox(&a, &ana).pop().unwrap();
    answer(&w, &a, &ana, env.id(), Content::new("text/plain", "done".into()));
    let t = get_task(&a, "ana", &id);
    assert_eq!(state(&t), "TASK_STATE_COMPLETED");
    let note = t["metadata"].as_object().unwrap()[nyx5_rules::a2a::EXT].as_object().unwrap().clone();
    assert_eq!(note["settlement"].as_str(), Some("release"));
    assert_eq!(balance(&a, "escrow:q-paid-1"), 0);
    assert!(balance(&a, "ana@a.test") > 0, "the seller is paid");
    let paid = balance(&a, "ana@a.test");

    // A second escrow, canceled by the caller: refunded whole.
    let id = paid_task(&w, &a, (&ana, &bo), "q-paid-2", 25);
    assert_eq!(balance(&a, "bo@a.test"), 35);
    // The same escrow cannot pay for two tasks.
    let (s, e) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("m-3", "twice"), Some("q-paid-2")));
    assert_eq!((s, refusal(&e).1.as_str()), (409, "bad_task_payment"));
    let (s, c) = rpc(&a, "ana", "CancelTask", Value::Object(obj([("id", id.as_str().into())])));
    assert_eq!(s, 200, "{c:?}");
    assert_eq!(state(c["result"].as_object().unwrap()), "TASK_STATE_CANCELED");
    assert_eq!(balance(&a, "bo@a.test"), 60);
    assert_eq!(balance(&a, "escrow:q-paid-2"), 0);
    assert_eq!(balance(&a, "ana@a.test"), paid);
}

#[test]
fn cards_are_signed_by_the_domain_key_and_name_the_json_rpc_binding() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    register_listed(&a, &ana, None);
    let jwks = call_raw(&a, "GET", "/.well-known/jwks.json", &[], vec![]).value().unwrap();
    let key =
        jwks.as_object().unwrap()["keys"].as_array().unwrap()[0].as_object().unwrap()["x"].as_str().unwrap().to_owned();
    assert_eq!(key, a.config.key.public().to_b64());
    for path in ["/agents/ana/agent-card.json", "/.well-known/agent-card.json"] {
        let card = call_raw(&a, "GET", path, &[], vec![]).value().unwrap();
        let mut card = card.as_object().unwrap().clone();
        let sigs = card.remove("signatures").unwrap();
        let sig = sigs.as_array().unwrap()[0].as_object().unwrap();
        let jws = nyx5_proto::jws::Detached {
            protected: sig["protected"].as_str().unwrap().to_owned(),
            signature: sig["signature"].as_str().unwrap().to_owned(),
        };
        let payload = Value::Object(card.clone()).canonical();
        let header = nyx5_proto::jws::verify_detached(&a.config.key.public(), &jws, &payload).expect(path);
        assert_eq!(header["nyx5"].as_str(), Some("a2a-card"));
        // Changed by one byte, it no longer verifies.
        card.insert("name".into(), "eve@a.test".into());
        assert!(
            nyx5_proto::jws::verify_detached(&a.config.key.public(), &jws, &Value::Object(card).canonical()).is_none()
        );
    }
    let card = call_raw(&a, "GET", "/agents/ana/agent-card.json", &[], vec![]).value().unwrap();
    let first = &card.as_object().unwrap()["supportedInterfaces"].as_array().unwrap()[0];
    assert_eq!(first.as_object().unwrap()["protocolBinding"].as_str(), Some("JSONRPC"));
    assert_eq!(first.as_object().unwrap()["url"].as_str().map(|u| u.ends_with("/agents/ana/a2a")), Some(true));
}

#[test]
fn a_caller_hears_of_its_task_at_its_webhook_through_the_outbound_policy() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    register_listed(&a, &ana, None);
    /// Each push heard: its token and its body.
    type Heard = Rc<RefCell<Vec<(Option<String>, Value)>>>;
    let heard: Heard = Rc::default();
    let log = heard.clone();
    w.fake("hooks.example", move |req: &nyx5_house::ports::OutRequest| {
        let token = req.headers.iter().find(|(k, _)| k == "x-a2a-notification-token").map(|(_, v)| v.clone());
        log.borrow_mut().push((token, Value::parse(&req.body, 1 << 20).unwrap()));
        nyx5_house::ports::OutResponse { status: 200, body: vec![] }
    });
    // A private or loopback URL the operator did not name is refused, and nothing is written.
    let with_push = |url: &str, id: &str| {
        let config = Value::Object(obj([("url", url.into()), ("token", "tok-1".into())]));
        Value::Object(obj([
            ("message", message(id, "hola")),
            ("configuration", Value::Object(obj([("taskPushNotificationConfig", config)]))),
        ]))
    };
    let (s, e) = rpc(&a, "ana", "SendMessage", with_push("http://127.0.0.1:9/hook", "m-0"));
    assert_eq!((s, refusal(&e).1.as_str()), (400, "bad_a2a_push_url"));
    assert!(mailbox(&a, &ana).is_empty());
    let (s, sent) = rpc(&a, "ana", "SendMessage", with_push("https://hooks.example/a2a", "m-1"));
    assert_eq!(s, 200, "{sent:?}");
    let id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    let (s, got) = rpc(
        &a,
        "ana",
        "GetTaskPushNotificationConfig",
        Value::Object(obj([("taskId", id.as_str().into()), ("id", "default".into())])),
    );
    assert_eq!(s, 200);
    assert_eq!(got["result"].as_object().unwrap()["url"].as_str(), Some("https://hooks.example/a2a"));
    assert!(heard.borrow().is_empty(), "nothing is told before the task moves");
    let env = mailbox(&a, &ana).pop().unwrap();
    answer(&w, &a, &ana, env.id(), Content::new("text/plain", "hello".into()));
    let told = heard.borrow().clone();
    assert_eq!(told.len(), 1, "one push, when the task ended");
    assert_eq!(told[0].0.as_deref(), Some("tok-1"));
    let pushed = told[0].1.as_object().unwrap()["task"].as_object().unwrap().clone();
    assert_eq!((pushed["id"].as_str(), state(&pushed).as_str()), (Some(id.as_str()), "TASK_STATE_COMPLETED"));
    // Deleted, it is told no more.
    let (s, _) = rpc(
        &a,
        "ana",
        "DeleteTaskPushNotificationConfig",
        Value::Object(obj([("taskId", id.as_str().into()), ("id", "default".into())])),
    );
    assert_eq!(s, 200);
    let (_, l) =
        rpc(&a, "ana", "ListTaskPushNotificationConfigs", Value::Object(obj([("taskId", id.as_str().into())])));
    assert_eq!(l["result"].as_object().unwrap()["configs"], Value::Array(vec![]));
}

/// The hostile review's H1: a buyer who refunds the escrow behind the task's back never reads the
/// work. The agent's answer finds the escrow gone: the task ends failed without the artifacts, and
/// the agent hears why.
#[test]
fn a_buyer_who_refunded_first_never_reads_the_work() {
    let (w, a, ana, bo) = ana_and_bo();
    topup(&a, "bo@a.test", 100);
    let id = paid_task(&w, &a, (&ana, &bo), "q-sly-1", 40);
    // bo takes his money back alone (a buyer may, before a delivery).
    contract_op(&w, &a, &bo, "aaaa", "refund", "q-sly-1");
    assert_eq!(balance(&a, "bo@a.test"), 100);
    let env = mailbox(&a, &ana).into_iter().find(|e| e.from().as_str() == "a2a@a.test").unwrap();
    answer(&w, &a, &ana, env.id(), Content::new("text/plain", "the precious work".into()));
    let t = get_task(&a, "ana", &id);
    assert_eq!(state(&t), "TASK_STATE_FAILED");
    let text = Value::Object(t.clone()).canonical_string();
    assert!(!text.contains("precious"), "the work is withheld: {text}");
    assert_eq!(balance(&a, "ana@a.test"), 0);
}

/// A context is its caller's: another caller cannot add to it, nor list it by adding to it.
#[test]
fn a_context_belongs_to_the_caller_that_began_it() {
    let (_w, a, _ana, bo) = ana_and_bo();
    let (_, sent) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("m-1", "mine"), None));
    let context = task_of(&sent)["contextId"].as_str().unwrap().to_owned();
    // A verified stranger's task counts in its site's share.
    assert_eq!(share_of(&a, task_of(&sent)["id"].as_str().unwrap()), "site:a.test");
    let mut intruder = message("m-2", "me too").as_object().unwrap().clone();
    intruder.insert("contextId".into(), context.as_str().into());
    let (s, e) = send(&a, "ana", Value::Object(intruder.clone()));
    assert_eq!((s, refusal(&e).1.as_str()), (400, "bad_a2a_request"));
    // bo may go on in his own context.
    let (s, _) = send(&a, "ana", proven(&bo, &a, "ana@a.test", Value::Object(intruder), None));
    assert_eq!(s, 200);
}

/// The second review's H1: a settlement tried again (the answer brought again after the task's
/// end could not be written, a cancel repeated) finds the escrow as it left it: the Libro's
/// "id taken" is read against the contract, not taken for a refusal.
#[test]
fn a_settlement_tried_again_is_done_not_refused() {
    let (w, a, ana, bo) = ana_and_bo();
    topup(&a, "bo@a.test", 100);
    let id = paid_task(&w, &a, (&ana, &bo), "q-again-1", 40);
    // The release goes through once, as if the write of the task's end had then failed.
    let tasks = a.a2a_tasks();
    let row = block_on(nyx5_house::store::a2a::get(&a.db, "ana", &id)).unwrap().unwrap();
    let t = nyx5_house::a2a_tasks::task_of(&row, "a.test").unwrap();
    block_on(tasks.settle(&t, "q-again-1", "release", nyx5_rules::a2a::State::Completed)).unwrap();
    w.clock.advance(1_000);
    // Again, with another `created`: done, not "id taken".
    block_on(tasks.settle(&t, "q-again-1", "release", nyx5_rules::a2a::State::Completed)).unwrap();
    // And the answer, brought now, completes the task with its work.
    let env = mailbox(&a, &ana).into_iter().find(|e| e.from().as_str() == "a2a@a.test").unwrap();
    answer(&w, &a, &ana, env.id(), Content::new("text/plain", "the work".into()));
    let t = get_task(&a, "ana", &id);
    assert_eq!(state(&t), "TASK_STATE_COMPLETED");
    assert_eq!(balance(&a, "ana@a.test"), 36);
    // A refund of a released escrow is refused: the task cannot be canceled into one.
    let (s, e) = rpc(&a, "ana", "CancelTask", Value::Object(obj([("id", id.as_str().into())])));
    assert_eq!((s, refusal(&e).0), (409, -32002));
}

/// A streaming call: the answer and the JSON-RPC answers of its events (`data: …` lines).
fn stream(house: &TestHouse, method: &str, params: Value) -> (nyx5_house::Response, Vec<Object>) {
    let body = Value::Object(obj([
        ("jsonrpc", "2.0".into()),
        ("id", "s-7".into()),
        ("method", method.into()),
        ("params", params),
    ]));
    let r = call(house, "POST", "/agents/ana/a2a", &[("content-type", "application/json")], &body);
    let events = if r.content_type == "text/event-stream" { events(&r.body) } else { Vec::new() };
    (r, events)
}

/// The events of an SSE chunk, each a JSON-RPC success answering `s-7`.
fn events(chunk: &[u8]) -> Vec<Object> {
    let text = std::str::from_utf8(chunk).unwrap();
    assert!(text.ends_with("\n\n"), "{text:?}");
    text.split_terminator("\n\n")
        .map(|e| {
            let o = Value::parse_str(e.strip_prefix("data: ").unwrap()).unwrap().as_object().unwrap().clone();
            assert_eq!(o["id"].as_str(), Some("s-7"));
            o["result"].as_object().unwrap().clone()
        })
        .collect()
}

#[test]
fn a_stream_follows_its_task_until_it_ends_and_one_waiting_for_input_ends_it_too() {
    let (w, a, ana, _) = ana_and_bo();
    let (r, first) = stream(&a, "SendStreamingMessage", Value::Object(obj([("message", message("s-1", "stream me"))])));
    assert_eq!((r.status, r.content_type), (200, "text/event-stream"));
    assert_eq!(first.len(), 1);
    let task = first[0]["task"].as_object().unwrap();
    assert_eq!(state(task), "TASK_STATE_SUBMITTED");
    let id = task["id"].as_str().unwrap().to_owned();
    let mut f = r.follow.clone().expect("an open task is followed");
    // Nothing moves: after 15 s of the house's time a comment keeps the stream open.
    let before = a.now().0;
    assert_eq!(block_on(a.follow(&mut f)).unwrap(), b": keep-alive\n\n");
    assert!(a.now().0 - before >= nyx5_house::a2a_stream::BEAT_MS);

    // The agent answers: its artifact, then the status with its message; then the stream ends.
    let env = mailbox(&a, &ana).remove(0);
    assert!(answer(&w, &a, &ana, env.id(), Content::new("text/plain", "streamed".into())) < 300);
    let told = events(&block_on(a.follow(&mut f)).unwrap());
    assert_eq!(told.len(), 2, "{told:?}");
    let artifact = told[0]["artifactUpdate"].as_object().unwrap();
    assert_eq!(artifact["taskId"].as_str(), Some(id.as_str()));
    assert_eq!(artifact["artifact"].as_object().unwrap()["parts"].canonical_string(), r#"[{"text":"streamed"}]"#);
    let status = told[1]["statusUpdate"].as_object().unwrap();
    assert_eq!(state(status), "TASK_STATE_COMPLETED");
    assert_eq!(
        status["status"].as_object().unwrap()["message"].as_object().unwrap()["parts"].canonical_string(),
        r#"[{"text":"streamed"}]"#
    );
    assert!(block_on(a.follow(&mut f)).is_none());
    assert!(block_on(a.follow(&mut f)).is_none(), "an ended stream stays ended");

    // Subscribing to an ended task: its one event, and nothing follows.
    let (r, ended) = stream(&a, "SubscribeToTask", Value::Object(obj([("id", id.as_str().into())])));
    assert!(r.follow.is_none());
    assert_eq!(state(ended[0]["task"].as_object().unwrap()), "TASK_STATE_COMPLETED");
    // An unknown task is a JSON-RPC error, not a stream.
    let (r, none) = stream(&a, "SubscribeToTask", Value::Object(obj([("id", "nope".into())])));
    assert_eq!((r.status, r.content_type, none.len()), (404, "application/json", 0));
    assert!(r.follow.is_none());

    // A task that asks for input ends the stream there; the caller's next message is its own call.
    let (r, _) = stream(&a, "SendStreamingMessage", Value::Object(obj([("message", message("s-2", "more?"))])));
    let mut f = r.follow.clone().unwrap();
    let env = mailbox(&a, &ana).into_iter().find(|e| e.id() != env.id()).unwrap();
    let ask = Content::new(
        nyx5_rules::a2a::RESULT_MEDIA,
        Value::parse_str(r#"{"state":"input-required","parts":[{"text":"which?"}]}"#).unwrap(),
    );
    assert!(answer(&w, &a, &ana, env.id(), ask) < 300);
    let told = events(&block_on(a.follow(&mut f)).unwrap());
    assert_eq!(told.len(), 1);
    assert_eq!(state(told[0]["statusUpdate"].as_object().unwrap()), "TASK_STATE_INPUT_REQUIRED");
    assert!(block_on(a.follow(&mut f)).is_none());
}

#[test]
fn a_quiet_stream_ends_after_its_life() {
    let (_w, a, _ana, _) = ana_and_bo();
    let (r, _) = stream(&a, "SendStreamingMessage", Value::Object(obj([("message", message("q-1", "slow"))])));
    let mut f = r.follow.clone().unwrap();
    let start = a.now().0;
    let mut beats = 0;
    while let Some(chunk) = block_on(a.follow(&mut f)) {
        assert_eq!(chunk, b": keep-alive\n\n");
        beats += 1;
        assert!(beats < 100, "the stream never ended");
    }
    let (life, _) = nyx5_house::a2a_stream::life(true);
    assert!(a.now().0 - start >= life, "it ended early: {} ms", a.now().0 - start);
    assert_eq!(beats, life / nyx5_house::a2a_stream::BEAT_MS - 1);
}

/// Each share of an agent's tasks (the unverified callers together, the verified callers of one
/// site together) is bounded on its own, the strangers together to part of the room, and the
/// callers the agent allows only by the whole: the guard, on the house's own SQLite with the
/// migrations.
#[test]
fn strangers_share_part_of_an_agents_tasks_and_the_callers_it_allows_the_rest() {
    use nyx5_house::ports::{Db, PortError};
    use nyx5_house::store::a2a::{New, Room, insert, room, share};
    let (_w, a, _ana, _) = ana_and_bo();
    let bound = Room {
        tasks: 7,
        bytes: 1 << 20,
        strangers_tasks: 5,
        strangers_bytes: 1 << 20,
        share_tasks: 2,
        share_bytes: 300,
    };
    let put = |house: &TestHouse, id: &str, share: &str, request: &str| {
        let new = New {
            id,
            local: "ana",
            context: "c",
            envelope: id,
            caller: None,
            message_id: id,
            request,
            contract: None,
            push: None,
            share,
        };
        match block_on(house.db.batch(vec![room("ana", &bound, share), insert(&new, 1)])) {
            Ok(_) => true,
            Err(PortError::Constraint { name }) if name == "guard" => false,
            Err(e) => panic!("{e:?}"),
        }
    };
    let (unverified, x, y, z) =
        (share(false, None), share(false, Some("x.test")), share(false, Some("y.test")), share(false, Some("z.test")));
    assert!(put(&a, "u1", &unverified, "[]") && put(&a, "u2", &unverified, "[]"));
    assert!(!put(&a, "u3", &unverified, "[]"), "the unverified callers' share is full");
    // One site's verified callers, whoever they are, share one bound; another site has its own.
    assert!(put(&a, "x1", &x, "[]") && put(&a, "x2", &x, "[]"));
    assert!(!put(&a, "x3", &x, "[]"));
    assert!(put(&a, "y1", &y, "[]"));
    // The strangers together (5) are full, whatever share still has room...
    assert!(!put(&a, "z1", &z, "[]"), "the strangers' part is full");
    // ... but the callers the agent allows have the rest, and only the whole (7) bounds them.
    let allowed = share(true, Some("x.test"));
    assert_eq!(allowed, "allowed");
    assert!(put(&a, "k1", &allowed, "[]") && put(&a, "k2", &allowed, "[]"));
    assert!(!put(&a, "k3", &allowed, "[]"), "the whole room is full");
    // The counters the guard reads are what the tasks hold, through inserts, growth and deletes.
    let counters = |house: &TestHouse| {
        let sql = nyx5_house::stmt!("SELECT share, tasks, bytes FROM a2a_rooms WHERE local = 'ana' ORDER BY share");
        block_on(house.db.query(sql))
            .unwrap()
            .iter()
            .map(|r| format!("{}={}/{}", r.text("share").unwrap(), r.int("tasks").unwrap(), r.int("bytes").unwrap()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(counters(&a), "=7/14 allowed=2/4 site:x.test=2/4 site:y.test=1/2 unverified=2/4 ~=5/10");
    let grow = nyx5_house::stmt!("UPDATE a2a_tasks SET answer = 'abcdef', bytes = bytes + 6 WHERE id = 'x1'");
    block_on(a.db.batch(vec![grow])).unwrap();
    block_on(a.db.batch(vec![nyx5_house::stmt!("DELETE FROM a2a_tasks WHERE id IN ('u1', 'k2')")])).unwrap();
    assert_eq!(counters(&a), "=5/16 allowed=1/2 site:x.test=2/10 site:y.test=1/2 unverified=1/2 ~=4/14");
    // A task growing (the caller's next message) needs bytes in its share, not a place.
    let growing = nyx5_house::store::a2a::room("ana", &bound.growing(), &x);
    block_on(a.db.batch(vec![growing])).unwrap();

    // Bytes count too: a share past its 300 bytes takes no more (its tasks may reach past it by
    // the last one, as a mailbox's quota is checked before it).
    let (_w, b, _ana, _) = ana_and_bo();
    let big = format!("[\"{}\"]", "z".repeat(140));
    let bound = Room { share_tasks: 1000, ..bound };
    let put = |id: &str| {
        let new = New {
            id,
            local: "ana",
            context: "c",
            envelope: id,
            caller: Some("p@z.test"),
            message_id: id,
            request: &big,
            contract: None,
            push: None,
            share: &z,
        };
        block_on(b.db.batch(vec![room("ana", &bound, &z), insert(&new, 1)])).is_ok()
    };
    assert!(put("z1") && put("z2") && put("z3"));
    assert!(!put("z4"));
}

/// A ListTasks page reads only the tasks that fit its bytes (the first always), so a context of
/// large tasks is not read whole into memory; the next page begins where this one stopped.
#[test]
fn a_page_of_tasks_reads_only_what_fits() {
    let (w, a, _ana, bo) = ana_and_bo();
    let text = "w".repeat(200_000);
    let (_, first) = send(&a, "ana", proven(&bo, &a, "ana@a.test", message("b-0", &text), None));
    let context = task_of(&first)["contextId"].as_str().unwrap().to_owned();
    for n in 1..4 {
        let mut m = message(&format!("b-{n}"), &text).as_object().unwrap().clone();
        m.insert("contextId".into(), context.as_str().into());
        let (s, sent) = send(&a, "ana", proven(&bo, &a, "ana@a.test", Value::Object(m), None));
        assert_eq!(s, 200, "{sent:?}");
        w.clock.advance(1);
    }
    let rows = block_on(nyx5_house::store::a2a::list(&a.db, "ana", &context, 100, 0, 450_000)).unwrap();
    assert_eq!(rows.len(), 3, "200 KB tasks: before the third, 400 KB; before a fourth, 600 KB");
    let one = block_on(nyx5_house::store::a2a::list(&a.db, "ana", &context, 100, 0, 1)).unwrap();
    assert_eq!(one.len(), 1, "the first always goes");
    let rest = block_on(nyx5_house::store::a2a::list(&a.db, "ana", &context, 100, 3, 450_000)).unwrap();
    assert_eq!(rest.len(), 1);
    let ids =
        |rows: &[nyx5_house::ports::Row]| rows.iter().map(|r| r.text("id").unwrap().to_owned()).collect::<Vec<_>>();
    let all = block_on(nyx5_house::store::a2a::list(&a.db, "ana", &context, 100, 0, i64::MAX)).unwrap();
    assert_eq!([ids(&rows), ids(&rest)].concat(), ids(&all), "newest first, and the pages meet");
}

/// An open task whose escrow its buyer refunded alone can no longer be paid: it is forgotten a
/// month after it last moved, as an unpaid one is; one whose escrow is still held is kept.
#[test]
fn an_open_task_whose_escrow_went_elsewhere_is_forgotten_in_time() {
    let (w, a, ana, bo) = ana_and_bo();
    topup(&a, "bo@a.test", 100);
    let gone = paid_task(&w, &a, (&ana, &bo), "q-gone-1", 10);
    let kept = paid_task(&w, &a, (&ana, &bo), "q-kept-1", 20);
    let dlvd = paid_task(&w, &a, (&ana, &bo), "q-dlvd-1", 30);
    // ana says she delivered, and never answers the task: the money is still in the escrow, and
    // only bo's cancel (a2a@ refunding it) or his release settles it.
    contract_op(&w, &a, &ana, "cccc", "deliver", "q-dlvd-1");
    contract_op(&w, &a, &bo, "bbbb", "refund", "q-gone-1");
    w.clock.advance(nyx5_house::a2a_tasks::TASK_LIFE_MS + 120_000);
    w.tick_all();
    let held = |id: &str| block_on(nyx5_house::store::a2a::get(&a.db, "ana", id)).unwrap().is_some();
    assert!(!held(&gone), "nothing can pay for it any more");
    assert!(held(&kept), "its escrow is still held: its caller may still cancel it");
    assert!(held(&dlvd), "its escrow, delivered, still holds the money");
    let (s, canceled) = rpc(&a, "ana", "CancelTask", Value::Object(obj([("id", dlvd.as_str().into())])));
    assert_eq!(s, 200, "{canceled:?}");
    assert_eq!(balance(&a, "bo@a.test"), 100 - 20, "bo has his 10 (refunded alone) and 30 back");
}

/// Unverified callers are rate-limited per caller network (the address the runtime names:
/// Cloudflare's `cf-connecting-ip`, serve's peer), as the issue asks: one busy caller does not
/// use up the minute of every other; without an address they share one window.
#[test]
fn unverified_callers_are_rate_limited_per_network() {
    let (w, a, _ana, _) = ana_and_bo();
    let cap = a.config.email_per_sender_per_minute;
    let from = |ip: Option<&str>, n: usize| {
        let body = Value::Object(obj([
            ("jsonrpc", "2.0".into()),
            ("id", 1.into()),
            ("method", "SendMessage".into()),
            ("params", Value::Object(obj([("message", message(&format!("r-{n}-{ip:?}"), "hi"))]))),
        ]));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(ip) = ip {
            headers.push(("cf-connecting-ip", ip));
        }
        call(&a, "POST", "/agents/ana/a2a", &headers, &body).status
    };
    let n = usize::try_from(cap).unwrap();
    assert!((0..n).all(|i| from(Some("192.0.2.7"), i) == 200));
    assert_eq!(from(Some("192.0.2.7"), n), 429, "its minute is spent");
    assert_eq!(from(Some("198.51.100.9"), 0), 200, "another network has its own");
    // One IPv6 subscriber (a /64) is one caller, whichever of its addresses it uses.
    assert!((0..n).all(|i| from(Some(&format!("2001:db8:1:2::{i:x}")), i) == 200));
    assert_eq!(from(Some("2001:db8:1:2:ffff::1"), n), 429);
    // With no address named, the unverified callers share one window.
    assert!((0..n).all(|i| from(None, i) == 200));
    assert_eq!(from(None, n), 429);
    // The next minute, each may call again.
    w.clock.advance(60_000);
    assert_eq!(from(Some("192.0.2.7"), n + 1), 200);
}
