//! Resolver state (spec §2): TOFU pins of domain keys and the five-minute card cache.

use nyx5_proto::{Error, limits};

use super::{one, query};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// The pin of `domain`: `sig`, `first_seen`, `pending`, `pending_at`.
pub async fn pin<D: Db>(db: &D, domain: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT domain, sig, first_seen, pending, pending_at FROM pins WHERE domain = ?", domain)).await
}

/// Every pin, for the operator.
pub async fn pins<D: Db>(db: &D) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT domain, sig, first_seen, pending, pending_at FROM pins ORDER BY domain")).await
}

/// Pins the first key seen for `domain` (of site `site`): a guard fails the batch
/// (`constraint::GUARD`) when `domain` has no pin and its site holds `per_site` pins already;
/// then the insert, which keeps a pin already there, and pins nothing while the table holds
/// `total` (the row count says whether it pinned).
pub fn insert_pin(domain: &str, site: &str, sig: &str, now: i64, per_site: i64, total: i64) -> [Stmt; 2] {
    [
        crate::guard!(
            "pin_room",
            "EXISTS (SELECT 1 FROM pins WHERE domain = ?) OR (SELECT count(*) FROM pins WHERE site = ?) < ?",
            domain,
            site,
            per_site
        ),
        stmt!(
            "INSERT INTO pins (domain, site, sig, first_seen)
             SELECT ?, ?, ?, ? WHERE (SELECT count(*) FROM pins) < ?
             ON CONFLICT (domain) DO NOTHING",
            domain,
            site,
            sig,
            now,
            total
        ),
    ]
}

/// Counts one fetch of a name the resolver knows no fresh card for against its site's window
/// `bucket` (`resolve:<site>`) for minute `window`; the CHECK `rate_cap` fails the batch past
/// `cap`. A pinned domain costs nothing: the budget is for names the house has never trusted.
pub fn count_new_name(domain: &str, bucket: &str, window: i64, cap: i64) -> Stmt {
    stmt!(
        "INSERT INTO rate_windows (bucket, window, count, cap)
         SELECT ?, ?, 1, ? WHERE NOT EXISTS (SELECT 1 FROM pins WHERE domain = ?)
         ON CONFLICT (bucket, window) DO UPDATE SET count = count + 1",
        bucket,
        window,
        cap,
        domain
    )
}

/// Moves the pin of `domain` from `from` to `to` (a rotation it followed, or a repin), only
/// while it is still `from`; a pending key is cleared. Zero rows: the pin changed meanwhile.
pub fn move_pin(domain: &str, from: &str, to: &str) -> Stmt {
    stmt!("UPDATE pins SET sig = ?, pending = NULL, pending_at = NULL WHERE domain = ? AND sig = ?", to, domain, from)
}

/// Records a changed key, refused until the operator confirms it.
pub fn set_pending(domain: &str, sig: &str, now: i64) -> Stmt {
    stmt!(
        "UPDATE pins SET pending = ?, pending_at = ? WHERE domain = ? AND sig <> ? AND pending IS NOT ?",
        sig,
        now,
        domain,
        sig,
        sig
    )
}

/// Moves the pending key of `domain` to its pin; with `expected`, only if it is that key.
/// Zero rows: nothing pending (or another key pending).
pub fn confirm_pin(domain: &str, expected: Option<&str>) -> Stmt {
    stmt!(
        "UPDATE pins SET sig = pending, pending = NULL, pending_at = NULL
         WHERE domain = ? AND pending IS NOT NULL AND (? IS NULL OR pending = ?)",
        domain,
        expected,
        expected
    )
}

/// A cached card for `key` (a domain or an address) fetched after `fresh_after`.
pub async fn cached<D: Db>(db: &D, key: &str, fresh_after: i64) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT card, url, fetched_at FROM card_cache WHERE key = ? AND fetched_at > ?", key, fresh_after))
        .await
}

/// Caches a verified card (its canonical text), unless the cache holds [`CACHE_MAX_ROWS`] other
/// keys already (then nothing is written: the cache only saves fetches).
pub fn cache(key: &str, card: &str, url: &str, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO card_cache (key, card, url, fetched_at)
         SELECT ?, ?, ?, ? WHERE (SELECT count(*) FROM card_cache) < ? OR EXISTS (SELECT 1 FROM card_cache WHERE key = ?)
         ON CONFLICT (key) DO UPDATE SET card = excluded.card, url = excluded.url, fetched_at = excluded.fetched_at",
        key,
        card,
        url,
        now,
        CACHE_MAX_ROWS,
        key
    )
}

/// Most rows the card cache holds; each lives five minutes ([`purge`], from the tick).
pub const CACHE_MAX_ROWS: i64 = 10_000;

/// Caches a domain card only while `domain` is pinned to `sig` (the TOFU path: a pin another
/// request set a moment earlier to a different key keeps this card out of the cache), and
/// within [`CACHE_MAX_ROWS`] as [`cache`].
pub fn cache_if_pinned(domain: &str, card: &str, url: &str, now: i64, sig: &str) -> Stmt {
    stmt!(
        "INSERT INTO card_cache (key, card, url, fetched_at)
         SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM pins WHERE domain = ? AND sig = ?)
           AND ((SELECT count(*) FROM card_cache) < ? OR EXISTS (SELECT 1 FROM card_cache WHERE key = ?))
         ON CONFLICT (key) DO UPDATE SET card = excluded.card, url = excluded.url, fetched_at = excluded.fetched_at",
        domain,
        card,
        url,
        now,
        domain,
        sig,
        CACHE_MAX_ROWS,
        domain
    )
}

/// Forgets the cached cards of `domain` and of every agent at it.
pub fn forget_domain(domain: &str) -> Stmt {
    stmt!("DELETE FROM card_cache WHERE key = ? OR key LIKE ?", domain, format!("%@{domain}"))
}

/// Drops cache rows past their five minutes (for the periodic tick).
pub fn purge(now: i64) -> Stmt {
    stmt!("DELETE FROM card_cache WHERE fetched_at <= ?", now - limits::CARD_CACHE_MS)
}
