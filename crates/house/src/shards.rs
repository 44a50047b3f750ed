//! Mailbox shards (issue 36 §3, docs/decisions/0060-mailbox-shards.md): a [`Db`] over several
//! databases, the primary first. The registry, the Libro and the queue live on the primary; an
//! agent's mailbox (its `mailbox`, `mailbox_usage`, `mailbox_acks` rows and its lists) lives on the
//! database `agents.shard` names, chosen at registration by [`placement`] and changed only by
//! [`Shards::move_mailbox`]. The store marks each statement with its [`Place`]; this port alone
//! turns places into databases, so nothing above the store knows how many there are.
//!
//! Every database has every migration. A shard keeps a thin copy of each agent placed on it (its
//! `local` and `mbox`: what the mailbox SQL and the `mailbox_in_range` trigger read), written in
//! front of every batch sent there (`ON CONFLICT DO NOTHING`: no round trip of its own).
//!
//! A batch that touches one database runs there as one atomic batch. One that touches the
//! primary and a shard (a paid stamp, a counted rate window and the envelope) cannot be one
//! transaction: the primary's part carries, atomically with it, a hand-off row per shard
//! statement (`shard_handoffs`); the shard's statements are applied right after, each with a
//! marker (`shard_applied`) that makes it apply once; [`Db::settle`] (the tick) applies what a
//! crash left and forgets the hand-offs applied. With one database, every call goes straight to
//! it: nothing is resolved, copied or handed off.

use std::sync::Mutex;

use nyx5_proto::vecmap::{VecMap, VecSet};

use nyx5_proto::b64;
use nyx5_proto::json::Value;

use crate::ports::{Clock, Db, MoveStep, Place, PortError, Reads, Rng, Row, SqlValue, Stmt};
use crate::stmt;

/// The shard a new agent is placed on among `count` databases: FNV-1a of its local part, mixed,
/// mod `count`. Pure and stable: the result is stored at registration, so adding a database later
/// moves nobody (new agents spread over all of them).
pub fn placement(local: &str, count: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in local.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits see only the low bits of each byte: mixed first (splitmix64's finaliser),
    // so a count of 2 or 4 does not split by the last letter's parity.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    match u64::try_from(count) {
        Ok(n) if n > 1 => usize::try_from(h % n).unwrap_or(0),
        _ => 0,
    }
}

/// What is known of an agent: its shard and its mailbox number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Home {
    shard: usize,
    mbox: i64,
}

/// The constraint a shard answers for a write to a mailbox that is moving away (migration 0023).
pub const MOVING: &str = "mailbox_moving";

/// Hand-offs [`Db::settle`] takes up in one call (at most; see [`SETTLE_BYTES`]).
pub const SETTLE_BATCH: i64 = 64;

/// The stored statements one [`Db::settle`] reads, in bytes: past the first, hand-offs are taken
/// only while their sum stays within this.
pub const SETTLE_BYTES: i64 = 8 << 20;

/// The constraint a mailbox insert fails when the mailbox has no room (the store's
/// `constraint::MAILBOX_QUOTA`; named here, as the port is below the store): a hand-off that meets
/// it waits [`ROOM_WAIT_S`] and tries again, never counting a try.
const ROOM: &str = "mailbox_quota";
/// Seconds a hand-off waits for room in a full mailbox before it tries again.
const ROOM_WAIT_S: i64 = 300;

/// Tries of a hand-off before the tick gives up on it (moves it to `shard_dead`). A shard that
/// answers the mailbox is moving does not count a try.
pub const SETTLE_ATTEMPTS: i64 = 12;

/// Dead hand-offs kept for the operator; older ones are forgotten.
pub const DEAD_KEPT: i64 = 1000;

/// `shard_applied` markers one [`Db::settle`] checks against the primary, per shard.
const APPLIED_SWEEP: i64 = 256;
/// Rounds of [`APPLIED_SWEEP`] markers a database per upkeep.
const APPLIED_ROUNDS: usize = 8;
/// Seconds a marker is kept at least, whatever the primary holds: longer than any settle runs.
const APPLIED_GRACE_S: i64 = 600;

/// Agents whose placement a process remembers, at most; the oldest are forgotten first.
pub const HOMES_MAX: usize = 4096;

/// How long a remembered placement is trusted, in milliseconds: a move by another process or
/// isolate is seen within it (and at once by any write, which the source refuses).
pub const HOMES_TTL_MS: i64 = 60_000;

/// A handed-off mailbox insert may pass the quota its decision read by this many envelopes, and
/// this many times the largest envelope in bytes: accepts racing to a nearly full mailbox, each
/// paid or counted on the primary, are not lost; many at once are (bounded overrun, spec §8b).
pub const HANDOFF_SLACK: i64 = 8;

/// The databases of a house: index 0 is the primary, 1.. the shards.
pub struct Shards<D> {
    dbs: Vec<D>,
    homes: Mutex<VecMap<String, (Home, i64)>>,
    clock: Box<dyn Clock>,
    rng: Box<dyn Rng>,
}

impl<D: std::fmt::Debug> std::fmt::Debug for Shards<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards").field("dbs", &self.dbs).finish_non_exhaustive()
    }
}

fn failed(what: &str) -> PortError {
    PortError::Failed(what.to_owned())
}

/// The answer for a write that met a mailbox moving between databases: temporary (a 503
/// `mailbox_moving` with Retry-After, [`crate::port_error`]), never a permanent refusal.
pub fn moving() -> PortError {
    PortError::Constraint { name: MOVING.to_owned() }
}

fn is_moving(e: &PortError) -> bool {
    matches!(e, PortError::Constraint { name } if name.contains(MOVING))
}

fn json_locals<'a>(locals: impl IntoIterator<Item = &'a str>) -> String {
    Value::Array(locals.into_iter().map(|l| Value::String(l.to_owned())).collect()).canonical_string()
}

/// SQL text read back from a hand-off, as the `&'static str` a [`Stmt`] holds: each distinct
/// text is kept once (the engine's statements are a fixed set).
fn intern(sql: String) -> &'static str {
    static TEXTS: Mutex<VecSet<&'static str>> = Mutex::new(VecSet::new());
    let Ok(mut set) = TEXTS.lock() else {
        return Box::leak(sql.into_boxed_str());
    };
    if let Some(s) = set.iter().find(|s| **s == sql) {
        return s;
    }
    let s: &'static str = Box::leak(sql.into_boxed_str());
    set.insert(s);
    s
}

/// A statement as a hand-off keeps it: `{"sql", "params"}`, integers as `"i:N"` (an `i64` is
/// wider than a JSON number holds exactly), text as `"b:"` and its base64url: never escaped, so
/// the row is at most 4/3 of the parameters (an envelope of 1 MiB of quotes stays far within
/// D1's 2,000,000 bytes a row, where JSON's escapes would double it).
fn encode(stmt: &Stmt) -> String {
    let params = stmt
        .params
        .iter()
        .map(|p| match p {
            SqlValue::Null => Value::Null,
            SqlValue::Int(i) => Value::String(format!("i:{i}")),
            SqlValue::Text(t) => Value::String(format!("b:{}", b64::encode(t.as_bytes()))),
        })
        .collect();
    Value::Object(nyx5_proto::json::obj([
        ("sql", Value::String(stmt.sql.to_owned())),
        ("params", Value::Array(params)),
    ]))
    .canonical_string()
}

fn decode(text: &str) -> Option<Stmt> {
    let v = Value::parse_str(text).ok()?;
    let o = v.as_object()?;
    let sql = o.get("sql")?.as_str()?.to_owned();
    let mut params = Vec::new();
    for p in o.get("params")?.as_array()? {
        params.push(match p {
            Value::Null => SqlValue::Null,
            Value::String(s) => match s.split_at_checked(2)? {
                ("i:", n) => SqlValue::Int(n.parse().ok()?),
                ("b:", t) => SqlValue::Text(String::from_utf8(b64::decode(t)?).ok()?),
                _ => return None,
            },
            _ => return None,
        });
    }
    Some(Stmt::new(intern(sql), params))
}

/// The statement as it applies from a hand-off: its [`Stmt::handoff`] parameters set.
fn handed_off(stmt: &Stmt) -> Stmt {
    let mut s = Stmt::new(stmt.sql, stmt.params.clone());
    for (i, v) in &stmt.handoff {
        if let Some(p) = s.params.get_mut(*i) {
            *p = v.clone();
        }
    }
    s
}

/// The thin copy of an agent on the shard that holds its mailbox.
fn copy_agent(local: &str, home: Home) -> Stmt {
    stmt!(
        "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at, mbox, shard)
         VALUES (?, '', '', 'shard', 0, 0, ?, ?) ON CONFLICT (local) DO NOTHING",
        local,
        home.mbox,
        i64::try_from(home.shard).unwrap_or(0)
    )
}

/// The marker written on a shard with a hand-off's statement: it applies once. A shard refuses it
/// for a mailbox moving away (trigger `shard_applied_moving`).
fn marker(key: &str, local: &str) -> Stmt {
    stmt!("INSERT INTO shard_applied (key, local, at) VALUES (?, ?, unixepoch())", key, local)
}

fn applied_already(e: &PortError) -> bool {
    matches!(e, PortError::Constraint { name } if name.contains("shard_applied"))
}

/// What a move did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Moved {
    pub from: usize,
    pub to: usize,
    /// Envelope rows copied (or found copied) to the target.
    pub envelopes: u64,
}

impl<D: Db> Shards<D> {
    /// A house over `dbs`, the primary first; `None` for none. The clock times what placements
    /// are remembered; the randomness names each hand-off (unique, never a digest of its text).
    pub fn new(dbs: Vec<D>, clock: Box<dyn Clock>, rng: Box<dyn Rng>) -> Option<Shards<D>> {
        (!dbs.is_empty()).then(|| Shards { dbs, homes: Mutex::new(VecMap::new()), clock, rng })
    }

    /// A house of one database: every call goes straight to it.
    pub fn one(db: D, clock: Box<dyn Clock>, rng: Box<dyn Rng>) -> Shards<D> {
        Shards { dbs: vec![db], homes: Mutex::new(VecMap::new()), clock, rng }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().0
    }

    /// A new hand-off's key: 16 random bytes and the clock's millisecond. A key is never used
    /// twice, and its marker outlives the hand-off by a grace ([`APPLIED_GRACE_S`]), so a key
    /// drawn again would be skipped as applied: the time guards against a randomness that
    /// repeats itself (a process started again from the same stream, as the simulator's houses
    /// are).
    fn new_key(&self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill(&mut b);
        format!("{}-{}", nyx5_proto::crypto::hex(&b), self.now_ms())
    }

    fn remember(&self, local: &str, home: Home) {
        let now = self.now_ms();
        if let Ok(mut homes) = self.homes.lock() {
            if homes.len() >= HOMES_MAX && !homes.contains_key(local) {
                homes.retain(|_, (_, at)| now.saturating_sub(*at) < HOMES_TTL_MS);
                while homes.len() >= HOMES_MAX {
                    let oldest = homes.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone());
                    match oldest {
                        Some(k) => homes.remove(&k),
                        None => break,
                    };
                }
            }
            homes.insert(local.to_owned(), (home, now));
        }
    }

    /// The databases, the primary first.
    pub fn into_inner(self) -> Vec<D> {
        self.dbs
    }

    /// How many databases: 1 for the primary alone.
    pub fn count(&self) -> usize {
        self.dbs.len()
    }

    /// The database at `index` (0: the primary).
    pub fn get(&self, index: usize) -> Option<&D> {
        self.dbs.get(index)
    }

    fn db(&self, index: usize) -> Result<&D, PortError> {
        self.dbs.get(index).ok_or_else(|| failed("an agent is placed on a shard this house does not have"))
    }

    fn primary(&self) -> Result<&D, PortError> {
        self.db(0)
    }

    fn cached(&self, local: &str) -> Option<Home> {
        let now = self.now_ms();
        let mut homes = self.homes.lock().ok()?;
        match homes.get(local).copied() {
            Some((home, at)) if now.saturating_sub(at) < HOMES_TTL_MS && at <= now => Some(home),
            Some(_) => {
                homes.remove(local);
                None
            }
            None => None,
        }
    }

    /// Forgets where `local` lives (a move, or a shard that said it is moving).
    pub fn forget(&self, local: &str) {
        if let Ok(mut homes) = self.homes.lock() {
            homes.remove(local);
        }
    }

    /// Where each of `locals` lives: one read of the primary for those not known yet. An agent
    /// that does not exist lives on the primary (and is not remembered: it may register).
    async fn resolve(&self, locals: &[&str]) -> Result<VecMap<String, Home>, PortError> {
        let mut found = VecMap::new();
        let mut missing = Vec::new();
        for l in locals {
            match self.cached(l) {
                Some(h) => {
                    found.insert((*l).to_owned(), h);
                }
                None if !missing.contains(l) => missing.push(*l),
                None => {}
            }
        }
        if !missing.is_empty() {
            let rows = self
                .primary()?
                .query(stmt!(
                    "SELECT a.local AS local, a.shard AS shard, a.mbox AS mbox
                     FROM json_each(?) AS j CROSS JOIN agents AS a ON a.local = j.value",
                    json_locals(missing.iter().copied())
                ))
                .await?;
            for r in rows {
                let (Some(local), Some(shard), Some(mbox)) = (r.text("local"), r.int("shard"), r.int("mbox")) else {
                    continue;
                };
                let home = Home { shard: usize::try_from(shard).unwrap_or(usize::MAX), mbox };
                self.remember(local, home);
                found.insert(local.to_owned(), home);
            }
        }
        Ok(found)
    }

    async fn home(&self, local: &str) -> Result<Option<Home>, PortError> {
        Ok(self.resolve(&[local]).await?.remove(local))
    }

    /// A read of one mailbox, or of many split by database ([`Place::Spread`]), or of all.
    async fn read(&self, stmt: Stmt, reads: Option<&Reads>) -> Result<Vec<Row>, PortError> {
        if self.dbs.len() == 1 {
            let db = self.primary()?;
            return match reads {
                Some(r) => db.query_stale(r, stmt).await,
                None => db.query(stmt).await,
            };
        }
        match stmt.place.clone() {
            Place::Primary | Place::Placing { .. } => self.primary()?.query(stmt).await,
            Place::Mailbox(local) => {
                let shard = self.home(&local).await?.map_or(0, |h| h.shard);
                let rows = self.db(shard)?.query(stmt.clone()).await?;
                if !rows.is_empty() {
                    return Ok(rows);
                }
                // Nothing there: the mailbox may have moved since this process learnt where it
                // was (a move forgets the rows it copied away). Ask the primary once more.
                self.forget(&local);
                match self.home(&local).await?.map_or(0, |h| h.shard) {
                    now if now != shard => self.db(now)?.query(stmt).await,
                    _ => Ok(rows),
                }
            }
            Place::Every => {
                let mut rows = Vec::new();
                for db in &self.dbs {
                    rows.extend(db.query(stmt.clone()).await?);
                }
                Ok(rows)
            }
            Place::Spread(index) => {
                let locals: Vec<String> = stmt
                    .params
                    .get(index)
                    .and_then(|p| match p {
                        SqlValue::Text(t) => Value::parse_str(t).ok(),
                        _ => None,
                    })
                    .and_then(|v| {
                        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                    })
                    .unwrap_or_default();
                let names: Vec<&str> = locals.iter().map(String::as_str).collect();
                let homes = self.resolve(&names).await?;
                let mut parts: Vec<Vec<&str>> = vec![Vec::new(); self.dbs.len()];
                for l in &names {
                    let shard = homes.get(*l).map_or(0, |h| h.shard);
                    parts.get_mut(shard).ok_or_else(|| failed("an agent on a missing shard"))?.push(l);
                }
                let mut rows = Vec::new();
                let mut missing = Vec::new();
                for (shard, part) in parts.iter().enumerate() {
                    if part.is_empty() {
                        continue;
                    }
                    let mut s = stmt.clone();
                    if let Some(p) = s.params.get_mut(index) {
                        *p = SqlValue::Text(json_locals(part.iter().copied()));
                    }
                    let got = self.db(shard)?.query(s).await?;
                    // A local with no row where this process thought it lives: the mailbox may
                    // have moved (a move deletes the source's thin copy). Asked again below.
                    for l in part {
                        if !got.iter().any(|r| r.text("local") == Some(*l)) {
                            missing.push((*l, shard));
                        }
                    }
                    rows.extend(got);
                }
                if !missing.is_empty() {
                    for (l, _) in &missing {
                        self.forget(l);
                    }
                    let names: Vec<&str> = missing.iter().map(|(l, _)| *l).collect();
                    let now = self.resolve(&names).await?;
                    let mut again: Vec<Vec<&str>> = vec![Vec::new(); self.dbs.len()];
                    for (l, was) in &missing {
                        match now.get(*l).map(|h| h.shard) {
                            Some(shard) if shard != *was => {
                                again.get_mut(shard).ok_or_else(|| failed("an agent on a missing shard"))?.push(l);
                            }
                            _ => {}
                        }
                    }
                    for (shard, part) in again.iter().enumerate() {
                        if part.is_empty() {
                            continue;
                        }
                        let mut s = stmt.clone();
                        if let Some(p) = s.params.get_mut(index) {
                            *p = SqlValue::Text(json_locals(part.iter().copied()));
                        }
                        rows.extend(self.db(shard)?.query(s).await?);
                    }
                }
                Ok(rows)
            }
        }
    }

    /// One atomic batch on `shard`, the thin copies of the agents it names in front; retried
    /// once after a shard answered that a mailbox is moving (where a move ended, the agent's new
    /// shard takes it). Counts of the caller's statements only.
    async fn batch_on(&self, shard: usize, stmts: Vec<Stmt>, locals: &[String]) -> Result<Vec<u64>, PortError> {
        let copies: Vec<Stmt> = if shard == 0 {
            Vec::new()
        } else {
            let names: Vec<&str> = locals.iter().map(String::as_str).collect();
            let homes = self.resolve(&names).await?;
            names.iter().filter_map(|l| homes.get(*l).map(|h| copy_agent(l, *h))).collect()
        };
        let skip = copies.len();
        let mut all = copies;
        all.extend(stmts);
        let changes = self.db(shard)?.batch(all).await?;
        Ok(changes.into_iter().skip(skip).collect())
    }

    /// The statements' places resolved: each one's database (Every: the primary here).
    async fn targets(&self, stmts: &mut [Stmt]) -> Result<Vec<usize>, PortError> {
        let locals: Vec<String> = stmts
            .iter()
            .filter_map(|s| match &s.place {
                Place::Mailbox(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        let names: Vec<&str> = locals.iter().map(String::as_str).collect();
        let homes = if names.is_empty() { VecMap::new() } else { self.resolve(&names).await? };
        let count = self.dbs.len();
        Ok(stmts
            .iter_mut()
            .map(|s| match &s.place {
                Place::Mailbox(l) => homes.get(l).map_or(0, |h| h.shard),
                Place::Placing { local, param } => {
                    let shard = placement(local, count);
                    if let Some(p) = s.params.get_mut(*param) {
                        *p = SqlValue::Int(i64::try_from(shard).unwrap_or(0));
                    }
                    0
                }
                _ => 0,
            })
            .collect())
    }

    async fn batch_sharded(&self, mut stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        if stmts.is_empty() {
            return Ok(Vec::new());
        }
        let mut targets = self.targets(&mut stmts).await?;
        let mut retried = false;
        loop {
            let mut shards: Vec<usize> = targets.clone();
            shards.sort_unstable();
            shards.dedup();
            let every: Vec<Stmt> = stmts.iter().filter(|s| s.place == Place::Every).cloned().collect();
            let locals = |only: usize| -> Vec<String> {
                stmts
                    .iter()
                    .zip(&targets)
                    .filter(|(_, t)| **t == only)
                    .filter_map(|(s, _)| match &s.place {
                        Place::Mailbox(l) => Some(l.clone()),
                        _ => None,
                    })
                    .collect()
            };
            let result = match shards.as_slice() {
                [one] => self.batch_on(*one, stmts.clone(), &locals(*one)).await,
                _ => return self.handoff(stmts, &targets).await,
            };
            match result {
                Err(e) if is_moving(&e) && !retried => {
                    retried = true;
                    for l in locals(shards.first().copied().unwrap_or(0)) {
                        self.forget(&l);
                    }
                    let before = targets.clone();
                    targets = self.targets(&mut stmts).await?;
                    if targets == before {
                        return Err(moving());
                    }
                }
                Err(e) if is_moving(&e) => return Err(moving()),
                Err(e) => return Err(e),
                Ok(mut changes) => {
                    // Upkeep runs on every shard too, each on its own; a count is the largest.
                    if !every.is_empty() {
                        for shard in 1..self.dbs.len() {
                            if let Ok(more) = self.batch_on(shard, every.clone(), &[]).await {
                                let mut k = more.into_iter();
                                for (c, s) in changes.iter_mut().zip(&stmts) {
                                    if s.place == Place::Every {
                                        *c = (*c).max(k.next().unwrap_or(0));
                                    }
                                }
                            }
                        }
                    }
                    return Ok(changes);
                }
            }
        }
    }

    /// A batch over the primary and shards: the primary's part with a hand-off row for each
    /// shard statement, in one batch; then each shard's statements, each with its marker.
    async fn handoff(&self, stmts: Vec<Stmt>, targets: &[usize]) -> Result<Vec<u64>, PortError> {
        let mut out = vec![0u64; stmts.len()];
        // Statements that decide (their guard may fail the batch) go first, atomically per
        // database: their failure leaves nothing written.
        let mut ahead_shards: Vec<usize> =
            stmts.iter().zip(targets).filter(|(s, t)| s.ahead && **t != 0).map(|(_, t)| *t).collect();
        ahead_shards.sort_unstable();
        ahead_shards.dedup();
        for shard in ahead_shards {
            let mine: Vec<(usize, &Stmt)> = stmts
                .iter()
                .zip(targets)
                .enumerate()
                .filter(|(_, (s, t))| s.ahead && **t == shard)
                .map(|(i, (s, _))| (i, s))
                .collect();
            let locals: Vec<String> = mine
                .iter()
                .filter_map(|(_, s)| match &s.place {
                    Place::Mailbox(l) => Some(l.clone()),
                    _ => None,
                })
                .collect();
            let batch = mine.iter().map(|(_, s)| Stmt::new(s.sql, s.params.clone())).collect();
            let changes = match self.batch_on(shard, batch, &locals).await {
                Err(e) if is_moving(&e) => {
                    for l in &locals {
                        self.forget(l);
                    }
                    return Err(moving());
                }
                r => r?,
            };
            for ((i, _), c) in mine.iter().zip(changes) {
                if let Some(o) = out.get_mut(*i) {
                    *o = c;
                }
            }
        }
        let mut primary = Vec::new();
        let mut primary_at = Vec::new();
        // (index in stmts, shard, local, key, statement as applied)
        let mut handed = Vec::new();
        for (i, (s, t)) in stmts.iter().zip(targets).enumerate() {
            match (&s.place, *t) {
                (Place::Mailbox(_), shard) if shard != 0 && s.ahead => {}
                (Place::Mailbox(local), shard) if shard != 0 => {
                    let applied = handed_off(s);
                    let text = encode(&applied);
                    let key = self.new_key();
                    let row = match &s.gate {
                        Some(gate) => {
                            let mut g = Stmt::new(gate.sql, gate.params.clone());
                            for (at, v) in [(0, key.clone()), (1, local.clone()), (2, text.clone())] {
                                if let Some(p) = g.params.get_mut(at) {
                                    *p = SqlValue::Text(v);
                                }
                            }
                            g
                        }
                        None => stmt!(
                            "INSERT INTO shard_handoffs (key, local, stmt) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
                            key.as_str(),
                            local.as_str(),
                            text.as_str()
                        ),
                    };
                    handed.push((i, shard, local.clone(), key, applied, primary.len()));
                    primary.push(row);
                }
                _ => {
                    primary_at.push((i, primary.len()));
                    primary.push(Stmt::new(s.sql, s.params.clone()));
                }
            }
        }
        let changes = match self.primary()?.batch(primary).await {
            // A mailbox on the primary moving away: nothing written; the sender tries again.
            Err(e) if is_moving(&e) => {
                for s in &stmts {
                    if let Place::Mailbox(l) = &s.place {
                        self.forget(l);
                    }
                }
                return Err(moving());
            }
            r => r?,
        };
        for (i, at) in primary_at {
            if let Some(o) = out.get_mut(i) {
                *o = changes.get(at).copied().unwrap_or(0);
            }
        }
        // Apply each shard's part, in the batch's order; what fails waits for `settle`.
        let mut applied: Vec<String> = Vec::new();
        let mut by_shard: Vec<usize> = handed.iter().map(|h| h.1).collect();
        by_shard.sort_unstable();
        by_shard.dedup();
        for shard in by_shard {
            let mine: Vec<&(usize, usize, String, String, Stmt, usize)> =
                handed.iter().filter(|h| h.1 == shard && changes.get(h.5) == Some(&1)).collect();
            if mine.is_empty() {
                continue;
            }
            let mut batch = Vec::new();
            let mut at = Vec::new();
            for h in &mine {
                batch.push(marker(&h.3, &h.2));
                at.push((h.0, batch.len()));
                batch.push(h.4.clone());
            }
            let locals: Vec<String> = mine.iter().map(|h| h.2.clone()).collect();
            match self.batch_on(shard, batch, &locals).await {
                Ok(c) => {
                    for (i, k) in at {
                        if let Some(o) = out.get_mut(i) {
                            *o = c.get(k).copied().unwrap_or(0);
                        }
                    }
                    applied.extend(mine.iter().map(|h| h.3.clone()));
                }
                Err(e) => {
                    if is_moving(&e) {
                        for l in &locals {
                            self.forget(l);
                        }
                    }
                    // Committed on the primary: it will be applied.
                    for (i, _) in at {
                        if let Some(o) = out.get_mut(i) {
                            *o = 1;
                        }
                    }
                }
            }
        }
        // The hand-offs applied are forgotten at once (a crash before this leaves them to
        // `settle`, which finds their markers): only those left by a failure or a crash wait.
        if !applied.is_empty() {
            let keys = json_locals(applied.iter().map(String::as_str));
            // Best effort: a row left here is found applied by `settle` and deleted then.
            let _ = self
                .primary()?
                .batch(vec![stmt!("DELETE FROM shard_handoffs WHERE key IN (SELECT value FROM json_each(?))", keys)])
                .await;
        }
        Ok(out)
    }

    /// Settles the hand-offs failures and crashes left on the primary (each applied where its
    /// mailbox is now, once), then forgets the shards' markers the primary no longer needs. Reads
    /// due keys first (at most [`SETTLE_BATCH`], their statements at most [`SETTLE_BYTES`] past
    /// the first), then each statement alone. One that fails is tried again later (`next_try`,
    /// backing off; a moving mailbox counts no try), and after [`SETTLE_ATTEMPTS`] tries moves to
    /// `shard_dead` (kept, bounded, and reported as an error for the log). How many it finished.
    async fn settle_sharded(&self) -> Result<u64, PortError> {
        let now = self.now_ms() / 1000;
        let primary = self.primary()?;
        let due = primary
            .query(stmt!(
                "SELECT key, local, attempts FROM (
                   SELECT key, local, attempts, next_try, r,
                          sum(length(CAST(stmt AS BLOB))) OVER (ORDER BY next_try, r ROWS UNBOUNDED PRECEDING) AS run,
                          row_number() OVER (ORDER BY next_try, r) AS n
                     FROM (SELECT key, local, attempts, next_try, rowid AS r, stmt FROM shard_handoffs AS h
                            WHERE next_try <= ?
                              AND NOT EXISTS (SELECT 1 FROM shard_moves AS m WHERE m.local = h.local)
                            ORDER BY next_try, rowid LIMIT ?))
                 WHERE n = 1 OR run <= ? ORDER BY next_try, r",
                now,
                SETTLE_BATCH,
                SETTLE_BYTES
            ))
            .await?;
        let due: Vec<(String, String, i64)> = due
            .iter()
            .filter_map(|r| Some((r.text("key")?.to_owned(), r.text("local")?.to_owned(), r.int("attempts")?)))
            .collect();
        let mut settled = 0u64;
        let mut dead: Vec<(String, String)> = Vec::new();
        if !due.is_empty() {
            let mut locals: Vec<&str> = due.iter().map(|d| d.1.as_str()).collect();
            locals.sort_unstable();
            locals.dedup();
            for l in &locals {
                self.forget(l);
            }
            let homes = self.resolve(&locals).await?;
            // By shard, each shard's in the order they were written.
            let mut order: Vec<(usize, &(String, String, i64))> =
                due.iter().map(|d| (homes.get(&d.1).map_or(usize::MAX, |h| h.shard), d)).collect();
            order.sort_by_key(|(shard, _)| *shard);
            let mut done: Vec<&str> = Vec::new();
            let mut writes = Vec::new();
            for (shard, (key, local, attempts)) in order {
                let why = if shard == usize::MAX {
                    Some("no such agent".to_owned())
                } else {
                    let row =
                        primary.query(stmt!("SELECT stmt FROM shard_handoffs WHERE key = ?", key.as_str())).await?;
                    let Some(text) = row.first().and_then(|r| r.text("stmt")) else { continue };
                    match decode(text) {
                        None => Some("its statement does not decode".to_owned()),
                        Some(s) => {
                            match self.batch_on(shard, vec![marker(key, local), s], std::slice::from_ref(local)).await {
                                Ok(_) => None,
                                Err(e) if applied_already(&e) => None,
                                Err(e) if is_moving(&e) => {
                                    self.forget(local);
                                    writes.push(stmt!(
                                        "UPDATE shard_handoffs SET next_try = ? WHERE key = ?",
                                        now.saturating_add(30),
                                        key.as_str()
                                    ));
                                    continue;
                                }
                                // A full mailbox: the envelope was accepted (maybe paid), so it
                                // waits for room, costing no try, as a sender's retry would;
                                // never given up (the hostile review found accepted mail dead).
                                Err(PortError::Constraint { name }) if name == ROOM => {
                                    writes.push(stmt!(
                                        "UPDATE shard_handoffs SET next_try = ? WHERE key = ?",
                                        now.saturating_add(ROOM_WAIT_S),
                                        key.as_str()
                                    ));
                                    continue;
                                }
                                Err(e) => Some(e.to_string()),
                            }
                        }
                    }
                };
                match why {
                    None => done.push(key),
                    Some(why) if attempts.saturating_add(1) >= SETTLE_ATTEMPTS || shard == usize::MAX => {
                        writes.push(stmt!(
                            "INSERT INTO shard_dead (key, local, stmt, why, at)
                             SELECT key, local, stmt, ?, ? FROM shard_handoffs WHERE key = ?
                             ON CONFLICT (key) DO NOTHING",
                            why.as_str(),
                            now,
                            key.as_str()
                        ));
                        writes.push(stmt!("DELETE FROM shard_handoffs WHERE key = ?", key.as_str()));
                        dead.push((key.clone(), why));
                    }
                    Some(_) => {
                        let wait = 30i64.saturating_mul(1i64 << (*attempts).clamp(0, 7)).min(3600);
                        writes.push(stmt!(
                            "UPDATE shard_handoffs SET attempts = attempts + 1, next_try = ? WHERE key = ?",
                            now.saturating_add(wait),
                            key.as_str()
                        ));
                    }
                }
            }
            settled = u64::try_from(done.len() + dead.len()).unwrap_or(0);
            if !done.is_empty() {
                writes.push(stmt!(
                    "DELETE FROM shard_handoffs WHERE key IN (SELECT value FROM json_each(?))",
                    json_locals(done)
                ));
            }
            if !dead.is_empty() {
                writes.push(stmt!(
                    "DELETE FROM shard_dead WHERE key IN (SELECT key FROM shard_dead ORDER BY at DESC, key LIMIT -1 OFFSET ?)",
                    DEAD_KEPT
                ));
            }
            if !writes.is_empty() {
                primary.batch(writes).await?;
            }
        }
        self.sweep_applied().await?;
        if dead.is_empty() {
            return Ok(settled);
        }
        let list: Vec<String> = dead.iter().map(|(k, why)| format!("{k} ({why})")).collect();
        Err(failed(&format!("hand-offs given up, kept in shard_dead: {}", list.join(", "))))
    }

    /// Forgets, on each database, markers of hand-offs the primary no longer holds (a key is
    /// never used again, so nothing can apply twice once its row is gone), once they are
    /// [`APPLIED_GRACE_S`] old: a settle elsewhere may have read a hand-off's statement before
    /// the request that wrote it applied it and the primary forgot it, and its marker must still
    /// refuse that settle's copy (the second hostile review). Up to [`APPLIED_ROUNDS`] rounds of
    /// [`APPLIED_SWEEP`] a database per upkeep, so a busy shard's markers do not outgrow it.
    async fn sweep_applied(&self) -> Result<(), PortError> {
        for db in &self.dbs {
            for _ in 0..APPLIED_ROUNDS {
                let taken = self.sweep_applied_once(db).await?;
                if taken < APPLIED_SWEEP {
                    break;
                }
            }
        }
        Ok(())
    }

    /// One round of [`Self::sweep_applied`] on `db`: how many markers it looked at.
    async fn sweep_applied_once(&self, db: &D) -> Result<i64, PortError> {
        {
            let rows = db
                .query(stmt!(
                    "SELECT key FROM shard_applied WHERE at < unixepoch() - ? ORDER BY at, key LIMIT ?",
                    APPLIED_GRACE_S,
                    APPLIED_SWEEP
                ))
                .await?;
            let keys: Vec<&str> = rows.iter().filter_map(|r| r.text("key")).collect();
            let taken = i64::try_from(keys.len()).unwrap_or(i64::MAX);
            if keys.is_empty() {
                return Ok(0);
            }
            let held = self
                .primary()?
                .query(stmt!(
                    "SELECT key FROM shard_handoffs WHERE key IN (SELECT value FROM json_each(?))",
                    json_locals(keys.iter().copied())
                ))
                .await?;
            let gone: Vec<&str> =
                keys.iter().copied().filter(|k| !held.iter().any(|h| h.text("key") == Some(*k))).collect();
            if !gone.is_empty() {
                db.batch(vec![stmt!(
                    "DELETE FROM shard_applied WHERE key IN (SELECT value FROM json_each(?))",
                    json_locals(gone)
                )])
                .await?;
            }
            Ok(taken)
        }
    }

    /// For a move off `source` (already marked: it applies nothing more for `local`): forgets
    /// every hand-off of `local` the source applied (its marker moves with the mailbox). Those it
    /// did not apply stay, to be applied where the mailbox is once the move ends.
    /// At most `pages` full pages of [`APPLIED_SWEEP`] hand-offs (the last, short one is free),
    /// from the rowid after `after`: where it stopped (`Some`), or `None` once all are; and how
    /// many full pages it took.
    async fn settle_moving(
        &self,
        local: &str,
        source: &D,
        mut after: i64,
        pages: usize,
    ) -> Result<(Option<i64>, usize), PortError> {
        let mut full = 0usize;
        loop {
            if full >= pages {
                return Ok((Some(after), full));
            }
            let rows = self
                .primary()?
                .query(stmt!(
                    "SELECT rowid AS r, key FROM shard_handoffs WHERE local = ? AND rowid > ? ORDER BY rowid LIMIT ?",
                    local,
                    after,
                    APPLIED_SWEEP
                ))
                .await?;
            let Some(last) = rows.last().and_then(|r| r.int("r")) else { return Ok((None, full)) };
            after = last;
            let short = i64::try_from(rows.len()).unwrap_or(i64::MAX) < APPLIED_SWEEP;
            let keys: Vec<&str> = rows.iter().filter_map(|r| r.text("key")).collect();
            let marked = source
                .query(stmt!(
                    "SELECT key FROM shard_applied WHERE key IN (SELECT value FROM json_each(?))",
                    json_locals(keys.iter().copied())
                ))
                .await?;
            let applied: Vec<&str> = marked.iter().filter_map(|r| r.text("key")).collect();
            if !applied.is_empty() {
                self.primary()?
                    .batch(vec![stmt!(
                        "DELETE FROM shard_handoffs WHERE key IN (SELECT value FROM json_each(?))",
                        json_locals(applied)
                    )])
                    .await?;
            }
            if short {
                return Ok((None, full));
            }
            full += 1;
        }
    }

    /// Moves `local`'s mailbox to database `to`, losing nothing, in one call: [`Self::move_step`]
    /// again and again until the move ends (`nyx5 shard move`, `nyx5 serve`). A step another
    /// process holds (its lease, [`MOVE_LEASE_MS`]) is [`MOVE_STEP_HELD`]: the caller waits and
    /// calls again. Rerun once done, it only finishes what an interrupted run left.
    pub async fn move_mailbox(&self, local: &str, to: usize) -> Result<Moved, PortError> {
        loop {
            let step = self.move_step(local, to, MOVE_STEP_CHUNKS).await?;
            if step.done {
                return Ok(Moved { from: step.from, to: step.to, envelopes: step.copied });
            }
            if !step.worked {
                return Err(PortError::Constraint { name: MOVE_STEP_HELD.to_owned() });
            }
        }
    }

    /// Begins the move of `local`'s mailbox to database `to`, or takes up the one under way, and
    /// advances it by one step of at most `chunks` chunks of work (a chunk: [`MOVE_CHUNK`]
    /// envelope rows copied, or [`FORGET_CHUNK`] forgotten on the source), from where the last
    /// step stopped. The move is a state on the primary (`shard_moves`: one move of a mailbox at
    /// a time, to one target, else [`MOVE_UNDER_WAY`]; its source, its cursor, how many rows it
    /// copied, and a step's lease, so two steps never work it at once).
    ///
    /// Its phases, each resumed by the next step wherever a crash or an error left it: the
    /// source is frozen (`shard_moving`: a write there answers [`MOVING`], which the port turns
    /// into a retry at the new place or a 503 `mailbox_moving`), its hand-offs the source applied
    /// are forgotten (their markers move with it; a bounded number of pages a step), and the
    /// target takes the thin copy; the rows are copied in envelope-id order from the cursor
    /// (idempotent: a chunk copied again changes nothing); then the raises, lists and markers, a
    /// chunk at a time (`phase`, `mark`); once all are, the usage, sealing the target's copy (a
    /// copy write that comes later writes nothing), and the primary flips `agents.shard` only
    /// from the source and only under this step's lease; then the source forgets the rows in
    /// chunks and its thin copy of the agent, and the move ends. Where the mailbox is comes with
    /// the lease, in one statement: a step never acts on a placement from before another's flip.
    /// Every batch a step sends to the source or the target claims that database for the move's
    /// generation first (its `claim`): a late step of an older or ended move writes nothing there.
    pub async fn move_step(&self, local: &str, to: usize, chunks: usize) -> Result<MoveStep, PortError> {
        self.db(to)?;
        self.forget(local);
        let to_i = i64::try_from(to).unwrap_or(i64::MAX);
        let now = self.now_ms();
        let lease = now.saturating_add(MOVE_LEASE_MS);
        let primary = self.primary()?;
        // Where the mailbox is, read in the same statement that takes the lease (the hostile
        // review: a home read before it could be one from before another step's flip, and the
        // copy then ran onto the live target).
        let taken = primary
            .write_returning(stmt!(
                "INSERT INTO shard_moves (local, to_shard, since, from_shard, lease, gen)
                   SELECT ?1, ?2, unixepoch(), shard, ?3, (SELECT n + 1 FROM shard_move_count) FROM agents WHERE local = ?1
                 ON CONFLICT (local) DO UPDATE SET lease = ?3, from_shard = coalesce(from_shard, excluded.from_shard)
                   WHERE to_shard = ?2 AND lease <= ?4
                 RETURNING from_shard, cursor, copied, phase, mark, gen,
                   (SELECT shard FROM agents WHERE local = ?1) AS home, (SELECT mbox FROM agents WHERE local = ?1) AS mbox",
                local,
                to_i,
                lease,
                now
            ))
            .await?;
        let Some(row) = taken.first() else {
            // No such agent, another target's move (a 409), or a step of this one under way elsewhere.
            let held = primary
                .query(stmt!(
                    "SELECT a.shard AS home, m.from_shard AS from_shard, m.copied AS copied, m.to_shard AS to_shard
                     FROM agents AS a LEFT JOIN shard_moves AS m ON m.local = a.local WHERE a.local = ?",
                    local
                ))
                .await?;
            let Some(r) = held.first() else { return Err(failed("no such agent")) };
            if r.int("to_shard") != Some(to_i) {
                return Err(PortError::Constraint { name: MOVE_UNDER_WAY.to_owned() });
            }
            let home = r.int("home").and_then(|f| usize::try_from(f).ok()).unwrap_or(usize::MAX);
            let from = r.int("from_shard").and_then(|f| usize::try_from(f).ok()).unwrap_or(home);
            let copied = u64::try_from(r.int("copied").unwrap_or(0)).unwrap_or(0);
            return Ok(MoveStep { from, to, copied, done: false, worked: false });
        };
        let (Some(shard), Some(mbox)) = (row.int("home"), row.int("mbox")) else {
            return Err(failed("no such agent"));
        };
        let home = Home { shard: usize::try_from(shard).unwrap_or(usize::MAX), mbox };
        let from = row.int("from_shard").and_then(|f| usize::try_from(f).ok()).unwrap_or(home.shard);
        let state = Progress {
            cursor: row.text("cursor").map(str::to_owned),
            copied: u64::try_from(row.int("copied").unwrap_or(0)).unwrap_or(0),
            phase: row.int("phase").unwrap_or(0),
            mark: row.text("mark").map(str::to_owned),
            generation: row.int("gen").unwrap_or(0),
        };
        let before = state.copied;
        let stepped = self.step_leased(local, home, to, state, chunks.max(1), lease).await;
        match stepped {
            Ok((copied, done)) => Ok(MoveStep { from, to, copied, done, worked: true }),
            // Its lease ran out and another step took the move over (even past its flip), or a
            // later move claimed a database it wrote to: that one goes on, as when the lease is
            // held elsewhere (a 202, not a 409).
            // Refused while this step still holds the move, it is no late step: the move's
            // generation is behind a database's fence (a move begun by code from before migration
            // 0028, or a primary restored from a backup that rewound the count; review 36f). It
            // takes one past every fence and the next step goes on, rather than waiting for ever.
            Err(PortError::Constraint { name }) if name == MOVE_STALE => {
                let renewed = self.renew_generation(local, lease).await?;
                Ok(MoveStep { from, to, copied: before, done: false, worked: renewed })
            }
            Err(PortError::Constraint { name }) if name == MOVE_STEP_HELD => {
                Ok(MoveStep { from, to, copied: before, done: false, worked: false })
            }
            Err(e) => {
                // Best effort: the next step need not wait for the lease (a crash's waits).
                let _ = primary
                    .batch(vec![stmt!("UPDATE shard_moves SET lease = 0 WHERE local = ? AND lease = ?", local, lease)])
                    .await;
                Err(e)
            }
        }
    }

    /// Gives the move of `local` held under `lease` a generation past every database's fence,
    /// and lets the lease go: whether the lease was still held (else nothing of the move
    /// changed; the count only skips a number).
    async fn renew_generation(&self, local: &str, lease: i64) -> Result<bool, PortError> {
        let mut top = 0i64;
        for db in &self.dbs {
            let rows = db.query(stmt!("SELECT gen FROM shard_fence WHERE local = ?", local)).await?;
            top = top.max(rows.first().and_then(|r| r.int("gen")).unwrap_or(0));
        }
        let renewed = self
            .primary()?
            .batch(vec![
                stmt!("UPDATE shard_move_count SET n = max(n, ?) + 1 WHERE one = 1", top),
                stmt!(
                    "UPDATE shard_moves SET gen = (SELECT n FROM shard_move_count WHERE one = 1), lease = 0
                      WHERE local = ? AND lease = ?",
                    local,
                    lease
                ),
            ])
            .await?;
        Ok(renewed.get(1) == Some(&1))
    }

    /// Lets the move of `local` go (its lease) at the end of a step that leaves it under way.
    async fn release(&self, local: &str, lease: i64) -> Result<(), PortError> {
        self.primary()?
            .batch(vec![stmt!("UPDATE shard_moves SET lease = 0 WHERE local = ? AND lease = ?", local, lease)])
            .await?;
        Ok(())
    }

    /// The work of one step of [`Self::move_step`], under its lease: how many rows the move
    /// copied so far, and whether it ended.
    async fn step_leased(
        &self,
        local: &str,
        home: Home,
        to: usize,
        mut state: Progress,
        chunks: usize,
        lease: i64,
    ) -> Result<(u64, bool), PortError> {
        let primary = self.primary()?;
        let to_i = i64::try_from(to).unwrap_or(i64::MAX);
        let mut budget = chunks;
        let mut copied = state.copied;
        if home.shard != to {
            let source = self.db(home.shard)?;
            let target = self.db(to)?;
            let after = match state.cursor {
                Some(c) => c,
                None => {
                    source
                        .batch(vec![
                            claim(local, state.generation),
                            stmt!("INSERT INTO shard_moving (local) VALUES (?) ON CONFLICT (local) DO NOTHING", local),
                        ])
                        .await?;
                    // The hand-offs, a bounded number of pages a step (from where the last stopped).
                    let from = state.mark.as_deref().and_then(|m| m.parse().ok()).unwrap_or(0);
                    let (stopped, pages) = self.settle_moving(local, source, from, budget).await?;
                    budget = budget.saturating_sub(pages);
                    if let Some(at) = stopped {
                        let at = at.to_string();
                        let saved = primary
                            .batch(vec![stmt!(
                                "UPDATE shard_moves SET mark = ?, lease = 0 WHERE local = ? AND lease = ?",
                                at.as_str(),
                                local,
                                lease
                            )])
                            .await?;
                        if saved.first() != Some(&1) {
                            return Err(PortError::Constraint { name: MOVE_STEP_HELD.to_owned() });
                        }
                        return Ok((copied, false));
                    }
                    let copy = Home { shard: to, mbox: home.mbox };
                    target
                        .batch(vec![
                            claim(local, state.generation),
                            stmt!("DELETE FROM shard_moving WHERE local = ?", local),
                            stmt!(
                                "INSERT INTO shard_incoming (local, gen) VALUES (?1, ?2)
                                 ON CONFLICT (local) DO UPDATE SET gen = excluded.gen, sealed = 0 WHERE gen < excluded.gen",
                                local,
                                state.generation
                            ),
                            copy_agent(local, copy),
                        ])
                        .await?;
                    state.phase = 0;
                    state.mark = None;
                    String::new()
                }
            };
            let mut chunk = Chunks { chunks: 0, rows: 0, last: after.clone(), more: false };
            if state.phase == 0 {
                chunk = copy_chunks(source, target, local, state.generation, &after, budget).await?;
                budget = budget.saturating_sub(chunk.chunks);
                if !chunk.more {
                    state.phase = 1;
                    state.mark = None;
                }
            }
            // Then the acknowledgments, lists and markers, a chunk of each at a time, counted
            // against the same budget (the hostile review: all of it in one step was 50 round
            // trips with full lists); the usage last, with the flip.
            // A phase found empty (one read) is not counted: a small mailbox still moves in one step.
            while (1..REST_PHASES).contains(&state.phase) && budget > 0 {
                let (rows, last) =
                    copy_rest_chunk(source, target, local, state.generation, state.phase, state.mark.as_deref())
                        .await?;
                if rows > 0 {
                    budget -= 1;
                }
                if rows < REST_CHUNK {
                    state.phase += 1;
                    state.mark = None;
                } else {
                    state.mark = last;
                }
            }
            let more = chunk.more || state.phase < REST_PHASES;
            // The cursor moves only under this step's lease: a chunk copied twice after a crash
            // is counted once. A step that leaves work lets the move go in the same write.
            let moved = primary
                .batch(vec![stmt!(
                    "UPDATE shard_moves SET cursor = ?, copied = copied + ?, phase = ?, mark = ?,
                       lease = CASE WHEN ? THEN 0 ELSE lease END
                      WHERE local = ? AND lease = ?",
                    chunk.last.as_str(),
                    i64::try_from(chunk.rows).unwrap_or(i64::MAX),
                    state.phase,
                    state.mark.clone().map_or(SqlValue::Null, SqlValue::from),
                    i64::from(more),
                    local,
                    lease
                )])
                .await?;
            if moved.first() != Some(&1) {
                return Err(PortError::Constraint { name: MOVE_STEP_HELD.to_owned() });
            }
            copied = copied.saturating_add(chunk.rows);
            if more {
                return Ok((copied, false));
            }
            // The rest, then the target sealed: no copy writes there after (a step that lost its
            // lease late writes nothing onto the live mailbox), and only then the flip, under
            // this step's lease.
            copy_usage(source, target, local, state.generation).await?;
            let from_i = i64::try_from(home.shard).unwrap_or(i64::MAX);
            let flipped = primary
                .batch(vec![stmt!(
                    "UPDATE agents SET shard = ? WHERE local = ? AND shard = ?
                       AND EXISTS (SELECT 1 FROM shard_moves WHERE local = ? AND lease = ?)",
                    to_i,
                    local,
                    from_i,
                    local,
                    lease
                )])
                .await?;
            self.forget(local);
            if flipped.first() != Some(&1) {
                // Another step took the move over (its lease ran out): it goes on from there,
                // and this one waits. Else the flip raced another change of the agent's place.
                let held = primary
                    .query(stmt!("SELECT 1 AS n FROM shard_moves WHERE local = ? AND lease = ?", local, lease))
                    .await?;
                let name = if held.is_empty() { MOVE_STEP_HELD } else { MOVE_UNDER_WAY };
                return Err(PortError::Constraint { name: name.to_owned() });
            }
        }
        // The rows left wherever a move away started: forgotten once the target holds them.
        for (shard, db) in self.dbs.iter().enumerate() {
            if shard == to {
                continue;
            }
            let marked = db.query(stmt!("SELECT copied FROM shard_moving WHERE local = ?", local)).await?;
            match marked.first().and_then(|r| r.int("copied")) {
                None | Some(2) => continue,
                Some(_) => {}
            }
            // Rows left by an earlier step that flipped the agent are older than the target's:
            // they were copied before that flip (the source frozen first), and the target has
            // moved on since. Only forgotten, never copied again (the hostile review: a rerun
            // wrote a stale usage and wiped list entries back over it). A chunk at a time.
            loop {
                if budget == 0 {
                    self.release(local, lease).await?;
                    return Ok((copied, false));
                }
                budget -= 1;
                let gone = db
                    .batch(vec![
                        claim(local, state.generation),
                        stmt!("UPDATE shard_moving SET copied = 1 WHERE local = ?", local),
                        stmt!(
                            "DELETE FROM mailbox WHERE local = ?1
                               AND envelope_id IN (SELECT envelope_id FROM mailbox WHERE local = ?1 LIMIT ?2)",
                            local,
                            FORGET_CHUNK
                        ),
                    ])
                    .await?;
                if gone.get(2).is_none_or(|n| i64::try_from(*n).unwrap_or(i64::MAX) < FORGET_CHUNK) {
                    break;
                }
            }
            db.batch(forget_rest(local, shard, state.generation)).await?;
        }
        // The target's upkeep takes the mailbox up again (its usage is the source's, copied last),
        // and the move's generation ends there: a step of it that comes later writes nothing
        // onto the live mailbox. Guarded, not claimed: a step that crashed after this batch
        // still ends the move on the primary.
        self.db(to)?
            .batch(vec![
                stmt!(
                    "DELETE FROM shard_incoming WHERE local = ?1
                       AND NOT EXISTS (SELECT 1 FROM shard_fence WHERE local = ?1 AND gen > ?2)",
                    local,
                    state.generation
                ),
                stmt!(
                    "INSERT INTO shard_fence (local, gen, done) VALUES (?1, ?2, 1)
                     ON CONFLICT (local) DO UPDATE SET gen = excluded.gen, done = 1 WHERE gen <= excluded.gen",
                    local,
                    state.generation
                ),
            ])
            .await?;
        // What waited for the move (hand-offs refused as moving) is due at once: the next
        // settle applies it where the mailbox is now, not after its back-off.
        let ended = primary
            .batch(vec![
                stmt!("DELETE FROM shard_moves WHERE local = ? AND lease = ?", local, lease),
                stmt!("UPDATE shard_handoffs SET next_try = 0 WHERE local = ? AND attempts = 0", local),
            ])
            .await?;
        self.forget(local);
        if ended.first() != Some(&1) {
            // Its lease ran out meanwhile: the step that holds it ends the move (the second
            // hostile review, LOW 2: this one reported done).
            return Err(PortError::Constraint { name: MOVE_STEP_HELD.to_owned() });
        }
        Ok((copied, true))
    }

    /// The tick's step of every move under way ([`Db::advance_moves`]): at most
    /// [`MOVES_PER_TICK`] moves, the oldest first, each by one step of [`MOVE_STEP_CHUNKS`].
    /// Whether there was one (still under way, or ended by this step: the hand-offs that waited
    /// for it are due at the next upkeep).
    async fn advance_moves_sharded(&self) -> Result<bool, PortError> {
        let moves = self
            .primary()?
            .query(stmt!(
                "SELECT local, to_shard FROM shard_moves WHERE next_try <= ? ORDER BY next_try, since, local LIMIT ?",
                self.now_ms() / 1000,
                MOVES_PER_TICK.saturating_add(1)
            ))
            .await?;
        // Each move stepped goes behind the others (a step that failed waits
        // [`MOVE_RETRY_S`]): one failing move never holds the others up (the hostile review).
        let mut next: Vec<(String, i64)> = Vec::new();
        let mut under_way = i64::try_from(moves.len()).unwrap_or(i64::MAX) > MOVES_PER_TICK;
        let mut errors = Vec::new();
        for r in moves.iter().take(usize::try_from(MOVES_PER_TICK).unwrap_or(0)) {
            let (Some(local), Some(to)) = (r.text("local"), r.int("to_shard")) else { continue };
            let now = self.now_ms() / 1000;
            let Some(to) = usize::try_from(to).ok().filter(|t| *t < self.dbs.len()) else {
                errors.push(format!("moving {local}: no database {to}"));
                next.push((local.to_owned(), now.saturating_add(MOVE_RETRY_S)));
                continue;
            };
            match self.move_step(local, to, MOVE_STEP_CHUNKS).await {
                // One that ended counts too: the next upkeep settles what waited for it.
                Ok(_) => {
                    under_way = true;
                    next.push((local.to_owned(), now));
                }
                Err(e) => {
                    under_way = true;
                    errors.push(format!("moving {local}: {e}"));
                    next.push((local.to_owned(), now.saturating_add(MOVE_RETRY_S)));
                }
            }
        }
        if !next.is_empty() {
            let stmts = next
                .iter()
                .map(|(local, at)| stmt!("UPDATE shard_moves SET next_try = ? WHERE local = ?", *at, local.as_str()))
                .collect();
            if let Err(e) = self.primary()?.batch(stmts).await {
                errors.push(format!("moves' next try: {e}"));
            }
        }
        if errors.is_empty() { Ok(under_way) } else { Err(failed(&errors.join("; "))) }
    }
}

/// What a move forgets of `local` on `shard` once its mailbox rows are gone there: usage,
/// raises, lists, markers and (off the primary) its thin copy, then the mark that refuses every
/// later write (`copied = 2`). Each delete holds only while this database is still the source
/// being forgotten (`copied = 1`), as the mailbox rows' trigger does: a step that stalled past
/// its lease and runs this after a later move copied the mailbox back here deletes nothing of
/// that copy (the second hostile review of moves in steps).
fn forget_rest(local: &str, shard: usize, generation: i64) -> Vec<Stmt> {
    let mut forget = vec![
        claim(local, generation),
        stmt!(
            "DELETE FROM mailbox_usage WHERE local = ?1
             AND EXISTS (SELECT 1 FROM shard_moving WHERE local = ?1 AND copied = 1)",
            local
        ),
        stmt!(
            "DELETE FROM mailbox_acks WHERE local = ?1
             AND EXISTS (SELECT 1 FROM shard_moving WHERE local = ?1 AND copied = 1)",
            local
        ),
        stmt!(
            "DELETE FROM lists WHERE local = ?1 AND EXISTS (SELECT 1 FROM shard_moving WHERE local = ?1 AND copied = 1)",
            local
        ),
        stmt!(
            "DELETE FROM shard_applied WHERE local = ?1
             AND EXISTS (SELECT 1 FROM shard_moving WHERE local = ?1 AND copied = 1)",
            local
        ),
    ];
    if shard != 0 {
        // Its thin copy too: a reader that still thinks the mailbox is here finds no agent, and
        // asks the primary where it is.
        forget.push(stmt!(
            "DELETE FROM agents WHERE local = ?1 AND registered_via = 'shard'
             AND EXISTS (SELECT 1 FROM shard_moving WHERE local = ?1 AND copied = 1)",
            local
        ));
    }
    // Done: every later write for it here is refused (`copied = 2`), a delete too.
    forget.push(stmt!("UPDATE shard_moving SET copied = 2 WHERE local = ? AND copied = 1", local));
    forget
}

/// The constraint a move answers while another move of the same mailbox, to another database, is
/// under way (or raced this one): a 409.
pub const MOVE_UNDER_WAY: &str = "shard_move_under_way";

/// What [`Shards::move_mailbox`] answers when a step of the same move runs elsewhere (another
/// process holds its lease): wait and call again. Never on the wire (the route answers 202).
pub const MOVE_STEP_HELD: &str = "shard_move_step_held";

/// The constraint a step's batch meets on a database that a later move claimed, or where its own
/// move already ended (migration 0028): the step stops and writes nothing there.
pub const MOVE_STALE: &str = "shard_move_stale";

/// The statement a step puts first in every batch it sends to a source or a target: it claims the
/// database for the move's `generation`, and aborts the batch (a [`MOVE_STALE`] constraint)
/// where a newer move claimed it or this one ended there. Steps of one move share the claim;
/// each one's own lease keeps them apart on the primary.
fn claim(local: &str, generation: i64) -> Stmt {
    stmt!("INSERT INTO shard_claim (local, gen) VALUES (?, ?)", local, generation)
}

/// Envelope rows copied per batch of a move.
pub const MOVE_CHUNK: i64 = 32;

/// Source rows forgotten per statement once the target holds them.
pub const FORGET_CHUNK: i64 = 256;

/// Chunks of work a step of a move does at most (a request's, or a tick's): 4 chunks of
/// [`MOVE_CHUNK`] rows are 128 envelope rows in 10 queries (the lease with the placement, 4
/// reads and 4 batches, the cursor); a chunk of the rest ([`REST_CHUNK`] rows) or a full page of
/// hand-offs settled counts as one too, within D1's 50 queries per invocation on the Free plan beside the
/// tick's own.
pub const MOVE_STEP_CHUNKS: usize = 4;

/// Moves a tick advances (one: a step is about a dozen queries, and the tick has its own within
/// D1's 50 per invocation on the Free plan; while one is under way every tick takes a step).
pub const MOVES_PER_TICK: i64 = 1;

/// Seconds a move whose tick's step failed waits before the tick tries it again.
pub const MOVE_RETRY_S: i64 = 60;

/// How long a step holds its move (milliseconds): a step that crashed holds it up to this long.
pub const MOVE_LEASE_MS: i64 = 30_000;

/// A move's state as a step reads it from `shard_moves`.
struct Progress {
    /// The last envelope id copied; `None` until the source is frozen.
    cursor: Option<String>,
    copied: u64,
    /// Once the rows are copied: 1 acknowledgments, 2 lists, 3 markers, [`REST_PHASES`] all
    /// (the usage is copied with the flip).
    phase: i64,
    /// The last key copied in `phase` (a JSON array), or, before the source is frozen and
    /// its hand-offs settled, the last hand-off's rowid settled.
    mark: Option<String>,
    /// The move's generation: what its steps claim each database with ([`claim`]).
    generation: i64,
}

/// What [`copy_chunks`] did.
struct Chunks {
    /// Chunks read.
    chunks: usize,
    /// Envelope rows copied.
    rows: u64,
    /// The last envelope id copied (the cursor it started from when none was).
    last: String,
    /// Whether rows may be left past `last`.
    more: bool,
}

/// Copies up to `chunks` chunks of `local`'s envelope rows after `after` (in envelope-id order)
/// from `source` to `target`: each insert is `ON CONFLICT DO NOTHING`, so a chunk copied again
/// (after a crash before the cursor moved) changes nothing.
async fn copy_chunks<D: Db>(
    source: &D,
    target: &D,
    local: &str,
    generation: i64,
    after: &str,
    chunks: usize,
) -> Result<Chunks, PortError> {
    let mut out = Chunks { chunks: 0, rows: 0, last: after.to_owned(), more: true };
    while out.chunks < chunks {
        out.chunks += 1;
        let rows = source
            .query(stmt!(
                "SELECT seq, envelope_id, sender, received_at, acked_at, bytes, stamp, total_n, total_bytes, within, envelope
                 FROM mailbox WHERE local = ? AND envelope_id > ? ORDER BY envelope_id LIMIT ?",
                local,
                out.last.as_str(),
                MOVE_CHUNK
            ))
            .await?;
        if rows.is_empty() {
            out.more = false;
            break;
        }
        let full = i64::try_from(rows.len()).unwrap_or(i64::MAX) >= MOVE_CHUNK;
        let mut batch = vec![claim(local, generation)];
        for r in &rows {
            let seq = r.int("seq").unwrap_or(0);
            let id = r.text("envelope_id").unwrap_or_default();
            let get = |c: &str| r.get(c).cloned().unwrap_or(SqlValue::Null);
            batch.push(Stmt::new(
                "INSERT INTO mailbox (seq, local, envelope_id, sender, received_at, acked_at, bytes, stamp, total_n,
                                      total_bytes, within, envelope)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12
                  WHERE EXISTS (SELECT 1 FROM shard_incoming WHERE local = ?2 AND sealed = 0)
                 ON CONFLICT (local, envelope_id) DO NOTHING",
                vec![
                    SqlValue::Int(seq.abs()),
                    local.into(),
                    id.into(),
                    get("sender"),
                    get("received_at"),
                    get("acked_at"),
                    get("bytes"),
                    get("stamp"),
                    get("total_n"),
                    get("total_bytes"),
                    get("within"),
                    get("envelope"),
                ],
            ));
            if seq < 0 {
                batch.push(stmt!(
                    "UPDATE mailbox SET seq = ?1 WHERE local = ?2 AND envelope_id = ?3 AND seq = ?4
                       AND EXISTS (SELECT 1 FROM shard_incoming WHERE local = ?2 AND sealed = 0)",
                    seq,
                    local,
                    id,
                    -seq
                ));
            }
        }
        target.batch(batch).await?;
        out.rows = out.rows.saturating_add(u64::try_from(rows.len()).unwrap_or(0));
        out.last = rows.last().and_then(|r| r.text("envelope_id")).unwrap_or_default().to_owned();
        if !full {
            out.more = false;
            break;
        }
    }
    Ok(out)
}

/// The phase after the last of the rest's ([`copy_rest_chunk`]).
const REST_PHASES: i64 = 4;

/// Rows of the rest (acknowledgments, lists, markers) copied per chunk.
pub const REST_CHUNK: usize = 64;

/// Copies one chunk of the rest of `local`'s mailbox once its envelope rows are: in `phase` 1
/// its watermark raises, 2 its lists, 3 its hand-off markers, each in key order after `mark`
/// (a JSON array of the last key copied), from `source` to `target`. Each write is `ON
/// CONFLICT DO NOTHING` and only while the target's copy is not sealed, so a rerun copies only
/// what is missing and a late one nothing. How many rows it read, and the last one's key.
async fn copy_rest_chunk<D: Db>(
    source: &D,
    target: &D,
    local: &str,
    generation: i64,
    phase: i64,
    mark: Option<&str>,
) -> Result<(usize, Option<String>), PortError> {
    let limit = i64::try_from(REST_CHUNK).unwrap_or(i64::MAX);
    let mark = mark.map_or(SqlValue::Null, SqlValue::from);
    let (read, write) = match phase {
        1 => (
            stmt!(
                "SELECT at, lo, through, json_array(at, through) AS k FROM mailbox_acks
                  WHERE local = ?1 AND (?2 IS NULL OR (at, through) > (json_extract(?2, '$[0]'), json_extract(?2, '$[1]')))
                  ORDER BY at, through LIMIT ?3",
                local,
                mark,
                limit
            ),
            "INSERT INTO mailbox_acks (at, local, lo, through) SELECT ?1, ?2, ?3, ?4
              WHERE EXISTS (SELECT 1 FROM shard_incoming WHERE local = ?2 AND sealed = 0) ON CONFLICT DO NOTHING",
        ),
        2 => (
            stmt!(
                "SELECT kind, entry, json_array(kind, entry) AS k FROM lists
                  WHERE local = ?1 AND (?2 IS NULL OR (kind, entry) > (json_extract(?2, '$[0]'), json_extract(?2, '$[1]')))
                  ORDER BY kind, entry LIMIT ?3",
                local,
                mark,
                limit
            ),
            "INSERT INTO lists (local, kind, entry) SELECT ?2, ?1, ?3
              WHERE EXISTS (SELECT 1 FROM shard_incoming WHERE local = ?2 AND sealed = 0) ON CONFLICT DO NOTHING",
        ),
        _ => (
            stmt!(
                "SELECT key, at, json_array(key) AS k FROM shard_applied
                  WHERE local = ?1 AND (?2 IS NULL OR key > json_extract(?2, '$[0]')) ORDER BY key LIMIT ?3",
                local,
                mark,
                limit
            ),
            "INSERT INTO shard_applied (key, local, at) SELECT ?1, ?2, ?3
              WHERE EXISTS (SELECT 1 FROM shard_incoming WHERE local = ?2 AND sealed = 0) ON CONFLICT DO NOTHING",
        ),
    };
    let rows = source.query(read).await?;
    let mut batch = vec![claim(local, generation)];
    for r in &rows {
        let get = |c: &str| r.get(c).cloned().unwrap_or(SqlValue::Null);
        let values = match phase {
            1 => vec![get("at"), local.into(), get("lo"), get("through")],
            2 => vec![get("kind"), local.into(), get("entry")],
            _ => vec![get("key"), local.into(), get("at")],
        };
        batch.push(Stmt::new(write, values));
    }
    if !rows.is_empty() {
        target.batch(batch).await?;
    }
    Ok((rows.len(), rows.last().and_then(|r| r.text("k")).map(str::to_owned)))
}

/// Copies `local`'s usage from `source` to `target` (which takes no writes from the source
/// meanwhile: it is frozen) and seals the target's copy in the same batch: a copy write that
/// comes later (a step that lost its lease) writes nothing, nor does one of this move run again.
async fn copy_usage<D: Db>(source: &D, target: &D, local: &str, generation: i64) -> Result<(), PortError> {
    let mut batch = vec![claim(local, generation)];
    for r in source
        .query(stmt!(
            "SELECT envelopes, bytes, max_envelopes, max_bytes, acked_through FROM mailbox_usage WHERE local = ?",
            local
        ))
        .await?
    {
        let get = |c: &str| r.get(c).cloned().unwrap_or(SqlValue::Null);
        batch.push(Stmt::new(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, acked_through)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS (SELECT 1 FROM shard_incoming WHERE local = ?1 AND sealed = 0)
             ON CONFLICT (local) DO UPDATE SET envelopes = ?2, bytes = ?3, max_envelopes = ?4, max_bytes = ?5,
               acked_through = ?6",
            vec![
                local.into(),
                get("envelopes"),
                get("bytes"),
                get("max_envelopes"),
                get("max_bytes"),
                get("acked_through"),
            ],
        ));
    }
    batch.push(stmt!("UPDATE shard_incoming SET sealed = 1 WHERE local = ?", local));
    target.batch(batch).await?;
    Ok(())
}

impl<D: Db> Db for Shards<D> {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.read(stmt, None).await
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        if self.dbs.len() == 1 {
            return self.primary()?.batch(stmts).await;
        }
        self.batch_sharded(stmts).await
    }

    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        // The queue's lease: the primary's.
        self.primary()?.write_returning(stmt).await
    }

    async fn query_stale(&self, reads: &Reads, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        if self.dbs.len() == 1 {
            return self.primary()?.query_stale(reads, stmt).await;
        }
        // A bookmark names a point of one database: with shards, reads go to each primary.
        self.read(stmt, None).await
    }

    fn bookmark(&self, reads: &Reads) -> Option<String> {
        match self.dbs.first() {
            Some(db) if self.dbs.len() == 1 => db.bookmark(reads),
            _ => reads.bookmark(),
        }
    }

    fn sharded(&self) -> bool {
        self.dbs.len() > 1
    }

    async fn settle(&self) -> Result<u64, PortError> {
        if self.dbs.len() == 1 {
            return Ok(0);
        }
        self.settle_sharded().await
    }

    fn databases(&self) -> usize {
        self.dbs.len()
    }

    async fn move_mailbox(&self, local: &str, to: usize) -> Result<(usize, usize, u64), PortError> {
        let m = Shards::move_mailbox(self, local, to).await?;
        Ok((m.from, m.to, m.envelopes))
    }

    async fn move_step(&self, local: &str, to: usize) -> Result<MoveStep, PortError> {
        if self.dbs.len() == 1 {
            return Err(failed("this house has one database"));
        }
        Shards::move_step(self, local, to, MOVE_STEP_CHUNKS).await
    }

    async fn advance_moves(&self) -> Result<bool, PortError> {
        if self.dbs.len() == 1 {
            return Ok(false);
        }
        self.advance_moves_sharded().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteDb;
    use crate::store;
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};
    use std::rc::Rc;

    use crate::sqlite::tests::block_on;

    const QUOTA: store::mailbox::Quota = store::mailbox::Quota { max_envelopes: 100, max_bytes: 1 << 20 };

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nyx5-shards-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    thread_local! {
        /// The tests' clock, in ms: each test's thread its own, moved on by [`advance`].
        static NOW: std::cell::Cell<i64> = const { std::cell::Cell::new(1_800_000_000_000) };
    }

    fn advance(secs: i64) {
        NOW.with(|n| n.set(n.get() + secs * 1000));
    }

    struct TestClock;
    impl Clock for TestClock {
        fn now(&self) -> nyx5_proto::Timestamp {
            nyx5_proto::Timestamp(NOW.with(std::cell::Cell::get))
        }
    }

    /// Distinct bytes for every call in the test process (no two houses share a key).
    struct TestRng;
    impl Rng for TestRng {
        fn fill(&self, buf: &mut [u8]) {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = n.get(i % 8).copied().unwrap_or(0) ^ u8::try_from(i / 8).unwrap_or(0);
            }
        }
    }

    fn test_house<D: Db>(dbs: Vec<D>) -> Option<Shards<D>> {
        Shards::new(dbs, Box::new(TestClock), Box::new(TestRng))
    }

    fn files(d: &Path, n: usize) -> Shards<SqliteDb> {
        test_house((0..n).map(|i| SqliteDb::open(&d.join(format!("{i}.db"))).unwrap()).collect()).unwrap()
    }

    fn register(house: &Shards<SqliteDb>, local: &str, shard: i64) {
        block_on(house.batch(vec![stmt!(
            "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at, shard)
             VALUES (?, 'card', 'sig', 'test', 0, 0, ?)",
            local,
            shard
        )]))
        .unwrap();
    }

    /// An accept as the inbound path writes it: the sender's rate window (the primary) and the
    /// envelope (the mailbox). Its count for the envelope.
    fn accept<D: Db>(house: &D, local: &str, id: &str) -> Result<u64, PortError> {
        let stmts = vec![
            store::agents::count_in_window(&format!("in:{local}:example"), 1, 1000),
            store::mailbox::insert(local, id, "al@example", &format!("{{\"id\":\"{id}\"}}"), 5, QUOTA),
        ];
        Ok(block_on(house.batch(stmts))?.get(1).copied().unwrap_or(0))
    }

    fn ids<D: Db>(house: &D, local: &str) -> Vec<String> {
        let bounds = store::inbox::PageBounds { after: 0, limit: 100, bytes: 1 << 30, overhead: 0, unrecorded: 0 };
        block_on(house.query(store::inbox::page_query(local, bounds)))
            .unwrap()
            .iter()
            .map(|r| r.text("envelope").unwrap().to_owned())
            .collect()
    }

    /// bo's envelope rows on database `shard` of `house`.
    fn bo_rows(house: &Shards<SqliteDb>, shard: usize) -> i64 {
        count(house.get(shard).unwrap(), "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'")
    }

    fn count(db: &SqliteDb, sql: &'static str) -> i64 {
        block_on(db.query(Stmt::new(sql, vec![]))).unwrap()[0].int("n").unwrap()
    }

    fn new_card(local: &str) -> Vec<Stmt> {
        let index =
            store::agents::Index { listed: false, search: String::new(), accepts: String::new(), caps: String::new() };
        let card =
            store::agents::NewCard { local, card: "c", sig: "s", index: &index, webhook: None, via: "test", now: 0 };
        store::agents::insert(&card)
    }

    /// The generation of `local`'s move under way, and where its mailbox is.
    fn move_gen_and_home(house: &Shards<SqliteDb>, local: &str) -> (i64, Home) {
        let primary = house.get(0).unwrap();
        let generation = block_on(primary.query(stmt!("SELECT gen FROM shard_moves WHERE local = ?", local))).unwrap()
            [0]
        .int("gen")
        .unwrap();
        let agent = block_on(primary.query(stmt!("SELECT shard, mbox FROM agents WHERE local = ?", local))).unwrap();
        let home = Home {
            shard: usize::try_from(agent[0].int("shard").unwrap()).unwrap(),
            mbox: agent[0].int("mbox").unwrap(),
        };
        (generation, home)
    }

    /// A step of `to`'s move of `generation` that took its lease when the mailbox was at
    /// `home` and stalled before freezing the source, run now.
    fn stale_step(
        house: &Shards<SqliteDb>,
        local: &str,
        home: Home,
        to: usize,
        generation: i64,
    ) -> Result<(u64, bool), PortError> {
        let state = Progress { cursor: None, copied: 0, phase: 0, mark: None, generation };
        block_on(house.step_leased(local, home, to, state, MOVE_STEP_CHUNKS, 1))
    }

    fn has(db: &SqliteDb, table: &'static str, local: &str) -> bool {
        let sql = match table {
            "shard_moving" => "SELECT count(*) AS n FROM shard_moving WHERE local = ?",
            "shard_incoming" => "SELECT count(*) AS n FROM shard_incoming WHERE local = ?",
            _ => unreachable!(),
        };
        block_on(db.query(Stmt::new(sql, vec![local.into()]))).unwrap()[0].int("n").unwrap() > 0
    }

    /// The claim's rules on one database: a newer generation takes it over, an older one is
    /// refused, the same one goes on until its move ended there.
    #[test]
    fn a_claim_refuses_older_generations_and_an_ended_one() {
        let db = SqliteDb::open(&dir("claims").join("0.db")).unwrap();
        let claim_by = |generation: i64| block_on(db.batch(vec![claim("bo", generation)]));
        let stale =
            |r: Result<Vec<u64>, PortError>| matches!(r, Err(PortError::Constraint { name }) if name == MOVE_STALE);
        claim_by(2).unwrap();
        claim_by(2).unwrap();
        assert!(stale(claim_by(1)), "an older move");
        block_on(db.batch(vec![stmt!("UPDATE shard_fence SET done = 1 WHERE local = 'bo' AND gen = 2")])).unwrap();
        assert!(stale(claim_by(2)), "a move that ended here");
        claim_by(3).unwrap();
        assert_eq!(count(&db, "SELECT done AS n FROM shard_fence WHERE local = 'bo'"), 0, "a newer move starts afresh");
        claim_by(1).unwrap_err();
        // A claim refused takes its batch with it.
        let refused = block_on(db.batch(vec![claim("bo", 2), stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")]));
        assert!(stale(refused));
        assert!(!has(&db, "shard_moving", "bo"));
        // Each move takes the next generation on the primary; a step of the same move keeps it.
        let n = |generation: i64| {
            block_on(db.batch(vec![stmt!(
                "INSERT INTO shard_moves (local, to_shard, since, gen) VALUES (?, 1, 0, (SELECT n + 1 FROM shard_move_count))",
                format!("a{generation}")
            )]))
            .unwrap();
            count(&db, "SELECT n FROM shard_move_count")
        };
        assert_eq!((n(1), n(2)), (1, 2));
    }

    /// A step of a move that stalled past its lease, run after that move ended and a move back
    /// began, writes nothing: it neither freezes the new target nor thaws the new source (where
    /// mail written meanwhile would have been forgotten with the source), and the move back
    /// loses nothing (the second hostile review of moves in steps, MEDIUM 1).
    #[test]
    fn a_stale_step_cannot_thaw_a_later_moves_source() {
        let d = dir("stale-thaw");
        let house = files(&d, 2);
        register(&house, "bo", 0);
        let sent: Vec<String> = (0..60).map(|i| format!("e{i:02}")).collect();
        for id in &sent {
            assert_eq!(accept(&house, "bo", id).unwrap(), 1);
        }
        // A step of the move to 1, then the rest of that move: done.
        assert!(!block_on(house.move_step("bo", 1, 1)).unwrap().done);
        let (old, at_zero) = move_gen_and_home(&house, "bo");
        block_on(house.move_mailbox("bo", 1)).unwrap();
        // The move back to 0, one step: 1 frozen, 0 taking the copy.
        assert!(!block_on(house.move_step("bo", 0, 1)).unwrap().done);
        let (new, _) = move_gen_and_home(&house, "bo");
        assert!(new > old, "a later move has a later generation");
        let (zero, one) = (house.get(0).unwrap(), house.get(1).unwrap());
        assert!(has(one, "shard_moving", "bo") && has(zero, "shard_incoming", "bo"));
        // The first move's stalled step wakes up: refused, nothing written.
        let woke = stale_step(&house, "bo", at_zero, 1, old).unwrap_err();
        assert!(has(one, "shard_moving", "bo"), "the new source stays frozen");
        assert!(!has(zero, "shard_moving", "bo"), "the new target is not frozen");
        assert_eq!(woke, PortError::Constraint { name: MOVE_STALE.into() });
        // Mail that arrives meanwhile waits for the move (handed off), as it would have anyway.
        assert!(has(one, "shard_moving", "bo"));
        assert_eq!(accept(&house, "bo", "late").unwrap(), 1);
        // The move back ends with every envelope, the late one applied where the mailbox is now.
        assert_eq!(block_on(house.move_mailbox("bo", 0)).unwrap().to, 0);
        block_on(house.settle()).unwrap();
        let mut got = ids(&house, "bo");
        got.sort();
        let want: Vec<String> =
            sent.iter().map(String::as_str).chain(["late"]).map(|id| format!("{{\"id\":\"{id}\"}}")).collect();
        assert_eq!(got, want);
    }

    /// A step of a move that ended, run late, leaves the live mailbox alone: no `shard_incoming`
    /// (which would keep the target's upkeep off it for good, and let copy writes through).
    #[test]
    fn a_step_of_an_ended_move_leaves_the_live_mailbox_alone() {
        let d = dir("stale-end");
        let house = files(&d, 2);
        register(&house, "bo", 0);
        for id in ["e1", "e2", "e3"] {
            accept(&house, "bo", id).unwrap();
        }
        block_on(house.move_step("bo", 1, 0)).unwrap();
        let (generation, at_zero) = move_gen_and_home(&house, "bo");
        block_on(house.move_mailbox("bo", 1)).unwrap();
        let one = house.get(1).unwrap();
        assert!(!has(one, "shard_incoming", "bo"));
        let woke = stale_step(&house, "bo", at_zero, 1, generation).unwrap_err();
        assert_eq!(woke, PortError::Constraint { name: MOVE_STALE.into() });
        assert!(!has(one, "shard_incoming", "bo") && !has(one, "shard_moving", "bo"));
        assert_eq!(accept(&house, "bo", "e4").unwrap(), 1);
        assert_eq!(ids(&house, "bo").len(), 4);
    }

    /// What a move forgets of a mailbox once its rows are gone deletes nothing unless this
    /// database is still the source being forgotten (`copied = 1`): a step that stalled past its
    /// lease, run after a later move copied the mailbox back here, leaves that copy's lists,
    /// usage and thin agent alone (the second hostile review of moves in steps, MEDIUM 2).
    #[test]
    fn forgetting_a_source_touches_nothing_of_a_copy_back() {
        let d = dir("forget-rest");
        let db = SqliteDb::open(&d.join("1.db")).unwrap();
        let seed = vec![
            stmt!("INSERT INTO lists (local, kind, entry) VALUES ('bo', 'block', 'thief@example')"),
            stmt!(
                "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at, shard)
                 VALUES ('bo', 'card', 'sig', 'shard', 0, 0, 1)"
            ),
        ];
        block_on(db.batch(seed)).unwrap();
        // A copy back into this database: no forgetting mark here.
        block_on(db.batch(forget_rest("bo", 1, 1))).unwrap();
        assert_eq!(count(&db, "SELECT count(*) AS n FROM lists WHERE local = 'bo'"), 1);
        assert_eq!(count(&db, "SELECT count(*) AS n FROM agents WHERE local = 'bo'"), 1);
        // The source being forgotten: everything goes, and the mark says done.
        block_on(db.batch(vec![stmt!("INSERT INTO shard_moving (local, copied) VALUES ('bo', 1)")])).unwrap();
        block_on(db.batch(forget_rest("bo", 1, 1))).unwrap();
        assert_eq!(count(&db, "SELECT count(*) AS n FROM lists WHERE local = 'bo'"), 0);
        assert_eq!(count(&db, "SELECT count(*) AS n FROM agents WHERE local = 'bo'"), 0);
        assert_eq!(count(&db, "SELECT count(*) AS n FROM shard_moving WHERE local = 'bo' AND copied = 2"), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn placement_is_stable_and_spreads() {
        assert_eq!(placement("anyone", 1), 0);
        assert_eq!(placement("anyone", 0), 0);
        assert_eq!(placement("bo", 3), placement("bo", 3), "the same rule gives the same shard");
        for n in 2..=4 {
            let mut seen = vec![0; n];
            for i in 0..2000 {
                // Names alike but for their start, and alike but for their end.
                let name = if i % 2 == 0 { format!("{i}-bot") } else { format!("agent{i}") };
                seen[placement(&name, n)] += 1;
            }
            eprintln!("{n} shards: {seen:?}");
            for s in &seen {
                assert!(*s > 2000 / n / 2 && *s < 2000 / n * 2, "{n} shards spread {seen:?}");
            }
        }
    }

    #[test]
    fn registration_records_the_rule_and_one_database_is_untouched() {
        let d = dir("place");
        let house = files(&d, 3);
        let names: Vec<String> = (0..30).map(|i| format!("a{i}")).collect();
        for n in &names {
            block_on(house.batch(new_card(n))).unwrap();
        }
        for n in &names {
            let rows =
                block_on(house.get(0).unwrap().query(stmt!("SELECT shard FROM agents WHERE local = ?", n.as_str())))
                    .unwrap();
            assert_eq!(rows[0].int("shard"), Some(placement(n, 3) as i64), "{n}");
        }
        // One database: the port passes every statement through, placing everyone on it.
        let one = files(&dir("one"), 1);
        block_on(one.batch(new_card("zed"))).unwrap();
        assert_eq!(accept(&one, "zed", "e1").unwrap(), 1);
        assert_eq!(ids(&one, "zed").len(), 1);
        assert_eq!(count(one.get(0).unwrap(), "SELECT count(*) AS n FROM shard_handoffs"), 0);
    }

    #[test]
    fn mailbox_statements_go_where_the_mailbox_is() {
        let d = dir("route");
        let house = files(&d, 2);
        register(&house, "al", 0);
        register(&house, "bo", 1);
        // A batch of one mailbox on a shard: one atomic batch there, no hand-off.
        let only_shard = vec![store::mailbox::insert("bo", "b1", "x@example", "{}", 1, QUOTA)];
        assert_eq!(block_on(house.batch(only_shard)).unwrap(), [1]);
        // The registry and a mailbox on a shard: both applied, the hand-off left for the tick.
        assert_eq!(accept(&house, "bo", "b2").unwrap(), 1);
        assert_eq!(accept(&house, "bo", "b2").unwrap(), 0, "a duplicate is a duplicate");
        assert_eq!(accept(&house, "al", "a1").unwrap(), 1);
        let (primary, shard) = (house.get(0).unwrap(), house.get(1).unwrap());
        assert_eq!(count(primary, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), 0);
        assert_eq!(count(shard, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), 2);
        assert_eq!(count(shard, "SELECT count(*) AS n FROM mailbox WHERE local = 'al'"), 0);
        assert_eq!(count(primary, "SELECT count(*) AS n FROM rate_windows"), 2, "rate windows on the primary");
        assert_eq!(ids(&house, "bo").len(), 2);
        assert_eq!(ids(&house, "al").len(), 1);
        // What each holds, read where each is.
        let usage = block_on(house.query(
            Stmt::new(
                "SELECT local, count(*) AS n FROM json_each(?) AS j CROSS JOIN mailbox AS m ON m.local = j.value GROUP BY local",
                vec![SqlValue::from("[\"al\",\"bo\"]")],
            )
            .at(Place::Spread(0)),
        ))
        .unwrap();
        assert_eq!(usage.len(), 2);
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_handoffs"), 0, "forgotten once applied");
        assert_eq!(block_on(house.settle()).unwrap(), 0, "nothing left to settle");
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_handoffs"), 0);
        assert_eq!(ids(&house, "bo").len(), 2, "settling applied nothing twice");
    }

    #[test]
    fn an_agents_settings_read_its_lists_where_its_mailbox_is() {
        let house = files(&dir("settings"), 2);
        register(&house, "bo", 1);
        block_on(house.batch(vec![store::mailbox::add_entry("bo", "block", "spam@example", 10)])).unwrap();
        let rows = block_on(store::agents::settings(&house, "bo")).unwrap();
        let entries: Vec<Option<&str>> = rows.iter().map(|r| r.text("entry")).collect();
        assert_eq!(entries, [Some("spam@example")]);
        assert_eq!(count(house.get(0).unwrap(), "SELECT count(*) AS n FROM lists"), 0, "on the shard, not the primary");
        assert!(block_on(store::agents::settings(&house, "nobody")).unwrap().is_empty());
    }

    #[test]
    fn an_ack_that_lost_its_race_writes_nothing_anywhere() {
        let house = files(&dir("ackrace"), 2);
        register(&house, "bo", 1);
        assert_eq!(accept(&house, "bo", "e1").unwrap(), 1);
        let usage = stmt!(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes) VALUES ('bo', 0, 0, 100, 100000)"
        )
        .in_mailbox("bo");
        block_on(house.batch(vec![usage])).unwrap();
        // Decided on a watermark (5) that is not the mailbox's (0): its guard fails the batch.
        let plan = store::inbox::AckPlan { read: 5, through: 6, moved: None, acked: 1, counted: 1 };
        let mut stmts = vec![stmt!("INSERT INTO nonces (address, nonce, keep_until) VALUES ('bo@x', 'n1', 1)")];
        stmts.extend(store::inbox::ack("bo", "[\"e1\"]", &plan, 0, QUOTA));
        let lost = block_on(house.batch(stmts)).unwrap_err();
        assert_eq!(lost, PortError::Constraint { name: store::constraint::MAILBOX_ACK_RACED.into() });
        let primary = house.get(0).unwrap();
        assert_eq!(count(primary, "SELECT count(*) AS n FROM nonces"), 0, "the nonce is not spent");
        assert_eq!(
            count(
                primary,
                "SELECT count(*) AS n FROM shard_handoffs WHERE local = 'bo' AND stmt LIKE '%acked_through%'"
            ),
            0
        );
        assert_eq!(ids(&house, "bo").len(), 1, "still waiting");
    }

    #[test]
    fn a_handed_off_envelope_is_not_lost_to_the_quota() {
        let house = files(&dir("quota"), 2);
        register(&house, "bo", 1);
        let one = store::mailbox::Quota { max_envelopes: 1, max_bytes: 1 << 20 };
        // Two accepts decided on a mailbox with room, the second racing the first: both were
        // counted on the primary, so both are delivered (the quota refuses the next decision).
        for id in ["e1", "e2"] {
            let stmts = vec![
                store::agents::count_in_window("in:bo:example", 1, 1000),
                store::mailbox::insert("bo", id, "al@example", "{}", 5, one),
            ];
            assert_eq!(block_on(house.batch(stmts)).unwrap(), [1, 1]);
        }
        block_on(house.settle()).unwrap();
        assert_eq!(ids(&house, "bo").len(), 2);
        assert_eq!(count(house.get(0).unwrap(), "SELECT count(*) AS n FROM shard_handoffs"), 0, "none left waiting");
        // On one database the same race is the batch's to lose: nothing was paid.
        let alone = vec![store::mailbox::insert("bo", "e3", "al@example", "{}", 5, one)];
        let refused = block_on(house.batch(alone)).unwrap_err();
        assert_eq!(refused, PortError::Constraint { name: store::constraint::MAILBOX_QUOTA.into() });
    }

    #[test]
    fn a_notice_is_handed_off_only_while_its_lease_is_held() {
        let house = files(&dir("notice"), 2);
        register(&house, "bo", 1);
        let primary = house.get(0).unwrap();
        block_on(primary.query(stmt!("PRAGMA foreign_keys = OFF"))).unwrap();
        block_on(primary.batch(vec![stmt!(
            "INSERT INTO jobs (made, envelope_id, domain, recipients, state, next_attempt, not_before, deadline, lease_until, created_at)
             VALUES (1, 'e', 'b.test', '[]', 'pending', 0, 0, 0, 5, 0)"
        )]))
        .unwrap();
        let notice = |lease: i64| {
            let held = store::queue::Held { envelope_id: "e", domain: "b.test", lease };
            store::queue::insert_notice(held, "bo", &format!("n{lease}"), "postmaster@a.test", "{}", 1)
        };
        let job = || stmt!("UPDATE jobs SET attempts = attempts + 1 WHERE envelope_id = 'e'");
        assert_eq!(block_on(house.batch(vec![notice(5), job()])).unwrap(), [1, 1], "the lease is held: delivered");
        assert_eq!(block_on(house.batch(vec![notice(4), job()])).unwrap(), [0, 1], "a lease lost: nothing handed off");
        assert_eq!(ids(&house, "bo"), ["{}"]);
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_handoffs WHERE stmt LIKE '%n4%'"), 0);
    }

    #[test]
    fn a_hand_off_cut_short_is_applied_by_the_tick() {
        let d = dir("crash");
        let house = files(&d, 2);
        register(&house, "bo", 1);
        let shard = house.get(1).unwrap();
        // The shard refuses the mailbox's writes (as while it moves): the primary's part commits.
        block_on(shard.batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")])).unwrap();
        assert_eq!(accept(&house, "bo", "b1").unwrap(), 1, "committed on the primary: it will be applied");
        assert_eq!(count(shard, "SELECT count(*) AS n FROM mailbox"), 0);
        assert_eq!(block_on(house.settle()).unwrap(), 0, "still refused: kept");
        block_on(shard.batch(vec![stmt!("DELETE FROM shard_moving WHERE local = 'bo'")])).unwrap();
        assert_eq!(block_on(house.settle()).unwrap(), 0, "not due yet: tried again later");
        advance(60);
        assert_eq!(block_on(house.settle()).unwrap(), 1);
        assert_eq!(ids(&house, "bo").len(), 1);
        assert_eq!(count(house.get(0).unwrap(), "SELECT count(*) AS n FROM shard_handoffs"), 0);
    }

    /// What runs before a batch whose first statement's SQL contains the text.
    type Hooks = Rc<RefCell<Vec<(&'static str, Box<dyn Fn()>)>>>;

    /// A `Db` that runs its hooks before the batches they name.
    struct Hooked {
        db: SqliteDb,
        hooks: Hooks,
    }

    impl Db for Hooked {
        async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.db.query(stmt).await
        }
        async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
            // The first statement of the batch's own (a move step's claim comes before it).
            let first = stmts.iter().map(|s| s.sql).find(|s| !s.contains("shard_claim")).unwrap_or("");
            for (when, hook) in self.hooks.borrow().iter() {
                if first.contains(when) {
                    hook();
                }
            }
            self.db.batch(stmts).await
        }
        async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.db.write_returning(stmt).await
        }
    }

    #[test]
    fn a_move_loses_nothing_before_during_or_after() {
        for (from, to) in [(1, 0), (0, 1)] {
            let d = dir(&format!("move{from}{to}"));
            // The server (a process of its own) and the operator's command, on the same files.
            let server = Rc::new(files(&d, 2));
            register(&server, "bo", from);
            register(&server, "al", from);
            let hooks = Rc::new(RefCell::new(Vec::new()));
            let operator = test_house(
                (0..2)
                    .map(|i| Hooked { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), hooks: hooks.clone() })
                    .collect(),
            )
            .unwrap();
            assert_eq!(accept(&*server, "bo", "before").unwrap(), 1);
            block_on(server.batch(vec![store::mailbox::add_entry("bo", "block", "spam@example", 10)])).unwrap();
            let late = Rc::new(RefCell::new(Vec::new()));
            let (s, l) = (server.clone(), late.clone());
            // While the source takes no writes: a batch of the registry and a mailbox on a shard
            // is handed off; one on a single database is refused (a 503) and sent again after.
            hooks.borrow_mut().push((
                "INSERT INTO mailbox (seq, local, envelope_id",
                Box::new(move || {
                    let mixed = accept(&*s, "bo", "during");
                    let alone =
                        block_on(s.batch(vec![store::mailbox::insert("bo", "alone", "x@example", "{}", 1, QUOTA)]));
                    eprintln!("during: {mixed:?} {alone:?}");
                    l.borrow_mut().push((mixed.is_ok(), alone.is_ok()));
                }),
            ));
            let moved = block_on(operator.move_mailbox("bo", to)).unwrap();
            assert_eq!((moved.from, moved.to, moved.envelopes), (from as usize, to, 1));
            hooks.borrow_mut().clear();
            let outcomes = late.borrow().clone();
            assert_eq!(outcomes.len(), 1, "the hook ran during the move");
            let (mixed, alone) = outcomes[0];
            // A mailbox on a shard: the registry's part commits and the envelope waits in a hand-off.
            assert_eq!(mixed, from != 0, "{outcomes:?}");
            assert!(!alone, "a write to the moving mailbox alone is refused");
            if !mixed {
                assert_eq!(accept(&*server, "bo", "during").unwrap(), 1, "sent again");
            }
            let alone = store::mailbox::insert("bo", "alone", "x@example", "{}", 1, QUOTA);
            assert_eq!(block_on(server.batch(vec![alone])).unwrap(), [1], "sent again");
            assert_eq!(accept(&*server, "bo", "after").unwrap(), 1);
            block_on(server.settle()).unwrap();
            let mut got = ids(&*server, "bo");
            got.sort();
            assert_eq!(got, ["{\"id\":\"after\"}", "{\"id\":\"before\"}", "{\"id\":\"during\"}", "{}"], "each once");
            let (source, target) = (server.get(from as usize).unwrap(), server.get(to).unwrap());
            assert_eq!(
                count(source, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"),
                0,
                "the source forgot them"
            );
            assert_eq!(count(target, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), 4);
            assert_eq!(count(target, "SELECT count(*) AS n FROM lists WHERE local = 'bo'"), 1, "its lists moved too");
            // Rerun: nothing more to do, nothing doubled.
            let again = block_on(operator.move_mailbox("bo", to)).unwrap();
            assert_eq!(again.envelopes, 0);
            assert_eq!(ids(&*server, "bo").len(), 4);
            // The other agent on the source is untouched.
            assert_eq!(accept(&*server, "al", "x").unwrap(), 1);
            assert_eq!(ids(&*server, "al").len(), 1);
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    /// Counts the calls each database takes.
    struct Counted {
        db: SqliteDb,
        calls: Rc<std::cell::Cell<u32>>,
    }

    impl Db for Counted {
        async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.calls.set(self.calls.get() + 1);
            self.db.query(stmt).await
        }
        async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
            self.calls.set(self.calls.get() + 1);
            self.db.batch(stmts).await
        }
        async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.calls.set(self.calls.get() + 1);
            self.db.write_returning(stmt).await
        }
    }

    /// A waiting read's recheck (issue 38 §5) is one query wherever the mailbox is, an empty
    /// one included (an empty answer of a mailbox read makes a sharding port ask the primary
    /// again), so a held read stays within a Worker invocation's queries on a sharded house.
    #[test]
    fn a_recheck_is_one_query_on_a_sharded_house() {
        let calls = Rc::new(std::cell::Cell::new(0));
        let d = dir("recheck");
        let h = test_house(
            (0..2)
                .map(|i| Counted { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), calls: calls.clone() })
                .collect(),
        )
        .unwrap();
        block_on(h.batch(vec![stmt!(
            "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at, shard) VALUES ('al', 'c', 's', 't', 0, 0, 0), ('bo', 'c', 's', 't', 0, 0, 1)"
        )]))
        .unwrap();
        for local in ["al", "bo"] {
            // Warm: the placement cached, as in a running house.
            assert!(!block_on(store::inbox::waiting(&h, local, 0)).unwrap());
            calls.set(0);
            assert!(!block_on(store::inbox::waiting(&h, local, 0)).unwrap(), "{local}: nothing waits");
            assert_eq!(calls.get(), 1, "{local}: one query");
            assert_eq!(accept(&h, local, "e").unwrap(), 1);
            assert!(block_on(store::inbox::waiting(&h, local, 0)).unwrap(), "{local}: mail waits");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    /// What an inbound accept costs in round trips (the facts it reads, then its batch), by
    /// where the mailbox is: unchanged with one database; with shards, one more read (the
    /// registry's and the mailbox's parts) and, for a mailbox off the primary, two more writes
    /// (the hand-off's shard part, then the primary forgets the hand-off: no marker is kept for
    /// good, review36 H1). Measured after the placement is cached.
    #[test]
    fn round_trips_of_an_accept_by_placement() {
        let calls = Rc::new(std::cell::Cell::new(0));
        let house = |n: usize, name: &str| {
            let d = dir(name);
            test_house(
                (0..n)
                    .map(|i| Counted { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), calls: calls.clone() })
                    .collect(),
            )
            .unwrap()
        };
        let facts = |local: &str| store::mailbox::Lookup {
            locals: if local == "al" { "[\"al\"]" } else { "[\"bo\"]" },
            envelope_id: "e",
            blocks: "[]",
            allows: "[]",
            vouchers: "[]",
            bucket_prefix: "in:",
            bucket_suffix: ":example",
            window: 1,
        };
        let mut measured = Vec::new();
        for (n, local) in [(1, "al"), (2, "al"), (2, "bo")] {
            let h = house(n, &format!("trips{n}{local}"));
            block_on(h.batch(vec![stmt!(
                "INSERT INTO agents (local, card, sig, registered_via, created_at, updated_at, shard) VALUES ('al', 'c', 's', 't', 0, 0, 0), ('bo', 'c', 's', 't', 0, 0, ?)",
                (n - 1) as i64
            )]))
            .unwrap();
            // Warm: the placement cached, as in a running house.
            assert_eq!(accept(&h, local, "warm").unwrap(), 1);
            calls.set(0);
            let rows = block_on(store::mailbox::inbound_facts(&h, &facts(local))).unwrap();
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].int("held_envelopes"), Some(1), "what the mailbox holds, read where it is");
            assert_eq!(accept(&h, local, "e").unwrap(), 1);
            measured.push(calls.get());
        }
        eprintln!(
            "round trips of an accept: one database {}, two with the mailbox on the primary {}, on a shard {}",
            measured[0], measured[1], measured[2]
        );
        assert_eq!(measured, [2, 3, 5]);
    }

    // ---- hostile review (review36) ----

    fn lists_of(db: &SqliteDb, local: &str) -> i64 {
        block_on(db.query(stmt!("SELECT count(*) AS n FROM lists WHERE local = ?", local))).unwrap()[0]
            .int("n")
            .unwrap()
    }

    #[test]
    fn review_a_second_reset_leaves_the_lists() {
        let house = files(&dir("r-reset"), 2);
        register(&house, "bo", 1);
        let shard = house.get(1).unwrap();
        let index =
            store::agents::Index { listed: false, search: String::new(), accepts: String::new(), caps: String::new() };
        let reset = |card: &str, replaces: &str| {
            let c =
                store::agents::NewCard { local: "bo", card, sig: "s", index: &index, webhook: None, via: "t", now: 1 };
            block_on(house.batch(store::agents::update(&c, replaces, false, true))).unwrap();
        };
        // A thief's allow entry, wiped by the operator's reset.
        block_on(house.batch(vec![store::mailbox::add_entry("bo", "allow", "thief@example", 10)])).unwrap();
        reset("c1", "card");
        assert_eq!(lists_of(shard, "bo"), 0, "the first reset wipes");
        block_on(house.settle()).unwrap();
        // Months later, another theft, another reset.
        block_on(house.batch(vec![store::mailbox::add_entry("bo", "allow", "thief@example", 10)])).unwrap();
        reset("c2", "c1");
        block_on(house.settle()).unwrap();
        assert_eq!(lists_of(shard, "bo"), 0, "the second reset wipes too");
    }

    #[test]
    fn review_a_mixed_batch_meeting_a_move_off_the_primary_is_not_a_409() {
        let house = files(&dir("r-409"), 2);
        register(&house, "bo", 0);
        register(&house, "carl", 1);
        block_on(house.get(0).unwrap().batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")])).unwrap();
        // One envelope to two recipients: the rate window and bo's copy on the primary, carl's on the shard.
        let stmts = vec![
            store::agents::count_in_window("in:bo:example", 1, 1000),
            store::mailbox::insert("bo", "e1", "al@example", "{}", 5, QUOTA),
            store::mailbox::insert("carl", "e1", "al@example", "{}", 5, QUOTA),
        ];
        let e = block_on(house.batch(stmts)).unwrap_err();
        let answer = crate::port_error(e.clone());
        eprintln!("{e:?} -> {:?} {}", answer.kind, answer.reason);
        assert_ne!(answer.kind, nyx5_proto::ErrorKind::Conflict, "a permanent refusal: the sender bounces it");
    }

    #[test]
    fn review_upkeep_fails_whole_while_a_mailbox_moves_off_the_primary() {
        let house = files(&dir("r-upkeep"), 2);
        register(&house, "bo", 0);
        assert_eq!(accept(&house, "bo", "e1").unwrap(), 1);
        let primary = house.get(0).unwrap();
        block_on(primary.batch(vec![stmt!("UPDATE mailbox SET acked_at = 1, seq = -seq WHERE local = 'bo'")])).unwrap();
        block_on(primary.batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")])).unwrap();
        // The tick's upkeep: every purge of the house in one batch, the body drops among them.
        let mut stmts = vec![stmt!("DELETE FROM nonces WHERE keep_until < 5")];
        stmts.extend(store::inbox::drop_bodies(1000, 10));
        let r = block_on(house.batch(stmts));
        eprintln!("upkeep while bo moves: {r:?}");
        assert!(r.is_ok(), "the house's upkeep (and so its tick) fails for the whole move");
    }

    #[test]
    fn review_bodies_dropped_on_the_target_mid_move_stay_counted() {
        let mut held = Vec::new();
        for during in [false, true] {
            let d = dir(&format!("r-phantom{during}"));
            let server = Rc::new(files(&d, 2));
            register(&server, "bo", 1);
            assert_eq!(accept(&*server, "bo", "e1").unwrap(), 1);
            assert_eq!(accept(&*server, "bo", "e2").unwrap(), 1);
            // bo acknowledges e2 only (e1 still waits): e2 moves below zero, acked at 1.
            let rows = block_on(store::inbox::ack_facts(&*server, "bo", "[\"e2\"]")).unwrap();
            let waiting: Vec<(String, i64, bool)> = rows
                .iter()
                .map(|r| (r.text("id").unwrap().to_owned(), r.int("n").unwrap(), r.int("counted").unwrap() != 0))
                .collect();
            let plan = crate::mailbox::plan_ack(rows[0].int("w").unwrap(), rows[0].int("other"), &waiting);
            block_on(server.batch(store::inbox::ack("bo", "[\"e2\"]", &plan, 1, QUOTA))).unwrap();
            let u = block_on(store::mailbox::usage(&*server, "[\"bo\"]")).unwrap();
            eprintln!("plan {plan:?} before the move: {u:?}");
            let hooks = Rc::new(RefCell::new(Vec::new()));
            let operator = test_house(
                (0..2)
                    .map(|i| Hooked { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), hooks: hooks.clone() })
                    .collect(),
            )
            .unwrap();
            if during {
                let s = server.clone();
                // The server's tick runs its upkeep after the rows are copied, before the usage is.
                hooks.borrow_mut().push((
                    "INSERT INTO mailbox_usage (local, envelopes, bytes",
                    Box::new(move || {
                        let _ = block_on(s.batch(store::inbox::drop_bodies(1000, 10).to_vec()));
                    }),
                ));
            }
            block_on(operator.move_mailbox("bo", 0)).unwrap();
            hooks.borrow_mut().clear();
            let _ = block_on(server.batch(store::inbox::drop_bodies(1000, 10).to_vec()));
            let stale = block_on(store::mailbox::usage(&*server, "[\"bo\"]")).unwrap();
            eprintln!("the server's (stale) read: {stale:?}");
            let u = block_on(store::mailbox::usage(&files(&d, 2), "[\"bo\"]")).unwrap();
            held.push((u[0].int("envelopes").unwrap(), u[0].int("bytes").unwrap()));
        }
        eprintln!("held after the move: without upkeep during it {:?}, with {:?}", held[0], held[1]);
        assert_eq!(held[0], held[1], "a body dropped mid-move stays counted forever");
    }

    #[test]
    fn review_a_handoff_of_a_full_envelope_passes_d1s_row_limit() {
        let body = "\"".repeat(500_000);
        let envelope = Value::Object(nyx5_proto::json::obj([("b", Value::String(body))])).canonical_string();
        assert!(envelope.len() <= nyx5_proto::limits::MAX_ENVELOPE_BYTES);
        let s = store::mailbox::insert("bo", "e1", "al@example", &envelope, 5, QUOTA);
        let text = encode(&handed_off(&s));
        eprintln!("envelope {} bytes, its hand-off row {} bytes", envelope.len(), text.len());
        assert!(text.len() < 2_000_000, "D1: a string or row holds at most 2,000,000 bytes");
    }

    #[test]
    fn review_settle_is_stuck_behind_64_hand_offs_it_cannot_apply() {
        let house = files(&dir("r-hol"), 3);
        register(&house, "bo", 1);
        register(&house, "carl", 2);
        let (s1, s2) = (house.get(1).unwrap(), house.get(2).unwrap());
        // bo's move was interrupted (its source still marked): its hand-offs wait.
        block_on(s1.batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")])).unwrap();
        for i in 0..SETTLE_BATCH {
            assert_eq!(accept(&house, "bo", &format!("b{i}")).unwrap(), 1);
        }
        // carl's shard failed for a moment (a crash between the two parts has the same effect).
        block_on(s2.batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('carl')")])).unwrap();
        assert_eq!(accept(&house, "carl", "c1").unwrap(), 1, "committed on the primary: it will be applied");
        block_on(s2.batch(vec![stmt!("DELETE FROM shard_moving WHERE local = 'carl'")])).unwrap();
        for _ in 0..10 {
            let _ = block_on(house.settle());
        }
        assert_eq!(ids(&house, "carl").len(), 1, "carl's envelope, paid and counted, is ever applied");
    }

    #[test]
    fn review_a_stale_placement_reads_no_block_list() {
        let d = dir("r-stale");
        let server = files(&d, 2);
        register(&server, "bo", 1);
        block_on(server.batch(vec![store::mailbox::add_entry("bo", "block", "al@example", 10)])).unwrap();
        let facts = store::mailbox::Lookup {
            locals: "[\"bo\"]",
            envelope_id: "e",
            blocks: "[\"al@example\"]",
            allows: "[]",
            vouchers: "[]",
            bucket_prefix: "in:",
            bucket_suffix: ":example",
            window: 1,
        };
        let blocked =
            |h: &Shards<SqliteDb>| block_on(store::mailbox::inbound_facts(h, &facts)).unwrap()[0].int("blocked");
        assert_eq!(blocked(&server), Some(1));
        // The operator's `nyx5 shard move`, a process of its own.
        let operator = files(&d, 2);
        block_on(operator.move_mailbox("bo", 0)).unwrap();
        assert_eq!(blocked(&operator), Some(1), "read fresh: blocked");
        assert_eq!(blocked(&server), Some(1), "the running server: blocked too");
    }

    #[test]
    fn review_a_hand_off_applied_before_a_move_is_applied_again_after_it() {
        let d = dir("r-twice");
        let server = Rc::new(files(&d, 3));
        register(&server, "bo", 1);
        let hooks = Rc::new(RefCell::new(Vec::new()));
        let operator = test_house(
            (0..3)
                .map(|i| Hooked { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), hooks: hooks.clone() })
                .collect(),
        )
        .unwrap();
        let s = server.clone();
        // Just before the move marks the source (after its own settle): the operator's reset, then
        // the agent's new block entry, both applied on shard 1.
        hooks.borrow_mut().push((
            "INSERT INTO shard_moving",
            Box::new(move || {
                let index = store::agents::Index {
                    listed: false,
                    search: String::new(),
                    accepts: String::new(),
                    caps: String::new(),
                };
                let c = store::agents::NewCard {
                    local: "bo",
                    card: "c1",
                    sig: "s",
                    index: &index,
                    webhook: None,
                    via: "t",
                    now: 1,
                };
                block_on(s.batch(store::agents::update(&c, "card", false, true))).unwrap();
                block_on(s.batch(vec![store::mailbox::add_entry("bo", "block", "new@example", 10)])).unwrap();
            }),
        ));
        block_on(operator.move_mailbox("bo", 2)).unwrap();
        hooks.borrow_mut().clear();
        assert_eq!(lists_of(server.get(2).unwrap(), "bo"), 1, "the entry moved");
        block_on(server.settle()).unwrap();
        assert_eq!(lists_of(server.get(2).unwrap(), "bo"), 1, "the reset before it is not applied a second time");
    }
    #[test]
    fn a_moving_mailbox_is_a_temporary_mailbox_moving_with_retry_after() {
        let e = crate::port_error(moving());
        assert_eq!((e.kind, e.code(), e.kind.slug()), (nyx5_proto::ErrorKind::MailboxMoving, 503, "mailbox_moving"));
        assert!(e.kind.is_temporary(), "a sending house retries it");
        let r = crate::http::Response::error(&e);
        assert_eq!(r.header("retry-after"), Some("5"));
        // A mixed batch meeting a mailbox moving off the primary: that error, nothing written.
        let house = files(&dir("moving503"), 2);
        register(&house, "bo", 0);
        register(&house, "carl", 1);
        block_on(house.get(0).unwrap().batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")])).unwrap();
        let stmts = vec![
            store::agents::count_in_window("in:bo:example", 1, 1000),
            store::mailbox::insert("bo", "e1", "al@example", "{}", 5, QUOTA),
            store::mailbox::insert("carl", "e1", "al@example", "{}", 5, QUOTA),
        ];
        assert_eq!(block_on(house.batch(stmts)).unwrap_err(), moving());
        assert_eq!(count(house.get(0).unwrap(), "SELECT count(*) AS n FROM rate_windows"), 0);
        assert_eq!(count(house.get(0).unwrap(), "SELECT count(*) AS n FROM shard_handoffs"), 0);
    }

    #[test]
    fn a_hand_off_passes_the_quota_by_a_bounded_slack_only() {
        let house = files(&dir("slack"), 2);
        register(&house, "bo", 1);
        let one = store::mailbox::Quota { max_envelopes: 1, max_bytes: 1 << 20 };
        // Every accept decided on a mailbox with room (racing): the first 1 + slack are applied.
        let n = HANDOFF_SLACK + 5;
        for i in 0..n {
            let stmts = vec![
                store::agents::count_in_window("in:bo:example", 1, 1000),
                store::mailbox::insert("bo", &format!("e{i}"), "al@example", "{}", 5, one),
            ];
            block_on(house.batch(stmts)).unwrap();
        }
        let held = ids(&house, "bo").len() as i64;
        eprintln!("{n} racing accepts to a mailbox of 1: {held} held");
        assert_eq!(held, 1 + HANDOFF_SLACK, "the quota plus the slack, no more");
        // The rest were accepted: they wait for room, however long, and are never given up.
        for _ in 0..SETTLE_ATTEMPTS + 3 {
            advance(ROOM_WAIT_S + 1);
            block_on(house.settle()).unwrap();
        }
        let primary = house.get(0).unwrap();
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_dead"), 0, "accepted mail given up");
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_handoffs"), n - 1 - HANDOFF_SLACK, "waiting");
        assert_eq!(ROOM, store::constraint::MAILBOX_QUOTA);
    }

    #[test]
    fn remembered_placements_are_bounded_and_expire() {
        let house = files(&dir("cache"), 2);
        register(&house, "bo", 1);
        assert_eq!(block_on(house.home("bo")).unwrap().map(|h| h.shard), Some(1));
        assert!(house.cached("bo").is_some());
        // Another process moves it: this one sees it once the placement expires.
        block_on(house.get(0).unwrap().batch(vec![stmt!("UPDATE agents SET shard = 0 WHERE local = 'bo'")])).unwrap();
        assert_eq!(house.cached("bo").map(|h| h.shard), Some(1));
        advance(HOMES_TTL_MS / 1000 + 1);
        assert!(house.cached("bo").is_none(), "expired");
        assert_eq!(block_on(house.home("bo")).unwrap().map(|h| h.shard), Some(0));
        for i in 0..HOMES_MAX + 100 {
            house.remember(&format!("a{i}"), Home { shard: 1, mbox: 1 });
        }
        let held = house.homes.lock().unwrap().len();
        assert!(held <= HOMES_MAX, "{held} remembered");
    }

    #[test]
    fn one_move_of_a_mailbox_at_a_time_and_the_flip_is_guarded() {
        let d = dir("movelock");
        let house = files(&d, 3);
        register(&house, "bo", 1);
        assert_eq!(accept(&house, "bo", "e1").unwrap(), 1);
        let primary = house.get(0).unwrap();
        // A move to shard 2 under way (interrupted): a move to 0 is refused, nothing touched.
        block_on(primary.batch(vec![stmt!("INSERT INTO shard_moves (local, to_shard, since) VALUES ('bo', 2, 0)")]))
            .unwrap();
        let refused = block_on(house.move_mailbox("bo", 0)).unwrap_err();
        assert_eq!(refused, PortError::Constraint { name: MOVE_UNDER_WAY.into() });
        assert_eq!(crate::port_error(refused).code(), 409);
        assert_eq!(count(house.get(1).unwrap(), "SELECT count(*) AS n FROM shard_moving"), 0, "the source untouched");
        // The same move, run again, takes it up and ends it.
        assert_eq!(block_on(house.move_mailbox("bo", 2)).unwrap().envelopes, 1);
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_moves"), 0);
        assert_eq!(ids(&house, "bo").len(), 1);
        // The flip only from the source the move copied from: a raced flip is an error.
        let hooks = Rc::new(RefCell::new(Vec::new()));
        let operator = test_house(
            (0..3)
                .map(|i| Hooked { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), hooks: hooks.clone() })
                .collect(),
        )
        .unwrap();
        let p = SqliteDb::open(&d.join("0.db")).unwrap();
        hooks.borrow_mut().push((
            "UPDATE agents SET shard",
            Box::new(move || {
                block_on(p.batch(vec![stmt!("UPDATE agents SET shard = 1 WHERE local = 'bo'")])).unwrap();
            }),
        ));
        let raced = block_on(operator.move_mailbox("bo", 0)).unwrap_err();
        assert_eq!(raced, PortError::Constraint { name: MOVE_UNDER_WAY.into() });
        assert_eq!(
            block_on(primary.query(stmt!("SELECT shard FROM agents WHERE local = 'bo'"))).unwrap()[0].int("shard"),
            Some(1),
            "not overwritten"
        );
    }

    #[test]
    fn a_hand_off_that_never_applies_is_given_up_and_kept() {
        let house = files(&dir("dead"), 2);
        register(&house, "bo", 1);
        let primary = house.get(0).unwrap();
        block_on(primary.batch(vec![stmt!(
            "INSERT INTO shard_handoffs (key, local, stmt) VALUES ('k1', 'bo', 'not a statement'),
                                                              ('k2', 'bo', '{\"sql\":\"INSERT INTO nowhere VALUES (1)\",\"params\":[]}')"
        )]))
        .unwrap();
        let mut errors = 0;
        for _ in 0..SETTLE_ATTEMPTS + 1 {
            if block_on(house.settle()).is_err() {
                errors += 1;
            }
            advance(3600);
        }
        assert!(errors >= 1, "given up: reported for the log");
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_handoffs"), 0);
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_dead"), 2, "kept for the operator");
    }

    #[test]
    fn markers_are_forgotten_once_the_primary_forgot_the_hand_off() {
        let house = files(&dir("sweep"), 2);
        register(&house, "bo", 1);
        for i in 0..5 {
            assert_eq!(accept(&house, "bo", &format!("e{i}")).unwrap(), 1);
        }
        let shard = house.get(1).unwrap();
        assert_eq!(count(shard, "SELECT count(*) AS n FROM shard_applied"), 5);
        // One hand-off still held by the primary (a crash before it forgot it): its marker stays.
        block_on(shard.batch(vec![stmt!("INSERT INTO shard_applied (key, local, at) VALUES ('held', 'bo', 0)")]))
            .unwrap();
        block_on(house.get(0).unwrap().batch(vec![stmt!(
            "INSERT INTO shard_handoffs (key, local, stmt, next_try) VALUES ('held', 'bo', '{}', 9999999999)"
        )]))
        .unwrap();
        // Fresh markers are kept whatever the primary holds: a settle may be in flight with one.
        block_on(house.settle()).unwrap();
        assert_eq!(count(shard, "SELECT count(*) AS n FROM shard_applied"), 6, "within their grace");
        block_on(shard.batch(vec![stmt!("UPDATE shard_applied SET at = at - ?", APPLIED_GRACE_S + 1)])).unwrap();
        block_on(house.settle()).unwrap();
        assert_eq!(count(shard, "SELECT count(*) AS n FROM shard_applied"), 1);
    }

    /// A busy shard's markers do not outgrow the sweep: it takes round after round (the second
    /// hostile review left 44 of 300 after one upkeep).
    #[test]
    fn markers_past_their_grace_are_all_forgotten_in_one_upkeep() {
        let house = files(&dir("sweep-many"), 2);
        register(&house, "bo", 1);
        for i in 0..300 {
            assert_eq!(accept(&house, "bo", &format!("e{i}")).unwrap(), 1);
        }
        let shard = house.get(1).unwrap();
        block_on(shard.batch(vec![stmt!("UPDATE shard_applied SET at = at - ?", APPLIED_GRACE_S + 1)])).unwrap();
        block_on(house.settle()).unwrap();
        assert_eq!(count(shard, "SELECT count(*) AS n FROM shard_applied"), 0);
    }

    /// Another process's house over the files in `d` (`n` databases) whose first batch starting
    /// with `at` fails, once (while armed).
    fn failing_at(d: &Path, n: usize, at: &'static str) -> (Rc<std::cell::Cell<bool>>, Shards<FailAt>) {
        let armed = Rc::new(std::cell::Cell::new(true));
        let house = test_house(
            (0..n)
                .map(|i| FailAt { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), at, armed: armed.clone() })
                .collect(),
        )
        .unwrap();
        (armed, house)
    }

    /// A `Db` that fails, once, the batch whose first statement's SQL starts with `at`.
    struct FailAt {
        db: SqliteDb,
        at: &'static str,
        armed: Rc<std::cell::Cell<bool>>,
    }
    impl Db for FailAt {
        async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.db.query(stmt).await
        }
        async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
            // The batch's own first statement (a move step's claim comes before it).
            let first = stmts.iter().find(|s| !s.sql.contains("shard_claim"));
            if self.armed.get() && first.is_some_and(|s| s.sql.trim_start().starts_with(self.at)) {
                self.armed.set(false);
                return Err(PortError::Failed("crash".into()));
            }
            self.db.batch(stmts).await
        }
        async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.db.write_returning(stmt).await
        }
    }

    #[test]
    fn a_rerun_after_the_flip_forgets_the_stale_source_and_copies_nothing() {
        let d = dir("r2-rerun");
        let server = files(&d, 2);
        register(&server, "bo", 1);
        assert_eq!(accept(&server, "bo", "e1").unwrap(), 1);
        block_on(server.batch(vec![store::mailbox::add_entry("bo", "allow", "thief@example", 10)])).unwrap();
        // Its usage on the source, as an earlier acknowledgment left it.
        block_on(server.get(1).unwrap().batch(vec![stmt!(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, acked_through) VALUES ('bo', 0, 0, 10, 100, 0)"
        )]))
        .unwrap();
        let (_armed, operator) = failing_at(&d, 2, "UPDATE shard_moving SET copied = 1");
        // The move flips, then dies before the source forgets its rows (a killed process, a
        // Worker request past its limits).
        assert!(block_on(operator.move_mailbox("bo", 0)).is_err());
        let primary = server.get(0).unwrap();
        assert_eq!(
            block_on(primary.query(stmt!("SELECT shard FROM agents WHERE local = 'bo'"))).unwrap()[0].int("shard"),
            Some(0)
        );
        // The mailbox lives on the primary now: its owner's reset wipes the thief's entry, and an
        // acknowledgment is counted in its usage.
        server.forget("bo");
        block_on(server.batch(vec![store::mailbox::remove_entry("bo", "allow", "thief@example")])).unwrap();
        block_on(primary.batch(vec![stmt!(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, acked_through) VALUES ('bo', 1, 7, 10, 100, 99)
             ON CONFLICT (local) DO UPDATE SET envelopes = 1, bytes = 7, acked_through = 99"
        )]))
        .unwrap();
        assert_eq!(lists_of(primary, "bo"), 0);
        // The operator reruns the move, as told.
        block_on(operator.move_mailbox("bo", 0)).unwrap();
        let usage =
            block_on(primary.query(stmt!("SELECT envelopes, acked_through FROM mailbox_usage WHERE local = 'bo'")))
                .unwrap();
        eprintln!("after the rerun: lists {} usage {:?}", lists_of(primary, "bo"), usage);
        assert_eq!(lists_of(primary, "bo"), 0, "the thief's entry came back from the stale source");
        assert_eq!(usage[0].int("acked_through"), Some(99), "usage rewound to the stale source's");
    }

    /// An accept of `id` to `local` under a quota that holds thousands (the moves' tests fill
    /// mailboxes past a step).
    fn accept_many<D: Db>(house: &D, local: &str, id: &str) -> Result<u64, PortError> {
        let room = store::mailbox::Quota { max_envelopes: 100_000, max_bytes: 1 << 30 };
        let stmts = vec![
            store::agents::count_in_window(&format!("in:{local}:{id}"), 10, 1000),
            store::mailbox::insert(local, id, "al@example", &format!("{{\"id\":\"{id}\"}}"), 5, room),
        ];
        Ok(block_on(house.batch(stmts))?.get(1).copied().unwrap_or(0))
    }

    /// Every envelope of `local`'s mailbox, read through the house (a page of up to 10,000).
    fn all_ids<D: Db>(house: &D, local: &str) -> Vec<String> {
        let bounds = store::inbox::PageBounds { after: 0, limit: 10_000, bytes: 1 << 30, overhead: 0, unrecorded: 0 };
        let mut got: Vec<String> = block_on(house.query(store::inbox::page_query(local, bounds)))
            .unwrap()
            .iter()
            .map(|r| r.text("envelope").unwrap().to_owned())
            .collect();
        got.sort();
        got
    }

    /// Issue 36 §3, a move in steps: a mailbox larger than one step's work is moved by the
    /// operator's request (one step, 202) and then by the ticks (`advance_moves`, the queue's
    /// upkeep), one bounded step each, while mail keeps arriving: handed off (a mailbox on a
    /// shard) or refused as moving and sent again after. Every envelope is readable after, once.
    #[test]
    fn a_mailbox_larger_than_a_step_moves_over_ticks_with_mail_arriving() {
        const N: usize = 300;
        let step_rows = MOVE_CHUNK as u64 * MOVE_STEP_CHUNKS as u64;
        for (from, to) in [(1usize, 0usize), (0, 1)] {
            let d = dir(&format!("steps{from}{to}"));
            let house = files(&d, 2);
            register(&house, "bo", from as i64);
            let mut want: Vec<String> = Vec::new();
            for i in 0..N {
                let id = format!("e{i:04}");
                assert_eq!(accept_many(&house, "bo", &id).unwrap(), 1);
                want.push(format!("{{\"id\":\"{id}\"}}"));
            }
            // The operator's request: one step, bounded.
            let first = block_on(Db::move_step(&house, "bo", to)).unwrap();
            eprintln!("{from}->{to}: the request's step {first:?}");
            assert_eq!((first.from, first.to, first.done, first.copied), (from, to, false, step_rows));
            // The ticks, with mail arriving before each.
            let mut ticks = 0;
            let mut refused = Vec::new();
            let mut handed_off = 0;
            loop {
                let id = format!("during{ticks:02}");
                match accept_many(&house, "bo", &id) {
                    Ok(_) => handed_off += 1,
                    Err(e) => {
                        assert!(is_moving(&e), "a write to the moving mailbox is a temporary refusal: {e:?}");
                        refused.push(id.clone());
                    }
                }
                want.push(format!("{{\"id\":\"{id}\"}}"));
                ticks += 1;
                assert!(block_on(house.advance_moves()).unwrap(), "a move was under way");
                if count(house.get(0).unwrap(), "SELECT count(*) AS n FROM shard_moves") == 0 {
                    break;
                }
                assert!(ticks < 50, "the move ends");
            }
            eprintln!(
                "{from}->{to}: {N} envelopes moved by 1 request and {ticks} ticks ({handed_off} handed off, {} refused meanwhile)",
                refused.len()
            );
            assert!(ticks >= 2, "more than one tick's step: {ticks}");
            assert_eq!(handed_off > 0, from != 0, "a mailbox on a shard takes mixed batches as hand-offs");
            // Sent again, as the 503 asked.
            for id in &refused {
                assert_eq!(accept_many(&house, "bo", id).unwrap(), 1);
            }
            block_on(house.settle()).unwrap();
            want.sort();
            assert_eq!(all_ids(&house, "bo"), want, "every envelope readable, once");
            let (source, target) = (house.get(from).unwrap(), house.get(to).unwrap());
            assert_eq!(count(source, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), 0, "the source forgot");
            assert_eq!(count(target, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), want.len() as i64);
            assert_eq!(count(house.get(0).unwrap(), "SELECT count(*) AS n FROM shard_moves"), 0, "the move ended");
            assert!(!block_on(house.advance_moves()).unwrap(), "nothing under way");
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    /// Counts the envelope rows a move reads off the source, and fails the target's inserts of
    /// envelope rows after `inserts` of them (an interrupted step: a killed process, a Worker
    /// request past its limits).
    struct Probe {
        db: SqliteDb,
        read: Rc<std::cell::Cell<u64>>,
        inserts: Rc<std::cell::Cell<i64>>,
    }

    impl Db for Probe {
        async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            let copying = stmt.sql.contains("FROM mailbox WHERE local = ? AND envelope_id > ?");
            let rows = self.db.query(stmt).await?;
            if copying {
                self.read.set(self.read.get() + rows.len() as u64);
            }
            Ok(rows)
        }
        async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
            if stmts.iter().any(|s| s.sql.contains("INSERT INTO mailbox (seq, local, envelope_id")) {
                if self.inserts.get() <= 0 {
                    return Err(PortError::Failed("cut short".into()));
                }
                self.inserts.set(self.inserts.get() - 1);
            }
            self.db.batch(stmts).await
        }
        async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.db.write_returning(stmt).await
        }
    }

    /// A move cut short in its second step resumes from the cursor its first step left: the
    /// rows read again are those after it, not the mailbox from its first row. A step that
    /// crashed (its lease left held) is taken up once the lease runs out.
    #[test]
    fn an_interrupted_move_resumes_from_its_cursor() {
        const N: u64 = 300;
        let d = dir("cursor");
        let server = files(&d, 2);
        register(&server, "bo", 1);
        for i in 0..N {
            assert_eq!(accept_many(&server, "bo", &format!("e{i:04}")).unwrap(), 1);
        }
        let read = Rc::new(std::cell::Cell::new(0));
        let inserts = Rc::new(std::cell::Cell::new(MOVE_STEP_CHUNKS as i64 + 1));
        let operator = test_house(
            (0..2)
                .map(|i| Probe {
                    db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(),
                    read: read.clone(),
                    inserts: inserts.clone(),
                })
                .collect(),
        )
        .unwrap();
        // The first step copies its chunks; the second is cut short after one.
        assert!(block_on(operator.move_mailbox("bo", 0)).is_err());
        let step_rows = MOVE_CHUNK as u64 * MOVE_STEP_CHUNKS as u64;
        let primary = server.get(0).unwrap();
        let cursor =
            block_on(primary.query(stmt!("SELECT cursor, copied FROM shard_moves WHERE local = 'bo'"))).unwrap();
        assert_eq!(cursor[0].int("copied"), Some(step_rows as i64), "the first step's rows counted");
        assert_eq!(cursor[0].text("cursor"), Some(format!("e{:04}", step_rows - 1).as_str()));
        let before = read.get();
        // As a crash would leave it: the step's lease held. Taken up once it runs out.
        block_on(primary.batch(vec![stmt!(
            "UPDATE shard_moves SET lease = ? WHERE local = 'bo'",
            NOW.with(std::cell::Cell::get) + MOVE_LEASE_MS
        )]))
        .unwrap();
        inserts.set(i64::MAX);
        let held = block_on(operator.move_mailbox("bo", 0)).unwrap_err();
        assert_eq!(held, PortError::Constraint { name: MOVE_STEP_HELD.into() });
        assert_eq!(crate::port_error(held).code(), 503, "temporary");
        advance(MOVE_LEASE_MS / 1000 + 1);
        let moved = block_on(operator.move_mailbox("bo", 0)).unwrap();
        let again = read.get() - before;
        eprintln!("{N} rows: {before} read before the interruption, {again} after it (not {N} again)");
        assert_eq!(again, N - step_rows, "resumed from the cursor, not from the first row");
        assert_eq!((moved.from, moved.to, moved.envelopes), (1, 0, N), "each row counted once");
        assert_eq!(all_ids(&server, "bo").len(), N as usize);
        assert_eq!(bo_rows(&server, 1), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A step's work is bounded whatever the mailbox's size: its round trips to all databases
    /// (D1 counts queries per invocation: 50 on the Free plan) are the same for 300 envelopes as
    /// for 3,000.
    #[test]
    fn a_step_of_a_move_takes_a_bounded_number_of_round_trips() {
        for n in [300usize, 3000] {
            let d = dir(&format!("steptrips{n}"));
            let server = files(&d, 2);
            register(&server, "bo", 1);
            for i in 0..n {
                assert_eq!(accept_many(&server, "bo", &format!("e{i:05}")).unwrap(), 1);
            }
            let calls = Rc::new(std::cell::Cell::new(0));
            let operator = test_house(
                (0..2)
                    .map(|i| Counted { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), calls: calls.clone() })
                    .collect(),
            )
            .unwrap();
            let first = block_on(operator.move_step("bo", 0, MOVE_STEP_CHUNKS)).unwrap();
            let at_first = calls.replace(0);
            let second = block_on(operator.move_step("bo", 0, MOVE_STEP_CHUNKS)).unwrap();
            let at_second = calls.get();
            eprintln!("{n} envelopes: the first step {at_first} round trips, the next {at_second} ({second:?})");
            assert!(!first.done && !second.done);
            assert_eq!(second.copied, 2 * MOVE_CHUNK as u64 * MOVE_STEP_CHUNKS as u64);
            assert_eq!(at_second, 10, "the lease (with the placement), 4 reads and 4 batches, the cursor");
            assert!(at_first <= 16, "the first step adds the freeze and the target's setup: {at_first}");
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    type OnceHook = Rc<RefCell<Option<Box<dyn FnOnce()>>>>;

    /// A database that runs `hook` (once) just before the first statement whose SQL holds `at`:
    /// another step, or the live mailbox, acting while this step waits on that round trip.
    struct Hook {
        db: SqliteDb,
        at: &'static str,
        hook: OnceHook,
    }

    impl Hook {
        fn fire(&self, sql: &str) {
            if sql.contains(self.at) {
                let hook = self.hook.borrow_mut().take();
                if let Some(hook) = hook {
                    hook();
                }
            }
        }
    }

    impl Db for Hook {
        async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.fire(stmt.sql);
            self.db.query(stmt).await
        }
        async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
            for s in &stmts {
                self.fire(s.sql);
            }
            self.db.batch(stmts).await
        }
        async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
            self.fire(stmt.sql);
            self.db.write_returning(stmt).await
        }
    }

    /// `bo` on shard 1 of 3 with `n` envelopes, an allow-list entry and its usage (acked
    /// through 0), to be moved to shard 2.
    fn moving_bo(name: &str, n: usize) -> (PathBuf, Shards<SqliteDb>) {
        let d = dir(name);
        let server = files(&d, 3);
        register(&server, "bo", 1);
        for i in 0..n {
            assert_eq!(accept_many(&server, "bo", &format!("e{i:04}")).unwrap(), 1);
        }
        block_on(server.batch(vec![store::mailbox::add_entry("bo", "allow", "thief@example", 10)])).unwrap();
        block_on(server.get(1).unwrap().batch(vec![stmt!(
            "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, acked_through)
             VALUES ('bo', 0, 0, 100000, 1073741824, 0) ON CONFLICT (local) DO UPDATE SET acked_through = 0"
        )]))
        .unwrap();
        (d, server)
    }

    /// The live mailbox on shard 2 (moved there) deletes the thief's entry and acknowledges
    /// through 99.
    fn live_target_moves_on(server: &Shards<SqliteDb>) {
        assert_eq!(count(server.get(0).unwrap(), "SELECT shard AS n FROM agents WHERE local = 'bo'"), 2, "flipped");
        server.forget("bo");
        block_on(server.batch(vec![store::mailbox::remove_entry("bo", "allow", "thief@example")])).unwrap();
        block_on(
            server.get(2).unwrap().batch(vec![stmt!("UPDATE mailbox_usage SET acked_through = 99 WHERE local = 'bo'")]),
        )
        .unwrap();
        assert_eq!(lists_of(server.get(2).unwrap(), "bo"), 0);
    }

    /// Another process's steps take the move of `bo` up to its flip, and stop before the source
    /// forgets its rows (out of budget, or past a Worker's limits), letting the move go.
    fn flip_and_stop(d: &Path) {
        let (armed, other) = failing_at(d, 3, "UPDATE shard_moving SET copied = 1");
        assert!(block_on(other.move_mailbox("bo", 2)).is_err());
        assert!(!armed.get(), "stopped before forgetting");
    }

    fn target_kept_its_own(server: &Shards<SqliteDb>) {
        let target = server.get(2).unwrap();
        let acked = count(target, "SELECT acked_through AS n FROM mailbox_usage WHERE local = 'bo'");
        eprintln!("on the live target after the late step: lists {} acked through {acked}", lists_of(target, "bo"));
        assert_eq!(lists_of(target, "bo"), 0, "the deleted entry came back from the source");
        assert_eq!(acked, 99, "the usage rewound to the source's");
    }

    /// Hostile review (move in steps, HIGH 1): a step that read the mailbox's home before
    /// another step flipped it wins the lease that step released, and must not copy the
    /// source's lists and usage over the live target.
    #[test]
    fn review_a_step_with_a_home_from_before_the_flip_copies_nothing_onto_the_live_target() {
        let (d, server) = moving_bo("h1-stale-home", 40);
        let other = files(&d, 3);
        // Step 1 of 1 chunk: 32 of 40 rows.
        let first = block_on(other.move_step("bo", 2, 1)).unwrap();
        assert!(!first.done && first.copied == 32);
        let hook: OnceHook = Rc::new(RefCell::new(None));
        let late = test_house(
            (0..3)
                .map(|i| Hook {
                    db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(),
                    at: "INSERT INTO shard_moves",
                    hook: hook.clone(),
                })
                .collect(),
        )
        .unwrap();
        // Between this step's placement read and its lease: another step copies the rest, flips,
        // runs out of budget while forgetting and lets the move go; the live mailbox moves on.
        let d2 = d.clone();
        *hook.borrow_mut() = Some(Box::new(move || {
            flip_and_stop(&d2);
            live_target_moves_on(&files(&d2, 3));
        }));
        let late = block_on(late.move_step("bo", 2, 1));
        assert!(hook.borrow().is_none(), "the other step ran");
        target_kept_its_own(&server);
        // It saw the flip with its lease, and went on forgetting the source.
        let late = late.unwrap();
        assert!(late.worked, "{late:?}");
        // The move still ends, losing nothing.
        block_on(server.move_mailbox("bo", 2)).unwrap();
        target_kept_its_own(&server);
        assert_eq!(bo_rows(&server, 2), 40);
        assert_eq!(bo_rows(&server, 1), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Hostile review (move in steps, HIGH 1): a step that stalls past its lease before the rest
    /// of the copy, while another takes the move over and flips it, writes nothing onto the live
    /// target when it wakes, and does not flip.
    #[test]
    fn review_a_step_that_lost_its_lease_writes_nothing_onto_the_live_target() {
        let (d, server) = moving_bo("h1-stalled", 10);
        let hook: OnceHook = Rc::new(RefCell::new(None));
        let stalled = test_house(
            (0..3)
                .map(|i| Hook {
                    db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(),
                    at: "FROM mailbox_usage WHERE local = ?",
                    hook: hook.clone(),
                })
                .collect(),
        )
        .unwrap();
        let d2 = d.clone();
        *hook.borrow_mut() = Some(Box::new(move || {
            advance(MOVE_LEASE_MS / 1000 + 1);
            flip_and_stop(&d2);
            live_target_moves_on(&files(&d2, 3));
        }));
        let stale = block_on(stalled.move_step("bo", 2, MOVE_STEP_CHUNKS));
        assert!(hook.borrow().is_none(), "the other step ran");
        target_kept_its_own(&server);
        let stale = stale.unwrap();
        assert!(!stale.worked && !stale.done, "lost its lease: under way elsewhere (a 202), not a 409: {stale:?}");
        block_on(server.move_mailbox("bo", 2)).unwrap();
        target_kept_its_own(&server);
        assert_eq!(bo_rows(&server, 2), 10);
        assert_eq!(bo_rows(&server, 1), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Hostile review (move in steps, HIGH 2): a mailbox with full lists (2 × 1,000 entries),
    /// hundreds of watermark raises and markers, and over a thousand hand-offs waiting on the
    /// primary moves over many steps, each within a bounded number of round trips (D1 counts
    /// queries per invocation: 50 on the Free plan), losing nothing.
    #[test]
    fn review_a_mailbox_with_full_lists_moves_in_bounded_steps_losing_nothing() {
        let d = dir("h2-full");
        let server = files(&d, 2);
        register(&server, "bo", 1);
        for i in 0..100 {
            assert_eq!(accept_many(&server, "bo", &format!("e{i:04}")).unwrap(), 1);
        }
        let source = server.get(1).unwrap();
        block_on(source.batch(vec![
            stmt!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
                 INSERT INTO lists (local, kind, entry) SELECT 'bo', k.kind, 'x' || i || '@example'
                   FROM n CROSS JOIN (SELECT 'allow' AS kind UNION ALL SELECT 'block') AS k"
            ),
            stmt!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
                 INSERT INTO mailbox_acks (at, local, lo, through) SELECT i % 7, 'bo', i, i FROM n"
            ),
            stmt!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
                 INSERT INTO shard_applied (key, local, at) SELECT 'm' || i, 'bo', i FROM n"
            ),
            stmt!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 600)
                 INSERT INTO shard_applied (key, local, at) SELECT 'h' || i, 'bo', i FROM n"
            ),
            stmt!(
                "INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes, acked_through)
                 VALUES ('bo', 100, 4242, 100000, 1073741824, 7) ON CONFLICT (local) DO UPDATE SET acked_through = 7"
            ),
        ]))
        .unwrap();
        // 1,200 hand-offs of `bo` on the primary, half of them applied on the source already.
        block_on(server.get(0).unwrap().batch(vec![stmt!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1200)
             INSERT INTO shard_handoffs (key, local, stmt, next_try) SELECT 'h' || i, 'bo', '', 1 << 40 FROM n"
        )]))
        .unwrap();
        let usage = |db: &SqliteDb| {
            let r = block_on(db.query(stmt!(
                "SELECT envelopes, bytes, max_envelopes, max_bytes, acked_through FROM mailbox_usage WHERE local = 'bo'"
            )))
            .unwrap();
            format!("{r:?}")
        };
        let before = usage(source);
        let markers = count(source, "SELECT count(*) AS n FROM shard_applied WHERE local = 'bo'");
        assert!(markers >= 750);
        let calls = Rc::new(std::cell::Cell::new(0));
        let operator = test_house(
            (0..2)
                .map(|i| Counted { db: SqliteDb::open(&d.join(format!("{i}.db"))).unwrap(), calls: calls.clone() })
                .collect(),
        )
        .unwrap();
        let mut trips = Vec::new();
        loop {
            let step = block_on(operator.move_step("bo", 0, MOVE_STEP_CHUNKS)).unwrap();
            trips.push(calls.replace(0));
            assert!(step.worked);
            if step.done {
                break;
            }
            assert!(trips.len() < 500, "the move ends");
        }
        eprintln!("{} steps, round trips each: {trips:?}", trips.len());
        let most = trips.iter().copied().max().unwrap();
        assert!(most <= 16, "a step took {most} round trips");
        let target = server.get(0).unwrap();
        let n = |db: &SqliteDb, sql: &'static str| count(db, sql);
        assert_eq!(n(target, "SELECT count(*) AS n FROM lists WHERE local = 'bo'"), 2000);
        assert_eq!(n(target, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), 100);
        assert_eq!(n(target, "SELECT count(*) AS n FROM mailbox_acks WHERE local = 'bo'"), 200);
        assert_eq!(n(target, "SELECT count(*) AS n FROM shard_applied WHERE local = 'bo'"), markers);
        assert_eq!(usage(target), before, "the usage equal");
        assert_eq!(n(target, "SELECT count(*) AS n FROM shard_handoffs WHERE local = 'bo'"), 600, "applied forgotten");
        assert_eq!(n(source, "SELECT count(*) AS n FROM lists WHERE local = 'bo'"), 0);
        assert_eq!(n(source, "SELECT count(*) AS n FROM mailbox WHERE local = 'bo'"), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Hostile review (move in steps, MEDIUM): a move that fails every step (here: its agent is
    /// gone) does not hold up the moves behind it, and a hand-off of a moving mailbox is not
    /// taken up (and refused) by every settle while the move lasts.
    #[test]
    fn review_a_failing_move_holds_no_other_up_and_its_hand_offs_wait() {
        let d = dir("m-fair");
        let house = files(&d, 3);
        register(&house, "bo", 1);
        for i in 0..10 {
            assert_eq!(accept_many(&house, "bo", &format!("e{i:04}")).unwrap(), 1);
        }
        let primary = house.get(0).unwrap();
        block_on(primary.batch(vec![stmt!("INSERT INTO shard_moves (local, to_shard, since) VALUES ('ghost', 2, 0)")]))
            .unwrap();
        assert!(!block_on(house.move_step("bo", 2, 1)).unwrap().done);
        // A hand-off of bo waiting (as one refused as moving leaves it).
        block_on(primary.batch(vec![stmt!(
            "INSERT INTO shard_handoffs (key, local, stmt, attempts, next_try) VALUES ('k1', 'bo', '', 0, 0)"
        )]))
        .unwrap();
        for _ in 0..2 {
            let _ = block_on(house.settle());
        }
        let handoff =
            block_on(primary.query(stmt!("SELECT attempts, next_try FROM shard_handoffs WHERE key = 'k1'"))).unwrap();
        assert_eq!(
            format!("{handoff:?}"),
            format!("{:?}", vec![Row::from_pairs([("attempts", SqlValue::Int(0)), ("next_try", SqlValue::Int(0))])]),
            "not taken up"
        );
        for _ in 0..6 {
            let _ = block_on(house.advance_moves());
            advance(1);
        }
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_moves WHERE local = 'bo'"), 0, "bo's move ended");
        assert_eq!(bo_rows(&house, 2), 10);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Review 36f, HIGH: a move that was past its flip when migration 0028 ran (no database
    /// had a claim: its target never gets one, as the end claims nothing) ends leaving its
    /// target's `shard_incoming` (sealed) on the live mailbox for good; a later move back into
    /// that database keeps the sealed row (`ON CONFLICT DO NOTHING`), copies nothing onto it,
    /// flips, and forgets the source: every envelope is lost.
    #[test]
    fn review36f_a_move_past_its_flip_at_the_migration_ends_and_the_next_move_back_loses_nothing() {
        let d = dir("r36f-migrated");
        let server = files(&d, 2);
        register(&server, "bo", 0);
        for id in ["e1", "e2", "e3"] {
            assert_eq!(accept(&server, "bo", id).unwrap(), 1);
        }
        // Old code took the move 0 -> 1 past its flip and stopped before forgetting the source
        // (a crash, or a big mailbox forgotten over ticks) ...
        let (armed, operator) = failing_at(&d, 2, "UPDATE shard_moving SET copied = 1");
        assert!(block_on(operator.move_mailbox("bo", 1)).is_err());
        assert!(!armed.get(), "stopped after the flip, before forgetting");
        // ... then migration 0028 ran: the move under way is generation 1, no database has a claim.
        for i in 0..2 {
            block_on(server.get(i).unwrap().batch(vec![stmt!("DELETE FROM shard_fence")])).unwrap();
        }
        block_on(
            server
                .get(0)
                .unwrap()
                .batch(vec![stmt!("UPDATE shard_moves SET gen = 1"), stmt!("UPDATE shard_move_count SET n = 1")]),
        )
        .unwrap();
        // The new code ends it.
        assert!(block_on(server.move_mailbox("bo", 1)).unwrap().to == 1);
        let one = server.get(1).unwrap();
        assert!(!has(one, "shard_incoming", "bo"), "shard_incoming left on the live mailbox");
        // Later: a move back to 0, and again to 1.
        block_on(server.move_mailbox("bo", 0)).unwrap();
        block_on(server.move_mailbox("bo", 1)).unwrap();
        server.forget("bo");
        assert_eq!(ids(&server, "bo").len(), 3, "the mailbox lost its envelopes on the move back into 1");
    }

    /// The same, narrowed to the end: a move whose target holds no claim of its generation
    /// ends (its row on the primary deleted) without deleting the target's `shard_incoming`.
    #[test]
    fn review36f_an_end_on_a_target_without_its_claim_still_takes_its_shard_incoming() {
        let d = dir("r36f-end-unclaimed");
        let server = files(&d, 2);
        register(&server, "bo", 0);
        accept(&server, "bo", "e1").unwrap();
        let (_armed, operator) = failing_at(&d, 2, "UPDATE shard_moving SET copied = 1");
        assert!(block_on(operator.move_mailbox("bo", 1)).is_err());
        block_on(server.get(1).unwrap().batch(vec![stmt!("DELETE FROM shard_fence")])).unwrap();
        block_on(server.move_mailbox("bo", 1)).unwrap();
        assert_eq!(count(server.get(0).unwrap(), "SELECT count(*) AS n FROM shard_moves"), 0, "the move ended");
        assert!(!has(server.get(1).unwrap(), "shard_incoming", "bo"), "shard_incoming left on the live mailbox");
    }

    /// Review 36f, MEDIUM: a move whose generation is behind a database's fence is refused
    /// there, and the step that holds its lease was answered "held elsewhere" for ever. A move
    /// that code from before 0028 inserted (`gen` 0) now takes a generation on insert; one behind
    /// the fences for another reason (a primary restored from a backup: its count rewound) takes
    /// one past every fence at its next step, and ends.
    #[test]
    fn review36f_a_move_behind_the_fences_takes_a_new_generation_and_ends() {
        let d = dir("r36f-gen0");
        let house = files(&d, 2);
        register(&house, "bo", 0);
        accept(&house, "bo", "e1").unwrap();
        block_on(house.move_mailbox("bo", 1)).unwrap();
        // Old code begins the move back to 0 (no `gen`) and freezes the source.
        let primary = house.get(0).unwrap();
        block_on(primary.batch(vec![stmt!(
            "INSERT INTO shard_moves (local, to_shard, since, from_shard, lease) VALUES ('bo', 0, unixepoch(), 1, 0)"
        )]))
        .unwrap();
        assert!(count(primary, "SELECT gen AS n FROM shard_moves WHERE local = 'bo'") > 1, "a generation on insert");
        block_on(house.get(1).unwrap().batch(vec![stmt!("INSERT INTO shard_moving (local) VALUES ('bo')")])).unwrap();
        for _ in 0..3 {
            assert!(block_on(house.advance_moves()).is_ok());
            advance(1);
        }
        assert_eq!(count(primary, "SELECT count(*) AS n FROM shard_moves"), 0, "the move ended");
        assert_eq!(ids(&house, "bo").len(), 1);
        // A primary restored from a backup: its count and the move's generation behind the
        // fences the databases keep.
        block_on(house.get(1).unwrap().batch(vec![stmt!("UPDATE shard_fence SET gen = 50")])).unwrap();
        block_on(
            primary.batch(vec![stmt!("UPDATE shard_fence SET gen = 40"), stmt!("UPDATE shard_move_count SET n = 3")]),
        )
        .unwrap();
        let moved = block_on(house.move_mailbox("bo", 1)).unwrap();
        assert_eq!((moved.to, ids(&house, "bo").len()), (1, 1));
        assert!(count(primary, "SELECT n FROM shard_move_count") > 50, "past every fence");
    }
}
