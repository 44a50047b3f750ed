//! Mailboxes and their lists: what accepting an envelope reads and writes (spec §7, §9).
//!
//! Lists of locals are bound as one JSON array and read with `json_each`, so a statement's SQL
//! stays fixed whatever the number of recipients. The array is the outer loop of a join (never an
//! `IN (SELECT … json_each)`, which builds a temporary index on every run), and everything else
//! is a primary-key lookup per recipient.

use nyx5_proto::Error;

use super::query;
use crate::ports::{Db, Place, Row, Stmt};
use crate::stmt;

/// What accepting an envelope needs to know about each recipient, in one statement: one row per
/// agent named in `locals` (a JSON array of distinct locals; unknown ones have no row) with its
/// `local`, `card`, `webhook`; `holder`, the sender of the mailbox row that already holds
/// `envelope_id` (or NULL); `blocked`, whether its block list holds one of `blocks` (a JSON array:
/// the sender's address, its domain and the domain's parents down to its site), and `allowed`,
/// whether its allow list holds one of `allows` (1 or 0); `rate_count`, the count of its rate
/// window `bucket_prefix || local || bucket_suffix` for minute `window` (or NULL); and
/// `held_envelopes`, `held_bytes`, what its mailbox holds towards its quota (its tally less what
/// `mailbox_usage` says was taken off).
pub async fn inbound_facts<D: Db>(db: &D, l: &Lookup<'_>) -> Result<Vec<Row>, Error> {
    let facts = stmt!(
        concat!(
            "WITH x AS MATERIALIZED (
             SELECT a.local AS local, a.card AS card, a.webhook AS webhook,
               (SELECT m.sender FROM mailbox AS m WHERE m.local = a.local AND m.envelope_id = ?) AS holder,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'block' AND l.entry = e.value) AS blocked,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'allow' AND l.entry = e.value) AS allowed,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'allow' AND l.entry = e.value) AS voucher_allowed,
               (SELECT r.count FROM rate_windows AS r WHERE r.bucket = ? || a.local || ? AND r.window = ?)
                 AS rate_count,
               coalesce(u.envelopes, 0) AS off_n, coalesce(u.bytes, 0) AS off_bytes, ",
            crate::store::mailbox::tally!(),
            " AS t
             FROM json_each(?) AS j CROSS JOIN agents AS a ON a.local = j.value
             LEFT JOIN mailbox_usage AS u ON u.local = a.local)
             SELECT local, card, webhook, holder, blocked, allowed, voucher_allowed, rate_count,
                    off_n + coalesce(json_extract(t, '$[1]'), 0) AS held_envelopes,
                    off_bytes + coalesce(json_extract(t, '$[2]'), 0) AS held_bytes
               FROM x"
        ),
        l.envelope_id,
        l.blocks,
        l.allows,
        l.vouchers,
        l.bucket_prefix,
        l.bucket_suffix,
        l.window,
        l.locals
    );
    if !db.sharded() {
        return query(db, facts).await;
    }
    // Mailboxes on shards: the registry's part (card, webhook, the rate window) from the
    // primary, the mailbox's part (holder, lists, what it holds) from where each mailbox is.
    let registry = query(db, facts.clone()).await?;
    let boxes = query(db, facts.at(Place::Spread(7))).await?;
    const FROM_BOX: [&str; 6] = ["holder", "blocked", "allowed", "voucher_allowed", "held_envelopes", "held_bytes"];
    Ok(registry
        .into_iter()
        .map(|r| {
            let found = boxes.iter().find(|b| b.text("local").is_some() && b.text("local") == r.text("local"));
            Row::from_pairs(r.columns().map(|(name, v)| {
                let v = match (FROM_BOX.contains(&name), found) {
                    (false, _) => v.clone(),
                    (true, Some(b)) => b.get(name).cloned().unwrap_or(crate::ports::SqlValue::Null),
                    (true, None) if name == "holder" => crate::ports::SqlValue::Null,
                    (true, None) => crate::ports::SqlValue::Int(0),
                };
                (name, v)
            }))
        })
        .collect())
}

/// What [`inbound_facts`] looks up.
#[derive(Debug, Clone, Copy)]
pub struct Lookup<'a> {
    /// A JSON array of distinct locals.
    pub locals: &'a str,
    pub envelope_id: &'a str,
    /// A JSON array of the entries a block list matches the sender by.
    pub blocks: &'a str,
    /// A JSON array of the entries an allow list matches the sender by.
    pub allows: &'a str,
    /// The same for the voucher of a vouch the envelope carries (`[]` without one).
    pub vouchers: &'a str,
    pub bucket_prefix: &'a str,
    pub bucket_suffix: &'a str,
    pub window: i64,
}

/// The stamp's entry id beside the stamped envelope in `local`'s mailbox.
pub fn set_stamp(local: &str, envelope_id: &str, entry_id: &str) -> Stmt {
    stmt!("UPDATE mailbox SET stamp = ? WHERE local = ? AND envelope_id = ?", entry_id, local, envelope_id)
        .in_mailbox(local)
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

/// `local`, `envelopes`, `bytes` held by the mailboxes of the agents named in `locals` (a JSON
/// array): their tallies less what `mailbox_usage` says was taken off.
pub async fn usage<D: Db>(db: &D, locals: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            concat!(
                "WITH x AS MATERIALIZED (
                 SELECT a.local AS local, coalesce(u.envelopes, 0) AS off_n, coalesce(u.bytes, 0) AS off_bytes, ",
                crate::store::mailbox::tally!(),
                " AS t
                 FROM json_each(?) AS j CROSS JOIN agents AS a ON a.local = j.value
                 LEFT JOIN mailbox_usage AS u ON u.local = a.local)
                 SELECT local, off_n + coalesce(json_extract(t, '$[1]'), 0) AS envelopes,
                        off_bytes + coalesce(json_extract(t, '$[2]'), 0) AS bytes
                   FROM x"
            ),
            locals
        )
        .at(Place::Spread(0)),
    )
    .await
}

pub use crate::config::Quota;

/// A mailbox's waiting envelopes have `seq`s of their own range, `(mbox << SEQ_BITS) + n`, and
/// acknowledged ones its mirror below zero: `agents.mbox` numbers the mailbox and `n`, from 1, is
/// the `seq` its pages show (migration 0013). Keeping a mailbox's waiting envelopes together in
/// the table's own key is what lets a page do without an index of its own, which every accepted
/// envelope would write. 2^23 − 1 mailboxes of 2^30 envelopes keep every whole `seq` within
/// 2^53, a number D1 can hand to JavaScript exactly.
pub const SEQ_BITS: u32 = 30;
/// The highest `n` of a mailbox.
pub const SEQ_MAX: i64 = (1 << SEQ_BITS) - 1;

/// SQL, over an `agents AS a` row: the `seq` of the next envelope of `a`'s mailbox, its highest
/// `n`, waiting or acknowledged, plus one (rows are never deleted, so `n` only grows). Two seeks
/// down the table's key.
macro_rules! next_seq {
    () => {
        "(a.mbox << 30) + 1 + max(
           coalesce((SELECT m.seq FROM mailbox AS m WHERE m.seq <= (a.mbox << 30) + 1073741823
                     ORDER BY m.seq DESC LIMIT 1), 0) - (a.mbox << 30),
           coalesce((SELECT -m.seq FROM mailbox AS m WHERE m.seq >= -((a.mbox << 30) + 1073741823)
                     ORDER BY m.seq LIMIT 1), 0) - (a.mbox << 30),
           0)"
    };
}
pub(crate) use next_seq;

/// SQL, over an `agents AS a` row: the running tally of `a`'s mailbox as JSON `[n, total_n,
/// total_bytes]` from its newest row that carries one (migration 0022), or NULL when none does:
/// the envelopes counted towards the quota ever given to it, and their bytes as stored then. Two
/// seeks down the table's key (the newest row above zero and the newest below), each of which
/// walks past rows without a tally (written by a Worker from before 0022) to the first with one.
macro_rules! tally {
    () => {
        "(SELECT CASE WHEN coalesce(json_extract(p, '$[0]'), 0) >= coalesce(json_extract(q, '$[0]'), 0) THEN p ELSE q END
          FROM (SELECT
            (SELECT json_array(m.seq - (a.mbox << 30), m.total_n, m.total_bytes) FROM mailbox AS m
              WHERE m.seq > (a.mbox << 30) AND m.seq <= (a.mbox << 30) + 1073741823 AND m.total_n IS NOT NULL
              ORDER BY m.seq DESC LIMIT 1) AS p,
            (SELECT json_array(-m.seq - (a.mbox << 30), m.total_n, m.total_bytes) FROM mailbox AS m
              WHERE m.seq < -(a.mbox << 30) AND m.seq >= -((a.mbox << 30) + 1073741823) AND m.total_n IS NOT NULL
              ORDER BY m.seq LIMIT 1) AS q))"
    };
}
pub(crate) use tally;

/// A `WITH` clause naming `q`: the mailbox of the agent `?1`, one row (none for no such agent)
/// with `local`, `seq` (the next envelope's), `tn` and `tb` (its tally, see [`tally`]), and `held_n`
/// and `held_bytes`, what it holds now (the tally less what acknowledgments and dropped bodies
/// took off, in `mailbox_usage`). Every insert into `mailbox` starts from it, to carry the tally on.
macro_rules! mailbox_q {
    () => {
        concat!(
            "WITH r AS MATERIALIZED (SELECT a.local AS local, ",
            $crate::store::mailbox::next_seq!(),
            " AS seq, ",
            $crate::store::mailbox::tally!(),
            " AS t, coalesce(u.envelopes, 0) AS off_n, coalesce(u.bytes, 0) AS off_bytes
               FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local WHERE a.local = ?1),
             q AS (SELECT local, seq, coalesce(json_extract(t, '$[1]'), 0) AS tn, coalesce(json_extract(t, '$[2]'), 0) AS tb,
                          coalesce(json_extract(t, '$[1]'), 0) + off_n AS held_n,
                          coalesce(json_extract(t, '$[2]'), 0) + off_bytes AS held_bytes
                     FROM r) "
        )
    };
}
pub(crate) use mailbox_q;

/// Puts an envelope in a mailbox, counted towards its quota: one statement, which changes zero
/// rows when the mailbox held that id already (a duplicate), and fails the batch
/// (`constraint::MAILBOX_QUOTA`, on `within`) when one more envelope of its size would pass
/// `quota`. The row carries the mailbox's tally on, one envelope and its bytes more. Three rows
/// written in all (D1 counts index entries): the envelope's row and its `UNIQUE (local,
/// envelope_id)` entry, here; the sender's rate window, beside it.
pub fn insert(local: &str, envelope_id: &str, sender: &str, envelope: &str, now: i64, quota: Quota) -> Stmt {
    let bytes = i64::try_from(envelope.len()).unwrap_or(i64::MAX);
    stmt!(
        concat!(
            mailbox_q!(),
            "INSERT INTO mailbox (seq, local, envelope_id, sender, received_at, bytes, total_n, total_bytes, within, envelope)
             SELECT q.seq, q.local, ?2, ?3, ?4, ?5, q.tn + 1, q.tb + ?5,
                    CASE WHEN EXISTS (SELECT 1 FROM mailbox WHERE local = ?1 AND envelope_id = ?2) THEN NULL
                         ELSE q.held_n + 1 <= ?7 AND q.held_bytes + ?5 <= ?8 END,
                    ?6
               FROM q WHERE true
             ON CONFLICT (local, envelope_id) DO NOTHING"
        ),
        local,
        envelope_id,
        sender,
        now,
        bytes,
        envelope,
        quota.max_envelopes,
        quota.max_bytes
    )
    .in_mailbox(local)
    // Applied from a hand-off (crate::shards), after the primary's part committed: the decision
    // read the quota, and what was paid or counted there is not lost to a race here, within a
    // bounded slack (a few envelopes more, never unbounded).
    .on_handoff(6, quota.max_envelopes.saturating_add(crate::shards::HANDOFF_SLACK))
    .on_handoff(
        7,
        quota.max_bytes.saturating_add(
            crate::shards::HANDOFF_SLACK
                .saturating_mul(i64::try_from(nyx5_proto::limits::MAX_ENVELOPE_BYTES).unwrap_or(i64::MAX)),
        ),
    )
}

/// `kind`, `entry` of an agent's lists, in order.
pub async fn lists<D: Db>(db: &D, local: &str) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT kind, entry FROM lists WHERE local = ? ORDER BY kind, entry", local).in_mailbox(local))
        .await
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
    .in_mailbox(local)
}

pub fn remove_entry(local: &str, kind: &str, entry: &str) -> Stmt {
    stmt!("DELETE FROM lists WHERE local = ? AND kind = ? AND entry = ?", local, kind, entry).in_mailbox(local)
}
