//! Holds and drafts (docs/SPEC.md §7c; issue 38 §3): `GET`/`PUT`/`DELETE /agents/:local/hold`,
//! `GET /drafts/:local`, `GET /drafts/:local/:id`, and `POST /drafts/:local/:id/approve` and
//! `/decline`, each with the acting agent's token (or, for holds, the operator's).

use nyx5_proto::auth::Keys;
use nyx5_proto::json::{field, obj};
use nyx5_proto::{Error, Refusal, Timestamp, Value};
use nyx5_rules::drafts::{Setter, is_self_or_above};

use crate::auth::json_body;
use crate::drafts::{Approval, kept_envelope};
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::queue::{Enqueued, Outgoing};
use crate::routes::outbound::{by_domain, check_created, check_due, jobs_listed, not_queued};
use crate::{House, ok_body};

/// Who asks: the operator (its bearer token), or the agent whose token this is.
async fn actor<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Setter, Error> {
    if house.registry().is_admin(req) {
        return Ok(Setter::Operator);
    }
    let card = house.registry().authenticate(req, Keys::Current).await?;
    Ok(Setter::Agent(card.address().local().to_owned()))
}

/// The holds over `local`, nearest first, as `{on, approver, rule, set_by, set_at}`.
async fn holds_body<D: Db, N: Net>(house: &House<D, N>, local: &str) -> Result<Response, Error> {
    let address = house.registry().local_address(local)?;
    let rows = house.drafts().holds_over(local).await?;
    let holds = rows
        .iter()
        .map(|r| {
            let set_by = match Setter::parse(r.text("set_by").unwrap_or("operator")) {
                Setter::Operator => Value::from("operator"),
                Setter::Agent(l) => format!("{l}@{}", house.config.domain).into(),
            };
            Value::Object(obj([
                ("on", format!("{}@{}", r.text("local").unwrap_or_default(), house.config.domain).into()),
                ("approver", r.text("approver").unwrap_or_default().into()),
                ("rule", Value::parse_str(r.text("rule").unwrap_or("{}")).unwrap_or(Value::Null)),
                ("set_by", set_by),
                ("set_at", Timestamp(r.int("set_at").unwrap_or(0)).to_rfc3339().into()),
            ]))
        })
        .collect();
    Ok(Response::json(200, &ok_body([("agent", address.as_str().into()), ("holds", Value::Array(holds))])))
}

/// GET /agents/:local/hold — the agent itself, an agent above it, or the operator.
pub async fn get<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    if let Setter::Agent(me) = actor(house, req).await?
        && !is_self_or_above(&me, local)
    {
        return Err(Refusal::NotYourHold.because(format!("{me} is not {local} nor an agent above it")));
    }
    holds_body(house, local).await
}

/// PUT /agents/:local/hold `{approver, rule}`.
pub async fn put<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    let who = actor(house, req).await?;
    let body = json_body(req)?;
    house.drafts().set_hold(&who, local, &body).await?;
    holds_body(house, local).await
}

/// DELETE /agents/:local/hold.
pub async fn delete<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    let who = actor(house, req).await?;
    let lifted = house.drafts().lift_hold(&who, local).await?;
    let address = house.registry().local_address(local)?;
    Ok(Response::json(200, &ok_body([("agent", address.as_str().into()), ("lifted", Value::Bool(lifted))])))
}

/// GET /drafts/:local — what the agent is asked to decide, and what it sent that waits.
pub async fn list<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    let card = house.registry().authenticate_owner(req, local, Keys::Current).await?;
    let (asked, sent) = house.drafts().list(card.address()).await?;
    Ok(Response::json(200, &ok_body([("asked", Value::Array(asked)), ("sent", Value::Array(sent))])))
}

/// GET /drafts/:local/:id — one draft, as its approver (with the envelope) or sender sees it.
pub async fn get_one<D: Db, N: Net>(
    house: &House<D, N>,
    req: &Request,
    local: &str,
    id: &str,
) -> Result<Response, Error> {
    let card = house.registry().authenticate_owner(req, local, Keys::Current).await?;
    let draft = house.drafts().get(card.address(), id).await?;
    Ok(Response::json(200, &ok_body([("draft", draft)])))
}

/// POST /drafts/:local/:id/approve — the approver's yes; the last one queues the envelope in the
/// same batch.
pub async fn approve<D: Db, N: Net>(
    house: &House<D, N>,
    req: &Request,
    local: &str,
    id: &str,
) -> Result<Response, Error> {
    let card = house.registry().authenticate_owner(req, local, Keys::Current).await?;
    let drafts = house.drafts();
    match drafts.approve(card.address(), id).await? {
        Approval::Partial(stmt) => {
            drafts.record(stmt).await?;
            let draft = drafts.decided(id).await?;
            Ok(Response::json(200, &ok_body([("draft", draft)])))
        }
        Approval::Last { before, envelope } => {
            let now = house.now();
            let env = kept_envelope(&envelope, house.config.max_bytes)?;
            let late =
                |e: Error| Refusal::DraftExpired.because(format!("draft {id} can no longer leave: {}", e.reason));
            env.check_not_expired(now).map_err(late)?;
            check_created(env.created(), now).map_err(late)?;
            check_due(env.due_at(now), now)?;
            let groups = by_domain(env.to());
            let not_before = env.due_at(now).millis();
            let give_up = not_before.saturating_add(house.config.retry.give_up_after_ms);
            let sha256 = env.sha256_hex();
            let out = Outgoing {
                envelope_id: env.id(),
                sender: env.from().as_str(),
                envelope: &envelope,
                sha256: &sha256,
                expires: env.expires().map(|e| e.millis()),
                now: now.millis(),
                not_before,
                deadline: env.expires().map_or(give_up, |e| e.millis().min(give_up)),
                judged: None,
            };
            let cap = house.config.outbound_per_agent_per_minute;
            let enqueued = house.queue().enqueue(&out, &groups, env.created().millis(), cap, before).await?;
            match enqueued {
                Enqueued::Queued => {
                    let draft = drafts.decided(id).await?;
                    let jobs = jobs_listed(&groups, not_before);
                    Ok(Response::json(200, &ok_body([("draft", draft), ("jobs", jobs)])).kick())
                }
                Enqueued::Held(_) => Err(Refusal::DraftDecided.because(format!("draft {id} has left already"))),
                // The approval's guard failed (another decision since the draft was read), or the
                // draft was not approved when the outbox looked.
                Enqueued::Unjudged | Enqueued::Guarded => {
                    Err(Refusal::DraftChanged.because("the draft changed while this request decided; ask again"))
                }
                refused => Err(not_queued(refused, env.from(), cap)),
            }
        }
    }
}

/// POST /drafts/:local/:id/decline `{note?}` — an approver's no, or the sender withdrawing it.
pub async fn decline<D: Db, N: Net>(
    house: &House<D, N>,
    req: &Request,
    local: &str,
    id: &str,
) -> Result<Response, Error> {
    let card = house.registry().authenticate_owner(req, local, Keys::Current).await?;
    let body = if req.body.is_empty() { nyx5_proto::Object::new() } else { json_body(req)? };
    if let Some(k) = body.keys().find(|k| *k != "note") {
        return Err(Refusal::BadMember.because(format!("unknown member `{k}`: a decline says only `note`")));
    }
    let note = field::opt_str(&body, "note")?;
    if note.is_some_and(|n| n.len() > 1024) {
        return Err(Refusal::BadMember.because("`note` is at most 1024 bytes"));
    }
    house.drafts().decline(card.address(), id, note).await?;
    let draft = house.drafts().decided(id).await?;
    Ok(Response::json(200, &ok_body([("draft", draft)])))
}
