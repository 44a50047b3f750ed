//! The store of the mail an agent keeps on its own side (`client::kept`, issue 38 §1): a SQLite
//! file with the messages as they were shown, the keys that join conversations, and a full-text
//! index (FTS5, `unicode61` with diacritics folded; contentless and without positions: the text is
//! not kept twice, and a word is a word anywhere). The rules it follows are
//! `nyx5_client::kept`'s; this is the I/O, and it names nothing else of the command (the bench
//! `crates/cli/benches/kept.rs` includes it as it is). Errors are text: the caller says what
//! failed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use nyx5_client::kept::{self, Dir, Filters};
use nyx5_proto::Timestamp;
use nyx5_proto::json::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

/// The schema's version, in the file's `user_version`.
const SCHEMA_VERSION: i64 = 1;

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
  content = '', contentless_delete = 1, detail = none,
  tokenize = 'unicode61 remove_diacritics 2'
);
";

/// The store of the profile at `profile`: its path.
pub(crate) fn path_beside(profile: &Path) -> PathBuf {
    let mut name = profile.as_os_str().to_owned();
    name.push(".mail.db");
    PathBuf::from(name)
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
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(|e| failed("opening it", e))?;
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
            conn.execute_batch(SCHEMA).map_err(|e| failed("preparing it", e))?;
            conn.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(|e| failed("preparing it", e))?;
        }
        Ok(Store { conn })
    }

    /// Keeps `views` (as `nyx5_proto::mailbox::view` made them) for `agent`, in one transaction;
    /// one kept already (the same id, received or sent) is left as it is. How many were new.
    pub(crate) fn keep(&mut self, agent: &str, views: &[Value], dir: Dir, now: Timestamp) -> Result<usize, String> {
        let err = |e: rusqlite::Error| failed("keeping mail", e);
        let tx = self.conn.transaction().map_err(err)?;
        let mut new = 0;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO mail (agent, id, dir, at, seq, sender, recipients, kind, unread, view)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (agent, id, dir) DO NOTHING RETURNING n",
                )
                .map_err(err)?;
            let mut key =
                tx.prepare_cached("INSERT OR IGNORE INTO mail_keys (agent, key, n) VALUES (?, ?, ?)").map_err(err)?;
            let mut text = tx
                .prepare_cached("INSERT INTO mail_text (rowid, subject, body, sender) VALUES (?, ?, ?, ?)")
                .map_err(err)?;
            for k in views.iter().filter_map(|v| kept::kept(v, dir, now)) {
                let recipients: String =
                    k.to.iter().map(|t| format!("\n{}", t.to_ascii_lowercase())).collect::<String>() + "\n";
                let n: Option<i64> = insert
                    .query_row(
                        params![
                            agent,
                            k.id,
                            dir.as_str(),
                            k.at,
                            k.seq,
                            k.from.to_ascii_lowercase(),
                            recipients,
                            k.kind,
                            i64::from(dir == Dir::In),
                            k.view.canonical_string()
                        ],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(err)?;
                let Some(n) = n else { continue };
                new += 1;
                for k in &k.keys {
                    key.execute(params![agent, k, n]).map_err(err)?;
                }
                text.execute(params![n, k.subject, k.body, k.from]).map_err(err)?;
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
    /// docs/SPEC.md, "Kept mail"): every message its keys connect it to, at most
    /// [`kept::MAX_THREAD`] (`more` says some were left out). `None` when `id` is not kept. Two
    /// queries a step of the walk (the keys of the messages found last, then the messages that
    /// hold any of those keys not followed yet), and one for the rows.
    pub(crate) fn thread(&self, agent: &str, id: &str) -> Result<Option<(Vec<Value>, bool)>, String> {
        let err = |e: rusqlite::Error| failed("reading a thread", e);
        let list = |items: &[i64]| Value::Array(items.iter().map(|n| Value::from(*n)).collect()).canonical_string();
        let mut frontier: Vec<i64> = {
            let mut q = self.conn.prepare_cached("SELECT n FROM mail WHERE agent = ? AND id = ?").map_err(err)?;
            q.query_map(params![agent, id], |r| r.get(0)).map_err(err)?.collect::<Result<_, _>>().map_err(err)?
        };
        if frontier.is_empty() {
            return Ok(None);
        }
        let mut found: HashSet<i64> = frontier.iter().copied().collect();
        let mut followed: HashSet<String> = HashSet::new();
        let mut more = false;
        let mut keys_of = self
            .conn
            .prepare_cached("SELECT DISTINCT key FROM mail_keys WHERE n IN (SELECT value FROM json_each(?))")
            .map_err(err)?;
        let mut holders = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT n FROM mail_keys WHERE agent = ? AND key IN (SELECT value FROM json_each(?)) LIMIT ?",
            )
            .map_err(err)?;
        let cap = i64::try_from(kept::MAX_THREAD + 1).unwrap_or(i64::MAX);
        while !frontier.is_empty() && !more {
            let mut new_keys = Vec::new();
            for key in keys_of.query_map([list(&frontier)], |r| r.get::<_, String>(0)).map_err(err)? {
                let key = key.map_err(err)?;
                if followed.insert(key.clone()) {
                    new_keys.push(Value::from(key));
                }
            }
            frontier.clear();
            if new_keys.is_empty() {
                break;
            }
            let keys = Value::Array(new_keys).canonical_string();
            for n in holders.query_map(params![agent, keys, cap], |r| r.get::<_, i64>(0)).map_err(err)? {
                let n = n.map_err(err)?;
                if found.contains(&n) {
                    continue;
                }
                if found.len() >= kept::MAX_THREAD {
                    more = true;
                    break;
                }
                found.insert(n);
                frontier.push(n);
            }
        }
        let found: Vec<i64> = found.into_iter().collect();
        let mut rows = self
            .conn
            .prepare_cached(
                "SELECT unread, view FROM mail WHERE n IN (SELECT value FROM json_each(?))
                  ORDER BY at, coalesce(seq, 9223372036854775807), id",
            )
            .map_err(err)?;
        let views = rows
            .query_map([list(&found)], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
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
        let tx = self.conn.transaction().map_err(err)?;
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
            tx.execute("DELETE FROM mail_keys WHERE n = ?", [n]).map_err(err)?;
            tx.execute("DELETE FROM mail_text WHERE rowid = ?", [n]).map_err(err)?;
            tx.execute("DELETE FROM mail WHERE n = ?", [n]).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(ns.len())
    }
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
    }

    #[test]
    fn a_thread_joins_email_by_message_ids_and_stops_at_its_bound() {
        let (_, mut s) = store("email");
        let email = |id: &str, at: &str, mid: &str, irt: &str| {
            view(
                id,
                at,
                "x",
                &format!(r#", "email": {{"message_id": "{mid}", "in_reply_to": "{irt}", "references": ["{irt}"]}}"#),
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
    }
}
