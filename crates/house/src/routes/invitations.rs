//! POST /invitations and GET /invitations — invitation codes, for the operator (spec §8b).

use nyx5_proto::json::field;
use nyx5_proto::{Error, Object, Refusal, Timestamp, Value, limits};

use crate::auth::optional_json_body;
use crate::http::{Request, Response};
use crate::ports::{Db, Net, Row};
use crate::{House, ok_body};

/// Most uses one invitation may carry.
pub const MAX_USES: i64 = 10_000;

/// POST /invitations `{uses?, expires?, note?, welcome?}` → `{code, …}`.
pub async fn create<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let body = optional_json_body(req)?;
    let uses = field::opt_integer(&body, "uses")?.unwrap_or(1);
    if !(1..=MAX_USES).contains(&uses) {
        return Err(Refusal::BadMember.because(format!("`uses` must be 1 to {MAX_USES}")));
    }
    let expires = field::opt_str(&body, "expires")?.map(Timestamp::parse).transpose()?;
    let welcome = field::opt_integer(&body, "welcome")?.unwrap_or(0);
    if !(0..=limits::MAX_AMOUNT).contains(&welcome) {
        return Err(Refusal::BadMember.because("`welcome` must be a non-negative integer"));
    }
    let note = field::opt_str(&body, "note")?;
    // Hex, so a code never starts with `-` and survives any shell or command line as it is.
    let code = nyx5_proto::crypto::hex(&house.random::<12>());
    let row = house.registry().invite(&code, uses, expires, note, welcome).await?;
    Ok(Response::json(201, &ok_body([("invitation", invitation_value(&row))])))
}

/// GET /invitations — every code and how much of it is used.
pub async fn list<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let rows = house.registry().invitations().await?;
    Ok(Response::json(200, &ok_body([("invitations", Value::Array(rows.iter().map(invitation_value).collect()))])))
}

fn invitation_value(r: &Row) -> Value {
    let time = |name: &str| r.int(name).map(|t| Timestamp(t).to_rfc3339());
    let mut o = Object::new();
    o.insert("code".into(), r.text("code").unwrap_or_default().into());
    o.insert("uses".into(), r.int("uses").unwrap_or(0).into());
    o.insert("used".into(), r.int("used").unwrap_or(0).into());
    o.insert("expires".into(), time("expires").into());
    o.insert("note".into(), r.text("note").map(str::to_owned).into());
    o.insert("welcome".into(), r.int("welcome").unwrap_or(0).into());
    o.insert("created".into(), time("created_at").into());
    Value::Object(o)
}
