//! JSONTestSuite (nst/JSONTestSuite, test_parsing) through `Value::parse(bytes, 1 << 20)`:
//! every `y_` file parses (two pinned exceptions below), every `n_` file is rejected, and every
//! `i_` file has its outcome pinned here, so any change in the parser's behaviour is noticed.
//! Files: tests/vectors/json/JSONTestSuite/ (see tests/vectors/README.md for provenance).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use nyx5_proto::json::parse_marking;
use nyx5_proto::{Refusal, Value};

const MAX: usize = 1 << 20;

/// `y_` files we reject on purpose. RFC 8259 only says names SHOULD be unique; the protocol
/// refuses duplicate keys at any depth, because readers disagree on which value wins and a
/// signature over one reading would then cover a different document for another reader.
const Y_REJECTED: &[&str] = &["y_object_duplicated_key.json", "y_object_duplicated_key_and_value.json"];

/// Every `i_` file and whether we accept it (true) or reject it (false).
///
/// - Numbers: finite doubles are accepted, so values that underflow to 0 read as 0, exactly
///   as JavaScript reads them. Values that overflow to infinity are rejected (no JSON
///   number is infinite), and so are integer literals no double names exactly (they lose precision).
/// - Surrogates: a `\u` escape of a lone or mis-ordered surrogate has no UTF-8 form; it is
///   rejected rather than replaced, so every accepted string round-trips byte for byte.
/// - Encodings: the text must be UTF-8 (RFC 8259 §8.1), with no BOM; UTF-16, Latin-1,
///   overlong forms, encoded surrogates and truncated sequences are rejected.
/// - Nesting deeper than 32 (`limits::MAX_JSON_DEPTH`) is rejected.
const I_PINNED: &[(&str, bool)] = &[
    ("i_number_double_huge_neg_exp.json", true), // [123.456e-789] underflows to 0
    ("i_number_huge_exp.json", false),           // overflows to infinity
    ("i_number_neg_int_huge_exp.json", false),   // overflows to -infinity
    ("i_number_pos_double_huge_exp.json", false), // overflows to infinity
    ("i_number_real_neg_overflow.json", false),  // overflows to -infinity
    ("i_number_real_pos_overflow.json", false),  // overflows to infinity
    ("i_number_real_underflow.json", true),      // [123e-10000000] underflows to 0
    ("i_number_too_big_neg_int.json", false),    // not exactly representable
    ("i_number_too_big_pos_int.json", true),     // 1e20 written in full: exact, and canonical
    ("i_number_very_big_negative_int.json", false), // not exactly representable
    ("i_object_key_lone_2nd_surrogate.json", false), // lone low surrogate in a key
    ("i_string_1st_surrogate_but_2nd_missing.json", false),
    ("i_string_1st_valid_surrogate_2nd_invalid.json", false),
    ("i_string_UTF-16LE_with_BOM.json", false),
    ("i_string_UTF-8_invalid_sequence.json", false),
    ("i_string_UTF8_surrogate_U+D800.json", false), // surrogate encoded in UTF-8 bytes
    ("i_string_incomplete_surrogate_and_escape_valid.json", false),
    ("i_string_incomplete_surrogate_pair.json", false),
    ("i_string_incomplete_surrogates_escape_valid.json", false),
    ("i_string_invalid_lonely_surrogate.json", false),
    ("i_string_invalid_surrogate.json", false),
    ("i_string_invalid_utf-8.json", false),
    ("i_string_inverted_surrogates_U+1D11E.json", false),
    ("i_string_iso_latin_1.json", false),
    ("i_string_lone_second_surrogate.json", false),
    ("i_string_lone_utf8_continuation_byte.json", false),
    ("i_string_not_in_unicode_range.json", false),
    ("i_string_overlong_sequence_2_bytes.json", false),
    ("i_string_overlong_sequence_6_bytes.json", false),
    ("i_string_overlong_sequence_6_bytes_null.json", false),
    ("i_string_truncated-utf-8.json", false),
    ("i_string_utf16BE_no_BOM.json", false),
    ("i_string_utf16LE_no_BOM.json", false),
    ("i_structure_500_nested_arrays.json", false),      // depth 500 > 32
    ("i_structure_UTF-8_BOM_empty_object.json", false), // BOM before `{}`
];

#[test]
fn json_test_suite_parsing() {
    let dir = common::path("json/JSONTestSuite/test_parsing");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().expect("UTF-8 file name"))
        .collect();
    names.sort();

    let (mut y, mut n, mut i) = (0, 0, 0);
    let mut taken_as_is = 0;
    let mut problems = Vec::new();
    for name in &names {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert!(bytes.len() <= MAX, "{name} is larger than the limit under test");
        let result = Value::parse(&bytes, MAX);
        if let Err(e) = &result {
            // Rejections are about content, never the size limit.
            assert_eq!(e.refusal(), Some(Refusal::BadJson), "{name}: {e}");
        }
        if let Ok(value) = &result {
            // Whatever we accept has a canonical form that reads back to the same value.
            let canonical = value.canonical();
            let again =
                Value::parse(&canonical, MAX).unwrap_or_else(|e| panic!("{name}: canonical form rejected: {e}"));
            assert_eq!(&again, value, "{name}");
            assert_eq!(again.canonical(), canonical, "{name}");
            // Input is taken as canonical as it came exactly when it is its canonical form.
            let (_, taken) = parse_marking(&bytes, MAX, "x").unwrap();
            assert_eq!(taken.is_some(), bytes == canonical, "{name}");
            if let Some(taken) = taken {
                assert_eq!(taken.text.as_bytes(), canonical, "{name}: taken as canonical, but is not");
                taken_as_is += 1;
            }
            let (_, taken) = parse_marking(&canonical, MAX, "x").unwrap();
            assert!(taken.is_some(), "{name}: its canonical form is not taken as canonical");
        }
        let accepted = result.is_ok();
        let expected = if name.starts_with("y_") {
            y += 1;
            !Y_REJECTED.contains(&name.as_str())
        } else if name.starts_with("n_") {
            n += 1;
            false
        } else if name.starts_with("i_") {
            i += 1;
            I_PINNED.iter().find(|(f, _)| f == name).unwrap_or_else(|| panic!("{name} is not pinned in I_PINNED")).1
        } else {
            panic!("unexpected file {name}");
        };
        if accepted != expected {
            problems.push(format!(
                "{name}: {} but expected {}",
                if accepted { "accepted" } else { "rejected" },
                if expected { "accepted" } else { "rejected" },
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!((y, n, i), (95, 188, 35));
    // The compact `y_` files (`[1]`, `{"a":"b"}`, ...) and a few accepted `i_` ones.
    assert_eq!(taken_as_is, 43);
    // Every pinned name exists, so the lists cannot go stale silently.
    for name in Y_REJECTED.iter().chain(I_PINNED.iter().map(|(f, _)| f)) {
        assert!(names.iter().any(|n| n == name), "{name} is pinned but missing");
    }
    assert_eq!(I_PINNED.len(), 35);
    assert_eq!(I_PINNED.iter().filter(|(_, ok)| *ok).count(), 3);
}
