//! Spending that asks before it acts, from the agent's side, against two real `nyx5 serve`
//! houses: a mandate whose authority lets its grantee charge 20 alone, a charge above it that
//! waits (held) until the grantor's human approves it — on the terminal (`nyx5 approve`), or
//! through an MCP client that asks its human (elicitation) — never on a model's word; a decline
//! that returns the hold; and the money-moving tools marked as such.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use houses::{ElicitingMcp, Mcp, TOKEN_A, World, obj, s};
use nyx5_proto::json::{Object, Value};

fn int(o: &Object, name: &str) -> i64 {
    o.get(name).and_then(Value::as_safe_integer).unwrap_or_else(|| panic!("no integer `{name}` in {o:?}"))
}

/// sol@a.test (whose human approves) and bo@b.test (the agent that spends), sol with 200 tok.
fn world(name: &str) -> World {
    let w = World::new(name);
    w.two_agents_as("sol@a.test");
    w.nyx5(&["topup", "sol@a.test", "200", "--house", "a.test", "--admin-token", TOKEN_A, "--json"]).json();
    w
}

fn balance(w: &World, who: &str) -> i64 {
    int(&w.nyx5(&["balance", "--as", who, "--house", "a.test", "--json"]).json(), "balance")
}

/// `bo` charges `amount` under `mandate` and waits for the receipt.
fn charge(w: &World, mandate: &str, amount: i64) -> Object {
    let amount = amount.to_string();
    let args = ["charge", mandate, "--amount", &amount, "--concept", "gpu", "--house", "a.test", "--as", "bo@b.test"];
    let r = w.nyx5(&[&args[..], &["--wait", "60", "--json"]].concat()).json();
    obj(&r, "receipt").clone()
}

/// The approvals `who` sees at a.test.
fn approvals(w: &World, who: &str) -> Vec<Object> {
    let r = w.nyx5(&["approvals", "--as", who, "--house", "a.test", "--json"]).json();
    r["pending"].as_array().unwrap().iter().map(|p| p.as_object().unwrap().clone()).collect()
}

#[test]
fn spending_above_a_limit_waits_for_a_human() {
    let w = world("authority-cli");
    // A cap without its currency means nothing, and is refused before anything is sent.
    let vague = r#"{"level":"autonomous","consequence":"costly","max_amount":20}"#;
    let e = w.nyx5(&["mandate", "bo@b.test", "--cap", "100", "--authority", vague]).fails(2);
    assert!(e.contains("currency"), "{e}");
    let rule =
        r#"{"level":"autonomous","consequence":"costly","max_amount":20,"currency":"tok","rationale":"gpu time only"}"#;
    let m = w.nyx5(&["mandate", "bo@b.test", "--cap", "100", "--authority", rule, "--wait", "60", "--json"]).json();
    let mandate = s(obj(obj(&m, "receipt"), "mandate"), "id");
    assert_eq!(s(obj(obj(obj(&m, "receipt"), "mandate"), "authority"), "level"), "autonomous");

    // Within the limit it goes alone, and the entry says which authority let it.
    let r = charge(&w, &mandate, 10);
    let allowed = obj(&r, "authority")["allowed_by"].as_array().unwrap()[0].as_object().unwrap().clone();
    assert_eq!(s(&allowed, "of"), format!("mandate:{mandate}"));
    assert_eq!(balance(&w, "sol@a.test"), 190);

    // Above it, it waits: 50 held from sol, nothing paid.
    let amount = "50";
    let args = ["charge", &mandate, "--amount", amount, "--concept", "gpu", "--house", "a.test", "--as", "bo@b.test"];
    let answer = w.nyx5(&[&args[..], &["--wait", "60", "--json"]].concat()).json();
    assert_eq!(s(&answer, "receipt_status"), "pending", "the receipt does not say it happened");
    let r = obj(&answer, "receipt").clone();
    assert_eq!(s(&r, "status"), "pending");
    // Its receipt, genuine in every signature, proves no payment (issue 34 §4): `verify --receipt`
    // says so and fails, unless asked to accept a waiting movement.
    let file = w.dir.join("waiting.json");
    std::fs::write(&file, Value::Object(answer.clone()).canonical_string()).unwrap();
    let f = file.to_str().unwrap();
    let house_key = s(obj(&w.nyx5(&["resolve", "sol@a.test", "--json"]).json(), "domain"), "key");
    let bo_key = s(&w.nyx5(&["card", "bo@b.test", "--json"]).json(), "sig");
    let proof = ["verify", "--receipt", f, "--op", f, "--house-key", &house_key, "--key", &bo_key];
    let (err, doc) = w.nyx5(&proof).fails_with(1);
    let doc = doc.unwrap();
    assert_eq!((doc.get("ok"), doc.get("status")), (Some(&Value::Bool(false)), Some(&Value::from("pending"))));
    assert!(err.contains("status pending"), "{err}");
    let ok = w.nyx5(&[&proof[..], &["--allow-status", "pending"]].concat()).json();
    assert_eq!(ok.get("ok"), Some(&Value::Bool(true)), "{ok:?}");
    let pending = obj(&r, "pending");
    let id = s(pending, "id");
    assert_eq!(s(pending, "state"), "pending");
    assert_eq!(balance(&w, "sol@a.test"), 140);
    assert_eq!(balance(&w, "bo@b.test"), 9);
    // Both see it: sol may decide, bo asked.
    let seen = approvals(&w, "sol@a.test");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["awaiting"].as_array().unwrap(), &[Value::from("sol@a.test")]);
    assert_eq!(approvals(&w, "bo@b.test").len(), 1);
    let human = w.nyx5(&["approvals", "--as", "sol@a.test", "--house", "a.test"]).ok();
    assert!(
        human.contains("above the 20") && human.contains("gpu time only") && human.contains("waits on: sol@a.test"),
        "{human}"
    );
    assert!(human.contains("payer: sol@a.test") && human.contains("to: bo@b.test"), "{human}");

    // bo cannot approve its own spending; nor can sol's `approve` go through with nobody at the
    // terminal to say yes.
    let (e, doc) =
        w.nyx5(&["approve", &id, "--as", "bo@b.test", "--house", "a.test", "--yes", "--wait", "60"]).fails_with(4);
    assert!(e.contains("only sol@a.test may give it"), "the house refused it: {e} {doc:?}");
    let e = w.nyx5(&["approve", &id, "--house", "a.test"]).fails(2);
    assert!(e.contains("--yes"), "{e}");
    assert_eq!(s(&approvals(&w, "sol@a.test")[0], "state"), "pending");

    // An MCP client that cannot ask its human cannot approve; nor can nyx5_libro.
    let mut plain = Mcp::start(&w, "sol@a.test");
    let r = plain.request("tools/call", &format!(r#"{{"name":"nyx5_approve","arguments":{{"id":"{id}"}}}}"#));
    assert_eq!(r.get("isError"), Some(&Value::Bool(true)));
    assert!(r.canonical_string_contains(&format!("nyx5 approve {id}")));
    let r = plain
        .request("tools/call", &format!(r#"{{"name":"nyx5_libro","arguments":{{"op":"approve","pending":"{id}"}}}}"#));
    assert_eq!(r.get("isError"), Some(&Value::Bool(true)));
    // The tools that move money say so.
    let tools = plain.request("tools/list", "{}");
    let marked: Vec<String> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_object)
        .filter(|t| {
            t.get("_meta").and_then(Value::as_object).and_then(|m| m.get("nyx5/moves_money"))
                == Some(&Value::Bool(true))
        })
        .map(|t| s(t, "name"))
        .collect();
    for name in ["nyx5_accept", "nyx5_libro", "nyx5_approve", "nyx5_send"] {
        assert!(marked.iter().any(|m| m == name), "{name} is not marked: {marked:?}");
    }
    assert!(!marked.iter().any(|m| m == "nyx5_approvals" || m == "nyx5_balance" || m == "nyx5_decline"));
    drop(plain);

    // Through a client that asks its human: a no leaves it waiting, a yes approves it.
    let mut c = ElicitingMcp::start(&w, "sol@a.test");
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"nyx5_approve","arguments":{{"id":"{id}","wait":60}}}}}}"#
    );
    c.send(&call);
    let ask = c.read();
    assert_eq!(s(&ask, "method"), "elicitation/create");
    let message = s(obj(&ask, "params"), "message");
    assert!(message.contains("50 tok from sol@a.test") && message.contains("gpu time only"), "{message}");
    let ask_id = s(&ask, "id");
    assert!(ask_id.starts_with("nyx5-ask-"), "{ask_id}");
    // A ping sent meanwhile is answered after the question.
    c.send(r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#);
    c.send(&format!(
        r#"{{"jsonrpc":"2.0","id":"{ask_id}","result":{{"action":"accept","content":{{"approve":false}}}}}}"#
    ));
    let no = c.read();
    assert_eq!(no.get("id"), Some(&Value::from(7)));
    assert_eq!(obj(&no, "result").get("isError"), Some(&Value::Bool(true)));
    assert_eq!(c.read().get("id"), Some(&Value::from(8)));
    assert_eq!(s(&approvals(&w, "sol@a.test")[0], "state"), "pending");
    // A call the client cancels while its human is asked stops asking and is not answered.
    c.send(&call.replace(r#""id":7"#, r#""id":"c""#));
    let asked = c.read();
    assert_eq!(s(&asked, "method"), "elicitation/create");
    c.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c"}}"#);
    let withdrawn = c.read();
    assert_eq!(s(&withdrawn, "method"), "notifications/cancelled");
    assert_eq!(obj(&withdrawn, "params").get("requestId"), asked.get("id"));
    c.send(r#"{"jsonrpc":"2.0","id":"p2","method":"ping"}"#);
    assert_eq!(c.read().get("id"), Some(&Value::from("p2")), "no answer to the cancelled call");
    assert_eq!(s(&approvals(&w, "sol@a.test")[0], "state"), "pending");
    c.send(&call.replace(r#""id":7"#, r#""id":9"#));
    let ask = c.read();
    let ask_id = s(&ask, "id");
    c.send(&format!(
        r#"{{"jsonrpc":"2.0","id":"{ask_id}","result":{{"action":"accept","content":{{"approve":true}}}}}}"#
    ));
    let yes = c.read();
    let result = obj(&yes, "result");
    assert_eq!(result.get("isError"), Some(&Value::Bool(false)), "{yes:?}");
    let receipt = obj(obj(result, "structuredContent"), "receipt");
    assert_eq!(s(obj(receipt, "pending"), "state"), "approved");
    assert_eq!(obj(receipt, "authority")["approved_by"].as_array().unwrap(), &[Value::from("sol@a.test")]);
    drop(c);
    // Paid from the hold: bo has its 45 (50 less the fee), sol paid nothing more.
    assert_eq!(balance(&w, "sol@a.test"), 140);
    assert_eq!(balance(&w, "bo@b.test"), 9 + 45);
    assert!(approvals(&w, "sol@a.test").is_empty());

    // Declined: the hold returns.
    let r = charge(&w, &mandate, 30);
    let id = s(obj(&r, "pending"), "id");
    assert_eq!(balance(&w, "sol@a.test"), 110);
    let d = w.nyx5(&["decline", &id, "--note", "not now", "--house", "a.test", "--wait", "60", "--json"]).json();
    assert_eq!(s(obj(obj(&d, "receipt"), "pending"), "state"), "declined");
    assert_eq!(balance(&w, "sol@a.test"), 140);
    // The journal still audits.
    let audit = w.nyx5(&["libro", "audit", &w.a.url(), "--admin-token", TOKEN_A, "--json"]).json();
    assert_eq!(audit.get("ok"), Some(&Value::Bool(true)), "{audit:?}");
}

trait Contains {
    fn canonical_string_contains(&self, needle: &str) -> bool;
}

impl Contains for Object {
    fn canonical_string_contains(&self, needle: &str) -> bool {
        Value::Object(self.clone()).canonical_string().contains(needle)
    }
}

#[test]
fn a_subagent_under_an_authority_is_kept_apart_from_its_approver() {
    let w = world("authority-out");
    let rule = r#"{"level":"needs_approval","consequence":"costly"}"#;
    // In the approver's own profile: made, with a warning saying why that is unwise.
    let near = w.nyx5(&["subagent", "near", "--authority", rule, "--json"]).json();
    assert_eq!(s(&near, "address"), "near.sol@a.test");
    assert!(s(&near, "warning").contains("--out"), "{near:?}");
    // In a profile of its own: no warning, and sol's profile never holds its keys.
    let apart = w.dir.join("bot-profile.json");
    let far = w.nyx5(&["subagent", "far", "--authority", rule, "--out", apart.to_str().unwrap(), "--json"]).json();
    assert!(!far.contains_key("warning"), "{far:?}");
    assert_eq!(s(&far, "profile"), apart.display().to_string());
    let mine = std::fs::read_to_string(&w.profile).unwrap();
    assert!(mine.contains("near.sol@a.test") && !mine.contains("far.sol@a.test"));
    // The subagent acts from its own file: its card verifies through sol's delegation.
    let inbox = w.nyx5(&["inbox", "--agent", apart.to_str().unwrap(), "--as", "far.sol@a.test", "--json"]).json();
    assert!(inbox.contains_key("envelopes"), "{inbox:?}");
}
