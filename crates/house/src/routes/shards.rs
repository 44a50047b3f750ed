//! POST /shards/move — the operator moves an agent's mailbox to another of the house's databases
//! (issue 36 §3; docs/SPEC.md §8b; docs/decisions/0060-mailbox-shards.md).

use nyx5_proto::json::field;
use nyx5_proto::{Error, Refusal, Value};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::{House, ok_body};

/// POST /shards/move `{local, to}` → 200 `{address, from, to, envelopes}` once the move ended
/// within this request's step, else 202 `{local, from, to, copied, state: "moving"}`.
pub async fn move_mailbox<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let body = json_body(req)?;
    let local = field::str(&body, "local")?;
    let to = field::integer(&body, "to")?;
    let count = house.mailbox().databases();
    if count == 1 {
        return Err(Refusal::SingleDatabase.because("this house has one database: there is nowhere to move a mailbox"));
    }
    let to = usize::try_from(to).ok().filter(|t| *t < count).ok_or_else(|| {
        Refusal::BadMember.because(format!("`to` must be a database of this house's {count}, 0 to {}", count - 1))
    })?;
    let address = house.registry().local_address(local)?;
    if house.registry().created_at(local).await?.is_none() {
        return Err(Refusal::UnknownAgent.because(format!("no agent {address}")));
    }
    // One bounded step (docs/decisions/0060-mailbox-shards.md, "Moves in steps"): the tick
    // takes the next ones.
    let step = house.mailbox().move_step(local, to).await?;
    let copied = Value::from(i64::try_from(step.copied).unwrap_or(i64::MAX));
    if !step.done {
        return Ok(Response::json(
            202,
            &ok_body([
                ("local", local.into()),
                ("from", Value::from(step.from as i64)),
                ("to", Value::from(step.to as i64)),
                ("copied", copied),
                ("state", "moving".into()),
            ]),
        ));
    }
    Ok(Response::json(
        200,
        &ok_body([
            ("address", address.as_str().into()),
            ("from", Value::from(step.from as i64)),
            ("to", Value::from(step.to as i64)),
            ("envelopes", copied),
        ]),
    ))
}
