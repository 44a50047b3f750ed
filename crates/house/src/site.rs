//! Sites: the registrable domain a name belongs to (`r1.evil.example` → `evil.example`), by the
//! Public Suffix List (the `psl` crate, private suffixes such as `github.io` included). One party
//! controls every name under its site, so what limits or blocks a sender keys on the site, never
//! on a name the sender can mint by the thousand.

use psl::Psl;

/// The registrable domain of `domain` (lower case, as `check_domain` wants it): the public suffix
/// and one label more. A name with no registrable part (a suffix itself, `localhost`) is its own
/// site.
pub fn site(domain: &str) -> &str {
    let domain = domain.trim_end_matches('.');
    match psl::List.domain(domain.as_bytes()).and_then(|d| std::str::from_utf8(d.as_bytes()).ok()) {
        Some(site) if !site.is_empty() && domain.ends_with(site) => site,
        _ => domain,
    }
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

    #[test]
    fn lineages() {
        assert_eq!(lineage("a.r1.evil.example"), ["a.r1.evil.example", "r1.evil.example", "evil.example"]);
        assert_eq!(lineage("evil.example"), ["evil.example"]);
        assert_eq!(lineage("mail.example.co.uk"), ["mail.example.co.uk", "example.co.uk"]);
        assert_eq!(lineage("localhost"), ["localhost"]);
    }
}
