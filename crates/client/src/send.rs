//! Envelopes out (spec §5): what `nyx5 send` and the browser's `seal_message` share once the
//! recipients' cards are verified. Who is sealed to (every recipient's encryption key, and the
//! sender's own so it can read what it sent), the proof of work the cards ask (the largest), the
//! search for it, and the last steps in their one order: seal, prove (the proof covers the
//! sealed content), sign, check the size. Money never moves through a message: an envelope to a
//! Libro, or with an operation's media, is the Libro's verbs' to send.
//!
//! Each step's refusal names the step in its reason (`cannot seal: …`, `the envelope: …`,
//! `cannot sign: …`) and keeps the protocol's name; the caller turns it into its own failure.

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::{EncPublic, EncSecret, Entropy, SigningKey};
use nyx5_proto::{Address, Envelope, Error, Verified, limits, pow, seal};

/// The media type of a text body, as a string body is sent.
pub const TEXT_MEDIA: &str = "text/plain; charset=utf-8";
/// Hashes tried per call of [`pow::mint`] (between two progress reports).
pub const POW_CHUNK: u64 = 1 << 16;

/// `what: reason`, the refusal's name kept.
fn about(what: &'static str) -> impl Fn(Error) -> Error {
    move |e| {
        let reason = format!("{what}: {}", e.reason);
        e.with_reason(reason)
    }
}

/// Whether `media` names JSON (`application/json` or `…+json`).
pub fn is_json(media: &str) -> bool {
    let m = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    m == "application/json" || m.ends_with("+json")
}

/// Whether an envelope to `to` with a body of `media` is an operation for a Libro (to
/// `libro@…`, or with the operations' media type), which only the Libro's verbs send.
pub fn is_libro_op<'a>(to: impl IntoIterator<Item = &'a Address>, media: &str) -> bool {
    to.into_iter().any(|a| a.local() == nyx5_rules::libro::LIBRO) || media == nyx5_proto::ops::MEDIA
}

/// The proof-of-work bits the recipients' inboxes ask (the largest), as their houses read them.
pub fn pow_bits(cards: &[Verified<AgentCard>]) -> u32 {
    cards.iter().map(|c| pow::bits_asked(c.inbox())).max().unwrap_or(0)
}

/// The recipients whose cards publish no encryption key: nothing can be sealed for them.
pub fn lacking_enc(cards: &[Verified<AgentCard>]) -> Vec<&Address> {
    cards.iter().filter(|c| c.enc().is_none()).map(|c| c.address()).collect()
}

/// Who an envelope to `cards` from `from` is sealed for: each recipient with an encryption key,
/// in order, then the sender (its own key `own`) unless it is a recipient already.
pub fn seal_keys(cards: &[Verified<AgentCard>], from: &Address, own: EncPublic) -> Vec<(Address, EncPublic)> {
    let mut keys: Vec<(Address, EncPublic)> =
        cards.iter().filter_map(|c| c.enc().map(|enc| (c.address().clone(), enc))).collect();
    if !keys.iter().any(|(a, _)| a == from) {
        keys.push((from.clone(), own));
    }
    keys
}

/// Seals `env` for `keys` (see [`seal_keys`]).
pub fn sealed(env: Envelope, keys: &[(Address, EncPublic)], rng: &mut dyn Entropy) -> Result<Envelope, Error> {
    seal::seal(env, keys, rng).map_err(about("cannot seal"))
}

/// The `readers` a held send carries (docs/SPEC.md §7c): the content key of `env`, sealed to its
/// sender `me` (unwrapped with one of `secrets`, the current key first), wrapped for each of
/// `approvers` apart, as the base64url of canonical `{"<approver>": {epk, iv, ct, tag}}`.
pub fn readers_query<'a>(
    env: &Envelope,
    me: &Address,
    secrets: impl IntoIterator<Item = &'a EncSecret>,
    approvers: &[(Address, EncPublic)],
    rng: &mut dyn Entropy,
) -> Result<String, Error> {
    let mut last = None;
    for secret in secrets {
        match seal::content_key(env, me, secret) {
            Ok(cek) => {
                let keys = seal::wrap_for_readers(env, &cek, approvers, rng).map_err(about("cannot seal"))?;
                return Ok(nyx5_proto::b64::encode(seal::readers_to_value(&keys).canonical_string().as_bytes()));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| nyx5_proto::Refusal::CannotOpen.because("no key of the sender's opens the envelope")))
}

/// An envelope as its recipients read it once opened: every member it carries, its sealed content
/// (`encrypted`) replaced by `content`, and without the signature. What an approver is shown
/// (docs/SPEC.md §7c): members beside the body (`attachments`, `extensions`, a content's own
/// extra members) leave with it too.
pub fn as_read(env: &Envelope, content: &nyx5_proto::envelope::Content) -> nyx5_proto::Value {
    let mut o = env.object().clone();
    o.remove("encrypted");
    o.remove("signature");
    o.insert("content".into(), content.to_value());
    nyx5_proto::Value::Object(o)
}

/// A proof of work of `bits` for the envelope whose work digest is `digest`, searched from
/// `start` in chunks of [`POW_CHUNK`], `progress` told the hashes tried after each chunk.
/// `None` after 64 times the expected work.
pub fn mint(digest: &str, bits: u32, start: u64, progress: &mut dyn FnMut(u64)) -> Option<String> {
    let expected = 1u64 << bits.min(62);
    let mut tried = 0u64;
    loop {
        if let Some(nonce) = pow::mint(digest, bits, start.wrapping_add(tried), POW_CHUNK) {
            return Some(nonce);
        }
        tried = tried.saturating_add(POW_CHUNK);
        progress(tried);
        if tried > expected.saturating_mul(64) {
            return None;
        }
    }
}

/// The last steps: the proof (`bits` and its nonce, when one is asked), the signature, the size.
pub fn signed(env: Envelope, proof: Option<(u32, &str)>, key: &SigningKey) -> Result<Envelope, Error> {
    let env = match proof {
        Some((bits, nonce)) => env.with_pow(bits, nonce).map_err(about("the envelope"))?,
        None => env,
    };
    let env = env.sign(key).map_err(about("cannot sign"))?;
    env.check_size(limits::MAX_ENVELOPE_BYTES).map_err(about("the envelope"))?;
    Ok(env)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_libro_operation_is_told_by_its_recipient_or_its_media() {
        let libro = Address::parse("libro@a.test").unwrap();
        let bo = Address::parse("bo@a.test").unwrap();
        assert!(!is_libro_op([&bo], TEXT_MEDIA));
        assert!(is_libro_op([&bo, &libro], TEXT_MEDIA));
        assert!(is_libro_op([&bo], nyx5_proto::ops::MEDIA));
    }

    #[test]
    fn json_media_are_told_by_their_essence() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/LD+JSON; charset=utf-8"));
        assert!(!is_json(TEXT_MEDIA));
        assert!(!is_json("application/jsonx"));
    }

    #[test]
    fn a_found_proof_is_one_the_protocol_accepts() {
        let digest = "00".repeat(32);
        let mut chunks = 0u32;
        let nonce = mint(&digest, 8, 0, &mut |_| chunks += 1).unwrap();
        assert!(pow::check(&digest, &nonce, 8), "nonce {nonce} after {chunks} chunk(s)");
    }
}
