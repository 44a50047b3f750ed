//! Attacks on the protocol's documents (issue 9), each performed and refused: a key-committing
//! seal, delegations that cannot widen, and dotted names that are nobody without a delegation.
//! The house-level attacks (through public routes) are in `crates/house/tests/attacks/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use nyx5_proto::authority::Authority;
use nyx5_proto::card::{AgentCardDraft, Delegation, DomainCardDraft, Scope};
use nyx5_proto::crypto::{EncSecret, SigningKey, aes256gcm_open, aes256gcm_seal, hkdf_sha256};
use nyx5_proto::envelope::{Content, Draft, Payload};
use nyx5_proto::json::obj;
use nyx5_proto::seal::{self, CEK_WRAP_INFO, Sealed, WrappedKey, commitment};
use nyx5_proto::{Address, AgentCard, DomainCard, Envelope, Refusal, Timestamp, Value, Verified};

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
    let keys = nyx5_proto::vecmap::VecMap::from([
        (addr("bob@sigo.uk"), wrap(&bob, &k_bob, [1; 12])),
        (addr("carol@sigo.uk"), wrap(&carol, &k_carol, [2; 12])),
    ]);
    // The commitment can name only one key.
    let forged = Sealed { epk, iv: sealed.iv, ct, tag, commit: commitment(&k_bob), keys };
    let mut raw = honest.object().clone();
    raw.insert("encrypted".into(), forged.to_value());
    let env = Envelope::from_object(raw).unwrap().sign(&alice).unwrap();

    let e = seal::open(&env, &addr("carol@sigo.uk"), &carol).unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::CannotOpen));
    assert!(e.reason.contains("commitment"), "carol's key is refused before anything is decrypted: {}", e.reason);
    // Bob's key matches the commitment; what it opens is the one text everyone can get (here not
    // even a content object, so it is refused as such, never as a second reading).
    let e = seal::open(&env, &addr("bob@sigo.uk"), &bob).unwrap_err();
    assert!(!e.reason.contains("commitment"), "{}", e.reason);
    assert_eq!(e.refusal(), Some(Refusal::BadJson), "{e}");
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
    assert_eq!(Envelope::from_object(raw).unwrap_err().refusal(), Some(Refusal::BadMember));
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
    let parent =
        Scope { types: list(&["message", "task"]), to_domains: list(&["a.test"]), cap: Some(100), authority: None };
    let within = [
        Scope { types: list(&["message"]), to_domains: list(&["a.test"]), cap: Some(100), authority: None },
        Scope { types: list(&[]), to_domains: list(&["a.test"]), cap: Some(0), authority: None },
    ];
    let wider = [
        Scope { types: list(&["message", "result"]), to_domains: list(&["a.test"]), cap: Some(1), authority: None },
        Scope { types: None, to_domains: list(&["a.test"]), cap: Some(1), authority: None },
        Scope { types: list(&["task"]), to_domains: list(&["a.test", "b.test"]), cap: Some(1), authority: None },
        Scope { types: list(&["task"]), to_domains: None, cap: Some(1), authority: None },
        Scope { types: list(&["task"]), to_domains: list(&["a.test"]), cap: Some(101), authority: None },
        Scope { types: list(&["task"]), to_domains: list(&["a.test"]), cap: None, authority: None },
    ];
    for s in &within {
        assert!(s.within(&parent), "{s:?}");
    }
    for s in &wider {
        assert!(!s.within(&parent), "{s:?} widens its parent");
    }
    // Under a full agent (no scope) anything fits.
    assert!(wider.iter().all(|s| s.within(&Scope::default())));
    // Nor does a delegation loosen its parent's authority, or drop it.
    let authority = |text: &str| Some(Authority::from_value(&Value::parse_str(text).unwrap()).unwrap());
    let ruled = Scope {
        authority: authority(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok"}"#),
        ..parent.clone()
    };
    let stricter = Scope {
        authority: authority(r#"{"level":"needs_approval","consequence":"costly","max_amount":10,"currency":"tok"}"#),
        ..parent.clone()
    };
    let looser = Scope {
        authority: authority(r#"{"level":"autonomous","consequence":"costly","max_amount":60,"currency":"tok"}"#),
        ..parent.clone()
    };
    assert!(stricter.within(&ruled) && ruled.within(&parent));
    assert!(!looser.within(&ruled) && !parent.within(&ruled));
    // And it survives the card's round trip, so both houses read the same ceiling.
    let again = Scope::from_value(&ruled.to_value()).unwrap();
    assert_eq!(again, ruled);
}

#[test]
fn a_dotted_card_without_its_delegation_does_not_verify() {
    let house = SigningKey::from_seed([1; 32]);
    let d = domain(&house);
    let impostor = SigningKey::from_seed([66; 32]);
    let full = card(&house, "assistant.ceo@sigo.uk", &impostor, None);
    let e = full.verify(&d, None, NOW).unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::SubagentWithoutDelegation), "{e}");
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

// ---------- a wrong value of the right shape ----------

use nyx5_proto::auth::{AuthHeader, Claims, Keys, Target};
use nyx5_proto::card::PreviousKey;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{b64, limits, pow};

const MINUTE: i64 = 60_000;

/// A token header with exactly these claim members (canonical), signed by `key`.
fn raw_token(members: &[(&str, &str)], key: &SigningKey) -> String {
    let doc: nyx5_proto::Object = members.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect();
    let bytes = Value::Object(doc).canonical();
    format!("Nyx5 {}.{}", b64::encode(&bytes), b64::encode(&key.sign(nyx5_proto::crypto::Context::Token, &bytes)))
}

fn members(nonce: &str) -> Vec<(&'static str, String)> {
    let body = nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(b""));
    vec![
        ("address", "ana@sigo.uk".into()),
        ("body", body),
        ("host", "sigo.uk".into()),
        ("method", "GET".into()),
        ("nonce", nonce.into()),
        ("path", "/mailbox/ana".into()),
        ("query", "".into()),
        ("ts", NOW.to_rfc3339()),
    ]
}

fn header_of(m: &[(&'static str, String)], key: &SigningKey) -> String {
    let pairs: Vec<(&str, &str)> = m.iter().map(|(k, v)| (*k, v.as_str())).collect();
    raw_token(&pairs, key)
}

#[test]
fn a_token_holds_exactly_its_members_and_a_nonce_of_16_to_64() {
    let key = SigningKey::from_seed([2; 32]);
    assert!(AuthHeader::parse(&header_of(&members(&"n".repeat(16)), &key)).is_ok());
    assert!(AuthHeader::parse(&header_of(&members(&"n".repeat(64)), &key)).is_ok());
    for bad in [15, 65] {
        let e = AuthHeader::parse(&header_of(&members(&"n".repeat(bad)), &key)).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::BadToken), "nonce of {bad}");
    }
    // Eight members, one of them not a token's; nine members.
    let mut renamed = members(&"n".repeat(16));
    renamed[1].0 = "bodx";
    assert!(AuthHeader::parse(&header_of(&renamed, &key)).is_err(), "a member swapped for another");
    let mut extra = members(&"n".repeat(16));
    extra.push(("zzz", "1".into()));
    assert!(AuthHeader::parse(&header_of(&extra, &key)).is_err(), "a ninth member");
}

#[test]
fn headers_are_read_up_to_their_limit_and_not_a_byte_more() {
    let key = SigningKey::from_seed([2; 32]);
    // Pad the path until the whole header is exactly the limit.
    let mut m = members(&"n".repeat(16));
    let base = header_of(&m, &key).len();
    let mut path = "/mailbox/ana".to_owned();
    while base + (path.len() - "/mailbox/ana".len()) * 4 / 3 < limits::MAX_HEADER_LEN - 8 {
        path.push('x');
    }
    let mut header = String::new();
    for _ in 0..64 {
        m[5].1 = path.clone();
        header = header_of(&m, &key);
        if header.len() >= limits::MAX_HEADER_LEN {
            break;
        }
        path.push('x');
    }
    while header.len() > limits::MAX_HEADER_LEN {
        path.pop();
        m[5].1 = path.clone();
        header = header_of(&m, &key);
    }
    // base64url grows in steps; pad with the spaces the parser trims after the scheme's space.
    let exact = format!("Nyx5 {}{}", " ".repeat(limits::MAX_HEADER_LEN - header.len()), &header[5..]);
    assert_eq!(exact.len(), limits::MAX_HEADER_LEN);
    assert!(AuthHeader::parse(&exact).is_ok(), "a header of exactly the limit");
    let over = format!("Nyx5  {}", &exact[5..]);
    assert!(AuthHeader::parse(&over).is_err(), "one byte over");

    // The relay header too.
    let house = SigningKey::from_seed([1; 32]);
    let env =
        Draft::new("r".into(), addr("a@sigo.uk"), vec![addr("b@x.test")], NOW, Content::new("text/plain", "x".into()))
            .build()
            .unwrap();
    let text = RelayHeader::sign("sigo.uk", &env, "x.test", &house).to_header();
    let padded = text.replacen("; ", &format!(";{}", " ".repeat(limits::MAX_HEADER_LEN - text.len() + 1)), 1);
    assert_eq!(padded.len(), limits::MAX_HEADER_LEN);
    assert!(RelayHeader::parse(&padded).is_ok());
    assert!(RelayHeader::parse(&padded.replacen(';', "; ", 1)).is_err());
}

fn rotated_card(house: &SigningKey, old: &SigningKey, new: &SigningKey, until: Timestamp) -> Verified<AgentCard> {
    let mut draft = AgentCardDraft::new(addr("ana@sigo.uk"), new.public(), None, NOW);
    draft.previous = vec![PreviousKey { sig: old.public(), until }];
    draft.certify(house).unwrap().verify(&domain(house), None, NOW).unwrap()
}

#[test]
fn a_replaced_key_signs_only_mailbox_reads_and_only_within_its_grace() {
    let house = SigningKey::from_seed([1; 32]);
    let (old, new) = (SigningKey::from_seed([5; 32]), SigningKey::from_seed([6; 32]));
    let until = NOW.plus_ms(MINUTE);
    let card = rotated_card(&house, &old, &new, until);
    let target = Target::new("GET", "/mailbox/ana", "", "sigo.uk", b"");
    let token = |key: &SigningKey, ts: Timestamp| {
        let claims =
            Claims { address: addr("ana@sigo.uk"), ts, nonce: "nonce-0123456789ab".into(), target: target.clone() };
        AuthHeader::parse(&claims.sign(key)).unwrap()
    };
    // The current key, either way; the old key only where grace is allowed, and only before `until`.
    assert!(token(&new, NOW).verify(&card, &target, Keys::Current, NOW).is_ok());
    assert!(token(&old, NOW).verify(&card, &target, Keys::CurrentOrGrace, NOW).is_ok());
    let e = token(&old, NOW).verify(&card, &target, Keys::Current, NOW).unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::NeedsCurrentKey), "a replaced key is known but may not act: {e}");
    let at_end = until;
    let e = token(&old, at_end).verify(&card, &target, Keys::CurrentOrGrace, at_end).unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::TokenSignatureInvalid), "at `until` the grace is over");
    let e = token(&old, at_end).verify(&card, &target, Keys::Current, at_end).unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::TokenSignatureInvalid), "past its grace a replaced key is just a wrong key");
    assert!(token(&old, NOW).verify(&card, &target, Keys::CurrentOrGrace, until.plus_ms(-1)).is_ok());
    // A token exactly at the edge of its 5-minute window still counts; a millisecond later not.
    let edge = NOW.plus_ms(limits::AUTH_WINDOW_MS);
    assert!(token(&new, NOW).verify(&card, &target, Keys::Current, edge).is_ok());
    assert!(token(&new, NOW).verify(&card, &target, Keys::Current, edge.plus_ms(1)).is_err());
}

#[test]
fn an_envelope_signature_by_the_right_key_over_other_bytes_is_refused() {
    let house = SigningKey::from_seed([1; 32]);
    let ana = SigningKey::from_seed([6; 32]);
    let card = rotated_card(&house, &SigningKey::from_seed([5; 32]), &ana, NOW.plus_ms(MINUTE));
    let draft = |body: &str| {
        Draft::new(
            "e1".into(),
            addr("ana@sigo.uk"),
            vec![addr("bo@x.test")],
            NOW,
            Content::new("text/plain", body.into()),
        )
        .build()
        .unwrap()
    };
    let signed = draft("one").sign(&ana).unwrap();
    let mut forged = draft("two").object().clone();
    forged.insert("signature".into(), signed.object()["signature"].clone());
    let forged = Envelope::from_object(forged).unwrap();
    assert!(forged.verify(&card, NOW).is_err());
    assert!(signed.verify(&card, NOW).is_ok());
}

#[test]
fn a_delegation_names_its_parent_twice_and_its_child_twice() {
    let house = SigningKey::from_seed([1; 32]);
    let d = domain(&house);
    let ceo_key = SigningKey::from_seed([2; 32]);
    let bob_key = SigningKey::from_seed([3; 32]);
    let ceo = card(&house, "ceo@sigo.uk", &ceo_key, None).verify(&d, None, NOW).unwrap();
    let bob = card(&house, "bob@sigo.uk", &bob_key, None).verify(&d, None, NOW).unwrap();
    let child = SigningKey::from_seed([4; 32]);
    let other = SigningKey::from_seed([7; 32]);
    let sign = |by: &str, to: &str, key: &SigningKey, until: Option<Timestamp>, parent_key: &SigningKey| {
        Delegation::sign(&addr(by), &addr(to), &key.public(), &Scope::default(), until, NOW, parent_key).unwrap()
    };
    let check = |name: &str, key: &SigningKey, del: Delegation, parent: &Verified<AgentCard>, now: Timestamp| {
        card(&house, name, key, Some(del)).verify(&d, Some(parent), now)
    };
    assert!(
        check("x.ceo@sigo.uk", &child, sign("ceo@sigo.uk", "x.ceo@sigo.uk", &child, None, &ceo_key), &ceo, NOW).is_ok()
    );
    // `by` is another agent (signed by the real parent's key): refused.
    assert!(
        check("x.ceo@sigo.uk", &child, sign("bob@sigo.uk", "x.ceo@sigo.uk", &child, None, &ceo_key), &ceo, NOW)
            .is_err()
    );
    // The name's parent is another than the card given as parent, though `by` matches that card.
    assert!(
        check("x.ceo@sigo.uk", &child, sign("bob@sigo.uk", "x.ceo@sigo.uk", &child, None, &bob_key), &bob, NOW)
            .is_err()
    );
    // It delegates another address, or another key.
    assert!(
        check("x.ceo@sigo.uk", &child, sign("ceo@sigo.uk", "y.ceo@sigo.uk", &child, None, &ceo_key), &ceo, NOW)
            .is_err()
    );
    assert!(
        check("x.ceo@sigo.uk", &child, sign("ceo@sigo.uk", "x.ceo@sigo.uk", &other, None, &ceo_key), &ceo, NOW)
            .is_err()
    );
    // It expires at its `valid_until`, not a millisecond later.
    let until = NOW.plus_ms(MINUTE);
    let timed = sign("ceo@sigo.uk", "x.ceo@sigo.uk", &child, Some(until), &ceo_key);
    assert!(check("x.ceo@sigo.uk", &child, timed.clone(), &ceo, until.plus_ms(-1)).is_ok());
    assert!(check("x.ceo@sigo.uk", &child, timed, &ceo, until).is_err());
}

#[test]
fn a_subagent_sends_only_what_its_delegation_allows() {
    let house = SigningKey::from_seed([1; 32]);
    let d = domain(&house);
    let ceo_key = SigningKey::from_seed([2; 32]);
    let ceo = card(&house, "ceo@sigo.uk", &ceo_key, None).verify(&d, None, NOW).unwrap();
    let child = SigningKey::from_seed([4; 32]);
    let scope = Scope { types: list(&["task"]), to_domains: list(&["x.test"]), cap: None, authority: None };
    let del =
        Delegation::sign(&ceo.address().clone(), &addr("x.ceo@sigo.uk"), &child.public(), &scope, None, NOW, &ceo_key)
            .unwrap();
    let sub = card(&house, "x.ceo@sigo.uk", &child, Some(del)).verify(&d, Some(&ceo), NOW).unwrap();
    assert!(sub.check_send("task", "x.test").is_ok());
    assert_eq!(sub.check_send("message", "x.test").unwrap_err().refusal(), Some(Refusal::OutsideDelegation));
    assert_eq!(sub.check_send("task", "y.test").unwrap_err().refusal(), Some(Refusal::OutsideDelegation));
    assert!(ceo.check_send("anything", "anywhere.test").is_ok(), "a full agent has no scope");
}

#[test]
fn the_work_digest_is_the_envelope_without_signature_and_pow() {
    let key = SigningKey::from_seed([2; 32]);
    let env =
        Draft::new("w1".into(), addr("a@sigo.uk"), vec![addr("b@x.test")], NOW, Content::new("text/plain", "x".into()))
            .build()
            .unwrap();
    let digest = env.work_digest();
    let expected = nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(&env.canonical()));
    assert_eq!(digest, expected, "an unsigned envelope without pow: its own hash");
    let nonce = pow::mint(&digest, 8, 0, 1 << 16).unwrap();
    let signed = env.with_pow(8, &nonce).unwrap().sign(&key).unwrap();
    assert_eq!(signed.work_digest(), digest, "pow and signature are left out");
    assert!(pow::check(&signed.work_digest(), &signed.pow().unwrap().nonce, 8));
}
