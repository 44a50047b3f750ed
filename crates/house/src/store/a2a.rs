//! The A2A gateway's tasks (migration 0032; docs/SPEC.md "A2A gateway"), on the primary.

use nyx5_proto::Error;

use super::{one, query};
use crate::guard;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// Every column a task is read with.
macro_rules! columns {
    () => {
        "SELECT id, local, context, envelope, caller, message_id, state, request, answer, contract, push, share, updated
           FROM a2a_tasks "
    };
}

/// What an agent's tasks may hold: tasks and bytes in all; of them, the strangers' (every
/// caller not on its allow list) together; and each stranger's share (the unverified callers
/// together; the verified callers of one site together). The callers it allows are held only to
/// the whole.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    pub tasks: i64,
    pub bytes: i64,
    pub strangers_tasks: i64,
    pub strangers_bytes: i64,
    pub share_tasks: i64,
    pub share_bytes: i64,
}

impl Room {
    /// The room as a task already in it growing sees it (a caller's next message): bytes only.
    pub const fn growing(self) -> Room {
        Room { tasks: i64::MAX, strangers_tasks: i64::MAX, share_tasks: i64::MAX, ..self }
    }
}

/// The share of a caller the agent's allow list names.
pub const ALLOWED: &str = "allowed";

/// The share a task counts in (migration 0033): [`ALLOWED`] for a caller the agent's allow list
/// names, else its site's (a verified caller at `caller_site`) or the unverified callers'.
pub fn share(allowed: bool, caller_site: Option<&str>) -> String {
    match (allowed, caller_site) {
        (true, _) => ALLOWED.to_owned(),
        (false, Some(site)) => format!("site:{site}"),
        (false, None) => "unverified".to_owned(),
    }
}

/// A new task in `share` (or a task of that share growing), written only while the agent's
/// tasks (ended ones included, until forgotten) are within `room` (a stranger's: in all, the
/// strangers' and its share's): a guard that fails the whole batch (`a2a_tasks_room`) past it,
/// so the envelope beside it is not written either. It reads the three rows of `a2a_rooms` the
/// triggers keep (migration 0033), never the tasks.
pub fn room(local: &str, room: &Room, share: &str) -> Stmt {
    guard!(
        "a2a_tasks_room",
        "(SELECT coalesce((SELECT tasks < ?2 AND bytes < ?3 FROM a2a_rooms WHERE local = ?1 AND share = ''), 1)
             AND (?4 = 'allowed'
                  OR (coalesce((SELECT tasks < ?5 AND bytes < ?6 FROM a2a_rooms WHERE local = ?1 AND share = '~'), 1)
                      AND coalesce((SELECT tasks < ?7 AND bytes < ?8 FROM a2a_rooms WHERE local = ?1 AND share = ?4), 1))))",
        local,
        room.tasks,
        room.bytes,
        share,
        room.strangers_tasks,
        room.strangers_bytes,
        room.share_tasks,
        room.share_bytes
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
    /// The caller's share ([`share`]).
    pub share: &'a str,
}

pub fn insert(t: &New<'_>, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO a2a_tasks (id, local, context, envelope, caller, message_id, state, request, contract, push, share, bytes, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'submitted', ?7, ?8, ?10, ?11, length(CAST(?7 AS BLOB)), ?9, ?9)",
        t.id,
        t.local,
        t.context,
        t.envelope,
        t.caller,
        t.message_id,
        t.request,
        t.contract,
        now,
        t.push,
        t.share
    )
}

/// Where task `id` of agent `local` is and when it last moved (state, ms): what a stream rereads,
/// from the index `a2a_tasks_moves` alone (not the task's text).
pub async fn moved_at<D: Db>(db: &D, local: &str, id: &str) -> Result<Option<(String, i64)>, Error> {
    let row = one(db, moved_query(local, id)).await?;
    Ok(row.and_then(|r| Some((r.text("state")?.to_owned(), r.int("updated")?))))
}

/// [`moved_at`]'s query (`tests/schema.rs` holds it to its index).
pub fn moved_query(local: &str, id: &str) -> Stmt {
    // Named: a unique key on `id` alone looks better to a planner without statistics.
    stmt!("SELECT state, updated FROM a2a_tasks INDEXED BY a2a_tasks_moves WHERE id = ?1 AND local = ?2", id, local)
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

/// A page of `local`'s tasks in `context`, the most recently moved first, of at most `limit`
/// tasks after `offset`, and only as many as fit in `max_bytes` of kept messages and answers
/// (the first always): the rows past that are never read whole.
pub async fn list<D: Db>(
    db: &D,
    local: &str,
    context: &str,
    limit: i64,
    offset: i64,
    max_bytes: i64,
) -> Result<Vec<Row>, Error> {
    query(db, list_query(local, context, limit, offset, max_bytes)).await
}

/// [`list`]'s query: the page is chosen and cut from the index `a2a_tasks_context` (ids, times,
/// bytes), and only its rows are read whole (`tests/schema.rs` holds it to that).
pub fn list_query(local: &str, context: &str, limit: i64, offset: i64, max_bytes: i64) -> Stmt {
    stmt!(
        "SELECT t.id, t.local, t.context, t.envelope, t.caller, t.message_id, t.state, t.request, t.answer,
                t.contract, t.push, t.updated
           FROM (SELECT id, row_number() OVER w AS n, sum(bytes) OVER w - bytes AS before
                   FROM (SELECT id, bytes, updated FROM a2a_tasks WHERE local = ?1 AND context = ?2
                          ORDER BY updated DESC, id DESC LIMIT ?3 OFFSET ?4)
                 WINDOW w AS (ORDER BY updated DESC, id DESC ROWS UNBOUNDED PRECEDING)) AS p
           JOIN a2a_tasks AS t ON t.id = p.id
          WHERE p.n = 1 OR p.before < ?5
          ORDER BY p.n",
        local,
        context,
        limit,
        offset,
        max_bytes
    )
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

/// Forgets up to `limit` tasks: ended ones not moved since `ended_before`, open ones not moved
/// since `open_before`; never an open task whose escrow is not settled (held or delivered: its
/// caller may still cancel it, `a2a@` may still settle it) or was settled since `open_before`
/// (a settlement whose task's end is being written). One whose escrow was settled otherwise
/// long ago (its buyer refunded it alone) is forgotten as an unpaid one is.
pub fn purge(ended_before: i64, open_before: i64, limit: i64) -> Stmt {
    stmt!(
        "DELETE FROM a2a_tasks WHERE id IN
           (SELECT id FROM a2a_tasks
             WHERE ((state IN ('completed', 'failed', 'canceled', 'rejected') AND updated < ?1)
                    OR (state IN ('submitted', 'working', 'input-required') AND updated < ?2
                        AND (contract IS NULL
                             OR NOT EXISTS (SELECT 1 FROM libro_contracts AS c
                                             WHERE c.id = a2a_tasks.contract
                                               AND (c.state NOT IN ('released', 'refunded') OR c.updated >= ?2)))))
             ORDER BY updated LIMIT ?3)",
        ended_before,
        open_before,
        limit
    )
}
