//! The client profile: one 0600 file holding one or more agents — their keys, their house, the
//! envelopes saved before sending — and the domain keys pinned on first use (docs/SPEC.md,
//! "Client profile").
//!
//! ```text
//! {"agents":[{"address","house","sig","enc","sig_secret","enc_secret","pending":{},
//!             "previous"?:[…], "next"?:{…}}], "kind":"agent-profile", "nyx5":"1", "pins":{},
//!  "apps"?:{"<app id>":{"author":"did:key:…","sha256":"<card's, when pinned>"}}}
//! ```
//!
//! `pins` holds domain keys found on each domain's own chain (`client::resolve`); `apps` the
//! author of each app `nyx5 app run` ran, pinned on its first run (`app::author_pin`).
//!
//! Every change is read-modify-write under an exclusive lock on `<file>.lock`, written to a
//! fresh 0600 file beside it and renamed over it, so concurrent `nyx5` processes (an `inbox
//! --follow`, an MCP server, a `send`) never lose each other's writes. That is [`Files`], the
//! client crate's storage port (`nyx5_client::store`) over this file and the ones beside it
//! (`<profile>.cards`, `<profile>.bookmarks`); what each holds, and how it changes, is the
//! crate's (`cards`, `pins`, `bookmark`, the outbox's records in `profile`).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nyx5_proto::crypto::EncSecret;
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Address, Timestamp};

use nyx5_client::profile::KeySet;
use nyx5_client::store::{Slot, Store};
use nyx5_proto::{Error, ErrorKind, Refusal};

use crate::error::Failure;
use crate::keyfile::KeyFile;

/// The `kind` of a profile file (the format's, shared with the browser; its bound is its slot's).
pub(crate) use nyx5_client::profile::KIND;
/// The records of envelopes an agent keeps in its profile, and their bounds (the format's).
pub(crate) use nyx5_client::profile::{
    KEEP_ENVELOPE_MS, MAX_KEPT_ENVELOPE_BYTES, MAX_PENDING, MAX_PREVIOUS, Pending, Sent,
};

/// One agent of the profile.
#[derive(Debug, Clone)]
pub(crate) struct AgentEntry {
    pub(crate) address: Address,
    /// The base URL of the agent's house, without trailing slash.
    pub(crate) house: String,
    pub(crate) keys: KeyFile,
    /// Keys retired by `rotate-key`, newest first, kept to open envelopes sealed to them.
    pub(crate) previous: Vec<(KeyFile, Timestamp)>,
    /// New keys saved before a rotation is sent; promoted once the house accepts them.
    pub(crate) next: Option<KeyFile>,
    pub(crate) pending: BTreeMap<String, Pending>,
    /// The last `nyx5_client::profile::MAX_SENT` envelopes the house accepted, by id.
    pub(crate) sent: BTreeMap<String, Sent>,
    extra: Object,
}

impl AgentEntry {
    pub(crate) fn new(address: Address, house: String, keys: KeyFile) -> AgentEntry {
        AgentEntry {
            address,
            house,
            keys,
            previous: Vec::new(),
            next: None,
            pending: BTreeMap::new(),
            sent: BTreeMap::new(),
            extra: Object::new(),
        }
    }

    /// Moves `id` (sent to `to`) from `pending` to `sent` (the client crate's bookkeeping:
    /// `nyx5_client::profile::mark_sent`).
    pub(crate) fn mark_sent(&mut self, id: &str, sha256: &str, to: Vec<String>, at: Timestamp) {
        nyx5_client::profile::mark_sent(&mut self.pending, &mut self.sent, id, sha256, to, at);
    }

    /// The encryption secrets to try when opening: the current one, then retired ones.
    pub(crate) fn enc_secrets(&self) -> impl Iterator<Item = &EncSecret> {
        std::iter::once(&self.keys.enc).chain(self.previous.iter().map(|(k, _)| &k.enc))
    }

    fn to_value(&self) -> Value {
        let mut o = self.extra.clone();
        o.insert("address".into(), self.address.as_str().into());
        o.insert("house".into(), self.house.as_str().into());
        put_keys(&mut o, &self.keys);
        if !self.previous.is_empty() {
            let list = self
                .previous
                .iter()
                .map(|(k, retired)| {
                    let mut p = obj([("retired", retired.to_rfc3339().into())]);
                    put_keys(&mut p, k);
                    Value::Object(p)
                })
                .collect();
            o.insert("previous".into(), Value::Array(list));
        }
        if let Some(next) = &self.next {
            let mut n = Object::new();
            put_keys(&mut n, next);
            o.insert("next".into(), Value::Object(n));
        }
        let pending = self.pending.iter().map(|(id, p)| (id.clone(), p.to_value())).collect();
        o.insert("pending".into(), Value::Object(pending));
        let sent = self.sent.iter().map(|(id, s)| (id.clone(), s.to_value())).collect();
        o.insert("sent".into(), Value::Object(sent));
        Value::Object(o)
    }

    fn from_value(v: &Value) -> Result<AgentEntry, String> {
        let o = v.as_object().ok_or("each agent is an object")?;
        let text = |name: &str| field::str(o, name).map_err(|e| e.reason.to_string());
        let address = Address::parse(text("address")?).map_err(|e| e.reason.to_string())?;
        let house = text("house")?.trim_end_matches('/').to_owned();
        let keys = read_keys(o).map_err(|why| format!("{address}: {why}"))?;
        let mut previous = Vec::new();
        for p in field::opt_array(o, "previous").map_err(|e| e.reason.to_string())?.unwrap_or_default() {
            let p = p.as_object().ok_or("each previous key set is an object")?;
            let retired = field::opt_str(p, "retired")
                .map_err(|e| e.reason.to_string())?
                .map(Timestamp::parse)
                .transpose()
                .map_err(|e| e.reason.to_string())?
                .unwrap_or(Timestamp(0));
            previous.push((read_keys(p).map_err(|why| format!("{address} previous: {why}"))?, retired));
        }
        let next = field::opt_object(o, "next")
            .map_err(|e| e.reason.to_string())?
            .map(read_keys)
            .transpose()
            .map_err(|why| format!("{address} next: {why}"))?;
        let mut pending = BTreeMap::new();
        for (id, p) in field::opt_object(o, "pending").map_err(|e| e.reason.to_string())?.into_iter().flatten() {
            pending.insert(id.clone(), Pending::from_value(p).map_err(|e| e.reason.to_string())?);
        }
        let mut sent = BTreeMap::new();
        for (id, s) in field::opt_object(o, "sent").map_err(|e| e.reason.to_string())?.into_iter().flatten() {
            sent.insert(id.clone(), Sent::from_value(s).map_err(|e| e.reason.to_string())?);
        }
        const KNOWN: [&str; 10] =
            ["address", "house", "sig", "enc", "sig_secret", "enc_secret", "previous", "next", "pending", "sent"];
        let extra =
            o.iter().filter(|(k, _)| !KNOWN.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(AgentEntry { address, house, keys, previous, next, pending, sent, extra })
    }
}

/// Writes `sig`, `enc`, `sig_secret`, `enc_secret` (the profile format's key set) into `o`.
fn put_keys(o: &mut Object, k: &KeyFile) {
    let set = KeySet { sig: k.sig.clone(), enc: k.enc.clone() };
    for (name, v) in set.to_object() {
        o.insert(name, v);
    }
}

/// Reads the four key members and checks the public keys belong to the secrets.
fn read_keys(o: &Object) -> Result<KeyFile, String> {
    let KeySet { sig, enc } = KeySet::from_object(o).map_err(|e| e.reason.to_string())?;
    Ok(KeyFile { sig, enc })
}

/// A whole profile file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Profile {
    pub(crate) agents: Vec<AgentEntry>,
    /// Domain keys pinned on first use: domain → Ed25519 key (base64url).
    pub(crate) pins: BTreeMap<String, String>,
    /// App authors pinned on an app's first run: app id → its author.
    pub(crate) apps: BTreeMap<String, AppPin>,
    extra: Object,
}

/// The author pinned for one app id, and the card's SHA-256 when it was pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppPin {
    /// The author's `did:key`.
    pub(crate) author: String,
    pub(crate) sha256: String,
}

impl AppPin {
    fn to_value(&self) -> Value {
        Value::Object(obj([("author", self.author.as_str().into()), ("sha256", self.sha256.as_str().into())]))
    }

    fn from_value(id: &str, v: &Value) -> Result<AppPin, String> {
        let o = v.as_object().ok_or_else(|| format!("apps.{id} is an object"))?;
        let text = |name: &str| field::str(o, name).map(str::to_owned).map_err(|e| format!("apps.{id}: {}", e.reason));
        let author = text("author")?;
        nyx5_proto::app::parse_did_key(&author).map_err(|e| format!("apps.{id}.author: {}", e.reason))?;
        Ok(AppPin { author, sha256: text("sha256")? })
    }
}

impl Profile {
    fn to_value(&self) -> Value {
        let mut o = self.extra.clone();
        o.insert("nyx5".into(), crate::keyfile::VERSION.into());
        o.insert("kind".into(), KIND.into());
        o.insert("agents".into(), Value::Array(self.agents.iter().map(AgentEntry::to_value).collect()));
        o.insert("pins".into(), nyx5_client::pins::to_value(&self.pins));
        if !self.apps.is_empty() {
            let apps = self.apps.iter().map(|(id, p)| (id.clone(), p.to_value())).collect();
            o.insert("apps".into(), Value::Object(apps));
        }
        Value::Object(o)
    }

    fn from_value(v: &Value) -> Result<Profile, String> {
        let o = v.as_object().ok_or("a profile is a JSON object")?;
        let text = |name: &str| field::str(o, name).map_err(|e| e.reason.to_string());
        if text("nyx5")? != crate::keyfile::VERSION {
            return Err(format!("`nyx5` must be {:?}", crate::keyfile::VERSION));
        }
        if text("kind")? != KIND {
            return Err(format!("`kind` must be {KIND:?}"));
        }
        let mut agents: Vec<AgentEntry> = Vec::new();
        for a in field::array(o, "agents").map_err(|e| e.reason.to_string())? {
            let entry = AgentEntry::from_value(a)?;
            if agents.iter().any(|x| x.address == entry.address) {
                return Err(format!("{} is listed twice", entry.address));
            }
            agents.push(entry);
        }
        let pins = field::opt_object(o, "pins").and_then(nyx5_client::pins::read).map_err(|e| e.reason.to_string())?;
        let mut apps = BTreeMap::new();
        for (id, pin) in field::opt_object(o, "apps").map_err(|e| e.reason.to_string())?.into_iter().flatten() {
            apps.insert(id.clone(), AppPin::from_value(id, pin)?);
        }
        let extra = o
            .iter()
            .filter(|(k, _)| !["nyx5", "kind", "agents", "pins", "apps"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Profile { agents, pins, apps, extra })
    }

    /// The agent named by `as_address`, else the first.
    pub(crate) fn agent(&self, as_address: Option<&Address>, path: &Path) -> Result<&AgentEntry, Failure> {
        match as_address {
            Some(a) => self.agents.iter().find(|x| x.address == *a).ok_or_else(|| {
                Failure::usage(format!(
                    "{a} is not in the profile {} (it holds: {}); run `nyx5 init {a} --house URL` first",
                    path.display(),
                    self.list()
                ))
            }),
            None => self.agents.first().ok_or_else(|| {
                Failure::usage(format!(
                    "the profile {} holds no agent; run `nyx5 init ADDRESS --house URL` first",
                    path.display()
                ))
            }),
        }
    }

    pub(crate) fn agent_mut(&mut self, address: &Address) -> Option<&mut AgentEntry> {
        self.agents.iter_mut().find(|x| x.address == *address)
    }

    fn list(&self) -> String {
        if self.agents.is_empty() {
            "no agent".into()
        } else {
            self.agents.iter().map(|a| a.address.as_str()).collect::<Vec<_>>().join(", ")
        }
    }

    /// Reads the profile at `path` (shared lock). A missing file is an empty profile.
    pub(crate) fn load(path: &Path) -> Result<Profile, Failure> {
        let read = Files::beside(path).read(&nyx5_client::profile::SLOT);
        Profile::read(path, read.map_err(stored))
    }

    /// The profile as `read` from `path`'s slot (none: an empty one).
    fn read(path: &Path, read: Result<Option<Value>, Failure>) -> Result<Profile, Failure> {
        match read? {
            Some(value) => {
                Profile::from_value(&value).map_err(|why| Failure::usage(format!("profile {}: {why}", path.display())))
            }
            None => Ok(Profile::default()),
        }
    }

    /// Reads, changes with `f` and writes the profile back, all under an exclusive lock (the
    /// client crate's storage port, over [`Files`]). The file (and its directory, 0700) is
    /// created when missing. Nothing is written when `f` fails.
    pub(crate) fn update<T>(path: &Path, f: impl FnOnce(&mut Profile) -> Result<T, Failure>) -> Result<T, Failure> {
        let mut failed = None;
        let changed = Files::beside(path).update(&nyx5_client::profile::SLOT, |read| {
            let changed = Profile::read(path, read.map_err(stored)).and_then(|mut profile| {
                let out = f(&mut profile)?;
                Ok((profile.to_value(), out))
            });
            match changed {
                Ok((value, out)) => Ok((Some(value), Some(out))),
                Err(f) => {
                    failed = Some(f);
                    Ok((None, None))
                }
            }
        });
        match (changed.map_err(stored)?, failed) {
            (Some(out), None) => Ok(out),
            (_, Some(f)) => Err(f),
            (None, None) => Err(Failure::usage("the profile was not changed")),
        }
    }
}

/// A failure of the profile's store as the CLI reports it: a file that does not read is "the
/// profile: …", the rest (its lock, its write) as the store says.
fn stored(e: Error) -> Failure {
    match e.refusal() {
        Some(Refusal::BadJson) => Failure::usage(format!("the profile: {}", e.reason)),
        _ => Failure::usage(e.reason.to_string()),
    }
}

/// The client crate's storage port over files (`nyx5_client::store`): the profile's own slot is
/// the profile file, every other slot the file `<profile>.<slot>` beside it. Each is read within
/// its slot's bound, and changed under an exclusive lock on `<file>.lock` (its directory made
/// 0700 when missing), written to a fresh 0600 file beside it, synced and renamed over it.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    profile: PathBuf,
}

impl Files {
    /// The files of the profile at `profile`.
    pub(crate) fn beside(profile: &Path) -> Files {
        Files { profile: profile.to_owned() }
    }

    /// The file of `slot`.
    pub(crate) fn path(&self, slot: &Slot) -> PathBuf {
        if slot.name == nyx5_client::profile::SLOT.name {
            return self.profile.clone();
        }
        let mut name = self.profile.as_os_str().to_owned();
        name.push(".");
        name.push(slot.name);
        PathBuf::from(name)
    }

    /// The document at `path`, or `None` when there is no file (read without a lock). One that
    /// does not read (too large, not JSON, unreadable) is `bad_json`; the store's own failures
    /// (its lock, its write) are internal.
    fn read_unlocked(path: &Path, slot: &Slot) -> Result<Option<Value>, Error> {
        if !path.exists() {
            return Ok(None);
        }
        read_json(path, slot.max).map(Some).map_err(|why| Refusal::BadJson.because(why))
    }
}

fn store_error(reason: String) -> Error {
    Error::new(ErrorKind::Internal, reason)
}

impl Store for Files {
    fn read(&self, slot: &Slot) -> Result<Option<Value>, Error> {
        let path = self.path(slot);
        if !path.exists() {
            return Ok(None);
        }
        let lock = open_lock(&path).map_err(|f| store_error(f.one_line()))?;
        lock.lock_shared().map_err(|e| store_error(format!("cannot lock {}: {e}", path.display())))?;
        let doc = Self::read_unlocked(&path, slot);
        let _ = lock.unlock();
        doc
    }

    fn update<T>(
        &self,
        slot: &Slot,
        change: impl FnOnce(Result<Option<Value>, Error>) -> Result<(Option<Value>, T), Error>,
    ) -> Result<T, Error> {
        let path = self.path(slot);
        // The profile's folder is made (0700) by what writes the profile; a cache beside it never
        // makes one (with no folder it is simply not kept, as before the port).
        if let Some(dir) = path.parent().filter(|d| !slot.cache && !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| store_error(format!("cannot create {}: {e}", dir.display())))?;
        }
        let lock = open_lock(&path).map_err(|f| store_error(f.one_line()))?;
        lock.lock().map_err(|e| store_error(format!("cannot lock {}: {e}", path.display())))?;
        let result = (|| {
            let (doc, out) = nyx5_client::store::apply(slot, Self::read_unlocked(&path, slot), change)?;
            if let Some(doc) = doc {
                write_private(&path, &doc).map_err(|e| store_error(format!("cannot write the {} {e}", slot.name)))?;
            }
            Ok(out)
        })();
        let _ = lock.unlock();
        result
    }
}

/// The lock file beside `path` (`<path>.lock`), created 0600.
fn open_lock(path: &Path) -> Result<File, Failure> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(PathBuf::from(name))
        .map_err(|e| Failure::usage(format!("cannot open the lock file beside {}: {e}", path.display())))
}

/// Reads the JSON document at `path`, at most `max` bytes.
fn read_json(path: &Path, max: usize) -> Result<Value, String> {
    let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    let cap = u64::try_from(max.saturating_add(1)).unwrap_or(u64::MAX);
    file.take(cap).read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Value::parse(&bytes, max).map_err(|e| format!("{}: {}", path.display(), e.reason))
}

/// Writes `value` as canonical JSON and a newline to a fresh 0600 file beside `path`, synced,
/// and renames it over `path`.
fn write_private(path: &Path, value: &Value) -> Result<(), String> {
    let mut bytes = value.canonical();
    bytes.push(b'\n');
    let name = path.file_name().ok_or_else(|| format!("{} is not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}

/// Where the profile lives: `--agent`, else `NYX5_AGENT`, else `$XDG_CONFIG_HOME/nyx5/agents.json`,
/// else `~/.config/nyx5/agents.json`.
pub(crate) fn default_path(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(p) = env("NYX5_AGENT") {
        return Ok(PathBuf::from(p));
    }
    if let Some(x) = env("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(x).join("nyx5").join("agents.json"));
    }
    if let Some(h) = env("HOME") {
        return Ok(PathBuf::from(h).join(".config").join("nyx5").join("agents.json"));
    }
    Err(Failure::usage("no profile location: pass --agent FILE or set NYX5_AGENT"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use nyx5_client::profile::{Retried, trim_kept};

    const NOW: Timestamp = Timestamp(1_800_000_000_000);
    const HOUR: i64 = 3_600_000;

    /// A sent entry `hours` old whose envelope is `bytes` long in canonical JSON.
    fn sent(hours: i64, bytes: usize) -> Sent {
        let pad = "x".repeat(bytes - r#"{"pad":""}"#.len());
        let envelope = obj([("pad", pad.as_str().into())]);
        assert_eq!(Value::Object(envelope.clone()).canonical().len(), bytes);
        Sent {
            request: String::new(),
            sha256: String::new(),
            at: Timestamp(NOW.millis() - hours * HOUR),
            to: vec!["bo@b.test".into()],
            summary: String::new(),
            envelope: Some(envelope),
            retried: Vec::new(),
            resend_of: None,
        }
    }

    fn kept(list: &BTreeMap<String, Sent>) -> Vec<&str> {
        list.iter().filter(|(_, s)| s.envelope.is_some()).map(|(k, _)| k.as_str()).collect()
    }

    /// Issue 35 §2: the envelopes kept to mend a 402 are those that can still bounce (4 days),
    /// at most 2 MiB in all, the newest first; one alone larger than that is never kept. The
    /// entries themselves stay.
    #[test]
    fn sent_envelopes_are_kept_four_days_within_two_mebibytes_newest_first() {
        let mib = 1024 * 1024;
        let mut list: BTreeMap<String, Sent> = [
            ("a-now", sent(0, 600 * 1024)),
            ("b-1h", sent(1, 600 * 1024)),
            ("c-2h", sent(2, 600 * 1024)),
            ("d-3h", sent(3, 600 * 1024)),
            ("e-4h", sent(4, 1000)),
            ("f-95h", sent(95, 1000)),
            ("g-97h", sent(97, 1000)),
        ]
        .into_iter()
        .map(|(k, s)| (k.to_owned(), s))
        .collect();
        trim_kept(&mut list, NOW);
        // 3 × 600 KiB + 2 × 1000 bytes fit in 2 MiB; the fourth 600 KiB does not, nor the one
        // past four days.
        assert_eq!(kept(&list), ["a-now", "b-1h", "c-2h", "e-4h", "f-95h"]);
        assert_eq!(list.len(), 7, "the entries stay, without their envelopes");
        let total: usize =
            list.values().filter_map(|s| s.envelope.clone()).map(|e| Value::Object(e).canonical().len()).sum();
        assert!(total <= MAX_KEPT_ENVELOPE_BYTES, "{total}");

        // A newer envelope pushes the oldest out.
        list.insert("h-new".into(), sent(0, mib));
        trim_kept(&mut list, NOW);
        assert_eq!(kept(&list), ["a-now", "e-4h", "f-95h", "h-new"]);
        // One alone larger than the bound is not kept, and costs the others nothing.
        list.insert("i-huge".into(), sent(0, MAX_KEPT_ENVELOPE_BYTES + 1));
        trim_kept(&mut list, NOW);
        assert_eq!(kept(&list), ["a-now", "e-4h", "f-95h", "h-new"]);
        // Two hours on, f is past four days.
        trim_kept(&mut list, Timestamp(NOW.millis() + 2 * HOUR));
        assert_eq!(kept(&list), ["a-now", "e-4h", "h-new"]);
        assert_eq!(KEEP_ENVELOPE_MS, 96 * HOUR, "the 72-hour bounce window and a day");
    }

    /// What the bound costs: every change rewrites the profile, so with 2 MiB of envelopes kept
    /// (the most) an update reads and writes that much. Measured and printed, not asserted on
    /// time; the file stays within the bound whatever is sent.
    #[test]
    fn a_profile_at_the_kept_bound_stays_there_and_updates_are_measured() {
        let dir = std::env::temp_dir().join(format!("nyx5-kept-bound-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("agents.json");
        let address = Address::parse("ana@a.test").unwrap();
        let keys = KeyFile::generate(&mut |b: &mut [u8]| b.fill(3));
        Profile::update(&path, |p| {
            p.agents.push(AgentEntry::new(address.clone(), "http://a".into(), keys));
            Ok(())
        })
        .unwrap();
        let started = std::time::Instant::now();
        for n in 0..40 {
            Profile::update(&path, |p| {
                let a = p.agent_mut(&address).unwrap();
                let id = format!("m{n}");
                let envelope = obj([("pad", "x".repeat(200 * 1024).as_str().into())]);
                let pending =
                    Pending { envelope, request: String::new(), saved: NOW, summary: String::new(), resend_of: None };
                a.pending.insert(id.clone(), pending);
                a.mark_sent(&id, "s", vec!["bo@b.test".into()], Timestamp(NOW.millis() + i64::from(n)));
                Ok(())
            })
            .unwrap();
        }
        let each = started.elapsed() / 40;
        let size = std::fs::metadata(&path).unwrap().len();
        eprintln!("profile of {size} bytes at the kept bound: {each:?} per update (read, change, write, sync)");
        let kept = Profile::load(&path)
            .unwrap()
            .agents
            .first()
            .unwrap()
            .sent
            .values()
            .filter(|s| s.envelope.is_some())
            .count();
        assert_eq!(kept, 10, "ten envelopes of 200 KiB fit in 2 MiB");
        assert!(size < 3 * 1024 * 1024, "{size}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The storage port over files: a slot's file beside the profile (the profile's own is the
    /// profile), written 0600 and read back; a missing file is no document.
    #[test]
    fn each_slot_is_a_private_file_beside_the_profile() {
        let dir = std::env::temp_dir().join(format!("nyx5-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = Files::beside(&dir.join("agents.json"));
        let cards = nyx5_client::cards::SLOT;
        assert_eq!(files.path(&cards), dir.join("agents.json.cards"));
        assert_eq!(files.path(&nyx5_client::profile::SLOT), dir.join("agents.json"));
        assert_eq!(files.read(&cards).unwrap(), None);
        let doc = Value::Object(obj([("a", "b".into())]));
        // A cache makes no folder: with none, it is not kept.
        assert!(files.update(&cards, |read| Ok((Some(doc.clone()), read.unwrap()))).is_err());
        assert!(!dir.exists());
        // The profile's write makes it (0700); the cache is kept beside it.
        files.update(&nyx5_client::profile::SLOT, |_| Ok((Some(doc.clone()), ()))).unwrap();
        files.update(&cards, |read| Ok((Some(doc.clone()), read.unwrap()))).unwrap();
        assert_eq!(files.read(&cards).unwrap(), Some(doc));
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&files.path(&cards)), mode(&dir)), (0o600, 0o700));
        std::fs::write(files.path(&cards), b"{not json").unwrap();
        assert!(files.read(&cards).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `mark_sent` keeps the envelope it moves from `pending`; a profile written before
    /// envelopes were kept still reads, and what is kept reads back as written.
    #[test]
    fn sent_envelopes_and_retries_read_back_and_old_profiles_still_read() {
        let mut a = AgentEntry::new(
            Address::parse("ana@a.test").unwrap(),
            "http://a".into(),
            KeyFile::generate(&mut |b: &mut [u8]| b.fill(3)),
        );
        let envelope = obj([("id", "m1".into())]);
        let pending = Pending {
            envelope: envelope.clone(),
            request: "r".into(),
            saved: NOW,
            summary: "hola".into(),
            resend_of: None,
        };
        a.pending.insert("m1".into(), pending);
        a.mark_sent("m1", "s1", vec!["bo@b.test".into()], NOW);
        assert!(a.pending.is_empty());
        assert_eq!(a.sent.get("m1").and_then(|s| s.envelope.clone()), Some(envelope.clone()));
        let retried = Retried { to: vec!["bo@b.test".into()], resent_as: Some("m2".into()) };
        a.sent.get_mut("m1").unwrap().retried =
            vec![retried.clone(), Retried { to: vec!["cy@c.test".into()], resent_as: None }];
        let back = AgentEntry::from_value(&a.to_value()).unwrap();
        let s = back.sent.get("m1").unwrap();
        assert_eq!(s.envelope, Some(envelope));
        assert_eq!(s.retried.first(), Some(&retried));
        assert!(s.retried_for("bo@b.test") && s.retried_for("cy@c.test") && !s.retried_for("di@d.test"));

        // As an older client wrote it: no `envelope`, no `retried`.
        let mut old = a.to_value().as_object().unwrap().clone();
        let entry = obj([
            ("request", "r".into()),
            ("sha256", "s1".into()),
            ("at", NOW.to_rfc3339().into()),
            ("to", Value::Array(vec!["bo@b.test".into()])),
            ("summary", "hola".into()),
        ]);
        old.insert("sent".into(), Value::Object(obj([("m1", Value::Object(entry))])));
        let back = AgentEntry::from_value(&Value::Object(old)).unwrap();
        let s = back.sent.get("m1").unwrap();
        assert_eq!((s.envelope.clone(), s.retried.is_empty(), s.summary.as_str()), (None, true, "hola"));
        let written = back.to_value();
        let m1 = written.as_object().and_then(|o| o.get("sent")).and_then(Value::as_object).unwrap();
        let m1 = m1.get("m1").and_then(Value::as_object).unwrap();
        assert!(!m1.contains_key("envelope") && !m1.contains_key("retried"), "written as before: {m1:?}");
    }
}
