//! House settings: the self-generated domain key of a house run without a key secret (and the
//! keys it replaced, while they are still listed), and the self-generated admin token of a
//! `nyx5 serve` house run without `--admin-token`.

use nyx5_proto::card::PreviousDomainKey;
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::{Error, Refusal, Timestamp, b64};

use crate::config::{parse_previous_keys, previous_keys_text, rotated_previous};

use crate::ports::Db;
use crate::{port_error, stmt};

use super::one;

/// The domain key stored in the database, created from `fresh_seed` on first use. Two isolates
/// racing both insert-or-ignore, then both read the one that won.
pub async fn domain_key<D: Db>(db: &D, fresh_seed: [u8; 32], now: Timestamp) -> Result<(SigningKey, Timestamp), Error> {
    db.batch(vec![stmt!(
        "INSERT INTO settings (name, value, created_at) VALUES ('domain_key', ?, ?) ON CONFLICT (name) DO NOTHING",
        b64::encode(&fresh_seed),
        now.millis()
    )])
    .await
    .map_err(port_error)?;
    let row = one(db, stmt!("SELECT value, created_at FROM settings WHERE name = 'domain_key'"))
        .await?
        .ok_or_else(|| Error::new(nyx5_proto::ErrorKind::Internal, "domain key row missing"))?;
    let seed = row
        .text("value")
        .and_then(b64::decode_array::<32>)
        .ok_or_else(|| Error::new(nyx5_proto::ErrorKind::Internal, "stored domain key is not a 32-byte seed"))?;
    Ok((SigningKey::from_seed(seed), Timestamp(row.int("created_at").unwrap_or(0))))
}

/// The admin token stored in the database, created from `fresh` (random bytes) on first use.
/// Returns the token and whether this call created it, so the operator is shown it only once.
pub async fn admin_token<D: Db>(db: &D, fresh: [u8; 32], now: Timestamp) -> Result<(String, bool), Error> {
    let changes = db
        .batch(vec![stmt!(
            "INSERT INTO settings (name, value, created_at) VALUES ('admin_token', ?, ?) ON CONFLICT (name) DO NOTHING",
            b64::encode(&fresh),
            now.millis()
        )])
        .await
        .map_err(port_error)?;
    let row = one(db, stmt!("SELECT value FROM settings WHERE name = 'admin_token'"))
        .await?
        .ok_or_else(|| Error::new(nyx5_proto::ErrorKind::Internal, "admin token row missing"))?;
    let token = row
        .text("value")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::new(nyx5_proto::ErrorKind::Internal, "stored admin token is empty"))?;
    Ok((token.to_owned(), changes.first() == Some(&1)))
}

/// The previous domain keys kept in the database (by `nyx5 serve --rotate-domain-key`).
pub async fn previous_domain_keys<D: Db>(db: &D) -> Result<Vec<PreviousDomainKey>, Error> {
    let row = one(db, stmt!("SELECT value FROM settings WHERE name = 'previous_domain_keys'")).await?;
    match row.as_ref().and_then(|r| r.text("value")) {
        None => Ok(Vec::new()),
        Some(text) => parse_previous_keys(text).map_err(|e| {
            Error::new(nyx5_proto::ErrorKind::Internal, format!("stored previous domain keys: {}", e.reason))
        }),
    }
}

/// How long a rotated-out domain key stays listed (and keeps verifying) by default: 30 days.
pub const ROTATION_GRACE_MS: i64 = 30 * 24 * 3_600_000;

/// Rotates the stored domain key: `fresh_seed` becomes the key, the old one is kept as a
/// previous key until `now + grace_ms` (with those still before their end; at most 7, the
/// newest kept). One batch, both writes guarded by the old key still being stored, so two
/// rotations racing cannot lose a key. Answers the new key and the previous keys.
pub async fn rotate_domain_key<D: Db>(
    db: &D,
    fresh_seed: [u8; 32],
    now: Timestamp,
    grace_ms: i64,
) -> Result<(SigningKey, Vec<PreviousDomainKey>), Error> {
    let (old, created) = domain_key(db, fresh_seed, now).await?;
    let previous = rotated_previous(&old, created, previous_domain_keys(db).await?, now, grace_ms);
    let old_seed = b64::encode(&old.seed());
    let changes = db
        .batch(vec![
            stmt!(
                "INSERT INTO settings (name, value, created_at)
                 SELECT 'previous_domain_keys', ?, ? WHERE EXISTS
                   (SELECT 1 FROM settings WHERE name = 'domain_key' AND value = ?)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                previous_keys_text(&previous),
                now.millis(),
                old_seed.as_str()
            ),
            stmt!(
                "UPDATE settings SET value = ?, created_at = ? WHERE name = 'domain_key' AND value = ?",
                b64::encode(&fresh_seed),
                now.millis(),
                old_seed.as_str()
            ),
        ])
        .await
        .map_err(port_error)?;
    if changes.get(1) != Some(&1) {
        return Err(Refusal::ChangedMeanwhile.because("the domain key changed meanwhile; try again"));
    }
    Ok((SigningKey::from_seed(fresh_seed), previous))
}
