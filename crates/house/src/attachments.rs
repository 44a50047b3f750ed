//! Sealed attachments (docs/SPEC.md "Attachments"; issue 38 §4; docs/decisions/0074-attachments.md).
//!
//! A file an agent sends is encrypted on its side with a key of its own; the house keeps only the
//! ciphertext, in parts of [`PART_BYTES`] written one request each (so no request passes the
//! house's 2 MiB, on either runtime), in its blob store ([`crate::ports::Blobs`]: R2 on the Worker,
//! files under `nyx5 serve`). Its record says how large the ciphertext is and its hash, who may
//! read it (its owner and the addresses the owner named, at any house: a reader proves itself
//! with its own token) and until when. The key travels in the envelope's sealed content, so the
//! house never reads the file.
//!
//! Bounded: [`MAX_SEALED_BYTES`] an attachment, [`MAX_LIVE`] attachments and [`MAX_LIVE_BYTES`]
//! per owner, counted until they are forgotten (ended ones too, until the purge); an attachment
//! lives an hour to [`MAX_LIFE_MS`], and its parts are removed by the purge of the first minute
//! after [`PURGE_GRACE_MS`] past its end (a part being written when it ends is written before
//! then; one written after its record ended removes itself).

use nyx5_proto::json::field;
use nyx5_proto::{Address, Error, Object, Refusal, Timestamp, Value};

use crate::ports::{Blobs, Db, Net};
use crate::store::attachments as store;
use crate::view::{Core, view};

/// The attachments of the house's agents (`House::attachments`).
pub struct Attachments<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
}

view!(Attachments);

/// The size of every part but the last.
pub const PART_BYTES: i64 = 1024 * 1024;
/// The largest file: 25 MiB.
pub const MAX_FILE_BYTES: i64 = 25 * 1024 * 1024;
/// The largest ciphertext: the file and AES-GCM's 16-byte tag.
pub const MAX_SEALED_BYTES: i64 = MAX_FILE_BYTES + 16;
/// Live attachments one agent may keep at once.
pub const MAX_LIVE: i64 = 100;
/// Bytes of live attachments one agent may keep at once.
pub const MAX_LIVE_BYTES: i64 = 256 * 1024 * 1024;
/// An attachment's life when its owner names none.
pub const DEFAULT_LIFE_MS: i64 = 14 * 24 * 3_600_000;
/// The longest life an attachment may have.
pub const MAX_LIFE_MS: i64 = 30 * 24 * 3_600_000;
/// The shortest: an hour (its parts count against the quota until the purge removes them anyway).
pub const MIN_LIFE_MS: i64 = 3_600_000;
/// How long after its end an attachment's parts are removed.
pub const PURGE_GRACE_MS: i64 = 3_600_000;
/// Attachments one purge removes per batch (a blob store's call each), and the batches one purge
/// runs at most while each finds a whole one.
pub const PURGE_BATCH: i64 = 8;
pub const PURGE_BATCHES: usize = 4;
/// Readers one attachment may name (an envelope's recipients at most).
pub const MAX_READERS: usize = nyx5_proto::limits::MAX_RECIPIENTS;

/// The owner the email bridge keeps `to`'s email files under: apart from what `to` sends (its own
/// quota), and no agent's name (a local part has no `:`).
pub fn email_owner(to: &Address) -> String {
    format!("{}:{}", crate::config::GATEWAY_LOCAL, to.local())
}

/// Files the email bridge keeps of one email at most (each costs the email event two queries and
/// a store call; a Worker invocation on the Free plan has 50 queries).
pub const MAX_EMAIL_FILES: usize = 4;

/// The key of part `n` of attachment `id` in the blob store.
pub fn part_key(id: &str, n: i64) -> String {
    format!("att/{id}/{n}")
}

/// How many parts a ciphertext of `bytes` has.
pub fn parts_of(bytes: i64) -> i64 {
    (bytes + PART_BYTES - 1) / PART_BYTES
}

/// An attachment as its owner describes it before its parts (`POST /attachments`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// The ciphertext's size and SHA-256 (64 lower-case hex digits).
    pub bytes: i64,
    pub sha256: String,
    /// Who may read it besides its owner.
    pub readers: Vec<Address>,
    /// Its end; the house's default when not named.
    pub expires: Option<Timestamp>,
}

impl Description {
    /// Reads `{bytes, sha256, to: [address…], expires?}`. Pure.
    pub fn from_object(o: &Object) -> Result<Description, Error> {
        let bad = |why: String| Refusal::BadAttachment.because(why);
        let bytes = field::integer(o, "bytes").map_err(|e| bad(e.reason.to_string()))?;
        if bytes > MAX_SEALED_BYTES {
            return Err(Refusal::AttachmentTooLarge.because(format!(
                "an attachment is at most {MAX_FILE_BYTES} bytes of file ({MAX_SEALED_BYTES} sealed); this one is {bytes}"
            )));
        }
        if bytes < 17 {
            return Err(bad(format!("`bytes` is the sealed size, at least 17 (a byte and its tag); {bytes} is not")));
        }
        let sha256 = field::str(o, "sha256").map_err(|e| bad(e.reason.to_string()))?;
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(bad("`sha256` is 64 lower-case hex digits".into()));
        }
        let list = field::array(o, "to").map_err(|e| bad(e.reason.to_string()))?;
        if list.is_empty() || list.len() > MAX_READERS {
            return Err(bad(format!("`to` names 1 to {MAX_READERS} readers")));
        }
        let mut readers: Vec<Address> = Vec::with_capacity(list.len());
        for v in list {
            let a =
                v.as_str().and_then(|s| Address::parse(s).ok()).ok_or_else(|| bad("`to` lists addresses".into()))?;
            if !readers.contains(&a) {
                readers.push(a);
            }
        }
        let expires = match o.get("expires") {
            None => None,
            Some(Value::String(s)) => {
                Some(Timestamp::parse(s).map_err(|_| bad("`expires` is an RFC 3339 time".into()))?)
            }
            Some(_) => return Err(bad("`expires` is an RFC 3339 time".into())),
        };
        Ok(Description { bytes, sha256: sha256.to_owned(), readers, expires })
    }
}

/// A new attachment: where it is read and what its owner uploads next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub id: String,
    pub url: String,
    pub parts: i64,
    pub expires: Timestamp,
}

/// An attachment as a reader learns it (`GET /attachments/:id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub bytes: i64,
    pub sha256: String,
    pub parts: i64,
    pub complete: bool,
    pub expires: Timestamp,
}

impl<'h, D: Db, N: Net> Attachments<'h, D, N> {
    fn blobs(&self) -> Result<&'h dyn Blobs, Error> {
        self.core.blobs.ok_or_else(|| Refusal::AttachmentsOff.because("this house keeps no attachments"))
    }

    /// The URL a reader fetches attachment `id` at.
    pub fn url(&self, id: &str) -> String {
        format!("{}/attachments/{id}", self.config.public_url)
    }

    /// Records a new attachment of `owner` (a local agent, authenticated), within its quota.
    pub async fn create(&self, owner: &str, d: &Description) -> Result<Created, Error> {
        self.blobs()?;
        let now = self.now().millis();
        let expires = d.expires.map_or(now + DEFAULT_LIFE_MS, |t| t.0);
        if expires < now + MIN_LIFE_MS || expires > now + MAX_LIFE_MS {
            return Err(Refusal::BadAttachment.because(format!(
                "`expires` is at least an hour and at most {} days ahead",
                MAX_LIFE_MS / 86_400_000
            )));
        }
        let id = self.new_id();
        let parts = parts_of(d.bytes);
        let readers = Value::Array(d.readers.iter().map(|a| a.as_str().into()).collect()).canonical_string();
        let insert =
            store::create(&id, owner, (d.bytes, &d.sha256, parts), &readers, now, expires, (MAX_LIVE, MAX_LIVE_BYTES));
        let changed = self.db.batch(vec![insert]).await.map_err(crate::port_error)?;
        if changed.first() != Some(&1) {
            return Err(Refusal::AttachmentsFull.because(format!(
                "an agent keeps at most {MAX_LIVE} attachments and {MAX_LIVE_BYTES} bytes of them at once"
            )));
        }
        Ok(Created { url: self.url(&id), id, parts, expires: Timestamp(expires) })
    }

    /// Stores part `n` of `owner`'s attachment `id`: exactly [`PART_BYTES`] but the last, which
    /// holds the rest. Storing a part again replaces it. Answers how many parts are missing.
    pub async fn put_part(&self, owner: &Address, id: &str, n: i64, bytes: Vec<u8>) -> Result<i64, Error> {
        if owner.domain() != self.config.domain {
            return Err(Refusal::UnknownAttachment.because(format!("{owner} has no attachment {id} here")));
        }
        self.store_part(owner.local(), id, n, bytes).await
    }

    /// [`Attachments::put_part`] for the owner named `owner` (a local agent's name, or what the
    /// email bridge keeps an agent's email files under, [`email_owner`]).
    pub(crate) async fn store_part(&self, owner: &str, id: &str, n: i64, bytes: Vec<u8>) -> Result<i64, Error> {
        let blobs = self.blobs()?;
        let now = self.now().millis();
        let row = store::get(self.db, id, now).await?;
        let row = row
            .filter(|r| r.text("owner") == Some(owner))
            .ok_or_else(|| Refusal::UnknownAttachment.because(format!("no attachment {id} of {owner} here")))?;
        let (size, parts) = (row.int("bytes").unwrap_or(0), row.int("parts").unwrap_or(0));
        if !(0..parts).contains(&n) {
            return Err(Refusal::BadAttachment.because(format!("attachment {id} has parts 0 to {}", parts - 1)));
        }
        let want = if n == parts - 1 { size - PART_BYTES * (parts - 1) } else { PART_BYTES };
        if i64::try_from(bytes.len()).ok() != Some(want) {
            return Err(
                Refusal::BadAttachment.because(format!("part {n} of {id} is {want} bytes, not {}", bytes.len()))
            );
        }
        blobs.put(&part_key(id, n), bytes).await.map_err(crate::port_error)?;
        let changed = self.db.batch(vec![store::stored(id, owner, n, now)]).await.map_err(crate::port_error)?;
        if changed.first() != Some(&1) {
            // Ended or removed while the part was written: the part goes too, or nothing would
            // ever point at it (the purge works from records).
            let _ = blobs.delete(vec![part_key(id, n)]).await;
            return Err(Refusal::UnknownAttachment.because(format!("attachment {id} ended while its part was stored")));
        }
        let got = row.int("got").unwrap_or(0) | (1_i64 << n);
        Ok((0..parts).filter(|k| got & (1_i64 << k) == 0).count() as i64)
    }

    /// Attachment `id` as `reader` may see it: its owner or one of the readers it named.
    pub async fn show(&self, reader: &Address, id: &str) -> Result<Shown, Error> {
        self.blobs()?;
        let row = self.readable(reader, id).await?;
        let parts = row.int("parts").unwrap_or(0);
        let got = row.int("got").unwrap_or(0);
        Ok(Shown {
            bytes: row.int("bytes").unwrap_or(0),
            sha256: row.text("sha256").unwrap_or_default().to_owned(),
            parts,
            complete: (0..parts).all(|k| got & (1_i64 << k) != 0),
            expires: Timestamp(row.int("expires").unwrap_or(0)),
        })
    }

    /// Part `n` of attachment `id`, for `reader` (see [`Attachments::show`]), once every part is
    /// stored.
    pub async fn part(&self, reader: &Address, id: &str, n: i64) -> Result<Vec<u8>, Error> {
        let blobs = self.blobs()?;
        let row = self.readable(reader, id).await?;
        let (parts, got) = (row.int("parts").unwrap_or(0), row.int("got").unwrap_or(0));
        if !(0..parts).contains(&n) {
            return Err(Refusal::BadAttachment.because(format!("attachment {id} has parts 0 to {}", parts - 1)));
        }
        if !(0..parts).all(|k| got & (1_i64 << k) != 0) {
            return Err(Refusal::AttachmentIncomplete.because(format!("attachment {id} is not wholly stored yet")));
        }
        blobs
            .get(&part_key(id, n))
            .await
            .map_err(crate::port_error)?
            .ok_or_else(|| Refusal::UnknownAttachment.because(format!("part {n} of {id} is gone")))
    }

    /// The live attachment `id` if `reader` may read it; else unknown (its being there is not
    /// said to others).
    async fn readable(&self, reader: &Address, id: &str) -> Result<crate::ports::Row, Error> {
        let unknown = || Refusal::UnknownAttachment.because(format!("no attachment {id} here for {reader}"));
        let row = store::get(self.db, id, self.now().millis()).await?.ok_or_else(unknown)?;
        let owner = reader.domain() == self.config.domain && row.text("owner") == Some(reader.local());
        let named = row
            .text("readers")
            .and_then(|t| Value::parse(t.as_bytes(), nyx5_proto::limits::MAX_DOCUMENT_BYTES).ok())
            .and_then(|v| v.as_array().map(|a| a.iter().any(|r| r.as_str() == Some(reader.as_str()))))
            .unwrap_or(false);
        if owner || named { Ok(row) } else { Err(unknown()) }
    }

    /// Forgets `owner`'s attachment `id` now, its parts first: an owner's `DELETE`, or a send or
    /// an email that did not happen. Answers whether there was one.
    pub async fn remove(&self, owner: &Address, id: &str) -> Result<bool, Error> {
        if owner.domain() != self.config.domain {
            return Ok(false);
        }
        // Its own files, or the files the email bridge keeps for it.
        Ok(self.remove_owned(owner.local(), id).await? || self.remove_owned(&email_owner(owner), id).await?)
    }

    /// [`Attachments::remove`] for the owner named `owner` (see [`Attachments::store_part`]).
    pub(crate) async fn remove_owned(&self, owner: &str, id: &str) -> Result<bool, Error> {
        let blobs = self.blobs()?;
        let Some(row) = store::owned(self.db, id, owner).await? else { return Ok(false) };
        // Ended first, so that a part being written now finds no record to mark and removes
        // itself ([`Attachments::store_part`]); then its parts; then the record.
        self.db.batch(vec![store::end(id, owner)]).await.map_err(crate::port_error)?;
        let keys = (0..row.int("parts").unwrap_or(0)).map(|n| part_key(id, n)).collect();
        blobs.delete(keys).await.map_err(crate::port_error)?;
        let list = Value::Array(vec![Value::from(id)]).canonical_string();
        self.db.batch(vec![store::forget(&list)]).await.map_err(crate::port_error)?;
        Ok(true)
    }

    /// Removes the parts and records of attachments ended more than [`PURGE_GRACE_MS`] ago,
    /// [`PURGE_BATCH`] at a time while each batch is whole (at most [`PURGE_BATCHES`]); one whose
    /// parts the store would not remove is left for a later purge, and the others go on. A house
    /// without a blob store has none. Answers how many went.
    pub async fn purge(&self) -> Result<usize, Error> {
        let Ok(blobs) = self.blobs() else { return Ok(0) };
        let before = self.now().millis().saturating_sub(PURGE_GRACE_MS);
        let mut gone = 0;
        let mut skip: Vec<String> = Vec::new();
        for _ in 0..PURGE_BATCHES {
            let asked = PURGE_BATCH + i64::try_from(skip.len()).unwrap_or(0);
            let rows = store::expired(self.db, before, asked).await?;
            let whole = i64::try_from(rows.len()).unwrap_or(0) >= asked;
            let mut ids = Vec::new();
            for r in &rows {
                let Some(id) = r.text("id").filter(|id| !skip.iter().any(|s| s == id)) else { continue };
                let keys = (0..r.int("parts").unwrap_or(0)).map(|n| part_key(id, n)).collect();
                match blobs.delete(keys).await {
                    Ok(()) => ids.push(Value::from(id)),
                    Err(_) => skip.push(id.to_owned()),
                }
            }
            if !ids.is_empty() {
                gone += ids.len();
                let list = Value::Array(ids).canonical_string();
                self.db.batch(vec![store::forget(&list)]).await.map_err(crate::port_error)?;
            }
            if !whole {
                break;
            }
        }
        Ok(gone)
    }
}
