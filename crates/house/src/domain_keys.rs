//! Rotating the domain key (spec §4.1, docs/SPEC.md "Changes from 0.3.1"): the house lists its
//! previous keys until their end, and certifies its stored agent cards again with the current
//! key, a few per tick, so that after the grace period nothing depends on an old key.

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::Context;
use nyx5_proto::sign::verify_object;
use nyx5_proto::{Error, Timestamp, Value};

use crate::auth::Registry;
use crate::ports::{Db, Net};
use crate::{port_error, store};

/// What a runtime reads, or makes on first use, before it builds a house: the stored domain key
/// (and its rotation), the previous keys it still lists, and the admin token. The adapters call
/// these, never the store itself.
pub use crate::store::settings::{ROTATION_GRACE_MS, admin_token, domain_key, previous_domain_keys, rotate_domain_key};

/// Most stored cards certified again in one tick.
pub const RECERTIFY_PER_TICK: i64 = 16;

/// Certified again: the card as stored (`old`) and as it will be (`new`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recertified {
    pub local: String,
    pub old: String,
    pub new: String,
}

impl<'h, D: Db, N: Net> Registry<'h, D, N> {
    /// The new text of a stored card certified by one of this house's previous domain keys (its
    /// certification checked over its bytes), certified by the current key; `None` for a card
    /// that is already current, or not certified by a key this house holds.
    pub fn recertified(&self, text: &str) -> Result<Option<String>, Error> {
        let card = AgentCard::parse(text.as_bytes())?;
        let kid = card.certifier()?;
        if kid == self.config.key.public() {
            return Ok(None);
        }
        if !self.config.previous_keys.iter().any(|p| p.key.public() == kid) {
            return Ok(None);
        }
        if verify_object(card.object(), "certification", Context::AgentCard, |k| *k == kid).is_err() {
            return Ok(None);
        }
        let new = card.recertify(&self.config.key)?;
        Ok(Some(new.to_value().canonical_string()))
    }

    /// Certifies again up to [`RECERTIFY_PER_TICK`] stored cards still certified by a previous
    /// domain key, in one batch, each update guarded by the card text it replaces. Answers how
    /// many were replaced.
    ///
    /// Only keys still within their `until` count (past it a house has had the whole grace to
    /// move its cards, and the scan stops), and never the current key itself (a configuration
    /// that lists it as previous would otherwise match every card and move none).
    pub async fn recertify_some(&self, now: Timestamp) -> Result<usize, Error> {
        let current = self.config.key.public();
        let keys: Vec<Value> = self
            .config
            .previous_keys
            .iter()
            .filter(|p| now < p.until && p.key.public() != current)
            .map(|p| Value::from(p.key.public().to_b64().as_str()))
            .collect();
        if keys.is_empty() {
            return Ok(0);
        }
        let previous = Value::Array(keys);
        let rows = store::domain_keys::stale(self.db, &previous.canonical_string(), RECERTIFY_PER_TICK).await?;
        // The next pass starts after this one's last card, or from the start once a pass
        // reached the end: a card that cannot be certified again is read once a round.
        let last = rows
            .last()
            .and_then(|r| r.text("local"))
            .filter(|_| i64::try_from(rows.len()).is_ok_and(|n| n >= RECERTIFY_PER_TICK));
        let mut stmts = vec![store::domain_keys::move_cursor(last, now.millis())];
        for row in &rows {
            let (Some(local), Some(old)) = (row.text("local"), row.text("card")) else { continue };
            if let Ok(Some(new)) = self.recertified(old) {
                stmts.push(store::domain_keys::recertify(local, old, &new, now.millis()));
            }
        }
        let changes = self.db.batch(stmts).await.map_err(port_error)?;
        Ok(changes.iter().skip(1).filter(|c| **c == 1).count())
    }
}
