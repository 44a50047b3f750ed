//! Attachments' records (docs/SPEC.md "Attachments"; migration 0031): what the house keeps of
//! a sealed file beside its parts in the blob store.

use nyx5_proto::Error;

use super::{one, query};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// The new attachment `id` of `owner`, when the owner keeps fewer than `max_count` holding fewer
/// than `max_bytes` with it — every one not yet forgotten, ended or not, since its parts stay until
/// the purge removes them: one statement, which inserts nothing past the quota.
#[allow(clippy::too_many_arguments)]
pub fn create(
    id: &str,
    owner: &str,
    (bytes, sha256, parts): (i64, &str, i64),
    readers: &str,
    now: i64,
    expires: i64,
    (max_count, max_bytes): (i64, i64),
) -> Stmt {
    stmt!(
        "INSERT INTO attachments (id, owner, bytes, sha256, parts, readers, created, expires)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8
          WHERE (SELECT count(*) < ?9 AND coalesce(sum(bytes), 0) + ?3 <= ?10
                   FROM attachments WHERE owner = ?2)",
        id,
        owner,
        bytes,
        sha256,
        parts,
        readers,
        now,
        expires,
        max_count,
        max_bytes
    )
}

/// Marks part `n` of `owner`'s live attachment `id` stored (one row, or none: gone, expired,
/// not the owner's, or no such part).
pub fn stored(id: &str, owner: &str, n: i64, now: i64) -> Stmt {
    stmt!(
        "UPDATE attachments SET got = got | (1 << ?3)
          WHERE id = ?1 AND owner = ?2 AND expires > ?4 AND ?3 >= 0 AND ?3 < parts",
        id,
        owner,
        n,
        now
    )
}

/// Attachment `id` while it lives: `owner`, `bytes`, `sha256`, `parts`, `got`, `readers`,
/// `created`, `expires`.
pub async fn get<D: Db>(db: &D, id: &str, now: i64) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "SELECT owner, bytes, sha256, parts, got, readers, created, expires
               FROM attachments WHERE id = ?1 AND expires > ?2",
            id,
            now
        ),
    )
    .await
}

/// The attachments expired before `before`, oldest first, at most `limit`: `id`, `parts`.
pub async fn expired<D: Db>(db: &D, before: i64, limit: i64) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT id, parts FROM attachments WHERE expires < ?1 ORDER BY expires LIMIT ?2", before, limit))
        .await
}

/// Forgets the attachments listed (`ids`, a JSON array) once their parts are gone.
pub fn forget(ids: &str) -> Stmt {
    stmt!("DELETE FROM attachments WHERE id IN (SELECT value FROM json_each(?1))", ids)
}

/// `owner`'s attachment `id` (any life), to forget it: one row, or none.
pub async fn owned<D: Db>(db: &D, id: &str, owner: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT parts FROM attachments WHERE id = ?1 AND owner = ?2", id, owner)).await
}

/// Ends `owner`'s attachment `id` now (before its parts go: a part written after this finds no
/// record to mark).
pub fn end(id: &str, owner: &str) -> Stmt {
    stmt!("UPDATE attachments SET expires = 0 WHERE id = ?1 AND owner = ?2", id, owner)
}
