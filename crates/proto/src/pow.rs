//! Proof of work (spec §9, bound to the envelope in docs/SPEC.md §9): `bits` leading zero bits in
//! SHA-256 of `nyx5/1 pow:<work digest>:<nonce>`, where the work digest
//! ([`crate::Envelope::work_digest`]) covers the whole envelope but its `signature` and `pow`.
//! A proof made for one envelope (one sender, one set of recipients, one content) proves
//! nothing for any other.

use crate::crypto::sha256;
use crate::json::{Object, Value};
use crate::limits;

/// What every proof's hashed text starts with.
pub const PREFIX: &str = "nyx5/1 pow:";

/// Bits a `pow` inbox asks when it names none, or names no whole number (spec §9's example).
pub const DEFAULT_BITS: u32 = 16;

/// The bits an agent's card `inbox` asks of a stranger, as its house enforces them and as every
/// sender mints them: none unless the policy is `pow`; then `pow_bits` when it is a whole number
/// from 0, else [`DEFAULT_BITS`]; never more than [`limits::MAX_POW_BITS`].
pub fn bits_asked(inbox: &Object) -> u32 {
    if inbox.get("policy").and_then(Value::as_str) != Some("pow") {
        return 0;
    }
    inbox
        .get("pow_bits")
        .and_then(Value::as_safe_integer)
        .and_then(|b| u32::try_from(b).ok())
        .map_or(DEFAULT_BITS, |b| b.min(limits::MAX_POW_BITS))
}

/// Leading zero bits of a digest.
pub fn leading_zero_bits(digest: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        if *byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

fn message(work_digest: &str, nonce: &str) -> String {
    format!("{PREFIX}{work_digest}:{nonce}")
}

/// Whether `nonce` proves `bits` of work for the envelope whose work digest is `work_digest`.
/// More than [`limits::MAX_POW_BITS`] is never asked, so never accepted as asked.
pub fn check(work_digest: &str, nonce: &str, bits: u32) -> bool {
    bits <= limits::MAX_POW_BITS && leading_zero_bits(&sha256(message(work_digest, nonce).as_bytes())) >= bits
}

/// Finds a decimal nonce with `bits` of work for `work_digest`, trying at most `max_tries`
/// counters from `start` (callers pick `start` at random so two senders do not collide in their
/// search).
pub fn mint(work_digest: &str, bits: u32, start: u64, max_tries: u64) -> Option<String> {
    if bits > limits::MAX_POW_BITS {
        return None;
    }
    let prefix = message(work_digest, "");
    let mut buf = String::with_capacity(prefix.len() + 20);
    (0..max_tries).map(|i| start.wrapping_add(i)).find_map(|n| {
        buf.clear();
        buf.push_str(&prefix);
        buf.push_str(&n.to_string());
        (leading_zero_bits(&sha256(buf.as_bytes())) >= bits).then(|| n.to_string())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_bits_an_inbox_asks_are_read_one_way() {
        let inbox = |json: &str| Value::parse(json.as_bytes(), 256).unwrap().as_object().unwrap().clone();
        assert_eq!(bits_asked(&inbox(r#"{"policy":"open","pow_bits":20}"#)), 0);
        assert_eq!(bits_asked(&inbox(r#"{"policy":"pow"}"#)), DEFAULT_BITS);
        assert_eq!(bits_asked(&inbox(r#"{"policy":"pow","pow_bits":20}"#)), 20);
        assert_eq!(bits_asked(&inbox(r#"{"policy":"pow","pow_bits":0}"#)), 0);
        assert_eq!(bits_asked(&inbox(r#"{"policy":"pow","pow_bits":40}"#)), limits::MAX_POW_BITS);
        // Not a whole number from 0: the default, as the house asks it (never 0 bits).
        assert_eq!(bits_asked(&inbox(r#"{"policy":"pow","pow_bits":-5}"#)), DEFAULT_BITS);
        assert_eq!(bits_asked(&inbox(r#"{"policy":"pow","pow_bits":"9"}"#)), DEFAULT_BITS);
    }

    #[test]
    fn counts_leading_zero_bits() {
        let mut d = [0u8; 32];
        assert_eq!(leading_zero_bits(&d), 256);
        d[1] = 0b0001_0000;
        assert_eq!(leading_zero_bits(&d), 11);
    }

    #[test]
    fn more_bits_than_the_limit_are_refused_before_any_search() {
        // Refused at once: with every counter allowed, a search for 33 bits would not end.
        assert_eq!(mint(&"ab".repeat(32), limits::MAX_POW_BITS + 1, 0, u64::MAX), None);
        assert_eq!(mint(&"ab".repeat(32), u32::MAX, 0, u64::MAX), None);
    }

    #[test]
    fn mint_then_check() {
        let digest = "ab".repeat(32);
        let nonce = mint(&digest, 12, 0, 1 << 20).unwrap();
        assert!(check(&digest, &nonce, 12));
        assert!(!check(&digest, &nonce, 33));
        // Nonce "0": its digest decides; check agrees with a direct count of the pinned text.
        let direct = leading_zero_bits(&sha256(format!("nyx5/1 pow:{digest}:0").as_bytes()));
        assert!(check(&digest, "0", direct) && !check(&digest, "0", direct + 1));
    }

    #[test]
    fn a_proof_is_for_one_envelope_only() {
        let (a, b) = ("ab".repeat(32), "ac".repeat(32));
        let nonce = mint(&a, 16, 0, 1 << 24).unwrap();
        assert!(check(&a, &nonce, 16));
        assert!(!check(&b, &nonce, 16), "the same nonce does not carry to another envelope");
    }
}
