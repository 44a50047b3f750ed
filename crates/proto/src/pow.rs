//! Proof of work (spec §9): `bits` leading zero bits in SHA-256 of `<id>:<nonce>`.

use crate::crypto::sha256;
use crate::limits;

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

/// Whether `nonce` proves `bits` of work for envelope `id`. More than
/// [`limits::MAX_POW_BITS`] is never asked, so never accepted as asked.
pub fn check(id: &str, nonce: &str, bits: u32) -> bool {
    bits <= limits::MAX_POW_BITS && leading_zero_bits(&sha256(format!("{id}:{nonce}").as_bytes())) >= bits
}

/// Finds a decimal nonce for `id` with `bits` of work, trying at most `max_tries` counters
/// from `start` (callers pick `start` at random so two senders do not collide in their search).
pub fn mint(id: &str, bits: u32, start: u64, max_tries: u64) -> Option<String> {
    if bits > limits::MAX_POW_BITS {
        return None;
    }
    let prefix = format!("{id}:");
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
    use super::*;

    #[test]
    fn counts_leading_zero_bits() {
        let mut d = [0u8; 32];
        assert_eq!(leading_zero_bits(&d), 256);
        d[1] = 0b0001_0000;
        assert_eq!(leading_zero_bits(&d), 11);
    }

    #[test]
    fn mint_then_check() {
        let nonce = mint("abc", 12, 0, 1 << 20).unwrap();
        assert!(check("abc", &nonce, 12));
        assert!(!check("abc", &nonce, 33));
        // Nonce "0" for id "abc": its digest decides; check agrees with a direct count.
        let direct = leading_zero_bits(&sha256(b"abc:0"));
        assert!(check("abc", "0", direct) && !check("abc", "0", direct + 1));
    }
}
