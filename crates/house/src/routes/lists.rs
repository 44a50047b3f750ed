//! GET /lists/:local, POST /lists/:local — an agent's allow and block lists (spec §9; docs/SPEC.md
//! "Mailbox lists").
//!
//! Only the owner may read or change them. The body of a change is
//! `{"allow": {"add": [..], "remove": [..]}, "block": {...}}`; entries are addresses or domains
//! (`domain` or `@domain`). Removals apply before additions; the answer is the lists as they are.

use nyx5_proto::auth::Keys;

use nyx5_proto::json::field;
use nyx5_proto::vecmap::VecSet;
use nyx5_proto::{Error, Object, Refusal, Value};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::mailbox::ListChange;
use crate::ports::{Db, Net};
use crate::{House, ok_body};
use nyx5_rules::policy::{self, MAX_LIST_CHANGES, MAX_LIST_ENTRIES};

/// The two lists, in the order they are written.
pub const KINDS: [&str; 2] = policy::LIST_KINDS;

/// GET /lists/:local
pub async fn get<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    house.registry().authenticate_owner(req, local, Keys::Current).await?;
    lists(house, local).await
}

/// POST /lists/:local
pub async fn post<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    house.registry().authenticate_owner(req, local, Keys::Current).await?;
    let body = json_body(req)?;
    if let Some(k) = body.keys().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(Refusal::BadMember.because(format!("unknown list {k:?}: the lists are `allow` and `block`")));
    }
    let current = house.mailbox().lists(local).await?;
    let mut changes_made: Vec<ListChange<'_>> = Vec::new();
    let mut changes = 0usize;
    for kind in KINDS {
        let Some(change) = field::opt_object(&body, kind)? else { continue };
        if let Some(k) = change.keys().find(|k| *k != "add" && *k != "remove") {
            return Err(Refusal::BadMember.because(format!("unknown member `{kind}.{k}`: use `add` and `remove`")));
        }
        let add = entries(change, "add", kind)?;
        let remove = entries(change, "remove", kind)?;
        if let Some(both) = add.intersection(&remove).next() {
            return Err(Refusal::BadMember.because(format!("{both:?} is both added to and removed from `{kind}`")));
        }
        changes += add.len() + remove.len();
        let mut list: VecSet<&str> =
            current.iter().filter(|r| r.text("kind") == Some(kind)).filter_map(|r| r.text("entry")).collect();
        for e in &remove {
            list.remove(e.as_str());
            changes_made.push(ListChange { kind, entry: e.clone(), add: false });
        }
        for e in &add {
            list.insert(e.as_str());
            changes_made.push(ListChange { kind, entry: e.clone(), add: true });
        }
        if list.len() > MAX_LIST_ENTRIES {
            return Err(
                Refusal::ListTooLong.because(format!("a `{kind}` list holds at most {MAX_LIST_ENTRIES} entries"))
            );
        }
    }
    if changes > MAX_LIST_CHANGES {
        return Err(Refusal::TooManyChanges.because(format!("at most {MAX_LIST_CHANGES} changes at once")));
    }
    house.mailbox().change_lists(local, &changes_made, MAX_LIST_ENTRIES as i64).await?;
    lists(house, local).await
}

fn entries(change: &Object, name: &str, kind: &str) -> Result<VecSet<String>, Error> {
    field::opt_array(change, name)?
        .unwrap_or_default()
        .iter()
        .map(|v| {
            v.as_str()
                .ok_or_else(|| Refusal::BadMember.because(format!("`{kind}.{name}` lists strings")))
                .and_then(policy::list_entry)
        })
        .collect()
}

async fn lists<D: Db, N: Net>(house: &House<D, N>, local: &str) -> Result<Response, Error> {
    let rows = house.mailbox().lists(local).await?;
    let list = |kind: &str| list_of(&rows, kind);
    Ok(Response::json(200, &ok_body([("allow", list("allow")), ("block", list("block"))])))
}

/// The entries of list `kind` (`allow`, `block`) among rows with `kind` and `entry`, in row order.
pub(crate) fn list_of(rows: &[crate::ports::Row], kind: &str) -> Value {
    Value::Array(
        rows.iter().filter(|r| r.text("kind") == Some(kind)).filter_map(|r| r.text("entry")).map(Value::from).collect(),
    )
}
