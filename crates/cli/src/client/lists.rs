//! `nyx5 allow`, `block`, `unlist`, `lists` — the agent's own allow and block lists (`GET` and
//! `POST /lists/:local`, owner only, current key; docs/SPEC.md "Mailbox lists") — and `nyx5 pins`,
//! the operator's view of the domain keys its house pinned on first use (`GET /pins`, `POST
//! /pins/:domain/confirm`, admin token).
//!
//! An entry is an address or a domain (`domain` or `@domain`: every agent there). The block list
//! is read first, so `allow` also takes an entry off the block list and `block` off the allow
//! list: the command does what its name says. `unlist` takes entries off both (or `--from` one).

use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::{Object, Value, obj};
use nyx5_rules::policy::LIST_KINDS as KINDS;
use nyx5_rules::policy::{MAX_LIST_CHANGES, list_entry};

use super::Ctx;
use super::directory::{operator_hint, operator_house};
use super::http::{read_object, send};
use super::output::{list_shown, safe, show, text};
use crate::error::Failure;

/// What a change does to an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Onto the allow list (and off the block list).
    Allow,
    /// Onto the block list (and off the allow list).
    Block,
    /// Off the named list, or both.
    Unlist(Option<&'static str>),
}

impl Change {
    /// `--from allow|block` for `unlist`.
    pub(crate) fn unlist_from(from: Option<&str>) -> Result<Change, Failure> {
        match from {
            None => Ok(Change::Unlist(None)),
            Some(f) => KINDS
                .into_iter()
                .find(|k| *k == f)
                .map(|k| Change::Unlist(Some(k)))
                .ok_or_else(|| Failure::usage(format!("--from {f:?}: use allow or block"))),
        }
    }

    /// The request body for `entries`: `{"<list>": {"add": […], "remove": […]}}`.
    fn body(self, entries: &[String]) -> Value {
        let list = || Value::Array(entries.iter().map(|e| e.as_str().into()).collect());
        let add = |kind: &str, other: &str| {
            obj([(kind, Value::Object(obj([("add", list())]))), (other, Value::Object(obj([("remove", list())])))])
        };
        let body = match self {
            Change::Allow => add("allow", "block"),
            Change::Block => add("block", "allow"),
            Change::Unlist(from) => KINDS
                .into_iter()
                .filter(|k| from.is_none_or(|f| f == *k))
                .map(|k| (k.to_owned(), Value::Object(obj([("remove", list())]))))
                .collect(),
        };
        Value::Object(body)
    }

    /// How many additions and removals one entry costs the house's limit.
    fn cost(self) -> usize {
        match self {
            Change::Unlist(Some(_)) => 1,
            _ => 2,
        }
    }
}

/// The acting agent's lists as the house answered them.
fn answer(agent: &str, o: &Object) -> Value {
    let list = |k: &str| o.get(k).cloned().unwrap_or(Value::Array(vec![]));
    Value::Object(obj([("agent", agent.into()), ("allow", list("allow")), ("block", list("block"))]))
}

/// `nyx5 lists`: the acting agent's allow and block lists.
pub(crate) fn lists(ctx: &Ctx) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let target = format!("/lists/{}", me.address.local());
    let (_, o) = ctx.call(&me, "GET", &target, None, &format!("reading the lists of {}", me.address))?;
    Ok(answer(me.address.as_str(), &o))
}

/// `nyx5 allow|block|unlist ENTRY…`: changes the lists; answers them as they are now.
pub(crate) fn change(ctx: &Ctx, change: Change, entries: &[String]) -> Result<Value, Failure> {
    let most = MAX_LIST_CHANGES / change.cost();
    if entries.is_empty() || entries.len() > most {
        return Err(Failure::usage(format!("give 1 to {most} addresses or domains")));
    }
    let entries = entries
        .iter()
        .map(|e| {
            list_entry(e)
                .map_err(|err| Failure::usage(format!("{}; give an address or a domain", err.reason)).named(err.name()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let me = ctx.me()?;
    let target = format!("/lists/{}", me.address.local());
    let what = format!("changing the lists of {}", me.address);
    let (_, o) = ctx.call(&me, "POST", &target, Some(&change.body(&entries)), &what)?;
    Ok(answer(me.address.as_str(), &o))
}

pub(crate) fn lists_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = format!("{}: who may write to you\n", text(&o, "agent"));
    for (kind, says) in [("allow", "always let in"), ("block", "always refused")] {
        s.push_str(&format!("  {:<8} {}   ({says})\n", format!("{kind}:"), list_shown(&o, kind)));
    }
    s
}

/// `nyx5 pins`: the house's pinned domain keys, with any key waiting for the operator.
pub(crate) fn pins(ctx: &Ctx, house: Option<&str>, admin_token: &str) -> Result<Value, Failure> {
    let url = operator_house(ctx, house)?;
    let auth = format!("Bearer {admin_token}");
    let headers = [("authorization", auth.as_str()), ("accept", "application/json")];
    let what = "listing the pinned keys";
    let (status, body) = send(ctx.net.as_ref(), "GET", &format!("{url}/pins"), &headers, &[], what)?;
    let o = read_object(status, &body, what).map_err(operator_hint)?;
    Ok(Value::Object(obj([("house", url.into()), ("pins", o.get("pins").cloned().unwrap_or(Value::Array(vec![])))])))
}

/// `nyx5 pins --confirm DOMAIN --sig KEY`: the key waiting for `domain` becomes its pin, if it is
/// `sig` (the operator checked it some other way).
pub(crate) fn confirm_pin(
    ctx: &Ctx,
    house: Option<&str>,
    admin_token: &str,
    domain: &str,
    sig: &str,
) -> Result<Value, Failure> {
    let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
    nyx5_proto::address::check_domain(&domain)
        .map_err(|why| Failure::usage(format!("--confirm {domain:?} is not a domain: {why}")))?;
    let sig = SigPublic::parse(sig.trim()).map_err(|e| Failure::input("--sig", &e))?;
    let url = operator_house(ctx, house)?;
    let auth = format!("Bearer {admin_token}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    let body = Value::Object(obj([("sig", sig.to_b64().into())])).canonical();
    let what = format!("confirming the key of {domain}");
    let (status, answer) =
        send(ctx.net.as_ref(), "POST", &format!("{url}/pins/{domain}/confirm"), &headers, &body, &what)?;
    let o = read_object(status, &answer, &what).map_err(|f| match f.status() {
        Some(409) => f.hint(format!("no such key is waiting for {domain}: `nyx5 pins` shows the one that is")),
        _ => operator_hint(f),
    })?;
    Ok(Value::Object(obj([
        ("house", url.into()),
        ("domain", o.get("domain").cloned().unwrap_or(domain.into())),
        ("sig", o.get("sig").cloned().unwrap_or(Value::Null)),
        ("confirmed", Value::Bool(true)),
    ])))
}

pub(crate) fn pins_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    if o.get("confirmed") == Some(&Value::Bool(true)) {
        return format!("{}: the pin of {} is now {}\n", text(&o, "house"), safe(text(&o, "domain")), text(&o, "sig"));
    }
    let list = o.get("pins").and_then(Value::as_array).unwrap_or_default();
    if list.is_empty() {
        return format!("{}: no domain key pinned yet\n", text(&o, "house"));
    }
    let mut s = String::new();
    for p in list.iter().filter_map(Value::as_object) {
        let domain = safe(text(p, "domain"));
        s.push_str(&format!("{domain}  {}  since {}\n", text(p, "sig"), show(p, "first_seen")));
        if let Some(pending) = p.get("pending").and_then(Value::as_str) {
            s.push_str(&format!(
                "  REFUSED key {} (last seen {}); if its house rotated on purpose and you checked the key:\n    \
                 nyx5 pins --confirm {domain} --sig {}\n",
                safe(pending),
                show(p, "pending_at"),
                safe(pending)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_verb_does_what_its_name_says() {
        let e = vec!["bo@b.test".to_owned()];
        let text = |c: Change| c.body(&e).canonical_string();
        assert_eq!(text(Change::Allow), r#"{"allow":{"add":["bo@b.test"]},"block":{"remove":["bo@b.test"]}}"#);
        assert_eq!(text(Change::Block), r#"{"allow":{"remove":["bo@b.test"]},"block":{"add":["bo@b.test"]}}"#);
        assert_eq!(
            text(Change::Unlist(None)),
            r#"{"allow":{"remove":["bo@b.test"]},"block":{"remove":["bo@b.test"]}}"#
        );
        assert_eq!(text(Change::unlist_from(Some("block")).unwrap()), r#"{"block":{"remove":["bo@b.test"]}}"#);
        assert!(Change::unlist_from(Some("grey")).is_err());
    }
}
