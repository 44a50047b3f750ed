//! What proves the agent to its house: the signed registration body (docs/SPEC.md §8b) and the
//! `Authorization` header of one request (spec §8).

use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Object, Value};
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Address, Error, Refusal, Timestamp, b64};

use crate::util::{OsRandom, about, address, object};

/// The signed body of `POST /agents`, as `nyx5 register` makes it: `extra` (`capabilities`,
/// `inbox`, `invite`, `valid_until`, `webhook`, `delegation` … as docs/SPEC.md §8b names them)
/// plus `local`, `sig`, `enc` and `ts`, signed by `keys` as a registration (proof of
/// possession).
pub(crate) fn registration_body(keys: &str, local: &str, extra_json: &str, now: Timestamp) -> Result<Value, Error> {
    let keys = crate::keys::parse(keys)?;
    // A local part is checked as the local part of an address.
    let local = address(&format!("{}@example.org", local.trim()), "local")?.local().to_owned();
    let mut extra: Object = match extra_json.trim() {
        "" => Object::new(),
        text => object(text, "extra")?,
    };
    extra.insert("local".into(), local.into());
    extra.insert("sig".into(), keys.sig_public().to_b64().into());
    extra.insert("enc".into(), keys.enc_public().to_b64().into());
    extra.insert("ts".into(), now.to_rfc3339().into());
    sign_object(&mut extra, "signature", Context::Registration, &keys.sig);
    Ok(Value::Object(extra))
}

/// The target of one request, checked: `path` without its query, `query` without `?` (one
/// leading `?` is dropped), a host.
fn target(method: &str, path: &str, query: &str, host: &str, body: &[u8]) -> Result<Target, Error> {
    let method = method.trim();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(Refusal::BadInput.because(format!("method {method:?} is not an HTTP method")));
    }
    if !path.starts_with('/') || path.contains(['?', '#']) {
        return Err(Refusal::BadInput
            .because(format!("path {path:?} must start with / and hold no query (the query is its own argument)")));
    }
    let query = query.strip_prefix('?').unwrap_or(query);
    let host = host.trim();
    if host.is_empty() || host.contains(['/', '?', '#', ' ', '@']) {
        return Err(Refusal::BadInput.because(format!("host {host:?} must be the house's host[:port]")));
    }
    Ok(Target::new(method, path, query, host, body))
}

/// `Nyx5 <token>.<sig>` for one request, with a fresh 16-byte nonce, as `nyx5` makes it.
#[allow(clippy::too_many_arguments)] // the request's parts, as the browser has them
pub(crate) fn token(
    keys: &str,
    address_text: &str,
    method: &str,
    path: &str,
    query: &str,
    host: &str,
    body: &[u8],
    now: Timestamp,
) -> Result<String, Error> {
    let keys = crate::keys::parse(keys)?;
    let address: Address = address(address_text, "address")?;
    let target = target(method, path, query, host, body).map_err(about("token"))?;
    let mut rng = OsRandom::default();
    let nonce: [u8; 16] = rng.bytes();
    rng.check()?;
    Ok(Claims { address, ts: now, nonce: b64::encode(&nonce), target }.sign(&keys.sig))
}
