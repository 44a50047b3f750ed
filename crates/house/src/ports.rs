//! The ports the engine runs on: `Db` (SQLite dialect, atomic batches), `Net` (HTTP), `Clock` and
//! `Rng`. The Worker implements them over D1 and `fetch`; tests and `nyx5 serve` over SQLite and
//! an in-memory or real network.
#![allow(async_fn_in_trait)] // Single-threaded runtimes (workerd, the test kit): no Send bound.

use std::cell::RefCell;
use std::rc::Rc;

use nyx5_proto::Timestamp;

/// The network port and the one failure type, shared with the client (`nyx5_client::ports`).
pub use nyx5_client::ports::{Net, OutRequest, OutResponse, PortError};

/// A value bound to or read from SQL.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Text(String),
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Int(v)
    }
}

impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}

impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}

impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Int(i64::from(v))
    }
}

impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// One statement: SQL with `?` placeholders and its parameters (D1 allows at most 100), and
/// where it runs ([`Place`]: the primary unless the store says it reads or writes a mailbox).
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub sql: &'static str,
    pub params: Vec<SqlValue>,
    pub place: Place,
    /// Parameters that change when the statement is applied from a hand-off, after the primary
    /// part of its batch committed (see [`crate::shards`]): `(index, value)`. A mailbox insert
    /// lifts its quota here, the decision having read it.
    pub handoff: Vec<(usize, SqlValue)>,
    /// When set, the statement is handed off only where this condition holds on the primary, in
    /// the primary's part of the batch: an `INSERT INTO shard_handoffs (key, local, stmt)
    /// SELECT ?1, ?2, ?3 WHERE …` whose first three parameters the sharding port fills.
    pub gate: Option<Box<Stmt>>,
    /// In a batch that also writes the primary, this mailbox statement is not handed off: it
    /// runs first, with the batch's other statements for its database, as one atomic batch
    /// whose failure (a guard that lost a race) fails the whole batch before the primary's part
    /// is written. For writes whose guard must decide, such as an acknowledgment's.
    pub ahead: bool,
}

/// Where a statement runs: what the sharding port ([`crate::shards::Shards`]) routes by. With
/// one database every place is the primary, and nothing changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Place {
    /// The primary database: the registry, the Libro, the queue, everything not a mailbox.
    #[default]
    Primary,
    /// The database that holds the mailbox (and lists) of the agent named.
    Mailbox(String),
    /// A read over many mailboxes: the parameter at this index is a JSON array of locals, which
    /// the port splits by database, running the statement once for each part and joining rows.
    Spread(usize),
    /// Upkeep: runs on every database.
    Every,
    /// The registration of the agent named: the parameter at `param` receives its shard, chosen
    /// by the port's stable rule (the store writes 0, the primary).
    Placing { local: String, param: usize },
}

impl Stmt {
    pub fn new(sql: &'static str, params: Vec<SqlValue>) -> Stmt {
        Stmt { sql, params, place: Place::Primary, handoff: Vec::new(), gate: None, ahead: false }
    }

    /// The statement, run at `place`.
    #[must_use]
    pub fn at(mut self, place: Place) -> Stmt {
        self.place = place;
        self
    }

    /// The statement, run in `local`'s mailbox.
    #[must_use]
    pub fn in_mailbox(self, local: &str) -> Stmt {
        self.at(Place::Mailbox(local.to_owned()))
    }

    /// The statement with parameter `index` set to `value` when applied from a hand-off.
    #[must_use]
    pub fn on_handoff(mut self, index: usize, value: impl Into<SqlValue>) -> Stmt {
        self.handoff.push((index, value.into()));
        self
    }

    /// The statement, run before the primary's part rather than handed off ([`Stmt::ahead`]).
    #[must_use]
    pub fn ahead(mut self) -> Stmt {
        self.ahead = true;
        self
    }

    /// The statement, handed off only where `gate` holds (see [`Stmt::gate`]).
    #[must_use]
    pub fn gated(mut self, gate: Stmt) -> Stmt {
        self.gate = Some(Box::new(gate));
        self
    }
}

/// Builds a [`Stmt`]: `stmt!("SELECT … WHERE a = ?", a)`.
#[macro_export]
macro_rules! stmt {
    ($sql:expr $(, $p:expr)* $(,)?) => {
        $crate::ports::Stmt::new($sql, vec![$($crate::ports::SqlValue::from($p)),*])
    };
}

/// The column names of a query's rows, shared by every row it returns.
pub type Columns = Rc<[Box<str>]>;

/// A result row: its values, and the column names they have (in the order the port gives them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    names: Columns,
    values: Vec<SqlValue>,
}

impl Row {
    /// A row of `values` named by `names`, one name each (a port reading many rows shares one
    /// `names` among them).
    pub fn new(names: Columns, values: Vec<SqlValue>) -> Row {
        debug_assert_eq!(names.len(), values.len(), "a name for each value");
        Row { names, values }
    }

    /// A row from name–value pairs.
    pub fn from_pairs<N: Into<Box<str>>>(pairs: impl IntoIterator<Item = (N, SqlValue)>) -> Row {
        let (names, values): (Vec<Box<str>>, Vec<SqlValue>) = pairs.into_iter().map(|(n, v)| (n.into(), v)).unzip();
        Row { names: names.into(), values }
    }

    /// Each column's name and value.
    pub fn columns(&self) -> impl Iterator<Item = (&str, &SqlValue)> {
        self.names.iter().map(|n| &**n).zip(&self.values)
    }

    pub fn get(&self, name: &str) -> Option<&SqlValue> {
        let at = self.names.iter().position(|n| **n == *name)?;
        self.values.get(at)
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(SqlValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(SqlValue::Text(v)) => Some(v),
            _ => None,
        }
    }
}

/// The name of the constraint in a SQLite constraint message: `CHECK constraint failed: rate_cap`
/// → `rate_cap`, `UNIQUE constraint failed: nonces.address, nonces.nonce` → `nonces.address,
/// nonces.nonce`, and `FOREIGN KEY constraint failed` (which names nothing) → `FOREIGN KEY`. D1
/// wraps the same message (`D1_ERROR: UNIQUE constraint failed: t.c: SQLITE_CONSTRAINT`), so a
/// name ends at the next `": "`, line break or the end, and a kind starts after the last `": "`
/// before it. `None` when the text reports no failed constraint. Both adapters parse with this.
pub fn constraint_name(message: &str) -> Option<&str> {
    const MARK: &str = " constraint failed";
    let at = message.find(MARK)?;
    let rest = message.get(at + MARK.len()..)?;
    // D1 ends its text with the result code (`: SQLITE_CONSTRAINT…`), which is no name.
    let named = rest.strip_prefix(": ").filter(|r| !r.starts_with("SQLITE_"));
    let name = match named {
        Some(rest) => {
            let end = [rest.find(": "), rest.find('\n')].into_iter().flatten().min().unwrap_or(rest.len());
            rest.get(..end)?
        }
        None => {
            let kind = message.get(..at)?;
            kind.rsplit_once(": ").map_or(kind, |(_, k)| k)
        }
    };
    let name = name.trim();
    (!name.is_empty()).then_some(name)
}

/// The database: SQLite's dialect. `batch` is atomic: all statements apply, or none.
///
/// `query` and `batch` use the primary: what it answers is the latest state, so a decision read
/// there and guarded in the batch that follows sees every write before it. A read that may be a
/// moment stale (docs/SPEC.md "Reading your own writes") is [`Db::query_stale`]: a database with
/// read replicas serves it from one no older than the request's [`Reads`]; one without (SQLite)
/// from its one connection, which is what the defaults do.
pub trait Db {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError>;
    /// Runs the statements in one transaction and returns each one's count of changed rows.
    /// Where a trigger fires, D1 counts the rows it changed too (SQLite's own count does not):
    /// read a count as "changed some" (`> 0`) or "changed none", never as an exact number.
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError>;
    /// Runs one write with a `RETURNING` clause, on the primary, and returns its rows: a write
    /// and the read that follows it in one round trip (the queue's lease, issue 36 §5). It is a
    /// write as a batch of one is (bookmarks, replicas).
    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError>;
    /// A read that may be a moment stale, though never older than `reads`' bookmark (nor than
    /// any read before it in `reads`, which it then advances).
    async fn query_stale(&self, reads: &Reads, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let _ = reads;
        self.query(stmt).await
    }
    /// The bookmark to hand the client at the end of a request that read through `reads`: no
    /// older than `reads`' nor than any write this database has made. A database without
    /// replicas has no bookmarks of its own and gives back what the client sent.
    fn bookmark(&self, reads: &Reads) -> Option<String> {
        reads.bookmark()
    }
    /// Whether mailboxes may live in more than one database ([`crate::shards::Shards`] over
    /// several): a read that spans the registry and mailboxes then reads each where it is.
    fn sharded(&self) -> bool {
        false
    }
    /// Upkeep of the port itself: a sharding port applies the hand-offs left behind by a crash
    /// between a mixed batch's two parts (how many it settled). Nothing for a single database.
    async fn settle(&self) -> Result<u64, PortError> {
        Ok(0)
    }
    /// How many databases hold mailboxes (the primary counts): 1 but for a sharding port.
    fn databases(&self) -> usize {
        1
    }
    /// Moves `local`'s mailbox to database `to`: `(from, to, envelopes)`. Only a sharding port
    /// moves anything ([`crate::shards::Shards::move_mailbox`]); a single database has nowhere to.
    async fn move_mailbox(&self, local: &str, to: usize) -> Result<(usize, usize, u64), PortError> {
        let _ = (local, to);
        Err(PortError::Failed("this house has one database".into()))
    }
    /// Begins the move of `local`'s mailbox to database `to`, or takes up the one under way, and
    /// advances it by one bounded step ([`crate::shards::Shards::move_step`]).
    async fn move_step(&self, local: &str, to: usize) -> Result<MoveStep, PortError> {
        let _ = (local, to);
        Err(PortError::Failed("this house has one database".into()))
    }
    /// Upkeep beside [`Db::settle`]: advances every move under way by one bounded step. Whether
    /// one is still under way (the next tick's upkeep should not wait its minute).
    async fn advance_moves(&self) -> Result<bool, PortError> {
        Ok(false)
    }
}

/// Where a mailbox move stands after a step ([`Db::move_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveStep {
    /// The database it moves from.
    pub from: usize,
    /// The database it moves to.
    pub to: usize,
    /// Envelope rows copied so far (all of them once `done`).
    pub copied: u64,
    /// Whether the move ended (the agent flipped, the source forgot its rows).
    pub done: bool,
    /// Whether this step did any work: false when another step held the move's lease.
    pub worked: bool,
}

/// One request's reads that may be a moment stale: the point the database has to have reached
/// before it serves them (the client's bookmark, when it sent one) and then the newest point
/// they have seen. What a point is, and which of two is newer, only the database knows: the
/// engine carries its bookmark as opaque text.
#[derive(Debug, Default)]
pub struct Reads {
    bookmark: RefCell<Option<String>>,
}

impl Reads {
    /// Reads starting no older than `bookmark` (anywhere, when `None`).
    pub fn after(bookmark: Option<String>) -> Reads {
        Reads { bookmark: RefCell::new(bookmark) }
    }

    /// The newest point seen so far.
    pub fn bookmark(&self) -> Option<String> {
        self.bookmark.borrow().clone()
    }

    /// Records a newer point (the database compares).
    pub fn set(&self, bookmark: String) {
        *self.bookmark.borrow_mut() = Some(bookmark);
    }
}

/// A database seen through one request's [`Reads`]: its `query` is [`Db::query_stale`], so a
/// store function reads a moment stale when a route hands it this; writes go to the primary.
#[derive(Debug)]
pub struct Stale<'a, D> {
    pub db: &'a D,
    pub reads: &'a Reads,
}

impl<D: Db> Db for Stale<'_, D> {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.db.query_stale(self.reads, stmt).await
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        self.db.batch(stmts).await
    }

    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.db.write_returning(stmt).await
    }

    fn bookmark(&self, reads: &Reads) -> Option<String> {
        self.db.bookmark(reads)
    }

    fn sharded(&self) -> bool {
        self.db.sharded()
    }

    async fn settle(&self) -> Result<u64, PortError> {
        self.db.settle().await
    }

    async fn advance_moves(&self) -> Result<bool, PortError> {
        self.db.advance_moves().await
    }
}

/// A future a port answers with, borrowed from the port (single-threaded runtimes: not `Send`).
pub type PortFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// Where the house keeps the sealed parts of attachments (docs/SPEC.md "Attachments"): R2 on the
/// Worker, files in a directory under `nyx5 serve`, memory in tests. Keys are the house's own
/// (`att/<id>/<n>`); what is stored is ciphertext the house cannot read.
pub trait Blobs {
    /// Stores `bytes` under `key`, in place of whatever was there.
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> PortFuture<'a, Result<(), PortError>>;
    /// What `key` holds, or `None`.
    fn get<'a>(&'a self, key: &'a str) -> PortFuture<'a, Result<Option<Vec<u8>>, PortError>>;
    /// Removes `keys` (those absent are no error).
    fn delete<'a>(&'a self, keys: Vec<String>) -> PortFuture<'a, Result<(), PortError>>;
}

/// The wall clock.
pub trait Clock {
    fn now(&self) -> Timestamp;
    /// Waits `ms` of this clock's time, where the runtime can wait (a timer of `nyx5 serve`'s
    /// runtime, the Worker's `setTimeout`); `None` where it cannot, and what would wait answers
    /// at once (a mailbox read with `wait`, docs/SPEC.md §8).
    fn sleep(&self, ms: u64) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> {
        let _ = ms;
        None
    }
}

/// Cryptographic randomness.
pub trait Rng {
    fn fill(&self, buf: &mut [u8]);
}

/// The house's own routes, as another house would reach them over HTTP: what a service asks
/// for the house's own domain instead of fetching it (the index crawl reads its own directory
/// this way). The house is the one implementation; a service holds it as this port, never the
/// house itself.
pub trait Local {
    /// The answer to `req`.
    fn answer<'a>(
        &'a self,
        req: crate::http::Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::http::Response> + 'a>>;
}

#[cfg(test)]
mod tests {
    use super::constraint_name;

    #[test]
    fn constraint_names_from_sqlite_and_d1_messages() {
        let cases = [
            ("CHECK constraint failed: rate_cap", Some("rate_cap")),
            ("UNIQUE constraint failed: nonces.address, nonces.nonce", Some("nonces.address, nonces.nonce")),
            ("NOT NULL constraint failed: t.c", Some("t.c")),
            ("FOREIGN KEY constraint failed", Some("FOREIGN KEY")),
            ("D1_ERROR: UNIQUE constraint failed: agents.local: SQLITE_CONSTRAINT", Some("agents.local")),
            ("Error: D1_ERROR: CHECK constraint failed: guard: SQLITE_CONSTRAINT_CHECK", Some("guard")),
            ("D1_ERROR: FOREIGN KEY constraint failed: SQLITE_CONSTRAINT", Some("FOREIGN KEY")),
            ("CHECK constraint failed: invitation_uses\nmore", Some("invitation_uses")),
            // The Worker's adapter puts D1's cause on a line of its own after the message.
            ("D1_ERROR: CHECK constraint failed: guard\nCHECK constraint failed: guard", Some("guard")),
            // A trigger's raise, written as a CHECK's so that D1's text names it (migration 0023).
            ("D1_ERROR: CHECK constraint failed: mailbox_moving: SQLITE_CONSTRAINT_TRIGGER", Some("mailbox_moving")),
            ("CHECK constraint failed: mailbox_moving", Some("mailbox_moving")),
            ("no such table: guards", None),
            ("network connection lost", None),
            ("CHECK constraint failed: ", None),
        ];
        for (message, name) in cases {
            assert_eq!(constraint_name(message), name, "{message}");
        }
    }
}
