//! Mailboxes and their lists: what accepting an envelope reads and writes (spec §7, §9).
//!
//! Lists of locals and entries are bound as one JSON array and read with `json_each`, so a
//! statement's SQL stays fixed whatever the number of recipients.

use nyx5_proto::Error;

use super::query;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// `local`, `card`, `webhook` of the agents named in `locals` (a JSON array).
pub async fn recipients<D: Db>(db: &D, locals: &str) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT local, card, webhook FROM agents WHERE local IN (SELECT value FROM json_each(?))", locals))
        .await
}

/// `local`, `sender` of the mailbox rows that already hold `envelope_id`, among `locals`.
pub async fn holding<D: Db>(db: &D, envelope_id: &str, locals: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT local, sender FROM mailbox
             WHERE local IN (SELECT value FROM json_each(?)) AND envelope_id = ?",
            locals,
            envelope_id
        ),
    )
    .await
}

/// `local`, `kind` of the list entries among `locals` that match one of `entries`.
pub async fn list_hits<D: Db>(db: &D, locals: &str, entries: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT DISTINCT local, kind FROM lists
             WHERE local IN (SELECT value FROM json_each(?)) AND entry IN (SELECT value FROM json_each(?))",
            locals,
            entries
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
