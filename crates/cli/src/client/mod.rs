//! The networked verbs: an agent's side of Nyx5 (docs/SPEC.md, "Client profile").
//!
//! Each verb group has its own file and answers with one JSON value; `cli.rs` turns the value
//! into text or prints it as JSON, and the MCP server (`crate::mcp`) hands the same values to
//! its tools. Exit codes: 0 ok, 1 verification failure, 2 usage, 3 network or house
//! unavailable, 4 refused by the house.

pub(crate) mod a2a;
pub(crate) mod attach;
pub(crate) mod cli;
pub(crate) mod directory;
pub(crate) mod drafts;
pub(crate) mod email;
pub(crate) mod http;
pub(crate) mod kept;
pub(crate) mod kept_store;
pub(crate) mod libro;
pub(crate) mod libro_cli;
pub(crate) mod libro_read;
pub(crate) mod lists;
pub(crate) mod mailbox;
pub(crate) mod output;
pub(crate) mod profile;
pub(crate) mod register;
pub(crate) mod resolve;
pub(crate) mod search;
pub(crate) mod send;
pub(crate) mod settings;
pub(crate) mod stale;
pub(crate) mod tareas;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod when;

use std::path::{Path, PathBuf};

use nyx5_client::hosts::{HostEntry, parse_hosts};
use nyx5_proto::json::{Object, Value};
use nyx5_proto::{Address, Timestamp};

use self::http::{Transport, read_object, send as http_send, token};
use self::profile::{AgentEntry, Profile};
use self::resolve::{Resolver, Setup};
use crate::error::Failure;

/// The DNS-over-HTTPS resolver used unless `NYX5_DOH` names another (or `off`).
pub(crate) const DEFAULT_DOH: &str = "https://cloudflare-dns.com/dns-query";
/// Largest hosts file read.
const MAX_HOSTS_BYTES: usize = 1024 * 1024;

/// What every networked verb starts from: where the profile is, which agent acts, how names
/// resolve, and how requests travel.
pub(crate) struct Ctx {
    pub(crate) profile_path: PathBuf,
    pub(crate) as_address: Option<Address>,
    pub(crate) hosts: nyx5_proto::vecmap::VecMap<String, HostEntry>,
    pub(crate) doh: Option<String>,
    pub(crate) net: Box<dyn Transport>,
    pub(crate) repin: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("profile_path", &self.profile_path).finish_non_exhaustive()
    }
}

impl Ctx {
    /// From the command line: `--agent`/`NYX5_AGENT`, `--as`, `--hosts`/`NYX5_HOSTS`, `NYX5_DOH`.
    pub(crate) fn new(agent: Option<&Path>, as_address: Option<&str>, hosts: Option<&Path>) -> Result<Ctx, Failure> {
        let profile_path = profile::default_path(agent)?;
        let as_address = as_address
            .map(|a| {
                Address::parse_lenient(a).map_err(|e| Failure::usage(format!("--as: {}", e.reason)).named(e.name()))
            })
            .transpose()?;
        let hosts_path = hosts
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("NYX5_HOSTS").filter(|v| !v.is_empty()).map(PathBuf::from));
        let hosts = match hosts_path {
            None => nyx5_proto::vecmap::VecMap::new(),
            Some(p) => read_hosts(&p)?,
        };
        let doh = match std::env::var("NYX5_DOH") {
            Ok(v) if v.is_empty() || v.eq_ignore_ascii_case("off") => None,
            Ok(v) => {
                let v = v.trim().to_owned();
                nyx5_client::resolver::check_doh_url(&v).map_err(|e| {
                    Failure::usage(format!("NYX5_DOH: {} (or set NYX5_DOH=off)", e.reason)).named(e.name())
                })?;
                Some(v)
            }
            Err(_) => Some(DEFAULT_DOH.to_owned()),
        };
        let net = Box::new(http::Http::beside(&profile_path));
        Ok(Ctx { profile_path, as_address, hosts, doh, net, repin: false })
    }

    pub(crate) fn profile(&self) -> Result<Profile, Failure> {
        Profile::load(&self.profile_path)
    }

    /// The acting agent: `--as`, else the profile's first.
    pub(crate) fn me(&self) -> Result<AgentEntry, Failure> {
        let profile = self.profile()?;
        profile.agent(self.as_address.as_ref(), &self.profile_path).cloned()
    }

    /// A resolver that knows the acting agent's house (if any), records pins in the profile and
    /// uses the cards kept beside it within their five minutes.
    pub(crate) fn resolver(&self, me: Option<&AgentEntry>, now: Timestamp) -> Result<Resolver<'_>, Failure> {
        self.resolver_with(me, now, false)
    }

    /// As [`Ctx::resolver`], reading no kept card: every card as its house serves it now.
    pub(crate) fn fresh_resolver(&self, me: Option<&AgentEntry>, now: Timestamp) -> Result<Resolver<'_>, Failure> {
        self.resolver_with(me, now, true)
    }

    fn resolver_with(&self, me: Option<&AgentEntry>, now: Timestamp, fresh: bool) -> Result<Resolver<'_>, Failure> {
        let profile =
            if self.profile_path.exists() { Some((self.profile_path.clone(), self.profile()?.pins)) } else { None };
        Ok(Resolver::new(Setup {
            net: self.net.as_ref(),
            hosts: &self.hosts,
            doh: self.doh.as_deref(),
            own: me.map(|m| (m.address.domain().to_owned(), m.house.clone())),
            profile,
            repin: self.repin,
            fresh,
            now,
        }))
    }

    /// A request to the acting agent's own house, signed with its token (spec §8). `target` is
    /// the path with any query. Answers the 2xx status and JSON object.
    pub(crate) fn call(
        &self,
        me: &AgentEntry,
        method: &str,
        target: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<(u16, Object), Failure> {
        self.call_at(me, &me.house, method, target, body, what)
    }

    /// As [`Ctx::call`], to the house at `base` (another house's Libro reads a foreigner's
    /// token as it reads its own agents'): the token is bound to that host.
    pub(crate) fn call_at(
        &self,
        me: &AgentEntry,
        base: &str,
        method: &str,
        target: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<(u16, Object), Failure> {
        let url = format!("{base}{target}");
        let bytes = body.map(Value::canonical).unwrap_or_default();
        let auth = token(&me.address, &me.keys.sig, method, &url, &bytes, crate::sys::now()?)?;
        let mut headers = vec![("authorization", auth.as_str()), ("accept", "application/json")];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let (status, answer) = http_send(self.net.as_ref(), method, &url, &headers, &bytes, what)?;
        read_object(status, &answer, what).map(|o| (status, o))
    }

    /// As [`Ctx::call_at`] with raw bytes both ways (an attachment's parts): `body` sent as
    /// `application/octet-stream` when there is one; a 2xx answer's bytes as they came, any
    /// other answer the failure [`Ctx::call_at`] would give.
    pub(crate) fn call_bytes(
        &self,
        me: &AgentEntry,
        base: &str,
        method: &str,
        target: &str,
        body: Option<&[u8]>,
        what: &str,
    ) -> Result<Vec<u8>, Failure> {
        let url = format!("{base}{target}");
        let bytes = body.unwrap_or_default();
        let auth = token(&me.address, &me.keys.sig, method, &url, bytes, crate::sys::now()?)?;
        let mut headers = vec![("authorization", auth.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/octet-stream"));
        }
        let (status, answer) = http_send(self.net.as_ref(), method, &url, &headers, bytes, what)?;
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        read_object(status, &answer, what).map(|_| answer)
    }
}

fn read_hosts(path: &Path) -> Result<nyx5_proto::vecmap::VecMap<String, HostEntry>, Failure> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::usage(format!("cannot read hosts file {shown}: {e}")))?;
    if text.len() > MAX_HOSTS_BYTES {
        return Err(Failure::usage(format!("hosts file {shown} is larger than {MAX_HOSTS_BYTES} bytes")));
    }
    parse_hosts(&text).map_err(|e| {
        Failure::usage(format!("hosts file {shown}: {} (expected {{\"<domain>\":{{\"url\":…,\"sig\":…}}}})", e.reason))
    })
}

/// A house named on the command line: an http(s) URL as it is, or a domain resolved to its
/// estafeta (its domain card verified on the way).
pub(crate) fn house_target(res: &Resolver<'_>, house: &str) -> Result<(String, Option<String>), Failure> {
    if house.starts_with("http://") || house.starts_with("https://") {
        return Ok((http::house_url(house)?, None));
    }
    let domain = house.trim().trim_end_matches('.').to_ascii_lowercase();
    let d = res.domain(&domain)?;
    Ok((d.url, Some(d.card.domain().to_owned())))
}
