//! The storage port: what an agent's client keeps between commands (or page loads), as one JSON
//! document per named [`Slot`] — the profile, the kept cards, the bookmarks — each read whole
//! within its slot's bound and replaced whole. The rules of what a slot holds (its bounds, how a
//! new entry merges with the kept ones) are this crate's (`cards`, `pins`, `bookmark`,
//! `profile`); where the documents live is the caller's: the CLI's files beside the profile
//! (a lock per file, 0600, written aside and renamed), the browser's storage, a test's
//! [`Memory`].

use std::cell::RefCell;
use std::collections::BTreeMap;

use nyx5_proto::json::Value;
use nyx5_proto::{Error, ErrorKind};

/// A named document a client keeps, and the most bytes (canonical JSON) it is read within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its name: the CLI's file of a slot is `<profile>.<name>`, the profile's own is the profile.
    pub name: &'static str,
    /// The largest document read; a larger one is an error, never read in part.
    pub max: usize,
    /// Whether the slot only saves work (kept cards, bookmarks): one that does not read may be
    /// written over. A slot that is no cache (the profile, which holds the agents' keys) never
    /// is, whatever `change` answers ([`apply`]).
    pub cache: bool,
}

/// What an [`Store::update`] writes: `change`'s answer to what was `read`, unless the read failed
/// and the slot is no cache — then nothing, and an error, so a moment's unreadable profile (a
/// half-edited file, an I/O error) is never replaced and its keys lost, by any caller.
pub fn apply<T>(
    slot: &Slot,
    read: Result<Option<Value>, Error>,
    change: impl FnOnce(Result<Option<Value>, Error>) -> Result<(Option<Value>, T), Error>,
) -> Result<(Option<Value>, T), Error> {
    let unread = read.is_err();
    let (doc, out) = change(read)?;
    if unread && !slot.cache && doc.is_some() {
        return Err(Error::new(
            ErrorKind::Internal,
            format!("the {} did not read, so it is not written over", slot.name),
        ));
    }
    Ok((doc, out))
}

/// Where a client's documents live.
pub trait Store {
    /// The document kept in `slot`, or `None` when there is none. A document that cannot be read
    /// (larger than `slot.max`, not JSON, unreadable) is an error.
    fn read(&self, slot: &Slot) -> Result<Option<Value>, Error>;

    /// Changes `slot` under its exclusive lock (another process's update waits for this one):
    /// reads it as [`Store::read`] does, hands `change` what it read (or why it could not), and
    /// when `change` answers a document, replaces the slot with it at once (a reader sees the old
    /// or the new, never a part). Nothing is written when `change` fails or answers `None`.
    fn update<T>(
        &self,
        slot: &Slot,
        change: impl FnOnce(Result<Option<Value>, Error>) -> Result<(Option<Value>, T), Error>,
    ) -> Result<T, Error>;
}

impl<S: Store> Store for &S {
    fn read(&self, slot: &Slot) -> Result<Option<Value>, Error> {
        (**self).read(slot)
    }

    fn update<T>(
        &self,
        slot: &Slot,
        change: impl FnOnce(Result<Option<Value>, Error>) -> Result<(Option<Value>, T), Error>,
    ) -> Result<T, Error> {
        (**self).update(slot, change)
    }
}

/// A store in memory: each slot's canonical bytes, held to the slot's bound as a file is. For
/// tests, and for a client that keeps nothing beyond its run.
#[derive(Debug, Default)]
pub struct Memory {
    slots: RefCell<BTreeMap<&'static str, Vec<u8>>>,
}

impl Memory {
    /// The bytes kept in `slot`, as written.
    pub fn bytes(&self, slot: &Slot) -> Option<Vec<u8>> {
        self.slots.borrow().get(slot.name).cloned()
    }

    /// Puts `bytes` in `slot` as they are (a test's way to leave a broken document there).
    pub fn put_bytes(&self, slot: &Slot, bytes: Vec<u8>) {
        self.slots.borrow_mut().insert(slot.name, bytes);
    }
}

impl Store for Memory {
    fn read(&self, slot: &Slot) -> Result<Option<Value>, Error> {
        let bytes = self.slots.borrow().get(slot.name).cloned();
        bytes
            .map(|b| {
                Value::parse(&b, slot.max)
                    .map_err(|e| Error::new(ErrorKind::Internal, format!("{}: {}", slot.name, e.reason)))
            })
            .transpose()
    }

    fn update<T>(
        &self,
        slot: &Slot,
        change: impl FnOnce(Result<Option<Value>, Error>) -> Result<(Option<Value>, T), Error>,
    ) -> Result<T, Error> {
        let (doc, out) = apply(slot, self.read(slot), change)?;
        if let Some(doc) = doc {
            self.slots.borrow_mut().insert(slot.name, doc.canonical());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A change that ignores why the slot did not read and answers a fresh document, as a
    /// cache's reader does.
    fn fresh(read: Result<Option<Value>, Error>) -> Result<(Option<Value>, bool), Error> {
        Ok((Some(Value::Object(Default::default())), read.is_err()))
    }

    #[test]
    fn a_profile_that_does_not_read_is_never_written_over_and_a_cache_is() {
        let store = Memory::default();
        let profile = Slot { name: "profile", max: 1024, cache: false };
        let cards = Slot { name: "cards", max: 1024, cache: true };
        let broken = br#"{"nyx5": 1, "agents": {"ana@a.test": {"sig_secret": "#.to_vec();
        store.put_bytes(&profile, broken.clone());
        store.put_bytes(&cards, broken.clone());
        let refused = store.update(&profile, fresh).unwrap_err();
        assert_eq!(refused.kind, ErrorKind::Internal);
        assert_eq!(store.bytes(&profile), Some(broken.clone()), "the keys' document is left as it was");
        assert!(store.update(&cards, fresh).unwrap(), "the cache did not read");
        assert_eq!(store.bytes(&cards), Some(b"{}".to_vec()));
        // A profile that reads is written as the change answers.
        store.put_bytes(&profile, b"{}".to_vec());
        assert!(!store.update(&profile, fresh).unwrap());
    }
}
