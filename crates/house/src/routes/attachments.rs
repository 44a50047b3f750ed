//! Sealed attachments (docs/SPEC.md §8e; issue 38 §4): `POST /attachments` (the owner, whose
//! token it is, describes one), `PUT /attachments/:id/:n` (the owner stores its parts), `GET
//! /attachments/:id` and `GET /attachments/:id/:n` (the owner, or a reader it named, with its own
//! token from any house), `DELETE /attachments/:id` (the owner, at once).

use nyx5_proto::auth::Keys;
use nyx5_proto::{Error, Refusal, Value};

use crate::attachments::{Description, PART_BYTES};
use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::{House, ok_body};

/// A part's number as the path writes it.
fn part_number(n: &str) -> Result<i64, Error> {
    n.parse::<i64>()
        .ok()
        .filter(|k| (0..64).contains(k) && k.to_string() == n)
        .ok_or_else(|| Refusal::BadAttachment.because(format!("{n:?} is no part number")))
}

/// `POST /attachments` `{bytes, sha256, to, expires?}` (the owner's token) → 201 `{id, url,
/// parts, part_bytes, expires}`.
pub async fn create<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    let card = house.registry().authenticate(req, Keys::Current).await?;
    let d = Description::from_object(&json_body(req)?)?;
    let made = house.attachments().create(card.address().local(), &d).await?;
    Ok(Response::json(
        201,
        &ok_body([
            ("id", made.id.into()),
            ("url", made.url.into()),
            ("parts", made.parts.into()),
            ("part_bytes", PART_BYTES.into()),
            ("expires", made.expires.to_rfc3339().into()),
        ]),
    ))
}

/// `PUT /attachments/:id/:n` (the part's bytes) → `{missing}`: the parts still to store.
pub async fn put<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str, n: &str) -> Result<Response, Error> {
    let n = part_number(n)?;
    let card = house.registry().authenticate(req, Keys::Current).await?;
    let missing = house.attachments().put_part(card.address(), id, n, req.body.clone()).await?;
    Ok(Response::json(200, &ok_body([("missing", missing.into())])))
}

/// `GET /attachments/:id` → `{id, bytes, sha256, parts, part_bytes, complete, expires}`.
pub async fn show<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str) -> Result<Response, Error> {
    let card = house.registry().authenticate_any(req).await?;
    let s = house.attachments().show(card.address(), id).await?;
    Ok(Response::json(
        200,
        &ok_body([
            ("id", id.into()),
            ("bytes", s.bytes.into()),
            ("sha256", s.sha256.into()),
            ("parts", s.parts.into()),
            ("part_bytes", PART_BYTES.into()),
            ("complete", Value::Bool(s.complete)),
            ("expires", s.expires.to_rfc3339().into()),
        ]),
    ))
}

/// `GET /attachments/:id/:n` → the part's bytes (`application/octet-stream`).
pub async fn part<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str, n: &str) -> Result<Response, Error> {
    let n = part_number(n)?;
    let card = house.registry().authenticate_any(req).await?;
    let bytes = house.attachments().part(card.address(), id, n).await?;
    Ok(Response::bytes(200, "application/octet-stream", bytes).with_header("cache-control", "private, no-store"))
}

/// `DELETE /attachments/:id` (the owner's token) → `{removed: true}`: its parts and record go now.
pub async fn delete<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str) -> Result<Response, Error> {
    let card = house.registry().authenticate(req, Keys::Current).await?;
    if !house.attachments().remove(card.address(), id).await? {
        return Err(Refusal::UnknownAttachment.because(format!("{} has no attachment {id} here", card.address())));
    }
    Ok(Response::json(200, &ok_body([("removed", Value::Bool(true))])))
}
