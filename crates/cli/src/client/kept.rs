//! The mail an agent keeps on its own side, in a SQLite file beside the profile
//! (`<profile>.mail.db`, readable by its user alone): every envelope `inbox` opened (the CLI's,
//! MCP's and `--follow`'s) and every one `send` sent, as the view the agent was shown, with a
//! full-text index (FTS5) and the keys that join conversations (issue 38 §1; the rules are
//! `nyx5_client::kept`). `nyx5 thread` and `nyx5 find` read it; acknowledging on the house marks
//! mail read here and removes nothing; `nyx5 forget` removes. `NYX5_KEPT=off` keeps nothing.
//!
//! Nothing here is sent anywhere: the house keeps sealed bytes, the agent keeps the text.

use nyx5_client::kept::{self, Dir, Filters};
use nyx5_proto::Timestamp;
use nyx5_proto::json::{Object, Value, obj};

use super::Ctx;
use super::kept_store::{Store, path_beside};
use super::output::{safe, show};
use crate::error::Failure;
use crate::sys;

/// A store's failure as the command reports it.
fn failed(why: String) -> Failure {
    Failure::usage(format!("the local mail store: {why}")).named("local_store")
}

fn open_for(ctx: &Ctx) -> Result<Store, Failure> {
    Store::open(&path_beside(&ctx.profile_path)).map_err(failed)
}

/// Whether the user turned keeping off (`NYX5_KEPT=off`: nothing read or sent is kept here).
fn keeping_off() -> bool {
    std::env::var("NYX5_KEPT").is_ok_and(|v| v.trim().eq_ignore_ascii_case("off"))
}

/// Keeps what `inbox` showed `agent` (its page's views), or says on standard error why it could
/// not: the read itself stands.
pub(crate) fn keep_read(ctx: &Ctx, agent: &str, views: &[Value]) {
    if keeping_off() || views.is_empty() {
        return;
    }
    let kept = sys::now().and_then(|now| open_for(ctx)?.keep(agent, views, Dir::In, now).map_err(failed));
    if let Err(f) = kept {
        eprintln!("nyx5: the mail read was not kept locally: {}", f.one_line());
    }
}

/// Keeps what `agent` sent (its own view of it), or says on standard error why it could not.
pub(crate) fn keep_sent(ctx: &Ctx, agent: &str, view: Value) {
    if keeping_off() {
        return;
    }
    let kept = sys::now().and_then(|now| open_for(ctx)?.keep(agent, &[view], Dir::Out, now).map_err(failed));
    if let Err(f) = kept {
        eprintln!("nyx5: the mail sent was not kept locally: {}", f.one_line());
    }
}

/// Marks what `agent` acknowledged read in the store (if there is one).
pub(crate) fn mark_acked(ctx: &Ctx, agent: &str, ids: &[String]) {
    let path = path_beside(&ctx.profile_path);
    if !path.exists() {
        return;
    }
    if let Err(f) = Store::open(&path).and_then(|s| s.mark_read(agent, ids)).map_err(failed) {
        eprintln!("nyx5: the mail acknowledged was not marked read locally: {}", f.one_line());
    }
}

/// `nyx5 thread ID`.
pub(crate) fn thread(ctx: &Ctx, id: &str) -> Result<Value, Failure> {
    nyx5_proto::address::check_id(id).map_err(|e| Failure::usage(e.reason.to_string()).named(e.name()))?;
    let me = ctx.me()?;
    let agent = me.address.as_str();
    let Some((messages, more)) = open_for(ctx)?.thread(agent, id).map_err(failed)? else {
        return Err(Failure::usage(format!(
            "{id} is not kept here: only mail read with `nyx5 inbox` (or sent with `nyx5 send`) from this profile is"
        ))
        .named("not_kept"));
    };
    Ok(Value::Object(obj([
        ("agent", agent.into()),
        ("id", id.into()),
        ("messages", Value::Array(messages)),
        ("more", Value::Bool(more)),
    ])))
}

/// What `nyx5 find` asks.
#[derive(Debug, Clone, Default)]
pub(crate) struct FindRequest {
    pub(crate) words: Vec<String>,
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) since: Option<String>,
    pub(crate) until: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) unread: bool,
    pub(crate) limit: Option<usize>,
}

/// `nyx5 find WORDS`.
pub(crate) fn find(ctx: &Ctx, req: &FindRequest) -> Result<Value, Failure> {
    let words = kept::words_query(&req.words).map_err(|e| Failure::usage(format!("find: {e}")))?;
    let now = sys::now()?;
    let time = |flag: &str, t: &Option<String>| {
        t.as_deref()
            .map(|t| {
                super::when::parse(t, now).map(Timestamp::millis).map_err(|e| Failure::usage(format!("--{flag}: {e}")))
            })
            .transpose()
    };
    if let Some(k) = &req.kind {
        nyx5_proto::envelope::Kind::parse(k)
            .map_err(|_| Failure::usage("--type: one of message, task, result, receipt, intro"))?;
    }
    let filters = Filters {
        from: req.from.clone(),
        to: req.to.clone(),
        since: time("since", &req.since)?,
        until: time("until", &req.until)?,
        kind: req.kind.clone(),
        unread: req.unread,
        limit: req.limit.unwrap_or(kept::DEFAULT_FOUND),
    };
    let me = ctx.me()?;
    let agent = me.address.as_str();
    let (found, more) = open_for(ctx)?.find(agent, words.as_deref(), &filters).map_err(failed)?;
    Ok(Value::Object(obj([("agent", agent.into()), ("found", Value::Array(found)), ("more", Value::Bool(more))])))
}

/// `nyx5 forget ID… | --all`.
pub(crate) fn forget(ctx: &Ctx, ids: &[String], all: bool) -> Result<Value, Failure> {
    if ids.is_empty() != all {
        return Err(Failure::usage("name the envelope ids to forget, or --all (and not both)"));
    }
    let me = ctx.me()?;
    let agent = me.address.as_str();
    let n = open_for(ctx)?.forget(agent, ids, all).map_err(failed)?;
    Ok(Value::Object(obj([("agent", agent.into()), ("forgot", i64::try_from(n).unwrap_or(i64::MAX).into())])))
}

fn list_human(o: &Object, name: &str, empty: &str) -> String {
    let list = o.get(name).and_then(Value::as_array).unwrap_or_default();
    if list.is_empty() {
        return format!("{empty}\n");
    }
    let mut s = String::new();
    for m in list {
        if m.as_object().and_then(|m| m.get("dir")).and_then(Value::as_str) == Some("out") {
            s.push_str("(sent by you)\n");
        }
        s.push_str(&super::output::message_human(m));
    }
    if o.get("more") == Some(&Value::Bool(true)) {
        s.push_str("(more: narrow the search, or raise --limit)\n");
    }
    s
}

pub(crate) fn thread_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    format!(
        "thread of {} for {}\n{}",
        safe(&show(&o, "id")),
        safe(&show(&o, "agent")),
        list_human(&o, "messages", "(empty)")
    )
}

pub(crate) fn find_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    list_human(&o, "found", "nothing kept matches")
}

pub(crate) fn forget_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    format!("forgot {} message(s) kept for {}\n", show(&o, "forgot"), safe(&show(&o, "agent")))
}
