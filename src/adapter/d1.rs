//! `Db` on D1: queries with `all()`, atomic batches with `batch()`, and their results read
//! property by property; and, when the operator asks (`NYX5_D1_METER=on`), a meter of what D1
//! bills, read from each result's `meta`.
//!
//! Reads that must be the latest (`query`) go to the binding itself, which D1 always sends to
//! the primary. Reads that may be a moment stale (`query_stale`) go through the Sessions API,
//! `withSession(<the request's bookmark> | "first-unconstrained")`: with read replication on, a
//! replica no older than the bookmark serves them. Batches go through a `"first-primary"`
//! session, which sends them where they always went (the primary) and tells the bookmark of the
//! write; the newest such bookmark of the isolate is kept, so that every answer after a write
//! carries a bookmark no older than it (docs/SPEC.md "Reading your own writes").

use std::cell::Cell as Counter;
use std::cell::RefCell;

use nyx5_house::ports::{Columns, Db, PortError, Reads, Row, SqlValue, Stmt, constraint_name};
use wasm_bindgen::{JsCast, JsValue};
use worker::D1Database;
use worker::wasm_bindgen_futures::JsFuture;

/// The D1 binding as the engine's database.
pub(crate) struct D1Db {
    pub(crate) db: D1Database,
    /// Sums of D1's billing units since the last [`D1Db::take`]; `None` unless metering is on.
    pub(crate) meter: Option<Counter<Meter>>,
    /// The newest bookmark of a write this isolate made (D1's bookmarks sort as text, oldest
    /// first). Only ever grows: another request's write in it is a point that exists, so an
    /// answer that carries it is at worst a little newer than it had to be.
    pub(crate) written: RefCell<Option<String>>,
}

/// The newer of two bookmarks as D1 orders them (as text: its binding keeps the greater by
/// `localeCompare`, and its bookmarks are fixed-width hexadecimal).
fn newer(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b > a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Round trips and D1's billing units (`meta.rows_read`, `meta.rows_written`) as D1 reports
/// them. The isolate serves requests concurrently, so a figure is one request's only when
/// requests do not overlap (as when `tests/e2e/d1_rows.mjs` measures them).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Meter {
    pub(crate) queries: u64,
    pub(crate) batches: u64,
    pub(crate) statements: u64,
    pub(crate) rows_read: u64,
    pub(crate) rows_written: u64,
}

impl Meter {
    /// `queries=1 batches=1 statements=3 rows_read=7 rows_written=4`: the `x-nyx5-d1` header
    /// and the tick's log line.
    pub(crate) fn line(&self) -> String {
        format!(
            "queries={} batches={} statements={} rows_read={} rows_written={}",
            self.queries, self.batches, self.statements, self.rows_read, self.rows_written
        )
    }
}

impl D1Db {
    /// What the meter counted since the last call (zero when metering is off), and a new start.
    pub(crate) fn take(&self) -> Option<Meter> {
        self.meter.as_ref().map(|m| m.replace(Meter::default()))
    }

    fn count(&self, results: &[JsValue], batch: bool) {
        let Some(m) = &self.meter else { return };
        let mut now = m.get();
        if batch {
            now.batches += 1;
            now.statements += results.len() as u64;
        } else {
            now.queries += 1;
        }
        for result in results {
            now.rows_read += meta_count(result, "rows_read").unwrap_or(0);
            now.rows_written += meta_count(result, "rows_written").unwrap_or(0);
        }
        m.set(now);
    }
}

fn bind(v: &SqlValue) -> JsValue {
    match v {
        SqlValue::Null => JsValue::NULL,
        // Every integer the engine binds is within 2^53 (times in ms, counts, amounts).
        SqlValue::Int(i) => JsValue::from_f64(*i as f64),
        SqlValue::Text(s) => JsValue::from_str(s),
    }
}

/// A failure as the engine sees it: a failed constraint by its name (the guards of a batch
/// report themselves so), anything else as its text.
fn failed(text: String) -> PortError {
    match constraint_name(&text) {
        Some(name) => PortError::Constraint { name: name.to_owned() },
        None => PortError::Failed(text),
    }
}

/// What D1 threw, as text: an `Error`'s message and, on a line of its own, its cause's (D1 writes
/// `D1_ERROR: UNIQUE constraint failed: t.c: SQLITE_CONSTRAINT`, the cause the same without the
/// prefix; the line break ends a constraint's name for `constraint_name` should the suffix ever
/// be missing), or whatever else was thrown as JavaScript would print it.
fn thrown(e: JsValue) -> PortError {
    let Some(error) = e.dyn_ref::<js_sys::Error>() else {
        return failed(e.as_string().unwrap_or_else(|| format!("{e:?}")));
    };
    let mut text = String::from(error.message());
    if let Some(cause) = error.cause().dyn_ref::<js_sys::Error>() {
        text.push('\n');
        text.push_str(&String::from(cause.message()));
    }
    failed(text)
}

fn prepare(db: &D1Database, stmt: &Stmt) -> Result<worker::D1PreparedStatement, PortError> {
    let params: Vec<JsValue> = stmt.params.iter().map(bind).collect();
    db.prepare(stmt.sql).bind(&params).map_err(|e| failed(e.to_string()))
}

/// `session.prepare(sql).bind(...params)`, called on the session object itself (workers-rs's
/// `D1DatabaseSession::prepare` panics should the binding throw).
fn prepare_in(session: &JsValue, stmt: &Stmt) -> Result<JsValue, PortError> {
    let prepared = invoke(session, "prepare", &js_sys::Array::of1(&JsValue::from_str(stmt.sql)))?;
    let params: js_sys::Array = stmt.params.iter().map(bind).collect();
    invoke(&prepared, "bind", &params)
}

/// A session of the Sessions API: `"first-primary"`, `"first-unconstrained"` or a bookmark.
fn session(db: &D1Database, from: &str) -> Result<worker::D1DatabaseSession, PortError> {
    db.with_session(Some(from)).map_err(|e| failed(format!("D1 withSession: {e}")))
}

/// The newest bookmark a session has seen, if it has seen one.
fn bookmark_of(session: &worker::D1DatabaseSession) -> Option<String> {
    session.get_bookmark().ok().flatten().filter(|b| !b.trim().is_empty())
}

/// Calls the method `name` of `target` with `args` and awaits the promise it returns. D1's
/// binding is called directly, not through workers-rs's `D1Result`, which reads rows and `meta`
/// with serde (its deserializer and errors, and with them Rust's float formatting: ~6 KB of the
/// gzipped wasm for what a few property reads do).
async fn call(target: &JsValue, name: &str, args: &js_sys::Array) -> Result<JsValue, PortError> {
    let answer = invoke(target, name, args)?;
    // `Promise.resolve` of what came back: a binding that answered without a promise is read as
    // its value, never cast blindly.
    JsFuture::from(js_sys::Promise::resolve(&answer)).await.map_err(thrown)
}

/// Calls the method `name` of `target` with `args`: what it returns, or what it threw.
fn invoke(target: &JsValue, name: &str, args: &js_sys::Array) -> Result<JsValue, PortError> {
    let method: js_sys::Function = js_sys::Reflect::get(target, &JsValue::from_str(name))
        .and_then(|m| m.dyn_into().map_err(|_| JsValue::from_str("not a function")))
        .map_err(|e| failed(format!("D1 binding has no {name}(): {e:?}")))?;
    method.apply(target, args).map_err(thrown)
}

/// A member of a JavaScript object, `undefined` when it has none (or is no object).
fn member(object: &JsValue, name: &str) -> JsValue {
    if !object.is_object() {
        return JsValue::UNDEFINED;
    }
    js_sys::Reflect::get(object, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// A count in a result's `meta` (`changes`, `rows_read`, `rows_written`), when it is one.
fn meta_count(result: &JsValue, name: &str) -> Option<u64> {
    member(&member(result, "meta"), name).as_f64().filter(|n| n.is_finite() && *n >= 0.0).map(|n| n as u64)
}

/// One column's value. D1 gives SQLite's NULL, integers and reals as JS numbers, and text;
/// the schema has no BLOB column. A real is truncated to an integer, as the engine reads none.
fn cell(v: JsValue) -> Result<SqlValue, PortError> {
    if v.is_null() || v.is_undefined() {
        Ok(SqlValue::Null)
    } else if let Some(n) = v.as_f64() {
        // SQLite stores no NaN or infinity; were one to come, it reads as NULL, not a number.
        Ok(if n.is_finite() { SqlValue::Int(n as i64) } else { SqlValue::Null })
    } else if let Some(s) = v.as_string() {
        Ok(SqlValue::Text(s))
    } else if let Some(b) = v.as_bool() {
        Ok(SqlValue::Int(i64::from(b)))
    } else {
        Err(PortError::Failed("D1 gave a column that is not null, a number, text or a boolean".to_owned()))
    }
}

/// A result's rows (each a JS object of its columns, in the query's order), sharing one list of
/// column names while the rows have the same (as a query's do).
fn rows(result: &JsValue) -> Result<Vec<Row>, PortError> {
    let results = member(result, "results");
    if results.is_undefined() || results.is_null() {
        return Ok(Vec::new());
    }
    let results: js_sys::Array = results.dyn_into().map_err(|_| failed("D1's results are not a list".to_owned()))?;
    let mut names: Columns = Columns::default();
    let mut out = Vec::with_capacity(results.length() as usize);
    for row in results.iter() {
        if !row.is_object() {
            return Err(failed("a row D1 gave is not an object".to_owned()));
        }
        let mut columns = Vec::new();
        let mut values = Vec::new();
        for entry in js_sys::Object::entries(row.unchecked_ref()).iter() {
            let entry: js_sys::Array = entry.unchecked_into();
            columns.push(entry.get(0).as_string().unwrap_or_default());
            values.push(cell(entry.get(1))?);
        }
        if !columns.iter().map(String::as_str).eq(names.iter().map(|n| &**n)) {
            names = columns.into_iter().map(String::into_boxed_str).collect();
        }
        out.push(Row::new(names.clone(), values));
    }
    Ok(out)
}

impl Db for D1Db {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let prepared = prepare(&self.db, &stmt)?;
        let result = call(prepared.inner(), "all", &js_sys::Array::new()).await?;
        self.count(std::slice::from_ref(&result), false);
        rows(&result)
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        // On the primary, as the binding itself would send it; the session tells the bookmark.
        let primary = session(&self.db, "first-primary")?;
        let list = stmts.iter().map(|s| prepare_in(primary.as_ref(), s)).collect::<Result<js_sys::Array, _>>()?;
        let results = call(primary.as_ref(), "batch", &js_sys::Array::of1(&list)).await?;
        if let Some(b) = bookmark_of(&primary) {
            let mut written = self.written.borrow_mut();
            *written = newer(written.take(), Some(b));
        }
        let results: Vec<JsValue> = results
            .dyn_into::<js_sys::Array>()
            .map_err(|_| failed("D1's batch gave no list of results".to_owned()))?
            .to_vec();
        if results.len() != stmts.len() {
            return Err(failed(format!("D1's batch gave {} results for {} statements", results.len(), stmts.len())));
        }
        self.count(&results, true);
        // The guards' undo rests on these counts: a result that does not say it succeeded, or
        // gives no count, fails the batch rather than reading as "nothing changed".
        results
            .iter()
            .map(|r| match (member(r, "success").as_bool(), meta_count(r, "changes")) {
                (Some(true), Some(changes)) => Ok(changes),
                _ => Err(failed("D1's batch gave a result without success and a change count".to_owned())),
            })
            .collect()
    }

    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        // On the primary, as a batch of one: the session tells the bookmark of the write.
        let primary = session(&self.db, "first-primary")?;
        let prepared = prepare_in(primary.as_ref(), &stmt)?;
        let result = call(&prepared, "all", &js_sys::Array::new()).await?;
        if let Some(b) = bookmark_of(&primary) {
            let mut written = self.written.borrow_mut();
            *written = newer(written.take(), Some(b));
        }
        self.count(std::slice::from_ref(&result), true);
        // As strict as a batch: a write whose result does not say it succeeded, or gives no list
        // of rows, fails rather than reading as "no row" (which a lease would take for "not
        // taken" while it may have been).
        if member(&result, "success").as_bool() != Some(true) || !js_sys::Array::is_array(&member(&result, "results")) {
            return Err(failed("D1 gave a write's result without success and a list of rows".to_owned()));
        }
        rows(&result)
    }

    async fn query_stale(&self, reads: &Reads, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let after = reads.bookmark();
        let session = session(&self.db, after.as_deref().unwrap_or("first-unconstrained"))?;
        let prepared = prepare_in(session.as_ref(), &stmt)?;
        let result = call(&prepared, "all", &js_sys::Array::new()).await?;
        self.count(std::slice::from_ref(&result), false);
        if let Some(seen) = newer(reads.bookmark(), bookmark_of(&session)) {
            reads.set(seen);
        }
        rows(&result)
    }

    fn bookmark(&self, reads: &Reads) -> Option<String> {
        newer(reads.bookmark(), self.written.borrow().clone())
    }
}
