//! What the wrapping proxy keeps: the approvals directory (0700) with each call's request, its
//! one decision (linked into place, never overwritten) and the hour's calls of a wrapped server,
//! counted under a lock shared by every proxy of that server.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nyx5_proto::authority::{HOUR_MS, MAX_PER_HOUR, Verdict};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, obj};
use nyx5_proto::{Timestamp, Value};

use super::rules::{Rule, binding, consistent, judge, request_sha256};
use crate::client::output::one_line as safe;
use crate::error::{Failure, Outcome};

/// The largest authority, request, decision or calls file read.
pub(crate) const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Most tool names one hour's counts hold; a call of a new name beyond them is asked of a human.
const MAX_COUNTED_TOOLS: usize = 256;
/// How long a call waits for the counts' lock before it fails closed (asks a human).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Where pending approvals live: `--approvals`, else `$XDG_STATE_HOME/nyx5/approvals`, else
/// `~/.local/state/nyx5/approvals`.
pub(crate) fn default_dir(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(x) = env("XDG_STATE_HOME") {
        return Ok(PathBuf::from(x).join("nyx5").join("approvals"));
    }
    if let Some(h) = env("HOME") {
        return Ok(PathBuf::from(h).join(".local").join("state").join("nyx5").join("approvals"));
    }
    Err(Failure::usage("no place for approvals: pass --approvals DIR or set XDG_STATE_HOME"))
}

/// The approvals directory. Requests are `<id>.request.json`, decisions `<id>.decision.json`
/// (made once: linked into place, never overwritten), the hour's calls `calls-<key>.json`.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) dir: PathBuf,
    /// This process's own counts, `{tool: [ms…]}`: the larger of these and the file's is the
    /// hour's, so a calls file deleted or spoiled under a running proxy resets nothing.
    seen: Mutex<BTreeMap<String, Vec<i64>>>,
}

/// The hour's counts as read from the calls file.
enum Counts {
    Read(Object),
    /// The file exists but could not be read, parsed or locked: every capped tool is taken to be
    /// at its limit (asked of a human) until it is written again.
    Spoiled,
}

/// An approval's id: 16 lowercase hex digits.
fn check_approval_id(id: &str) -> Result<(), Failure> {
    if id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(Failure::usage(format!("{id:?} is not an approval id (16 hex digits, as nyx5 mcp-approvals lists them)")))
    }
}

pub(crate) fn now_ms() -> i64 {
    crate::sys::now().map(Timestamp::millis).unwrap_or_default()
}

impl Store {
    /// Opens (with `create`, makes, 0700) the directory.
    pub(crate) fn open(flag: Option<&Path>, create: bool) -> Result<Store, Failure> {
        let dir = default_dir(flag)?;
        if create && !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
        }
        let meta = std::fs::metadata(&dir).ok().filter(std::fs::Metadata::is_dir);
        let Some(meta) = meta else {
            return Err(Failure::usage(format!("{} is not a directory of approvals", dir.display())));
        };
        // Whoever else can enter it could read the requests, decline calls and spoil the counts.
        if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0 {
            return Err(Failure::usage(format!(
                "{} is open to other users; approvals need a directory only you can use (chmod 700)",
                dir.display()
            )));
        }
        Ok(Store { dir, seen: Mutex::new(BTreeMap::new()) })
    }

    pub(crate) fn request_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.request.json"))
    }

    fn decision_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.decision.json"))
    }

    /// Writes `value` to a fresh 0600 file beside `path`, then puts it in place: renamed over
    /// `path`, or (`once`) linked, failing if `path` exists.
    pub(crate) fn write(&self, path: &Path, value: &Value, once: bool) -> std::io::Result<()> {
        let mut bytes = value.canonical();
        bytes.push(b'\n');
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = self.dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), unique()));
        let written = (|| {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            if once { std::fs::hard_link(&tmp, path) } else { std::fs::rename(&tmp, path) }
        })();
        let _ = std::fs::remove_file(&tmp);
        written
    }

    fn read(path: &Path) -> Option<Object> {
        let bytes = crate::io::read_capped(path, MAX_FILE_BYTES).ok()?;
        match Value::parse(&bytes, MAX_FILE_BYTES) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        }
    }

    pub(crate) fn decision(&self, id: &str) -> Option<Object> {
        Store::read(&self.decision_path(id))
    }

    /// Records a decision unless one was made: `Err` names the one that was.
    pub(crate) fn decide_once(
        &self,
        id: &str,
        decision: &str,
        request_sha256: &str,
        code: Option<&str>,
    ) -> Result<(), Option<Object>> {
        let mut o = obj([
            ("id", id.into()),
            ("decision", decision.into()),
            ("request_sha256", request_sha256.into()),
            ("time", Timestamp::from_millis(now_ms()).to_rfc3339().into()),
        ]);
        if let Some(c) = code {
            o.insert("code".into(), c.into());
        }
        let v = Value::Object(o);
        match self.write(&self.decision_path(id), &v, true) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.decision(id)),
        }
    }

    /// Removes a request and its decision.
    pub(crate) fn close(&self, id: &str) {
        let _ = std::fs::remove_file(self.request_path(id));
        let _ = std::fs::remove_file(self.decision_path(id));
    }

    /// The requests still waiting for a decision, oldest first (not those past their time,
    /// left by a proxy that stopped).
    pub(crate) fn pending(&self) -> Result<Vec<Object>, Failure> {
        let now = Timestamp::from_millis(now_ms());
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", self.dir.display())))?;
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".request.json") else { continue };
            if check_approval_id(id).is_err() || self.decision_path(id).exists() {
                continue;
            }
            let Some(o) = Store::read(&e.path()) else { continue };
            let expires = o.get("expires").and_then(Value::as_str).and_then(|t| Timestamp::parse(t).ok());
            if expires.is_some_and(|t| t >= now) {
                out.push(o);
            }
        }
        out.sort_by(|a, b| {
            let t = |o: &Object| o.get("created").and_then(Value::as_str).unwrap_or_default().to_owned();
            t(a).cmp(&t(b))
        });
        Ok(out)
    }

    /// A pending request checked against its approval code, before anything is decided: only
    /// a request nobody changed passes, the whole request (tool, arguments, reason, rationale,
    /// authority, times) hashing to what the proxy bound to that code. The request and its hash.
    pub(crate) fn verified(&self, id: &str, code: Option<&str>) -> Result<(Object, String), Failure> {
        let (request, sha) = self.undecided(id)?;
        let code = code.ok_or_else(|| {
            Failure::usage("approving needs --code, the code the waiting proxy printed beside the id")
        })?;
        if Some(hex(&sha256(code.as_bytes())).as_str()) != request.get("code_sha256").and_then(Value::as_str) {
            return Err(Failure::usage(format!("that is not the code of approval {id}")));
        }
        if !consistent(&request) || request.get("binding").and_then(Value::as_str) != Some(binding(code, &sha).as_str())
        {
            return Err(Failure::usage(format!(
                "approval {id} was changed since the proxy wrote it (it no longer matches its code): not \
                 approved; decline it with `nyx5 mcp-decline {id}`"
            )));
        }
        Ok((request, sha))
    }

    /// A pending request not yet decided, and its hash (unverified).
    pub(crate) fn undecided(&self, id: &str) -> Result<(Object, String), Failure> {
        check_approval_id(id)?;
        let request = Store::read(&self.request_path(id))
            .ok_or_else(|| Failure::usage(format!("no pending approval {id} in {}", self.dir.display())))?;
        if let Some(d) = self.decision(id) {
            return Err(Failure::usage(format!(
                "approval {id} was already decided: {}",
                safe(d.get("decision").and_then(Value::as_str).unwrap_or("?"))
            )));
        }
        let sha = request_sha256(&request);
        Ok((request, sha))
    }

    /// Writes a person's decision on request `id`, whose hash is `sha` (`nyx5 mcp-approve`,
    /// after [`Store::verified`], or `nyx5 mcp-decline`), once.
    pub(crate) fn record_decision(&self, id: &str, approve: bool, sha: &str, code: Option<&str>) -> Outcome {
        let decision = if approve { "approve" } else { "decline" };
        match self.decide_once(id, decision, sha, code) {
            Ok(()) => Ok(()),
            Err(Some(d)) => Err(Failure::usage(format!(
                "approval {id} was already decided: {}",
                safe(d.get("decision").and_then(Value::as_str).unwrap_or("?"))
            ))),
            Err(None) => Err(Failure::usage(format!("cannot write the decision for {id} in {}", self.dir.display()))),
        }
    }

    /// The file counting a wrapped server's calls (one per command line, so a restart keeps
    /// its hour and another server's tools of the same name do not share it).
    fn calls_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("calls-{key}.json"))
    }

    /// Runs `f` on the calls file's `{tool: [ms…]}` (pruned to the past hour) under a lock,
    /// writing back what it changed. A file that cannot be read or locked in time is
    /// [`Counts::Spoiled`]; a write then starts it again from this process's own counts.
    fn with_calls<T>(&self, key: &str, f: impl FnOnce(&mut Counts, i64) -> (T, bool)) -> T {
        let path = self.calls_path(key);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.dir.join(format!("calls-{key}.json.lock")))
            .ok()
            .filter(|l| {
                let deadline = Instant::now() + LOCK_WAIT;
                loop {
                    match l.try_lock() {
                        Ok(()) => return true,
                        Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => return false,
                    }
                }
            });
        let now = now_ms();
        let mut counts = match &lock {
            None => Counts::Spoiled,
            Some(_) if path.symlink_metadata().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {
                Counts::Read(Object::new())
            }
            Some(_) => match crate::io::read_capped(&path, MAX_FILE_BYTES).map(|b| Value::parse(&b, MAX_FILE_BYTES)) {
                Ok(Ok(Value::Object(o))) => Counts::Read(o),
                _ => Counts::Spoiled,
            },
        };
        if let Counts::Read(calls) = &mut counts {
            for v in calls.values_mut() {
                if let Value::Array(times) = v {
                    times.retain(|t| t.as_safe_integer().is_some_and(|t| now - t < HOUR_MS && t <= now));
                }
            }
            calls.retain(|_, v| v.as_array().is_some_and(|a| !a.is_empty()));
        }
        let (out, changed) = f(&mut counts, now);
        if changed && lock.is_some() {
            let calls = match counts {
                Counts::Read(calls) => calls,
                Counts::Spoiled => self.seen_as_object(now),
            };
            if let Err(e) = self.write(&path, &Value::Object(calls), false) {
                eprintln!("nyx5 mcp --wrap: cannot record the hour's calls in {}: {e}", path.display());
            }
        }
        if let Some(l) = lock {
            let _ = l.unlock();
        }
        out
    }

    /// This process's counts of the past hour, as the calls file holds them.
    fn seen_as_object(&self, now: i64) -> Object {
        let mut seen = lock(&self.seen);
        seen.values_mut().for_each(|t| t.retain(|t| now - t < HOUR_MS));
        seen.retain(|_, t| !t.is_empty());
        seen.iter().map(|(k, t)| (k.clone(), Value::Array(t.iter().map(|&t| t.into()).collect()))).collect()
    }

    /// Judges a call of `tool` that no human approved and, when it goes ahead, counts it: the
    /// hour's count read, the verdict and the count written under one lock of the calls file, so
    /// two proxies of the same server cannot both take the last call an hour allows. The count
    /// is the larger of the file's and this process's own; "at the limit" when the file is
    /// spoiled or holds too many names.
    pub(crate) fn admit(&self, key: &str, tool: &str, rule: &Rule, args: &Object) -> Verdict {
        if rule.authority.max_per_hour.is_none() {
            return judge(rule, args, 0, false);
        }
        let cap = usize::try_from(MAX_PER_HOUR).unwrap_or(usize::MAX);
        self.with_calls(key, |counts, now| {
            let from_file = match counts {
                Counts::Read(calls) if calls.contains_key(tool) || calls.len() < MAX_COUNTED_TOOLS => {
                    let n = calls.get(tool).and_then(Value::as_array).map_or(0, <[Value]>::len);
                    i64::try_from(n).unwrap_or(i64::MAX)
                }
                _ => i64::MAX,
            };
            let mut seen = lock(&self.seen);
            let mine = seen.get(tool).map_or(0, |t| t.iter().filter(|&&t| now - t < HOUR_MS).count());
            let hour_ops = from_file.max(i64::try_from(mine).unwrap_or(i64::MAX));
            let verdict = judge(rule, args, hour_ops, false);
            if verdict != Verdict::Allowed {
                return (verdict, false);
            }
            let t = seen.entry(tool.to_owned()).or_default();
            t.retain(|t| now - t < HOUR_MS);
            t.push(now);
            t.drain(..t.len().saturating_sub(cap));
            drop(seen);
            if let Counts::Read(calls) = counts
                && let Value::Array(t) = calls.entry(tool.to_owned()).or_insert_with(|| Value::Array(Vec::new()))
            {
                t.push(now.into());
                t.drain(..t.len().saturating_sub(cap));
            }
            (verdict, true)
        })
    }

    /// Counts one call of `tool` that a human approved (only where a rate is capped: nothing
    /// else reads the count).
    pub(crate) fn record_call(&self, key: &str, tool: &str, rule: &Rule) {
        if rule.authority.max_per_hour.is_none() {
            return;
        }
        let cap = usize::try_from(MAX_PER_HOUR).unwrap_or(usize::MAX);
        let now = now_ms();
        {
            let mut seen = lock(&self.seen);
            let t = seen.entry(tool.to_owned()).or_default();
            t.retain(|t| now - t < HOUR_MS);
            t.push(now);
            let over = t.len().saturating_sub(cap);
            t.drain(..over);
        }
        self.with_calls(key, |counts, now| {
            let Counts::Read(calls) = counts else { return ((), true) };
            let times = calls.entry(tool.to_owned()).or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(t) = times {
                t.push(now.into());
                let over = t.len().saturating_sub(cap);
                t.drain(..over);
            }
            ((), true)
        });
    }
}

/// A number no other call in this process gets.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A lock, even if a thread panicked holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::rules::Rules;
    use super::*;

    #[test]
    fn two_proxies_never_both_take_the_last_call_of_the_hour() {
        // Separate stores on one directory, as proxies in separate processes of one server: each
        // round, 16 of them race for a tool allowed twice an hour, 2 calls each.
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = std::env::temp_dir().join(format!("nyx5-admit-{}-{}", std::process::id(), unique()));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).unwrap();
        let file = r#"{"tools":{"echo":{"level":"autonomous","consequence":"reversible","max_per_hour":2}}}"#;
        let rule = Rules::from_value(&Value::parse_str(file).unwrap()).unwrap().rule("echo");
        let mut over = 0;
        for round in 0..60 {
            let key = format!("round{round}");
            let barrier = Arc::new(std::sync::Barrier::new(16));
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    let (dir, key, rule, barrier) = (dir.clone(), key.clone(), rule.clone(), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        let store = Store::open(Some(&dir), false).unwrap();
                        barrier.wait();
                        (0..2).filter(|_| store.admit(&key, "echo", &rule, &Object::new()) == Verdict::Allowed).count()
                    })
                })
                .collect();
            let allowed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
            eprintln!("round {round}: {allowed} went ahead");
            if allowed > 2 {
                over += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(over, 0, "rounds where more calls went ahead than the hour allows");
    }
}
