//! Attacks on the protocol's documents (issue 9), each performed and refused: a key-committing
//! seal, delegations that cannot widen, and dotted names that are nobody without a delegation.
//! The house-level attacks (through public routes) are in `crates/house/tests/attacks/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;

use nyx5_proto::card::{AgentCardDraft, Delegation, DomainCardDraft, Scope};
use nyx5_proto::crypto::{EncSecret, SigningKey, aes256gcm_open, aes256gcm_seal, hkdf_sha256};
use nyx5_proto::envelope::{Content, Draft, Payload};
use nyx5_proto::json::obj;
use nyx5_proto::seal::{self, CEK_WRAP_INFO, Sealed, WrappedKey, commitment};
use nyx5_proto::{Address, AgentCard, DomainCard, Envelope, Timestamp, Value, Verified};

const NOW: Timestamp = Timestamp(1_788_548_400_000);

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

fn domain(key: &SigningKey) -> Verified<DomainCard> {
    let draft = DomainCardDraft {
        domain: "sigo.uk".into(),
        estafeta: "https://sigo.uk".into(),
        other_keys: vec![],
        previous: vec![],
        policy: obj([]),
        extensions: vec![],
        issued: NOW,
    };
    draft.sign(key, NOW).unwrap().verify(Some(&key.public())).unwrap()
}

// ---------- AES-GCM does not commit to its key ----------
//
// GHASH in GF(2^128) as NIST SP 800-38D writes it (bit 0 is the most significant bit of the first
// byte), enough to solve one ciphertext block so that one (ciphertext, tag) authenticates under
// two keys: the "invisible salamanders" property that `encrypted.commit` closes.

fn gf_mul(x: u128, y: u128) -> u128 {
    const R: u128 = 0xE1 << 120;
    let (mut z, mut v) = (0u128, y);
    for i in 0..128 {
        if (x >> (127 - i)) & 1 == 1 {
            z ^= v;
        }
        v = if v & 1 == 1 { (v >> 1) ^ R } else { v >> 1 };
    }
    z
}

fn gf_inv(x: u128) -> u128 {
    // x^(2^128 - 2) = the product of x^(2^i) for i in 1..128 (every bit of the exponent but the
    // lowest is set). The field's 1 is the block with only bit 0 set.
    let (mut result, mut power) = (1u128 << 127, x);
    for _ in 1..128 {
        power = gf_mul(power, power);
        result = gf_mul(result, power);
    }
    result
}

fn blocks(bytes: &[u8]) -> Vec<u128> {
    bytes
        .chunks(16)
        .map(|c| {
            let mut b = [0u8; 16];
            b[..c.len()].copy_from_slice(c);
            u128::from_be_bytes(b)
        })
        .collect()
}

fn ghash(h: u128, aad: &[u8], ct: &[u8]) -> u128 {
    let len = ((aad.len() as u128 * 8) << 64) | (ct.len() as u128 * 8);
    blocks(aad).into_iter().chain(blocks(ct)).chain([len]).fold(0, |y, x| gf_mul(y ^ x, h))
}

/// `H = AES_K(0)` and `E_K(J0)`, read off the GCM implementation itself: the tag of an empty
/// message with empty AAD is `E_K(J0)`, and with a zero block of AAD it is `L·H ⊕ E_K(J0)`.
fn gcm_secrets(key: &[u8; 32], iv: &[u8; 12]) -> (u128, u128) {
    let ej0 = u128::from_be_bytes(aes256gcm_seal(key, iv, b"", b"").1);
    let t = u128::from_be_bytes(aes256gcm_seal(key, iv, &[0u8; 16], b"").1);
    let len = 128u128 << 64;
    (gf_mul(t ^ ej0, gf_inv(gf_mul(len, 1u128 << 127))), ej0)
}

/// A two-block ciphertext and a tag that authenticate under both keys (same iv and aad).
fn salamander(k1: &[u8; 32], k2: &[u8; 32], iv: &[u8; 12], aad: &[u8]) -> (Vec<u8>, [u8; 16]) {
    let ((h1, e1), (h2, e2)) = (gcm_secrets(k1, iv), gcm_secrets(k2, iv));
    let mut ct = vec![0x42u8; 32];
    ct[16..].fill(0);
    let (g1, g2) = (ghash(h1, aad, &ct), ghash(h2, aad, &ct));
    // The last ciphertext block is multiplied by H^2 (only the length block follows it).
    let (p1, p2) = (gf_mul(h1, h1), gf_mul(h2, h2));
    let c = gf_mul(g1 ^ e1 ^ g2 ^ e2, gf_inv(p1 ^ p2));
    ct[16..].copy_from_slice(&c.to_be_bytes());
    let tag = ghash(h1, aad, &ct) ^ e1;
    (ct, tag.to_be_bytes())
}

#[test]
fn gf_arithmetic_agrees_with_the_gcm_implementation() {
    let (key, iv) = ([7u8; 32], [9u8; 12]);
    let (h, ej0) = gcm_secrets(&key, &iv);
    assert_eq!(gf_mul(h, gf_inv(h)), 1u128 << 127, "an inverse");
    let (ct, tag) = aes256gcm_seal(&key, &iv, b"some aad", b"thirty-three bytes of plaintext!!");
    assert_eq!(ghash(h, b"some aad", &ct) ^ ej0, u128::from_be_bytes(tag), "our GHASH is GCM's");
}

#[test]
fn one_sealed_envelope_cannot_open_to_two_texts() {
    let house_key = SigningKey::from_seed([1; 32]);
    let _ = domain(&house_key);
    let (alice, bob, carol) =
        (SigningKey::from_seed([2; 32]), EncSecret::from_bytes([3; 32]), EncSecret::from_bytes([4; 32]));
    let draft = Draft::new(
        "salamander".into(),
        addr("alice@sigo.uk"),
        vec![addr("bob@sigo.uk"), addr("carol@sigo.uk")],
        NOW,
        Content::new("text/plain", "placeholder".into()),
    );
    let mut n = 0u8;
    let mut rng = |buf: &mut [u8]| {
        for b in buf.iter_mut() {
            n = n.wrapping_add(37);
            *b = n;
        }
    };
    let recipients = [(addr("bob@sigo.uk"), bob.public()), (addr("carol@sigo.uk"), carol.public())];
    let honest = seal::seal(draft.build().unwrap(), &recipients, &mut rng).unwrap();
    let aad = seal::aad(&honest);
    let Payload::Sealed(sealed) = honest.payload() else { panic!("sealed") };

    // The sender's forgery: one ciphertext that authenticates under two content keys, bob's key
    // wrapped for bob and carol's for carol.
    let (k_bob, k_carol) = ([0x11u8; 32], [0x22u8; 32]);
    let (ct, tag) = salamander(&k_bob, &k_carol, &sealed.iv, &aad);
    let under_bob = aes256gcm_open(&k_bob, &sealed.iv, &aad, &ct, &tag).expect("authenticates under bob's key");
    let under_carol = aes256gcm_open(&k_carol, &sealed.iv, &aad, &ct, &tag).expect("and under carol's");
    assert_ne!(under_bob, under_carol, "one signed ciphertext, two texts: what GCM alone allows");

    let ephemeral = EncSecret::from_bytes([5; 32]);
    let epk = ephemeral.public().to_b64();
    let wrap = |to: &EncSecret, cek: &[u8; 32], iv: [u8; 12]| {
        let shared = ephemeral.agree(&to.public()).unwrap();
        let mut kek = [0u8; 32];
        hkdf_sha256(&shared, epk.as_bytes(), CEK_WRAP_INFO, &mut kek).unwrap();
        let (wct, wtag) = aes256gcm_seal(&kek, &iv, &aad, cek);
        WrappedKey { iv, ct: wct.try_into().unwrap(), tag: wtag }
    };
    let keys = BTreeMap::from([
        (addr("bob@sigo.uk"), wrap(&bob, &k_bob, [1; 12])),
        (addr("carol@sigo.uk"), wrap(&carol, &k_carol, [2; 12])),
    ]);
    // The commitment can name only one key.
    let forged = Sealed { epk, iv: sealed.iv, ct, tag, commit: commitment(&k_bob), keys };
    let mut raw = honest.object().clone();
    raw.insert("encrypted".into(), forged.to_value());
    let env = Envelope::from_object(raw).unwrap().sign(&alice).unwrap();

    let e = seal::open(&env, &addr("carol@sigo.uk"), &carol).unwrap_err();
    assert!(e.reason.contains("commitment"), "carol's key is refused before anything is decrypted: {}", e.reason);
    // Bob's key matches the commitment; what it opens is the one text everyone can get (here not
    // even a content object, so it is refused as such, never as a second reading).
    let e = seal::open(&env, &addr("bob@sigo.uk"), &bob).unwrap_err();
    assert!(!e.reason.contains("commitment"), "{}", e.reason);
    // An honest envelope opens the same for both.
    assert_eq!(seal::open(&honest, &addr("bob@sigo.uk"), &bob), seal::open(&honest, &addr("carol@sigo.uk"), &carol));
}

#[test]
fn a_sealed_envelope_without_a_commitment_is_malformed() {
    let mut rng = |buf: &mut [u8]| buf.fill(9);
    let bob = EncSecret::from_bytes([3; 32]);
    let draft = Draft::new(
        "x".into(),
        addr("alice@sigo.uk"),
        vec![addr("bob@sigo.uk")],
        NOW,
        Content::new("text/plain", "hi".into()),
    );
    let env = seal::seal(draft.build().unwrap(), &[(addr("bob@sigo.uk"), bob.public())], &mut rng).unwrap();
    let mut raw = env.object().clone();
    let mut encrypted = raw["encrypted"].as_object().unwrap().clone();
    encrypted.remove("commit");
    raw.insert("encrypted".into(), Value::Object(encrypted));
    assert_eq!(Envelope::from_object(raw).unwrap_err().kind, nyx5_proto::ErrorKind::Malformed);
}

// ---------- delegation ----------

fn card(key: &SigningKey, address: &str, agent: &SigningKey, delegation: Option<Delegation>) -> AgentCard {
    let mut draft = AgentCardDraft::new(addr(address), agent.public(), None, NOW);
    draft.delegation = delegation;
    draft.certify(key).unwrap()
}

fn list(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn a_delegation_never_widens_types_domains_or_cap() {
    let parent = Scope { types: list(&["message", "task"]), to_domains: list(&["a.test"]), cap: Some(100) };
    let within = [
        Scope { types: list(&["message"]), to_domains: list(&["a.test"]), cap: Some(100) },
        Scope { types: list(&[]), to_domains: list(&["a.test"]), cap: Some(0) },
    ];
    let wider = [
        Scope { types: list(&["message", "result"]), to_domains: list(&["a.test"]), cap: Some(1) },
        Scope { types: None, to_domains: list(&["a.test"]), cap: Some(1) },
        Scope { types: list(&["task"]), to_domains: list(&["a.test", "b.test"]), cap: Some(1) },
        Scope { types: list(&["task"]), to_domains: None, cap: Some(1) },
        Scope { types: list(&["task"]), to_domains: list(&["a.test"]), cap: Some(101) },
        Scope { types: list(&["task"]), to_domains: list(&["a.test"]), cap: None },
    ];
    for s in &within {
        assert!(s.within(&parent), "{s:?}");
    }
    for s in &wider {
        assert!(!s.within(&parent), "{s:?} widens its parent");
    }
    // Under a full agent (no scope) anything fits.
    assert!(wider.iter().all(|s| s.within(&Scope::default())));
}

#[test]
fn a_dotted_card_without_its_delegation_does_not_verify() {
    let house = SigningKey::from_seed([1; 32]);
    let d = domain(&house);
    let impostor = SigningKey::from_seed([66; 32]);
    let full = card(&house, "assistant.ceo@sigo.uk", &impostor, None);
    let e = full.verify(&d, None, NOW).unwrap_err();
    assert!(e.reason.contains("no delegation"), "{}", e.reason);
    // Also with the parent's card at hand: the name alone makes no one a subagent.
    let ceo_key = SigningKey::from_seed([2; 32]);
    let ceo = card(&house, "ceo@sigo.uk", &ceo_key, None).verify(&d, None, NOW).unwrap();
    let full = card(&house, "assistant.ceo@sigo.uk", &impostor, None);
    assert!(full.verify(&d, Some(&ceo), NOW).is_err());
    // With the parent's delegation it is a subagent.
    let del = Delegation::sign(
        ceo.address(),
        &addr("assistant.ceo@sigo.uk"),
        &impostor.public(),
        &Scope::default(),
        None,
        NOW,
        &ceo_key,
    )
    .unwrap();
    assert!(card(&house, "assistant.ceo@sigo.uk", &impostor, Some(del)).verify(&d, Some(&ceo), NOW).is_ok());
}
