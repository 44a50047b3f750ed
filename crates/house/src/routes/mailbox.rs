//! GET /mailbox/:local and POST /mailbox/:local/ack — reading and acknowledging (spec §7, §8).

use nyx5_proto::json::field;
use nyx5_proto::{Error, Timestamp, Value, address::check_id, limits};

use crate::auth::{Keys, json_body};
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::store::inbox;
use crate::{House, ok_body, port_error};

/// Mailbox page size: default and most.
pub const PAGE_DEFAULT: i64 = 50;
pub const PAGE_MAX: i64 = 200;
/// Most ids one ack may carry.
pub const ACK_MAX: usize = 500;

/// GET /mailbox/:local?after=<seq>&limit=<n> — the owner's pending envelopes, oldest first.
pub async fn read<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    house.authenticate_owner(req, local, Keys::CurrentOrGrace).await?;
    let number = |name: &str, default: i64, max: i64| -> Result<i64, Error> {
        req.query(name).map_or(Ok(default), |v| {
            v.parse::<i64>()
                .ok()
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(|| Error::malformed(format!("`{name}` must be an integer from 0 to {max}")))
        })
    };
    let after = number("after", 0, i64::MAX)?;
    let limit = number("limit", PAGE_DEFAULT, PAGE_MAX)?;
    let rows = inbox::page(&house.db, local, after, limit).await?;
    let mut items = Vec::with_capacity(rows.len());
    let mut last = None;
    for r in &rows {
        let envelope = Value::parse(r.text("envelope").unwrap_or_default().as_bytes(), limits::MAX_ENVELOPE_BYTES)?;
        let seq = r.int("seq").unwrap_or(0);
        last = Some(seq);
        items.push(Value::Object(nyx5_proto::json::obj([
            ("seq", seq.into()),
            ("received", Timestamp(r.int("received_at").unwrap_or(0)).to_rfc3339().into()),
            ("envelope", envelope),
        ])));
    }
    let next = if rows.len() as i64 == limit { last } else { None };
    Ok(Response::json(200, &ok_body([("envelopes", Value::Array(items)), ("next", next.into())])))
}

/// POST /mailbox/:local/ack `{"ids": [...]}` — idempotent; answers how many were newly acked.
pub async fn ack<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    house.authenticate_owner(req, local, Keys::CurrentOrGrace).await?;
    let body = json_body(req)?;
    let ids = field::array(&body, "ids")?;
    if ids.is_empty() || ids.len() > ACK_MAX {
        return Err(Error::malformed(format!("`ids` must list 1 to {ACK_MAX} envelope ids")));
    }
    let now = house.now().millis();
    let mut stmts = Vec::with_capacity(ids.len());
    for id in ids {
        let id = id.as_str().ok_or_else(|| Error::malformed("`ids` lists strings"))?;
        check_id(id)?;
        stmts.push(inbox::ack(local, id, now));
    }
    let changes = house.db.batch(stmts).await.map_err(port_error)?;
    let acked: u64 = changes.iter().sum();
    Ok(Response::json(200, &ok_body([("acked", (acked as i64).into())])))
}
