//! The wrapping proxy's I/O: the child started and its lines relayed, the client's lines judged
//! and passed on under ids of ours, and each call that needs a human waiting on its own thread
//! for an elicitation's answer or a decision file.

use std::collections::{HashMap, HashSet};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nyx5_proto::authority::{Level, Verdict};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, obj};
use nyx5_proto::{Timestamp, Value};

use super::rules::{
    Bound, Ended, Rule, Rules, annotate, arguments_sha256, authority_meta, binding, decided, judge, judged_line,
    latest, request_sha256, shorten, shown_arguments, wire,
};
use super::store::{MAX_FILE_BYTES, Store, lock, now_ms};
use crate::client::output::one_line as safe;
use crate::error::{EXIT_NETWORK, Failure, Outcome};
use crate::jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, MAX_LINE_BYTES, PARSE_ERROR, error, read_line};
use crate::sys::OsRng;

/// How often a waiting call looks for a decision file.
const POLL: Duration = Duration::from_millis(200);
/// How long the child may take to exit once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// The default `--approval-timeout`, in seconds.
pub(crate) const DEFAULT_TIMEOUT_S: u64 = 600;
/// The most calls that wait for a human at once; beyond them a call is refused.
const MAX_WAITING: usize = 64;
/// The longest tool name a call may give: longer names are refused before they are judged, so
/// nobody grows the hour's counts with invented names.
const MAX_TOOL_NAME: usize = 128;
/// The most requests of the server's that the client has not answered.
const MAX_CHILD_REQUESTS: usize = 1024;
/// The prefix of every id we put on a request to the client.
const OUR_IDS: &str = "nyx5-wrap-";

// ---------------------------------------------------------------------------------------------
// The proxy.

/// What `nyx5 mcp --wrap` was given.
#[derive(Debug)]
pub(crate) struct WrapArgs {
    pub(crate) file: PathBuf,
    pub(crate) approvals: Option<PathBuf>,
    pub(crate) timeout: Duration,
    pub(crate) command: Vec<String>,
}

/// What a waiting call hears.
#[derive(Debug)]
enum Event {
    /// The client's answer to our elicitation.
    Answer(Object),
    /// The client cancelled the call.
    Cancelled,
}

#[derive(Debug)]
struct Waiting {
    id: Value,
    tx: mpsc::Sender<Event>,
    /// Its request file, while it waits out of band.
    approval: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// The client declared the `elicitation` capability.
    elicitation: bool,
    /// Our input ended: the child's exit is expected.
    closing: bool,
    /// Client requests the child has not answered: by the id we gave them (`nyx5-wrap-s-N`),
    /// the client's id and the method.
    in_flight: HashMap<String, (Value, String)>,
    /// Calls waiting for a human, by id key.
    waiting: HashMap<String, Waiting>,
    /// The child's requests to the client: by our id, the child's.
    child_requests: HashMap<String, Value>,
    /// Our elicitations: by our id, the id key of the call they are for.
    elicitations: HashMap<String, String>,
    /// Tools already warned about.
    warned: HashSet<String>,
    next: u64,
}

#[derive(Debug)]
struct Shared {
    rules: Rules,
    store: Store,
    /// Which calls file counts this server's calls.
    calls_key: String,
    timeout: Duration,
    out: Mutex<std::io::Stdout>,
    child_in: Mutex<Option<ChildStdin>>,
    child: Mutex<Option<Child>>,
    state: Mutex<State>,
}

/// An id as a key: `1` and `"1"` differ.
fn key(id: &Value) -> String {
    id.canonical_string()
}

fn tool_result(text: &str, is_error: bool) -> Value {
    Value::Object(obj([
        ("content", Value::Array(vec![Value::Object(obj([("type", "text".into()), ("text", text.into())]))])),
        ("isError", Value::Bool(is_error)),
    ]))
}

fn response(id: Value, result: Value) -> Value {
    crate::jsonrpc::result(id, result)
}

impl Shared {
    fn to_client(&self, msg: &Value) {
        self.to_client_raw(&wire(msg));
    }

    fn to_client_raw(&self, bytes: &[u8]) {
        let mut out = lock(&self.out);
        let written = out.write_all(bytes).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
        if let Err(e) = written {
            eprintln!("nyx5 mcp --wrap: cannot write standard output: {e}");
        }
    }

    /// Writes a line to the child; false if it is gone.
    fn to_child_raw(&self, bytes: &[u8]) -> bool {
        let mut input = lock(&self.child_in);
        let Some(w) = input.as_mut() else { return false };
        w.write_all(bytes).and_then(|()| w.write_all(b"\n")).and_then(|()| w.flush()).is_ok()
    }

    fn next_id(&self, kind: &str) -> String {
        let mut st = lock(&self.state);
        st.next += 1;
        format!("{OUR_IDS}{kind}-{}", st.next)
    }

    /// Sends a client request to the child under an id of ours (so no id the client reuses can
    /// take another request's answer, or its judgement), remembering it until the child answers.
    fn forward(&self, id: &Value, method: &str, mut msg: Object) {
        let our = self.next_id("s");
        msg.insert("id".into(), our.as_str().into());
        lock(&self.state).in_flight.insert(our.clone(), (id.clone(), method.to_owned()));
        if !self.to_child_raw(&wire(&Value::Object(msg))) {
            lock(&self.state).in_flight.remove(&our);
            self.to_client(&error(id.clone(), INTERNAL_ERROR, "the wrapped server is gone"));
        }
    }

    fn refuse(&self, id: Value, tool: &str, why: &str) {
        eprintln!("nyx5 mcp --wrap: {}: {}", safe(tool), safe(why));
        self.to_client(&response(id, tool_result(&format!("nyx5: {tool}: {why}"), true)));
    }
}

/// One line from the client. Whatever reaches the child is the re-serialisation of the message
/// parsed and judged here ([`wire`]), never the line itself.
fn from_client(sh: &Arc<Shared>, line: &[u8]) {
    let line = match judged_line(line) {
        Ok(l) => l,
        Err(why) => return sh.to_client(&error(Value::Null, PARSE_ERROR, &why)),
    };
    let msg = match Value::parse(line, MAX_LINE_BYTES) {
        Ok(Value::Object(o)) => o,
        Ok(_) => {
            return sh.to_client(&error(Value::Null, INVALID_REQUEST, "invalid request: a message is one JSON object"));
        }
        Err(e) => return sh.to_client(&error(Value::Null, PARSE_ERROR, &format!("parse error: {}", e.reason))),
    };
    let id = match msg.get("id") {
        None => None,
        Some(v @ (Value::String(_) | Value::Number(_))) => Some(v.clone()),
        Some(Value::Null) if !msg.contains_key("method") => None,
        Some(_) => {
            return sh.to_client(&error(
                Value::Null,
                INVALID_REQUEST,
                "invalid request: `id` must be a string or number",
            ));
        }
    };
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let id = id.unwrap_or(Value::Null);
        return sh.to_client(&error(id, INVALID_REQUEST, "invalid request: `jsonrpc` must be \"2.0\""));
    }
    let method = match msg.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => {
            let id = id.unwrap_or(Value::Null);
            return sh.to_client(&error(id, INVALID_REQUEST, "invalid request: `method` must be a string"));
        }
        None if msg.contains_key("result") || msg.contains_key("error") => return client_response(sh, id, msg),
        None => {
            return sh.to_client(&error(id.unwrap_or(Value::Null), INVALID_REQUEST, "invalid request: no `method`"));
        }
    };
    let params = msg.get("params").and_then(Value::as_object).cloned().unwrap_or_default();
    let Some(id) = id else {
        // A `tools/call` without an id is not a call JSON-RPC allows, and must not reach a server
        // that would run it unjudged.
        if method == "tools/call" {
            eprintln!("nyx5 mcp --wrap: a tools/call without an id dropped");
            return;
        }
        // A notification: a cancellation of a call that waits for a human stays here.
        if method == "notifications/cancelled"
            && let Some(req) = params.get("requestId")
            && let Some(w) = lock(&sh.state).waiting.get(&key(req))
        {
            let _ = w.tx.send(Event::Cancelled);
            return;
        }
        // Only notifications go on without an id: nothing else can be run unanswered.
        if !method.starts_with("notifications/") {
            return eprintln!("nyx5 mcp --wrap: a {} without an id (not a notification) dropped", safe(&method));
        }
        let mut msg = msg;
        // A cancellation names the request by the id the server knows it by.
        if method == "notifications/cancelled"
            && let Some(Value::Object(p)) = msg.get_mut("params")
            && let Some(req) = p.get("requestId").map(key)
        {
            let st = lock(&sh.state);
            let ours = latest(st.in_flight.iter().filter(|(_, (c, _))| key(c) == req).map(|(o, _)| o.as_str()));
            drop(st);
            if let Some(ours) = ours {
                p.insert("requestId".into(), ours.into());
            }
        }
        if !sh.to_child_raw(&wire(&Value::Object(msg))) {
            eprintln!("nyx5 mcp --wrap: the wrapped server is gone; {} dropped", safe(&method));
        }
        return;
    };
    match method.as_str() {
        "initialize" => {
            let caps = params.get("capabilities").and_then(Value::as_object);
            let elicitation = caps.and_then(|c| c.get("elicitation")).and_then(Value::as_object);
            // 2025-11-25 splits elicitation into form and url modes; an empty object is form.
            let form = elicitation.is_some_and(|e| e.is_empty() || e.contains_key("form"));
            if form && !sh.rules.by_elicitation {
                eprintln!(
                    "nyx5 mcp --wrap: the client offers elicitation; approvals are still asked out of band, since the \
                     authority file does not set approve_by_elicitation"
                );
            }
            lock(&sh.state).elicitation = form && sh.rules.by_elicitation;
            sh.forward(&id, &method, msg);
        }
        "tools/call" => call(sh, id, &params, msg),
        _ => sh.forward(&id, &method, msg),
    }
}

/// A response from the client: to a request of the child's (mapped back) or to our elicitation.
fn client_response(sh: &Arc<Shared>, id: Option<Value>, mut msg: Object) {
    let ours = id.as_ref().and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut st = lock(&sh.state);
    if let Some(child_id) = st.child_requests.remove(&ours) {
        drop(st);
        msg.insert("id".into(), child_id);
        if !sh.to_child_raw(&wire(&Value::Object(msg))) {
            eprintln!("nyx5 mcp --wrap: the wrapped server is gone; an answer to it dropped");
        }
        return;
    }
    if let Some(call) = st.elicitations.remove(&ours) {
        if let Some(w) = st.waiting.get(&call) {
            let _ = w.tx.send(Event::Answer(msg));
        }
        return;
    }
    drop(st);
    eprintln!(
        "nyx5 mcp --wrap: an answer to no request of ours (id {}) dropped",
        safe(&shorten(&id.map(|i| key(&i)).unwrap_or_default(), 120))
    );
}

/// `tools/call`: judged before anything reaches the child; `msg` is the very message judged.
fn call(sh: &Arc<Shared>, id: Value, params: &Object, msg: Object) {
    let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
        return sh.to_client(&error(id, INVALID_PARAMS, "invalid params: `name` must be a string"));
    };
    if name.len() > MAX_TOOL_NAME {
        let why = format!("invalid params: a tool's name is at most {MAX_TOOL_NAME} bytes");
        return sh.to_client(&error(id, INVALID_PARAMS, &why));
    }
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Object::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => return sh.to_client(&error(id, INVALID_PARAMS, "invalid params: `arguments` must be an object")),
    };
    let rule = sh.rules.rule(&name);
    match sh.store.admit(&sh.calls_key, &name, &rule, &args) {
        Verdict::Refused(e) => sh.refuse(id, &name, &format!("refused: {}", e.reason)),
        Verdict::Allowed => sh.forward(&id, "tools/call", msg),
        Verdict::Ask(reason) => {
            let (tx, rx) = mpsc::channel();
            let k = key(&id);
            let (dup, full) = {
                let st = lock(&sh.state);
                (st.waiting.contains_key(&k), st.waiting.len() >= MAX_WAITING)
            };
            if dup {
                let why = "invalid request: this id already waits for approval";
                return sh.to_client(&error(id, INVALID_REQUEST, why));
            }
            if full {
                let why = format!("needs a human's approval, and {MAX_WAITING} calls already wait for one");
                return sh.refuse(id, &name, &why);
            }
            lock(&sh.state).waiting.insert(k.clone(), Waiting { id: id.clone(), tx, approval: None });
            let call = AskedCall { id, key: k, name, args, rule, reason, msg };
            let sh = Arc::clone(sh);
            std::thread::spawn(move || wait_for_human(&sh, call, &rx));
        }
    }
}

/// A call waiting for a human.
#[derive(Debug)]
struct AskedCall {
    id: Value,
    key: String,
    name: String,
    args: Object,
    rule: Rule,
    reason: String,
    msg: Object,
}

/// Waits for a human's yes or no on one call (on its own thread), then forwards or answers it.
fn wait_for_human(sh: &Arc<Shared>, c: AskedCall, rx: &mpsc::Receiver<Event>) {
    let deadline = Instant::now() + sh.timeout;
    let shown = shown_arguments(&c.args);
    let asks_client = lock(&sh.state).elicitation;
    let mut elicitation = if asks_client { elicit(sh, &c, &shown) } else { None };
    let mut bound = Bound::default();
    let mut approval = match elicitation {
        Some(_) => None,
        None => out_of_band(sh, &c, &mut bound),
    };
    if elicitation.is_none() && approval.is_none() {
        lock(&sh.state).waiting.remove(&c.key);
        return sh.refuse(
            c.id,
            &c.name,
            "needs a human's approval, and no human could be asked (see the proxy's standard error)",
        );
    }
    let outcome = loop {
        match rx.recv_timeout(POLL) {
            Ok(Event::Cancelled) => break Ended::Cancelled,
            Ok(Event::Answer(answer)) => {
                if answer.contains_key("error") || !answer.contains_key("result") {
                    // The client could not ask: the human decides out of band instead.
                    elicitation = None;
                    approval = out_of_band(sh, &c, &mut bound);
                    if approval.is_none() {
                        break Ended::Declined("no approval request could be written");
                    }
                    continue;
                }
                let result = answer.get("result").and_then(Value::as_object).cloned().unwrap_or_default();
                let accepted = result.get("action").and_then(Value::as_str) == Some("accept");
                let yes = result.get("content").and_then(Value::as_object).and_then(|o| o.get("approve"))
                    == Some(&Value::Bool(true));
                break if accepted && yes { Ended::Approved } else { Ended::Declined("declined by the human") };
            }
            Err(RecvTimeoutError::Disconnected) => break Ended::Cancelled,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(a) = &approval
            && let Some(d) = sh.store.decision(a)
        {
            break decided(&d, &bound);
        }
        if Instant::now() >= deadline {
            // Closing the request races a person deciding it: whoever writes first decides.
            if let Some(a) = &approval
                && let Err(Some(d)) = sh.store.decide_once(a, "expired", &bound.request_sha, None)
            {
                break decided(&d, &bound);
            }
            break Ended::Expired;
        }
    };
    if let Some(a) = &approval {
        if outcome == Ended::Cancelled {
            let _ = sh.store.decide_once(a, "cancelled", &bound.request_sha, None);
        }
        sh.store.close(a);
    }
    if let Some(e) = &elicitation {
        lock(&sh.state).elicitations.remove(e);
        if matches!(outcome, Ended::Cancelled | Ended::Expired) {
            let params = obj([("requestId", e.as_str().into()), ("reason", "no longer needed".into())]);
            sh.to_client(&notification("notifications/cancelled", params));
        }
    }
    // Whoever removes the call from `waiting` answers it (the child's death may have).
    if lock(&sh.state).waiting.remove(&c.key).is_none() {
        return;
    }
    match outcome {
        Ended::Approved => match judge(&c.rule, &c.args, 0, true) {
            Verdict::Allowed => {
                eprintln!("nyx5 mcp --wrap: {}: approved by a human, this call only", safe(&c.name));
                sh.store.record_call(&sh.calls_key, &c.name, &c.rule);
                sh.forward(&c.id, "tools/call", c.msg);
            }
            Verdict::Refused(e) => sh.refuse(c.id, &c.name, &format!("refused: {}", e.reason)),
            Verdict::Ask(why) => sh.refuse(c.id, &c.name, &format!("still not allowed: {why}")),
        },
        Ended::Declined(why) => sh.refuse(c.id, &c.name, why),
        Ended::Expired => sh.refuse(c.id, &c.name, &format!("not approved in time ({} s)", sh.timeout.as_secs())),
        Ended::Cancelled => eprintln!("nyx5 mcp --wrap: {}: cancelled while waiting for approval", safe(&c.name)),
    }
}

fn notification(method: &str, params: Object) -> Value {
    Value::Object(obj([("jsonrpc", "2.0".into()), ("method", method.into()), ("params", Value::Object(params))]))
}

/// Asks the client's human (`elicitation/create`, 2025-06-18's form), only where the owner
/// opted in (`approve_by_elicitation`); our request's id, 16 random bytes (hex) that nobody
/// writing the client's stream can guess ahead of the request. `None` without randomness.
fn elicit(sh: &Arc<Shared>, c: &AskedCall, shown: &str) -> Option<String> {
    let mut rng = OsRng::new();
    let our = format!("{OUR_IDS}e-{}", hex(&rng.bytes::<16>()));
    rng.check().ok()?;
    lock(&sh.state).elicitations.insert(our.clone(), c.key.clone());
    let mut message = format!(
        "The agent wants to call the tool {} with {shown}. It needs your approval: {}.",
        safe(&c.name),
        c.reason
    );
    if let Some(r) = &c.rule.authority.rationale {
        message.push_str(&format!(" Its authority says: {r}."));
    }
    message.push_str(" Approving lets this one call through, no other.");
    let schema = Value::parse_str(
        r#"{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve this call","description":"Yes lets this one call through; the next one is asked again"}},"required":["approve"]}"#,
    )
    .unwrap_or(Value::Null);
    let params = obj([("message", message.into()), ("requestedSchema", schema)]);
    let mut req = match notification("elicitation/create", params) {
        Value::Object(o) => o,
        _ => Object::new(),
    };
    req.insert("id".into(), our.as_str().into());
    sh.to_client(&Value::Object(req));
    Some(our)
}

/// Writes the call's request file and tells the person how to decide it; its id (`None` when
/// nobody can be told). The approval code goes only to the person's terminal (or, when they chose
/// it, standard error), its hash and the whole request's to `bound`: what can write the directory
/// (the wrapped server, a model with a file tool) can neither approve nor change what is approved.
fn out_of_band(sh: &Arc<Shared>, c: &AskedCall, bound: &mut Bound) -> Option<String> {
    // The code is shown on the person's terminal. Without one, standard error only when the
    // person chose it (`NYX5_APPROVAL_CODES=stderr`): clients started from a desktop keep their
    // servers' standard error in log files a model with a file tool may read.
    let to_stderr = std::env::var("NYX5_APPROVAL_CODES").is_ok_and(|v| v == "stderr");
    let tty = if to_stderr { None } else { std::fs::OpenOptions::new().write(true).open("/dev/tty").ok() };
    if !to_stderr && tty.is_none() {
        eprintln!(
            "nyx5 mcp --wrap: {} needs a human's approval, and there is no terminal to show its code on \
             (set NYX5_APPROVAL_CODES=stderr to show codes on standard error, or use a client that asks by elicitation)",
            safe(&c.name)
        );
        return None;
    }
    let mut rng = OsRng::new();
    let id = hex(&rng.bytes::<8>());
    let code = hex(&rng.bytes::<8>());
    if rng.check().is_err() {
        return None;
    }
    let hashed = hex(&sha256(code.as_bytes()));
    let now = now_ms();
    let expires = now.saturating_add(i64::try_from(sh.timeout.as_millis()).unwrap_or(i64::MAX));
    let mut o = obj([
        ("id", id.as_str().into()),
        ("tool", c.name.as_str().into()),
        ("arguments", Value::Object(c.args.clone())),
        ("arguments_sha256", arguments_sha256(&c.args).into()),
        ("code_sha256", hashed.as_str().into()),
        ("reason", c.reason.as_str().into()),
        ("authority", authority_meta(&c.rule)),
        ("created", Timestamp::from_millis(now).to_rfc3339().into()),
        ("expires", Timestamp::from_millis(expires).to_rfc3339().into()),
        ("pid", i64::from(std::process::id()).into()),
    ]);
    if let Some(r) = &c.rule.authority.rationale {
        o.insert("rationale".into(), r.as_str().into());
    }
    let request_sha = request_sha256(&o);
    o.insert("request_sha256".into(), request_sha.as_str().into());
    o.insert("binding".into(), binding(&code, &request_sha).into());
    if let Err(e) = sh.store.write(&sh.store.request_path(&id), &Value::Object(o), true) {
        eprintln!("nyx5 mcp --wrap: cannot write an approval request in {}: {e}", sh.store.dir.display());
        return None;
    }
    if let Some(w) = lock(&sh.state).waiting.get_mut(&c.key) {
        w.approval = Some(id.clone());
    }
    *bound = Bound { code_sha: hashed, request_sha };
    let dir = sh.store.dir.display();
    let said = format!(
        "nyx5 mcp --wrap: {} waits for a human ({}) with {}. Approve this one call with `nyx5 mcp-approve {id} --code \
         {code} --approvals {dir}` or refuse it with `nyx5 mcp-decline {id} --approvals {dir}` within {} s.",
        safe(&c.name),
        safe(&c.reason),
        shown_arguments(&c.args),
        sh.timeout.as_secs()
    );
    // The person's terminal (nothing else reads what is shown there), or standard error when
    // `NYX5_APPROVAL_CODES=stderr` chose it.
    match tty.map(|mut tty| writeln!(tty, "{said}")) {
        Some(Ok(())) => {}
        Some(Err(_)) => {
            eprintln!("nyx5 mcp --wrap: cannot show the approval code of {} on the terminal", safe(&c.name));
            sh.store.close(&id);
            return None;
        }
        None => eprintln!("{said}"),
    }
    Some(id)
}

/// One line from the child: like the client's, what reaches the client is the re-serialisation
/// of the message parsed here.
fn from_child(sh: &Arc<Shared>, line: &[u8]) {
    let parsed = judged_line(line).ok().map(|l| Value::parse(l, MAX_LINE_BYTES));
    let mut msg = match parsed {
        Some(Ok(Value::Object(o))) => o,
        _ => {
            let shown = shorten(&crate::sanitise::bytes_line(line), 120);
            return eprintln!("nyx5 mcp --wrap: the wrapped server wrote something that is not JSON-RPC: {shown}");
        }
    };
    if let Some(method) = msg.get("method").and_then(Value::as_str).map(str::to_owned) {
        match msg.get("id").cloned() {
            Some(child_id) => {
                // A request of the child's: out under an id of ours, its answer mapped back.
                if lock(&sh.state).child_requests.len() >= MAX_CHILD_REQUESTS {
                    let why = format!("{MAX_CHILD_REQUESTS} requests to the client are already unanswered");
                    sh.to_child_raw(&error(child_id, INTERNAL_ERROR, &why).canonical());
                    return;
                }
                let our = sh.next_id("c");
                lock(&sh.state).child_requests.insert(our.clone(), child_id);
                msg.insert("id".into(), our.into());
                sh.to_client(&Value::Object(msg));
            }
            None => {
                if method == "notifications/cancelled"
                    && let Some(Value::Object(params)) = msg.get_mut("params")
                    && let Some(req) = params.get("requestId").cloned()
                {
                    let mut st = lock(&sh.state);
                    let ours = st.child_requests.iter().find(|(_, v)| **v == req).map(|(k, _)| k.clone());
                    if let Some(ours) = ours {
                        st.child_requests.remove(&ours);
                        params.insert("requestId".into(), ours.into());
                    } else if let Some((client_id, _)) = req.as_str().and_then(|r| st.in_flight.get(r)) {
                        // The server gives up a request of the client's: named by the client's id.
                        params.insert("requestId".into(), client_id.clone());
                    }
                    drop(st);
                    return sh.to_client(&Value::Object(msg));
                }
                sh.to_client(&Value::Object(msg));
            }
        }
        return;
    }
    let Some(id) = msg.get("id").cloned() else {
        return eprintln!("nyx5 mcp --wrap: the wrapped server answered without an id; dropped");
    };
    let asked = id.as_str().and_then(|ours| lock(&sh.state).in_flight.remove(ours));
    let Some((client_id, method)) = asked else {
        let shown = safe(&shorten(&key(&id), 120));
        return eprintln!("nyx5 mcp --wrap: the wrapped server answered {shown}, which nobody asked; dropped");
    };
    msg.insert("id".into(), client_id);
    if method == "tools/list"
        && let Some(Value::Object(result)) = msg.get_mut("result")
        && let Some(Value::Array(tools)) = result.get_mut("tools")
    {
        let listed = std::mem::take(tools);
        let mut st = lock(&sh.state);
        for t in listed {
            let Value::Object(t) = t else { continue };
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let rule = sh.rules.rule(&name);
            let first = st.warned.insert(name.clone());
            if rule.authority.level == Level::Prohibited {
                if first {
                    eprintln!("nyx5 mcp --wrap: withheld \"{}\": its authority prohibits it", safe(&name));
                }
                continue;
            }
            let (t, warnings) = annotate(&t, &rule);
            if first {
                for w in warnings {
                    eprintln!("nyx5 mcp --wrap: warning: {}: {w} (the authority decides)", safe(&name));
                }
            }
            tools.push(Value::Object(t));
        }
        drop(st);
        return sh.to_client(&Value::Object(msg));
    }
    sh.to_client(&Value::Object(msg));
}

/// The child's output ended. Expected once our input ended; otherwise every open request is
/// answered with an error and the command exits non-zero.
fn child_gone(sh: &Arc<Shared>) {
    if lock(&sh.state).closing {
        return;
    }
    let status = reap(sh);
    let mut st = lock(&sh.state);
    if st.closing {
        return;
    }
    let open: Vec<Value> = st.in_flight.drain().map(|(_, (id, _))| id).collect();
    let waiting: Vec<Waiting> = st.waiting.drain().map(|(_, w)| w).collect();
    drop(st);
    let why = match status {
        Some(s) => format!("the wrapped server exited ({s}) before answering"),
        None => "the wrapped server closed its output before answering".to_owned(),
    };
    for id in open.into_iter().chain(waiting.iter().map(|w| w.id.clone())) {
        sh.to_client(&error(id, INTERNAL_ERROR, &why));
    }
    for w in &waiting {
        if let Some(a) = &w.approval {
            sh.store.close(a);
        }
    }
    let shown = status.map(|s| format!(" ({s})")).unwrap_or_default();
    eprintln!("nyx5: the wrapped server exited{shown}");
    std::process::exit(i32::from(EXIT_NETWORK));
}

/// Waits a moment for the child to exit, then kills it; its exit status.
fn reap(sh: &Shared) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + EXIT_GRACE;
    loop {
        let mut child = lock(&sh.child);
        let c = child.as_mut()?;
        match c.try_wait() {
            Ok(Some(s)) => return Some(s),
            Err(_) => return None,
            Ok(None) if Instant::now() >= until => {
                let _ = c.kill();
                return c.wait().ok();
            }
            Ok(None) => {}
        }
        drop(child);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Loads and checks the authority file.
pub(crate) fn load_rules(path: &Path) -> Result<Rules, Failure> {
    let bytes = crate::io::read_capped(path, MAX_FILE_BYTES)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let v = Value::parse(&bytes, MAX_FILE_BYTES)
        .map_err(|e| Failure::usage(format!("the authority file {}: {}", path.display(), e.reason)))?;
    Rules::from_value(&v).map_err(|why| Failure::usage(format!("the authority file {}: {why}", path.display())))
}

/// Runs the proxy until standard input ends (exit 0) or the child dies (exit 3).
pub(crate) fn run(args: WrapArgs) -> Outcome {
    let rules = load_rules(&args.file)?;
    let store = Store::open(args.approvals.as_deref(), true)?;
    let Some((program, rest)) = args.command.split_first() else {
        return Err(Failure::usage("nyx5 mcp --wrap needs the server to wrap after `--`: -- CMD ARGS…"));
    };
    let calls_key = {
        let cmd = Value::Array(args.command.iter().map(|a| Value::from(a.as_str())).collect());
        hex(sha256(&cmd.canonical()).get(..8).unwrap_or_default())
    };
    let mut child = Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Its own pipe, relayed line by line: the server never holds the proxy's standard error,
        // where approval codes may be written.
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::usage(format!("cannot start {program}: {e}")))?;
    if let Some(err) = child.stderr.take() {
        std::thread::spawn(move || {
            // Lines capped as every other line read (4 MiB): an endless one is dropped, not held.
            let mut input = BufReader::new(err);
            loop {
                match read_line(&mut input) {
                    Ok(Some(Ok(line))) => eprintln!("{}", safe(&String::from_utf8_lossy(&line))),
                    Ok(Some(Err(()))) => {
                        eprintln!(
                            "nyx5 mcp --wrap: the wrapped server wrote a line over 4 MiB on its standard error; dropped"
                        );
                    }
                    Ok(None) | Err(_) => return,
                }
            }
        });
    }
    let (Some(child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        return Err(Failure::usage(format!("cannot talk to {program}")));
    };
    let sh = Arc::new(Shared {
        rules,
        store,
        calls_key,
        timeout: args.timeout,
        out: Mutex::new(std::io::stdout()),
        child_in: Mutex::new(Some(child_in)),
        child: Mutex::new(Some(child)),
        state: Mutex::new(State::default()),
    });
    let reader = {
        let sh = Arc::clone(&sh);
        std::thread::spawn(move || {
            let mut input = BufReader::new(child_out);
            loop {
                match read_line(&mut input) {
                    Ok(Some(Ok(l))) if l.iter().all(u8::is_ascii_whitespace) => {}
                    Ok(Some(Ok(l))) => from_child(&sh, &l),
                    Ok(Some(Err(()))) => {
                        eprintln!("nyx5 mcp --wrap: the wrapped server wrote a line over 4 MiB; dropped");
                    }
                    Ok(None) | Err(_) => return child_gone(&sh),
                }
            }
        })
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    loop {
        match read_line(&mut input) {
            Ok(Some(Ok(l))) if l.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Some(Ok(l))) => from_client(&sh, &l),
            Ok(Some(Err(()))) => sh.to_client(&error(Value::Null, PARSE_ERROR, "parse error: message too large")),
            Ok(None) | Err(_) => break,
        }
    }
    // Our input ended: close the child's, give it a moment to exit, and leave.
    let waiting: Vec<Option<String>> = {
        let mut st = lock(&sh.state);
        st.closing = true;
        st.waiting.drain().map(|(_, w)| w.approval).collect()
    };
    for a in waiting.into_iter().flatten() {
        sh.store.close(&a);
    }
    lock(&sh.child_in).take();
    reap(&sh);
    // The reader is not joined: a grandchild may hold the child's output open.
    drop(reader);
    Ok(())
}
