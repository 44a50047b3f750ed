//! End-to-end encryption of an envelope's `content` (spec §5, pinned in docs/SPEC.md §5.2).
//!
//! One ephemeral X25519 key `epk` per envelope. A random 32-byte content key encrypts the
//! canonical JSON of `content` with AES-256-GCM under a random 96-bit `iv`. For each recipient,
//! KEK = HKDF-SHA256(ikm = X25519(epk, recipient `enc`), salt = UTF-8 of the base64url *string*
//! of `epk`, info = [`CEK_WRAP_INFO`], 32 bytes), and `keys[address] = {iv, ct, tag}` wraps the
//! content key with AES-256-GCM under the KEK. Both layers use the same AAD: the canonical JSON
//! of `{"from","id","to"}`, so re-addressing an envelope breaks decryption.
//!
//! AES-GCM does not commit to its key: a sender could wrap a different content key for each
//! recipient and find ciphertexts that open to different texts under each. So `encrypted.commit`
//! carries SHA-256 of [`CEK_COMMIT_LABEL`], a zero byte and the content key; it is signed with the
//! envelope, and [`open`] refuses a content key that does not match it. Every recipient of one
//! signed envelope therefore reads the same text (receipts cite envelope hashes).

use crate::address::Address;
use crate::crypto::{EncPublic, EncSecret, Entropy, aes256gcm_open, aes256gcm_seal, hkdf_sha256, random, sha256};
use crate::envelope::{Content, Envelope, Payload};
use crate::error::Error;
use crate::json::{Value, obj};
use crate::limits;
use crate::refusal::Refusal;
pub use crate::sealed::{ALG_SEALED, ReaderKey, Sealed, WrappedKey, readers_from_value, readers_to_value};
use crate::vecmap::VecMap;

/// HKDF `info` for the per-recipient key-encryption key.
pub const CEK_WRAP_INFO: &[u8] = b"nyx5/1 cek-wrap";
/// What the key commitment hashes before the content key (and a zero byte).
pub const CEK_COMMIT_LABEL: &[u8] = b"nyx5/1 cek-commit";

/// The commitment to a content key: SHA-256 of the label, a zero byte and the key.
pub fn commitment(cek: &[u8; 32]) -> [u8; 32] {
    let mut bytes = Vec::with_capacity(CEK_COMMIT_LABEL.len() + 1 + cek.len());
    bytes.extend_from_slice(CEK_COMMIT_LABEL);
    bytes.push(0);
    bytes.extend_from_slice(cek);
    sha256(&bytes)
}

/// The AAD both layers use: canonical `{"from","id","to"}` of the envelope.
pub fn aad(env: &Envelope) -> Vec<u8> {
    let to = Value::Array(env.to().iter().map(|a| a.as_str().into()).collect());
    Value::Object(obj([("from", env.from().as_str().into()), ("id", env.id().into()), ("to", to)])).canonical()
}

fn kek(shared: &[u8; 32], epk_b64: &str) -> Result<[u8; 32], Error> {
    let mut out = [0u8; 32];
    hkdf_sha256(shared, epk_b64.as_bytes(), CEK_WRAP_INFO, &mut out)?;
    Ok(out)
}

/// Seals a cleartext envelope for `recipients` (address and X25519 key). Any signature is
/// dropped: sign after sealing.
pub fn seal(env: Envelope, recipients: &[(Address, EncPublic)], rng: &mut dyn Entropy) -> Result<Envelope, Error> {
    let content = match env.payload() {
        Payload::Clear(c) => c.to_value().canonical(),
        Payload::Sealed(_) => return Err(Refusal::CannotSeal.because("envelope is already sealed")),
    };
    if recipients.is_empty() {
        return Err(Refusal::CannotSeal.because("sealing needs at least one recipient key"));
    }
    let aad = aad(&env);
    let cek: [u8; 32] = random(rng);
    let iv: [u8; 12] = random(rng);
    let (ct, tag) = aes256gcm_seal(&cek, &iv, &aad, &content);
    let ephemeral = EncSecret::generate(rng);
    let epk = ephemeral.public().to_b64();
    let keys = wrap_all(&ephemeral, &epk, &aad, &cek, recipients, rng)?;
    let sealed = Sealed { epk, iv, ct, tag, commit: commitment(&cek), keys };
    let mut raw = env.into_object();
    raw.remove("content");
    raw.remove("signature");
    raw.insert("encrypted".into(), sealed.to_value());
    Envelope::from_object(raw)
}

/// The content key wrapped for each of `list` under `ephemeral` (public `epk`).
fn wrap_all(
    ephemeral: &EncSecret,
    epk: &str,
    aad: &[u8],
    cek: &[u8; 32],
    list: &[(Address, EncPublic)],
    rng: &mut dyn Entropy,
) -> Result<VecMap<Address, WrappedKey>, Error> {
    let mut keys = VecMap::new();
    for (addr, enc) in list {
        let shared = ephemeral.agree(enc).ok_or_else(|| {
            Refusal::CannotSeal.because(format!("the encryption key of {addr} is not usable (small order)"))
        })?;
        let wrap_iv: [u8; 12] = random(rng);
        let (wct, wtag) = aes256gcm_seal(&kek(&shared, epk)?, &wrap_iv, aad, cek);
        let wct: [u8; 32] = wct.try_into().map_err(|_| Refusal::CannotSeal.because("wrapped key length"))?;
        keys.insert(addr.clone(), WrappedKey { iv: wrap_iv, ct: wct, tag: wtag });
    }
    Ok(keys)
}

/// The content key of a sealed envelope, as `me` (a recipient, or its sender) unwraps it with
/// `secret`, checked against the envelope's commitment.
pub fn content_key(env: &Envelope, me: &Address, secret: &EncSecret) -> Result<[u8; 32], Error> {
    let sealed = sealed_of(env)?;
    let wrapped = sealed
        .keys
        .get(me)
        .ok_or_else(|| Refusal::NotSealedForRecipient.because(format!("envelope is not sealed for {me}")))?;
    unwrap_key(env, sealed, &sealed.epk, wrapped, secret)
}

/// Wraps a sealed envelope's content key `cek` for `readers` who are not on it (the approvers of
/// a draft, docs/SPEC.md §7c), under a fresh ephemeral key of their own. The envelope is not
/// changed: its `keys` still name only its recipients and sender. Each reader opens it with
/// [`open_as_reader`], and the envelope's signed commitment makes what they read what the
/// recipients read.
pub fn wrap_for_readers(
    env: &Envelope,
    cek: &[u8; 32],
    readers: &[(Address, EncPublic)],
    rng: &mut dyn Entropy,
) -> Result<VecMap<Address, ReaderKey>, Error> {
    if commitment(cek) != sealed_of(env)?.commit {
        return Err(Refusal::CannotSeal.because("the content key is not this envelope's"));
    }
    let ephemeral = EncSecret::generate(rng);
    let epk = ephemeral.public().to_b64();
    let wrapped = wrap_all(&ephemeral, &epk, &aad(env), cek, readers, rng)?;
    Ok(wrapped.into_iter().map(|(a, key)| (a, ReaderKey { epk: epk.clone(), key })).collect())
}

/// Opens a sealed envelope as recipient `me` holding `secret`. Fails with 403 when the
/// envelope was not sealed for `me`, was re-addressed, or was altered.
pub fn open(env: &Envelope, me: &Address, secret: &EncSecret) -> Result<Content, Error> {
    let cek = content_key(env, me, secret)?;
    open_content(env, sealed_of(env)?, &cek)
}

/// The `encrypted` member of a sealed envelope; 400 `not_encrypted` for a clear one.
fn sealed_of(env: &Envelope) -> Result<&Sealed, Error> {
    match env.payload() {
        Payload::Sealed(s) => Ok(s),
        Payload::Clear(_) => Err(Refusal::NotEncrypted.because("envelope is not encrypted")),
    }
}

/// Opens a sealed envelope with a content key wrapped for a reader apart
/// ([`wrap_for_readers`]), held by `secret`: what its recipients read, or a 403 as [`open`] fails.
pub fn open_as_reader(env: &Envelope, key: &ReaderKey, secret: &EncSecret) -> Result<Content, Error> {
    let sealed = sealed_of(env)?;
    let cek = unwrap_key(env, sealed, &key.epk, &key.key, secret)?;
    open_content(env, sealed, &cek)
}

/// The content key `wrapped` (under the ephemeral key `epk`) holds for `secret`, checked
/// against the envelope's commitment.
fn unwrap_key(
    env: &Envelope,
    sealed: &Sealed,
    epk: &str,
    wrapped: &WrappedKey,
    secret: &EncSecret,
) -> Result<[u8; 32], Error> {
    let public = EncPublic::parse(epk)?;
    let shared = secret.agree(&public).ok_or_else(|| Refusal::CannotOpen.because("ephemeral key is of small order"))?;
    let cek =
        aes256gcm_open(&kek(&shared, epk)?, &wrapped.iv, &aad(env), &wrapped.ct, &wrapped.tag).ok_or_else(|| {
            Refusal::CannotOpen.because("cannot unwrap the content key (wrong key, or the envelope was re-addressed)")
        })?;
    let cek: [u8; 32] = cek.try_into().map_err(|_| Refusal::CannotOpen.because("content key length"))?;
    if commitment(&cek) != sealed.commit {
        return Err(Refusal::CannotOpen.because("the content key does not match the envelope's commitment"));
    }
    Ok(cek)
}

/// The content of a sealed envelope under its (checked) content key.
fn open_content(env: &Envelope, sealed: &Sealed, cek: &[u8; 32]) -> Result<Content, Error> {
    let plain = aes256gcm_open(cek, &sealed.iv, &aad(env), &sealed.ct, &sealed.tag)
        .ok_or_else(|| Refusal::CannotOpen.because("content does not authenticate"))?;
    Content::from_value(&Value::parse(&plain, limits::MAX_ENVELOPE_BYTES)?)
}

/// The additional data every sealed attachment is encrypted under: a file's ciphertext opens as
/// nothing else.
pub const FILE_AAD: &[u8] = b"nyx5/1 attachment";

/// A file sealed for an attachment (docs/SPEC.md "Attachments"): a fresh key and IV, and the
/// ciphertext with its 16-byte tag after it (what the house keeps).
pub struct SealedFile {
    pub key: [u8; 32],
    pub iv: [u8; 12],
    pub sealed: Vec<u8>,
}

impl std::fmt::Debug for SealedFile {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedFile").field("sealed_bytes", &self.sealed.len()).finish_non_exhaustive()
    }
}

/// Seals `plain` under a key of its own.
pub fn seal_file(plain: &[u8], rng: &mut dyn Entropy) -> SealedFile {
    let (key, iv) = (random::<32>(rng), random::<12>(rng));
    let (mut sealed, tag) = aes256gcm_seal(&key, &iv, FILE_AAD, plain);
    sealed.extend_from_slice(&tag);
    SealedFile { key, iv, sealed }
}

/// Opens a sealed file with its key and IV; `None` when it is not what was sealed with them.
pub fn open_file(key: &[u8; 32], iv: &[u8; 12], sealed: &[u8]) -> Option<Vec<u8>> {
    let at = sealed.len().checked_sub(16)?;
    let (ct, tag) = sealed.split_at(at);
    aes256gcm_open(key, iv, FILE_AAD, ct, tag.try_into().ok()?)
}

#[cfg(test)]
mod file_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_sealed_file_opens_with_its_key_only_and_whole() {
        let mut n = 0_u8;
        let mut rng = |b: &mut [u8]| {
            for x in b.iter_mut() {
                n = n.wrapping_add(37);
                *x = n;
            }
        };
        let plain = b"the quarterly numbers".repeat(100);
        let f = seal_file(&plain, &mut rng);
        assert_eq!(f.sealed.len(), plain.len() + 16);
        assert_eq!(open_file(&f.key, &f.iv, &f.sealed).unwrap(), plain);
        let mut other = f.key;
        other[0] ^= 1;
        assert!(open_file(&other, &f.iv, &f.sealed).is_none(), "another key");
        let mut cut = f.sealed.clone();
        cut.truncate(cut.len() - 1);
        assert!(open_file(&f.key, &f.iv, &cut).is_none(), "a part missing");
        let mut flipped = f.sealed.clone();
        flipped[3] ^= 1;
        assert!(open_file(&f.key, &f.iv, &flipped).is_none(), "a byte changed");
        assert!(open_file(&f.key, &f.iv, &[0; 15]).is_none(), "shorter than a tag");
    }
}
