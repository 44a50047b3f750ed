//! JSON Web Signatures (RFC 7515, flattened and detached) by an Ed25519 key, as A2A signs its
//! agent cards (A2A 1.0 §8.4: JWS over the RFC 8785 form of the card without `signatures`).
//!
//! **Kinds of document.** Every other signature a Nyx5 key makes covers a label, a zero byte and
//! the message ([`crate::crypto::Context`]). A JWS covers `BASE64URL(header) "." BASE64URL(payload)`
//! instead, as RFC 7515 §5.1 fixes, so that standard tooling verifies it: those are base64url
//! characters and one dot, with no space and no zero byte, so no labelled Nyx5 message is ever a
//! JWS signing input and no JWS signing input is a labelled message. What kind of document a JWS
//! is, its protected header says (`typ`, and our `nyx5` member), under the signature.

use crate::b64;
use crate::crypto::{SigPublic, SigningKey};
use crate::json::{Object, Value, obj};

/// A flattened JWS whose payload travels apart (RFC 7515 §7.2.2 and Appendix F): the protected
/// header and the signature, both base64url.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    pub protected: String,
    pub signature: String,
}

/// The protected header of an EdDSA signature by `key`: `alg`, `kid` (the key, base64url, as a
/// Nyx5 `kid`), `typ` and what the document is (`nyx5`), and `jku` when given.
pub fn header(key: &SigPublic, kind: &str, jku: Option<&str>) -> Object {
    let mut h =
        obj([("alg", "EdDSA".into()), ("kid", key.to_b64().into()), ("typ", "JOSE".into()), ("nyx5", kind.into())]);
    if let Some(url) = jku {
        h.insert("jku".into(), url.into());
    }
    h
}

/// The bytes a JWS signs: `BASE64URL(protected) "." BASE64URL(payload)`.
fn signing_input(protected_b64: &str, payload: &[u8]) -> Vec<u8> {
    let mut input = protected_b64.as_bytes().to_vec();
    input.push(b'.');
    input.extend_from_slice(b64::encode(payload).as_bytes());
    input
}

/// Signs `payload` under the protected `header` (its canonical JSON) with `key`.
pub fn sign_detached(key: &SigningKey, header: &Object, payload: &[u8]) -> Detached {
    let protected = b64::encode(&Value::Object(header.clone()).canonical());
    let signature = key.sign_raw(&signing_input(&protected, payload));
    Detached { protected, signature: b64::encode(&signature) }
}

/// Checks a detached JWS over `payload` by `key`: the header must name `EdDSA` and `key` as
/// `kid`, and the signature verify. Answers the protected header.
pub fn verify_detached(key: &SigPublic, jws: &Detached, payload: &[u8]) -> Option<Object> {
    let header = b64::decode(&jws.protected)?;
    let header = Value::parse(&header, 4096).ok()?;
    let header = header.as_object()?.clone();
    if header.get("alg").and_then(Value::as_str) != Some("EdDSA")
        || header.get("kid").and_then(Value::as_str) != Some(key.to_b64().as_str())
    {
        return None;
    }
    let signature: [u8; 64] = b64::decode_array(&jws.signature)?;
    key.verify_raw(&signing_input(&jws.protected, payload), &signature).then_some(header)
}

/// The public JWK (RFC 8037) of an Ed25519 key: `{kty: OKP, crv: Ed25519, x, kid, alg, use}`.
pub fn jwk(key: &SigPublic) -> Value {
    Value::Object(obj([
        ("kty", "OKP".into()),
        ("crv", "Ed25519".into()),
        ("x", key.to_b64().into()),
        ("kid", key.to_b64().into()),
        ("alg", "EdDSA".into()),
        ("use", "sig".into()),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8037 Appendix A.4: the Ed25519 JWS of "Example of Ed25519 signing" by the key of A.1,
    /// with the protected header `{"alg":"EdDSA"}`; our signing input is built the same way.
    #[test]
    fn rfc8037_example_signature() {
        let seed = b64::decode_array::<32>("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A").unwrap();
        let key = SigningKey::from_seed(seed);
        assert_eq!(key.public().to_b64(), "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
        let protected = "eyJhbGciOiJFZERTQSJ9";
        let input = signing_input(protected, b"Example of Ed25519 signing");
        assert_eq!(
            String::from_utf8(input.clone()).unwrap(),
            "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc"
        );
        assert_eq!(
            b64::encode(&key.sign_raw(&input)),
            "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
        );
    }

    #[test]
    fn a_detached_signature_verifies_only_over_its_payload_and_key() {
        let key = SigningKey::from_seed([7; 32]);
        let other = SigningKey::from_seed([8; 32]);
        let h = header(&key.public(), "a2a-card", Some("https://h.test/.well-known/jwks.json"));
        let jws = sign_detached(&key, &h, b"{\"name\":\"x\"}");
        let got = verify_detached(&key.public(), &jws, b"{\"name\":\"x\"}").unwrap();
        assert_eq!(got.get("nyx5").and_then(Value::as_str), Some("a2a-card"));
        assert!(verify_detached(&key.public(), &jws, b"{\"name\":\"y\"}").is_none());
        assert!(verify_detached(&other.public(), &jws, b"{\"name\":\"x\"}").is_none());
        // The signing input is base64url and one dot: never a labelled Nyx5 message.
        let input = signing_input(&jws.protected, b"{}");
        assert!(input.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_' || *b == b'.'));
    }
}
