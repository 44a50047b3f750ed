//! Agents, registrations, invitations, nonces and rate windows.

use crate::ports::{Db, Row, Stmt};
use crate::stmt;
use nyx5_proto::Error;

use super::{one, query};

/// When `local` was first registered (ms).
pub async fn created_at<D: Db>(db: &D, local: &str) -> Result<Option<i64>, Error> {
    Ok(one(db, stmt!("SELECT created_at FROM agents WHERE local = ?", local)).await?.and_then(|r| r.int("created_at")))
}

pub async fn card<D: Db>(db: &D, local: &str) -> Result<Option<String>, Error> {
    Ok(one(db, stmt!("SELECT card FROM agents WHERE local = ?", local))
        .await?
        .and_then(|r| r.text("card").map(str::to_owned)))
}

/// An agent's private settings in one query: a row per list entry (`webhook`, `kind`,
/// `entry`), or one row with NULL `kind` and `entry` when both lists are empty; no row when
/// there is no such agent.
pub async fn settings<D: Db>(db: &D, local: &str) -> Result<Vec<Row>, Error> {
    let rows = query(
        db,
        stmt!(
            "SELECT a.webhook AS webhook, l.kind AS kind, l.entry AS entry
             FROM agents AS a LEFT JOIN lists AS l ON l.local = a.local
             WHERE a.local = ? ORDER BY l.kind, l.entry",
            local
        ),
    )
    .await?;
    if !db.sharded() {
        return Ok(rows);
    }
    // The lists live with the mailbox (crate::shards): the webhook from the registry, the
    // entries from where the mailbox is.
    let Some(webhook) = rows.first().map(|r| r.get("webhook").cloned().unwrap_or(crate::ports::SqlValue::Null)) else {
        return Ok(Vec::new());
    };
    let entries = super::mailbox::lists(db, local).await?;
    let row = |kind: crate::ports::SqlValue, entry: crate::ports::SqlValue| {
        Row::from_pairs([("webhook", webhook.clone()), ("kind", kind), ("entry", entry)])
    };
    if entries.is_empty() {
        return Ok(vec![row(crate::ports::SqlValue::Null, crate::ports::SqlValue::Null)]);
    }
    Ok(entries
        .iter()
        .map(|e| {
            let get = |c: &str| e.get(c).cloned().unwrap_or(crate::ports::SqlValue::Null);
            row(get("kind"), get("entry"))
        })
        .collect())
}

/// What the directory indexes about a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub listed: bool,
    pub search: String,
    pub accepts: String,
    pub caps: String,
}

/// A card to write: its certified text, key, directory index and private webhook.
#[derive(Debug, Clone, Copy)]
pub struct NewCard<'a> {
    pub local: &'a str,
    pub card: &'a str,
    pub sig: &'a str,
    pub index: &'a Index,
    pub webhook: Option<&'a str>,
    pub via: &'a str,
    pub now: i64,
}

/// A first registration: an insert that fails the batch (`constraint::AGENT_TAKEN`) when the
/// name was taken meanwhile, and the record of it.
pub fn insert(c: &NewCard<'_>) -> Vec<Stmt> {
    let mut stmts = vec![
        stmt!(
            "INSERT INTO agents (local, card, sig, listed, search, accepts, caps, webhook, registered_via, created_at, updated_at, shard)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            c.local,
            c.card,
            c.sig,
            c.index.listed,
            c.index.search.as_str(),
            c.index.accepts.as_str(),
            c.index.caps.as_str(),
            c.webhook,
            c.via,
            c.now,
            c.now,
            0
        )
        // The database that will hold its mailbox, by the port's stable rule (crate::shards).
        .at(crate::ports::Place::Placing { local: c.local.to_owned(), param: 11 }),
    ];
    stmts.extend(record(c));
    stmts
}

/// An update of the card whose stored text is `replaces`: a guard fails the batch
/// (`constraint::GUARD`) when the stored card is no longer that one, so of two updates decided
/// on the same card only the first is written. `keep_webhook` leaves the stored webhook as it
/// is; otherwise it becomes `c.webhook` (`None` clears it). `reset` (the operator's: the new key
/// alone, nothing carried forward) also empties the agent's allow and block lists, which a thief
/// holding the old key could have set as well as the webhook.
pub fn update(c: &NewCard<'_>, replaces: &str, keep_webhook: bool, reset: bool) -> Vec<Stmt> {
    let mut stmts = vec![
        crate::guard!(
            "card_unchanged",
            "EXISTS (SELECT 1 FROM agents WHERE local = ? AND card = ?)",
            c.local,
            replaces
        ),
        stmt!(
            "UPDATE agents SET card = ?, sig = ?, listed = ?, search = ?, accepts = ?, caps = ?,
               webhook = CASE WHEN ? THEN webhook ELSE ? END, updated_at = ?
             WHERE local = ? AND card = ?",
            c.card,
            c.sig,
            c.index.listed,
            c.index.search.as_str(),
            c.index.accepts.as_str(),
            c.index.caps.as_str(),
            keep_webhook,
            c.webhook,
            c.now,
            c.local,
            replaces
        ),
    ];
    if reset {
        stmts.push(stmt!("DELETE FROM lists WHERE local = ?", c.local).in_mailbox(c.local));
    }
    stmts.extend(record(c));
    stmts
}

/// Registrations the house keeps of one agent: its first (how the name was enrolled) and its
/// latest `REGISTRATIONS_KEPT - 1` (who changed the card lately, by which key). Older updates
/// are forgotten as a new one is recorded: a card updated every minute for a year is still
/// these rows (issue 35 §3).
pub const REGISTRATIONS_KEPT: i64 = 8;

/// The record of a registration, and the forgetting of that agent's registrations past
/// [`REGISTRATIONS_KEPT`] (read through `registrations_local`: this agent's rows only, newest
/// first; never the first one).
fn record(c: &NewCard<'_>) -> [Stmt; 2] {
    [
        stmt!("INSERT INTO registrations (local, via, sig, at) VALUES (?, ?, ?, ?)", c.local, c.via, c.sig, c.now),
        stmt!(
            "DELETE FROM registrations WHERE id IN (
               SELECT id FROM registrations WHERE local = ? ORDER BY id DESC LIMIT -1 OFFSET ?)
             AND id <> (SELECT min(id) FROM registrations WHERE local = ?)",
            c.local,
            REGISTRATIONS_KEPT - 1,
            c.local
        ),
    ]
}

/// Uses one invitation: a guard fails the batch (`constraint::GUARD`) when the code is unknown,
/// expired or used up, and the CHECK `invitation_uses` stays the schema's own limit.
pub fn use_invitation(code: &str, now: i64) -> Vec<Stmt> {
    vec![
        crate::guard!(
            "invitation_usable",
            "EXISTS (SELECT 1 FROM invitations WHERE code = ? AND used < uses AND (expires IS NULL OR expires > ?))",
            code,
            now
        ),
        stmt!("UPDATE invitations SET used = used + 1 WHERE code = ?", code),
    ]
}

pub async fn invitation<D: Db>(db: &D, code: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT code, uses, used, expires, note, welcome, created_at FROM invitations WHERE code = ?", code))
        .await
}

pub fn insert_invitation(
    code: &str,
    uses: i64,
    expires: Option<i64>,
    note: Option<&str>,
    welcome: i64,
    now: i64,
) -> Stmt {
    stmt!(
        "INSERT INTO invitations (code, uses, expires, note, welcome, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        code,
        uses,
        expires,
        note,
        welcome,
        now
    )
}

pub async fn invitations<D: Db>(db: &D) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!("SELECT code, uses, used, expires, note, welcome, created_at FROM invitations ORDER BY created_at, code"),
    )
    .await
}

/// Counts one event in `bucket` for the window `window`; the CHECK fails the batch past `cap`.
pub fn count_in_window(bucket: &str, window: i64, cap: i64) -> Stmt {
    stmt!(
        "INSERT INTO rate_windows (bucket, window, count, cap) VALUES (?, ?, 1, ?)
         ON CONFLICT (bucket, window) DO UPDATE SET count = count + 1",
        bucket,
        window,
        cap
    )
}

/// Records a token nonce; the primary key refuses a second use.
pub fn use_nonce(address: &str, nonce: &str, keep_until: i64) -> Stmt {
    stmt!("INSERT INTO nonces (address, nonce, keep_until) VALUES (?, ?, ?)", address, nonce, keep_until)
}

/// Forgets what no longer matters: nonces past their window, old rate windows.
pub fn purge(now: i64) -> Vec<Stmt> {
    vec![
        stmt!("DELETE FROM nonces WHERE keep_until < ?", now),
        stmt!("DELETE FROM rate_windows WHERE window < ?", now / 60_000 - 5),
    ]
}

/// A page of listed cards matching the directory filters.
pub async fn directory<D: Db>(
    db: &D,
    q: Option<&str>,
    accepts: Option<&str>,
    capability: Option<&str>,
    limit: i64,
    offset: i64,
) -> Result<Vec<String>, Error> {
    let like = q.map(|q| format!("%{}%", escape_like(&q.to_lowercase())));
    let accepts = accepts.map(|a| format!("% {} %", escape_like(&a.to_lowercase())));
    let capability = capability.map(|c| format!("% {} %", escape_like(&c.to_lowercase())));
    let rows = query(
        db,
        stmt!(
            "SELECT card FROM agents WHERE listed = 1
               AND (? IS NULL OR search LIKE ? ESCAPE '\\')
               AND (? IS NULL OR accepts LIKE ? ESCAPE '\\')
               AND (? IS NULL OR caps LIKE ? ESCAPE '\\')
             ORDER BY local LIMIT ? OFFSET ?",
            like.clone(),
            like,
            accepts.clone(),
            accepts,
            capability.clone(),
            capability,
            limit,
            offset
        ),
    )
    .await?;
    Ok(rows.iter().filter_map(|r| r.text("card").map(str::to_owned)).collect())
}

/// Escapes `\`, `%` and `_` for a LIKE pattern with `ESCAPE '\'`.
pub(crate) fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}
