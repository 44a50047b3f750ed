//! `nyx5 card`, `resolve`, `directory`, `health`, `invite` — reading cards and houses, and the
//! operator's invitations (spec §4, docs/SPEC.md §6.1, §8b).

use nyx5_proto::Address;
use nyx5_proto::card::AgentCard;
use nyx5_proto::json::{Object, Value, field, obj};

use super::http::{read_object, send};
use super::output::{pretty, safe, show, text};
use super::{Ctx, house_target};
use crate::error::Failure;
use crate::sys;

fn address(text: &str) -> Result<Address, Failure> {
    Address::parse_lenient(text).map_err(|e| Failure::usage(format!("address: {}", e.reason)).named(e.name()))
}

/// The acting agent, when the profile has one (resolving works without).
fn me_if_any(ctx: &Ctx) -> Result<Option<super::profile::AgentEntry>, Failure> {
    let profile = ctx.profile()?;
    if profile.agents.is_empty() && ctx.as_address.is_none() {
        return Ok(None);
    }
    profile.agent(ctx.as_address.as_ref(), &ctx.profile_path).cloned().map(Some)
}

/// `nyx5 resolve ADDRESS`: the verified chain domain → agent (→ parent …), fetched now rather
/// than read from the kept cards.
pub(crate) fn resolve(ctx: &Ctx, who: &str) -> Result<Value, Failure> {
    let who = address(who)?;
    let me = me_if_any(ctx)?;
    let res = ctx.fresh_resolver(me.as_ref(), sys::now()?)?;
    let card = res.agent(&who)?;
    let domain = res.domain(who.domain())?;
    let mut chain = Vec::new();
    let mut parent = card.delegation().and(who.parent());
    while let Some(p) = parent {
        let pc = res.agent(&p)?;
        chain.push(Value::Object(obj([("address", p.as_str().into()), ("sig", pc.sig().to_b64().into())])));
        parent = pc.delegation().and(p.parent());
    }
    Ok(Value::Object(obj([
        ("address", who.as_str().into()),
        ("verified", Value::Bool(true)),
        ("domain", domain.summary()),
        ("card", card.to_value()),
        ("parents", Value::Array(chain)),
    ])))
}

pub(crate) fn resolve_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let d = o.get("domain").and_then(Value::as_object).cloned().unwrap_or_default();
    let card = o.get("card").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut s = format!("{}: verified\n", text(&o, "address"));
    s.push_str(&format!(
        "  domain {} at {} (found via {}, key {} checked by {})\n",
        text(&d, "domain"),
        text(&d, "url"),
        text(&d, "via"),
        text(&d, "key"),
        text(&d, "anchor")
    ));
    s.push_str(&format!("  sig {}\n  enc {}\n", show(&card, "sig"), show(&card, "enc")));
    let inbox = card.get("inbox").and_then(Value::as_object).cloned().unwrap_or_default();
    s.push_str(&format!("  inbox policy {}\n", show(&inbox, "policy")));
    if let Some(Value::Object(del)) = card.get("delegation") {
        s.push_str(&format!("  delegated by {} with scope {}\n", show(del, "by"), show(del, "scope")));
    }
    for p in o.get("parents").and_then(Value::as_array).unwrap_or_default() {
        if let Some(p) = p.as_object() {
            s.push_str(&format!("  parent {} verified (sig {})\n", text(p, "address"), text(p, "sig")));
        }
    }
    s
}

/// `nyx5 card ADDRESS`: the verified card itself.
pub(crate) fn card(ctx: &Ctx, who: &str) -> Result<Value, Failure> {
    let v = resolve(ctx, who)?;
    Ok(v.as_object().and_then(|o| o.get("card")).cloned().unwrap_or(Value::Null))
}

pub(crate) fn card_human(v: &Value) -> String {
    pretty(v)
}

/// What `nyx5 directory` asks.
#[derive(Debug, Clone, Default)]
pub(crate) struct DirectoryRequest {
    pub(crate) house: Option<String>,
    pub(crate) capability: Option<String>,
    pub(crate) accepts: Option<String>,
    pub(crate) q: Option<String>,
    pub(crate) limit: Option<i64>,
    pub(crate) offset: Option<i64>,
}

pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `nyx5 directory HOUSE`: the listed cards of a house, each verified against its domain card.
/// Cards that do not verify are reported apart, never shown as verified.
pub(crate) fn directory(ctx: &Ctx, req: &DirectoryRequest) -> Result<Value, Failure> {
    let me = me_if_any(ctx)?;
    let res = ctx.resolver(me.as_ref(), sys::now()?)?;
    let house = match (&req.house, &me) {
        (Some(h), _) => h.clone(),
        (None, Some(m)) => m.address.domain().to_owned(),
        (None, None) => return Err(Failure::usage("name the house (a domain or its URL)")),
    };
    let (url, named) = house_target(&res, &house)?;
    let mut query = Vec::new();
    for (name, v) in [("q", &req.q), ("capability", &req.capability), ("accepts", &req.accepts)] {
        if let Some(v) = v {
            query.push(format!("{name}={}", encode(v)));
        }
    }
    for (name, v) in [("limit", req.limit), ("offset", req.offset)] {
        if let Some(v) = v {
            query.push(format!("{name}={v}"));
        }
    }
    let target = if query.is_empty() { format!("{url}/agents") } else { format!("{url}/agents?{}", query.join("&")) };
    let what = format!("the directory of {house}");
    let (status, body) = send(ctx.net.as_ref(), "GET", &target, &[("accept", "application/json")], &[], &what)?;
    let answer = read_object(status, &body, &what)?;
    let domain_name = field::str(&answer, "house")
        .map_err(|_| Failure::network(format!("{what}: the answer names no house")))?
        .to_owned();
    if named.is_none() {
        res.at(&domain_name, &url);
    } else if named.as_deref() != Some(domain_name.as_str()) {
        return Err(Failure::rejected(format!("{what}: the house at {url} says it is {domain_name}")));
    }
    let domain = res.domain(&domain_name)?;
    let mut agents = Vec::new();
    let mut refused = Vec::new();
    for c in field::opt_array(&answer, "agents").ok().flatten().unwrap_or_default() {
        let checked = c
            .as_object()
            .cloned()
            .ok_or_else(|| "not an object".to_owned())
            .and_then(|o| AgentCard::from_object(o).map_err(|e| e.reason.to_string()))
            .and_then(|card| {
                if card.address().domain() != domain_name {
                    return Err(format!("{} is not at {domain_name}", card.address()));
                }
                res.verify_card(card, &domain).map_err(|f| f.one_line())
            });
        match checked {
            Ok(card) => agents.push(card.to_value()),
            Err(why) => refused.push(Value::Object(obj([
                ("address", c.as_object().map(|o| show(o, "address")).unwrap_or_default().into()),
                ("reason", why.into()),
            ]))),
        }
    }
    Ok(Value::Object(obj([
        ("house", domain_name.as_str().into()),
        ("url", url.as_str().into()),
        ("anchor", domain.anchor.into()),
        ("agents", Value::Array(agents)),
        ("unverified", Value::Array(refused)),
        ("limit", answer.get("limit").cloned().unwrap_or(Value::Null)),
        ("offset", answer.get("offset").cloned().unwrap_or(Value::Null)),
    ])))
}

pub(crate) fn directory_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let agents = o.get("agents").and_then(Value::as_array).unwrap_or_default();
    let mut s = format!("{} ({} listed agents shown, each card verified)\n", text(&o, "house"), agents.len());
    if text(&o, "anchor") == "none" {
        s.push_str(&format!(
            "  (the house at {} says it is {}; nothing vouches for that, and nothing was pinned)\n",
            text(&o, "url"),
            text(&o, "house")
        ));
    }
    for a in agents {
        let Some(a) = a.as_object() else { continue };
        let caps = a.get("capabilities").and_then(Value::as_object).cloned().unwrap_or_default();
        let desc = caps.get("description").and_then(Value::as_str).unwrap_or("");
        let names: Vec<&str> = caps
            .iter()
            .filter(|(k, v)| !matches!(v, Value::Bool(false) | Value::Null) && *k != "listed" && *k != "description")
            .map(|(k, _)| k.as_str())
            .collect();
        s.push_str(&format!("  {}  {}", text(a, "address"), safe(desc)));
        if !names.is_empty() {
            s.push_str(&format!("  [{}]", names.join(", ")));
        }
        s.push('\n');
    }
    for r in o.get("unverified").and_then(Value::as_array).unwrap_or_default() {
        if let Some(r) = r.as_object() {
            s.push_str(&format!("  NOT VERIFIED {}: {}\n", safe(text(r, "address")), safe(text(r, "reason"))));
        }
    }
    s
}

/// `nyx5 health HOUSE`: the house's liveness and queue.
pub(crate) fn health(ctx: &Ctx, house: &str) -> Result<Value, Failure> {
    let me = me_if_any(ctx)?;
    let res = ctx.resolver(me.as_ref(), sys::now()?)?;
    let (url, _) = house_target(&res, house)?;
    let what = format!("the health of {house}");
    let (status, body) =
        send(ctx.net.as_ref(), "GET", &format!("{url}/health"), &[("accept", "application/json")], &[], &what)?;
    let mut o = read_object(status, &body, &what)?;
    o.insert("url".into(), url.into());
    Ok(Value::Object(o))
}

pub(crate) fn health_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let waiting = match o.get("oldest_due_ms").and_then(Value::as_safe_integer) {
        Some(ms) => format!(", the oldest due {ms} ms ago"),
        None => String::new(),
    };
    format!("{} at {}: up; {} queued{waiting}\n", text(&o, "house"), text(&o, "url"), show(&o, "queue_depth"))
}

/// The house an operator command goes to: `--house`, else the acting agent's.
pub(crate) fn operator_house(ctx: &Ctx, house: Option<&str>) -> Result<String, Failure> {
    let me = me_if_any(ctx)?;
    match (house, &me) {
        (Some(h), _) => {
            let res = ctx.resolver(me.as_ref(), sys::now()?)?;
            house_target(&res, h).map(|(u, _)| u)
        }
        (None, Some(m)) => Ok(m.house.clone()),
        (None, None) => Err(Failure::usage("name the house with --house URL (or run `nyx5 init` first)")),
    }
}

/// What `nyx5 invite new` asks for.
#[derive(Debug, Clone, Default)]
pub(crate) struct InviteRequest {
    pub(crate) uses: Option<i64>,
    pub(crate) expires: Option<nyx5_proto::Timestamp>,
    pub(crate) note: Option<String>,
}

/// `nyx5 invite new`: a new invitation code (operator only).
pub(crate) fn invite_new(
    ctx: &Ctx,
    house: Option<&str>,
    admin_token: &str,
    req: &InviteRequest,
) -> Result<Value, Failure> {
    let url = operator_house(ctx, house)?;
    let mut body = Object::new();
    if let Some(u) = req.uses {
        body.insert("uses".into(), u.into());
    }
    if let Some(e) = req.expires {
        body.insert("expires".into(), e.to_rfc3339().into());
    }
    if let Some(n) = &req.note {
        body.insert("note".into(), n.as_str().into());
    }
    let auth = format!("Bearer {admin_token}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    let what = "creating an invitation";
    let (status, answer) = send(
        ctx.net.as_ref(),
        "POST",
        &format!("{url}/invitations"),
        &headers,
        &Value::Object(body).canonical(),
        what,
    )?;
    let o = read_object(status, &answer, what).map_err(operator_hint)?;
    Ok(o.get("invitation").cloned().unwrap_or(Value::Null))
}

pub(crate) fn operator_hint(f: Failure) -> Failure {
    if f.status() == Some(401) { f.hint("check --admin-token (the house's operator token)") } else { f }
}

pub(crate) fn invite_new_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    format!(
        "invitation {}  (uses {}, expires {})\n  the new agent runs: nyx5 register --invite {}\n",
        text(&o, "code"),
        show(&o, "uses"),
        show(&o, "expires"),
        text(&o, "code")
    )
}

/// `nyx5 invite list`: every invitation and how much of it is used (operator only).
pub(crate) fn invite_list(ctx: &Ctx, house: Option<&str>, admin_token: &str) -> Result<Value, Failure> {
    let url = operator_house(ctx, house)?;
    let auth = format!("Bearer {admin_token}");
    let what = "listing invitations";
    let (status, answer) =
        send(ctx.net.as_ref(), "GET", &format!("{url}/invitations"), &[("authorization", auth.as_str())], &[], what)?;
    let o = read_object(status, &answer, what).map_err(operator_hint)?;
    Ok(Value::Object(obj([("invitations", o.get("invitations").cloned().unwrap_or(Value::Array(vec![])))])))
}

pub(crate) fn invite_list_human(v: &Value) -> String {
    let list = v.as_object().and_then(|o| o.get("invitations")).and_then(Value::as_array).unwrap_or_default();
    if list.is_empty() {
        return "no invitations\n".into();
    }
    list.iter()
        .filter_map(Value::as_object)
        .map(|o| {
            format!(
                "{}  used {}/{}  expires {}  {}\n",
                text(o, "code"),
                show(o, "used"),
                show(o, "uses"),
                show(o, "expires"),
                safe(text(o, "note"))
            )
        })
        .collect()
}
