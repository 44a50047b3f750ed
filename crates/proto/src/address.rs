//! Addresses (`local@domain`, spec §1) and the identifiers envelopes carry.

use std::fmt;

use crate::error::Error;
use crate::limits;
use crate::refusal::Refusal;

/// A Nyx5 address: lowercase `local@domain`. `local` is at most 64 characters of dot-separated
/// labels, each `[a-z0-9][a-z0-9_-]*`: a dot always separates a subagent's name from its parent's
/// (`name.parent`), so `ceo.`, `a..b` or `a._b` are no one's names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address {
    text: String,
    at: usize,
}

impl Address {
    /// Parses an address exactly as it appears on the wire (already lowercase).
    pub fn parse(text: &str) -> Result<Address, Error> {
        let bad = |why: &str| Refusal::BadAddress.because(format!("invalid address {text:?}: {why}"));
        let (local, domain) = text.split_once('@').ok_or_else(|| bad("missing '@'"))?;
        check_local(local).map_err(&bad)?;
        check_domain(domain).map_err(&bad)?;
        Ok(Address { text: text.to_owned(), at: local.len() })
    }

    /// Parses what a person typed: trims and lowercases first.
    pub fn parse_lenient(text: &str) -> Result<Address, Error> {
        Address::parse(&text.trim().to_ascii_lowercase())
    }

    /// Builds `local@domain` from parts.
    pub fn new(local: &str, domain: &str) -> Result<Address, Error> {
        Address::parse(&format!("{local}@{domain}"))
    }

    pub fn local(&self) -> &str {
        self.text.get(..self.at).unwrap_or_default()
    }

    pub fn domain(&self) -> &str {
        self.text.get(self.at + 1..).unwrap_or_default()
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// For a subagent `name.parent@domain`, the parent's address `parent@domain`.
    pub fn parent(&self) -> Option<Address> {
        let (_, parent_local) = self.local().split_once('.')?;
        Address::new(parent_local, self.domain()).ok()
    }
}

// Cards and envelopes hand out `&Address` from their accessors; these let it meet an `Address`.
impl PartialEq<Address> for &Address {
    fn eq(&self, other: &Address) -> bool {
        **self == *other
    }
}

impl PartialEq<&Address> for Address {
    fn eq(&self, other: &&Address) -> bool {
        *self == **other
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn check_local(local: &str) -> Result<(), &'static str> {
    let b = local.as_bytes();
    match b.first() {
        None => return Err("empty local part"),
        Some(c) if !(c.is_ascii_lowercase() || c.is_ascii_digit()) => {
            return Err("local part must start with a-z or 0-9");
        }
        _ => {}
    }
    if b.len() > limits::MAX_LOCAL_LEN {
        return Err("local part longer than 64");
    }
    if !b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')) {
        return Err("local part may hold only a-z 0-9 . _ -");
    }
    // Every dot separates two names: what follows it starts with a-z or 0-9, as the first does.
    let label_start = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.windows(2).any(|w| matches!(w, [b'.', c] if !label_start(c))) || b.last() == Some(&b'.') {
        return Err("each dot-separated part of a local part must start with a-z or 0-9");
    }
    Ok(())
}

/// A lowercase DNS name: dot-separated labels of `a-z 0-9 -`, no label starting or ending
/// with `-`, each 1..=63, the whole at most 253. A single label (`localhost`) is allowed.
pub fn check_domain(domain: &str) -> Result<(), &'static str> {
    if domain.is_empty() || domain.len() > limits::MAX_DOMAIN_LEN {
        return Err("domain empty or longer than 253");
    }
    for label in domain.split('.') {
        let b = label.as_bytes();
        if b.is_empty() || b.len() > 63 {
            return Err("domain label empty or longer than 63");
        }
        if b.first() == Some(&b'-') || b.last() == Some(&b'-') {
            return Err("domain label starts or ends with '-'");
        }
        if !b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-') {
            return Err("domain may hold only lowercase a-z 0-9 - and dots");
        }
    }
    Ok(())
}

/// Checks an identifier (envelope id, thread, quote id): `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
///
/// UUIDs fit; `:` does not, so `relay:<id>:<domain>` and `<id>:<nonce>` stay unambiguous.
pub fn check_id(id: &str) -> Result<(), Error> {
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= limits::MAX_ID_LEN
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok { Ok(()) } else { Err(Refusal::BadId.because(format!("invalid id {id:?}"))) }
}

/// Formats 16 random bytes as an RFC 4122 version-4 UUID (the caller supplies the randomness).
pub fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        hex.get(0..8).unwrap_or_default(),
        hex.get(8..12).unwrap_or_default(),
        hex.get(12..16).unwrap_or_default(),
        hex.get(16..20).unwrap_or_default(),
        hex.get(20..32).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_spec_addresses() {
        let a = Address::parse("tester.constructor@sigo.uk").unwrap();
        assert_eq!(a.local(), "tester.constructor");
        assert_eq!(a.domain(), "sigo.uk");
        assert_eq!(a.parent().unwrap().as_str(), "constructor@sigo.uk");
        assert!(Address::parse("0@localhost").is_ok());
        assert_eq!(Address::parse_lenient(" Ana@Sigo.UK ").unwrap().as_str(), "ana@sigo.uk");
    }

    #[test]
    fn refuses_bad_addresses() {
        let long = format!("{}@x.y", "a".repeat(65));
        for bad in [
            "",
            "ana",
            "@sigo.uk",
            "Ana@sigo.uk",
            "ana@Sigo.uk",
            ".ana@x.y",
            "a b@x.y",
            "ana@-x.y",
            "ana@x..y",
            "ana@x.y.",
            "a@b@c",
            long.as_str(),
            "ana@x_y.z",
            "ceo.@x.y",
            "a..ceo@x.y",
            "a._ceo@x.y",
            "a.-ceo@x.y",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
        assert!(Address::parse(&format!("{}@x.y", "a".repeat(64))).is_ok());
        // Every dotted name has a parent that is itself a name.
        for ok in ["a.b@x.y", "a-_.b_-@x.y", "0.1.2@x.y"] {
            let a = Address::parse(ok).unwrap();
            assert!(a.parent().is_some(), "{ok}");
        }
    }

    #[test]
    fn ids_and_uuids() {
        assert!(check_id("0b6f3c1e-8d0a-4c1a-9d5e-1f2a3b4c5d6e").is_ok());
        for bad in ["", "-x", "a:b", "a b", &"a".repeat(129)] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
        let u = uuid_v4([0xff; 16]);
        assert_eq!(u, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert!(check_id(&u).is_ok());
    }

    #[test]
    fn an_address_and_a_reference_to_one_are_equal_exactly_when_their_texts_are_both_ways() {
        let ana = Address::parse("ana@x.y").unwrap();
        let (same, bo) = (Address::parse("ana@x.y").unwrap(), Address::parse("bo@x.y").unwrap());
        // `&Address == Address`, as `card.address() == addr` reads.
        let r: &Address = &ana;
        assert!(r == same);
        assert!(r != bo);
        // `Address == &Address`, as `addr == card.address()` reads.
        assert!(same == r);
        assert!(bo != r);
    }

    #[test]
    fn the_bounds_of_a_domain_and_of_its_labels_are_exact() {
        let l63 = "a".repeat(63);
        let d253 = format!("{l63}.{l63}.{l63}.{}", "b".repeat(61));
        assert_eq!(d253.len(), 253);
        assert_eq!(check_domain(&d253), Ok(()));
        assert!(Address::parse(&format!("ana@{d253}")).is_ok());
        let d254 = format!("{l63}.{l63}.{l63}.{}", "b".repeat(62));
        assert_eq!(check_domain(&d254), Err("domain empty or longer than 253"));
        assert!(Address::parse(&format!("ana@{d254}")).is_err());
        assert_eq!(check_domain(""), Err("domain empty or longer than 253"));
        assert_eq!(check_domain(&l63), Ok(()));
        assert_eq!(check_domain(&format!("x.{l63}a")), Err("domain label empty or longer than 63"));
        assert_eq!(check_domain("x..y"), Err("domain label empty or longer than 63"));
    }

    #[test]
    fn a_domain_holds_lowercase_letters_digits_and_inner_hyphens() {
        for ok in ["x-1.y2", "0-0.9", "a--b.c", "localhost"] {
            assert_eq!(check_domain(ok), Ok(()), "{ok}");
        }
        for bad in ["x_1.y", "X.y", "x.y!", "x y.z"] {
            assert_eq!(check_domain(bad), Err("domain may hold only lowercase a-z 0-9 - and dots"), "{bad}");
        }
        assert_eq!(check_domain("x.y-"), Err("domain label starts or ends with '-'"));
    }
}
