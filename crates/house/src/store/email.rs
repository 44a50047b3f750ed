//! The email bridge's SQL: what receiving an email reads about its recipient, and the separate
//! write path for unsigned email envelopes (signed envelopes go through `store::mailbox`).

use nyx5_proto::Error;

use super::one;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// One row for agent `local` (none if there is no such agent): its `card`; `holder`, the sender
/// of the mailbox row that already holds `envelope_id` (or NULL); `blocked` and `allowed`, whether
/// its block or allow list holds one of `entries` (a JSON array of addresses and domains); and
/// `rate_count`, the count of rate window `bucket` in minute `window` (or NULL).
pub async fn facts<D: Db>(
    db: &D,
    local: &str,
    envelope_id: &str,
    entries: &str,
    bucket: &str,
    window: i64,
) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "SELECT a.card AS card,
               (SELECT m.sender FROM mailbox AS m WHERE m.local = a.local AND m.envelope_id = ?) AS holder,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'block' AND l.entry = e.value) AS blocked,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'allow' AND l.entry = e.value) AS allowed,
               (SELECT r.count FROM rate_windows AS r WHERE r.bucket = ? AND r.window = ?) AS rate_count
             FROM agents AS a WHERE a.local = ?",
            envelope_id,
            entries,
            entries,
            bucket,
            window,
            local
        ),
    )
    .await
}

/// Puts an unsigned email envelope in a mailbox; `sender` is the gateway address. Zero rows
/// changed: the mailbox holds that id already (a redelivered email).
pub fn insert_unsigned(local: &str, envelope_id: &str, sender: &str, envelope: &str, now: i64) -> Stmt {
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
