//! Detached Ed25519 signatures on JSON documents: `{"alg":"Ed25519","kid":"<pub>","value":"<sig>"}`
//! over the canonical bytes of the document without the signature member.
//!
//! Cards, envelopes, quotes, receipts and entries all sign this way; only the member's name
//! differs (`signature`, or `certification` on agent cards). Every signature is made and checked
//! for one [`Context`] (the kind of document), which is part of the signed bytes.

use crate::b64;
use crate::crypto::{Context, SigPublic, SigningKey};
use crate::error::Error;
use crate::json::{Object, Value, canonical_without, field};
use crate::refusal::Refusal;

/// The only signature algorithm of Nyx5/1.
pub const ALG_ED25519: &str = "Ed25519";

/// A parsed signature member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    pub kid: SigPublic,
    pub value: [u8; 64],
}

impl Signature {
    /// Reads the member `name` of `doc`.
    pub fn read(doc: &Object, name: &str) -> Result<Signature, Error> {
        let sig = field::object(doc, name)?;
        let alg = field::str(sig, "alg")?;
        if alg != ALG_ED25519 {
            return Err(Refusal::UnreadableSignature.because(format!("unsupported signature alg {alg:?}")));
        }
        let kid = SigPublic::parse(field::str(sig, "kid")?)?;
        let value = b64::decode_array(field::str(sig, "value")?).ok_or_else(|| {
            Refusal::UnreadableSignature.because(format!("`{name}.value` is not a 64-byte base64url signature"))
        })?;
        Ok(Signature { kid, value })
    }

    pub fn to_value(&self) -> Value {
        let mut o = Object::new();
        o.insert("alg".into(), ALG_ED25519.into());
        o.insert("kid".into(), self.kid.to_b64().into());
        o.insert("value".into(), b64::encode(&self.value).into());
        Value::Object(o)
    }
}

/// Signs `doc` as a document of kind `context` with `key`, setting (or replacing) its member
/// `name`.
pub fn sign_object(doc: &mut Object, name: &str, context: Context, key: &SigningKey) {
    let bytes = canonical_without(doc, name);
    let sig = Signature { kid: key.public(), value: key.sign(context, &bytes) };
    doc.insert(name.to_owned(), sig.to_value());
}

/// Verifies member `name` of `doc` as a signature of kind `context`: its `kid` must satisfy
/// `trusted`, and the signature must verify strictly over the label of `context` and the
/// canonical document without `name`. Returns the signing key.
pub fn verify_object(
    doc: &Object,
    name: &str,
    context: Context,
    trusted: impl Fn(&SigPublic) -> bool,
) -> Result<SigPublic, Error> {
    let framed = context.frame(&canonical_without(doc, name));
    verify_signature(doc, name, &framed, trusted, |kid, framed, value| kid.verify_raw(framed, value))
}

/// [`verify_object`] for a document whose signed message the caller already has: `framed` must
/// be exactly the context's label, a zero byte and [`canonical_without`]`(doc, name)` (see
/// [`Context::frame`]). The signature is checked with `check` (a trusted key's cached decoding:
/// the same answer as [`SigPublic::verify_raw`]).
pub(crate) fn verify_signature(
    doc: &Object,
    name: &str,
    framed: &[u8],
    trusted: impl Fn(&SigPublic) -> bool,
    check: impl Fn(&SigPublic, &[u8], &[u8; 64]) -> bool,
) -> Result<SigPublic, Error> {
    let sig = Signature::read(doc, name)?;
    if !trusted(&sig.kid) {
        return Err(Refusal::UntrustedKey.because(format!("`{name}` made by a key this document does not trust")));
    }
    if !check(&sig.kid, framed, &sig.value) {
        return Err(Refusal::BadSignature.because(format!("`{name}` does not verify")));
    }
    Ok(sig.kid)
}

/// A value that has passed verification. Only this crate's `verify` functions make one.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified<T>(T);

impl<T> Verified<T> {
    pub(crate) fn new(inner: T) -> Self {
        Verified(inner)
    }

    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Verified<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::obj;

    #[test]
    fn signs_canonical_bytes_without_the_member() {
        let key = SigningKey::from_seed([1; 32]);
        let mut doc = obj([("b", 2.into()), ("a", "x".into())]);
        sign_object(&mut doc, "signature", Context::Quote, &key);
        let kid = verify_object(&doc, "signature", Context::Quote, |k| *k == key.public());
        assert_eq!(kid, Ok(key.public()));
        let sig = Signature::read(&doc, "signature").unwrap();
        assert!(key.public().verify(Context::Quote, br#"{"a":"x","b":2}"#, &sig.value));
        assert!(verify_object(&doc, "signature", Context::Receipt, |_| true).is_err(), "another kind");

        doc.insert("b".into(), 3.into());
        assert!(verify_object(&doc, "signature", Context::Quote, |_| true).is_err());
        doc.insert("b".into(), 2.into());
        assert!(verify_object(&doc, "signature", Context::Quote, |_| true).is_ok());
        assert!(verify_object(&doc, "signature", Context::Quote, |_| false).is_err());
        doc.insert("unknown".into(), Value::Null);
        assert!(verify_object(&doc, "signature", Context::Quote, |_| true).is_err());
    }
}
