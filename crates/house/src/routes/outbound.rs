//! POST /outbound — spec §7: an agent hands its own signed envelope to its house, which queues
//! it per destination domain and answers 202 at once (the queue delivers; see `queue.rs`).
//! Each agent queues at most `outbound_per_agent_per_minute` envelopes a minute (429), and none
//! due more than [`MAX_DELIVER_AFTER_MS`] ahead (400): a queued envelope is a stored row and a
//! job, and neither may be kept for millennia.

use nyx5_proto::auth::Keys;
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Refusal, Value};

use crate::drafts::{self, Judgement};
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::queue::{Enqueued, Outgoing};
use crate::{House, ok_body};

pub use nyx5_rules::queue::{MAX_DELIVER_AFTER_MS, by_domain, check_due};

pub use crate::outbound::{MAX_CREATED_AGE_MS, check_created};

// A purged row was queued more than 7 days ago, so its envelope was created more than 7 days
// less the clock tolerance ago: past the limit, whatever the two constants become.
const _: () = assert!(crate::queue::OUTBOX_KEEP_MS - nyx5_proto::limits::CLOCK_SKEW_MS > MAX_CREATED_AGE_MS);

fn addresses(list: &[Address]) -> Value {
    Value::Array(list.iter().map(|a| a.as_str().into()).collect())
}

/// POST /outbound — authenticate, check the envelope is the agent's own and allowed, queue it.
pub async fn post<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    // No nonce is stored (one row fewer a send, issue 36 §1): the token is bound to the body, so
    // a replay is this envelope again, and its id, which the outbox holds, answers it "exists"
    // without a change. A request refused before (a malformed body, a rate cap) changed nothing
    // either and may be sent again within the token's window (docs/SPEC.md §8).
    let (card, _the_envelope_id_is_the_nonce) = house.registry().authenticate_unspent(req, Keys::Current).await?;
    let now = house.now();
    let env = Envelope::parse(&req.body, house.config.max_bytes)?;
    if env.from() != card.address() {
        return Err(Refusal::NotTheSender.because(format!("{} may not send as {}", card.address(), env.from())));
    }
    let env = env.verify(&card, now)?;
    env.check_not_expired(now)?;
    if let Err(stale) = check_created(env.created(), now) {
        // One the house still holds is answered as any resend is ("exists", or 409); only one it
        // may have forgotten is refused, so a client retrying a lost answer learns it was queued.
        return match house.queue().outbox_entry(env.id()).await? {
            Some(row) => held(house, &row, env.id(), card.address(), &env.sha256_hex()).await,
            None => Err(stale),
        };
    }
    let groups = by_domain(env.to());
    for (domain, _) in &groups {
        card.check_send(env.kind().as_str(), domain)?;
    }
    let text = String::from_utf8(env.canonical())
        .map_err(|_| Error::new(ErrorKind::Internal, "canonical JSON is not UTF-8"))?;
    let sha256 = env.sha256_hex();
    check_due(env.due_at(now), now)?;
    let not_before = env.due_at(now).millis();
    let give_up = not_before.saturating_add(house.config.retry.give_up_after_ms);
    let deadline = env.expires().map_or(give_up, |e| e.millis().min(give_up));
    let mut out = Outgoing {
        envelope_id: env.id(),
        sender: env.from().as_str(),
        envelope: &text,
        sha256: &sha256,
        expires: env.expires().map(|e| e.millis()),
        now: now.millis(),
        not_before,
        deadline,
        judged: None,
    };
    // The outbox row counts itself towards the agent's minute: only a new envelope counts (the
    // same envelope again fails on its id and answers "exists"), and a subagent's sends count
    // towards its root agent's minute: an agent cannot multiply its rate by enrolling subagents
    // (`a.b.ceo` → `ceo`). Not one the house may have forgotten either (queued before its
    // forgetting horizon, which a clock that ran days ahead moved past the 6 days
    // `check_created` allows).
    let cap = house.config.outbound_per_agent_per_minute;
    let created = env.created().millis();
    let mut enqueued = house.queue().enqueue(&out, &groups, created, cap, Vec::new()).await?;
    // A tree with holds (docs/SPEC.md §7c): the outbox took nothing; judge the envelope against
    // the holds as they are now, then queue it under that version or keep it as a draft.
    let version;
    if let Enqueued::Unjudged = enqueued {
        match house.drafts().judge(&env).await? {
            Judgement::Pass { version: v } => {
                version = v;
                out.judged = Some(&version);
                enqueued = house.queue().enqueue(&out, &groups, created, cap, Vec::new()).await?;
            }
            Judgement::Hold { approvers, version } => {
                let drafts = house.drafts();
                let (new, row) = drafts.hold(&env, &text, &sha256, &approvers, &version, req.query("readers")).await?;
                let status: i64 = if new { 202 } else { 200 };
                let draft = drafts::draft_json(&row, house.now().millis(), None);
                return Ok(Response::json(
                    u16::try_from(status).unwrap_or(202),
                    &ok_body([
                        ("code", Value::from(status)),
                        ("id", env.id().into()),
                        ("exists", Value::Bool(!new)),
                        ("draft", draft),
                    ]),
                ));
            }
        }
    }
    match enqueued {
        Enqueued::Queued => Ok(queued(env.id(), &groups, not_before)),
        Enqueued::Held(row) => held(house, &row, env.id(), card.address(), &sha256).await,
        refused => Err(not_queued(refused, card.address(), cap)),
    }
}

/// The answer to an envelope queued now: its jobs ([`jobs_listed`]).
fn queued(id: &str, groups: &[(String, Vec<Address>)], not_before: i64) -> Response {
    Response::json(
        202,
        &ok_body([("code", Value::from(202_i64)), ("id", id.into()), ("jobs", jobs_listed(groups, not_before))]),
    )
    .kick()
}

/// The jobs of an envelope queued now, as `POST /outbound` answers them: one per destination
/// domain with its recipients, each first due at `not_before`.
pub(crate) fn jobs_listed(groups: &[(String, Vec<Address>)], not_before: i64) -> Value {
    let next = nyx5_proto::Timestamp(not_before).to_rfc3339();
    let listed = groups
        .iter()
        .map(|(domain, list)| {
            Value::Object(nyx5_proto::json::obj([
                ("domain", domain.as_str().into()),
                ("recipients", addresses(list)),
                ("next_attempt", next.as_str().into()),
            ]))
        })
        .collect();
    Value::Array(listed)
}

/// Why the outbox took no row, as the refusal (never [`Enqueued::Queued`] or [`Enqueued::Held`]).
pub(crate) fn not_queued(enqueued: Enqueued, sender: &Address, cap: i64) -> Error {
    match enqueued {
        Enqueued::TooMany => Refusal::TooManySends
            .because(format!("{sender} may send {cap} envelopes a minute (with its subagents); try again shortly")),
        Enqueued::Forgotten => Refusal::CreatedTooOld.because(
            "`created` is older than what this house may have forgotten (its clock ran ahead since): a house \
             queues only envelopes it cannot have queued before; sign it again under the same id (a copy \
             delivered before is then recognised by its id)",
        ),
        Enqueued::Unjudged => Refusal::HoldChanged
            .because("the holds on this agent changed while the house judged the envelope; send it again"),
        Enqueued::Guarded => Refusal::HoldChanged.because("a decision this send depended on changed; send it again"),
        Enqueued::Queued | Enqueued::Held(_) => Error::new(ErrorKind::Internal, "queued, not refused"),
    }
}

/// The answer to an envelope whose id the outbox holds (`row`): the same envelope from the same
/// sender is "exists" with its jobs (200); anything else under that id is a conflict (409).
async fn held<D: Db, N: Net>(
    house: &House<D, N>,
    row: &crate::ports::Row,
    id: &str,
    sender: &Address,
    sha256: &str,
) -> Result<Response, Error> {
    if row.text("sender") != Some(sender.as_str()) || row.text("sha256") != Some(sha256) {
        return Err(Refusal::EnvelopeIdTaken.because(format!("envelope id {id} is already used for another envelope")));
    }
    let mut listed = Vec::new();
    for r in house.queue().jobs_of(id).await? {
        let recipients = Value::parse_str(r.text("recipients").unwrap_or("[]"))?;
        listed.push(Value::Object(nyx5_proto::json::obj([
            ("domain", r.text("domain").unwrap_or_default().into()),
            ("recipients", recipients),
            ("next_attempt", nyx5_proto::Timestamp(r.int("not_before").unwrap_or(0)).to_rfc3339().into()),
        ])));
    }
    Ok(Response::json(
        200,
        &ok_body([
            ("code", Value::from(200_i64)),
            ("id", id.into()),
            ("exists", Value::Bool(true)),
            ("jobs", Value::Array(listed)),
        ]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nyx5_proto::Timestamp;

    /// `created` may be 6 days old or 5 minutes ahead, and not a millisecond more either way.
    #[test]
    fn created_is_at_most_six_days_old_and_five_minutes_ahead() {
        let now = Timestamp(1_796_083_200_000);
        assert_eq!((MAX_CREATED_AGE_MS, nyx5_proto::limits::CLOCK_SKEW_MS), (518_400_000, 300_000));
        assert!(check_created(Timestamp(now.millis() - MAX_CREATED_AGE_MS), now).is_ok());
        assert!(check_created(Timestamp(now.millis() + 300_000), now).is_ok());
        let old = check_created(Timestamp(now.millis() - MAX_CREATED_AGE_MS - 1), now).unwrap_err();
        assert_eq!((old.code(), old.refusal()), (400, Some(Refusal::CreatedTooOld)));
        // The reason names the bound, computed from the constant.
        assert!(old.reason.starts_with("`created` is more than 6 days ago"), "{old}");
        let ahead = check_created(Timestamp(now.millis() + 300_001), now).unwrap_err();
        assert_eq!((ahead.code(), ahead.refusal()), (400, Some(Refusal::CreatedInFuture)));
        assert!(ahead.reason.starts_with("`created` is more than 5 minutes ahead"), "{ahead}");
    }

    /// `deliver_after` may be exactly 30 days ahead, and not a millisecond more.
    #[test]
    fn deliver_after_reaches_thirty_days_exactly() {
        let now = Timestamp(1_796_083_200_000);
        assert_eq!(MAX_DELIVER_AFTER_MS, 2_592_000_000);
        assert!(check_due(Timestamp(now.millis() + MAX_DELIVER_AFTER_MS), now).is_ok());
        let refused = check_due(Timestamp(now.millis() + MAX_DELIVER_AFTER_MS + 1), now).unwrap_err();
        assert_eq!((refused.code(), refused.refusal()), (400, Some(Refusal::DeliverAfterTooFar)));
        assert!(refused.reason.starts_with("`deliver_after` may be at most 30 days ahead"), "{refused}");
    }
}
