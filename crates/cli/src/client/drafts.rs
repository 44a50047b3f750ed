//! `nyx5 hold` and `nyx5 drafts` — mail that waits at the house for a person (docs/SPEC.md §7c):
//! the holds over an agent, the drafts it is asked to decide or sent, and the approver's yes or
//! no. An approver reads a sealed draft with the key its sender wrapped for it; what it reads is
//! what the recipients will (the envelope's signed commitment).
//!
//! `nyx5 send` meets a hold through [`readers_for`]: the house answers `approver_cannot_read`,
//! and the same envelope goes again with each approver's key.

use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::{Address, Envelope, seal};

use super::Ctx;
use super::directory::{operator_hint, operator_house};
use super::http::{read_object, send};
use super::output::{one_line, safe, show, text};
use super::profile::AgentEntry;
use crate::error::Failure;
use crate::sys::{self, OsRng};

/// Which agent a hold verb is about: the acting agent, or `for_local`: an address, a local part
/// with a dot (`kid.ana`), or a bare name, which is the acting agent's subagent (`kid` →
/// `kid.ana`) unless the operator asks (then it is that agent of the house).
fn held_local(me: &AgentEntry, for_local: Option<&str>, operator: bool) -> Result<String, Failure> {
    match for_local {
        None => Ok(me.address.local().to_owned()),
        Some(f) if !operator && !f.contains(['@', '.']) && f != me.address.local() => {
            Ok(format!("{f}.{}", me.address.local()))
        }
        Some(f) => {
            let a = Address::parse_lenient(f)
                .or_else(|_| Address::parse_lenient(&format!("{f}@{}", me.address.domain())))
                .map_err(|e| Failure::usage(format!("--for: {}", e.reason)).named(e.name()))?;
            if a.domain() != me.address.domain() {
                return Err(Failure::usage(format!(
                    "--for {a}: a hold is set at the agent's own house ({})",
                    me.address.domain()
                )));
            }
            Ok(a.local().to_owned())
        }
    }
}

/// The operator's token, when one is given, for a hold at the acting agent's house.
pub(crate) struct AsOperator<'a> {
    pub(crate) admin_token: Option<&'a str>,
}

/// `nyx5 hold show [--for AGENT]`: the holds over an agent, nearest first.
pub(crate) fn hold_show(ctx: &Ctx, for_local: Option<&str>, op: &AsOperator<'_>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let local = held_local(&me, for_local, op.admin_token.is_some())?;
    call(ctx, &me, op, "GET", &format!("/agents/{local}/hold"), None, "reading the holds")
}

/// `nyx5 hold set --approver A RULE… [--for AGENT]`.
pub(crate) fn hold_set(
    ctx: &Ctx,
    for_local: Option<&str>,
    approver: &str,
    rule: Object,
    op: &AsOperator<'_>,
) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let local = held_local(&me, for_local, op.admin_token.is_some())?;
    let approver = Address::parse_lenient(approver)
        .or_else(|_| Address::parse_lenient(&format!("{approver}@{}", me.address.domain())))
        .map_err(|e| Failure::usage(format!("--approver: {}", e.reason)).named(e.name()))?;
    let body = Value::Object(obj([("approver", approver.as_str().into()), ("rule", Value::Object(rule))]));
    call(ctx, &me, op, "PUT", &format!("/agents/{local}/hold"), Some(&body), "setting a hold")
}

/// `nyx5 hold lift [--for AGENT]`.
pub(crate) fn hold_lift(ctx: &Ctx, for_local: Option<&str>, op: &AsOperator<'_>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let local = held_local(&me, for_local, op.admin_token.is_some())?;
    call(ctx, &me, op, "DELETE", &format!("/agents/{local}/hold"), None, "lifting a hold")
}

/// One request as the agent (its token) or, with a token given, as the operator.
fn call(
    ctx: &Ctx,
    me: &AgentEntry,
    op: &AsOperator<'_>,
    method: &str,
    target: &str,
    body: Option<&Value>,
    what: &str,
) -> Result<Value, Failure> {
    match op.admin_token {
        None => ctx.call(me, method, target, body, what).map(|(_, o)| Value::Object(o)),
        Some(token) => {
            let url = operator_house(ctx, None)?;
            let auth = format!("Bearer {token}");
            let bytes = body.map(Value::canonical).unwrap_or_default();
            let mut headers = vec![("authorization", auth.as_str()), ("accept", "application/json")];
            if body.is_some() {
                headers.push(("content-type", "application/json"));
            }
            let (status, answer) = send(ctx.net.as_ref(), method, &format!("{url}{target}"), &headers, &bytes, what)?;
            Ok(Value::Object(read_object(status, &answer, what).map_err(operator_hint)?))
        }
    }
}

pub(crate) fn holds_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    if o.contains_key("lifted") {
        let done = if o.get("lifted") == Some(&Value::Bool(true)) { "lifted" } else { "had no hold to lift" };
        return format!("{}: {done}\n", safe(text(&o, "agent")));
    }
    let holds = o.get("holds").and_then(Value::as_array).unwrap_or_default();
    if holds.is_empty() {
        return format!("{}: no hold; its mail leaves as it is sent\n", safe(text(&o, "agent")));
    }
    let mut s = format!("{}: mail waits for approval under {} hold(s)\n", safe(text(&o, "agent")), holds.len());
    for h in holds.iter().filter_map(Value::as_object) {
        s.push_str(&format!(
            "  on {}: {} approves {}; set by {} at {}\n",
            safe(text(h, "on")),
            safe(text(h, "approver")),
            safe(&h.get("rule").map(Value::canonical_string).unwrap_or_default()),
            safe(text(h, "set_by")),
            show(h, "set_at")
        ));
    }
    s
}

/// `nyx5 drafts`: what the acting agent is asked to decide, and what it sent that waits.
pub(crate) fn list(ctx: &Ctx) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let (_, answer) = ctx.call(&me, "GET", &format!("/drafts/{}", me.address.local()), None, "reading drafts")?;
    Ok(Value::Object(answer))
}

pub(crate) fn list_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = String::new();
    for (name, title) in [("asked", "asked of you"), ("sent", "sent by you")] {
        let list = o.get(name).and_then(Value::as_array).unwrap_or_default();
        s.push_str(&format!("{title}: {}\n", list.len()));
        for d in list.iter().filter_map(Value::as_object) {
            s.push_str(&format!("  {}\n", line(d)));
        }
    }
    s
}

/// One draft on one line: id, state, sender, recipients, who approved, until when.
fn line(d: &Object) -> String {
    let names = |k: &str| {
        d.get(k)
            .and_then(Value::as_array)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .map(safe)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{} [{}] from {} to {}; asks {}; approved by {}; until {}",
        safe(text(d, "id")),
        safe(text(d, "state")),
        safe(text(d, "sender")),
        names("to"),
        names("asks"),
        if names("approved_by").is_empty() { "nobody yet".into() } else { names("approved_by") },
        show(d, "expires")
    )
}

/// `nyx5 drafts show ID`: the draft, and for its approver the content opened (`content`), or why
/// it cannot be (`unreadable`).
pub(crate) fn show_draft(ctx: &Ctx, id: &str) -> Result<Value, Failure> {
    nyx5_proto::address::check_id(id).map_err(|e| Failure::usage(format!("draft: {}", e.reason)).named(e.name()))?;
    let me = ctx.me()?;
    let (_, answer) =
        ctx.call(&me, "GET", &format!("/drafts/{}/{id}", me.address.local()), None, &format!("reading draft {id}"))?;
    let mut draft = answer.get("draft").and_then(Value::as_object).cloned().unwrap_or_default();
    if let Some(env) = draft.get("envelope").cloned() {
        let opened = open(&me, &env, draft.get("key"));
        match opened {
            Ok((content, all)) => {
                draft.insert("content".into(), content.to_value());
                draft.insert("carries".into(), all);
            }
            Err(reason) => {
                draft.insert("unreadable".into(), reason.into());
            }
        }
    }
    Ok(Value::Object(draft))
}

/// The content of a draft's envelope for its approver: clear as it is, or sealed and opened with
/// the key its sender wrapped for the approver (checked against the envelope's commitment).
/// Answers the content and the whole envelope as read ([`nyx5_client::send::as_read`]).
fn open(me: &AgentEntry, env: &Value, key: Option<&Value>) -> Result<(nyx5_proto::envelope::Content, Value), String> {
    let env = Envelope::from_object(env.as_object().cloned().unwrap_or_default()).map_err(|e| e.reason.to_string())?;
    let content = opened(me, &env, key)?;
    let all = nyx5_client::send::as_read(&env, &content);
    Ok((content, all))
}

fn opened(me: &AgentEntry, env: &Envelope, key: Option<&Value>) -> Result<nyx5_proto::envelope::Content, String> {
    if let Some(c) = env.content() {
        return Ok(c.clone());
    }
    let key = key.ok_or("the sender gave no key for you: you cannot read what you would approve; decline it")?;
    let key = seal::ReaderKey::from_value(key, "key").map_err(|e| e.reason.to_string())?;
    let mut last = String::from("no key of yours opens it");
    for secret in me.enc_secrets() {
        match seal::open_as_reader(env, &key, secret) {
            Ok(c) => return Ok(c),
            Err(e) => last = e.reason.to_string(),
        }
    }
    Err(format!("cannot open it ({last}): decline it"))
}

pub(crate) fn show_human(v: &Value) -> String {
    let d = v.as_object().cloned().unwrap_or_default();
    let mut s = format!("{}\n", line(&d));
    if let Some(c) = d.get("content").and_then(Value::as_object) {
        let body = match c.get("body") {
            Some(Value::String(t)) => t.clone(),
            Some(other) => other.canonical_string(),
            None => String::new(),
        };
        s.push_str(&format!("  media: {}\n", one_line(text(c, "media"))));
        for l in body.lines() {
            s.push_str(&format!("  | {}\n", safe(l)));
        }
    }
    if let Some(all) = d.get("carries") {
        s.push_str(&format!("  all it carries: {}\n", safe(&all.canonical_string())));
    }
    if let Some(why) = d.get("unreadable").and_then(Value::as_str) {
        s.push_str(&format!("  unreadable: {}\n", safe(why)));
    }
    if let Some(note) = d.get("note").and_then(Value::as_str) {
        s.push_str(&format!("  note: {}\n", safe(note)));
    }
    s
}

/// `nyx5 drafts approve ID`: shows the draft opened and asks on the terminal (unless `yes`),
/// then approves. A draft its approver cannot read is not approved here.
pub(crate) fn approve(ctx: &Ctx, id: &str, yes: bool) -> Result<Value, Failure> {
    let shown = show_draft(ctx, id)?;
    let d = shown.as_object().cloned().unwrap_or_default();
    if let Some(why) = d.get("unreadable").and_then(Value::as_str) {
        return Err(Failure::rejected(format!("draft {id} cannot be read: {why}")));
    }
    if !yes {
        crate::io::confirm_on_terminal(&format!("{}Let it leave? [y/N] ", show_human(&shown)))?;
    }
    decide(ctx, id, "approve", Value::Object(Object::new()))
}

/// `nyx5 drafts decline ID [--note N]`.
pub(crate) fn decline(ctx: &Ctx, id: &str, note: Option<&str>) -> Result<Value, Failure> {
    let body = match note {
        Some(n) => obj([("note", n.into())]),
        None => Object::new(),
    };
    decide(ctx, id, "decline", Value::Object(body))
}

fn decide(ctx: &Ctx, id: &str, verb: &str, body: Value) -> Result<Value, Failure> {
    nyx5_proto::address::check_id(id).map_err(|e| Failure::usage(format!("draft: {}", e.reason)).named(e.name()))?;
    let me = ctx.me()?;
    let target = format!("/drafts/{}/{id}/{verb}", me.address.local());
    let (_, answer) = ctx.call(&me, "POST", &target, Some(&body), &format!("{verb} draft {id}"))?;
    Ok(Value::Object(answer))
}

pub(crate) fn decided_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let d = o.get("draft").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut s = format!("{}\n", line(&d));
    if text(&d, "state") == "approved" {
        s.push_str("  it has left: the house delivers it now\n");
    }
    s
}

/// The `readers` query value for `env`, which the house holds for approval (it answered
/// `approver_cannot_read`): the holds over the sender are read, each approver's card resolved,
/// and the envelope's key wrapped for each (from the sender's own copy).
pub(crate) fn readers_for(ctx: &Ctx, me: &AgentEntry, env: &Envelope) -> Result<String, Failure> {
    let (_, holds) =
        ctx.call(me, "GET", &format!("/agents/{}/hold", me.address.local()), None, "reading the holds over you")?;
    let mut approvers: Vec<Address> = Vec::new();
    for h in holds.get("holds").and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_object) {
        let a = Address::parse(text(h, "approver")).map_err(|e| Failure::input("a hold's approver", &e))?;
        if !approvers.contains(&a) {
            approvers.push(a);
        }
    }
    let res = ctx.resolver(Some(me), sys::now()?)?;
    let mut keys = Vec::new();
    for a in &approvers {
        let card = res.agent(a).map_err(|f| f.context(&format!("approver {a}")))?;
        let enc = card.enc().ok_or_else(|| Failure::usage(format!("the approver {a} publishes no encryption key")))?;
        keys.push((a.clone(), enc));
    }
    let mut rng = OsRng::new();
    let q = nyx5_client::send::readers_query(env, &me.address, me.enc_secrets(), &keys, &mut rng)
        .map_err(|e| Failure::usage(e.reason.to_string()).named(e.name()))?;
    rng.check()?;
    Ok(q)
}
