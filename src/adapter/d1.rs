//! `Db` on D1: queries with `all()`, atomic batches with `D1Database::batch`; and, when the
//! operator asks (`NYX5_D1_METER=on`), a meter of what D1 bills, read from each result's `meta`.

use std::cell::Cell;

use nyx5_house::ports::{Columns, Db, PortError, Row, SqlValue, Stmt, constraint_name};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1Result};

/// The D1 binding as the engine's database.
pub(crate) struct D1Db {
    pub(crate) db: D1Database,
    /// Sums of D1's billing units since the last [`D1Db::take`]; `None` unless metering is on.
    pub(crate) meter: Option<Cell<Meter>>,
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

    fn count(&self, results: &[D1Result], batch: bool) {
        let Some(m) = &self.meter else { return };
        let mut now = m.get();
        if batch {
            now.batches += 1;
            now.statements += results.len() as u64;
        } else {
            now.queries += 1;
        }
        for meta in results.iter().filter_map(|r| r.meta().ok().flatten()) {
            now.rows_read += meta.rows_read.unwrap_or(0) as u64;
            now.rows_written += meta.rows_written.unwrap_or(0) as u64;
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

fn error(e: worker::Error) -> PortError {
    let text = e.to_string();
    match constraint_name(&text) {
        Some(name) => PortError::Constraint { name: name.to_owned() },
        None => PortError::Failed(text),
    }
}

fn prepare(db: &D1Database, stmt: &Stmt) -> Result<worker::D1PreparedStatement, PortError> {
    let params: Vec<JsValue> = stmt.params.iter().map(bind).collect();
    db.prepare(stmt.sql).bind(&params).map_err(error)
}

fn value(v: serde_json::Value) -> SqlValue {
    match v {
        serde_json::Value::Null => SqlValue::Null,
        serde_json::Value::Number(n) => SqlValue::Int(n.as_i64().unwrap_or_else(|| n.as_f64().map_or(0, |f| f as i64))),
        serde_json::Value::String(s) => SqlValue::Text(s),
        serde_json::Value::Bool(b) => SqlValue::Int(i64::from(b)),
        other => SqlValue::Text(other.to_string()),
    }
}

/// D1's rows (an object each, its members in name order), sharing one list of column names
/// while the rows have the same (as a query's do).
fn rows(objects: Vec<serde_json::Value>) -> Vec<Row> {
    let mut names: Columns = Columns::default();
    objects
        .into_iter()
        .map(|o| {
            let serde_json::Value::Object(map) = o else { return Row::default() };
            if !map.keys().map(String::as_str).eq(names.iter().map(|n| &**n)) {
                names = map.keys().map(|k| Box::from(k.as_str())).collect();
            }
            Row::new(names.clone(), map.into_iter().map(|(_, v)| value(v)).collect())
        })
        .collect()
}

impl Db for D1Db {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let result = prepare(&self.db, &stmt)?.all().await.map_err(error)?;
        self.count(std::slice::from_ref(&result), false);
        Ok(rows(result.results().map_err(error)?))
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        let prepared = stmts.iter().map(|s| prepare(&self.db, s)).collect::<Result<Vec<_>, _>>()?;
        let results = self.db.batch(prepared).await.map_err(error)?;
        self.count(&results, true);
        Ok(results.iter().map(|r| r.meta().ok().flatten().and_then(|m| m.changes).unwrap_or(0) as u64).collect())
    }
}
