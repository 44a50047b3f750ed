//! An agent's two key pairs as JSON: `{"sig","enc","sig_secret","enc_secret"}`, base64url
//! without padding, the members of a key file (`nyx5 keys new`) and of a profile's agent.
//! `sig_secret` is the 32-byte Ed25519 seed, `enc_secret` the 32-byte X25519 secret; the public
//! keys must be theirs.

use nyx5_proto::crypto::{EncPublic, EncSecret, Entropy, SigPublic, SigningKey};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Error, Refusal, b64};

use crate::util::{OsRandom, object};

/// An agent's signing and encryption keys.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) sig: SigningKey,
    pub(crate) enc: EncSecret,
}

impl Keys {
    /// Fresh keys from `rng`.
    pub(crate) fn generate(rng: &mut dyn Entropy) -> Keys {
        Keys { sig: SigningKey::generate(rng), enc: EncSecret::generate(rng) }
    }

    pub(crate) fn sig_public(&self) -> SigPublic {
        self.sig.public()
    }

    pub(crate) fn enc_public(&self) -> EncPublic {
        self.enc.public()
    }

    /// The four members, as a key file writes them.
    pub(crate) fn to_object(&self) -> Object {
        obj([
            ("sig", self.sig_public().to_b64().into()),
            ("enc", self.enc_public().to_b64().into()),
            ("sig_secret", b64::encode(&self.sig.seed()).into()),
            ("enc_secret", b64::encode(&self.enc.bytes()).into()),
        ])
    }

    /// Reads the four members of `o` (others are ignored) and checks that the public keys belong
    /// to the secrets, as the CLI's readers do.
    pub(crate) fn from_object(o: &Object) -> Result<Keys, Error> {
        let secret = |name: &str| -> Result<[u8; 32], Error> {
            b64::decode_array(field::str(o, name)?)
                .ok_or_else(|| Refusal::BadKeySet.because(format!("`{name}` is not 32 bytes of base64url")))
        };
        let keys = Keys {
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

    /// Reads a key object from JSON text.
    pub(crate) fn parse(text: &str) -> Result<Keys, Error> {
        Keys::from_object(&object(text, "keys")?).map_err(crate::util::about("keys"))
    }
}

/// Fresh keys from the platform's randomness.
pub(crate) fn new_keys() -> Result<Value, Error> {
    let mut rng = OsRandom::default();
    let keys = Keys::generate(&mut rng);
    rng.check()?;
    Ok(Value::Object(keys.to_object()))
}
