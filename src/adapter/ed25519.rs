//! Ed25519 on workerd's own implementation (BoringSSL, reached synchronously through
//! `node:crypto`: `nodejs_compat` in wrangler.toml): the verifier's equation, about twice as fast
//! as the curve arithmetic compiled to wasm, and signing, which in wasm has no precomputed tables
//! (crates/proto/Cargo.toml). The rules stay in Rust (`nyx5_proto::crypto::set_native_verify` and
//! `set_native_sign` say which, and ask known answers before they take either); this module only
//! makes the calls.

use std::cell::{Cell, RefCell};

use js_sys::{Array, Function, Object, Reflect, Uint8Array};
use nyx5_proto::crypto::{SigPublic, SigningKey};
use nyx5_proto::json::obj;
use nyx5_proto::{Error, Refusal, Value};
use wasm_bindgen::{JsCast, JsValue};
use zeroize::Zeroizing;

/// What this module uses of `node:crypto`.
struct Node {
    create_public: Function,
    verify: Function,
    create_private: Function,
    sign: Function,
}

/// Most private keys kept as `node:crypto` key objects: the house signs with its domain key, and
/// with a previous one only while a rotation is handed over.
const KEYS_KEPT: usize = 4;

thread_local! {
    /// `node:crypto`, once found.
    static NODE: RefCell<Option<Node>> = const { RefCell::new(None) };
    /// Signatures workerd verified, and made (the self-test route reports them).
    static ANSWERED: Cell<u64> = const { Cell::new(0) };
    static SIGNED: Cell<u64> = const { Cell::new(0) };
    /// Private keys as key objects, by public key, so each is imported once per isolate.
    static KEYS: RefCell<Vec<([u8; 32], JsValue)>> = const { RefCell::new(Vec::new()) };
}

/// Looks for workerd's Ed25519 and hands it the verifier's equation, and signing, each if it
/// gives proto's known answers (`set_native_verify`, `set_native_sign`). Once per isolate, at
/// start; without `node:crypto`, or where an answer is wrong, that part stays in Rust.
pub(crate) fn install() {
    let Some(found) = node_crypto() else {
        worker::console_warn!("nyx5: node:crypto is not available (nodejs_compat); Ed25519 runs in wasm");
        return;
    };
    NODE.with(|n| *n.borrow_mut() = Some(found));
    let verifies = nyx5_proto::crypto::set_native_verify(native_verify);
    let signs = nyx5_proto::crypto::set_native_sign(native_sign);
    ANSWERED.with(|a| a.set(0));
    SIGNED.with(|s| s.set(0));
    for (what, result) in [("verifies", &verifies), ("signs", &signs)] {
        if let Err(why) = result {
            worker::console_warn!("nyx5: workerd's Ed25519 is not used ({why}); Ed25519 {what} in wasm");
        }
    }
    if verifies.is_err() && signs.is_err() {
        NODE.with(|n| *n.borrow_mut() = None);
    }
}

/// How many signatures workerd has verified, and made, in this isolate; `None` when it is not
/// in use.
pub(crate) fn answered() -> Option<(u64, u64)> {
    NODE.with(|n| n.borrow().is_some()).then(|| (ANSWERED.with(Cell::get), SIGNED.with(Cell::get)))
}

/// `process.getBuiltinModule("node:crypto")`'s `createPublicKey`, `verify`, `createPrivateKey`
/// and `sign`.
fn node_crypto() -> Option<Node> {
    let process = Reflect::get(&js_sys::global(), &"process".into()).ok()?;
    let get: Function = Reflect::get(&process, &"getBuiltinModule".into()).ok()?.dyn_into().ok()?;
    let crypto = get.call1(&process, &"node:crypto".into()).ok()?;
    let function = |name: &str| -> Option<Function> { Reflect::get(&crypto, &name.into()).ok()?.dyn_into().ok() };
    Some(Node {
        create_public: function("createPublicKey")?,
        verify: function("verify")?,
        create_private: function("createPrivateKey")?,
        sign: function("sign")?,
    })
}

/// `{key: {kty: "OKP", crv: "Ed25519", x}, format: "jwk"}`, `x` in base64url.
fn public_jwk(public: &[u8; 32]) -> Option<JsValue> {
    let jwk = Object::new();
    Reflect::set(&jwk, &"kty".into(), &"OKP".into()).ok()?;
    Reflect::set(&jwk, &"crv".into(), &"Ed25519".into()).ok()?;
    Reflect::set(&jwk, &"x".into(), &nyx5_proto::b64::encode(public).into()).ok()?;
    let spec = Object::new();
    Reflect::set(&spec, &"key".into(), &jwk).ok()?;
    Reflect::set(&spec, &"format".into(), &"jwk".into()).ok()?;
    Some(spec.into())
}

/// RFC 8410's PKCS#8 encoding of an Ed25519 private key, before its 32-byte seed.
const PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// The private key as a `node:crypto` key object, imported from PKCS#8 bytes that are wiped on
/// both sides once read (a JWK would have put the seed in a JavaScript string, which nothing
/// can wipe).
fn import_private(node: &Node, seed: &dyn Fn(&mut [u8; 32])) -> Option<JsValue> {
    let mut der = Zeroizing::new([0u8; 48]);
    let (prefix, rest) = der.split_at_mut(PKCS8_PREFIX.len());
    prefix.copy_from_slice(&PKCS8_PREFIX);
    let mut key = Zeroizing::new([0u8; 32]);
    seed(&mut key);
    rest.copy_from_slice(&key[..]);
    let bytes = Uint8Array::from(&der[..]);
    let spec = Object::new();
    let imported = (|| {
        Reflect::set(&spec, &"key".into(), &bytes).ok()?;
        Reflect::set(&spec, &"format".into(), &"der".into()).ok()?;
        Reflect::set(&spec, &"type".into(), &"pkcs8".into()).ok()?;
        node.create_private.call1(&JsValue::NULL, &spec).ok()
    })();
    bytes.fill(0, 0, bytes.length());
    imported
}

/// `crypto.sign(null, message, privateKey)`; `None` when anything throws or the answer is not 64
/// bytes: Rust then signs. Each key is imported once and kept; its first signature is verified
/// (workerd's verifier), and a key whose first signature fails is dropped and never used.
fn native_sign(public: &[u8; 32], seed: &dyn Fn(&mut [u8; 32]), message: &[u8]) -> Option<[u8; 64]> {
    NODE.with(|n| {
        let node = n.borrow();
        let node = node.as_ref()?;
        let kept = KEYS.with(|k| k.borrow().iter().find(|(p, _)| p == public).map(|(_, key)| key.clone()));
        let (key, new) = match kept {
            Some(key) => (key, false),
            None => (import_private(node, seed)?, true),
        };
        let args = Array::of3(&JsValue::NULL, &Uint8Array::from(message), &key);
        let answer: Uint8Array = node.sign.apply(&JsValue::NULL, &args).ok()?.dyn_into().ok()?;
        let mut signature = [0u8; 64];
        if answer.length() as usize != signature.len() {
            return None;
        }
        answer.copy_to(&mut signature);
        if new {
            let verifier = node.create_public.call1(&JsValue::NULL, &public_jwk(public)?).ok()?;
            let args = Array::of4(&JsValue::NULL, &Uint8Array::from(message), &verifier, &answer);
            if node.verify.apply(&JsValue::NULL, &args).ok()?.as_bool() != Some(true) {
                return None;
            }
            KEYS.with(|k| {
                let mut keys = k.borrow_mut();
                if keys.len() >= KEYS_KEPT {
                    keys.remove(0);
                }
                keys.push((*public, key));
            });
        }
        SIGNED.with(|s| s.set(s.get().saturating_add(1)));
        Some(signature)
    })
}

/// `crypto.verify(null, message, createPublicKey({key: jwk, format: "jwk"}), signature)`;
/// `None` when anything throws (the key is not a point, say): Rust then answers.
fn native_verify(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> Option<bool> {
    NODE.with(|n| {
        let node = n.borrow();
        let node = node.as_ref()?;
        let public = node.create_public.call1(&JsValue::NULL, &public_jwk(key)?).ok()?;
        let args = Array::of4(&JsValue::NULL, &Uint8Array::from(message), &public, &Uint8Array::from(&signature[..]));
        let answer = node.verify.apply(&JsValue::NULL, &args).ok()?.as_bool()?;
        ANSWERED.with(|a| a.set(a.get().saturating_add(1)));
        Some(answer)
    })
}

/// The self-test's bounds: the body, and the signatures verified for one request.
pub(crate) const SELFTEST_MAX_BYTES: usize = 4 << 20;
const SELFTEST_MAX_CASES: usize = 5_000;

/// `POST /_selftest/ed25519` (only with `NYX5_SELFTEST=on`, only from loopback): for each case of
/// the JSON array in the body (base64url), verifies `[key, message, signature]`, or signs
/// `[seed, message]`, as the house does, so tests/e2e/ed25519_workerd.mjs can hold workerd's
/// answers to the standard vectors. Answers `{"native": n | null, "signed": m | null, "answers":
/// [true | false | "<signature>" | null, …]}` (`null`: a case of neither shape; `n`, `m`: the
/// signatures workerd has verified and made so far, `null` when it is not in use).
pub(crate) fn selftest(body: &[u8]) -> Result<String, Error> {
    let cases = Value::parse(body, SELFTEST_MAX_BYTES)?;
    let cases = cases.as_array().ok_or_else(|| Refusal::BadSelftest.because("the body is not an array"))?;
    if cases.len() > SELFTEST_MAX_CASES {
        return Err(Refusal::TooManyCases.because(format!("at most {SELFTEST_MAX_CASES} cases")));
    }
    // The last signing key, kept while the seed repeats, as the house keeps its own: deriving
    // one costs a multiplication in wasm, which would hide what a signature costs.
    let mut signer: Option<([u8; 32], SigningKey)> = None;
    let answers = cases
        .iter()
        .map(|case| {
            let case = case.as_array()?;
            let field = |i: usize| case.get(i).and_then(Value::as_str);
            let key = nyx5_proto::b64::decode_array::<32>(field(0)?)?;
            let message = nyx5_proto::b64::decode(field(1)?)?;
            if case.len() == 2 {
                if signer.as_ref().is_none_or(|(seed, _)| *seed != key) {
                    signer = Some((key, SigningKey::from_seed(key)));
                }
                let signature = signer.as_ref().map(|(_, k)| k.sign_raw(&message))?;
                return Some(Value::from(nyx5_proto::b64::encode(&signature)));
            }
            let signature = nyx5_proto::b64::decode_array::<64>(field(2)?)?;
            Some(Value::from(SigPublic::from_bytes(key).verify_raw(&message, &signature)))
        })
        .map(|answer| answer.unwrap_or(Value::Null))
        .collect();
    let count = |n: u64| Value::from(i64::try_from(n).unwrap_or(i64::MAX));
    let (native, signed) = answered().map_or((Value::Null, Value::Null), |(v, s)| (count(v), count(s)));
    let answer = obj([("native", native), ("signed", signed), ("answers", Value::Array(answers))]);
    Ok(Value::Object(answer).canonical_string())
}
