//! Ed25519's equation on workerd's own verifier (BoringSSL, reached synchronously through
//! `node:crypto`: `nodejs_compat` in wrangler.toml), about twice as fast as the curve arithmetic
//! compiled to wasm. The rules stay in Rust (`nyx5_proto::crypto::set_native_verify` says which,
//! and asks the verifier known answers before it takes it); this module only makes the call.

use std::cell::{Cell, RefCell};

use js_sys::{Array, Function, Object, Reflect, Uint8Array};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::obj;
use nyx5_proto::{Error, ErrorKind, Value};
use wasm_bindgen::{JsCast, JsValue};

thread_local! {
    /// `node:crypto`'s `createPublicKey` and `verify`, once found.
    static NODE: RefCell<Option<(Function, Function)>> = const { RefCell::new(None) };
    /// Signatures workerd verified (the self-test route reports it).
    static ANSWERED: Cell<u64> = const { Cell::new(0) };
}

/// Looks for workerd's verifier and hands it the equation if it gives proto's known answers
/// (`set_native_verify`). Once per isolate, at start; without `node:crypto`, or if an answer is
/// wrong, verification stays in Rust.
pub(crate) fn install() {
    let Some(found) = node_crypto() else {
        worker::console_warn!("nyx5: node:crypto is not available (nodejs_compat); Ed25519 verifies in wasm");
        return;
    };
    NODE.with(|n| *n.borrow_mut() = Some(found));
    match nyx5_proto::crypto::set_native_verify(native_verify) {
        Ok(()) => ANSWERED.with(|a| a.set(0)),
        Err(why) => {
            NODE.with(|n| *n.borrow_mut() = None);
            worker::console_warn!("nyx5: workerd's Ed25519 is not used ({why}); Ed25519 verifies in wasm");
        }
    }
}

/// How many signatures workerd's verifier has answered in this isolate; `None` when it is not
/// in use.
pub(crate) fn answered() -> Option<u64> {
    NODE.with(|n| n.borrow().is_some()).then(|| ANSWERED.with(Cell::get))
}

/// `process.getBuiltinModule("node:crypto")`'s `createPublicKey` and `verify`.
fn node_crypto() -> Option<(Function, Function)> {
    let process = Reflect::get(&js_sys::global(), &"process".into()).ok()?;
    let get: Function = Reflect::get(&process, &"getBuiltinModule".into()).ok()?.dyn_into().ok()?;
    let crypto = get.call1(&process, &"node:crypto".into()).ok()?;
    let create = Reflect::get(&crypto, &"createPublicKey".into()).ok()?.dyn_into().ok()?;
    let verify = Reflect::get(&crypto, &"verify".into()).ok()?.dyn_into().ok()?;
    Some((create, verify))
}

/// `crypto.verify(null, message, createPublicKey({key: jwk, format: "jwk"}), signature)`;
/// `None` when anything throws (the key is not a point, say): Rust then answers.
fn native_verify(key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> Option<bool> {
    NODE.with(|n| {
        let node = n.borrow();
        let (create, verify) = node.as_ref()?;
        let jwk = Object::new();
        Reflect::set(&jwk, &"kty".into(), &"OKP".into()).ok()?;
        Reflect::set(&jwk, &"crv".into(), &"Ed25519".into()).ok()?;
        Reflect::set(&jwk, &"x".into(), &SigPublic::from_bytes(*key).to_b64().into()).ok()?;
        let spec = Object::new();
        Reflect::set(&spec, &"key".into(), &jwk).ok()?;
        Reflect::set(&spec, &"format".into(), &"jwk".into()).ok()?;
        let public = create.call1(&JsValue::NULL, &spec).ok()?;
        let args = Array::of4(&JsValue::NULL, &Uint8Array::from(message), &public, &Uint8Array::from(&signature[..]));
        let answer = verify.apply(&JsValue::NULL, &args).ok()?.as_bool()?;
        ANSWERED.with(|a| a.set(a.get().saturating_add(1)));
        Some(answer)
    })
}

/// The self-test's bounds: the body, and the signatures verified for one request.
pub(crate) const SELFTEST_MAX_BYTES: usize = 4 << 20;
const SELFTEST_MAX_CASES: usize = 5_000;

/// `POST /_selftest/ed25519` (only with `NYX5_SELFTEST=on`, only from loopback): verifies each
/// `[key, message, signature]` of the JSON array in the body (base64url) as the house does, so
/// tests/e2e/ed25519_workerd.mjs can hold workerd's answers to the standard vectors. Answers
/// `{"native": n | null, "answers": [true | false | null, …]}` (`null`: not a 32-byte key or a
/// 64-byte signature; `n`: signatures workerd has verified so far, `null` when not in use).
pub(crate) fn selftest(body: &[u8]) -> Result<String, Error> {
    let cases = Value::parse(body, SELFTEST_MAX_BYTES)?;
    let cases = cases.as_array().ok_or_else(|| Error::malformed("the body is not an array"))?;
    if cases.len() > SELFTEST_MAX_CASES {
        return Err(Error::new(ErrorKind::TooLarge, format!("at most {SELFTEST_MAX_CASES} cases")));
    }
    let answers = cases
        .iter()
        .map(|case| {
            let field = |i: usize| case.as_array().and_then(|c| c.get(i)).and_then(Value::as_str);
            let key = nyx5_proto::b64::decode_array::<32>(field(0)?)?;
            let message = nyx5_proto::b64::decode(field(1)?)?;
            let signature = nyx5_proto::b64::decode_array::<64>(field(2)?)?;
            Some(SigPublic::from_bytes(key).verify_raw(&message, &signature))
        })
        .map(|answer| answer.map_or(Value::Null, Value::from))
        .collect();
    let native = answered().map_or(Value::Null, |n| Value::from(i64::try_from(n).unwrap_or(i64::MAX)));
    Ok(Value::Object(obj([("native", native), ("answers", Value::Array(answers))])).canonical_string())
}
