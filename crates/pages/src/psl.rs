//! The Public Suffix List (`crates/house/data/psl/public_suffix_list.dat`) coded for
//! `nyx5_house::site`: every name a rule mentions — a plain rule, the parent of a wildcard rule
//! (`*.ck` → `ck`), an exception rule (`!www.ck` → `www.ck`) — with what the rules say of it,
//! and the most labels a rule matches. Rules are written as the house sees names: ASCII, lower
//! case, internationalised labels in their `xn--` form.
//!
//! Two users, one coding: the house's build script (native builds embed the list; wasm32 builds
//! keep only its digest) and the `nyx5-pages` binary, which writes the same bytes among the
//! Worker's static assets for the Worker to load at its first event (ARCHITECTURE.md, "Sites
//! from the list itself").

use std::collections::{BTreeMap, BTreeSet};

/// Where the coded list sits among the Worker's static assets (`build/site`).
pub const ASSET_PATH: &str = "/_nyx5/psl.bin";

/// The list, coded.
#[derive(Debug, Clone)]
pub struct Coded {
    /// Per name, in the byte order of the names with their labels reversed (`jp.kobe.city`, so
    /// that names under one suffix sit together): how many bytes at its end are the previous
    /// name's last bytes (at most 255), what the rules say of it (1 a rule, 2 `*.` + it is one,
    /// 4 `!` + it is one), its other bytes, and a line feed (no name has one).
    pub bytes: Vec<u8>,
    /// How many names.
    pub names: usize,
    /// The most labels a rule can match.
    pub deepest: usize,
    /// FNV-1a (64-bit) of `bytes`: how the Worker tells that the asset it read is the list it
    /// was built with (`nyx5_house::site::install` says why not SHA-256).
    pub fnv64: u64,
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
    // site.rs numbers the names in 16 bits.
    if flags.len() >= usize::from(u16::MAX) {
        return Err("too many names for a 16-bit table".into());
    }
    // Each name written as what it does not share with the end of the one before: gzipped, the
    // list is ~38 KB this way, against ~82 KB for the table site.rs builds from it at first use
    // (names, offsets, slots); the shared ends are copied, so decoding is one pass with no label
    // turned around.
    let mut bytes = Vec::new();
    let mut previous = String::new();
    for (rev, rules) in &flags {
        let name = reversed(rev);
        let shared = (name.bytes().rev().zip(previous.bytes().rev()).take(255)).take_while(|(a, b)| a == b).count();
        bytes.push(u8::try_from(shared).unwrap_or(u8::MAX));
        bytes.push(*rules);
        bytes.extend_from_slice(name.as_bytes().get(..name.len() - shared).unwrap_or_default());
        bytes.push(b'\n');
        previous = name;
    }
    let fnv64 = fnv1a(&bytes);
    Ok(Coded { bytes, names: flags.len(), deepest, fnv64 })
}

/// FNV-1a, 64 bits (as `nyx5_house::site` computes it).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

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
    fn names_share_their_ends_and_carry_their_rules() {
        let coded = code("// a comment\n\nuk\nco.uk\n*.kobe.jp\n!city.kobe.jp\n").unwrap_or_else(|e| panic!("{e}"));
        // Reversed order: jp.kobe, jp.kobe.city, uk, uk.co; `city.kobe.jp` shares `kobe.jp`
        // with the name before it, `co.uk` shares `uk`.
        assert_eq!(coded.bytes, b"\x00\x02kobe.jp\n\x07\x04city.\n\x00\x01uk\n\x02\x01co.\n");
        assert_eq!((coded.names, coded.deepest), (4, 3));
        assert_eq!(coded.fnv64, fnv1a(&coded.bytes));
        // FNV-1a's own test values (draft-eastlake-fnv): "" and "a".
        assert_eq!((fnv1a(b""), fnv1a(b"a")), (0xcbf2_9ce4_8422_2325, 0xaf63_dc4c_8601_ec8c));
    }

    #[test]
    fn a_rule_the_house_could_not_meet_or_a_stray_exception_is_refused() {
        assert!(code("ok\nbad_label.example\n").is_err_and(|e| e.starts_with("line 2:")));
        assert!(code("!www.ck\n").is_err_and(|e| e.contains("!www.ck")));
        // Unicode rules become their `xn--` names.
        let coded = code("公司.cn\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(coded.bytes.windows(7).any(|w| w == b"xn--55q"));
    }
}
