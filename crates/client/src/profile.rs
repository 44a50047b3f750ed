//! The client profile's format (docs/SPEC.md, "Client profile"), as `nyx5` keeps it in its file
//! and the browser exports and imports it: the file's `nyx5`/`kind`, the bound a reader holds it
//! to, and an agent's two key pairs as its members (`sig`, `enc`, `sig_secret`, `enc_secret`,
//! base64url without padding; `sig_secret` the 32-byte Ed25519 seed, `enc_secret` the 32-byte
//! X25519 secret), read only when the public keys are the secrets' own. Where the file lives,
//! its lock and its records of envelopes are the CLI's.

use nyx5_proto::crypto::{EncPublic, EncSecret, Entropy, SigPublic, SigningKey};
use nyx5_proto::json::{Object, field, obj};
use nyx5_proto::{Error, Refusal, b64};

/// The `kind` of a profile file.
pub const KIND: &str = "agent-profile";
/// The protocol version a profile file belongs to (its `nyx5`).
pub const VERSION: &str = "1";
/// The largest profile read: saved envelopes are at most 1 MiB each.
pub const MAX_PROFILE_BYTES: usize = 128 * 1024 * 1024;

/// An agent's signing and encryption keys.
#[derive(Debug, Clone)]
pub struct KeySet {
    pub sig: SigningKey,
    pub enc: EncSecret,
}

impl KeySet {
    /// Fresh keys from `rng`.
    pub fn generate(rng: &mut dyn Entropy) -> KeySet {
        KeySet { sig: SigningKey::generate(rng), enc: EncSecret::generate(rng) }
    }

    pub fn sig_public(&self) -> SigPublic {
        self.sig.public()
    }

    pub fn enc_public(&self) -> EncPublic {
        self.enc.public()
    }

    /// The four members, as a key file and a profile's agent write them.
    pub fn to_object(&self) -> Object {
        obj([
            ("sig", self.sig_public().to_b64().into()),
            ("enc", self.enc_public().to_b64().into()),
            ("sig_secret", b64::encode(&self.sig.seed()).into()),
            ("enc_secret", b64::encode(&self.enc.bytes()).into()),
        ])
    }

    /// Reads the four members of `o` (others are ignored) and checks that the public keys
    /// belong to the secrets.
    pub fn from_object(o: &Object) -> Result<KeySet, Error> {
        let secret = |name: &str| -> Result<[u8; 32], Error> {
            b64::decode_array(field::str(o, name)?)
                .ok_or_else(|| Refusal::BadKeySet.because(format!("`{name}` is not 32 bytes of base64url")))
        };
        let keys = KeySet {
            sig: SigningKey::from_seed(secret("sig_secret")?),
            enc: EncSecret::from_bytes(secret("enc_secret")?),
        };
        if SigPublic::parse(field::str(o, "sig")?)? != keys.sig_public() {
            return Err(Refusal::BadKeySet.because("`sig` is not the public key of `sig_secret`"));
        }
        if EncPublic::parse(field::str(o, "enc")?)? != keys.enc_public() {
            return Err(Refusal::BadKeySet.because("`enc` is not the public key of `enc_secret`"));
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use nyx5_proto::json::Value;

    #[test]
    fn a_key_set_reads_back_and_a_foreign_public_key_is_refused() {
        let keys = KeySet::generate(&mut |b: &mut [u8]| b.fill(3));
        let o = keys.to_object();
        assert_eq!(KeySet::from_object(&o).unwrap().to_object(), o);
        let other = KeySet::generate(&mut |b: &mut [u8]| b.fill(4));
        let mut wrong = o.clone();
        wrong.insert("sig".into(), Value::from(other.sig_public().to_b64()));
        let e = KeySet::from_object(&wrong).unwrap_err();
        assert_eq!(e.name(), Refusal::BadKeySet.name());
        assert_eq!(e.reason, "`sig` is not the public key of `sig_secret`");
    }
}
