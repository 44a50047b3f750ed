//! The `encrypted` member of a sealed envelope as data (spec §5, docs/SPEC.md §5.2): read and
//! written, every wrapped key for someone on the envelope. Sealing and opening, which need the
//! envelope, are [`crate::seal`]'s; an envelope's payload names this.

use crate::address::Address;
use crate::b64;
use crate::crypto::EncPublic;
use crate::error::Error;
use crate::json::{Object, Value, field, obj};
use crate::limits;
use crate::refusal::Refusal;
use crate::vecmap::VecMap;

/// The `alg` of a sealed envelope.
pub const ALG_SEALED: &str = "X25519+HKDF-SHA256+A256GCM";

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
    /// The commitment to the content key (`seal::commitment`).
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
            keys.insert(addr, WrappedKey::from_value(wrapped, "encrypted.keys[]")?);
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
        let keys = wrapped_to_value(&self.keys);
        Value::Object(obj([
            ("alg", ALG_SEALED.into()),
            ("epk", self.epk.as_str().into()),
            ("iv", b64::encode(&self.iv).into()),
            ("ct", b64::encode(&self.ct).into()),
            ("tag", b64::encode(&self.tag).into()),
            ("commit", b64::encode(&self.commit).into()),
            ("keys", keys),
        ]))
    }
}

impl WrappedKey {
    /// `{iv, ct, tag}`, each base64url.
    pub fn to_value(&self) -> Value {
        Value::Object(obj([
            ("iv", b64::encode(&self.iv).into()),
            ("ct", b64::encode(&self.ct).into()),
            ("tag", b64::encode(&self.tag).into()),
        ]))
    }

    /// Reads `{iv, ct, tag}`; `ctx` names where it is, for the refusal.
    pub fn from_value(v: &Value, ctx: &str) -> Result<WrappedKey, Error> {
        let w = v.as_object().ok_or_else(|| Refusal::BadEncrypted.because(format!("`{ctx}` is an object")))?;
        Ok(WrappedKey { iv: b64_field(w, "iv", ctx)?, ct: b64_field(w, "ct", ctx)?, tag: b64_field(w, "tag", ctx)? })
    }
}

/// Wrapped keys by address, as `encrypted.keys` writes them: `{"<address>": {iv, ct, tag}}`.
pub fn wrapped_to_value(keys: &VecMap<Address, WrappedKey>) -> Value {
    Value::Object(keys.iter().map(|(addr, w)| (addr.as_str().to_owned(), w.to_value())).collect::<Object>())
}

/// A content key wrapped for a reader who is not on the envelope (a draft's approver,
/// docs/SPEC.md §7c), under an ephemeral key of its own: `{epk, iv, ct, tag}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderKey {
    pub epk: String,
    pub key: WrappedKey,
}

impl ReaderKey {
    pub fn to_value(&self) -> Value {
        let mut o = match self.key.to_value() {
            Value::Object(o) => o,
            _ => Object::new(),
        };
        o.insert("epk".into(), self.epk.as_str().into());
        Value::Object(o)
    }

    /// Reads `{epk, iv, ct, tag}`; `ctx` names where it is, for the refusal.
    pub fn from_value(v: &Value, ctx: &str) -> Result<ReaderKey, Error> {
        let o = v.as_object().ok_or_else(|| Refusal::BadEncrypted.because(format!("`{ctx}` is an object")))?;
        let epk = field::str(o, "epk")?;
        EncPublic::parse(epk)?;
        Ok(ReaderKey { epk: epk.to_owned(), key: WrappedKey::from_value(v, ctx)? })
    }
}

/// Readers' keys by address: `{"<address>": {epk, iv, ct, tag}}`.
pub fn readers_to_value(keys: &VecMap<Address, ReaderKey>) -> Value {
    Value::Object(keys.iter().map(|(addr, k)| (addr.as_str().to_owned(), k.to_value())).collect::<Object>())
}

/// Reads `{"<address>": {epk, iv, ct, tag}}` of at most `max` entries.
pub fn readers_from_value(v: &Value, max: usize, ctx: &str) -> Result<VecMap<Address, ReaderKey>, Error> {
    let o = v.as_object().ok_or_else(|| Refusal::BadEncrypted.because(format!("`{ctx}` is an object")))?;
    if o.len() > max {
        return Err(Refusal::BadEncrypted.because(format!("`{ctx}` names at most {max} readers")));
    }
    let mut keys = VecMap::new();
    for (addr, k) in o {
        keys.insert(Address::parse(addr)?, ReaderKey::from_value(k, ctx)?);
    }
    Ok(keys)
}

/// Base64url helpers re-exported for envelope fields.
fn b64_field<const N: usize>(o: &Object, name: &str, ctx: &str) -> Result<[u8; N], Error> {
    b64::decode_array(field::str(o, name)?)
        .ok_or_else(|| Refusal::BadEncrypted.because(format!("`{ctx}.{name}` must be {N} bytes of base64url")))
}
