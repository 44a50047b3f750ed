//! `nyx5 a2a-proof`: a Nyx5 agent calling another house's agent from any A2A client proves who it
//! is inside the A2A message (docs/SPEC.md "A2A gateway"): this signs the call and prints the
//! `metadata` member to put in the message, and with `--contract` the escrow it pays with.

use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Value, obj};
use nyx5_proto::{Address, b64};
use nyx5_rules::a2a::{self, Claim, EXT};

use super::Ctx;
use crate::error::Failure;
use crate::{io, sys};

/// The proof of `message` (A2A 1.0 JSON, `-` for standard input) sent by this agent to `to`,
/// as `{"urn:nyx5:ext:a2a": {from, ts, sig, contract?}}`: the message's `metadata` (merge it
/// with any you have). It signs the parts as the gateway will judge them, so what the agent
/// reads is what was signed; it is good for 5 minutes.
pub(crate) fn proof(ctx: &Ctx, to: &str, message: &str, contract: Option<&str>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let to = Address::parse(to).map_err(|e| Failure::input("the agent called", &e))?;
    let bytes = if message == "-" { io::read_stdin(1 << 20)? } else { message.as_bytes().to_vec() };
    let v = Value::parse(&bytes, 1 << 20).map_err(|e| Failure::input("the A2A message", &e))?;
    let m = a2a::message(Some(&v)).map_err(|e| Failure::input("the A2A message", &e))?;
    let claim =
        Claim { from: me.address.clone(), ts: sys::now()?, sig: String::new(), contract: contract.map(str::to_owned) };
    let sig = me.keys.sig.sign(Context::A2aCall, &a2a::call_document(&m, &claim, &to));
    let mut p = obj([
        ("from", me.address.as_str().into()),
        ("ts", claim.ts.to_rfc3339().into()),
        ("sig", b64::encode(&sig).into()),
    ]);
    if let Some(c) = contract {
        p.insert("contract".into(), c.into());
    }
    Ok(Value::Object(obj([(EXT, Value::Object(p))])))
}

/// What `a2a-proof` prints without `--json`: the member itself, as JSON.
pub(crate) fn proof_human(v: &Value) -> String {
    v.canonical_string()
}
