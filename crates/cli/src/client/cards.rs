//! The card file: verified cards kept beside the profile (`<profile>.cards`), so a command
//! within a card's five minutes needs no network for it and a `send` to a known agent whose
//! house is down can still seal (docs/SPEC.md, "Client profile").
//!
//! ```text
//! {"cards":{"<domain or address>":{"at","card","url"}},"kind":"card-cache","nyx5":"1"}
//! ```
//!
//! `card` is the canonical text of a card that verified when it was fetched (`at`); it is
//! parsed and verified again whenever it is read, since only `verify` makes a `Verified` card.
//! It is a cache: a missing or unreadable file is an empty one, a failed write is forgotten.
//! Writes are read-modify-write under `<file>.lock`, as the profile's are, and keep the newest
//! [`MAX_CARDS`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Timestamp, limits};

use super::profile::{open_lock, read_json, write_private};

/// The `kind` of a card file.
pub(crate) const KIND: &str = "card-cache";
/// Most cards kept; the ones fetched longest ago leave first.
pub(crate) const MAX_CARDS: usize = 256;
/// The oldest card used when its house cannot be reached (those with a `valid_until` of their
/// own are used until then at most): hours, not days. A kept card says what the recipient
/// asked when it was fetched (its key, its inbox policy); the longer it is kept, the likelier an
/// envelope sealed to it is refused for a reason a fresh card would have avoided
/// (docs/decisions/0051-key-rotation-bounces-nothing.md).
pub(crate) const MAX_STALE_MS: i64 = 6 * 60 * 60 * 1000;
/// The largest card file read.
const MAX_FILE_BYTES: usize = MAX_CARDS * 2 * limits::MAX_DOCUMENT_BYTES;

/// One kept card: its canonical text, the URL its estafeta answered at, and when it was fetched
/// (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) card: String,
    pub(crate) url: String,
    pub(crate) at: i64,
}

/// The card file beside one profile.
#[derive(Debug, Clone)]
pub(crate) struct CardFile {
    path: PathBuf,
}

impl CardFile {
    /// The card file of the profile at `profile`: `<profile>.cards`.
    pub(crate) fn beside(profile: &Path) -> CardFile {
        let mut name = profile.as_os_str().to_owned();
        name.push(".cards");
        CardFile { path: PathBuf::from(name) }
    }

    /// Every kept card; empty when the file is missing or unreadable.
    pub(crate) fn load(&self) -> BTreeMap<String, Kept> {
        if !self.path.exists() {
            return BTreeMap::new();
        }
        read_json(&self.path, MAX_FILE_BYTES).ok().as_ref().and_then(from_value).unwrap_or_default()
    }

    /// Keeps `kept` under `key` (a domain or an address), dropping the cards fetched longest ago
    /// beyond [`MAX_CARDS`]. Answers what the file holds now.
    pub(crate) fn put(&self, key: &str, kept: Kept) -> Result<BTreeMap<String, Kept>, String> {
        let lock = open_lock(&self.path).map_err(|f| f.one_line())?;
        lock.lock().map_err(|e| format!("cannot lock {}: {e}", self.path.display()))?;
        let mut cards = self.load();
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
        let written = write_private(&self.path, &to_value(&cards));
        let _ = lock.unlock();
        written.map(|()| cards)
    }
}

fn to_value(cards: &BTreeMap<String, Kept>) -> Value {
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
    Value::Object(obj([
        ("nyx5", crate::keyfile::VERSION.into()),
        ("kind", KIND.into()),
        ("cards", Value::Object(list)),
    ]))
}

/// The cards of a card file; entries that do not read are skipped, a file of another kind is
/// `None`.
fn from_value(v: &Value) -> Option<BTreeMap<String, Kept>> {
    let o = v.as_object()?;
    if field::str(o, "kind").ok()? != KIND || field::str(o, "nyx5").ok()? != crate::keyfile::VERSION {
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

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nyx5-cards-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn kept(n: i64) -> Kept {
        Kept { card: format!("{{\"n\":{n}}}"), url: "http://h".into(), at: 1_000 + n }
    }

    #[test]
    fn keeps_the_newest_cards_privately_and_reads_a_broken_file_as_empty() {
        let d = dir("bound");
        let file = CardFile::beside(&d.join("agents.json"));
        assert_eq!(file.path, d.join("agents.json.cards"));
        assert!(file.load().is_empty());
        for n in 0..(MAX_CARDS as i64 + 3) {
            file.put(&format!("a{n}@x.test"), kept(n)).unwrap();
        }
        let cards = file.load();
        assert_eq!(cards.len(), MAX_CARDS);
        assert!(!cards.contains_key("a0@x.test") && !cards.contains_key("a2@x.test"), "the oldest leave first");
        assert_eq!(cards.get("a3@x.test"), Some(&kept(3)));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file.path).unwrap().permissions().mode() & 0o777, 0o600);
        // An older fetch never replaces a newer one.
        file.put("a9@x.test", kept(1)).unwrap();
        assert_eq!(file.load().get("a9@x.test"), Some(&kept(9)));

        std::fs::write(&file.path, b"{not json").unwrap();
        assert!(file.load().is_empty());
        file.put("b@x.test", kept(1)).unwrap();
        assert_eq!(file.load().len(), 1, "a broken file is replaced");
        let _ = std::fs::remove_dir_all(&d);
    }
}
