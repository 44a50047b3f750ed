//! The SQL of the house's own agents (migration `0010_services.sql`): the checks `verifica@`
//! owes, and `tareas@`'s catalogue and claims.

use nyx5_proto::Error;
use nyx5_rules::libro::state::CheckState;

use super::{one, query};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// The check of `contract`, due at `now`: written in the `deliver`'s batch. A second delivery of
/// one contract cannot happen (the kernel refuses it), so a conflict leaves the row as it was.
pub fn enqueue_check(contract: &str, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO verifica_checks (contract, next_at, added_at) VALUES (?1, ?2, ?2)
         ON CONFLICT (contract) DO NOTHING",
        contract,
        now
    )
}

/// Up to `limit` checks due at `now` and not leased, oldest first, each with the contract's
/// record (`record`, JSON) as it stands.
pub async fn due_checks<D: Db>(db: &D, now: i64, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT v.contract AS contract, v.attempts AS attempts, c.record AS record, c.state AS contract_state
               FROM verifica_checks v LEFT JOIN libro_contracts c ON c.id = v.contract
              WHERE v.state = 'due' AND v.next_at <= ?1 AND (v.lease_until IS NULL OR v.lease_until <= ?1)
              ORDER BY v.next_at, v.contract LIMIT ?2",
            now,
            limit
        ),
    )
    .await
}

/// Leases a check until `until`, counting the attempt: changes one row only if no one else holds
/// it (a tick retried by the platform, or two processes on one file).
pub fn lease_check(contract: &str, attempts: i64, now: i64, until: i64) -> Stmt {
    stmt!(
        "UPDATE verifica_checks SET lease_until = ?4, attempts = attempts + 1
          WHERE contract = ?1 AND attempts = ?2 AND state = 'due' AND (lease_until IS NULL OR lease_until <= ?3)",
        contract,
        attempts,
        now,
        until
    )
}

/// The check is done: the Libro took its verdict (or the contract moved on without it). Only the
/// lease's holder removes it.
pub fn finish_check(contract: &str, attempts: i64) -> Stmt {
    stmt!("DELETE FROM verifica_checks WHERE contract = ?1 AND attempts = ?2", contract, attempts)
}

/// An undecided verdict: kept as `last`, due again at `next_at` (`state` due), or given up
/// (`state` undecided). Only the lease's holder writes it.
pub fn undecided(contract: &str, attempts: i64, next_at: i64, state: CheckState, last: &str) -> Stmt {
    stmt!(
        "UPDATE verifica_checks SET lease_until = NULL, next_at = ?3, last = ?5, state = ?4
          WHERE contract = ?1 AND attempts = ?2",
        contract,
        attempts,
        next_at,
        state.as_str(),
        last
    )
}

/// The check is due again at `next_at`, its lease released (the Libro could not take its verdict
/// now). Only the lease's holder writes it.
pub fn postpone_check(contract: &str, attempts: i64, next_at: i64) -> Stmt {
    stmt!(
        "UPDATE verifica_checks SET lease_until = NULL, next_at = ?3 WHERE contract = ?1 AND attempts = ?2",
        contract,
        attempts,
        next_at
    )
}

/// The desk's escrows it takes back, oldest first: still `held` (taken, never delivered) since
/// before `cutoff` with no seller's operation received within the hold still waiting, or
/// delivered and given up by `verifica@`.
pub async fn stale_tasks<D: Db>(
    db: &D,
    desk: &str,
    cutoff: i64,
    limit: i64,
    hold_ms: i64,
    w: crate::store::libro::Waiting<'_>,
) -> Result<Vec<String>, Error> {
    Ok(query(
        db,
        stmt!(
            concat!(
                "SELECT id FROM libro_contracts c WHERE buyer = ?1 AND kind = 'escrow'
                AND ((state = 'held' AND created <= ?2 AND NOT ",
                crate::store::libro::waiting!("contract", "c.id", "(c.created + ?7)"),
                ")
                  OR (state = 'delivered'
                      AND EXISTS (SELECT 1 FROM verifica_checks v WHERE v.contract = c.id AND v.state = 'undecided')))
              ORDER BY created, id LIMIT ?6"
            ),
            desk,
            cutoff,
            w.domain,
            w.libro,
            w.since,
            limit,
            hold_ms
        ),
    )
    .await?
    .iter()
    .filter_map(|r| r.text("id").map(str::to_owned))
    .collect())
}

/// Adds a task (changes nothing when the id is taken), after a guard that fewer than `max`
/// tasks are offered.
pub fn add_task(id: &str, price: i64, statement: &str, terms: &str, now: i64, max: i64) -> Vec<Stmt> {
    vec![
        crate::guard!("tareas_offered", "(SELECT count(*) FROM tareas WHERE retired_at IS NULL) < ?", max),
        stmt!(
            "INSERT INTO tareas (id, price, statement, terms, added_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (id) DO NOTHING",
            id,
            price,
            statement,
            terms,
            now
        ),
    ]
}

/// Retires a task: it is no longer offered. Changes nothing for a task retired before.
pub fn retire_task(id: &str, now: i64) -> Stmt {
    stmt!("UPDATE tareas SET retired_at = ?2 WHERE id = ?1 AND retired_at IS NULL", id, now)
}

/// The tasks offered (all of them with `retired` too), in the order they were added.
pub async fn tasks<D: Db>(db: &D, retired: bool) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT id, price, statement, terms, added_at, retired_at FROM tareas
              WHERE ?1 = 1 OR retired_at IS NULL ORDER BY added_at, id LIMIT 1000",
            retired
        ),
    )
    .await
}

/// One task by id, offered or retired.
pub async fn task<D: Db>(db: &D, id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT id, price, statement, terms, retired_at FROM tareas WHERE id = ?1", id)).await
}

/// `seller` is `?2` or one of its subagents (`x.?2`, `y.x.?2`).
macro_rules! of_root {
    () => {
        "(seller = ?2 OR (length(seller) > length(?2) AND substr(seller, -length(?2) - 1) = '.' || ?2))"
    };
}

/// Everything a quote to the desk `desk` (its address) is decided on, in one read: the task
/// `task` (`id, price, statement, terms, retired_at`, NULL when there is none), whether its
/// acceptance `accept_id` was done before (`done`), the desk's balance (`funds`), and the quota of
/// `agent` (a root agent's address: its subagents share its quota) on `day`: escrows with the desk
/// in flight whose seller is the agent or one of its subagents (`in_flight`), its claims that day
/// (`agent_today`), everyone's (`all_today`), and whether `task` was paid to it or is in flight
/// (`taken`: a claim whose contract was not refunded).
pub async fn desk_facts<D: Db>(db: &D, q: &DeskQuery<'_>) -> Result<Row, Error> {
    Ok(one(
        db,
        stmt!(
            concat!(
                "SELECT t.id AS id, t.price AS price, t.statement AS statement, t.terms AS terms,
                   t.retired_at AS retired_at,
                   EXISTS (SELECT 1 FROM libro_ops WHERE envelope_id = ?5) AS done,
                   coalesce((SELECT balance FROM libro_lines WHERE account = ?1 ORDER BY n DESC LIMIT 1), 0) AS funds,
                   (SELECT count(*) FROM libro_contracts
                     WHERE buyer = ?1 AND kind = 'escrow' AND state IN ('held', 'delivered') AND ",
                of_root!(),
                ") AS in_flight,
                   (SELECT count(*) FROM tareas_claims WHERE agent = ?2 AND day = ?4) AS agent_today,
                   (SELECT count(*) FROM tareas_claims WHERE day = ?4) AS all_today,
                   EXISTS (SELECT 1 FROM tareas_claims c JOIN libro_contracts k ON k.id = c.contract
                            WHERE c.task = ?3 AND c.agent = ?2 AND k.state <> 'refunded') AS taken
                 FROM (SELECT 1) LEFT JOIN tareas t ON t.id = ?3"
            ),
            q.desk,
            q.agent,
            q.task,
            q.day,
            q.accept_id
        ),
    )
    .await?
    .unwrap_or_default())
}

/// What [`desk_facts`] reads for.
#[derive(Debug, Clone, Copy)]
pub struct DeskQuery<'a> {
    pub desk: &'a str,
    pub agent: &'a str,
    pub task: &'a str,
    pub day: i64,
    pub accept_id: &'a str,
}

/// How many claims were made on `day`, everyone's.
pub async fn claims_on<D: Db>(db: &D, day: i64) -> Result<i64, Error> {
    Ok(one(db, stmt!("SELECT count(*) AS n FROM tareas_claims WHERE day = ?1", day))
        .await?
        .and_then(|r| r.int("n"))
        .unwrap_or(0))
}

/// The claim of `task` by `agent` (a root agent's address) under `contract`, for the accept's
/// batch. Placed before the contract's own row, it sees the quota as it was: the CHECK
/// `tareas_quota` undoes the whole accept when, by then, the agent (or one of its subagents) has
/// a task in flight, the agent's or the house's cap for `day` is reached, or the task was paid
/// to the agent before.
#[allow(clippy::too_many_arguments)]
pub fn claim(
    contract: &str,
    agent: &str,
    task: &str,
    desk: &str,
    day: i64,
    now: i64,
    per_agent: i64,
    per_day: i64,
) -> Stmt {
    stmt!(
        concat!(
            "INSERT INTO tareas_claims (contract, task, agent, day, at, within) VALUES (?1, ?3, ?2, ?5, ?6, (
           SELECT NOT EXISTS (SELECT 1 FROM libro_contracts
                               WHERE buyer = ?4 AND kind = 'escrow' AND state IN ('held', 'delivered') AND ",
            of_root!(),
            ")
              AND (SELECT count(*) FROM tareas_claims WHERE agent = ?2 AND day = ?5) < ?7
              AND (SELECT count(*) FROM tareas_claims WHERE day = ?5) < ?8
              AND NOT EXISTS (SELECT 1 FROM tareas_claims t JOIN libro_contracts c ON c.id = t.contract
                               WHERE t.task = ?3 AND t.agent = ?2 AND c.state <> 'refunded')))"
        ),
        contract,
        agent,
        task,
        desk,
        day,
        now,
        per_agent,
        per_day
    )
}
