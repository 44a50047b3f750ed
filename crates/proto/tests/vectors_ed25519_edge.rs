//! Ed25519 edge cases where libraries disagree (small-order points, non-canonical encodings,
//! scalars out of range, cofactored vs cofactorless equations), run through
//! `SigPublic::verify`, which is ed25519-dalek's `verify_strict`.
//! Files: tests/vectors/ed25519-extra/{speccheck,cctv}/ (see tests/vectors/README.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use common::{flags, read_json, read_text, s, u, unhex, unhex_array};
use nyx5_proto::crypto::SigPublic;

/// The "Dalek strict" row of speccheck's results.md, case 0..=11: only case 3 (mixed-order
/// A and R, equation holds without the cofactor) verifies. Small-order A or R (0-2), the
/// cofactored-only cases (4, 5), S >= L (6, 7) and non-canonical R or A (8-11) are refused.
const SPECCHECK_STRICT: [bool; 12] =
    [false, false, false, true, false, false, false, false, false, false, false, false];

/// Reads one library's row out of results.md ("V" = accepts, "X" = rejects).
fn results_row(library: &str) -> Vec<bool> {
    let text = read_text("ed25519-extra/speccheck/results.md");
    let line = text
        .lines()
        .find(|l| l.trim_start_matches('|').split('|').next().is_some_and(|name| name.trim() == library))
        .unwrap_or_else(|| panic!("no {library:?} row in results.md"));
    line.split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .skip(1)
        .map(|c| match c {
            "V" => true,
            "X" => false,
            other => panic!("unexpected cell {other:?} in {line:?}"),
        })
        .collect()
}

#[test]
fn speccheck_matches_dalek_verify_strict() {
    assert_eq!(results_row("Dalek strict"), SPECCHECK_STRICT);
    let doc = read_json("ed25519-extra/speccheck/cases.json");
    let cases = doc.as_array().expect("cases.json is an array");
    assert_eq!(cases.len(), 12);
    for (i, case) in cases.iter().enumerate() {
        let key = SigPublic::from_bytes(unhex_array(s(case, "pub_key")));
        let msg = unhex(s(case, "message"));
        let sig: [u8; 64] = unhex_array(s(case, "signature"));
        assert_eq!(key.verify_raw(&msg, &sig), SPECCHECK_STRICT[i], "speccheck case {i}");
        // A key decoded once and reused (as cached cards do) answers the same, every time.
        let prepared = key.prepare();
        for _ in 0..2 {
            assert_eq!(prepared.is_some_and(|k| k.verify_raw(&msg, &sig)), SPECCHECK_STRICT[i], "prepared, case {i}");
        }
    }
}

/// CCTV ed25519vectors.json: which flags make our strict verification refuse a case.
/// From the set's README: `verify_strict` rejects low-order A and R (every `non_canonical_*`
/// and `reencoded_k` case also has a low-order point, as only low-order points have
/// alternative encodings), and being cofactorless it rejects `low_order_residue`. A point
/// with a low-order *component* (mixed order) cannot be spotted cheaply and is accepted
/// when the cofactorless equation holds. Every flag in the file must appear here.
const CCTV_FLAG_REJECTS: &[(&str, bool)] = &[
    ("low_order_A", true),
    ("low_order_R", true),
    ("non_canonical_A", true),
    ("non_canonical_R", true),
    ("low_order_residue", true),
    ("reencoded_k", true),
    ("low_order_component_A", false),
    ("low_order_component_R", false),
];

#[test]
fn cctv_vectors_follow_the_pinned_strict_policy() {
    let doc = read_json("ed25519-extra/cctv/ed25519vectors.json");
    let cases = doc.as_array().expect("ed25519vectors.json is an array");
    let (mut accepted, mut rejected) = (0, 0);
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(u(case, "number"), i as u64);
        let expected = !flags(case).iter().any(|f| {
            CCTV_FLAG_REJECTS
                .iter()
                .find(|(name, _)| name == f)
                .unwrap_or_else(|| panic!("case {i}: flag {f:?} is not pinned"))
                .1
        });
        let key = SigPublic::from_bytes(unhex_array(s(case, "key")));
        let sig: [u8; 64] = unhex_array(s(case, "sig"));
        // The message is plain text, not hex.
        let got = key.verify_raw(s(case, "msg").as_bytes(), &sig);
        assert_eq!(got, expected, "case {i}, flags {:?}", flags(case));
        let prepared = key.prepare();
        for _ in 0..2 {
            assert_eq!(
                prepared.is_some_and(|k| k.verify_raw(s(case, "msg").as_bytes(), &sig)),
                expected,
                "prepared, case {i}"
            );
        }
        if got {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    assert_eq!((accepted, rejected), (43, 871));
}
