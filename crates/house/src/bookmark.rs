//! The `nyx5-bookmark` header (docs/SPEC.md "Reading your own writes"): the database's bookmark
//! sealed for the client, and what a request's header decides. Pure: the key, the iv and the
//! header are inputs.
//!
//! A bookmark names a point in the database's history, and D1's carry a commit counter and a
//! time: handed out as they are, anyone polling a public page would read the house's write rate
//! off them, and a forged one far ahead would make a replica hold a read until it timed out. So
//! the house hands out its bookmarks sealed (AES-256-GCM under a key derived from the domain
//! key) and only ever asks its database for a point it sealed itself.

use nyx5_proto::crypto::{aes256gcm_open, aes256gcm_seal, hkdf_sha256};
use nyx5_proto::{Error, Refusal, b64};

/// The header's name and bounds are the wire's, shared with the client.
pub use nyx5_client::bookmark::{HEADER, MAX_BOOKMARK_BYTES, MAX_HEADER_CHARS};
use nyx5_client::bookmark::{IV_BYTES, TAG_BYTES};
/// What the sealing key is derived with (HKDF-SHA256 info) and what each seal authenticates.
const LABEL: &[u8] = b"nyx5/1 bookmark";

/// The key bookmarks are sealed with, derived from the domain key's seed: every isolate of the
/// house has the same, and a new domain key makes the old bookmarks foreign.
#[derive(Clone)]
pub struct BookmarkKey([u8; 32]);

impl std::fmt::Debug for BookmarkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BookmarkKey(..)")
    }
}

impl BookmarkKey {
    pub fn derive(domain_seed: &[u8; 32]) -> BookmarkKey {
        let mut key = [0u8; 32];
        // 32 bytes are far within HKDF's 8160.
        let _ = hkdf_sha256(domain_seed, b"", LABEL, &mut key);
        BookmarkKey(key)
    }
}

/// The header value for `bookmark`: base64url of iv, ciphertext and tag. `None` for an empty
/// bookmark or one over [`MAX_BOOKMARK_BYTES`], which no answer carries.
pub fn seal(key: &BookmarkKey, iv: [u8; IV_BYTES], bookmark: &str) -> Option<String> {
    if bookmark.is_empty() || bookmark.len() > MAX_BOOKMARK_BYTES {
        return None;
    }
    let (ct, tag) = aes256gcm_seal(&key.0, &iv, LABEL, bookmark.as_bytes());
    let mut out = Vec::with_capacity(IV_BYTES + ct.len() + TAG_BYTES);
    out.extend_from_slice(&iv);
    out.extend_from_slice(&ct);
    out.extend_from_slice(&tag);
    Some(b64::encode(&out))
}

/// What a request's header decides: the bookmark its reads start from, or none.
///
/// - absent or empty: none;
/// - over [`MAX_HEADER_CHARS`], not base64url, or too short to hold a seal: 400 `malformed`
///   (no house hands such a value out; a client that sends one has a bug worth hearing of);
/// - well formed but not sealed by this key (another house's, one from before the domain key
///   changed, or altered): ignored, read as none. A client cannot tell it holds one, and the
///   answer gives it a bookmark that opens; refusing would only fail a read that may be stale
///   anyway.
pub fn open(key: &BookmarkKey, header: Option<&str>) -> Result<Option<String>, Error> {
    let Some(value) = header.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.len() > MAX_HEADER_CHARS {
        return Err(Refusal::BadBookmark.because(format!("`{HEADER}` is longer than {MAX_HEADER_CHARS} characters")));
    }
    let bytes = b64::decode(value).filter(|b| b.len() > IV_BYTES + TAG_BYTES).ok_or_else(|| {
        Refusal::BadBookmark.because(format!("`{HEADER}` is not a bookmark a house gave (base64url of a seal)"))
    })?;
    let Some((iv, rest)) = bytes.split_at_checked(IV_BYTES) else { return Ok(None) };
    let Some((ct, tag)) = rest.split_at_checked(rest.len().saturating_sub(TAG_BYTES)) else { return Ok(None) };
    let (Ok(iv), Ok(tag)) = (<[u8; IV_BYTES]>::try_from(iv), <[u8; TAG_BYTES]>::try_from(tag)) else {
        return Ok(None);
    };
    Ok(aes256gcm_open(&key.0, &iv, LABEL, ct, &tag)
        .and_then(|plain| String::from_utf8(plain).ok())
        .filter(|b| !b.is_empty()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const D1_LIKE: &str = "00000001-00000002-00004e2f-0a83ea2fceebc654de0640c422be4653";

    fn key(n: u8) -> BookmarkKey {
        BookmarkKey::derive(&[n; 32])
    }

    #[test]
    fn a_sealed_bookmark_opens_under_its_key_and_hides_what_it_names() {
        let sealed = seal(&key(1), [7; 12], D1_LIKE).unwrap();
        assert_eq!(open(&key(1), Some(&sealed)).unwrap().as_deref(), Some(D1_LIKE));
        assert_eq!(open(&key(1), Some(&format!("  {sealed} "))).unwrap().as_deref(), Some(D1_LIKE));
        assert!(!sealed.contains("00004e2f"));
        // A fresh iv each answer: two seals of one point do not show it is the same point.
        assert_ne!(sealed, seal(&key(1), [8; 12], D1_LIKE).unwrap());
    }

    #[test]
    fn no_header_or_an_empty_one_starts_anywhere() {
        assert_eq!(open(&key(1), None).unwrap(), None);
        assert_eq!(open(&key(1), Some("")).unwrap(), None);
        assert_eq!(open(&key(1), Some("   ")).unwrap(), None);
    }

    #[test]
    fn a_foreign_or_altered_bookmark_is_ignored() {
        let sealed = seal(&key(1), [7; 12], D1_LIKE).unwrap();
        // Another house's (or this one's before its domain key changed).
        assert_eq!(open(&key(2), Some(&sealed)).unwrap(), None);
        // One bit changed anywhere.
        let mut bytes = b64::decode(&sealed).unwrap();
        for at in [0, IV_BYTES, bytes.len() - 1] {
            bytes[at] ^= 1;
            assert_eq!(open(&key(1), Some(&b64::encode(&bytes))).unwrap(), None, "bit flipped at {at}");
            bytes[at] ^= 1;
        }
        // A D1 bookmark sent as it is, never sealed: not one this house gave.
        let raw = b64::encode(D1_LIKE.as_bytes());
        assert_eq!(open(&key(1), Some(&raw)).unwrap(), None);
    }

    #[test]
    fn a_malformed_or_oversized_header_is_refused_as_malformed() {
        let long = "A".repeat(MAX_HEADER_CHARS + 1);
        let short = b64::encode(&[0u8; IV_BYTES + TAG_BYTES]);
        for bad in ["not base64!", "a,b", long.as_str(), short.as_str(), "AAAA=="] {
            let e = open(&key(1), Some(bad)).unwrap_err();
            assert_eq!((e.code(), e.kind.slug()), (400, "malformed"), "{bad:.40}");
        }
        // The bound admits the longest seal a house makes, and no longer bookmark is sealed.
        let longest = "b".repeat(MAX_BOOKMARK_BYTES);
        let sealed = seal(&key(1), [0; 12], &longest).unwrap();
        assert_eq!(sealed.len(), MAX_HEADER_CHARS);
        assert_eq!(open(&key(1), Some(&sealed)).unwrap(), Some(longest.clone()));
        assert_eq!(seal(&key(1), [0; 12], &format!("{longest}b")), None);
        assert_eq!(seal(&key(1), [0; 12], ""), None);
    }
}
