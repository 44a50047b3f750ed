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

/// Pins the first key seen for `domain` (of site `site`), keeping a pin already there: nothing
/// is pinned while the site holds `per_site` pins (read through `pins_site`, at most `per_site`
/// rows) or the table holds `total` (the counter row `row_counts.pins` that migration 0018's
/// triggers keep, not a count of the table). The row count says whether it pinned; a domain
/// not pinned for room is trusted as on first use, unpinned, never refused, and no pin is ever
/// pushed out to make room (that would open trust on first use again for a domain already
/// trusted).
pub fn insert_pin(domain: &str, site: &str, sig: &str, now: i64, per_site: i64, total: i64) -> Stmt {
    stmt!(
        "INSERT INTO pins (domain, site, sig, first_seen)
         SELECT ?, ?, ?, ?
          WHERE (SELECT n FROM row_counts WHERE name = 'pins') < ?
            AND (SELECT count(*) FROM (SELECT 1 FROM pins WHERE site = ? LIMIT ?)) < ?
         ON CONFLICT (domain) DO NOTHING",
        domain,
        site,
        sig,
        now,
        total,
        site,
        per_site,
        per_site
    )
}

/// Pins given their site in one tick (see [`fill_pin_sites`]).
pub const PIN_SITES_PER_TICK: i64 = 64;

/// Gives up to `limit` pins made before migration 0005, which recorded no site, the site of
/// their domain (`site.rs`), in one batch; answers how many. Each write is guarded by the site
/// still missing, and the site is a function of the domain alone, so two ticks at once write
/// the same thing. Found through `pins_site` (NULL first): it reads the rows it fills.
pub async fn fill_pin_sites<D: Db>(db: &D, limit: i64) -> Result<usize, Error> {
    let rows = query(db, stmt!("SELECT domain FROM pins WHERE site IS NULL LIMIT ?", limit)).await?;
    let stmts: Vec<Stmt> = rows
        .iter()
        .filter_map(|r| r.text("domain"))
        .map(|domain| set_pin_site(domain, crate::site::site(domain)))
        .collect();
    if stmts.is_empty() {
        return Ok(0);
    }
    let changes = db.batch(stmts).await.map_err(crate::port_error)?;
    Ok(changes.iter().filter(|c| **c == 1).count())
}

/// Records the site of a pin that has none (a pin made before migration 0005), so that it
/// counts towards its site's bound as every later pin does.
pub fn set_pin_site(domain: &str, site: &str) -> Stmt {
    stmt!("UPDATE pins SET site = ? WHERE domain = ? AND site IS NULL", site, domain)
}

/// Counts one fetch of a name the resolver knows no fresh card for, in one batch: a new name
/// against its site's window `resolve:<site>` (at most `cap` a minute), a name known without a
/// pin (`known_names`) against the site's separate window `known:<site>` (at most `known_cap`),
/// a pinned one against nothing; the CHECK `rate_cap` fails the batch past either cap. A
/// stranger spending the site's new names cannot touch the budget of the names that verified
/// there (only the site's owner can make a name verify), and a name that verified once still
/// costs something each time its cache has expired (hostile review of issue 35, L1: a known name
/// whose DNS record was then pointed elsewhere made the house fetch without a bound).
pub fn count_new_name(domain: &str, site: &str, window: i64, cap: i64, known_cap: i64) -> Vec<Stmt> {
    vec![
        stmt!(
            "INSERT INTO rate_windows (bucket, window, count, cap)
             SELECT ?, ?, 1, ? WHERE NOT EXISTS (SELECT 1 FROM pins WHERE domain = ?)
                                 AND NOT EXISTS (SELECT 1 FROM known_names WHERE domain = ?)
             ON CONFLICT (bucket, window) DO UPDATE SET count = count + 1",
            format!("resolve:{site}"),
            window,
            cap,
            domain,
            domain
        ),
        stmt!(
            "INSERT INTO rate_windows (bucket, window, count, cap)
             SELECT ?, ?, 1, ? WHERE NOT EXISTS (SELECT 1 FROM pins WHERE domain = ?)
                                 AND EXISTS (SELECT 1 FROM known_names WHERE domain = ?)
             ON CONFLICT (bucket, window) DO UPDATE SET count = count + 1",
            format!("known:{site}"),
            window,
            known_cap,
            domain,
            domain
        ),
    ]
}

/// Records that `domain` (of site `site`) showed a card that verified at `now` without a pin
/// (see migration 0020): a name already known has its time renewed; a new one is recorded only
/// while its site holds fewer than `per_site` and the table fewer than `total` (the counter row
/// `row_counts.known_names`), and nothing is pushed out to make room.
pub fn remember_name(domain: &str, site: &str, now: i64, per_site: i64, total: i64) -> Stmt {
    stmt!(
        "INSERT INTO known_names (domain, site, seen_at)
         SELECT ?1, ?2, ?3
          WHERE EXISTS (SELECT 1 FROM known_names WHERE domain = ?1)
             OR ((SELECT n FROM row_counts WHERE name = 'known_names') < ?4
                 AND (SELECT count(*) FROM (SELECT 1 FROM known_names WHERE site = ?2 LIMIT ?5)) < ?5)
         ON CONFLICT (domain) DO UPDATE SET seen_at = excluded.seen_at",
        domain,
        site,
        now,
        total,
        per_site
    )
}

/// Counts one forced fetch of a card in `bucket` for `window`, at most `cap` (the rate cap
/// refuses the batch past it): see `PinStore::admit_refresh`.
pub fn count_refresh(bucket: &str, window: i64, cap: i64) -> Stmt {
    stmt!(
        "INSERT INTO rate_windows (bucket, window, count, cap) VALUES (?, ?, 1, ?)
         ON CONFLICT (bucket, window) DO UPDATE SET count = count + 1",
        bucket,
        window,
        cap
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

/// The slots of the card cache, and so its most rows (migration 0015).
pub const CACHE_SLOTS: u64 = 10_000;

/// The slot of `key` in the card cache: the first eight bytes of its SHA-256, modulo
/// [`CACHE_SLOTS`]. Two keys in one slot take turns: a turn costs a fetch (and, for a domain
/// with no pin, one of its site's new names a minute), never a wrong card (a row is read only
/// under the key it names).
pub fn slot(key: &str) -> i64 {
    let [b0, b1, b2, b3, b4, b5, b6, b7, ..] = nyx5_proto::crypto::sha256(key.as_bytes());
    let n = u64::from_be_bytes([b0, b1, b2, b3, b4, b5, b6, b7]) % CACHE_SLOTS;
    i64::try_from(n).unwrap_or_default()
}

/// A cached card for `key` (a domain or an address) fetched after `fresh_after`, with the key
/// its domain is pinned to now (`pin`, for a domain that has a pin).
pub async fn cached<D: Db>(db: &D, key: &str, fresh_after: i64) -> Result<Option<Row>, Error> {
    one(db, cached_query(key, fresh_after)).await
}

/// The query of [`cached`]: one row, found by its slot, and the pin of its key, by the pin's key.
pub fn cached_query(key: &str, fresh_after: i64) -> Stmt {
    stmt!(
        "SELECT card_slots.card AS card, card_slots.url AS url, card_slots.fetched_at AS fetched_at, pins.sig AS pin
           FROM card_slots LEFT JOIN pins ON pins.domain = card_slots.key
          WHERE card_slots.slot = ? AND card_slots.key = ? AND card_slots.fetched_at > ?",
        slot(key),
        key,
        fresh_after
    )
}

/// Caches a verified card (its canonical text) in its key's slot, in place of whatever the slot
/// held.
pub fn cache(key: &str, card: &str, url: &str, now: i64) -> Stmt {
    stmt!(
        "INSERT INTO card_slots (slot, key, card, url, fetched_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (slot) DO UPDATE
           SET key = excluded.key, card = excluded.card, url = excluded.url, fetched_at = excluded.fetched_at",
        slot(key),
        key,
        card,
        url,
        now
    )
}

/// Caches a domain card only while `domain` is pinned to `sig` (the TOFU path: a pin another
/// request set a moment earlier to a different key keeps this card out of the cache), in its
/// slot as [`cache`].
pub fn cache_if_pinned(domain: &str, card: &str, url: &str, now: i64, sig: &str) -> Stmt {
    stmt!(
        "INSERT INTO card_slots (slot, key, card, url, fetched_at)
         SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM pins WHERE domain = ? AND sig = ?)
         ON CONFLICT (slot) DO UPDATE
           SET key = excluded.key, card = excluded.card, url = excluded.url, fetched_at = excluded.fetched_at",
        slot(domain),
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
    stmt!("DELETE FROM card_slots WHERE key = ? OR key LIKE ?", domain, format!("%@{domain}"))
}

/// Drops cache rows past their five minutes (for the periodic tick).
pub fn purge(now: i64) -> Stmt {
    stmt!("DELETE FROM card_slots WHERE fetched_at <= ?", now - limits::CARD_CACHE_MS)
}

/// Forgets names whose card last verified more than `keep_ms` ago (for the periodic tick).
pub fn forget_names(now: i64, keep_ms: i64) -> Stmt {
    stmt!("DELETE FROM known_names WHERE seen_at <= ?", now.saturating_sub(keep_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_spread_keys_over_the_whole_range_and_never_past_it() {
        let slots: std::collections::BTreeSet<i64> = (0..20_000).map(|i| slot(&format!("a{i}@x.test"))).collect();
        assert!(slots.iter().all(|s| (0..10_000).contains(s)), "{:?}", (slots.first(), slots.last()));
        // 20,000 keys over 10,000 slots leave about e^-2 of them empty.
        assert!(slots.len() > 8_000, "{} slots used", slots.len());
        assert_eq!(slot("ana@x.test"), slot("ana@x.test"));
        assert_ne!(slot("ana@x.test"), slot("bob@x.test"));
    }
}
