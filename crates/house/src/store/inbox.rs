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
/// short. The candidates are a walk along the mailbox's own range of the table's key, from past
/// `after` and the mailbox's `floor` (below which all is acknowledged); their sizes and the cut
/// come from the columns before the text, so an envelope's text is read only once it is in the
/// page and a mailbox of 1 MiB envelopes costs one page, not `limit` envelopes.
pub async fn page<D: Db>(db: &D, local: &str, b: PageBounds) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "WITH box AS (SELECT a.mbox << 40 AS base, max(?, coalesce(u.floor, 0)) AS past
                          FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local WHERE a.local = ?)
             SELECT p.seq - p.base AS seq, p.candidates AS candidates, m.envelope AS envelope,
                    m.received_at AS received_at, m.stamp AS stamp
             FROM (SELECT seq, base, sum(size) OVER (ORDER BY seq) AS running, row_number() OVER (ORDER BY seq) AS n,
                          count(*) OVER () AS candidates
                   FROM (SELECT c.seq AS seq, x.base AS base, coalesce(c.bytes, ?) + ? AS size
                         FROM box AS x CROSS JOIN mailbox AS c
                         WHERE c.seq > x.base + x.past AND c.seq <= x.base + ? AND c.acked_at IS NULL
                         ORDER BY c.seq LIMIT ?)) AS p
             CROSS JOIN mailbox AS m ON m.seq = p.seq
             WHERE p.n = 1 OR p.running <= ?
             ORDER BY p.seq",
            b.after.clamp(0, mailbox::SEQ_MAX),
            local,
            b.unrecorded,
            b.overhead,
            mailbox::SEQ_MAX,
            b.limit,
            b.bytes
        ),
    )
    .await
}

/// Acknowledges the envelopes `ids` (a JSON array of distinct ids) in `local`'s mailbox: the
/// first statement takes them off the mailbox's count of waiting envelopes and moves its `floor`
/// up to just before the first envelope still waiting (or to its last, when none is); the second
/// marks them. Their bytes stay counted until [`drop_bodies`] drops them: a mailbox's byte quota
/// bounds what it stores, and an agent that acknowledges at once must not open it to an unending
/// stream. A second ack changes nothing; the second statement's row count is how many were newly
/// acknowledged. The floor's walk reads each acknowledged row it passes once, ever.
pub fn ack(local: &str, ids: &str, now: i64) -> [Stmt; 2] {
    [
        stmt!(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, floor)
             SELECT a.local, 0, 0, 0, 0,
                    coalesce((SELECT w.seq - 1 FROM mailbox AS w
                              WHERE w.seq > (a.mbox << 40) + coalesce(u.floor, 0) AND w.seq <= (a.mbox << 40) + ?
                                AND w.acked_at IS NULL AND w.envelope_id NOT IN (SELECT value FROM json_each(?))
                              ORDER BY w.seq LIMIT 1),
                             max(coalesce((SELECT l.seq FROM mailbox AS l WHERE l.seq <= (a.mbox << 40) + ?
                                           ORDER BY l.seq DESC LIMIT 1), 0), a.mbox << 40)) - (a.mbox << 40)
             FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local WHERE a.local = ?
             ON CONFLICT (local) DO UPDATE SET
               envelopes = envelopes - (SELECT count(m.bytes) FROM json_each(?) AS j CROSS JOIN mailbox AS m
                                        ON m.local = ? AND m.envelope_id = j.value WHERE m.acked_at IS NULL),
               floor = excluded.floor",
            mailbox::SEQ_MAX,
            ids,
            mailbox::SEQ_MAX,
            local,
            ids,
            local
        ),
        stmt!(
            "UPDATE mailbox SET acked_at = ?
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
