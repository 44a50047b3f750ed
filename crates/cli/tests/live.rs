//! The live inbox against two `nyx5 serve` houses (issue 38 §5): `nyx5 inbox --follow` prints
//! mail as it arrives (the house holds each empty read open, docs/SPEC.md §8 `wait`), and
//! `nyx5 mcp` tells a client subscribed to `nyx5://inbox` when mail arrives, and stops when it
//! unsubscribes. The arrival-to-client times are printed (`--nocapture`), never asserted.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, clippy::print_stdout)]

mod common;
mod houses;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use houses::{World, obj, s};
use nyx5_proto::Value;
use nyx5_proto::json::Object;

/// Milliseconds from the house's `received` (its clock is this machine's) to `at`.
fn since_received(received: &str, at: std::time::SystemTime) -> f64 {
    let received = nyx5_proto::Timestamp::parse(received).unwrap().0;
    let at = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0;
    at - received as f64
}

/// How long a line may take before the test gives up: far past any arrival, short of a hang.
const PATIENCE: Duration = Duration::from_secs(20);

/// A child process whose standard output is read line by line in a thread, each line with the
/// moment it was read.
struct Lines {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<(std::time::SystemTime, String)>,
}

impl Lines {
    fn spawn(mut command: std::process::Command) -> Lines {
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if tx.send((std::time::SystemTime::now(), line)).is_err() {
                    return;
                }
            }
        });
        Lines { child, stdin, lines }
    }

    fn next(&self) -> (std::time::SystemTime, Object) {
        let (at, line) = self.lines.recv_timeout(PATIENCE).expect("a line in time");
        (at, Value::parse_str(&line).unwrap().as_object().unwrap().clone())
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

#[test]
fn inbox_follow_prints_mail_as_it_arrives() {
    let w = World::new("live-follow");
    w.two_agents();
    let mut command = w.command();
    command.args(["inbox", "--follow", "--json", "--as", "bo@b.test"]);
    let follower = Lines::spawn(command);
    // Let the follower's first read find the mailbox empty and wait (if it has not yet, its
    // first read finds the mail: the same lines, a little sooner).
    std::thread::sleep(Duration::from_millis(800));
    let mut took = Vec::new();
    for (i, from) in ["ana@a.test", "bo@b.test", "ana@a.test", "bo@b.test"].into_iter().enumerate() {
        let body = format!("live {i}");
        let sent = w.nyx5(&["send", "--as", from, "bo@b.test", "--body", &body, "--json"]).json();
        let (at, m) = follower.next();
        assert_eq!(s(&m, "id"), s(&sent, "id"), "the follower printed the mail just sent");
        assert_eq!(s(&m, "trust"), "verified");
        assert_eq!(s(obj(&m, "content"), "body"), body);
        took.push(since_received(&s(&m, "received"), at));
    }
    // Each read held open was answered by the arrival; with nothing more, nothing is printed.
    assert!(follower.lines.recv_timeout(Duration::from_millis(1500)).is_err(), "nothing but what was sent");
    println!(
        "live inbox (nyx5 serve): arrival → follower printed, median {:.1} ms over {} ({:?})",
        median(took.clone()),
        took.len(),
        took.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>()
    );
}

#[test]
fn mcp_tells_a_subscribed_client_when_mail_arrives() {
    let w = World::new("live-mcp");
    w.two_agents();
    let mut command = w.command();
    command.args(["mcp", "--as", "bo@b.test"]);
    let mut mcp = Lines::spawn(command);
    mcp.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    let (_, init) = mcp.next();
    let caps = obj(obj(&init, "result"), "capabilities");
    assert_eq!(obj(caps, "resources").get("subscribe"), Some(&Value::Bool(true)));
    mcp.send(r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#);
    let (_, list) = mcp.next();
    let resources = obj(&list, "result").get("resources").and_then(Value::as_array).unwrap();
    assert_eq!(s(resources[0].as_object().unwrap(), "uri"), "nyx5://inbox");
    mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"nyx5://elsewhere"}}"#);
    let (_, refused) = mcp.next();
    assert_eq!(obj(&refused, "error").get("code").and_then(Value::as_safe_integer), Some(-32002));
    mcp.send(r#"{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"nyx5://inbox"}}"#);
    let (_, subscribed) = mcp.next();
    assert!(subscribed.contains_key("result"), "{subscribed:?}");
    std::thread::sleep(Duration::from_millis(800));

    let mut took = Vec::new();
    for i in 0..3 {
        let sent = w.nyx5(&["send", "bo@b.test", "--body", &format!("tell me {i}"), "--json"]).json();
        let (at, note) = mcp.next();
        assert_eq!(s(&note, "method"), "notifications/resources/updated");
        assert_eq!(s(obj(&note, "params"), "uri"), "nyx5://inbox");
        // What the client reads then holds the mail, opened.
        mcp.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"resources/read","params":{{"uri":"nyx5://inbox"}}}}"#,
            10 + i
        ));
        let (_, read) = mcp.next();
        let contents = obj(&read, "result").get("contents").and_then(Value::as_array).unwrap();
        let text = s(contents[0].as_object().unwrap(), "text");
        assert!(text.contains(&s(&sent, "id")) && text.contains(&format!("tell me {i}")), "{text}");
        let page = Value::parse_str(&text).unwrap();
        let messages = page.as_object().unwrap().get("messages").and_then(Value::as_array).unwrap();
        let m = messages.iter().filter_map(Value::as_object).find(|m| s(m, "id") == s(&sent, "id")).unwrap();
        took.push(since_received(&s(m, "received"), at));
        mcp.send(&format!(r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"nyx5_ack","arguments":{{"ids":["{}"]}}}}}}"#, 30 + i, s(&sent, "id")));
        mcp.next();
    }
    println!(
        "live inbox (MCP, nyx5 serve): arrival → notification, median {:.1} ms over {} ({:?})",
        median(took.clone()),
        took.len(),
        took.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>()
    );

    // Unsubscribed: mail arrives and nothing is said.
    mcp.send(r#"{"jsonrpc":"2.0","id":20,"method":"resources/unsubscribe","params":{"uri":"nyx5://inbox"}}"#);
    let (_, done) = mcp.next();
    assert!(done.contains_key("result"), "{done:?}");
    w.nyx5(&["send", "bo@b.test", "--body", "after", "--json"]).json();
    w.wait_inbox("bo@b.test", |l| {
        l.iter().any(|m| m.as_object().is_some_and(|m| s(obj(m, "content"), "body") == "after"))
    });
    assert!(mcp.lines.recv_timeout(Duration::from_millis(1500)).is_err(), "no notification after unsubscribing");
}

/// A house that stops answers the reads it holds at once: its stop does not wait out the grace
/// for them (it would say "requests still open" on standard error after 5 s).
#[test]
fn a_stopping_house_answers_its_held_reads() {
    let dir = common::TempDir::new("live-stop");
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut house = std::process::Command::new(env!("CARGO_BIN_EXE_nyx5"))
        .args(["serve", "--domain", "c.test", "--registration", "open", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.path().join("c.db"))
        .env_remove("NYX5_ADMIN_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = house.stdout.take().unwrap();
    let err = house.stderr.take().unwrap();
    let said = std::thread::spawn(move || std::io::read_to_string(err).unwrap());
    let ready = format!("nyx5 serve: c.test at {url}");
    let mut lines = BufReader::new(out).lines();
    while lines.next().unwrap().unwrap() != ready {}
    let hosts = dir.path().join("hosts.json");
    std::fs::write(&hosts, format!(r#"{{"c.test":{{"url":"{url}"}}}}"#)).unwrap();
    let nyx5 = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_nyx5"));
        c.env("NYX5_AGENT", dir.path().join("agents.json"))
            .env("NYX5_HOSTS", &hosts)
            .env("NYX5_DOH", "off")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    common::run(nyx5(&["init", "cy@c.test", "--house", &url]), b"").ok();
    common::run(nyx5(&["register", "--json"]), b"").ok();
    let follower = Lines::spawn(nyx5(&["inbox", "--follow", "--json"]));
    // The follower's read is held at the house now (give it the moment to get there).
    std::thread::sleep(Duration::from_millis(800));
    let status = std::process::Command::new("kill").args(["-TERM", &house.id().to_string()]).status().unwrap();
    assert!(status.success());
    assert!(house.wait().unwrap().success(), "SIGTERM ends the house with status 0");
    let said = said.join().unwrap();
    assert!(said.contains("SIGTERM, stopping"), "{said}");
    assert!(!said.contains("still open"), "the held read was answered at the stop: {said}");
    drop(follower);
}
