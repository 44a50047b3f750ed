//! POST /index/houses, GET /index/houses, GET /index/agents — the federated index (spec §13,
//! docs/SPEC.md §13). Only a house that runs an index answers them; the others say 404.

use nyx5_proto::address::check_domain;
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Object, field, obj};
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Error, Refusal, Timestamp, Value, limits};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::index::{MAX_HOUSES, RANKING, Search};
use crate::ports::{Db, Net, Reads, Row};
use crate::routes::agents::{DIRECTORY_DEFAULT_LIMIT, DIRECTORY_MAX_LIMIT, page_param};
use crate::{House, ok_body};

/// The longest search term taken, in bytes.
pub const MAX_QUERY_TEXT: usize = 256;

fn require_index<D: Db, N: Net>(house: &House<D, N>) -> Result<(), Error> {
    if house.config.index_enabled {
        Ok(())
    } else {
        Err(Refusal::NoIndex.because(format!("{} runs no index", house.config.domain)))
    }
}

/// POST /index/houses `{domain}`: registers a house to crawl. Its domain card must resolve and
/// verify by the normal chain (§2) now; that is the gate. 201 when added, 200 when it was there.
pub async fn register<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    require_index(house)?;
    let body = json_body(req)?;
    let domain = field::str(&body, "domain")?.to_ascii_lowercase();
    check_domain(&domain).map_err(|why| Refusal::BadDomain.because(format!("`domain` {domain:?}: {why}")))?;
    let before = house.index().house(&domain).await?;
    let resolved = house.lookup().resolve_domain_with(&domain, before.is_none()).await?;
    house.index().enlist(&domain, &resolved.url).await?;
    let row = house.index().house(&domain).await?.unwrap_or_default();
    let status = if before.is_none() { 201 } else { 200 };
    let mut answer = house_value(&row);
    if let Value::Object(o) = &mut answer {
        o.insert("ok".into(), Value::Bool(true));
        o.insert("key".into(), resolved.card.signer()?.to_b64().into());
    }
    Ok(Response::json(status, &answer))
}

/// GET /index/houses?limit&offset: what the index crawls and how the last pass went.
pub async fn houses<D: Db, N: Net>(house: &House<D, N>, req: &Request, reads: &Reads) -> Result<Response, Error> {
    require_index(house)?;
    let limit = page_param(req, "limit", DIRECTORY_MAX_LIMIT, DIRECTORY_MAX_LIMIT)?;
    let offset = page_param(req, "offset", 0, MAX_HOUSES)?;
    let rows = house.index().houses(reads, limit, offset).await?;
    Ok(Response::json(
        200,
        &ok_body([
            ("index", house.config.domain.as_str().into()),
            ("houses", Value::Array(rows.iter().map(house_value).collect())),
            ("limit", limit.into()),
            ("offset", offset.into()),
        ]),
    ))
}

fn house_value(r: &Row) -> Value {
    let time = |name: &str| r.int(name).map(|t| Timestamp(t).to_rfc3339());
    let mut o = Object::new();
    o.insert("domain".into(), r.text("domain").unwrap_or_default().into());
    o.insert("url".into(), r.text("url").unwrap_or_default().into());
    o.insert("added".into(), time("added_at").into());
    o.insert("passes".into(), r.int("pass").unwrap_or(0).into());
    o.insert("phase".into(), r.text("phase").unwrap_or_default().into());
    o.insert("next_crawl".into(), time("next_at").into());
    o.insert("verified".into(), time("ok_at").into());
    o.insert("failures".into(), r.int("failures").unwrap_or(0).into());
    o.insert("last_error".into(), r.text("last_error").map(str::to_owned).into());
    o.insert("cards".into(), r.int("cards").unwrap_or(0).into());
    Value::Object(o)
}

/// GET /index/agents?q&capability&accepts&house&limit&offset: the cards found, ranked as
/// [`RANKING`] says, each with `_house`; the answer signed by this house (`nyx5/1 index-answer`).
pub async fn search<D: Db, N: Net>(house: &House<D, N>, req: &Request, reads: &Reads) -> Result<Response, Error> {
    require_index(house)?;
    let limit = page_param(req, "limit", DIRECTORY_DEFAULT_LIMIT, DIRECTORY_MAX_LIMIT)?;
    let offset = page_param(req, "offset", 0, i64::from(u32::MAX))?;
    let text = |name: &str| -> Result<Option<&str>, Error> {
        match req.query(name) {
            Some(v) if v.len() > MAX_QUERY_TEXT => {
                Err(Refusal::BadQuery.because(format!("`{name}` is longer than {} bytes", MAX_QUERY_TEXT)))
            }
            Some("") | None => Ok(None),
            Some(v) => Ok(Some(v)),
        }
    };
    let house_filter = text("house")?.map(str::to_ascii_lowercase);
    let now = house.now();
    let s = Search {
        q: text("q")?,
        capability: text("capability")?,
        accepts: text("accepts")?,
        house: house_filter.as_deref(),
        limit,
        offset,
        now: now.millis(),
    };
    let found = house.index().search(reads, &s).await?;
    let mut agents = Vec::with_capacity(found.len());
    for (card, origin) in found {
        let Ok(Value::Object(mut o)) = Value::parse(card.as_bytes(), limits::MAX_DOCUMENT_BYTES) else { continue };
        o.insert("_house".into(), origin.into());
        agents.push(Value::Object(o));
    }
    let asked = |v: Option<&str>| v.map_or(Value::Null, Value::from);
    let query = obj([
        ("q", asked(s.q)),
        ("capability", asked(s.capability)),
        ("accepts", asked(s.accepts)),
        ("house", asked(s.house)),
    ]);
    let mut doc = obj([
        ("index", house.config.domain.as_str().into()),
        ("issued", now.to_rfc3339().into()),
        ("query", Value::Object(query)),
        ("ranking", RANKING.into()),
        ("agents", Value::Array(agents)),
        ("limit", limit.into()),
        ("offset", offset.into()),
    ]);
    sign_object(&mut doc, "signature", Context::IndexAnswer, &house.config.key);
    Ok(Response::json(200, &Value::Object(doc)))
}
