//! GET /agents/:local/settings — an agent's private settings, for the agent itself (current key)
//! or the operator (docs/SPEC.md §8b, "Private settings").
//!
//! What the house keeps about an agent that its card does not publish: the webhook, the allow
//! and block lists, and the quotas that apply to its mailbox. Today every quota is a house-wide
//! setting (the mailbox's own, `mailbox_max_envelopes` and `mailbox_max_bytes`, included); a
//! per-mailbox value, when there is one, takes the same name in `quotas`.

use nyx5_proto::auth::Keys;
use nyx5_proto::json::obj;
use nyx5_proto::{Error, Object, Refusal, Value, limits};

use crate::http::{Request, Response};
use crate::ports::{Db, Net, Row};
use crate::routes::lists::{KINDS, list_of};
use crate::{House, ok_body};
use nyx5_rules::policy::MAX_LIST_ENTRIES;

/// GET /agents/:local/settings
pub async fn get<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    if !house.registry().is_admin(req) {
        house.registry().authenticate_owner(req, local, Keys::Current).await?;
    }
    let address = house.registry().local_address(local)?;
    let rows = house.registry().settings(local).await?;
    let first = rows.first().ok_or_else(|| Refusal::UnknownAgent.because(format!("no agent {address}")))?;
    Ok(Response::json(
        200,
        &ok_body([
            ("address", address.as_str().into()),
            ("webhook", first.text("webhook").into()),
            ("lists", lists(&rows)),
            ("quotas", quotas(house)),
        ]),
    ))
}

/// `{"allow": [...], "block": [...]}`, each sorted, as `GET /lists/:local` answers them.
fn lists(rows: &[Row]) -> Value {
    Value::Object(KINDS.iter().map(|k| ((*k).to_owned(), list_of(rows, k))).collect::<Object>())
}

/// The limits this mailbox lives under, by name. The email ones only where the bridge runs.
fn quotas<D: Db, N: Net>(house: &House<D, N>) -> Value {
    let c = &house.config;
    let int = |n: usize| Value::from(i64::try_from(n).unwrap_or(i64::MAX));
    let mut q = obj([
        ("max_envelope_bytes", int(c.max_bytes)),
        ("max_intro_bytes", int(limits::MAX_INTRO_BYTES)),
        ("inbound_per_domain_per_minute", c.inbound_per_domain_per_minute.into()),
        ("list_entries", int(MAX_LIST_ENTRIES)),
        ("mailbox_max_envelopes", c.mailbox_max_envelopes.into()),
        ("mailbox_max_bytes", c.mailbox_max_bytes.into()),
        ("outbound_per_minute", c.outbound_per_agent_per_minute.into()),
    ]);
    if c.email_enabled {
        q.insert("email_max_bytes".into(), int(c.email_max_bytes.min(c.max_bytes)));
        q.insert("email_in_per_sender_per_minute".into(), c.email_per_sender_per_minute.into());
        q.insert("email_out_per_minute".into(), c.email_out_per_agent_per_minute.into());
    }
    Value::Object(q)
}
