//! Agent authentication (spec §8): `Authorization: Nyx5 <token>.<sig>`.
//!
//! `token` is base64url of the canonical JSON of
//! `{address, ts, nonce, method, path, query, host, body}`; `sig` is base64url of the agent's
//! token signature ([`Context::Token`]) over those canonical bytes (the decoded token, which must
//! itself be canonical). A token is good for [`limits::AUTH_WINDOW_MS`] either side of `ts`, for
//! one method, one path and query, one house and one body (its SHA-256), so a leaked token cannot
//! carry another request. Whether the nonce was seen before is the house's to decide:
//! verification hands back a [`NonceClaim`] the house must consume. Which of the card's keys may
//! sign is the caller's choice ([`Keys`]).

use crate::address::Address;
use crate::b64;
use crate::card::AgentCard;
use crate::crypto::{Context, SigningKey, hex, sha256};
use crate::error::Error;
use crate::json::{Object, Value, field, obj};
use crate::limits;
use crate::refusal::Refusal;
use crate::sign::Verified;
use crate::time::Timestamp;

/// The authorization scheme name.
pub const SCHEME: &str = "Nyx5";

/// A token that cannot be read (401 `bad_token`).
fn refuse(reason: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Refusal::BadToken.because(reason)
}

/// The members of a token, in no particular order (the token is canonical JSON).
const MEMBERS: [&str; 8] = ["address", "body", "host", "method", "nonce", "path", "query", "ts"];

/// The request a token is (or must be) bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Upper-case HTTP method.
    pub method: String,
    /// The path without query string, e.g. `/mailbox/ana`.
    pub path: String,
    /// The query string as sent, without `?` (empty when there is none).
    pub query: String,
    /// The house's host as the client addressed it (`host[:port]`, lower case).
    pub host: String,
    /// Lower-case hex SHA-256 of the request body (of no bytes when there is none).
    pub body: String,
}

impl Target {
    /// The request `method path?query` to `host` carrying `body`.
    pub fn new(method: &str, path: &str, query: &str, host: &str, body: &[u8]) -> Target {
        Target {
            method: method.to_ascii_uppercase(),
            path: path.to_owned(),
            query: query.to_owned(),
            host: host.to_ascii_lowercase(),
            body: hex(&sha256(body)),
        }
    }
}

/// Which of a card's keys may sign a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// Only the current key: everything that changes the agent's card, lists, webhook,
    /// delegations or money, and every send.
    Current,
    /// The current key or a previous key still in its grace period: reading and acknowledging
    /// the mailbox, so mail sealed to the old keys can still be collected.
    CurrentOrGrace,
}

/// The signed claims of a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub address: Address,
    pub ts: Timestamp,
    pub nonce: String,
    pub target: Target,
}

impl Claims {
    fn to_object(&self) -> Object {
        obj([
            ("address", self.address.as_str().into()),
            ("ts", self.ts.to_rfc3339().into()),
            ("nonce", self.nonce.as_str().into()),
            ("method", self.target.method.as_str().into()),
            ("path", self.target.path.as_str().into()),
            ("query", self.target.query.as_str().into()),
            ("host", self.target.host.as_str().into()),
            ("body", self.target.body.as_str().into()),
        ])
    }

    /// Builds the header value `Nyx5 <token>.<sig>`. `nonce` should be at least 16 random
    /// bytes in base64url.
    pub fn sign(&self, key: &SigningKey) -> String {
        let bytes = Value::Object(self.to_object()).canonical();
        format!("{SCHEME} {}.{}", b64::encode(&bytes), b64::encode(&key.sign(Context::Token, &bytes)))
    }
}

/// A parsed, not yet verified, `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthHeader {
    pub claims: Claims,
    token: Vec<u8>,
    sig: [u8; 64],
}

/// A nonce the house must record as used (until `keep_until`) before trusting the request.
#[must_use = "a token's nonce must be consumed (stored as used) or replays get through"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceClaim {
    pub address: Address,
    pub nonce: String,
    /// After this instant the token is outside its window and the nonce may be forgotten.
    pub keep_until: Timestamp,
}

impl AuthHeader {
    /// Parses `Nyx5 <token>.<sig>`; refuses anything else with 401.
    pub fn parse(header: &str) -> Result<AuthHeader, Error> {
        if header.len() > limits::MAX_HEADER_LEN {
            return Err(refuse("Authorization header too long"));
        }
        let rest = header
            .strip_prefix(SCHEME)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or_else(|| refuse("Authorization must use the Nyx5 scheme"))?;
        let (token_b64, sig_b64) = rest.trim().split_once('.').ok_or_else(|| refuse("token must be <token>.<sig>"))?;
        let token = b64::decode(token_b64).ok_or_else(|| refuse("token is not base64url"))?;
        let sig = b64::decode_array(sig_b64).ok_or_else(|| refuse("token signature is not 64 bytes of base64url"))?;
        let doc = match Value::parse(&token, limits::MAX_HEADER_LEN) {
            Ok(Value::Object(o)) => o,
            _ => return Err(refuse("token is not a JSON object")),
        };
        if doc.len() != MEMBERS.len() || !MEMBERS.iter().all(|m| doc.contains_key(*m)) {
            return Err(refuse("token must hold exactly address, ts, nonce, method, path, query, host, body"));
        }
        let s = |name: &str| field::str(&doc, name).map_err(|e| refuse(e.reason));
        let nonce = s("nonce")?.to_owned();
        if nonce.len() < limits::MIN_NONCE_LEN || nonce.len() > limits::MAX_NONCE_LEN {
            return Err(refuse("token nonce must be 16 to 64 characters"));
        }
        let claims = Claims {
            address: Address::parse(s("address")?).map_err(|e| refuse(e.reason))?,
            ts: Timestamp::parse(s("ts")?).map_err(|e| refuse(e.reason))?,
            nonce,
            target: Target {
                method: s("method")?.to_owned(),
                path: s("path")?.to_owned(),
                query: s("query")?.to_owned(),
                host: s("host")?.to_owned(),
                body: s("body")?.to_owned(),
            },
        };
        if Value::Object(doc).canonical() != token {
            return Err(refuse("token is not in canonical form"));
        }
        Ok(AuthHeader { claims, token, sig })
    }

    /// Verifies the token against the agent's verified card, the request it arrived with and
    /// the house clock, signed by one of `keys`. The caller must then consume the returned nonce.
    pub fn verify(
        &self,
        card: &Verified<AgentCard>,
        request: &Target,
        keys: Keys,
        now: Timestamp,
    ) -> Result<NonceClaim, Error> {
        let c = &self.claims;
        if card.address() != c.address {
            return Err(Refusal::TokenForAnotherRequest.because("token is for another address"));
        }
        if (now.millis() - c.ts.millis()).abs() > limits::AUTH_WINDOW_MS {
            return Err(Refusal::TokenExpired.because("token is outside its 5-minute window"));
        }
        if c.target.method != request.method || c.target.path != request.path || c.target.query != request.query {
            return Err(Refusal::TokenForAnotherRequest.because("token is bound to another method, path or query"));
        }
        if c.target.host != request.host {
            return Err(Refusal::TokenForAnotherRequest.because("token is bound to another house"));
        }
        if c.target.body != request.body {
            return Err(Refusal::TokenForAnotherRequest.because("token is bound to another body"));
        }
        // The token names no kid: the card's current key, or (when `keys` allows) a previous key
        // in its grace period.
        let grace = card.previous().iter().filter(|p| keys == Keys::CurrentOrGrace && now < p.until).map(|p| &p.sig);
        if !std::iter::once(&card.sig()).chain(grace).any(|k| k.verify(Context::Token, &self.token, &self.sig)) {
            // A replaced key still in its grace, where only the current key will do: the agent
            // is known, the act is not allowed (403), and the reason says why.
            if keys == Keys::Current
                && card.previous().iter().any(|p| now < p.until && p.sig.verify(Context::Token, &self.token, &self.sig))
            {
                return Err(Refusal::NeedsCurrentKey.because(format!(
                    "this request needs the current key of {}; a previous key may only read and ack the mailbox",
                    c.address
                )));
            }
            return Err(Refusal::TokenSignatureInvalid.because("token signature does not verify"));
        }
        Ok(NonceClaim {
            address: c.address.clone(),
            nonce: c.nonce.clone(),
            keep_until: c.ts.plus_ms(limits::AUTH_WINDOW_MS),
        })
    }
}
