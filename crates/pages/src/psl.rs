//! The Public Suffix List (`crates/rules/data/psl/public_suffix_list.dat`) coded for
//! `nyx5_house::site`: every name a rule mentions — a plain rule, the parent of a wildcard rule
//! (`*.ck` → `ck`), an exception rule (`!www.ck` → `www.ck`) — with what the rules say of it, in
//! the finished hash table that `site` searches where the bytes lie, and the most labels a rule
//! matches. Rules are written as the house sees names: ASCII, lower case, internationalised
//! labels in their `xn--` form.
//!
//! Two users, one coding: the house's build script (native builds embed the table; wasm32 builds
//! keep only its shape, length and checksum) and the `nyx5-pages` binary, which writes the same bytes among the
//! Worker's static assets for the Worker to load at its first event
//! (docs/decisions/0040-psl-coded-table.md).

use std::collections::{BTreeMap, BTreeSet};

/// Where the coded list sits among the Worker's static assets (`build/site`).
pub const ASSET_PATH: &str = "/_nyx5/psl.bin";

/// The list, coded.
#[derive(Debug, Clone)]
pub struct Coded {
    /// The finished lookup table, which `nyx5_house::site` reads in place (nothing is built from
    /// it at start): first `slots` little-endian `u32`s, an open-addressing table (a name's
    /// search starts at [`fnv1a`] of it modulo `slots` and goes on slot by slot, wrapping), each
    /// slot 0 when empty, else where its name's entry starts in `bytes`; then the entries, one
    /// per name in the byte order of the names with their labels reversed: the name's length,
    /// what the rules say of it (1 a rule, 2 `*.` + it is one, 4 `!` + it is one), and its
    /// bytes.
    pub bytes: Vec<u8>,
    /// How many names.
    pub names: usize,
    /// How many slots: half as many again as names, plus one, so a third of them stay empty and
    /// runs of occupied slots stay in the tens.
    pub slots: usize,
    /// The longest run of occupied slots, wrapping around: no search goes further, whatever
    /// name a sender chooses.
    pub longest_run: usize,
    /// The most labels a rule can match.
    pub deepest: usize,
    /// [`checksum`] of `bytes`: how the Worker tells that the asset it read is the table it was
    /// built with (`nyx5_house::site::install` says why not SHA-256).
    pub checksum: u64,
}

/// Codes the list's text; a line that is no rule the house could meet, or an exception rule not
/// under a wildcard rule (`site.rs` relies on that), is an error naming it.
pub fn code(text: &str) -> Result<Coded, String> {
    let (mut plain, mut wildcard, mut exception) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (n, line) in text.lines().enumerate() {
        // A rule is the line up to its first white space; comments and blank lines are not rules.
        let rule = line.split_whitespace().next().unwrap_or("");
        if rule.is_empty() || rule.starts_with("//") {
            continue;
        }
        let (set, name) = if let Some(parent) = rule.strip_prefix("*.") {
            (&mut wildcard, parent)
        } else if let Some(name) = rule.strip_prefix('!') {
            (&mut exception, name)
        } else {
            (&mut plain, rule)
        };
        // `idna` 0.5 (crates/house/Cargo.toml says why not 1): its strict mode leaves some label
        // checks out, so the result must also be a name the house could meet (`check_domain`'s
        // alphabet and label shape).
        let ascii = idna::domain_to_ascii_strict(name)
            .ok()
            .filter(|a| a.split('.').all(house_label))
            .ok_or_else(|| format!("line {}: not a rule: {line}", n + 1))?;
        set.insert(ascii);
    }

    let labels = |name: &String| name.split('.').count();
    let deepest = (plain.iter().map(labels))
        .chain(wildcard.iter().map(|parent| labels(parent) + 1))
        .chain(exception.iter().map(labels))
        .max()
        .unwrap_or(1);

    for name in &exception {
        let parent = name.split_once('.').map_or("", |(_, p)| p);
        if !wildcard.contains(parent) {
            return Err(format!("exception rule !{name} is not under a wildcard rule"));
        }
    }

    let mut flags = BTreeMap::<String, u8>::new();
    for (set, bit) in [(&plain, 1u8), (&wildcard, 2), (&exception, 4)] {
        for name in set {
            *flags.entry(reversed(name)).or_default() |= bit;
        }
    }
    let names = flags.len();
    let slots = names * 3 / 2 + 1;
    // The entries after the slots: so no entry starts at 0, which marks an empty slot.
    let mut bytes = vec![0u8; slots * 4];
    let mut table = vec![0u32; slots];
    for (rev, rules) in &flags {
        let name = reversed(rev);
        let at = u32::try_from(bytes.len()).map_err(|_| "the table is over 4 GiB".to_owned())?;
        // A name the house could meet is at most 253 bytes (four labels of 63 and their dots).
        bytes.push(u8::try_from(name.len()).map_err(|_| format!("{name}: longer than 255 bytes"))?);
        bytes.push(*rules);
        bytes.extend_from_slice(name.as_bytes());
        let mut slot = usize::try_from(fnv1a(name.as_bytes()) % slots as u64).unwrap_or(0);
        // A third of the slots stay empty, so this ends.
        while table.get(slot).is_some_and(|&s| s != 0) {
            slot = (slot + 1) % slots;
        }
        if let Some(s) = table.get_mut(slot) {
            *s = at;
        }
    }
    for (slot, at) in bytes.chunks_exact_mut(4).zip(&table) {
        slot.copy_from_slice(&at.to_le_bytes());
    }
    // Walk the circle once from an empty slot (there is one: a third of them are).
    let empty = table.iter().position(|&s| s == 0).unwrap_or(0);
    let (mut run, mut longest_run) = (0, 0);
    for i in 1..=slots {
        run = if table.get((empty + i) % slots).is_some_and(|&s| s != 0) { run + 1 } else { 0 };
        longest_run = longest_run.max(run);
    }
    let checksum = checksum(&bytes);
    Ok(Coded { bytes, names, slots, longest_run, deepest, checksum })
}

/// FNV-1a, 64 bits (as `nyx5_house::site` computes it): where a name's search starts.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

include!("../../rules/src/psl_checksum.rs");

/// A label as the house writes names: 1–63 bytes of `a-z0-9-`, no hyphen at either end.
fn house_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `name` with its labels in reverse order (`city.kobe.jp` → `jp.kobe.city`, and back).
fn reversed(name: &str) -> String {
    name.rsplit('.').collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_each_name_in_its_slot_with_its_rules() {
        let coded = code("// a comment\n\nuk\nco.uk\n*.kobe.jp\n!city.kobe.jp\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((coded.names, coded.slots, coded.deepest), (4, 7, 3));
        // Reversed order: jp.kobe, jp.kobe.city, uk, uk.co; each entry its length, its rules,
        // its bytes, after 7 slots of 4 bytes.
        let entries = b"\x07\x02kobe.jp\x0c\x04city.kobe.jp\x02\x01uk\x05\x01co.uk";
        assert_eq!(&coded.bytes[28..], entries);
        let slot = |i: usize| u32::from_le_bytes(coded.bytes[i * 4..i * 4 + 4].try_into().unwrap()) as usize;
        let mut found = std::collections::BTreeMap::new();
        for name in ["kobe.jp", "city.kobe.jp", "uk", "co.uk"] {
            let start = (fnv1a(name.as_bytes()) % 7) as usize;
            let at = (0..=coded.longest_run)
                .map(|i| slot((start + i) % 7))
                .find(|&at| at != 0 && &coded.bytes[at + 2..at + 2 + coded.bytes[at] as usize] == name.as_bytes())
                .unwrap_or_else(|| panic!("{name} not found"));
            found.insert(name, coded.bytes[at + 1]);
        }
        assert_eq!(found, [("city.kobe.jp", 4), ("co.uk", 1), ("kobe.jp", 2), ("uk", 1)].into());
        assert_eq!((0..7).filter(|&i| slot(i) != 0).count(), 4);
        assert_eq!(coded.checksum, checksum(&coded.bytes));
        // FNV-1a's own test values (draft-eastlake-fnv): "" and "a".
        assert_eq!((fnv1a(b""), fnv1a(b"a")), (0xcbf2_9ce4_8422_2325, 0xaf63_dc4c_8601_ec8c));
    }

    #[test]
    fn the_checksum_changes_with_any_bit_and_with_the_length() {
        let bytes: Vec<u8> = (0..61u8).collect();
        let sum = checksum(&bytes);
        for i in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[i / 8] ^= 1 << (i % 8);
            assert_ne!(checksum(&flipped), sum, "bit {i}");
        }
        // Trailing zeros are not padding: the length is in the sum.
        assert_ne!(checksum(&[bytes.as_slice(), &[0]].concat()), sum);
        assert_ne!(checksum(&bytes[..60]), sum);
        assert_ne!(checksum(b""), checksum(&[0]));
    }

    #[test]
    fn a_rule_the_house_could_not_meet_or_a_stray_exception_is_refused() {
        assert!(code("ok\nbad_label.example\n").is_err_and(|e| e.starts_with("line 2:")));
        assert!(code("!www.ck\n").is_err_and(|e| e.contains("!www.ck")));
        // Unicode rules become their `xn--` names.
        let coded = code("公司.cn\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(coded.bytes.windows(10).any(|w| w == b"xn--55qx5d"));
    }
}
