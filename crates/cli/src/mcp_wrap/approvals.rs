//! The person's side of the wrapping proxy's approvals: `nyx5 mcp-approvals` lists the calls
//! waiting, `nyx5 mcp-approve ID --code CODE` and `nyx5 mcp-decline ID` decide one, out of band.

use std::path::PathBuf;

use clap::Args;
use nyx5_proto::Value;
use nyx5_proto::json::{Object, obj};

use super::rules::{SHOWN_VALUE, consistent, shorten, shown_arguments};
use super::store::{Store, default_dir};
use crate::client::output::one_line as safe;
use crate::error::{Failure, Outcome};

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
