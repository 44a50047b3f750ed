//! `verifica@<house>` (spec §22, docs/SPEC.md §22): the house's reference evaluator.
//!
//! It acts only on escrows that name it arbiter and declare `terms.verify`, and only with tests
//! that decide on their own: `http_status` and `sha256` (`exit_0` needs a shell, which neither
//! runtime offers it; its card says so). The tests are checked when the quote is accepted
//! ([`check_terms`]), so a contract it would not judge never names it. A `deliver` writes the
//! check it owes into `verifica_checks` in the same batch; [`Libro::run_checks`], called by the
//! tick within a budget of fetches, runs the tests through the house's outbound policy and
//! [`judge`]s them: all pass, and it releases; one fails, and it refunds; one could not run
//! (network, timeout, missing evidence), and nothing is decided — the check waits and is tried
//! again, a bounded number of times, and the parties are told why. A verdict travels as an
//! envelope from `verifica@`, signed with the domain key, to `Libro::operate`, the door every
//! agent's operation goes through (the Libro is never operated from the inside), and the kernel
//! writes it into the contract.

use nyx5_proto::card::{AgentCard, AgentCardDraft};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{field, obj};
use nyx5_proto::{Address, DomainCard, Error, ErrorKind, Object, Refusal, Timestamp, Value, Verified};

use super::Libro;
use crate::outbound::Policy;
use crate::ports::{Db, Net, OutRequest, OutResponse, PortError};
use crate::store::services as store;
use crate::weburl::WebUrl;
use nyx5_rules::libro::state::{CheckState, ContractState, Role};
use nyx5_rules::mailbox::Outcome;

pub use nyx5_rules::libro::VERIFICA;
/// The tests this house runs, on the Worker and on `nyx5 serve` alike.
pub const TESTS: [&str; 2] = ["http_status", "sha256"];
/// Most tests one contract declares (so one check is at most this many fetches).
pub const MAX_TESTS: usize = 4;
/// In a test's `url`, replaced when the test runs by the contract's id and by its seller's
/// address: a test that names the claim is passed by doing that claim's work, not by pointing at
/// what someone else did (docs/SPEC.md §22). Only in the path or the query, never in the host.
pub const CONTRACT_PLACEHOLDER: &str = "{contract}";
pub const SELLER_PLACEHOLDER: &str = "{seller}";
/// Most bytes of a URL in a test.
pub const MAX_URL_BYTES: usize = 2048;
/// Most attempts at one check before an undecided verdict is final: about a day and a half of
/// waits ([`retry_ms`]).
pub const MAX_ATTEMPTS: i64 = 6;
/// How long a tick holds a check it is running.
pub const LEASE_MS: i64 = 120_000;
/// The media of a notice `verifica@` sends the parties about an undecided verdict.
pub const NOTICE_MEDIA: &str = "application/nyx5.veredicto+json";

/// One test, as `terms.verify` declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    /// An `https` URL answers `expect` (200 by default).
    HttpStatus { url: String, expect: u16 },
    /// The body of `url`, or the delivery's `evidence_sha256`, hashes to `expect`.
    Sha256 { expect: String, url: Option<String> },
}

/// What one test came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestResult {
    Pass,
    Fail,
    /// It could not run: nothing is decided on it.
    Undecided,
}

impl TestResult {
    fn as_str(self) -> &'static str {
        match self {
            TestResult::Pass => "pass",
            TestResult::Fail => "fail",
            TestResult::Undecided => "undecided",
        }
    }
}

/// A test's result with its reason and what was seen (`status`, `sha256`).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub result: TestResult,
    pub reason: String,
    pub seen: Object,
}

fn malformed(reason: String) -> Error {
    Refusal::BadVerifyTerms.because(reason)
}

/// A test's URL with its placeholders filled in.
pub fn fill(url: &str, contract: &str, seller: &str) -> String {
    url.replace(CONTRACT_PLACEHOLDER, contract).replace(SELLER_PLACEHOLDER, seller)
}

/// Two claims, as different as claims get, for checking a URL before any claim exists.
const SAMPLES: [(&str, &str); 2] = [
    ("c0ffee00-0000-4000-8000-000000000000", "agent@example.org"),
    ("0ddba11c-1111-4111-9111-111111111111", "x.y@z.example.net"),
];

/// Whether a test's URL names the claim: filled for two claims, it asks for two resources.
pub fn names_the_claim(test: &Test) -> bool {
    match test {
        Test::HttpStatus { url, .. } | Test::Sha256 { url: Some(url), .. } => {
            let [(c0, s0), (c1, s1)] = SAMPLES;
            fill(url, c0, s0) != fill(url, c1, s1)
        }
        Test::Sha256 { url: None, .. } => false,
    }
}

/// Reads a test's `url`: `https`, at most [`MAX_URL_BYTES`], written as the URL parser writes it
/// back (so the text fetched is the URL checked: no `https:/host`, tabs or backslashes that a
/// parser reads as something else), no credentials and no fragment, and with its placeholders
/// only where they change the path or the query: filled for any claim, the origin stays the
/// same. With `policy`, the house must be allowed to fetch it.
fn url_of(o: &Object, i: usize, policy: Option<&Policy>) -> Result<String, Error> {
    let url = field::str(o, "url")?;
    let bad = |why: &str| malformed(format!("terms.verify[{i}].url {why}"));
    if url.len() > MAX_URL_BYTES {
        return Err(bad(&format!("is longer than {MAX_URL_BYTES} bytes")));
    }
    let mut origin = None;
    for (contract, seller) in SAMPLES {
        let filled = fill(url, contract, seller);
        let parsed = WebUrl::parse(&filled).ok_or_else(|| bad("is not a URL"))?;
        if parsed.scheme() != "https" {
            return Err(bad("must be https"));
        }
        if parsed.as_str() != filled {
            return Err(bad(&format!("must be written as a URL parser writes it: {}", parsed.as_str())));
        }
        if parsed.has_credentials() || parsed.has_fragment() {
            return Err(bad("carries no credentials and no fragment"));
        }
        let this = parsed.origin().to_owned();
        if origin.as_ref().is_some_and(|o| *o != this) {
            return Err(bad("may name the claim in its path or query, not its host or port"));
        }
        origin = Some(this);
        if let Some(p) = policy {
            p.check(&filled).map_err(|r| bad(&format!("cannot be fetched by this house: {r}")))?;
        }
    }
    Ok(url.to_owned())
}

/// Reads `terms.verify`: 1 to [`MAX_TESTS`] tests, each with exactly its own members, each one
/// this house runs. With a `policy`, every URL must be one the house may fetch (public `https`,
/// or an origin the operator named). Anything ambiguous is refused (400): this verifier judges
/// only what decides on its own.
pub fn parse_tests(terms: &Object, policy: Option<&Policy>) -> Result<Vec<Test>, Error> {
    let list = field::array(terms, "verify")?;
    if list.is_empty() || list.len() > MAX_TESTS {
        return Err(malformed(format!("terms.verify lists 1 to {MAX_TESTS} tests")));
    }
    let mut tests = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let o = t.as_object().ok_or_else(|| malformed(format!("terms.verify[{i}] is an object")))?;
        let kind = field::str(o, "type")?;
        let allowed: &[&str] = match kind {
            "http_status" => &["type", "url", "expect"],
            "sha256" => &["type", "expect", "url"],
            "exit_0" => {
                return Err(malformed(format!(
                    "terms.verify[{i}]: exit_0 needs a shell, which this house does not run; its verifier runs {}",
                    TESTS.join(" and ")
                )));
            }
            other => {
                return Err(malformed(format!(
                    "terms.verify[{i}]: no test {other:?}; this verifier runs {}",
                    TESTS.join(" and ")
                )));
            }
        };
        if let Some(extra) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(malformed(format!("terms.verify[{i}]: {kind} has no member {extra:?}")));
        }
        tests.push(match kind {
            "http_status" => {
                let expect = match o.get("expect") {
                    None => 200,
                    Some(v) => v
                        .as_safe_integer()
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|n| (100..=599).contains(n))
                        .ok_or_else(|| malformed(format!("terms.verify[{i}].expect is a status from 100 to 599")))?,
                };
                Test::HttpStatus { url: url_of(o, i, policy)?, expect }
            }
            _ => {
                let expect = field::str(o, "expect")?;
                if expect.len() != 64 || !expect.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                    return Err(malformed(format!("terms.verify[{i}].expect is 64 lower-case hex digits")));
                }
                let url = if o.contains_key("url") { Some(url_of(o, i, policy)?) } else { None };
                Test::Sha256 { expect: expect.to_owned(), url }
            }
        });
    }
    Ok(tests)
}

/// The check at accept: a quote naming this house's `verifica@` arbiter must be an escrow whose
/// `terms.verify` this house runs and may fetch.
pub fn check_terms(
    kind: nyx5_proto::quote::ContractKind,
    terms: Option<&Object>,
    policy: &Policy,
) -> Result<(), Error> {
    if kind != nyx5_proto::quote::ContractKind::Escrow {
        return Err(malformed("verifica@ arbitrates escrows only".into()));
    }
    let terms = terms
        .filter(|t| t.contains_key("verify"))
        .ok_or_else(|| malformed("verifica@ acts only on contracts that declare its tests in terms.verify".into()))?;
    parse_tests(terms, Some(policy)).map(|_| ())
}

/// The request a test sends for contract `contract` sold by `seller`, if any.
pub fn request(test: &Test, contract: &str, seller: &str) -> Option<OutRequest> {
    let url = match test {
        Test::HttpStatus { url, .. } | Test::Sha256 { url: Some(url), .. } => url,
        Test::Sha256 { url: None, .. } => return None,
    };
    Some(OutRequest {
        method: "GET".into(),
        url: fill(url, contract, seller),
        headers: vec![("accept".into(), "*/*".into())],
        body: vec![],
    })
}

/// What a test came to, given the answer to its request (`None` for a test that sends none)
/// and the delivery's evidence hash. Pure.
pub fn evaluate(test: &Test, answer: Option<&Result<OutResponse, PortError>>, evidence: Option<&str>) -> Checked {
    let mut seen = Object::new();
    let (result, reason) = match (test, answer) {
        (Test::HttpStatus { .. } | Test::Sha256 { url: Some(_), .. }, None) => {
            (TestResult::Undecided, "the request was not sent".to_owned())
        }
        (_, Some(Err(e))) => (TestResult::Undecided, unreached(e)),
        (Test::HttpStatus { expect, .. }, Some(Ok(r))) => {
            seen.insert("status".into(), i64::from(r.status).into());
            if r.status == *expect {
                (TestResult::Pass, format!("answered {}", r.status))
            } else {
                (TestResult::Fail, format!("answered {}, not {expect}", r.status))
            }
        }
        (Test::Sha256 { expect, .. }, Some(Ok(r))) => {
            seen.insert("status".into(), i64::from(r.status).into());
            if (200..300).contains(&r.status) {
                let got = hex(&sha256(&r.body));
                let pass = got == *expect;
                seen.insert("sha256".into(), got.into());
                if pass {
                    (TestResult::Pass, "the body hashes to the expected value".to_owned())
                } else {
                    (TestResult::Fail, "the body hashes to another value".to_owned())
                }
            } else if r.status == 429 || r.status >= 500 {
                (TestResult::Undecided, format!("answered {}: try later", r.status))
            } else {
                (TestResult::Fail, format!("answered {}, not the body", r.status))
            }
        }
        (Test::Sha256 { expect, url: None }, None) => match evidence {
            None => (TestResult::Undecided, "the delivery declared no evidence_sha256".to_owned()),
            Some(e) => {
                seen.insert("sha256".into(), e.into());
                if e.eq_ignore_ascii_case(expect) {
                    (TestResult::Pass, "the delivery's evidence_sha256 is the expected value".to_owned())
                } else {
                    (TestResult::Fail, "the delivery's evidence_sha256 is another value".to_owned())
                }
            }
        },
    };
    Checked { result, reason, seen }
}

/// Why a request could not be judged, in words that name no transport detail.
fn unreached(e: &PortError) -> String {
    match e {
        PortError::Refused(why) => format!("the house may not fetch it: {why}"),
        _ => "the URL could not be reached (network, timeout or too large an answer)".to_owned(),
    }
}

/// The joint verdict: undecided if any test could not run, else failed if any failed, else
/// passed.
pub fn judge(results: &[Checked]) -> TestResult {
    if results.iter().any(|c| c.result == TestResult::Undecided) {
        TestResult::Undecided
    } else if results.iter().any(|c| c.result == TestResult::Fail) {
        TestResult::Fail
    } else {
        TestResult::Pass
    }
}

/// The verdict document: which contract, who judged, when, the outcome and each test with its
/// result and reason.
pub fn verdict(contract: &str, verifier: &Address, at: Timestamp, tests: &[Value], results: &[Checked]) -> Object {
    let outcome = match judge(results) {
        TestResult::Pass => "passed",
        TestResult::Fail => "failed",
        TestResult::Undecided => "undecided",
    };
    let list = tests
        .iter()
        .zip(results)
        .map(|(t, c)| {
            let mut o = t.as_object().cloned().unwrap_or_default();
            o.insert("result".into(), c.result.as_str().into());
            o.insert("reason".into(), c.reason.as_str().into());
            o.extend(c.seen.clone());
            Value::Object(o)
        })
        .collect();
    obj([
        ("tipo", "veredicto".into()),
        ("contract", contract.into()),
        ("verifier", verifier.as_str().into()),
        ("at", at.to_rfc3339().into()),
        ("outcome", outcome.into()),
        ("tests", Value::Array(list)),
    ])
}

/// The wait after the `attempts`-th undecided verdict: 1 min, 10 min, 1 h, 6 h, 12 h, 12 h.
pub fn retry_ms(attempts: i64) -> i64 {
    const MIN: i64 = 60_000;
    match attempts {
        ..=1 => MIN,
        2 => 10 * MIN,
        3 => 60 * MIN,
        4 => 360 * MIN,
        _ => 720 * MIN,
    }
}

/// The card of `verifica@<domain>`: the domain key as its `sig`, certified by itself, saying
/// which tests it runs and what it reads.
pub fn verifica_card(
    domain_card: &Verified<DomainCard>,
    key: &nyx5_proto::crypto::SigningKey,
    since: Timestamp,
) -> Result<Verified<AgentCard>, Error> {
    let address = Address::new(VERIFICA, domain_card.domain())?;
    let mut draft = AgentCardDraft::new(address, key.public(), None, since);
    draft.capabilities = obj([
        ("accepts", Value::Array(vec![])),
        (
            "verifica",
            Value::Object(obj([
                ("tests", Value::Array(TESTS.iter().map(|t| (*t).into()).collect())),
                ("unsupported", Value::Array(vec!["exit_0".into()])),
                ("max_bytes", (crate::outbound::MAX_ANSWER_BYTES as i64).into()),
                ("timeout_ms", i64::from(crate::outbound::TIMEOUT_MS).into()),
                ("redirects", Value::Bool(false)),
                ("attempts", MAX_ATTEMPTS.into()),
            ])),
        ),
    ]);
    draft.certify(key)?.verify(domain_card, None, since)
}

/// What one tick's checks did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksReport {
    /// Checks run to a verdict (passed or failed) the Libro took.
    pub decided: u32,
    /// Checks that came out undecided.
    pub undecided: u32,
    /// Fetches made.
    pub fetches: u32,
}

impl<'h, D: Db, N: Net> Libro<'h, D, N> {
    /// `verifica@`'s address here.
    pub fn verifica_address(&self) -> Result<Address, Error> {
        Address::new(VERIFICA, &self.config.domain)
    }

    /// Runs the checks that are due, within `fetches` requests: each leased, its tests run, its
    /// verdict sent to `libro@` (passed or failed) or kept and told to the parties (undecided).
    pub async fn run_checks(&self, fetches: u32) -> Result<ChecksReport, Error> {
        let mut report = ChecksReport::default();
        let now = self.now();
        let rows = store::due_checks(self.db, now.millis(), i64::from(fetches.max(1))).await?;
        let policy = self.config.verifica_policy();
        let verifier = self.verifica_address()?;
        for row in rows {
            let (Some(contract), Some(attempts)) = (row.text("contract"), row.int("attempts")) else { continue };
            let record = row.text("record").and_then(|t| Value::parse_str(t).ok());
            let record = record.as_ref().and_then(Value::as_object);
            // The contract moved on (released or refunded by a party, or gone): nothing to judge.
            let Some(record) = record.filter(|_| row.text("contract_state") == Some(ContractState::Delivered.as_str()))
            else {
                crate::live::batch(self.db, self.post.bell, vec![store::finish_check(contract, attempts)])
                    .await
                    .map_err(crate::port_error)?;
                continue;
            };
            let terms = record.get("terms").and_then(Value::as_object).cloned().unwrap_or_default();
            let tests = parse_tests(&terms, None);
            let seller = record.get(Role::Seller.as_str()).and_then(Value::as_str).unwrap_or_default();
            let needs =
                tests.as_ref().map_or(0, |t| t.iter().filter(|t| request(t, contract, seller).is_some()).count());
            let needs = u32::try_from(needs).unwrap_or(u32::MAX);
            if report.fetches.saturating_add(needs) > fetches && report.fetches > 0 {
                break;
            }
            let leased = self
                .db
                .batch(vec![store::lease_check(contract, attempts, now.millis(), now.millis() + LEASE_MS)])
                .await
                .map_err(crate::port_error)?;
            if leased.first() != Some(&1) {
                continue;
            }
            let attempts = attempts + 1;
            let evidence = record.get("evidence_sha256").and_then(Value::as_str);
            let declared = terms.get("verify").and_then(Value::as_array).map(<[Value]>::to_vec).unwrap_or_default();
            let results = match &tests {
                Ok(tests) => {
                    let mut results = Vec::with_capacity(tests.len());
                    for t in tests {
                        let answer = match request(t, contract, seller) {
                            // Checked again as it is sent: the tests' own policy, then the house's.
                            Some(req) => Some(match policy.check(&req.url) {
                                Err(r) => Err(PortError::Refused(r.0.to_owned())),
                                Ok(()) => {
                                    report.fetches += 1;
                                    self.net.send(req).await
                                }
                            }),
                            None => None,
                        };
                        results.push(evaluate(t, answer.as_ref(), evidence));
                    }
                    results
                }
                // Accepted with tests it runs, so this is a contract from before (or a bug):
                // nothing it could judge.
                Err(e) => {
                    vec![Checked { result: TestResult::Undecided, reason: e.reason.to_string(), seen: Object::new() }]
                }
            };
            let doc = verdict(contract, &verifier, now, &declared, &results);
            match judge(&results) {
                TestResult::Undecided => {
                    self.keep_undecided(contract, attempts, record, doc, now).await?;
                    report.undecided += 1;
                }
                outcome => {
                    if self.send_verdict(contract, attempts, outcome, doc, now).await? {
                        report.decided += 1;
                    }
                }
            }
        }
        Ok(report)
    }

    /// Sends a verdict that decides to `libro@`, through the same door as any agent's operation.
    /// Answers whether the Libro took it; the check goes once the Libro answered for good.
    async fn send_verdict(
        &self,
        contract: &str,
        attempts: i64,
        outcome: TestResult,
        doc: Object,
        now: Timestamp,
    ) -> Result<bool, Error> {
        let verifier = self.verifica_address()?;
        let mut body = obj([("contract", contract.into())]);
        if outcome == TestResult::Pass {
            body.insert("op".into(), "release".into());
        } else {
            body.insert("op".into(), "refund".into());
            body.insert("note".into(), "verifica@ found the delivery does not pass its tests".into());
        }
        body.insert("verdict".into(), Value::Object(doc.clone()));
        // One verdict per contract: written twice (a tick that died after the Libro took it), it
        // is one operation, answered as done.
        let id = self.derived_id("verdict", contract, verifier.as_str());
        let done = match self.operate_as(&self.systems.verifica, id, body, None).await? {
            Outcome::Accepted | Outcome::Duplicate => {
                crate::live::batch(self.db, self.post.bell, vec![store::finish_check(contract, attempts)])
                    .await
                    .map_err(crate::port_error)?;
                return Ok(true);
            }
            // The Libro is busy or unavailable: the check runs again after a wait.
            Outcome::Rejected(e) if e.kind.is_temporary() || e.kind == ErrorKind::Internal => {
                let next_at = now.millis().saturating_add(retry_ms(attempts));
                store::postpone_check(contract, attempts, next_at)
            }
            // Refused for good (the contract moved on meanwhile): the check ends, its last word
            // kept with the refusal.
            Outcome::Rejected(e) => {
                let mut last = obj([("verdict", Value::Object(doc))]);
                last.insert(
                    "refused".into(),
                    Value::Object(obj([("code", i64::from(e.code()).into()), ("reason", e.reason.as_ref().into())])),
                );
                store::undecided(
                    contract,
                    attempts,
                    now.millis(),
                    CheckState::Undecided,
                    &Value::Object(last).canonical_string(),
                )
            }
        };
        crate::live::batch(self.db, self.post.bell, vec![done]).await.map_err(crate::port_error)?;
        Ok(false)
    }

    /// Keeps an undecided verdict with the check, due again later (or final after
    /// [`MAX_ATTEMPTS`]), and tells the buyer and the seller why, in the same batch.
    async fn keep_undecided(
        &self,
        contract: &str,
        attempts: i64,
        record: &Object,
        doc: Object,
        now: Timestamp,
    ) -> Result<(), Error> {
        let give_up = attempts >= MAX_ATTEMPTS;
        let next_at = now.millis().saturating_add(retry_ms(attempts));
        let mut notice = obj([("contract", contract.into()), ("verdict", Value::Object(doc.clone()))]);
        notice.insert(
            "next".into(),
            if give_up { Value::Null } else { Timestamp::from_millis(next_at).to_rfc3339().into() },
        );
        let text = Value::Object(doc).canonical_string();
        let state = if give_up { CheckState::Undecided } else { CheckState::Due };
        let mut stmts = vec![store::undecided(contract, attempts, next_at, state, &text)];
        let verifier = self.verifica_address()?;
        for party in [Role::Buyer, Role::Seller] {
            let Some(to) = record.get(party.as_str()).and_then(Value::as_str).and_then(|a| Address::parse(a).ok())
            else {
                continue;
            };
            if self.is_system(&to) {
                continue;
            }
            let id = self.derived_id(&format!("undecided:{attempts}"), contract, to.as_str());
            let mut draft = Draft::new(
                id,
                verifier.clone(),
                vec![to],
                now,
                Content::new(NOTICE_MEDIA, Value::Object(notice.clone())),
            );
            draft.kind = Kind::Message;
            let signed = draft.build()?.sign(&self.config.key)?;
            stmts.extend(self.send_from_libro(signed, now)?);
        }
        crate::live::batch(self.db, self.post.bell, stmts).await.map_err(crate::port_error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn terms(json: &str) -> Object {
        Value::parse_str(json).unwrap().as_object().unwrap().clone()
    }

    fn ok(status: u16, body: &[u8]) -> Result<OutResponse, PortError> {
        Ok(OutResponse { status, body: body.to_vec() })
    }

    #[test]
    fn tests_are_read_strictly() {
        let hash = hex(&sha256(b"x"));
        let good = terms(&format!(
            r#"{{"verify":[{{"type":"http_status","url":"https://example.com/"}},{{"type":"sha256","expect":"{hash}"}}]}}"#
        ));
        assert_eq!(
            parse_tests(&good, None).unwrap(),
            vec![
                Test::HttpStatus { url: "https://example.com/".into(), expect: 200 },
                Test::Sha256 { expect: hash.clone(), url: None }
            ]
        );
        let bad = [
            r#"{"verify":[]}"#.to_owned(),
            r#"{"verify":{}}"#.to_owned(),
            r#"{"verify":[{"type":"http_status","url":"http://example.com/"}]}"#.to_owned(),
            r#"{"verify":[{"type":"http_status","url":"https://example.com/","expect":99}]}"#.to_owned(),
            r#"{"verify":[{"type":"http_status","url":"https://example.com/","extra":1}]}"#.to_owned(),
            r#"{"verify":[{"type":"exit_0","argv":["true"]}]}"#.to_owned(),
            r#"{"verify":[{"type":"lighthouse"}]}"#.to_owned(),
            format!(r#"{{"verify":[{{"type":"sha256","expect":"{}"}}]}}"#, hash.to_uppercase()),
            r#"{"verify":[{"type":"sha256","expect":"00"}]}"#.to_owned(),
        ];
        for b in bad {
            assert_eq!(parse_tests(&terms(&b), None).unwrap_err().kind, ErrorKind::Malformed, "{b}");
        }
        let many =
            format!(r#"{{"verify":[{}]}}"#, [r#"{"type":"http_status","url":"https://a.example/"}"#; 9].join(","));
        assert!(parse_tests(&terms(&many), None).is_err());
        let listing = |n: usize| {
            let one = r#"{"type":"http_status","url":"https://a.example/"}"#;
            terms(&format!(r#"{{"verify":[{}]}}"#, vec![one; n].join(",")))
        };
        assert_eq!(parse_tests(&listing(MAX_TESTS), None).unwrap().len(), MAX_TESTS);
        assert!(parse_tests(&listing(MAX_TESTS + 1), None).is_err());
        let expecting = |status: i64| {
            terms(&format!(r#"{{"verify":[{{"type":"http_status","url":"https://a.example/","expect":{status}}}]}}"#))
        };
        for status in [100, 599] {
            let tests = parse_tests(&expecting(status), None).unwrap();
            assert_eq!(tests, [Test::HttpStatus { url: "https://a.example/".into(), expect: status as u16 }]);
        }
        assert!(parse_tests(&expecting(600), None).is_err());
    }

    #[test]
    fn a_url_is_checked_as_it_is_fetched() {
        let one = |url: &str| terms(&format!(r#"{{"verify":[{{"type":"http_status","url":"{url}"}}]}}"#));
        for ok in
            ["https://a.example/p/{contract}", "https://a.example/u?s={seller}&c={contract}", "https://a.example/"]
        {
            assert!(parse_tests(&one(ok), None).is_ok(), "{ok}");
        }
        for bad in [
            "https:/a.example/p",                 // read as https://a.example/p
            "https:{contract}.a.example/x://y",   // the claim in the host, behind a fake authority
            "https://{contract}.a.example/",      // the claim in the host
            "https://a.example:{contract}/",      // or the port
            "https://a.example{contract}/",       // glued to the host
            "https://u@a.example/{contract}",     // credentials
            "https://a.example/p#{contract}",     // a fragment is never sent
            "https://A.example/{contract}",       // not as the parser writes it
            "https://a.example/a b/{contract}",   // likewise
            "https://a.example/\\\\x/{contract}", // a backslash is a slash to the parser
        ] {
            assert!(parse_tests(&one(bad), None).is_err(), "{bad}");
        }
        let long = |n: usize| format!("https://a.example/{}", "p".repeat(n - "https://a.example/".len()));
        assert!(parse_tests(&one(&long(MAX_URL_BYTES)), None).is_ok());
        assert!(parse_tests(&one(&long(MAX_URL_BYTES + 1)), None).is_err());
        let named = |url: &str| names_the_claim(&Test::HttpStatus { url: url.into(), expect: 200 });
        assert!(named("https://a.example/{seller}"));
        assert!(!named("https://a.example/page"));
        assert_eq!(fill("https://a.example/{seller}/{contract}", "c", "s@h"), "https://a.example/s@h/c");
    }

    #[test]
    fn the_policy_refuses_private_targets_at_accept() {
        let policy = Policy::new(["https://127.0.0.1:9443"], false, false);
        let named = terms(r#"{"verify":[{"type":"http_status","url":"https://127.0.0.1:9443/ok"}]}"#);
        assert!(check_terms(nyx5_proto::quote::ContractKind::Escrow, Some(&named), &policy).is_ok());
        let private = terms(r#"{"verify":[{"type":"http_status","url":"https://10.0.0.1/ok"}]}"#);
        assert!(check_terms(nyx5_proto::quote::ContractKind::Escrow, Some(&private), &policy).is_err());
        assert!(check_terms(nyx5_proto::quote::ContractKind::Spot, Some(&named), &policy).is_err());
        assert!(check_terms(nyx5_proto::quote::ContractKind::Escrow, None, &policy).is_err());
    }

    #[test]
    fn each_answer_decides_as_the_table_says() {
        let url = "https://example.com/".to_owned();
        let status = Test::HttpStatus { url: url.clone(), expect: 204 };
        assert_eq!(evaluate(&status, Some(&ok(204, b"")), None).result, TestResult::Pass);
        assert_eq!(evaluate(&status, Some(&ok(200, b"")), None).result, TestResult::Fail);
        let failed = evaluate(&status, Some(&Err(PortError::Failed("tcp reset by 10.1.2.3".into()))), None);
        assert_eq!(failed.result, TestResult::Undecided);
        assert_eq!(failed.reason, "the URL could not be reached (network, timeout or too large an answer)");
        let refused = evaluate(&status, Some(&Err(PortError::Refused("a private address".into()))), None);
        assert_eq!(refused.result, TestResult::Undecided);
        assert_eq!(refused.reason, "the house may not fetch it: a private address");
        let body = Test::Sha256 { expect: hex(&sha256(b"deployed")), url: Some(url) };
        assert_eq!(evaluate(&body, Some(&ok(200, b"deployed")), None).result, TestResult::Pass);
        assert_eq!(evaluate(&body, Some(&ok(200, b"other")), None).result, TestResult::Fail);
        assert_eq!(evaluate(&body, Some(&ok(404, b"deployed")), None).result, TestResult::Fail);
        assert_eq!(evaluate(&body, Some(&ok(503, b"deployed")), None).result, TestResult::Undecided);
        assert_eq!(evaluate(&body, Some(&ok(429, b"deployed")), None).result, TestResult::Undecided);
        // Any 2xx carries the body; 3xx and the other 4xx fail; 5xx waits.
        assert_eq!(evaluate(&body, Some(&ok(299, b"deployed")), None).result, TestResult::Pass);
        assert_eq!(evaluate(&body, Some(&ok(300, b"deployed")), None).result, TestResult::Fail);
        assert_eq!(evaluate(&body, Some(&ok(199, b"deployed")), None).result, TestResult::Fail);
        assert_eq!(evaluate(&body, Some(&ok(428, b"deployed")), None).result, TestResult::Fail);
        assert_eq!(evaluate(&body, Some(&ok(499, b"deployed")), None).result, TestResult::Fail);
        assert_eq!(evaluate(&body, Some(&ok(500, b"deployed")), None).result, TestResult::Undecided);
        let evidence = Test::Sha256 { expect: hex(&sha256(b"e")), url: None };
        assert_eq!(evaluate(&evidence, None, None).result, TestResult::Undecided);
        assert_eq!(evaluate(&evidence, None, Some(&hex(&sha256(b"e")))).result, TestResult::Pass);
        assert_eq!(evaluate(&evidence, None, Some(&hex(&sha256(b"f")))).result, TestResult::Fail);
    }

    /// docs/SPEC.md §22: waits of 1 min, 10 min, 1 h, 6 h and 12 h, and none after the sixth.
    #[test]
    fn an_undecided_check_waits_as_the_spec_says() {
        let min = 60_000;
        let waits: Vec<i64> = (1..=5).map(retry_ms).collect();
        assert_eq!(waits, [min, 10 * min, 60 * min, 360 * min, 720 * min]);
        assert_eq!(retry_ms(0), min);
        assert_eq!(MAX_ATTEMPTS, 6);
    }

    #[test]
    fn undecided_outweighs_a_failure_and_a_failure_a_pass() {
        let c = |result| Checked { result, reason: String::new(), seen: Object::new() };
        assert_eq!(judge(&[c(TestResult::Pass), c(TestResult::Pass)]), TestResult::Pass);
        assert_eq!(judge(&[c(TestResult::Pass), c(TestResult::Fail)]), TestResult::Fail);
        assert_eq!(judge(&[c(TestResult::Fail), c(TestResult::Undecided)]), TestResult::Undecided);
    }
}
