//! An agent's two key pairs as JSON: `{"sig","enc","sig_secret","enc_secret"}`, base64url
//! without padding, the members of a key file (`nyx5 keys new`) and of a profile's agent.
//! `sig_secret` is the 32-byte Ed25519 seed, `enc_secret` the 32-byte X25519 secret; the public
//! keys must be theirs.

use nyx5_proto::Error;
use nyx5_proto::json::Value;

use crate::util::{OsRandom, object};

/// An agent's signing and encryption keys, read and written as the profile format has them.
pub(crate) use nyx5_client::profile::KeySet as Keys;

/// Reads a key object from JSON text.
pub(crate) fn parse(text: &str) -> Result<Keys, Error> {
    Keys::from_object(&object(text, "keys")?).map_err(crate::util::about("keys"))
}

/// Fresh keys from the platform's randomness.
pub(crate) fn new_keys() -> Result<Value, Error> {
    let mut rng = OsRandom::default();
    let keys = Keys::generate(&mut rng);
    rng.check()?;
    Ok(Value::Object(keys.to_object()))
}
