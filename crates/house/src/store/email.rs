//! The email bridge's SQL: what receiving an email reads about its recipient, and the separate
//! write path for unsigned email envelopes (signed envelopes go through `store::mailbox`).

use nyx5_proto::Error;

use super::one;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// What receiving an email reads, at once: which mailbox row, lists and rate window matter.
#[derive(Debug, Clone, Copy)]
pub struct Lookup<'a> {
    pub local: &'a str,
    pub envelope_id: &'a str,
    /// A JSON array of the addresses and domains the email claims (From, envelope sender).
    pub claimed: &'a str,
    /// A JSON array of the address and domain a trusted receiver vouched for (`[]` if none).
    pub authenticated: &'a str,
    pub bucket: &'a str,
    pub window: i64,
}

/// One row for agent `local` (none if there is no such agent): its `card` and `webhook`; `holder`, the sender
/// of the mailbox row that already holds `envelope_id` (or NULL); `blocked`, whether its block list
/// holds one of the `claimed` entries; `allowed`, whether its allow list holds one of the
/// `authenticated` ones; `rate_count`, the count of rate window `bucket` in minute `window` (or NULL);
/// and `held_envelopes`, `held_bytes`, what the mailbox holds unacknowledged (NULL: nothing yet).
pub async fn facts<D: Db>(db: &D, l: &Lookup<'_>) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "SELECT a.card AS card, a.webhook AS webhook,
               (SELECT m.sender FROM mailbox AS m WHERE m.local = a.local AND m.envelope_id = ?) AS holder,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'block' AND l.entry = e.value) AS blocked,
               EXISTS (SELECT 1 FROM json_each(?) AS e CROSS JOIN lists AS l
                       ON l.local = a.local AND l.kind = 'allow' AND l.entry = e.value) AS allowed,
               (SELECT r.count FROM rate_windows AS r WHERE r.bucket = ? AND r.window = ?) AS rate_count,
               u.envelopes AS held_envelopes, u.bytes AS held_bytes
             FROM agents AS a LEFT JOIN mailbox_usage AS u ON u.local = a.local WHERE a.local = ?",
            l.envelope_id,
            l.claimed,
            l.authenticated,
            l.bucket,
            l.window,
            l.local
        ),
    )
    .await
}

/// A new outbound email, `pending` and due at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewEmail<'a> {
    pub id: &'a str,
    pub sender: &'a str,
    pub recipient: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
    pub in_reply_to: Option<&'a str>,
    pub refs: Option<&'a str>,
    pub request: &'a str,
    pub now: i64,
    pub deadline: i64,
}

/// Queues an email; the UNIQUE id fails the batch when it exists already.
pub fn insert_out(e: &NewEmail<'_>) -> Stmt {
    stmt!(
        "INSERT INTO email_out (id, sender, recipient, subject, body, in_reply_to, refs, request, state,
                                next_attempt, deadline, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
        e.id,
        e.sender,
        e.recipient,
        e.subject,
        e.body,
        e.in_reply_to,
        e.refs,
        e.request,
        e.now,
        e.deadline,
        e.now
    )
}

/// Who queued email `id`, what was asked, and its state.
pub async fn out_entry<D: Db>(db: &D, id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT sender, request, state FROM email_out WHERE id = ?", id)).await
}

/// The email envelope `envelope_id` in `local`'s mailbox, if it came in by email through `gateway`.
pub async fn received<D: Db>(db: &D, local: &str, envelope_id: &str, gateway: &str) -> Result<Option<String>, Error> {
    Ok(one(
        db,
        stmt!(
            "SELECT envelope FROM mailbox WHERE local = ? AND envelope_id = ? AND sender = ?",
            local,
            envelope_id,
            gateway
        ),
    )
    .await?
    .and_then(|r| r.text("envelope").map(str::to_owned)))
}

/// Up to `limit` pending emails that are due and not leased, earliest first.
pub async fn due_out<D: Db>(db: &D, now: i64, limit: i64) -> Result<Vec<Row>, Error> {
    super::query(
        db,
        stmt!(
            "SELECT id, sender, recipient, subject, body, in_reply_to, refs, attempts, deadline, last_error
             FROM email_out WHERE state = 'pending' AND next_attempt <= ? AND lease_until < ?
             ORDER BY next_attempt, seq LIMIT ?",
            now,
            now,
            limit
        ),
    )
    .await
}

/// Takes a due email until `until`; zero rows when someone else holds it or it is not due.
pub fn lease_out(id: &str, now: i64, until: i64) -> Stmt {
    stmt!(
        "UPDATE email_out SET lease_until = ?
         WHERE id = ? AND state = 'pending' AND lease_until < ? AND next_attempt <= ?",
        until,
        id,
        now,
        now
    )
}

/// The email ends `sent` or `failed` (under the lease `lease`).
pub fn finish_out(id: &str, lease: i64, state: &str, error: Option<&str>, provider_id: Option<&str>, now: i64) -> Stmt {
    stmt!(
        "UPDATE email_out SET state = ?, attempts = attempts + 1, last_error = coalesce(?, last_error),
                provider_id = ?, finished_at = ?, lease_until = 0
         WHERE id = ? AND lease_until = ? AND state = 'pending'",
        state,
        error,
        provider_id,
        now,
        id,
        lease
    )
}

/// The email stays pending: counted, rescheduled, lease given back.
pub fn retry_out(id: &str, lease: i64, next_attempt: i64, error: &str) -> Stmt {
    stmt!(
        "UPDATE email_out SET attempts = attempts + 1, next_attempt = ?, last_error = ?, lease_until = 0
         WHERE id = ? AND lease_until = ? AND state = 'pending'",
        next_attempt,
        error,
        id,
        lease
    )
}

/// `sender`'s latest `limit` emails, newest first.
pub async fn out_page<D: Db>(db: &D, sender: &str, limit: i64) -> Result<Vec<Row>, Error> {
    super::query(
        db,
        stmt!(
            "SELECT seq, id, recipient, subject, in_reply_to, state, attempts, next_attempt, last_error, provider_id,
                    created_at, finished_at
             FROM email_out WHERE sender = ? ORDER BY seq DESC LIMIT ?",
            sender,
            limit
        ),
    )
    .await
}

/// Forgets emails that finished before `before` (at most `limit` per call).
pub fn purge_out(before: i64, limit: i64) -> Stmt {
    stmt!(
        "DELETE FROM email_out WHERE seq IN (
           SELECT seq FROM email_out WHERE state != 'pending' AND finished_at < ? LIMIT ?)",
        before,
        limit
    )
}
