//! RFC and NIST vectors (via PyPI cryptography-vectors) and RFC 4648 §10, run through our API:
//! Ed25519 signing (RFC 8032 / djb `sign.input`), X25519 (RFC 7748), HKDF-SHA256 (RFC 5869),
//! AES-256-GCM (NIST CAVP, 96-bit iv, 128-bit tag), SHA-256 (CAVP ShortMsg), base64url.
//! Files: tests/vectors/nist-rfc/ and tests/vectors/base64/ (see tests/vectors/README.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::{read_json, read_text, s, unhex, unhex_array};
use nyx5_proto::b64;
use nyx5_proto::crypto::{EncPublic, EncSecret, SigningKey, aes256gcm_open, aes256gcm_seal, hkdf_sha256, sha256};

/// One record of a NIST `.rsp` / pyca `.txt` file: its `KEY = value` lines, the `[...]`
/// section headers in force, and whether it carries a bare `FAIL` line.
#[derive(Debug, Default, Clone)]
struct Record {
    fields: BTreeMap<String, String>,
    section: BTreeMap<String, String>,
    fail: bool,
}

impl Record {
    fn get(&self, key: &str) -> &str {
        self.fields.get(key).unwrap_or_else(|| panic!("record without {key}: {self:?}"))
    }

    fn hex(&self, key: &str) -> Vec<u8> {
        unhex(self.get(key))
    }
}

/// Splits a `.rsp`-style file into records, each starting at a `start_key = ...` line (blank
/// lines may fall inside a record; `#` lines are comments; `[K = V]` lines set the section).
fn records(text: &str, start_key: &str) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    let mut section = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let (k, v) = header.split_once('=').unwrap_or((header, ""));
            section.insert(k.trim().to_owned(), v.trim().to_owned());
            continue;
        }
        if line == "FAIL" {
            out.last_mut().expect("FAIL before any record").fail = true;
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("unexpected line {line:?}"));
        let (k, v) = (k.trim(), v.trim());
        if k == start_key {
            out.push(Record { section: section.clone(), ..Record::default() });
        }
        let record = out.last_mut().unwrap_or_else(|| panic!("{k} before the first {start_key}"));
        let previous = record.fields.insert(k.to_owned(), v.to_owned());
        assert!(previous.is_none(), "{k} twice in one record");
    }
    out
}

/// RFC 8032 §7.1 / djb's `sign.input`: every line, checking the derived public key, the exact
/// signature bytes (Ed25519 is deterministic) and that our strict verify accepts it.
#[test]
fn rfc8032_ed25519_sign_input() {
    let text = read_text("nist-rfc/asymmetric/Ed25519/sign.input");
    let mut run = 0;
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split(':').collect();
        assert_eq!(fields.len(), 5, "line {}: expected 4 fields and a trailing ':'", i + 1);
        let secret = unhex(fields[0]);
        let public: [u8; 32] = unhex_array(fields[1]);
        let msg = unhex(fields[2]);
        let sig_and_msg = unhex(fields[3]);
        assert_eq!(secret.len(), 64);
        assert_eq!(&secret[32..], &public[..], "line {}: secret is seed||pub", i + 1);
        assert_eq!(&sig_and_msg[64..], &msg[..], "line {}: sig||msg", i + 1);
        let sig: [u8; 64] = sig_and_msg[..64].try_into().unwrap();

        let key = SigningKey::from_seed(secret[..32].try_into().unwrap());
        assert_eq!(key.public().bytes(), &public, "line {}: public key", i + 1);
        assert_eq!(key.sign_raw(&msg), sig, "line {}: signature", i + 1);
        assert!(key.public().verify_raw(&msg, &sig), "line {}: verify", i + 1);
        if !msg.is_empty() {
            let mut other = msg.clone();
            other[0] ^= 1;
            assert!(!key.public().verify_raw(&other, &sig), "line {}: altered msg", i + 1);
        }
        run += 1;
    }
    assert_eq!(run, 1024);
}

/// RFC 7748 §5.2: scalar × u for the three single-step vectors.
#[test]
fn rfc7748_x25519() {
    let recs = records(&read_text("nist-rfc/asymmetric/X25519/rfc7748.txt"), "COUNT");
    for r in &recs {
        let secret = EncSecret::from_bytes(unhex_array(r.get("INPUT_SCALAR")));
        let peer = EncPublic::from_bytes(unhex_array(r.get("INPUT_U")));
        let expected: [u8; 32] = unhex_array(r.get("OUTPUT_U"));
        assert_eq!(secret.agree(&peer), Some(expected), "COUNT {}", r.get("COUNT"));
    }
    assert_eq!(recs.len(), 3);
    // Vector 3 is the base point 9: our public key derivation gives the same u.
    let third = &recs[2];
    let secret = EncSecret::from_bytes(unhex_array(third.get("INPUT_SCALAR")));
    assert_eq!(third.get("INPUT_U"), format!("09{}", "00".repeat(31)));
    assert_eq!(secret.public().bytes().to_vec(), third.hex("OUTPUT_U"));
}

/// RFC 5869 appendix A, the three SHA-256 cases (empty salt/info in case 3).
#[test]
fn rfc5869_hkdf_sha256() {
    let recs = records(&read_text("nist-rfc/KDF/rfc-5869-HKDF-SHA256.txt"), "COUNT");
    for r in &recs {
        assert_eq!(r.get("Hash"), "SHA-256");
        let len: usize = r.get("L").parse().unwrap();
        let mut okm = vec![0u8; len];
        hkdf_sha256(&r.hex("IKM"), &r.hex("salt"), &r.hex("info"), &mut okm).unwrap();
        assert_eq!(okm, r.hex("OKM"), "COUNT {}", r.get("COUNT"));
    }
    assert_eq!(recs.len(), 3);
    // The one limit: 255 blocks of 32 bytes.
    let mut max = vec![0u8; 255 * 32];
    assert!(hkdf_sha256(b"k", b"", b"", &mut max).is_ok());
    let mut over = vec![0u8; 255 * 32 + 1];
    assert!(hkdf_sha256(b"k", b"", b"", &mut over).is_err());
}

fn gcm_section_ok(r: &Record) -> bool {
    r.section.get("Keylen").map(String::as_str) == Some("256")
        && r.section.get("IVlen").map(String::as_str) == Some("96")
        && r.section.get("Taglen").map(String::as_str) == Some("128")
}

/// NIST CAVP gcmEncryptExtIV256 (96-bit iv, 128-bit tag sections): seal reproduces CT and
/// Tag, and open gives PT back.
#[test]
fn cavp_aes_256_gcm_encrypt() {
    let recs = records(&read_text("nist-rfc/ciphers/AES/GCM/gcmEncryptExtIV256_iv96_tag128.rsp"), "Count");
    for r in &recs {
        assert!(gcm_section_ok(r), "unexpected section {:?}", r.section);
        assert!(!r.fail);
        let key: [u8; 32] = unhex_array(r.get("Key"));
        let iv: [u8; 12] = unhex_array(r.get("IV"));
        let (pt, aad, ct) = (r.hex("PT"), r.hex("AAD"), r.hex("CT"));
        let tag: [u8; 16] = unhex_array(r.get("Tag"));
        let (got_ct, got_tag) = aes256gcm_seal(&key, &iv, &aad, &pt);
        assert_eq!((got_ct, got_tag), (ct.clone(), tag), "{:?}", r.fields);
        assert_eq!(aes256gcm_open(&key, &iv, &aad, &ct, &tag), Some(pt));
    }
    assert_eq!(recs.len(), 375);
}

/// NIST CAVP gcmDecrypt256 (96-bit iv, 128-bit tag sections): `FAIL` cases must not open;
/// the others open to PT, and sealing PT reproduces CT and Tag.
#[test]
fn cavp_aes_256_gcm_decrypt() {
    let recs = records(&read_text("nist-rfc/ciphers/AES/GCM/gcmDecrypt256_iv96_tag128.rsp"), "Count");
    let (mut ok, mut fail) = (0, 0);
    for r in &recs {
        assert!(gcm_section_ok(r), "unexpected section {:?}", r.section);
        let key: [u8; 32] = unhex_array(r.get("Key"));
        let iv: [u8; 12] = unhex_array(r.get("IV"));
        let (aad, ct) = (r.hex("AAD"), r.hex("CT"));
        let tag: [u8; 16] = unhex_array(r.get("Tag"));
        let opened = aes256gcm_open(&key, &iv, &aad, &ct, &tag);
        if r.fail {
            assert_eq!(opened, None, "{:?}", r.fields);
            fail += 1;
        } else {
            let pt = r.hex("PT");
            assert_eq!(opened.as_ref(), Some(&pt), "{:?}", r.fields);
            assert_eq!(aes256gcm_seal(&key, &iv, &aad, &pt), (ct, tag));
            ok += 1;
        }
    }
    assert_eq!(recs.len(), 375);
    assert_eq!((ok, fail), (184, 191));
}

/// NIST CAVP SHA256ShortMsg: messages of 0..=512 bits (`Len` is in bits; `Msg = 00` when 0).
#[test]
fn cavp_sha256_short_msg() {
    let recs = records(&read_text("nist-rfc/hashes/SHA2/SHA256ShortMsg.rsp"), "Len");
    for r in &recs {
        let bits: usize = r.get("Len").parse().unwrap();
        let mut msg = r.hex("Msg");
        msg.truncate(bits / 8);
        assert_eq!(sha256(&msg).to_vec(), r.hex("MD"), "Len = {bits}");
    }
    assert_eq!(recs.len(), 65);
}

/// RFC 4648 §10 through our base64url (no padding) encoder and strict decoder.
#[test]
fn rfc4648_base64url_no_padding() {
    let doc = read_json("base64/rfc4648_section10.json");
    let mut run = 0;
    for case in doc["tests"].as_array().expect("tests") {
        let input = s(case, "input").as_bytes();
        let enc = s(case, "base64url_nopad");
        assert_eq!(b64::encode(input), enc);
        assert_eq!(b64::decode(enc).as_deref(), Some(input));
        // The padded standard form is not ours to accept, unless it carries no padding.
        let padded = s(case, "base64");
        if padded != enc {
            assert_eq!(b64::decode(padded), None, "{padded:?}");
        }
        run += 1;
    }
    for case in doc["extra_cases_hex"].as_array().expect("extra_cases_hex") {
        let bytes = unhex(s(case, "hex"));
        let enc = s(case, "base64url_nopad");
        assert_eq!(b64::encode(&bytes), enc);
        assert_eq!(b64::decode(enc), Some(bytes));
        // The standard alphabet's '+' and '/' are refused.
        assert_eq!(b64::decode(s(case, "base64").trim_end_matches('=')), None);
        run += 1;
    }
    assert_eq!(run, 9);
}
