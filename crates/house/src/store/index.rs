//! The federated index's tables (`index_houses`, `index_cards`; migration 0009).

use nyx5_proto::Error;

use super::{one, query};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// A crawled house as the crawler reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HouseRow {
    pub domain: String,
    pub url: String,
    pub pass: i64,
    pub phase: String,
    pub cursor: i64,
    pub ok_at: Option<i64>,
    pub failures: i64,
}

impl HouseRow {
    fn from_row(r: &Row) -> Option<HouseRow> {
        Some(HouseRow {
            domain: r.text("domain")?.to_owned(),
            url: r.text("url")?.to_owned(),
            pass: r.int("pass")?,
            phase: r.text("phase")?.to_owned(),
            cursor: r.int("cursor")?,
            ok_at: r.int("ok_at"),
            failures: r.int("failures")?,
        })
    }
}

/// The house whose turn it is, if any is due.
pub async fn due<D: Db>(db: &D, now: i64) -> Result<Option<HouseRow>, Error> {
    let row = one(
        db,
        stmt!(
            "SELECT domain, url, pass, phase, cursor, ok_at, failures FROM index_houses
              WHERE next_at <= ? ORDER BY next_at, domain LIMIT 1",
            now
        ),
    )
    .await?;
    Ok(row.as_ref().and_then(HouseRow::from_row))
}

/// Registers `domain` unless it is there already, while the index holds fewer than `max`
/// houses (the guard `index_room` fails the batch otherwise). Its first pass is due now.
pub fn register(domain: &str, url: &str, now: i64, max: i64) -> Vec<Stmt> {
    vec![
        crate::guard!(
            "index_room",
            "EXISTS (SELECT 1 FROM index_houses WHERE domain = ?) OR (SELECT count(*) FROM index_houses) < ?",
            domain,
            max
        ),
        stmt!(
            "INSERT INTO index_houses (domain, url, added_at, ok_at, next_at) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (domain) DO NOTHING",
            domain,
            url,
            now,
            now,
            now
        ),
    ]
}

/// One house's row, for the registration's answer and the listing.
pub async fn house<D: Db>(db: &D, domain: &str) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "SELECT h.domain, h.url, h.added_at, h.pass, h.phase, h.next_at, h.ok_at, h.failures, h.last_error,
                    (SELECT count(*) FROM index_cards c WHERE c.house = h.domain) AS cards
               FROM index_houses h WHERE h.domain = ?",
            domain
        ),
    )
    .await
}

/// Every crawled house, in domain order, a page at a time.
pub async fn houses<D: Db>(db: &D, limit: i64, offset: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT h.domain, h.url, h.added_at, h.pass, h.phase, h.next_at, h.ok_at, h.failures, h.last_error,
                    (SELECT count(*) FROM index_cards c WHERE c.house = h.domain) AS cards
               FROM index_houses h ORDER BY h.domain LIMIT ? OFFSET ?",
            limit,
            offset
        ),
    )
    .await
}

/// The step that begins a pass succeeded: the domain card verified at `url`.
pub fn begin_pass(h: &HouseRow, url: &str, now: i64) -> Stmt {
    stmt!(
        "UPDATE index_houses SET url = ?, pass = pass + 1, phase = 'cards', cursor = 0, ok_at = ?, failures = 0,
                last_error = NULL, next_at = ?
          WHERE domain = ? AND pass = ? AND phase = 'start'",
        url,
        now,
        now,
        h.domain.as_str(),
        h.pass
    )
}

/// Moves a house on within its pass (`phase`, `cursor`), due again at `next_at`. Guarded by the
/// pass and phase the step read, so a step that raced another changes nothing.
pub fn advance(h: &HouseRow, phase: &str, cursor: i64, next_at: i64) -> Stmt {
    stmt!(
        "UPDATE index_houses SET phase = ?, cursor = ?, next_at = ?
          WHERE domain = ? AND pass = ? AND phase = ? AND cursor = ?",
        phase,
        cursor,
        next_at,
        h.domain.as_str(),
        h.pass,
        h.phase.as_str(),
        h.cursor
    )
}

/// A step failed: the pass starts over at `next_at`, the failure counted and told.
pub fn failed(h: &HouseRow, why: &str, next_at: i64) -> Stmt {
    stmt!(
        "UPDATE index_houses SET phase = 'start', cursor = 0, failures = failures + 1, last_error = ?, next_at = ?
          WHERE domain = ? AND pass = ? AND phase = ? AND cursor = ?",
        why,
        next_at,
        h.domain.as_str(),
        h.pass,
        h.phase.as_str(),
        h.cursor
    )
}

/// Forgets a house and (by the foreign key's cascade) its cards.
pub fn forget(domain: &str) -> Stmt {
    stmt!("DELETE FROM index_houses WHERE domain = ?", domain)
}

/// Drops every card of a house (its origin no longer verifies as a house).
pub fn drop_cards(domain: &str) -> Stmt {
    stmt!("DELETE FROM index_cards WHERE house = ?", domain)
}

/// Drops the cards of a house its pass `pass` did not see: no longer listed, or gone.
pub fn drop_unseen(domain: &str, pass: i64) -> Stmt {
    stmt!("DELETE FROM index_cards WHERE house = ? AND pass < ?", domain, pass)
}

/// Drops one card (it no longer verifies).
pub fn drop_card(address: &str) -> Stmt {
    stmt!("DELETE FROM index_cards WHERE address = ?", address)
}

/// A card as a page showed it, verified.
#[derive(Debug, Clone)]
pub struct CardRow<'a> {
    pub address: &'a str,
    pub house: &'a str,
    pub card: &'a str,
    pub search: &'a str,
    pub accepts: &'a str,
    pub caps: &'a str,
    pub valid_until: Option<i64>,
    pub pass: i64,
}

/// Writes a verified card, seen by `pass`, unless its house already has `max` other cards. The
/// card's text changing drops what was read of its history.
pub fn put_card(c: &CardRow<'_>, max: i64) -> Stmt {
    stmt!(
        "INSERT INTO index_cards (address, house, card, search, accepts, caps, valid_until, pass)
         SELECT ?, ?, ?, ?, ?, ?, ?, ?
          WHERE EXISTS (SELECT 1 FROM index_cards WHERE address = ?)
             OR (SELECT count(*) FROM index_cards WHERE house = ?) < ?
         ON CONFLICT (address) DO UPDATE SET
           card = excluded.card, search = excluded.search, accepts = excluded.accepts, caps = excluded.caps,
           valid_until = excluded.valid_until, pass = excluded.pass,
           history_at = CASE WHEN index_cards.card = excluded.card THEN index_cards.history_at END
          WHERE index_cards.house = excluded.house",
        c.address,
        c.house,
        c.card,
        c.search,
        c.accepts,
        c.caps,
        c.valid_until,
        c.pass,
        c.address,
        c.house,
        max
    )
}

/// Marks a card as seen by `pass` without changing it (it could not be checked this time for a
/// reason that is not its fault, such as its parent's house being unreachable).
pub fn keep_card(address: &str, house: &str, pass: i64) -> Stmt {
    stmt!("UPDATE index_cards SET pass = ? WHERE address = ? AND house = ?", pass, address, house)
}

/// The next card of `house` whose history was never read or was read before `stale`.
pub async fn history_due<D: Db>(db: &D, house: &str, stale: i64) -> Result<Option<String>, Error> {
    let row = one(
        db,
        stmt!(
            "SELECT address FROM index_cards WHERE house = ? AND (history_at IS NULL OR history_at < ?)
              ORDER BY address LIMIT 1",
            house,
            stale
        ),
    )
    .await?;
    Ok(row.and_then(|r| r.text("address").map(str::to_owned)))
}

/// Records what was read of a card's history (`None`: not published, or not readable).
pub fn set_history(address: &str, history: Option<i64>, now: i64) -> Stmt {
    stmt!("UPDATE index_cards SET history = ?, history_at = ? WHERE address = ?", history, now, address)
}

/// Records that a card's history could not be read just now (its last reading stays).
pub fn history_tried(address: &str, now: i64) -> Stmt {
    stmt!("UPDATE index_cards SET history_at = ? WHERE address = ?", now, address)
}

/// What a search asks.
#[derive(Debug, Clone, Default)]
pub struct Search<'a> {
    pub q: Option<&'a str>,
    pub capability: Option<&'a str>,
    pub accepts: Option<&'a str>,
    pub house: Option<&'a str>,
    pub limit: i64,
    pub offset: i64,
    pub now: i64,
}

/// A search, ranked as docs/SPEC.md §13 states: the text score (3 for a capability named `q`,
/// 2 for `q` in the address, 1 for `q` elsewhere in the card's text; 0 without `q`), then the
/// released sales of the origin's history (unpublished counts as none), then the address. The
/// order is total, so pages do not overlap while the index stands still.
pub async fn search<D: Db>(db: &D, s: &Search<'_>) -> Result<Vec<(String, String)>, Error> {
    let q = s.q.map(str::to_lowercase);
    let like = q.as_deref().map(|q| format!("%{}%", super::agents::escape_like(q)));
    let word = q.as_deref().map(|q| format!("% {} %", super::agents::escape_like(q)));
    let accepts = s.accepts.map(|a| format!("% {} %", super::agents::escape_like(&a.to_lowercase())));
    let capability = s.capability.map(|c| format!("% {} %", super::agents::escape_like(&c.to_lowercase())));
    let rows = query(
        db,
        stmt!(
            "SELECT card, house FROM (
               SELECT card, house, address, history,
                      CASE WHEN ? IS NULL THEN 0
                           WHEN caps LIKE ? ESCAPE '\\' THEN 3
                           WHEN address LIKE ? ESCAPE '\\' THEN 2
                           WHEN search LIKE ? ESCAPE '\\' THEN 1
                           ELSE -1 END AS score
                 FROM index_cards
                WHERE (valid_until IS NULL OR valid_until > ?)
                  AND (? IS NULL OR house = ?)
                  AND (? IS NULL OR accepts LIKE ? ESCAPE '\\')
                  AND (? IS NULL OR caps LIKE ? ESCAPE '\\'))
             WHERE score >= 0
             ORDER BY score DESC, coalesce(history, 0) DESC, address
             LIMIT ? OFFSET ?",
            like.clone(),
            word,
            like.clone(),
            like,
            s.now,
            s.house,
            s.house,
            accepts.clone(),
            accepts,
            capability.clone(),
            capability,
            s.limit,
            s.offset
        ),
    )
    .await?;
    Ok(rows.iter().filter_map(|r| Some((r.text("card")?.to_owned(), r.text("house")?.to_owned()))).collect())
}
