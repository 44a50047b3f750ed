//! House settings: the self-generated domain key of a house run without a key secret, and the
//! self-generated admin token of a `nyx5 serve` house run without `--admin-token`.

use nyx5_proto::crypto::SigningKey;
use nyx5_proto::{Error, Timestamp, b64};

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
