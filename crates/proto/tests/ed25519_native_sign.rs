//! A native Ed25519 signer (`crypto::set_native_sign`) is taken only when it makes exactly the
//! signatures Rust makes, and then every signature goes through it, falling back to Rust when it
//! cannot sign. The stand-in is ed25519-dalek's own signer, behind a few ways of being wrong.
//! Its own process: the native signer, once set, is set for good. tests/e2e/ed25519_workerd.mjs
//! checks workerd's signer on every line of RFC 8032's `sign.input`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{read_text, unhex, unhex_array};
use ed25519_dalek::Signer as _;
use nyx5_proto::crypto::{Context, NativeSign, SigningKey, set_native_sign};

static ASKED: AtomicUsize = AtomicUsize::new(0);
static SILENT_NOW_AND_THEN: AtomicBool = AtomicBool::new(false);

fn dalek(seed: &[u8; 32], message: &[u8]) -> [u8; 64] {
    ed25519_dalek::SigningKey::from_bytes(seed).sign(message).to_bytes()
}

/// The seed a signer is handed.
fn seed_of(seed: &dyn Fn(&mut [u8; 32])) -> [u8; 32] {
    let mut out = [0; 32];
    seed(&mut out);
    out
}

/// Right, and once installed unable to sign every fifth time (so the fallback is exercised).
fn honest(_public: &[u8; 32], seed: &dyn Fn(&mut [u8; 32]), message: &[u8]) -> Option<[u8; 64]> {
    if ASKED.fetch_add(1, Ordering::Relaxed) % 5 == 4 && SILENT_NOW_AND_THEN.load(Ordering::Relaxed) {
        return None;
    }
    Some(dalek(&seed_of(seed), message))
}

#[test]
fn only_a_signer_that_makes_rusts_signatures_is_taken_and_then_it_signs() {
    let refusals: [(NativeSign, &str); 5] = [
        (|_, _, _| None, "RFC 8032 test 1"),
        (|_, _, _| Some([0; 64]), "RFC 8032 test 1"),
        // Right on short messages only: the envelope-sized one tells.
        (|_, s, m| if m.len() < 100 { Some(dalek(&seed_of(s), m)) } else { Some([1; 64]) }, "a framed message"),
        // Signs under another key than the one it is given.
        (|_, s, m| Some(dalek(&[seed_of(s)[0] ^ 1; 32], m)), "RFC 8032 test 1"),
        // A bit of S wrong.
        (
            |_, s, m| {
                let mut sig = dalek(&seed_of(s), m);
                sig[40] ^= 1;
                Some(sig)
            },
            "RFC 8032 test 1",
        ),
    ];
    for (signer, why) in refusals {
        let refused = set_native_sign(signer).unwrap_err();
        assert!(refused.starts_with(why), "{refused}");
    }
    // Nothing was taken: signing is Rust's.
    let key = SigningKey::from_seed([9; 32]);
    assert_eq!(key.sign_raw(b"m"), dalek(&[9; 32], b"m"));

    set_native_sign(honest).unwrap();
    assert_eq!(set_native_sign(honest).unwrap_err(), "a native signer is set already");
    SILENT_NOW_AND_THEN.store(true, Ordering::Relaxed);
    ASKED.store(0, Ordering::Relaxed);
    // Every line of RFC 8032's sign.input, signed through the native signer or, when it is
    // silent, by Rust: the same bytes either way.
    let text = read_text("nist-rfc/asymmetric/Ed25519/sign.input");
    let mut lines = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split(':').collect();
        let seed: [u8; 32] = unhex_array(&f[0][..64]);
        let message = unhex(f[2]);
        let key = SigningKey::from_seed(seed);
        assert_eq!(key.public().bytes()[..], unhex(f[1])[..], "line {lines}");
        assert_eq!(key.sign_raw(&message)[..], unhex(f[3])[..64], "line {lines}");
        assert!(key.public().verify(Context::Envelope, b"x", &key.sign(Context::Envelope, b"x")));
        lines += 1;
    }
    assert_eq!(lines, 1024);
    // Asked for every signature: once for the vector, once for the framed one.
    assert_eq!(ASKED.load(Ordering::Relaxed), 2 * lines);
}
