//! The email bridge's SQL: the separate write path for unsigned email envelopes (what receiving
//! one reads about its recipient is `store::mailbox::inbound_facts`, as for signed envelopes).

use nyx5_proto::Error;
use nyx5_rules::queue::EmailState;

use super::one;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

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
    /// The version of the sender's tree's holds it was judged against (docs/SPEC.md §7c).
    pub judged: Option<&'a str>,
}

/// Queues an email; the UNIQUE id fails the batch when it exists already.
pub fn insert_out(e: &NewEmail<'_>) -> Stmt {
    stmt!(
        "INSERT INTO email_out (id, sender, recipient, subject, body, in_reply_to, refs, request, state,
                                next_attempt, deadline, created_at, judged)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
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
        e.now,
        e.judged
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
        )
        .in_mailbox(local),
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
pub fn finish_out(
    id: &str,
    lease: i64,
    state: EmailState,
    error: Option<&str>,
    provider_id: Option<&str>,
    now: i64,
) -> Stmt {
    stmt!(
        "UPDATE email_out SET state = ?, attempts = attempts + 1, last_error = coalesce(?, last_error),
                provider_id = ?, finished_at = ?, lease_until = 0
         WHERE id = ? AND lease_until = ? AND state = 'pending'",
        state.as_str(),
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
