//! The A2A gateway's tasks (migration 0032; docs/SPEC.md "A2A gateway"), on the primary.

use nyx5_proto::Error;

use super::{one, query};
use crate::guard;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// Every column a task is read with.
macro_rules! columns {
    () => {
        "SELECT id, local, context, envelope, caller, message_id, state, request, answer, contract, owed, push, updated
           FROM a2a_tasks "
    };
}

/// A new task, written only while the agent holds fewer than `max` (ended ones included, until
/// forgotten): a guard that fails the whole batch (`a2a_tasks_room`) past it, so the envelope
/// beside it in the batch is not written either.
pub fn room(local: &str, max: i64) -> Stmt {
    guard!("a2a_tasks_room", "(SELECT count(*) < ?2 FROM a2a_tasks WHERE local = ?1)", local, max)
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
        "INSERT INTO a2a_tasks (id, local, context, envelope, caller, message_id, state, request, contract, push, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'submitted', ?7, ?8, ?10, ?9, ?9)",
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

/// Whether context `context` is one of `local`'s (the house gives every context id).
pub async fn context_known<D: Db>(db: &D, local: &str, context: &str) -> Result<bool, Error> {
    Ok(one(db, stmt!("SELECT 1 AS known FROM a2a_tasks WHERE local = ?1 AND context = ?2 LIMIT 1", local, context))
        .await?
        .is_some())
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
/// call moved it first) to `to`, with the agent's `answer` and what it now owes the Libro.
pub fn moved(id: &str, from: &str, to: &str, answer: Option<&str>, owed: Option<&str>, now: i64) -> Stmt {
    stmt!(
        "UPDATE a2a_tasks SET state = ?3, answer = coalesce(?4, answer), owed = ?5, updated = ?6
          WHERE id = ?1 AND state = ?2",
        id,
        from,
        to,
        answer,
        owed,
        now
    )
}

/// The caller's next message on a task waiting for input: submitted again, in a new envelope.
pub fn followed(id: &str, envelope: &str, request: &str, now: i64) -> Stmt {
    stmt!(
        "UPDATE a2a_tasks SET state = 'submitted', envelope = ?2, request = ?3, updated = ?4
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

/// The Libro took what task `id` owed.
pub fn settled(id: &str) -> Stmt {
    stmt!("UPDATE a2a_tasks SET owed = NULL WHERE id = ?1", id)
}

/// Touches one task owing the Libro a settlement, if there is one: a statement whose change
/// count tells the minute's purge batch whether to read them (see `queue`).
pub fn any_owed() -> Stmt {
    stmt!(
        "UPDATE a2a_tasks SET owed = owed
          WHERE id = (SELECT id FROM a2a_tasks WHERE owed IS NOT NULL ORDER BY updated LIMIT 1)"
    )
}

/// Tasks owing the Libro a settlement, oldest first.
pub async fn owing<D: Db>(db: &D, limit: i64) -> Result<Vec<Row>, Error> {
    query(db, stmt!(concat!(columns!(), "WHERE owed IS NOT NULL ORDER BY updated LIMIT ?1"), limit)).await
}

/// Forgets up to `limit` tasks that have not moved since `before` and owe nothing.
pub fn purge(before: i64, limit: i64) -> Stmt {
    stmt!(
        "DELETE FROM a2a_tasks WHERE id IN
           (SELECT id FROM a2a_tasks WHERE updated < ?1 AND owed IS NULL ORDER BY updated LIMIT ?2)",
        before,
        limit
    )
}
