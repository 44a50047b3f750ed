//! `Db` on SQLite (rusqlite, bundled), for tests and the native server. It applies the embedded
//! migrations and records them in `d1_migrations`, the table wrangler keeps on D1.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode, ToSql, params_from_iter};

use crate::migrations::MIGRATIONS;
use crate::ports::{Columns, Db, PortError, Row, SqlValue, Stmt, constraint_name};

/// A SQLite database behind a mutex (one writer, like D1).
#[derive(Debug)]
pub struct SqliteDb {
    conn: Mutex<Connection>,
}

/// Prepared statements kept per connection: more than the engine has (`store/*`), so none is
/// prepared twice (rusqlite's default keeps 16).
pub const STATEMENT_CACHE: usize = 128;

fn port_error(e: rusqlite::Error) -> PortError {
    match &e {
        rusqlite::Error::SqliteFailure(f, msg) if f.code == ErrorCode::ConstraintViolation => {
            let text = msg.clone().unwrap_or_else(|| e.to_string());
            PortError::Constraint { name: constraint_name(&text).unwrap_or(&text).to_owned() }
        }
        _ => PortError::Failed(e.to_string()),
    }
}

/// A parameter bound as it is: SQLite copies text it keeps (`SQLITE_TRANSIENT`), so nothing is
/// copied here first.
struct Param<'a>(&'a SqlValue);

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self.0 {
            SqlValue::Null => ValueRef::Null,
            SqlValue::Int(i) => ValueRef::Integer(*i),
            SqlValue::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

fn params(stmt: &Stmt) -> impl rusqlite::Params + '_ {
    params_from_iter(stmt.params.iter().map(Param))
}

/// Text as it is read, with U+FFFD for what is not UTF-8 (the engine only writes UTF-8): checked
/// by `from_utf8` first, which is quicker over valid text than `from_utf8_lossy`'s chunks.
fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

impl SqliteDb {
    /// An in-memory database with the schema applied.
    pub fn memory() -> Result<SqliteDb, PortError> {
        SqliteDb::with(Connection::open_in_memory().map_err(port_error)?)
    }

    /// A database file, created if missing, migrated to the current schema.
    pub fn open(path: &Path) -> Result<SqliteDb, PortError> {
        SqliteDb::with(Connection::open(path).map_err(port_error)?)
    }

    fn with(conn: Connection) -> Result<SqliteDb, PortError> {
        conn.execute_batch(
            "PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS d1_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT,
               name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL);",
        )
        .map_err(port_error)?;
        for (name, sql) in MIGRATIONS {
            let applied: i64 = conn
                .query_row("SELECT count(*) FROM d1_migrations WHERE name = ?1", [name], |r| r.get(0))
                .map_err(port_error)?;
            if applied == 0 {
                let tx = conn.unchecked_transaction().map_err(port_error)?;
                tx.execute_batch(sql).map_err(port_error)?;
                tx.execute("INSERT INTO d1_migrations (name) VALUES (?1)", [name]).map_err(port_error)?;
                tx.commit().map_err(port_error)?;
            }
        }
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // Another process may write the file (`nyx5 shard move` beside `nyx5 serve`): wait for
        // its lock a moment rather than fail at once.
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(port_error)?;
        Ok(SqliteDb { conn: Mutex::new(conn) })
    }

    /// Rows inserted, updated or deleted since the connection opened, triggers included
    /// (`sqlite3_total_changes64`): the native cross-check of D1's `rows_written`, which also
    /// counts index entries (benches/README.md, "Edge").
    pub fn total_changes(&self) -> Result<u64, PortError> {
        Ok(self.lock()?.total_changes())
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>, PortError> {
        self.conn.lock().map_err(|_| PortError::Failed("database lock poisoned".into()))
    }
}

fn read_rows(conn: &Connection, stmt: &Stmt) -> Result<Vec<Row>, rusqlite::Error> {
    let mut prepared = conn.prepare_cached(stmt.sql)?;
    let names: Columns = prepared.column_names().into_iter().map(Box::from).collect();
    let mut rows = prepared.query(params(stmt))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let mut values = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            values.push(match r.get_ref(i)? {
                ValueRef::Null => SqlValue::Null,
                ValueRef::Integer(n) => SqlValue::Int(n),
                ValueRef::Real(f) => SqlValue::Int(f as i64),
                ValueRef::Text(t) | ValueRef::Blob(t) => SqlValue::Text(text(t)),
            });
        }
        out.push(Row::new(names.clone(), values));
    }
    Ok(out)
}

/// The statements of a batch and COMMIT, inside the transaction the caller began. Each one's
/// count is of every row it changed, its triggers' included, as D1 counts (`Db::batch`), so the
/// engine reads the same counts under `nyx5 serve` and in tests as on the Worker.
fn run_batch(conn: &Connection, stmts: &[Stmt]) -> Result<Vec<u64>, rusqlite::Error> {
    let mut changes = Vec::with_capacity(stmts.len());
    for s in stmts {
        let mut prepared = conn.prepare_cached(s.sql)?;
        let before = conn.total_changes();
        prepared.execute(params(s))?;
        changes.push(conn.total_changes().saturating_sub(before));
    }
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(changes)
}

impl Db for SqliteDb {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let conn = self.lock()?;
        read_rows(&conn, &stmt).map_err(port_error)
    }

    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        // One statement in autocommit: it applies whole once its rows are read, or not at all.
        let conn = self.lock()?;
        read_rows(&conn, &stmt).map_err(port_error)
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        let conn = self.lock()?;
        // BEGIN and COMMIT as cached statements (a rusqlite Transaction parses both each time).
        conn.prepare_cached("BEGIN").and_then(|mut begin| begin.execute([])).map_err(port_error)?;
        match run_batch(&conn, &stmts) {
            Ok(changes) => Ok(changes),
            Err(e) => {
                // Whatever failed (a statement, or COMMIT itself), nothing of the batch stays.
                if !conn.is_autocommit() {
                    let _rolled_back = conn.execute_batch("ROLLBACK");
                }
                Err(port_error(e))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stmt;

    /// SQLite answers at once: one poll finishes any of its futures (the sharding port's tests
    /// use it too).
    pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::pin!(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("SqliteDb's futures are ready when first polled"),
        }
    }

    #[test]
    fn a_constraint_is_named_and_any_other_failure_is_a_failure() {
        let db = SqliteDb::memory().unwrap();
        let before = db.total_changes().unwrap();
        let row =
            |window: i64| stmt!("INSERT INTO rate_windows (bucket, window, count, cap) VALUES ('b', ?, 1, 1)", window);
        block_on(db.batch(vec![row(1), row(2)])).unwrap();
        assert_eq!(db.total_changes().unwrap() - before, 2, "two rows written");
        let twice = block_on(db.batch(vec![row(1)])).unwrap_err();
        assert_eq!(twice, PortError::Constraint { name: "rate_windows.bucket, rate_windows.window".into() });
        let over = block_on(db.batch(vec![stmt!("UPDATE rate_windows SET count = 2 WHERE window = 1")])).unwrap_err();
        assert_eq!(over, PortError::Constraint { name: "rate_cap".into() });
        let broken = block_on(db.query(stmt!("SELECT * FROM no_such_table"))).unwrap_err();
        assert!(matches!(broken, PortError::Failed(_)), "{broken:?}");
    }

    #[test]
    fn values_go_in_and_come_out_as_they_are() {
        let db = SqliteDb::memory().unwrap();
        let rows = block_on(db.query(stmt!(
            "SELECT ?1 AS t, ?2 AS i, ?3 AS n, CAST(x'61ff62' AS TEXT) AS bad, 2.9 AS real,
                    typeof(?1) || ' ' || typeof(?2) || ' ' || typeof(?3) || ' ' || typeof(?4) AS types,
                    hex(?1) || ' ' || length(?4) AS bytes
             UNION ALL SELECT 'b', 2, 3, '', 0, '', ''",
            "ä \"a\" \u{0}",
            -7i64,
            None::<&str>,
            ""
        )))
        .unwrap();
        let values: Vec<(&str, &SqlValue)> = rows[0].columns().collect();
        assert_eq!(
            values,
            [
                ("t", &SqlValue::Text("ä \"a\" \u{0}".into())),
                ("i", &SqlValue::Int(-7)),
                ("n", &SqlValue::Null),
                // Not UTF-8: the byte that is not becomes U+FFFD, the rest stays.
                ("bad", &SqlValue::Text("a\u{fffd}b".into())),
                ("real", &SqlValue::Int(2)),
                // Bound as what they are: text (NUL and all, the empty one too), an integer, NULL.
                ("types", &SqlValue::Text("text integer null text".into())),
                ("bytes", &SqlValue::Text("C3A4202261222000 0".into())),
            ]
        );
        assert_eq!((rows[1].text("t"), rows[1].int("i"), rows[1].int("n")), (Some("b"), Some(2), Some(3)));
        assert_eq!(rows[1].get("none"), None);
    }
}
