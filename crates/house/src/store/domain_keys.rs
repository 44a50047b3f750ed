//! Domain key rotation (spec §4.1): stored agent cards still certified by a previous domain key,
//! and the guarded update that certifies them again.

use nyx5_proto::Error;

use super::query;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// Up to `limit` stored cards certified by one of `previous` (a JSON array of domain keys in
/// base64url): `local`, `card`.
pub async fn stale<D: Db>(db: &D, previous: &str, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT local, card FROM agents
             WHERE json_extract(card, '$.certification.kid') IN (SELECT value FROM json_each(?))
             ORDER BY local LIMIT ?",
            previous,
            limit
        ),
    )
    .await
}

/// Replaces `local`'s card by the same card certified again, only while it is still `old` (an
/// update in between wins; the next tick looks again).
pub fn recertify(local: &str, old: &str, new: &str, now: i64) -> Stmt {
    stmt!("UPDATE agents SET card = ?, updated_at = ? WHERE local = ? AND card = ?", new, now, local, old)
}
