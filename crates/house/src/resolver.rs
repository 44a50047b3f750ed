//! The resolver (spec §2): from a domain or an address to a verified card.
//!
//! A domain's estafeta is found, in order, through the `hosts` override (which may pin the key),
//! the DNS TXT record `_nyx5.<domain>` read over DNS-over-HTTPS (its `sig` is the anchor), or
//! the well-known URL of the domain itself. Without an anchor the first key seen is pinned
//! (TOFU, table `pins`); a later change is refused until the operator confirms it.
//!
//! Verified cards are cached for [`limits::CARD_CACHE_MS`] twice over: in this process (trusted
//! as verified, no signature checked again) and in `card_cache` (the canonical text; re-parsed
//! and re-verified when read, since only `verify` makes a `Verified` card).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nyx5_proto::address::check_domain;
use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::json::field;
use nyx5_proto::sign::Signature;
use nyx5_proto::{Address, Error, ErrorKind, Timestamp, Value, Verified, limits};

use crate::mailbox::PolicyMemo;
use crate::ports::{Db, Net, OutRequest, PortError};
use crate::{House, port_error, store};

/// Most delegation levels followed when resolving a remote subagent's parents.
pub const MAX_DELEGATION_DEPTH: usize = 8;
/// Most cards of each kind kept in the in-process cache.
pub const MEMO_MAX_ENTRIES: usize = 1024;
/// The DNS name prefix of a domain's TXT record.
pub const DNS_PREFIX: &str = "_nyx5.";
/// The version tag a TXT record starts with.
pub const DNS_TAG: &str = "nyx51";
/// The DNS type number of TXT records.
const DNS_TYPE_TXT: i64 = 16;

/// A resolved domain: where its estafeta answers, and its verified card (shared with the cache).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub url: String,
    pub card: Arc<Verified<DomainCard>>,
}

/// A `_nyx5.<domain>` TXT record: `v=nyx51; url=<estafeta>; sig=<domain key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsRecord {
    pub url: String,
    pub sig: Option<SigPublic>,
}

/// Joins the character-strings of a TXT record's presentation form (`"a" "b"` → `ab`); text
/// without quotes is taken as it is.
pub fn join_txt(data: &str) -> String {
    let data = data.trim();
    if !data.starts_with('"') {
        return data.to_owned();
    }
    let mut out = String::with_capacity(data.len());
    let mut chars = data.chars();
    let mut inside = false;
    while let Some(c) = chars.next() {
        match (inside, c) {
            (false, '"') => inside = true,
            (false, _) => {}
            (true, '"') => inside = false,
            (true, '\\') => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            (true, _) => out.push(c),
        }
    }
    out
}

/// Parses the text of a TXT record. `Ok(None)` when it is not a Nyx5 record (another `v=`);
/// unknown parameters are ignored; `url` must be http(s); a bad `sig` is refused (403).
pub fn parse_txt(txt: &str) -> Result<Option<DnsRecord>, Error> {
    let bad = |why: &str| Error::forbidden(format!("bad {DNS_PREFIX} TXT record: {why}"));
    let mut params = BTreeMap::new();
    for part in txt.split(';') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, value) = part.split_once('=').ok_or_else(|| bad("parameters are name=value"))?;
        if params.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned()).is_some() {
            return Err(bad("repeated parameter"));
        }
    }
    if params.get("v").map(String::as_str) != Some(DNS_TAG) {
        return Ok(None);
    }
    let url = params.get("url").ok_or_else(|| bad("missing url"))?.trim_end_matches('/').to_owned();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(bad("url must be http(s)"));
    }
    let sig = params.get("sig").map(|s| SigPublic::parse(s)).transpose().map_err(|_| bad("sig is not a key"))?;
    Ok(Some(DnsRecord { url, sig }))
}

/// Reads a DNS-over-HTTPS JSON answer (`application/dns-json`): the Nyx5 record, if there is
/// exactly one. NXDOMAIN or no record is `None`; other DNS failures are temporary (503).
pub fn parse_doh(body: &[u8]) -> Result<Option<DnsRecord>, Error> {
    let unavailable = |why: &str| Error::new(ErrorKind::Unavailable, format!("DNS-over-HTTPS: {why}"));
    let v = Value::parse(body, limits::MAX_DOCUMENT_BYTES).map_err(|_| unavailable("the answer is not JSON"))?;
    let o = v.as_object().ok_or_else(|| unavailable("the answer is not an object"))?;
    match field::integer(o, "Status") {
        Ok(0) => {}
        Ok(3) => return Ok(None),
        _ => return Err(unavailable("the lookup failed")),
    }
    let mut found = None;
    for answer in field::opt_array(o, "Answer").ok().flatten().unwrap_or_default() {
        let Some(a) = answer.as_object() else { continue };
        if field::opt_integer(a, "type").ok().flatten().is_some_and(|t| t != DNS_TYPE_TXT) {
            continue;
        }
        let Some(data) = field::opt_str(a, "data").ok().flatten() else { continue };
        if let Some(record) = parse_txt(&join_txt(data))? {
            if found.as_ref().is_some_and(|f| *f != record) {
                return Err(Error::forbidden(format!("several different {DNS_PREFIX} TXT records")));
            }
            found = Some(record);
        }
    }
    Ok(found)
}

/// Cached values by key, each with the time it was fetched.
type Memo<T> = Mutex<BTreeMap<String, (i64, T)>>;

/// Verified cards kept in this process for their five minutes, keyed by domain or address. A hit
/// hands out the shared card (an `Arc`), not a deep copy of its document. Also the inbox policies
/// read from this house's own stored cards (see [`crate::mailbox`]).
#[derive(Default)]
pub(crate) struct CardMemo {
    domains: Memo<Resolved>,
    agents: Memo<Arc<Verified<AgentCard>>>,
    pub(crate) policies: PolicyMemo,
}

fn memo_get<T: Clone>(map: &Memo<T>, key: &str, now: i64) -> Option<T> {
    let map = map.lock().ok()?;
    map.get(key).filter(|(at, _)| now - *at < limits::CARD_CACHE_MS && *at <= now).map(|(_, v)| v.clone())
}

fn memo_put<T>(map: &Memo<T>, key: &str, at: i64, now: i64, value: T) {
    if let Ok(mut map) = map.lock() {
        if map.len() >= MEMO_MAX_ENTRIES {
            map.retain(|_, (t, _)| now - *t < limits::CARD_CACHE_MS);
            if map.len() >= MEMO_MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(key.to_owned(), (at, value));
    }
}

impl CardMemo {
    fn forget_domain(&self, domain: &str) {
        if let Ok(mut m) = self.domains.lock() {
            m.remove(domain);
        }
        let suffix = format!("@{domain}");
        if let Ok(mut m) = self.agents.lock() {
            m.retain(|k, _| !k.ends_with(&suffix));
        }
    }
}

/// Where a domain's card is to be fetched, and the key it must be signed by, if known.
struct Located {
    url: String,
    anchor: Option<SigPublic>,
    /// Found through the well-known fallback: the card's own `estafeta` then says where to send.
    well_known: bool,
}

/// A remote document that does not parse or verify is the sender's fault: 403. Temporary
/// failures stay temporary.
fn refuse(what: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| {
        if e.kind.is_temporary() { e } else { Error::new(ErrorKind::Forbidden, format!("{what}: {}", e.reason)) }
    }
}

fn card_text(v: &Value) -> String {
    v.canonical_string()
}

impl<D: Db, N: Net> House<D, N> {
    /// The estafeta and verified card of `domain` (this house's own for its own domain).
    pub async fn resolve_domain(&self, domain: &str) -> Result<Resolved, Error> {
        self.resolve_domain_with(domain, false).await
    }

    /// As [`House::resolve_domain`]; `refresh` skips both caches.
    pub async fn resolve_domain_with(&self, domain: &str, refresh: bool) -> Result<Resolved, Error> {
        check_domain(domain).map_err(|why| Error::malformed(format!("domain {domain:?}: {why}")))?;
        if domain == self.config.domain {
            return Ok(Resolved { url: self.config.public_url.clone(), card: Arc::new(self.card().clone()) });
        }
        let now = self.now().millis();
        if !refresh {
            if let Some(r) = memo_get(&self.cards.domains, domain, now) {
                return Ok(r);
            }
            if let Some(row) = store::resolver::cached(&self.db, domain, now - limits::CARD_CACHE_MS).await? {
                let anchor = self.config.hosts.get(domain).and_then(|h| h.sig);
                let card = row.text("card").map(|t| DomainCard::parse(t.as_bytes()));
                if let (Some(Ok(card)), Some(url), Some(at)) = (card, row.text("url"), row.int("fetched_at"))
                    && let Ok(card) = card.verify(anchor.as_ref())
                    && card.domain == domain
                {
                    let r = Resolved { url: url.to_owned(), card: Arc::new(card) };
                    memo_put(&self.cards.domains, domain, at, now, r.clone());
                    return Ok(r);
                }
            }
        }
        let r = self.fetch_domain(domain, now).await?;
        memo_put(&self.cards.domains, domain, now, now, r.clone());
        Ok(r)
    }

    /// The verified card of `address`: local agents from this house, remote ones fetched from
    /// their estafeta and verified against their domain (and parent) cards. Cached for five
    /// minutes unless `refresh`, which refetches the whole chain.
    pub async fn resolve_agent(&self, address: &Address, refresh: bool) -> Result<Arc<Verified<AgentCard>>, Error> {
        self.resolve_agent_at(address, refresh, 0).await
    }

    async fn resolve_agent_at(
        &self,
        address: &Address,
        refresh: bool,
        depth: usize,
    ) -> Result<Arc<Verified<AgentCard>>, Error> {
        if address.domain() == self.config.domain {
            return self
                .local_card(address.local())
                .await?
                .map(Arc::new)
                .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no agent {address}")));
        }
        if depth > MAX_DELEGATION_DEPTH {
            return Err(Error::forbidden(format!("delegation of {address} is nested too deep")));
        }
        let now = self.now();
        let key = address.as_str();
        let current = |c: &Arc<Verified<AgentCard>>| c.valid_until.is_none_or(|u| now < u);
        if !refresh {
            if let Some(card) = memo_get(&self.cards.agents, key, now.millis()).filter(current) {
                return Ok(card);
            }
            if let Some(row) = store::resolver::cached(&self.db, key, now.millis() - limits::CARD_CACHE_MS).await?
                && let (Some(text), Some(at)) = (row.text("card"), row.int("fetched_at"))
                && let Ok(card) = AgentCard::parse(text.as_bytes())
                && card.address == *address
                && let Ok(card) = self.verify_agent(card, false, depth, now).await
            {
                let card = Arc::new(card);
                memo_put(&self.cards.agents, key, at, now.millis(), card.clone());
                return Ok(card);
            }
        }
        let domain = self.resolve_domain_with(address.domain(), refresh).await?;
        let url = format!("{}/agents/{}", domain.url, address.local());
        let body = self.fetch(url, "application/json", &format!("card of {address}")).await?;
        let card = AgentCard::parse(&body).map_err(refuse(&format!("card of {address}")))?;
        if card.address != *address {
            return Err(Error::forbidden(format!("asked for the card of {address}, got {}", card.address)));
        }
        let card = Arc::new(self.verify_agent(card, refresh, depth, now).await?);
        let text = card_text(&card.to_value());
        self.db.batch(vec![store::resolver::cache(key, &text, &domain.url, now.millis())]).await.map_err(port_error)?;
        memo_put(&self.cards.agents, key, now.millis(), now.millis(), card.clone());
        Ok(card)
    }

    /// Verifies a remote agent card against its domain card and, when delegated, its parent.
    async fn verify_agent(
        &self,
        card: AgentCard,
        refresh: bool,
        depth: usize,
        now: Timestamp,
    ) -> Result<Verified<AgentCard>, Error> {
        let what = format!("card of {}", card.address);
        let domain = self.resolve_domain_with(card.address.domain(), refresh).await?;
        let parent = match (&card.delegation, card.address.parent()) {
            (Some(_), Some(p)) => Some(Box::pin(self.resolve_agent_at(&p, refresh, depth + 1)).await.map_err(|e| {
                if e.kind.is_temporary() {
                    e
                } else {
                    Error::forbidden(format!("parent of {}: {}", card.address, e.reason))
                }
            })?),
            _ => None,
        };
        card.verify(&domain.card, parent.as_deref(), now).map_err(refuse(&what))
    }

    /// Where `domain`'s card lives: hosts, then DNS over HTTPS, then the domain itself.
    async fn locate(&self, domain: &str) -> Result<Located, Error> {
        if let Some(h) = self.config.hosts.get(domain) {
            return Ok(Located { url: h.url.clone(), anchor: h.sig, well_known: false });
        }
        if let Some(doh) = &self.config.doh_url {
            let sep = if doh.contains('?') { '&' } else { '?' };
            let url = format!("{doh}{sep}name={DNS_PREFIX}{domain}&type=TXT");
            let resp = self
                .net
                .send(OutRequest {
                    method: "GET".into(),
                    url,
                    headers: vec![("accept".into(), "application/dns-json".into())],
                    body: vec![],
                })
                .await
                .map_err(|e| Error::new(ErrorKind::Unavailable, format!("DNS-over-HTTPS: {e}")))?;
            if resp.status != 200 {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("DNS-over-HTTPS answered {} for {domain}", resp.status),
                ));
            }
            if let Some(record) = parse_doh(&resp.body)? {
                return Ok(Located { url: record.url, anchor: record.sig, well_known: false });
            }
        }
        let scheme = if self.config.https_fallback { "https" } else { "http" };
        Ok(Located { url: format!("{scheme}://{domain}"), anchor: None, well_known: true })
    }

    /// Fetches, checks and caches `domain`'s card; TOFU when nothing anchors it.
    async fn fetch_domain(&self, domain: &str, now: i64) -> Result<Resolved, Error> {
        let located = self.locate(domain).await?;
        let what = format!("domain card of {domain}");
        let body = self.fetch(format!("{}/.well-known/nyx5.json", located.url), "application/json", &what).await?;
        let card = DomainCard::parse(&body).map_err(refuse(&what))?;
        if card.domain != domain {
            return Err(Error::forbidden(format!("{what} names another domain ({})", card.domain)));
        }
        let url = match &card.estafeta {
            e if located.well_known && (e.starts_with("https://") || e.starts_with("http://")) => {
                e.trim_end_matches('/').to_owned()
            }
            _ => located.url.clone(),
        };
        let card = Arc::new(card.verify(located.anchor.as_ref()).map_err(refuse(&what))?);
        let text = card_text(&card.to_value());
        if located.anchor.is_some() {
            self.db.batch(vec![store::resolver::cache(domain, &text, &url, now)]).await.map_err(port_error)?;
            return Ok(Resolved { url, card });
        }

        // Trust on first use: the key that signed this card against the pin, if any.
        let kid = Signature::read(card.object(), "signature").map_err(refuse(&what))?.kid.to_b64();
        let pinned = store::resolver::pin(&self.db, domain).await?;
        let pinned = match pinned.as_ref().and_then(|r| r.text("sig")) {
            Some(sig) => sig.to_owned(),
            None => {
                let changes = self
                    .db
                    .batch(vec![
                        store::resolver::insert_pin(domain, &kid, now),
                        store::resolver::cache_if_pinned(domain, &text, &url, now, &kid),
                    ])
                    .await
                    .map_err(port_error)?;
                if changes.first() == Some(&1) {
                    return Ok(Resolved { url, card });
                }
                // Another request pinned it a moment ago: compare with that pin.
                store::resolver::pin(&self.db, domain)
                    .await?
                    .and_then(|r| r.text("sig").map(str::to_owned))
                    .unwrap_or_default()
            }
        };
        if pinned != kid {
            match self.db.batch(vec![store::resolver::set_pending(domain, &kid, now)]).await {
                Ok(_) | Err(PortError::Constraint { .. }) => {}
                Err(e) => return Err(port_error(e)),
            }
            return Err(Error::forbidden(format!(
                "the key of {domain} changed since it was pinned; refused until the operator confirms it \
                 (POST /pins/{domain}/confirm)"
            )));
        }
        self.db.batch(vec![store::resolver::cache(domain, &text, &url, now)]).await.map_err(port_error)?;
        Ok(Resolved { url, card })
    }

    /// GET `url` over `Net`. Transport failures and 5xx, 421, 429 or redirects are temporary
    /// (503); 404 and 410 are 404; other answers are refused (403).
    async fn fetch(&self, url: String, accept: &str, what: &str) -> Result<Vec<u8>, Error> {
        let resp = self
            .net
            .send(OutRequest {
                method: "GET".into(),
                url,
                headers: vec![("accept".into(), accept.to_owned())],
                body: vec![],
            })
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, format!("{what}: {e}")))?;
        match resp.status {
            200..=299 if resp.body.len() <= limits::MAX_DOCUMENT_BYTES => Ok(resp.body),
            200..=299 => Err(Error::forbidden(format!("{what} is too large"))),
            404 | 410 => Err(Error::new(ErrorKind::NotFound, format!("{what}: not found"))),
            300..=399 | 421 | 429 | 500.. => {
                Err(Error::new(ErrorKind::Unavailable, format!("{what}: answered {}", resp.status)))
            }
            s => Err(Error::forbidden(format!("{what}: answered {s}"))),
        }
    }

    /// The operator confirms the pending key of `domain` (optionally naming it): it becomes the
    /// pin, and every cached card of that domain is dropped. 404 without a pin, 409 when nothing
    /// (or another key) is pending.
    pub async fn confirm_pin(&self, domain: &str, expected: Option<&SigPublic>) -> Result<String, Error> {
        let expected = expected.map(SigPublic::to_b64);
        let changes = self
            .db
            .batch(vec![
                store::resolver::confirm_pin(domain, expected.as_deref()),
                store::resolver::forget_domain(domain),
            ])
            .await
            .map_err(port_error)?;
        self.cards.forget_domain(domain);
        let pin = store::resolver::pin(&self.db, domain).await?;
        match (changes.first(), pin) {
            (_, None) => Err(Error::new(ErrorKind::NotFound, format!("no pin for {domain}"))),
            (Some(&1), Some(row)) => Ok(row.text("sig").unwrap_or_default().to_owned()),
            (_, Some(_)) => Err(Error::new(ErrorKind::Conflict, format!("no such key is pending for {domain}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_records() {
        let key = nyx5_proto::crypto::SigningKey::from_seed([3; 32]).public();
        let data = format!("\"v=nyx51; url=https://mail.x/; \" \"sig={}\"", key.to_b64());
        let rec = parse_txt(&join_txt(&data)).unwrap().unwrap();
        assert_eq!(rec, DnsRecord { url: "https://mail.x".into(), sig: Some(key) });
        assert_eq!(parse_txt("v=spf1 -all").unwrap(), None);
        assert_eq!(parse_txt("v=nyx51;url=http://a.test;extra=1").unwrap().unwrap().sig, None);
        assert!(parse_txt("v=nyx51; url=ftp://x").is_err());
        assert!(parse_txt("v=nyx51; url=https://x; sig=nope").is_err());
        assert!(parse_txt("v=nyx51; url=https://x; url=https://y").is_err());
        assert_eq!(join_txt(r#""a\"b" "c""#), "a\"bc");
    }

    #[test]
    fn doh_answers() {
        let ok = br#"{"Status":0,"Answer":[{"type":5,"data":"x."},{"type":16,"data":"\"v=nyx51; url=https://m.x\""}]}"#;
        assert_eq!(parse_doh(ok).unwrap().unwrap().url, "https://m.x");
        assert_eq!(parse_doh(br#"{"Status":3}"#).unwrap(), None);
        assert_eq!(parse_doh(br#"{"Status":0}"#).unwrap(), None);
        assert_eq!(parse_doh(br#"{"Status":2}"#).unwrap_err().kind, ErrorKind::Unavailable);
        assert_eq!(parse_doh(b"<html>").unwrap_err().kind, ErrorKind::Unavailable);
        let two = br#"{"Status":0,"Answer":[{"data":"v=nyx51; url=https://a"},{"data":"v=nyx51; url=https://b"}]}"#;
        assert_eq!(parse_doh(two).unwrap_err().kind, ErrorKind::Forbidden);
    }
}
