//! Holds and drafts (docs/SPEC.md §7c; migration 0030): the SQL of envelopes that wait at the
//! house for a person.

use nyx5_proto::Error;

use super::{one, query};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// The outbox refused a row of a held tree not judged against its holds as they are now
/// (migration 0030's `outbox_held` trigger).
pub const HELD: &str = "outbox_held";
/// The email bridge refused a row of a held tree not judged against its holds as they are now.
pub const HELD_EMAIL: &str = "email_out_held";
/// A tree has held as many drafts this minute as its agents may send.
pub const RATE: &str = "drafts_rate";
/// A tree has the most drafts it may (100 waiting, 1,000 in all).
pub const BOUND: &str = "drafts_bound";
/// A draft's id is taken.
pub const DRAFT_ID: &str = "drafts.id";
/// An agent has a hold already (a set that raced another).
pub const HOLD_TAKEN: &str = "mail_holds.local";

/// How long after it expires a draft (decided or not) is kept, for its sender to see: 7 days.
pub const DRAFT_KEEP_MS: i64 = 7 * 24 * 3_600_000;

/// The most drafts one listing answers, of each kind.
pub const LIST_MAX: i64 = 100;

/// Every hold of the tree under `root` (the root agent's address).
pub async fn holds_of_tree<D: Db>(db: &D, root: &str) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT seq, local, approver, rule, set_by, set_at FROM mail_holds WHERE root = ?1", root)).await
}

/// The webhooks of the local agents among `locals` (a JSON array of local parts) that have one.
pub async fn webhooks<D: Db>(db: &D, locals: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT local, webhook FROM agents WHERE local IN (SELECT value FROM json_each(?1)) AND webhook IS NOT NULL",
            locals
        ),
    )
    .await
}

/// The hold on `local`, if any.
pub async fn hold_of<D: Db>(db: &D, local: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT seq, local, approver, rule, set_by, set_at FROM mail_holds WHERE local = ?1", local)).await
}

/// What a hold on `local` says, replacing the one whose `seq` was read (`replaced`): its row is
/// deleted only if it is still that one, and the insert then fails on the agent's key
/// ([`HOLD_TAKEN`]) if another took its place, so a decision made on a hold that changed fails
/// whole. A new row takes a new `seq`, which changes the tree's version.
pub fn set_hold(
    local: &str,
    root: &str,
    approver: &str,
    rule: &str,
    set_by: &str,
    at: i64,
    replaced: Option<i64>,
) -> Vec<Stmt> {
    let mut stmts = Vec::with_capacity(2);
    if let Some(seq) = replaced {
        stmts.push(stmt!("DELETE FROM mail_holds WHERE local = ?1 AND seq = ?2", local, seq));
    }
    stmts.push(stmt!(
        "INSERT INTO mail_holds (local, root, approver, rule, set_by, set_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        local,
        root,
        approver,
        rule,
        set_by,
        at
    ));
    stmts
}

/// Lifts the hold on `local` if it is still the one read (`seq`): one row changed, or none. Put
/// [`decline_subtree`] with `seq` before it.
pub fn lift_hold(local: &str, seq: i64) -> Stmt {
    stmt!("DELETE FROM mail_holds WHERE local = ?1 AND seq = ?2", local, seq)
}

/// Declines every pending draft sent by `local` or an agent below it (of the tree under `root`):
/// the holds over them changed, so they are judged again when they are sent again
/// (docs/SPEC.md §7c). Runs in the batch that changes the hold.
/// With `only_if` (a hold's `seq`), only while that hold is still there: a lift that lost a race
/// declines nothing.
pub fn decline_subtree(local: &str, root: &str, now: i64, only_if: Option<i64>) -> Stmt {
    stmt!(
        "UPDATE drafts SET state = 'declined', decided_at = ?3, decided_by = 'the house', \
                note = 'the holds over its sender changed: send it as a new envelope (a new id) to have it judged anew' \
         WHERE root = ?2 AND state = 'pending' \
           AND (?4 IS NULL OR EXISTS (SELECT 1 FROM mail_holds WHERE local = ?1 AND seq = ?4)) \
           AND (substr(sender, 1, instr(sender, '@') - 1) = ?1 \
                OR substr(substr(sender, 1, instr(sender, '@') - 1), instr(sender, '@') - 1 - length(?1)) = '.' || ?1)",
        local,
        root,
        now,
        only_if
    )
}

/// A held envelope, and one ask per approver.
#[derive(Debug)]
pub struct NewDraft<'a> {
    pub id: &'a str,
    pub root: &'a str,
    pub sender: &'a str,
    pub envelope: &'a str,
    pub sha256: &'a str,
    pub readers: Option<String>,
    pub approvers: &'a [String],
    pub held_at: i64,
    pub expires: i64,
    /// The version of the tree's holds the envelope was judged against.
    pub version: &'a str,
    /// The most drafts (and sends: the outbox's cap) a tree holds in a minute.
    pub cap: i64,
}

/// The draft and its asks, in one batch. The draft is inserted only while the tree's holds are
/// the version it was judged against (none inserted otherwise: the caller answers that the holds
/// changed), and counts itself in its tree's minute (`drafts_rate`); the `drafts_bound` trigger
/// and the id's key refuse the batch whole. Each ask is inserted only beside its draft.
pub fn hold_draft(d: &NewDraft<'_>) -> Vec<Stmt> {
    const MINUTE: i64 = 60_000;
    let minute = d.held_at.div_euclid(MINUTE).saturating_mul(MINUTE);
    let asks = nyx5_proto::Value::Array(d.approvers.iter().map(|a| a.as_str().into()).collect()).canonical_string();
    let mut stmts = vec![stmt!(
        "INSERT INTO drafts (id, root, sender, envelope, bytes, sha256, readers, asks, state, held_at, expires, rate_n) \
         SELECT ?1, ?2, ?3, ?4, ?13, ?5, ?6, ?7, 'pending', ?8, ?9, \
                (SELECT CASE WHEN count(*) < ?11 THEN count(*) + 1 ELSE 0 END FROM drafts \
                 WHERE root = ?2 AND held_at >= ?12 AND held_at < ?12 + 60000) \
         WHERE (SELECT coalesce(max(seq), 0) || ':' || count(*) FROM mail_holds WHERE root = ?2) = ?10",
        d.id,
        d.root,
        d.sender,
        d.envelope,
        d.sha256,
        d.readers.clone(),
        asks,
        d.held_at,
        d.expires,
        d.version,
        d.cap,
        minute,
        i64::try_from(d.envelope.len()).unwrap_or(i64::MAX)
    )];
    stmts.extend(d.approvers.iter().map(|a| {
        stmt!(
            "INSERT INTO draft_asks (approver, id) SELECT ?1, ?2 \
             WHERE EXISTS (SELECT 1 FROM drafts WHERE id = ?2 AND held_at = ?3 AND sha256 = ?4 AND state = 'pending')",
            a.as_str(),
            d.id,
            d.held_at,
            d.sha256
        )
    }));
    stmts
}

/// A draft's columns: all of them, or (`listed`, of `drafts AS d`) what a list shows, with the
/// envelope's `to` and `type` instead of the envelope (a list never loads up to 100 envelopes).
macro_rules! draft_columns {
    () => {
        "id, root, sender, envelope, sha256, readers, asks, approved_by, state, held_at, expires, decided_at, \
         decided_by, note"
    };
    (listed) => {
        "d.id, d.root, d.sender, json_extract(d.envelope, '$.to') AS to_json, json_extract(d.envelope, '$.type') AS kind, \
         d.sha256, d.asks, d.approved_by, d.state, d.held_at, d.expires, d.decided_at, d.decided_by, d.note"
    };
}

/// The draft `id`, if the house keeps it.
pub async fn draft<D: Db>(db: &D, id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!(concat!("SELECT ", draft_columns!(), " FROM drafts WHERE id = ?1"), id)).await
}

/// The drafts `approver` is asked to decide, those waiting first, then newest first (at most
/// [`LIST_MAX`]).
pub async fn asked_of<D: Db>(db: &D, approver: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            concat!(
                "SELECT ",
                draft_columns!(listed),
                " FROM draft_asks AS a JOIN drafts AS d ON d.id = a.id WHERE a.approver = ?1 \
                 ORDER BY d.state = 'pending' DESC, d.held_at DESC LIMIT ?2"
            ),
            approver,
            LIST_MAX
        ),
    )
    .await
}

/// The drafts `sender` made, newest first (at most [`LIST_MAX`]).
pub async fn sent_by<D: Db>(db: &D, root: &str, sender: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            concat!(
                "SELECT ",
                draft_columns!(listed),
                " FROM drafts AS d WHERE d.root = ?1 AND d.sender = ?2 ORDER BY d.held_at DESC LIMIT ?3"
            ),
            root,
            sender,
            LIST_MAX
        ),
    )
    .await
}

/// An approver's yes: `approved_by` goes from `before` (as read) to `after`; when that is every
/// ask (`last`), the draft is approved. Changes one row, or none when the draft changed, was
/// decided, or expired meanwhile.
pub fn approve(id: &str, before: &str, after: &str, last: bool, by: &str, now: i64) -> Stmt {
    stmt!(
        "UPDATE drafts SET approved_by = ?3, \
                state = CASE WHEN ?4 THEN 'approved' ELSE state END, \
                decided_at = CASE WHEN ?4 THEN ?6 END, \
                decided_by = CASE WHEN ?4 THEN ?5 END \
         WHERE id = ?1 AND state = 'pending' AND approved_by = ?2 AND expires > ?6",
        id,
        before,
        after,
        i64::from(last),
        by,
        now
    )
}

/// A no, by an approver or the sender: changes one row, or none when the draft was decided or
/// expired meanwhile.
pub fn decline(id: &str, by: &str, note: Option<&str>, now: i64) -> Stmt {
    stmt!(
        "UPDATE drafts SET state = 'declined', decided_at = ?3, decided_by = ?2, note = ?4 \
         WHERE id = ?1 AND state = 'pending' AND expires > ?3",
        id,
        by,
        now,
        note
    )
}

/// Removes up to `limit` drafts (and their asks) that expired more than [`DRAFT_KEEP_MS`]
/// before `now`, oldest first.
pub fn purge(now: i64, limit: i64) -> [Stmt; 2] {
    let before = now.saturating_sub(DRAFT_KEEP_MS);
    [
        stmt!(
            "DELETE FROM draft_asks WHERE id IN (SELECT id FROM drafts WHERE expires < ?1 ORDER BY expires LIMIT ?2)",
            before,
            limit
        ),
        stmt!(
            "DELETE FROM drafts WHERE id IN (SELECT id FROM drafts WHERE expires < ?1 ORDER BY expires LIMIT ?2)",
            before,
            limit
        ),
    ]
}
