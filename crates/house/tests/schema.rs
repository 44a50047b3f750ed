//! The schema itself enforces the invariants, whatever code writes to it: one mailbox row per
//! envelope id per agent, a mailbox's order that never goes back, single-use nonces, invitation
//! uses, rate caps, job states. And a failed guard undoes the whole batch.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::block_on;
use nyx5_house::ports::{Db, PortError};
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::stmt;

fn refused(db: &SqliteDb, stmts: Vec<nyx5_house::ports::Stmt>, constraint: &str) {
    match block_on(db.batch(stmts)) {
        Err(PortError::Constraint { name }) => assert_eq!(name, constraint, "another constraint failed"),
        other => panic!("expected a {constraint} violation, got {other:?}"),
    }
}

fn count(db: &SqliteDb, table: &'static str) -> i64 {
    let sql: &'static str = match table {
        "agents" => "SELECT count(*) AS n FROM agents",
        "mailbox" => "SELECT count(*) AS n FROM mailbox",
        "nonces" => "SELECT count(*) AS n FROM nonces",
        "registrations" => "SELECT count(*) AS n FROM registrations",
        _ => unreachable!(),
    };
    block_on(db.query(stmt!(sql))).unwrap()[0].int("n").unwrap()
}

/// An agent row, as a registration would leave it (the schema numbers its mailbox).
fn agent(local: &str) -> nyx5_house::ports::Stmt {
    stmt!(
        "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES (?, '{}', 's', 'open', 0, 0)",
        local
    )
}

#[test]
fn invariants_live_in_the_schema() {
    let db = SqliteDb::memory().unwrap();
    block_on(db.batch(vec![agent("ana")])).unwrap();
    let mail = |seq: i64| {
        stmt!(
            "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at) VALUES (?, 'ana', 'e1', 'bo@b', '{}', 1)",
            seq
        )
    };
    let first = 1 << nyx5_house::store::mailbox::SEQ_BITS;
    block_on(db.batch(vec![mail(first + 1)])).unwrap();
    refused(&db, vec![mail(first + 2)], "mailbox.local, mailbox.envelope_id");

    let nonce = || stmt!("INSERT INTO nonces (address, nonce, keep_until) VALUES ('ana@a', 'n-0123456789abcdef', 5)");
    block_on(db.batch(vec![nonce()])).unwrap();
    refused(&db, vec![nonce()], "nonces.address, nonces.nonce");

    block_on(db.batch(vec![stmt!("INSERT INTO invitations (code, uses, created_at) VALUES ('c', 1, 0)")])).unwrap();
    let use_it = || stmt!("UPDATE invitations SET used = used + 1 WHERE code = 'c'");
    block_on(db.batch(vec![use_it()])).unwrap();
    refused(&db, vec![use_it()], "invitation_uses");

    let hit = || {
        stmt!(
            "INSERT INTO rate_windows (bucket, window, count, cap) VALUES ('b', 1, 1, 2) ON CONFLICT (bucket, window) DO UPDATE SET count = count + 1"
        )
    };
    block_on(db.batch(vec![hit(), hit()])).unwrap();
    refused(&db, vec![hit()], "rate_cap");

    block_on(db.batch(vec![stmt!(
        "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, created_at) VALUES ('ana', 1, 'e1', 'ana', '{}', 'x', 0)"
    )]))
    .unwrap();
    refused(
        &db,
        vec![stmt!(
            "INSERT INTO jobs (envelope_id, domain, made, recipients, state, next_attempt, not_before, deadline, created_at) VALUES ('e1', 'b', 1, '[]', 'delivered', 0, 0, 9, 0)"
        )],
        "job_finished",
    );
    refused(
        &db,
        vec![stmt!(
            "INSERT INTO jobs (envelope_id, domain, made, recipients, state, next_attempt, not_before, deadline, created_at) VALUES ('nope', 'b', 1, '[]', 'pending', 0, 0, 9, 0)"
        )],
        "FOREIGN KEY",
    );
}

#[test]
fn a_failed_guard_undoes_the_whole_batch() {
    let db = SqliteDb::memory().unwrap();
    block_on(db.batch(vec![stmt!("INSERT INTO nonces (address, nonce, keep_until) VALUES ('a', 'n', 1)")])).unwrap();
    // A registration row and a mailbox row, then a replayed nonce: nothing of the three stays.
    refused(
        &db,
        vec![
            stmt!("INSERT INTO registrations (local, via, sig, at) VALUES ('x', 'open', 's', 1)"),
            agent("x"),
            stmt!(
                "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at) VALUES (?, 'x', 'e9', 's', '{}', 1)",
                (1_i64 << nyx5_house::store::mailbox::SEQ_BITS) + 1
            ),
            stmt!("INSERT INTO nonces (address, nonce, keep_until) VALUES ('a', 'n', 1)"),
        ],
        "nonces.address, nonces.nonce",
    );
    assert_eq!(count(&db, "registrations"), 0);
    assert_eq!(count(&db, "agents"), 0);
    assert_eq!(count(&db, "mailbox"), 0);
    assert_eq!(count(&db, "nonces"), 1);
}

/// An entry row for the Libro's journal with these lines (the triggers read `lines`), as the
/// Libro appends it (`store::libro::append`, which carries casa@'s balance on).
fn entry(n: i64, prev: &str, sha: &str, cause: &str, lines: &str) -> nyx5_house::ports::Stmt {
    nyx5_house::store::libro::append(&nyx5_house::store::libro::NewEntry {
        n,
        id: &format!("e{n}-{cause}"),
        cause,
        house: "a.test",
        at: 1,
        prev,
        sha256: sha,
        lines,
        entry: "{}",
    })
}

/// The same entry written by hand with casa@'s balance after it as `house_balance` says.
fn entry_saying(n: i64, prev: &str, cause: &str, lines: &str, house_balance: Option<i64>) -> nyx5_house::ports::Stmt {
    stmt!(
        "INSERT INTO libro_entries (n, id, cause, house, at, prev, sha256, lines, entry, house_balance)
         VALUES (?, ?, ?, 'a.test', 1, ?, ?, ?, '{}', ?)",
        n,
        format!("e{n}-{cause}"),
        cause,
        prev,
        ONE,
        lines,
        house_balance
    )
}

const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const ONE: &str = "1111111111111111111111111111111111111111111111111111111111111111";

fn balance(db: &SqliteDb, account: &str) -> Option<i64> {
    block_on(db.query(stmt!("SELECT balance FROM libro_accounts WHERE account = ?", account)))
        .unwrap()
        .first()
        .and_then(|r| r.int("balance"))
}

#[test]
fn the_libro_schema_refuses_what_must_never_be() {
    let db = SqliteDb::memory().unwrap();
    let gift = r#"[{"account":"casa@a.test","delta":-10},{"account":"ana@a.test","delta":10}]"#;
    // Lines that do not sum to zero, or name one account twice, or none at all.
    refused(&db, vec![entry(1, ZERO, ONE, "c1", r#"[{"account":"ana@a.test","delta":10}]"#)], "entry_unbalanced");
    refused(
        &db,
        vec![entry(
            1,
            ZERO,
            ONE,
            "c1",
            r#"[{"account":"ana@a.test","delta":10},{"account":"ana@a.test","delta":-10}]"#,
        )],
        "entry_unbalanced",
    );
    refused(&db, vec![entry(1, ZERO, ONE, "c1", "[]")], "entry_unbalanced");
    // The first entry links to 64 zeros and is number 1.
    refused(&db, vec![entry(2, ZERO, ONE, "c1", gift)], "entry_chain");
    refused(&db, vec![entry(1, ONE, ONE, "c1", gift)], "entry_chain");
    block_on(db.batch(vec![entry(1, ZERO, ONE, "topup:c1", gift)])).unwrap();
    assert_eq!((balance(&db, "ana@a.test"), balance(&db, "casa@a.test")), (Some(10), Some(-10)));
    // The next must link to it by hash, take the next number, and have a cause of its own (a
    // cause no envelope is, with a `:`; an operation's entry is kept once by its `libro_ops` row).
    refused(&db, vec![entry(2, ZERO, ONE, "c2", gift)], "entry_chain");
    refused(&db, vec![entry(3, ONE, ONE, "c2", gift)], "entry_chain");
    refused(&db, vec![entry(2, ONE, ONE, "topup:c1", gift)], "libro_entries.cause");
    // casa@'s balance rides on the journal (migration 0034): the entry says it, as the previous
    // entry's plus its own casa@ delta, or is refused; it has no lines.
    let again = r#"[{"account":"casa@a.test","delta":-5},{"account":"ana@a.test","delta":5}]"#;
    refused(&db, vec![entry_saying(2, ONE, "topup:c2", again, Some(-5))], "house_balance");
    refused(&db, vec![entry_saying(2, ONE, "topup:c2", again, None)], "house_balance");
    let huge = r#"[{"account":"casa@a.test","delta":-9007199254740982},{"account":"ana@a.test","delta":4503599627370491},
                   {"account":"bo@a.test","delta":4503599627370491}]"#;
    refused(&db, vec![entry(2, ONE, ONE, "topup:c2", huge)], "balance_max");
    // A journal is one house's: casa@ is one account all along.
    let elsewhere = stmt!(
        "INSERT INTO libro_entries (n, id, cause, house, at, prev, sha256, lines, entry, house_balance)
         VALUES (2, 'e2', 'topup:c2', 'b.test', 1, ?, ?, ?, '{}', -15)",
        ONE,
        ONE,
        r#"[{"account":"casa@b.test","delta":-5},{"account":"ana@a.test","delta":5}]"#
    );
    refused(&db, vec![elsewhere], "entry_house");
    let lines = block_on(db.query(stmt!("SELECT count(*) AS n FROM libro_lines WHERE account = 'casa@a.test'")));
    assert_eq!(lines.unwrap()[0].int("n"), Some(0));
    // Nobody but the house goes below zero, whatever the entry says; the batch is undone whole.
    let spend = r#"[{"account":"ana@a.test","delta":-11},{"account":"bo@a.test","delta":11}]"#;
    refused(&db, vec![entry(2, ONE, ONE, "c2", spend)], "balance_negative");
    let stranger = r#"[{"account":"nobody@a.test","delta":-1},{"account":"bo@a.test","delta":1}]"#;
    refused(&db, vec![entry(2, ONE, ONE, "c2", stranger)], "balance_negative");
    let other_house = r#"[{"account":"casa@b.test","delta":-1},{"account":"bo@a.test","delta":1}]"#;
    refused(&db, vec![entry(2, ONE, ONE, "c2", other_house)], "balance_negative");
    assert_eq!((balance(&db, "ana@a.test"), balance(&db, "bo@a.test")), (Some(10), None));
    // The journal is written once.
    refused(&db, vec![stmt!("UPDATE libro_entries SET lines = '[]' WHERE n = 1")], "entry_fixed");
    refused(&db, vec![stmt!("DELETE FROM libro_entries WHERE n = 1")], "entry_fixed");
    // A mandate is never spent past its cap.
    block_on(db.batch(vec![stmt!(
        "INSERT INTO libro_mandates (id, grantor, grantee, cap, state, root, chain, created, record)
         VALUES ('m1', 'ana@a.test', 'bo@a.test', 5, 'active', 'm1', '[\"m1\"]', 1, '{}')"
    )]))
    .unwrap();
    refused(&db, vec![stmt!("UPDATE libro_mandates SET spent = 6 WHERE id = 'm1'")], "mandate_spent");
}

/// Applies the migrations from `from` (the first, with `None`) up to `until`, which is left out
/// (a name no migration has, such as "end": all of them).
fn migrate(c: &rusqlite::Connection, from: Option<&str>, until: &str) {
    let migrations = nyx5_house::migrations::MIGRATIONS;
    let at = |name: &str| migrations.iter().position(|(n, _)| *n == name).unwrap_or(migrations.len());
    for (_, sql) in &nyx5_house::migrations::MIGRATIONS[from.map_or(0, at)..at(until)] {
        c.execute_batch(sql).unwrap();
    }
}

/// Migration 0008 copies the mailbox without AUTOINCREMENT: every row keeps its columns and its
/// `seq`, the next envelope comes after the highest, an id is still held once per mailbox, and
/// no row can be deleted (a deleted highest row would hand its `seq` out again).
#[test]
fn the_mailbox_keeps_its_rows_and_order_across_migration_0008() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "0008_mailbox_seq.sql");
    c.execute_batch(
        "INSERT INTO mailbox (local, envelope_id, sender, envelope, received_at, acked_at, bytes, stamp) VALUES
           ('ana', 'e1', 'bo@b.test', '{\"a\":1}', 10, NULL, 7, NULL),
           ('ana', 'e2', 'bo@b.test', '', 11, 20, 0, 'stamp'),
           ('cy', 'e3', 'postmaster@a.test', '{}', 12, NULL, NULL, NULL);
         DELETE FROM mailbox WHERE envelope_id = 'e1';
         INSERT INTO mailbox (local, envelope_id, sender, envelope, received_at, bytes)
           VALUES ('ana', 'e4', 'bo@b.test', '{\"b\":2}', 13, 7);",
    )
    .unwrap();
    let snapshot = |c: &rusqlite::Connection| -> Vec<String> {
        let mut s = c.prepare("SELECT * FROM mailbox ORDER BY seq").unwrap();
        s.query_map([], |r| Ok((0..9).map(|i| format!("{:?}", r.get_ref(i).unwrap())).collect::<Vec<_>>().join("|")))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let old = snapshot(&c);
    assert!(old[0].starts_with("Integer(2)|"), "AUTOINCREMENT did not reuse seq 1: {old:?}");
    migrate(&c, Some("0008_mailbox_seq.sql"), "0013_mailbox_ranges.sql");
    assert_eq!(snapshot(&c), old);

    c.execute(
        "INSERT INTO mailbox (local, envelope_id, sender, envelope, received_at) VALUES ('cy', 'e5', 'x', '', 14)",
        [],
    )
    .unwrap();
    assert_eq!(c.last_insert_rowid(), 5);
    let again = c.execute(
        "INSERT INTO mailbox (local, envelope_id, sender, envelope, received_at) VALUES ('ana', 'e2', 'x', '', 15)",
        [],
    );
    assert!(again.unwrap_err().to_string().contains("UNIQUE"));
    let delete = c.execute("DELETE FROM mailbox WHERE seq = 5", []);
    assert!(delete.unwrap_err().to_string().contains("mailbox rows are kept"));
    assert_eq!(c.query_row("SELECT max(seq) FROM mailbox", [], |r| r.get::<_, i64>(0)).unwrap(), 5);
    // The page and acknowledgement indexes are there again.
    let indexes: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'mailbox' AND sql IS NOT NULL ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(indexes, ["mailbox_acked", "mailbox_pending"]);
}

/// Migration 0013 refuses, changing nothing, a house whose envelopes were numbered past one
/// range (2^30) or not above zero: copied, such a row would land in another mailbox's range (or
/// on a range's base), and push that mailbox's next number to the end of its range.
#[test]
fn migration_0013_refuses_a_seq_that_fits_no_range() {
    for (seq, fits) in [(1_i64 << 30, false), ((1 << 30) - 1, true), (0, false), (-5, false), (1, true)] {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&c, None, "0013_mailbox_ranges.sql");
        c.execute_batch("INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES ('ana', '{}', 's', 'open', 0, 0)")
            .unwrap();
        c.execute(
            "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at) VALUES (?1, 'ana', 'e1', 'x', '{}', 1)",
            [seq],
        )
        .unwrap();
        let sql = nyx5_house::migrations::MIGRATIONS.iter().find(|(n, _)| *n == "0013_mailbox_ranges.sql").unwrap().1;
        let outcome = c.execute_batch(&format!("BEGIN; {sql} COMMIT;"));
        let stored: i64 = c.query_row("SELECT seq FROM mailbox", [], |r| r.get(0)).unwrap();
        if fits {
            outcome.unwrap();
            assert_eq!(stored, (1 << 30) + seq);
        } else {
            assert!(outcome.unwrap_err().to_string().contains("seq_fits_in_a_range"));
            c.execute_batch("ROLLBACK").unwrap();
            assert_eq!(stored, seq);
            let mbox = c.prepare("SELECT mbox FROM agents");
            assert!(mbox.is_err(), "the agents table was changed");
        }
    }
}

/// Migration 0013 moves each mailbox into a range of `seq`s of its own: every row keeps its
/// columns, its old `seq` becomes its `n` (so a client's `after` still holds; an acknowledged row
/// goes to the range's mirror below zero), agents are
/// numbered, and the rows of a local no agent holds go to range 0. Afterwards every new agent is
/// numbered by the schema itself, an envelope inserted by the engine's statement takes its
/// mailbox's highest `n` plus one, and the page index is gone (nothing but the table's key
/// orders a mailbox).
#[test]
fn migration_0013_gives_each_mailbox_a_range_of_its_own() {
    let path = std::env::temp_dir().join(format!("nyx5-migration-0013-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    {
        // A house as the release before 0013 left it, recorded as `SqliteDb` records migrations.
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE d1_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE,
               applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL);",
        )
        .unwrap();
        migrate(&c, None, "0013_mailbox_ranges.sql");
        for (name, _) in nyx5_house::migrations::MIGRATIONS.iter().take_while(|(n, _)| *n != "0013_mailbox_ranges.sql")
        {
            c.execute("INSERT INTO d1_migrations (name) VALUES (?1)", [name]).unwrap();
        }
        c.execute_batch(
            "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES
               ('cy', '{}', 's', 'open', 0, 0), ('ana', '{}', 's', 'open', 0, 0);
             INSERT INTO mailbox (local, envelope_id, sender, envelope, received_at, acked_at, bytes, stamp) VALUES
               ('ana', 'e1', 'bo@b.test', '{\"a\":1}', 10, NULL, 7, NULL),
               ('cy', 'e2', 'bo@b.test', '', 11, 20, 0, 'stamp'),
               ('gone', 'e3', 'postmaster@a.test', '{}', 12, NULL, NULL, NULL),
               ('ana', 'e4', 'bo@b.test', '{}', 13, NULL, 2, NULL);",
        )
        .unwrap();
    }
    let db = SqliteDb::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let all = |sql: &'static str| block_on(db.query(stmt!(sql))).unwrap();
    let rows: Vec<(i64, String)> = all(
        "SELECT seq, local || '|' || envelope_id || '|' || sender || '|' || received_at || '|' ||
                coalesce(acked_at, '-') || '|' || coalesce(bytes, '-') || '|' || coalesce(stamp, '-') || '|' || envelope AS r
         FROM mailbox ORDER BY seq",
    )
    .iter()
    .map(|r| (r.int("seq").unwrap(), r.text("r").unwrap().to_owned()))
    .collect();
    let span = 1_i64 << nyx5_house::store::mailbox::SEQ_BITS;
    assert_eq!(
        rows,
        [
            (-(span + 2), "cy|e2|bo@b.test|11|20|0|stamp|".to_owned()),
            (3, "gone|e3|postmaster@a.test|12|-|-|-|{}".to_owned()),
            (2 * span + 1, "ana|e1|bo@b.test|10|-|7|-|{\"a\":1}".to_owned()),
            (2 * span + 4, "ana|e4|bo@b.test|13|-|2|-|{}".to_owned()),
        ]
    );
    let numbers = || -> Vec<(String, i64)> {
        all("SELECT local, mbox FROM agents ORDER BY mbox")
            .iter()
            .map(|r| (r.text("local").unwrap().to_owned(), r.int("mbox").unwrap()))
            .collect()
    };
    assert_eq!(numbers(), [("cy".to_owned(), 1), ("ana".to_owned(), 2)]);
    block_on(db.batch(vec![stmt!(
        "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES ('bo', '{}', 's', 'open', 0, 0)"
    )]))
    .unwrap();
    assert_eq!(numbers()[2], ("bo".to_owned(), 3));

    // The engine's insert: ana's next envelope is her highest plus one; bo's first is 1.
    let quota = nyx5_house::store::mailbox::Quota { max_envelopes: 10, max_bytes: 1000 };
    for (local, id) in [("ana", "e5"), ("bo", "e6")] {
        block_on(db.batch(vec![nyx5_house::store::mailbox::insert(local, id, "x@b.test", "{}", 20, quota)])).unwrap();
    }
    let seq = |id: &str| -> i64 {
        block_on(db.query(stmt!("SELECT seq FROM mailbox WHERE envelope_id = ?", id))).unwrap()[0].int("seq").unwrap()
    };
    assert_eq!((seq("e5"), seq("e6")), (2 * span + 5, 3 * span + 1));
    // Anything else that writes the mailbox must name a seq of the agent's own range.
    for (seq, local) in
        [(None, "bo"), (Some(0), "bo"), (Some(2 * span + 9), "bo"), (Some(3 * span), "bo"), (Some(9), "gone")]
    {
        let put = stmt!(
            "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at) VALUES (?, ?, 'e9', 'x', '{}', 1)",
            seq.map_or(nyx5_house::ports::SqlValue::Null, nyx5_house::ports::SqlValue::Int),
            local
        );
        match block_on(db.batch(vec![put])) {
            Err(nyx5_house::ports::PortError::Constraint { name }) => {
                assert!(name.starts_with("mailbox_range"), "{name}")
            }
            other => panic!("{seq:?} for {local}: {other:?}"),
        }
    }
    block_on(db.batch(vec![stmt!(
        "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at) VALUES (?, 'bo', 'e9', 'x', '{}', 1)",
        3 * span + 9
    )]))
    .unwrap();
    let indexes = all(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'mailbox' AND sql IS NOT NULL ORDER BY name",
    );
    assert_eq!(indexes.iter().map(|r| r.text("name").unwrap()).collect::<Vec<_>>(), ["mailbox_acked"]);
}

/// The tick's purges run every minute on tables that grow with traffic: each finds its rows
/// through an index, never by reading the whole table (D1 bills every row read). The purges of
/// the outbox (twice a tick), the card cache, the email bridge's outgoing mail and the
/// authority's hourly counts read all of theirs until migration 0014. Three small
/// tables are read whole by design: `rate_windows` (a few minutes of windows; an index on
/// `window` would cost a row written per envelope), `nonces` (the last few minutes of tokens;
/// its index `nonces_expiry` cost a row written per authenticated request until migration 0022)
/// and `domain_health` (a row per failing destination). And one index is walked for each failing
/// destination: `jobs_pending`, the pending jobs, to find one of that destination's (an index by
/// domain cost a row written per job queued until migration 0024; only failing destinations have
/// a `domain_health` row to look for).
/// SQLite's plan for `s`, a line per step.
fn plan(c: &rusqlite::Connection, s: &nyx5_house::ports::Stmt) -> Vec<String> {
    let mut plan = c.prepare(&format!("EXPLAIN QUERY PLAN {}", s.sql)).unwrap();
    let params = s.params.iter().map(|p| match p {
        nyx5_house::ports::SqlValue::Null => rusqlite::types::Value::Null,
        nyx5_house::ports::SqlValue::Int(i) => rusqlite::types::Value::Integer(*i),
        nyx5_house::ports::SqlValue::Text(t) => rusqlite::types::Value::Text(t.clone()),
    });
    plan.query_map(rusqlite::params_from_iter(params), |r| r.get(3)).unwrap().map(Result::unwrap).collect()
}

/// An agent's A2A tasks keep their callers' text (up to 512 KiB of messages and an answer): a
/// ListTasks page's cut and a stream's rereads read indexes that carry what they need, never the
/// rows (whose `bytes` and `updated` come after the text, so reading them from a row walks its
/// overflow pages), and the room's guard reads the three counters its triggers keep. Migration 0033.
#[test]
fn a2a_task_reads_that_repeat_read_indexes_not_the_tasks_text() {
    use nyx5_house::store::a2a;
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let room =
        a2a::Room { tasks: 10, bytes: 10, strangers_tasks: 5, strangers_bytes: 5, share_tasks: 1, share_bytes: 1 };
    let guard = plan(&c, &a2a::room("ana", &room, "unverified"));
    let counters = guard.iter().filter(|d| *d == "SEARCH a2a_rooms USING PRIMARY KEY (local=? AND share=?)");
    assert_eq!(counters.count(), 3, "the guard reads three counters: {guard:?}");
    assert!(!guard.iter().any(|d| d.contains("a2a_tasks")), "and never the tasks: {guard:?}");
    let moved = plan(&c, &a2a::moved_query("ana", "t-1"));
    assert_eq!(moved, ["SEARCH a2a_tasks USING COVERING INDEX a2a_tasks_moves (id=? AND local=?)"], "{moved:?}");
    let page = plan(&c, &a2a::list_query("ana", "c-1", 50, 0, 1 << 21));
    assert!(
        page.iter()
            .any(|d| d.starts_with("SEARCH a2a_tasks USING COVERING INDEX a2a_tasks_context (local=? AND context=?)")),
        "{page:?}"
    );
    // The page is taken in the index's order; only its own rows (at most 100) are sorted at the end.
    assert_eq!(page.iter().filter(|d| d.contains("TEMP B-TREE")).count(), 1, "{page:?}");
    assert_eq!(page.last().map(String::as_str), Some("USE TEMP B-TREE FOR ORDER BY"), "{page:?}");
    assert!(page.iter().any(|d| d.starts_with("SEARCH t USING INDEX sqlite_autoindex_a2a_tasks_1 (id=?)")), "{page:?}");
}

/// A page walks its mailbox's range of the table's key (waiting envelopes only), never the
/// `(local, envelope_id)` index, which holds every envelope the agent ever had, acknowledged ones
/// included, and would have to be sorted.
#[test]
fn a_page_walks_its_range_of_the_key() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let bounds =
        nyx5_house::store::inbox::PageBounds { after: 0, limit: 50, bytes: 1 << 20, overhead: 100, unrecorded: 1024 };
    let details = plan(&c, &nyx5_house::store::inbox::page_query("ana", bounds));
    assert!(details.iter().any(|d| d == "SEARCH c USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"), "{details:?}");
    assert!(!details.iter().any(|d| d.contains("sqlite_autoindex_mailbox_1")), "{details:?}");
}

#[test]
fn the_ticks_purges_read_no_growing_table_whole() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let now = 1_000_000_000_000;
    let mut stmts = nyx5_house::store::agents::purge(now);
    stmts.extend(nyx5_house::store::queue::purge(now, 100));
    stmts.extend(nyx5_house::queue::upkeep_statements(now).into_iter().map(|(s, _)| s));
    stmts.push(nyx5_house::store::email::purge_out(now, 100));
    stmts.extend(nyx5_house::store::libro::prune_authority(now, 3_600_000, 100));
    stmts.push(nyx5_house::store::libro::forget_received(now, 100));
    for s in &stmts {
        let details = plan(&c, s);
        // What a statement may read whole: the two small tables, and its own CTE's few rows.
        // (`CONSTANT ROW`: a CTE's first row, no table.)
        let mut small = vec!["rate_windows", "nonces", "domain_health", "CONSTANT"];
        if let Some(cte) = s.sql.trim_start().strip_prefix("WITH ") {
            let cte = cte.strip_prefix("RECURSIVE ").unwrap_or(cte);
            small.extend(cte.split(|c: char| c.is_whitespace() || c == '(').next());
            // And the CTEs after the first (`…), name AS …`).
            let words: Vec<&str> = cte.split_whitespace().collect();
            small.extend(words.windows(3).filter(|w| w[0].ends_with("),") && w[2] == "AS").map(|w| w[1]));
        }
        let whole: Vec<&String> = details
            .iter()
            .filter(|d| d.strip_prefix("SCAN ").is_some_and(|t| !small.contains(&t.split(' ').next().unwrap_or(t))))
            .collect();
        assert!(whole.is_empty(), "{}\nreads a table whole: {whole:?} (plan {details:?})", s.sql);
    }
    // (14 since issue 35: the Libro's first-received times, and the outbox's forgetting horizon,
    // an upsert of one `settings` row; 15 with the names known without a pin; 18 since issue 36 §1:
    // the bodies of watermark raises; 20 since migration 0029: the purge's window over the roots
    // and its cursor.)
    assert_eq!(stmts.len(), 20, "every purge of the tick was looked at");
}

/// A card fetched is cached in one slot: neither the lookup nor either insert reads the cache
/// whole (until migration 0015 each insert counted the table, up to 10,000 rows per card fetched).
#[test]
fn the_card_cache_is_read_and_written_a_slot_at_a_time() {
    use nyx5_house::store::resolver as cache;
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    for s in [
        cache::cached_query("ana@x.test", 0),
        cache::cache("ana@x.test", "{}", "https://x.test", 1),
        cache::cache_if_pinned("x.test", "{}", "https://x.test", 1, "sig"),
    ] {
        let details = plan(&c, &s);
        assert!(
            !details.iter().any(|d| d.starts_with("SCAN") && d != "SCAN CONSTANT ROW"),
            "{}\nreads a table whole: {details:?}",
            s.sql
        );
    }
    let lookup = plan(&c, &cache::cached_query("ana@x.test", 0));
    assert!(lookup.iter().any(|d| d.starts_with("SEARCH card_slots USING INTEGER PRIMARY KEY")), "{lookup:?}");
}

/// The cache keeps one card per slot (migration 0015).
#[test]
fn a_card_takes_its_slot_over_and_is_read_only_under_its_own_key() {
    use nyx5_house::store::resolver::{cache, cached, slot};
    let db = SqliteDb::memory().unwrap();
    let first = "a0@x.test";
    let rival = (1..).map(|i| format!("a{i}@x.test")).find(|k| slot(k) == slot(first)).unwrap_or_default();
    let other = (1..).map(|i| format!("b{i}@x.test")).find(|k| slot(k) != slot(first)).unwrap_or_default();
    block_on(db.batch(vec![cache(first, "card-1", "u1", 10), cache(&other, "card-o", "uo", 10)])).unwrap();
    let text = |key: &str| block_on(cached(&db, key, 0)).unwrap().and_then(|r| r.text("card").map(str::to_owned));
    assert_eq!(text(first).as_deref(), Some("card-1"));
    assert_eq!(text(&rival), None, "a key that shares the slot does not read another's card");
    // The same key again refreshes its row; the rival's card then takes the slot over.
    block_on(db.batch(vec![cache(first, "card-2", "u2", 20)])).unwrap();
    assert_eq!(text(first).as_deref(), Some("card-2"));
    block_on(db.batch(vec![cache(&rival, "card-r", "ur", 30)])).unwrap();
    assert_eq!(text(&rival).as_deref(), Some("card-r"));
    assert_eq!(text(first), None);
    assert_eq!(text(&other).as_deref(), Some("card-o"), "other slots are untouched");
    let rows = block_on(db.query(stmt!("SELECT count(*) AS n FROM card_slots"))).unwrap();
    assert_eq!(rows.first().and_then(|r| r.get("n")), Some(&nyx5_house::ports::SqlValue::Int(2)));
    // The schema holds the slot to the range `slot` gives, whatever writes it.
    let at = |slot: u64| {
        let slot = i64::try_from(slot).unwrap();
        stmt!("INSERT INTO card_slots (slot, key, card, url, fetched_at) VALUES (?, 'k', '{}', 'u', 1)", slot)
    };
    let slots = nyx5_house::store::resolver::CACHE_SLOTS;
    block_on(db.batch(vec![at(slots - 1)])).unwrap();
    assert!(matches!(block_on(db.batch(vec![at(slots)])), Err(PortError::Constraint { .. })));
    // Only fresh rows are read.
    assert_eq!(block_on(cached(&db, &rival, 30)).unwrap(), None);
}

/// Migration 0022 moves a mailbox's count from its usage row into its newest envelope's tally:
/// what each mailbox holds (waiting envelopes, kept bytes) is the same number before and after.
/// Afterwards an envelope the engine inserts carries the tally one on, and one inserted by a
/// Worker from before 0022 (no tally, counted in the usage row as it always did) is counted once.
#[test]
fn migration_0022_keeps_what_each_mailbox_holds() {
    let path = std::env::temp_dir().join(format!("nyx5-migration-0022-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let span = 1_i64 << nyx5_house::store::mailbox::SEQ_BITS;
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE d1_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE,
               applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL);",
        )
        .unwrap();
        migrate(&c, None, "0022_mailbox_tally.sql");
        for (name, _) in nyx5_house::migrations::MIGRATIONS.iter().take_while(|(n, _)| *n != "0022_mailbox_tally.sql") {
            c.execute("INSERT INTO d1_migrations (name) VALUES (?1)", [name]).unwrap();
        }
        c.execute_batch(
            "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at) VALUES
               ('ana', '{}', 's', 'open', 0, 0), ('cy', '{}', 's', 'open', 0, 0), ('dee', '{}', 's', 'open', 0, 0);",
        )
        .unwrap();
        // ana: 1 waiting (7 bytes), 2 acknowledged (one kept, 5 bytes; one dropped), a notice
        // newest; 3 rows counted ever, usage 1 envelope and 12 bytes. cy: a notice only. dee:
        // one acknowledged out of order, newest, below zero.
        let ins = |seq: i64, local: &str, id: &str, acked: Option<i64>, bytes: Option<i64>| {
            c.execute(
                "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at, acked_at, bytes)
                 VALUES (?1, ?2, ?3, 'bo@b.test', '{}', 1, ?4, ?5)",
                rusqlite::params![seq.abs(), local, id, acked, bytes],
            )
            .unwrap();
            // Acknowledged out of order: moved below zero, as the engine does.
            if seq < 0 {
                c.execute("UPDATE mailbox SET seq = -seq WHERE envelope_id = ?1", [id]).unwrap();
            }
        };
        ins(span + 1, "ana", "a1", None, Some(7));
        ins(-(span + 2), "ana", "a2", Some(5), Some(5));
        ins(-(span + 3), "ana", "a3", Some(5), Some(0));
        ins(span + 4, "ana", "a4", None, None);
        ins(2 * span + 1, "cy", "c1", None, None);
        ins(3 * span + 1, "dee", "d1", None, Some(3));
        ins(-(3 * span + 2), "dee", "d2", Some(9), Some(4));
        c.execute_batch(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes) VALUES
               ('ana', 1, 12, 10, 1000), ('dee', 1, 7, 10, 1000);",
        )
        .unwrap();
    }
    let db = SqliteDb::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let held = |local: &str| {
        let rows = block_on(nyx5_house::store::mailbox::usage(&db, &format!("[\"{local}\"]"))).unwrap();
        (rows[0].int("envelopes").unwrap(), rows[0].int("bytes").unwrap())
    };
    assert_eq!([held("ana"), held("cy"), held("dee")], [(1, 12), (0, 0), (1, 7)]);
    let quota = nyx5_house::store::mailbox::Quota { max_envelopes: 10, max_bytes: 1000 };
    block_on(db.batch(vec![nyx5_house::store::mailbox::insert("ana", "a5", "x@b.test", "{\"c\":3}", 20, quota)]))
        .unwrap();
    assert_eq!(held("ana"), (2, 19));
    block_on(db.batch(vec![nyx5_house::store::mailbox::insert("dee", "d3", "x@b.test", "{}", 20, quota)])).unwrap();
    assert_eq!(held("dee"), (2, 9));
    // A Worker from before 0022: its own insert, and its count in the usage row.
    block_on(db.batch(vec![
        stmt!(
            "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at, bytes)
             VALUES (? + 6, 'ana', 'old', 'x@b.test', '{}', 21, 2)",
            span
        ),
        stmt!("UPDATE mailbox_usage SET envelopes = envelopes + 1, bytes = bytes + 2 WHERE local = 'ana'"),
    ]))
    .unwrap();
    assert_eq!(held("ana"), (3, 21));
    block_on(db.batch(vec![nyx5_house::store::mailbox::insert("ana", "a7", "x@b.test", "{}", 22, quota)])).unwrap();
    assert_eq!(held("ana"), (4, 23));
    let n = block_on(db.query(stmt!("SELECT seq - ? AS n FROM mailbox WHERE envelope_id = 'a7'", span))).unwrap();
    assert_eq!(n[0].int("n"), Some(7), "after the old Worker's row");
}

/// A token's nonce is one row written (D1 counts index entries as rows): the table has its key
/// and nothing else, and the tick's purge reads the few minutes of nonces it holds whole
/// (migration 0022 dropped `nonces_expiry`, which every authenticated request wrote).
#[test]
fn a_nonce_writes_its_row_and_no_index() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let mut s = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'nonces' AND sql IS NOT NULL")
        .unwrap();
    let indexes: Vec<String> = s.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    assert!(indexes.is_empty(), "{indexes:?}");
}

/// A job that ends writes its row and takes its entries out of the indexes of pending jobs, and
/// writes no other index: every index of `jobs` but its key is over pending jobs only (migration
/// 0022 replaced `jobs_domain (domain, state)`, whose entry an ending job rewrote). The due scan
/// reads `jobs_due (next_attempt)` up to now, so only due jobs, however many wait to retry (the
/// hostile review of issue 36 undid 0024's single index by `not_before`, through which every tick
/// read the whole retrying backlog), and a failing domain's jobs are found through
/// `jobs_pending_domain (domain)`.
#[test]
fn the_indexes_of_jobs_hold_pending_jobs_only() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let mut s = c
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs' AND sql IS NOT NULL ORDER BY name")
        .unwrap();
    let indexes: Vec<(String, String)> =
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    let names: Vec<&str> = indexes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["jobs_due", "jobs_pending_domain"], "{indexes:?}");
    for (name, sql) in &indexes {
        assert!(sql.ends_with("WHERE state = 'pending'"), "{name}: {sql}");
    }
}

/// An entry as SQL a Worker from before migration 0034 writes (no `house_balance`), number `n`
/// of the chain `h1`, `h2`, … with these lines.
fn older_entry(n: i64, cause: &str, lines: &str) -> String {
    let prev = if n == 1 { "0".repeat(64) } else { format!("h{}", n - 1) };
    format!(
        "INSERT INTO libro_entries (n, id, cause, house, at, prev, sha256, lines, entry)
         VALUES ({n}, 'id{n}', '{cause}', 'a.test', {n}, '{prev}', 'h{n}', '{lines}', '{{}}');"
    )
}

/// Migration 0025 moves each account's balance onto its lines (and `libro_accounts` becomes the
/// view of each account's newest line), drops the journal's index of entry ids, indexes only the
/// causes no envelope is (an operation's is kept once by `libro_ops`), and keys `libro_ops`,
/// `libro_contracts` and `rate_windows` WITHOUT ROWID: what every account holds, every line's
/// running balance, every operation, contract and rate window are the same before and after; the schema still
/// refuses an overdraft, a balance past 2^53 - 1, a second entry for one cause and a broken chain;
/// and an entry posted afterwards (as a Worker from before 0025 posts it too) moves each line on
/// from the balance before it.
#[test]
fn migration_0025_keeps_every_balance_operation_and_contract() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "0025_libro_rows.sql");
    let entry = older_entry;
    let line = |a: &str, d: i64| format!("{{\"account\":\"{a}\",\"delta\":{d}}}");
    let l = |ls: &[(&str, i64)]| format!("[{}]", ls.iter().map(|(a, d)| line(a, *d)).collect::<Vec<_>>().join(","));
    c.execute_batch(&[
        entry(1, "topup:1", &l(&[("casa@a.test", -1000), ("ana@a.test", 1000)])),
        entry(2, "op-2", &l(&[("ana@a.test", -100), ("cy@a.test", 99), ("casa@a.test", 1)])),
        entry(3, "op-3", &l(&[("ana@a.test", -50), ("escrow:k1", 50)])),
        "INSERT INTO libro_ops (envelope_id, operator, op, sha256, at, receipt) VALUES ('op-2', 'ana@a.test', 'accept', 's2', 2, '{\"r\":2}');
         INSERT INTO libro_ops (envelope_id, operator, op, sha256, at, receipt, refused, reason) VALUES ('op-9', 'bo@b.test', 'release', 's9', 9, '', 403, 'no');
         INSERT INTO libro_contracts (id, kind, state, seller, buyer, amount, created, updated, version, record)
           VALUES ('k1', 'escrow', 'held', 'cy@a.test', 'ana@a.test', 50, 3, 3, 2, '{\"id\":\"k1\"}');
         INSERT INTO rate_windows (bucket, window, count, cap) VALUES ('libro:settle:ana@a.test', 7, 2, 3);".into(),
    ].concat())
    .unwrap();
    let rows = |c: &rusqlite::Connection, sql: &str| -> Vec<String> {
        let mut s = c.prepare(sql).unwrap();
        s.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
    };
    let accounts = "SELECT json_array(account, balance, may_owe) FROM libro_accounts ORDER BY account";
    let ops = "SELECT json_array(envelope_id, operator, op, sha256, at, receipt, refused, reason) FROM libro_ops ORDER BY envelope_id";
    let contracts = "SELECT json_array(id, kind, state, seller, buyer, amount, created, updated, version, record) FROM libro_contracts ORDER BY id";
    let journal = "SELECT json_array(n, id, cause, sha256, lines) FROM libro_entries ORDER BY n";
    let windows = "SELECT json_array(bucket, window, count, cap) FROM rate_windows";
    let all = [accounts, ops, contracts, journal, windows];
    let before: Vec<Vec<String>> = all.iter().map(|q| rows(&c, q)).collect();
    assert_eq!(before[0].len(), 4);
    migrate(&c, Some("0025_libro_rows.sql"), "0034_house_balance_on_journal.sql");
    let after: Vec<Vec<String>> = all.iter().map(|q| rows(&c, q)).collect();
    assert_eq!(before, after);
    let lines = rows(&c, "SELECT json_array(account, n, balance) FROM libro_lines ORDER BY account, n");
    assert_eq!(
        lines,
        [
            r#"["ana@a.test",1,1000]"#,
            r#"["ana@a.test",2,900]"#,
            r#"["ana@a.test",3,850]"#,
            r#"["casa@a.test",1,-1000]"#,
            r#"["casa@a.test",2,-999]"#,
            r#"["cy@a.test",2,99]"#,
            r#"["escrow:k1",3,50]"#,
        ]
    );
    let kinds = "SELECT type || ' ' || name FROM sqlite_master WHERE name IN ('libro_accounts', 'libro_ops', 'libro_contracts') ORDER BY name";
    assert_eq!(rows(&c, kinds), ["view libro_accounts", "table libro_contracts", "table libro_ops"]);
    // No index apart from a table's key, but the contracts' by party and the causes no envelope is.
    let indexes = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('libro_entries', 'libro_ops', 'libro_lines', 'rate_windows')";
    assert_eq!(rows(&c, indexes), ["libro_entries_cause"]);
    let fails = |sql: &str| c.execute_batch(sql).unwrap_err().to_string();
    // An overdraft, a balance past 2^53 - 1, a cause twice, a broken chain: refused.
    assert!(fails(&entry(4, "op-4", &l(&[("ana@a.test", -851), ("cy@a.test", 851)]))).contains("balance_negative"));
    let huge = 9_007_199_254_740_991_i64;
    assert!(fails(&entry(4, "op-4", &l(&[("casa@a.test", -huge), ("cy@a.test", huge)]))).contains("balance_max"));
    assert!(fails(&entry(4, "topup:1", &l(&[("casa@a.test", -1), ("cy@a.test", 1)]))).contains("libro_entries.cause"));
    assert!(fails(&entry(5, "op-5", &l(&[("ana@a.test", -1), ("cy@a.test", 1)]))).contains("entry_chain"));
    assert!(fails("UPDATE rate_windows SET count = 4").contains("rate_cap"));
    assert!(fails("INSERT INTO libro_ops (envelope_id, operator, op, sha256, at, receipt) VALUES ('op-2', 'x', 'y', 'z', 1, '')").contains("libro_ops.envelope_id"));
    assert_eq!(rows(&c, accounts), after[0], "nothing moved");
    // A posting afterwards: each line from the balance before it, a new account from zero.
    c.execute_batch(&entry(4, "op-4", &l(&[("ana@a.test", -850), ("dee@a.test", 849), ("casa@a.test", 1)]))).unwrap();
    assert_eq!(
        rows(&c, accounts),
        [
            r#"["ana@a.test",0,0]"#,
            r#"["casa@a.test",-998,1]"#,
            r#"["cy@a.test",99,0]"#,
            r#"["dee@a.test",849,0]"#,
            r#"["escrow:k1",50,0]"#,
        ]
    );
}

/// Migration 0034 moves the house's account onto the journal: every account holds what it held
/// (casa@'s balance now the newest entry's `house_balance`; its old lines stay, read by nobody;
/// another house's `casa@` is an account like any), and the next entry, appended as the Libro
/// appends it, carries casa@'s balance on from there and writes no casa@ line.
#[test]
fn migration_0034_keeps_the_house_balance_on_the_journal() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "0034_house_balance_on_journal.sql");
    let entry = older_entry;
    c.execute_batch(
        &[
            entry(1, "topup:1", r#"[{"account":"casa@a.test","delta":-1000},{"account":"ana@a.test","delta":1000}]"#),
            entry(2, "op-2", r#"[{"account":"ana@a.test","delta":-100},{"account":"cy@a.test","delta":90},{"account":"casa@a.test","delta":10}]"#),
            entry(3, "op-3", r#"[{"account":"ana@a.test","delta":-1},{"account":"casa@b.test","delta":1}]"#),
        ]
        .concat(),
    )
    .unwrap();
    let rows = |sql: &str| -> Vec<String> {
        let mut s = c.prepare(sql).unwrap();
        s.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
    };
    let accounts = "SELECT json_array(account, balance) FROM libro_accounts ORDER BY account";
    let before = rows(accounts);
    assert_eq!(
        before,
        [r#"["ana@a.test",899]"#, r#"["casa@a.test",-990]"#, r#"["casa@b.test",1]"#, r#"["cy@a.test",90]"#]
    );
    migrate(&c, Some("0034_house_balance_on_journal.sql"), "end");
    assert_eq!(rows(accounts), before);
    let casa_lines = "SELECT json_array(account, n, balance) FROM libro_lines WHERE account LIKE 'casa@%'";
    let kept = [r#"["casa@a.test",1,-1000]"#, r#"["casa@a.test",2,-990]"#, r#"["casa@b.test",3,1]"#];
    assert_eq!(rows(casa_lines), kept);
    assert_eq!(
        rows("SELECT json_array(n, house_balance) FROM libro_entries ORDER BY n"),
        ["[1,null]", "[2,null]", "[3,-990]"]
    );
    // The next entry as the Libro appends it: from -990, by its casa@ delta.
    let next = nyx5_house::store::libro::append(&nyx5_house::store::libro::NewEntry {
        n: 4,
        id: "id4",
        cause: "op-4",
        house: "a.test",
        at: 4,
        prev: "h3",
        sha256: "h4",
        lines: r#"[{"account":"ana@a.test","delta":-50},{"account":"cy@a.test","delta":45},{"account":"casa@a.test","delta":5}]"#,
        entry: "{}",
    });
    let params: Vec<rusqlite::types::Value> = next
        .params
        .iter()
        .map(|p| match p {
            nyx5_house::ports::SqlValue::Int(i) => rusqlite::types::Value::Integer(*i),
            nyx5_house::ports::SqlValue::Text(t) => rusqlite::types::Value::Text(t.clone()),
            nyx5_house::ports::SqlValue::Null => rusqlite::types::Value::Null,
        })
        .collect();
    c.execute(next.sql, rusqlite::params_from_iter(params)).unwrap();
    assert_eq!(
        rows(accounts),
        [r#"["ana@a.test",849]"#, r#"["casa@a.test",-985]"#, r#"["casa@b.test",1]"#, r#"["cy@a.test",135]"#]
    );
    assert_eq!(rows(casa_lines), kept);
}

/// Issue 36 §1, an outbound envelope's rows (migration 0024): the outbox has its key, its `UNIQUE`
/// id and one index, `outbox_root` (root agent, `seq`), which serves both the sender's pages and
/// the count of its tree's sends this minute; `nonces` is keyed by its pair with no rowid beside
/// it. Each hot read walks a range: the due jobs `jobs_due`, a page and the count
/// `outbox_root`, the purge the outbox's key. A new index is a deliberate change of this test.
#[test]
fn an_outbound_envelope_writes_two_rows_and_three_index_entries() {
    use nyx5_house::store::queue;
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let indexes = |table: &str| -> Vec<String> {
        let mut s =
            c.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 ORDER BY name").unwrap();
        s.query_map([table], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    // The outbox's key is `(root, seq)`, its one index the envelope's id; a job's key is its
    // envelope and domain, its indexes the pending jobs' two (migration 0029).
    assert_eq!(indexes("outbox"), ["sqlite_autoindex_outbox_1"]);
    assert_eq!(indexes("jobs"), ["jobs_due", "jobs_pending_domain"]);
    for table in ["nonces", "outbox", "jobs"] {
        let without_rowid: i64 =
            c.query_row("SELECT wr FROM pragma_table_list WHERE name = ?1", [table], |r| r.get(0)).unwrap();
        assert_eq!(without_rowid, 1, "{table} is its key alone");
    }

    let now = 1_800_000_000_000;
    let due = plan(&c, &stmt!(queue::DUE_SQL, now, now, now, now, 10));
    assert!(due.iter().any(|d| d == "SEARCH d USING INDEX jobs_due (next_attempt<?)"), "{due:?}");
    let postpone = plan(&c, &queue::postpone_domain("b.test", now, now));
    assert_eq!(postpone, ["SEARCH jobs USING INDEX jobs_pending_domain (domain=?)"]);
    let page = plan(&c, &queue::outbox_page_query("s1.ana@a.test", i64::MAX, 50));
    assert!(page.iter().any(|d| d == "SEARCH outbox USING PRIMARY KEY (root=? AND seq<?)"), "{page:?}");
    let out = queue::Outgoing {
        envelope_id: "e",
        sender: "s1.ana@a.test",
        envelope: "{}",
        sha256: "x",
        expires: None,
        now,
        not_before: now,
        deadline: now + 1,
        judged: None,
    };
    let job = queue::NewJob { domain: "b.test".into(), recipients: "[]".into(), first: None };
    let insert = queue::enqueue_remembered(&out, &[job], now, 10);
    let count = plan(&c, &insert[0]);
    // The count of the root's minute, and the next `seq` (one seek in its own millisecond's slots
    // of the root's key): both ranges of the key.
    let ranges = count.iter().filter(|d| *d == "SEARCH outbox USING PRIMARY KEY (root=? AND seq>? AND seq<?)").count();
    assert_eq!(ranges, 2, "{count:?}");
    // A job's place comes from its envelope's row, found by its id.
    let job = plan(&c, &insert[1]);
    assert!(job.iter().any(|d| d == "SEARCH outbox USING INDEX sqlite_autoindex_outbox_1 (envelope_id=?)"), "{job:?}");
    // The purge walks the key root by root.
    for s in queue::purge(now, 100) {
        let details = plan(&c, &s);
        assert!(!details.iter().any(|d| d == "SCAN o" || d == "SCAN outbox" || d == "SCAN jobs"), "{details:?}");
    }
}

/// Migration 0024 keeps every outbox row, job and nonce: an old pending job is due, an old row is
/// on its sender's page and purged once finished a week, a nonce is still spent, and a new
/// envelope comes after every old one. A Worker from before 0024 (until `wrangler deploy`) still
/// queues: its row takes the next `seq`, and its job is due.
#[test]
fn migrations_0024_and_0029_keep_the_outbox_its_jobs_and_nonces() {
    use nyx5_house::store::queue;
    let path = std::env::temp_dir().join(format!("nyx5-migration-0024-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let day = 86_400_000_i64;
    let now = 1_800_000_000_000_i64;
    let before_0024 = "0024_outbound_rows.sql";
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE d1_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE,
               applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL);",
        )
        .unwrap();
        migrate(&c, None, before_0024);
        for (name, _) in nyx5_house::migrations::MIGRATIONS.iter().take_while(|(n, _)| *n != before_0024) {
            c.execute("INSERT INTO d1_migrations (name) VALUES (?1)", [name]).unwrap();
        }
        c.execute_batch(&format!(
            "INSERT INTO outbox (envelope_id, sender, envelope, sha256, created_at) VALUES
               ('old', 'ana@a.test', '{{}}', 'x', {old}),
               ('sub', 's1.ana@a.test', '{{}}', 'x', {recent}),
               ('cy', 'cy@a.test', '{{}}', 'x', {recent});
             INSERT INTO jobs (envelope_id, domain, recipients, state, next_attempt, not_before, deadline,
                               created_at, finished_at) VALUES
               ('old', 'b.test', '[]', 'delivered', {old}, {old}, {old_deadline}, {old}, {old}),
               ('sub', 'b.test', '[]', 'pending', {retry}, {recent}, {deadline}, {recent}, NULL),
               ('cy', 'c.test', '[]', 'pending', {later}, {later}, {deadline}, {recent}, NULL);
             INSERT INTO nonces (address, nonce, keep_until) VALUES ('ana@a.test', 'n1', {deadline});",
            old = now - 9 * day,
            old_deadline = now - 8 * day,
            recent = now - 60_000,
            retry = now - 1_000,
            later = now + day,
            deadline = now + 3 * day,
        ))
        .unwrap();
    }
    let db = SqliteDb::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let ids = |rows: Vec<nyx5_house::ports::Row>, col: &str| -> Vec<String> {
        rows.iter().map(|r| r.text(col).unwrap().to_owned()).collect()
    };
    // Only the job due now, not the one due tomorrow.
    assert_eq!(ids(block_on(queue::due(&db, now, 10)).unwrap(), "envelope_id"), ["sub"]);
    assert_eq!(ids(block_on(queue::outbox_page(&db, "s1.ana@a.test", i64::MAX, 10)).unwrap(), "envelope_id"), ["sub"]);
    assert_eq!(ids(block_on(queue::outbox_page(&db, "ana@a.test", i64::MAX, 10)).unwrap(), "envelope_id"), ["old"]);
    // The nonce is still spent.
    match block_on(
        db.batch(vec![stmt!("INSERT INTO nonces (address, nonce, keep_until) VALUES ('ana@a.test', 'n1', 0)")]),
    ) {
        Err(PortError::Constraint { name }) => assert_eq!(name, nyx5_house::store::constraint::NONCE_USED),
        other => panic!("a spent nonce again: {other:?}"),
    }
    // A new envelope comes after every old one, counted in its root's minute from one.
    let out = queue::Outgoing {
        envelope_id: "new",
        sender: "ana@a.test",
        envelope: "{}",
        sha256: "x",
        expires: None,
        now,
        not_before: now,
        deadline: now + day,
        judged: None,
    };
    let job = queue::NewJob { domain: "b.test".into(), recipients: "[]".into(), first: None };
    block_on(db.batch(queue::enqueue_remembered(&out, &[job], now, 10))).unwrap();
    // Code from before 0029 (a Worker until `wrangler deploy`) names no root and a job's `id`: its
    // inserts fail whole rather than land in rows the new code misreads.
    for old in [
        stmt!(
            "INSERT INTO outbox (envelope_id, sender, envelope, sha256, expires, created_at) VALUES ('w', 'cy@a.test', '{}', 'x', NULL, ?)",
            now
        ),
        stmt!(
            "INSERT INTO jobs (id, envelope_id, domain, recipients, state, next_attempt, not_before, deadline, created_at)
             VALUES (9, 'new', 'c.test', '[]', 'pending', ?, ?, ?, ?)",
            now,
            now,
            now + day,
            now
        ),
    ] {
        assert!(block_on(db.batch(vec![old])).is_err());
    }
    // Each old row has its root, and its job its old order.
    let roots = block_on(db.query(stmt!("SELECT root FROM outbox ORDER BY seq"))).unwrap();
    assert_eq!(ids(roots, "root"), ["ana@a.test", "ana@a.test", "cy@a.test", "ana@a.test"]);
    let made = block_on(db.query(stmt!("SELECT envelope_id FROM jobs ORDER BY made"))).unwrap();
    assert_eq!(ids(made, "envelope_id"), ["old", "sub", "cy", "new"]);
    let order = block_on(db.query(stmt!("SELECT envelope_id, rate_n FROM outbox ORDER BY seq"))).unwrap();
    assert_eq!(ids(order.clone(), "envelope_id"), ["old", "sub", "cy", "new"]);
    let rates: Vec<Option<i64>> = order.iter().map(|r| r.int("rate_n")).collect();
    assert_eq!(rates, [None, None, None, Some(1)]);
    // No AUTOINCREMENT: no `sqlite_sequence` row is rewritten per envelope.
    let sequence =
        block_on(db.query(stmt!("SELECT count(*) AS n FROM sqlite_sequence WHERE name = 'outbox'"))).unwrap();
    assert_eq!(sequence[0].int("n"), Some(0));
    let mut due = ids(block_on(queue::due(&db, now, 10)).unwrap(), "envelope_id");
    due.sort();
    assert_eq!(due, ["new", "sub"]);
    // The purge forgets the old finished envelope (a week past) and nothing else.
    block_on(db.batch(queue::purge(now - 7 * day, 100))).unwrap();
    let left = block_on(db.query(stmt!("SELECT envelope_id FROM outbox ORDER BY seq"))).unwrap();
    assert_eq!(ids(left, "envelope_id"), ["sub", "cy", "new"]);
}

/// The texts a `state` column is compared with in `sql`: `state = 'x'`, `state != 'x'`,
/// `state <> 'x'`, `state IN ('x', 'y')` (any table's alias before it), each once, sorted.
fn compared_states(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = sql[at..].find("state") {
        let start = at + i;
        at = start + "state".len();
        let before = sql[..start].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = sql[at..].trim_start();
        let list = if let Some(r) = rest.strip_prefix("IN") {
            match r.trim_start().strip_prefix('(') {
                Some(r) => &r[..r.find(')').unwrap_or(r.len())],
                None => continue,
            }
        } else if let Some(r) = ["=", "!=", "<>"].iter().find_map(|op| rest.strip_prefix(op)) {
            let r = r.trim_start();
            match r.strip_prefix('\'') {
                Some(lit) => &r[..lit.find('\'').map_or(0, |e| e + 2)],
                None => continue,
            }
        } else {
            continue;
        };
        for lit in list.split(',').filter_map(|s| s.trim().strip_prefix('\'')?.strip_suffix('\'')) {
            out.push(lit.to_owned());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every `.rs` file under `dir` and every `.sql` file in it, read.
fn sources_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "sql") {
                out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out
}

/// Issue 37 §5: the enums the house reads its states through say exactly what the schema lets
/// in, so neither can drift from the other. Where a table's `CHECK` lists its states, the enum's
/// texts are that list; and every text the house's SQL (its code and its migrations) compares a
/// `state` with is one some enum names (`libro_contracts.state` has no `CHECK`: this is what
/// holds its texts).
#[test]
fn the_state_enums_are_the_schemas_states() {
    use nyx5_rules::libro::state::{ApprovalState, CheckState, ContractState, MandateState};
    use nyx5_rules::queue::{EmailState, JobState};
    fn texts<T: Copy>(all: &[T], text: fn(T) -> &'static str) -> Vec<String> {
        let mut v: Vec<String> = all.iter().map(|&s| text(s).to_owned()).collect();
        v.sort();
        v
    }
    let enums = [
        ("jobs", texts(&JobState::ALL, JobState::as_str)),
        ("email_out", texts(&EmailState::ALL, EmailState::as_str)),
        ("libro_mandates", texts(&MandateState::ALL, MandateState::as_str)),
        ("libro_pending", texts(&ApprovalState::ALL, ApprovalState::as_str)),
        ("verifica_checks", texts(&CheckState::ALL, CheckState::as_str)),
        ("a2a_tasks", texts(&nyx5_rules::a2a::State::ALL, nyx5_rules::a2a::State::as_str)),
    ];
    let db = SqliteDb::memory().unwrap();
    for (table, want) in &enums {
        let rows = block_on(db.query(stmt!("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", *table)));
        let sql = rows.unwrap()[0].text("sql").unwrap().to_owned();
        let column = sql.lines().find(|l| l.trim_start().starts_with("state ")).unwrap_or_default();
        assert!(column.contains("CHECK"), "{table}.state has no CHECK: {sql}");
        assert_eq!(&compared_states(column), want, "{table}.state's CHECK and its enum differ");
    }
    let mut known: Vec<String> = enums.iter().flat_map(|(_, t)| t.clone()).collect();
    known.extend(texts(&ContractState::ALL, ContractState::as_str));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut seen = 0;
    for dir in ["crates/house/src", "migrations"] {
        for (path, text) in sources_under(&root.join(dir)) {
            for s in compared_states(&text) {
                assert!(known.contains(&s), "{}: SQL compares a state with {s:?}, which no enum names", path.display());
                seen += 1;
            }
        }
    }
    assert!(seen > 10, "the reader found only {seen} states in the house's SQL");
    // The reader itself.
    assert_eq!(
        compared_states("WHERE c.state IN ('released', 'refunded') AND x.state <> 'a' OR state='b' AND mystate = 'no'"),
        ["a", "b", "refunded", "released"]
    );
}

/// The purge walks the outbox a window of roots at a time and moves on only once nothing in the
/// window is left to forget (hostile review of migration 0029): a root that keeps filling its
/// part of the window (50 envelopes to forget at every call here, against 100 forgotten per
/// call) delays the roots beside it by a few calls, never for good, and the roots of the next
/// windows get their turn.
#[test]
fn a_busy_root_holds_up_no_other_in_the_purge() {
    use nyx5_house::store::queue;
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let (day, now) = (86_400_000_i64, 1_800_000_000_000_i64);
    let old = now - 9 * day;
    let mut n = 0_i64;
    let mut add = |root: &str| {
        n += 1;
        c.execute(
            "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, created_at) VALUES (?1, ?2, ?3, ?1, '{}', 'x', ?4)",
            rusqlite::params![root, old * 1024 + n, format!("e{n}"), old],
        )
        .unwrap();
        c.execute(
            "INSERT INTO jobs (envelope_id, domain, made, recipients, state, next_attempt, not_before, deadline, created_at, finished_at)
             VALUES (?1, 'b.test', ?2, '[]', 'delivered', ?3, ?3, ?3, ?3, ?3)",
            rusqlite::params![format!("e{n}"), n, old],
        )
        .unwrap();
    };
    for r in 0..130 {
        add(&format!("a{r:03}@a.test"));
    }
    for _ in 0..250 {
        add("a000@a.test");
    }
    let others = |c: &rusqlite::Connection| -> i64 {
        c.query_row("SELECT count(*) FROM outbox WHERE root <> 'a000@a.test'", [], |r| r.get(0)).unwrap()
    };
    let mut calls = 0;
    while others(&c) > 0 {
        calls += 1;
        assert!(calls <= 20, "the other roots wait behind a busy one: {} left", others(&c));
        for s in queue::purge(now - 7 * day, 100) {
            let params = s.params.iter().map(|p| match p {
                nyx5_house::ports::SqlValue::Null => rusqlite::types::Value::Null,
                nyx5_house::ports::SqlValue::Int(i) => rusqlite::types::Value::Integer(*i),
                nyx5_house::ports::SqlValue::Text(t) => rusqlite::types::Value::Text(t.clone()),
            });
            c.execute(s.sql, rusqlite::params_from_iter(params)).unwrap();
        }
        for _ in 0..50 {
            add("a000@a.test");
        }
    }
    // The first window held the busy root: it took more than one call, and no more than a few.
    assert!(calls > 1, "{calls}");
}

/// A house of exactly one window of roots (64) purges it whole every time and never writes the
/// cursor or the window's end; one more root makes two windows (second hostile review of 0029).
#[test]
fn a_house_of_one_window_never_moves_the_purges_cursor() {
    use nyx5_house::store::queue;
    let c = rusqlite::Connection::open_in_memory().unwrap();
    migrate(&c, None, "end");
    let (day, now) = (86_400_000_i64, 1_800_000_000_000_i64);
    let run = |c: &rusqlite::Connection| -> i64 {
        let before = c.total_changes();
        for s in queue::purge(now - 7 * day, 100) {
            if !s.sql.contains("'outbox_purge_") {
                continue;
            }
            let params = s.params.iter().map(|p| match p {
                nyx5_house::ports::SqlValue::Null => rusqlite::types::Value::Null,
                nyx5_house::ports::SqlValue::Int(i) => rusqlite::types::Value::Integer(*i),
                nyx5_house::ports::SqlValue::Text(t) => rusqlite::types::Value::Text(t.clone()),
            });
            c.execute(s.sql, rusqlite::params_from_iter(params)).unwrap();
        }
        i64::try_from(c.total_changes() - before).unwrap()
    };
    let add = |c: &rusqlite::Connection, r: i64| {
        c.execute(
            "INSERT INTO outbox (root, seq, envelope_id, sender, envelope, sha256, created_at) VALUES (?1, 1, ?2, ?1, '{}', 'x', ?3)",
            rusqlite::params![format!("a{r:03}@a.test"), format!("e{r}"), now],
        )
        .unwrap();
    };
    for r in 0..64 {
        add(&c, r);
    }
    // (The deletes forget nothing here: every envelope is recent. Each call may write the
    // cursor and the window's end only if they move.)
    for _ in 0..3 {
        assert_eq!(run(&c), 0, "64 roots: one window, nothing written");
    }
    add(&c, 64);
    let writes: Vec<i64> = (0..4).map(|_| run(&c)).collect();
    assert!(writes.iter().all(|&w| w > 0), "65 roots: two windows, the cursor moves: {writes:?}");
}
