//! GET /apps, GET /apps/:id, POST /apps, DELETE /apps/:id — the house's catalogue of App Cards
//! (docs/SPEC.md "Apps — Pinned"). The catalogue is public and signed by the domain key as
//! `nyx5/1 app-catalogue`; each entry pins its card's SHA-256, so a house that copies entries
//! (a fork) cannot change an app without the hash telling. The operator keeps it with the house
//! token; a card is verified (signature, primitives) before it is listed.

use nyx5_proto::app::{AppCard, check_app_id};
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{field, obj};
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Error, ErrorKind, Refusal, Value};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::{House, ok_body};

/// Most bytes of an entry's `url`.
pub const MAX_URL_BYTES: usize = 1024;

/// GET /apps — `{house, issued, apps: [{id, name, version, author, sha256, url?}], signature}`.
pub async fn list<D: Db, N: Net>(house: &House<D, N>) -> Result<Response, Error> {
    let rows = house.apps().list().await?;
    let apps = rows
        .iter()
        .map(|r| {
            let t = |n: &str| Value::from(r.text(n).unwrap_or_default());
            let mut o = obj([
                ("id", t("id")),
                ("name", t("name")),
                ("version", t("version")),
                ("author", t("author")),
                ("sha256", t("sha256")),
            ]);
            if let Some(u) = r.text("url") {
                o.insert("url".into(), u.into());
            }
            Value::Object(o)
        })
        .collect();
    let mut doc = obj([
        ("house", house.config.domain.as_str().into()),
        ("issued", house.now().to_rfc3339().into()),
        ("apps", Value::Array(apps)),
    ]);
    sign_object(&mut doc, "signature", Context::AppCatalogue, &house.config.key);
    Ok(Response::json(200, &Value::Object(doc)))
}

/// GET /apps/:id — the listed card itself, as its author signed it.
pub async fn get<D: Db, N: Net>(house: &House<D, N>, id: &str) -> Result<Response, Error> {
    check_app_id(id)?;
    let card = house.apps().card(id).await?.ok_or_else(|| not_listed(id))?;
    let v = Value::parse(card.as_bytes(), nyx5_proto::app::MAX_CARD_BYTES)
        .map_err(|_| Error::new(ErrorKind::Internal, "a stored card does not parse"))?;
    Ok(Response::json(200, &v))
}

fn not_listed(id: &str) -> Error {
    Refusal::AppNotListed.because(format!("no app {id:?} in this catalogue"))
}

/// POST /apps `{card, url?}` (house token): lists the card, replacing the entry under its id.
/// 201 with the entry; 400/403 for a card that does not verify; 409 past the bound.
pub async fn add<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let body = json_body(req)?;
    if let Some(extra) = body.keys().find(|k| !["card", "url"].contains(&k.as_str())) {
        return Err(Refusal::BadMember.because(format!("unknown member {extra:?}")));
    }
    let card = AppCard::from_object(field::object(&body, "card")?.clone())?;
    let card = card.verify()?;
    let url = field::opt_str(&body, "url")?;
    if let Some(u) = url
        && (u.len() > MAX_URL_BYTES
            || !(u.starts_with("https://") || u.starts_with("http://"))
            || u.chars().any(|c| c.is_control() || c == ' '))
    {
        return Err(Refusal::BadMember.because(format!("`url` is an http(s) URL of at most {MAX_URL_BYTES} bytes")));
    }
    let entry = card.catalogue_entry(url);
    house.apps().put(&card, url).await?;
    Ok(Response::json(201, &ok_body([("app", Value::Object(entry))])))
}

/// DELETE /apps/:id (house token): the app is no longer listed.
pub async fn remove<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    check_app_id(id)?;
    if !house.apps().remove(id).await? {
        return Err(not_listed(id));
    }
    Ok(Response::json(200, &ok_body([("id", id.into()), ("removed", Value::Bool(true))])))
}
