//! Rows a Libro operation writes, as D1 bills them (issue 36 §1): one per row inserted, updated
//! or deleted, plus one per index entry changed. Counted natively on SQLite by comparing every
//! table and every index before and after (each index read back through its own columns and its
//! `WHERE`): a regression that adds a row or an index entry to a hot write fails here, in
//! `cargo test`, before it reaches `tests/e2e/d1_rows.mjs` under `wrangler dev`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::collections::BTreeMap;

use kit::*;
use nyx5_house::ports::{Db, Stmt};
use nyx5_house::{Registration, stmt};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, QuoteDraft};
use nyx5_proto::{Object, Value};

/// A query built at run time (the port takes `&'static str`: a test may leak a few).
fn dynamic(house: &TestHouse, sql: String) -> Vec<nyx5_house::ports::Row> {
    let sql: &'static str = Box::leak(sql.into_boxed_str());
    block_on(house.db.query(Stmt::new(sql, vec![]))).unwrap()
}

fn texts(house: &TestHouse, sql: String, column: &str) -> Vec<String> {
    dynamic(house, sql).iter().map(|r| r.text(column).unwrap_or_default().to_owned()).collect()
}

/// Every table and index of the database: for each b-tree D1 writes, its entries by identity
/// (the row's key: its primary key, or rowid) with their content.
type Snapshot = BTreeMap<String, BTreeMap<String, String>>;

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The key terms of a `CREATE INDEX … ON t (a, (expr), b) [WHERE …]`, as written: what an
/// expression column of the index is.
fn index_terms(sql: &str) -> Vec<String> {
    let Some(open) = sql.find(" ON ").and_then(|on| sql[on..].find('(').map(|p| on + p)) else { return Vec::new() };
    let mut depth = 0;
    let mut term = String::new();
    let mut out = Vec::new();
    for c in sql[open..].chars() {
        match c {
            '(' => {
                depth += 1;
                if depth > 1 {
                    term.push(c);
                }
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    out.push(term.trim().to_owned());
                    break;
                }
                term.push(c);
            }
            ',' if depth == 1 => out.push(std::mem::take(&mut term).trim().to_owned()),
            _ => term.push(c),
        }
    }
    out
}

fn snapshot(house: &TestHouse) -> Snapshot {
    let mut out = Snapshot::new();
    let tables = dynamic(
        house,
        "SELECT name, sql FROM sqlite_master WHERE type = 'table'
           AND (name NOT LIKE 'sqlite_%' OR name = 'sqlite_sequence') AND name NOT LIKE '_cf_%'"
            .into(),
    );
    for t in &tables {
        let name = t.text("name").unwrap();
        let without_rowid = t.text("sql").unwrap_or_default().to_uppercase().contains("WITHOUT ROWID");
        let cols = dynamic(house, format!("SELECT name, pk FROM pragma_table_info('{name}')"));
        let all: Vec<String> = cols.iter().map(|c| quote_ident(c.text("name").unwrap())).collect();
        let mut pk: Vec<(i64, String)> = cols
            .iter()
            .filter(|c| c.int("pk").unwrap() > 0)
            .map(|c| (c.int("pk").unwrap(), quote_ident(c.text("name").unwrap())))
            .collect();
        pk.sort();
        let key = if without_rowid || (pk.len() == 1 && is_rowid_alias(house, name, &pk[0].1)) {
            pk.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>().join(", ")
        } else {
            "rowid".to_owned()
        };
        let rows = dynamic(
            house,
            format!("SELECT json_array({key}) AS k, json_array({}) AS v FROM {}", all.join(", "), quote_ident(name)),
        );
        let entries = rows.iter().map(|r| (r.text("k").unwrap().to_owned(), r.text("v").unwrap().to_owned()));
        out.insert(format!("table {name}"), entries.collect());
        // Its indexes: a WITHOUT ROWID table's primary key is the table itself.
        let indexes = dynamic(house, format!("SELECT name, origin FROM pragma_index_list('{name}')"));
        for i in &indexes {
            let index = i.text("name").unwrap();
            if without_rowid && i.text("origin") == Some("pk") {
                continue;
            }
            let info =
                dynamic(house, format!("SELECT cid, name, key FROM pragma_index_xinfo('{index}') ORDER BY seqno"));
            let sql =
                texts(house, format!("SELECT coalesce(sql, '') AS s FROM sqlite_master WHERE name = '{index}'"), "s");
            // An expression's text, as the index's own SQL writes its key columns.
            let terms = index_terms(&sql[0]);
            let mut keys = Vec::new();
            let mut ids = Vec::new();
            for (at, c) in info.iter().enumerate() {
                let col = match c.int("cid").unwrap() {
                    -1 => "rowid".to_owned(),
                    -2 => terms.get(at).cloned().unwrap_or_else(|| panic!("index {index}: no term {at} in its SQL")),
                    _ => quote_ident(c.text("name").unwrap()),
                };
                if c.int("key") == Some(1) { keys.push(col) } else { ids.push(col) }
            }
            let partial = sql[0].to_uppercase().rfind(" WHERE ").map(|at| sql[0][at + 7..].to_owned());
            let rows = dynamic(
                house,
                format!(
                    "SELECT json_array({}) AS k, json_array({}) AS v FROM {} WHERE {}",
                    if ids.is_empty() { keys.join(", ") } else { ids.join(", ") },
                    keys.join(", "),
                    quote_ident(name),
                    partial.unwrap_or_else(|| "1".into())
                ),
            );
            let entries = rows.iter().map(|r| (r.text("k").unwrap().to_owned(), r.text("v").unwrap().to_owned()));
            out.insert(format!("index {index} on {name}"), entries.collect());
        }
    }
    out
}

fn is_rowid_alias(house: &TestHouse, table: &str, col: &str) -> bool {
    let types = dynamic(
        house,
        format!("SELECT type FROM pragma_table_info('{table}') WHERE quote(name) = quote({})", col.replace('"', "'")),
    );
    types.first().and_then(|r| r.text("type")).is_some_and(|t| t.eq_ignore_ascii_case("INTEGER"))
}

/// What changed between two snapshots: per b-tree, entries added, removed and changed.
fn diff(before: &Snapshot, after: &Snapshot) -> BTreeMap<String, (usize, usize, usize)> {
    let empty = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (name, now) in after {
        let then = before.get(name).unwrap_or(&empty);
        let added = now.keys().filter(|k| !then.contains_key(*k)).count();
        let removed = then.keys().filter(|k| !now.contains_key(*k)).count();
        let changed = now.iter().filter(|(k, v)| then.get(*k).is_some_and(|w| w != *v)).count();
        if added + removed + changed > 0 {
            out.insert(name.clone(), (added, removed, changed));
        }
    }
    out
}

/// Runs `f` and answers the rows it wrote as D1 counts them, printing the ledger.
fn written(house: &TestHouse, what: &str, f: impl FnOnce()) -> usize {
    let before = snapshot(house);
    let changes = || block_on(house.db.query(stmt!("SELECT total_changes() AS n"))).unwrap()[0].int("n").unwrap();
    let rows_before = changes();
    f();
    let rows = changes() - rows_before;
    let d = diff(&before, &snapshot(house));
    let total: usize = d.values().map(|(a, r, c)| a + r + c).sum();
    eprintln!("{what}: {total} rows written ({rows} rows changed by SQLite's count, index entries apart)");
    for (name, (a, r, c)) in &d {
        eprintln!("  {name}: +{a} -{r} ~{c}");
    }
    total
}

struct Libro {
    w: World,
    house: std::rc::Rc<TestHouse>,
    ana: Agent,
    cy: Agent,
}

fn libro() -> Libro {
    let w = World::new();
    let house = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 1);
    let cy = Agent::new("cy@a.test", 2);
    assert_eq!(ana.register_admin(&house).status, 201);
    assert_eq!(cy.register_admin(&house).status, 201);
    Libro { w, house, ana, cy }
}

/// A spot quote of `cy` to `ana` for `price`, and the operation accepting it, signed by ana.
fn accept(l: &Libro, id: &str, price: i64) -> nyx5_proto::Envelope {
    let quote = QuoteDraft {
        id: format!("q-{id}"),
        house: "a.test".into(),
        seller: l.cy.address.clone(),
        buyer: l.ana.address.clone(),
        contract: ContractKind::parse("spot").unwrap(),
        price,
        currency: "tok".into(),
        concept: "a measurement".into(),
        terms: None,
        arbiter: None,
        referrer: None,
        issued: l.w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&l.cy.sig)
    .unwrap();
    let body = obj([("op", "accept".into()), ("quote", Value::Object(quote.object().clone()))]);
    signed_op(&l.w, &l.ana, "a.test", id, body)
}

fn operate(l: &Libro, id: &str, price: i64) -> usize {
    let env = accept(l, id, price);
    assert_eq!(l.ana.send(&l.house, &env).status, 202);
    written(&l.house, &format!("the tick operating accept {id}"), || {
        let r = block_on(l.house.tick()).unwrap();
        assert_eq!(r.delivered, 1, "{r:?}");
    })
}

/// Rows a top-up writes, and a tick operating one spot `accept` (the figures
/// `tests/e2e/d1_rows.mjs` measures under `wrangler dev`), each counted by b-tree. Before
/// migration 0025: 9 and 25 (23 once every account exists); then 4 and 16; since the operation
/// is counted once (at the outbox, not again in a Libro window) and casa@'s balance rides on
/// the journal (migration 0034), 3 and 14. Of the 14, 7 are the queue's and the mailbox's: the
/// job's end (its row and its entries in `jobs_due` and `jobs_pending_domain`; on the Worker the
/// send took the job, which has no such entries, so 1) and a receipt in each party's mailbox (a
/// row and its `UNIQUE (local, envelope_id)` entry each).
#[test]
fn a_libro_operation_writes_its_budget_of_rows() {
    let l = libro();
    // The tick's own first run (its settings) is not the operation's.
    block_on(l.house.tick()).unwrap();
    let topup_rows = written(&l.house, "a top-up", || topup(&l.house, "ana@a.test", 1000));
    // As under `wrangler dev`: the seller's account is opened by the sale; then the steady state.
    let first = operate(&l, "op-1", 100);
    let steady = operate(&l, "op-2", 100);
    assert_eq!(balance(&l.house, "ana@a.test"), 800);
    eprintln!("top-up {topup_rows}, first accept {first}, steady accept {steady}");
    // The entry and its cause's index entry, the agent's line (casa@ has none).
    assert!(topup_rows <= 3, "a top-up wrote {topup_rows} rows");
    // The operation's row, the entry, the buyer's and the seller's lines, the contract and its
    // two parties' index entries; the job's end (3) and the two receipts (4).
    assert!(first <= 14, "the first accept wrote {first} rows");
    assert!(steady <= 14, "an accept wrote {steady} rows");
}
