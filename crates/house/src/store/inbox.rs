//! Reading and acknowledging a mailbox (the writes that fill it are in `store::mailbox`), and
//! dropping the bodies of envelopes acknowledged long enough ago.

use nyx5_proto::Error;

use crate::ports::{Db, Place, Row, Stmt};
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
/// short. The candidates are a walk along the mailbox's own range of the table's key from past its
/// watermark, which holds waiting envelopes only (acknowledged ones are at or below the
/// watermark, or have moved below zero: migration 0021); their sizes and the cut come
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
        "WITH box AS (SELECT a.mbox << 30 AS base, coalesce(u.acked_through, 0) AS w
                     FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local WHERE a.local = ?)
         SELECT p.seq - p.base AS seq, p.candidates AS candidates, m.envelope AS envelope,
                m.received_at AS received_at, m.stamp AS stamp
         FROM (SELECT seq, base, sum(size) OVER (ORDER BY seq) AS running, row_number() OVER (ORDER BY seq) AS n,
                      count(*) OVER () AS candidates
               FROM (SELECT c.seq AS seq, x.base AS base, coalesce(c.bytes, ?) + ? AS size
                     FROM box AS x CROSS JOIN mailbox AS c
                     WHERE c.seq > x.base + max(?, x.w) AND c.seq <= x.base + ? AND +c.local = ?
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
    .in_mailbox(local)
}

/// Whether `local`'s mailbox holds mail after `seq` `after` not yet acknowledged: a waiting
/// read's recheck ([`crate::mailbox::Mailbox::page_waiting`]). Always one row, mail or not: on a
/// sharded house an empty answer is taken for a mailbox that moved and asked again elsewhere, and
/// a recheck must cost one query (a mailbox that moves while a read waits is found by the
/// follower's next read, whose page asks again).
pub async fn waiting<D: Db>(db: &D, local: &str, after: i64) -> Result<bool, Error> {
    let rows = query(
        db,
        stmt!(
            "SELECT EXISTS (SELECT 1 FROM mailbox AS c,
                                  (SELECT a.mbox << 30 AS base, coalesce(u.acked_through, 0) AS w
                                     FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local
                                    WHERE a.local = ?1) AS x
                             WHERE c.seq > x.base + max(?2, x.w) AND c.seq <= x.base + ?3 AND +c.local = ?1) AS waiting",
            local,
            after.clamp(0, mailbox::SEQ_MAX),
            mailbox::SEQ_MAX
        )
        .in_mailbox(local),
    )
    .await?;
    Ok(rows.first().and_then(|r| r.int("waiting")).unwrap_or(0) != 0)
}

/// What acknowledging `ids` (a JSON array of distinct ids) in `local`'s mailbox starts from: one
/// row per envelope among them still waiting, with its `id`, `n` and `counted` (1 when it counts
/// towards the quota), and on every row the mailbox's watermark `w` and `other`, the `n` of the
/// oldest envelope waiting that `ids` does not name (NULL: none). No row: none of them waits.
/// `other` is a walk of the mailbox's range from its watermark that stops at the first envelope
/// not named, so it reads at most one row more than `ids` names.
pub async fn ack_facts<D: Db>(db: &D, local: &str, ids: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "WITH head AS MATERIALIZED (
               SELECT x.base AS base, x.w AS w,
                      (SELECT o.seq FROM mailbox AS o
                        WHERE o.seq > x.base + x.w AND o.seq <= x.base + ?3 AND +o.local = ?1
                          AND o.envelope_id NOT IN (SELECT value FROM json_each(?2))
                        ORDER BY o.seq LIMIT 1) - x.base AS other
                 FROM (SELECT a.mbox << 30 AS base, coalesce(u.acked_through, 0) AS w
                         FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local
                        WHERE a.local = ?1) AS x)
             SELECT h.w AS w, h.other AS other, m.envelope_id AS id, m.seq - h.base AS n,
                    m.bytes IS NOT NULL AS counted
               FROM head AS h CROSS JOIN json_each(?2) AS j
               CROSS JOIN mailbox AS m ON m.local = ?1 AND m.envelope_id = j.value
              WHERE m.seq > h.base + h.w AND m.seq <= h.base + ?3
              ORDER BY m.seq",
            local,
            ids,
            mailbox::SEQ_MAX
        )
        .in_mailbox(local),
    )
    .await
}

/// What an acknowledgment writes, decided by [`crate::mailbox::plan_ack`] from [`ack_facts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckPlan {
    /// The watermark read.
    pub read: i64,
    /// The watermark after: every envelope up to it is acknowledged.
    pub through: i64,
    /// Envelopes acknowledged past an envelope still waiting: moved below zero (a JSON array of ids).
    pub moved: Option<String>,
    /// How many were waiting among the ids (the answer's `acked`), and how many of them counted
    /// towards the quota.
    pub acked: i64,
    pub counted: i64,
}

/// Acknowledges what `plan` decided for `ids` (the same JSON array [`ack_facts`] read) in
/// `local`'s mailbox, at `now`. The first statement is the guard and the count: the mailbox's
/// usage takes the acknowledged envelopes off what it holds (its tally stays: migration 0022)
/// and its watermark rises to
/// `plan.through`, unless the watermark or what waits among `ids` changed since they were read
/// (then `mailbox_ack_raced` undoes the batch). The second remembers when the raise happened (for
/// [`drop_bodies`]); the third moves the envelopes past an envelope still waiting below zero, as
/// acknowledgments did before watermarks. Their bytes stay counted until their bodies are dropped:
/// a mailbox's byte quota bounds what it stores, and an agent that acknowledges at once must not
/// open it to an unending stream. Nothing is written for a plan that acknowledges nothing.
pub fn ack(local: &str, ids: &str, plan: &AckPlan, now: i64, quota: mailbox::Quota) -> Vec<Stmt> {
    if plan.acked == 0 {
        return Vec::new();
    }
    let mut stmts = vec![stmt!(
        "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, acked_through)
         VALUES (?1, -?5, 0, ?2, ?3, ?4)
         ON CONFLICT (local) DO UPDATE SET envelopes = envelopes - ?5,
           acked_through = CASE
             WHEN acked_through = ?6
              AND (SELECT count(*) FROM agents AS a CROSS JOIN json_each(?7) AS j
                   CROSS JOIN mailbox AS m ON m.local = a.local AND m.envelope_id = j.value
                   WHERE a.local = ?1 AND m.seq > (a.mbox << 30) + ?6 AND m.seq <= (a.mbox << 30) + ?8) = ?9
             THEN ?4 ELSE -1 END",
        local,
        quota.max_envelopes,
        quota.max_bytes,
        plan.through,
        plan.counted,
        plan.read,
        ids,
        mailbox::SEQ_MAX,
        plan.acked
    )];
    if plan.through > plan.read {
        stmts.push(stmt!(
            "INSERT INTO mailbox_acks (at, local, lo, through) VALUES (?, ?, ?, ?)",
            now,
            local,
            plan.read + 1,
            plan.through
        ));
    }
    if let Some(moved) = &plan.moved {
        stmts.push(stmt!(
            "UPDATE mailbox SET acked_at = ?, seq = -seq
             WHERE seq IN (SELECT m.seq FROM json_each(?) AS j CROSS JOIN mailbox AS m
                           ON m.local = ? AND m.envelope_id = j.value WHERE m.seq > 0)",
            now,
            moved.as_str(),
            local
        ));
    }
    // Its guard decides on what was read: run before the nonce the route spends with it, never
    // handed off (crate::shards).
    stmts.into_iter().map(|s| s.in_mailbox(local).ahead()).collect()
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
                                AND NOT EXISTS (SELECT 1 FROM shard_moving AS sm WHERE sm.local = mailbox.local)
 AND NOT EXISTS (SELECT 1 FROM shard_incoming AS si WHERE si.local = mailbox.local)
                              ORDER BY acked_at, seq LIMIT ?)
             UPDATE mailbox_usage SET
               bytes = bytes - (SELECT coalesce(sum(dropped.bytes), 0) FROM dropped WHERE dropped.local = mailbox_usage.local)
             WHERE local IN (SELECT local FROM dropped)",
            before,
            limit
        )
        .at(Place::Every),
        stmt!(
            "UPDATE mailbox SET envelope = '', bytes = 0
             WHERE seq IN (SELECT seq FROM mailbox WHERE acked_at IS NOT NULL AND bytes IS NOT 0 AND acked_at < ?
                             AND NOT EXISTS (SELECT 1 FROM shard_moving AS sm WHERE sm.local = mailbox.local)
 AND NOT EXISTS (SELECT 1 FROM shard_incoming AS si WHERE si.local = mailbox.local)
                           ORDER BY acked_at, seq LIMIT ?)",
            before,
            limit
        )
        .at(Place::Every),
    ]
}

/// The rows [`drop_ranges`] drops: `raises`, the oldest raises before `?1` (at most `?2`), and
/// `dropped`, the rows above zero they span whose body is still kept.
macro_rules! drop_range_rows {
    () => {
        "WITH raises AS (SELECT at, local, lo, through FROM mailbox_acks WHERE at < ?1
                           AND NOT EXISTS (SELECT 1 FROM shard_moving AS sm WHERE sm.local = mailbox_acks.local)
 AND NOT EXISTS (SELECT 1 FROM shard_incoming AS si WHERE si.local = mailbox_acks.local)
                         ORDER BY at, local, through LIMIT ?2),
              dropped AS MATERIALIZED (
                SELECT m.seq AS seq, raises.local AS local, m.bytes AS bytes
                  FROM raises CROSS JOIN agents AS a ON a.local = raises.local
                  CROSS JOIN mailbox AS m
                    ON m.seq >= (a.mbox << 30) + raises.lo AND m.seq <= (a.mbox << 30) + raises.through
                 WHERE m.bytes IS NOT 0)
         "
    };
}

/// Drops the bodies of the envelopes of the oldest `ranges` watermark raises made before
/// `before` (`mailbox_acks`), and forgets those raises: the first statement takes the bytes off
/// their mailboxes' usage, the second empties the text and sets `bytes` to 0 (the rows, and so
/// their ids, stay), the third deletes the raises. All three pick the same raises (same order,
/// same limit) and run in one batch. A raise covers at most [`ACK_IDS_MAX`] rows above zero (the
/// envelopes its acknowledgment named: anything else in its span had moved below zero, where
/// [`drop_bodies`] finds it), so a tick writes at most `ranges` × that many rows here.
pub fn drop_ranges(before: i64, ranges: i64) -> [Stmt; 3] {
    [
        stmt!(
            concat!(
                drop_range_rows!(),
                "UPDATE mailbox_usage SET
                   bytes = bytes - (SELECT coalesce(sum(dropped.bytes), 0) FROM dropped WHERE dropped.local = mailbox_usage.local)
                 WHERE local IN (SELECT local FROM raises)"
            ),
            before,
            ranges
        )
        .at(Place::Every),
        stmt!(
            concat!(drop_range_rows!(), "UPDATE mailbox SET envelope = '', bytes = 0 WHERE seq IN (SELECT seq FROM dropped)"),
            before,
            ranges
        )
        .at(Place::Every),
        stmt!(
            "DELETE FROM mailbox_acks WHERE (at, local, through) IN
               (SELECT at, local, through FROM mailbox_acks WHERE at < ?
                  AND NOT EXISTS (SELECT 1 FROM shard_moving AS sm WHERE sm.local = mailbox_acks.local)
 AND NOT EXISTS (SELECT 1 FROM shard_incoming AS si WHERE si.local = mailbox_acks.local) ORDER BY at, local, through LIMIT ?)",
            before,
            ranges
        )
        .at(Place::Every),
    ]
}

/// Most ids one acknowledgment names (`routes::mailbox::ACK_MAX`).
pub const ACK_IDS_MAX: i64 = 500;
