//! RFC 8785 (JSON Canonicalization Scheme) vectors from cyberphone/json-canonicalization,
//! run through `Value::parse` + `Value::canonical` and `json::format_number`.
//! Files: tests/vectors/jcs/ (see tests/vectors/README.md for provenance).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use common::{read, read_text, unhex};
use nyx5_proto::Value;
use nyx5_proto::json::{format_number, parse_marking};

/// The six documents of the reference implementation's `testdata/input`.
const TESTDATA: [&str; 6] = ["arrays", "french", "structures", "unicode", "values", "weird"];

#[test]
fn jcs_testdata_canonicalizes_to_expected_bytes() {
    // The directory must hold exactly the files we list, so a new or missing one is noticed.
    let mut listed: Vec<String> = std::fs::read_dir(common::path("jcs/testdata/input"))
        .expect("jcs/testdata/input")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    let expected: Vec<String> = TESTDATA.iter().map(|n| format!("{n}.json")).collect();
    assert_eq!(listed, expected);

    let mut run = 0;
    for name in TESTDATA {
        let input = read(&format!("jcs/testdata/input/{name}.json"));
        let output = read(&format!("jcs/testdata/output/{name}.json"));
        let outhex =
            unhex(&read_text(&format!("jcs/testdata/outhex/{name}.txt")).split_whitespace().collect::<String>());
        assert_eq!(output, outhex, "{name}: output and outhex disagree");

        let value = Value::parse(&input, 1 << 20).unwrap_or_else(|e| panic!("{name}: input rejected: {e}"));
        let canonical = value.canonical();
        assert_eq!(String::from_utf8_lossy(&canonical), String::from_utf8_lossy(&output), "{name}");
        assert_eq!(canonical, output, "{name}: bytes differ");

        // The expected output is taken as canonical as it comes; the input (indented) is not.
        let (_, taken) = parse_marking(&output, 1 << 20, "x").unwrap();
        assert_eq!(taken.map(|t| t.text.as_bytes()), Some(&output[..]), "{name}: output not taken as it is");
        assert!(parse_marking(&input, 1 << 20, "x").unwrap().1.is_none(), "{name}: input taken as canonical");

        // Canonical output is a fixed point: parsing it again gives the same bytes.
        let again = Value::parse(&canonical, 1 << 20).expect("canonical output reparses");
        assert_eq!(again.canonical(), output, "{name}: not idempotent");
        run += 1;
    }
    assert_eq!(run, 6);
}

#[test]
fn es6_number_formatting_10000_lines() {
    let text = read_text("jcs/es6numbers/es6testfile_10000.txt");
    // The checksum the upstream testdata/README.md publishes for the first 10,000 lines.
    assert_eq!(
        nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(text.as_bytes())),
        "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892"
    );
    let mut run = 0usize;
    let mut failures = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (hex, expected) = line.split_once(',').unwrap_or_else(|| panic!("line {}: no comma: {line:?}", i + 1));
        assert!(!hex.is_empty() && hex.len() <= 16, "line {}: bad hex {hex:?}", i + 1);
        let bits = u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("line {}: bad hex {hex:?}", i + 1));
        let n = f64::from_bits(bits);
        assert!(n.is_finite(), "line {}: the file holds only finite values", i + 1);
        let got = format_number(n);
        // The same number written as a whole canonical value must read the same.
        let via_canonical = Value::Number(n).canonical();
        if got != expected || via_canonical != expected.as_bytes() {
            failures.push(format!(
                "line {}: {hex} -> {got:?} (canonical {:?}), expected {expected:?}",
                i + 1,
                String::from_utf8_lossy(&via_canonical)
            ));
        }
        // Reading the expected text back gives the same double: every canonical number,
        // including integers beyond 2^53 written in full (1e20), is accepted by the parser.
        match Value::parse(expected.as_bytes(), 64) {
            Ok(Value::Number(back)) if back.to_bits() == n.to_bits() || (n == 0.0 && back == 0.0) => {}
            other => failures.push(format!("line {}: {expected:?} reads back as {other:?}", i + 1)),
        }
        // ... and is taken as canonical as it is written, and not when written otherwise.
        if parse_marking(expected.as_bytes(), 64, "x").map(|(_, t)| t.is_some()).ok() != Some(true) {
            failures.push(format!("line {}: {expected:?} not taken as canonical", i + 1));
        }
        let other = if expected.contains('e') {
            expected.replace('e', "E")
        } else if expected.contains('.') {
            format!("{expected}0")
        } else {
            format!("{expected}.0")
        };
        if parse_marking(other.as_bytes(), 64, "x").map(|(_, t)| t.is_some()).ok() != Some(false) {
            failures.push(format!("line {}: {other:?} taken as canonical", i + 1));
        }
        run += 1;
    }
    assert!(failures.is_empty(), "{} of {run} numbers mis-formatted:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(run, 10_000);
}
