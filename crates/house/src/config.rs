//! What an operator sets for a house. Every knob has the spec's default.

pub use nyx5_proto::card::PreviousDomainKey;
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::json::field;
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Error, Object, Refusal, Timestamp, Value, b64, limits};

/// How agents enter this house (spec §8b).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    Admin,
    Invite,
    Open,
}

impl Registration {
    pub fn parse(text: &str) -> Result<Registration, Error> {
        match text {
            "admin" => Ok(Registration::Admin),
            "invite" => Ok(Registration::Invite),
            "open" => Ok(Registration::Open),
            other => {
                Err(Refusal::BadConfig.because(format!("registration must be admin, invite or open, not {other:?}")))
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Registration::Admin => "admin",
            Registration::Invite => "invite",
            Registration::Open => "open",
        }
    }
}

pub use nyx5_client::hosts::{HostEntry, parse_hosts};

/// Parses previous domain keys as operators write them (`NYX5_PREVIOUS_DOMAIN_KEYS`):
/// `[{"key": "<32-byte secret seed, base64url>", "until": "<RFC 3339 time>", "created"?: "<time>"}]`, at most 7.
pub fn parse_previous_keys(text: &str) -> Result<Vec<PreviousDomainKey>, Error> {
    let v = Value::parse(text.as_bytes(), limits::MAX_DOCUMENT_BYTES)?;
    let list = v.as_array().ok_or_else(|| Refusal::BadConfig.because("previous domain keys must be a JSON array"))?;
    if list.len() >= limits::MAX_KEYS {
        return Err(Refusal::BadConfig.because(format!("at most {} previous domain keys", limits::MAX_KEYS - 1)));
    }
    list.iter()
        .map(|entry| {
            let o =
                entry.as_object().ok_or_else(|| Refusal::BadConfig.because("each previous domain key is an object"))?;
            let seed = b64::decode_array::<32>(field::str(o, "key")?.trim())
                .ok_or_else(|| Refusal::BadConfig.because("`key` must be a 32-byte seed in base64url"))?;
            let until = Timestamp::parse(field::str(o, "until")?)?;
            let created = field::opt_str(o, "created")?.map(Timestamp::parse).transpose()?;
            Ok(PreviousDomainKey { key: SigningKey::from_seed(seed), created, until })
        })
        .collect()
}

/// The previous keys after `old` (made at `created`) hands over to a new key at `now`: `old`
/// first, listed for `grace_ms`, then those of `previous` not yet ended (and not `old` itself),
/// at most [`limits::MAX_KEYS`] − 1 in all.
pub fn rotated_previous(
    old: &SigningKey,
    created: Timestamp,
    previous: Vec<PreviousDomainKey>,
    now: Timestamp,
    grace_ms: i64,
) -> Vec<PreviousDomainKey> {
    let mut list: Vec<PreviousDomainKey> =
        previous.into_iter().filter(|p| p.until > now && p.key.public() != old.public()).collect();
    list.insert(0, PreviousDomainKey { key: old.clone(), created: Some(created), until: now.plus_ms(grace_ms) });
    list.truncate(limits::MAX_KEYS - 1);
    list
}

/// Writes previous domain keys in the format [`parse_previous_keys`] reads.
pub fn previous_keys_text(keys: &[PreviousDomainKey]) -> String {
    let list = keys
        .iter()
        .map(|p| {
            let mut o = Object::new();
            o.insert("key".into(), b64::encode(&p.key.seed()).into());
            o.insert("until".into(), p.until.to_rfc3339().into());
            if let Some(c) = p.created {
                o.insert("created".into(), c.to_rfc3339().into());
            }
            Value::Object(o)
        })
        .collect();
    Value::Array(list).canonical_string()
}

/// Most authserv-ids an operator may name as trusted for email.
pub const MAX_EMAIL_AUTHSERV_IDS: usize = 16;

/// Parses the authserv-ids whose `Authentication-Results` the email bridge trusts, as operators
/// write them (`NYX5_EMAIL_AUTHSERV_IDS`, `nyx5 serve --email-authserv-id`): separated by commas
/// or blanks, each an RFC 2045 token (what receiving MTAs put there: their host name), lower-cased.
/// Empty is none.
pub fn parse_authserv_ids(text: &str) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    for id in text.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty()) {
        let ok = id.len() <= 255 && id.bytes().all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?=".contains(&b));
        if !ok {
            return Err(Refusal::BadConfig
                .because(format!("{id:?} is not an authserv-id (a receiving MTA's name, e.g. mx.example.org)")));
        }
        let id = id.to_ascii_lowercase();
        if !out.contains(&id) {
            out.push(id);
        }
    }
    if out.len() > MAX_EMAIL_AUTHSERV_IDS {
        return Err(Refusal::BadConfig.because(format!("at most {MAX_EMAIL_AUTHSERV_IDS} authserv-ids")));
    }
    Ok(out)
}

/// Envelopes one agent may send per minute by default (`POST /outbound`).
pub const OUTBOUND_PER_AGENT_PER_MINUTE: i64 = 60;
/// The most envelopes a mailbox holds unacknowledged by default.
pub const MAILBOX_MAX_ENVELOPES: i64 = 10_000;
/// The most bytes of envelopes a mailbox stores by default (waiting, or acknowledged and not yet
/// dropped): 256 MiB.
pub const MAILBOX_MAX_BYTES: i64 = 256 * 1024 * 1024;

/// The limits an operator sets by name (Worker vars; the environment of `nyx5 serve`), each with
/// its least and most value.
pub const LIMIT_SETTINGS: &[(&str, i64, i64)] = &[
    ("NYX5_MAILBOX_MAX_ENVELOPES", 0, 10_000_000),
    ("NYX5_MAILBOX_MAX_BYTES", 0, 1 << 40),
    ("NYX5_OUTBOUND_PER_MINUTE", 1, 1_000_000),
    ("NYX5_OPEN_REGISTRATIONS_PER_MINUTE", 1, 1_000_000),
    ("NYX5_INBOUND_PER_DOMAIN_PER_MINUTE", 1, 1_000_000),
    ("NYX5_TAREAS_PER_AGENT_PER_DAY", 0, 1_000),
    ("NYX5_TAREAS_PER_DAY", 0, 1_000_000),
];

/// Retry schedule for deliveries (spec §7): the queue's rule.
pub use nyx5_rules::queue::Retry;

/// A mailbox's quota: the most envelopes and bytes it holds unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub max_envelopes: i64,
    pub max_bytes: i64,
}

/// The local part of the house's gateway address, the `from` of every email envelope. Reserved.
pub const GATEWAY_LOCAL: &str = nyx5_proto::mailbox::EMAIL_GATEWAY;

/// Most entries of each in-process memo (cards of each kind, mailbox policies): the resolver's.
pub use nyx5_client::resolver::MEMO_MAX_ENTRIES;
/// Most jobs one tick takes, by default.
pub const TICK_BATCH: i64 = 32;
/// The most jobs a tick may be configured to take.
pub const MAX_TICK_BATCH: i64 = 256;
/// Outbound requests a tick's crawl of the federated index makes by default. A step costs its
/// fetch and three to five D1 statements (the due house, the resolver's pin and cache, the
/// batch), so three fetches are about fifteen of the Workers Free plan's 50 subrequests; the
/// Worker then takes 4 queue jobs a tick instead of 6 (`src/adapter/env.rs`).
pub const INDEX_FETCHES_PER_TICK: u32 = 3;
/// Fetches one tick's `verifica@` checks may make by default (`NYX5_VERIFICA_FETCHES`).
pub const VERIFICA_FETCHES_PER_TICK: u32 = 4;
/// Emails to one mailbox per minute from one authenticated From domain, or from all
/// unauthenticated senders together, by default.
pub const EMAIL_PER_SENDER_PER_MINUTE: i64 = 20;
/// Emails one agent may queue per minute (`POST /email/out`), by default.
pub const EMAIL_OUT_PER_AGENT_PER_MINUTE: i64 = 10;
/// Resend's API, the default email provider URL.
pub const RESEND_URL: &str = "https://api.resend.com/emails";

/// Everything a house needs to know about itself.
#[derive(Debug, Clone)]
pub struct Config {
    /// The mail domain: addresses here are `local@domain`.
    pub domain: String,
    /// The estafeta's public base URL, without trailing slash.
    pub public_url: String,
    /// The domain key, and when it was made.
    pub key: SigningKey,
    pub key_created: Timestamp,
    /// Domain keys used before `key`, each listed in the domain card until its end with a
    /// handover to `key`; stored cards they certified are certified again by `key` meanwhile.
    pub previous_keys: Vec<PreviousDomainKey>,
    /// Bearer token for admin routes; admin routes are closed without one.
    pub admin_token: Option<String>,
    pub registration: Registration,
    pub open_registrations_per_minute: i64,
    /// Refuse inbound envelopes without a valid relay header.
    pub require_relay: bool,
    /// Inbound envelopes accepted per sending domain per minute for `open` mailboxes.
    pub inbound_per_domain_per_minute: i64,
    /// Emails accepted per mailbox per minute from one authenticated From domain, or from all
    /// unauthenticated senders together (the email bridge; allowlisted senders are not counted).
    pub email_per_sender_per_minute: i64,
    /// The authserv-ids (lower case) whose `Authentication-Results` the email bridge believes, when
    /// topmost: the receiving MTA in front of `POST /email/in`. The Worker's `email` event adds
    /// Cloudflare's own for the mail it hands over. Empty: mail fed by the operator is unverified.
    pub email_authserv_ids: Vec<String>,
    /// Emails one agent may queue per minute through the bridge (`POST /email/out`).
    pub email_out_per_agent_per_minute: i64,
    /// Envelopes one agent may hand to `POST /outbound` per minute.
    pub outbound_per_agent_per_minute: i64,
    /// The most envelopes one mailbox holds unacknowledged, and the most bytes it stores (its
    /// acknowledged envelopes' too, until their bodies are dropped); past either, a recipient is
    /// refused with 429 until there is room again (`mailbox::quota_full`).
    pub mailbox_max_envelopes: i64,
    pub mailbox_max_bytes: i64,
    pub hosts: VecMap<String, HostEntry>,
    /// A DNS-over-HTTPS JSON endpoint (`…/dns-query`), for `_nyx5.<domain>` TXT lookups.
    pub doh_url: Option<String>,
    /// Test setups only: URLs learnt from peers (estafetas, DNS records, webhooks) may be plain
    /// `http`, and the well-known fallback fetches `http://<domain>`. Off, both are `https` only.
    pub allow_http: bool,
    /// Test setups only (`--allow-private-network`, `NYX5_ALLOW_PRIVATE_NETWORK`): learnt URLs
    /// may name loopback and private addresses. The hosts file may name them regardless.
    pub allow_private_network: bool,
    pub retry: Retry,
    /// Jobs one tick takes. Each remote delivery costs a few subrequests (D1 and fetch), so a
    /// Worker on the Free plan (50 per invocation) keeps this small.
    pub tick_batch: i64,
    /// Whether a write in this process wakes a read of the same mailbox waiting in it
    /// ([`crate::live`]); off, a waiting read finds mail at its recheck alone. Off on the
    /// Worker: workerd runs a task woken by another request in that request's context, whose
    /// I/O it may not use (decision 0073).
    pub live_bell: bool,
    pub max_bytes: usize,
    /// Whether the email bridge is on (`urn:nyx5:ext:email`); off, email in and out is refused.
    pub email_enabled: bool,
    /// The largest raw email taken in; at most `max_bytes`. Parsing costs CPU in proportion to the
    /// message, so the Worker keeps this lower than the envelope limit (Free plan: 10 ms of CPU).
    pub email_max_bytes: usize,
    /// The Libro's welcome gift to each new agent (`NYX5_WELCOME`), and its fee on charges,
    /// releases and stamps in basis points (`NYX5_FEE_BPS`, 0–10000).
    pub welcome: i64,
    pub fee_bps: i64,
    /// How long a movement waits for a human's approval before its hold returns
    /// (`NYX5_APPROVAL_SECONDS`, default one day; docs/SPEC.md §16b).
    pub approval_ttl_ms: i64,
    /// Whether this house runs a federated index (`NYX5_INDEX`, `nyx5 serve --index`; spec §13):
    /// `/index/*` answers and each tick crawls the registered houses.
    pub index_enabled: bool,
    /// Outbound requests one tick's crawl may make (`NYX5_INDEX_FETCHES`); each costs about
    /// three subrequests with its D1 reads and writes.
    pub index_fetches: u32,
    /// Whether `verifica@` judges escrows that name it arbiter (`NYX5_VERIFICA`, `nyx5 serve
    /// --verifica`; spec §22), and the fetches one tick's checks may make
    /// (`NYX5_VERIFICA_FETCHES`): each test with a URL is one, plus a few D1 calls per check.
    pub verifica_enabled: bool,
    pub verifica_fetches: u32,
    /// Whether `tareas@` offers the catalogue's work (`NYX5_TAREAS`, `nyx5 serve --tareas`; spec
    /// §23; it needs `verifica@`), the tasks one agent may take a day
    /// (`NYX5_TAREAS_PER_AGENT_PER_DAY`) and the house's tasks a day (`NYX5_TAREAS_PER_DAY`).
    pub tareas_enabled: bool,
    pub tareas_per_agent_per_day: i64,
    pub tareas_per_day: i64,
    /// The email bridge's outbound provider (Resend): its API key and the verified sender
    /// address mail goes out from. Without both, outbound email stays pending.
    pub resend_key: Option<String>,
    pub email_sender: Option<String>,
    /// Where the provider's API is (tests point it elsewhere).
    pub email_provider_url: String,
    /// Extra members of the domain card's `policy`.
    pub policy_extra: Object,
}

impl Config {
    /// The `valid_from` of the house's own agents' cards (`libro@`, `verifica@`, `tareas@`):
    /// the creation of the earliest domain key its card lists. A key rotated while the clock ran
    /// days ahead is "created" in the future; once the clock is set right, cards valid only from
    /// then would be refused by every peer as not valid yet (503) for days — past the bounce
    /// window (issue 35, simulator seed 245). The house's own agents speak with the domain key,
    /// which the domain card lists with its handover, so dating them from the oldest listed key
    /// claims nothing a peer could not check.
    pub fn system_cards_since(&self) -> Timestamp {
        self.previous_keys.iter().filter_map(|p| p.created).fold(self.key_created, Timestamp::min)
    }

    /// A house with the spec's defaults.
    pub fn new(domain: &str, public_url: &str, key: SigningKey, key_created: Timestamp) -> Config {
        Config {
            domain: domain.to_owned(),
            public_url: public_url.trim_end_matches('/').to_owned(),
            key,
            key_created,
            previous_keys: Vec::new(),
            admin_token: None,
            registration: Registration::Admin,
            open_registrations_per_minute: 10,
            require_relay: true,
            inbound_per_domain_per_minute: 120,
            email_per_sender_per_minute: EMAIL_PER_SENDER_PER_MINUTE,
            email_out_per_agent_per_minute: EMAIL_OUT_PER_AGENT_PER_MINUTE,
            outbound_per_agent_per_minute: OUTBOUND_PER_AGENT_PER_MINUTE,
            mailbox_max_envelopes: MAILBOX_MAX_ENVELOPES,
            mailbox_max_bytes: MAILBOX_MAX_BYTES,
            email_authserv_ids: Vec::new(),
            hosts: VecMap::new(),
            doh_url: None,
            allow_http: false,
            allow_private_network: false,
            retry: Retry::default(),
            tick_batch: TICK_BATCH,
            live_bell: true,
            email_enabled: true,
            email_max_bytes: limits::MAX_ENVELOPE_BYTES,
            welcome: 0,
            fee_bps: 1_000,
            approval_ttl_ms: 86_400_000,
            index_enabled: false,
            index_fetches: INDEX_FETCHES_PER_TICK,
            verifica_enabled: false,
            verifica_fetches: VERIFICA_FETCHES_PER_TICK,
            tareas_enabled: false,
            tareas_per_agent_per_day: 1,
            tareas_per_day: 100,
            max_bytes: limits::MAX_ENVELOPE_BYTES,
            resend_key: None,
            email_sender: None,
            email_provider_url: RESEND_URL.to_owned(),
            policy_extra: Object::new(),
        }
    }

    /// A mailbox's quota, as the store counts it.
    pub fn quota(&self) -> Quota {
        Quota { max_envelopes: self.mailbox_max_envelopes, max_bytes: self.mailbox_max_bytes }
    }

    /// Reads the operator's limits by their names ([`LIMIT_SETTINGS`]) through `get` (Worker
    /// vars, or the environment of `nyx5 serve`); unset or empty keeps the default. Each must be
    /// a whole number from 0 (1 for rates) to its most.
    pub fn read_limits(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), Error> {
        for (name, min, max) in LIMIT_SETTINGS {
            let Some(text) = get(name).filter(|t| !t.trim().is_empty()) else { continue };
            let n = text.trim().parse::<i64>().ok().filter(|n| (*min..=*max).contains(n)).ok_or_else(|| {
                Refusal::BadConfig.because(format!("{name} must be a whole number from {min} to {max}, not {text:?}"))
            })?;
            let slot = match *name {
                "NYX5_MAILBOX_MAX_ENVELOPES" => &mut self.mailbox_max_envelopes,
                "NYX5_MAILBOX_MAX_BYTES" => &mut self.mailbox_max_bytes,
                "NYX5_OUTBOUND_PER_MINUTE" => &mut self.outbound_per_agent_per_minute,
                "NYX5_OPEN_REGISTRATIONS_PER_MINUTE" => &mut self.open_registrations_per_minute,
                "NYX5_INBOUND_PER_DOMAIN_PER_MINUTE" => &mut self.inbound_per_domain_per_minute,
                "NYX5_TAREAS_PER_AGENT_PER_DAY" => &mut self.tareas_per_agent_per_day,
                "NYX5_TAREAS_PER_DAY" => &mut self.tareas_per_day,
                _ => continue,
            };
            *slot = n;
        }
        Ok(())
    }

    /// The host agents address this house by (what auth tokens are bound to).
    pub fn host(&self) -> String {
        let rest = self.public_url.split_once("://").map_or(self.public_url.as_str(), |(_, r)| r);
        rest.split('/').next().unwrap_or(rest).to_ascii_lowercase()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authserv_ids() {
        assert_eq!(
            parse_authserv_ids(" MX.Example.org, mx2.example.org mx.example.org ").unwrap(),
            ["mx.example.org", "mx2.example.org"]
        );
        assert!(parse_authserv_ids("").unwrap().is_empty());
        assert!(parse_authserv_ids("mx;dmarc=pass").is_err());
        assert!(parse_authserv_ids("(mx)").is_err());
        assert!(parse_authserv_ids("\"mx\"").is_err());
        let many = (0..=MAX_EMAIL_AUTHSERV_IDS).map(|i| format!("mx{i}.test")).collect::<Vec<_>>().join(",");
        assert!(parse_authserv_ids(&many).is_err());
        let most = (0..MAX_EMAIL_AUTHSERV_IDS).map(|i| format!("mx{i}.test")).collect::<Vec<_>>().join(",");
        assert_eq!(parse_authserv_ids(&most).map(|ids| ids.len()).ok(), Some(MAX_EMAIL_AUTHSERV_IDS));
    }

    #[test]
    fn every_limit_is_read_into_its_own_setting() {
        let mut c = Config::new("a.test", "http://a", SigningKey::from_seed([1; 32]), Timestamp(0));
        let values: Vec<(&str, String)> =
            LIMIT_SETTINGS.iter().enumerate().map(|(i, (name, ..))| (*name, (i + 1).to_string())).collect();
        c.read_limits(|name| values.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())).unwrap();
        let read = [
            c.mailbox_max_envelopes,
            c.mailbox_max_bytes,
            c.outbound_per_agent_per_minute,
            c.open_registrations_per_minute,
            c.inbound_per_domain_per_minute,
            c.tareas_per_agent_per_day,
            c.tareas_per_day,
        ];
        assert_eq!(read.len(), LIMIT_SETTINGS.len());
        assert_eq!(read, [1, 2, 3, 4, 5, 6, 7]);
        // A mailbox may hold up to a TiB of envelopes, not a byte more.
        let bytes = |v: &'static str| move |name: &str| (name == "NYX5_MAILBOX_MAX_BYTES").then(|| v.to_owned());
        c.read_limits(bytes("1099511627776")).unwrap();
        assert_eq!(c.mailbox_max_bytes, 1 << 40);
        assert!(c.read_limits(bytes("1099511627777")).is_err());
    }

    #[test]
    fn verifica_may_reach_the_hosts_files_origins_and_no_other_the_house_names() {
        let mut c = Config::new("a.test", "http://a", SigningKey::from_seed([1; 32]), Timestamp(0));
        c.hosts.insert("b.test".into(), HostEntry { url: "http://127.0.0.1:8788".into(), sig: None });
        c.doh_url = Some("http://127.0.0.1:9000/dns".into());
        c.email_provider_url = "http://127.0.0.1:9100".into();
        let verifica = c.verifica_policy();
        assert!(verifica.check("http://127.0.0.1:8788/work").is_ok());
        assert!(verifica.check("http://127.0.0.1:9000/dns").is_err());
        assert!(verifica.check("http://127.0.0.1:9100/send").is_err());
        let house = c.outbound_policy();
        assert!(house.check("http://127.0.0.1:9000/dns").is_ok() && house.check("http://127.0.0.1:9100/send").is_ok());
    }

    #[test]
    fn operator_limits() {
        let mut c = Config::new("a.test", "http://a", SigningKey::from_seed([1; 32]), Timestamp(0));
        let set = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
        };
        c.read_limits(set(&[("NYX5_MAILBOX_MAX_ENVELOPES", " 50 "), ("NYX5_OUTBOUND_PER_MINUTE", "")])).unwrap();
        assert_eq!(c.mailbox_max_envelopes, 50);
        assert_eq!(c.outbound_per_agent_per_minute, OUTBOUND_PER_AGENT_PER_MINUTE);
        assert_eq!(c.mailbox_max_bytes, MAILBOX_MAX_BYTES);
        assert!(c.read_limits(set(&[("NYX5_OUTBOUND_PER_MINUTE", "0")])).is_err());
        assert!(c.read_limits(set(&[("NYX5_MAILBOX_MAX_BYTES", "lots")])).is_err());
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let r = Retry::default();
        let waits: Vec<i64> = (1..=8).map(|a| r.backoff_ms(a)).collect();
        assert_eq!(waits, [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]);
    }

    #[test]
    fn host_of_public_url() {
        let c = Config::new("a.test", "http://127.0.0.1:8787/", SigningKey::from_seed([1; 32]), Timestamp(0));
        assert_eq!(c.host(), "127.0.0.1:8787");
    }
}
