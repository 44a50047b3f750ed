//! `verifica@`'s reading of `terms.verify` and its judgement (docs/SPEC.md §22): any JSON object
//! as a contract's terms. `parse_tests` never panics; what it accepts is 1 to 8 tests, every URL
//! `https`; each accepted test, given any answer (the input's bytes as a body under a status
//! drawn from them, a transport failure, or none) and any evidence, evaluates without panicking,
//! the joint verdict follows its rule (undecided over failed over passed), and the verdict
//! document of terms as large as a quote allows fits what the Libro takes (`MAX_VERDICT_BYTES`).
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_rules::libro::op::MAX_VERDICT_BYTES;
use nyx5_house::libro::verifica::{MAX_TESTS, Test, TestResult, evaluate, judge, parse_tests, verdict};
use nyx5_house::ports::{OutResponse, PortError};
use nyx5_proto::json::Value;
use nyx5_proto::limits::MAX_QUOTE_BYTES;
use nyx5_proto::{Address, Timestamp};

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(terms)) = Value::parse(data, MAX_QUOTE_BYTES) else {
        return;
    };
    let Ok(tests) = parse_tests(&terms, None) else {
        return;
    };
    assert!((1..=MAX_TESTS).contains(&tests.len()), "an accepted test list has 1 to {MAX_TESTS} tests");
    let status = 100 + u16::from(data.first().copied().unwrap_or(0)) * 2;
    let answers = [
        Some(Ok(OutResponse { status, body: data.to_vec() })),
        Some(Err(PortError::Failed("timeout".into()))),
        Some(Err(PortError::Refused("private".into()))),
        None,
    ];
    let evidence = nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(data));
    let mut results = Vec::new();
    for (i, t) in tests.iter().enumerate() {
        match t {
            Test::HttpStatus { url, .. } | Test::Sha256 { url: Some(url), .. } => {
                assert!(url.starts_with("https://"), "a test fetches https only: {url}");
            }
            Test::Sha256 { url: None, .. } => {}
        }
        let answer = answers.get(i % answers.len()).and_then(Option::as_ref);
        let checked = evaluate(t, answer, if i % 2 == 0 { Some(&evidence) } else { None });
        if matches!(answer, Some(Err(_))) {
            assert_eq!(checked.result, TestResult::Undecided, "a request without an answer decides nothing");
        }
        results.push(checked);
    }
    let joint = judge(&results);
    let any = |r: TestResult| results.iter().any(|c| c.result == r);
    let expected = if any(TestResult::Undecided) {
        TestResult::Undecided
    } else if any(TestResult::Fail) {
        TestResult::Fail
    } else {
        TestResult::Pass
    };
    assert_eq!(joint, expected);
    let declared = terms.get("verify").and_then(Value::as_array).map(<[Value]>::to_vec).unwrap_or_default();
    let who = Address::parse("verifica@sigo.uk").unwrap_or_else(|_| panic!("a valid address"));
    let doc = verdict("c-1", &who, Timestamp(0), &declared, &results);
    let size = Value::Object(doc).canonical().len();
    assert!(size <= MAX_VERDICT_BYTES, "a verdict of {size} bytes would be refused by the Libro");
});
