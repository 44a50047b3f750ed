//! The A2A gateway's decisions, pure (docs/SPEC.md "A2A gateway", decision 0075): reading an A2A
//! 1.0 JSON-RPC call, judging the caller's message into the parts the house forwards
//! (re-serialised: nothing the gate did not read travels on), the document a Nyx5 caller signs,
//! what an agent's `result` envelope makes of its task, and a task as A2A's wire writes it.

use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::envelope::{Content, Kind};
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::{Address, Error, Refusal, Timestamp};

/// The extension a Nyx5 A2A card declares, and the member of an A2A message's `metadata` that
/// carries a Nyx5 caller's proof (and the escrow it pays with).
pub const EXT: &str = "urn:nyx5:ext:a2a";
/// The gateway's local part: task envelopes come from `a2a@<house>`, results go to it.
pub const GATEWAY: &str = "a2a";
/// The media of a task envelope's content.
pub const TASK_MEDIA: &str = "application/a2a-task+json";
/// The media of a result that says more than "completed" (state, parts, artifacts).
pub const RESULT_MEDIA: &str = "application/a2a-result+json";
/// The A2A version the binding speaks.
pub const VERSION: &str = "1.0";
/// How far a caller's proof may be from the house's clock, either side.
pub const PROOF_SKEW_MS: i64 = 5 * 60_000;
/// Parts in one message, at most.
pub const MAX_PARTS: usize = 32;
/// Artifacts in one result, at most.
pub const MAX_ARTIFACTS: usize = 16;
/// Tasks one ListTasks page holds, at most.
pub const MAX_PAGE: i64 = 100;

/// A task's state: A2A's `TaskState`, as this house keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Submitted,
    Working,
    Completed,
    Failed,
    Canceled,
    InputRequired,
    Rejected,
}

impl State {
    /// Every state, as the schema's CHECK lists them (migration 0032).
    pub const ALL: [State; 7] = [
        State::Submitted,
        State::Working,
        State::Completed,
        State::Failed,
        State::Canceled,
        State::InputRequired,
        State::Rejected,
    ];

    /// The name the house stores (and an agent's result writes).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Submitted => "submitted",
            State::Working => "working",
            State::Completed => "completed",
            State::Failed => "failed",
            State::Canceled => "canceled",
            State::InputRequired => "input-required",
            State::Rejected => "rejected",
        }
    }

    /// A2A 1.0's JSON name (`TASK_STATE_…`).
    pub fn wire(self) -> &'static str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Failed => "TASK_STATE_FAILED",
            State::Canceled => "TASK_STATE_CANCELED",
            State::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            State::Rejected => "TASK_STATE_REJECTED",
        }
    }

    pub fn parse(text: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == text || s.wire() == text)
    }

    /// Whether nothing moves the task any more.
    pub fn is_final(self) -> bool {
        matches!(self, State::Completed | State::Failed | State::Canceled | State::Rejected)
    }

    /// Whether a stream following the task ends here (A2A: at a terminal or an interrupted
    /// state): it has ended, or it waits for its caller.
    pub fn ends_stream(self) -> bool {
        self.is_final() || self == State::InputRequired
    }

    /// What a task bound to an escrow owes it on reaching this state: `release` when the work is
    /// done, `refund` when it ended otherwise, nothing while it is open.
    pub fn settles(self) -> Option<&'static str> {
        match self {
            State::Completed => Some("release"),
            State::Failed | State::Canceled | State::Rejected => Some("refund"),
            _ => None,
        }
    }
}

/// JSON-RPC 2.0 and A2A error codes (A2A 1.0 §9.5), and the one this house uses for its own
/// refusals (rates, lists, quotas), from the implementation-defined range.
pub mod code {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const UNSUPPORTED: i64 = -32004;
    pub const REFUSED: i64 = -32000;
}

/// The JSON-RPC error code a refusal is answered with.
pub fn rpc_code(e: &Error) -> i64 {
    match e.refusal() {
        Some(Refusal::BadA2aJson) => code::PARSE,
        Some(Refusal::BadA2aRequest) => code::INVALID_PARAMS,
        Some(Refusal::UnknownA2aMethod) => code::METHOD_NOT_FOUND,
        Some(Refusal::UnknownA2aTask) => code::TASK_NOT_FOUND,
        Some(Refusal::TaskNotCancelable) => code::TASK_NOT_CANCELABLE,
        Some(Refusal::A2aUnsupported) => code::UNSUPPORTED,
        _ if e.kind == nyx5_proto::ErrorKind::Internal => code::INTERNAL,
        _ => code::REFUSED,
    }
}

fn bad(reason: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Refusal::BadA2aRequest.because(reason)
}

/// One JSON-RPC call: its `id` (echoed), `method` and `params`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: Value,
    pub method: String,
    pub params: Object,
}

/// The `id` of a request body, as far as it can be read (for the error answer of a call that
/// fails later): a string or a number, else null.
pub fn request_id(body: &Value) -> Value {
    match body.as_object().and_then(|o| o.get("id")) {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        _ => Value::Null,
    }
}

/// Reads a JSON-RPC 2.0 request (one; batches are refused).
pub fn call(body: &Value) -> Result<Call, Error> {
    let o = body.as_object().ok_or_else(|| bad("a JSON-RPC request is one object (batches are not taken)"))?;
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("`jsonrpc` must be \"2.0\""));
    }
    let id = match o.get("id") {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        _ => return Err(bad("`id` must be a string or a number (notifications are not taken)")),
    };
    let method = o.get("method").and_then(Value::as_str).ok_or_else(|| bad("`method` must be a string"))?;
    let params = match o.get("params") {
        Some(Value::Object(p)) => p.clone(),
        None | Some(Value::Null) => Object::new(),
        Some(_) => return Err(bad("`params` must be an object")),
    };
    Ok(Call { id, method: method.to_owned(), params })
}

/// The JSON-RPC success answer.
pub fn success(id: &Value, result: Value) -> Value {
    Value::Object(obj([("jsonrpc", "2.0".into()), ("id", id.clone()), ("result", result)]))
}

/// One Server-Sent Event carrying a JSON-RPC success answer: `data: <json>` and a blank line
/// (canonical JSON has no line break).
pub fn sse_event(id: &Value, result: Value) -> Vec<u8> {
    sse(&success(id, result))
}

/// One Server-Sent Event carrying a JSON-RPC error answer (a stream that cannot go on).
pub fn sse_error(id: &Value, e: &Error) -> Vec<u8> {
    sse(&failure(id, e))
}

fn sse(answer: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.extend(answer.canonical());
    out.extend_from_slice(b"\n\n");
    out
}

/// The live bell's name for task `id`, which a stream following it waits on and its writers
/// ring (a mailbox's name never holds `:`).
pub fn stream_key(id: &str) -> String {
    format!("a2a:{id}")
}

/// One stream's place between two chunks: which task it follows, what it last told, until when.
/// A plain value the runtime holds and hands back (the house's `a2a_stream`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    pub local: String,
    pub task: String,
    /// The JSON-RPC id every event echoes, canonical JSON.
    pub rpc_id: String,
    /// The task's state and when it last moved (ms), as the stream last told them.
    pub seen: (State, i64),
    /// The house's time the stream ends at.
    pub until: i64,
    /// Rereads left (the Worker's queries: the house's clock may step).
    pub reads: i64,
    /// The time between rereads.
    pub every: i64,
    pub done: bool,
}

/// An SSE comment: nothing for the client, but bytes on a quiet stream, so that no proxy on the
/// way closes it as idle.
pub const SSE_KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// The events a stream following a task writes when it finds `now` where it last saw `seen`
/// (its state and the time it last moved): nothing when the task has not moved; else an
/// `artifactUpdate` per artifact the agent's answer carries (as the task ends completed), then
/// a `statusUpdate` with the task's status (the agent's message with it). And whether the
/// stream ends there ([`State::ends_stream`]).
pub fn stream_events(id: &Value, seen: (State, i64), now: &Task) -> (Vec<u8>, bool) {
    if (now.state, now.updated.0) == seen {
        return (Vec::new(), false);
    }
    let wire = now.to_wire(Some(0), true);
    let field = |name: &str| wire.as_object().and_then(|o| o.get(name)).cloned();
    let ids = [("taskId", Value::from(now.id.as_str())), ("contextId", now.context.as_str().into())];
    let mut out = Vec::new();
    if now.state == State::Completed
        && let Some(Value::Array(artifacts)) = field("artifacts")
    {
        for artifact in artifacts {
            let mut update = obj(ids.clone());
            update.insert("artifact".into(), artifact);
            update.insert("lastChunk".into(), Value::Bool(true));
            out.extend(sse_event(id, Value::Object(obj([("artifactUpdate", Value::Object(update))]))));
        }
    }
    let mut update = obj(ids);
    update.insert("status".into(), field("status").unwrap_or(Value::Null));
    if let Some(meta) = field("metadata") {
        update.insert("metadata".into(), meta);
    }
    out.extend(sse_event(id, Value::Object(obj([("statusUpdate", Value::Object(update))]))));
    (out, now.state.ends_stream())
}

/// The JSON-RPC error answer of `e`: `error.data` is the house's refusal shape
/// `{ok: false, code, error, reason}`.
pub fn failure(id: &Value, e: &Error) -> Value {
    // The house's own shape, an internal reason hidden as everywhere else.
    let data = e.to_wire();
    let message = data.as_object().and_then(|o| o.get("reason")).cloned().unwrap_or(Value::Null);
    let error = obj([("code", rpc_code(e).into()), ("message", message), ("data", data)]);
    Value::Object(obj([("jsonrpc", "2.0".into()), ("id", id.clone()), ("error", Value::Object(error))]))
}

/// An identifier the caller chose (`messageId`, `contextId`, `taskId`): 1–128 printable ASCII
/// characters.
fn identifier(v: Option<&Value>, name: &str) -> Result<Option<String>, Error> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| (0x21..0x7f).contains(&b)) => {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(bad(format!("`{name}` must be 1 to 128 printable ASCII characters"))),
    }
}

fn short_text(o: &Object, name: &str, max: usize) -> Result<Option<Value>, Error> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= max && !s.chars().any(char::is_control) => {
            Ok((!s.is_empty()).then(|| s.as_str().into()))
        }
        Some(_) => Err(bad(format!("`{name}` must be text of at most {max} bytes"))),
    }
}

/// One part, judged: exactly one of `text`, `data`, `url` (https), `raw` (base64), with
/// `mediaType` and `filename` when given; its `metadata` is not forwarded.
pub fn part(v: &Value) -> Result<Value, Error> {
    let o = v.as_object().ok_or_else(|| bad("a part is an object"))?;
    let mut out = Object::new();
    let kinds: Vec<&str> = ["text", "data", "url", "raw"].into_iter().filter(|k| o.contains_key(*k)).collect();
    match kinds.as_slice() {
        ["text"] => {
            let t = o.get("text").and_then(Value::as_str).ok_or_else(|| bad("a part's `text` is a string"))?;
            out.insert("text".into(), t.into());
        }
        ["data"] => {
            out.insert("data".into(), o.get("data").cloned().unwrap_or(Value::Null));
        }
        ["url"] => {
            let u = o.get("url").and_then(Value::as_str).unwrap_or_default();
            if !u.starts_with("https://") || u.len() > 2048 || u.chars().any(|c| c.is_control() || c == ' ') {
                return Err(bad("a part's `url` is an https URL of at most 2048 bytes"));
            }
            out.insert("url".into(), u.into());
        }
        ["raw"] => {
            let r = o.get("raw").and_then(Value::as_str).unwrap_or_default();
            let standard =
                r.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_'));
            if r.is_empty() || !standard {
                return Err(bad("a part's `raw` is base64"));
            }
            out.insert("raw".into(), r.into());
        }
        _ => return Err(bad("a part holds exactly one of `text`, `data`, `url` and `raw`")),
    }
    for (name, max) in [("mediaType", 255), ("filename", 255)] {
        if let Some(t) = short_text(o, name, max)? {
            out.insert(name.into(), t);
        }
    }
    Ok(Value::Object(out))
}

/// Where a caller wants to hear of its task's changes (A2A's `TaskPushNotificationConfig`): an
/// `id` (default `default`; one per task here), the `url` (which the house's outbound policy must
/// allow when it is set and again when it is used), and a `token` sent back as
/// `X-A2A-Notification-Token`.
#[derive(Debug, Clone, PartialEq)]
pub struct Push {
    pub id: String,
    pub url: String,
    pub token: Option<String>,
}

impl Push {
    /// What the house keeps of it.
    pub fn to_value(&self) -> Value {
        let mut o = obj([("id", self.id.as_str().into()), ("url", self.url.as_str().into())]);
        if let Some(t) = &self.token {
            o.insert("token".into(), t.as_str().into());
        }
        Value::Object(o)
    }

    /// A2A's `TaskPushNotificationConfig` for task `task`.
    pub fn to_wire(&self, task: &str) -> Value {
        let mut o = match self.to_value() {
            Value::Object(o) => o,
            _ => Object::new(),
        };
        o.insert("taskId".into(), task.into());
        Value::Object(o)
    }

    /// Reads a kept one.
    pub fn from_value(v: &Value) -> Option<Push> {
        let o = v.as_object()?;
        Some(Push {
            id: o.get("id")?.as_str()?.to_owned(),
            url: o.get("url")?.as_str()?.to_owned(),
            token: o.get("token").and_then(Value::as_str).map(str::to_owned),
        })
    }
}

/// Judges a `TaskPushNotificationConfig`: `url` (at most 2048 bytes; the outbound policy is the
/// house's to apply), `token` (1–256 printable ASCII), `id`; `authentication` is not taken (the
/// token is how a webhook knows the house).
pub fn push(v: &Value) -> Result<Push, Error> {
    let o = v.as_object().ok_or_else(|| bad("a push notification config is an object"))?;
    if o.get("authentication").is_some_and(|a| !a.is_null()) {
        return Err(bad("push `authentication` is not sent by this house: use `token`"));
    }
    let url = o.get("url").and_then(Value::as_str).filter(|u| !u.is_empty() && u.len() <= 2048);
    let url = url.ok_or_else(|| bad("a push notification config needs `url` (at most 2048 bytes)"))?;
    let token = match o.get("token") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if t.is_empty() => None,
        Some(Value::String(t)) if t.len() <= 256 && t.bytes().all(|b| (0x21..0x7f).contains(&b)) => Some(t.clone()),
        Some(_) => return Err(bad("a push `token` is 1 to 256 printable ASCII characters")),
    };
    let id = match o.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        None => "default".to_owned(),
        Some(_) => identifier(o.get("id"), "id")?.unwrap_or_default(),
    };
    Ok(Push { id, url: url.to_owned(), token })
}

/// A Nyx5 caller's claim, read from the message's `metadata[EXT]`: who it says it is, when it
/// signed, its signature, and the escrow it pays with.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub from: Address,
    pub ts: Timestamp,
    pub sig: String,
    pub contract: Option<String>,
}

/// An A2A message as the gate judged it: only these travel on.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub message_id: String,
    pub context_id: Option<String>,
    pub task_id: Option<String>,
    pub parts: Vec<Value>,
    pub claim: Option<Claim>,
}

impl Message {
    /// The lower-case hex SHA-256 of the canonical JSON of the judged parts: what a caller's
    /// proof binds.
    pub fn parts_sha256(&self) -> String {
        hex(&sha256(&Value::Array(self.parts.clone()).canonical()))
    }

    /// The message as A2A writes it, with the context and task the house gave it.
    pub fn to_wire(&self, context: &str, task: &str) -> Value {
        Value::Object(obj([
            ("messageId", self.message_id.as_str().into()),
            ("contextId", context.into()),
            ("taskId", task.into()),
            ("role", "ROLE_USER".into()),
            ("parts", Value::Array(self.parts.clone())),
        ]))
    }
}

fn claim(metadata: Option<&Value>) -> Result<Option<Claim>, Error> {
    let Some(m) = metadata.and_then(Value::as_object).and_then(|m| m.get(EXT)) else { return Ok(None) };
    let o = m.as_object().ok_or_else(|| bad(format!("`metadata[\"{EXT}\"]` must be an object")))?;
    let text = |name: &str| {
        o.get(name).and_then(Value::as_str).ok_or_else(|| bad(format!("the caller's proof needs `{name}`")))
    };
    let from = Address::parse(text("from")?).map_err(|_| bad("the caller's `from` is not an address"))?;
    let ts = Timestamp::parse(text("ts")?).map_err(|_| bad("the caller's `ts` is not a time"))?;
    let contract = match o.get("contract") {
        None | Some(Value::Null) => None,
        Some(v) => Some(identifier(Some(v), "contract")?.unwrap_or_default()),
    };
    Ok(Some(Claim { from, ts, sig: text("sig")?.to_owned(), contract }))
}

/// Judges `SendMessageRequest.message`: role `ROLE_USER`, a `messageId`, 1–32 parts; the
/// caller's claim read from its metadata.
pub fn message(v: Option<&Value>) -> Result<Message, Error> {
    let o = v.and_then(Value::as_object).ok_or_else(|| bad("`message` must be an object"))?;
    if o.get("role").and_then(Value::as_str) != Some("ROLE_USER") {
        return Err(bad("a caller's message has `role` \"ROLE_USER\""));
    }
    let message_id = identifier(o.get("messageId"), "messageId")?.ok_or_else(|| bad("`messageId` is required"))?;
    let parts = o.get("parts").and_then(Value::as_array).ok_or_else(|| bad("`parts` must be an array"))?;
    if parts.is_empty() || parts.len() > MAX_PARTS {
        return Err(bad(format!("a message has 1 to {MAX_PARTS} parts")));
    }
    Ok(Message {
        message_id,
        context_id: identifier(o.get("contextId"), "contextId")?,
        task_id: identifier(o.get("taskId"), "taskId")?,
        parts: parts.iter().map(part).collect::<Result<_, _>>()?,
        claim: claim(o.get("metadata"))?,
    })
}

/// The document a Nyx5 caller signs (context `nyx5/1 a2a-call`): the canonical JSON of
/// `{type: "nyx5.a2a-call", from, to, ts, message_id, context, task, parts_sha256, contract}`.
pub fn call_document(m: &Message, claim: &Claim, to: &Address) -> Vec<u8> {
    Value::Object(obj([
        ("type", "nyx5.a2a-call".into()),
        ("from", claim.from.as_str().into()),
        ("to", to.as_str().into()),
        ("ts", claim.ts.to_rfc3339().into()),
        ("message_id", m.message_id.as_str().into()),
        ("context", m.context_id.clone().into()),
        ("task", m.task_id.clone().into()),
        ("parts_sha256", m.parts_sha256().into()),
        ("contract", claim.contract.clone().into()),
    ]))
    .canonical()
}

/// The id of the envelope carrying message `message_id` of task `task` at `domain`: a UUID
/// from SHA-256 of `nyx5 a2a id:` and the canonical JSON of the three.
pub fn envelope_id(domain: &str, task: &str, message_id: &str) -> String {
    let mut seed = b"nyx5 a2a id:".to_vec();
    seed.extend(
        Value::Object(obj([("domain", domain.into()), ("task", task.into()), ("message", message_id.into())]))
            .canonical(),
    );
    let h = hex(&sha256(&seed));
    let cut = |from: usize, to: usize| h.get(from..to).unwrap_or_default();
    format!("{}-{}-{}-{}-{}", cut(0, 8), cut(8, 12), cut(12, 16), cut(16, 20), cut(20, 32))
}

/// What an agent's answer does to its task: the new state, the agent's message (A2A parts) and
/// the artifacts.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub state: State,
    pub parts: Vec<Value>,
    pub artifacts: Vec<Value>,
}

impl Answer {
    /// What the house keeps of it: `{parts, artifacts}`.
    pub fn to_value(&self) -> Value {
        Value::Object(obj([
            ("parts", Value::Array(self.parts.clone())),
            ("artifacts", Value::Array(self.artifacts.clone())),
        ]))
    }
}

fn artifact(v: &Value, n: usize) -> Result<Value, Error> {
    let o = v.as_object().ok_or_else(|| bad("an artifact is an object"))?;
    let parts = o.get("parts").and_then(Value::as_array).ok_or_else(|| bad("an artifact has `parts`"))?;
    if parts.is_empty() || parts.len() > MAX_PARTS {
        return Err(bad(format!("an artifact has 1 to {MAX_PARTS} parts")));
    }
    let mut out = obj([
        ("artifactId", format!("artifact-{n}").into()),
        ("parts", Value::Array(parts.iter().map(part).collect::<Result<_, _>>()?)),
    ]);
    for (name, max) in [("name", 255), ("description", 4096)] {
        if let Some(t) = short_text(o, name, max)? {
            out.insert(name.into(), t);
        }
    }
    Ok(Value::Object(out))
}

/// Reads an agent's answer to a task: an envelope of type `result` in the clear. Its content
/// in [`RESULT_MEDIA`] says `{state?, text?, data?, artifacts?}` (state `completed` by default;
/// `failed`, `input-required` or `rejected` otherwise); any other content is the answer's one
/// part (text for `text/*`, else data) and the task is completed, with that part as its one
/// artifact.
pub fn answer(kind: Kind, content: Option<&Content>) -> Result<Answer, Error> {
    if kind != Kind::Result {
        return Err(bad("answer an A2A task with an envelope of type `result`"));
    }
    let c = content.ok_or_else(|| {
        bad("a2a@ reads only envelopes in the clear: send the result with --plain (it goes to your own house)")
    })?;
    if c.media != RESULT_MEDIA {
        let p = match &c.body {
            Value::String(s) if c.media.starts_with("text/") => obj([("text", s.as_str().into())]),
            body => obj([("data", body.clone()), ("mediaType", c.media.as_str().into())]),
        };
        let parts = vec![Value::Object(p)];
        let artifacts = vec![Value::Object(obj([
            ("artifactId", "artifact-0".into()),
            ("name", "result".into()),
            ("parts", Value::Array(parts.clone())),
        ]))];
        return Ok(Answer { state: State::Completed, parts, artifacts });
    }
    let o = c.body.as_object().ok_or_else(|| bad(format!("a {RESULT_MEDIA} body is an object")))?;
    let state = match o.get("state").and_then(Value::as_str) {
        None => State::Completed,
        Some(s) => match State::parse(s) {
            Some(st @ (State::Completed | State::Failed | State::InputRequired | State::Rejected)) => st,
            _ => return Err(bad("`state` is completed, failed, input-required or rejected")),
        },
    };
    let mut parts = Vec::new();
    if let Some(t) = o.get("text") {
        parts.push(part(&Value::Object(obj([("text", t.clone())])))?);
    }
    if let Some(d) = o.get("data") {
        parts.push(Value::Object(obj([("data", d.clone())])));
    }
    let artifacts = match o.get("artifacts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) if list.len() <= MAX_ARTIFACTS => {
            list.iter().enumerate().map(|(n, a)| artifact(a, n)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad(format!("`artifacts` is an array of at most {MAX_ARTIFACTS}"))),
    };
    Ok(Answer { state, parts, artifacts })
}

/// A task as the house keeps it (one `a2a_tasks` row, read).
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub context: String,
    pub agent: Address,
    pub state: State,
    /// The caller's messages so far, as A2A writes them.
    pub request: Vec<Value>,
    /// The agent's last answer (`Answer::to_value`), if any.
    pub answer: Option<Value>,
    pub envelope: String,
    pub contract: Option<String>,
    pub updated: Timestamp,
}

impl Task {
    fn agent_message(&self) -> Option<Value> {
        let a = self.answer.as_ref()?.as_object()?;
        let parts = a.get("parts").and_then(Value::as_array).filter(|p| !p.is_empty())?;
        Some(Value::Object(obj([
            ("messageId", format!("{}-answer", self.envelope).into()),
            ("contextId", self.context.as_str().into()),
            ("taskId", self.id.as_str().into()),
            ("role", "ROLE_AGENT".into()),
            ("parts", Value::Array(parts.to_vec())),
        ])))
    }

    /// A2A's `Task`: its status (with the agent's message), artifacts, the last `history`
    /// messages (all when None; none for 0) and the house's note of envelope and escrow.
    pub fn to_wire(&self, history: Option<usize>, artifacts: bool) -> Value {
        let mut status = obj([("state", self.state.wire().into()), ("timestamp", self.updated.to_rfc3339().into())]);
        let said = self.agent_message();
        if let Some(m) = &said {
            status.insert("message".into(), m.clone());
        }
        let mut out = obj([
            ("id", self.id.as_str().into()),
            ("contextId", self.context.as_str().into()),
            ("status", Value::Object(status)),
        ]);
        let kept: Vec<Value> = self
            .answer
            .as_ref()
            .and_then(Value::as_object)
            .and_then(|a| a.get("artifacts"))
            .and_then(Value::as_array)
            .map(<[Value]>::to_vec)
            .unwrap_or_default();
        if artifacts && !kept.is_empty() {
            out.insert("artifacts".into(), Value::Array(kept));
        }
        let mut all: Vec<Value> = self.request.clone();
        all.extend(said);
        let n = history.unwrap_or(all.len()).min(all.len());
        if n > 0 {
            out.insert("history".into(), Value::Array(all.iter().skip(all.len() - n).cloned().collect()));
        }
        let mut note = obj([("agent", self.agent.as_str().into()), ("envelope", self.envelope.as_str().into())]);
        if let Some(c) = &self.contract {
            note.insert("contract".into(), c.as_str().into());
            // A bound escrow is settled before the task's end is written: an ended task says how.
            note.insert("settlement".into(), self.state.settles().unwrap_or("held").into());
        }
        out.insert("metadata".into(), Value::Object(obj([(EXT, Value::Object(note))])));
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(parts: Value) -> Value {
        Value::Object(obj([("role", "ROLE_USER".into()), ("messageId", "m-1".into()), ("parts", parts)]))
    }

    #[test]
    fn a_failure_carries_the_houses_shape_and_hides_an_internal_reason() {
        let id = Value::from(3);
        let refused = failure(&id, &Refusal::UnknownA2aTask.because("task t-1 is not here"));
        assert_eq!(
            refused.canonical_string(),
            r#"{"error":{"code":-32001,"data":{"code":404,"error":"unknown_a2a_task","ok":false,"reason":"task t-1 is not here"},"message":"task t-1 is not here"},"id":3,"jsonrpc":"2.0"}"#
        );
        let internal = failure(&id, &Error::new(nyx5_proto::ErrorKind::Internal, "D1: disk I/O at /var/db"));
        let text = internal.canonical_string();
        assert!(!text.contains("/var/db"), "{text}");
        assert!(text.contains(r#""code":-32603"#) && text.contains(r#""reason":"internal error""#), "{text}");
        // An event of a stream is one line: the canonical JSON escapes every line break.
        let event = sse_error(&id, &Refusal::UnknownA2aTask.because("a\nb\r\nc"));
        assert_eq!(event.iter().filter(|b| **b == b'\n').count(), 2, "{:?}", String::from_utf8_lossy(&event));
        assert!(event.ends_with(b"\n\n") && event.starts_with(b"data: {"));
    }

    #[test]
    fn a_message_is_judged_into_the_parts_that_travel() {
        let v = Value::parse_str(
            r#"{"role":"ROLE_USER","messageId":"m-1","parts":[{"text":"hi","metadata":{"x":1}},
               {"data":{"a":[1,2]},"mediaType":"application/json"}],"extensions":["urn:x"],"metadata":{"y":2}}"#,
        )
        .unwrap();
        let m = message(Some(&v)).unwrap();
        assert_eq!(
            Value::Array(m.parts.clone()).canonical_string(),
            r#"[{"text":"hi"},{"data":{"a":[1,2]},"mediaType":"application/json"}]"#
        );
        assert!(m.claim.is_none());
        // Everything else is refused, not passed on.
        for bad_parts in
            [r#"[]"#, r#"[{"text":"a","data":1}]"#, r#"[{"url":"http://x.test"}]"#, r#"[{"raw":"a b"}]"#, r#"[{}]"#]
        {
            assert!(message(Some(&msg(Value::parse_str(bad_parts).unwrap()))).is_err(), "{bad_parts}");
        }
        let agent = Value::parse_str(r#"{"role":"ROLE_AGENT","messageId":"m","parts":[{"text":"x"}]}"#).unwrap();
        assert_eq!(message(Some(&agent)).unwrap_err().refusal(), Some(Refusal::BadA2aRequest));
    }

    #[test]
    fn a_proof_binds_the_parts_the_gate_forwards() {
        let v = Value::parse_str(
            r#"{"role":"ROLE_USER","messageId":"m-1","parts":[{"text":"hi"}],
               "metadata":{"urn:nyx5:ext:a2a":{"from":"bo@b.test","ts":"2026-12-07T10:00:00.000Z","sig":"s","contract":"c-1"}}}"#,
        )
        .unwrap();
        let m = message(Some(&v)).unwrap();
        let claim = m.claim.clone().unwrap();
        assert_eq!(claim.contract.as_deref(), Some("c-1"));
        let to = Address::parse("ana@a.test").unwrap();
        let doc = call_document(&m, &claim, &to);
        let mut other = m.clone();
        other.parts = vec![Value::Object(obj([("text", "bye".into())]))];
        assert_ne!(doc, call_document(&other, &claim, &to));
        assert!(String::from_utf8(doc).unwrap().contains(&m.parts_sha256()));
    }

    #[test]
    fn an_answer_sets_the_state_it_says() {
        let plain = Content::new("text/plain", "done".into());
        let a = answer(Kind::Result, Some(&plain)).unwrap();
        assert_eq!(a.state, State::Completed);
        assert_eq!(a.artifacts.len(), 1);
        let failed = Content::new(RESULT_MEDIA, Value::parse_str(r#"{"state":"failed","text":"no"}"#).unwrap());
        let a = answer(Kind::Result, Some(&failed)).unwrap();
        assert_eq!((a.state, a.artifacts.len()), (State::Failed, 0));
        assert!(answer(Kind::Message, Some(&plain)).is_err());
        assert!(answer(Kind::Result, None).is_err());
        let canceled = Content::new(RESULT_MEDIA, Value::parse_str(r#"{"state":"canceled"}"#).unwrap());
        assert!(answer(Kind::Result, Some(&canceled)).is_err());
        assert_eq!(State::Completed.settles(), Some("release"));
        assert_eq!(State::Canceled.settles(), Some("refund"));
        assert_eq!(State::InputRequired.settles(), None);
    }

    #[test]
    fn calls_are_json_rpc_and_errors_carry_the_refusal() {
        let c = call(&Value::parse_str(r#"{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":"t"}}"#).unwrap())
            .unwrap();
        assert_eq!(c.method, "GetTask");
        assert!(call(&Value::parse_str(r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#).unwrap()).is_err());
        assert!(call(&Value::parse_str(r#"{"jsonrpc":"2.0","method":"x"}"#).unwrap()).is_err());
        let e = Refusal::UnknownA2aTask.because("no task t");
        let f = failure(&c.id, &e).canonical_string();
        assert_eq!(
            f,
            r#"{"error":{"code":-32001,"data":{"code":404,"error":"unknown_a2a_task","ok":false,"reason":"no task t"},"message":"no task t"},"id":3,"jsonrpc":"2.0"}"#
        );
        assert_ne!(envelope_id("a.test", "t1", "m"), envelope_id("a.test", "t1", "m2"));
    }
}
