//! The house's own agents from the command line, against a real `nyx5 serve` (docs/SPEC.md §22,
//! §23): the operator publishes a task, an agent lists the catalogue and takes it with
//! `nyx5 tareas take` (and through `nyx5 mcp`), a second take bounces with 409, and after the
//! delivery the house's `verifica@` — run by `serve`'s own ticks — tells the agent its verdict.
//! A verdict that pays, fetched over https, is tests/e2e/services.mjs's (a test CA).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use std::time::{Duration, Instant};

use houses::{Mcp, TOKEN_A, World, obj, s};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::Value;

fn contract_until(w: &World, id: &str, state: &str) -> nyx5_proto::json::Object {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = w.nyx5(&["contract", id, "--json"]).json();
        if s(&c, "state") == state {
            return c;
        }
        assert!(Instant::now() < deadline, "contract {id} stayed {} (wanted {state})", s(&c, "state"));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_task_taken_and_delivered_by_the_command_line() {
    let mut w = World::new("tareas-cli");
    w.restart_a_with(&["--verifica", "--tareas"]);
    w.nyx5(&["init", "sol@a.test", "--house", &w.a.url()]).ok();
    w.nyx5(&["register", "--json"]).json();
    w.nyx5(&["topup", "tareas@a.test", "100", "--house", "a.test", "--admin-token", TOKEN_A, "--json"]).json();

    // The task's page is at a name no DNS answers here: verifica@ cannot reach it, so its
    // verdict is undecided, which decides nothing (tests/e2e/services.mjs runs one that pays).
    let hash = hex(&sha256(b"the translated report"));
    let verify =
        format!(r#"[{{"type":"sha256","url":"https://work.invalid.example/{{contract}}","expect":"{hash}"}}]"#);
    let add = ["tareas", "add", "--id", "translate", "--price", "10", "--statement", "Translate the report"];
    let added = w.nyx5(&[&add[..], &["--verify", &verify, "--admin-token", TOKEN_A, "--json"]].concat()).json();
    assert_eq!(s(obj(&added, "task"), "id"), "translate");
    // Without the operator's token the catalogue does not change.
    let refused = w.nyx5(&[
        "tareas",
        "add",
        "--price",
        "1",
        "--statement",
        "x",
        "--verify",
        &verify,
        "--admin-token",
        "wrong",
        "--json",
    ]);
    assert_eq!(refused.code, 4, "{}", refused.stderr);

    let list = w.nyx5(&["tareas", "list", "--json"]).json();
    assert_eq!(s(&list, "arbiter"), "verifica@a.test");
    let tasks = list.get("tasks").and_then(Value::as_array).unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(s(obj(tasks[0].as_object().unwrap(), "terms"), "task"), "translate");

    let taken = w.nyx5(&["tareas", "take", "translate", "--json"]).json();
    assert_eq!(taken.get("sealed"), Some(&Value::Bool(false)), "tareas@ reads the quote in the clear");
    let id = s(&taken, "quote_id");
    let held = contract_until(&w, &id, "held");
    assert_eq!(s(&held, "buyer"), "tareas@a.test");
    assert_eq!(s(&held, "arbiter"), "verifica@a.test");

    // One task in flight: a second take bounces with 409.
    let again = w.nyx5(&["tareas", "take", "translate", "--json"]).json();
    let of = s(&again, "id");
    let inbox = w.wait_inbox("sol@a.test", |items| {
        items.iter().filter_map(Value::as_object).any(|i| bounce_of(i) == Some(of.clone()))
    });
    let bounce = inbox.iter().filter_map(Value::as_object).find(|i| bounce_of(i) == Some(of.clone())).unwrap();
    assert_eq!(obj(obj(bounce, "content"), "body").get("code").and_then(Value::as_safe_integer), Some(409));

    w.nyx5(&["deliver", &id, "--json"]).json();
    let inbox = w.wait_inbox("sol@a.test", |items| items.iter().filter_map(Value::as_object).any(is_verdict));
    let notice = inbox.iter().filter_map(Value::as_object).find(|i| is_verdict(i)).unwrap();
    let body = obj(obj(notice, "content"), "body");
    assert_eq!(s(obj(body, "verdict"), "outcome"), "undecided");
    assert_eq!(s(&contract_until(&w, &id, "delivered"), "state"), "delivered", "an undecided verdict moves nothing");
}

/// Whether an inbox item is `verifica@`'s notice of a verdict.
fn is_verdict(item: &nyx5_proto::json::Object) -> bool {
    item.get("from").and_then(Value::as_str) == Some("verifica@a.test")
}

/// The envelope a postmaster's bounce in the inbox is about.
fn bounce_of(item: &nyx5_proto::json::Object) -> Option<String> {
    if item.get("from").and_then(Value::as_str) != Some("postmaster@a.test") {
        return None;
    }
    let body = item.get("content")?.as_object()?.get("body")?.as_object()?;
    body.get("of").and_then(Value::as_str).map(str::to_owned)
}

#[test]
fn the_same_task_through_mcp() {
    let mut w = World::new("tareas-mcp");
    w.restart_a_with(&["--verifica", "--tareas"]);
    w.nyx5(&["init", "sol@a.test", "--house", &w.a.url()]).ok();
    w.nyx5(&["register", "--json"]).json();
    w.nyx5(&["topup", "tareas@a.test", "50", "--house", "a.test", "--admin-token", TOKEN_A, "--json"]).json();
    let verify = r#"[{"type":"http_status","url":"https://work.invalid.example/{seller}"}]"#;
    w.nyx5(&[
        "tareas",
        "add",
        "--id",
        "t",
        "--price",
        "20",
        "--statement",
        "Say done",
        "--verify",
        verify,
        "--admin-token",
        TOKEN_A,
        "--json",
    ])
    .json();
    let mut sol = Mcp::start(&w, "sol@a.test");
    let list = sol.call("nyx5_tareas", &Value::parse_str("{}").unwrap());
    assert_eq!(list.get("tasks").and_then(Value::as_array).map(<[Value]>::len), Some(1));
    let taken = sol.call("nyx5_take_task", &Value::parse_str(r#"{"task":"t"}"#).unwrap());
    let id = s(&taken, "quote_id");
    let held = contract_until(&w, &id, "held");
    assert_eq!(s(&held, "seller"), "sol@a.test");
    let args = format!(r#"{{"op":"deliver","contract":"{id}"}}"#);
    sol.call("nyx5_libro", &Value::parse_str(&args).unwrap());
    contract_until(&w, &id, "delivered");
    // An unknown task is the tool's error, which the model reads.
    let r = sol.request("tools/call", r#"{"name":"nyx5_take_task","arguments":{"task":"nope"}}"#);
    assert_eq!(r.get("isError"), Some(&Value::Bool(true)), "{r:?}");
}
