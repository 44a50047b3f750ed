//! The Libro's SQL (migration `0006_libro.sql`). Reads are single queries; writes are statements
//! for the one batch each operation is. The schema's triggers keep balances and refuse unbalanced
//! or unchained entries; the version guards here refuse a decision made on a contract or mandate
//! that changed since it was read.

use nyx5_proto::Error;
use nyx5_rules::libro::model::Kind;
use nyx5_rules::libro::state::{ApprovalState, ContractState};

use super::{one, query};
use crate::guard;
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// Constraint names an operation's batch can fail on when it lost a race (read again, decide
/// again).
pub const RACES: &[&str] = &[
    "libro_entries.n",
    "entry_chain",
    super::constraint::GUARD,
    "libro_contracts.id",
    "balance_negative",
    "mandate_spent",
];
/// A batch that would take a balance past 2^53 - 1 (or casa@'s below its negative), the largest
/// integer a JSON reader holds exactly (migration 0017): refused, never retried.
pub const BALANCE_MAX: &str = "balance_max";
/// An operation envelope already done.
pub const OP_DONE: &str = "libro_ops.envelope_id";
/// An entry for this cause is already posted.
pub const CAUSE_DONE: &str = "libro_entries.cause";

/// What [`facts`] reads about: the accounts (a JSON list), the contract, the mandate, the
/// operator, the pending approval, the instant the past hour starts at, and whether to count the
/// operator's approvals (only an operation that may wait needs them: the counts read up to
/// ~1,100 index rows, which D1 bills).
#[derive(Debug, Clone, Copy)]
pub struct FactsOf<'a> {
    pub accounts: &'a str,
    pub contract: Option<&'a str>,
    pub mandate: Option<&'a str>,
    pub operator: &'a str,
    pub pending: Option<&'a str>,
    pub since: i64,
    pub count_approvals: bool,
}

/// What an operation needs to read, in one query: whether the envelope was done before, the
/// journal's head, the balances of `accounts` (a JSON list) and of the root grantor of
/// `mandate`, the contract `contract`, every mandate in `mandate`'s chain, whether `operator`
/// has an account here and how many active mandates it granted, the pending approval `pending`
/// with its envelope, the operator's approvals waiting and kept (when asked), and the hour's
/// uses of the operator's card and of `mandate`'s chain.
pub async fn facts<D: Db>(db: &D, op: &str, r: &FactsOf<'_>) -> Result<Row, Error> {
    Ok(one(
        db,
        stmt!(
            "SELECT
               (SELECT json_object('operator', operator, 'sha256', sha256, 'refused', refused, 'name', refused_name,
                                   'reason', reason)
                  FROM libro_ops WHERE envelope_id = ?1) AS done,
               (SELECT n FROM libro_entries ORDER BY n DESC LIMIT 1) AS head_n,
               (SELECT sha256 FROM libro_entries ORDER BY n DESC LIMIT 1) AS head_sha,
               (SELECT json_group_object(a, b) FROM
                  (SELECT a, (SELECT balance FROM libro_lines WHERE account = a ORDER BY n DESC LIMIT 1) AS b
                     FROM (SELECT value AS a FROM json_each(?2)
                           UNION SELECT r.grantor FROM libro_mandates m JOIN libro_mandates r ON r.id = m.root
                                  WHERE m.id = ?4))
                 WHERE b IS NOT NULL) AS balances,
               (SELECT json_object('version', version, 'record', json(record)) FROM libro_contracts WHERE id = ?3) AS contract,
               EXISTS (SELECT 1 FROM libro_lines WHERE account = ?5) AS known,
               EXISTS (SELECT 1 FROM verifica_checks WHERE contract = ?3 AND state = 'undecided') AS unchecked,
               (SELECT count(*) FROM libro_mandates WHERE grantor = ?5 AND state = 'active') AS mandates,
               (SELECT json_group_array(json_object('version', version,
                         'record', json_set(json(record), '$.spent', spent, '$.state', state)))
                  FROM libro_mandates
                 WHERE id IN (SELECT value FROM json_each((SELECT chain FROM libro_mandates WHERE id = ?4)))) AS chain,
               (SELECT json_object('version', version, 'record', json(record), 'envelope', envelope)
                  FROM libro_pending WHERE id = ?6) AS pending,
               CASE WHEN ?8 THEN (SELECT count(*) FROM libro_pending WHERE operator = ?5 AND state = 'pending')
                    ELSE 0 END AS pending_count,
               CASE WHEN ?8 THEN (SELECT count(*) FROM libro_pending WHERE operator = ?5) ELSE 0 END AS approvals_kept,
               (SELECT json_group_object(subject, n) FROM
                  (SELECT subject, count(*) AS n FROM libro_uses
                    WHERE at > ?7 AND (subject = 'card:' || ?5 OR subject IN
                      (SELECT 'mandate:' || value FROM json_each((SELECT chain FROM libro_mandates WHERE id = ?4))))
                    GROUP BY subject)) AS uses",
            op,
            r.accounts,
            r.contract,
            r.mandate,
            r.operator,
            r.pending,
            r.since,
            r.count_approvals
        ),
    )
    .await?
    .unwrap_or_default())
}

/// The journal's head: `(n, sha256)` of the last entry.
pub async fn head<D: Db>(db: &D) -> Result<Option<(i64, String)>, Error> {
    Ok(one(db, stmt!("SELECT n, sha256 FROM libro_entries ORDER BY n DESC LIMIT 1"))
        .await?
        .and_then(|r| Some((r.int("n")?, r.text("sha256")?.to_owned()))))
}

/// The operator's receipt of an operation done before.
pub async fn op_done<D: Db>(db: &D, envelope_id: &str) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "SELECT operator, sha256, receipt, refused, refused_name, reason FROM libro_ops WHERE envelope_id = ?",
            envelope_id
        ),
    )
    .await
}

/// The entry posted for `cause`, if any. A cause no envelope is (it has a `:`) is in the partial
/// index `libro_entries_cause` (migration 0025); an operation's entry (its cause the envelope's
/// id) is the one its receipt in `libro_ops` carries (`asiento`), read by its number.
pub async fn entry_for<D: Db>(db: &D, cause: &str) -> Result<Option<String>, Error> {
    Ok(one(
        db,
        stmt!(
            "SELECT entry FROM libro_entries WHERE cause = ?1 AND instr(cause, ':') > 0
             UNION ALL
             SELECT e.entry FROM libro_ops o
               JOIN libro_entries e ON e.n = CASE WHEN json_valid(o.receipt) THEN json_extract(o.receipt, '$.asiento.n') END
              WHERE o.envelope_id = ?1 AND instr(?1, ':') = 0 AND e.cause = ?1
             LIMIT 1",
            cause
        )
    )
        .await?
        .and_then(|r| r.text("entry").map(str::to_owned)))
}

/// The newest `limit` entries naming `account`. The house's own account (`house`: `casa@<domain>`)
/// has no lines (migration 0034): its entries are the journal's that move it, newest first,
/// found among the newest [`HOUSE_STATEMENT_SPAN`] (a house without fees moves casa@ seldom).
pub async fn statement<D: Db>(db: &D, account: &str, house: &str, limit: i64) -> Result<Vec<String>, Error> {
    let sql = if account == house {
        stmt!(
            "SELECT e.entry FROM libro_entries e
              WHERE e.n > (SELECT coalesce(max(n), 0) FROM libro_entries) - ?3
                AND EXISTS (SELECT 1 FROM json_each(e.lines) j WHERE json_extract(j.value, '$.account') = ?1)
              ORDER BY e.n DESC LIMIT ?2",
            account,
            limit,
            HOUSE_STATEMENT_SPAN
        )
    } else {
        stmt!(
            "SELECT e.entry FROM libro_lines l JOIN libro_entries e ON e.n = l.n
              WHERE l.account = ? ORDER BY l.n DESC LIMIT ?",
            account,
            limit
        )
    };
    Ok(query(db, sql).await?.into_iter().filter_map(|r| r.text("entry").map(str::to_owned)).collect())
}

/// Entries with `n > after`, in order, at most `limit`.
pub async fn journal<D: Db>(db: &D, after: i64, limit: i64) -> Result<Vec<String>, Error> {
    Ok(query(db, stmt!("SELECT entry FROM libro_entries WHERE n > ? ORDER BY n LIMIT ?", after, limit))
        .await?
        .into_iter()
        .filter_map(|r| r.text("entry").map(str::to_owned))
        .collect())
}

/// An account's balance: its newest line's; the house's own account's the newest entry's
/// (migration 0034: its lines from before are history).
pub async fn balance<D: Db>(db: &D, account: &str) -> Result<i64, Error> {
    Ok(one(
        db,
        stmt!(
            "SELECT coalesce((SELECT CASE WHEN 'casa@' || house = ?1 THEN house_balance END
                                FROM libro_entries ORDER BY n DESC LIMIT 1),
                             (SELECT balance FROM libro_lines WHERE account = ?1 ORDER BY n DESC LIMIT 1)) AS balance",
            account
        ),
    )
    .await?
    .and_then(|r| r.int("balance"))
    .unwrap_or(0))
}

/// A contract's record and version.
pub async fn contract<D: Db>(db: &D, id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT record, version FROM libro_contracts WHERE id = ?", id)).await
}

/// Contracts where `who` is a party, newest first.
pub async fn contracts_of<D: Db>(db: &D, who: &str, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT record, version FROM libro_contracts
              WHERE seller = ?1 OR buyer = ?1 OR bondholder = ?1 OR verifier = ?1 OR beneficiary = ?1
                 OR arbiter = ?1 OR vouchee = ?1
              ORDER BY updated DESC, id LIMIT ?2",
            who,
            limit
        ),
    )
    .await
}

/// Mandates `who` granted or holds, newest first.
pub async fn mandates_of<D: Db>(db: &D, who: &str, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT json_set(json(record), '$.spent', spent, '$.state', state) AS record, version FROM libro_mandates
              WHERE grantor = ?1 OR grantee = ?1 ORDER BY created DESC, id LIMIT ?2",
            who,
            limit
        ),
    )
    .await
}

/// The terminal and standing contracts `who` sold, bought, bonded or vouched in, for §21.
pub async fn history_rows<D: Db>(db: &D, who: &str) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT kind, state, amount, seller = ?1 AS selling, buyer = ?1 AS buying,
                    bondholder = ?1 AS bonding, vouchee IS NOT NULL AS vouching,
                    bondholder, verifier, arbiter, created, expires, updated,
                    json_extract(record, '$.history[#-1].op') AS closing_op,
                    json_extract(record, '$.history[#-1].by') AS closed_by,
                    (state = 'refunded' AND json_extract(record, '$.history[#-1].by') = buyer
                     AND NOT EXISTS (SELECT 1 FROM json_each(json_extract(record, '$.history'))
                                      WHERE json_extract(value, '$.op') = 'deliver')) AS cancelled
               FROM libro_contracts
              WHERE seller = ?1 OR buyer = ?1 OR bondholder = ?1
              ORDER BY updated, id",
            who
        ),
    )
    .await
}

/// Where the tick's upkeep looks for operations still waiting: this house's `domain`, its
/// Libro's address, and the earliest first arrival (`since`) of another house's operation that
/// may still be decided (its life).
#[derive(Debug, Clone, Copy)]
pub struct Waiting<'a> {
    pub domain: &'a str,
    pub libro: &'a str,
    pub since: i64,
}

/// The SQL of "an operation received before deadline `$deadline` naming `$id` (in its body's
/// `$key`) waits undecided": a job of this house's agents to its Libro still pending that was
/// due before the deadline (`?3` the domain, `?4` the Libro), or a first arrival of another
/// house's settlement kept in `libro_received` before the deadline, and not decided since; either
/// within its life (received at or after `?5`: an operation lives an hour, local or foreign).
/// A read (`contract`) holds nothing up.
macro_rules! waiting {
    ($key:literal, $id:literal, $deadline:literal) => {
        concat!(
            "(EXISTS (SELECT 1 FROM jobs wj JOIN outbox wo ON wo.envelope_id = wj.envelope_id
                      WHERE wj.domain = ?3 AND wj.state = 'pending' AND wj.not_before < ",
            $deadline,
            "
                        AND wj.not_before >= ?5
                        AND json_extract(wo.envelope, '$.content.body.",
            $key,
            "') = ",
            $id,
            "
                        AND json_extract(wo.envelope, '$.content.body.op') <> 'contract'
                        AND EXISTS (SELECT 1 FROM json_each(wj.recipients) WHERE value = ?4))
              OR EXISTS (SELECT 1 FROM libro_received wr
                          WHERE wr.names = ",
            $id,
            " AND wr.at < ",
            $deadline,
            " AND wr.at >= ?5
                            AND NOT EXISTS (SELECT 1 FROM libro_ops wx WHERE wx.envelope_id = wr.envelope_id)))"
        )
    };
}
pub(crate) use waiting;

/// Bonds past their `expires` still posted, oldest first; not one that an operation received
/// before it expired still waits to decide (a verifier's forfeit in the queue goes first, issue 34).
pub async fn bonds_due<D: Db>(db: &D, now: i64, limit: i64, w: Waiting<'_>) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            concat!(
                "SELECT record, version FROM libro_contracts c
                  WHERE kind = 'bond' AND state = 'posted' AND expires <= ?1 AND NOT ",
                waiting!("contract", "c.id", "c.expires"),
                " ORDER BY expires LIMIT ?2"
            ),
            now,
            limit,
            w.domain,
            w.libro,
            w.since
        ),
    )
    .await
}

/// Issues owed and not yet posted.
pub async fn due<D: Db>(db: &D, limit: i64) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT cause, account, amount, concept FROM libro_due ORDER BY at, cause LIMIT ?", limit)).await
}

/// Owes `amount` to `account` for `cause` (a welcome gift), to be posted.
pub fn owe(cause: &str, account: &str, amount: i64, concept: &str, at: i64) -> Stmt {
    stmt!(
        "INSERT INTO libro_due (cause, account, amount, concept, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (cause) DO NOTHING",
        cause,
        account,
        amount,
        concept,
        at
    )
}

/// Owes `address` its welcome gift: the house's `welcome` plus, with an invitation `code`, the
/// invitation's `welcome` (nothing when the sum is 0; at most one amount's worth).
pub fn owe_welcome(address: &nyx5_proto::Address, welcome: i64, code: Option<&str>, at: i64) -> Stmt {
    stmt!(
        "INSERT INTO libro_due (cause, account, amount, concept, at)
         SELECT ?1, ?2, min(g, ?6), 'welcome', ?3
           FROM (SELECT ?4 + coalesce((SELECT welcome FROM invitations WHERE code = ?5), 0) AS g)
          WHERE g > 0
         ON CONFLICT (cause) DO NOTHING",
        format!("welcome:{address}"),
        address.as_str(),
        at,
        welcome.max(0),
        code,
        nyx5_proto::limits::MAX_AMOUNT
    )
}

/// The issue owed for `cause`, if it still is.
pub async fn owed<D: Db>(db: &D, cause: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT cause, account, amount, concept FROM libro_due WHERE cause = ?", cause)).await
}

/// The issue owed for `cause` is posted.
pub fn paid(cause: &str) -> Stmt {
    stmt!("DELETE FROM libro_due WHERE cause = ?", cause)
}

/// An operation refused for good (migration 0007): its code and reason stay the envelope's
/// answer. Nothing is written when the envelope has an answer already.
pub fn refused(envelope_id: &str, operator: &str, op: &str, sha256: &str, at: i64, refusal: &Error) -> Stmt {
    stmt!(
        "INSERT INTO libro_ops (envelope_id, operator, op, sha256, at, receipt, refused, refused_name, reason)
         VALUES (?, ?, ?, ?, ?, '', ?, ?, ?) ON CONFLICT (envelope_id) DO NOTHING",
        envelope_id,
        operator,
        op,
        sha256,
        at,
        i64::from(refusal.code()),
        refusal.name(),
        refusal.reason.as_ref()
    )
}

/// An operation done: the envelope, who, its hash and the operator's receipt.
pub fn done(envelope_id: &str, operator: &str, op: &str, sha256: &str, at: i64, receipt: &str) -> Stmt {
    stmt!(
        "INSERT INTO libro_ops (envelope_id, operator, op, sha256, at, receipt) VALUES (?, ?, ?, ?, ?, ?)",
        envelope_id,
        operator,
        op,
        sha256,
        at,
        receipt
    )
}

/// What an entry row holds.
#[derive(Debug)]
pub struct NewEntry<'a> {
    pub n: i64,
    pub id: &'a str,
    pub cause: &'a str,
    pub house: &'a str,
    pub at: i64,
    pub prev: &'a str,
    pub sha256: &'a str,
    pub lines: &'a str,
    pub entry: &'a str,
}

/// How many of the newest entries the house's own statement looks through.
pub const HOUSE_STATEMENT_SPAN: i64 = 10_000;

/// Appends an entry (the triggers check it and post its lines), with the house's balance after
/// it: the previous entry's and its `casa@` delta (migration 0034: the house's account has no
/// lines of its own).
pub fn append(e: &NewEntry<'_>) -> Stmt {
    stmt!(
        "INSERT INTO libro_entries (n, id, cause, house, at, prev, sha256, lines, entry, house_balance)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,
                 coalesce((SELECT p.house_balance FROM libro_entries p WHERE p.n = ?1 - 1), 0)
                 + coalesce((SELECT sum(json_extract(j.value, '$.delta')) FROM json_each(?8) j
                              WHERE json_extract(j.value, '$.account') = 'casa@' || ?4), 0))",
        e.n,
        e.id,
        e.cause,
        e.house,
        e.at,
        e.prev,
        e.sha256,
        e.lines,
        e.entry
    )
}

/// The columns of a contract row.
#[derive(Debug)]
pub struct ContractRow<'a> {
    pub id: &'a str,
    pub kind: Kind,
    pub state: ContractState,
    /// Its party in each role, in the order of `Role::ALL` (the columns' order).
    pub parties: [Option<&'a str>; 7],
    pub amount: i64,
    pub expires: Option<i64>,
    pub now: i64,
    pub record: &'a str,
}

/// A new contract (its id is taken once: a quote is accepted once).
pub fn insert_contract(c: &ContractRow<'_>) -> Stmt {
    let [seller, buyer, bondholder, verifier, beneficiary, arbiter, vouchee] = c.parties;
    stmt!(
        "INSERT INTO libro_contracts (id, kind, state, seller, buyer, bondholder, verifier, beneficiary, arbiter,
                                      vouchee, amount, expires, created, updated, record)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        c.id,
        c.kind.as_str(),
        c.state.as_str(),
        seller,
        buyer,
        bondholder,
        verifier,
        beneficiary,
        arbiter,
        vouchee,
        c.amount,
        c.expires,
        c.now,
        c.now,
        c.record
    )
}

/// A contract changes, if it still has `version` (the guard fails the batch otherwise).
pub fn update_contract(id: &str, version: i64, state: ContractState, record: &str, now: i64) -> [Stmt; 2] {
    [
        guard!("libro_version", "EXISTS (SELECT 1 FROM libro_contracts WHERE id = ? AND version = ?)", id, version),
        stmt!(
            "UPDATE libro_contracts SET state = ?, record = ?, updated = ?, version = version + 1 WHERE id = ?",
            state.as_str(),
            record,
            now,
            id
        ),
    ]
}

/// The columns of a new mandate.
#[derive(Debug)]
pub struct MandateRow<'a> {
    pub id: &'a str,
    pub grantor: &'a str,
    pub grantee: &'a str,
    pub cap: i64,
    pub expires: Option<i64>,
    pub parent: Option<&'a str>,
    pub root: &'a str,
    pub chain: &'a str,
    pub contract: Option<&'a str>,
    pub now: i64,
    pub record: &'a str,
}

pub fn insert_mandate(m: &MandateRow<'_>) -> Stmt {
    stmt!(
        "INSERT INTO libro_mandates (id, grantor, grantee, cap, spent, state, expires, parent, root, chain, contract,
                                     created, record)
         VALUES (?, ?, ?, ?, 0, 'active', ?, ?, ?, ?, ?, ?, ?)",
        m.id,
        m.grantor,
        m.grantee,
        m.cap,
        m.expires,
        m.parent,
        m.root,
        m.chain,
        m.contract,
        m.now,
        m.record
    )
}

/// `spent` of mandate `id` rises by `amount`, if it still has `version` (and the CHECK keeps it
/// within its cap).
pub fn spend(id: &str, version: i64, amount: i64) -> [Stmt; 2] {
    [
        guard!("libro_version", "EXISTS (SELECT 1 FROM libro_mandates WHERE id = ? AND version = ?)", id, version),
        stmt!("UPDATE libro_mandates SET spent = spent + ?, version = version + 1 WHERE id = ?", amount, id),
    ]
}

/// `spent` of the mandates `links` falls by `amount`: a waiting charge's reservation given back.
pub fn unspend(links: &[String], amount: i64) -> Stmt {
    let links = nyx5_proto::Value::Array(links.iter().map(|l| l.as_str().into()).collect()).canonical_string();
    stmt!(
        "UPDATE libro_mandates SET spent = spent - ?, version = version + 1 WHERE id IN (SELECT value FROM json_each(?))",
        amount,
        links
    )
}

/// Mandate `id` (if it still has `version`) and every active mandate under it are revoked.
pub fn revoke(id: &str, version: i64, below: i64) -> [Stmt; 3] {
    [
        guard!(
            "libro_version",
            "EXISTS (SELECT 1 FROM libro_mandates WHERE id = ? AND version = ? AND state = 'active')",
            id,
            version
        ),
        // The mandates under it are those read (and told): one granted meanwhile fails the batch,
        // which is read and decided again.
        guard!(
            "libro_below",
            "(WITH RECURSIVE under(id) AS (
                SELECT id FROM libro_mandates WHERE parent = ?1 AND state = 'active'
                UNION ALL
                SELECT m.id FROM libro_mandates m JOIN under u ON m.parent = u.id WHERE m.state = 'active')
              SELECT count(*) FROM under) = ?2",
            id,
            below
        ),
        stmt!(
            "UPDATE libro_mandates SET state = 'revoked', version = version + 1
              WHERE state = 'active' AND (id = ?1 OR EXISTS (SELECT 1 FROM json_each(chain) WHERE value = ?1))",
            id
        ),
    ]
}

/// The active mandates under mandate `id` (through `parent`, at any depth): `n`, how many, and
/// `holders`, a JSON list of their distinct grantees, nearest first, at most `limit`.
pub async fn below<D: Db>(db: &D, id: &str, limit: i64) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "WITH RECURSIVE under(id, depth) AS (
                SELECT id, 1 FROM libro_mandates WHERE parent = ?1 AND state = 'active'
                UNION ALL
                SELECT m.id, u.depth + 1 FROM libro_mandates m JOIN under u ON m.parent = u.id
                 WHERE m.state = 'active')
             SELECT (SELECT count(*) FROM under) AS n,
                    (SELECT json_group_array(grantee) FROM
                       (SELECT m.grantee, min(u.depth) AS d FROM under u JOIN libro_mandates m ON m.id = u.id
                         GROUP BY m.grantee ORDER BY d, m.grantee LIMIT ?2)) AS holders",
            id,
            limit
        ),
    )
    .await
}

/// A receipt into a local agent's mailbox (the house's own mail: no quota), if the agent
/// exists and its block list holds none of `blocks` (a JSON list: the operator's entries).
pub fn deliver_local(local: &str, envelope_id: &str, sender: &str, envelope: &str, now: i64, blocks: &str) -> Stmt {
    stmt!(
        concat!(
            crate::store::mailbox::mailbox_q!(),
            "INSERT INTO mailbox (seq, local, envelope_id, sender, envelope, received_at, total_n, total_bytes)
             SELECT q.seq, q.local, ?2, ?3, ?4, ?5, q.tn, q.tb FROM q
             WHERE NOT EXISTS (SELECT 1 FROM lists WHERE local = ?1 AND kind = 'block'
                               AND entry IN (SELECT value FROM json_each(?6)))
             ON CONFLICT (local, envelope_id) DO NOTHING"
        ),
        local,
        envelope_id,
        sender,
        envelope,
        now,
        blocks
    )
    .in_mailbox(local)
}

/// Room past a mailbox's quota that [`deliver_counted`] may use: none for a stranger to the
/// operator; [`Lane::AGREED`] for a party who agreed to hear from it (issue 34 review, M3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    pub envelopes: i64,
    pub bytes: i64,
}

impl Lane {
    /// No room past the quota.
    pub const NONE: Lane = Lane { envelopes: 0, bytes: 0 };
    /// The Libro's reserved lane: receipts and notices a party agreed to (its sale, the forfeit of
    /// its bond, the expiry of an approval it is party to) still arrive when others filled its
    /// mailbox, up to 100 envelopes and 4 MiB past the quota. Bounded, because what a party agreed
    /// to hear can still be many (a grantee's charges under a mandate); the party empties it by
    /// acknowledging as it does its quota.
    pub const AGREED: Lane = Lane { envelopes: 100, bytes: 4 << 20 };
}

/// A receipt or notice from `libro@` about an operation of `sender`'s (`operator`), for a local
/// party other than the operator: delivered as mail from the operator would be, within the
/// mailbox's quota (and `lane` past it) and past its block list (`blocks`, the operator's entries), or not at all —
/// never failing the batch, so a full or closed mailbox holds up no settlement. One statement: the
/// envelope (with its `bytes`, so the quota counts it until it is acknowledged, and the mailbox's
/// tally one envelope and its bytes more) when the agent exists, blocks none of `blocks` and has
/// room. What the lane took past the quota stays counted (acknowledging only lowers what a mailbox
/// holds), and mail finds the mailbox full until it is acknowledged.
pub fn deliver_counted(
    local: &str,
    envelope_id: &str,
    sender: &str,
    envelope: &str,
    now: i64,
    blocks: &str,
    (quota, lane): (crate::store::mailbox::Quota, Lane),
) -> Stmt {
    let bytes = i64::try_from(envelope.len()).unwrap_or(i64::MAX);
    stmt!(
        concat!(
            crate::store::mailbox::mailbox_q!(),
            "INSERT INTO mailbox (seq, local, envelope_id, sender, received_at, bytes, total_n, total_bytes, envelope)
             SELECT q.seq, q.local, ?2, ?3, ?5, ?7, q.tn + 1, q.tb + ?7, ?4 FROM q
             WHERE NOT EXISTS (SELECT 1 FROM lists WHERE local = ?1 AND kind = 'block'
                               AND entry IN (SELECT value FROM json_each(?6)))
               AND q.held_n + 1 <= ?8 + ?10 AND q.held_bytes + ?7 <= ?9 + ?11
               AND (?12 OR NOT EXISTS (SELECT 1 FROM shard_moving AS sm WHERE sm.local = q.local))
             ON CONFLICT (local, envelope_id) DO NOTHING"
        ),
        local,
        envelope_id,
        sender,
        envelope,
        now,
        blocks,
        bytes,
        quota.max_envelopes,
        quota.max_bytes,
        lane.envelopes,
        lane.bytes,
        false
    )
    .in_mailbox(local)
    // A mailbox moving off its database takes no receipt there (skipped, never failing the
    // batch); from a hand-off it is not skipped: it waits and applies where the mailbox ends up.
    .on_handoff(11, true)
}

/// When this house first received operation `envelope_id` (of hash `sha256`), if it remembers:
/// the time its job for `domain` (this house) became due (`queued`), and when it was sent
/// (`sent`, the outbox row's time), when one of its agents queued it; the first arrival
/// [`remember_received`] kept (`arrived`), when another house's retry brings it again. One row
/// always (an aggregate), its columns NULL where nothing is remembered.
pub async fn received<D: Db>(db: &D, envelope_id: &str, sha256: &str, domain: &str) -> Result<Option<Row>, Error> {
    one(
        db,
        stmt!(
            "SELECT min(j.not_before) AS queued, min(o.created_at) AS sent,
                    (SELECT at FROM libro_received WHERE envelope_id = ?1 AND sha256 = ?2) AS arrived
               FROM outbox AS o JOIN jobs AS j ON j.envelope_id = o.envelope_id
              WHERE o.envelope_id = ?1 AND o.sha256 = ?2 AND j.domain = ?3",
            envelope_id,
            sha256,
            domain
        ),
    )
    .await
}

/// Remembers that operation `envelope_id` (of hash `sha256`) first arrived `at` (the first
/// arrival stays), naming `names` (the contract or approval a settlement is about).
pub fn remember_received(envelope_id: &str, sha256: &str, at: i64, names: Option<&str>) -> Stmt {
    stmt!(
        "INSERT INTO libro_received (envelope_id, sha256, at, names) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        envelope_id,
        sha256,
        at,
        names
    )
}

/// Whether contract or approval `id` names `who` as one of its parties.
pub async fn names_party<D: Db>(db: &D, id: &str, who: &str) -> Result<bool, Error> {
    let row = one(
        db,
        stmt!(
            "SELECT (EXISTS (SELECT 1 FROM libro_contracts WHERE id = ?1
                             AND ?2 IN (seller, buyer, bondholder, verifier, beneficiary, arbiter))
                  OR EXISTS (SELECT 1 FROM libro_pending p WHERE p.id = ?1 AND (p.operator = ?2
                             OR EXISTS (SELECT 1 FROM libro_pending_approvers a WHERE a.pending = p.id AND a.approver = ?2))))
                   AS named",
            id,
            who
        ),
    )
    .await?;
    Ok(row.and_then(|r| r.int("named")) == Some(1))
}

/// Forgets up to `limit` first arrivals from before `before`, oldest first.
pub fn forget_received(before: i64, limit: i64) -> Stmt {
    stmt!(
        "DELETE FROM libro_received WHERE (envelope_id, sha256) IN
           (SELECT envelope_id, sha256 FROM libro_received WHERE at < ? ORDER BY at LIMIT ?)",
        before,
        limit
    )
}

/// A guard that fails the batch unless every mandate of `chain` (a JSON list of ids) is active.
pub fn chain_active(chain: &str) -> Stmt {
    guard!(
        "libro_chain_active",
        "NOT EXISTS (SELECT 1 FROM libro_mandates WHERE id IN (SELECT value FROM json_each(?)) AND state != 'active')",
        chain
    )
}

/// A guard that fails the batch when `grantor` holds more than `max` active mandates after it:
/// the count the decision read may be stale (read again, the kernel refuses).
pub fn mandates_within(grantor: &str, max: i64) -> Stmt {
    guard!(
        "mandates_within",
        "(SELECT count(*) FROM libro_mandates WHERE grantor = ? AND state = 'active') <= ?",
        grantor,
        max
    )
}

/// The columns of a new pending approval.
#[derive(Debug)]
pub struct PendingRow<'a> {
    pub id: &'a str,
    pub operator: &'a str,
    pub payer: Option<&'a str>,
    pub amount: i64,
    pub expires: i64,
    pub now: i64,
    pub envelope: &'a str,
    pub record: &'a str,
    /// JSON list of who may approve it.
    pub approvers: &'a str,
}

/// A new pending approval, its approvers, and the guards that its operator has at most `max`
/// waiting and at most `max_kept` kept in all.
pub fn insert_pending(p: &PendingRow<'_>, max: i64, max_kept: i64) -> [Stmt; 4] {
    [
        stmt!(
            "INSERT INTO libro_pending (id, operator, state, payer, amount, expires, created, updated, envelope, record)
             VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)",
            p.id,
            p.operator,
            p.payer,
            p.amount,
            p.expires,
            p.now,
            p.now,
            p.envelope,
            p.record
        ),
        stmt!(
            "INSERT OR IGNORE INTO libro_pending_approvers (pending, approver) SELECT ?, value FROM json_each(?)",
            p.id,
            p.approvers
        ),
        guard!(
            "pending_within",
            "(SELECT count(*) FROM libro_pending WHERE operator = ? AND state = 'pending') <= ?",
            p.operator,
            max
        ),
        guard!(
            "approvals_kept_within",
            "(SELECT count(*) FROM libro_pending WHERE operator = ?) <= ?",
            p.operator,
            max_kept
        ),
    ]
}

/// Approval `id` as it becomes, if it still has `version` and is still pending.
pub fn update_pending(id: &str, version: i64, state: ApprovalState, record: &str, now: i64) -> [Stmt; 2] {
    [
        guard!(
            "libro_version",
            "EXISTS (SELECT 1 FROM libro_pending WHERE id = ? AND version = ? AND state = 'pending')",
            id,
            version
        ),
        stmt!(
            "UPDATE libro_pending SET state = ?, record = ?, updated = ?, version = version + 1 WHERE id = ?",
            state.as_str(),
            record,
            now,
            id
        ),
    ]
}

/// A movement `subject`'s authority counts: the rows past the hour go, this one is written, and
/// the hour may hold at most `limit` (else the batch lost a race: decide again). Without a limit
/// (a movement a human approved past it) it is counted all the same.
pub fn record_use(subject: &str, at: i64, envelope: &str, amount: i64, limit: Option<i64>) -> Vec<Stmt> {
    let since = at - nyx5_proto::authority::HOUR_MS;
    let mut out = vec![
        stmt!("DELETE FROM libro_uses WHERE subject = ? AND at <= ?", subject, since),
        stmt!(
            "INSERT OR IGNORE INTO libro_uses (subject, at, envelope, amount) VALUES (?, ?, ?, ?)",
            subject,
            at,
            envelope,
            amount
        ),
    ];
    if let Some(limit) = limit {
        out.push(guard!(
            "uses_within",
            "(SELECT count(*) FROM libro_uses WHERE subject = ? AND at > ?) <= ?",
            subject,
            since,
            limit
        ));
    }
    out
}

/// The tick's tidying: counts older than the hour, and approvals decided or expired more than
/// `keep_ms` ago, at most `limit` of each.
pub fn prune_authority(now: i64, keep_ms: i64, limit: i64) -> Vec<Stmt> {
    let before = now - keep_ms;
    vec![
        stmt!(
            "DELETE FROM libro_uses WHERE (subject, envelope) IN
               (SELECT subject, envelope FROM libro_uses WHERE at <= ? LIMIT ?)",
            now - nyx5_proto::authority::HOUR_MS,
            limit
        ),
        stmt!(
            "DELETE FROM libro_pending_approvers WHERE pending IN
               (SELECT id FROM libro_pending WHERE state <> 'pending' AND updated <= ? LIMIT ?)",
            before,
            limit
        ),
        stmt!(
            "DELETE FROM libro_pending WHERE id IN
               (SELECT id FROM libro_pending WHERE state <> 'pending' AND updated <= ?
                  AND NOT EXISTS (SELECT 1 FROM libro_pending_approvers a WHERE a.pending = libro_pending.id) LIMIT ?)",
            before,
            limit
        ),
    ]
}

/// Pending approvals past their `expires`, oldest first, with the balance of their hold; not one
/// that an `approve` or `decline` received before it expired still waits to decide.
pub async fn pending_due<D: Db>(db: &D, now: i64, limit: i64, w: Waiting<'_>) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            concat!(
                "SELECT p.record, p.version,
                    (SELECT balance FROM libro_lines WHERE account = json_extract(p.record, '$.hold.held_in')
                      ORDER BY n DESC LIMIT 1) AS held
               FROM libro_pending p WHERE p.state = 'pending' AND p.expires <= ?1 AND NOT ",
                waiting!("pending", "p.id", "p.expires"),
                " ORDER BY p.expires LIMIT ?2"
            ),
            now,
            limit,
            w.domain,
            w.libro,
            w.since
        ),
    )
    .await
}

/// Approvals `who` asked for or may decide, newest first.
pub async fn pending_of<D: Db>(db: &D, who: &str, limit: i64) -> Result<Vec<Row>, Error> {
    query(
        db,
        stmt!(
            "SELECT record, version FROM libro_pending
              WHERE operator = ?1 OR id IN (SELECT pending FROM libro_pending_approvers WHERE approver = ?1)
              ORDER BY state = 'pending' DESC, created DESC, id LIMIT ?2",
            who,
            limit
        ),
    )
    .await
}

/// Cancels the envelopes `ids` (a JSON array) the Libro queued and has not delivered yet: their
/// pending jobs, then each envelope no job is left for. A job already delivered or bounced
/// stays, and so does its envelope (what was told is not recalled).
pub fn cancel_queued(ids: &str) -> [Stmt; 2] {
    [
        stmt!("DELETE FROM jobs WHERE state = 'pending' AND envelope_id IN (SELECT value FROM json_each(?))", ids),
        stmt!(
            "DELETE FROM outbox WHERE envelope_id IN (SELECT value FROM json_each(?))
               AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.envelope_id = outbox.envelope_id)",
            ids
        ),
    ]
}
