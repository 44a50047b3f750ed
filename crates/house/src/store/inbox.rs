//! Reading and acknowledging a mailbox (the writes that fill it are in `store::mailbox`), and
//! dropping the bodies of envelopes acknowledged long enough ago.

use nyx5_proto::Error;

use crate::ports::{Db, Row, Stmt};
use crate::stmt;

use super::{mailbox, query};

/// What one page may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageBounds {
    /// Envelopes after this `seq`.
    pub after: i64,
    /// At most this many envelopes.
    pub limit: i64,
    /// At most this many bytes of envelopes, each counted with `overhead` more for what wraps it;
    /// the first envelope comes whatever its size, so paging always moves on.
    pub bytes: i64,
    pub overhead: i64,
    /// The size assumed for a row whose size was not recorded (the house's own notices).
    pub unrecorded: i64,
}

/// The next unacknowledged envelopes after `after` (an `n`, see [`mailbox::SEQ_BITS`]), oldest
/// first: at most `limit`, and no more than fit in `bytes` (but at least one). Each row has
/// `seq` (the `n`), `envelope`, `received_at`, `stamp`, and `candidates`, how many envelopes (up
/// to `limit`) were waiting after `after`: fewer rows than that means the bytes cut the page
/// short. The candidates are a walk along the mailbox's own range of the table's key, which holds
/// waiting envelopes only (acknowledged ones have moved below zero); their sizes and the cut come
/// from the columns before the text, so an envelope's text is read only once it is in the page
/// and a mailbox of 1 MiB envelopes costs one page, not `limit` envelopes. The walk also names
/// `local` (see [`page_query`]), which costs no read, the row being in hand, and keeps a row that
/// reached another mailbox's range by any way but the engine's insert (`mailbox_in_range`
/// refuses those) out of this agent's page.
pub async fn page<D: Db>(db: &D, local: &str, b: PageBounds) -> Result<Vec<Row>, Error> {
    query(db, page_query(local, b)).await
}

/// [`page`]'s statement. The walk names `local` as `+c.local`: the unary plus keeps SQLite from
/// taking the `(local, envelope_id)` index for it, which would read every row the agent ever had
/// and sort them, where the key's range reads only what waits (`schema.rs` checks the plan).
pub fn page_query(local: &str, b: PageBounds) -> Stmt {
    stmt!(
        "WITH box AS (SELECT a.mbox << 30 AS base FROM agents AS a WHERE a.local = ?)
         SELECT p.seq - p.base AS seq, p.candidates AS candidates, m.envelope AS envelope,
                m.received_at AS received_at, m.stamp AS stamp
         FROM (SELECT seq, base, sum(size) OVER (ORDER BY seq) AS running, row_number() OVER (ORDER BY seq) AS n,
                      count(*) OVER () AS candidates
               FROM (SELECT c.seq AS seq, x.base AS base, coalesce(c.bytes, ?) + ? AS size
                     FROM box AS x CROSS JOIN mailbox AS c
                     WHERE c.seq > x.base + ? AND c.seq <= x.base + ? AND +c.local = ?
                     ORDER BY c.seq LIMIT ?)) AS p
         CROSS JOIN mailbox AS m ON m.seq = p.seq
         WHERE p.n = 1 OR p.running <= ?
         ORDER BY p.seq",
        local,
        b.unrecorded,
        b.overhead,
        b.after.clamp(0, mailbox::SEQ_MAX),
        mailbox::SEQ_MAX,
        local,
        b.limit,
        b.bytes
    )
}

/// Acknowledges the envelopes `ids` (a JSON array of distinct ids) in `local`'s mailbox: the
/// first statement takes them off the mailbox's count of waiting envelopes; the second marks
/// them and moves them to the mirror of the mailbox's range below zero, out of every page's way.
/// Their bytes stay counted until [`drop_bodies`] drops them: a mailbox's byte quota bounds what
/// it stores, and an agent that acknowledges at once must not open it to an unending stream. A
/// second ack changes nothing; the second statement's row count is how many were newly
/// acknowledged.
pub fn ack(local: &str, ids: &str, now: i64) -> [Stmt; 2] {
    [
        stmt!(
            "UPDATE mailbox_usage SET
               envelopes = envelopes - (SELECT count(m.bytes) FROM json_each(?) AS j CROSS JOIN mailbox AS m
                                        ON m.local = ? AND m.envelope_id = j.value WHERE m.acked_at IS NULL)
             WHERE local = ?",
            ids,
            local,
            local
        ),
        stmt!(
            "UPDATE mailbox SET acked_at = ?, seq = -seq
             WHERE seq IN (SELECT m.seq FROM json_each(?) AS j CROSS JOIN mailbox AS m
                           ON m.local = ? AND m.envelope_id = j.value WHERE m.acked_at IS NULL)",
            now,
            ids,
            local
        ),
    ]
}

/// Drops the bodies of at most `limit` envelopes acknowledged before `before`, oldest first: the
/// first statement takes their bytes off their mailboxes' usage, the second empties the text and
/// sets `bytes` to 0; the row (and so its id, for duplicates) stays. Both pick the same rows (same
/// order, same limit) and run in one batch.
pub fn drop_bodies(before: i64, limit: i64) -> [Stmt; 2] {
    [
        stmt!(
            "WITH dropped AS (SELECT local, bytes FROM mailbox
                              WHERE acked_at IS NOT NULL AND bytes IS NOT 0 AND acked_at < ?
                              ORDER BY acked_at, seq LIMIT ?)
             UPDATE mailbox_usage SET
               bytes = bytes - (SELECT coalesce(sum(dropped.bytes), 0) FROM dropped WHERE dropped.local = mailbox_usage.local)
             WHERE local IN (SELECT local FROM dropped)",
            before,
            limit
        ),
        stmt!(
            "UPDATE mailbox SET envelope = '', bytes = 0
             WHERE seq IN (SELECT seq FROM mailbox WHERE acked_at IS NOT NULL AND bytes IS NOT 0 AND acked_at < ?
                           ORDER BY acked_at, seq LIMIT ?)",
            before,
            limit
        ),
    ]
}
