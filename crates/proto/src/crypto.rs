//! Keys and the primitives the protocol is built from: Ed25519 (strict verification), X25519
//! (non-contributory secrets refused), HKDF-SHA256, AES-256-GCM with a detached tag, SHA-256.
//!
//! Randomness comes in through [`Entropy`]; nothing here seeds itself.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use ed25519_dalek::Signer as _;
use hkdf::Hkdf;
use sha2::{Digest, Sha256};

use crate::b64;
use crate::error::Error;
use crate::refusal::Refusal;

/// A source of cryptographically secure random bytes, supplied by the caller.
pub trait Entropy {
    fn fill(&mut self, buf: &mut [u8]);
}

impl<F: FnMut(&mut [u8])> Entropy for F {
    fn fill(&mut self, buf: &mut [u8]) {
        self(buf)
    }
}

/// `N` random bytes from `rng`.
pub fn random<const N: usize>(rng: &mut dyn Entropy) -> [u8; N] {
    let mut out = [0u8; N];
    rng.fill(&mut out);
    out
}

/// What a signature is for. Every protocol signature covers the UTF-8 label `nyx5/1 <kind>`, one
/// zero byte, then the document's bytes ([`Context::frame`]), so a signature made for one kind
/// of document never verifies as another (as TLS 1.3's CertificateVerify does with its context
/// string). A zero byte appears in no label and in no canonical JSON, so the framing is
/// unambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    /// A domain card's self-signature (`signature`).
    DomainCard,
    /// The domain's certification of an agent card (`certification`).
    AgentCard,
    /// A parent's delegation to its subagent.
    Delegation,
    /// An envelope (an agent's, or a house's notice from `postmaster@`).
    Envelope,
    /// An agent's request token (spec §8).
    Token,
    /// The relay header a sending house adds (spec §6).
    Relay,
    /// A registration body: proof that the registrant holds the key (spec §8b).
    Registration,
    /// A seller's quote (spec §15).
    Quote,
    /// A Libro receipt (spec §20).
    Receipt,
    /// A webhook push: the house's wrapper around an envelope it pushes (§9d).
    Push,
    /// The seed of a delivery notice's id (spec §7b).
    NoticeId,
    /// An old domain key handing its domain over to the new active key (§4.1).
    DomainKeyHandover,
    /// A Libro entry (asiento), signed by the house (spec §14).
    Entry,
    /// An agent's public history, signed by its house (spec §21).
    Historial,
    /// A federated index's answer to a search, signed by the index's house (spec §13).
    IndexAnswer,
    /// An App Card, signed by its author (docs/SPEC.md "Apps — Pinned").
    AppCard,
    /// A house's catalogue of App Cards (`GET /apps`), signed by its domain key.
    AppCatalogue,
    /// A Nyx5 agent's proof that it is the caller of an A2A message (docs/SPEC.md "A2A gateway").
    A2aCall,
}

impl Context {
    /// Every kind, for tests that check none verifies as another.
    pub const ALL: [Context; 18] = [
        Context::DomainCard,
        Context::AgentCard,
        Context::Delegation,
        Context::Envelope,
        Context::Token,
        Context::Relay,
        Context::Registration,
        Context::Quote,
        Context::Receipt,
        Context::Push,
        Context::NoticeId,
        Context::DomainKeyHandover,
        Context::Entry,
        Context::Historial,
        Context::IndexAnswer,
        Context::AppCard,
        Context::AppCatalogue,
        Context::A2aCall,
    ];

    /// The label this kind's signatures start with.
    pub fn label(self) -> &'static str {
        match self {
            Context::DomainCard => "nyx5/1 domain-card",
            Context::AgentCard => "nyx5/1 agent-card",
            Context::Delegation => "nyx5/1 delegation",
            Context::Envelope => "nyx5/1 envelope",
            Context::Token => "nyx5/1 token",
            Context::Relay => "nyx5/1 relay",
            Context::Registration => "nyx5/1 registration",
            Context::Quote => "nyx5/1 quote",
            Context::Receipt => "nyx5/1 receipt",
            Context::Push => "nyx5/1 push",
            Context::NoticeId => "nyx5/1 notice-id",
            Context::DomainKeyHandover => "nyx5/1 domain-key-handover",
            Context::Entry => "nyx5/1 asiento",
            Context::Historial => "nyx5/1 historial",
            Context::IndexAnswer => "nyx5/1 index-answer",
            Context::AppCard => "nyx5/1 app",
            Context::AppCatalogue => "nyx5/1 app-catalogue",
            Context::A2aCall => "nyx5/1 a2a-call",
        }
    }

    /// The bytes a signature of this kind covers: label, a zero byte, `message`.
    pub fn frame(self, message: &[u8]) -> Vec<u8> {
        let label = self.label().as_bytes();
        let mut out = Vec::with_capacity(label.len() + 1 + message.len());
        out.extend_from_slice(label);
        out.push(0);
        out.extend_from_slice(message);
        out
    }
}

/// An Ed25519 public key: the `sig` of a card and the `kid` of a signature.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SigPublic([u8; 32]);

impl std::fmt::Debug for SigPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigPublic({})", self.to_b64())
    }
}

impl SigPublic {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        SigPublic(bytes)
    }

    /// Parses the base64url form of a key. The point is checked when verifying.
    pub fn parse(text: &str) -> Result<SigPublic, Error> {
        b64::decode_array(text)
            .map(SigPublic)
            .ok_or_else(|| Refusal::BadKey.because(format!("not a 32-byte base64url Ed25519 key: {text:?}")))
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_b64(&self) -> String {
        b64::encode(&self.0)
    }

    /// Whether `signature` is this key's signature of kind `context` over `message`.
    pub fn verify(&self, context: Context, message: &[u8], signature: &[u8; 64]) -> bool {
        self.verify_raw(&context.frame(message), signature)
    }

    /// `verify_strict` over the bare bytes, without a context label: for standard test vectors
    /// and for callers that framed the message themselves. Refuses non-canonical encodings and
    /// small-order keys and points.
    pub fn verify_raw(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        self.prepare().is_some_and(|key| key.verify_raw(message, signature))
    }

    /// The key decoded for verifying (its point decompressed: about a tenth of a verification);
    /// `None` when the bytes are not a point, which no signature verifies against.
    pub fn prepare(&self) -> Option<PreparedKey> {
        ed25519_dalek::VerifyingKey::from_bytes(&self.0).ok().map(PreparedKey)
    }
}

/// An Ed25519 public key decoded once, to verify many signatures by it: exactly
/// [`SigPublic::verify`] (strict, small-order keys and points refused at each verification)
/// without decoding the key again each time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PreparedKey(ed25519_dalek::VerifyingKey);

impl std::fmt::Debug for PreparedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PreparedKey({})", self.public().to_b64())
    }
}

impl PreparedKey {
    pub fn public(&self) -> SigPublic {
        SigPublic(self.0.to_bytes())
    }

    /// `verify_strict` over bytes already framed, as [`SigPublic::verify_raw`]: the encodings
    /// checked here (`strict_encodings`), then the equation, by the native verifier when one is
    /// set ([`set_native_verify`]) and answers, else by ed25519-dalek.
    pub fn verify_raw(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        if !strict_encodings(&self.0, signature) {
            return false;
        }
        if let Some(answer) = NATIVE_VERIFY.get().and_then(|native| native(self.0.as_bytes(), message, signature)) {
            return answer;
        }
        let sig = ed25519_dalek::Signature::from_bytes(signature);
        self.0.verify_strict(message, &sig).is_ok()
    }
}

/// An RFC 8032 Ed25519 verifier outside Rust — workerd's (BoringSSL, through `node:crypto`) takes
/// about half the CPU of the curve arithmetic compiled to wasm. `None` when it could not answer;
/// Rust then verifies.
pub type NativeVerify = fn(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> Option<bool>;

static NATIVE_VERIFY: std::sync::OnceLock<NativeVerify> = std::sync::OnceLock::new();

/// Hands the Ed25519 equation to `verify` for the rest of the process, once it has given the
/// known answers below; refused (with the first answer that was wrong) when it has not, or when
/// a verifier is set already. The rules stay in Rust: before asking it,
/// [`PreparedKey::verify_raw`] refuses what `verify_strict` refuses and a plain RFC 8032 verifier
/// may accept (`strict_encodings`). What is left is the equation, which `verify_strict` checks
/// cofactorless; RFC 8032 also allows the cofactored check, which accepts some signatures with a
/// mixed-order `R` that the cofactorless one refuses, so the known answers include two of those
/// (speccheck's cases 4 and 5, which only a cofactored verifier accepts) and one that both
/// accept (case 3, which a verifier insisting on full-order points would refuse).
/// `tests/ed25519_native.rs` shows a verifier that passes gives `verify_strict`'s answers on
/// Wycheproof, speccheck and CCTV; `tests/e2e/ed25519_workerd.mjs` shows it for workerd's.
pub fn set_native_verify(verify: NativeVerify) -> Result<(), String> {
    known_answers(verify)?;
    NATIVE_VERIFY.set(verify).map_err(|_| "a native verifier is set already".to_owned())
}

/// speccheck (tests/vectors/ed25519-extra/speccheck, Apache-2.0) cases 3, 4 and 5: one key, a
/// message, a signature, and what a cofactorless verifier answers.
const SPECCHECK_KNOWN: [(&str, &str, &str, bool); 3] = [
    (
        "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d",
        "9bd9f44f4dcc75bd531b56b2cd280b0bb38fc1cd6d1230e14861d861de092e79",
        "9046a64750444938de19f227bb80485e92b83fdb4b6506c160484c016cc1852f87909e14428a7a1d62e9f22f3d3ad7802db02eb2e688b6c52fcd6648a98bd009",
        true,
    ),
    (
        "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d",
        "e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec4011eaccd55b53f56c",
        "160a1cb0dc9c0258cd0a7d23e94d8fa878bcb1925f2c64246b2dee1796bed5125ec6bc982a269b723e0668e540911a9a6a58921d6925e434ab10aa7940551a09",
        false,
    ),
    (
        "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d",
        "e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec4011eaccd55b53f56c",
        "21122a84e0b5fca4052f5b1235c80a537878b38f3142356b2c2384ebad4668b7e40bc836dac0f71076f9abe3a53f9c03c1ceeeddb658d0030494ace586687405",
        false,
    ),
];

/// Asks `verify` what `verify_strict` knows the answer to: a signature made here, and the same
/// with one bit of the message, of `R` and of `S` changed, and with another key; and the three
/// speccheck cases. Every answer must be given, and right.
fn known_answers(verify: NativeVerify) -> Result<(), String> {
    let key = SigningKey::from_seed([0x6e; 32]);
    let other = SigningKey::from_seed([0x35; 32]);
    let message = b"nyx5 native Ed25519 known answers";
    let signature = key.sign_raw(message);
    let flip = |mut bytes: [u8; 64], at: usize| {
        if let Some(b) = bytes.get_mut(at) {
            *b ^= 1;
        }
        bytes
    };
    let mut cases = vec![
        ("a signature made here".to_owned(), *key.public().bytes(), message.to_vec(), signature, true),
        (
            "another message".to_owned(),
            *key.public().bytes(),
            b"nyx5 native Ed25519 known answerz".to_vec(),
            signature,
            false,
        ),
        ("a bit of R changed".to_owned(), *key.public().bytes(), message.to_vec(), flip(signature, 3), false),
        ("a bit of S changed".to_owned(), *key.public().bytes(), message.to_vec(), flip(signature, 40), false),
        ("another key".to_owned(), *other.public().bytes(), message.to_vec(), signature, false),
    ];
    for (i, (public, msg, sig, expected)) in SPECCHECK_KNOWN.iter().enumerate() {
        let decoded = (unhex_array::<32>(public), unhex(msg), unhex_array::<64>(sig));
        let (Some(public), Some(msg), Some(sig)) = decoded else {
            return Err("a known answer does not decode".to_owned());
        };
        cases.push((format!("speccheck case {}", i + 3), public, msg, sig, *expected));
    }
    for (what, public, msg, sig, expected) in cases {
        match verify(&public, &msg, &sig) {
            Some(answer) if answer == expected => {}
            answer => return Err(format!("{what}: answered {answer:?}, not {expected}")),
        }
    }
    Ok(())
}

/// Hex to bytes, for the known answers.
fn unhex(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

fn unhex_array<const N: usize>(hex: &str) -> Option<[u8; N]> {
    unhex(hex)?.try_into().ok()
}

/// The checks on a signature's encodings that `verify_strict` makes beside its equation, and a
/// little more: `S` below ℓ; `A` and `R` written canonically (`y` below p, as RFC 8032's decoding
/// demands; dalek would take some of the few `y` ≥ p that are points, for `A` — no signature by
/// such a key can be made without its discrete logarithm — and a non-canonical `R` never equals
/// the `R` an RFC 8032 verifier computes); neither of small order. A few comparisons and, for
/// `A`, three doublings: no decompression.
fn strict_encodings(key: &ed25519_dalek::VerifyingKey, signature: &[u8; 64]) -> bool {
    let (r, s) = signature.split_at(32);
    let (Ok(r), Ok(s)) = (<[u8; 32]>::try_from(r), <[u8; 32]>::try_from(s)) else {
        return false;
    };
    let canonical_s = bool::from(curve25519_dalek::Scalar::from_canonical_bytes(s).is_some());
    canonical_s && canonical_y(key.as_bytes()) && canonical_y(&r) && !key.is_weak() && !small_order(&r)
}

/// Whether the `y` of a point's encoding (its sign bit aside) is below p = 2²⁵⁵ − 19.
fn canonical_y(encoding: &[u8; 32]) -> bool {
    let mut y = *encoding;
    y[31] &= 0x7f;
    // y ≥ p only for the 19 values 7fff…ffed ..= 7fff…ffff.
    !(y[31] == 0x7f && y[1..31].iter().all(|&b| b == 0xff) && y[0] >= 0xed)
}

/// Whether a canonically written point is of small order: its `y` is one of the eight-torsion
/// points' (0, 1, −1 and the two of order 8), whatever its sign bit.
fn small_order(encoding: &[u8; 32]) -> bool {
    static SMALL_ORDER_YS: std::sync::OnceLock<Vec<[u8; 32]>> = std::sync::OnceLock::new();
    let ys = SMALL_ORDER_YS.get_or_init(|| {
        curve25519_dalek::constants::EIGHT_TORSION
            .iter()
            .map(|point| {
                let mut y = point.compress().to_bytes();
                y[31] &= 0x7f;
                y
            })
            .collect()
    });
    let mut y = *encoding;
    y[31] &= 0x7f;
    ys.contains(&y)
}

/// The keys of a card, decoded the first time one of them verifies something, then kept with the
/// card (a card cached by a house verifies many envelopes). Not part of the card's value: it
/// compares equal and prints as nothing, so two cards with the same document stay equal.
#[derive(Clone, Default)]
pub(crate) struct KeyCache(std::sync::OnceLock<Vec<(SigPublic, Option<PreparedKey>)>>);

impl KeyCache {
    /// Verifies `signature` over the framed `message` by `kid`, which the caller has already
    /// found among `keys` (the card's keys); the same answer as `kid.verify_raw(message, signature)`.
    pub(crate) fn verify_raw(
        &self,
        keys: impl FnOnce() -> Vec<SigPublic>,
        kid: &SigPublic,
        message: &[u8],
        signature: &[u8; 64],
    ) -> bool {
        let prepared = self.0.get_or_init(|| keys().into_iter().map(|k| (k, k.prepare())).collect());
        match prepared.iter().find(|(k, _)| k == kid) {
            Some((_, Some(key))) => key.verify_raw(message, signature),
            Some((_, None)) => false, // not a point: `SigPublic::verify_raw` refuses it too
            None => kid.verify_raw(message, signature),
        }
    }
}

impl PartialEq for KeyCache {
    fn eq(&self, _: &KeyCache) -> bool {
        true
    }
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyCache")
    }
}

/// An Ed25519 signing key, held by its agent or house.
#[derive(Clone)]
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public().to_b64())
    }
}

impl SigningKey {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    pub fn generate(rng: &mut dyn Entropy) -> Self {
        SigningKey::from_seed(random(rng))
    }

    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn public(&self) -> SigPublic {
        SigPublic(self.0.verifying_key().to_bytes())
    }

    /// Signs `message` as a document of kind `context` (see [`Context`]).
    pub fn sign(&self, context: Context, message: &[u8]) -> [u8; 64] {
        self.sign_raw(&context.frame(message))
    }

    /// Signs the bare bytes, without a context label: for standard test vectors only. Every
    /// protocol signature goes through [`SigningKey::sign`]. By the native signer when one is set
    /// ([`set_native_sign`]) and answers, else by ed25519-dalek: Ed25519 signatures are
    /// deterministic, so both give the same bytes.
    pub fn sign_raw(&self, message: &[u8]) -> [u8; 64] {
        let seed = |out: &mut [u8; 32]| out.copy_from_slice(self.0.as_bytes());
        let native = NATIVE_SIGN.get().and_then(|sign| sign(self.0.verifying_key().as_bytes(), &seed, message));
        native.unwrap_or_else(|| self.sign_in_rust(message))
    }

    fn sign_in_rust(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

/// An RFC 8032 Ed25519 signer outside Rust: workerd's (BoringSSL, through `node:crypto`). On
/// wasm32 the curve crate is built without its precomputed tables (~36 KB of the Worker's
/// gzipped wasm; Cargo.toml of this crate), so a signature made in wasm costs a variable-base
/// multiplication; made natively it costs less than either. Given the public key, and `seed`,
/// which writes the key's seed into a buffer the signer owns (and wipes): a signer that keeps
/// its keys asks for a seed only the first time it meets its public key. `None` when it could
/// not sign: Rust then signs.
pub type NativeSign = fn(public: &[u8; 32], seed: &dyn Fn(&mut [u8; 32]), message: &[u8]) -> Option<[u8; 64]>;

static NATIVE_SIGN: std::sync::OnceLock<NativeSign> = std::sync::OnceLock::new();

/// Hands Ed25519 signing to `sign` for the rest of the process, once it has made exactly the
/// known signatures below; refused (with the first that differed) when it has not, or when a
/// signer is set already. Ed25519 is deterministic (RFC 8032 §5.1.6): a signer that makes RFC
/// 8032's signatures and Rust's own on a protocol-sized message is wired right (the seed, the
/// message and the answer go where they should) and is no hedged or randomised variant, whose
/// signatures would differ. That it is right on every other message is what it is chosen for
/// (BoringSSL); `tests/e2e/ed25519_workerd.mjs` holds workerd's to all of `sign.input`, and the
/// Worker's signer checks its first signature under each key it imports.
pub fn set_native_sign(sign: NativeSign) -> Result<(), String> {
    known_signatures(sign)?;
    NATIVE_SIGN.set(sign).map_err(|_| "a native signer is set already".to_owned())
}

/// RFC 8032 §7.1, TESTs 1, 2 and 3 (tests/vectors/nist-rfc/asymmetric/Ed25519/sign.input, its
/// first three lines): seed, public key, message, signature.
const RFC8032_KNOWN: [(&str, &str, &str, &str); 3] = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
];

/// Asks `sign` for RFC 8032's three signatures and for Rust's own over a framed message of the
/// size an envelope has, under two keys. Every signature must be given, and be those bytes.
fn known_signatures(sign: NativeSign) -> Result<(), String> {
    let mut cases = Vec::new();
    for (i, (seed, public, message, signature)) in RFC8032_KNOWN.iter().enumerate() {
        let decoded =
            (unhex_array::<32>(seed), unhex_array::<32>(public), unhex(message), unhex_array::<64>(signature));
        let (Some(seed), Some(public), Some(message), Some(signature)) = decoded else {
            return Err("a known signature does not decode".to_owned());
        };
        cases.push((format!("RFC 8032 test {}", i + 1), seed, public, message, signature));
    }
    let message = Context::Envelope.frame(&[b'x'; 1200]);
    for seed in [[0x6e; 32], [0x35; 32]] {
        let key = SigningKey::from_seed(seed);
        let expected = key.sign_in_rust(&message);
        cases.push((
            format!("a framed message under key {}", key.public().to_b64()),
            seed,
            *key.public().bytes(),
            message.clone(),
            expected,
        ));
    }
    for (what, seed, public, message, expected) in cases {
        match sign(&public, &|out: &mut [u8; 32]| *out = seed, &message) {
            Some(signature) if signature == expected => {}
            other => return Err(format!("{what}: signed {:?}, not {}", other.map(|s| hex(&s)), hex(&expected))),
        }
    }
    Ok(())
}

/// An X25519 public key: the `enc` of a card, the `epk` of a sealed envelope.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EncPublic([u8; 32]);

impl std::fmt::Debug for EncPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncPublic({})", self.to_b64())
    }
}

impl EncPublic {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        EncPublic(bytes)
    }

    pub fn parse(text: &str) -> Result<EncPublic, Error> {
        b64::decode_array(text)
            .map(EncPublic)
            .ok_or_else(|| Refusal::BadKey.because(format!("not a 32-byte base64url X25519 key: {text:?}")))
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_b64(&self) -> String {
        b64::encode(&self.0)
    }
}

/// An X25519 secret key.
#[derive(Clone)]
pub struct EncSecret(x25519_dalek::StaticSecret);

impl std::fmt::Debug for EncSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncSecret({})", self.public().to_b64())
    }
}

impl EncSecret {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        EncSecret(x25519_dalek::StaticSecret::from(bytes))
    }

    pub fn generate(rng: &mut dyn Entropy) -> Self {
        EncSecret::from_bytes(random(rng))
    }

    pub fn bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn public(&self) -> EncPublic {
        EncPublic(x25519_dalek::PublicKey::from(&self.0).to_bytes())
    }

    /// The X25519 shared secret, or `None` when it is all zeros (a small-order peer key).
    pub fn agree(&self, peer: &EncPublic) -> Option<[u8; 32]> {
        let shared = self.0.diffie_hellman(&x25519_dalek::PublicKey::from(peer.0));
        shared.was_contributory().then(|| shared.to_bytes())
    }
}

/// HKDF-SHA256 (RFC 5869) into `out`. Fails only when `out` is longer than 255 × 32 bytes.
pub fn hkdf_sha256(ikm: &[u8], salt: &[u8], info: &[u8], out: &mut [u8]) -> Result<(), Error> {
    Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand(info, out)
        .map_err(|_| Refusal::CannotSeal.because("HKDF output too long"))
}

/// AES-256-GCM with a 96-bit iv: returns the ciphertext and the 128-bit tag separately.
pub fn aes256gcm_seal(key: &[u8; 32], iv: &[u8; 12], aad: &[u8], plaintext: &[u8]) -> (Vec<u8>, [u8; 16]) {
    let cipher = Aes256Gcm::new(&(*key).into());
    let mut buf = plaintext.to_vec();
    // Encryption fails only for inputs over 64 GiB, far beyond any limit here.
    let tag = cipher
        .encrypt_inout_detached(&Nonce::from(*iv), aad, buf.as_mut_slice().into())
        .map(|t| t.into())
        .unwrap_or([0u8; 16]);
    (buf, tag)
}

/// Opens AES-256-GCM; `None` if the tag does not authenticate.
pub fn aes256gcm_open(key: &[u8; 32], iv: &[u8; 12], aad: &[u8], ct: &[u8], tag: &[u8; 16]) -> Option<Vec<u8>> {
    let cipher = Aes256Gcm::new(&(*key).into());
    let mut buf = ct.to_vec();
    cipher.decrypt_inout_detached(&Nonce::from(*iv), aad, buf.as_mut_slice().into(), &Tag::from(*tag)).ok()?;
    Some(buf)
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lowercase hex, as the `*_sha256` fields carry digests.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks that member `name` holds a SHA-256 as [`hex`] writes it: 64 lowercase hex digits.
pub fn check_sha256_hex(s: &str, name: &str) -> Result<(), Error> {
    if s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(Refusal::BadDigest.because(format!("`{name}` must be 64 lowercase hex digits")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn sign_and_verify_strict() {
        let key = SigningKey::from_seed([7; 32]);
        let sig = key.sign(Context::Envelope, b"hola");
        assert!(key.public().verify(Context::Envelope, b"hola", &sig));
        assert!(!key.public().verify(Context::Envelope, b"hola!", &sig));
        assert!(!key.public().verify_raw(b"hola", &sig), "the label is part of what is signed");
        assert!(key.public().verify_raw(b"nyx5/1 envelope\0hola", &sig));
        let mut bad = sig;
        bad[0] ^= 1;
        assert!(!key.public().verify(Context::Envelope, b"hola", &bad));
    }

    #[test]
    fn a_key_cache_answers_as_verify_does() {
        let key = SigningKey::from_seed([7; 32]);
        let sig = key.sign_raw(b"hola");
        let identity = SigPublic::from_bytes({
            let mut b = [0; 32];
            b[0] = 1;
            b
        }); // a point of small order
        let not_a_point = (2..=u8::MAX)
            .map(|i| {
                let mut b = [0; 32];
                b[0] = i;
                SigPublic::from_bytes(b)
            })
            .find(|k| k.prepare().is_none())
            .unwrap();
        let keys = vec![key.public(), identity, not_a_point];
        let cache = KeyCache::default();
        for _ in 0..2 {
            for kid in [key.public(), identity, not_a_point, SigningKey::from_seed([8; 32]).public()] {
                for (message, signature) in [(&b"hola"[..], sig), (&b"hola!"[..], sig), (&b"hola"[..], [0; 64])] {
                    assert_eq!(
                        cache.verify_raw(|| keys.clone(), &kid, message, &signature),
                        kid.verify_raw(message, &signature),
                        "{kid:?}"
                    );
                }
            }
        }
        assert!(cache.verify_raw(|| keys.clone(), &key.public(), b"hola", &sig));
        assert_eq!(cache, KeyCache::default());
    }

    #[test]
    fn no_context_verifies_as_another() {
        let key = SigningKey::from_seed([7; 32]);
        for signed in Context::ALL {
            let sig = key.sign(signed, b"{}");
            for checked in Context::ALL {
                assert_eq!(key.public().verify(checked, b"{}", &sig), signed == checked, "{signed:?} as {checked:?}");
            }
        }
        let labels: std::collections::BTreeSet<_> = Context::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), Context::ALL.len(), "labels are distinct");
        assert!(labels.iter().all(|l| !l.contains('\0')), "no label holds the separator");
    }

    #[test]
    fn x25519_refuses_small_order_peer() {
        let me = EncSecret::from_bytes([9; 32]);
        assert_eq!(me.agree(&EncPublic::from_bytes([0; 32])), None);
        let peer = EncSecret::from_bytes([3; 32]);
        assert_eq!(me.agree(&peer.public()), peer.agree(&me.public()));
    }

    #[test]
    fn gcm_round_trip_and_tamper() {
        let (ct, tag) = aes256gcm_seal(&[1; 32], &[2; 12], b"aad", b"secret");
        assert_eq!(aes256gcm_open(&[1; 32], &[2; 12], b"aad", &ct, &tag).as_deref(), Some(&b"secret"[..]));
        assert_eq!(aes256gcm_open(&[1; 32], &[2; 12], b"aaD", &ct, &tag), None);
    }

    /// An [`Entropy`] that counts up from `start`, one byte at a time.
    fn counter(start: u8) -> impl FnMut(&mut [u8]) {
        let mut next = start;
        move |buf: &mut [u8]| {
            for b in buf {
                *b = next;
                next = next.wrapping_add(1);
            }
        }
    }

    #[test]
    fn random_returns_the_bytes_the_entropy_fills_in() {
        let mut rng = counter(0x10);
        let first: [u8; 4] = random(&mut rng);
        let second: [u8; 4] = random(&mut rng);
        assert_eq!(first, [0x10, 0x11, 0x12, 0x13]);
        assert_eq!(second, [0x14, 0x15, 0x16, 0x17], "each draw takes fresh bytes");
        let mut buf = [0u8; 3];
        counter(0xfe).fill(&mut buf);
        assert_eq!(buf, [0xfe, 0xff, 0x00], "a closure is an entropy source filling the whole buffer");
    }

    #[test]
    fn generated_keys_are_made_from_the_entropy_and_give_their_secret_back() {
        let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
        let key = SigningKey::generate(&mut counter(0));
        assert_eq!(key.seed(), seed);
        assert_eq!(SigningKey::from_seed(key.seed()).public(), key.public());
        assert_ne!(SigningKey::generate(&mut counter(1)).public(), key.public());
        let secret = EncSecret::generate(&mut counter(0));
        assert_eq!(secret.bytes(), seed, "kept as given: clamping is X25519's business");
        assert_eq!(EncSecret::from_bytes(secret.bytes()).public(), secret.public());
    }

    #[test]
    fn debug_output_shows_public_keys_only() {
        let seed: [u8; 32] = std::array::from_fn(|i| 0x40 + i as u8);
        let key = SigningKey::from_seed(seed);
        let public = key.public().to_b64();
        let secret = EncSecret::from_bytes(seed);
        let enc_public = secret.public().to_b64();
        let shown = [
            (format!("{key:?}"), format!("SigningKey({public})")),
            (format!("{:?}", key.public()), format!("SigPublic({public})")),
            (format!("{:?}", key.public().prepare().unwrap()), format!("PreparedKey({public})")),
            (format!("{secret:?}"), format!("EncSecret({enc_public})")),
            (format!("{:?}", secret.public()), format!("EncPublic({enc_public})")),
            (format!("{:?}", KeyCache::default()), "KeyCache".to_owned()),
        ];
        for (debug, expected) in shown {
            assert_eq!(debug, expected);
            for secret_text in [hex(&seed), b64::encode(&seed)] {
                assert!(!debug.contains(&secret_text), "{debug} shows the secret");
            }
        }
        assert_ne!(public, b64::encode(&seed));
    }

    #[test]
    fn canonical_y_refuses_exactly_the_nineteen_values_from_p_up_whatever_the_sign_bit() {
        // p = 2^255 - 19 is ed ff .. ff 7f, little-endian.
        let y = |low: u8, top: u8| {
            let mut b = [0xff; 32];
            b[0] = low;
            b[31] = top;
            b
        };
        for sign in [0x00, 0x80] {
            assert!(canonical_y(&y(0xec, 0x7f | sign)), "p - 1");
            for low in 0xed..=0xff {
                assert!(!canonical_y(&y(low, 0x7f | sign)), "p + {}, sign {sign:#x}", low - 0xed);
            }
            assert!(canonical_y(&y(0xff, 0x7e | sign)), "2^255 - 1 - 2^248");
            let mut below = y(0xff, 0x7f | sign);
            below[15] = 0xfe;
            assert!(canonical_y(&below), "2^255 - 1 - 2^120");
            assert!(canonical_y(&y(0xff, sign)), "2^248 - 1");
        }
        assert!(canonical_y(&[0; 32]));
        assert!(canonical_y(SigningKey::from_seed([7; 32]).public().bytes()));
    }

    #[test]
    fn check_sha256_hex_takes_exactly_64_lowercase_hex_digits() {
        let digest = hex(&sha256(b"hola"));
        assert_eq!(check_sha256_hex(&digest, "body_sha256"), Ok(()));
        assert_eq!(check_sha256_hex(&"0123456789abcdef".repeat(4), "x"), Ok(()));
        let refused = [
            digest[..63].to_owned(),
            format!("{digest}0"),
            digest.to_uppercase(),
            format!("A{}", &digest[1..]),
            format!("g{}", &digest[1..]),
            format!("{} ", &digest[..63]),
            String::new(),
            "é".repeat(32),
        ];
        for text in refused {
            let error = check_sha256_hex(&text, "body_sha256").unwrap_err();
            assert_eq!(error, Refusal::BadDigest.because("`body_sha256` must be 64 lowercase hex digits"), "{text:?}");
        }
    }
}
