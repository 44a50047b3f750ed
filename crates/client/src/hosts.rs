//! The hosts file (docs/SPEC.md §6.1): the operator's or the user's overrides of where a domain's
//! estafeta is, each optionally pinning the domain's key. The house and the client read the same
//! format.

use nyx5_proto::crypto::SigPublic;
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Error, Refusal, Value, limits};

/// A `hosts` override: where a domain's estafeta is, and optionally its pinned key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    pub url: String,
    pub sig: Option<SigPublic>,
}

/// Parses the hosts file format used everywhere:
/// `{"<domain>": {"url": "<estafeta base URL>", "sig": "<optional pinned domain key>"}}`.
pub fn parse_hosts(text: &str) -> Result<VecMap<String, HostEntry>, Error> {
    let v = Value::parse(text.as_bytes(), limits::MAX_DOCUMENT_BYTES)?;
    let o = v.as_object().ok_or_else(|| Refusal::BadConfig.because("hosts must be a JSON object"))?;
    let mut out = VecMap::new();
    for (domain, entry) in o {
        nyx5_proto::address::check_domain(domain)
            .map_err(|why| Refusal::BadConfig.because(format!("hosts: {domain}: {why}")))?;
        let e = entry
            .as_object()
            .ok_or_else(|| Refusal::BadConfig.because(format!("hosts: {domain} must be an object")))?;
        let url = nyx5_proto::json::field::str(e, "url")?.trim_end_matches('/').to_owned();
        let sig = nyx5_proto::json::field::opt_str(e, "sig")?.map(SigPublic::parse).transpose()?;
        out.insert(domain.clone(), HostEntry { url, sig });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use nyx5_proto::crypto::SigningKey;

    use super::*;

    #[test]
    fn hosts_file() {
        let key = SigningKey::from_seed([1; 32]).public().to_b64();
        let h = parse_hosts(&format!(
            r#"{{"b.test":{{"url":"http://127.0.0.1:8788/"}},"c.test":{{"url":"http://c","sig":"{key}"}}}}"#
        ))
        .unwrap();
        assert_eq!(h["b.test"].url, "http://127.0.0.1:8788");
        assert!(h["c.test"].sig.is_some());
        assert!(parse_hosts(r#"{"B.test":{"url":"x"}}"#).is_err());
    }
}
