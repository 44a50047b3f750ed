//! The `nyx5-bookmark` header as a client sees it (docs/SPEC.md "Reading your own writes"): an
//! opaque value a house hands out and reads back. How a house seals it is the house's
//! (`nyx5_house::bookmark`); its name and the longest value a house reads are the wire's. And
//! the client's bookkeeping of them: the last one each house sent, kept in the store's [`SLOT`]
//! so that what one command wrote the next one reads.

use nyx5_proto::Error;
use nyx5_proto::json::{Object, Value, field, obj};

use crate::profile::VERSION;
use crate::store::{Slot, Store};

/// The header's name, in requests and answers.
pub const HEADER: &str = "nyx5-bookmark";
/// The longest bookmark a house seals (D1's are 59 characters); an answer whose bookmark is
/// longer carries none.
pub const MAX_BOOKMARK_BYTES: usize = 256;
/// The sealed value's nonce (AES-256-GCM's IV) and tag, around the bookmark.
pub const IV_BYTES: usize = 12;
pub const TAG_BYTES: usize = 16;
/// The longest header value read: a sealed bookmark of [`MAX_BOOKMARK_BYTES`] in base64url
/// (380 characters). A longer one is refused unread.
pub const MAX_HEADER_CHARS: usize = ((IV_BYTES + MAX_BOOKMARK_BYTES + TAG_BYTES) * 4).div_ceil(3);

/// Where a client keeps the last bookmark of each house (`{"bookmarks":{"<host>":"<value>"},
/// "kind":"bookmarks","nyx5":"1"}`, the CLI's `<profile>.bookmarks`), and the largest read.
pub const SLOT: Slot = Slot { name: "bookmarks", max: MAX_BOOKMARKS * (MAX_HEADER_CHARS + 300), cache: true };
/// The `kind` of the bookmarks' document.
pub const KIND: &str = "bookmarks";
/// Most houses whose bookmark is kept; the one kept longest leaves first.
pub const MAX_BOOKMARKS: usize = 64;

/// Whether `b` is a value a house could have sent: base64url, within the header's bound.
pub fn shaped(b: &str) -> bool {
    !b.is_empty()
        && b.len() <= MAX_HEADER_CHARS
        && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

/// `list` with `host`'s bookmark set to `b`, newest last, at most [`MAX_BOOKMARKS`].
pub fn put(list: &mut Vec<(String, String)>, host: &str, b: String) {
    list.retain(|(h, _)| h != host);
    list.push((host.to_owned(), b));
    let over = list.len().saturating_sub(MAX_BOOKMARKS);
    list.drain(..over);
}

/// The bookmarks kept in `store` (host, value), each shaped as a house sends them; none when
/// there is no document, or it cannot be read, or is of another kind.
pub fn load(store: &impl Store) -> Vec<(String, String)> {
    store.read(&SLOT).ok().flatten().as_ref().map(from_value).unwrap_or_default()
}

/// Keeps `host`'s bookmark `b` in `store`, under its lock, with the other houses' ([`put`]).
pub fn keep(store: &impl Store, host: &str, b: &str) -> Result<(), Error> {
    store.update(&SLOT, |read| {
        let mut held = read.ok().flatten().as_ref().map(from_value).unwrap_or_default();
        put(&mut held, host, b.to_owned());
        Ok((Some(to_value(held)), ()))
    })
}

fn from_value(v: &Value) -> Vec<(String, String)> {
    let Value::Object(o) = v else { return Vec::new() };
    let ours = field::str(o, "kind").ok() == Some(KIND) && field::str(o, "nyx5").ok() == Some(VERSION);
    let Some(list) = field::object(o, "bookmarks").ok().filter(|_| ours) else { return Vec::new() };
    let mut held = Vec::new();
    for (host, b) in list {
        if let Some(b) = b.as_str().filter(|b| shaped(b)) {
            put(&mut held, host, b.to_owned());
        }
    }
    held
}

fn to_value(held: Vec<(String, String)>) -> Value {
    let list: Object = held.into_iter().map(|(h, b)| (h, Value::from(b))).collect();
    Value::Object(obj([("nyx5", VERSION.into()), ("kind", KIND.into()), ("bookmarks", Value::Object(list))]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::Memory;

    /// Over an in-memory port: one bookmark per house, the newest [`MAX_BOOKMARKS`] houses, only
    /// values a house could have sent, and a document of another kind reads as none.
    #[test]
    fn the_last_bookmark_of_each_house_is_kept_within_the_bound() {
        let store = Memory::default();
        assert!(load(&store).is_empty());
        for n in 0..(MAX_BOOKMARKS + 2) {
            keep(&store, &format!("h{n}.test"), &format!("b{n}")).unwrap();
        }
        keep(&store, "h5.test", "again").unwrap();
        let held = load(&store);
        assert_eq!(held.len(), MAX_BOOKMARKS);
        assert!(!held.iter().any(|(h, _)| h == "h0.test" || h == "h1.test"), "the oldest leave first");
        assert_eq!(held.iter().filter(|(h, _)| h == "h5.test").count(), 1);
        assert!(held.iter().any(|(h, b)| h == "h5.test" && b == "again"));

        let doc = obj([
            ("nyx5", VERSION.into()),
            ("kind", KIND.into()),
            ("bookmarks", Value::Object(obj([("a.test", "ok-_1".into()), ("b.test", "not shaped!".into())]))),
        ]);
        store.put_bytes(&SLOT, Value::Object(doc.clone()).canonical());
        assert_eq!(load(&store), [("a.test".to_owned(), "ok-_1".to_owned())]);
        let mut other = doc;
        other.insert("kind".into(), "card-cache".into());
        store.put_bytes(&SLOT, Value::Object(other).canonical());
        assert!(load(&store).is_empty());
        assert!(!shaped("") && !shaped(&"A".repeat(MAX_HEADER_CHARS + 1)) && shaped(&"A".repeat(MAX_HEADER_CHARS)));
    }
}
