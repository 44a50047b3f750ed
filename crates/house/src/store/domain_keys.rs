//! Domain key rotation (spec §4.1): stored agent cards still certified by a previous domain key,
//! and the guarded update that certifies them again.

use nyx5_proto::Error;

use super::query;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// The setting that holds where the last pass of [`stale`] stopped (an agent's local part).
pub const RECERTIFY_CURSOR: &str = "recertify_after";

/// Up to `limit` stored cards certified by one of `previous` (a JSON array of domain keys in
/// base64url), in order of local part after the cursor [`RECERTIFY_CURSOR`]: `local`, `card`.
/// A card the house cannot certify again (its certification does not verify: changed behind its
/// back) is passed over by the next pass rather than holding a place in every one.
pub async fn stale<D: Db>(db: &D, previous: &str, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT local, card FROM agents
             WHERE json_extract(card, '$.certification.kid') IN (SELECT value FROM json_each(?))
               AND local > coalesce((SELECT value FROM settings WHERE name = ?), '')
             ORDER BY local LIMIT ?",
            previous,
            RECERTIFY_CURSOR,
            limit
        ),
    )
    .await
}

/// Moves the cursor of [`stale`] to `after` (the last local part a pass read), or back to the
/// start (`None`: the pass read fewer than it could, so the scan went round).
pub fn move_cursor(after: Option<&str>, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO settings (name, value, created_at) VALUES (?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE value <> excluded.value",
        RECERTIFY_CURSOR,
        after.unwrap_or(""),
        now
    )
}

/// Replaces `local`'s card by the same card certified again, only while it is still `old` (an
/// update in between wins; the next tick looks again).
pub fn recertify(local: &str, old: &str, new: &str, now: i64) -> Stmt {
    stmt!("UPDATE agents SET card = ?, updated_at = ? WHERE local = ? AND card = ?", new, now, local, old)
}
