//! The Libro's documents (spec §14, docs/SPEC.md §14): entries (asientos) signed by the house and
//! chained by hash, the accounts they name, and [`audit`], which checks a whole journal offline.
//!
//! An entry is `{tipo: "asiento", id, n, at, house, concept, lines: [{account, delta}], meta,
//! refs, prev, signature}`. `n` counts from 1 without gaps and `prev` is the hex SHA-256 of the
//! previous entry's canonical JSON (signature included), so one entry cannot be dropped, changed
//! or reordered without breaking every later link.

use std::collections::BTreeMap;

use crate::address::{Address, check_domain, check_id};
use crate::crypto::{Context, SigPublic, SigningKey, check_sha256_hex, hex, sha256};
use crate::error::Error;
use crate::json::{Object, Value, canonical_object, field, obj};
use crate::limits;
use crate::refusal::Refusal;
use crate::sign::{Verified, sign_object, verify_object};
use crate::time::Timestamp;

/// The `tipo` of an entry.
pub const TIPO: &str = "asiento";
/// The one currency.
pub const CURRENCY: &str = "tok";
/// The `prev` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// The prefix of a contract's escrow account.
pub const ESCROW_PREFIX: &str = "escrow:";
/// The local part of the house's own account.
pub const HOUSE_LOCAL: &str = "casa";
/// Most lines one entry may have (a settlement with a referrer has four).
pub const MAX_LINES: usize = 16;

/// What an entry does (`meta.primitive`, docs/SPEC.md §14): the closed set an entry names, as
/// signed into the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// casa@ gives (a welcome gift, a top-up).
    Issue,
    /// A settlement with fee: a spot price, a mandate's charge.
    Charge,
    /// Into an escrow (a contract's, a bond's, an approval's hold).
    Hold,
    /// Out of an escrow to whom it was held for.
    Release,
    /// Out of an escrow back to its payer.
    Refund,
    /// A bond taken for its beneficiary.
    Forfeit,
    /// A stamped envelope's price.
    Stamp,
}

impl Primitive {
    pub const ALL: [Primitive; 7] = [
        Primitive::Issue,
        Primitive::Charge,
        Primitive::Hold,
        Primitive::Release,
        Primitive::Refund,
        Primitive::Forfeit,
        Primitive::Stamp,
    ];

    /// Its text in `meta.primitive`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Primitive::Issue => "issue",
            Primitive::Charge => "charge",
            Primitive::Hold => "hold",
            Primitive::Release => "release",
            Primitive::Refund => "refund",
            Primitive::Forfeit => "forfeit",
            Primitive::Stamp => "stamp",
        }
    }

    /// The primitive `text` names; `None` for any other text.
    pub fn parse(text: &str) -> Option<Primitive> {
        Primitive::ALL.into_iter().find(|p| p.as_str() == text)
    }
}

/// The house's account at `house`: `casa@<house>`.
pub fn house_account(house: &str) -> String {
    format!("{HOUSE_LOCAL}@{house}")
}

/// The account that holds what contract `id` holds.
pub fn escrow_account(id: &str) -> String {
    format!("{ESCROW_PREFIX}{id}")
}

/// Checks an account name: an agent's address, or `escrow:<id>`.
pub fn check_account(account: &str) -> Result<(), Error> {
    match account.strip_prefix(ESCROW_PREFIX) {
        Some(id) => check_id(id),
        None => Address::parse(account).map(|_| ()),
    }
}

/// One line of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub account: String,
    pub delta: i64,
}

impl Line {
    pub fn new(account: impl Into<String>, delta: i64) -> Line {
        Line { account: account.into(), delta }
    }
}

/// Checks what every entry's lines must be: 1 to [`MAX_LINES`], each account named once, no
/// zero delta, each delta within [`limits::MAX_AMOUNT`], summing to zero.
pub fn check_lines(lines: &[Line]) -> Result<(), Error> {
    if lines.is_empty() || lines.len() > MAX_LINES {
        return Err(Refusal::BadEntry.because(format!("an entry has 1 to {MAX_LINES} lines")));
    }
    let mut sum: i64 = 0;
    for (i, l) in lines.iter().enumerate() {
        check_account(&l.account)?;
        if l.delta == 0 || l.delta.unsigned_abs() > limits::MAX_AMOUNT.unsigned_abs() {
            return Err(Refusal::BadEntry.because("a line moves 1 to 2^53 - 1 tokens"));
        }
        if lines.iter().take(i).any(|o| o.account == l.account) {
            return Err(Refusal::BadEntry.because(format!("{} appears twice in one entry", l.account)));
        }
        sum = sum.checked_add(l.delta).ok_or_else(|| Refusal::BadEntry.because("an entry's lines overflow"))?;
    }
    if sum != 0 {
        return Err(Refusal::BadEntry.because(format!("an entry's lines sum to {sum}, not 0")));
    }
    Ok(())
}

/// The lines as the JSON array an entry carries.
pub fn lines_value(lines: &[Line]) -> Value {
    Value::Array(
        lines
            .iter()
            .map(|l| Value::Object(obj([("account", l.account.as_str().into()), ("delta", l.delta.into())])))
            .collect(),
    )
}

/// What an entry says, before the house numbers, chains and signs it.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryDraft {
    pub id: String,
    pub at: Timestamp,
    pub house: String,
    pub concept: String,
    pub lines: Vec<Line>,
    pub meta: Object,
    pub refs: Object,
}

impl EntryDraft {
    /// Numbers the entry `n`, links it to `prev` and signs it with the house's domain key.
    pub fn sign(self, n: i64, prev: &str, key: &SigningKey) -> Result<Entry, Error> {
        check_lines(&self.lines)?;
        let mut doc = obj([
            ("tipo", TIPO.into()),
            ("id", self.id.into()),
            ("n", n.into()),
            ("at", self.at.to_rfc3339().into()),
            ("house", self.house.into()),
            ("concept", self.concept.into()),
            ("lines", lines_value(&self.lines)),
            ("meta", Value::Object(self.meta)),
            ("refs", Value::Object(self.refs)),
            ("prev", prev.into()),
        ]);
        sign_object(&mut doc, "signature", Context::Entry, key);
        Entry::from_object(doc)
    }
}

/// A signed entry, parsed but not verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: String,
    pub n: i64,
    pub at: Timestamp,
    pub house: String,
    pub concept: String,
    pub lines: Vec<Line>,
    pub prev: String,
    raw: Object,
}

impl Entry {
    pub fn from_object(raw: Object) -> Result<Entry, Error> {
        if field::str(&raw, "tipo")? != TIPO {
            return Err(Refusal::BadEntry.because("an entry has `tipo: asiento`"));
        }
        let id = field::str(&raw, "id")?.to_owned();
        check_id(&id)?;
        let n = field::integer(&raw, "n")?;
        if n < 1 {
            return Err(Refusal::BadEntry.because("an entry's `n` counts from 1"));
        }
        let house = field::str(&raw, "house")?.to_owned();
        check_domain(&house).map_err(|why| Refusal::BadEntry.because(format!("entry house: {why}")))?;
        let mut lines = Vec::new();
        for l in field::array(&raw, "lines")? {
            let l = l.as_object().ok_or_else(|| Refusal::BadEntry.because("an entry's line is an object"))?;
            lines.push(Line { account: field::str(l, "account")?.to_owned(), delta: field::integer(l, "delta")? });
        }
        check_lines(&lines)?;
        field::object(&raw, "meta")?;
        field::object(&raw, "refs")?;
        let prev = field::str(&raw, "prev")?.to_owned();
        check_sha256_hex(&prev, "prev")?;
        Ok(Entry {
            id,
            n,
            at: Timestamp::parse(field::str(&raw, "at")?)?,
            house,
            concept: field::str(&raw, "concept")?.to_owned(),
            lines,
            prev,
            raw,
        })
    }

    /// Verifies the house's signature with one of its keys.
    pub fn verify(self, house_keys: &[SigPublic]) -> Result<Verified<Entry>, Error> {
        verify_object(&self.raw, "signature", Context::Entry, |kid| house_keys.contains(kid))?;
        Ok(Verified::new(self))
    }

    pub fn meta(&self) -> &Object {
        field::optional(&self.raw, "meta").and_then(Value::as_object).unwrap_or(&EMPTY)
    }

    pub fn refs(&self) -> &Object {
        field::optional(&self.raw, "refs").and_then(Value::as_object).unwrap_or(&EMPTY)
    }

    /// The canonical JSON of the whole entry, signature included.
    pub fn canonical_string(&self) -> String {
        String::from_utf8(canonical_object(&self.raw)).unwrap_or_default()
    }

    /// Hex SHA-256 of the canonical entry: the next entry's `prev`.
    pub fn sha256_hex(&self) -> String {
        hex(&sha256(&canonical_object(&self.raw)))
    }

    pub fn object(&self) -> &Object {
        &self.raw
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }
}

static EMPTY: Object = Object::new();

/// What [`audit`] found in a journal that holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub entries: usize,
    /// Every account's balance after the last entry.
    pub balances: BTreeMap<String, i64>,
    /// What the house has issued and owes: minus casa@'s balance.
    pub issued: i64,
    /// The SHA-256 of the last entry (the journal's head), or [`GENESIS`].
    pub head: String,
}

/// Checks a whole journal of `house` offline: each entry parses, is signed by one of `keys`,
/// belongs to `house`, is numbered `1, 2, …` in order, links to the previous one by hash, has
/// lines that sum to zero, and leaves no balance but `casa@<house>`'s negative. The first
/// failure is the error, naming the entry.
pub fn audit(house: &str, keys: &[SigPublic], entries: &[Value]) -> Result<Report, Error> {
    let mut auditor = Auditor::new(house);
    for v in entries {
        auditor.push(keys, v)?;
    }
    Ok(auditor.report())
}

/// [`audit`] one entry at a time, for a journal that grows: what has been checked so far is
/// kept, and each entry pushed is checked against it, so a reader following a journal checks
/// each entry once.
#[derive(Debug, Clone)]
pub struct Auditor {
    house: String,
    casa: String,
    balances: BTreeMap<String, i64>,
    entries: usize,
    head: String,
}

impl Auditor {
    /// An audit of `house`'s journal before its first entry.
    pub fn new(house: &str) -> Auditor {
        Auditor {
            house: house.to_owned(),
            casa: house_account(house),
            balances: BTreeMap::new(),
            entries: 0,
            head: GENESIS.to_owned(),
        }
    }

    /// Checks `v` as the next entry (see [`audit`]) and takes it in. A failure leaves what was
    /// checked before as it was.
    pub fn push(&mut self, keys: &[SigPublic], v: &Value) -> Result<(), Error> {
        let want = i64::try_from(self.entries).unwrap_or(i64::MAX).saturating_add(1);
        let at = |why: String| Refusal::EntryDoesNotCheck.because(format!("entry {want}: {why}"));
        let raw = v.as_object().ok_or_else(|| at("not an object".into()))?.clone();
        let entry = Entry::from_object(raw).map_err(|e| at(e.reason.into_owned()))?;
        if entry.n != want {
            return Err(at(format!("numbered {}", entry.n)));
        }
        if entry.house != self.house {
            return Err(at(format!("belongs to {}", entry.house)));
        }
        if entry.prev != self.head {
            return Err(at("does not link to the entry before it (`prev`)".into()));
        }
        let sha = entry.sha256_hex();
        let entry = entry.verify(keys).map_err(|e| at(format!("signature: {}", e.reason)))?;
        // Each line's new balance, checked before any is taken in.
        let mut after: Vec<(&str, i64)> = Vec::with_capacity(entry.lines.len());
        for l in &entry.lines {
            let before = after.iter().rev().find(|(a, _)| *a == l.account).map(|(_, b)| *b);
            let before = before.unwrap_or_else(|| self.balances.get(&l.account).copied().unwrap_or(0));
            let b = before.checked_add(l.delta).ok_or_else(|| at(format!("{} overflows", l.account)))?;
            if b < 0 && l.account != self.casa {
                return Err(at(format!("leaves {} at {b}", l.account)));
            }
            after.push((&l.account, b));
        }
        for (account, b) in after {
            self.balances.insert(account.to_owned(), b);
        }
        self.entries += 1;
        self.head = sha;
        Ok(())
    }

    /// What the entries taken in so far add up to.
    pub fn report(&self) -> Report {
        let issued = self.balances.get(&self.casa).copied().unwrap_or(0).checked_neg().unwrap_or(i64::MAX);
        Report { entries: self.entries, balances: self.balances.clone(), issued, head: self.head.clone() }
    }

    /// How many entries were taken in.
    pub fn entries(&self) -> usize {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primitive_is_the_text_entries_carry_and_reads_back() {
        let texts: Vec<&str> = Primitive::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(texts, ["issue", "charge", "hold", "release", "refund", "forfeit", "stamp"]);
        for p in Primitive::ALL {
            assert_eq!(Primitive::parse(p.as_str()), Some(p));
        }
        assert_eq!(Primitive::parse("Issue"), None);
        assert_eq!(Primitive::parse(""), None);
    }

    fn key() -> SigningKey {
        SigningKey::from_seed([7; 32])
    }

    fn draft(lines: Vec<Line>) -> EntryDraft {
        EntryDraft {
            id: "e-1".into(),
            at: Timestamp(1_700_000_000_000),
            house: "a.test".into(),
            concept: "welcome".into(),
            lines,
            meta: obj([("primitive", "issue".into())]),
            refs: Object::new(),
        }
    }

    fn journal(n: usize) -> Vec<Value> {
        let mut out = Vec::new();
        let mut prev = GENESIS.to_owned();
        for i in 0..n {
            let mut d = draft(vec![Line::new("casa@a.test", -10), Line::new("ana@a.test", 10)]);
            d.id = format!("e-{i}");
            let e = d.sign(i64::try_from(i).unwrap() + 1, &prev, &key()).unwrap();
            prev = e.sha256_hex();
            out.push(e.to_value());
        }
        out
    }

    #[test]
    fn lines_must_balance_and_name_each_account_once() {
        assert!(check_lines(&[Line::new("casa@a.test", -5), Line::new("ana@a.test", 5)]).is_ok());
        assert!(check_lines(&[Line::new("casa@a.test", -5), Line::new("ana@a.test", 4)]).is_err());
        assert!(check_lines(&[Line::new("ana@a.test", -5), Line::new("ana@a.test", 5)]).is_err());
        assert!(check_lines(&[Line::new("ana@a.test", 0)]).is_err());
        assert!(check_lines(&[]).is_err());
        assert!(check_lines(&[Line::new("nobody", -1), Line::new("ana@a.test", 1)]).is_err());
        assert!(check_lines(&[Line::new("escrow:c-1", -1), Line::new("ana@a.test", 1)]).is_ok());
        let huge = limits::MAX_AMOUNT;
        assert!(
            check_lines(&[Line::new("a@a.test", huge), Line::new("b@a.test", huge), Line::new("c@a.test", -huge)])
                .is_err()
        );
    }

    #[test]
    fn a_signed_entry_verifies_only_with_the_house_key_and_as_an_entry() {
        let e = draft(vec![Line::new("casa@a.test", -5), Line::new("ana@a.test", 5)]).sign(1, GENESIS, &key()).unwrap();
        assert!(e.clone().verify(&[key().public()]).is_ok());
        assert!(e.clone().verify(&[SigningKey::from_seed([8; 32]).public()]).is_err());
        // Any change to what was signed breaks it.
        let mut raw = e.object().clone();
        raw.insert("concept".into(), "other".into());
        assert!(Entry::from_object(raw).unwrap().verify(&[key().public()]).is_err());
    }

    #[test]
    fn an_auditor_fed_entry_by_entry_reports_what_the_whole_audit_does_and_keeps_its_state_on_a_failure() {
        let j = journal(4);
        let mut auditor = Auditor::new("a.test");
        for v in &j[..2] {
            auditor.push(&[key().public()], v).unwrap();
        }
        // The fourth entry out of turn, or one signed by another key, is refused and changes nothing.
        assert!(auditor.push(&[key().public()], &j[3]).is_err());
        assert!(auditor.push(&[SigningKey::from_seed([8; 32]).public()], &j[2]).is_err());
        assert_eq!(auditor.entries(), 2);
        for v in &j[2..] {
            auditor.push(&[key().public()], v).unwrap();
        }
        assert_eq!(auditor.report(), audit("a.test", &[key().public()], &j).unwrap());
    }

    #[test]
    fn an_audit_checks_numbers_links_signatures_and_balances() {
        let j = journal(3);
        let r = audit("a.test", &[key().public()], &j).unwrap();
        assert_eq!(r.entries, 3);
        assert_eq!(r.balances.get("ana@a.test"), Some(&30));
        assert_eq!(r.issued, 30);
        // Dropping an entry breaks the numbering; swapping two breaks it too.
        let mut dropped = j.clone();
        dropped.remove(1);
        assert!(audit("a.test", &[key().public()], &dropped).is_err());
        let mut swapped = j.clone();
        swapped.swap(0, 1);
        assert!(audit("a.test", &[key().public()], &swapped).is_err());
        // Another house's journal, or another key, is refused.
        assert!(audit("b.test", &[key().public()], &j).is_err());
        assert!(audit("a.test", &[SigningKey::from_seed([9; 32]).public()], &j).is_err());
        // A re-signed entry with a wrong link is refused even with a good signature.
        let forged =
            draft(vec![Line::new("casa@a.test", -1), Line::new("ana@a.test", 1)]).sign(2, GENESIS, &key()).unwrap();
        let mut relinked = j.clone();
        relinked[1] = forged.to_value();
        let e = audit("a.test", &[key().public()], &relinked).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::EntryDoesNotCheck));
        assert!(e.reason.contains("entry 2"), "the reason names the entry: {}", e.reason);
    }

    #[test]
    fn an_audit_refuses_a_negative_agent_balance() {
        let e = draft(vec![Line::new("ana@a.test", -5), Line::new("bob@a.test", 5)]).sign(1, GENESIS, &key()).unwrap();
        let err = audit("a.test", &[key().public()], &[e.to_value()]).unwrap_err();
        assert_eq!(err.refusal(), Some(Refusal::EntryDoesNotCheck));
        assert!(err.reason.contains("ana@a.test"), "the reason names the account: {}", err.reason);
    }

    #[test]
    fn an_audit_accepts_an_agent_balance_that_comes_back_to_exactly_zero() {
        let first =
            draft(vec![Line::new("casa@a.test", -5), Line::new("ana@a.test", 5)]).sign(1, GENESIS, &key()).unwrap();
        let mut back = draft(vec![Line::new("ana@a.test", -5), Line::new("casa@a.test", 5)]);
        back.id = "e-2".into();
        let second = back.sign(2, &first.sha256_hex(), &key()).unwrap();
        let r = audit("a.test", &[key().public()], &[first.to_value(), second.to_value()]).unwrap();
        assert_eq!(r.entries, 2);
        assert_eq!(r.balances.get("ana@a.test"), Some(&0));
        assert_eq!(r.issued, 0);
        assert_eq!(r.head, second.sha256_hex());
    }

    #[test]
    fn an_escrow_account_is_the_prefix_and_the_contract_id() {
        assert_eq!(escrow_account("c-1"), "escrow:c-1");
        assert_eq!(check_account(&escrow_account("c-1")), Ok(()));
        assert_eq!(house_account("a.test"), "casa@a.test");
    }

    #[test]
    fn an_entry_has_at_most_sixteen_lines() {
        // n - 1 agents get 1 each from the house.
        let lines = |n: i64| -> Vec<Line> {
            let mut v: Vec<Line> = (1..n).map(|i| Line::new(format!("a{i}@a.test"), 1)).collect();
            v.push(Line::new("casa@a.test", 1 - n));
            v
        };
        assert_eq!(MAX_LINES, 16);
        assert_eq!(lines(16).len(), 16);
        assert_eq!(check_lines(&lines(16)), Ok(()));
        assert_eq!(check_lines(&lines(17)).unwrap_err().reason, "an entry has 1 to 16 lines");
        assert_eq!(check_lines(&lines(1)).unwrap_err().reason, "a line moves 1 to 2^53 - 1 tokens");
    }

    #[test]
    fn a_line_moves_at_most_the_largest_amount() {
        let max = limits::MAX_AMOUNT;
        assert_eq!(check_lines(&[Line::new("casa@a.test", -max), Line::new("ana@a.test", max)]), Ok(()));
        for over in [max + 1, i64::MAX] {
            let err = check_lines(&[Line::new("casa@a.test", -over), Line::new("ana@a.test", over)]).unwrap_err();
            assert_eq!(err.reason, "a line moves 1 to 2^53 - 1 tokens", "{over}");
        }
        let err = check_lines(&[Line::new("casa@a.test", i64::MIN), Line::new("ana@a.test", 1)]).unwrap_err();
        assert_eq!(err.reason, "a line moves 1 to 2^53 - 1 tokens");
    }

    #[test]
    fn an_entry_gives_back_its_meta_refs_and_whole_canonical_text() {
        let mut d = draft(vec![Line::new("casa@a.test", -5), Line::new("ana@a.test", 5)]);
        d.refs = obj([("quote", "q-1".into())]);
        let e = d.sign(1, GENESIS, &key()).unwrap();
        assert_eq!(e.meta(), &obj([("primitive", "issue".into())]));
        assert_eq!(e.refs(), &obj([("quote", "q-1".into())]));
        let sig = field::object(e.object(), "signature").unwrap();
        let (kid, value) = (field::str(sig, "kid").unwrap(), field::str(sig, "value").unwrap());
        assert_eq!(
            e.canonical_string(),
            format!(
                r#"{{"at":"2023-11-14T22:13:20.000Z","concept":"welcome","house":"a.test","id":"e-1","lines":[{{"account":"casa@a.test","delta":-5}},{{"account":"ana@a.test","delta":5}}],"meta":{{"primitive":"issue"}},"n":1,"prev":"{GENESIS}","refs":{{"quote":"q-1"}},"signature":{{"alg":"Ed25519","kid":"{kid}","value":"{value}"}},"tipo":"asiento"}}"#
            )
        );
        assert_eq!(hex(&sha256(e.canonical_string().as_bytes())), e.sha256_hex());
    }
}
