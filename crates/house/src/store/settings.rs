//! House settings: the self-generated domain key of a house run without a key secret.

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
