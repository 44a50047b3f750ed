//! base64url without padding (RFC 4648 §5), strict on input.
//!
//! Decoding refuses padding, characters outside the URL-safe alphabet, impossible lengths and
//! non-zero trailing bits, so every byte string has exactly one accepted encoding.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes bytes as base64url without padding.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let idx = ((n >> (18 - 6 * i)) & 63) as usize;
            out.push(char::from(ALPHABET.get(idx).copied().unwrap_or(b'A')));
        }
    }
    out
}

/// Each byte's 6-bit value in the URL-safe alphabet, or `INVALID`.
#[allow(clippy::indexing_slicing)] // evaluated while compiling: a bad index fails the build
const SEXTETS: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};
const INVALID: u8 = 0xff;

fn sextet(c: u8) -> Option<u32> {
    match SEXTETS.get(usize::from(c)).copied() {
        Some(INVALID) | None => None,
        Some(v) => Some(u32::from(v)),
    }
}

/// Decodes strict base64url without padding. `None` for anything not canonical.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    let mut quads = bytes.chunks_exact(4);
    for quad in &mut quads {
        let mut n = 0u32;
        for c in quad {
            n = (n << 6) | sextet(*c)?;
        }
        let [_, a, b, c] = n.to_be_bytes();
        out.extend_from_slice(&[a, b, c]);
    }
    let tail = quads.remainder();
    if !tail.is_empty() {
        let mut n = 0u32;
        for (i, c) in tail.iter().enumerate() {
            n |= sextet(*c)? << (18 - 6 * i);
        }
        let produced = tail.len() - 1; // 3 chars -> 2 bytes, 2 -> 1
        // Bits encoded by the characters but not belonging to any output byte must be zero.
        let used_char_bits = 24 - 6 * tail.len() as u32;
        let mask = ((1u32 << (24 - 8 * produced as u32)) - 1) & !((1u32 << used_char_bits) - 1);
        if n & mask != 0 {
            return None;
        }
        out.extend(n.to_be_bytes().iter().skip(1).take(produced));
    }
    Some(out)
}

/// Decodes into a fixed-size array (keys, signatures, ivs, tags).
pub fn decode_array<const N: usize>(text: &str) -> Option<[u8; N]> {
    decode(text)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_section10_without_padding() {
        let cases = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, enc) in cases {
            assert_eq!(encode(plain.as_bytes()), enc);
            assert_eq!(decode(enc).as_deref(), Some(plain.as_bytes()));
        }
    }

    #[test]
    fn every_byte_string_has_exactly_one_accepted_encoding() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..64 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert_eq!(decode(&encode(&bytes)), Some(bytes));
        }
        // Every 2- and 3-character text (and a 4th after a full quad): accepted exactly when it is
        // the encoding of what it decodes to, and one text per byte string.
        let chars: Vec<u8> = ALPHABET.iter().copied().chain(*b"=+/ .").collect();
        let (mut two, mut three) = (0, 0);
        for &a in &chars {
            for &b in &chars {
                let t = String::from_utf8(vec![a, b]).unwrap();
                if let Some(d) = decode(&t) {
                    assert_eq!(encode(&d), t);
                    two += 1;
                }
                for &c in &chars {
                    let t = String::from_utf8(vec![b'Q', b'U', b'J', b'D', a, b, c]).unwrap();
                    if let Some(d) = decode(&t) {
                        assert_eq!(encode(&d), t);
                        three += 1;
                    }
                }
            }
        }
        assert_eq!((two, three), (256, 65536));
    }

    #[test]
    fn refuses_non_canonical_input() {
        assert_eq!(decode("Zg=="), None);
        assert_eq!(decode("Zh"), None); // trailing bits set
        assert_eq!(decode("Z"), None);
        assert_eq!(decode("Zm9v+/"), None);
        assert_eq!(decode("_-8"), Some(vec![0xff, 0xef]));
        assert_eq!(encode(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn a_text_one_character_past_a_whole_quad_is_refused_even_when_that_character_is_zero() {
        // One character holds 6 bits, not a byte: no length 4k + 1 encodes anything, whatever
        // the character (`A` is all zero bits, so only the length can refuse it).
        for text in ["A", "Z", "_", "Zm9vA", "AAAAA", "Zm9vYmFyA", "Zm9vYmFyQ"] {
            assert_eq!(decode(text), None, "{text}");
        }
        assert_eq!(decode("AA"), Some(vec![0]));
        assert_eq!(decode("Zm9vAA"), Some(b"foo\0".to_vec()));
    }
}
