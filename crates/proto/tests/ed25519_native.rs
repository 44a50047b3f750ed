//! A native Ed25519 verifier (`crypto::set_native_verify`) that knows nothing of strictness
//! still gives `verify_strict`'s answers, because the encodings are checked in Rust first.
//! The stand-in here is ed25519-dalek's plain `verify` (RFC 8032, cofactorless, small-order
//! points accepted — what BoringSSL does in workerd); every Ed25519 case of Wycheproof,
//! speccheck and CCTV must come out as `verify_strict` alone decides it. Its own process: the
//! native verifier, once set, is set for good. tests/e2e/ed25519_workerd.mjs does the same with
//! workerd's verifier.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{read_json, s, unhex, unhex_array};
use nyx5_proto::crypto::{NativeVerify, SigPublic, set_native_verify};

static ASKED: AtomicUsize = AtomicUsize::new(0);
static UNANSWERED: AtomicUsize = AtomicUsize::new(0);
static SILENT_NOW_AND_THEN: AtomicBool = AtomicBool::new(false);

/// Lenient, and once installed now and then unable to answer (every seventh call), so the
/// fallback to Rust is exercised too.
fn lenient(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> Option<bool> {
    if ASKED.fetch_add(1, Ordering::Relaxed) % 7 == 6 && SILENT_NOW_AND_THEN.load(Ordering::Relaxed) {
        UNANSWERED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    use ed25519_dalek::Verifier as _;
    let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(key) else { return Some(false) };
    Some(key.verify(message, &ed25519_dalek::Signature::from_bytes(signature)).is_ok())
}

/// `signature` with the lowest bit of byte `at` changed.
fn flip(signature: &[u8; 64], at: usize) -> [u8; 64] {
    let mut out = *signature;
    out[at] ^= 1;
    out
}

fn strict(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> bool {
    ed25519_dalek::VerifyingKey::from_bytes(key)
        .is_ok_and(|k| k.verify_strict(message, &ed25519_dalek::Signature::from_bytes(signature)).is_ok())
}

/// One case: where it comes from, key, message, signature.
type Case = (String, [u8; 32], Vec<u8>, [u8; 64]);

/// Every 64-byte-signature Ed25519 case of the three sets.
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let doc = read_json("wycheproof/testvectors_v1/ed25519_test.json");
    for group in doc["testGroups"].as_array().unwrap() {
        let key = unhex_array(s(&group["publicKey"], "pk"));
        for case in group["tests"].as_array().unwrap() {
            if let Ok(sig) = <[u8; 64]>::try_from(unhex(s(case, "sig")).as_slice()) {
                out.push((format!("wycheproof {}", case["tcId"]), key, unhex(s(case, "msg")), sig));
            }
        }
    }
    for (i, case) in read_json("ed25519-extra/speccheck/cases.json").as_array().unwrap().iter().enumerate() {
        out.push((
            format!("speccheck {i}"),
            unhex_array(s(case, "pub_key")),
            unhex(s(case, "message")),
            unhex_array(s(case, "signature")),
        ));
    }
    for (i, case) in read_json("ed25519-extra/cctv/ed25519vectors.json").as_array().unwrap().iter().enumerate() {
        out.push((
            format!("cctv {i}"),
            unhex_array(s(case, "key")),
            s(case, "msg").as_bytes().to_vec(),
            unhex_array(s(case, "sig")),
        ));
    }
    out
}

#[test]
fn a_lenient_native_verifier_gives_verify_strict_answers() {
    let cases = cases();
    assert!(cases.len() > 1000, "{} cases", cases.len());
    // The stand-in is lenient indeed: on its own it accepts cases verify_strict refuses.
    let differs = cases.iter().filter(|(_, k, m, sig)| lenient(k, m, sig) == Some(true) && !strict(k, m, sig)).count();
    assert!(differs > 50, "only {differs} cases tell the verifiers apart");

    // Verifiers that do not give the known answers are refused, and change nothing.
    let refusals: [(NativeVerify, &str); 6] = [
        (|_, _, _| Some(true), "another message"),
        (|_, _, _| Some(false), "a signature made here"),
        (|_, _, _| None, "a signature made here"),
        // Right on honest signatures, wrong on the mixed-order case only a cofactored one accepts.
        (|k, m, s| if m.len() == 32 && m[0] == 0xe4 { Some(true) } else { lenient(k, m, s) }, "speccheck case 4"),
        // Blind to the one bit of R (of S) that the known answers change: its forgery is caught.
        (|k, m, s| Some(lenient(k, m, s)? || lenient(k, m, &flip(s, 3))?), "a bit of R changed"),
        (|k, m, s| Some(lenient(k, m, s)? || lenient(k, m, &flip(s, 40))?), "a bit of S changed"),
    ];
    for (verifier, why) in refusals {
        let refused = set_native_verify(verifier).unwrap_err();
        assert!(refused.starts_with(why), "{refused}");
    }

    set_native_verify(lenient).unwrap();
    assert_eq!(set_native_verify(lenient).unwrap_err(), "a native verifier is set already");
    SILENT_NOW_AND_THEN.store(true, Ordering::Relaxed);
    ASKED.store(0, Ordering::Relaxed);
    let mut accepted = 0;
    for (what, key, msg, sig) in &cases {
        let expected = strict(key, msg, sig);
        let public = SigPublic::from_bytes(*key);
        assert_eq!(public.verify_raw(msg, sig), expected, "{what}");
        assert_eq!(public.prepare().is_some_and(|p| p.verify_raw(msg, sig)), expected, "{what}, prepared");
        accepted += usize::from(expected);
    }
    // The native verifier did the work (all but what the encodings refused), and its silences
    // fell back to Rust.
    assert!(ASKED.load(Ordering::Relaxed) > 2 * accepted, "asked {} times", ASKED.load(Ordering::Relaxed));
    assert!(UNANSWERED.load(Ordering::Relaxed) > 10);
}
