//! The simulation's invariants, read straight from each house's database.
//!
//! After every step: every Libro sums to zero, no balance but `casa@`'s is negative, a
//! mandate's `spent` stays within its cap and covers its sub-mandates', a finished contract's
//! escrow holds nothing, the journal audits (signatures, numbers, links, sums) and agrees with
//! the balances; no mailbox holds an envelope twice, each envelope lies in its mailbox's range of
//! `seq`s if it waits and in the range's mirror below zero if it was acknowledged, and each
//! mailbox's usage row is what it
//! holds (envelopes not yet acknowledged, bytes of bodies still kept); leases and deadlines of queued jobs stay within their bounds; no envelope is both
//! delivered and bounced, nor reported twice (bounced or "undetermined"), for one recipient. Once the network healed and the
//! queues drained: each accepted envelope reached each recipient exactly once or was bounced to
//! its sender (or reported "undetermined": an attempt may have reached it, and no answer came),
//! and each accepted email is in its mailbox once.

use std::collections::{BTreeMap, BTreeSet};

use nyx5_proto::crypto::SigPublic;
use nyx5_proto::{Address, Envelope, Value};

use super::world::{SimHouse, World, run};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// An envelope a house accepted from its agent (202 on `/outbound`), followed to its end.
#[derive(Debug, Clone)]
pub struct Sent {
    pub env: Envelope,
    pub to: Vec<Address>,
}

/// What the simulation follows across steps.
#[derive(Debug, Default)]
pub struct Tracked {
    pub sent: Vec<Sent>,
    /// Emails the bridge accepted: (domain, local, envelope id).
    pub emails: Vec<(String, String, String)>,
    /// Ids each agent acknowledged (by address).
    pub acked: BTreeMap<String, BTreeSet<String>>,
    /// Every domain key each house has had, oldest first (its journal is signed by them).
    pub domain_keys: BTreeMap<String, Vec<SigPublic>>,
    /// Each house's journal as far as it was read, parsed, and the balances it sums to
    /// (accounts at zero left out).
    journals: BTreeMap<String, Journal>,
    /// Every postmaster notice seen in a mailbox, by (domain, local, notice id), as read the
    /// first time: a notice's body is dropped a week after its agent acknowledged it (its row
    /// stays), so what it said is remembered rather than read again.
    notices: BTreeMap<(String, String, String), Option<Seen>>,
    /// The latest time each house's clock has shown at a check (a clock that jumped ahead and
    /// was set right has shown a later time than it shows now).
    latest: BTreeMap<String, i64>,
    /// What each house's database held at its last full check, and the tally then.
    views: BTreeMap<String, View>,
    tally: Option<(usize, Tally)>,
}

/// A house's journal as far as the checks read it: audited entry by entry, each once.
#[derive(Debug)]
struct Journal {
    auditor: nyx5_proto::libro::Auditor,
    /// The balances the entries sum to (accounts at zero left out).
    sums: BTreeMap<String, i64>,
}

/// What a sender was told of one recipient of one envelope: how many notices said it bounced,
/// how many said "undetermined", and what the last one said.
type Told = (u32, u32, String);

/// What the delivery checks read from one house at its last full check. Every invariant of a
/// house is a function of its database (and of the latest time its clock showed, which only
/// makes the queue's check weaker as it grows), so a house whose database no row changed in
/// since (SQLite's `total_changes`, triggers included) is not read again: the long horizon's
/// checks then cost what changed, not what is kept.
#[derive(Debug, Default)]
struct View {
    changes: u64,
    /// Envelope ids held by each address (an agent's mailbox, or `libro@` for the operations
    /// its Libro did).
    delivered: BTreeMap<String, BTreeSet<String>>,
    /// Notices each sender holds: envelope → recipient → what they said.
    told: BTreeMap<String, BTreeMap<String, BTreeMap<String, Told>>>,
}

impl Tracked {
    /// Forgets what the checks read (notices as first read included), so the next check reads
    /// every house again: for tests that change a house behind the checks' back.
    pub fn forget(&mut self) {
        self.notices.clear();
        self.views.clear();
        self.journals.clear();
        self.tally = None;
    }
}

/// What a bounce or "undetermined" notice said (`None` in [`Tracked::notices`]: a delivery
/// receipt, or anything else).
#[derive(Debug, Clone)]
pub(super) struct Seen {
    undetermined: bool,
    of: String,
    why: String,
    recipients: Vec<String>,
}

impl Seen {
    /// Reads a postmaster notice's stored text.
    fn read(text: &str) -> Result<Option<Seen>, String> {
        let v = Value::parse_str(text).map_err(|e| format!("a notice is not JSON: {}", e.reason))?;
        let body = v.as_object().and_then(|o| o.get("content")).and_then(Value::as_object).and_then(|c| c.get("body"));
        let Some(body) = body.and_then(Value::as_object) else { return Ok(None) };
        let undetermined = match body.get("status").and_then(Value::as_str) {
            Some("bounced") => false,
            Some("undetermined") => true,
            _ => return Ok(None),
        };
        Ok(Some(Seen {
            undetermined,
            of: body.get("of").and_then(Value::as_str).unwrap_or_default().to_owned(),
            why: format!(
                "{} {}",
                body.get("code").and_then(Value::as_safe_integer).unwrap_or_default(),
                body.get("reason").and_then(Value::as_str).unwrap_or_default()
            ),
            recipients: body
                .get("recipients")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|to| to.as_str().unwrap_or_default().to_owned())
                .collect(),
        }))
    }
}

impl Tracked {
    /// Whether the bridge already accepted email `id` for `local@domain`.
    pub fn accepted_email(&self, domain: &str, local: &str, id: &str) -> bool {
        self.emails.iter().any(|(d, l, i)| d == domain && l == local && i == id)
    }
}

/// How the recipients of the accepted envelopes stand.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub delivered: u64,
    pub bounced: u64,
    /// Reported "undetermined (it may have been delivered)", and of those, delivered in fact.
    pub undetermined: u64,
    pub undetermined_delivered: u64,
}

fn rows(house: &SimHouse, stmt: Stmt) -> Result<Vec<Row>, String> {
    // Reads go to SQLite itself: a check must not count as a call of a house about to die.
    rows_db(house.db.sqlite(), stmt)
}

fn rows_db(db: &crate::sqlite::SqliteDb, stmt: Stmt) -> Result<Vec<Row>, String> {
    run(db.query(stmt))
        .ok_or_else(|| "a check's query did not finish".to_owned())?
        .map_err(|e| format!("a check's query failed: {e:?}"))
}

/// The rows of `stmt` from every database of the house (its mailbox shards too), in turn.
fn every(house: &SimHouse, stmt: Stmt) -> Result<Vec<Row>, String> {
    let mut out = Vec::new();
    for db in house.db.all() {
        out.extend(rows_db(db, stmt.clone())?);
    }
    Ok(out)
}

fn int(row: &Row, name: &str) -> Result<i64, String> {
    row.int(name).ok_or_else(|| format!("column {name} is not an integer"))
}

fn text<'a>(row: &'a Row, name: &str) -> Result<&'a str, String> {
    row.text(name).ok_or_else(|| format!("column {name} is not text"))
}

/// The invariants that hold after every step.
pub fn after_step(world: &World, tracked: &mut Tracked) -> Result<Tally, String> {
    let mut changed = false;
    for domain in world.domains() {
        let house = world.house(&domain).ok_or_else(|| format!("{domain} is gone"))?;
        let latest = tracked.latest.entry(domain.clone()).or_insert(i64::MIN);
        *latest = (*latest).max(house.now().millis());
        let latest = *latest;
        let mut changes = 0u64;
        for db in house.db.all() {
            changes += db.total_changes().map_err(|e| format!("{domain}: {e:?}"))?;
        }
        if tracked.views.get(&domain).is_some_and(|v| v.changes == changes) {
            continue;
        }
        changed = true;
        let at = |e: String| format!("{domain}: {e}");
        let journal = tracked
            .journals
            .entry(domain.clone())
            .or_insert_with(|| Journal { auditor: nyx5_proto::libro::Auditor::new(&domain), sums: BTreeMap::new() });
        ledger(&house, &domain, tracked.domain_keys.get(&domain), journal).map_err(at)?;
        mailboxes(&house).map_err(at)?;
        queue(&house, latest).map_err(at)?;
        let view = read_view(&house, &domain, changes, &mut tracked.notices)?;
        tracked.views.insert(domain, view);
    }
    match tracked.tally {
        Some((sent, tally)) if !changed && sent == tracked.sent.len() => Ok(tally),
        _ => {
            let tally = delivery(tracked, false)?;
            tracked.tally = Some((tracked.sent.len(), tally));
            Ok(tally)
        }
    }
}

/// The checks once the network healed and the queues drained: every house read again in
/// full, each journal from its first entry.
pub fn at_rest(world: &World, tracked: &mut Tracked) -> Result<Tally, String> {
    tracked.views.clear();
    tracked.journals.clear();
    tracked.tally = None;
    after_step(world, tracked)?;
    for (domain, local, id) in &tracked.emails {
        let house = world.house(domain).ok_or_else(|| format!("{domain} is gone"))?;
        let n = every(
            &house,
            stmt!("SELECT count(*) AS n FROM mailbox WHERE local = ? AND envelope_id = ?", local.as_str(), id.as_str()),
        )?;
        let n = n.iter().map(|r| int(r, "n")).sum::<Result<i64, String>>()?;
        if n != 1 {
            return Err(format!("the email {id} accepted for {local}@{domain} is in its mailbox {n} times"));
        }
    }
    delivery(tracked, true)
}

/// `domain_keys`: every key the house has signed with (its current one alone when `None`).
fn ledger(
    house: &SimHouse,
    domain: &str,
    domain_keys: Option<&Vec<SigPublic>>,
    journal: &mut Journal,
) -> Result<(), String> {
    let casa = nyx5_proto::libro::house_account(domain);
    let mut balances = BTreeMap::new();
    for r in rows(house, stmt!("SELECT account, balance FROM libro_accounts"))? {
        let (account, balance) = (text(&r, "account")?.to_owned(), int(&r, "balance")?);
        if balance < 0 && account != casa {
            return Err(format!("{account} is at {balance}"));
        }
        if balance != 0 {
            balances.insert(account, balance);
        }
    }
    let sum: i64 = balances.values().sum();
    if sum != 0 {
        return Err(format!("the balances sum to {sum}"));
    }
    let held = rows(
        house,
        stmt!(
            "SELECT c.id, c.state, coalesce(a.balance, 0) AS held FROM libro_contracts c
               LEFT JOIN libro_accounts a ON a.account = 'escrow:' || c.id
              WHERE c.state IN ('released', 'refunded', 'settled', 'forfeited') AND coalesce(a.balance, 0) != 0"
        ),
    )?;
    if let Some(r) = held.first() {
        return Err(format!("the {} contract {} still holds {}", text(r, "state")?, text(r, "id")?, int(r, "held")?));
    }
    let mandates = rows(
        house,
        stmt!(
            "SELECT m.id, m.cap, m.spent,
                    (SELECT coalesce(sum(k.spent), 0) FROM libro_mandates k WHERE k.parent = m.id) AS below
               FROM libro_mandates m"
        ),
    )?;
    for r in mandates {
        let (cap, spent, below) = (int(&r, "cap")?, int(&r, "spent")?, int(&r, "below")?);
        if spent > cap || below > spent {
            return Err(format!("mandate {}: spent {spent} of {cap}, {below} by its sub-mandates", text(&r, "id")?));
        }
    }
    // The journal is read from where the last check stopped (it only grows: a trigger chains
    // each entry to the one before), each new entry audited against what came before it (its
    // number, link, signature and balances); the accounts meet its sums every time (a balance
    // moved outside the journal is named at once, not at the next entry). `at_rest` audits each
    // journal again from its first entry.
    let after = i64::try_from(journal.auditor.entries()).map_err(|_| "a journal past i64")?;
    let new = rows(house, stmt!("SELECT entry FROM libro_entries WHERE n > ? ORDER BY n", after))?;
    if !new.is_empty() {
        let current = [house.config.key.public()];
        let keys = domain_keys.map_or(&current[..], Vec::as_slice);
        for r in &new {
            let entry =
                Value::parse_str(text(r, "entry")?).map_err(|e| format!("an entry is not JSON: {}", e.reason))?;
            journal.auditor.push(keys, &entry).map_err(|e| format!("the journal does not audit: {}", e.reason))?;
        }
        journal.sums = journal.auditor.report().balances;
        journal.sums.retain(|_, b| *b != 0);
    }
    if journal.sums != balances {
        return Err(format!("the journal's balances {:?} are not the accounts' {balances:?}", journal.sums));
    }
    Ok(())
}

fn mailboxes(house: &SimHouse) -> Result<(), String> {
    // Each mailbox is on the database its agent was placed on, and only there (issue 36 §3): so
    // no envelope is in two of them, and each check below holds database by database.
    for (k, db) in house.db.all().enumerate() {
        let locals = rows_db(db, stmt!("SELECT json_group_array(DISTINCT local) AS l FROM mailbox"))?;
        let locals = locals.first().and_then(|r| r.text("l")).unwrap_or("[]").to_owned();
        let elsewhere = rows(
            house,
            stmt!(
                "SELECT j.value AS local, a.shard AS shard FROM json_each(?) AS j LEFT JOIN agents AS a ON a.local = j.value
                  WHERE a.shard IS NOT ?",
                locals,
                k as i64
            ),
        )?;
        if let Some(r) = elsewhere.first() {
            return Err(format!(
                "{}'s envelopes are in database {k}, and its mailbox is placed on {:?}",
                text(r, "local")?,
                r.int("shard")
            ));
        }
    }
    let twice =
        every(house, stmt!("SELECT local, envelope_id FROM mailbox GROUP BY local, envelope_id HAVING count(*) > 1"))?;
    if let Some(r) = twice.first() {
        return Err(format!("{}'s mailbox holds {} twice", text(r, "local")?, text(r, "envelope_id")?));
    }
    let astray = every(
        house,
        stmt!(
            "SELECT m.local AS local, m.envelope_id AS envelope_id, m.seq AS seq, a.mbox AS mbox
               FROM mailbox m LEFT JOIN agents a ON a.local = m.local
              WHERE a.mbox IS NULL OR abs(m.seq) >> 30 != a.mbox OR abs(m.seq) & 1073741823 = 0
                 OR (m.acked_at IS NULL) != (m.seq > 0)"
        ),
    )?;
    if let Some(r) = astray.first() {
        return Err(format!(
            "{}'s envelope {} has seq {} (mailbox {:?}): outside its mailbox's range, or on the wrong side of it",
            text(r, "local")?,
            text(r, "envelope_id")?,
            int(r, "seq")?,
            r.int("mbox"),
        ));
    }
    let off = every(
        house,
        stmt!(
            concat!(
            "WITH x AS MATERIALIZED (
             SELECT a.local AS local, coalesce(u.envelopes, 0) AS off_n, coalesce(u.bytes, 0) AS off_bytes, ",
            crate::store::mailbox::tally!(),
            " AS t FROM agents a LEFT JOIN mailbox_usage u ON u.local = a.local)
             SELECT x.local AS local, x.off_n + coalesce(json_extract(x.t, '$[1]'), 0) AS counted,
                    coalesce(m.n, 0) AS held,
                    x.off_bytes + coalesce(json_extract(x.t, '$[2]'), 0) AS counted_bytes,
                    coalesce(m.bytes, 0) AS held_bytes
               FROM x
               LEFT JOIN (SELECT m.local AS local,
                                 count(*) FILTER (WHERE m.seq > 0 AND m.seq & 1073741823 > coalesce(w.acked_through, 0)) AS n,
                                 sum(m.bytes) AS bytes
                            FROM mailbox m LEFT JOIN mailbox_usage w ON w.local = m.local
                           WHERE m.bytes IS NOT NULL GROUP BY m.local) m ON m.local = x.local
              WHERE counted != held OR counted_bytes != held_bytes
             UNION ALL
             SELECT u.local, u.envelopes, 0, u.bytes, 0 FROM mailbox_usage u
              WHERE NOT EXISTS (SELECT 1 FROM agents a WHERE a.local = u.local) AND (u.envelopes != 0 OR u.bytes != 0)"
            )
        ),
    )?;
    if let Some(r) = off.first() {
        return Err(format!(
            "{}'s mailbox usage counts {} envelopes of {} bytes, and it holds {} of {}",
            text(r, "local")?,
            int(r, "counted")?,
            int(r, "counted_bytes")?,
            int(r, "held")?,
            int(r, "held_bytes")?
        ));
    }
    // Every row the engine writes carries its mailbox's tally on (migration 0022): one without
    // it would leave what a mailbox holds to rows the quota no longer counts.
    let untallied =
        every(house, stmt!("SELECT local, envelope_id FROM mailbox WHERE total_n IS NULL OR total_bytes IS NULL"))?;
    if let Some(r) = untallied.first() {
        return Err(format!(
            "{}'s envelope {} was written without its mailbox's tally",
            text(r, "local")?,
            text(r, "envelope_id")?
        ));
    }
    // A watermark never passes the highest `n` its mailbox gave (an envelope accepted later would
    // be born acknowledged), and every body it keeps under it lies in a raise the tick will drop
    // it by (or it would be kept, and counted, for ever).
    let ahead = every(
        house,
        stmt!(
            "SELECT u.local AS local, u.acked_through AS w,
                    coalesce((SELECT max(abs(m.seq) & 1073741823) FROM mailbox m WHERE m.local = u.local), 0) AS highest
               FROM mailbox_usage u WHERE u.acked_through > highest"
        ),
    )?;
    if let Some(r) = ahead.first() {
        return Err(format!(
            "{}'s watermark {} is past the highest envelope it was given, {}",
            text(r, "local")?,
            int(r, "w")?,
            int(r, "highest")?
        ));
    }
    let unraised = every(
        house,
        stmt!(
            "SELECT m.local AS local, m.envelope_id AS envelope_id
               FROM mailbox m JOIN mailbox_usage u ON u.local = m.local
              WHERE m.seq > 0 AND m.seq & 1073741823 <= u.acked_through AND m.bytes IS NOT 0
                AND NOT EXISTS (SELECT 1 FROM mailbox_acks r WHERE r.local = m.local
                                AND m.seq & 1073741823 BETWEEN r.lo AND r.through)
             UNION ALL
             SELECT r.local, '(a raise ' || r.lo || '..' || r.through || ')'
               FROM mailbox_acks r LEFT JOIN mailbox_usage u ON u.local = r.local
              WHERE r.through > coalesce(u.acked_through, 0)"
        ),
    )?;
    if let Some(r) = unraised.first() {
        return Err(format!(
            "{}'s envelope {} is acknowledged under its watermark with its body kept and no raise to drop it by, \
             or a raise is past the watermark",
            text(r, "local")?,
            text(r, "envelope_id")?
        ));
    }
    Ok(())
}

/// `latest`: the latest time the house's clock has shown. A lease is never further ahead of it
/// than a tick takes one (a lease taken while the clock ran ahead lies ahead of the clock set
/// right, and holds nothing: `store::queue::lease`). A pending job is never due before its
/// `not_before`: a due job is found by `next_attempt` (`jobs_due`).
fn queue(house: &SimHouse, latest: i64) -> Result<(), String> {
    let give_up = house.config.retry.give_up_after_ms;
    let bad = rows(
        house,
        stmt!(
            "SELECT made, envelope_id, lease_until, deadline, not_before, next_attempt FROM jobs
              WHERE state = 'pending' AND (lease_until > ? OR deadline > not_before + ? OR next_attempt < not_before)",
            latest.saturating_add(crate::queue::LEASE_MS),
            give_up
        ),
    )?;
    if let Some(r) = bad.first() {
        return Err(format!(
            "job {} of {}: lease until {}, deadline {}, next attempt {} for a start at {}",
            int(r, "made")?,
            text(r, "envelope_id")?,
            int(r, "lease_until")?,
            int(r, "deadline")?,
            int(r, "next_attempt")?,
            int(r, "not_before")?
        ));
    }
    let pins = rows(
        house,
        stmt!(
            "SELECT site, count(*) AS n FROM pins WHERE site IS NOT NULL GROUP BY site HAVING count(*) > ?",
            crate::resolver::MAX_PINS_PER_SITE
        ),
    )?;
    if let Some(r) = pins.first() {
        return Err(format!("{} pins for the site {}", int(r, "n")?, text(r, "site")?));
    }
    Ok(())
}

/// The first few pending jobs of every house, said for a failure: where each goes, how often it
/// was tried and why it failed last.
pub fn pending_jobs(world: &World) -> String {
    let mut out = Vec::new();
    for domain in world.domains() {
        let Some(house) = world.house(&domain) else { continue };
        let jobs = rows(
            &house,
            stmt!(
                "SELECT envelope_id, domain, attempts, last_error, next_attempt, lease_until, deadline FROM jobs
                  WHERE state = 'pending' ORDER BY next_attempt LIMIT 5"
            ),
        )
        .unwrap_or_default();
        for j in jobs {
            out.push(format!(
                "  {domain}: {} to {}, {} attempts, next {:?}, lease {:?}, deadline {:?} (now {}): {}",
                j.text("envelope_id").unwrap_or_default(),
                j.text("domain").unwrap_or_default(),
                j.int("attempts").unwrap_or_default(),
                j.int("next_attempt"),
                j.int("lease_until"),
                j.int("deadline"),
                house.now().millis(),
                j.text("last_error").unwrap_or("-"),
            ));
        }
    }
    out.join("\n")
}

/// Each house's pending jobs, and the earliest time (world time) one of them is due.
pub fn pending(world: &World) -> Result<(i64, Option<i64>), String> {
    let (mut n, mut due): (i64, Option<i64>) = (0, None);
    for domain in world.domains() {
        let house = world.house(&domain).ok_or_else(|| format!("{domain} is gone"))?;
        let skew = house.now().millis().saturating_sub(world.now());
        let r = rows(
            &house,
            stmt!("SELECT count(*) AS n, min(max(next_attempt, lease_until)) AS due FROM jobs WHERE state = 'pending'"),
        )?;
        if let Some(r) = r.first() {
            n += int(r, "n")?;
            if let Some(d) = r.int("due") {
                let world_time = d.saturating_sub(skew);
                due = Some(due.map_or(world_time, |x| x.min(world_time)));
            }
        }
    }
    Ok((n, due))
}

/// What `house` holds for the delivery checks: the envelopes in its mailboxes and the
/// operations its Libro did, and the notices its agents were sent (each read once, when first
/// seen: the body of an acknowledged notice is dropped a week later).
fn read_view(
    house: &SimHouse,
    domain: &str,
    changes: u64,
    notices: &mut BTreeMap<(String, String, String), Option<Seen>>,
) -> Result<View, String> {
    let mut view = View { changes, ..View::default() };
    let mut held = |address: String, id: &str| view.delivered.entry(address).or_default().insert(id.to_owned());
    for r in every(house, stmt!("SELECT local, envelope_id FROM mailbox"))? {
        held(format!("{}@{domain}", text(&r, "local")?), text(&r, "envelope_id")?);
    }
    for r in rows(house, stmt!("SELECT envelope_id FROM libro_ops WHERE refused IS NULL"))? {
        held(format!("libro@{domain}"), text(&r, "envelope_id")?);
    }
    let postmaster = format!("postmaster@{domain}");
    for r in every(house, stmt!("SELECT local, envelope_id FROM mailbox WHERE sender = ?", postmaster.as_str()))? {
        let (local, id) = (text(&r, "local")?, text(&r, "envelope_id")?);
        let key = (domain.to_owned(), local.to_owned(), id.to_owned());
        let seen = match notices.get(&key) {
            Some(seen) => seen.clone(),
            None => {
                // Each step is checked, and a body is dropped a week after an ack (a step of
                // its own): no notice can lose its body before it was first read.
                let body =
                    every(house, stmt!("SELECT envelope FROM mailbox WHERE local = ? AND envelope_id = ?", local, id))?;
                let body = body.first().map(|r| text(r, "envelope")).transpose()?.unwrap_or_default();
                if body.is_empty() {
                    return Err(format!("the notice {id} to {local}@{domain} lost its body before it was read"));
                }
                let seen = Seen::read(body)?;
                notices.insert(key, seen.clone());
                seen
            }
        };
        let Some(seen) = seen else { continue };
        let told = view.told.entry(format!("{local}@{domain}")).or_default();
        for to in seen.recipients {
            let n = told.entry(seen.of.clone()).or_default().entry(to).or_insert((0, 0, String::new()));
            if seen.undetermined {
                n.1 += 1;
            } else {
                n.0 += 1;
            }
            n.2.clone_from(&seen.why);
        }
    }
    Ok(view)
}

/// What each recipient of an accepted envelope holds, and what its sender was told; at rest,
/// every recipient must be delivered, bounced, or reported undetermined — never delivered and
/// bounced, and never told twice.
fn delivery(tracked: &Tracked, at_rest: bool) -> Result<Tally, String> {
    let none = (0, 0, String::new());
    let mut tally = Tally::default();
    for s in &tracked.sent {
        let (from, id) = (s.env.from(), s.env.id());
        let told = tracked.views.get(from.domain()).and_then(|v| v.told.get(from.as_str()));
        for to in &s.to {
            let got = tracked
                .views
                .get(to.domain())
                .and_then(|v| v.delivered.get(to.as_str()))
                .is_some_and(|ids| ids.contains(id));
            let (notices, undetermined, why) =
                told.and_then(|t| t.get(id)).and_then(|t| t.get(to.as_str())).unwrap_or(&none);
            match (got, *notices, *undetermined) {
                (true, 0, 0) => tally.delivered += 1,
                (false, 1, 0) => tally.bounced += 1,
                (_, 0, 1) => {
                    tally.undetermined += 1;
                    tally.undetermined_delivered += u64::from(got);
                }
                (true, n, _) if n > 0 => {
                    return Err(format!("{id} from {from} was delivered to {to} and bounced ({why})"));
                }
                (false, 0, 0) if at_rest => {
                    return Err(format!("{id} from {from} was neither delivered to {to} nor bounced"));
                }
                (false, 0, 0) => {}
                (_, n, u) => {
                    return Err(format!(
                        "{id} from {from} was reported {n} times bounced and {u} times undetermined for {to} \
                         (the last: {why})"
                    ));
                }
            }
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_is_known_by_its_domain_local_part_and_id_together() {
        let mut t = Tracked::default();
        t.emails.push(("h0.test".into(), "a1".into(), "e-1".into()));
        assert!(t.accepted_email("h0.test", "a1", "e-1"));
        for (d, l, i) in [("h1.test", "a1", "e-1"), ("h0.test", "a2", "e-1"), ("h0.test", "a1", "e-2")] {
            assert!(!t.accepted_email(d, l, i), "{d} {l} {i}");
        }
    }
}
