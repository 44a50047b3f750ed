//! The house's configuration from Worker vars and secrets. The first implementation's
//! `CHASQUI_*` names are read as aliases, so an existing deployment's settings carry over.

use nyx5_house::config::{Config, Registration, parse_authserv_ids, parse_hosts, parse_previous_keys};
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::{Error, Timestamp, b64, limits};
use worker::Env;

/// Fetches one cron tick's checks by `verifica@` make on the Worker unless `NYX5_VERIFICA_FETCHES`
/// says otherwise: a check is about six subrequests (its D1 statements and the Libro's), one
/// fetch per test with a URL, within the Free plan's 50 per invocation.
const VERIFICA_FETCHES: u32 = 2;

/// Reads a var or secret by its name or its legacy alias; empty counts as unset.
fn read(env: &Env, name: &str) -> Option<String> {
    let alias = name.strip_prefix("NYX5_").map(|rest| format!("CHASQUI_{rest}"));
    std::iter::once(name.to_owned())
        .chain(alias)
        .find_map(|n| env.secret(&n).map(|s| s.to_string()).ok().or_else(|| env.var(&n).map(|v| v.to_string()).ok()))
        .filter(|v| !v.trim().is_empty())
}

fn invalid(name: &str, why: impl std::fmt::Display) -> Error {
    Error::new(nyx5_proto::ErrorKind::Internal, format!("configuration {name}: {why}"))
}

/// The key the house signs with: the `NYX5_DOMAIN_KEY` secret (base64url 32-byte seed), if set.
pub(crate) fn domain_key(env: &Env) -> Result<Option<SigningKey>, Error> {
    read(env, "NYX5_DOMAIN_KEY")
        .map(|s| {
            b64::decode_array::<32>(s.trim())
                .map(SigningKey::from_seed)
                .ok_or_else(|| invalid("NYX5_DOMAIN_KEY", "must be a 32-byte seed in base64url"))
        })
        .transpose()
}

/// Whether the operator asked for D1's billing units per request (`NYX5_D1_METER=on`): the
/// answer's `x-nyx5-d1` header and a log line per tick. Off unless asked.
pub(crate) fn metering(env: &Env) -> bool {
    read(env, "NYX5_D1_METER").is_some_and(|v| v.trim() == "on")
}

/// Whether the loopback-only self-test routes answer (`NYX5_SELFTEST=on`: tests, never production).
pub(crate) fn selftest(env: &Env) -> bool {
    read(env, "NYX5_SELFTEST").is_some_and(|v| v.trim() == "on")
}

/// Builds the configuration. `key` comes from the secret or, in local development, the database.
pub(crate) fn config(env: &Env, key: SigningKey, key_created: Timestamp) -> Result<Config, Error> {
    let domain = read(env, "NYX5_DOMAIN").ok_or_else(|| invalid("NYX5_DOMAIN", "is not set"))?;
    nyx5_proto::address::check_domain(&domain).map_err(|why| invalid("NYX5_DOMAIN", why))?;
    let public_url = read(env, "NYX5_PUBLIC_URL").unwrap_or_else(|| format!("https://{domain}"));
    let mut c = Config::new(&domain, &public_url, key, key_created);
    c.admin_token = read(env, "NYX5_ADMIN_TOKEN");
    if let Some(mode) = read(env, "NYX5_REGISTRATION") {
        c.registration = Registration::parse(mode.trim()).map_err(|e| invalid("NYX5_REGISTRATION", e.reason))?;
    } else {
        c.registration = Registration::Invite;
    }
    if let Some(hosts) = read(env, "NYX5_HOSTS") {
        c.hosts = parse_hosts(&hosts).map_err(|e| invalid("NYX5_HOSTS", e.reason))?;
    }
    if let Some(doh) = read(env, "NYX5_DOH_URL") {
        let doh = doh.trim().to_owned();
        nyx5_house::resolver::check_doh_url(&doh).map_err(|e| invalid("NYX5_DOH_URL", e.reason))?;
        c.doh_url = Some(doh);
    }
    // Keys used before NYX5_DOMAIN_KEY, listed until their end while stored cards are
    // certified again: `[{"key": "<seed, base64url>", "until": "<RFC 3339>"}]`.
    if let Some(previous) = read(env, "NYX5_PREVIOUS_DOMAIN_KEYS") {
        c.previous_keys = parse_previous_keys(&previous).map_err(|e| invalid("NYX5_PREVIOUS_DOMAIN_KEYS", e.reason))?;
    }
    if let Some(n) = read(env, "NYX5_TICK_BATCH") {
        c.tick_batch = n
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid("NYX5_TICK_BATCH", "must be a positive integer"))?;
    } else {
        // Free plan: 50 subrequests per invocation, and a remote delivery costs about six; an
        // index's crawl takes about fifteen of them (nyx5_house::config::INDEX_FETCHES_PER_TICK), and
        // verifica@'s checks about twelve (two checks of one fetch each, `VERIFICA_FETCHES`).
        let on = |name: &str| matches!(read(env, name).as_deref().map(str::trim), Some("on" | "true" | "1" | "yes"));
        c.tick_batch = 6 - if on("NYX5_INDEX") { 2 } else { 0 } - if on("NYX5_VERIFICA") { 2 } else { 0 };
    }
    // A request's writes do not wake another request's read waiting for mail: workerd would run
    // the woken read in the waking request's context. A waiting read rechecks instead (decision 0073).
    c.live_bell = false;
    // The email bridge's provider (docs/SPEC.md "Email bridge"): without both, outbound email
    // stays pending. `NYX5_`-prefixed names work too; the URL is for tests and other regions.
    c.resend_key = read(env, "RESEND_KEY").or_else(|| read(env, "NYX5_RESEND_KEY"));
    c.email_sender = read(env, "EMAIL_SENDER").or_else(|| read(env, "NYX5_EMAIL_SENDER"));
    if let Some(url) = read(env, "NYX5_EMAIL_PROVIDER_URL") {
        if !url.starts_with("https://") && !url.starts_with("http://") {
            return Err(invalid("NYX5_EMAIL_PROVIDER_URL", "must be an http(s) URL"));
        }
        c.email_provider_url = url.trim().to_owned();
    }
    let switch = |name: &str, default: bool| -> Result<bool, Error> {
        match read(env, name).as_deref().map(str::trim) {
            None => Ok(default),
            Some("on" | "true" | "1" | "yes") => Ok(true),
            Some("off" | "false" | "0" | "no") => Ok(false),
            Some(_) => Err(invalid(name, "must be on or off")),
        }
    };
    let amount = |name: &str, default: i64, max: i64| -> Result<i64, Error> {
        read(env, name).map_or(Ok(default), |v| {
            v.trim()
                .parse::<i64>()
                .ok()
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(|| invalid(name, format!("must be an integer from 0 to {max}")))
        })
    };
    c.email_enabled = switch("NYX5_EMAIL", true)?;
    // Receivers whose `Authentication-Results` the bridge believes besides Cloudflare's own (which
    // the `email` event trusts by itself): for mail the operator feeds to `POST /email/in`.
    if let Some(ids) = read(env, "NYX5_EMAIL_AUTHSERV_IDS") {
        c.email_authserv_ids = parse_authserv_ids(&ids).map_err(|e| invalid("NYX5_EMAIL_AUTHSERV_IDS", e.reason))?;
    }
    // Parsing a large HTML message can pass the Free plan's 10 ms of CPU; 256 KiB stays well inside.
    c.email_max_bytes = usize::try_from(amount("NYX5_EMAIL_MAX_BYTES", 256 * 1024, limits::MAX_ENVELOPE_BYTES as i64)?)
        .unwrap_or(256 * 1024);
    // Mailbox quotas and rates (`NYX5_MAILBOX_MAX_ENVELOPES`, … : nyx5_house::config::LIMIT_SETTINGS).
    c.read_limits(|name| read(env, name)).map_err(|e| invalid("limits", e.reason))?;
    c.index_enabled = switch("NYX5_INDEX", false)?;
    // A budget of outbound requests per tick: 1 to 1000, `default` when unset.
    let fetches = |name: &str, default: u32| -> Result<u32, Error> {
        read(env, name).map_or(Ok(default), |n| {
            n.trim()
                .parse()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| invalid(name, "must be an integer from 1 to 1000"))
        })
    };
    c.index_fetches = fetches("NYX5_INDEX_FETCHES", c.index_fetches)?;
    c.verifica_enabled = switch("NYX5_VERIFICA", false)?;
    c.verifica_fetches = fetches("NYX5_VERIFICA_FETCHES", VERIFICA_FETCHES)?;
    // `tareas@` pays against `verifica@`'s verdicts only: it needs the verifier.
    c.tareas_enabled = switch("NYX5_TAREAS", false)?;
    if c.tareas_enabled && !c.verifica_enabled {
        return Err(invalid("NYX5_TAREAS", "needs NYX5_VERIFICA=on: tareas@ pays only against verifica@'s verdicts"));
    }
    c.welcome = amount("NYX5_WELCOME", 0, nyx5_proto::limits::MAX_AMOUNT)?;
    c.fee_bps = amount("NYX5_FEE_BPS", 1_000, nyx5_proto::limits::BPS_WHOLE)?;
    // At least a second: an approval that expires as it is made could never be approved.
    let approval_s = amount("NYX5_APPROVAL_SECONDS", 86_400, nyx5_rules::libro::authority::MAX_APPROVAL_SECONDS)?;
    if approval_s < 1 {
        return Err(invalid("NYX5_APPROVAL_SECONDS", "must be at least 1"));
    }
    c.approval_ttl_ms = approval_s.saturating_mul(1_000);
    if let Some(flag) = read(env, "NYX5_REQUIRE_RELAY") {
        c.require_relay = !matches!(flag.trim(), "0" | "false" | "off" | "no");
    }
    // Test setups only: learnt URLs may be plain http and private (see nyx5_house::outbound).
    if let Some(flag) = read(env, "NYX5_ALLOW_PRIVATE_NETWORK") {
        let on = matches!(flag.trim(), "1" | "true" | "on" | "yes");
        c.allow_private_network = on;
        c.allow_http = on;
    }
    Ok(c)
}
