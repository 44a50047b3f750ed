//! A native Ed25519 verifier that decodes `A` and `R` whatever their `y` (reduced mod p, as ref10
//! does) and compares `R` as a point rather than as bytes gives every known answer, yet accepts a
//! signature anyone holding a key can make: `R` the identity written with y = p + 1, S = k·a.
//! `verify_strict` refuses it, and so must `SigPublic::verify_raw` with that verifier set: the
//! encodings are checked in Rust (`crypto::strict_encodings`), before the verifier is asked. Its
//! own process: the native verifier, once set, is set for good.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use nyx5_proto::crypto::{SigPublic, SigningKey, set_native_verify};
use sha2::{Digest, Sha512};

static ASKED: AtomicUsize = AtomicUsize::new(0);

fn asked() -> usize {
    ASKED.load(Ordering::Relaxed)
}

/// The challenge k = SHA-512(R ‖ A ‖ M) mod ℓ, over the bytes as written.
fn challenge(r: &[u8; 32], key: &[u8; 32], message: &[u8]) -> Scalar {
    let hash: [u8; 64] = Sha512::new().chain_update(r).chain_update(key).chain_update(message).finalize().into();
    Scalar::from_bytes_mod_order_wide(&hash)
}

/// Cofactorless, as `verify_strict` is, but `R` is compared as a point: [S]B − [k]A = R.
fn decoding(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> Option<bool> {
    ASKED.fetch_add(1, Ordering::Relaxed);
    let r: [u8; 32] = signature[..32].try_into().unwrap();
    let s: [u8; 32] = signature[32..].try_into().unwrap();
    let decoded = (
        CompressedEdwardsY(*key).decompress(),
        CompressedEdwardsY(r).decompress(),
        Option::<Scalar>::from(Scalar::from_canonical_bytes(s)),
    );
    let (Some(a), Some(r_point), Some(s)) = decoded else { return Some(false) };
    let k = challenge(&r, key, message);
    Some(EdwardsPoint::vartime_double_scalar_mul_basepoint(&k, &-a, &s) == r_point)
}

fn strict(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> bool {
    ed25519_dalek::VerifyingKey::from_bytes(key)
        .is_ok_and(|k| k.verify_strict(message, &ed25519_dalek::Signature::from_bytes(signature)).is_ok())
}

/// The 32 bytes of y = p + `above` (p = 2^255 − 19), with the sign bit `sign`.
fn above_p(above: u8, sign: u8) -> [u8; 32] {
    let mut y = [0xff; 32];
    y[0] = 0xed + above;
    y[31] = 0x7f | sign;
    y
}

#[test]
fn a_native_verifier_is_never_asked_about_a_key_or_r_written_with_y_at_or_above_p() {
    set_native_verify(decoding).unwrap();
    let key = SigningKey::from_seed([0x21; 32]);
    let public = key.public();
    let message = b"nyx5 non-canonical encodings";

    // An honest signature goes to the native verifier, which accepts it.
    let before = asked();
    assert!(public.verify_raw(message, &key.sign_raw(message)));
    assert_eq!(asked(), before + 1, "the native verifier answered");

    // R = the identity as y = p + 1 (canonically 01 00 .. 00), either sign bit; S = k·a.
    let a = ed25519_dalek::SigningKey::from_bytes(&key.seed()).to_scalar();
    for sign in [0x00, 0x80] {
        let r = above_p(1, sign);
        let mut forged = [0u8; 64];
        forged[..32].copy_from_slice(&r);
        forged[32..].copy_from_slice(&(challenge(&r, public.bytes(), message) * a).to_bytes());
        assert_eq!(
            decoding(public.bytes(), message, &forged),
            Some(true),
            "sign {sign:#x}: the verifier alone accepts it"
        );
        assert!(!strict(public.bytes(), message, &forged), "sign {sign:#x}: verify_strict refuses it");
        let before = asked();
        assert!(!public.verify_raw(message, &forged), "sign {sign:#x}");
        assert!(!public.prepare().unwrap().verify_raw(message, &forged), "sign {sign:#x}, prepared");
        assert_eq!(asked(), before, "sign {sign:#x}: refused before the native verifier is asked");
    }

    // A key written with y ≥ p that ed25519-dalek decodes to a point of large order: refused
    // without asking, while the same point written canonically is asked (and refused: wrong key).
    let signature = key.sign_raw(message);
    let mut odd_keys = 0;
    for above in 2..=18 {
        for sign in [0x00, 0x80] {
            let odd = above_p(above, sign);
            if CompressedEdwardsY(odd).decompress().is_none_or(|p| p.is_small_order()) {
                continue;
            }
            odd_keys += 1;
            let odd = SigPublic::from_bytes(odd);
            assert!(odd.prepare().is_some(), "{odd:?} decodes");
            let before = asked();
            assert!(!odd.verify_raw(message, &signature));
            assert_eq!(asked(), before, "{odd:?} is refused before the native verifier is asked");
            let mut canonical = [0u8; 32];
            canonical[0] = above;
            canonical[31] = sign;
            assert!(!SigPublic::from_bytes(canonical).verify_raw(message, &signature));
            assert_eq!(asked(), before + 1, "{odd:?} written canonically is asked");
        }
    }
    assert!(odd_keys > 0, "no y from p + 2 to p + 18 is a point of large order");
}
