//! Reading and acknowledging a mailbox (the writes that fill it are in `store::mailbox`).

use nyx5_proto::Error;

use crate::ports::{Db, Row, Stmt};
use crate::stmt;

use super::query;

/// The next `limit` unacknowledged envelopes after `after` (a `seq`), oldest first. The partial
/// index `mailbox_pending (local, seq)` makes this cost the page, not the mailbox.
pub async fn page<D: Db>(db: &D, local: &str, after: i64, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT seq, envelope, received_at FROM mailbox
             WHERE local = ? AND acked_at IS NULL AND seq > ? ORDER BY seq LIMIT ?",
            local,
            after,
            limit
        ),
    )
    .await
}

/// Marks one envelope acknowledged; a second ack changes nothing.
pub fn ack(local: &str, envelope_id: &str, now: i64) -> Stmt {
    stmt!(
        "UPDATE mailbox SET acked_at = ? WHERE local = ? AND envelope_id = ? AND acked_at IS NULL",
        now,
        local,
        envelope_id
    )
}
