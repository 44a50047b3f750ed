//! Wycheproof (C2SP/wycheproof, testvectors_v1) run through our crypto API: Ed25519 verify,
//! X25519 agreement, AES-256-GCM seal/open and HKDF-SHA256.
//! Files: tests/vectors/wycheproof/ (see tests/vectors/README.md for provenance).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use common::{flags, read_json, s, u, unhex, unhex_array};
use nyx5_proto::crypto::{EncPublic, EncSecret, SigPublic, aes256gcm_open, aes256gcm_seal, hkdf_sha256};

/// The cases of every group, paired with their group.
fn cases(doc: &serde_json::Value) -> Vec<(&serde_json::Value, &serde_json::Value)> {
    doc["testGroups"]
        .as_array()
        .expect("testGroups")
        .iter()
        .flat_map(|g| g["tests"].as_array().expect("tests").iter().map(move |t| (g, t)))
        .collect()
}

/// Ed25519 "acceptable" cases and what our strict verification returns for each, by tcId.
/// The current file has none: every case is `valid` or `invalid`, so the list is empty and the
/// test fails if an `acceptable` case appears without being pinned here.
const ED25519_ACCEPTABLE: &[(u64, bool)] = &[];

#[test]
fn wycheproof_ed25519_verify() {
    let doc = read_json("wycheproof/testvectors_v1/ed25519_test.json");
    let (mut valid, mut invalid, mut acceptable, mut wrong_length) = (0, 0, 0, 0);
    for (group, case) in cases(&doc) {
        let id = u(case, "tcId");
        let pk = SigPublic::from_bytes(unhex_array(s(&group["publicKey"], "pk")));
        let msg = unhex(s(case, "msg"));
        let sig = unhex(s(case, "sig"));
        // Signatures of the wrong length (12 invalid cases: truncated, with trailing garbage,
        // "compressed") cannot even be handed to our API, which takes `&[u8; 64]`.
        let got = match <[u8; 64]>::try_from(sig.as_slice()) {
            Ok(sig) => pk.verify_raw(&msg, &sig),
            Err(_) => {
                wrong_length += 1;
                false
            }
        };
        match s(case, "result") {
            "valid" => {
                assert!(got, "tcId {id} ({}) must verify", s(case, "comment"));
                valid += 1;
            }
            "invalid" => {
                assert!(!got, "tcId {id} ({}) must be rejected", s(case, "comment"));
                invalid += 1;
            }
            "acceptable" => {
                let pinned = ED25519_ACCEPTABLE
                    .iter()
                    .find(|(t, _)| *t == id)
                    .unwrap_or_else(|| panic!("acceptable tcId {id} is not pinned"));
                assert_eq!(got, pinned.1, "tcId {id}: pinned outcome changed");
                acceptable += 1;
            }
            other => panic!("tcId {id}: unknown result {other:?}"),
        }
    }
    assert_eq!(u(&doc, "numberOfTests"), 151);
    assert_eq!((valid, invalid, acceptable), (88, 63, 0));
    assert_eq!(wrong_length, 12);
    assert_eq!(acceptable, ED25519_ACCEPTABLE.len());
}

/// What `EncSecret::agree` does with X25519 `acceptable` cases, pinned per Wycheproof flag.
/// Every flag on an acceptable case must be listed; a case is `Refused` if any of its flags
/// is, otherwise `Computed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agree {
    /// The peer key is low order, so the shared secret is all zeros: `agree` returns `None`
    /// (the protocol refuses non-contributory agreements).
    Refused,
    /// Computed as RFC 7748 says (high bit of u masked, u >= p reduced, twist points used
    /// as they are): `agree` returns the expected shared secret.
    Computed,
}

const X25519_ACCEPTABLE_BY_FLAG: &[(&str, Agree)] = &[
    ("ZeroSharedSecret", Agree::Refused), // 31 cases
    ("LowOrderPublic", Agree::Refused),   // the same 31 cases
    ("Twist", Agree::Computed),
    ("NonCanonicalPublic", Agree::Computed),
    ("EdgeCaseMultiplication", Agree::Computed),
    ("SpecialPublicKey", Agree::Computed),
    ("SmallPublicKey", Agree::Computed),
    ("EdgeCaseShared", Agree::Computed),
    ("Ktv", Agree::Computed),
];

fn x25519_pinned(id: u64, case_flags: &[String]) -> Agree {
    assert!(!case_flags.is_empty(), "tcId {id}: acceptable without flags");
    let decisions: Vec<Agree> = case_flags
        .iter()
        .map(|f| {
            X25519_ACCEPTABLE_BY_FLAG
                .iter()
                .find(|(name, _)| name == f)
                .map(|(_, d)| *d)
                .unwrap_or_else(|| panic!("tcId {id}: flag {f:?} is not pinned"))
        })
        .collect();
    if decisions.contains(&Agree::Refused) { Agree::Refused } else { Agree::Computed }
}

#[test]
fn wycheproof_x25519_agree() {
    let doc = read_json("wycheproof/testvectors_v1/x25519_test.json");
    let (mut valid, mut refused, mut computed) = (0, 0, 0);
    for (group, case) in cases(&doc) {
        assert_eq!(s(group, "curve"), "curve25519");
        let id = u(case, "tcId");
        let secret = EncSecret::from_bytes(unhex_array(s(case, "private")));
        let peer = EncPublic::from_bytes(unhex_array(s(case, "public")));
        let shared: [u8; 32] = unhex_array(s(case, "shared"));
        let got = secret.agree(&peer);
        let all_zero = shared == [0u8; 32];
        match s(case, "result") {
            "valid" => {
                assert!(!all_zero, "tcId {id}: a valid case with a zero secret");
                assert_eq!(got, Some(shared), "tcId {id} ({})", s(case, "comment"));
                valid += 1;
            }
            "acceptable" => {
                let decision = x25519_pinned(id, &flags(case));
                // Whatever the flags, an all-zero secret is never handed out.
                assert_eq!(decision == Agree::Refused, all_zero, "tcId {id}");
                match decision {
                    Agree::Refused => {
                        assert_eq!(got, None, "tcId {id}: zero secret must be refused");
                        refused += 1;
                    }
                    Agree::Computed => {
                        assert_eq!(got, Some(shared), "tcId {id} ({})", s(case, "comment"));
                        computed += 1;
                    }
                }
            }
            other => panic!("tcId {id}: unexpected result {other:?}"),
        }
    }
    assert_eq!(u(&doc, "numberOfTests"), 518);
    assert_eq!((valid, refused, computed), (264, 31, 223));
}

#[test]
fn wycheproof_aes_256_gcm() {
    let doc = read_json("wycheproof/testvectors_v1/aes_gcm_test.json");
    let (mut valid, mut invalid, mut groups) = (0, 0, 0);
    for group in doc["testGroups"].as_array().expect("testGroups") {
        if (u(group, "keySize"), u(group, "ivSize"), u(group, "tagSize")) != (256, 96, 128) {
            continue;
        }
        groups += 1;
        for case in group["tests"].as_array().expect("tests") {
            let id = u(case, "tcId");
            let key: [u8; 32] = unhex_array(s(case, "key"));
            let iv: [u8; 12] = unhex_array(s(case, "iv"));
            let aad = unhex(s(case, "aad"));
            let msg = unhex(s(case, "msg"));
            let ct = unhex(s(case, "ct"));
            let tag: [u8; 16] = unhex_array(s(case, "tag"));
            let opened = aes256gcm_open(&key, &iv, &aad, &ct, &tag);
            match s(case, "result") {
                "valid" => {
                    assert_eq!(opened.as_deref(), Some(msg.as_slice()), "tcId {id}: open");
                    let (sealed, sealed_tag) = aes256gcm_seal(&key, &iv, &aad, &msg);
                    assert_eq!(sealed, ct, "tcId {id}: ciphertext");
                    assert_eq!(sealed_tag, tag, "tcId {id}: tag");
                    valid += 1;
                }
                "invalid" => {
                    assert_eq!(opened, None, "tcId {id} ({}) must fail", s(case, "comment"));
                    invalid += 1;
                }
                other => panic!("tcId {id}: unexpected result {other:?}"),
            }
        }
    }
    assert_eq!(groups, 1);
    assert_eq!((valid, invalid), (39, 27));
}

#[test]
fn wycheproof_hkdf_sha256() {
    let doc = read_json("wycheproof/testvectors_v1/hkdf_sha256_test.json");
    let (mut valid, mut invalid) = (0, 0);
    for (_, case) in cases(&doc) {
        let id = u(case, "tcId");
        let ikm = unhex(s(case, "ikm"));
        let salt = unhex(s(case, "salt"));
        let info = unhex(s(case, "info"));
        let size = usize::try_from(u(case, "size")).expect("size");
        let mut out = vec![0u8; size];
        let got = hkdf_sha256(&ikm, &salt, &info, &mut out);
        match s(case, "result") {
            "valid" => {
                assert!(got.is_ok(), "tcId {id}: {got:?}");
                assert_eq!(out, unhex(s(case, "okm")), "tcId {id} ({})", s(case, "comment"));
                valid += 1;
            }
            "invalid" => {
                assert_eq!(flags(case), ["SizeTooLarge"], "tcId {id}");
                assert!(got.is_err(), "tcId {id}: {size} bytes must be refused");
                invalid += 1;
            }
            other => panic!("tcId {id}: unexpected result {other:?}"),
        }
    }
    assert_eq!(u(&doc, "numberOfTests"), 86);
    assert_eq!((valid, invalid), (83, 3));
}
