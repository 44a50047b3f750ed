//! GET /agents/:local, GET /agents (directory), POST /agents (registration) — spec §4, §8b.

use nyx5_proto::auth::Keys;
use nyx5_proto::card::{AgentCard, AgentCardDraft, Delegation, PreviousKey};
use nyx5_proto::crypto::{Context, EncPublic, SigPublic};
use nyx5_proto::json::field;
use nyx5_proto::sign::verify_object;
use nyx5_proto::{Error, ErrorKind, Object, Timestamp, Value, limits};

use crate::auth::json_body;
use crate::config::Registration;
use crate::http::{Request, Response};
use crate::ports::{Db, Net, PortError};
use crate::store::agents::{self as store, Index};
use crate::{House, RESERVED, ok_body, port_error};

/// How long a replaced key keeps signing after a rotation.
pub const ROTATION_GRACE_MS: i64 = 7 * 24 * 3_600_000;
/// Directory page size: default and most.
pub const DIRECTORY_DEFAULT_LIMIT: i64 = 20;
pub const DIRECTORY_MAX_LIMIT: i64 = 100;

/// GET /agents/:local — any certified card, listed or not.
pub async fn get<D: Db, N: Net>(house: &House<D, N>, local: &str) -> Result<Response, Error> {
    let card = store::card(&house.db, local)
        .await?
        .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no agent {local}@{}", house.config.domain)))?;
    Ok(Response { status: 200, content_type: "application/json", body: card.into_bytes(), kick: false })
}

fn page_param(req: &Request, name: &str, default: i64, max: i64) -> Result<i64, Error> {
    match req.query(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (0..=max).contains(n))
            .ok_or_else(|| Error::malformed(format!("`{name}` must be an integer from 0 to {max}"))),
    }
}

/// GET /agents — the cards that asked to be listed.
pub async fn directory<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    let limit = page_param(req, "limit", DIRECTORY_DEFAULT_LIMIT, DIRECTORY_MAX_LIMIT)?;
    let offset = page_param(req, "offset", 0, i64::from(u32::MAX))?;
    let cards =
        store::directory(&house.db, req.query("q"), req.query("accepts"), req.query("capability"), limit, offset)
            .await?;
    let agents =
        cards.iter().map(|c| Value::parse(c.as_bytes(), limits::MAX_DOCUMENT_BYTES)).collect::<Result<Vec<_>, _>>()?;
    Ok(Response::json(
        200,
        &ok_body([
            ("house", house.config.domain.as_str().into()),
            ("agents", Value::Array(agents)),
            ("limit", limit.into()),
            ("offset", offset.into()),
        ]),
    ))
}

/// What the directory indexes about a card.
pub fn index(card: &AgentCard) -> Index {
    let caps = card.capabilities();
    let mut search = vec![card.address().as_str().to_owned()];
    let mut accepts = String::from(" ");
    let mut names = String::from(" ");
    for (k, v) in caps {
        if !matches!(v, Value::Bool(false) | Value::Null) && k != "listed" {
            names.push_str(&k.to_lowercase());
            names.push(' ');
        }
        match (k.as_str(), v) {
            ("accepts", Value::Array(list)) => {
                for m in list.iter().filter_map(Value::as_str) {
                    accepts.push_str(&m.to_lowercase());
                    accepts.push(' ');
                }
            }
            (_, Value::String(s)) => search.push(s.to_lowercase()),
            _ => {}
        }
    }
    if let Some(Value::String(d)) = caps.get("description") {
        search.push(d.to_lowercase());
    }
    Index { listed: card.listed(), search: search.join(" "), accepts, caps: names }
}

/// A registration request, after its own checks.
struct Enrolment {
    local: String,
    sig: SigPublic,
    enc: Option<EncPublic>,
    capabilities: Object,
    inbox: Object,
    valid_until: Option<Timestamp>,
    webhook: Option<String>,
    invite: Option<String>,
    delegation: Option<Delegation>,
    signed: bool,
}

fn parse_enrolment(body: &Object, now: Timestamp) -> Result<Enrolment, Error> {
    let local = field::str(body, "local")?.to_owned();
    let sig = SigPublic::parse(field::str(body, "sig")?)?;
    let webhook = field::opt_str(body, "webhook")?.map(str::to_owned);
    if let Some(w) = &webhook
        && !(w.starts_with("https://") || w.starts_with("http://"))
    {
        return Err(Error::malformed("`webhook` must be an http(s) URL"));
    }
    // Proof of possession: the body is signed by the key being enrolled, with a fresh `ts`.
    let signed = match body.get("signature") {
        None => false,
        Some(_) => {
            verify_object(body, "signature", Context::Registration, |kid| *kid == sig)?;
            let ts = Timestamp::parse(field::str(body, "ts")?)?;
            if (now.millis() - ts.millis()).abs() > limits::AUTH_WINDOW_MS {
                return Err(Error::forbidden("registration `ts` is outside its 5-minute window"));
            }
            true
        }
    };
    Ok(Enrolment {
        local,
        sig,
        enc: field::opt_str(body, "enc")?.map(EncPublic::parse).transpose()?,
        capabilities: field::opt_object(body, "capabilities")?.cloned().unwrap_or_default(),
        inbox: field::opt_object(body, "inbox")?
            .cloned()
            .unwrap_or_else(|| nyx5_proto::json::obj([("policy", "open".into())])),
        valid_until: field::opt_str(body, "valid_until")?.map(Timestamp::parse).transpose()?,
        webhook,
        invite: field::opt_str(body, "invite")?.map(str::to_owned),
        delegation: field::opt_object(body, "delegation")?.cloned().map(Delegation::from_object).transpose()?,
        signed,
    })
}

/// POST /agents — register or update an agent (spec §8b).
pub async fn register<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    let now = house.now();
    let body = json_body(req)?;
    let e = parse_enrolment(&body, now)?;
    let address =
        house.local_address(&e.local).map_err(|_| Error::malformed(format!("invalid local part {:?}", e.local)))?;
    if RESERVED.contains(&e.local.as_str()) {
        return Err(Error::forbidden(format!("{:?} is reserved", e.local)));
    }
    let admin = house.is_admin(req);
    let existing = house.local_card(&e.local).await?;

    // Who may do this, and how it is recorded.
    let mut via = match (&existing, &e.delegation) {
        (Some(_), _) if admin => "admin".to_owned(),
        (Some(current), _) => {
            // Only the owner: a token signed by the current key (the body carries the new ones).
            house.authenticate_owner(req, &e.local, Keys::Current).await.map_err(|err| {
                if err.kind == ErrorKind::Unauthenticated {
                    Error::new(
                        ErrorKind::Conflict,
                        format!("{} is taken; only its owner or the house may update it", current.address()),
                    )
                } else {
                    err
                }
            })?;
            "self".to_owned()
        }
        (None, Some(_)) => "delegation".to_owned(),
        (None, None) if admin => "admin".to_owned(),
        (None, None) => match house.config.registration {
            Registration::Admin => {
                return Err(Error::forbidden("this house registers agents only through its operator"));
            }
            Registration::Invite => {
                let code =
                    e.invite.as_deref().ok_or_else(|| Error::forbidden("an invitation code is required (`invite`)"))?;
                format!("invite:{code}")
            }
            Registration::Open => "open".to_owned(),
        },
    };
    if !admin && !e.signed {
        return Err(Error::forbidden("the body must be signed by the key being registered (`signature`, `ts`)"));
    }

    // Subagents: the parent's delegation, checked against the parent's card.
    let parent = match address.parent() {
        Some(p) if e.delegation.is_some() => Some(
            house
                .local_card(p.local())
                .await?
                .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("parent {p} is not registered here")))?,
        ),
        _ => None,
    };
    if e.delegation.is_some() && parent.is_none() {
        return Err(Error::malformed("a delegated agent is named <name>.<parent>"));
    }

    let mut draft = AgentCardDraft::new(address.clone(), e.sig, e.enc, now);
    draft.capabilities = e.capabilities;
    draft.inbox = e.inbox;
    draft.valid_until = e.valid_until;
    draft.delegation = e.delegation;
    if let Some(current) = &existing {
        draft.valid_from = current.valid_from().min(now);
        draft.previous = current.previous().iter().filter(|p| p.until > now).cloned().collect();
        if current.sig() != e.sig {
            draft.previous.insert(0, PreviousKey { sig: current.sig(), until: now.plus_ms(ROTATION_GRACE_MS) });
            draft.previous.truncate(limits::MAX_PREVIOUS_KEYS);
        }
    }
    let card = draft.certify(&house.config.key)?.verify(house.card(), parent.as_ref(), now)?;
    let card_text = String::from_utf8_lossy(&card.to_value().canonical()).into_owned();

    let mut stmts = Vec::new();
    if existing.is_none() {
        match house.config.registration {
            Registration::Invite if via.starts_with("invite:") => {
                let code = e.invite.as_deref().unwrap_or_default();
                let row = store::invitation(&house.db, code).await?;
                let usable = row.as_ref().is_some_and(|r| {
                    r.int("used") < r.int("uses") && r.int("expires").is_none_or(|x| x > now.millis())
                });
                if !usable {
                    return Err(Error::forbidden("invitation code unknown, used up or expired"));
                }
                stmts.push(store::use_invitation(code, now.millis()));
            }
            Registration::Open if via == "open" => {
                stmts.push(store::count_in_window(
                    "register",
                    now.millis() / 60_000,
                    house.config.open_registrations_per_minute,
                ));
            }
            _ => {}
        }
    }
    if via.is_empty() {
        via = "admin".into();
    }
    stmts.extend(store::upsert(
        &e.local,
        &card_text,
        &e.sig.to_b64(),
        &index(&card),
        e.webhook.as_deref(),
        &via,
        now.millis(),
    ));
    match house.db.batch(stmts).await {
        Ok(changes) => {
            if via.starts_with("invite:") && changes.first() != Some(&1) {
                return Err(Error::forbidden("invitation code unknown, used up or expired"));
            }
        }
        Err(PortError::Constraint(m)) if m.contains("invitation_uses") => {
            return Err(Error::forbidden("invitation code used up"));
        }
        Err(PortError::Constraint(m)) if m.contains("rate_cap") => {
            return Err(Error::new(ErrorKind::RateLimited, "too many registrations this minute, try again shortly"));
        }
        Err(err) => return Err(port_error(err)),
    }
    let status = if existing.is_some() { 200 } else { 201 };
    Ok(Response::json(status, &ok_body([("card", card.to_value()), ("registered_via", via.into())])))
}
