//! The kept cards: verified cards an agent's client keeps between commands (docs/SPEC.md,
//! "Client profile"), so a command within a card's five minutes needs no network for it and a
//! `send` to a known agent whose house is down can still seal. One document in the store's
//! [`SLOT`] (the CLI's `<profile>.cards`):
//!
//! ```text
//! {"cards":{"<domain or address>":{"at","card","url"}},"kind":"card-cache","nyx5":"1"}
//! ```
//!
//! `card` is the canonical text of a card that verified when it was fetched (`at`); it is
//! parsed and verified again whenever it is read, since only `verify` makes a `Verified` card.
//! It is a cache: a missing or unreadable document is an empty one, and it keeps the newest
//! [`MAX_CARDS`]; an older fetch never replaces a newer one ([`keep`]).

use std::collections::BTreeMap;

use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Error, Timestamp, limits};

use crate::profile::VERSION;
use crate::store::{Slot, Store};

/// The `kind` of the kept cards' document.
pub const KIND: &str = "card-cache";
/// Most cards kept; the ones fetched longest ago leave first.
pub const MAX_CARDS: usize = 256;
/// The oldest card used when its house cannot be reached (those with a `valid_until` of their
/// own are used until then at most): hours, not days. A kept card says what the recipient
/// asked when it was fetched (its key, its inbox policy); the longer it is kept, the likelier an
/// envelope sealed to it is refused for a reason a fresh card would have avoided
/// (docs/decisions/0051-key-rotation-bounces-nothing.md).
pub const MAX_STALE_MS: i64 = 6 * 60 * 60 * 1000;
/// Where the kept cards live, and the largest document read.
pub const SLOT: Slot = Slot { name: "cards", max: MAX_CARDS * 2 * limits::MAX_DOCUMENT_BYTES, cache: true };

/// One kept card: its canonical text, the URL its estafeta answered at, and when it was fetched
/// (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub card: String,
    pub url: String,
    pub at: i64,
}

/// Every kept card; empty when there is no document or it cannot be read.
pub fn load(store: &impl Store) -> BTreeMap<String, Kept> {
    store.read(&SLOT).ok().flatten().as_ref().and_then(from_value).unwrap_or_default()
}

/// Keeps `kept` under `key` (a domain or an address) in the store, under its lock, with
/// [`keep`]'s rule. Answers what is kept now.
pub fn put(store: &impl Store, key: &str, kept: Kept) -> Result<BTreeMap<String, Kept>, Error> {
    store.update(&SLOT, |read| {
        let mut cards = read.ok().flatten().as_ref().and_then(from_value).unwrap_or_default();
        keep(&mut cards, key, kept);
        Ok((Some(to_value(&cards)), cards))
    })
}

/// The merge rule: `kept` replaces what is kept under `key` unless that was fetched later; then
/// the cards fetched longest ago leave, beyond [`MAX_CARDS`].
pub fn keep(cards: &mut BTreeMap<String, Kept>, key: &str, kept: Kept) {
    if cards.get(key).is_none_or(|k| k.at <= kept.at) {
        cards.insert(key.to_owned(), kept);
    }
    while cards.len() > MAX_CARDS {
        let oldest = cards.iter().min_by_key(|(_, k)| k.at).map(|(key, _)| key.clone());
        match oldest {
            Some(k) => cards.remove(&k),
            None => break,
        };
    }
}

/// The document of `cards`.
pub fn to_value(cards: &BTreeMap<String, Kept>) -> Value {
    let list: Object = cards
        .iter()
        .map(|(key, k)| {
            let v = obj([
                ("card", k.card.as_str().into()),
                ("url", k.url.as_str().into()),
                ("at", Timestamp(k.at).to_rfc3339().into()),
            ]);
            (key.clone(), Value::Object(v))
        })
        .collect();
    Value::Object(obj([("nyx5", VERSION.into()), ("kind", KIND.into()), ("cards", Value::Object(list))]))
}

/// The cards of a document; entries that do not read are skipped, a document of another kind is
/// `None`.
pub fn from_value(v: &Value) -> Option<BTreeMap<String, Kept>> {
    let o = v.as_object()?;
    if field::str(o, "kind").ok()? != KIND || field::str(o, "nyx5").ok()? != VERSION {
        return None;
    }
    let mut cards = BTreeMap::new();
    for (key, k) in field::object(o, "cards").ok()? {
        let Some(k) = k.as_object() else { continue };
        let text = |name: &str| field::str(k, name).ok().map(str::to_owned);
        let (Some(card), Some(url), Some(at)) = (text("card"), text("url"), text("at")) else { continue };
        let Ok(at) = Timestamp::parse(&at) else { continue };
        cards.insert(key.clone(), Kept { card, url, at: at.millis() });
    }
    Some(cards)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::Memory;

    fn kept(n: i64) -> Kept {
        Kept { card: format!("{{\"n\":{n}}}"), url: "http://h".into(), at: 1_000 + n }
    }

    /// Over an in-memory port: the newest [`MAX_CARDS`] stay, an older fetch never replaces a
    /// newer one, a broken document reads as empty and is replaced.
    #[test]
    fn the_newest_cards_are_kept_and_a_broken_document_is_empty() {
        let store = Memory::default();
        assert!(load(&store).is_empty());
        for n in 0..(MAX_CARDS as i64 + 3) {
            put(&store, &format!("a{n}@x.test"), kept(n)).unwrap();
        }
        let cards = load(&store);
        assert_eq!(cards.len(), MAX_CARDS);
        assert!(!cards.contains_key("a0@x.test") && !cards.contains_key("a2@x.test"), "the oldest leave first");
        assert_eq!(cards.get("a3@x.test"), Some(&kept(3)));
        put(&store, "a9@x.test", kept(1)).unwrap();
        assert_eq!(load(&store).get("a9@x.test"), Some(&kept(9)), "an older fetch never replaces a newer one");

        store.put_bytes(&SLOT, b"{not json".to_vec());
        assert!(load(&store).is_empty());
        put(&store, "b@x.test", kept(1)).unwrap();
        assert_eq!(load(&store).len(), 1, "a broken document is replaced");
        // A document of another kind is not read as cards.
        let other = Value::Object(obj([("nyx5", VERSION.into()), ("kind", "bookmarks".into())]));
        store.put_bytes(&SLOT, other.canonical());
        assert!(load(&store).is_empty());
    }
}
