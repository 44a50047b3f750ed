//! `nyx5 search` and the MCP tool `nyx5_search` with an index: ask a federated index (spec §13)
//! and believe none of it until checked. The answer's signature is checked against the index's
//! domain card, and every card against its own origin's domain card (and its parent's card),
//! resolved by this client as for any other address: the index is a hint, never an authority.

use std::collections::BTreeMap;

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Value, field, obj};
use nyx5_proto::sign::verify_object;

use super::directory::encode;
use super::http::{read_object, send};
use super::output::{safe, show, text};
use super::resolve::Domain;
use super::{Ctx, house_target};
use crate::error::Failure;
use crate::sys;

/// What `nyx5 search` asks.
#[derive(Debug, Clone, Default)]
pub(crate) struct SearchRequest {
    /// The index: a domain, or its URL.
    pub(crate) index: String,
    pub(crate) q: Option<String>,
    pub(crate) capability: Option<String>,
    pub(crate) accepts: Option<String>,
    pub(crate) house: Option<String>,
    pub(crate) limit: Option<i64>,
    pub(crate) offset: Option<i64>,
}

impl SearchRequest {
    fn target(&self, url: &str) -> String {
        let mut query = Vec::new();
        for (name, v) in
            [("q", &self.q), ("capability", &self.capability), ("accepts", &self.accepts), ("house", &self.house)]
        {
            if let Some(v) = v {
                query.push(format!("{name}={}", encode(v)));
            }
        }
        for (name, v) in [("limit", self.limit), ("offset", self.offset)] {
            if let Some(v) = v {
                query.push(format!("{name}={v}"));
            }
        }
        if query.is_empty() { format!("{url}/index/agents") } else { format!("{url}/index/agents?{}", query.join("&")) }
    }
}

/// The acting agent, when the profile has one (an index is asked without one too).
fn me_if_any(ctx: &Ctx) -> Result<Option<super::profile::AgentEntry>, Failure> {
    let profile = ctx.profile()?;
    if profile.agents.is_empty() && ctx.as_address.is_none() {
        return Ok(None);
    }
    profile.agent(ctx.as_address.as_ref(), &ctx.profile_path).cloned().map(Some)
}

/// `nyx5 index add DOMAIN --index HOUSE`: asks the index to crawl `domain`.
pub(crate) fn add_house(ctx: &Ctx, index: &str, domain: &str) -> Result<Value, Failure> {
    let me = me_if_any(ctx)?;
    let res = ctx.resolver(me.as_ref(), sys::now()?)?;
    let (url, _) = house_target(&res, index)?;
    let what = format!("registering {domain} at the index {index}");
    let body = Value::Object(obj([("domain", domain.into())])).canonical();
    let (status, answer) = send(
        ctx.net.as_ref(),
        "POST",
        &format!("{url}/index/houses"),
        &[("content-type", "application/json")],
        &body,
        &what,
    )?;
    let o = read_object(status, &answer, &what)?;
    Ok(Value::Object(obj([("houses", Value::Array(vec![Value::Object(o)]))])))
}

/// `nyx5 index houses --index HOUSE`: what the index crawls.
pub(crate) fn houses(ctx: &Ctx, index: &str) -> Result<Value, Failure> {
    let me = me_if_any(ctx)?;
    let res = ctx.resolver(me.as_ref(), sys::now()?)?;
    let (url, _) = house_target(&res, index)?;
    let what = format!("the houses of the index {index}");
    let (status, answer) =
        send(ctx.net.as_ref(), "GET", &format!("{url}/index/houses"), &[("accept", "application/json")], &[], &what)?;
    read_object(status, &answer, &what).map(Value::Object)
}

pub(crate) fn houses_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = String::new();
    for h in o.get("houses").and_then(Value::as_array).unwrap_or_default() {
        let Some(h) = h.as_object() else { continue };
        s.push_str(&format!(
            "{}  {} cards, {} passes, next crawl {}",
            safe(text(h, "domain")),
            show(h, "cards"),
            show(h, "passes"),
            show(h, "next_crawl")
        ));
        if let Some(e) = h.get("last_error").and_then(Value::as_str) {
            s.push_str(&format!("; last error: {}", safe(e)));
        }
        s.push('\n');
    }
    s
}

/// Asks the index, checks its signature, then verifies each card by its own chain. Cards that
/// do not verify are reported apart (`unverified`), never shown as found.
pub(crate) fn search(ctx: &Ctx, req: &SearchRequest) -> Result<Value, Failure> {
    let me = me_if_any(ctx)?;
    let now = sys::now()?;
    let res = ctx.resolver(me.as_ref(), now)?;
    let (url, named) = house_target(&res, &req.index)?;
    let what = format!("the index at {}", req.index);
    let (status, body) =
        send(ctx.net.as_ref(), "GET", &req.target(&url), &[("accept", "application/json")], &[], &what)?;
    let answer = read_object(status, &body, &what).map_err(|f| {
        if f.status() == Some(404) {
            f.hint("that house runs no index (its operator turns it on with NYX5_INDEX)")
        } else {
            f
        }
    })?;
    let index = field::str(&answer, "index")
        .map_err(|_| Failure::rejected(format!("{what}: the answer names no index")))?
        .to_owned();
    if named.is_none() {
        res.at(&index, &url);
    } else if named.as_deref() != Some(index.as_str()) {
        return Err(Failure::rejected(format!("{what}: the house at {url} says it is {index}")));
    }
    let domain = res.domain(&index)?;
    verify_object(&answer, "signature", Context::IndexAnswer, |k| domain.card.accepts_key(k, now)).map_err(|_| {
        Failure::rejected(format!("{what}: the answer is not signed by {index}, or was altered on the way"))
    })?;
    let mut origins: BTreeMap<String, Result<Domain, String>> = BTreeMap::new();
    let mut agents = Vec::new();
    let mut unverified = Vec::new();
    for c in field::opt_array(&answer, "agents").ok().flatten().unwrap_or_default() {
        let mut o = c.as_object().cloned().unwrap_or_default();
        let claimed = o.remove("_house");
        let checked = AgentCard::from_object(o.clone()).map_err(|e| e.reason.to_string()).and_then(|card| {
            let origin = card.address().domain().to_owned();
            if claimed.as_ref().and_then(Value::as_str) != Some(origin.as_str()) {
                return Err(format!(
                    "the index says it comes from {}",
                    claimed.as_ref().map(show_value).unwrap_or_default()
                ));
            }
            let d = origins
                .entry(origin.clone())
                .or_insert_with(|| res.domain(&origin).map_err(|f| f.one_line()))
                .clone()?;
            res.verify_card(card, &d).map_err(|f| f.one_line())
        });
        match checked {
            Ok(card) => {
                let mut v = card.to_value();
                if let Value::Object(m) = &mut v {
                    m.insert("_house".into(), card.address().domain().into());
                }
                agents.push(v);
            }
            Err(why) => {
                unverified.push(Value::Object(obj([("address", show(&o, "address").into()), ("reason", why.into())])))
            }
        }
    }
    Ok(Value::Object(obj([
        ("index", index.as_str().into()),
        ("url", url.as_str().into()),
        ("anchor", domain.anchor.into()),
        ("signed", Value::Bool(true)),
        ("ranking", answer.get("ranking").cloned().unwrap_or(Value::Null)),
        ("agents", Value::Array(agents)),
        ("unverified", Value::Array(unverified)),
        ("limit", answer.get("limit").cloned().unwrap_or(Value::Null)),
        ("offset", answer.get("offset").cloned().unwrap_or(Value::Null)),
    ])))
}

fn show_value(v: &Value) -> String {
    v.as_str().map_or_else(|| v.canonical_string(), str::to_owned)
}

pub(crate) fn search_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let agents = o.get("agents").and_then(Value::as_array).unwrap_or_default();
    let mut s = format!(
        "index {} (answer signed; {} cards found, each verified with its own house)\n",
        text(&o, "index"),
        agents.len()
    );
    if text(&o, "anchor") == "none" {
        s.push_str(&format!(
            "  (the index at {} says it is {}; nothing vouches for that, and nothing was pinned)\n",
            text(&o, "url"),
            text(&o, "index")
        ));
    }
    for a in agents {
        let Some(a) = a.as_object() else { continue };
        let caps = a.get("capabilities").and_then(Value::as_object).cloned().unwrap_or_default();
        let desc = caps.get("description").and_then(Value::as_str).unwrap_or("");
        s.push_str(&format!("  {}  {}\n", text(a, "address"), safe(desc)));
    }
    for r in o.get("unverified").and_then(Value::as_array).unwrap_or_default() {
        if let Some(r) = r.as_object() {
            s.push_str(&format!("  NOT VERIFIED {}: {}\n", safe(text(r, "address")), safe(text(r, "reason"))));
        }
    }
    s
}
