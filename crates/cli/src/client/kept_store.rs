//! The store of the mail an agent keeps on its own side (`client::kept`, issue 38 §1): a SQLite
//! file with the messages as they were shown, the keys that join conversations, and a full-text
//! index (FTS5, `unicode61` with diacritics folded; contentless: the text is not kept twice, and
//! `secure_delete` so that what is forgotten is overwritten). The rules it follows are
//! `nyx5_client::kept`'s; this is the I/O, and it names nothing else of the command (the bench
//! `crates/cli/benches/kept.rs` includes it as it is). Errors are text: the caller says what
//! failed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use nyx5_client::kept::{self, Dir, Filters};
use nyx5_proto::Timestamp;
use nyx5_proto::json::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

/// The schema's version, in the file's `user_version`.
const SCHEMA_VERSION: i64 = 2;

/// The store's schema: applied on open when the file's version is older, every statement
/// idempotent.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mail (
  n          INTEGER PRIMARY KEY,
  agent      TEXT NOT NULL,
  id         TEXT NOT NULL,
  dir        TEXT NOT NULL CHECK (dir IN ('in', 'out')),
  at         INTEGER NOT NULL,
  seq        INTEGER,
  sender     TEXT NOT NULL,
  recipients TEXT NOT NULL,
  parties    TEXT NOT NULL,
  opened     INTEGER NOT NULL,
  kind       TEXT NOT NULL,
  unread     INTEGER NOT NULL,
  view       TEXT NOT NULL,
  UNIQUE (agent, id, dir)
);
CREATE INDEX IF NOT EXISTS mail_at ON mail (agent, at);
CREATE TABLE IF NOT EXISTS mail_keys (
  agent TEXT NOT NULL,
  key   TEXT NOT NULL,
  n     INTEGER NOT NULL,
  PRIMARY KEY (agent, key, n)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mail_keys_n ON mail_keys (n);
CREATE VIRTUAL TABLE IF NOT EXISTS mail_text USING fts5(
  subject, body, sender,
  content = '',
  tokenize = 'unicode61 remove_diacritics 2'
);
";

/// The store of the profile at `profile`: its path.
pub(crate) fn path_beside(profile: &Path) -> PathBuf {
    let mut name = profile.as_os_str().to_owned();
    name.push(".mail.db");
    PathBuf::from(name)
}

/// How much of a message a view opened: 2 its content and a good verdict on its signature
/// (`verified`, or `unverified` mail that was never signed), 1 its content only (its sender's
/// card out of reach, or a signature that did not hold), 0 nothing. Only a higher level of the
/// same envelope replaces a kept view.
fn opened(view: &Value) -> i64 {
    let o = view.as_object();
    let content = o.and_then(|o| o.get("content")).is_some_and(|c| !c.is_null());
    let judged =
        o.and_then(|o| o.get("trust")).and_then(Value::as_str).is_some_and(|t| t == "verified" || t == "unverified");
    i64::from(content) * (1 + i64::from(judged))
}

/// Bytes of a message's subject and of its body indexed for search, at most.
const MAX_INDEXED: usize = 64 * 1024;

/// `text` cut to at most `max` bytes, at a character's edge.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// What a message's search index holds of it: its subject and body (each at most
/// [`MAX_INDEXED`] bytes) and its sender. Rebuilt from the view whenever it is deleted.
fn indexed(k: &kept::Kept) -> (&str, &str, &str) {
    (cut(&k.subject, MAX_INDEXED), cut(&k.body, MAX_INDEXED), &k.sender)
}

/// Takes message `n`'s words out of the index (FTS5's `delete`, with what [`indexed`] gave).
fn unindex(tx: &rusqlite::Transaction<'_>, n: i64, k: &kept::Kept) -> rusqlite::Result<usize> {
    let (subject, body, sender) = indexed(k);
    tx.prepare_cached("INSERT INTO mail_text (mail_text, rowid, subject, body, sender) VALUES ('delete', ?, ?, ?, ?)")?
        .execute(params![n, subject, body, sender])
}

/// Addresses one a line, each line ended: what `instr` looks a whole address up in.
fn lines(list: &[String]) -> String {
    list.iter().map(|t| format!("\n{t}")).collect::<String>() + "\n"
}

/// What failed, and why.
fn failed(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// The open store.
pub(crate) struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (or creates, mode 0600) the store at `path`.
    pub(crate) fn open(path: &Path) -> Result<Store, String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| failed("creating its folder", e))?;
            }
            // Never through a link (its mode would be set on whatever it points at).
            for p in [path.to_path_buf(), PathBuf::from(format!("{}-wal", path.display()))] {
                if std::fs::symlink_metadata(&p).is_ok_and(|m| !m.file_type().is_file()) {
                    return Err(failed("opening it", format!("{} is not a plain file", p.display())));
                }
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| failed("creating it", e))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| failed("making it private", e))?;
        }
        let conn = Connection::open(path).map_err(|e| failed("opening it", e))?;
        conn.busy_timeout(std::time::Duration::from_secs(2)).map_err(|e| failed("opening it", e))?;
        // A write-ahead log synced at its checkpoints, not at each commit: keeping a page costs
        // no fsync of its own (the bench: a page's keeping was 1.7 times its reading with a
        // rollback journal synced at every commit). A crash of the machine may lose the last
        // pages kept; the store is the agent's copy, and unacknowledged mail is still on the
        // house. The log and its index take the database file's mode (0600).
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .map_err(|e| failed("opening it", e))?;
        // And not folded back into the database when the command ends (a checkpoint and its
        // fsync each run): the log is checkpointed as it grows, every thousand pages.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|e| failed("opening it", e))?;
        // The schema once (its version in the file's header: a read, no statement to parse).
        let version: i64 =
            conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| failed("opening it", e))?;
        if version < SCHEMA_VERSION {
            // Version 1 (never released) indexed differently: it starts again, empty.
            if version > 0 {
                conn.execute_batch(
                    "DROP TABLE IF EXISTS mail; DROP TABLE IF EXISTS mail_keys; DROP TABLE IF EXISTS mail_text;",
                )
                .map_err(|e| failed("preparing it", e))?;
            }
            conn.execute_batch(SCHEMA).map_err(|e| failed("preparing it", e))?;
            // A word deleted from the index leaves it at once (FTS5's own secure delete).
            conn.execute("INSERT INTO mail_text (mail_text, rank) VALUES ('secure-delete', 1)", [])
                .map_err(|e| failed("preparing it", e))?;
            conn.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(|e| failed("preparing it", e))?;
        }
        Ok(Store { conn })
    }

    /// Keeps `views` (as `nyx5_proto::mailbox::view` made them) for `agent`, in one transaction.
    /// One kept already (the same id and direction) is left as it is, unless this view is of the
    /// same envelope (its SHA-256) and opened more of it ([`opened`]: read while its sender's
    /// card was out of reach, or before a key was found, it was kept without its text or its
    /// verdict): then this one replaces it (the review of kept mail, L6). Another envelope under
    /// the same id (ids are their senders' to choose) never replaces it. How many were new or
    /// replaced.
    pub(crate) fn keep(&mut self, agent: &str, views: &[Value], dir: Dir, now: Timestamp) -> Result<usize, String> {
        let err = |e: rusqlite::Error| failed("keeping mail", e);
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
        let mut new = 0;
        {
            let mut kept_row = tx
                .prepare_cached("SELECT n, view, opened FROM mail WHERE agent = ? AND id = ? AND dir = ?")
                .map_err(err)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO mail (agent, id, dir, at, seq, sender, recipients, parties, kind, unread, view, opened)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING n",
                )
                .map_err(err)?;
            let mut replace = tx.prepare_cached("UPDATE mail SET view = ?, opened = ? WHERE n = ?").map_err(err)?;
            let mut key =
                tx.prepare_cached("INSERT OR IGNORE INTO mail_keys (agent, key, n) VALUES (?, ?, ?)").map_err(err)?;
            let mut text = tx
                .prepare_cached("INSERT INTO mail_text (rowid, subject, body, sender) VALUES (?, ?, ?, ?)")
                .map_err(err)?;
            for k in views.iter().filter_map(|v| kept::kept(v, dir, now)) {
                let view = k.view.canonical_string();
                let level = opened(&k.view);
                let was: Option<(i64, String, i64)> = kept_row
                    .query_row(params![agent, k.id, dir.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
                    .map_err(err)?;
                let n = match was {
                    None => {
                        let recipients = lines(&k.to.iter().map(|t| t.to_ascii_lowercase()).collect::<Vec<_>>());
                        insert
                            .query_row(
                                params![
                                    agent,
                                    k.id,
                                    dir.as_str(),
                                    k.at,
                                    k.seq,
                                    k.sender,
                                    recipients,
                                    lines(&k.parties),
                                    k.kind,
                                    i64::from(dir == Dir::In),
                                    view,
                                    level
                                ],
                                |r| r.get::<_, i64>(0),
                            )
                            .map_err(err)?
                    }
                    Some((n, old, old_level)) => {
                        let old = Value::parse_str(&old).ok();
                        let same = old.as_ref().map(|o| o.as_object().and_then(|o| o.get("sha256")))
                            == Some(k.view.as_object().and_then(|o| o.get("sha256")));
                        if level <= old_level || !same {
                            continue;
                        }
                        // The same envelope read whole: its words indexed anew.
                        if let Some(before) = old.as_ref().and_then(|o| kept::kept(o, dir, now)) {
                            unindex(&tx, n, &before).map_err(err)?;
                        }
                        replace.execute(params![view, level, n]).map_err(err)?;
                        n
                    }
                };
                new += 1;
                for key_text in &k.keys {
                    key.execute(params![agent, key_text, n]).map_err(err)?;
                }
                let (subject, body, sender) = indexed(&k);
                text.execute(params![n, subject, body, sender]).map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(new)
    }

    /// Marks `ids` read (acknowledged on the house): they stay kept.
    pub(crate) fn mark_read(&self, agent: &str, ids: &[String]) -> Result<(), String> {
        for id in ids {
            self.conn
                .execute("UPDATE mail SET unread = 0 WHERE agent = ? AND id = ? AND dir = 'in'", params![agent, id])
                .map_err(|e| failed("marking mail read", e))?;
        }
        Ok(())
    }

    /// The conversation `id` is in, oldest first (time, then the house's sequence, then the id:
    /// docs/SPEC.md, "Kept mail"): every message that shares a key with one of it and is
    /// [`kept::linked`] to that one, at most [`kept::MAX_THREAD`], the newest kept first when
    /// there are more (`more` says some were left out). `None` when `id` is not kept. A key is
    /// looked up again only when a message that holds it joined since; a key held by more than
    /// the bound is read newest first, the bound at most.
    pub(crate) fn thread(&self, agent: &str, id: &str) -> Result<Option<(Vec<Value>, bool)>, String> {
        let err = |e: rusqlite::Error| failed("reading a thread", e);
        let mut start = self
            .conn
            .prepare_cached("SELECT n, sender, parties FROM mail WHERE agent = ? AND id = ? ORDER BY dir = 'out' DESC")
            .map_err(err)?;
        let mut keys_of = self.conn.prepare_cached("SELECT key FROM mail_keys WHERE n = ?").map_err(err)?;
        let mut holders = self
            .conn
            .prepare_cached(
                "SELECT k.n AS n, m.sender AS sender, m.parties AS parties FROM mail_keys AS k JOIN mail AS m ON m.n = k.n
                  WHERE k.agent = ? AND k.key = ? ORDER BY k.n DESC LIMIT ?",
            )
            .map_err(err)?;
        let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(i64, String, String)> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        };
        let mut walk = Walk::default();
        // One message to start from (the agent's own first, when an id was used both ways); the
        // other joins only if it is linked to it (the second review: an incoming envelope may
        // reuse the id of one the agent sent).
        let mut first: Option<(String, Vec<String>)> = None;
        for r in start.query_map(params![agent, id], row).map_err(err)? {
            let (n, sender, parties) = r.map_err(err)?;
            let theirs = lines_of(&parties);
            if let Some((s, p)) = &first
                && !kept::linked(agent, s, p, &sender, &theirs)
            {
                continue;
            }
            first.get_or_insert_with(|| (sender.clone(), theirs));
            walk.join(&mut keys_of, n, sender, &parties)?;
        }
        if walk.members.is_empty() {
            return Ok(None);
        }
        let cap = i64::try_from(kept::MAX_THREAD + 1).unwrap_or(i64::MAX);
        let mut more = false;
        while let Some(key) = walk.queue.pop_front() {
            walk.queued.remove(&key);
            let found: Vec<(i64, String, String)> = holders
                .query_map(params![agent, key, cap], row)
                .map_err(err)?
                .collect::<Result<_, _>>()
                .map_err(err)?;
            more |= i64::try_from(found.len()).unwrap_or(i64::MAX) >= cap;
            let mut joined = false;
            // Who holds the key and is in already: a newcomer must be linked to one of them.
            let mut anchors: Vec<(String, Vec<String>)> =
                walk.holding.get(&key).into_iter().flatten().filter_map(|n| walk.members.get(n).cloned()).collect();
            for (n, sender, parties) in found {
                if walk.members.contains_key(&n) {
                    continue;
                }
                let theirs = lines_of(&parties);
                if !anchors.iter().any(|(s, p)| kept::linked(agent, s, p, &sender, &theirs)) {
                    continue;
                }
                anchors.push((sender.clone(), theirs));
                if walk.members.len() >= kept::MAX_THREAD {
                    more = true;
                    break;
                }
                walk.join(&mut keys_of, n, sender, &parties)?;
                joined = true;
            }
            if joined && walk.queued.insert(key.clone()) {
                // Those who joined through it may link others who hold it.
                walk.queue.push_back(key);
            }
            if more && walk.members.len() >= kept::MAX_THREAD {
                break;
            }
        }
        let found: Vec<i64> = walk.members.into_keys().collect();
        let list = Value::Array(found.iter().map(|n| Value::from(*n)).collect()).canonical_string();
        let mut rows = self
            .conn
            .prepare_cached(
                "SELECT unread, view FROM mail WHERE n IN (SELECT value FROM json_each(?))
                  ORDER BY at, coalesce(seq, 9223372036854775807), id",
            )
            .map_err(err)?;
        let views = rows
            .query_map([list], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(err)?
            .filter_map(|r| r.ok().and_then(|(unread, view)| view_of(unread, &view)))
            .collect();
        Ok(Some((views, more)))
    }

    /// Kept messages with all of `words` (none: every message) that pass `filters`, the most
    /// recently kept first; and whether more passed than the limit.
    pub(crate) fn find(
        &self,
        agent: &str,
        words: Option<&str>,
        filters: &Filters,
    ) -> Result<(Vec<Value>, bool), String> {
        let err = |e: rusqlite::Error| failed("searching", e);
        let mut sql = String::from("SELECT m.unread, m.view FROM ");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(w) = words {
            sql.push_str("mail_text t JOIN mail m ON m.n = t.rowid WHERE mail_text MATCH ? AND m.agent = ?");
            args.push(w.to_owned().into());
        } else {
            sql.push_str("mail m WHERE m.agent = ?");
        }
        args.push(agent.to_owned().into());
        if let Some(a) = &filters.from {
            sql.push_str(" AND m.sender = ?");
            args.push(a.to_ascii_lowercase().into());
        }
        if let Some(a) = &filters.to {
            sql.push_str(" AND instr(m.recipients, ?) > 0");
            args.push(format!("\n{}\n", a.to_ascii_lowercase()).into());
        }
        if let Some(s) = filters.since {
            sql.push_str(" AND m.at >= ?");
            args.push(s.into());
        }
        if let Some(u) = filters.until {
            sql.push_str(" AND m.at < ?");
            args.push(u.into());
        }
        if let Some(t) = &filters.kind {
            sql.push_str(" AND m.kind = ?");
            args.push(t.clone().into());
        }
        if filters.unread {
            sql.push_str(" AND m.unread = 1 AND m.dir = 'in'");
        }
        // Newest first: the full-text index walks its rows from the last kept (its rowid is
        // the message's), and stops at the limit; without words, the time index does.
        sql.push_str(if words.is_some() {
            " ORDER BY t.rowid DESC LIMIT ?"
        } else {
            " ORDER BY m.at DESC, m.n DESC LIMIT ?"
        });
        let limit = filters.limit.clamp(1, kept::MAX_FOUND);
        args.push(i64::try_from(limit + 1).unwrap_or(i64::MAX).into());
        let mut q = self.conn.prepare(&sql).map_err(err)?;
        let rows =
            q.query_map(params_from_iter(args), |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))).map_err(err)?;
        let mut list = Vec::new();
        for row in rows {
            let (unread, view) = row.map_err(err)?;
            list.extend(view_of(unread, &view));
        }
        let more = list.len() > limit;
        list.truncate(limit);
        Ok((list, more))
    }

    /// Removes `ids` (or, with `all`, every message of `agent`) from the store. How many.
    pub(crate) fn forget(&mut self, agent: &str, ids: &[String], all: bool) -> Result<usize, String> {
        let err = |e: rusqlite::Error| failed("forgetting", e);
        // What is forgotten is overwritten, not left in free pages (the review of kept mail, M3);
        // only here, where rows are deleted: keeping pays nothing for it.
        self.conn.execute_batch("PRAGMA secure_delete = ON;").map_err(err)?;
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
        let ns: Vec<i64> = {
            let mut q = tx.prepare("SELECT n FROM mail WHERE agent = ?1 AND (?2 OR id = ?3)").map_err(err)?;
            let mut ns = Vec::new();
            let targets: Vec<&str> = if all { vec![""] } else { ids.iter().map(String::as_str).collect() };
            for id in targets {
                for n in q.query_map(params![agent, all, id], |r| r.get(0)).map_err(err)? {
                    ns.push(n.map_err(err)?);
                }
            }
            ns
        };
        for n in &ns {
            // Its words out of the index, by the values they were indexed with (rebuilt from the
            // view it keeps: the index keeps no copy of the text).
            let (dir, view): (String, String) = tx
                .query_row("SELECT dir, view FROM mail WHERE n = ?", [n], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(err)?;
            let dir = if dir == "out" { Dir::Out } else { Dir::In };
            if let Some(k) = Value::parse_str(&view).ok().and_then(|v| kept::kept(&v, dir, Timestamp(0))) {
                unindex(&tx, *n, &k).map_err(err)?;
            }
            tx.execute("DELETE FROM mail_keys WHERE n = ?", [n]).map_err(err)?;
            tx.execute("DELETE FROM mail WHERE n = ?", [n]).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        // Out of the log too: secure_delete overwrote the pages, but the log still held them.
        // Best effort, once the rows are gone: a reader of another process holding the log keeps
        // it until the next checkpoint; the forgetting stands either way.
        let _ = self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        Ok(ns.len())
    }
}

/// A thread's walk: the messages in it (their sender and parties) and the keys still to look up.
#[derive(Default)]
struct Walk {
    members: HashMap<i64, (String, Vec<String>)>,
    /// For each key, the members that hold it.
    holding: HashMap<String, Vec<i64>>,
    queue: VecDeque<String>,
    queued: HashSet<String>,
}

impl Walk {
    /// Message `n` joins; its keys are looked up next (those not waiting already).
    fn join(
        &mut self,
        keys_of: &mut rusqlite::CachedStatement<'_>,
        n: i64,
        sender: String,
        parties: &str,
    ) -> Result<(), String> {
        let err = |e: rusqlite::Error| failed("reading a thread", e);
        self.members.insert(n, (sender, lines_of(parties)));
        for key in keys_of.query_map([n], |r| r.get::<_, String>(0)).map_err(err)? {
            let key = key.map_err(err)?;
            self.holding.entry(key.clone()).or_default().push(n);
            if self.queued.insert(key.clone()) {
                self.queue.push_back(key);
            }
        }
        Ok(())
    }
}

/// The addresses of a `lines` column.
fn lines_of(text: &str) -> Vec<String> {
    text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// A stored view as the command answers it: marked `unread` as it is now.
fn view_of(unread: i64, view: &str) -> Option<Value> {
    let mut v = Value::parse_str(view).ok()?;
    if let Value::Object(o) = &mut v {
        o.insert("unread".into(), Value::Bool(unread == 1));
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn view(id: &str, at: &str, body: &str, extra: &str) -> Value {
        Value::parse_str(&format!(
            r#"{{"id": "{id}", "from": "ana@a.test", "to": ["bo@b.test"], "received": "{at}", "type": "message",
                 "content": {{"media": "text/plain", "body": "{body}"}}{extra}}}"#
        ))
        .unwrap()
    }

    fn store(name: &str) -> (PathBuf, Store) {
        let d = std::env::temp_dir().join(format!("nyx5-kept-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let p = path_beside(&d.join("agents.json"));
        let s = Store::open(&p).unwrap();
        (p, s)
    }

    fn ids(list: &[Value]) -> Vec<&str> {
        list.iter().map(|v| v.as_object().unwrap()["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn kept_mail_is_private_searched_threaded_and_forgotten() {
        let (p, mut s) = store("all");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let page = [
            view("a1", "2026-12-01T10:00:00Z", "the invoice for March", r#", "thread": "t""#),
            view("b2", "2026-12-01T11:00:00Z", "paid, thanks", r#", "thread": "t", "in_reply_to": "a1""#),
            view("c3", "2026-12-01T12:00:00Z", "lunch?", ""),
        ];
        assert_eq!(s.keep("bo@b.test", &page, Dir::In, Timestamp(0)).unwrap(), 3);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let log = std::path::PathBuf::from(format!("{}-wal", p.display()));
            assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o600, "its log too");
        }
        assert_eq!(s.keep("bo@b.test", &page, Dir::In, Timestamp(0)).unwrap(), 0, "a page read again is kept once");
        let words = |w: &str| kept::words_query(&[w.to_owned()]).unwrap();
        let all = Filters { limit: 50, ..Filters::default() };
        let (found, more) = s.find("bo@b.test", words("invoice").as_deref(), &all).unwrap();
        assert_eq!((ids(&found), more), (vec!["a1"], false));
        // Another agent of the profile sees none of it.
        assert!(s.find("cy@b.test", words("invoice").as_deref(), &all).unwrap().0.is_empty());
        let (thread, _) = s.thread("bo@b.test", "b2").unwrap().unwrap();
        assert_eq!(ids(&thread), ["a1", "b2"]);
        assert!(s.thread("bo@b.test", "zz").unwrap().is_none());
        // Acknowledged: still kept, no longer unread.
        s.mark_read("bo@b.test", &["a1".into()]).unwrap();
        let unread = Filters { unread: true, ..all.clone() };
        assert_eq!(ids(&s.find("bo@b.test", None, &unread).unwrap().0), ["c3", "b2"]);
        assert_eq!(s.forget("bo@b.test", &["a1".into()], false).unwrap(), 1);
        assert!(s.find("bo@b.test", words("invoice").as_deref(), &all).unwrap().0.is_empty());
        assert_eq!(ids(&s.thread("bo@b.test", "b2").unwrap().unwrap().0), ["b2"]);
        assert_eq!(s.forget("bo@b.test", &[], true).unwrap(), 2);
        assert!(s.find("bo@b.test", None, &all).unwrap().0.is_empty());
    }

    /// The hostile review of kept mail (M1): a stranger who names another conversation's thread
    /// and ids joins nothing; a thread read on their message is theirs alone, and theirs is not
    /// in the conversation they named.
    #[test]
    fn a_stranger_naming_a_conversation_reads_none_of_it() {
        let (_, mut s) = store("stranger");
        let msg = |id: &str, from: &str, to: &str, extra: &str| {
            Value::parse_str(&format!(
                r#"{{"id": "{id}", "from": "{from}", "to": ["{to}"], "received": "2026-12-01T10:00:0{}Z", "type": "message",
                     "content": {{"body": "secret figures {id}"}}{extra}}}"#,
                id.len() % 10
            ))
            .unwrap()
        };
        s.keep("me@h.test", &[msg("x1", "p@p.test", "me@h.test", r#", "thread": "inv-3""#)], Dir::In, Timestamp(0))
            .unwrap();
        s.keep(
            "me@h.test",
            &[msg("x2", "me@h.test", "p@p.test", r#", "thread": "inv-3", "in_reply_to": "x1""#)],
            Dir::Out,
            Timestamp(0),
        )
        .unwrap();
        s.keep(
            "me@h.test",
            &[msg("s1", "eve@e.test", "me@h.test", r#", "thread": "inv-3", "in_reply_to": "x2""#)],
            Dir::In,
            Timestamp(0),
        )
        .unwrap();
        assert_eq!(ids(&s.thread("me@h.test", "s1").unwrap().unwrap().0), ["s1"]);
        // The agent answers her in the thread she named: she and the answer are one
        // conversation, P's stays P's (the second review: the agent is a party of everything).
        s.keep(
            "me@h.test",
            &[msg("r1", "me@h.test", "eve@e.test", r#", "thread": "inv-3", "in_reply_to": "s1""#)],
            Dir::Out,
            Timestamp(0),
        )
        .unwrap();
        let mut hers =
            ids(&s.thread("me@h.test", "s1").unwrap().unwrap().0).into_iter().map(str::to_owned).collect::<Vec<_>>();
        hers.sort();
        assert_eq!(hers, ["r1", "s1"]);
        let mut conversation =
            ids(&s.thread("me@h.test", "x1").unwrap().unwrap().0).into_iter().map(str::to_owned).collect::<Vec<_>>();
        conversation.sort();
        assert_eq!(conversation, ["x1", "x2"]);
        // An incoming envelope under the id of one the agent sent starts nothing of its own.
        s.keep("me@h.test", &[msg("x2", "eve@e.test", "me@h.test", "")], Dir::In, Timestamp(0)).unwrap();
        let mut from_x2 =
            ids(&s.thread("me@h.test", "x2").unwrap().unwrap().0).into_iter().map(str::to_owned).collect::<Vec<_>>();
        from_x2.sort();
        assert_eq!(from_x2, ["x1", "x2"]);
    }

    /// A message first read without its text (its sender's card out of reach) is kept again
    /// when read whole, and found by its words then (the review of kept mail, L6).
    #[test]
    fn a_message_read_whole_later_replaces_its_first_view() {
        let (_, mut s) = store("better");
        let unopened = Value::parse_str(
            r#"{"id": "u1", "from": "ana@a.test", "to": ["bo@b.test"], "trust": "unchecked", "content": null, "sha256": "aa"}"#,
        )
        .unwrap();
        assert_eq!(s.keep("bo@b.test", std::slice::from_ref(&unopened), Dir::In, Timestamp(0)).unwrap(), 1);
        let words = kept::words_query(&["quarterly".to_owned()]).unwrap();
        let all = Filters { limit: 5, ..Filters::default() };
        assert!(s.find("bo@b.test", words.as_deref(), &all).unwrap().0.is_empty());
        // Another envelope under the same id (a stranger's) never takes its place.
        let other = view("u1", "2026-12-01T10:00:00Z", "the quarterly figures, forged", r#", "sha256": "bb""#);
        assert_eq!(s.keep("bo@b.test", &[other], Dir::In, Timestamp(0)).unwrap(), 0);
        assert!(s.find("bo@b.test", words.as_deref(), &all).unwrap().0.is_empty());
        let whole = view("u1", "2026-12-01T10:00:00Z", "the quarterly figures", r#", "sha256": "aa""#);
        assert_eq!(s.keep("bo@b.test", std::slice::from_ref(&whole), Dir::In, Timestamp(0)).unwrap(), 1);
        assert_eq!(ids(&s.find("bo@b.test", words.as_deref(), &all).unwrap().0), ["u1"]);
        // A worse view later changes nothing.
        assert_eq!(s.keep("bo@b.test", &[unopened], Dir::In, Timestamp(0)).unwrap(), 0);
        assert_eq!(s.keep("bo@b.test", &[whole], Dir::In, Timestamp(0)).unwrap(), 0);
        assert_eq!(ids(&s.find("bo@b.test", words.as_deref(), &all).unwrap().0), ["u1"]);
    }

    /// What is forgotten is gone from the file and its log (the review of kept mail, M3).
    #[test]
    fn forgotten_text_is_not_left_on_disk() {
        let (p, mut s) = store("erase");
        // Each kept on its own (its words in an index segment of their own).
        s.keep(
            "bo@b.test",
            &[view("a1", "2026-12-01T10:00:00Z", "zqxmarkerword in a body", "")],
            Dir::In,
            Timestamp(0),
        )
        .unwrap();
        s.keep("bo@b.test", &[view("b2", "2026-12-01T11:00:00Z", "something else", "")], Dir::In, Timestamp(0))
            .unwrap();
        s.forget("bo@b.test", &["a1".into()], false).unwrap();
        let words = kept::words_query(&["else".to_owned()]).unwrap();
        assert_eq!(
            s.find("bo@b.test", words.as_deref(), &Filters { limit: 5, ..Filters::default() }).unwrap().0.len(),
            1
        );
        drop(s);
        for file in [p.clone(), PathBuf::from(format!("{}-wal", p.display()))] {
            let bytes = std::fs::read(&file).unwrap_or_default();
            // The word alone: the index keeps words, not the text (the second review).
            let found = bytes.windows(13).any(|w| w == b"zqxmarkerword");
            assert!(!found, "{} still holds the forgotten body", file.display());
        }
    }

    /// A planted link is never opened (its target's mode would be changed).
    #[cfg(unix)]
    #[test]
    fn a_link_in_the_stores_place_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("nyx5-kept-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let target = d.join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = path_beside(&d.join("agents.json"));
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(Store::open(&path).is_err());
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o644);
    }

    #[test]
    fn a_word_cannot_be_a_query() {
        let (_, mut s) = store("syntax");
        s.keep("bo@b.test", &[view("a1", "2026-12-01T10:00:00Z", "plain words", "")], Dir::In, Timestamp(0)).unwrap();
        for w in ["body:plain", "plain*", "NEAR(plain words)", "\"", "plain OR x", "-plain"] {
            let q = kept::words_query(&[w.to_owned()]).unwrap();
            let r = s.find("bo@b.test", q.as_deref(), &Filters { limit: 5, ..Filters::default() });
            assert!(r.is_ok(), "{w}: {r:?}");
        }
        let q = kept::words_query(&["PLAIN".to_owned()]).unwrap();
        assert_eq!(s.find("bo@b.test", q.as_deref(), &Filters { limit: 5, ..Filters::default() }).unwrap().0.len(), 1);
        // Scripts whose vowel signs the index splits words at (the review of kept mail, L1):
        // each word is found, never refused as a phrase.
        s.keep("bo@b.test", &[view("h1", "2026-12-01T10:00:00Z", "काम ภาษา தமிழ் café", "")], Dir::In, Timestamp(0))
            .unwrap();
        for w in ["काम", "ภาษา", "தமிழ்", "CAFE"] {
            let q = kept::words_query(&[w.to_owned()]).unwrap();
            let (found, _) = s.find("bo@b.test", q.as_deref(), &Filters { limit: 5, ..Filters::default() }).unwrap();
            assert_eq!(found.len(), 1, "{w}");
        }
    }

    #[test]
    fn a_thread_joins_email_by_message_ids_and_stops_at_its_bound() {
        let (_, mut s) = store("email");
        let email = |id: &str, at: &str, mid: &str, irt: &str| {
            view(
                id,
                at,
                "x",
                &format!(
                    r#", "email": {{"from": "bob@example.com", "authenticated_domain": "example.com",
                         "message_id": "{mid}", "in_reply_to": "{irt}", "references": ["{irt}"]}}"#
                ),
            )
        };
        s.keep(
            "bo@b.test",
            &[
                email("e1", "2026-12-01T10:00:00Z", "<m1@x>", ""),
                email("e2", "2026-12-01T11:00:00Z", "<m2@x>", "<m1@x>"),
                email("e3", "2026-12-01T12:00:00Z", "<m3@x>", "<m2@x>"),
                email("f1", "2026-12-01T12:00:00Z", "<other@x>", ""),
            ],
            Dir::In,
            Timestamp(0),
        )
        .unwrap();
        assert_eq!(ids(&s.thread("bo@b.test", "e1").unwrap().unwrap().0), ["e1", "e2", "e3"]);
        // A thread larger than the bound answers the bound and says so.
        let many: Vec<Value> = (0..kept::MAX_THREAD + 5)
            .map(|i| view(&format!("t{i:04}"), "2026-12-02T10:00:00Z", "y", r#", "thread": "big""#))
            .collect();
        s.keep("bo@b.test", &many, Dir::In, Timestamp(0)).unwrap();
        let (list, more) = s.thread("bo@b.test", "t0000").unwrap().unwrap();
        assert_eq!((list.len(), more), (kept::MAX_THREAD, true));
        let newest = format!("t{:04}", kept::MAX_THREAD + 4);
        assert!(ids(&list).contains(&newest.as_str()), "past the bound, the newest are kept");
    }
}
