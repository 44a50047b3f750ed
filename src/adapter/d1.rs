//! `Db` on D1: queries with `all()`, atomic batches with `D1Database::batch`; and, when the
//! operator asks (`NYX5_D1_METER=on`), a meter of what D1 bills, read from each result's `meta`.

use std::cell::Cell as Counter;
use std::fmt;

use nyx5_house::ports::{Columns, Db, PortError, Row, SqlValue, Stmt, constraint_name};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1Result};

/// The D1 binding as the engine's database.
pub(crate) struct D1Db {
    pub(crate) db: D1Database,
    /// Sums of D1's billing units since the last [`D1Db::take`]; `None` unless metering is on.
    pub(crate) meter: Option<Counter<Meter>>,
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

/// One row as D1 hands it over, a JS object: its columns in the query's order, read straight
/// into the engine's values. (Read as a `serde_json::Value` it went through a `BTreeMap` per
/// row and a copy of serde_json's whole value reader: ~4 KB of the gzipped wasm, and a map
/// allocated per row.)
struct D1Row(Vec<(Box<str>, SqlValue)>);

impl<'de> Deserialize<'de> for D1Row {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RowReader)
    }
}

struct RowReader;

impl<'de> Visitor<'de> for RowReader {
    type Value = D1Row;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row: an object of columns")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut columns: A) -> Result<D1Row, A::Error> {
        let mut row = Vec::new();
        while let Some((name, Cell(value))) = columns.next_entry::<String, Cell>()? {
            row.push((name.into_boxed_str(), value));
        }
        Ok(D1Row(row))
    }
}

/// One column's value. D1 gives SQLite's NULL, integers and reals as JS numbers, and text;
/// the schema has no BLOB column. A real is truncated to an integer, as the engine reads none.
struct Cell(SqlValue);

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CellReader)
    }
}

struct CellReader;

impl<'de> Visitor<'de> for CellReader {
    type Value = Cell;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null, a number, text or a boolean")
    }

    fn visit_unit<E>(self) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Null))
    }

    fn visit_none<E>(self) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Cell, D::Error> {
        Cell::deserialize(d)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Int(i64::from(b))))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Int(i)))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Int(i64::try_from(u).unwrap_or(i64::MAX))))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Cell, E> {
        // SQLite stores no NaN or infinity; were one to come, it reads as NULL, not a number.
        Ok(Cell(if f.is_finite() { SqlValue::Int(f as i64) } else { SqlValue::Null }))
    }

    fn visit_str<E>(self, s: &str) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Text(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Cell, E> {
        Ok(Cell(SqlValue::Text(s)))
    }
}

/// D1's rows, sharing one list of column names while the rows have the same (as a query's do).
fn rows(read: Vec<D1Row>) -> Vec<Row> {
    let mut names: Columns = Columns::default();
    read.into_iter()
        .map(|D1Row(columns)| {
            if !columns.iter().map(|(n, _)| &**n).eq(names.iter().map(|n| &**n)) {
                names = columns.iter().map(|(n, _)| n.clone()).collect();
            }
            Row::new(names.clone(), columns.into_iter().map(|(_, v)| v).collect())
        })
        .collect()
}

impl Db for D1Db {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let result = prepare(&self.db, &stmt)?.all().await.map_err(error)?;
        self.count(std::slice::from_ref(&result), false);
        Ok(rows(result.results::<D1Row>().map_err(error)?))
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        let prepared = stmts.iter().map(|s| prepare(&self.db, s)).collect::<Result<Vec<_>, _>>()?;
        let results = self.db.batch(prepared).await.map_err(error)?;
        self.count(&results, true);
        Ok(results.iter().map(|r| r.meta().ok().flatten().and_then(|m| m.changes).unwrap_or(0) as u64).collect())
    }
}
