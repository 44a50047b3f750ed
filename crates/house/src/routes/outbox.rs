//! GET /outbox/:local — spec §7, §8: the owner's sent envelopes, newest first, each with the
//! state of its job per destination domain (pending, retrying, delivered, bounced).

use nyx5_proto::auth::Keys;
use nyx5_proto::json::obj;
use nyx5_proto::{Error, Object, Refusal, Timestamp, Value};

use crate::http::{Request, Response};
use crate::ports::{Db, Net, Reads, Row};
use crate::queue::{JobState, Progress};
use crate::{House, ok_body};
use nyx5_rules::libro::state::stored;
use nyx5_rules::queue::EmailState;

/// Outbox page size (envelopes): default and most.
pub const PAGE_DEFAULT: i64 = 20;
pub const PAGE_MAX: i64 = 100;

fn number(req: &Request, name: &str, default: i64, max: i64) -> Result<i64, Error> {
    req.query(name).map_or(Ok(default), |v| {
        v.parse::<i64>()
            .ok()
            .filter(|n| (0..=max).contains(n))
            .ok_or_else(|| Refusal::BadQuery.because(format!("`{name}` must be an integer from 0 to {max}")))
    })
}

fn time(ms: Option<i64>) -> Value {
    ms.map(|t| Timestamp(t).to_rfc3339()).into()
}

/// One job as the sender sees it; a stored state none the house knows is its own fault (500).
fn job(r: &Row) -> Result<Value, Error> {
    let text = r.text("state").unwrap_or_default();
    let state = JobState::parse(text).ok_or_else(|| stored("job state", text))?;
    let attempts = r.int("attempts").unwrap_or(0);
    let progress = Progress::parse(r.text("result"));
    // A job that ended with nobody's delivery confirmed is stored `bounced`; when an attempt may
    // have reached someone it did not bounce, it is `undetermined` (docs/SPEC.md §7b).
    let undetermined = state == JobState::Bounced && !progress.undetermined.is_empty();
    let shown = match state {
        // Tried and answered with a failure. An attempt still out (its lease counted it; a
        // send takes its job's first one at once) is not a retry yet.
        JobState::Pending if attempts > 0 && r.text("last_error").is_some() => "retrying",
        _ if undetermined => "undetermined",
        other => other.as_str(),
    };
    let pending = state == JobState::Pending;
    let mut o = obj([
        ("domain", r.text("domain").unwrap_or_default().into()),
        ("recipients", r.text("recipients").and_then(|t| Value::parse_str(t).ok()).unwrap_or(Value::Array(vec![]))),
        ("state", shown.into()),
        ("attempts", attempts.into()),
        ("next_attempt", time(if pending { r.int("next_attempt") } else { None })),
        ("last_error", r.text("last_error").into()),
        ("finished", time(r.int("finished_at"))),
    ]);
    if let Value::Object(p) = progress.to_value() {
        o.extend(p);
    }
    if let (false, Some(b)) = (pending, progress.bounced.first())
        && state == JobState::Bounced
        && !undetermined
    {
        o.insert("code".into(), i64::from(b.code).into());
        o.insert("reason".into(), b.reason.as_str().into());
    }
    if undetermined {
        let why = r.text("last_error").unwrap_or(crate::queue::UNDETERMINED);
        o.insert("reason".into(), why.into());
    }
    Ok(Value::Object(o))
}

/// One outbound email as its sender sees it: `pending` (with why, at a house without provider),
/// `retrying`, `sent` or `failed`.
fn email(r: &Row, provider: bool) -> Result<Value, Error> {
    let text = r.text("state").unwrap_or_default();
    let state = EmailState::parse(text).ok_or_else(|| stored("email state", text))?;
    let attempts = r.int("attempts").unwrap_or(0);
    let shown = match state {
        EmailState::Pending if attempts > 0 => "retrying",
        other => other.as_str(),
    };
    let mut o = obj([
        ("id", r.text("id").unwrap_or_default().into()),
        ("to", r.text("recipient").unwrap_or_default().into()),
        ("subject", r.text("subject").unwrap_or_default().into()),
        ("state", shown.into()),
        ("attempts", attempts.into()),
        ("next_attempt", time(if state == EmailState::Pending && provider { r.int("next_attempt") } else { None })),
        ("last_error", r.text("last_error").into()),
        ("queued", time(r.int("created_at"))),
        ("finished", time(r.int("finished_at"))),
    ]);
    if let Some(pid) = r.text("provider_id") {
        o.insert("provider_id".into(), pid.into());
    }
    if state == EmailState::Pending && !provider {
        o.insert("reason".into(), crate::routes::email::NO_PROVIDER.into());
    }
    Ok(Value::Object(o))
}

/// `GET /outbox/:local?before=<seq>&limit=<n>` — owner only (authenticated on the primary); the
/// page is read through `reads`, a moment stale at most.
pub async fn get<D: Db, N: Net>(
    house: &House<D, N>,
    req: &Request,
    reads: &Reads,
    local: &str,
) -> Result<Response, Error> {
    let card = house.registry().authenticate_owner(req, local, Keys::Current).await?;
    let before = number(req, "before", i64::MAX, i64::MAX)?;
    let limit = number(req, "limit", PAGE_DEFAULT, PAGE_MAX)?;
    let rows = house.queue().outbox_page(reads, card.address().as_str(), before, limit).await?;
    let mut envelopes: Vec<(i64, Object)> = Vec::new();
    for r in &rows {
        let seq = r.int("seq").unwrap_or(0);
        if envelopes.last().is_none_or(|(s, _)| *s != seq) {
            envelopes.push((
                seq,
                obj([
                    ("seq", seq.into()),
                    ("id", r.text("envelope_id").unwrap_or_default().into()),
                    ("sha256", r.text("sha256").unwrap_or_default().into()),
                    ("queued", time(r.int("created_at"))),
                    ("expires", time(r.int("expires"))),
                    ("jobs", Value::Array(vec![])),
                ]),
            ));
        }
        if let Some((_, Some(Value::Array(jobs)))) = envelopes.last_mut().map(|(s, o)| (*s, o.get_mut("jobs"))) {
            jobs.push(job(r)?);
        }
    }
    let next = if envelopes.len() as i64 == limit { envelopes.last().map(|(s, _)| *s) } else { None };
    let list = envelopes.into_iter().map(|(_, o)| Value::Object(o)).collect();
    let mut answer = ok_body([("envelopes", Value::Array(list)), ("next", next.into())]);
    // The first page also lists the agent's latest emails (the email bridge, `POST /email/out`).
    if req.query("before").is_none()
        && let Value::Object(o) = &mut answer
    {
        let provider = crate::email::outbound::has_provider(&house.config);
        let rows = house.email().sent_page(reads, card.address().as_str(), limit).await?;
        o.insert("emails".into(), Value::Array(rows.iter().map(|r| email(r, provider)).collect::<Result<_, _>>()?));
    }
    Ok(Response::json(200, &answer))
}
