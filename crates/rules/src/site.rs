//! Sites: the registrable domain a name belongs to (`r1.evil.example` → `evil.example`), by
//! Mozilla's Public Suffix List, private suffixes such as `github.io` included. One party controls
//! every name under its site, so what limits or blocks a sender keys on the site, never on a name
//! the sender can mint by the thousand.
//!
//! The list is `data/psl/public_suffix_list.dat` (where it comes from, and how to update it:
//! `data/psl/README.md`), coded by `nyx5_pages::psl` at build time into the finished lookup
//! table: an open-addressing hash table of every name a rule mentions and what the rules say of
//! it. A [`Psl`] is that table where its bytes lie (it only borrows them): a lookup reads the
//! slots and the one entry it compares, one probe sequence per label of the name, and nothing is
//! built to make one. Native builds embed the table ([`Psl::embedded`]); the Worker loads the same
//! bytes from its static assets and checks them with [`Psl::check`] (the house keeps them:
//! `nyx5_house::site`). A cold isolate so pays for a checksum, not for a table built (which was
//! ~8 ms of its CPU under load, against the Free plan's 10 ms per invocation; benches/README.md,
//! "A cold isolate"). With no table (empty bytes) only the implicit rule `*` holds: every name's
//! site is its last two labels.

// `PSL_EMBEDDED`, the table (native builds); `PSL_NAMES`, how many names it holds, `PSL_SLOTS`,
// how many slots, `PSL_LONGEST_RUN`, the longest run of occupied slots; `PSL_BYTES` and
// `PSL_CHECKSUM`, its length and checksum; `DEEPEST`, the most labels any rule matches.
include!(concat!(env!("OUT_DIR"), "/psl.rs"));

/// FNV-1a (64-bit): where a name's search in the table starts (`nyx5_pages::psl::fnv1a`).
/// Not a secret-keyed hash: a name an attacker chooses can only land on a slot, and the longest
/// run of occupied slots in the table (measured when it is coded) bounds the search.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

include!("psl_checksum.rs");

/// What the rules say of a name (bits of [`Psl::rules_for`]).
const PSL_PLAIN: u8 = 1;
const PSL_WILDCARD: u8 = 2;
const PSL_EXCEPTION: u8 = 4;

/// Where the Worker finds the coded table among its static assets (`nyx5_pages::psl::ASSET_PATH`,
/// which scripts/build-app writes).
pub const ASSET_PATH: &str = "/_nyx5/psl.bin";

/// The coded table's length in this build: what [`Psl::check`] takes, and all a reader of the
/// asset needs to buffer.
pub const ASSET_BYTES: usize = PSL_BYTES;

/// The coded Public Suffix List where its bytes lie (`nyx5_pages::psl::Coded` says how they are
/// laid out): a lookup reads the slots of its probe sequence and the entries it compares, nothing
/// else. Bytes that are not a table this build made (which [`Psl::check`] keeps out) only ever
/// give 0 or a wrong answer, never a panic or a longer search.
#[derive(Clone, Copy)]
pub struct Psl<'a> {
    bytes: &'a [u8],
}

impl std::fmt::Debug for Psl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the ~200 KB of the table: its size says which it is.
        f.debug_struct("Psl").field("bytes", &self.bytes.len()).finish()
    }
}

impl Psl<'static> {
    /// The table this build embeds (native builds; `None` on wasm32, where the Worker loads it).
    pub fn embedded() -> Option<Psl<'static>> {
        PSL_EMBEDDED.map(|bytes| Psl { bytes })
    }

    /// No list: only the implicit rule `*` holds.
    pub const NONE: Psl<'static> = Psl { bytes: &[] };
}

impl<'a> Psl<'a> {
    /// The coded table (the Worker's static asset at [`ASSET_PATH`]) if it is the one this build
    /// was made with: its length and checksum. Another is refused, whatever it says: a stale
    /// asset, or one of another build, must not decide whose names share a site.
    ///
    /// A checksum, not SHA-256: the asset is the operator's own, deployed with the Worker, so what
    /// the check catches is a mistake, not a forgery; and every new isolate pays for it before its
    /// first event. SHA-256 of the list took 4–7 ms there (V8 running sha2's code for the first
    /// time); over this table FNV-1a, a byte at a time, took 0.36–0.72 ms of a cold isolate under
    /// load, this checksum 0.07 ms (benches/README.md, "A cold isolate").
    pub fn check(coded: &'a [u8]) -> Result<Psl<'a>, nyx5_proto::Error> {
        if coded.len() != PSL_BYTES || checksum(coded) != PSL_CHECKSUM {
            return Err(nyx5_proto::Error::new(
                nyx5_proto::ErrorKind::Internal,
                format!(
                    "the Public Suffix List asset ({} bytes) is not the one this build was made with ({PSL_BYTES} bytes, checksum {PSL_CHECKSUM:016x})",
                    coded.len()
                ),
            ));
        }
        Ok(Psl { bytes: coded })
    }

    /// Whether this is a list (not [`Psl::NONE`]).
    pub fn is_list(self) -> bool {
        !self.bytes.is_empty()
    }

    /// The registrable domain of `domain` (lower case, as `check_domain` wants it): the public
    /// suffix and one label more. A name with no registrable part (a suffix itself, `localhost`)
    /// is its own site.
    pub fn site(self, domain: &str) -> &str {
        let domain = domain.trim_end_matches('.');
        let suffix = self.public_suffix(domain);
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

    /// `domain` and each parent of it down to its site, longest first: the domain entries of a
    /// list that match a sender at `domain` (a block of `evil.example` also blocks
    /// `x.evil.example`, and nothing above the site, such as a public suffix, ever matches).
    pub fn lineage(self, domain: &str) -> Vec<&str> {
        let floor = self.site(domain).len();
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

    /// The public suffix of `domain` by the list's algorithm: a matching exception rule prevails
    /// (its suffix is the rule less its first label); else the longest matching rule, a wildcard
    /// standing for any one label; else the last label (the implicit rule `*`).
    ///
    /// Only the last `DEEPEST` labels can match a rule, so a long name (a sender may choose one of
    /// 127 labels) costs no more lookups than a short one: one per label looked at.
    fn public_suffix(self, domain: &str) -> &str {
        let tail = last_labels(domain, DEEPEST);
        let mut longest = None;
        // The names from the longest, each with its own rules; a name's parent is the next one.
        let mut names = suffixes(tail).map(|name| (name, self.rules_for(name))).peekable();
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

    /// What the rules say of `name` (`PSL_PLAIN`, `PSL_WILDCARD`, `PSL_EXCEPTION` bits), 0 for a
    /// name the table does not hold. Reads at most `PSL_LONGEST_RUN + 1` slots.
    fn rules_for(self, name: &str) -> u8 {
        // `PSL_SLOTS` is never 0: half as many again as names, plus one.
        let start = usize::try_from(fnv1a(name.as_bytes()) % PSL_SLOTS as u64).unwrap_or(0);
        for i in 0..=PSL_LONGEST_RUN {
            match self.slot((start + i) % PSL_SLOTS) {
                Some(0) | None => return 0,
                Some(at) => {
                    if let Some((entry, rules)) = self.entry(at)
                        && entry == name.as_bytes()
                    {
                        return rules;
                    }
                }
            }
        }
        0
    }

    /// Slot `i`: where its entry starts, 0 when it is empty.
    fn slot(self, i: usize) -> Option<usize> {
        let bytes = self.bytes.get(i.checked_mul(4)?..)?.first_chunk::<4>()?;
        usize::try_from(u32::from_le_bytes(*bytes)).ok()
    }

    /// The entry at `at`: its name's bytes and its rules.
    fn entry(self, at: usize) -> Option<(&'a [u8], u8)> {
        let [len, rules, rest @ ..] = self.bytes.get(at..)? else { return None };
        Some((rest.get(..usize::from(*len))?, *rules))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn psl() -> Psl<'static> {
        Psl::embedded().unwrap()
    }
    fn site(domain: &str) -> &str {
        psl().site(domain)
    }
    fn lineage(domain: &str) -> Vec<&str> {
        psl().lineage(domain)
    }
    fn rules_for(name: &str) -> u8 {
        psl().rules_for(name)
    }

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
        let table = psl();
        let entries = entries(table);
        assert!(entries.len() > 9000 && entries.len() == PSL_NAMES);
        assert!((1..100).contains(&PSL_LONGEST_RUN), "{PSL_LONGEST_RUN}");
        // The longest run of occupied slots around the circle, counted here: over the slots
        // twice in a row, every run that wraps is whole once.
        let occupied: Vec<bool> = (0..PSL_SLOTS).map(|i| table.slot(i).unwrap() != 0).collect();
        let longest = (occupied.iter().chain(&occupied))
            .scan(0, |run, &full| {
                *run = if full { *run + 1 } else { 0 };
                Some(*run)
            })
            .max()
            .unwrap();
        assert_eq!(PSL_LONGEST_RUN, longest);
        // Every name is found from its own slot, and no name is found where none is.
        assert!(entries.iter().all(|(name, rules)| *rules != 0 && rules_for(name) == *rules));
        assert_eq!(entries.iter().filter(|(_, rules)| rules & PSL_EXCEPTION != 0).count(), 8);
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
        let entries = entries(psl());
        let got: std::collections::BTreeMap<String, u8> = entries.iter().cloned().collect();
        assert_eq!(got.len(), entries.len(), "a name twice");
        assert!(want == got, "{} rules in the list, {} names compiled", want.len(), got.len());
        assert!(want.iter().all(|(name, &rules)| rules_for(name) == rules));
    }

    /// Every name in the table and its rules, slot by slot.
    fn entries(table: Psl<'_>) -> Vec<(String, u8)> {
        (0..PSL_SLOTS)
            .map(|i| table.slot(i).unwrap())
            .filter(|&at| at != 0)
            .map(|at| table.entry(at).map(|(name, rules)| (String::from_utf8(name.to_vec()).unwrap(), rules)).unwrap())
            .collect()
    }

    fn asset() -> Vec<u8> {
        nyx5_pages::psl::code(include_str!("../data/psl/public_suffix_list.dat")).unwrap().bytes
    }

    /// The Worker's asset is what `nyx5-pages` writes; `check` takes exactly the bytes this
    /// build was made with and nothing else, and reads them where they lie.
    #[test]
    fn check_takes_only_the_table_this_build_was_made_with() {
        let asset = asset();
        assert_eq!(Some(asset.as_slice()), PSL_EMBEDDED);
        assert_eq!(ASSET_PATH, nyx5_pages::psl::ASSET_PATH);
        assert_eq!(PSL_CHECKSUM, nyx5_pages::psl::checksum(&asset));
        assert!(
            ["", "a", "kobe.jp", "xn--55qx5d.cn"]
                .iter()
                .all(|n| fnv1a(n.as_bytes()) == nyx5_pages::psl::fnv1a(n.as_bytes()))
        );
        // Another build's table: one bit anywhere, a byte more or less, nothing at all.
        for at in [0, 3, PSL_SLOTS * 4 - 1, PSL_SLOTS * 4 + 1, asset.len() / 2, asset.len() - 1] {
            let mut flipped = asset.clone();
            flipped[at] ^= 0x20;
            let refused = Psl::check(&flipped).unwrap_err();
            assert_eq!(refused.kind, nyx5_proto::ErrorKind::Internal);
            assert!(refused.reason.contains(&format!("{PSL_CHECKSUM:016x}")), "{refused}");
        }
        assert!(Psl::check(&asset[..asset.len() - 1]).is_err());
        assert!(Psl::check(&[asset.as_slice(), &[0]].concat()).is_err());
        assert!(Psl::check(&[]).is_err());
        let checked = Psl::check(&asset).unwrap();
        assert!(std::ptr::eq(checked.bytes, asset.as_slice()), "read in place, not copied");
        assert_eq!(checked.site("a.b.c.kobe.jp"), "b.c.kobe.jp");
    }

    /// A lookup reads the bytes where they lie: a table is a borrow of them and nothing else
    /// (nothing to build at start). Bytes that are no table give wrong answers at worst, never a
    /// panic; no list at all is the implicit rule `*`.
    #[test]
    fn a_lookup_reads_the_bytes_in_place() {
        const { assert!(size_of::<Psl<'static>>() == size_of::<&[u8]>()) };
        let asset = asset();
        let table = Psl { bytes: &asset };
        assert_eq!(table.rules_for("com"), PSL_PLAIN);
        assert_eq!(table.rules_for("kobe.jp"), PSL_WILDCARD);
        assert_eq!(table.rules_for("city.kobe.jp"), PSL_EXCEPTION);
        assert_eq!(table.rules_for("example.com"), 0);
        assert_eq!(entries(table).len(), PSL_NAMES);
        let garbage = [vec![], vec![0xff; 64], vec![7; PSL_SLOTS * 4 + 3], asset[..asset.len() / 2].to_vec()];
        for bytes in &garbage {
            let table = Psl { bytes };
            for name in ["com", "kobe.jp", "", "a.b.c.d.e.f.g.h"] {
                let _ = table.rules_for(name);
            }
        }
        assert!(!Psl::NONE.is_list() && psl().is_list());
        assert_eq!(Psl::NONE.site("a.b.example.co.uk"), "co.uk");
        assert_eq!(Psl::NONE.lineage("a.evil.example"), ["a.evil.example", "evil.example"]);
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
