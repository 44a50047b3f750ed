//! What the wrapping proxy decides, with no I/O (no file, clock, process or randomness: they
//! are the store's and the proxy's): the authority file read into rules by tool name, a call's
//! verdict, a listed tool's hints, what an approval request hashes and binds, what a decision
//! file means, and which lines pass.

use std::collections::{BTreeMap, HashSet};

use nyx5_proto::Value;
use nyx5_proto::authority::{Authority, Consequence, Intent, Level, Verdict};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, field};

use crate::client::output::one_line as safe;

/// The members an authority file may have.
const FILE_MEMBERS: [&str; 5] = ["tools", "patterns", "default", "amounts", "approve_by_elicitation"];
/// The most characters of a call's arguments shown to whoever approves it.
pub(crate) const SHOWN_VALUE: usize = 160;
/// The most characters of an argument's name shown.
const SHOWN_KEY: usize = 64;

// ---------------------------------------------------------------------------------------------
// The authority file: rules by tool name.

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
    pub(crate) by_elicitation: bool,
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
pub(crate) fn authority_meta(rule: &Rule) -> Value {
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
pub(crate) fn arguments_sha256(args: &Object) -> String {
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
pub(crate) fn request_sha256(request: &Object) -> String {
    let mut bound = request.clone();
    bound.remove("request_sha256");
    bound.remove("binding");
    hex(&sha256(&Value::Object(bound).canonical()))
}

/// Ties a request's hash to its approval code: only whoever holds the code (the proxy, and the
/// person it showed the code to) can make a binding for a request, so a request rewritten by
/// whatever can write the directory no longer matches the code the person types.
pub(crate) fn binding(code: &str, request_sha: &str) -> String {
    hex(&sha256(format!("nyx5 mcp approval\n{code}\n{request_sha}").as_bytes()))
}

/// Whether a request file is as a proxy wrote it, as far as can be told without its code: only
/// the members a proxy writes, hashing to its `request_sha256`, and its arguments to its
/// `arguments_sha256`.
pub(crate) fn consistent(request: &Object) -> bool {
    let args = request.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
    request.keys().all(|k| REQUEST_MEMBERS.contains(&k.as_str()))
        && request.get("request_sha256").and_then(Value::as_str) == Some(request_sha256(request).as_str())
        && request.get("arguments_sha256").and_then(Value::as_str) == Some(arguments_sha256(&args).as_str())
}

/// A call's arguments as a person reads them before deciding: every member, each value cut to
/// [`SHOWN_VALUE`] characters, control characters made visible, and how much was left out.
pub(crate) fn shown_arguments(args: &Object) -> String {
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
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((i, _)) => format!("{}…", text.get(..i).unwrap_or_default()),
    }
}

// ---------------------------------------------------------------------------------------------
// A decision file, read against what the proxy holds in memory.

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    Approved,
    Declined(&'static str),
    Expired,
    Cancelled,
}

/// What the proxy holds in memory of the request it wrote: the hashes of its code and of the
/// whole request.
#[derive(Debug, Default)]
pub(crate) struct Bound {
    pub(crate) code_sha: String,
    pub(crate) request_sha: String,
}

/// A decision file read: only an approval of this very request (its whole hash, as this proxy
/// wrote it), naming the code this proxy printed (whose hash only it holds in memory), is a yes.
pub(crate) fn decided(d: &Object, bound: &Bound) -> Ended {
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

// ---------------------------------------------------------------------------------------------
// Lines and ids.

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

/// The latest of our ids (`nyx5-wrap-s-N`): the one with the greatest N, compared as a number
/// (as text, s-9 came after s-10).
pub(crate) fn latest<'a>(ours: impl Iterator<Item = &'a str>) -> Option<String> {
    ours.max_by_key(|o| o.rsplit('-').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0)).map(str::to_owned)
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
    fn shortens_at_characters() {
        assert_eq!(shorten("ñandú", 3), "ñan…");
        assert_eq!(shorten("abc", 3), "abc");
    }
}
