//! `Db` on D1: queries with `all()`, atomic batches with `D1Database::batch`.

use nyx5_house::ports::{Db, PortError, Row, SqlValue, Stmt, constraint_name};
use wasm_bindgen::JsValue;
use worker::D1Database;

/// The D1 binding as the engine's database.
pub(crate) struct D1Db(pub D1Database);

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

fn row(value: serde_json::Value) -> Row {
    let columns = match value {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::Null => SqlValue::Null,
                    serde_json::Value::Number(n) => {
                        SqlValue::Int(n.as_i64().unwrap_or_else(|| n.as_f64().map_or(0, |f| f as i64)))
                    }
                    serde_json::Value::String(s) => SqlValue::Text(s),
                    serde_json::Value::Bool(b) => SqlValue::Int(i64::from(b)),
                    other => SqlValue::Text(other.to_string()),
                };
                (k, v)
            })
            .collect(),
        _ => Vec::new(),
    };
    Row { columns }
}

impl Db for D1Db {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let result = prepare(&self.0, &stmt)?.all().await.map_err(error)?;
        let rows: Vec<serde_json::Value> = result.results().map_err(error)?;
        Ok(rows.into_iter().map(row).collect())
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        let prepared = stmts.iter().map(|s| prepare(&self.0, s)).collect::<Result<Vec<_>, _>>()?;
        let results = self.0.batch(prepared).await.map_err(error)?;
        Ok(results.iter().map(|r| r.meta().ok().flatten().and_then(|m| m.changes).unwrap_or(0) as u64).collect())
    }
}
