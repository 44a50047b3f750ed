//! `nyx5 verify`: check the detached Ed25519 signature of any signed document against one key.

use nyx5_proto::Value;
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::obj;
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::sign::{Signature, verify_object};

use crate::error::{Failure, Outcome};
use crate::io;

/// The members a document may be signed in, in the order they are looked for.
const MEMBERS: [&str; 2] = ["signature", "certification"];

/// Reads a document (card, envelope, quote, receipt, entry), verifies `member` (by default
/// `signature`, else `certification`) was made by `key`, and prints `{"member","ok":true}`.
pub(crate) fn run(key: &str, member: Option<&str>) -> Outcome {
    let key = SigPublic::parse(key).map_err(|e| Failure::input("--key", &e))?;
    let bytes = io::read_stdin(MAX_ENVELOPE_BYTES)?;
    let doc = match Value::parse(&bytes, MAX_ENVELOPE_BYTES) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(Failure::usage("a signed document is a JSON object")),
        Err(e) => return Err(Failure::input("document", &e)),
    };
    let member = match member {
        Some(m) if doc.contains_key(m) => m,
        Some(m) => return Err(Failure::usage(format!("the document has no `{m}`"))),
        None => MEMBERS
            .into_iter()
            .find(|m| doc.contains_key(*m))
            .ok_or_else(|| Failure::usage("the document has no `signature` or `certification` to verify"))?,
    };
    let sig = Signature::read(&doc, member)
        .map_err(|e| Failure::rejected(format!("{member} does not verify: {}", e.reason)))?;
    if sig.kid != key {
        return Err(Failure::rejected(format!(
            "{member} does not verify: it was made by {}, not by {}",
            sig.kid.to_b64(),
            key.to_b64()
        )));
    }
    verify_object(&doc, member, |kid| *kid == key).map_err(|_| {
        Failure::rejected(format!("{member} does not verify: the document was altered or the signature is forged"))
    })?;
    io::write_json_line(&Value::Object(obj([("member", member.into()), ("ok", true.into())])))
}
