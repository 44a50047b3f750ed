//! POST /outbound — spec §7: an agent hands its own signed envelope to its house, which queues
//! it per destination domain and answers 202 at once (the queue delivers; see `queue.rs`).
//! Each agent queues at most `outbound_per_agent_per_minute` envelopes a minute (429), and none
//! due more than [`MAX_DELIVER_AFTER_MS`] ahead (400): a queued envelope is a stored row and a
//! job, and neither may be kept for millennia.

use nyx5_proto::auth::Keys;
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Refusal, Timestamp, Value};

use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::queue::{Enqueued, Outgoing};
use crate::{House, ok_body};

pub use nyx5_rules::queue::{MAX_DELIVER_AFTER_MS, by_domain, check_due};

/// The oldest an envelope's `created` may be when it is queued: 6 days. The house remembers what
/// it queued for [`crate::queue::OUTBOX_KEEP_MS`] (7 days) after the last job ends, and answers
/// the same envelope again "exists"; past that it has forgotten it, so an older envelope could
/// be queued a second time. (Found by the `libro_sequence` fuzz target.)
pub const MAX_CREATED_AGE_MS: i64 = 6 * 24 * 3_600_000;
// A purged row was queued more than 7 days ago, so its envelope was created more than 7 days
// less the clock tolerance ago: past the limit, whatever the two constants become.
const _: () = assert!(crate::queue::OUTBOX_KEEP_MS - nyx5_proto::limits::CLOCK_SKEW_MS > MAX_CREATED_AGE_MS);

/// Refuses an envelope created more than [`MAX_CREATED_AGE_MS`] before `now`, or more than the
/// clock tolerance ([`nyx5_proto::limits::CLOCK_SKEW_MS`], 5 minutes) after it (400). Pure.
///
/// Together with the outbox's purge (rows queued more than 7 days ago whose jobs ended more than
/// 7 days ago), this is what makes "the same envelope again queues nothing" hold for good: an
/// envelope queued at `t` was created before `t` + 5 min, is forgotten only after `t` + 7 days,
/// and by then is more than 6 days old.
pub fn check_created(created: Timestamp, now: Timestamp) -> Result<(), Error> {
    if created.millis() > now.millis().saturating_add(nyx5_proto::limits::CLOCK_SKEW_MS) {
        return Err(Refusal::CreatedInFuture.because(format!(
            "`created` is more than 5 minutes ahead of this house's clock ({}); check the sender's clock",
            now.to_rfc3339()
        )));
    }
    if created.millis() < now.millis().saturating_sub(MAX_CREATED_AGE_MS) {
        return Err(Refusal::CreatedTooOld.because(format!(
            "`created` is more than {} days ago: a house queues only fresh envelopes; sign it again \
             under the same id (a copy delivered before is then recognised by its id)",
            MAX_CREATED_AGE_MS / (24 * 3_600_000)
        )));
    }
    Ok(())
}

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
    let out = Outgoing {
        envelope_id: env.id(),
        sender: env.from().as_str(),
        envelope: &text,
        sha256: &sha256,
        expires: env.expires().map(|e| e.millis()),
        now: now.millis(),
        not_before,
        deadline,
    };
    // The outbox row counts itself towards the agent's minute: only a new envelope counts (the
    // same envelope again fails on its id and answers "exists"), and a subagent's sends count
    // towards its root agent's minute: an agent cannot multiply its rate by enrolling subagents
    // (`a.b.ceo` → `ceo`). Not one the house may have forgotten either (queued before its
    // forgetting horizon, which a clock that ran days ahead moved past the 6 days
    // `check_created` allows).
    let cap = house.config.outbound_per_agent_per_minute;
    match house.queue().enqueue(&out, &groups, env.created().millis(), cap).await? {
        Enqueued::Queued => {}
        Enqueued::Held(row) => return held(house, &row, env.id(), card.address(), &sha256).await,
        Enqueued::TooMany => {
            return Err(Refusal::TooManySends.because(format!(
                "{} may send {cap} envelopes a minute (with its subagents); try again shortly",
                card.address()
            )));
        }
        Enqueued::Forgotten => {
            return Err(Refusal::CreatedTooOld.because(
                "`created` is older than what this house may have forgotten (its clock ran ahead since): a house \
                 queues only envelopes it cannot have queued before; sign it again under the same id (a copy \
                 delivered before is then recognised by its id)",
            ));
        }
    }
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
    Ok(Response::json(
        202,
        &ok_body([("code", Value::from(202_i64)), ("id", env.id().into()), ("jobs", Value::Array(listed))]),
    )
    .kick())
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
