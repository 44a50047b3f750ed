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
/// `envelope_id` (or NULL); `blocked` and `allowed`, whether its block or allow list holds one of
/// `entries` (1 or 0); and `rate_count`, the count of its rate window
/// `bucket_prefix || local || bucket_suffix` for minute `window` (or NULL).
pub async fn inbound_facts<D: Db>(
    db: &D,
    locals: &str,
    envelope_id: &str,
    entries: &[String; 2],
    bucket_prefix: &str,
    bucket_suffix: &str,
    window: i64,
) -> Result<Vec<Row>, Error> {
    let [address, domain] = entries;
    query(
        db,
        stmt!(
            "SELECT a.local AS local, a.card AS card, a.webhook AS webhook,
               (SELECT m.sender FROM mailbox AS m WHERE m.local = a.local AND m.envelope_id = ?) AS holder,
               EXISTS (SELECT 1 FROM lists AS l WHERE l.local = a.local AND l.kind = 'block' AND l.entry = ?)
                 OR EXISTS (SELECT 1 FROM lists AS l WHERE l.local = a.local AND l.kind = 'block' AND l.entry = ?)
                 AS blocked,
               EXISTS (SELECT 1 FROM lists AS l WHERE l.local = a.local AND l.kind = 'allow' AND l.entry = ?)
                 OR EXISTS (SELECT 1 FROM lists AS l WHERE l.local = a.local AND l.kind = 'allow' AND l.entry = ?)
                 AS allowed,
               (SELECT r.count FROM rate_windows AS r WHERE r.bucket = ? || a.local || ? AND r.window = ?)
                 AS rate_count
             FROM json_each(?) AS j CROSS JOIN agents AS a ON a.local = j.value",
            envelope_id,
            address.as_str(),
            domain.as_str(),
            address.as_str(),
            domain.as_str(),
            bucket_prefix,
            bucket_suffix,
            window,
            locals
        ),
    )
    .await
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

/// Puts an envelope in a mailbox. Zero rows changed: it was there already (a duplicate).
pub fn insert(local: &str, envelope_id: &str, sender: &str, envelope: &str, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO mailbox (local, envelope_id, sender, envelope, received_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (local, envelope_id) DO NOTHING",
        local,
        envelope_id,
        sender,
        envelope,
        now
    )
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
