//! `nyx5 mcp --wrap AUTHORITY.json -- node fixtures/mcp_server.js LOG`, driven as an MCP client
//! drives it: what tools/list withholds and how it annotates the rest; an autonomous call runs; a
//! prohibited one never reaches the server (its log says so); a call above its cap waits until
//! `nyx5 mcp-approve`, once; a declined, timed-out or cancelled one never runs; the elicitation
//! path; the hourly limit across a restart; the server's own requests routed back; the server's
//! death; bad authority files. Every wait is on a condition, with a generous deadline.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use common::TempDir;
use nyx5_proto::Value;
use nyx5_proto::json::Object;

/// Long enough for a loaded machine; every wait ends as soon as its condition holds.
const PATIENCE: Duration = Duration::from_secs(60);

const AUTHORITY: &str = r#"{
  "tools": {
    "echo": {"level":"autonomous","consequence":"reversible"},
    "tick": {"level":"autonomous","consequence":"reversible","max_per_hour":2},
    "transfer": {"level":"autonomous","consequence":"costly","max_amount":100,"currency":"tok","rationale":"small payments only"},
    "publish": {"level":"needs_approval","consequence":"irreversible","rationale":"what is published stays published"},
    "ask_back": {"level":"autonomous","consequence":"reversible"},
    "die": {"level":"autonomous","consequence":"reversible"}
  },
  "patterns": {"delete_*": {"level":"prohibited","consequence":"irreversible","rationale":"never delete"}},
  "amounts": {"transfer": {"argument":"amount","currency":"tok"}}
}"#;

fn nyx5() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nyx5"))
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.js")
}

fn parse(text: &str) -> Object {
    match Value::parse_str(text) {
        Ok(Value::Object(o)) => o,
        other => panic!("not a JSON object: {text:?} ({other:?})"),
    }
}

fn get<'a>(o: &'a Object, path: &[&str]) -> &'a Value {
    let mut v = o.get(path[0]).unwrap_or_else(|| panic!("no {} in {o:?}", path[0]));
    for k in &path[1..] {
        v = v.as_object().and_then(|o| o.get(*k)).unwrap_or_else(|| panic!("no {k} in {v:?}"));
    }
    v
}

fn text_of(answer: &Object) -> String {
    let content = get(answer, &["result", "content"]).as_array().unwrap();
    content[0].as_object().unwrap().get("text").unwrap().as_str().unwrap().to_owned()
}

/// Whether an answer is an error (`isError` may be left out of a success, as the TypeScript SDK
/// does).
fn is_error(answer: &Object) -> bool {
    let result = get(answer, &["result"]).as_object().unwrap();
    result.get("isError") == Some(&Value::Bool(true))
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < until, "gave up waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One test's directory: the authority file, the approvals and the server's call log.
struct Place {
    dir: TempDir,
}

impl Place {
    fn new(name: &str, authority: &str) -> Place {
        let dir = TempDir::new(name);
        std::fs::write(dir.join("authority.json"), authority).unwrap();
        Place { dir }
    }

    fn approvals(&self) -> PathBuf {
        self.dir.join("approvals")
    }

    /// The tools the server was called with, in order.
    fn calls(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join("calls.log")).unwrap_or_default();
        text.lines().map(|l| parse(l).get("name").unwrap().as_str().unwrap().to_owned()).collect()
    }

    fn stderr(&self, n: usize) -> String {
        std::fs::read_to_string(self.dir.join(&format!("stderr-{n}.txt"))).unwrap_or_default()
    }

    /// The approval code proxy `n` printed for `approval` (on its standard error only).
    fn code(&self, n: usize, approval: &str) -> String {
        let marker = format!("mcp-approve {approval} --code ");
        let mut code = String::new();
        wait_until(&format!("the code of {approval} is printed"), || {
            let said = self.stderr(n);
            match said.split_once(&marker) {
                Some((_, rest)) => {
                    code = rest.chars().take_while(char::is_ascii_hexdigit).collect();
                    !code.is_empty()
                }
                None => false,
            }
        });
        code
    }

    /// `nyx5 mcp-approve ID --code CODE --yes` as a person at proxy `n`'s terminal runs it.
    fn approve(&self, n: usize, approval: &str) -> Output {
        let code = self.code(n, approval);
        self.verb(&["mcp-approve", approval, "--code", &code, "--yes"])
    }

    /// `nyx5 <verb> … --approvals DIR`.
    fn verb(&self, args: &[&str]) -> Output {
        nyx5().args(args).arg("--approvals").arg(self.approvals()).output().unwrap()
    }

    /// What `nyx5 mcp-approvals --json` lists.
    fn pending(&self) -> Vec<Object> {
        if !self.approvals().exists() {
            return Vec::new();
        }
        let out = self.verb(&["mcp-approvals", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let o = parse(String::from_utf8(out.stdout).unwrap().trim());
        get(&o, &["pending"]).as_array().unwrap().iter().map(|v| v.as_object().unwrap().clone()).collect()
    }

    /// `nyx5 mcp --wrap` here with no client (standard input closed), run to its end: for the
    /// refusals at startup.
    fn start_to_fail(&self) -> Output {
        nyx5()
            .arg("mcp")
            .arg("--wrap")
            .arg(self.dir.join("authority.json"))
            .arg("--approvals")
            .arg(self.approvals())
            .args(["--", "node"])
            .arg(fixture())
            .arg(self.dir.join("calls.log"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Waits for exactly one pending approval, of `tool`; its id.
    fn one_pending(&self, tool: &str) -> String {
        let mut found = Vec::new();
        wait_until(&format!("{tool} waits for approval"), || {
            found = self.pending();
            !found.is_empty()
        });
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(get(&found[0], &["tool"]).as_str(), Some(tool));
        get(&found[0], &["id"]).as_str().unwrap().to_owned()
    }
}

/// A running `nyx5 mcp --wrap`.
struct Wrap {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Object>,
    next_id: i64,
}

impl Drop for Wrap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Wrap {
    /// Starts the proxy in front of the fixture; `n` names its stderr file.
    fn start(p: &Place, n: usize, extra: &[&str]) -> Wrap {
        Wrap::start_server(p, n, extra, &["node".into(), fixture().into()])
    }

    /// Starts the proxy in front of `server` (a command line, the call log's path added).
    fn start_server(p: &Place, n: usize, extra: &[&str], server: &[std::ffi::OsString]) -> Wrap {
        let stderr = std::fs::File::create(p.dir.join(&format!("stderr-{n}.txt"))).unwrap();
        let mut child = nyx5()
            .arg("mcp")
            .arg("--wrap")
            .arg(p.dir.join("authority.json"))
            .arg("--approvals")
            .arg(p.approvals())
            .args(extra)
            .arg("--")
            .args(server)
            .arg(p.dir.join("calls.log"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .env("NYX5_APPROVAL_CODES", "stderr")
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                let msg = parse(&line);
                assert_eq!(msg.get("jsonrpc").and_then(Value::as_str), Some("2.0"), "{line}");
                if tx.send(msg).is_err() {
                    return;
                }
            }
        });
        Wrap { child, stdin, rx, next_id: 0 }
    }

    fn line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message from the proxy.
    fn read(&mut self) -> Object {
        self.rx.recv_timeout(PATIENCE).expect("a message from nyx5 mcp --wrap")
    }

    /// Sends a request; its id.
    fn send(&mut self, method: &str, params: &str) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#));
        id
    }

    /// The next message, which must answer `id`.
    fn answer(&mut self, id: i64) -> Object {
        let a = self.read();
        assert_eq!(a.get("id").and_then(Value::as_safe_integer), Some(id), "{a:?}");
        a
    }

    fn request(&mut self, method: &str, params: &str) -> Object {
        let id = self.send(method, params);
        self.answer(id)
    }

    fn initialize(&mut self, capabilities: &str) {
        let r = self.request(
            "initialize",
            &format!(r#"{{"protocolVersion":"2025-06-18","capabilities":{capabilities},"clientInfo":{{"name":"t","version":"1"}}}}"#),
        );
        assert_eq!(get(&r, &["result", "serverInfo", "name"]).as_str(), Some("fixture"));
        self.line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn call(&mut self, tool: &str, args: &str) -> i64 {
        self.send("tools/call", &format!(r#"{{"name":"{tool}","arguments":{args}}}"#))
    }

    /// Proves the proxy still serves, and that nothing was said before the pong.
    fn ping(&mut self) {
        let pong = self.request("ping", "{}");
        assert!(pong.contains_key("result"), "{pong:?}");
    }
}

#[test]
fn lists_withhold_the_prohibited_and_annotate_the_rest() {
    let p = Place::new("wrap-list", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    let list = w.request("tools/list", "{}");
    let tools = get(&list, &["result", "tools"]).as_array().unwrap();
    let names: Vec<&str> =
        tools.iter().map(|t| t.as_object().unwrap().get("name").unwrap().as_str().unwrap()).collect();
    // delete_file matches a prohibited pattern; secret is named nowhere and there is no default.
    assert_eq!(names, ["echo", "tick", "transfer", "publish", "ask_back", "die"]);
    let tool = |name: &str| tools.iter().map(|t| t.as_object().unwrap()).find(|t| t.get("name") == Some(&name.into()));
    let echo = tool("echo").unwrap();
    assert_eq!(get(echo, &["annotations", "destructiveHint"]), &Value::Bool(false));
    assert_eq!(get(echo, &["_meta", "nyx5/authority", "level"]).as_str(), Some("autonomous"));
    assert!(echo.contains_key("inputSchema"));
    let transfer = tool("transfer").unwrap();
    assert_eq!(get(transfer, &["annotations", "destructiveHint"]), &Value::Bool(true));
    assert_eq!(get(transfer, &["_meta", "nyx5/authority", "max_amount"]).as_safe_integer(), Some(100));
    assert_eq!(get(transfer, &["_meta", "nyx5/authority", "amount_argument"]).as_str(), Some("amount"));
    assert_eq!(get(transfer, &["inputSchema", "required"]), &Value::Array(vec!["amount".into()]));
    let publish = tool("publish").unwrap();
    assert_eq!(get(publish, &["_meta", "nyx5/authority", "level"]).as_str(), Some("needs_approval"));
    assert!(get(publish, &["description"]).as_str().unwrap().contains("waits for a human"));
    drop(w);
    let said = p.stderr(0);
    assert!(said.contains("withheld \"delete_file\"") && said.contains("withheld \"secret\""), "{said}");
    // The server calls echo destructive, its authority lets it act alone: a warning, no change.
    assert!(said.contains("warning: echo"), "{said}");
}

#[test]
fn an_autonomous_call_runs_and_a_prohibited_one_never_reaches_the_server() {
    let p = Place::new("wrap-run", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    let id = w.call("echo", r#"{"say":"hi"}"#);
    let echo = w.answer(id);
    assert!(!is_error(&echo));
    assert_eq!(text_of(&echo), r#"echo ran with {"say":"hi"}"#);
    let id = w.call("transfer", r#"{"amount":100}"#);
    assert!(text_of(&w.answer(id)).starts_with("transfer ran"));
    for tool in ["delete_file", "secret"] {
        let id = w.call(tool, "{}");
        let refused = w.answer(id);
        assert!(is_error(&refused), "{refused:?}");
        assert!(text_of(&refused).contains("prohibited"), "{refused:?}");
    }
    let id = w.send("tools/call", r#"{"name":7}"#);
    assert!(w.answer(id).contains_key("error"));
    // A name past 128 bytes is refused before it is judged or counted.
    let id = w.call(&"tick".repeat(33), "{}");
    assert!(w.answer(id).contains_key("error"));
    // A tools/call without an id never reaches the server unjudged (nor at all).
    w.line(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"say":"unseen"}}}"#);
    w.line("{not json");
    assert!(w.read().contains_key("error"));
    w.ping();
    assert_eq!(p.calls(), ["echo", "transfer"]);
}

#[test]
fn a_call_above_its_cap_waits_for_a_human_and_a_yes_holds_once() {
    let p = Place::new("wrap-oob", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    // Nothing is approved on the model's word: an argument saying so changes nothing.
    let first = w.call("transfer", r#"{"amount":500,"approved":true}"#);
    let approval = p.one_pending("transfer");
    w.ping();
    assert!(p.calls().is_empty());
    let listed = p.verb(&["mcp-approvals"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains(&approval) && listed.contains("500 tok is above the 100 tok"), "{listed}");
    assert!(listed.contains("small payments only"), "{listed}");
    // What can write the approvals directory cannot approve: not without the code (which is on
    // no file), not with a forged decision file, not with another code.
    assert!(!p.verb(&["mcp-approve", &approval]).status.success());
    assert!(!p.verb(&["mcp-approve", &approval, "--code", "00000000"]).status.success());
    let request =
        parse(std::fs::read_to_string(p.approvals().join(format!("{approval}.request.json"))).unwrap().trim());
    assert!(!request.contains_key("code"), "the code is on no file: {request:?}");
    let forged = format!(
        r#"{{"id":"{approval}","decision":"approve","arguments_sha256":"{}","code":"00000000"}}"#,
        get(&request, &["arguments_sha256"]).as_str().unwrap()
    );
    std::fs::write(p.approvals().join(format!("{approval}.decision.json")), forged).unwrap();
    let refused = w.answer(first);
    assert!(is_error(&refused), "a forged decision is a no: {refused:?}");
    assert!(p.calls().is_empty());
    let first = w.call("transfer", r#"{"amount":500,"approved":true}"#);
    let approval = p.one_pending("transfer");
    // A request rewritten to show other arguments is flagged, and not approved.
    let path = p.approvals().join(format!("{approval}.request.json"));
    let original = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, original.replace("500", "5")).unwrap();
    let listed = String::from_utf8(p.verb(&["mcp-approvals"]).stdout).unwrap();
    assert!(listed.contains("WARNING"), "{listed}");
    assert!(!p.approve(0, &approval).status.success());
    std::fs::write(&path, &original).unwrap();
    let out = p.approve(0, &approval);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ran = w.answer(first);
    assert!(!is_error(&ran));
    assert!(text_of(&ran).starts_with("transfer ran"));
    assert_eq!(p.calls(), ["transfer"]);
    // Answered, the request is gone: nothing is left to approve again.
    let again = p.approve(0, &approval);
    assert!(String::from_utf8_lossy(&again.stderr).contains("no pending approval"), "{again:?}");
    assert!(!p.verb(&["mcp-decline", "../etc/passwd"]).status.success());

    // The yes does not carry over to the same call again; this one is declined.
    let second = w.call("transfer", r#"{"amount":500,"approved":true}"#);
    let again = p.one_pending("transfer");
    assert_ne!(again, approval);
    assert!(p.verb(&["mcp-decline", &again]).status.success());
    let declined = w.answer(second);
    assert!(is_error(&declined));
    assert!(text_of(&declined).contains("declined by the human"), "{declined:?}");

    // A call the client cancels while it waits is never answered and never runs.
    let third = w.call("publish", "{}");
    p.one_pending("publish");
    w.line(&format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{third}}}}}"#));
    wait_until("the cancelled call stops waiting", || p.pending().is_empty());
    w.ping();
    assert_eq!(p.calls(), ["transfer"]);
    assert!(p.stderr(0).contains("nyx5 mcp-approve"));
}

#[test]
fn a_call_nobody_approves_in_time_is_refused() {
    let p = Place::new("wrap-timeout", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &["--approval-timeout", "1"]);
    w.initialize("{}");
    let id = w.call("publish", r#"{"text":"hello"}"#);
    let late = w.answer(id);
    assert!(is_error(&late));
    assert!(text_of(&late).contains("not approved in time"), "{late:?}");
    // Nothing of it is left in the directory, expired or not.
    let left: Vec<String> = std::fs::read_dir(p.approvals())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".request.json") || n.ends_with(".decision.json"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(p.calls().is_empty());
}

#[test]
fn a_decision_is_written_once() {
    use std::os::unix::fs::DirBuilderExt;
    let p = Place::new("wrap-once", AUTHORITY);
    std::fs::DirBuilder::new().mode(0o700).create(p.approvals()).unwrap();
    // A request as a waiting proxy writes it (its code's hash is of "c0de").
    let id = "0123456789abcdef";
    let code_sha = "3803b47609a2a464054659b14a0cdfba92830fb46ee70c03a336d5554b9acad4";
    let request = format!(
        r#"{{"id":"{id}","tool":"publish","arguments":{{}},"arguments_sha256":"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","code_sha256":"{code_sha}","reason":"r","authority":{{}},"created":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z","pid":1}}"#
    );
    std::fs::write(p.approvals().join(format!("{id}.request.json")), request).unwrap();
    assert_eq!(p.pending().len(), 1);
    let first = p.verb(&["mcp-decline", id]);
    assert!(first.status.success(), "{first:?}");
    assert!(p.pending().is_empty());
    for args in [vec!["mcp-decline", id], vec!["mcp-approve", id, "--code", "c0de"]] {
        let again = p.verb(&args);
        assert!(!again.status.success());
        let said = String::from_utf8_lossy(&again.stderr);
        assert!(said.contains("already decided: decline"), "{args:?}: {said}");
    }
    let decision = std::fs::read_to_string(p.approvals().join(format!("{id}.decision.json"))).unwrap();
    assert!(decision.contains(r#""decision":"decline""#), "{decision}");
}

/// [`AUTHORITY`] with the owner's opt-in to approvals by the client's elicitation.
fn by_elicitation() -> String {
    AUTHORITY.replacen('{', r#"{"approve_by_elicitation": true,"#, 1)
}

#[test]
fn a_client_with_elicitation_asks_its_human() {
    let p = Place::new("wrap-elicit", &by_elicitation());
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize(r#"{"elicitation":{}}"#);
    let ask = |w: &mut Wrap, answer: &str| -> Object {
        let id = w.call("publish", r#"{"text":"hello"}"#);
        let asked = w.read();
        assert_eq!(get(&asked, &["method"]).as_str(), Some("elicitation/create"));
        let our = get(&asked, &["id"]).as_str().unwrap().to_owned();
        // 16 random bytes: nobody writing the client's stream answers it before it is asked.
        let random = our.strip_prefix("nyx5-wrap-e-").unwrap_or_default();
        assert!(random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()), "{our}");
        let message = get(&asked, &["params", "message"]).as_str().unwrap();
        assert!(message.contains("publish") && message.contains("hello"), "{message}");
        assert!(message.contains("what is published stays published"), "{message}");
        assert_eq!(get(&asked, &["params", "requestedSchema", "required"]), &Value::Array(vec!["approve".into()]));
        assert_eq!(
            get(&asked, &["params", "requestedSchema", "properties", "approve", "type"]).as_str(),
            Some("boolean")
        );
        w.line(&format!(r#"{{"jsonrpc":"2.0","id":"{our}","result":{answer}}}"#));
        w.answer(id)
    };
    let ran = ask(&mut w, r#"{"action":"accept","content":{"approve":true}}"#);
    assert!(!is_error(&ran), "{ran:?}");
    assert_eq!(p.calls(), ["publish"]);
    for no in
        [r#"{"action":"accept","content":{"approve":false}}"#, r#"{"action":"decline"}"#, r#"{"action":"cancel"}"#]
    {
        let refused = ask(&mut w, no);
        assert!(is_error(&refused));
        assert!(text_of(&refused).contains("declined by the human"), "{refused:?}");
    }
    // A client that cannot ask after all (an error answer): the human decides out of band.
    let id = w.call("publish", r#"{"text":"again"}"#);
    let asked = w.read();
    let our = get(&asked, &["id"]).as_str().unwrap().to_owned();
    w.line(&format!(r#"{{"jsonrpc":"2.0","id":"{our}","error":{{"code":-32601,"message":"no"}}}}"#));
    let approval = p.one_pending("publish");
    w.ping();
    assert!(p.approve(0, &approval).status.success());
    assert!(!is_error(&w.answer(id)));
    assert_eq!(p.calls(), ["publish", "publish"]);
    // An answer to a request nobody made is dropped.
    w.line(r#"{"jsonrpc":"2.0","id":"nyx5-wrap-e-999","result":{"action":"accept","content":{"approve":true}}}"#);
    w.ping();
    assert_eq!(p.calls(), ["publish", "publish"]);
    assert!(p.pending().is_empty());
}

#[test]
fn the_hourly_limit_asks_on_the_next_call_even_after_a_restart() {
    let p = Place::new("wrap-hour", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    for _ in 0..2 {
        let id = w.call("tick", "{}");
        assert!(!is_error(&w.answer(id)));
    }
    let third = w.call("tick", "{}");
    let approval = p.one_pending("tick");
    assert!(p.verb(&["mcp-decline", &approval]).status.success());
    assert!(is_error(&w.answer(third)));
    drop(w);
    // The hour's count lives in the approvals directory: a restart does not reset it.
    let mut w = Wrap::start(&p, 1, &[]);
    w.initialize("{}");
    let fourth = w.call("tick", "{}");
    let approval = p.one_pending("tick");
    assert!(p.approve(1, &approval).status.success());
    assert!(!is_error(&w.answer(fourth)));
    assert_eq!(p.calls(), ["tick", "tick", "tick"]);
}

#[test]
fn the_servers_own_requests_go_out_under_our_ids_and_come_back() {
    let p = Place::new("wrap-route", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    // The fixture numbers its requests from 1, as the client does: ids would collide unmapped.
    let first = w.call("ask_back", "{}");
    assert_eq!(first, 1);
    let asked = w.read();
    assert_eq!(get(&asked, &["method"]).as_str(), Some("sampling/createMessage"));
    let our = get(&asked, &["id"]).as_str().unwrap().to_owned();
    assert!(our.starts_with("nyx5-wrap-"), "{our}");
    w.line(&format!(r#"{{"jsonrpc":"2.0","id":"{our}","result":{{"x":1}}}}"#));
    let answered = w.answer(first);
    assert_eq!(text_of(&answered), r#"the client said {"x":1}"#);
}

#[test]
fn the_servers_death_answers_what_is_open_and_exits_non_zero() {
    let p = Place::new("wrap-death", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    let waiting = w.call("publish", "{}");
    p.one_pending("publish");
    let dies = w.call("die", "{}");
    let mut answered = vec![w.read(), w.read()];
    answered.sort_by_key(|a| a.get("id").and_then(Value::as_safe_integer));
    assert_eq!(answered[0].get("id").and_then(Value::as_safe_integer), Some(waiting));
    assert_eq!(answered[1].get("id").and_then(Value::as_safe_integer), Some(dies));
    for a in &answered {
        assert_eq!(get(a, &["error", "code"]).as_safe_integer(), Some(-32603), "{a:?}");
    }
    let until = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(s) = w.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "nyx5 mcp --wrap outlived its server");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3));
    assert!(p.pending().is_empty());
}

#[test]
fn a_bad_authority_file_fails_at_startup() {
    for (bad, says) in [
        (r#"{"tools":{"pay":{"level":"autonomous","consequence":"irreversible"}}}"#, "tools.pay"),
        (r#"{"tools":{"pay":{"level":"autonomous","consequence":"costly","max_amount":5}}}"#, "currency"),
        (r#"{"tools":{},"defaults":{}}"#, "no member \"defaults\""),
        (r#"{"tools":"#, "authority file"),
    ] {
        let p = Place::new("wrap-bad", bad);
        let out = p.start_to_fail();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(says), "{bad}: {said}");
        assert!(out.stdout.is_empty());
    }
    let p = Place::new("wrap-nocmd", AUTHORITY);
    let out = nyx5().arg("mcp").arg("--wrap").arg(p.dir.join("authority.json")).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_hour_is_kept_when_its_file_is_deleted_or_spoiled() {
    let p = Place::new("wrap-spoiled", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    for _ in 0..2 {
        let id = w.call("tick", "{}");
        assert!(!is_error(&w.answer(id)));
    }
    // Something that can write the directory deletes the counts: the proxy still remembers.
    let counts: Vec<PathBuf> = std::fs::read_dir(p.approvals())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| f.to_string_lossy().ends_with(".json") && f.to_string_lossy().contains("calls-"))
        .collect();
    assert_eq!(counts.len(), 1, "{counts:?}");
    std::fs::remove_file(&counts[0]).unwrap();
    let third = w.call("tick", "{}");
    let approval = p.one_pending("tick");
    assert!(p.verb(&["mcp-decline", &approval]).status.success());
    assert!(is_error(&w.answer(third)));
    drop(w);
    // A spoiled file after a restart: every capped tool asks until it is written again.
    std::fs::write(&counts[0], b"{\"tick\": [").unwrap();
    let mut w = Wrap::start(&p, 1, &[]);
    w.initialize("{}");
    let fourth = w.call("tick", "{}");
    let approval = p.one_pending("tick");
    assert!(p.verb(&["mcp-decline", &approval]).status.success());
    assert!(is_error(&w.answer(fourth)));
    // An uncapped tool is not held back by it.
    let id = w.call("echo", "{}");
    assert!(!is_error(&w.answer(id)));
    assert_eq!(p.calls(), ["tick", "tick", "echo"]);
}

#[test]
fn an_authority_file_that_is_not_a_regular_file_is_refused_at_once() {
    let p = Place::new("wrap-fifo", AUTHORITY);
    std::fs::remove_file(p.dir.join("authority.json")).unwrap();
    assert!(Command::new("mkfifo").arg(p.dir.join("authority.json")).status().unwrap().success());
    let out = p.start_to_fail();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"), "{out:?}");
}

#[test]
fn an_approvals_directory_others_can_enter_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = Place::new("wrap-open-dir", AUTHORITY);
    std::fs::create_dir(p.approvals()).unwrap();
    std::fs::set_permissions(p.approvals(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = p.start_to_fail();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 700"), "{out:?}");
    assert!(out.stdout.is_empty());
    let listed = p.verb(&["mcp-approvals"]);
    assert_eq!(listed.status.code(), Some(2), "{listed:?}");
}

// ---------------------------------------------------------------------------------------------
// The official SDKs as the wrapped server (issue 34 §1).

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The official SDK's server of `kind` ("python": PyPI `mcp` in `.venv-mcp`, or the Python in
/// `NYX5_MCP_PYTHON`; "typescript": npm `@modelcontextprotocol/sdk` in node_modules) as a command
/// line, or `None` when that SDK is not installed here. In CI (CI=true) a missing SDK fails the
/// test: scripts/test installs both (scripts/mcp-sdks).
fn sdk_server(kind: &str) -> Option<Vec<std::ffi::OsString>> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let (found, command): (bool, Vec<std::ffi::OsString>) = match kind {
        "python" => {
            let python = std::env::var_os("NYX5_MCP_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| root().join(".venv-mcp/bin/python"));
            let ok = Command::new(&python)
                .args(["-c", "import mcp"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            (ok, vec![python.into(), fixtures.join("mcp_sdk_server.py").into()])
        }
        _ => {
            let ok = root().join("node_modules/@modelcontextprotocol/sdk/package.json").exists()
                && root().join("node_modules/zod/package.json").exists();
            (ok, vec!["node".into(), fixtures.join("mcp_sdk_server.mjs").into()])
        }
    };
    if found {
        return Some(command);
    }
    let why = format!(
        "the official {kind} MCP SDK is not installed (run scripts/mcp-sdks: pip `mcp` into .venv-mcp, npm \
         @modelcontextprotocol/sdk into node_modules)"
    );
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(!ci, "{why}");
    eprintln!("\n!!!!!!!! SKIPPED: {why} !!!!!!!!\n");
    None
}

const SDK_AUTHORITY: &str = r#"{
  "tools": {
    "echo": {"level":"autonomous","consequence":"reversible"},
    "transfer": {"level":"autonomous","consequence":"costly","max_amount":100,"currency":"tok"},
    "publish": {"level":"needs_approval","consequence":"irreversible","rationale":"what is published stays published"}
  },
  "patterns": {"delete_*": {"level":"prohibited","consequence":"irreversible"}},
  "amounts": {"transfer": {"argument":"amount","currency":"tok"}}
}"#;

fn call_line(id: &str, tool: &str, args: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#)
}

/// The attack of issue 34 §1 against `nyx5 mcp --wrap` in front of an official SDK's server: a
/// judged call carrying unjudged ones behind lone CRs (which the Python SDK reads as line ends),
/// a notification carrying one, and the other shapes that could carry a call. Only the calls the
/// proxy judged and let through may reach the server.
fn smuggling_is_refused(kind: &str) {
    let Some(server) = sdk_server(kind) else { return };
    let p = Place::new(&format!("wrap-smuggle-{kind}"), SDK_AUTHORITY);
    let mut w = Wrap::start_server(&p, 0, &[], &server);
    let init = w.request(
        "initialize",
        r#"{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}"#,
    );
    assert!(get(&init, &["result", "serverInfo", "name"]).as_str().unwrap().starts_with("fixture-"), "{init:?}");
    w.line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let delete = call_line("90", "delete_x", r#"{"what":"everything"}"#);
    let wire = call_line("91", "transfer", r#"{"amount":5000}"#);
    let publish = call_line("92", "publish", r#"{"text":"unapproved"}"#);
    // One line to the proxy; to the Python SDK, five, two of them calls.
    let echo = call_line("1000", "echo", r#"{"say":"carrier"}"#);
    let carrier = format!("{},\"x\":\r{delete}\r,\"z\":\r{wire}\r}}", echo.strip_suffix('}').unwrap());
    let hostile = [
        carrier,
        // The same inside a notification, which has no answer to wait for.
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{}},\"x\":\r{publish}\r}}"),
        // Other controls outside strings.
        "{\"jsonrpc\":\"2.0\",\r\"id\":1001,\"method\":\"ping\"}".to_owned(),
        format!("{}\t", call_line("1002", "echo", r#"{"say":"tab"}"#)),
        // Shapes that could carry a call: a batch, an id neither string nor number, duplicate
        // members (a reader keeping the last would see delete_x).
        format!("[{delete}]"),
        call_line(r#"{"n":1}"#, "delete_x", "{}"),
        r#"{"jsonrpc":"2.0","id":1003,"method":"tools/call","params":{"name":"echo","arguments":{"say":"dup"}},"params":{"name":"delete_x","arguments":{}}}"#.to_owned(),
    ];
    for line in &hostile {
        w.line(line);
    }
    // A call as a notification, a call under a method that is not a notification's: dropped.
    w.line(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_x","arguments":{}}}"#);
    w.line(r#"{"jsonrpc":"2.0","method":"tools/callx","params":{"name":"delete_x","arguments":{}}}"#);
    // Everything the proxy says until the server answers a ping sent after them (and the
    // answers to the judged calls after it), kept apart from those answers.
    let mut said = Vec::new();
    let mut until = |w: &mut Wrap, id: i64| loop {
        let m = w.read();
        if m.get("id").and_then(Value::as_safe_integer) == Some(id) {
            return m;
        }
        said.push(m);
    };
    let ping = w.send("ping", "{}");
    until(&mut w, ping);
    // The judged calls still work: echo runs, a transfer within the cap runs, delete_x is refused.
    let id = w.call("echo", r#"{"say":"judged"}"#);
    assert!(!is_error(&until(&mut w, id)));
    let id = w.call("transfer", r#"{"amount":50}"#);
    assert!(!is_error(&until(&mut w, id)));
    let id = w.call("delete_x", r#"{"what":"x"}"#);
    assert!(is_error(&until(&mut w, id)));
    let ping = w.send("ping", "{}");
    until(&mut w, ping);
    drop(w);
    let calls = p.calls();
    eprintln!("{kind}: the server ran {calls:?}");
    eprintln!("{kind}: the proxy answered the hostile lines with {said:?}");
    // Nothing unjudged ran: no delete, no transfer of 5000, no publish nobody approved.
    assert!(!calls.iter().any(|c| c == "delete_x" || c == "publish"), "{calls:?}");
    let log = std::fs::read_to_string(p.dir.join("calls.log")).unwrap_or_default();
    assert!(!log.contains("5000") && !log.contains("carrier") && !log.contains("unapproved"), "{log}");
    assert_eq!(calls.iter().filter(|c| *c == "transfer").count(), 1, "{calls:?}");
    assert_eq!(calls, ["echo", "transfer"]);
    // Each hostile line was refused with an error, none answered as if it ran.
    assert_eq!(said.len(), hostile.len(), "{said:?}");
    assert!(said.iter().all(|m| m.contains_key("error") && m.get("id") == Some(&Value::Null)), "{said:?}");
}

#[test]
fn nothing_unjudged_reaches_the_python_sdk_server() {
    smuggling_is_refused("python");
}

#[test]
fn nothing_unjudged_reaches_the_typescript_sdk_server() {
    smuggling_is_refused("typescript");
}

/// Rewrites a pending request as whatever can write the approvals directory could: `change`
/// edits its members, and its two plain hashes are made to match again (only the binding, which
/// needs the code, cannot be).
fn rewrite_request(p: &Place, approval: &str, change: impl FnOnce(&mut Object)) {
    let path = p.approvals().join(format!("{approval}.request.json"));
    let mut request = parse(std::fs::read_to_string(&path).unwrap().trim());
    change(&mut request);
    let args = Value::Object(get(&request, &["arguments"]).as_object().unwrap().clone());
    request.insert("arguments_sha256".into(), sha256_hex(&args.canonical()).into());
    let mut hashed = request.clone();
    hashed.remove("request_sha256");
    hashed.remove("binding");
    request.insert("request_sha256".into(), sha256_hex(&Value::Object(hashed).canonical()).into());
    std::fs::write(&path, Value::Object(request).canonical()).unwrap();
}

fn sha256_hex(bytes: &[u8]) -> String {
    nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(bytes))
}

#[test]
fn an_approval_binds_the_whole_request() {
    let p = Place::new("wrap-bound", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    // The tool's name, reason and rationale rewritten (hashes made to match): the person's code
    // does not approve what they were not shown, and nothing reports "approved (echo)".
    let first = w.call("publish", r#"{"text":"for good"}"#);
    let approval = p.one_pending("publish");
    let code = p.code(0, &approval);
    rewrite_request(&p, &approval, |r| {
        r.insert("tool".into(), "echo".into());
        r.insert("reason".into(), "harmless".into());
        r.insert("rationale".into(), "just an echo".into());
    });
    // Without the code the listing cannot tell, and says so.
    let listed = p.pending();
    assert_eq!(get(&listed[0], &["tool"]).as_str(), Some("echo"), "self-consistent, so listed: {listed:?}");
    assert_eq!(listed[0].get("verified"), Some(&Value::Bool(false)), "{listed:?}");
    let shown = String::from_utf8(p.verb(&["mcp-approvals"]).stdout).unwrap();
    assert!(shown.contains("UNVERIFIED") && shown.contains("echo") && shown.contains("(unverified)"), "{shown}");
    let out = p.verb(&["mcp-approve", &approval, "--code", &code, "--yes"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(said.contains("was changed since the proxy wrote it"), "{said}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("approved"));
    // Only the reason changed, its hash left stale: listed as changed, showing nothing it says.
    let path = p.approvals().join(format!("{approval}.request.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("harmless", "harmless too")).unwrap();
    let listed = p.pending();
    assert_eq!(listed[0].get("changed"), Some(&Value::Bool(true)), "{listed:?}");
    assert!(!listed[0].contains_key("tool") && !listed[0].contains_key("reason"), "{listed:?}");
    let shown = String::from_utf8(p.verb(&["mcp-approvals"]).stdout).unwrap();
    assert!(shown.contains("WARNING") && !shown.contains("harmless"), "{shown}");
    assert!(!p.verb(&["mcp-approve", &approval, "--code", &code, "--yes"]).status.success());
    assert!(p.verb(&["mcp-decline", &approval]).status.success());
    assert!(is_error(&w.answer(first)));
    // An untouched request is approved, and runs.
    let second = w.call("publish", r#"{"text":"for good"}"#);
    let approval = p.one_pending("publish");
    let out = p.approve(0, &approval);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(publish)"));
    assert!(!is_error(&w.answer(second)));
    assert_eq!(p.calls(), ["publish"]);
}

#[test]
fn a_peers_text_reaches_standard_error_escaped() {
    let p = Place::new("wrap-escapes", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    // The fixture lists a tool whose name holds ESC and BEL, says as much on its standard error
    // and its output; the client calls tools named so.
    w.request("tools/list", "{}");
    let id = w.call("evil\\u001b]0;owned\\u0007\\u001b[2J\\u202e", "{}");
    assert!(is_error(&w.answer(id)));
    let id = w.call("die\\u001b[31m", "{}");
    assert!(is_error(&w.answer(id)));
    w.ping();
    drop(w);
    let said = std::fs::read(p.dir.join("stderr-0.txt")).unwrap();
    let text = String::from_utf8_lossy(&said);
    for bad in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
        assert!(!text.contains(bad), "{bad:?} reached standard error: {text:?}");
    }
    assert!(text.contains("\\u{1b}]0;owned\\u{7}"), "{text}");
    assert!(text.contains("the fixture says \\u{1b}[31mhello\\u{7}"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// The hostile review of issue 34 §1.

#[test]
fn an_elicitation_answer_approves_nothing_unless_the_owner_opted_in() {
    // M1: whoever writes the client's stream declares elicitation and answers the request it
    // expects. Without the owner's opt-in nothing is asked of the client: the call waits for the
    // out-of-band code, and answers under any id are dropped.
    let p = Place::new("wrap-elicit-forged", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize(r#"{"elicitation":{}}"#);
    let id = w.call("publish", r#"{"text":"unasked"}"#);
    let approval = p.one_pending("publish");
    for n in 0..8 {
        w.line(&format!(
            r#"{{"jsonrpc":"2.0","id":"nyx5-wrap-e-{n}","result":{{"action":"accept","content":{{"approve":true}}}}}}"#
        ));
    }
    // No elicitation/create came before the pong, and nothing ran.
    w.ping();
    assert!(p.calls().is_empty());
    assert_eq!(p.one_pending("publish"), approval);
    assert!(p.stderr(0).contains("approve_by_elicitation"), "{}", p.stderr(0));
    assert!(p.verb(&["mcp-decline", &approval]).status.success());
    assert!(is_error(&w.answer(id)));
    assert!(p.calls().is_empty());
}

#[test]
fn mcp_approve_shows_what_its_code_verifies_and_asks_before_it_writes() {
    // M2: what is approved is the request as checked against the code, shown before the
    // decision is written; without a terminal to ask on, only --yes approves.
    let p = Place::new("wrap-approve-shows", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    let id = w.call("transfer", r#"{"amount":500,"memo":"rent"}"#);
    let approval = p.one_pending("transfer");
    let code = p.code(0, &approval);
    let decision = p.approvals().join(format!("{approval}.decision.json"));
    let out = p.verb(&["mcp-approve", &approval, "--code", &code]);
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"), "{out:?}");
    assert!(!decision.exists());
    assert_eq!(p.one_pending("transfer"), approval);
    // On a terminal: asked, and a no writes nothing.
    if let Some(out) = on_a_terminal(&p, &["mcp-approve", &approval, "--code", &code], "n\n") {
        assert!(out.contains("tool: transfer") && out.contains("Approve this one call? [y/N]"), "{out}");
        assert!(out.contains("not approved"), "{out}");
        assert!(!decision.exists());
    }
    let out = p.verb(&["mcp-approve", &approval, "--code", &code, "--yes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8(out.stdout).unwrap();
    let shown = said.find("tool: transfer").unwrap_or(usize::MAX);
    assert!(said.contains(r#"amount=500, memo="rent""#), "{said}");
    assert!(said.contains("amount: 500 tok") && said.contains("above the 100 tok"), "{said}");
    assert!(shown < said.find("approved ").unwrap(), "{said}");
    assert!(!is_error(&w.answer(id)));
    assert_eq!(p.calls(), ["transfer"]);
    // Again on a terminal, a yes approves.
    let id = w.call("publish", r#"{"text":"x"}"#);
    let approval = p.one_pending("publish");
    let code = p.code(0, &approval);
    match on_a_terminal(&p, &["mcp-approve", &approval, "--code", &code], "y\n") {
        Some(out) => assert!(out.contains("tool: publish") && out.contains(&format!("approved {approval}")), "{out}"),
        None => assert!(p.verb(&["mcp-approve", &approval, "--code", &code, "--yes"]).status.success()),
    }
    assert!(!is_error(&w.answer(id)));
    assert_eq!(p.calls(), ["transfer", "publish"]);
}

/// `nyx5 ARGS --approvals DIR` on a pseudo-terminal (util-linux `script`), typing `typed`; what
/// the terminal showed, or `None` where `script` is not installed.
fn on_a_terminal(p: &Place, args: &[&str], typed: &str) -> Option<String> {
    let mut line = vec![env!("CARGO_BIN_EXE_nyx5").to_owned()];
    line.extend(args.iter().map(|a| (*a).to_owned()));
    line.push("--approvals".to_owned());
    line.push(p.approvals().to_string_lossy().into_owned());
    let quoted: Vec<String> = line.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect();
    let mut child = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(typed.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_reused_id_cannot_take_another_requests_answer() {
    // L2: a tools/list and a ping under the same id: each is answered as what it was, and the
    // list only ever filtered.
    let p = Place::new("wrap-same-id", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    w.line(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#);
    w.line(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
    let answers = [w.read(), w.read()];
    let list = answers.iter().find(|a| get(a, &["result"]).as_object().unwrap().contains_key("tools")).unwrap();
    let pong = answers.iter().find(|a| get(a, &["result"]).as_object().unwrap().is_empty());
    assert!(pong.is_some(), "{answers:?}");
    for a in &answers {
        assert_eq!(a.get("id").and_then(Value::as_safe_integer), Some(7), "{a:?}");
    }
    for t in get(list, &["result", "tools"]).as_array().unwrap() {
        let t = t.as_object().unwrap();
        assert!(!get(t, &["name"]).as_str().unwrap().starts_with("delete_"), "{t:?}");
        assert!(t.get("_meta").and_then(Value::as_object).is_some_and(|m| m.contains_key("nyx5/authority")), "{t:?}");
    }
}

#[test]
fn an_endless_line_on_the_servers_standard_error_is_dropped_not_held() {
    // L3: 6 MiB without a line end on the server's standard error; then a short line.
    let p = Place::new("wrap-long-stderr", AUTHORITY);
    let script =
        r#"head -c 6291456 /dev/zero | tr '\0' a >&2; printf '\nafter the long line\n' >&2; exec node "$1" "$2""#;
    let server: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), script.into(), "sh".into(), fixture().into()];
    let mut w = Wrap::start_server(&p, 0, &[], &server);
    w.initialize("{}");
    w.ping();
    wait_until("the line after the long one is relayed", || p.stderr(0).contains("after the long line"));
    drop(w);
    let said = std::fs::metadata(p.dir.join("stderr-0.txt")).unwrap().len();
    eprintln!("standard error: {said} bytes");
    assert!(said < 1024 * 1024, "{said} bytes of standard error: the long line was held and relayed");
    assert!(p.stderr(0).contains("over 4 MiB on its standard error"));
}

#[test]
fn a_cancelled_decision_file_is_answered_as_a_no() {
    // L5: a decision file saying "cancelled" (from whatever can write the directory) ends the
    // wait with an answer, as any decision that is not an approval does.
    let p = Place::new("wrap-cancel-file", AUTHORITY);
    let mut w = Wrap::start(&p, 0, &[]);
    w.initialize("{}");
    let id = w.call("publish", r#"{"text":"x"}"#);
    let approval = p.one_pending("publish");
    let decision = format!(r#"{{"id":"{approval}","decision":"cancelled","request_sha256":"","time":""}}"#);
    std::fs::write(p.approvals().join(format!("{approval}.decision.json")), decision).unwrap();
    let answered = w.answer(id);
    assert!(is_error(&answered), "{answered:?}");
    assert!(text_of(&answered).contains("declined"), "{answered:?}");
    w.ping();
    assert!(p.calls().is_empty());
}
