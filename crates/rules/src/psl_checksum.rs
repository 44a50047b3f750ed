// One source for the Public Suffix List table's checksum, included by `nyx5_rules::site` (which
// checks the table it is given) and by `nyx5_pages::psl` (which codes it): the two can never
// disagree, and neither crate depends on the other.

/// The table's checksum: its length, then each 8 bytes as a little-endian word (the last padded
/// with zeros), each mixed in by xor, a multiplication by an odd constant and an xorshift. Each
/// step is a bijection of the state, so a table that differs in one word always differs in its
/// checksum; 8 bytes at a time, it costs a cold isolate a fifth to a tenth of what FNV-1a's byte
/// loop did (benches/README.md, "A cold isolate").
pub fn checksum(bytes: &[u8]) -> u64 {
    let mix = |h: u64, word: u64| {
        let h = (h ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    };
    // Whole words, each one load: no call per word (at opt-level "z" `copy_from_slice` is one,
    // which made a cold isolate's checksum ~7× slower).
    let (words, rest) = bytes.as_chunks::<8>();
    let h = words.iter().fold(mix(0xcbf2_9ce4_8422_2325, bytes.len() as u64), |h, w| mix(h, u64::from_le_bytes(*w)));
    let mut last = [0u8; 8];
    for (to, from) in last.iter_mut().zip(rest) {
        *to = *from;
    }
    mix(h, u64::from_le_bytes(last))
}
