//! GET /pins, POST /pins/:domain/confirm — TOFU pins of other houses' keys, for the operator
//! (spec §2).
//!
//! A domain found without an anchor is pinned to the first key that signed its card. When its
//! card later comes signed by another key, that key is recorded as `pending` and the domain is
//! refused (403) until the operator confirms it here, naming it (`{"sig": "<key>"}`): the pending
//! key can change between the operator's reading of `GET /pins` and the confirmation (any later
//! refused card records its own key), so a confirmation says which key it means.

use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::field;
use nyx5_proto::{Error, Object, Timestamp, Value};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::ports::{Db, Net, Row};
use crate::{House, ok_body};

/// GET /pins — every pin, with any pending key.
pub async fn list<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let rows = house.lookup().pins().await?;
    Ok(Response::json(200, &ok_body([("pins", Value::Array(rows.iter().map(pin_value).collect()))])))
}

/// POST /pins/:domain/confirm `{sig}` — the pending key, if it is `sig`, becomes the pin.
pub async fn confirm<D: Db, N: Net>(house: &House<D, N>, req: &Request, domain: &str) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let body = json_body(req)?;
    let expected = SigPublic::parse(field::str(&body, "sig")?)?;
    let sig = house.lookup().confirm_pin(domain, Some(&expected)).await?;
    Ok(Response::json(200, &ok_body([("domain", domain.into()), ("sig", sig.into())])))
}

fn pin_value(r: &Row) -> Value {
    let time = |name: &str| r.int(name).map(|t| Timestamp(t).to_rfc3339());
    let mut o = Object::new();
    o.insert("domain".into(), r.text("domain").unwrap_or_default().into());
    o.insert("sig".into(), r.text("sig").unwrap_or_default().into());
    o.insert("first_seen".into(), time("first_seen").into());
    o.insert("pending".into(), r.text("pending").map(str::to_owned).into());
    o.insert("pending_at".into(), time("pending_at").into());
    Value::Object(o)
}
