//! Sites: the registrable domain a name belongs to (`r1.evil.example` → `evil.example`), by
//! Mozilla's Public Suffix List, private suffixes such as `github.io` included. One party controls
//! every name under its site, so what limits or blocks a sender keys on the site, never on a name
//! the sender can mint by the thousand.
//!
//! The list is `data/psl/public_suffix_list.dat` (where it comes from, and how to update it:
//! `data/psl/README.md`), coded by `nyx5_pages::psl` at build time into a compact list of every
//! name a rule mentions and what the rules say of it. Native builds embed it (`PSL_EMBEDDED`);
//! the Worker loads the same bytes from its static assets at its first event and hands them to
//! [`install`], which takes them only if their length and checksum are the ones this build was
//! made with. The first lookup (or `install`) builds a hash table from it (about 215 KB of the
//! isolate's memory, built once); every lookup after that is one probe sequence per label of the
//! name, nothing parsed. Until a list is there only the implicit rule `*` would hold (every
//! name's site its last two labels), so `House::new` refuses to build a house without one.

// `PSL_EMBEDDED`, the coded names (native builds), `PSL_NAMES`, how many, `PSL_BYTES` and
// `PSL_FNV64`, the coded list's length and checksum; `DEEPEST`, the most labels any rule matches.
include!(concat!(env!("OUT_DIR"), "/psl.rs"));

/// FNV-1a (64-bit): where a name's search in the table starts, and the coded list's checksum.
/// Not a secret-keyed hash: a name an attacker chooses can only land on a slot, and the longest
/// run of occupied slots in the table (measured as it is built) bounds the search.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// What the rules say of a name (bits of [`rules_for`]).
const PSL_PLAIN: u8 = 1;
const PSL_WILDCARD: u8 = 2;
const PSL_EXCEPTION: u8 = 4;

/// The registrable domain of `domain` (lower case, as `check_domain` wants it): the public suffix
/// and one label more. A name with no registrable part (a suffix itself, `localhost`) is its own
/// site.
pub fn site(domain: &str) -> &str {
    let domain = domain.trim_end_matches('.');
    let suffix = public_suffix(domain);
    // The label before the suffix, if there is one.
    let head = domain.strip_suffix(suffix).and_then(|h| h.strip_suffix('.'));
    match head {
        Some(head) if !head.is_empty() => {
            let start = head.rfind('.').map_or(0, |dot| dot + 1);
            domain.get(start..).unwrap_or(domain)
        }
        _ => domain,
    }
}

/// The public suffix of `domain` by the list's algorithm: a matching exception rule prevails
/// (its suffix is the rule less its first label); else the longest matching rule, a wildcard
/// standing for any one label; else the last label (the implicit rule `*`).
///
/// Only the last `DEEPEST` labels can match a rule, so a long name (a sender may choose one of
/// 127 labels) costs no more lookups than a short one: one per label looked at.
fn public_suffix(domain: &str) -> &str {
    let tail = last_labels(domain, DEEPEST);
    let mut longest = None;
    // The names from the longest, each with its own rules; a name's parent is the next one.
    let mut names = suffixes(tail).map(|name| (name, rules_for(name))).peekable();
    while let Some((name, rules)) = names.next() {
        if rules & PSL_EXCEPTION != 0 {
            return parent(name).unwrap_or(name);
        }
        let under_wildcard = names.peek().is_some_and(|(_, parent)| parent & PSL_WILDCARD != 0);
        if longest.is_none() && (rules & PSL_PLAIN != 0 || under_wildcard) {
            // Keep looking for an exception further up (there is none in the list today: each
            // sits right under its wildcard, which `nyx5_pages::psl` checks).
            longest = Some(name);
        }
    }
    longest.unwrap_or_else(|| suffixes(tail).last().unwrap_or(tail))
}

/// What the rules say of `name`: `PSL_PLAIN`, `PSL_WILDCARD`, `PSL_EXCEPTION` bits, 0 for a name
/// no rule mentions.
fn rules_for(name: &str) -> u8 {
    let Some(table) = table() else { return 0 };
    let slots = table.slots.len();
    // Never 0 slots: the table has half as many again as names, plus one.
    let start = usize::try_from(fnv1a(name.as_bytes()) % slots as u64).unwrap_or(0);
    for i in 0..=table.longest_run {
        let Some(place) = table.slots.get((start + i) % slots).and_then(|&p| usize::from(p).checked_sub(1)) else {
            return 0;
        };
        if table.name(place) == Some(name) {
            return table.rules.get(place).copied().unwrap_or(0);
        }
    }
    0
}

/// The list as lookups search it, built from the coded list at first use.
struct Table {
    /// Every name, one after another, in the coded list's order.
    names: String,
    /// Where each name starts in `names`, and one more: where the last ends.
    offsets: Vec<u32>,
    /// What the rules say of each name.
    rules: Vec<u8>,
    /// Open addressing (`fnv1a`, linear probing): a name's place plus one, 0 for an empty slot.
    /// Half as many slots again as names, so runs of occupied slots stay in the tens.
    slots: Vec<u16>,
    /// The longest run of occupied slots, wrapping around: no search goes further, whatever name
    /// a sender chooses.
    longest_run: usize,
}

static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();

/// The table, built from the embedded list at first use; on wasm32, the installed one, if any.
fn table() -> Option<&'static Table> {
    match PSL_EMBEDDED {
        Some(coded) => Some(TABLE.get_or_init(|| Table::build(coded))),
        None => TABLE.get(),
    }
}

/// Whether lookups have the list (always, in a native build).
pub fn loaded() -> bool {
    table().is_some()
}

/// Where the Worker finds the coded list among its static assets (`nyx5_pages::psl::ASSET_PATH`,
/// which scripts/build-app writes).
pub const ASSET_PATH: &str = "/_nyx5/psl.bin";

/// The coded list's length in this build: what [`install`] takes, and all a reader of the asset
/// needs to buffer.
pub const ASSET_BYTES: usize = PSL_BYTES;

/// Takes the coded list (the Worker's static asset at [`ASSET_PATH`]) if it is the one this build
/// was made with: its length and FNV-1a checksum. Another list is refused, whatever it says: a
/// stale asset, or one of another build, must not decide whose names share a site. A list
/// already there stays.
///
/// A checksum, not SHA-256: the asset is the operator's own, deployed with the Worker, so what
/// the check catches is a mistake, not a forgery; and every new isolate pays for it before its
/// first event. SHA-256 of the ~99 KB list took 4–7 ms there (V8 running sha2's code for the
/// first time), FNV-1a a fraction of a millisecond (benches/README.md, "Bundle").
pub fn install(coded: &[u8]) -> Result<(), nyx5_proto::Error> {
    if coded.len() != PSL_BYTES || fnv1a(coded) != PSL_FNV64 {
        return Err(nyx5_proto::Error::new(
            nyx5_proto::ErrorKind::Internal,
            format!(
                "the Public Suffix List asset ({} bytes) is not the one this build was made with ({PSL_BYTES} bytes, FNV-1a {PSL_FNV64:016x})",
                coded.len()
            ),
        ));
    }
    TABLE.get_or_init(|| Table::build(coded));
    Ok(())
}

impl Table {
    fn build(coded: &[u8]) -> Table {
        let mut names = Vec::with_capacity(coded.len() * 2);
        let mut offsets = Vec::with_capacity(PSL_NAMES + 1);
        let mut rules = Vec::with_capacity(PSL_NAMES);
        offsets.push(0);
        // Each entry: how many bytes at its end are the previous name's last, rules, the other
        // bytes, `\n` (`nyx5_pages::psl`).
        let mut rest = coded;
        let mut previous = 0..0;
        while let [shared, rule, tail @ ..] = rest {
            let end = tail.iter().position(|&b| b == b'\n').unwrap_or(tail.len());
            let (own, after) = tail.split_at(end);
            rest = after.get(1..).unwrap_or_default();
            let start = names.len();
            names.extend_from_slice(own);
            let shared = usize::from(*shared).min(previous.len());
            names.extend_from_within(previous.end - shared..previous.end);
            previous = start..names.len();
            offsets.push(u32::try_from(names.len()).unwrap_or(u32::MAX));
            rules.push(*rule);
        }
        // `nyx5_pages::psl` wrote ASCII names; were it not so, no name would match and every name would
        // be its own suffix's site.
        let names = String::from_utf8(names).unwrap_or_default();
        let mut table = Table { names, offsets, rules, slots: vec![0; PSL_NAMES * 3 / 2 + 1], longest_run: 0 };
        let len = table.slots.len();
        // At most `PSL_NAMES` names go in, so a third of the slots stay empty and every probe
        // sequence ends.
        for place in 0..table.rules.len().min(PSL_NAMES) {
            let Some(name) = table.name(place) else { continue };
            let mut at = usize::try_from(fnv1a(name.as_bytes()) % len as u64).unwrap_or(0);
            while table.slots.get(at).is_some_and(|&p| p != 0) {
                at = (at + 1) % len;
            }
            if let Some(slot) = table.slots.get_mut(at) {
                *slot = u16::try_from(place + 1).unwrap_or(0);
            }
        }
        // Walk the circle once from an empty slot (there is one: a third of them are).
        let empty = table.slots.iter().position(|&p| p == 0).unwrap_or(0);
        let mut run = 0;
        for i in 1..=len {
            run = if table.slots.get((empty + i) % len).is_some_and(|&p| p != 0) { run + 1 } else { 0 };
            table.longest_run = table.longest_run.max(run);
        }
        table
    }

    /// The name at `place`.
    fn name(&self, place: usize) -> Option<&str> {
        let start = usize::try_from(*self.offsets.get(place)?).ok()?;
        let end = usize::try_from(*self.offsets.get(place + 1)?).ok()?;
        self.names.get(start..end)
    }
}

/// `domain` and each name above it, longest first (`a.b.c`, `b.c`, `c`).
fn suffixes(domain: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(domain), |name| parent(name))
}

/// The name made of `domain`'s last `n` labels (all of it when it has no more).
fn last_labels(domain: &str, n: usize) -> &str {
    match domain.rmatch_indices('.').nth(n.saturating_sub(1)) {
        Some((dot, _)) => domain.get(dot + 1..).unwrap_or(domain),
        None => domain,
    }
}

/// The name without its first label (`b.c` for `a.b.c`); `None` for a single label.
fn parent(name: &str) -> Option<&str> {
    name.split_once('.').map(|(_, parent)| parent)
}

/// `domain` and each parent of it down to its site, longest first: the domain entries of a list
/// that match a sender at `domain` (a block of `evil.example` also blocks `x.evil.example`, and
/// nothing above the site, such as a public suffix, ever matches).
pub fn lineage(domain: &str) -> Vec<&str> {
    let floor = site(domain).len();
    let mut out = vec![domain];
    let mut rest = domain;
    while rest.len() > floor {
        match rest.split_once('.') {
            Some((_, parent)) if parent.len() >= floor => {
                rest = parent;
                out.push(rest);
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites() {
        assert_eq!(site("r17.evil.example"), "evil.example");
        assert_eq!(site("evil.example"), "evil.example");
        assert_eq!(site("a.b.example.co.uk"), "example.co.uk");
        assert_eq!(site("mallory.github.io"), "mallory.github.io");
        assert_eq!(site("x.house.workers.dev"), "house.workers.dev");
        assert_eq!(site("co.uk"), "co.uk");
        assert_eq!(site("localhost"), "localhost");
        assert_eq!(site("b.test"), "b.test");
    }

    /// The list's own test cases (`data/psl/test_psl.txt`, from the list's repository), each
    /// name in the form the house sees: lower case, internationalised labels as `xn--`. Where the
    /// list has no registrable domain (`null`), the name is its own site. Names with a leading
    /// dot are not domains a house accepts and are skipped.
    fn unquote(s: &str) -> Option<&str> {
        s.strip_prefix('\'')?.strip_suffix('\'')
    }

    #[test]
    fn the_lists_own_cases() {
        let ascii = |name: &str| idna::domain_to_ascii(name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let mut checked = 0;
        for line in include_str!("../data/psl/test_psl.txt").lines() {
            let Some(args) = line.strip_prefix("checkPublicSuffix(").and_then(|l| l.strip_suffix(");")) else {
                continue;
            };
            let (input, expected) = args.split_once(", ").unwrap_or_else(|| panic!("{line}"));
            let Some(input) = unquote(input).filter(|i| !i.starts_with('.')) else { continue };
            let input = ascii(input);
            let expected = unquote(expected).map_or_else(|| input.clone(), ascii);
            assert_eq!(site(&input), expected, "{line}");
            checked += 1;
        }
        assert!(checked > 60, "only {checked} cases read");
    }

    /// Every kind of rule, from the list as compiled: plain, wildcard, exception, private, and
    /// an internationalised one in its `xn--` form.
    #[test]
    fn each_kind_of_rule() {
        assert_eq!(site("a.b.c.kobe.jp"), "b.c.kobe.jp", "*.kobe.jp");
        assert_eq!(site("a.city.kobe.jp"), "city.kobe.jp", "!city.kobe.jp");
        assert_eq!(site("x.y.blogspot.com"), "y.blogspot.com", "private blogspot.com");
        assert_eq!(site("a.b.xn--55qx5d.cn"), "b.xn--55qx5d.cn", "公司.cn");
        assert_eq!(site("a.b.example.com."), "example.com", "a trailing dot");
        let table = table().unwrap();
        let names: Vec<&str> = (0..table.rules.len()).map(|i| table.name(i).unwrap()).collect();
        assert!(names.len() > 9000 && names.len() == PSL_NAMES);
        assert_eq!(table.slots.iter().filter(|&&p| p != 0).count(), names.len());
        assert!((1..100).contains(&table.longest_run), "{}", table.longest_run);
        // The longest run of occupied slots around the circle, counted another way: over the
        // slots twice in a row, every run that wraps is whole once.
        let twice = table.slots.iter().chain(&table.slots);
        let longest = twice
            .scan(0, |run, &p| {
                Some(if p != 0 {
                    *run += 1;
                    *run
                } else {
                    *run = 0;
                    0
                })
            })
            .max()
            .unwrap();
        assert_eq!(table.longest_run, longest);
        // Every name is found from its own slot, and no name is found where none is.
        assert!(names.iter().zip(&table.rules).all(|(name, &rules)| rules != 0 && rules_for(name) == rules));
        assert_eq!(table.rules.iter().filter(|&&rules| rules & PSL_EXCEPTION != 0).count(), 8);
        assert_eq!(rules_for("not-a-suffix.example"), 0);
        assert_eq!(rules_for(""), 0);
        assert_eq!(rules_for("com"), PSL_PLAIN);
        assert_eq!(rules_for("kobe.jp"), PSL_WILDCARD);
        assert_eq!(rules_for("city.kobe.jp"), PSL_EXCEPTION);
    }

    /// Every rule of the list comes back from the compiled form as the list wrote it: each line's
    /// name, decoded from the embedded list, carries that line's kind of rule, and no name is there that
    /// no line gave.
    #[test]
    fn every_rule_of_the_list_survives_the_coding() {
        let mut want = std::collections::BTreeMap::<String, u8>::new();
        for line in include_str!("../data/psl/public_suffix_list.dat").lines() {
            let rule = line.split_whitespace().next().unwrap_or("");
            if rule.is_empty() || rule.starts_with("//") {
                continue;
            }
            let (bit, name) = match (rule.strip_prefix("*."), rule.strip_prefix('!')) {
                (Some(parent), _) => (PSL_WILDCARD, parent),
                (_, Some(name)) => (PSL_EXCEPTION, name),
                _ => (PSL_PLAIN, rule),
            };
            *want.entry(idna::domain_to_ascii_strict(name).unwrap()).or_default() |= bit;
        }
        let table = table().unwrap();
        let got: std::collections::BTreeMap<String, u8> =
            (0..table.rules.len()).map(|i| (table.name(i).unwrap().to_owned(), table.rules[i])).collect();
        assert_eq!(got.len(), table.rules.len(), "a name twice");
        assert!(want == got, "{} rules in the list, {} names compiled", want.len(), got.len());
        assert!(want.iter().all(|(name, &rules)| rules_for(name) == rules));
    }

    /// The Worker's asset is what `nyx5-pages` writes; `install` takes exactly the bytes this
    /// build was made with and nothing else.
    #[test]
    fn install_takes_only_the_list_this_build_was_made_with() {
        let asset = nyx5_pages::psl::code(include_str!("../data/psl/public_suffix_list.dat")).unwrap().bytes;
        assert_eq!(Some(asset.as_slice()), PSL_EMBEDDED);
        assert_eq!(ASSET_PATH, nyx5_pages::psl::ASSET_PATH);
        assert!(install(&asset).is_ok());
        let mut flipped = asset.clone();
        flipped[asset.len() / 2] ^= 1;
        let refused = install(&flipped).unwrap_err();
        assert_eq!(refused.kind, nyx5_proto::ErrorKind::Internal);
        assert!(refused.reason.contains(&format!("{PSL_FNV64:016x}")), "{refused}");
        assert!(install(&asset[..asset.len() - 1]).is_err());
        assert!(install(&[asset.as_slice(), b"x\n"].concat()).is_err());
        assert!(install(b"").is_err());
        assert_eq!(site("a.b.c.kobe.jp"), "b.c.kobe.jp");
    }

    #[test]
    fn only_the_labels_a_rule_can_match_are_looked_up() {
        assert_eq!(last_labels("a.b.c.d", 2), "c.d");
        assert_eq!(last_labels("a.b.c.d", 4), "a.b.c.d");
        assert_eq!(last_labels("a.b.c.d", 9), "a.b.c.d");
        assert_eq!(last_labels("d", 1), "d");
        // The deepest rule, under 120 more labels, still decides the site.
        const { assert!(DEEPEST >= 7) };
        let deep = "x.y.airflow.cn-north-1.on.amazonwebservices.com.cn";
        assert_eq!(site(deep), "x.y.airflow.cn-north-1.on.amazonwebservices.com.cn");
        let long = format!("{}{deep}", "a.".repeat(120));
        assert_eq!(site(&long), deep);
        let long = format!("{}example.co.uk", "a.".repeat(120));
        assert_eq!(site(&long), "example.co.uk");
    }

    #[test]
    fn lineages() {
        assert_eq!(lineage("a.r1.evil.example"), ["a.r1.evil.example", "r1.evil.example", "evil.example"]);
        assert_eq!(lineage("evil.example"), ["evil.example"]);
        assert_eq!(lineage("mail.example.co.uk"), ["mail.example.co.uk", "example.co.uk"]);
        assert_eq!(lineage("localhost"), ["localhost"]);
        // A trailing dot: the site is compared without it, and nothing above the site joins.
        assert_eq!(lineage("a.example.com."), ["a.example.com.", "example.com."]);
    }
}
