//! Mailboxes and their lists: what accepting an envelope reads and writes (spec §7, §9).
//!
//! Lists of locals are bound as one JSON array and read with `json_each`, so a statement's SQL
//! stays fixed whatever the number of recipients. The array is the outer loop of a join (never an
//! `IN (SELECT … json_each)`, which builds a temporary index on every run), and everything else
//! is a primary-key lookup per recipient.

use nyx5_proto::Error;

use super::query;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// What accepting an envelope needs to know about each recipient, in one statement: one row per
/// agent named in `locals` (a JSON array of distinct locals; unknown ones have no row) with its
/// `local`, `card`, `webhook`; `holder`, the sender of the mailbox row that already holds
/// `envelope_id` (or NULL); `blocked`, whether its block list holds one of `blocks` (a JSON array:
/// the sender's address, its domain and the domain's parents down to its site), and `allowed`,
/// whether its allow list holds one of `allows` (1 or 0); `rate_count`, the count of its rate
/// window `bucket_prefix || local || bucket_suffix` for minute `window` (or NULL); and
/// `held_envelopes`, `held_bytes`, what its mailbox holds unacknowledged (NULL: nothing yet).
pub async fn inbound_facts<D: Db>(db: &D, l: &Lookup<'_>) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT a.local AS local, a.card AS card, a.webhook AS webhook,
               (SELECT m.sender FROM mailbox AS m WHERE m.local = a.local AND m.envelope_id = ?) AS holder,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'block' AND l.entry = e.value) AS blocked,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'allow' AND l.entry = e.value) AS allowed,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'allow' AND l.entry = e.value) AS voucher_allowed,
               (SELECT r.count FROM rate_windows AS r WHERE r.bucket = ? || a.local || ? AND r.window = ?)
                 AS rate_count,
               u.envelopes AS held_envelopes, u.bytes AS held_bytes
             FROM json_each(?) AS j CROSS JOIN agents AS a ON a.local = j.value
             LEFT JOIN mailbox_usage AS u ON u.local = a.local",
            l.envelope_id,
            l.blocks,
            l.allows,
            l.vouchers,
            l.bucket_prefix,
            l.bucket_suffix,
            l.window,
            l.locals
        ),
    )
    .await
}

/// What [`inbound_facts`] looks up.
#[derive(Debug, Clone, Copy)]
pub struct Lookup<'a> {
    /// A JSON array of distinct locals.
    pub locals: &'a str,
    pub envelope_id: &'a str,
    /// A JSON array of the entries a block list matches the sender by.
    pub blocks: &'a str,
    /// A JSON array of the entries an allow list matches the sender by.
    pub allows: &'a str,
    /// The same for the voucher of a vouch the envelope carries (`[]` without one).
    pub vouchers: &'a str,
    pub bucket_prefix: &'a str,
    pub bucket_suffix: &'a str,
    pub window: i64,
}

/// The stamp's entry id beside the stamped envelope in `local`'s mailbox.
pub fn set_stamp(local: &str, envelope_id: &str, entry_id: &str) -> Stmt {
    stmt!("UPDATE mailbox SET stamp = ? WHERE local = ? AND envelope_id = ?", entry_id, local, envelope_id)
}

/// `bucket`, `count` of the rate windows named in `buckets` for minute `window`.
pub async fn rate_counts<D: Db>(db: &D, buckets: &str, window: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT bucket, count FROM rate_windows WHERE window = ? AND bucket IN (SELECT value FROM json_each(?))",
            window,
            buckets
        ),
    )
    .await
}

/// `local`, `envelopes`, `bytes` held unacknowledged by the mailboxes named in `locals` (a JSON
/// array); a mailbox that never held anything has no row.
pub async fn usage<D: Db>(db: &D, locals: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT u.local AS local, u.envelopes AS envelopes, u.bytes AS bytes
             FROM json_each(?) AS j CROSS JOIN mailbox_usage AS u ON u.local = j.value",
            locals
        ),
    )
    .await
}

/// A mailbox's quota: the most envelopes and bytes it holds unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub max_envelopes: i64,
    pub max_bytes: i64,
}

/// A mailbox's waiting envelopes have `seq`s of their own range, `(mbox << SEQ_BITS) + n`, and
/// acknowledged ones its mirror below zero: `agents.mbox` numbers the mailbox and `n`, from 1, is
/// the `seq` its pages show (migration 0013). Keeping a mailbox's waiting envelopes together in
/// the table's own key is what lets a page do without an index of its own, which every accepted
/// envelope would write. 2^23 − 1 mailboxes of 2^30 envelopes keep every whole `seq` within
/// 2^53, a number D1 can hand to JavaScript exactly.
pub const SEQ_BITS: u32 = 30;
/// The highest `n` of a mailbox.
pub const SEQ_MAX: i64 = (1 << SEQ_BITS) - 1;

/// SQL, over an `agents AS a` row: the `seq` of the next envelope of `a`'s mailbox, its highest
/// `n`, waiting or acknowledged, plus one (rows are never deleted, so `n` only grows). Two seeks
/// down the table's key.
macro_rules! next_seq {
    () => {
        "(a.mbox << 30) + 1 + max(
           coalesce((SELECT m.seq FROM mailbox AS m WHERE m.seq <= (a.mbox << 30) + 1073741823
                     ORDER BY m.seq DESC LIMIT 1), 0) - (a.mbox << 30),
           coalesce((SELECT -m.seq FROM mailbox AS m WHERE m.seq >= -((a.mbox << 30) + 1073741823)
                     ORDER BY m.seq LIMIT 1), 0) - (a.mbox << 30),
           0)"
    };
}
pub(crate) use next_seq;

/// Puts an envelope in a mailbox, counted towards its quota: two statements. The first counts it
/// in `mailbox_usage` unless the mailbox holds that id already, and fails the batch
/// (`constraint::MAILBOX_QUOTA`) when that would pass `quota`; the second inserts it, changing
/// zero rows when it was there already (a duplicate). The row count of the second tells which.
/// Four rows written in all (D1 counts index entries): the usage row, the envelope's row and its
/// `UNIQUE (local, envelope_id)` entry, here; the sender's rate window, beside it.
pub fn insert(local: &str, envelope_id: &str, sender: &str, envelope: &str, now: i64, quota: Quota) -> [Stmt; 2] {
    let bytes = i64::try_from(envelope.len()).unwrap_or(i64::MAX);
    [
        stmt!(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes)
             SELECT ?, 1, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM mailbox WHERE local = ? AND envelope_id = ?)
             ON CONFLICT (local) DO UPDATE SET envelopes = envelopes + 1, bytes = bytes + excluded.bytes,
               max_envelopes = excluded.max_envelopes, max_bytes = excluded.max_bytes",
            local,
            bytes,
            quota.max_envelopes,
            quota.max_bytes,
            local,
            envelope_id
        ),
        stmt!(
            concat!(
                "INSERT INTO mailbox (seq, local, envelope_id, sender, received_at, bytes, envelope)
                 SELECT ",
                next_seq!(),
                ", a.local, ?, ?, ?, ?, ? FROM agents AS a WHERE a.local = ?
                 ON CONFLICT (local, envelope_id) DO NOTHING"
            ),
            envelope_id,
            sender,
            now,
            bytes,
            envelope,
            local
        ),
    ]
}

/// `kind`, `entry` of an agent's lists, in order.
pub async fn lists<D: Db>(db: &D, local: &str) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT kind, entry FROM lists WHERE local = ? ORDER BY kind, entry", local)).await
}

/// Adds a list entry unless the list already holds `cap` entries (then zero rows change).
pub fn add_entry(local: &str, kind: &str, entry: &str, cap: i64) -> Stmt {
    stmt!(
        "INSERT INTO lists (local, kind, entry)
         SELECT ?, ?, ? WHERE (SELECT count(*) FROM lists WHERE local = ? AND kind = ?) < ?
         ON CONFLICT (local, kind, entry) DO NOTHING",
        local,
        kind,
        entry,
        local,
        kind,
        cap
    )
}

pub fn remove_entry(local: &str, kind: &str, entry: &str) -> Stmt {
    stmt!("DELETE FROM lists WHERE local = ? AND kind = ? AND entry = ?", local, kind, entry)
}
