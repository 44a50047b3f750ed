//! `nyx5 mcp --wrap AUTHORITY.json -- CMD ARGS…`: another MCP server's tools, served through the
//! authorities a person wrote for them (docs/SPEC.md "Wrapping another MCP server").
//!
//! The wrapped server is a child speaking JSON-RPC lines on its standard input and output. Every
//! message passes through as it is, except: a `tools/list` answer loses the tools its authority
//! prohibits, and the others carry hints set from their authority; a `tools/call` is judged
//! first ([`Authority::judge`]) — refused, it never reaches the child; to be approved, it waits
//! for a human (by `elicitation/create` when the client offers elicitation, else by a file that
//! `nyx5 mcp-approve` or `nyx5 mcp-decline` decides) while every other message keeps flowing.
//! Requests the child sends the client go out under ids of ours (`nyx5-wrap-c-N`) and their
//! answers come back under the child's; our own requests are `nyx5-wrap-e-N`. The server's own
//! hints never decide anything: they only earn a warning when they disagree with the authority.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use clap::Args;
use nyx5_proto::authority::{Authority, Consequence, HOUR_MS, Intent, Level, MAX_PER_HOUR, Verdict};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, field, obj};
use nyx5_proto::{Timestamp, Value};

use crate::client::output::one_line as safe;
use crate::error::{EXIT_NETWORK, Failure, Outcome};
use crate::mcp::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, MAX_LINE_BYTES, PARSE_ERROR, error, read_line};
use crate::sys::OsRng;

/// The largest authority file read.
const MAX_FILE_BYTES: usize = 1024 * 1024;
/// The members an authority file may have.
const FILE_MEMBERS: [&str; 5] = ["tools", "patterns", "default", "amounts", "approve_by_elicitation"];
/// How often a waiting call looks for a decision file.
const POLL: Duration = Duration::from_millis(200);
/// How long the child may take to exit once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// The most characters of a call's arguments shown to whoever approves it.
const SHOWN_VALUE: usize = 160;
/// The most characters of an argument's name shown.
const SHOWN_KEY: usize = 64;
/// The default `--approval-timeout`, in seconds.
pub(crate) const DEFAULT_TIMEOUT_S: u64 = 600;
/// The most calls that wait for a human at once; beyond them a call is refused.
const MAX_WAITING: usize = 64;
/// The longest tool name a call may give: longer names are refused before they are judged, so
/// nobody grows the hour's counts with invented names.
const MAX_TOOL_NAME: usize = 128;
/// Most tool names one hour's counts hold; a call of a new name beyond them is asked of a human.
const MAX_COUNTED_TOOLS: usize = 256;
/// How long a call waits for the counts' lock before it fails closed (asks a human).
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// The most requests of the server's that the client has not answered.
const MAX_CHILD_REQUESTS: usize = 1024;
/// The prefix of every id we put on a request to the client.
const OUR_IDS: &str = "nyx5-wrap-";

// ---------------------------------------------------------------------------------------------
// The authority file: rules by tool name (pure).

/// Where a tool's amount is among its arguments: `{"argument": "amount", "currency"?: "tok",
/// "currency_argument"?: "currency"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmountArg {
    pub(crate) argument: String,
    pub(crate) currency: Option<String>,
    /// The argument that says what currency the call pays in, for a tool that takes one: a call
    /// in another currency than its cap's is asked of a human.
    pub(crate) currency_argument: Option<String>,
}

/// A parsed AUTHORITY.json.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    tools: BTreeMap<String, Authority>,
    /// Name prefixes (the pattern without its trailing `*`) and their authorities.
    patterns: Vec<(String, Authority)>,
    default: Option<Authority>,
    amounts: BTreeMap<String, AmountArg>,
    /// `approve_by_elicitation: true`: the owner lets the MCP client's own interface ask the
    /// human (an `elicitation/create` answer approves). Off, only the out-of-band code does:
    /// whoever writes the client's stream could otherwise approve its own calls.
    by_elicitation: bool,
}

/// What holds for one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The strictest of its exact entry and every matching pattern, else the default, else
    /// prohibited.
    pub(crate) authority: Authority,
    /// The tool's consequence: the gravest any of those entries names.
    pub(crate) consequence: Consequence,
    pub(crate) amount: Option<AmountArg>,
}

/// What a tool no entry names gets when the file has no `default`.
fn unnamed() -> Authority {
    Authority {
        level: Level::Prohibited,
        consequence: Consequence::Irreversible,
        max_amount: None,
        currency: None,
        max_per_hour: None,
        rationale: Some("not named in the authority file, which has no default".to_owned()),
    }
}

impl Rules {
    /// Reads and checks an authority file's JSON.
    pub(crate) fn from_value(v: &Value) -> Result<Rules, String> {
        let o = v.as_object().ok_or("the authority file is one JSON object")?;
        if let Some(k) = o.keys().find(|k| !FILE_MEMBERS.contains(&k.as_str())) {
            return Err(format!(
                "the authority file has no member {k:?} (only tools, patterns, default, amounts, approve_by_elicitation)"
            ));
        }
        let by_name = |member: &str| -> Result<BTreeMap<String, Authority>, String> {
            match o.get(member) {
                None => Ok(BTreeMap::new()),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(name, a)| {
                        if name.is_empty() {
                            return Err(format!("`{member}` names a tool with an empty name"));
                        }
                        Authority::from_value(a)
                            .map(|a| (name.clone(), a))
                            .map_err(|e| format!("{member}.{name}: {}", e.reason))
                    })
                    .collect(),
                Some(_) => Err(format!("`{member}` is an object of authorities by tool name")),
            }
        };
        let tools = by_name("tools")?;
        let mut patterns = Vec::new();
        for (p, a) in by_name("patterns")? {
            let prefix = p.strip_suffix('*').filter(|prefix| !prefix.contains('*')).ok_or_else(|| {
                format!("patterns.{p}: a pattern is a name with one `*`, at its end (e.g. \"delete_*\")")
            })?;
            patterns.push((prefix.to_owned(), a));
        }
        let default = match o.get("default") {
            None => None,
            Some(a) => Some(Authority::from_value(a).map_err(|e| format!("default: {}", e.reason))?),
        };
        let mut amounts = BTreeMap::new();
        match o.get("amounts") {
            None => {}
            Some(Value::Object(m)) => {
                for (name, a) in m {
                    amounts.insert(name.clone(), amount_arg(a).map_err(|why| format!("amounts.{name}: {why}"))?);
                }
            }
            Some(_) => return Err("`amounts` is an object of {argument, currency?} by tool name".to_owned()),
        }
        let by_elicitation = field::opt_bool(o, "approve_by_elicitation").map_err(|e| e.reason)?.unwrap_or(false);
        let rules = Rules { tools, patterns, default, amounts, by_elicitation };
        rules.check_named()?;
        Ok(rules)
    }

    /// What can be checked before any tool is listed: a tool named with a cap must say where
    /// its amount is, and in the cap's currency.
    fn check_named(&self) -> Result<(), String> {
        let names: HashSet<&String> = self.tools.keys().chain(self.amounts.keys()).collect();
        for name in names {
            let rule = self.rule(name);
            let a = &rule.authority;
            if a.level == Level::Prohibited {
                continue;
            }
            match (&rule.amount, a.max_amount) {
                (None, Some(max)) if self.tools.contains_key(name) => {
                    return Err(format!(
                        "tools.{name}: its authority caps amounts at {max}, so `amounts.{name}` must name the \
                         argument that carries its amount"
                    ));
                }
                (Some(AmountArg { currency: Some(c), .. }), Some(_)) if a.currency.as_deref() != Some(c) => {
                    return Err(format!(
                        "amounts.{name}: its currency {c} is not the one its authority counts ({})",
                        a.currency.as_deref().unwrap_or_default()
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The rule for `tool`.
    pub(crate) fn rule(&self, tool: &str) -> Rule {
        let mut found: Option<(Authority, Consequence)> = self.tools.get(tool).map(|a| (a.clone(), a.consequence));
        for (prefix, a) in &self.patterns {
            if tool.starts_with(prefix.as_str()) {
                found = Some(match found {
                    Some((f, c)) => (f.strictest(a), c.max(a.consequence)),
                    None => (a.clone(), a.consequence),
                });
            }
        }
        let (authority, consequence) = found
            .or_else(|| self.default.clone().map(|a| (a.clone(), a.consequence)))
            .unwrap_or_else(|| (unnamed(), Consequence::Irreversible));
        Rule { authority, consequence, amount: self.amounts.get(tool).cloned() }
    }
}

fn amount_arg(v: &Value) -> Result<AmountArg, String> {
    let o = v.as_object().ok_or("it is {argument, currency?}")?;
    if let Some(k) = o.keys().find(|k| !["argument", "currency", "currency_argument"].contains(&k.as_str())) {
        return Err(format!("it has no member {k:?} (only argument, currency, currency_argument)"));
    }
    let argument = field::str(o, "argument").map_err(|e| e.reason)?;
    if argument.is_empty() {
        return Err("its argument is a name".to_owned());
    }
    let currency = field::opt_str(o, "currency").map_err(|e| e.reason)?.map(str::to_owned);
    let currency_argument = field::opt_str(o, "currency_argument").map_err(|e| e.reason)?.map(str::to_owned);
    if currency_argument.as_deref().is_some_and(|c| c.is_empty() || c == argument) {
        return Err("its currency_argument is the name of another argument".to_owned());
    }
    Ok(AmountArg { argument: argument.to_owned(), currency, currency_argument })
}

/// Judges one call of a tool under its rule; `hour_ops` is how many calls of it went ahead in
/// the past hour, `approved` whether a human approved this very call (it never lifts
/// `prohibited`). A cap the call's amount cannot be read against is asked, never ignored.
pub(crate) fn judge(rule: &Rule, args: &Object, hour_ops: i64, approved: bool) -> Verdict {
    let a = &rule.authority;
    let mut unreadable = None;
    let (amount, currency) = match &rule.amount {
        None => {
            if a.max_amount.is_some() {
                unreadable = Some("its authority caps amounts and the authority file names no amount argument for it");
            }
            (None, None)
        }
        Some(arg) => match args.get(&arg.argument).map(Value::as_safe_integer) {
            Some(Some(n)) if n >= 0 => {
                let cap = arg.currency.as_deref().or(a.currency.as_deref());
                match arg.currency_argument.as_ref().map(|c| args.get(c).and_then(Value::as_str)) {
                    // The call says what it pays in: judged against the cap only in the cap's own.
                    Some(Some(paid)) if cap.is_some_and(|c| c.eq_ignore_ascii_case(paid)) => (Some(n), cap),
                    Some(_) if a.max_amount.is_some() => {
                        unreadable = Some("it pays in a currency other than its cap's (or names none)");
                        (None, None)
                    }
                    _ => (Some(n), cap),
                }
            }
            _ => {
                if a.max_amount.is_some() {
                    unreadable = Some("its amount argument is missing or not a whole number of at least 0");
                }
                (None, None)
            }
        },
    };
    let intent = Intent { amount, currency, consequence: rule.consequence, hour_ops, approved };
    match a.judge(&intent) {
        Verdict::Allowed if !approved => match unreadable {
            Some(why) => Verdict::Ask(why.to_owned()),
            None => Verdict::Allowed,
        },
        v => v,
    }
}

/// A listed tool as the client sees it: hints set from its rule and `_meta["nyx5/authority"]`;
/// and the warnings its server's own hints earn where they disagree (they decide nothing).
pub(crate) fn annotate(tool: &Object, rule: &Rule) -> (Object, Vec<String>) {
    let mut t = tool.clone();
    let server = t.get("annotations").and_then(Value::as_object).cloned().unwrap_or_default();
    let hint = |k: &str| match server.get(k) {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    };
    let a = &rule.authority;
    let reversible = rule.consequence == Consequence::Reversible;
    let mut warnings = Vec::new();
    if hint("destructiveHint") == Some(true) && a.level == Level::Autonomous && reversible {
        warnings
            .push("its server says it is destructive, and its authority lets it act alone as reversible".to_owned());
    }
    if hint("readOnlyHint") == Some(true) && !reversible {
        warnings.push(format!(
            "its server says it only reads, and its authority treats it as {}",
            rule.consequence.as_str()
        ));
    }
    if hint("destructiveHint") == Some(false) && rule.consequence == Consequence::Irreversible {
        warnings.push("its server says it is not destructive, and its authority treats it as irreversible".to_owned());
    }
    let mut annotations = server.clone();
    annotations.insert("readOnlyHint".into(), Value::Bool(reversible && hint("readOnlyHint") == Some(true)));
    annotations.insert("destructiveHint".into(), Value::Bool(!reversible));
    annotations.insert("idempotentHint".into(), Value::Bool(reversible && hint("idempotentHint") == Some(true)));
    t.insert("annotations".into(), Value::Object(annotations));
    let mut meta = t.get("_meta").and_then(Value::as_object).cloned().unwrap_or_default();
    meta.insert("nyx5/authority".into(), authority_meta(rule));
    t.insert("_meta".into(), Value::Object(meta));
    let mut notes = Vec::new();
    if a.level == Level::NeedsApproval {
        notes.push("every call waits for a human's approval".to_owned());
    }
    if let Some(max) = a.max_amount {
        notes.push(format!(
            "above {max} {} per call, a human approves first",
            a.currency.as_deref().unwrap_or_default()
        ));
    }
    if let Some(n) = a.max_per_hour {
        notes.push(format!("beyond {n} calls an hour, a human approves first"));
    }
    if !notes.is_empty() {
        let before = t.get("description").and_then(Value::as_str).unwrap_or_default();
        let sep = if before.is_empty() { "" } else { "\n\n" };
        t.insert("description".into(), format!("{before}{sep}(Nyx5: {}.)", notes.join("; ")).into());
    }
    (t, warnings)
}

/// `_meta["nyx5/authority"]`: the rule's authority, the tool's consequence and its amount argument.
fn authority_meta(rule: &Rule) -> Value {
    let mut o = match rule.authority.to_value() {
        Value::Object(o) => o,
        _ => Object::new(),
    };
    o.insert("consequence".into(), rule.consequence.as_str().into());
    if let Some(arg) = &rule.amount {
        o.insert("amount_argument".into(), arg.argument.as_str().into());
        if let Some(c) = &arg.currency_argument {
            o.insert("currency_argument".into(), c.as_str().into());
        }
    }
    Value::Object(o)
}

/// The canonical SHA-256 of a call's arguments, as a pending approval names them.
fn arguments_sha256(args: &Object) -> String {
    hex(&sha256(&Value::Object(args.clone()).canonical()))
}

/// The members a request file has: all of them but `request_sha256` and `binding` are hashed
/// into `request_sha256`, and that hash is bound to the approval code by `binding`.
const REQUEST_MEMBERS: [&str; 13] = [
    "id",
    "tool",
    "arguments",
    "arguments_sha256",
    "code_sha256",
    "reason",
    "authority",
    "rationale",
    "created",
    "expires",
    "pid",
    "request_sha256",
    "binding",
];

/// The SHA-256 of everything a request file says (every member but `request_sha256` and
/// `binding`, canonical JSON): what a person's decision is bound to.
fn request_sha256(request: &Object) -> String {
    let mut bound = request.clone();
    bound.remove("request_sha256");
    bound.remove("binding");
    hex(&sha256(&Value::Object(bound).canonical()))
}

/// Ties a request's hash to its approval code: only whoever holds the code (the proxy, and the
/// person it showed the code to) can make a binding for a request, so a request rewritten by
/// whatever can write the directory no longer matches the code the person types.
fn binding(code: &str, request_sha: &str) -> String {
    hex(&sha256(format!("nyx5 mcp approval\n{code}\n{request_sha}").as_bytes()))
}

/// Whether a request file is as a proxy wrote it, as far as can be told without its code: only
/// the members a proxy writes, hashing to its `request_sha256`, and its arguments to its
/// `arguments_sha256`.
fn consistent(request: &Object) -> bool {
    let args = request.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
    request.keys().all(|k| REQUEST_MEMBERS.contains(&k.as_str()))
        && request.get("request_sha256").and_then(Value::as_str) == Some(request_sha256(request).as_str())
        && request.get("arguments_sha256").and_then(Value::as_str) == Some(arguments_sha256(&args).as_str())
}

/// A call's arguments as a person reads them before deciding: every member, each value cut to
/// [`SHOWN_VALUE`] characters, control characters made visible, and how much was left out.
fn shown_arguments(args: &Object) -> String {
    let mut hidden = 0usize;
    let parts: Vec<String> = args
        .iter()
        .map(|(k, v)| {
            let text = v.canonical_string();
            let cut = shorten(&text, SHOWN_VALUE);
            hidden += text.len().saturating_sub(cut.len());
            format!("{}={}", safe(&shorten(k, SHOWN_KEY)), safe(&cut))
        })
        .collect();
    let mut out = if parts.is_empty() { "no arguments".to_owned() } else { parts.join(", ") };
    if hidden > 0 {
        out.push_str(&format!(" ({hidden} bytes of values not shown)"));
    }
    out
}

/// At most `max` characters of `text`, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((i, _)) => format!("{}…", text.get(..i).unwrap_or_default()),
    }
}

// ---------------------------------------------------------------------------------------------
// The state directory: pending approvals, their decisions, and the hour's calls.

/// Where pending approvals live: `--approvals`, else `$XDG_STATE_HOME/nyx5/approvals`, else
/// `~/.local/state/nyx5/approvals`.
pub(crate) fn default_dir(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(x) = env("XDG_STATE_HOME") {
        return Ok(PathBuf::from(x).join("nyx5").join("approvals"));
    }
    if let Some(h) = env("HOME") {
        return Ok(PathBuf::from(h).join(".local").join("state").join("nyx5").join("approvals"));
    }
    Err(Failure::usage("no place for approvals: pass --approvals DIR or set XDG_STATE_HOME"))
}

/// The approvals directory. Requests are `<id>.request.json`, decisions `<id>.decision.json`
/// (made once: linked into place, never overwritten), the hour's calls `calls-<key>.json`.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    /// This process's own counts, `{tool: [ms…]}`: the larger of these and the file's is the
    /// hour's, so a calls file deleted or spoiled under a running proxy resets nothing.
    seen: Mutex<BTreeMap<String, Vec<i64>>>,
}

/// The hour's counts as read from the calls file.
enum Counts {
    Read(Object),
    /// The file exists but could not be read, parsed or locked: every capped tool is taken to be
    /// at its limit (asked of a human) until it is written again.
    Spoiled,
}

/// An approval's id: 16 lowercase hex digits.
fn check_approval_id(id: &str) -> Result<(), Failure> {
    if id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(Failure::usage(format!("{id:?} is not an approval id (16 hex digits, as nyx5 mcp-approvals lists them)")))
    }
}

fn now_ms() -> i64 {
    crate::sys::now().map(Timestamp::millis).unwrap_or_default()
}

impl Store {
    /// Opens (with `create`, makes, 0700) the directory.
    pub(crate) fn open(flag: Option<&Path>, create: bool) -> Result<Store, Failure> {
        let dir = default_dir(flag)?;
        if create && !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
        }
        let meta = std::fs::metadata(&dir).ok().filter(std::fs::Metadata::is_dir);
        let Some(meta) = meta else {
            return Err(Failure::usage(format!("{} is not a directory of approvals", dir.display())));
        };
        // Whoever else can enter it could read the requests, decline calls and spoil the counts.
        if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0 {
            return Err(Failure::usage(format!(
                "{} is open to other users; approvals need a directory only you can use (chmod 700)",
                dir.display()
            )));
        }
        Ok(Store { dir, seen: Mutex::new(BTreeMap::new()) })
    }

    fn request_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.request.json"))
    }

    fn decision_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.decision.json"))
    }

    /// Writes `value` to a fresh 0600 file beside `path`, then puts it in place: renamed over
    /// `path`, or (`once`) linked, failing if `path` exists.
    fn write(&self, path: &Path, value: &Value, once: bool) -> std::io::Result<()> {
        let mut bytes = value.canonical();
        bytes.push(b'\n');
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = self.dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), unique()));
        let written = (|| {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            if once { std::fs::hard_link(&tmp, path) } else { std::fs::rename(&tmp, path) }
        })();
        let _ = std::fs::remove_file(&tmp);
        written
    }

    fn read(path: &Path) -> Option<Object> {
        let bytes = crate::io::read_capped(path, MAX_FILE_BYTES).ok()?;
        match Value::parse(&bytes, MAX_FILE_BYTES) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        }
    }

    fn decision(&self, id: &str) -> Option<Object> {
        Store::read(&self.decision_path(id))
    }

    /// Records a decision unless one was made: `Err` names the one that was.
    fn decide_once(
        &self,
        id: &str,
        decision: &str,
        request_sha256: &str,
        code: Option<&str>,
    ) -> Result<(), Option<Object>> {
        let mut o = obj([
            ("id", id.into()),
            ("decision", decision.into()),
            ("request_sha256", request_sha256.into()),
            ("time", Timestamp::from_millis(now_ms()).to_rfc3339().into()),
        ]);
        if let Some(c) = code {
            o.insert("code".into(), c.into());
        }
        let v = Value::Object(o);
        match self.write(&self.decision_path(id), &v, true) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.decision(id)),
        }
    }

    /// Removes a request and its decision.
    fn close(&self, id: &str) {
        let _ = std::fs::remove_file(self.request_path(id));
        let _ = std::fs::remove_file(self.decision_path(id));
    }

    /// The requests still waiting for a decision, oldest first (not those past their time,
    /// left by a proxy that stopped).
    pub(crate) fn pending(&self) -> Result<Vec<Object>, Failure> {
        let now = Timestamp::from_millis(now_ms());
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", self.dir.display())))?;
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".request.json") else { continue };
            if check_approval_id(id).is_err() || self.decision_path(id).exists() {
                continue;
            }
            let Some(o) = Store::read(&e.path()) else { continue };
            let expires = o.get("expires").and_then(Value::as_str).and_then(|t| Timestamp::parse(t).ok());
            if expires.is_some_and(|t| t >= now) {
                out.push(o);
            }
        }
        out.sort_by(|a, b| {
            let t = |o: &Object| o.get("created").and_then(Value::as_str).unwrap_or_default().to_owned();
            t(a).cmp(&t(b))
        });
        Ok(out)
    }

    /// A pending request checked against its approval code, before anything is decided: only
    /// a request nobody changed passes, the whole request (tool, arguments, reason, rationale,
    /// authority, times) hashing to what the proxy bound to that code. The request and its hash.
    pub(crate) fn verified(&self, id: &str, code: Option<&str>) -> Result<(Object, String), Failure> {
        let (request, sha) = self.undecided(id)?;
        let code = code.ok_or_else(|| {
            Failure::usage("approving needs --code, the code the waiting proxy printed beside the id")
        })?;
        if Some(hex(&sha256(code.as_bytes())).as_str()) != request.get("code_sha256").and_then(Value::as_str) {
            return Err(Failure::usage(format!("that is not the code of approval {id}")));
        }
        if !consistent(&request) || request.get("binding").and_then(Value::as_str) != Some(binding(code, &sha).as_str())
        {
            return Err(Failure::usage(format!(
                "approval {id} was changed since the proxy wrote it (it no longer matches its code): not \
                 approved; decline it with `nyx5 mcp-decline {id}`"
            )));
        }
        Ok((request, sha))
    }

    /// A pending request not yet decided, and its hash (unverified).
    fn undecided(&self, id: &str) -> Result<(Object, String), Failure> {
        check_approval_id(id)?;
        let request = Store::read(&self.request_path(id))
            .ok_or_else(|| Failure::usage(format!("no pending approval {id} in {}", self.dir.display())))?;
        if let Some(d) = self.decision(id) {
            return Err(Failure::usage(format!(
                "approval {id} was already decided: {}",
                safe(d.get("decision").and_then(Value::as_str).unwrap_or("?"))
            )));
        }
        let sha = request_sha256(&request);
        Ok((request, sha))
    }

    /// Writes a person's decision on request `id`, whose hash is `sha` (`nyx5 mcp-approve`,
    /// after [`Store::verified`], or `nyx5 mcp-decline`), once.
    pub(crate) fn record_decision(&self, id: &str, approve: bool, sha: &str, code: Option<&str>) -> Outcome {
        let decision = if approve { "approve" } else { "decline" };
        match self.decide_once(id, decision, sha, code) {
            Ok(()) => Ok(()),
            Err(Some(d)) => Err(Failure::usage(format!(
                "approval {id} was already decided: {}",
                safe(d.get("decision").and_then(Value::as_str).unwrap_or("?"))
            ))),
            Err(None) => Err(Failure::usage(format!("cannot write the decision for {id} in {}", self.dir.display()))),
        }
    }

    /// The file counting a wrapped server's calls (one per command line, so a restart keeps
    /// its hour and another server's tools of the same name do not share it).
    fn calls_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("calls-{key}.json"))
    }

    /// Runs `f` on the calls file's `{tool: [ms…]}` (pruned to the past hour) under a lock,
    /// writing back what it changed. A file that cannot be read or locked in time is
    /// [`Counts::Spoiled`]; a write then starts it again from this process's own counts.
    fn with_calls<T>(&self, key: &str, f: impl FnOnce(&mut Counts, i64) -> (T, bool)) -> T {
        let path = self.calls_path(key);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.dir.join(format!("calls-{key}.json.lock")))
            .ok()
            .filter(|l| {
                let deadline = Instant::now() + LOCK_WAIT;
                loop {
                    match l.try_lock() {
                        Ok(()) => return true,
                        Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => return false,
                    }
                }
            });
        let now = now_ms();
        let mut counts = match &lock {
            None => Counts::Spoiled,
            Some(_) if path.symlink_metadata().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {
                Counts::Read(Object::new())
            }
            Some(_) => match crate::io::read_capped(&path, MAX_FILE_BYTES).map(|b| Value::parse(&b, MAX_FILE_BYTES)) {
                Ok(Ok(Value::Object(o))) => Counts::Read(o),
                _ => Counts::Spoiled,
            },
        };
        if let Counts::Read(calls) = &mut counts {
            for v in calls.values_mut() {
                if let Value::Array(times) = v {
                    times.retain(|t| t.as_safe_integer().is_some_and(|t| now - t < HOUR_MS && t <= now));
                }
            }
            calls.retain(|_, v| v.as_array().is_some_and(|a| !a.is_empty()));
        }
        let (out, changed) = f(&mut counts, now);
        if changed && lock.is_some() {
            let calls = match counts {
                Counts::Read(calls) => calls,
                Counts::Spoiled => self.seen_as_object(now),
            };
            if let Err(e) = self.write(&path, &Value::Object(calls), false) {
                eprintln!("nyx5 mcp --wrap: cannot record the hour's calls in {}: {e}", path.display());
            }
        }
        if let Some(l) = lock {
            let _ = l.unlock();
        }
        out
    }

    /// This process's counts of the past hour, as the calls file holds them.
    fn seen_as_object(&self, now: i64) -> Object {
        let mut seen = lock(&self.seen);
        seen.values_mut().for_each(|t| t.retain(|t| now - t < HOUR_MS));
        seen.retain(|_, t| !t.is_empty());
        seen.iter().map(|(k, t)| (k.clone(), Value::Array(t.iter().map(|&t| t.into()).collect()))).collect()
    }

    /// Judges a call of `tool` that no human approved and, when it goes ahead, counts it: the
    /// hour's count read, the verdict and the count written under one lock of the calls file, so
    /// two proxies of the same server cannot both take the last call an hour allows. The count
    /// is the larger of the file's and this process's own; "at the limit" when the file is
    /// spoiled or holds too many names.
    fn admit(&self, key: &str, tool: &str, rule: &Rule, args: &Object) -> Verdict {
        if rule.authority.max_per_hour.is_none() {
            return judge(rule, args, 0, false);
        }
        let cap = usize::try_from(MAX_PER_HOUR).unwrap_or(usize::MAX);
        self.with_calls(key, |counts, now| {
            let from_file = match counts {
                Counts::Read(calls) if calls.contains_key(tool) || calls.len() < MAX_COUNTED_TOOLS => {
                    let n = calls.get(tool).and_then(Value::as_array).map_or(0, <[Value]>::len);
                    i64::try_from(n).unwrap_or(i64::MAX)
                }
                _ => i64::MAX,
            };
            let mut seen = lock(&self.seen);
            let mine = seen.get(tool).map_or(0, |t| t.iter().filter(|&&t| now - t < HOUR_MS).count());
            let hour_ops = from_file.max(i64::try_from(mine).unwrap_or(i64::MAX));
            let verdict = judge(rule, args, hour_ops, false);
            if verdict != Verdict::Allowed {
                return (verdict, false);
            }
            let t = seen.entry(tool.to_owned()).or_default();
            t.retain(|t| now - t < HOUR_MS);
            t.push(now);
            t.drain(..t.len().saturating_sub(cap));
            drop(seen);
            if let Counts::Read(calls) = counts
                && let Value::Array(t) = calls.entry(tool.to_owned()).or_insert_with(|| Value::Array(Vec::new()))
            {
                t.push(now.into());
                t.drain(..t.len().saturating_sub(cap));
            }
            (verdict, true)
        })
    }

    /// Counts one call of `tool` that a human approved (only where a rate is capped: nothing
    /// else reads the count).
    fn record_call(&self, key: &str, tool: &str, rule: &Rule) {
        if rule.authority.max_per_hour.is_none() {
            return;
        }
        let cap = usize::try_from(MAX_PER_HOUR).unwrap_or(usize::MAX);
        let now = now_ms();
        {
            let mut seen = lock(&self.seen);
            let t = seen.entry(tool.to_owned()).or_default();
            t.retain(|t| now - t < HOUR_MS);
            t.push(now);
            let over = t.len().saturating_sub(cap);
            t.drain(..over);
        }
        self.with_calls(key, |counts, now| {
            let Counts::Read(calls) = counts else { return ((), true) };
            let times = calls.entry(tool.to_owned()).or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(t) = times {
                t.push(now.into());
                let over = t.len().saturating_sub(cap);
                t.drain(..over);
            }
            ((), true)
        });
    }
}

/// A number no other call in this process gets.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// The CLI verbs that decide out of band.

/// `nyx5 mcp-approvals`'s options.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// The approvals directory [default: $XDG_STATE_HOME/nyx5/approvals, else
    /// ~/.local/state/nyx5/approvals]
    #[arg(long, value_name = "DIR")]
    approvals: Option<PathBuf>,
    /// Print one JSON document instead of text
    #[arg(long)]
    json: bool,
}

/// `nyx5 mcp-approve` and `nyx5 mcp-decline`'s options.
#[derive(Debug, Clone, Args)]
pub(crate) struct DecideArgs {
    /// The approval's id, as `nyx5 mcp-approvals` lists it
    id: String,
    /// Approve without asking: what is approved (checked against the code) is still printed
    /// before the decision is written. Without it, `mcp-approve` asks y/N on its terminal, and
    /// refuses when its standard input is not one
    #[arg(long)]
    yes: bool,
    /// To approve: the code the waiting proxy printed on its standard error beside the id (it
    /// is on no file, so neither the wrapped server nor the model can approve)
    #[arg(long, value_name = "CODE", allow_hyphen_values = true)]
    code: Option<String>,
    /// The approvals directory [default: $XDG_STATE_HOME/nyx5/approvals, else
    /// ~/.local/state/nyx5/approvals]
    #[arg(long, value_name = "DIR")]
    approvals: Option<PathBuf>,
}

/// `nyx5 mcp-approvals`: the wrapped calls waiting for a person.
pub(crate) fn list(args: &ListArgs) -> Outcome {
    let dir = default_dir(args.approvals.as_deref())?;
    // No directory yet: no proxy ever asked.
    let pending = if dir.exists() { Store::open(Some(&dir), false)?.pending()? } else { Vec::new() };
    // A request that is not as a proxy wrote it shows its id and that it was changed, nothing it
    // says; the others are marked unverified: without the code, a rewrite whose plain hashes
    // were recomputed cannot be told apart.
    let pending: Vec<Object> = pending
        .into_iter()
        .map(|mut p| {
            if consistent(&p) {
                p.insert("verified".into(), Value::Bool(false));
                p
            } else {
                let id = p.get("id").cloned().unwrap_or(Value::Null);
                obj([("id", id), ("changed", Value::Bool(true))])
            }
        })
        .collect();
    if args.json {
        let v = Value::Object(obj([("pending", Value::Array(pending.into_iter().map(Value::Object).collect()))]));
        return crate::io::write_json_line(&v);
    }
    let mut text = String::new();
    if pending.is_empty() {
        text.push_str("no wrapped call is waiting for approval\n");
    } else {
        text.push_str(
            "UNVERIFIED: what follows is what the request files say, and whatever can write this directory can \
             rewrite them; `nyx5 mcp-approve ID --code CODE` checks a request against its code and shows it before \
             anything is approved\n",
        );
    }
    for p in &pending {
        let s = |k: &str| safe(p.get(k).and_then(Value::as_str).unwrap_or_default());
        if p.contains_key("changed") {
            text.push_str(&format!(
                "{}  WARNING: this request was changed since the proxy wrote it; do not approve it\n",
                s("id")
            ));
            continue;
        }
        let args = p.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
        text.push_str(&format!(
            "{}  {}  {}  (unverified)\n  why: {}\n  arguments: {}\n  until {}\n",
            s("id"),
            s("tool"),
            s("created"),
            s("reason"),
            shown_arguments(&args),
            s("expires")
        ));
        if let Some(r) = p.get("rationale").and_then(Value::as_str) {
            text.push_str(&format!("  rationale: {}\n", safe(r)));
        }
    }
    crate::io::write_text(&text)
}

/// `nyx5 mcp-approve ID` / `nyx5 mcp-decline ID`: decides one waiting call, once. An approval
/// first shows the request as checked against the code (tool, arguments, amount, reason), then
/// asks y/N on the terminal (or, with `--yes`, goes on), and only then writes the decision.
pub(crate) fn decide(args: &DecideArgs, approve: bool) -> Outcome {
    let store = Store::open(args.approvals.as_deref(), false)?;
    let id = safe(&args.id);
    if !approve {
        let (request, sha) = store.undecided(&args.id)?;
        store.record_decision(&args.id, false, &sha, None)?;
        let tool = safe(request.get("tool").and_then(Value::as_str).unwrap_or_default());
        return crate::io::write_text(&format!("declined {id} ({tool}), this call only\n"));
    }
    let (request, sha) = store.verified(&args.id, args.code.as_deref())?;
    crate::io::write_text(&format!("approval {id}, as its code verifies it:\n{}", verified_summary(&request)))?;
    if !args.yes {
        use std::io::{BufRead as _, IsTerminal as _, Read as _};
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Err(Failure::usage(format!(
                "not approved: mcp-approve asks on its terminal, and its standard input is not one; pass --yes \
                 to approve {id} as shown above"
            )));
        }
        eprint!("Approve this one call? [y/N] ");
        let mut said = String::new();
        let _ = stdin.lock().take(64).read_line(&mut said);
        if !matches!(said.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            return Err(Failure::usage(format!("not approved: nothing was written; {id} still waits")));
        }
    }
    store.record_decision(&args.id, true, &sha, args.code.as_deref())?;
    let tool = safe(request.get("tool").and_then(Value::as_str).unwrap_or_default());
    crate::io::write_text(&format!("approved {id} ({tool}), this call only\n"))
}

/// What a person approves, from a request [`Store::verified`] checked: its tool, arguments,
/// amount (where its authority names an amount argument), reason and rationale.
fn verified_summary(request: &Object) -> String {
    let s = |k: &str| safe(request.get(k).and_then(Value::as_str).unwrap_or_default());
    let args = request.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut out = format!("  tool: {}\n  arguments: {}\n", s("tool"), shown_arguments(&args));
    let authority = request.get("authority").and_then(Value::as_object);
    if let Some(arg) = authority.and_then(|a| a.get("amount_argument")).and_then(Value::as_str) {
        let amount = args.get(arg).map_or_else(|| "none".to_owned(), Value::canonical_string);
        let currency = authority.and_then(|a| a.get("currency")).and_then(Value::as_str).unwrap_or_default();
        out.push_str(&format!("  amount: {} {}\n", safe(&shorten(&amount, SHOWN_VALUE)), safe(currency)));
    }
    out.push_str(&format!("  why: {}\n", s("reason")));
    if request.contains_key("rationale") {
        out.push_str(&format!("  rationale: {}\n", s("rationale")));
    }
    out
}

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

/// A lock, even if a thread panicked holding it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An id as a key: `1` and `"1"` differ.
/// The latest of our ids (`nyx5-wrap-s-N`): the one with the greatest N, compared as a number
/// (as text, s-9 came after s-10).
fn latest<'a>(ours: impl Iterator<Item = &'a str>) -> Option<String> {
    ours.max_by_key(|o| o.rsplit('-').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0)).map(str::to_owned)
}

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
    crate::mcp::result(id, result)
}

/// A line as the proxy reads it, or why it is refused: the line may end in CR LF, and holds no
/// other control byte. Raw controls are never allowed inside JSON strings; outside them, some
/// readers (the Python SDK's among them) end a line at a lone CR where ours sees whitespace, so
/// a line that holds one could be two messages to the server and one to us.
pub(crate) fn judged_line(line: &[u8]) -> Result<&[u8], String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match line.iter().position(|b| *b < 0x20 || *b == 0x7f) {
        None => Ok(line),
        Some(at) => Err(format!(
            "parse error: a raw control character (byte 0x{:02x} at {at}) outside a JSON string",
            line.get(at).copied().unwrap_or_default()
        )),
    }
}

/// What goes on the wire for a message the proxy parsed and judged: its canonical JSON, with
/// the characters some readers take for a line end (U+0085, U+2028, U+2029, only ever inside
/// strings there) and the other controls canonical JSON leaves raw written as escapes
/// ([`crate::sanitise::json`]). Never the bytes a peer sent.
pub(crate) fn wire(msg: &Value) -> Vec<u8> {
    crate::sanitise::json(msg)
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

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Approved,
    Declined(&'static str),
    Expired,
    Cancelled,
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

/// What the proxy holds in memory of the request it wrote: the hashes of its code and of the
/// whole request.
#[derive(Debug, Default)]
struct Bound {
    code_sha: String,
    request_sha: String,
}

/// A decision file read: only an approval of this very request (its whole hash, as this proxy
/// wrote it), naming the code this proxy printed (whose hash only it holds in memory), is a yes.
fn decided(d: &Object, bound: &Bound) -> Ended {
    let same = !bound.request_sha.is_empty()
        && d.get("request_sha256").and_then(Value::as_str) == Some(bound.request_sha.as_str());
    let code = d.get("code").and_then(Value::as_str).map(|c| hex(&sha256(c.as_bytes())));
    match d.get("decision").and_then(Value::as_str) {
        Some("approve") if same && !bound.code_sha.is_empty() && code.as_deref() == Some(bound.code_sha.as_str()) => {
            Ended::Approved
        }
        Some("expired") => Ended::Expired,
        // Only the client cancels a call quietly (its own notification, never a file): any other
        // decision, "cancelled" included, is a no that the client is told of.
        _ => Ended::Declined("declined by the human"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Result<Rules, String> {
        Rules::from_value(&Value::parse_str(text).map_err(|e| e.reason)?)
    }

    #[test]
    fn a_cancellation_names_the_latest_of_our_ids_by_number() {
        // Hostile review L5: compared as text, nyx5-wrap-s-9 came after nyx5-wrap-s-10.
        let ids = ["nyx5-wrap-s-9", "nyx5-wrap-s-10", "nyx5-wrap-s-2"];
        assert_eq!(latest(ids.into_iter()).as_deref(), Some("nyx5-wrap-s-10"));
        assert_eq!(latest(std::iter::empty()), None);
    }

    fn args(text: &str) -> Object {
        Value::parse_str(text).ok().and_then(|v| v.as_object().cloned()).unwrap_or_default()
    }

    const FILE: &str = r#"{
      "tools": {
        "echo": {"level":"autonomous","consequence":"reversible","max_per_hour":2},
        "transfer": {"level":"autonomous","consequence":"costly","max_amount":100,"currency":"tok"},
        "delete_tmp": {"level":"autonomous","consequence":"reversible"}
      },
      "patterns": {"delete_*": {"level":"needs_approval","consequence":"irreversible","rationale":"deletions"},
                   "drop*": {"level":"prohibited","consequence":"irreversible"}},
      "amounts": {"transfer": {"argument":"amount","currency":"tok"}}
    }"#;

    #[test]
    fn a_tool_gets_the_strictest_of_its_entries_and_nothing_unnamed_runs() {
        let r = rules(FILE).unwrap_or_default();
        assert_eq!(r.rule("echo").authority.level, Level::Autonomous);
        // The exact entry and the pattern: the strictest level, the gravest consequence.
        let tmp = r.rule("delete_tmp");
        assert_eq!((tmp.authority.level, tmp.consequence), (Level::NeedsApproval, Consequence::Irreversible));
        assert_eq!(r.rule("delete_all").authority.rationale.as_deref(), Some("deletions"));
        assert_eq!(r.rule("drop_table").authority.level, Level::Prohibited);
        assert_eq!(r.rule("other").authority.level, Level::Prohibited);
        let with_default =
            rules(r#"{"default":{"level":"needs_approval","consequence":"irreversible"}}"#).unwrap_or_default();
        assert_eq!(with_default.rule("other").authority.level, Level::NeedsApproval);
    }

    #[test]
    fn calls_are_judged_by_level_amount_and_hour() {
        let r = rules(FILE).unwrap_or_default();
        assert_eq!(judge(&r.rule("echo"), &args("{}"), 1, false), Verdict::Allowed);
        assert!(matches!(judge(&r.rule("echo"), &args("{}"), 2, false), Verdict::Ask(_)));
        let t = r.rule("transfer");
        assert_eq!(judge(&t, &args(r#"{"amount":100}"#), 0, false), Verdict::Allowed);
        assert!(matches!(judge(&t, &args(r#"{"amount":101}"#), 0, false), Verdict::Ask(w) if w.contains("above")));
        for unreadable in [r#"{}"#, r#"{"amount":"5"}"#, r#"{"amount":1.5}"#, r#"{"amount":-1}"#] {
            assert!(matches!(judge(&t, &args(unreadable), 0, false), Verdict::Ask(_)), "{unreadable}");
        }
        assert_eq!(judge(&t, &args(r#"{"amount":5000}"#), 0, true), Verdict::Allowed);
        assert!(matches!(judge(&r.rule("delete_x"), &args("{}"), 0, false), Verdict::Ask(_)));
        // A yes never lifts a prohibition.
        assert!(matches!(judge(&r.rule("drop"), &args("{}"), 0, true), Verdict::Refused(_)));
        assert!(matches!(judge(&r.rule("unnamed"), &args("{}"), 0, true), Verdict::Refused(_)));
    }

    #[test]
    fn a_call_that_names_its_currency_is_judged_only_in_its_caps() {
        let r = rules(
            r#"{"tools":{"pay":{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"USD"}},
                "amounts":{"pay":{"argument":"amount","currency_argument":"currency"}}}"#,
        )
        .unwrap();
        let pay = r.rule("pay");
        assert_eq!(judge(&pay, &args(r#"{"amount":50,"currency":"usd"}"#), 0, false), Verdict::Allowed);
        assert!(matches!(judge(&pay, &args(r#"{"amount":51,"currency":"USD"}"#), 0, false), Verdict::Ask(_)));
        // 50 of another currency, or of none said, is not 50 of the cap's: a human decides.
        for other in [r#"{"amount":50,"currency":"BTC"}"#, r#"{"amount":50}"#, r#"{"amount":5,"currency":7}"#] {
            assert!(
                matches!(judge(&pay, &args(other), 0, false), Verdict::Ask(w) if w.contains("currency")),
                "{other}"
            );
            assert_eq!(judge(&pay, &args(other), 0, true), Verdict::Allowed, "{other}");
        }
        let same = r#"{"tools":{},"amounts":{"pay":{"argument":"amount","currency_argument":"amount"}}}"#;
        assert!(rules(same).unwrap_err().contains("currency_argument"));
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        for (bad, says) in [
            (r#"[]"#, "one JSON object"),
            (r#"{"tool":{}}"#, "no member"),
            (r#"{"tools":{"x":{"level":"autonomous","consequence":"irreversible"}}}"#, "tools.x"),
            (r#"{"tools":{"x":{"level":"autonomous","consequence":"costly"}}}"#, "max_amount"),
            (r#"{"patterns":{"a*b*":{"level":"prohibited","consequence":"costly"}}}"#, "pattern"),
            (r#"{"patterns":{"ab":{"level":"prohibited","consequence":"costly"}}}"#, "pattern"),
            (r#"{"default":{"level":"never","consequence":"costly"}}"#, "default"),
            (
                r#"{"tools":{"pay":{"level":"autonomous","consequence":"costly","max_amount":5,"currency":"tok"}}}"#,
                "amounts.pay",
            ),
            (
                r#"{"tools":{"pay":{"level":"autonomous","consequence":"costly","max_amount":5,"currency":"tok"}},
                   "amounts":{"pay":{"argument":"n","currency":"usd"}}}"#,
                "currency",
            ),
            (r#"{"amounts":{"pay":{"arg":"n"}}}"#, "amounts.pay"),
        ] {
            match rules(bad) {
                Ok(_) => panic!("accepted {bad}"),
                Err(why) => assert!(why.contains(says), "{bad}: {why}"),
            }
        }
    }

    #[test]
    fn listed_tools_carry_the_authority_and_incoherent_hints_warn() {
        let r = rules(FILE).unwrap_or_default();
        let tool = args(r#"{"name":"echo","description":"Echo","annotations":{"destructiveHint":true,"title":"E"}}"#);
        let (t, warnings) = annotate(&tool, &r.rule("echo"));
        let ann = t.get("annotations").and_then(Value::as_object).cloned().unwrap_or_default();
        assert_eq!(ann.get("destructiveHint"), Some(&Value::Bool(false)));
        assert_eq!(ann.get("title"), Some(&Value::from("E")));
        assert_eq!(warnings.len(), 1);
        let meta = Value::Object(t.get("_meta").and_then(Value::as_object).cloned().unwrap_or_default());
        assert!(meta.canonical_string().contains(r#""nyx5/authority":{"consequence":"reversible""#));
        let (t, warnings) =
            annotate(&args(r#"{"name":"transfer","annotations":{"readOnlyHint":true}}"#), &r.rule("transfer"));
        assert_eq!(warnings.len(), 1);
        let ann = t.get("annotations").and_then(Value::as_object).cloned().unwrap_or_default();
        assert_eq!(ann.get("readOnlyHint"), Some(&Value::Bool(false)));
        assert_eq!(ann.get("destructiveHint"), Some(&Value::Bool(true)));
        assert!(t.get("description").and_then(Value::as_str).unwrap_or_default().contains("above 100 tok"));
    }

    #[test]
    fn a_line_with_a_raw_control_is_refused_and_only_the_parsed_message_goes_on() {
        assert_eq!(judged_line(b"{\"a\":1}\r"), Ok(&b"{\"a\":1}"[..]));
        for bad in [&b"{\"a\":\r1}"[..], b"{\"a\":1}\r\r", b"{\"a\":\t1}", b"{\"a\":1}\x00", b"\x7f{}", b"{}\x0b"] {
            assert!(judged_line(bad).is_err(), "{bad:?}");
        }
        let v = Value::parse_str("{\"y\" : 1, \"x\":\"a\u{2028}b\u{85}\"}").unwrap();
        assert_eq!(wire(&v), br#"{"x":"a\u2028b\u0085","y":1}"#);
    }

    #[test]
    fn two_proxies_never_both_take_the_last_call_of_the_hour() {
        // Separate stores on one directory, as proxies in separate processes of one server: each
        // round, 16 of them race for a tool allowed twice an hour, 2 calls each.
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = std::env::temp_dir().join(format!("nyx5-admit-{}-{}", std::process::id(), unique()));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).unwrap();
        let rule = rules(FILE).unwrap().rule("echo");
        let mut over = 0;
        for round in 0..60 {
            let key = format!("round{round}");
            let barrier = Arc::new(std::sync::Barrier::new(16));
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    let (dir, key, rule, barrier) = (dir.clone(), key.clone(), rule.clone(), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        let store = Store::open(Some(&dir), false).unwrap();
                        barrier.wait();
                        (0..2).filter(|_| store.admit(&key, "echo", &rule, &Object::new()) == Verdict::Allowed).count()
                    })
                })
                .collect();
            let allowed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
            eprintln!("round {round}: {allowed} went ahead");
            if allowed > 2 {
                over += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(over, 0, "rounds where more calls went ahead than the hour allows");
    }

    #[test]
    fn shortens_at_characters() {
        assert_eq!(shorten("ñandú", 3), "ñan…");
        assert_eq!(shorten("abc", 3), "abc");
    }
}
