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

fn sextet(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    }))
}

/// Decodes strict base64url without padding. `None` for anything not canonical.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= sextet(*c)? << (18 - 6 * i);
        }
        let produced = chunk.len() - 1; // 4 chars -> 3 bytes, 3 -> 2, 2 -> 1
        let unused_bits = 24 - 8 * produced as u32;
        let used_char_bits = 24 - 6 * chunk.len() as u32;
        // Bits encoded by the characters but not belonging to any output byte must be zero.
        let mask = ((1u32 << unused_bits) - 1) & !((1u32 << used_char_bits) - 1);
        if n & mask != 0 {
            return None;
        }
        for i in 0..produced {
            out.push((n >> (16 - 8 * i)) as u8);
        }
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
    fn refuses_non_canonical_input() {
        assert_eq!(decode("Zg=="), None);
        assert_eq!(decode("Zh"), None); // trailing bits set
        assert_eq!(decode("Z"), None);
        assert_eq!(decode("Zm9v+/"), None);
        assert_eq!(decode("_-8"), Some(vec![0xff, 0xef]));
        assert_eq!(encode(&[0xfb, 0xff]), "-_8");
    }
}
