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
use crate::b64;
use crate::crypto::{EncPublic, EncSecret, Entropy, aes256gcm_open, aes256gcm_seal, hkdf_sha256, random, sha256};
use crate::envelope::{Content, Envelope, Payload, b64_field};
use crate::error::Error;
use crate::json::{Object, Value, field, obj};
use crate::limits;
use crate::refusal::Refusal;
use crate::vecmap::VecMap;

/// The `alg` of a sealed envelope.
pub const ALG_SEALED: &str = "X25519+HKDF-SHA256+A256GCM";
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

/// The content key wrapped for one recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrappedKey {
    pub iv: [u8; 12],
    pub ct: [u8; 32],
    pub tag: [u8; 16],
}

/// A parsed `encrypted` member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub epk: String,
    pub iv: [u8; 12],
    pub ct: Vec<u8>,
    pub tag: [u8; 16],
    /// The commitment to the content key ([`commitment`]).
    pub commit: [u8; 32],
    pub keys: VecMap<Address, WrappedKey>,
}

impl Sealed {
    /// Parses `encrypted`; every wrapped key must be for a recipient or the sender.
    pub fn from_value(v: &Value, to: &[Address], from: &Address) -> Result<Sealed, Error> {
        let o = v.as_object().ok_or_else(|| Refusal::BadEncrypted.because("`encrypted` must be an object"))?;
        let alg = field::str(o, "alg")?;
        if alg != ALG_SEALED {
            return Err(Refusal::BadEncrypted.because(format!("unsupported encryption alg {alg:?}")));
        }
        let epk = field::str(o, "epk")?;
        EncPublic::parse(epk)?;
        let ct = b64::decode(field::str(o, "ct")?)
            .ok_or_else(|| Refusal::BadEncrypted.because("`encrypted.ct` is not base64url"))?;
        let key_map = field::object(o, "keys")?;
        if key_map.is_empty() || key_map.len() > limits::MAX_RECIPIENTS + 1 {
            return Err(Refusal::BadEncrypted.because("`encrypted.keys` must wrap the key for at least one recipient"));
        }
        let mut keys = VecMap::new();
        for (addr, wrapped) in key_map {
            let addr = Address::parse(addr)?;
            if !to.contains(&addr) && addr != *from {
                return Err(
                    Refusal::BadEncrypted.because(format!("`encrypted.keys` names {addr}, who is not on the envelope"))
                );
            }
            let w =
                wrapped.as_object().ok_or_else(|| Refusal::BadEncrypted.because("each wrapped key is an object"))?;
            let ctx = "encrypted.keys[]";
            keys.insert(
                addr,
                WrappedKey {
                    iv: b64_field(w, "iv", ctx)?,
                    ct: b64_field(w, "ct", ctx)?,
                    tag: b64_field(w, "tag", ctx)?,
                },
            );
        }
        Ok(Sealed {
            epk: epk.to_owned(),
            iv: b64_field(o, "iv", "encrypted")?,
            ct,
            tag: b64_field(o, "tag", "encrypted")?,
            commit: b64_field(o, "commit", "encrypted")?,
            keys,
        })
    }

    pub fn to_value(&self) -> Value {
        let keys = self
            .keys
            .iter()
            .map(|(addr, w)| {
                let wv = obj([
                    ("iv", b64::encode(&w.iv).into()),
                    ("ct", b64::encode(&w.ct).into()),
                    ("tag", b64::encode(&w.tag).into()),
                ]);
                (addr.as_str().to_owned(), Value::Object(wv))
            })
            .collect::<Object>();
        Value::Object(obj([
            ("alg", ALG_SEALED.into()),
            ("epk", self.epk.as_str().into()),
            ("iv", b64::encode(&self.iv).into()),
            ("ct", b64::encode(&self.ct).into()),
            ("tag", b64::encode(&self.tag).into()),
            ("commit", b64::encode(&self.commit).into()),
            ("keys", Value::Object(keys)),
        ]))
    }
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
    let mut keys = VecMap::new();
    for (addr, enc) in recipients {
        let shared = ephemeral.agree(enc).ok_or_else(|| {
            Refusal::CannotSeal.because(format!("the encryption key of {addr} is not usable (small order)"))
        })?;
        let wrap_iv: [u8; 12] = random(rng);
        let (wct, wtag) = aes256gcm_seal(&kek(&shared, &epk)?, &wrap_iv, &aad, &cek);
        let wct: [u8; 32] = wct.try_into().map_err(|_| Refusal::CannotSeal.because("wrapped key length"))?;
        keys.insert(addr.clone(), WrappedKey { iv: wrap_iv, ct: wct, tag: wtag });
    }
    let sealed = Sealed { epk, iv, ct, tag, commit: commitment(&cek), keys };
    let mut raw = env.into_object();
    raw.remove("content");
    raw.remove("signature");
    raw.insert("encrypted".into(), sealed.to_value());
    Envelope::from_object(raw)
}

/// Opens a sealed envelope as recipient `me` holding `secret`. Fails with 403 when the
/// envelope was not sealed for `me`, was re-addressed, or was altered.
pub fn open(env: &Envelope, me: &Address, secret: &EncSecret) -> Result<Content, Error> {
    let sealed = match env.payload() {
        Payload::Sealed(s) => s,
        Payload::Clear(_) => return Err(Refusal::NotEncrypted.because("envelope is not encrypted")),
    };
    let wrapped = sealed
        .keys
        .get(me)
        .ok_or_else(|| Refusal::NotSealedForRecipient.because(format!("envelope is not sealed for {me}")))?;
    let epk = EncPublic::parse(&sealed.epk)?;
    let shared = secret.agree(&epk).ok_or_else(|| Refusal::CannotOpen.because("ephemeral key is of small order"))?;
    let aad = aad(env);
    let cek =
        aes256gcm_open(&kek(&shared, &sealed.epk)?, &wrapped.iv, &aad, &wrapped.ct, &wrapped.tag).ok_or_else(|| {
            Refusal::CannotOpen.because("cannot unwrap the content key (wrong key, or the envelope was re-addressed)")
        })?;
    let cek: [u8; 32] = cek.try_into().map_err(|_| Refusal::CannotOpen.because("content key length"))?;
    if commitment(&cek) != sealed.commit {
        return Err(Refusal::CannotOpen.because("the content key does not match the envelope's commitment"));
    }
    let plain = aes256gcm_open(&cek, &sealed.iv, &aad, &sealed.ct, &sealed.tag)
        .ok_or_else(|| Refusal::CannotOpen.because("content does not authenticate"))?;
    Content::from_value(&Value::parse(&plain, limits::MAX_ENVELOPE_BYTES)?)
}
