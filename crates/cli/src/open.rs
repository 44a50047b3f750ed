//! `nyx5 open`: verify an envelope's signature against the sender's key, then decrypt it.

use std::path::Path;

use nyx5_proto::crypto::SigPublic;
use nyx5_proto::envelope::Payload;
use nyx5_proto::json::obj;
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::{Address, Envelope, Value, seal};

use crate::error::{Failure, Outcome};
use crate::io;
use crate::keyfile::KeyFile;

/// Reads an envelope, verifies it was signed by `sender_key`, opens it as `me` with the key
/// file's encryption secret, and prints `{"content":…,"verified":true}`.
pub(crate) fn run(key: &Path, me: &str, sender_key: &str) -> Outcome {
    let me = Address::parse(me).map_err(|e| Failure::input("--as", &e))?;
    let sender = SigPublic::parse(sender_key).map_err(|e| Failure::input("--sender-key", &e))?;
    let keys = KeyFile::read(key)?;
    let bytes = io::read_stdin(MAX_ENVELOPE_BYTES)?;
    let env = Envelope::parse(&bytes, MAX_ENVELOPE_BYTES).map_err(|e| Failure::input("envelope", &e))?;
    match &env.signature() {
        None => {
            return Err(Failure::rejected("signature does not verify: the envelope is not signed"));
        }
        Some(sig) if sig.kid != sender => {
            return Err(Failure::rejected(format!(
                "signature does not verify: it was made by {}, not by the sender key {}",
                sig.kid.to_b64(),
                sender.to_b64()
            )));
        }
        Some(_) => {}
    }
    let env = env.verify_with_key(&sender).map_err(|_| {
        Failure::rejected("signature does not verify: the envelope was altered or the signature is forged")
    })?;
    let content = match env.payload() {
        Payload::Sealed(_) => seal::open(&env, &me, &keys.enc)
            .map_err(|e| Failure::rejected(format!("cannot open as {me}: {}", e.reason)).named(e.name()))?
            .to_value(),
        Payload::Clear(_) => {
            if !env.to().contains(&me) && env.from() != me {
                return Err(Failure::rejected(format!("the envelope is not addressed to {me}")));
            }
            env.object().get("content").cloned().unwrap_or(Value::Null)
        }
    };
    io::write_json_line(&Value::Object(obj([("content", content), ("verified", true.into())])))
}
