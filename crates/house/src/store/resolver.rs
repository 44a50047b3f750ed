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

/// Pins the first key seen for `domain`; a pin already there is kept (the row count says which).
pub fn insert_pin(domain: &str, sig: &str, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO pins (domain, sig, first_seen) VALUES (?, ?, ?) ON CONFLICT (domain) DO NOTHING",
        domain,
        sig,
        now
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

/// Caches a verified card (its canonical text).
pub fn cache(key: &str, card: &str, url: &str, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO card_cache (key, card, url, fetched_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (key) DO UPDATE SET card = excluded.card, url = excluded.url, fetched_at = excluded.fetched_at",
        key,
        card,
        url,
        now
    )
}

/// Caches a domain card only while `domain` is pinned to `sig` (the TOFU path: a pin another
/// request set a moment earlier to a different key keeps this card out of the cache).
pub fn cache_if_pinned(domain: &str, card: &str, url: &str, now: i64, sig: &str) -> Stmt {
    stmt!(
        "INSERT INTO card_cache (key, card, url, fetched_at)
         SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM pins WHERE domain = ? AND sig = ?)
         ON CONFLICT (key) DO UPDATE SET card = excluded.card, url = excluded.url, fetched_at = excluded.fetched_at",
        domain,
        card,
        url,
        now,
        domain,
        sig
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
