//! The delivery queue's SQL: the outbox, one job per destination domain, domain health, and the
//! notices the queue drops into a local sender's mailbox.
//!
//! Every write that finishes an attempt is guarded by the job's lease: `held` is true only while
//! the job is still pending under the lease the tick took, so a tick whose lease has lapsed (and
//! that someone else took over) changes nothing. Guarded statements go before the job's own
//! update in the batch, which is the one that gives the lease back.

use nyx5_proto::Error;

use crate::ports::{Db, Row, Stmt};
use crate::stmt;

use super::{one, query};

/// A job to create with its envelope: the destination domain and its recipients (a JSON array),
/// and, for a send that takes its own first attempt ([`First`]), that attempt's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub domain: String,
    pub recipients: String,
    pub first: Option<First>,
}

/// The first attempt's lease of a job, written by the insert that queues it: what [`lease`]
/// would write for the fresh job (one attempt counted, `next_attempt` where the job waits should
/// the attempt die, the deadline no earlier than the give-up time, every recipient `maybe`). The
/// insert takes it only while the destination has no `domain_health` row; otherwise the job is
/// queued untaken, for the tick (and its probe) to work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct First {
    pub lease_until: i64,
    pub next_attempt: i64,
    pub deadline: i64,
    pub result: String,
}

/// A new outbox row: the canonical envelope and when its jobs run (first due at `not_before`,
/// bounced from `deadline` on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing<'a> {
    pub envelope_id: &'a str,
    pub sender: &'a str,
    pub envelope: &'a str,
    pub sha256: &'a str,
    pub expires: Option<i64>,
    pub now: i64,
    pub not_before: i64,
    pub deadline: i64,
    /// The version of the sender's tree's holds it was judged against (docs/SPEC.md §7c): none
    /// for a tree without holds; the outbox's `outbox_held` trigger refuses a stale one.
    pub judged: Option<&'a str>,
}

/// How much an outbox `seq` grows per millisecond: a row's `seq` is its `created_at` times this
/// (or one more than the last `seq`, if that is higher: a burst, or a clock set back), so the key
/// is in the order of time and the purge and the rate count read it by ranges.
pub const SEQ_PER_MS: i64 = 1024;

/// The SQL of a new outbox row's `seq` (binds `?1`, the row's time in ms × [`SEQ_PER_MS`], and
/// `?2`, its root agent): the first of its millisecond's slots no row of that root holds (one
/// seek down the key, `(root, seq)` since migration 0029). Only its own millisecond is looked
/// at, so a row a clock that ran ahead once gave a high `seq` never drags the later ones after
/// it: `seq / SEQ_PER_MS` is the row's `created_at` (a burst of more than 1,024 in one
/// millisecond, which one writer cannot reach, would spill into the next), and the purge and the
/// rate count read exact ranges of the key. (1024 is [`SEQ_PER_MS`].)
macro_rules! next_seq {
    () => {
        "(SELECT coalesce(max(seq) + 1, ?1) FROM outbox WHERE root = ?2 AND seq >= ?1 AND seq < ?1 + 1024)"
    };
}

/// The outbox row and one job per destination domain. The UNIQUE envelope id makes a resend
/// fail the whole batch, so nothing is queued twice. Not counted towards any agent's minute (the
/// house's own envelopes: the Libro's).
pub fn enqueue(out: &Outgoing<'_>, jobs: &[NewJob]) -> Vec<Stmt> {
    let mut stmts = Vec::with_capacity(jobs.len() + 1);
    stmts.push(stmt!(
        concat!(
            "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, expires, created_at) VALUES (?2, ",
            next_seq!(),
            ", ?3, ?4, ?5, ?6, ?7, ?8)"
        ),
        out.now.saturating_mul(SEQ_PER_MS),
        root_address(out.sender),
        out.envelope_id,
        out.sender,
        out.envelope,
        out.sha256,
        out.expires,
        out.now
    ));
    stmts.extend(job_rows(out, jobs));
    stmts
}

/// The root agent of `address` (`a.b.ana@h` → `ana@h`), as the outbox's CHECK `outbox_root_of_sender` spells it in SQL (migration 0029),
/// which holds every row's `root` to it.
pub fn root_address(address: &str) -> String {
    match address.split_once('@') {
        Some((local, domain)) => format!("{}@{domain}", local.rsplit('.').next().unwrap_or(local)),
        None => address.to_owned(),
    }
}

/// [`enqueue`] for an agent's envelope created at `created`, taken only if the house cannot have
/// forgotten it: created more than the clock tolerance after the forgetting horizon
/// ([`FORGOTTEN_BEFORE`]). An envelope queued at `t` has `created` before `t` + 5 min, so one
/// created later than the horizon + 5 min was never purged. Otherwise the outbox row's
/// `created_at` is NULL, and its NOT NULL constraint ([`FORGOTTEN`]) fails the batch — a check
/// that costs no row written (one read). SQLite checks NOT NULL before the UNIQUE id, so the
/// caller looks the id up before it answers so: one the house still holds is "exists". Without it, a clock that jumped a day or more ahead (the tick purging a week back
/// from there) and was set right let a resend still within the 6 days `created` may be old be
/// queued a second time.
///
/// The sender's root agent (with its subagents: [`root_address`]) queues at most `cap` envelopes a
/// minute of the house's clock: the insert counts the tree's rows created in this minute (a
/// range of the outbox's key, at most `cap` of them) and numbers its own (`rate_n`); past the cap
/// that is 0, which the CHECK [`RATE`] refuses. No row is written to count (a `rate_windows` row
/// was, until migration 0024). SQLite checks it after NOT NULL and before the UNIQUE id: the
/// caller looks the id up before it answers 429.
pub fn enqueue_remembered(out: &Outgoing<'_>, jobs: &[NewJob], created: i64, cap: i64) -> Vec<Stmt> {
    const MINUTE: i64 = 60_000;
    let minute = out.now.div_euclid(MINUTE).saturating_mul(MINUTE);
    let mut stmts = Vec::with_capacity(jobs.len() + 1);
    stmts.push(stmt!(
        concat!(
            "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, expires, created_at, rate_n, judged) \
             VALUES (?2, ",
            next_seq!(),
            ", ?3, ?4, ?5, ?6, ?7, CASE WHEN ?8 > coalesce((SELECT CAST(value AS INTEGER) FROM settings \
                                                        WHERE name = 'outbox_forgotten_before'), 0) + ?9 \
                                     THEN ?10 END, \
                     (SELECT CASE WHEN count(*) < ?11 THEN count(*) + 1 ELSE 0 END FROM outbox \
                      WHERE root = ?2 AND seq >= ?12 AND seq < ?13 AND created_at >= ?14 AND created_at < ?15), ?16)"
        ),
        out.now.saturating_mul(SEQ_PER_MS),
        root_address(out.sender),
        out.envelope_id,
        out.sender,
        out.envelope,
        out.sha256,
        out.expires,
        created,
        nyx5_proto::limits::CLOCK_SKEW_MS,
        out.now,
        cap,
        minute.saturating_mul(SEQ_PER_MS),
        minute.saturating_add(MINUTE).saturating_mul(SEQ_PER_MS),
        minute,
        minute.saturating_add(MINUTE),
        out.judged
    ));
    stmts.extend(job_rows(out, jobs));
    stmts
}

/// One `jobs` row per destination of a new outbox row: one statement for a job queued untaken;
/// two for one with a [`First`] lease, of which exactly one inserts (the taken row while its
/// domain has no health row, else the untaken one), so the batch's counts tell the caller which
/// ([`taken_jobs`]).
fn job_rows<'a>(out: &'a Outgoing<'_>, jobs: &'a [NewJob]) -> impl Iterator<Item = Stmt> + 'a {
    macro_rules! insert {
        () => {
            "INSERT INTO jobs (envelope_id, domain, recipients, state, attempts, next_attempt, not_before, deadline, \
                               lease_until, result, created_at, made) "
        };
    }
    // The order it was made in: its envelope's `seq`, then its place among the destinations.
    macro_rules! made {
        ($k:literal) => {
            concat!("(SELECT seq FROM outbox WHERE envelope_id = ?1) * 256 + ", $k)
        };
    }
    macro_rules! untaken {
        ($gate:literal) => {
            concat!(insert!(), "SELECT ?1, ?2, ?3, 'pending', 0, ?4, ?4, ?5, 0, NULL, ?6, ", made!("?7"), " ", $gate)
        };
    }
    const _: () = assert!(nyx5_proto::limits::MAX_RECIPIENTS < 256, "made! gives each destination its place");
    jobs.iter().zip(0_i64..).flat_map(move |(j, k)| {
        let untaken = |sql: &'static str| {
            stmt!(
                sql,
                out.envelope_id,
                j.domain.as_str(),
                j.recipients.as_str(),
                out.not_before,
                out.deadline,
                out.now,
                k
            )
        };
        match &j.first {
            None => vec![untaken(untaken!(""))],
            Some(f) => vec![
                stmt!(
                    concat!(
                        insert!(),
                        "SELECT ?1, ?2, ?3, 'pending', 1, ?4, ?5, ?6, ?7, ?8, ?9, ",
                        made!("?10"),
                        " WHERE NOT EXISTS (SELECT 1 FROM domain_health h WHERE h.domain = ?2)"
                    ),
                    out.envelope_id,
                    j.domain.as_str(),
                    j.recipients.as_str(),
                    f.next_attempt,
                    out.not_before,
                    f.deadline,
                    f.lease_until,
                    f.result.as_str(),
                    out.now,
                    k
                ),
                untaken(untaken!("WHERE EXISTS (SELECT 1 FROM domain_health h WHERE h.domain = ?2)")),
            ],
        }
    })
}

/// A job whose first attempt the send that queued it took ([`First`]), waiting in the house for
/// the kick that follows the send's answer (`Queue::tick` works these in turn with the due
/// ones): the job as the due scan would read it untaken (its `made` unknown and unused: the
/// lease is [`Held`] by the job's key), the lease the send wrote, the envelope's canonical text
/// and its sender's root agent
/// (one copy per send, parsed again by the kick: a parsed envelope can be many times its text),
/// and when.
#[derive(Debug, Clone)]
pub struct Taken {
    pub(crate) job: nyx5_rules::queue::Job,
    pub(crate) lease: i64,
    pub(crate) text: std::rc::Rc<str>,
    pub(crate) root: std::rc::Rc<str>,
    pub(crate) at: i64,
}

/// Most bytes of envelope text the house holds for kicks ([`Taken`]); a send past it queues its
/// jobs untaken, for the due scan.
pub const TAKEN_MAX_BYTES: usize = 4 << 20;

/// Which of `jobs` (queued by [`enqueue`] or [`enqueue_remembered`], whose batch answered
/// `changes`) were inserted with their [`First`] lease taken. The job statements follow the
/// outbox row (and whatever the caller put before it: `skip` statements in all).
pub fn taken_jobs(jobs: &[NewJob], changes: &[u64], skip: usize) -> Vec<bool> {
    let mut at = skip + 1;
    jobs.iter()
        .map(|j| {
            let taken = j.first.is_some() && changes.get(at) == Some(&1);
            at += if j.first.is_some() { 2 } else { 1 };
            taken
        })
        .collect()
}

/// Who sent envelope `id` and its hash, if this house queued it.
pub async fn outbox_entry<D: Db>(db: &D, envelope_id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT sender, sha256 FROM outbox WHERE envelope_id = ?", envelope_id)).await
}

/// The jobs of one envelope, in the order they were made, as queuing it listed them (first due
/// at `not_before`): what a resend or a replay of the send is told, no progress (that is `GET
/// /outbox`'s, to its sender's token).
pub async fn jobs_of<D: Db>(db: &D, envelope_id: &str) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT domain, recipients, not_before FROM jobs WHERE envelope_id = ? ORDER BY made", envelope_id))
        .await
}

/// Whether a job's lease is free at `now`: lapsed, or further ahead than any lease a tick takes
/// ([`nyx5_rules::queue::LEASE_MS`]) — one taken while the clock ran ahead (a clock that jumped days
/// forward, then was set right), which would otherwise hold the job for those days. Binds `now`
/// twice.
macro_rules! lease_free {
    () => {
        "(lease_until < ? OR lease_until > ? + 120000)"
    };
}
const _: () = assert!(nyx5_rules::queue::LEASE_MS == 120_000, "lease_free! spells LEASE_MS out");

/// The name of the `settings` row holding the outbox's forgetting horizon: every envelope queued
/// (by this house's clock) before it may have been purged. It only grows, hour by hour.
pub const FORGOTTEN_BEFORE: &str = "outbox_forgotten_before";

/// The constraint [`enqueue_remembered`] fails with for an envelope the house may have forgotten.
pub const FORGOTTEN: &str = "outbox.created_at";

/// The constraint [`enqueue_remembered`] fails with for an envelope past its agent's minute.
pub const RATE: &str = "outbox_rate";

/// Up to `limit` jobs that are pending, due and not leased (found through `jobs_due`, by
/// `next_attempt`: only the due ones are read, however many wait to retry), with their envelope's expiry and
/// their domain's health (`h_*`, null when healthy). Taken round-robin over destinations: each
/// domain's earliest job first (those tried least before others, so a destination that killed
/// the last tick goes last), then each one's second, …; one domain's backlog cannot fill the
/// tick. Within a destination, senders take turns the same way (each sender's earliest job,
/// then each one's second, …), a sender counted with its subagents under its root agent
/// ([`root_address`]): one agent's backlog cannot hold up another's job for more than a turn, however
/// many subagents it spreads it over — two agents flooding their own house's Libro leave a
/// third's refund in the first turn of the next tick (issue 34).
pub async fn due<D: Db>(db: &D, now: i64, limit: i64) -> Result<Vec<Row>, Error> {
    query(db, stmt!(DUE_SQL, now, now, now, now.saturating_add(nyx5_rules::queue::LEASE_MS), limit)).await
}

/// The text of [`due`]'s query (tests fail it by its text).
pub const DUE_SQL: &str = "SELECT j.made, j.envelope_id, j.domain, j.recipients, j.attempts, j.last_error, j.result, \
                    j.deadline, j.next_attempt, o.expires, h.failures AS h_failures, h.next_probe AS h_next_probe, j.root \
             FROM (SELECT *, row_number() OVER (PARTITION BY domain ORDER BY sender_turn, next_attempt, made, envelope_id) AS turn \
                   FROM (SELECT d.*, s.root, row_number() OVER (PARTITION BY d.domain, s.root \
                                                        ORDER BY d.next_attempt, d.made, d.envelope_id) AS sender_turn \
                         FROM jobs d JOIN outbox s ON s.envelope_id = d.envelope_id \
                         WHERE d.state = 'pending' AND d.not_before <= ? AND d.next_attempt <= ? AND (d.lease_until < ? OR d.lease_until > ?))) j \
             JOIN outbox o ON o.envelope_id = j.envelope_id \
             LEFT JOIN domain_health h ON h.domain = j.domain \
             ORDER BY j.turn, j.attempts, j.next_attempt, j.made, j.envelope_id LIMIT ?";

/// Takes a due job until `until`. Changes no row when another tick holds it, it is no longer
/// pending, or it is not due.
///
/// With `attempt` (the next attempt's time should this one fail), the lease counts the attempt
/// and moves the job there before anything is sent: a tick that dies inside the attempt (a
/// destination that hangs until the runtime kills it) has failed it, and the job waits its
/// backoff instead of being retried, and hanging the queue again, on the very next tick.
///
/// With `give_up_ms` (an attempt's), the deadline is no earlier than the give-up time
/// (`not_before + give_up_ms`) while the attempt is out: it may arrive with its answer lost (or
/// the tick die with it), and then expiry alone must not bounce it blind — the destination's
/// answer does (it holds the envelope, or refuses it as expired: docs/SPEC.md §7b). An attempt
/// that ends with an answer gives the deadline back ([`retry`]).
///
/// A lease further ahead than a tick ever takes one was taken while the clock ran ahead, and is
/// free (see `due`).
///
/// With `out` (an attempt's), `result` becomes it: the job's progress with the recipients the
/// attempt goes to named `maybe` while it is out. An attempt that ends with an answer writes the
/// result it settles; one whose tick dies leaves them `maybe`, so the job never reports them not
/// delivered (it may have reached them: a tick that died after its own Libro did an operation,
/// simulator seed 549).
///
/// With `seen` (the attempts the caller read the job with), only while no other tick has
/// attempted it since: a tick that read the job before another's unanswered attempt must not
/// plan from a progress without that attempt's `maybe` (hostile review of issue 35).
///
/// A write with `RETURNING` ([`crate::ports::Db::write_returning`]): one row, the job's
/// `envelope` (NULL if the outbox lost it), when the lease was taken; none when it was not.
#[allow(clippy::too_many_arguments)]
pub fn lease(
    job: (&str, &str),
    now: i64,
    until: i64,
    attempt: Option<i64>,
    give_up_ms: Option<i64>,
    out: Option<&str>,
    seen: Option<i64>,
) -> Stmt {
    stmt!(
        concat!(
            "UPDATE jobs SET lease_until = ?, attempts = attempts + ?, next_attempt = coalesce(?, next_attempt), \
                         deadline = max(deadline, coalesce(not_before + ?, deadline)), result = coalesce(?, result) \
         WHERE envelope_id = ? AND domain = ? AND state = 'pending' AND (? IS NULL OR attempts = ?) AND ",
            lease_free!(),
            " AND next_attempt <= ? \
         RETURNING (SELECT o.envelope FROM outbox o WHERE o.envelope_id = jobs.envelope_id) AS envelope"
        ),
        until,
        i64::from(attempt.is_some()),
        attempt,
        give_up_ms,
        out,
        job.0,
        job.1,
        seen,
        seen,
        now,
        now,
        now
    )
}

/// The lease a tick holds: the job of envelope `envelope_id` to `domain` (its key: a send that
/// took the job's first attempt knows no more of it) still pending with `lease_until = lease`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<'a> {
    pub envelope_id: &'a str,
    pub domain: &'a str,
    pub lease: i64,
}

/// A notice for a local agent's mailbox, written only while the lease is held; a notice with the
/// same id already there is left alone.
pub fn insert_notice(held: Held<'_>, local: &str, notice_id: &str, sender: &str, envelope: &str, now: i64) -> Stmt {
    stmt!(
        concat!(
            crate::store::mailbox::mailbox_q!(),
            "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at, total_n, total_bytes) \
             SELECT q.seq, q.local, ?2, ?3, ?4, ?5, q.tn, q.tb FROM q \
             WHERE (?9 OR (EXISTS (SELECT 1 FROM jobs g WHERE g.envelope_id = ?6 AND g.domain = ?7 \
                                   AND g.lease_until = ?8 AND g.state = 'pending') \
                           AND NOT EXISTS (SELECT 1 FROM shard_moving AS sm WHERE sm.local = q.local))) \
             ON CONFLICT (local, envelope_id) DO NOTHING"
        ),
        local,
        notice_id,
        sender,
        envelope,
        now,
        held.envelope_id,
        held.domain,
        held.lease,
        false
    )
    // On a shard (no `jobs` there), the lease is checked on the primary, where the hand-off is
    // written only while it is held (crate::shards). A mailbox moving off this database takes
    // no notice here (it would fail the batch): skipped, counted 0; a hand-off is not skipped
    // (it waits and is applied where the mailbox ends up).
    .in_mailbox(local)
    .on_handoff(8, true)
    .gated(stmt!(
        "INSERT INTO shard_handoffs (key, local, stmt) \
         SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM jobs g WHERE g.envelope_id = ?4 AND g.domain = ?5 \
                                         AND g.lease_until = ?6 AND g.state = 'pending') \
         ON CONFLICT (key) DO NOTHING",
        "",
        "",
        "",
        held.envelope_id,
        held.domain,
        held.lease
    ))
}

/// The job stays pending after an attempt (which its lease counted): rescheduled, lease given
/// back; with `deadline`, the deadline it had before this attempt (which was answered, or surely
/// never arrived; see [`lease`]). One moved by an earlier attempt that went unanswered stays
/// moved: a later answer about the destination says nothing of what that attempt delivered.
pub fn retry(held: Held<'_>, next_attempt: i64, last_error: &str, result: &str, deadline: Option<i64>) -> Stmt {
    stmt!(
        "UPDATE jobs SET next_attempt = ?, last_error = ?, result = ?, lease_until = 0, deadline = coalesce(?, deadline) \
         WHERE envelope_id = ? AND domain = ? AND lease_until = ? AND state = 'pending'",
        next_attempt,
        last_error,
        result,
        deadline,
        held.envelope_id,
        held.domain,
        held.lease
    )
}

/// A first attempt a send took ([`First`]) is given back untried (its domain was found failing
/// before the kick got to it): the job as it would have been queued untaken, waiting until
/// `next_attempt`.
pub fn release(held: Held<'_>, next_attempt: i64, deadline: i64) -> Stmt {
    stmt!(
        "UPDATE jobs SET attempts = 0, next_attempt = ?, deadline = ?, result = NULL, lease_until = 0 \
         WHERE envelope_id = ? AND domain = ? AND lease_until = ? AND state = 'pending' AND attempts = 1",
        next_attempt,
        deadline,
        held.envelope_id,
        held.domain,
        held.lease
    )
}

/// The job ends `delivered` or `bounced` (an attempt was counted when it was leased).
pub fn finish(
    held: Held<'_>,
    state: nyx5_rules::queue::JobState,
    last_error: Option<&str>,
    result: &str,
    now: i64,
) -> Stmt {
    stmt!(
        "UPDATE jobs SET state = ?, last_error = coalesce(?, last_error), result = ?, \
                finished_at = ?, lease_until = 0 \
         WHERE envelope_id = ? AND domain = ? AND lease_until = ? AND state = 'pending'",
        state.as_str(),
        last_error,
        result,
        now,
        held.envelope_id,
        held.domain,
        held.lease
    )
}

/// The domain's health is forgotten once no job for it is pending: health steers the jobs that
/// wait for a domain, and a finished job may have been its last (the tick's purge does the same
/// for any left over). Put after [`finish`] in its batch: while the job is still pending (its
/// guard refused), the domain keeps its row.
pub fn forget_idle_domain(domain: &str) -> Stmt {
    stmt!(
        "DELETE FROM domain_health WHERE domain = ? \
         AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.domain = domain_health.domain AND j.state = 'pending')",
        domain
    )
}

/// The domain failed again (or for the first time): one job probes it at `next_probe`.
pub fn domain_failed(held: Held<'_>, domain: &str, now: i64, failures: i64, next_probe: i64, error: &str) -> Stmt {
    stmt!(
        "INSERT INTO domain_health (domain, failing_since, failures, next_probe, last_error) \
         SELECT ?, ?, ?, ?, ? \
         WHERE EXISTS (SELECT 1 FROM jobs g WHERE g.envelope_id = ? AND g.domain = ? AND g.lease_until = ? \
                       AND g.state = 'pending') \
         ON CONFLICT (domain) DO UPDATE SET failures = excluded.failures, next_probe = excluded.next_probe, \
           last_error = excluded.last_error",
        domain,
        now,
        failures,
        next_probe,
        error,
        held.envelope_id,
        held.domain,
        held.lease
    )
}

/// Moves the domain's unleased pending jobs due before `until` to `until` (never past their
/// deadline), so they wait for the probe instead of hitting a failing destination (found
/// through `jobs_pending_domain`).
pub fn postpone_domain(domain: &str, until: i64, now: i64) -> Stmt {
    stmt!(
        "UPDATE jobs SET next_attempt = min(?, deadline) \
         WHERE domain = ? AND state = 'pending' AND not_before < ? AND lease_until < ? AND next_attempt < ?",
        until,
        domain,
        until,
        now,
        until
    )
}

/// The domain answered: forget its failures and make its waiting jobs due now (deferred ones
/// keep their `deliver_after`), so they go in order of arrival.
pub fn domain_recovered(held: Held<'_>, domain: &str, now: i64) -> Vec<Stmt> {
    vec![
        stmt!(
            "DELETE FROM domain_health WHERE domain = ? \
             AND EXISTS (SELECT 1 FROM jobs g WHERE g.envelope_id = ? AND g.domain = ? AND g.lease_until = ? \
                         AND g.state = 'pending')",
            domain,
            held.envelope_id,
            held.domain,
            held.lease
        ),
        stmt!(
            "UPDATE jobs SET next_attempt = max(not_before, ?) \
             WHERE domain = ? AND state = 'pending' AND lease_until < ? AND next_attempt > ? \
             AND EXISTS (SELECT 1 FROM jobs g WHERE g.envelope_id = ? AND g.domain = ? AND g.lease_until = ? \
                         AND g.state = 'pending')",
            now,
            domain,
            now,
            now,
            held.envelope_id,
            held.domain,
            held.lease
        ),
    ]
}

/// How many of the outbox's roots (agents with their subagents) one purge's window holds.
pub const PURGE_ROOTS: i64 = 64;

/// The SQL of a purge's window over the outbox's roots (CTEs `bounds(lo, hi)` and `r(root)`):
/// the roots after the walk's cursor `lo` (`settings` row `outbox_purge_root`) up to and with
/// `hi` (`outbox_purge_hi`, the window's last root as the batch's first statement found it; ''
/// when the window reaches the end), found one seek each. Every statement of one purge reads the
/// same window, whatever the ones before it deleted.
macro_rules! purge_window {
    () => {
        "WITH RECURSIVE bounds AS ( \
           SELECT coalesce((SELECT value FROM settings WHERE name = 'outbox_purge_root'), '') AS lo, \
                  coalesce((SELECT value FROM settings WHERE name = 'outbox_purge_hi'), '') AS hi), \
         r AS ( \
           SELECT (SELECT min(root) FROM outbox WHERE root > (SELECT lo FROM bounds)) AS root, 1 AS n \
           UNION ALL \
           SELECT (SELECT min(root) FROM outbox WHERE root > r.root), r.n + 1 FROM r \
            WHERE r.root IS NOT NULL AND r.n < 64 AND ((SELECT hi FROM bounds) = '' OR r.root < (SELECT hi FROM bounds)))"
    };
}
const _: () = assert!(PURGE_ROOTS == 64, "purge_window! spells PURGE_ROOTS out");

/// The SQL of an envelope `o` the purge may forget (binds `?1` the horizon's `seq`, `?2` the
/// horizon): queued before the horizon, and no job of it pending or ended since.
macro_rules! purgeable {
    () => {
        "o.created_at < ?2 AND NOT EXISTS ( \
           SELECT 1 FROM jobs j WHERE j.envelope_id = o.envelope_id AND (j.state = 'pending' OR j.finished_at >= ?2))"
    };
}

/// Forgets finished envelopes older than `before` (at most `limit` per call) and the health of
/// domains nothing is waiting for, and moves the forgetting horizon ([`FORGOTTEN_BEFORE`]) up to
/// `before` rounded up to the hour (so it is written once an hour, not every tick).
///
/// The outbox is keyed by root agent (migration 0029), so the purge walks it a window of
/// [`PURGE_ROOTS`] roots at a time, one seek per root, and in each root reads the range of its
/// key below `before` × [`SEQ_PER_MS`], which holds every row of that root created before
/// `before`. The window moves on only once nothing in it is left to forget: a call that took
/// `limit` rows leaves a backlog, the tick purges again, and the same window is read again, so
/// no root waits behind a busy one for more than the calls its backlog takes (hostile review of
/// migration 0029). The cursor and the window's end are `settings` rows, written only when they
/// move: a house of fewer roots than a window never writes them.
pub fn purge(before: i64, limit: i64) -> Vec<Stmt> {
    const HOUR: i64 = 3_600_000;
    let horizon = before.saturating_add(HOUR - 1).div_euclid(HOUR).saturating_mul(HOUR);
    let range = before.saturating_mul(SEQ_PER_MS);
    vec![
        stmt!(
            "INSERT INTO settings (name, value, created_at) VALUES ('outbox_forgotten_before', ?, ?) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value \
             WHERE CAST(excluded.value AS INTEGER) > CAST(settings.value AS INTEGER)",
            horizon.to_string(),
            before
        ),
        // The window's end, found before anything of it is deleted: its 64th root, or the end
        // ('') when no root follows that one (a house of exactly 64 roots has one window).
        stmt!(
            "WITH RECURSIVE r AS ( \
               SELECT (SELECT min(root) FROM outbox WHERE root > coalesce( \
                         (SELECT value FROM settings WHERE name = 'outbox_purge_root'), '')) AS root, 1 AS n \
               UNION ALL \
               SELECT (SELECT min(root) FROM outbox WHERE root > r.root), r.n + 1 FROM r \
                WHERE r.root IS NOT NULL AND r.n < 65) \
             INSERT INTO settings (name, value, created_at) \
             VALUES ('outbox_purge_hi', CASE WHEN (SELECT root FROM r WHERE n = 65) IS NOT NULL \
                                        THEN (SELECT root FROM r WHERE n = 64) ELSE '' END, 0) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE settings.value IS NOT excluded.value"
        ),
        stmt!(
            concat!(
                purge_window!(),
                " DELETE FROM jobs WHERE envelope_id IN ( \
                   SELECT o.envelope_id FROM r JOIN outbox o ON o.root = r.root AND o.seq < ?1 \
                   WHERE ",
                purgeable!(),
                " LIMIT ?3)"
            ),
            range,
            before,
            limit
        ),
        stmt!(
            concat!(
                purge_window!(),
                " DELETE FROM outbox WHERE envelope_id IN ( \
                   SELECT o.envelope_id FROM r JOIN outbox o ON o.root = r.root AND o.seq < ?1 \
                   WHERE o.created_at < ?2 AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.envelope_id = o.envelope_id) \
                   LIMIT ?3)"
            ),
            range,
            before,
            limit
        ),
        // The cursor moves to the window's end (back to the start after the last) once nothing
        // in the window is left to forget.
        stmt!(
            concat!(
                purge_window!(),
                " UPDATE settings SET value = (SELECT hi FROM bounds) \
                  WHERE name = 'outbox_purge_root' AND value IS NOT (SELECT hi FROM bounds) \
                    AND NOT EXISTS (SELECT 1 FROM r JOIN outbox o ON o.root = r.root AND o.seq < ?1 WHERE ",
                purgeable!(),
                ")"
            ),
            range,
            before
        ),
        stmt!(
            "DELETE FROM domain_health WHERE NOT EXISTS ( \
               SELECT 1 FROM jobs j WHERE j.domain = domain_health.domain AND j.state = 'pending')"
        ),
    ]
}

/// A page of `sender`'s envelopes, newest first, below `before` (a `seq`), each row one job.
pub async fn outbox_page<D: Db>(db: &D, sender: &str, before: i64, limit: i64) -> Result<Vec<Row>, Error> {
    query(db, outbox_page_query(sender, before, limit)).await
}

/// [`outbox_page`]'s statement: it walks the outbox's key (the sender's root agent, then `seq`)
/// down from `before`, skipping the rows of the root's other subagents.
pub fn outbox_page_query(sender: &str, before: i64, limit: i64) -> Stmt {
    stmt!(
        "SELECT o.seq, o.envelope_id, o.sha256, o.expires, o.created_at, j.domain, j.recipients, j.state, \
                    j.attempts, j.next_attempt, j.last_error, j.result, j.finished_at \
             FROM (SELECT seq, envelope_id, sha256, expires, created_at FROM outbox \
                   WHERE root = ? AND sender = ? AND seq < ? ORDER BY seq DESC LIMIT ?) o \
             JOIN jobs j ON j.envelope_id = o.envelope_id \
             ORDER BY o.seq DESC, j.made",
        root_address(sender),
        sender,
        before,
        limit
    )
}

/// Queue depth and the oldest due time among pending jobs, for `GET /health`.
pub async fn depth<D: Db>(db: &D, now: i64) -> Result<Row, Error> {
    Ok(one(
        db,
        stmt!(
            "SELECT count(*) AS depth, min(CASE WHEN next_attempt <= ? THEN next_attempt END) AS oldest_due \
             FROM jobs WHERE state = 'pending'",
            now
        ),
    )
    .await?
    .unwrap_or_default())
}
