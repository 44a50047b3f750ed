//! The A2A gateway's tasks (migration 0032; docs/SPEC.md "A2A gateway"), on the primary.

use nyx5_proto::Error;

use super::{one, query};
use crate::guard;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// Every column a task is read with.
macro_rules! columns {
    () => {
        "SELECT id, local, context, envelope, caller, message_id, state, request, answer, contract, push, updated
           FROM a2a_tasks "
    };
}

/// What an agent's tasks may hold: tasks and bytes in all, and of them from unverified callers.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    pub tasks: i64,
    pub bytes: i64,
    pub unverified_tasks: i64,
    pub unverified_bytes: i64,
}

/// A new task, written only while the agent's tasks (ended ones included, until forgotten) are
/// within `room` (and, for an `unverified` caller, within its share): a guard that fails the
/// whole batch (`a2a_tasks_room`) past it, so the envelope beside it is not written either.
pub fn room(local: &str, room: &Room, unverified: bool) -> Stmt {
    guard!(
        "a2a_tasks_room",
        "(SELECT count(*) < ?2 AND coalesce(sum(bytes), 0) < ?3
                 AND (?4 = 0 OR (count(*) FILTER (WHERE caller IS NULL) < ?5
                                 AND coalesce(sum(bytes) FILTER (WHERE caller IS NULL), 0) < ?6))
            FROM a2a_tasks WHERE local = ?1)",
        local,
        room.tasks,
        room.bytes,
        i64::from(unverified),
        room.unverified_tasks,
        room.unverified_bytes
    )
}

/// What a new task is: its ids and the caller's first message (A2A's JSON).
#[derive(Debug)]
pub struct New<'a> {
    pub id: &'a str,
    pub local: &'a str,
    pub context: &'a str,
    pub envelope: &'a str,
    pub caller: Option<&'a str>,
    pub message_id: &'a str,
    pub request: &'a str,
    pub contract: Option<&'a str>,
    pub push: Option<&'a str>,
}

pub fn insert(t: &New<'_>, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO a2a_tasks (id, local, context, envelope, caller, message_id, state, request, contract, push, bytes, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'submitted', ?7, ?8, ?10, length(CAST(?7 AS BLOB)), ?9, ?9)",
        t.id,
        t.local,
        t.context,
        t.envelope,
        t.caller,
        t.message_id,
        t.request,
        t.contract,
        now,
        t.push
    )
}

/// Task `id` of agent `local`.
pub async fn get<D: Db>(db: &D, local: &str, id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!(concat!(columns!(), "WHERE id = ?1 AND local = ?2"), id, local)).await
}

/// The task whose latest message travelled in envelope `envelope`.
pub async fn by_envelope<D: Db>(db: &D, envelope: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!(concat!(columns!(), "WHERE envelope = ?1"), envelope)).await
}

/// A verified caller's task for its message `message_id` to `local`.
pub async fn by_message<D: Db>(db: &D, local: &str, caller: &str, message_id: &str) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(concat!(columns!(), "WHERE local = ?1 AND caller = ?2 AND message_id = ?3"), local, caller, message_id),
    )
    .await
}

/// Whether context `context` is one of `local`'s that `caller` (None: unverified) began: a
/// context is its caller's (the house gives every context id).
pub async fn context_known<D: Db>(db: &D, local: &str, context: &str, caller: Option<&str>) -> Result<bool, Error> {
    let sql = "SELECT 1 AS known FROM a2a_tasks WHERE local = ?1 AND context = ?2 AND caller IS ?3 LIMIT 1";
    Ok(one(db, stmt!(sql, local, context, caller)).await?.is_some())
}

/// A page of `local`'s tasks in `context`, the most recently moved first.
pub async fn list<D: Db>(db: &D, local: &str, context: &str, limit: i64, offset: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            concat!(columns!(), "WHERE local = ?1 AND context = ?2 ORDER BY updated DESC, id LIMIT ?3 OFFSET ?4"),
            local,
            context,
            limit,
            offset
        ),
    )
    .await
}

/// How many tasks `local` has in `context`.
pub async fn count<D: Db>(db: &D, local: &str, context: &str) -> Result<i64, Error> {
    let row =
        one(db, stmt!("SELECT count(*) AS n FROM a2a_tasks WHERE local = ?1 AND context = ?2", local, context)).await?;
    Ok(row.and_then(|r| r.int("n")).unwrap_or(0))
}

/// Moves task `id` from state `from` (only if it is still there: one row, or none when another
/// call moved it first) to `to`, with the agent's `answer`.
pub fn moved(id: &str, from: &str, to: &str, answer: Option<&str>, now: i64) -> Stmt {
    stmt!(
        "UPDATE a2a_tasks SET state = ?3, answer = coalesce(?4, answer), updated = ?5,
                bytes = length(CAST(request AS BLOB)) + coalesce(length(CAST(coalesce(?4, answer) AS BLOB)), 0)
          WHERE id = ?1 AND state = ?2",
        id,
        from,
        to,
        answer,
        now
    )
}

/// Ends task `id` as `to` with the agent's `answer`, from whatever open state it is in: written
/// after its escrow was settled, so a move meanwhile (the caller's next message) does not undo
/// the end the money already took. One row, or none when it had ended already.
pub fn ended(id: &str, to: &str, answer: Option<&str>, now: i64) -> Stmt {
    stmt!(
        "UPDATE a2a_tasks SET state = ?2, answer = coalesce(?3, answer), updated = ?4,
                bytes = length(CAST(request AS BLOB)) + coalesce(length(CAST(coalesce(?3, answer) AS BLOB)), 0)
          WHERE id = ?1 AND state IN ('submitted', 'working', 'input-required')",
        id,
        to,
        answer,
        now
    )
}

/// The caller's next message on a task waiting for input: submitted again, in a new envelope.
pub fn followed(id: &str, envelope: &str, request: &str, now: i64) -> Stmt {
    stmt!(
        "UPDATE a2a_tasks SET state = 'submitted', envelope = ?2, request = ?3, updated = ?4,
                bytes = length(CAST(?3 AS BLOB)) + coalesce(length(CAST(answer AS BLOB)), 0)
          WHERE id = ?1 AND state = 'input-required'",
        id,
        envelope,
        request,
        now
    )
}

/// Sets (or with None clears) where task `id` of `local` pushes its changes.
pub fn set_push(local: &str, id: &str, push: Option<&str>) -> Stmt {
    stmt!("UPDATE a2a_tasks SET push = ?3 WHERE id = ?2 AND local = ?1", local, id, push)
}

/// Forgets up to `limit` tasks: ended ones not moved since `ended_before`, open
/// ones not moved since `open_before`; never an open task an escrow is bound to (its caller
/// may still cancel it, and the escrow must not be bound again).
pub fn purge(ended_before: i64, open_before: i64, limit: i64) -> Stmt {
    stmt!(
        "DELETE FROM a2a_tasks WHERE id IN
           (SELECT id FROM a2a_tasks
             WHERE ((state IN ('completed', 'failed', 'canceled', 'rejected') AND updated < ?1)
                    OR (state IN ('submitted', 'working', 'input-required') AND contract IS NULL AND updated < ?2))
             ORDER BY updated LIMIT ?3)",
        ended_before,
        open_before,
        limit
    )
}
