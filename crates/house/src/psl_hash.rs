// Included by build.rs and by site.rs, so the table is built and searched with one function.

/// FNV-1a (64-bit) of a name: where the name's search in the Public Suffix List's table starts.
/// Not a secret-keyed hash: a name an attacker chooses can only land on a slot, and the longest
/// run of occupied slots in the table (`PSL_LONGEST_RUN`, known at build time) bounds the search.
fn psl_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}
