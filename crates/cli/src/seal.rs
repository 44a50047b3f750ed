//! `nyx5 seal`: fill in, seal for each recipient and sign an envelope read from standard input.

use std::path::Path;

use nyx5_proto::address::uuid_v4;
use nyx5_proto::crypto::EncPublic;
use nyx5_proto::json::{Value, field};
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::{Address, Envelope, seal};

use crate::error::{Failure, Outcome};
use crate::io;
use crate::keyfile::KeyFile;
use crate::sys::{self, OsRng};

/// Reads an unsigned envelope; without `plain`, seals it for every `ADDRESS=ENC_PUB` in `to`;
/// signs it with the key file's signing key and prints it.
pub(crate) fn run(key: &Path, to: &[String], plain: bool) -> Outcome {
    if plain && !to.is_empty() {
        return Err(Failure::usage("--plain signs in clear; it takes no --to"));
    }
    if !plain && to.is_empty() {
        return Err(Failure::usage("give --to ADDRESS=ENC_PUB for each recipient, or --plain to sign in clear"));
    }
    let recipients = parse_recipients(to)?;
    let keys = KeyFile::read(key)?;
    let bytes = io::read_stdin(MAX_ENVELOPE_BYTES)?;
    let mut doc = match Value::parse(&bytes, MAX_ENVELOPE_BYTES) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(Failure::usage("an envelope is a JSON object")),
        Err(e) => return Err(Failure::input("envelope", &e)),
    };
    let mut rng = OsRng::new();
    if field::optional(&doc, "id").is_none() {
        doc.insert("id".into(), uuid_v4(rng.bytes()).into());
    }
    if field::optional(&doc, "created").is_none() {
        doc.insert("created".into(), sys::now()?.to_rfc3339().into());
    }
    let mut env = Envelope::from_object(doc).map_err(|e| Failure::input("envelope", &e))?;
    if !plain {
        check_recipients(&env, &recipients)?;
        env = seal::seal(env, &recipients, &mut rng).map_err(|e| Failure::input("cannot seal", &e))?;
    }
    let env = env.sign(&keys.sig).map_err(|e| Failure::input("cannot sign", &e))?;
    rng.check()?;
    env.check_size(MAX_ENVELOPE_BYTES).map_err(|e| Failure::input("envelope", &e))?;
    io::write_json_line(&env.to_value())
}

/// Parses `ADDRESS=ENC_PUB` pairs; an address may appear once.
fn parse_recipients(to: &[String]) -> Result<Vec<(Address, EncPublic)>, Failure> {
    let mut out: Vec<(Address, EncPublic)> = Vec::with_capacity(to.len());
    for pair in to {
        let (addr, enc) =
            pair.split_once('=').ok_or_else(|| Failure::usage(format!("--to {pair:?}: expected ADDRESS=ENC_PUB")))?;
        let addr = Address::parse(addr).map_err(|e| Failure::input("--to", &e))?;
        let enc = EncPublic::parse(enc).map_err(|e| Failure::input("--to", &e))?;
        if out.iter().any(|(a, _)| *a == addr) {
            return Err(Failure::usage(format!("--to names {addr} twice")));
        }
        out.push((addr, enc));
    }
    Ok(out)
}

/// Every key must be for someone on the envelope, and every recipient must get a key: an
/// envelope sealed without one would be unreadable to that recipient.
fn check_recipients(env: &Envelope, recipients: &[(Address, EncPublic)]) -> Outcome {
    if let Some((stranger, _)) = recipients.iter().find(|(a, _)| !env.to().contains(a) && *a != env.from()) {
        return Err(Failure::usage(format!("--to {stranger}: not in the envelope's `to` (nor its `from`)")));
    }
    if let Some(missing) = env.to().iter().find(|a| !recipients.iter().any(|(r, _)| r == *a)) {
        return Err(Failure::usage(format!("no --to key for {missing}, who could not open the envelope")));
    }
    Ok(())
}
