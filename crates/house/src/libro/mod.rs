//! The Libro (spec §14–§21): the house's double-entry ledger, operated by envelopes to
//! `libro@<house>`.
//!
//! An operation arrives like any mail (`/outbound` for a local agent, `/inbound` for a foreign
//! one) and reaches [`Libro::operate`] from `Mailbox::accept`. It is read (`op::Op`), checked
//! against the operator's card (a current key to move money, a delegated card's `scope.cap`),
//! and decided by the pure [`kernel::decide`] over what one query read (`store::libro::facts`).
//! Then one batch writes everything: the operation's row (so a repeat changes nothing), the
//! signed entry (the schema checks its sum and its link, and posts its lines), the contract and
//! mandates (guarded by the versions the decision read), the receipts (local parties' mailboxes
//! directly, foreign parties through the queue) and any deadline notices. A batch that lost a
//! race is read, decided and written again; a refusal goes back to `accept`, and the sender's
//! house bounces it.

pub mod history;
pub mod tareas;
pub mod verifica;

use nyx5_proto::address::uuid_v4;
use nyx5_proto::card::{AgentCard, AgentCardDraft};
use nyx5_proto::crypto::{Context, hex, sha256};
use nyx5_proto::envelope::{Content, Draft, Kind, Payload};
use nyx5_proto::json::obj;
use nyx5_proto::libro::{EntryDraft, GENESIS, Primitive, escrow_account, house_account, lines_value};
use nyx5_proto::receipt::{self, Receipt};
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Object, Refusal, Timestamp, Value, Verified};

use crate::port_error;
use crate::ports::{Db, Net, PortError, Stmt};
use crate::store::libro as store;
use crate::store::queue::{self as queue_store, NewJob, Outgoing};
use crate::view::{Core, Post, view};
use nyx5_rules::mailbox::Outcome;

use nyx5_rules::libro::authority::Step;
use nyx5_rules::libro::model::{
    CardRule, ContractWrite, Ctx, Decision, Facts, MandateWrite, PendingWrite, Posting, Read, Rules,
};
use nyx5_rules::libro::op::Op;
use nyx5_rules::libro::state::Role;
use nyx5_rules::libro::{authority, kernel, model};

/// The Libro's local part.
pub use nyx5_rules::libro::LIBRO;
/// The extension a house with a Libro declares.
pub const EXT_LIBRO: &str = "urn:nyx5:ext:libro";
/// The media of an operation.
pub const OP_MEDIA: &str = nyx5_proto::ops::MEDIA;
/// The media of a deadline notice.
pub const NOTICE_MEDIA: &str = "application/nyx5.aviso+json";
/// How many times an operation is read and decided again after losing a race.
pub const ATTEMPTS: usize = 4;
/// Most bonds one tick returns, and most owed issues it posts.
pub const UPKEEP_BATCH: i64 = 20;
pub use nyx5_rules::libro::KEEP_DECIDED_MS;
/// The house's own agents, signing with the domain key.
pub const SYSTEM: [&str; 4] = [LIBRO, verifica::VERIFICA, tareas::TAREAS, nyx5_rules::a2a::GATEWAY];
/// The operations `libro@`'s card lists.
pub const OPS: [&str; 14] = [
    "accept",
    "deliver",
    "release",
    "refund",
    "bond",
    "forfeit",
    "mandate",
    "charge",
    "revoke",
    "balance",
    "statement",
    "contract",
    "approve",
    "decline",
];

/// The card of `libro@<domain>`: the domain key as its `sig`, certified by itself, saying the
/// fee and the operations.
pub fn libro_card(
    domain_card: &Verified<nyx5_proto::DomainCard>,
    key: &nyx5_proto::crypto::SigningKey,
    since: Timestamp,
    fee_bps: i64,
) -> Result<Verified<AgentCard>, Error> {
    let address = Address::new(LIBRO, domain_card.domain())?;
    let mut draft = AgentCardDraft::new(address, key.public(), None, since);
    draft.capabilities = obj([
        ("accepts", Value::Array(vec![OP_MEDIA.into()])),
        (
            "libro",
            Value::Object(obj([
                ("currency", nyx5_proto::libro::CURRENCY.into()),
                ("fee_bps", fee_bps.into()),
                ("ops", Value::Array(OPS.iter().map(|o| (*o).into()).collect())),
            ])),
        ),
    ]);
    draft.certify(key)?.verify(domain_card, None, since)
}

fn internal(what: &str) -> Error {
    Error::new(ErrorKind::Internal, what.to_owned())
}

fn text_of(v: &Value) -> Result<String, Error> {
    String::from_utf8(v.canonical()).map_err(|_| internal("canonical JSON is not UTF-8"))
}

/// An envelope's canonical text.
fn text_of_envelope(env: &Envelope) -> Result<String, Error> {
    String::from_utf8(env.canonical()).map_err(|_| internal("canonical JSON is not UTF-8"))
}

/// What a stored JSON column holds, parsed.
fn parse_json(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| Value::parse_str(t).ok())
}

/// The journal's head: the last entry's number and hash.
pub(crate) type Head = (i64, String);

/// What a stamp or a vouch needs from the Libro.
#[derive(Debug, Clone)]
pub(crate) struct StampFacts {
    pub balance: i64,
    pub head: Head,
    pub bond: Option<model::Contract>,
    /// Movements the sender's own card's authority allowed in the past hour.
    pub uses: i64,
}

/// The operating envelope a pending approval keeps, from the row [`store::libro::facts`] read.
fn pending_envelope(row: &crate::ports::Row) -> Option<String> {
    match parse_json(row.text("pending")) {
        Some(Value::Object(p)) => p.get("envelope").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// How many delegations up the approver of a card's authority is looked for.
const MAX_DELEGATION_DEPTH: usize = 8;

/// The facts an operation decides on, the head, and whether it was done before, from the row
/// [`store::libro::facts`] read.
fn facts_of(row: &crate::ports::Row) -> Result<(Facts, Head, Option<Object>), Error> {
    let mut facts = Facts::default();
    if let Some(Value::Object(b)) = parse_json(row.text("balances")) {
        for (k, v) in b {
            facts.balances.insert(k, v.as_safe_integer().unwrap_or(0));
        }
    }
    if let Some(Value::Object(c)) = parse_json(row.text("contract")) {
        let version = c.get("version").and_then(Value::as_safe_integer).unwrap_or(0);
        if let Some(Value::Object(record)) = c.get("record") {
            facts.contract = Some(model::Contract::from_record(record.clone(), version)?);
        }
    }
    if let Some(Value::Array(list)) = parse_json(row.text("chain")) {
        let mut chain = Vec::new();
        for m in list {
            let m = m.as_object().ok_or_else(|| internal("stored mandate"))?;
            let version = m.get("version").and_then(Value::as_safe_integer).unwrap_or(0);
            let record = m.get("record").and_then(Value::as_object).ok_or_else(|| internal("stored mandate"))?;
            chain.push(model::Mandate::from_value(record, version)?);
        }
        // Root first: the order of the last link's own chain.
        if let Some(order) = chain.iter().max_by_key(|m| m.chain.len()).map(|m| m.chain.clone()) {
            let rank = |m: &model::Mandate| order.iter().position(|id| id == &m.id).unwrap_or(usize::MAX);
            chain = nyx5_proto::vecmap::sort_by(chain, |a, b| rank(a).cmp(&rank(b)));
        }
        facts.chain = chain;
    }
    if let Some(Value::Object(p)) = parse_json(row.text("pending")) {
        let version = p.get("version").and_then(Value::as_safe_integer).unwrap_or(0);
        if let Some(Value::Object(record)) = p.get("record") {
            facts.pending = Some(model::Pending::from_value(record, version).map_err(|e| internal(&e.reason))?);
        }
    }
    if let Some(Value::Object(u)) = parse_json(row.text("uses")) {
        for (k, v) in u {
            facts.uses.insert(k, v.as_safe_integer().unwrap_or(0));
        }
    }
    facts.pending_count = row.int("pending_count").unwrap_or(0);
    facts.approvals_kept = row.int("approvals_kept").unwrap_or(0);
    facts.known = row.int("known") == Some(1);
    facts.unchecked = row.int("unchecked") == Some(1);
    facts.active_mandates = row.int("mandates").unwrap_or(0);
    let head = (row.int("head_n").unwrap_or(0), row.text("head_sha").unwrap_or(GENESIS).to_owned());
    let done = match parse_json(row.text("done")) {
        Some(Value::Object(o)) => Some(o),
        _ => None,
    };
    Ok((facts, head, done))
}

/// The Libro and the house's system agents (`verifica@`, `tareas@`): operations, their
/// decisions and postings, and the agents' upkeep.
pub struct Libro<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Libro);

impl<'h, D: Db, N: Net> Libro<'h, D, N> {
    /// The rules the kernel applies here.
    pub fn libro_rules(&self) -> Rules {
        Rules {
            house: self.config.domain.clone(),
            fee_bps: self.config.fee_bps,
            approval_ttl_ms: self.config.approval_ttl_ms,
        }
    }

    /// Whether `a` is this house's Libro.
    pub fn is_libro(&self, a: &Address) -> bool {
        a.local() == LIBRO && a.domain() == self.config.domain
    }

    /// Whether `a` is one of this house's own agents (`libro@`, `verifica@`, `tareas@`), which
    /// hold no mailbox: receipts and notices for them are not written.
    pub fn is_system(&self, a: &Address) -> bool {
        a.domain() == self.config.domain && SYSTEM.contains(&a.local())
    }

    /// An operation by one of the house's own agents (`card`: `verifica@`, `tareas@`), envelope
    /// `id`, body `body`: signed with the domain key and taken by [`Libro::operate`], the door
    /// `Mailbox::accept` hands every agent's operation to, so it is answered, kept and
    /// deduplicated as theirs are (the Libro is never operated from the inside). Answers the
    /// Libro's outcome.
    pub(crate) async fn operate_as(
        &self,
        card: &Verified<AgentCard>,
        id: String,
        body: Object,
        in_reply_to: Option<&str>,
    ) -> Result<Outcome, Error> {
        let now = self.now();
        let libro = self.libro_address()?;
        let mut draft =
            Draft::new(id, card.address().clone(), vec![libro], now, Content::new(OP_MEDIA, Value::Object(body)));
        draft.kind = Kind::Task;
        draft.in_reply_to = in_reply_to.map(str::to_owned);
        let env = draft.build()?.sign(&self.config.key)?.verify(card, now)?;
        Ok(Box::pin(self.operate(&env, card)).await)
    }

    /// The statement counting an operation `op` by `from` in its window of operations this
    /// minute; none for the house's own agents, each of whose operations follows from a counted
    /// operation or mail. A local agent is counted with its subagents, under its root agent's
    /// address; an agent of another house under its sending site. Reads, settlements and the
    /// rest count apart ([`Op::budget`]): one agent's flood of statements leaves every other
    /// agent's budget, and its own settlements, as they were.
    ///
    /// A settlement by another house's agent that a contract or approval it decides names
    /// (`named`: the verifier's forfeit, the seller's delivery) counts under the agent's own
    /// address: another agent of its site, spending the site's budget on refusals, cannot spend
    /// it (issue 34 review, M1). Each such address is named by something on this Libro, so the
    /// windows one site can open are as many as the things naming its agents.
    ///
    /// An operation `counted` when it was sent is not counted again: a row less per operation
    /// (issue 36 §1, docs/decisions/0076-an-operation-counted-once.md; [`Libro::received`] says
    /// which are). Any other is counted here: another house's, one the house's own agent handed
    /// to `POST /inbound` directly, and one the house queued that is done in a later minute than
    /// it was sent in (deferred, retried, or from a backlog).
    fn count_operation(&self, from: &Address, op: &Op, at: i64, named: bool, counted: bool) -> Option<Stmt> {
        (!self.is_system(from) && !counted).then(|| {
            crate::store::agents::count_in_window(
                &self.operation_bucket(from, op, named),
                at / 60_000,
                self.config.inbound_per_domain_per_minute,
            )
        })
    }

    /// The window `Libro::count_operation` counts in: `libro:<budget>:<who>`, where `who` is
    /// a local agent's root address (`a.b.ana@h` → `ana@h`) or another house's site.
    pub fn operation_bucket(&self, from: &Address, op: &Op, named: bool) -> String {
        format!("libro:{}:{}", op.budget(), self.operation_counter(from, op, named))
    }

    /// Who an operation by `from` is counted against: a local agent's root address; the address
    /// of another house's agent settling what names it (`named`); else its sending site.
    fn operation_counter(&self, from: &Address, op: &Op, named: bool) -> String {
        if named && op.budget() == "settle" && from.domain() != self.config.domain {
            from.as_str().to_owned()
        } else if from.domain() == self.config.domain {
            let local = from.local();
            format!("{}@{}", local.rsplit('.').next().unwrap_or(local), from.domain())
        } else {
            crate::site::site(from.domain()).to_owned()
        }
    }

    /// The refusal when `from` has used its budget of `op`'s kind for this minute.
    fn too_many(&self, from: &Address, op: &Op, named: bool) -> Error {
        Refusal::TooManyOperations.because(format!(
            "too many {} operations from {} this minute; try again shortly",
            op.budget(),
            self.operation_counter(from, op, named)
        ))
    }

    /// Does the operation `env` (verified, from `card`) and says how it went: `Accepted` when
    /// done now, `Duplicate` when done before, `Rejected` with the refusal otherwise.
    ///
    /// A refusal decided on what the Libro holds (not a temporary one) is kept as the envelope's
    /// answer: the same envelope again is refused again, never done later (`keep_refusal`).
    pub async fn operate(&self, env: &Verified<Envelope>, card: &Verified<AgentCard>) -> Outcome {
        let op = match read_op(env) {
            Ok(op) => op,
            Err(e) => return Outcome::Rejected(e),
        };
        // One reading of the clock: the operation is judged at it.
        let now = self.now();
        let checked = match self.received(env, now).await {
            Ok(arrival) => self.operate_checked(env, card, &op, now, arrival).await.map_err(|e| (e, arrival.counted)),
            Err(e) => Err((e, false)),
        };
        let outcome = match checked {
            Ok(outcome) => outcome,
            Err((e, _)) if e.kind.is_temporary() || e.kind == ErrorKind::Internal => Outcome::Rejected(e),
            Err((e, counted)) => self.keep_refusal(env, &op, e, counted).await,
        };
        // Refused for a passing reason (a refusal for good at the cap included): not kept, so
        // its first arrival is, for the retry to be judged at.
        if let Outcome::Rejected(e) = &outcome
            && (e.kind.is_temporary() || e.kind == ErrorKind::Internal)
        {
            self.remember_received(env, &op).await;
        }
        outcome
    }

    /// When the house first received `env`, at the latest now: the time its job became due, when
    /// one of the house's agents queued it; else the first arrival [`Libro::remember_received`]
    /// kept; else now. Whether the house queued it (an operation it did not queue lives
    /// [`OP_LIFE_MS`] from then). And whether it was `counted` when it was sent: queued by
    /// one of the house's agents (`POST /outbound`, an approved draft) in the clock minute it
    /// is done in, and counted in that minute's envelopes of its root agent (the outbox's
    /// `rate_n`), where the house's envelopes a minute are no more than its operations a minute
    /// of one kind. The operations the Libro leaves uncounted in a minute are then at most the
    /// envelopes that minute let by.
    async fn received(&self, env: &Envelope, now: Timestamp) -> Result<Arrival, Error> {
        let row = store::received(self.db, env.id(), &env.sha256_hex(), &self.config.domain).await?;
        let queued = row.as_ref().and_then(|r| r.int("queued"));
        let sent = row.as_ref().and_then(|r| r.int("sent"));
        let arrived = row.as_ref().and_then(|r| r.int("arrived"));
        let at = queued.or(arrived).map_or(now.millis(), |at| at.min(now.millis()));
        let counted = counted_when_sent(
            sent,
            now.millis(),
            self.config.outbound_per_agent_per_minute,
            self.config.inbound_per_domain_per_minute,
        );
        Ok(Arrival { at: Timestamp(at), queued: queued.is_some(), counted })
    }

    /// Remembers when an operation of another house's agent, refused for a passing reason, first
    /// arrived: its retry is judged at that time. At most `inbound_per_domain_per_minute` such
    /// rows a minute per sending site; past that, or when the write fails, nothing is kept.
    async fn remember_received(&self, env: &Envelope, op: &Op) {
        if env.from().domain() == self.config.domain {
            return;
        }
        let now = self.now().millis();
        // A settlement of something that names its sender is always remembered, within a window
        // of its own address: other agents of its site cannot fill it (issue 34 review, M1).
        let named = match names(op) {
            Some(id) => store::names_party(self.db, id, env.from().as_str()).await.unwrap_or(false),
            None => false,
        };
        let who = if named { env.from().as_str() } else { crate::site::site(env.from().domain()) };
        let bucket = format!("libro:received:{who}");
        let cap = self.config.inbound_per_domain_per_minute;
        let stmts = vec![
            store::remember_received(env.id(), &env.sha256_hex(), now, names(op)),
            crate::store::agents::count_in_window(&bucket, now / 60_000, cap),
        ];
        let _kept = crate::live::batch(self.db, self.post.bell, stmts).await;
    }

    /// Writes `e` as the answer to `env`; when the envelope has an answer already (another copy
    /// was done or refused meanwhile), that one is the answer.
    async fn keep_refusal(&self, env: &Envelope, op: &Op, e: Error, counted: bool) -> Outcome {
        let sha = env.sha256_hex();
        let at = self.now().millis();
        let write = store::refused(env.id(), env.from().as_str(), op.name(), &sha, at, &e);
        // A kept refusal counts towards the sending site's operations this minute, as a done
        // operation does: refusals cannot fill the table faster than operations could. The
        // house's own agents' are not counted: each follows from a counted operation or mail.
        let stmts = std::iter::once(write).chain(self.count_operation(env.from(), op, at, false, counted)).collect();
        match crate::live::batch(self.db, self.post.bell, stmts).await {
            Err(PortError::Constraint { name }) if name == crate::store::constraint::RATE_CAP => {
                Outcome::Rejected(self.too_many(env.from(), op, false))
            }
            Ok(changes) if changes.first() == Some(&0) => match store::op_done(self.db, env.id()).await {
                Ok(Some(row)) => {
                    let refused = row.int("refused").map(|code| Refused {
                        code,
                        name: row.text("refused_name").unwrap_or_default(),
                        reason: row.text("reason").unwrap_or_default(),
                    });
                    done_before(row.text("operator"), row.text("sha256"), refused, env.from(), &sha)
                        .unwrap_or_else(Outcome::Rejected)
                }
                _ => Outcome::Rejected(e),
            },
            // Written, or not (the database failed): either way this is the answer now.
            _ => Outcome::Rejected(e),
        }
    }

    async fn operate_checked(
        &self,
        env: &Verified<Envelope>,
        card: &Verified<AgentCard>,
        op: &Op,
        now: Timestamp,
        arrival: Arrival,
    ) -> Result<Outcome, Error> {
        let sha = env.sha256_hex();
        // Judged at the time the house first received it: a flood, the queue or a retry never
        // makes a deadline pass under an operation (docs/SPEC.md §16).
        let Arrival { at: received, queued, counted } = arrival;
        let mut ctx = Ctx::new(env.from().clone(), env.id().to_owned(), sha.clone(), received);
        ctx.expires = env.expires();
        let rules = self.libro_rules();
        let accounts = accounts_of(env.from(), op);
        let mut lost: Option<String> = None;
        let mut checked = false;
        for _ in 0..ATTEMPTS {
            // One read: whether it was done before, and everything the decision needs.
            let of = store::FactsOf {
                accounts: &accounts,
                contract: op.contract(),
                mandate: op.mandate(),
                operator: env.from().as_str(),
                pending: op.pending(),
                since: now.millis() - nyx5_proto::authority::HOUR_MS,
                count_approvals: authority::may_wait(op),
            };
            let row = store::facts(self.db, env.id(), &of).await?;
            let (mut facts, mut head, done) = facts_of(&row)?;
            if let Some(done) = done {
                let text = |name: &str| done.get(name).and_then(Value::as_str).unwrap_or_default();
                let refused = done.get("refused").and_then(Value::as_safe_integer).map(|code| Refused {
                    code,
                    name: text("name"),
                    reason: text("reason"),
                });
                return done_before(
                    done.get("operator").and_then(Value::as_str),
                    done.get("sha256").and_then(Value::as_str),
                    refused,
                    env.from(),
                    &sha,
                );
            }
            // Past `expires`, an operation not done before is refused (what was done, or refused,
            // is answered as it was above, so a sender asking again learns the truth).
            env.check_not_expired(now)?;
            // So is one that outlived its hour (kept: it never goes through later).
            if !queued && env.from().domain() != self.config.domain {
                check_life(env, received, now)?;
            } else if queued {
                // A local operation lives as long from the time its job became due (issue 34
                // review, L3): one retried for days keeps no early time to be judged at.
                check_queued_life(env, received, now)?;
            }
            // This house's agents have an account here by being registered.
            facts.known |= env.from().domain() == self.config.domain;
            // A revoke stops every mandate under the one it names: their holders hear of it.
            if let Op::Revoke { mandate } = op {
                let below = store::below(self.db, mandate, kernel::MAX_CASCADE_NOTICES).await?;
                facts.below_count = below.as_ref().and_then(|r| r.int("n")).unwrap_or(0);
                facts.below = below
                    .as_ref()
                    .and_then(|r| r.text("holders"))
                    .and_then(|t| Value::parse_str(t).ok())
                    .and_then(|v| v.as_array().map(<[Value]>::to_vec))
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|v| v.as_str().and_then(|a| Address::parse(a).ok()))
                    .collect();
            }
            if !checked {
                // A stranger's creating operation is refused before anything is fetched for it.
                if !facts.known && op.creates() {
                    return Err(kernel::stranger(env.from(), &rules));
                }
                self.check_operator(env, card, op).await?;
                // Who approves what the operator's own card asks: only for what its card judges.
                if authority::judged_by_card(op) {
                    ctx.card = self.card_rule(card).await?;
                }
                checked = true;
            }
            let entry_id = self.new_id();
            let decision = match op {
                Op::Approve { .. } | Op::Decline { .. } => match authority::approval(op, &ctx, &facts)? {
                    Step::Decided(d) => *d,
                    Step::Complete(p) => {
                        let (d, h) = self.approved(env, &p, pending_envelope(&row), &rules, &entry_id).await?;
                        head = h;
                        d
                    }
                },
                _ => kernel::decide(op, &ctx, &rules, &facts, &entry_id)?,
            };
            let consenting = consenting(&facts, &decision);
            let named = named_in(&facts, env.from());
            let (stmts, queues) =
                self.write_decision(env, op, &decision, &entry_id, head, (&consenting, named, counted)).await?;
            match crate::live::batch(self.db, self.post.bell, stmts).await {
                Ok(_) => {
                    if queues {
                        self.post.queued.set(true);
                    }
                    return Ok(Outcome::Accepted);
                }
                Err(PortError::Constraint { name }) if name == store::OP_DONE => {
                    let row = store::op_done(self.db, env.id()).await?.ok_or_else(|| internal("operation row"))?;
                    let refused = row.int("refused").map(|code| Refused {
                        code,
                        name: row.text("refused_name").unwrap_or_default(),
                        reason: row.text("reason").unwrap_or_default(),
                    });
                    return done_before(row.text("operator"), row.text("sha256"), refused, env.from(), &sha);
                }
                Err(PortError::Constraint { name }) if name == crate::store::constraint::RATE_CAP => {
                    return Err(self.too_many(env.from(), op, named));
                }
                // Another claim took the desk's quota between its check and this batch.
                Err(PortError::Constraint { name }) if name == crate::store::constraint::TAREAS_QUOTA => {
                    return Err(
                        Refusal::TaskQuotaUsed.because("no quota is left for this task now (another claim came first)")
                    );
                }
                // A bond's id is its envelope's: taken by another contract, it never will be free.
                Err(PortError::Constraint { name }) if name == "libro_contracts.id" && matches!(op, Op::Bond(_)) => {
                    return Err(Refusal::ContractIdTaken.because(format!(
                        "contract id {} is taken; send the bond again under another envelope id",
                        env.id()
                    )));
                }
                Err(PortError::Constraint { name }) if store::RACES.contains(&name.as_str()) => lost = Some(name),
                Err(e) => return Err(port_error(e)),
            }
        }
        Err(match lost.as_deref() {
            Some("balance_negative") => {
                Refusal::InsufficientFunds.because("not enough balance for this operation at this moment")
            }
            _ => Refusal::LibroBusy.because("the Libro is busy; try again"),
        })
    }

    /// What the operator's card allows, checked once per operation: money moves only under the
    /// current key, a delegated card's `scope.cap` bounds what it commits, and a quote must be
    /// its seller's, verified through the resolver (refreshed once for an unknown key).
    async fn check_operator(&self, env: &Envelope, card: &Verified<AgentCard>, op: &Op) -> Result<(), Error> {
        if op.writes() && env.signature().map(|s| s.kid) != Some(card.sig()) {
            return Err(Refusal::NeedsCurrentKey.because(
                "an operation that moves money is signed with the agent's current key, not one in its rotation grace",
            ));
        }
        if let (Some(amount), Some(cap)) = (op.commits(), card.scope().and_then(|s| s.cap))
            && amount > cap
        {
            return Err(Refusal::OverDelegationCap.because(format!(
                "{} is delegated with a cap of {cap} tok; this operation commits {amount}",
                card.address()
            )));
        }
        if let Op::Accept { quote } = op {
            let now = self.now();
            let soft = |e: Error| {
                if e.kind.is_temporary() {
                    e
                } else {
                    Refusal::UnverifiableSeller.because(format!("the seller cannot be verified: {}", e.reason))
                }
            };
            let mut seller = self.lookup().resolve_agent(&quote.seller, false).await.map_err(soft)?;
            if let Ok(s) = nyx5_proto::sign::Signature::read(quote.object(), "signature")
                && !seller.accepts_key(&s.kid, now)
            {
                seller = self.lookup().resolve_agent(&quote.seller, true).await.map_err(soft)?;
            }
            // A seller's key in its rotation grace sells nothing, as it moves no money.
            if nyx5_proto::sign::Signature::read(quote.object(), "signature")?.kid != seller.sig() {
                return Err(Refusal::NeedsCurrentKey.because("the quote is not signed with its seller's current key"));
            }
            (**quote).clone().verify(&seller, now)?;
            if let Some(a) = &quote.arbiter
                && a.local() == verifica::VERIFICA
                && a.domain() == self.config.domain
            {
                if !self.config.verifica_enabled {
                    return Err(
                        Refusal::NoVerifica.because(format!("this house runs no verifica@; {a} cannot arbitrate"))
                    );
                }
                verifica::check_terms(quote.contract, quote.terms.as_ref(), &self.config.verifica_policy())?;
            }
        }
        Ok(())
    }

    /// The batch for a decision: operation row, entry, contract, mandates, receipts, notices;
    /// and whether it queues mail due now (a receipt for another house). `consenting`: the
    /// parties who agreed to hear from the operator; `named`: the operator is a party of what it
    /// settles ([`Libro::count_operation`]). The statements' order is the batch's: each part
    /// below adds its own, in this order.
    async fn write_decision(
        &self,
        env: &Envelope,
        op: &Op,
        d: &Decision,
        entry_id: &str,
        head: Head,
        (consenting, named, counted): (&[Address], bool, bool),
    ) -> Result<(Vec<Stmt>, bool), Error> {
        let now = self.now();
        let mut stmts = Vec::new();
        let entry = match &d.posting {
            Some(p) => Some(self.sign_entry(p, entry_id, head, env.id())?),
            None => None,
        };
        let statement = match &d.read {
            Some(Read::Statement { account, limit }) => {
                Some(store::statement(self.db, account, &house_account(&self.config.domain), *limit).await?)
            }
            _ => None,
        };
        let receipt = self.decision_receipt(env, op, d, entry.as_ref().map(|(e, _)| e), statement, now)?;
        let receipt_text = text_of(&receipt.to_value())?;
        stmts.push(store::done(
            env.id(),
            env.from().as_str(),
            op.name(),
            &env.sha256_hex(),
            now.millis(),
            &receipt_text,
        ));
        // Operations count per sending site, as mail does (`inbound_per_domain_per_minute`); the
        // house's own agents (verdicts, the desk's acceptances), and what was counted when it
        // was sent, are not counted here.
        stmts.extend(self.count_operation(env.from(), op, now.millis(), named, counted));
        stmts.extend(self.task_claim(env, op, now)?);
        if let Some((_, stmt)) = entry {
            stmts.push(stmt);
        }
        if let Some(contract) = &d.verify
            && self.config.verifica_enabled
        {
            stmts.push(crate::store::services::enqueue_check(contract, now.millis()));
        }
        self.contract_writes(d, now, &mut stmts)?;
        pending_writes(env, d, now, &mut stmts)?;
        for u in &d.uses {
            // Counted under the envelope that moved (the original one, once approved).
            let envelope = d.pending.as_ref().map_or(env.id(), |w| match w {
                PendingWrite::Insert(p) | PendingWrite::Update(p) => p.id.as_str(),
            });
            stmts.extend(store::record_use(&u.subject, now.millis(), envelope, u.amount, u.limit));
        }
        mandate_writes(d, now, &mut stmts)?;
        let strangers = self.strangers(env, d, consenting);
        let closed = crate::inboxes::closed(&self.core, self.post.policies, env, &strangers).await?;
        let queues = self.receipts_to_parties(env, d, &receipt, (consenting, &closed), now, &mut stmts)?;
        self.deadline_notices(env, d, now, &mut stmts)?;
        Ok((stmts, queues))
    }

    /// The receipt of a decision, signed by the house: its entry, and the statement read for it.
    #[inline(always)]
    fn decision_receipt(
        &self,
        env: &Envelope,
        op: &Op,
        d: &Decision,
        entry: Option<&nyx5_proto::libro::Entry>,
        statement: Option<Vec<String>>,
        now: Timestamp,
    ) -> Result<Receipt, Error> {
        let mut extra = d.receipt.clone();
        if let Some(e) = entry {
            extra.insert("asiento".into(), e.to_value());
        }
        if let Some(entries) = statement {
            let list = entries.iter().filter_map(|t| Value::parse_str(t).ok()).collect();
            extra.insert("statement".into(), Value::Array(list));
        }
        let receipt = Receipt::sign(
            &self.config.domain,
            env.id(),
            op.name(),
            &env.sha256_hex(),
            env.from(),
            now,
            authority::receipt_status(d),
            extra,
            &self.config.key,
        )?;
        Ok(receipt)
    }

    /// The claim of a task `tareas@` takes, checked against the quota as the batch finds it,
    /// before the contract's own row (docs/SPEC.md §23).
    #[inline(always)]
    fn task_claim(&self, env: &Envelope, op: &Op, now: Timestamp) -> Result<Option<Stmt>, Error> {
        if let Op::Accept { quote } = op
            && env.from().local() == tareas::TAREAS
            && env.from().domain() == self.config.domain
        {
            let task = tareas::task_id(quote).ok_or_else(|| internal("a task without id"))?;
            return Ok(Some(crate::store::services::claim(
                &quote.id,
                &tareas::quota_holder(&quote.seller),
                task,
                env.from().as_str(),
                now.millis().div_euclid(tareas::DAY_MS),
                now.millis(),
                self.config.tareas_per_agent_per_day,
                self.config.tareas_per_day,
            )));
        }
        Ok(None)
    }

    /// The contract's row: inserted, or updated (a settled escrow's queued notices go with it).
    #[inline(always)]
    fn contract_writes(&self, d: &Decision, now: Timestamp, stmts: &mut Vec<Stmt>) -> Result<(), Error> {
        match &d.contract {
            Some(ContractWrite::Insert(c)) => {
                let record = text_of(&Value::Object(c.record.clone()))?;
                let parties = Role::ALL.map(|r| c.record.get(r.as_str()).and_then(Value::as_str));
                stmts.push(store::insert_contract(&store::ContractRow {
                    id: &c.id,
                    kind: c.kind,
                    state: c.state,
                    parties,
                    amount: c.amount,
                    expires: c.expires().map(Timestamp::millis),
                    now: now.millis(),
                    record: &record,
                }));
            }
            Some(ContractWrite::Update(c)) => {
                let record = text_of(&Value::Object(c.record.clone()))?;
                stmts.extend(store::update_contract(&c.id, c.version, c.state, &record, now.millis()));
                // A settled escrow has no deadline left to warn of: its notices still queued go
                // (issue 35 §4), in the batch that settles it.
                if c.kind == model::Kind::Escrow && c.state.is_terminal() {
                    let ids = Value::Array(self.deadline_notice_ids(c).into_iter().map(Value::from).collect());
                    stmts.extend(store::cancel_queued(&ids.canonical_string()));
                }
            }
            None => {}
        }
        Ok(())
    }

    /// The local parties of a decision who did not agree to hear from its operator: they hear of
    /// its operation only as its mail would reach them, their inbox's policy decides (issue 34).
    #[inline(always)]
    fn strangers<'d>(&self, env: &Envelope, d: &'d Decision, consenting: &[Address]) -> Vec<&'d str> {
        let casa = house_account(&self.config.domain);
        d.parties
            .iter()
            .filter(|p| p.domain() == self.config.domain && *p != env.from() && !consenting.contains(p))
            .filter(|p| p.as_str() != casa && !self.is_system(p))
            .map(Address::local)
            .collect()
    }

    /// The receipt to every party of the decision (the operator's own mailbox, the others' within
    /// their quota and policy, unless their inbox is `closed` to the operator; other houses'
    /// through the queue). Whether it queued mail due now.
    #[inline(always)]
    fn receipts_to_parties(
        &self,
        env: &Envelope,
        d: &Decision,
        receipt: &Receipt,
        (consenting, closed): (&[Address], &[String]),
        now: Timestamp,
        stmts: &mut Vec<Stmt>,
    ) -> Result<bool, Error> {
        let mut queues = false;
        let casa = house_account(&self.config.domain);
        let blocks = Value::Array(
            nyx5_rules::policy::block_entries(env.from(), crate::site::psl()).into_iter().map(Value::from).collect(),
        )
        .canonical_string();
        for party in d.parties.iter().filter(|p| p.as_str() != casa && !self.is_system(p)) {
            if party.domain() == self.config.domain && closed.iter().any(|c| c == party.local()) {
                continue;
            }
            let content = Content::new(receipt::MEDIA, receipt.to_value());
            let id = self.derived_id("receipt", env.id(), party.as_str());
            let mut draft = Draft::new(id, self.libro_address()?, vec![party.clone()], now, content);
            draft.kind = Kind::Receipt;
            draft.in_reply_to = Some(env.id().to_owned());
            draft.thread = env.thread().map(str::to_owned);
            let signed = draft.build()?.sign(&self.config.key)?;
            if party.domain() == self.config.domain {
                // A party who blocked the operator (or an agent above it) hears nothing from its
                // operations; anyone but the operator only within its mailbox's quota.
                let text =
                    String::from_utf8(signed.canonical()).map_err(|_| internal("canonical JSON is not UTF-8"))?;
                let (local, id, from, at) = (party.local(), signed.id(), signed.from().as_str(), now.millis());
                if party == env.from() {
                    stmts.push(store::deliver_local(local, id, from, &text, at, &blocks));
                } else {
                    // A party who agreed to hear from the operator has the Libro's lane past its quota:
                    // a mailbox others filled does not lose its sale or its bond's forfeit.
                    let lane = if consenting.contains(party) { store::Lane::AGREED } else { store::Lane::NONE };
                    stmts.push(store::deliver_counted(
                        local,
                        id,
                        from,
                        &text,
                        at,
                        &blocks,
                        (self.config.quota(), lane),
                    ));
                }
            } else {
                stmts.extend(self.queue_from_libro(&signed, now)?);
                queues = true;
            }
        }
        Ok(queues)
    }

    /// The deadline notices of the decision's contracts, queued for when they fall due.
    #[inline(always)]
    fn deadline_notices(
        &self,
        env: &Envelope,
        d: &Decision,
        now: Timestamp,
        stmts: &mut Vec<Stmt>,
    ) -> Result<(), Error> {
        for deadline in &d.deadlines {
            for to in deadline.to.iter().filter(|t| !self.is_system(t)) {
                let mut body = deadline.body.clone();
                body.insert("state".into(), "due".into());
                let id = self.derived_id("deadline", &deadline.contract, to.as_str());
                let mut draft = Draft::new(
                    id,
                    self.libro_address()?,
                    vec![to.clone()],
                    now,
                    Content::new(NOTICE_MEDIA, Value::Object(body)),
                );
                draft.kind = Kind::Message;
                draft.deliver_after = Some(deadline.at);
                draft.thread = env.thread().map(str::to_owned);
                let signed = draft.build()?.sign(&self.config.key)?;
                if nyx5_rules::queue::check_due(deadline.at, now).is_ok() {
                    stmts.extend(self.queue_from_libro(&signed, now)?);
                }
            }
        }
        Ok(())
    }

    /// The authority a delegated card holds, and who approves what it asks: its parent, or, when
    /// that parent is itself ruled by an authority, the nearest agent up the chain that is not
    /// (a subagent never approves for one it made).
    async fn card_rule(&self, card: &AgentCard) -> Result<Option<CardRule>, Error> {
        let Some(authority) = card.scope().and_then(|s| s.authority.clone()) else { return Ok(None) };
        let mut by =
            card.delegation().map(|d| d.by.clone()).ok_or_else(|| internal("a scope without its delegation"))?;
        for _ in 0..MAX_DELEGATION_DEPTH {
            let parent = self.lookup().resolve_agent(&by, false).await?;
            match (parent.scope().and_then(|s| s.authority.as_ref()), parent.delegation()) {
                (Some(_), Some(d)) => by = d.by.clone(),
                _ => return Ok(Some(CardRule { authority, delegator: by })),
            }
        }
        Err(Refusal::NoApprover.because(format!(
            "{}: no agent free of an authority within {MAX_DELEGATION_DEPTH} delegations to approve for it",
            card.address()
        )))
    }

    /// The decision of a movement whose every ask is now approved (pending `p`, its operating
    /// envelope `text`): that envelope's operation decided again, under the approval, on what the
    /// Libro holds now with the hold back in its payer's hands, and merged with the approval's
    /// end. Answers it and the journal's head it read.
    async fn approved(
        &self,
        approval: &Envelope,
        p: &model::Pending,
        text: Option<String>,
        rules: &Rules,
        entry_id: &str,
    ) -> Result<(Decision, Head), Error> {
        let now = self.now();
        let text = text.ok_or_else(|| internal("a pending approval without its envelope"))?;
        let original = Envelope::parse(text.as_bytes(), nyx5_proto::limits::MAX_ENVELOPE_BYTES)
            .map_err(|e| internal(&e.reason))?;
        let op = read_op(&original)?;
        // A movement its operator no longer wants after `expires` does not happen later.
        original.check_not_expired(now).map_err(|_| {
            Refusal::EnvelopeExpired.because(format!("{} expired while it waited; decline it", original.id()))
        })?;
        // An offer that lapsed while it waited binds its seller no more.
        if let Op::Accept { quote } = &op
            && quote.expires.is_some_and(|e| now >= e)
        {
            return Err(
                Refusal::QuoteExpired.because(format!("quote {} expired while it waited; decline it", quote.id))
            );
        }
        let accounts = {
            let mut list = vec![Value::from(p.operator.as_str()), model::hold_account(&p.id).into()];
            if let Some(c) = op.contract() {
                list.push(escrow_account(c).into());
            }
            Value::Array(list).canonical_string()
        };
        let of = store::FactsOf {
            accounts: &accounts,
            contract: op.contract(),
            mandate: op.mandate(),
            operator: p.operator.as_str(),
            pending: Some(&p.id),
            since: now.millis() - nyx5_proto::authority::HOUR_MS,
            // Decided again under its approval: it completes or is refused, never waits again.
            count_approvals: false,
        };
        let row = store::facts(self.db, approval.id(), &of).await?;
        let (mut facts, head, _) = facts_of(&row)?;
        facts.known = true;
        let facts = authority::with_hold_returned(p, facts);
        let ctx = authority::approved_ctx(p, approval.id(), now);
        let d = kernel::decide(&op, &ctx, rules, &facts, entry_id)?;
        Ok((authority::merge(p, &facts, d)?, head))
    }

    /// Statements sending `to` a notice from `libro@` (`application/nyx5.aviso+json`) about
    /// `what` (a kind and the id it is about, from which its id is derived: sent twice, it is one).
    fn notice(&self, what: (&str, &str), to: Address, body: Object, now: Timestamp) -> Result<Vec<Stmt>, Error> {
        let id = self.derived_id(what.0, what.1, to.as_str());
        let content = Content::new(NOTICE_MEDIA, Value::Object(body));
        let mut draft = Draft::new(id, self.libro_address()?, vec![to], now, content);
        draft.kind = Kind::Message;
        self.send_from_libro(draft.build()?.sign(&self.config.key)?, now)
    }

    fn libro_address(&self) -> Result<Address, Error> {
        Address::new(LIBRO, &self.config.domain)
    }

    /// An id derived from what a document is about, with the domain key: written twice it is
    /// one, and nobody else can predict it.
    /// The ids the deadline notices of contract `c` were given: one per buyer and seller, derived
    /// from the contract's id, and (for notices queued before they were) from the envelope
    /// that accepted it.
    fn deadline_notice_ids(&self, c: &model::Contract) -> Vec<String> {
        let accepted = c
            .record
            .get("history")
            .and_then(Value::as_array)
            .and_then(|h| {
                h.iter().filter_map(Value::as_object).find(|e| e.get("op").and_then(Value::as_str) == Some("accept"))
            })
            .and_then(|e| e.get("envelope").and_then(Value::as_str));
        let mut ids = Vec::new();
        for party in ["buyer", "seller"].iter().filter_map(|n| c.record.get(*n).and_then(Value::as_str)) {
            ids.push(self.derived_id("deadline", &c.id, party));
            if let Some(envelope) = accepted {
                ids.push(self.derived_id("deadline", envelope, party));
            }
        }
        ids
    }

    pub(crate) fn derived_id(&self, what: &str, of: &str, to: &str) -> String {
        let seed = self.config.key.sign(Context::NoticeId, format!("nyx5 {what}:{of}:{to}").as_bytes());
        let mut bytes = [0u8; 16];
        for (b, d) in bytes.iter_mut().zip(sha256(&seed)) {
            *b = d;
        }
        uuid_v4(bytes)
    }

    /// Statements that hand `env` from `libro@` to its one recipient: into a local mailbox
    /// directly, or queued for another house.
    fn send_from_libro(&self, env: Envelope, now: Timestamp) -> Result<Vec<Stmt>, Error> {
        let to = env.to().first().ok_or_else(|| internal("a receipt without recipient"))?;
        if to.domain() == self.config.domain {
            let text = String::from_utf8(env.canonical()).map_err(|_| internal("canonical JSON is not UTF-8"))?;
            // A recipient that blocked the sender (`libro@`, `verifica@`) by its address hears
            // nothing from it; blocking the house's domain (other agents' mail) is not that.
            let blocks = Value::Array(vec![env.from().as_str().into()]).canonical_string();
            Ok(vec![store::deliver_local(to.local(), env.id(), env.from().as_str(), &text, now.millis(), &blocks)])
        } else {
            self.queue_from_libro(&env, now)
        }
    }

    /// Statements that queue `env` from `libro@` like any outgoing envelope.
    fn queue_from_libro(&self, env: &Envelope, now: Timestamp) -> Result<Vec<Stmt>, Error> {
        let text = String::from_utf8(env.canonical()).map_err(|_| internal("canonical JSON is not UTF-8"))?;
        let sha = env.sha256_hex();
        let not_before = env.due_at(now).millis();
        let give_up = not_before.saturating_add(self.config.retry.give_up_after_ms);
        let out = Outgoing {
            envelope_id: env.id(),
            sender: env.from().as_str(),
            envelope: &text,
            sha256: &sha,
            expires: None,
            now: now.millis(),
            not_before,
            deadline: give_up,
            judged: None,
        };
        let jobs: Vec<NewJob> = nyx5_rules::queue::by_domain(env.to())
            .into_iter()
            .map(|(domain, list)| NewJob {
                domain,
                recipients: Value::Array(list.iter().map(|a| a.as_str().into()).collect()).canonical_string(),
                first: None,
            })
            .collect();
        Ok(queue_store::enqueue(&out, &jobs))
    }

    /// Numbers, links and signs a posting as entry `head.n + 1`; the statement appends it.
    fn sign_entry(
        &self,
        p: &Posting,
        id: &str,
        head: Head,
        cause: &str,
    ) -> Result<(nyx5_proto::libro::Entry, Stmt), Error> {
        let (n, prev) = head;
        let draft = EntryDraft {
            id: id.to_owned(),
            at: self.now(),
            house: self.config.domain.clone(),
            concept: p.concept.clone(),
            lines: p.lines.clone(),
            meta: p.meta.clone(),
            refs: p.refs.clone(),
        };
        let entry = draft.sign(n + 1, &prev, &self.config.key)?;
        let text = entry.canonical_string();
        let sha = hex(&sha256(text.as_bytes()));
        let lines = lines_value(&entry.lines).canonical_string();
        let stmt = store::append(&store::NewEntry {
            n: n + 1,
            id,
            cause,
            house: &self.config.domain,
            at: entry.at.millis(),
            prev: &prev,
            sha256: &sha,
            lines: &lines,
            entry: &text,
        });
        Ok((entry, stmt))
    }

    /// Posts an entry no envelope caused (a top-up, a welcome gift), once per `cause`, with
    /// `also` in the same batch. Answers the entry, posted now or before.
    ///
    /// The cause has a `:`, as no envelope id does: once per cause is then kept by the journal's
    /// index of such causes (`libro_entries_cause`, migration 0025), where an operation's entry is
    /// kept once by its envelope's row in `libro_ops`.
    pub async fn post_once(&self, cause: &str, posting: &Posting, also: Vec<Stmt>) -> Result<Value, Error> {
        if !cause.contains(':') {
            return Err(internal("an entry no envelope caused needs a cause with a ':'"));
        }
        for _ in 0..ATTEMPTS {
            if let Some(text) = store::entry_for(self.db, cause).await? {
                if !also.is_empty() {
                    crate::live::batch(self.db, self.post.bell, also).await.map_err(port_error)?;
                }
                return Value::parse_str(&text);
            }
            let head = store::head(self.db).await?.unwrap_or((0, GENESIS.to_owned()));
            let id = self.new_id();
            let (entry, stmt) = self.sign_entry(posting, &id, head, cause)?;
            let mut stmts = vec![stmt];
            stmts.extend(also.iter().cloned());
            match crate::live::batch(self.db, self.post.bell, stmts).await {
                Ok(_) => return Ok(entry.to_value()),
                Err(PortError::Constraint { name })
                    if name == store::CAUSE_DONE || store::RACES.contains(&name.as_str()) => {}
                Err(e) => return Err(port_error(e)),
            }
        }
        Err(Refusal::LibroBusy.because("the Libro is busy; try again"))
    }

    /// The house issues `amount` to `account` for `cause`.
    pub async fn issue(
        &self,
        cause: &str,
        account: &Address,
        amount: i64,
        concept: &str,
        also: Vec<Stmt>,
    ) -> Result<Value, Error> {
        let posting = Posting {
            concept: concept.to_owned(),
            lines: model::move_all(&house_account(&self.config.domain), account.as_str(), amount),
            meta: obj([("primitive", Primitive::Issue.as_str().into())]),
            refs: obj([("key", cause.into())]),
        };
        self.post_once(cause, &posting, also).await
    }

    /// What accepting a stamped or vouched envelope needs from the Libro, in one query: the
    /// sender's balance, the journal's head and the vouching bond.
    pub(crate) async fn stamp_facts(&self, sender: &Address, bond: Option<&str>) -> Result<StampFacts, Error> {
        let accounts = Value::Array(vec![sender.as_str().into()]).canonical_string();
        let of = store::FactsOf {
            accounts: &accounts,
            contract: bond,
            mandate: None,
            operator: sender.as_str(),
            pending: None,
            since: self.now().millis() - nyx5_proto::authority::HOUR_MS,
            // A stamp never waits: an ask refuses it.
            count_approvals: false,
        };
        let row = store::facts(self.db, "", &of).await?;
        let (facts, head, _) = facts_of(&row)?;
        let uses = facts.uses.get(&format!("card:{sender}")).copied().unwrap_or(0);
        Ok(StampFacts { balance: facts.balance(sender.as_str()), head, bond: facts.contract, uses })
    }

    /// The stamp of `amount` that `env`'s sender pays `to` (spec §19): a charge with the house's
    /// fee, posted as entry `head.n + 1`, once per envelope and recipient.
    pub(crate) fn stamp_entry(
        &self,
        env: &Envelope,
        to: &Address,
        amount: i64,
        head: Head,
    ) -> Result<(String, nyx5_proto::libro::Entry, Stmt), Error> {
        let rules = self.libro_rules();
        let (lines, mut meta) = model::settle(env.from().as_str(), to.as_str(), amount, &rules, None);
        meta.insert("primitive".into(), Primitive::Stamp.as_str().into());
        let cause = format!("stamp:{}:{}", env.id(), to.local());
        let posting = Posting {
            concept: "stamp".into(),
            lines,
            meta,
            refs: obj([
                ("envelope", env.id().into()),
                ("envelope_sha256", env.sha256_hex().into()),
                ("key", cause.as_str().into()),
            ]),
        };
        nyx5_proto::libro::check_lines(&posting.lines)?;
        let id = self.new_id();
        let (entry, stmt) = self.sign_entry(&posting, &id, head, &cause)?;
        Ok((id, entry, stmt))
    }

    /// Posts the issue owed for `cause` (a welcome gift), if it still is.
    pub async fn post_owed(&self, cause: &str) -> Result<(), Error> {
        if let Some(row) = store::owed(self.db, cause).await? {
            self.post_due_row(&row).await?;
        }
        Ok(())
    }

    async fn post_due_row(&self, row: &crate::ports::Row) -> Result<bool, Error> {
        let (Some(cause), Some(account), Some(amount), Some(concept)) =
            (row.text("cause"), row.text("account"), row.int("amount"), row.text("concept"))
        else {
            return Ok(false);
        };
        let Ok(account) = Address::parse(account) else { return Ok(false) };
        self.issue(cause, &account, amount, concept, vec![store::paid(cause)]).await?;
        Ok(true)
    }

    /// Where the upkeep looks for operations that arrived before a deadline and still wait: the
    /// house's queue to its Libro, and first arrivals of another house's settlements still within
    /// their life. The upkeep never acts on a deadline such an operation names: it is decided
    /// first, at the time it was received (issue 34).
    pub(crate) fn waiting<'a>(&'a self, libro: &'a Address, now: Timestamp) -> store::Waiting<'a> {
        store::Waiting {
            domain: &self.config.domain,
            libro: libro.as_str(),
            since: now.millis().saturating_sub(OP_LIFE_MS),
        }
    }

    /// The tick's share of the Libro: issues owed (welcome gifts) are posted, bonds past their
    /// `expires` return to their bondholders, approvals nobody decided in time return their holds
    /// (`expire_approvals`), each only once no operation received before its deadline and naming
    /// it still waits (`Libro::waiting`). Bounded per tick. (The authority's old counts and decided approvals
    /// go with the tick's purge batch: `store::libro::prune_authority`.)
    ///
    /// Each of the three runs whatever the others did. Answers whether any left work behind (it
    /// took a whole batch, or failed): the tick then runs the upkeep again at its next turn
    /// rather than the next minute (hostile review of issue 36, M1).
    pub async fn libro_upkeep(&self) -> Result<bool, Error> {
        let dues = match store::due(self.db, UPKEEP_BATCH).await {
            Ok(rows) => {
                for row in &rows {
                    // One row that cannot post waits; it holds up neither the others nor the bonds.
                    let _posted = self.post_due_row(row).await;
                }
                Ok(nyx5_rules::queue::took_whole_batch(rows.len(), UPKEEP_BATCH))
            }
            Err(e) => Err(e),
        };
        let bonds = self.expire_bonds().await;
        let approvals = self.expire_approvals().await;
        Ok(dues? | bonds? | approvals?)
    }

    /// Bonds past their `expires` return to their bondholders. Bounded per tick; answers
    /// whether it took a whole batch.
    async fn expire_bonds(&self) -> Result<bool, Error> {
        let now = self.now();
        let rules = self.libro_rules();
        let libro = self.libro_address()?;
        let waiting = self.waiting(&libro, now);
        let due = store::bonds_due(self.db, now.millis(), UPKEEP_BATCH, waiting).await?;
        let full = nyx5_rules::queue::took_whole_batch(due.len(), UPKEEP_BATCH);
        for row in due {
            let Some(Value::Object(record)) = parse_json(row.text("record")) else { continue };
            let Ok(c) = model::Contract::from_record(record, row.int("version").unwrap_or(0)) else { continue };
            let entry_id = self.new_id();
            let Ok((posting, next)) = kernel::expire_bond(&c, &rules, now, &entry_id) else { continue };
            let record = text_of(&Value::Object(next.record.clone()))?;
            let also = Vec::from(store::update_contract(&c.id, c.version, next.state, &record, now.millis()));
            let cause = format!("expiry:{}", c.id);
            let head = store::head(self.db).await?.unwrap_or((0, GENESIS.to_owned()));
            let (entry, stmt) = self.sign_entry(&posting, &entry_id, head, &cause)?;
            let mut stmts = vec![stmt];
            stmts.extend(also);
            // The bondholder hears of it: a notice with the entry that returned the bond.
            if let Some(holder) = c.get(Role::Bondholder) {
                let body = obj([
                    ("contract", c.id.as_str().into()),
                    ("state", next.state.as_str().into()),
                    ("reason", "the bond expired and returned to its bondholder".into()),
                    ("asiento", entry.to_value()),
                ]);
                stmts.extend(self.notice(("expiry", &c.id), holder, body, now)?);
            }
            match crate::live::batch(self.db, self.post.bell, stmts).await {
                // Lost to an operation or another tick: the next tick looks again.
                Ok(_) | Err(PortError::Constraint { .. }) => {}
                Err(e) => return Err(port_error(e)),
            }
        }
        Ok(full)
    }

    /// Approvals nobody decided before their `expires`: each hold returns to its payer, and the
    /// operator and every approver hear of it. Bounded per tick; answers whether it took a whole
    /// batch.
    async fn expire_approvals(&self) -> Result<bool, Error> {
        let now = self.now();
        let libro = self.libro_address()?;
        let due = store::pending_due(self.db, now.millis(), UPKEEP_BATCH, self.waiting(&libro, now)).await?;
        let full = nyx5_rules::queue::took_whole_batch(due.len(), UPKEEP_BATCH);
        for row in due {
            let Some(Value::Object(record)) = parse_json(row.text("record")) else { continue };
            let Ok(p) = model::Pending::from_value(&record, row.int("version").unwrap_or(0)) else { continue };
            let mut facts = Facts::default();
            facts.balances.insert(model::hold_account(&p.id), row.int("held").unwrap_or(0));
            let Ok((posting, next)) = authority::expire(&p, &facts, now) else { continue };
            let record = text_of(&next.to_value())?;
            let mut stmts = Vec::from(store::update_pending(&p.id, p.version, next.state, &record, now.millis()));
            if let Some(MandateWrite::Unspend { links, amount }) = authority::unreserve(&next) {
                stmts.push(store::unspend(&links, amount));
            }
            let mut entry = Value::Null;
            if let Some(posting) = posting {
                let head = store::head(self.db).await?.unwrap_or((0, GENESIS.to_owned()));
                let cause = format!("approval-expiry:{}", p.id);
                let (e, stmt) = self.sign_entry(&posting, &self.new_id(), head, &cause)?;
                entry = e.to_value();
                stmts.insert(0, stmt);
            }
            // Its parties hear of it as they hear of the operator's operations: past their block
            // of the operator (or of an agent above it) nothing, and within their quota and the
            // Libro's lane (they agreed to it: issue 34 review, L1).
            let mut entries = nyx5_rules::policy::block_entries(&next.operator, crate::site::psl());
            entries.push(libro.as_str().to_owned());
            let blocks = Value::Array(entries.into_iter().map(Value::from).collect()).canonical_string();
            for to in next.parties().into_iter().filter(|a| !self.is_system(a)) {
                let body = obj([
                    ("pending", next.to_value()),
                    ("state", next.state.as_str().into()),
                    ("reason", "nobody approved it in time; what it held returned".into()),
                    ("asiento", entry.clone()),
                ]);
                let id = self.derived_id("approval-expiry", &p.id, to.as_str());
                let content = Content::new(NOTICE_MEDIA, Value::Object(body));
                let mut draft = Draft::new(id, libro.clone(), vec![to.clone()], now, content);
                draft.kind = Kind::Message;
                let signed = draft.build()?.sign(&self.config.key)?;
                if to.domain() == self.config.domain {
                    let text = text_of_envelope(&signed)?;
                    stmts.push(store::deliver_counted(
                        to.local(),
                        signed.id(),
                        signed.from().as_str(),
                        &text,
                        now.millis(),
                        &blocks,
                        (self.config.quota(), store::Lane::AGREED),
                    ));
                } else {
                    stmts.extend(self.queue_from_libro(&signed, now)?);
                }
            }
            match crate::live::batch(self.db, self.post.bell, stmts).await {
                // Decided or expired meanwhile: the next tick looks again.
                Ok(_) | Err(PortError::Constraint { .. }) => {}
                Err(e) => return Err(port_error(e)),
            }
        }
        Ok(full)
    }
}

/// The parties of decision `d` who agreed to hear from its operator, whatever their inbox
/// says: the buyer and the seller of a contract made from a quote (the seller signed it for the
/// buyer, the buyer accepted it), a bond's bondholder, the grantors of the mandate chain an
/// operation names (they granted to its grantees) and the parties of the approval it decides.
/// Anyone else it names (a bond's verifier or beneficiary, an arbiter, a referrer, a mandate's
/// grantee) never asked for it, and hears of it as the operator's mail would reach them. Pure.
fn consenting(facts: &Facts, d: &Decision) -> Vec<Address> {
    let mut out = Vec::new();
    let written = match &d.contract {
        Some(ContractWrite::Insert(c) | ContractWrite::Update(c)) => Some(c),
        None => None,
    };
    if let Some(c) = written.or(facts.contract.as_ref()) {
        let roles: &[Role] =
            if c.kind == model::Kind::Bond { &[Role::Bondholder] } else { &[Role::Buyer, Role::Seller] };
        out.extend(roles.iter().filter_map(|&r| c.get(r)));
    }
    out.extend(facts.chain.iter().map(|m| m.grantor.clone()));
    if let Some(p) = &facts.pending {
        out.extend(p.parties());
    }
    out
}

/// Whether `who` is a party of the contract or approval the facts hold (a foreign agent settling
/// what names it counts under its own address). Pure.
fn named_in(facts: &Facts, who: &Address) -> bool {
    use Role as R;
    const ROLES: [Role; 6] = [R::Seller, R::Buyer, R::Bondholder, R::Verifier, R::Beneficiary, R::Arbiter];
    facts.contract.as_ref().is_some_and(|c| ROLES.iter().any(|&r| c.is(r, who)))
        || facts.pending.as_ref().is_some_and(|p| p.parties().contains(who))
}

/// What a settlement names whose deadline the tick's upkeep must not pass while it waits: the
/// contract (a bond's expiry, a desk's hold) or the approval (its expiry) it is about. Pure.
fn names(op: &Op) -> Option<&str> {
    match op {
        Op::Deliver { .. } | Op::Release { .. } | Op::Refund { .. } | Op::Forfeit { .. } => op.contract(),
        Op::Approve { .. } | Op::Decline { .. } => op.pending(),
        _ => None,
    }
}

/// How long an operation of another house's agent lives: it is done within this time of its
/// `created` and of its first arrival here, or refused for good (410, kept). A refusal for a
/// passing reason (429, 503) is not kept, so this is what ends it: a copy that comes later —
/// after its sender was told it bounced, after a top-up — never goes through (docs/SPEC.md §16).
/// The house's own agents' operations live as long from the time their job became due
/// (`check_queued_life`); the outbox answers the same envelope again "exists".
pub const OP_LIFE_MS: i64 = 3_600_000;

/// Refuses an operation first received more than [`OP_LIFE_MS`] after its `created` (the clock
/// tolerance aside), or decided more than that after it was first received. Pure.
fn check_life(env: &Envelope, received: Timestamp, now: Timestamp) -> Result<(), Error> {
    let created = env.created().millis();
    let stale = received.millis() > created.saturating_add(OP_LIFE_MS + nyx5_proto::limits::CLOCK_SKEW_MS);
    let late = now.millis() > received.millis().saturating_add(OP_LIFE_MS);
    if stale || late {
        return Err(Refusal::OperationExpired.because(format!(
            "operation {} was signed or first received here more than an hour ago: an operation lives an \
                 hour; sign it again under a new id",
            env.id()
        )));
    }
    Ok(())
}

/// Refuses an operation of this house's agents decided more than [`OP_LIFE_MS`] after its job
/// became due (its `deliver_after`, or when `/outbound` took it). Pure.
fn check_queued_life(env: &Envelope, received: Timestamp, now: Timestamp) -> Result<(), Error> {
    if now.millis() > received.millis().saturating_add(OP_LIFE_MS) {
        return Err(Refusal::OperationExpired.because(format!(
            "operation {} waited in this house's queue more than an hour: an operation lives an hour; \
                 sign it again under a new id",
            env.id()
        )));
    }
    Ok(())
}

/// The accounts an operation by `operator` may touch, as the facts query takes them: its own,
/// the named contract's escrow, and the hold of the approval it decides.
fn accounts_of(operator: &Address, op: &Op) -> String {
    let mut list = vec![Value::from(operator.as_str())];
    if let Some(c) = op.contract() {
        list.push(escrow_account(c).into());
    }
    if let Some(p) = op.pending() {
        list.push(model::hold_account(p).into());
    }
    Value::Array(list).canonical_string()
}

/// The cause of `address`'s welcome gift.
pub fn welcome_cause(address: &Address) -> String {
    format!("welcome:{address}")
}

/// The operation an envelope carries: a clear `task` with the Libro's media type and a body
/// `Op::parse` reads. Pure; what it refuses, it refuses for any copy of the envelope alike.
fn read_op(env: &Envelope) -> Result<Op, Error> {
    if env.kind() != Kind::Task {
        return Err(Refusal::BadOperation.because("an operation for the Libro is an envelope of `type: task`"));
    }
    let content = match env.payload() {
        Payload::Clear(c) => c,
        _ => {
            return Err(
                Refusal::BadOperation.because("an operation for the Libro is not sealed: the house must read it")
            );
        }
    };
    if content.media != OP_MEDIA {
        return Err(Refusal::BadOperation.because(format!("an operation has `media: {OP_MEDIA}`")));
    }
    let body =
        content.body.as_object().ok_or_else(|| Refusal::BadOperation.because("an operation's body is an object"))?;
    Op::parse(body)
}

/// Whether an operation sent (queued by the house for its own agent) at `sent`, done `now`, was
/// counted when it was sent ([`Libro::received`]): in the clock minute it is done in, by a house
/// whose `outbound` envelopes a minute are no more than its `cap` operations a minute. A clock
/// set back to before the send counts it again. Pure.
fn counted_when_sent(sent: Option<i64>, now: i64, outbound: i64, cap: i64) -> bool {
    let minute = |t: i64| t.div_euclid(60_000);
    sent.is_some_and(|sent| sent <= now && minute(sent) == minute(now)) && outbound <= cap
}

/// How an operation reached the house ([`Libro::received`]): when it first did, and whether
/// this house queued it, and whether it was counted when it was sent.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: Timestamp,
    queued: bool,
    counted: bool,
}

/// An operation refused for good, as `libro_ops` keeps it: its code, its name (empty in rows from
/// before migration 0026) and its reason.
struct Refused<'a> {
    code: i64,
    name: &'a str,
    reason: &'a str,
}

/// An operation done before under this envelope id: the same envelope from the same operator is
/// a duplicate (nothing changes); anything else under that id is a conflict.
fn done_before(
    operator: Option<&str>,
    sha256: Option<&str>,
    refused: Option<Refused<'_>>,
    from: &Address,
    sha: &str,
) -> Result<Outcome, Error> {
    if operator == Some(from.as_str()) && sha256 == Some(sha) {
        match refused {
            // Refused before: refused again, by the same code, name and reason (a row without a
            // name is answered by its code's own).
            Some(r) => {
                let code = u16::try_from(r.code).ok().filter(|c| ErrorKind::from_code(*c).is_some()).unwrap_or(403);
                Err(Error::from_wire(code, r.name, r.reason.to_owned()))
            }
            None => Ok(Outcome::Duplicate),
        }
    } else {
        Err(Refusal::EnvelopeIdTaken.because("this envelope id is already used for another operation"))
    }
}

/// The row of an operation that waits for approval (kept whole, within its bound), or its update.
#[inline(always)]
fn pending_writes(env: &Envelope, d: &Decision, now: Timestamp, stmts: &mut Vec<Stmt>) -> Result<(), Error> {
    match &d.pending {
        Some(PendingWrite::Insert(p)) => {
            let record = text_of(&p.to_value())?;
            let text = String::from_utf8(env.canonical()).map_err(|_| internal("canonical JSON is not UTF-8"))?;
            if text.len() > authority::MAX_PENDING_ENVELOPE_BYTES {
                let max = authority::MAX_PENDING_ENVELOPE_BYTES;
                return Err(Refusal::PendingTooLarge
                    .because(format!("an operation that waits for approval is kept whole, and at most {max} bytes")));
            }
            let approvers = Value::Array(p.approvers().iter().map(|a| a.as_str().into()).collect()).canonical_string();
            stmts.extend(store::insert_pending(
                &store::PendingRow {
                    id: &p.id,
                    operator: p.operator.as_str(),
                    payer: p.hold.as_ref().map(|(a, _)| a.as_str()),
                    amount: p.hold.as_ref().map_or(0, |(_, n)| *n),
                    expires: p.expires.millis(),
                    now: now.millis(),
                    envelope: &text,
                    record: &record,
                    approvers: &approvers,
                },
                authority::MAX_PENDING,
                authority::MAX_APPROVALS_KEPT,
            ));
        }
        Some(PendingWrite::Update(p)) => {
            let record = text_of(&p.to_value())?;
            stmts.extend(store::update_pending(&p.id, p.version, p.state, &record, now.millis()));
        }
        None => {}
    }
    Ok(())
}

/// The mandates' rows: granted (within the grantor's bound, under a chain still active),
/// spent, revoked, given back.
#[inline(always)]
fn mandate_writes(d: &Decision, now: Timestamp, stmts: &mut Vec<Stmt>) -> Result<(), Error> {
    for m in &d.mandates {
        match m {
            MandateWrite::Insert(m) => {
                let record = text_of(&m.to_value())?;
                let chain = Value::Array(m.chain.iter().map(|s| s.as_str().into()).collect()).canonical_string();
                stmts.push(store::insert_mandate(&store::MandateRow {
                    id: &m.id,
                    grantor: m.grantor.as_str(),
                    grantee: m.grantee.as_str(),
                    cap: m.cap,
                    expires: m.expires.map(Timestamp::millis),
                    parent: m.parent.as_deref(),
                    root: &m.root,
                    chain: &chain,
                    contract: m.contract.as_deref(),
                    now: now.millis(),
                    record: &record,
                }));
                stmts.push(store::mandates_within(m.grantor.as_str(), kernel::MAX_ACTIVE_MANDATES));
                // A sub-mandate stands only under a chain still active as the batch runs: a
                // revoke that won the race would otherwise leave it active under a revoked parent.
                if m.parent.is_some() {
                    let above =
                        Value::Array(m.chain.iter().filter(|id| **id != m.id).map(|s| s.as_str().into()).collect());
                    stmts.push(store::chain_active(&above.canonical_string()));
                }
            }
            MandateWrite::Spend { links, amount } => {
                for (id, version) in links {
                    stmts.extend(store::spend(id, *version, *amount));
                }
            }
            MandateWrite::Revoke { id, version, below } => stmts.extend(store::revoke(id, *version, *below)),
            MandateWrite::Unspend { links, amount } => stmts.push(store::unspend(links, *amount)),
        }
    }
    Ok(())
}

/// An account as the Libro's direct reads give it (`GET /libro/cuenta/:address`): its balance,
/// the rows of its contracts, mandates and pending movements, and its latest entries' texts.
#[derive(Debug, Clone, Default)]
pub struct Account {
    pub balance: i64,
    pub contracts: Vec<crate::ports::Row>,
    pub mandates: Vec<crate::ports::Row>,
    pub pending: Vec<crate::ports::Row>,
    pub entries: Vec<String>,
}

/// The Libro's direct reads for the routes (issue 37 §2, "routes call services"): accounts,
/// contracts, the journal and the public history.
impl<'h, D: Db, N: Net> Libro<'h, D, N> {
    /// The account of `who`, on the primary: at most `list_max` contracts, mandates and
    /// pending movements each, and its latest `entries` entries.
    pub async fn account(&self, who: &str, list_max: i64, entries: i64) -> Result<Account, Error> {
        Ok(Account {
            balance: store::balance(self.db, who).await?,
            contracts: store::contracts_of(self.db, who, list_max).await?,
            mandates: store::mandates_of(self.db, who, list_max).await?,
            pending: store::pending_of(self.db, who, list_max).await?,
            entries: store::statement(self.db, who, &house_account(&self.config.domain), entries).await?,
        })
    }

    /// The stored row of contract `id` (`record`, `version`).
    pub fn contract_row(&self, id: &str) -> impl Future<Output = Result<Option<crate::ports::Row>, Error>> {
        store::contract(self.db, id)
    }

    /// The journal's entries after the `after`-th, at most `limit`, as their texts.
    pub fn journal(&self, after: i64, limit: i64) -> impl Future<Output = Result<Vec<String>, Error>> {
        store::journal(self.db, after, limit)
    }

    /// What the public history of `local` (`address`) is made of, read through the request's
    /// stale-tolerant `reads`: when the agent was registered (ms) and its bonds' rows; `None`
    /// when there is no such agent (and nothing more is read).
    pub async fn history_rows(
        &self,
        reads: &crate::ports::Reads,
        local: &str,
        address: &Address,
    ) -> Result<Option<(i64, Vec<crate::ports::Row>)>, Error> {
        let stale = self.stale(reads);
        let Some(since) = crate::store::agents::created_at(&stale, local).await? else { return Ok(None) };
        Ok(Some((since, store::history_rows(&stale, address.as_str()).await?)))
    }
}

#[cfg(test)]
mod tests {
    use super::counted_when_sent;

    /// Counted when sent: in the minute it is done in, at or before now, by a house whose
    /// envelopes a minute are within its operations a minute; not across a minute's turn, not
    /// by a clock set back, not unsent, not at a looser house.
    #[test]
    fn an_operation_is_counted_when_sent_only_within_its_minute() {
        let m = 60_000 * 29_809_140;
        assert!(counted_when_sent(Some(m), m, 60, 120));
        assert!(counted_when_sent(Some(m), m + 59_999, 120, 120));
        assert!(!counted_when_sent(Some(m + 59_999), m + 60_000, 60, 120), "the minute turned");
        assert!(!counted_when_sent(Some(m + 10), m + 9, 60, 120), "a clock set back");
        assert!(!counted_when_sent(None, m, 60, 120), "not queued here");
        assert!(!counted_when_sent(Some(m), m, 121, 120), "more envelopes a minute than operations");
    }
}
