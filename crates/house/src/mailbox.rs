//! Accepting verified envelopes into this house's mailboxes (spec §7, §9), and the optional push.
//!
//! [`Mailbox::accept`] reads what it needs in one query (per recipient: card, whether it already
//! holds the envelope, list hits, rate window, what the mailbox holds), decides per recipient with
//! [`policy::decide`] and [`quota_full`], then writes one batch: a rate-window count (guarded by
//! the `rate_cap` CHECK) and an `INSERT … ON CONFLICT DO NOTHING` per accepted recipient, which
//! carries its mailbox's tally on (guarded by the `mailbox_quota` CHECK) and whose row count
//! tells a duplicate.
//! Rates and lists key on the sender's site (`site.rs`): a sender's every subdomain shares one
//! rate window, and a block of a domain blocks its subdomains.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::Context;
use nyx5_proto::vecmap::{VecMap, VecSet};
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Refusal, Timestamp, Value, Verified, b64};

use crate::inboxes::{BUCKET_PREFIX, bucket, bucket_suffix, json_list};
use crate::libro::Libro;
use crate::ports::{Db, Net, OutRequest, OutResponse, PortError};
use crate::view::{Core, Post, view};
use crate::{port_error, store};
use nyx5_rules::policy::{self, Decision, Facts, Policy};

/// The header that carries the domain's signature on a webhook push.
pub const PUSH_HEADER: &str = "X-Nyx5-Push";
/// The `type` of the push wrapper.
pub const PUSH_TYPE: &str = "nyx5.push";

/// The canonical body of a push of `env` to `to`: the wrapper the domain key signs.
pub fn push_body(house: &str, to: &Address, pushed: Timestamp, env: &Envelope) -> Vec<u8> {
    let mut out = String::with_capacity(env.canonical_str().len() + 160);
    // Members in canonical order: envelope, house, pushed, to, type. The envelope is spliced as
    // its stored canonical text rather than parsed and written again.
    out.push_str("{\"envelope\":");
    out.push_str(env.canonical_str());
    out.push_str(",\"house\":");
    nyx5_proto::json::write_string(house, &mut out);
    out.push_str(",\"pushed\":");
    nyx5_proto::json::write_string(&pushed.to_rfc3339(), &mut out);
    out.push_str(",\"to\":");
    nyx5_proto::json::write_string(to.as_str(), &mut out);
    out.push_str(",\"type\":");
    nyx5_proto::json::write_string(PUSH_TYPE, &mut out);
    out.push('}');
    out.into_bytes()
}
/// How many times accepting re-reads the rate windows and usage after losing a race on
/// `rate_cap` or `mailbox_quota`.
pub const ACCEPT_ATTEMPTS: usize = 3;
/// How long an acknowledged envelope keeps its body; then the tick drops it (the row, and so its
/// id for duplicates, stays).
pub const ACKED_BODY_KEEP_MS: i64 = 7 * 24 * 3_600_000;
/// Most bodies of envelopes acknowledged past one still waiting (moved below zero) one tick drops.
pub const BODY_DROP_BATCH: i64 = 100;
/// Most watermark raises whose bodies one tick drops (each spans at most 500 rows above zero):
/// 92,160 raises a day, more than a house on D1's Free plan could write.
pub const BODY_DROP_RANGES: i64 = 64;
/// How many times an acknowledgment reads and decides again after another changed its mailbox
/// under it.
pub const ACK_ATTEMPTS: usize = 3;

/// What acknowledging does with the envelopes of an ack still waiting (`waiting`: `(id, n,
/// counted)` in `n` order, every `n` above `read`) in a mailbox whose watermark is `read` and whose
/// oldest envelope waiting that the ack does not name is `other`. The watermark rises over the
/// named envelopes below `other` (all of them, when `other` is `None`): every envelope between the
/// old watermark and the new one is named or already acknowledged, so nothing still waiting falls
/// under it. The named envelopes above the new watermark (past `other`) are moved below zero one
/// by one. Pure.
pub fn plan_ack(read: i64, other: Option<i64>, waiting: &[(String, i64, bool)]) -> store::inbox::AckPlan {
    let through = waiting.iter().map(|(_, n, _)| *n).filter(|n| other.is_none_or(|o| *n < o)).fold(read, i64::max);
    let moved: Vec<&str> = waiting.iter().filter(|(_, n, _)| *n > through).map(|(id, _, _)| id.as_str()).collect();
    store::inbox::AckPlan {
        read,
        through,
        moved: (!moved.is_empty()).then(|| json_list(moved)),
        acked: i64::try_from(waiting.len()).unwrap_or(i64::MAX),
        counted: i64::try_from(waiting.iter().filter(|(_, _, counted)| *counted).count()).unwrap_or(i64::MAX),
    }
}

/// What a mailbox holds: envelopes waiting to be acknowledged, and the bytes it stores (those
/// envelopes, and acknowledged ones until their bodies are dropped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub envelopes: i64,
    pub bytes: i64,
}

impl Held {
    /// What the mailbox holds, as one recipient's row of `store::mailbox::inbound_facts` says.
    pub fn of_facts(facts: &crate::ports::Row) -> Held {
        Held { envelopes: facts.int("held_envelopes").unwrap_or(0), bytes: facts.int("held_bytes").unwrap_or(0) }
    }
}

/// Whether one more envelope of `size` bytes would pass `quota` for a mailbox holding `held`:
/// the refusal to give that recipient, 429 (temporary, so the sending house keeps it queued
/// and retries, as SMTP's 452 "mailbox full" does) until its agent acknowledges mail. Pure.
pub fn quota_full(local: &str, held: Held, size: i64, quota: store::mailbox::Quota) -> Option<Error> {
    let over_count = held.envelopes.saturating_add(1) > quota.max_envelopes;
    let over_bytes = held.bytes.saturating_add(size) > quota.max_bytes;
    // What the mailbox holds is its agent's business: the reason names the quota, not the count.
    (over_count || over_bytes).then(|| {
        Refusal::MailboxFull.because(format!(
            "the mailbox of {local} is full (at most {} envelopes and {} bytes waiting); try again later",
            quota.max_envelopes, quota.max_bytes
        ))
    })
}

pub use nyx5_rules::mailbox::Outcome;

/// What one query tells about a recipient before anything is decided.
struct Recipient {
    card: String,
    webhook: Option<String>,
    /// The sender of the envelope with this id already in the mailbox.
    holder: Option<String>,
    blocked: bool,
    allowed: bool,
    voucher_allowed: bool,
    rate_count: i64,
    held: Held,
}

/// What [`Mailbox::accept`] read before deciding: whether the Libro sends (it passes every
/// list), the recipients' list and rate window, the sender's site and vouch, and each known
/// recipient's facts.
struct Read<'e> {
    from_libro: bool,
    locals_json: String,
    window: i64,
    sender_site: &'e str,
    aval: Option<Result<(Address, String), policy::VouchFault>>,
    known: VecMap<String, Recipient>,
}

/// The rate windows' counts by bucket and the mailboxes' usage by local part, read again.
type Windows = (VecMap<String, i64>, VecMap<String, Held>);

/// Which races an earlier batch of [`Mailbox::accept`] lost.
#[derive(Default)]
struct Lost {
    rate: bool,
    quota: bool,
}

/// What every insert of one envelope shares: its rate window and cap, when it arrived, the
/// mailbox quota.
struct Limits {
    window: i64,
    cap: i64,
    at: i64,
    quota: store::mailbox::Quota,
}

/// One attempt's batch as it is built: the statements, which of them insert the envelope for
/// whom, the refusals, and the sender's balance, stamp count and journal head as its stamps
/// spend them.
struct Batch<'a> {
    balance: i64,
    stamp_uses: i64,
    head: Option<crate::libro::Head>,
    stmts: Vec<crate::ports::Stmt>,
    inserts: Vec<(&'a str, usize)>,
    refused: Vec<(&'a str, Error)>,
}

impl<'a> Batch<'a> {
    /// Adds what `decision` writes for `local`: the rate count and the insert (and the stamp's
    /// link) for an accepted envelope, the refusal otherwise.
    #[inline(always)]
    fn stage(
        &mut self,
        env: &Envelope,
        local: &'a str,
        bucket: &str,
        decision: Decision,
        stamp: Option<String>,
        limits: &Limits,
    ) {
        match decision {
            // Paid above, or refused: never left unpaid.
            Decision::Stamped { .. } => {
                self.refused.push((local, Error::new(ErrorKind::Internal, "a stamp left unpaid")))
            }
            Decision::Accept { counted } => {
                if counted {
                    self.stmts.push(store::agents::count_in_window(bucket, limits.window, limits.cap));
                }
                let insert = store::mailbox::insert(
                    local,
                    env.id(),
                    env.from().as_str(),
                    env.canonical_str(),
                    limits.at,
                    limits.quota,
                );
                self.inserts.push((local, self.stmts.len()));
                self.stmts.push(insert);
                if let Some(entry_id) = stamp {
                    self.stmts.push(store::mailbox::set_stamp(local, env.id(), &entry_id));
                }
            }
            Decision::Reject(e) => self.refused.push((local, e)),
        }
    }
}

/// The refusal for an expired envelope, if it is: temporary when it expired lately by this
/// house's clock, which may be wrong. (A mailbox that holds it already answers "delivered".)
#[inline(always)]
fn expiry_refusal(env: &Envelope, now: Timestamp) -> Option<Error> {
    // An expired envelope is refused, except by a mailbox that holds it already: that answer
    // is "delivered", so a sender whose earlier attempt arrived unbeknownst to it (its
    // answer lost) never bounces what was delivered (the simulator's seed 119).
    // Expired lately by this house's clock: a refusal its clock may be wrong about (run ahead
    // days and not yet set right), so temporary — the sender's house ends the job at the
    // envelope's expiry by its own clock (simulator seed 633).
    env.check_not_expired(now).err().map(|e| match env.expires() {
        Some(end) if nyx5_proto::limits::ended_lately(end, now) => Refusal::ExpiredLately
            .because(format!("envelope {} expired by this house's clock, lately; try again later", env.id())),
        _ => e,
    })
}

/// The mailboxes: accepting mail for local agents (spec §6) and the webhook pushes it leaves
/// to send after the answer.
pub struct Mailbox<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Mailbox);

impl<'h, D: Db, N: Net> Mailbox<'h, D, N> {
    /// The Libro and its system agents, over the same borrows.
    pub fn libro(&self) -> Libro<'h, D, N> {
        Libro { core: self.core, post: self.post }
    }
}

impl<'h, D: Db, N: Net> Mailbox<'h, D, N> {
    /// Accepts a verified envelope from `sender` for `recipients` (those not at this house are
    /// misdirected, 421). Idempotent by envelope id: a recipient that holds it already is a
    /// `Duplicate`. Accepted recipients with a webhook get a push afterwards.
    pub async fn accept(
        &self,
        env: &Verified<Envelope>,
        sender: &Verified<AgentCard>,
        recipients: &[Address],
    ) -> Result<Vec<(Address, Outcome)>, Error> {
        if sender.address() != env.from() {
            return Err(Refusal::NotTheSender.because(format!(
                "card of {} cannot send for {}",
                sender.address(),
                env.from()
            )));
        }
        let now = self.now();
        let mut decided: VecMap<String, Outcome> = VecMap::new();
        let mut locals: VecSet<&str> =
            recipients.iter().filter(|a| a.domain() == self.config.domain).map(Address::local).collect();
        let expired = expiry_refusal(env, now);
        // Dispatch: the house's own agents, answered and taken off the list: an operation for the Libro
        // is done, not stored (libro/mod.rs); a quote for `tareas@` is a task taken
        // (libro/tareas.rs); `verifica@` reads no mail.
        // (`operate` answers an operation done or refused before as it was, even past `expires`.)
        // This is not the only way in: the house's own agents hand their operations to
        // `operate` directly (`Libro::operate_as`), so a check every operation needs belongs
        // in `operate`, not here.
        if locals.remove(nyx5_rules::libro::LIBRO) {
            let outcome = self.libro().operate(env, sender).await;
            decided.insert(nyx5_rules::libro::LIBRO.to_owned(), outcome);
        }
        if locals.remove(nyx5_rules::libro::TAREAS) {
            let outcome = self.libro().take_task(env, sender).await;
            decided.insert(nyx5_rules::libro::TAREAS.to_owned(), outcome);
        }
        if locals.remove(nyx5_rules::a2a::GATEWAY) {
            let gateway = crate::a2a_tasks::Tasks { core: self.core, post: self.post };
            decided.insert(nyx5_rules::a2a::GATEWAY.to_owned(), gateway.answer(env, sender).await);
        }
        if locals.remove(nyx5_rules::libro::VERIFICA) {
            let refusal =
                Refusal::TakesNoMail.because("verifica@ takes no mail: name it arbiter of an escrow with terms.verify");
            decided.insert(nyx5_rules::libro::VERIFICA.to_owned(), Outcome::Rejected(refusal));
        }
        if locals.is_empty() {
            return Ok(self.answers(recipients, &decided));
        }
        // Read: what one query tells about the sender and every local recipient before anything
        // is decided: card, webhook, whether it holds this envelope id, blocks and allows, the
        // rate window and what its mailbox holds. The house's own Libro (deadline notices)
        // passes every list.
        let from_libro = self.libro().is_libro(env.from());

        let locals_json = json_list(locals.iter().copied());
        let window = now.millis() / 60_000;
        let sender_site = crate::site::site(env.from().domain());
        let blocks = blocked_entries(env);
        let allows = policy::sender_entries(env.from());
        let aval = policy::aval(env);
        let vouchers = match &aval {
            Some(Ok((voucher, _))) => policy::sender_entries(voucher).to_vec(),
            _ => Vec::new(),
        };
        let lookup = store::mailbox::Lookup {
            locals: &locals_json,
            envelope_id: env.id(),
            blocks: &json_list(blocks.iter().map(String::as_str)),
            allows: &json_list(allows.iter().map(String::as_str)),
            vouchers: &json_list(vouchers.iter().map(String::as_str)),
            bucket_prefix: BUCKET_PREFIX,
            bucket_suffix: &bucket_suffix(sender_site),
            window,
        };
        let facts = store::mailbox::inbound_facts(self.db, &lookup).await?;
        let known: VecMap<String, Recipient> = facts
            .into_iter()
            .filter_map(|r| {
                let recipient = Recipient {
                    card: r.text("card")?.to_owned(),
                    webhook: r.text("webhook").map(str::to_owned),
                    holder: r.text("holder").map(str::to_owned),
                    blocked: r.int("blocked")? != 0,
                    allowed: r.int("allowed")? != 0,
                    voucher_allowed: r.int("voucher_allowed") == Some(1),
                    rate_count: r.int("rate_count").unwrap_or(0),
                    held: Held::of_facts(&r),
                };
                Some((r.text("local")?.to_owned(), recipient))
            })
            .collect();
        let read = Read { from_libro, locals_json, window, sender_site, aval, known };
        let candidates = self.settle_before_writes(env, &locals, &read.known, expired.as_ref(), now, &mut decided);
        // Decide and write: every candidate, the accepted ones (with their counts and stamps) in
        // one guarded batch; a batch that loses a race on a rate window, a quota or the Libro is
        // decided again from fresh reads, at most `ACCEPT_ATTEMPTS` times.
        let cap = self.config.inbound_per_domain_per_minute;
        let quota = self.config.quota();
        let limits = Limits { window: read.window, cap, at: now.millis(), quota };
        let size = i64::try_from(env.canonical_str().len()).unwrap_or(i64::MAX);
        let buckets: Vec<String> = candidates.iter().map(|(l, _, _)| bucket(l, read.sender_site)).collect();
        let mut accepted = Vec::new();
        let mut lost = Lost::default();
        // Stamps and vouches need the Libro: the sender's balance, the journal's head, the bond.
        let needs_libro = candidates.iter().any(|(_, p, _)| matches!(p, Policy::Stamp { .. })) || read.aval.is_some();
        let bond_id = match &read.aval {
            Some(Ok((_, bond))) => Some(bond.as_str()),
            _ => None,
        };
        for attempt in 0..ACCEPT_ATTEMPTS {
            let last = attempt + 1 == ACCEPT_ATTEMPTS;
            let libro = if needs_libro { Some(self.libro().stamp_facts(env.from(), bond_id).await?) } else { None };
            let mut batch = Batch {
                balance: libro.as_ref().map_or(0, |l| l.balance),
                stamp_uses: libro.as_ref().map_or(0, |l| l.uses),
                head: libro.as_ref().map(|l| l.head.clone()),
                stmts: Vec::new(),
                inserts: Vec::new(),
                refused: Vec::new(),
            };
            // The first attempt decides with what the facts query read; after losing a race on
            // `rate_cap` or `mailbox_quota`, the windows and the usage are read again.
            let fresh: Option<Windows> = if attempt == 0 {
                None
            } else {
                let rows =
                    store::mailbox::rate_counts(self.db, &json_list(buckets.iter().map(String::as_str)), read.window)
                        .await?;
                let counts =
                    rows.into_iter().filter_map(|r| Some((r.text("bucket")?.to_owned(), r.int("count")?))).collect();
                let rows = store::mailbox::usage(self.db, &read.locals_json).await?;
                let usage = rows
                    .into_iter()
                    .filter_map(|r| {
                        Some((
                            r.text("local")?.to_owned(),
                            Held { envelopes: r.int("envelopes")?, bytes: r.int("bytes")? },
                        ))
                    })
                    .collect();
                Some((counts, usage))
            };
            for ((local, policy, known), bucket) in candidates.iter().zip(&buckets) {
                let (rate_count, held) = match &fresh {
                    None => (known.rate_count, known.held),
                    Some((counts, usage)) => {
                        (counts.get(bucket).copied().unwrap_or(0), usage.get(*local).copied().unwrap_or_default())
                    }
                };
                // After losing the same race twice, whoever still needs a count (or room) is refused.
                let held = if last && lost.quota { Held { envelopes: quota.max_envelopes, bytes: 0 } } else { held };
                let vouch = self.vouch(env, &read, libro.as_ref(), local, known, now);
                let facts = Facts {
                    blocked: known.blocked && !read.from_libro,
                    allowed: known.allowed || read.from_libro,
                    rate_count: if last && lost.rate { cap } else { rate_count },
                    rate_cap: cap,
                    balance: batch.balance,
                    vouch,
                };
                let decision = match policy::decide(policy, env, env.from(), &facts, &self.config.domain) {
                    d @ (Decision::Accept { .. } | Decision::Stamped { .. }) => {
                        match quota_full(local, held, size, quota) {
                            Some(e) => Decision::Reject(e),
                            None => d,
                        }
                    }
                    refusal => refusal,
                };
                let (decision, stamp) = self.pay_stamp(env, sender, local, decision, now, &mut batch)?;
                batch.stage(env, local, bucket, decision, stamp, &limits);
            }
            let changes = if batch.stmts.is_empty() {
                Vec::new()
            } else {
                match crate::live::batch(self.db, self.post.bell, batch.stmts).await {
                    Ok(c) => c,
                    Err(PortError::Constraint { name }) if name == store::constraint::RATE_CAP && !last => {
                        lost.rate = true;
                        continue;
                    }
                    Err(PortError::Constraint { name }) if name == store::constraint::MAILBOX_QUOTA && !last => {
                        lost.quota = true;
                        continue;
                    }
                    // A stamp lost a race on the journal or the balance: read the Libro again.
                    Err(PortError::Constraint { name })
                        if needs_libro
                            && (store::libro::RACES.contains(&name.as_str()) || name == store::libro::CAUSE_DONE) =>
                    {
                        if last {
                            return Err(match name.as_str() {
                                "balance_negative" => {
                                    Refusal::StampUnaffordable.because("not enough balance for the stamp")
                                }
                                _ => Refusal::LibroBusy.because("the Libro is busy; try again"),
                            });
                        }
                        continue;
                    }
                    Err(e) => return Err(port_error(e)),
                }
            };
            for (local, e) in batch.refused {
                decided.insert(local.to_owned(), Outcome::Rejected(e));
            }
            for (local, i) in batch.inserts {
                let outcome = if changes.get(i) == Some(&1) { Outcome::Accepted } else { Outcome::Duplicate };
                if outcome == Outcome::Accepted {
                    accepted.push(local);
                }
                decided.insert(local.to_owned(), outcome);
            }
            break;
        }
        self.push_accepted(env, &read.known, accepted).await;
        Ok(self.answers(recipients, &decided))
    }

    /// Each recipient's outcome, in the order given: those not at this house are misdirected
    /// (421); a local one without a decision is an internal error.
    #[inline(always)]
    fn answers(&self, recipients: &[Address], decided: &VecMap<String, Outcome>) -> Vec<(Address, Outcome)> {
        recipients
            .iter()
            .map(|a| {
                let outcome = if a.domain() != self.config.domain {
                    Outcome::Rejected(Refusal::NotAtThisHouse.because(format!("{a} is not at this house")))
                } else {
                    decided
                        .get(a.local())
                        .cloned()
                        .unwrap_or_else(|| Outcome::Rejected(Error::new(ErrorKind::Internal, "no decision")))
                };
                (a.clone(), outcome)
            })
            .collect::<Vec<_>>()
    }

    /// Who is settled before any write (unknown, a duplicate, expired, an id another sender
    /// holds, a card that no longer receives), into `decided`; and the inbox policy of everyone
    /// else, who is left to decide.
    #[inline(always)]
    fn settle_before_writes<'a>(
        &self,
        env: &Verified<Envelope>,
        locals: &VecSet<&'a str>,
        known: &'a VecMap<String, Recipient>,
        expired: Option<&Error>,
        now: Timestamp,
        decided: &mut VecMap<String, Outcome>,
    ) -> Vec<(&'a str, Policy, &'a Recipient)> {
        let mut candidates: Vec<(&str, Policy, &Recipient)> = Vec::new();
        for local in locals {
            let outcome = match (known.get(*local), expired) {
                (None, _) => {
                    Outcome::Rejected(Refusal::UnknownAgent.because(format!("no agent {local}@{}", self.config.domain)))
                }
                (Some(Recipient { holder: Some(s), .. }), _) if s == env.from().as_str() => Outcome::Duplicate,
                // Past `expires`, refused — and whether another sender holds the id is nobody's
                // business.
                (Some(_), Some(e)) => Outcome::Rejected(e.clone()),
                (Some(Recipient { holder: Some(_), .. }), None) => Outcome::Rejected(
                    Refusal::EnvelopeIdTaken
                        .because(format!("envelope id {} is already taken by another sender", env.id())),
                ),
                (Some(r @ Recipient { holder: None, .. }), None) => {
                    match self.post.policies.policy(local, &r.card, now) {
                        Ok(policy) => {
                            candidates.push((local, policy, r));
                            continue;
                        }
                        Err(e) => Outcome::Rejected(e),
                    }
                }
            };
            decided.insert((*local).to_owned(), outcome);
        }
        candidates
    }

    /// What the envelope's vouch (`aval`) is worth to recipient `local`, given the bond the
    /// Libro holds.
    #[inline(always)]
    fn vouch(
        &self,
        env: &Verified<Envelope>,
        read: &Read<'_>,
        libro: Option<&crate::libro::StampFacts>,
        local: &str,
        known: &Recipient,
        now: Timestamp,
    ) -> policy::Vouch {
        match (&read.aval, libro) {
            (None, _) => policy::Vouch::Absent,
            (Some(Err(fault)), _) => policy::Vouch::Refused(*fault),
            (Some(Ok((voucher, _))), Some(l)) => match self.registry().local_address(local) {
                Ok(me) => policy::vouch(voucher, l.bond.as_ref(), env.from(), &me, known.voucher_allowed, now),
                Err(_) => policy::Vouch::Refused(policy::VouchFault::NotRecipients),
            },
            (Some(Ok(_)), None) => policy::Vouch::Absent,
        }
    }

    /// A stamp the policy asks for, paid into `batch` (the Libro's entry, the sender's count in
    /// its authority's hour) or refused: it moves money, so only under the sender's current key,
    /// within its delegation's cap and its authority. Answers the decision left and the stamp's
    /// entry id.
    #[inline(always)]
    fn pay_stamp(
        &self,
        env: &Verified<Envelope>,
        sender: &Verified<AgentCard>,
        local: &str,
        decision: Decision,
        now: Timestamp,
        batch: &mut Batch<'_>,
    ) -> Result<(Decision, Option<String>), Error> {
        let mut stamp = None;
        let decision = match decision {
            // A stamp moves money: the sender's current key pays it, within its delegation's cap.
            Decision::Stamped { .. } if env.signature().map(|s| s.kid) != Some(sender.sig()) => {
                Decision::Reject(Refusal::NeedsCurrentKey.because("a stamp is paid under the sender's current key"))
            }
            Decision::Stamped { amount } if sender.scope().and_then(|s| s.cap).is_some_and(|cap| amount > cap) => {
                Decision::Reject(Refusal::OverDelegationCap.because(format!(
                    "{} is delegated with a cap of {} tok; its stamp is {amount}",
                    sender.address(),
                    sender.scope().and_then(|s| s.cap).unwrap_or(0)
                )))
            }
            // Under its delegation's authority, a stamp goes only if it may go alone: mail
            // cannot wait for a human, so an ask refuses it (docs/SPEC.md §16b).
            Decision::Stamped { amount } if let Some(e) = stamp_authority(sender, amount, batch.stamp_uses) => {
                Decision::Reject(e)
            }
            Decision::Stamped { amount } => match (self.registry().local_address(local), batch.head.clone()) {
                (Ok(to), Some(h)) => {
                    let (entry_id, entry, stmt) = self.libro().stamp_entry(env, &to, amount, h)?;
                    batch.head = Some((entry.n, entry.sha256_hex()));
                    batch.balance -= amount;
                    batch.stmts.push(stmt);
                    // Counted in the hour of the sender's own authority, if it limits one.
                    if let Some(limit) = sender.scope().and_then(|s| s.authority.as_ref()).and_then(|a| a.max_per_hour)
                    {
                        // Guarded: deliveries at once lose the race and read again.
                        let key = format!("{}:{local}", env.id());
                        let subject = format!("card:{}", sender.address());
                        let at = now.millis();
                        batch.stmts.extend(crate::store::libro::record_use(&subject, at, &key, amount, Some(limit)));
                        batch.stamp_uses += 1;
                    }
                    stamp = Some(entry_id);
                    Decision::Accept { counted: true }
                }
                _ => Decision::Reject(Error::new(ErrorKind::Internal, "a stamp without the Libro")),
            },
            d => d,
        };
        Ok((decision, stamp))
    }

    /// Queues a webhook push for each accepted recipient that has a webhook.
    #[inline(always)]
    /// Pushes each accepted envelope to its recipient's webhook, unless the push would carry a
    /// held sender's mail where its holds do not let it go (docs/SPEC.md §7c: a webhook is a way
    /// out, judged when the push happens, since the webhook may have changed since the send).
    async fn push_accepted(&self, env: &Verified<Envelope>, known: &VecMap<String, Recipient>, accepted: Vec<&str>) {
        let hooked: Vec<(Address, &str)> = accepted
            .iter()
            .filter_map(|local| match known.get(*local) {
                Some(Recipient { webhook: Some(hook), .. }) => {
                    self.registry().local_address(local).ok().map(|to| (to, hook.as_str()))
                }
                _ => None,
            })
            .collect();
        if hooked.is_empty() {
            return;
        }
        // One read for all of them; a failed read pushes nothing (the mailbox holds the mail).
        let Ok(holds) = (crate::drafts::Drafts { core: self.core }).push_holds(env).await else { return };
        for (to, hook) in hooked {
            if crate::drafts::push_allowed(&holds, &to, hook, env.kind().as_str(), &self.config.domain) {
                self.push(hook, &to, env);
            }
        }
    }

    /// Queues a push of the envelope to a webhook, inside the house's push wrapper (docs/SPEC.md
    /// §9d): `{"type": "nyx5.push", "house", "to", "pushed", "envelope"}`, its canonical bytes
    /// signed by the domain key as a push. The house chose every top-level member, so no envelope
    /// an agent shaped is ever what the domain key signs.
    ///
    /// Nothing is sent here: the adapters call [`Mailbox::send_pushes`] once the answer is out (the
    /// Worker in `wait_until`, `nyx5 serve` in a task of its own), so a webhook that hangs delays
    /// neither the sender's answer nor a queue tick. At most [`MAX_PENDING_PUSHES`] wait, and at
    /// most [`MAX_PUSHES_PER_WEBHOOK`] for one URL; a push past that is dropped, since the
    /// mailbox stays authoritative. A webhook the outbound policy no longer allows (stored
    /// before it was checked) is never pushed to.
    pub(crate) fn push(&self, url: &str, to: &Address, env: &Envelope) {
        if self.net.policy.check_learnt(url).is_err() {
            return;
        }
        let body = push_body(&self.config.domain, to, self.now(), env);
        let sig = b64::encode(&self.config.key.sign(Context::Push, &body));
        let request = OutRequest {
            method: "POST".into(),
            url: url.to_owned(),
            headers: vec![("content-type".into(), "application/json".into()), (PUSH_HEADER.to_owned(), sig)],
            body,
        };
        if let Ok(mut pending) = self.post.pushes.try_borrow_mut()
            && pending.len() < MAX_PENDING_PUSHES
            && pending.iter().filter(|p| p.url == request.url).count() < MAX_PUSHES_PER_WEBHOOK
        {
            pending.push(request);
        }
    }

    /// Whether pushes wait to be sent (see `Mailbox::push`).
    pub fn has_pushes(&self) -> bool {
        self.post.pushes.try_borrow().is_ok_and(|p| !p.is_empty())
    }

    /// Sends the pushes waiting now, all at once, each with the network's deadline: one webhook
    /// that hangs holds up no other. A failure is ignored: the mailbox stays authoritative.
    pub async fn send_pushes(&self) {
        let pending = match self.post.pushes.try_borrow_mut() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => return,
        };
        type Sending<'a> = Pin<Box<dyn Future<Output = Result<OutResponse, PortError>> + 'a>>;
        let mut sending: Vec<Sending<'_>> =
            pending.into_iter().map(|request| Box::pin(self.net.send(request)) as Sending<'_>).collect();
        std::future::poll_fn(|cx| {
            sending.retain_mut(|send| send.as_mut().poll(cx).is_pending());
            if sending.is_empty() { Poll::Ready(()) } else { Poll::Pending }
        })
        .await;
    }
}

/// The block-list entries that hold `env`: its sender's ([`policy::block_entries`]) and, for a
/// Libro's receipt, its operator's (the receipt's `from`): a receipt is what the operator made
/// the Libro send, and a recipient who blocked the operator hears nothing of its operations from
/// any house (issue 34). The receipt need not be verified for this: its text can only add
/// entries, and so only hold more. Pure.
fn blocked_entries(env: &Envelope) -> Vec<String> {
    let mut blocks = policy::block_entries(env.from(), crate::site::psl());
    let operator = env
        .content()
        .filter(|c| env.kind() == nyx5_proto::envelope::Kind::Receipt && c.media == nyx5_proto::receipt::MEDIA)
        .and_then(|c| c.body.as_object())
        .and_then(|b| b.get("from"))
        .and_then(Value::as_str)
        .and_then(|from| Address::parse(from).ok());
    if let Some(operator) = operator {
        for entry in policy::block_entries(&operator, crate::site::psl()) {
            if !blocks.contains(&entry) {
                blocks.push(entry);
            }
        }
    }
    blocks
}

pub use crate::view::MAX_PENDING_PUSHES;
pub use crate::view::MAX_PUSHES_PER_WEBHOOK;

/// Why `sender`'s delegated authority refuses a stamp of `amount`, if it does: prohibited, or
/// anything it would ask a human about (a stamp is costly, and mail does not wait).
fn stamp_authority(sender: &AgentCard, amount: i64, hour_ops: i64) -> Option<Error> {
    use nyx5_proto::authority::{Consequence, Intent, Verdict};
    let authority = sender.scope()?.authority.as_ref()?;
    let intent = Intent {
        amount: Some(amount),
        currency: Some(nyx5_proto::libro::CURRENCY),
        consequence: Consequence::Costly,
        hour_ops,
        approved: false,
    };
    match authority.judge(&intent) {
        Verdict::Allowed => None,
        Verdict::Refused(e) => {
            Some(Refusal::StampNotAuthorised.because(format!("{}: its stamp: {}", sender.address(), e.reason)))
        }
        Verdict::Ask(why) => Some(Refusal::StampNotAuthorised.because(format!(
            "{}: its stamp would need approval ({why}), and mail does not wait for it",
            sender.address()
        ))),
    }
}

/// What one page of a mailbox may hold (the store's bounds, named where the mailbox is).
pub use crate::store::inbox::PageBounds;

/// One change to an agent's allow or block list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListChange<'a> {
    /// `allow` or `block`.
    pub kind: &'a str,
    pub entry: String,
    /// Added (else removed).
    pub add: bool,
}

/// The mailbox's reads and writes for the routes (issue 37 §2, "routes call services"): mailbox
/// pages and acknowledgements, the allow and block lists, and where a mailbox lives.
impl<'h, D: Db, N: Net> Mailbox<'h, D, N> {
    /// A page of `local`'s mailbox read through the request's stale-tolerant `reads`, while the
    /// token's `nonce` is spent on the primary: two requests in flight, one round trip's wait. A
    /// replayed token fails the spend (401), and the page read beside it is never answered. A
    /// page of no envelopes (`limit` 0) reads nothing.
    pub async fn page(
        &self,
        reads: &crate::ports::Reads,
        local: &str,
        nonce: crate::ports::Stmt,
        bounds: PageBounds,
    ) -> Result<Vec<crate::ports::Row>, Error> {
        let stale = self.stale(reads);
        let page =
            async { if bounds.limit == 0 { Ok(Vec::new()) } else { store::inbox::page(&stale, local, bounds).await } };
        let (spent, rows) = crate::join::both(crate::live::batch(self.db, self.post.bell, vec![nonce]), page).await;
        spent.map_err(crate::auth::nonce_error)?;
        rows
    }

    /// [`Mailbox::page`], and when it finds nothing and `wait_ms` is more than 0, the mailbox read
    /// again each time this process writes it ([`crate::live`]) and every
    /// [`crate::live::recheck_every`] (at most [`crate::live::MAX_RECHECKS`] times), until a page
    /// has mail or `wait_ms` have passed (the house's clock; one that cannot sleep answers at
    /// once). The token was spent by the first read.
    pub async fn page_waiting(
        &self,
        reads: &crate::ports::Reads,
        local: &str,
        nonce: crate::ports::Stmt,
        bounds: PageBounds,
        wait_ms: i64,
    ) -> Result<Vec<crate::ports::Row>, Error> {
        let waits = wait_ms > 0 && bounds.limit > 0 && self.ground.clock.sleep(0).is_some();
        let (now, every) = (self.now().millis(), crate::live::recheck_every(wait_ms));
        let deadline = now.saturating_add(wait_ms);
        let mut listener = if waits { self.post.bell.listen(local, now, deadline) } else { None };
        let rows = self.page(reads, local, nonce, bounds).await?;
        let Some(listener) = listener.as_mut().filter(|_| rows.is_empty()) else { return Ok(rows) };
        let stale = self.stale(reads);
        // The deadline is the house's clock, which may step; the count of rechecks holds the
        // read to its wait (and its queries to the Worker's budget) whatever the clock does.
        for _ in 0..crate::live::MAX_RECHECKS {
            let left = deadline.saturating_sub(self.now().millis());
            if left <= 0 {
                break;
            }
            let nap = u64::try_from(left.min(every)).unwrap_or(0);
            let woke = listener.wait(self.ground.clock.sleep(nap)).await;
            listener.arm();
            // One query (the page's only when there is mail), so that the rechecks stay within a
            // Worker invocation's queries on a sharded house too.
            if store::inbox::waiting(&stale, local, bounds.after).await? {
                let rows = store::inbox::page(&stale, local, bounds).await?;
                if !rows.is_empty() {
                    return Ok(rows);
                }
            }
            if woke == crate::live::Woke::Closed {
                break;
            }
        }
        Ok(Vec::new())
    }

    /// Acknowledges the envelopes listed (`ids`, a canonical JSON array) in one batch that also
    /// spends the token's `nonce`, decided on the mailbox's facts read just before
    /// ([`plan_ack`]); another acknowledgement racing it ([`ACK_ATTEMPTS`] times) is 409.
    /// Answers how many were acknowledged.
    pub async fn ack(&self, local: &str, ids: &str, nonce: crate::ports::Stmt) -> Result<i64, Error> {
        for _ in 0..ACK_ATTEMPTS {
            let rows = store::inbox::ack_facts(self.db, local, ids).await?;
            let read = rows.first().and_then(|r| r.int("w")).unwrap_or(0);
            let other = rows.first().and_then(|r| r.int("other"));
            let waiting: Vec<(String, i64, bool)> = rows
                .iter()
                .filter_map(|r| Some((r.text("id")?.to_owned(), r.int("n")?, r.int("counted")? != 0)))
                .collect();
            let plan = plan_ack(read, other, &waiting);
            let mut stmts = vec![nonce.clone()];
            stmts.extend(store::inbox::ack(local, ids, &plan, self.now().millis(), self.config.quota()));
            match crate::live::batch(self.db, self.post.bell, stmts).await {
                Ok(_) => {}
                Err(PortError::Constraint { name }) if name == store::constraint::MAILBOX_ACK_RACED => continue,
                Err(e) => return Err(crate::auth::nonce_error(e)),
            }
            return Ok(plan.acked);
        }
        Err(Refusal::AckBusy.because("the mailbox is being acknowledged by another request; try again"))
    }

    /// `local`'s allow and block lists: a row per entry (`kind`, `entry`).
    pub fn lists(&self, local: &str) -> impl Future<Output = Result<Vec<crate::ports::Row>, Error>> {
        store::mailbox::lists(self.db, local)
    }

    /// Changes `local`'s lists in one batch, in the order given; each addition is guarded by
    /// the list's cap (`max` entries). Nothing to change writes nothing.
    pub async fn change_lists(&self, local: &str, changes: &[ListChange<'_>], max: i64) -> Result<(), Error> {
        if changes.is_empty() {
            return Ok(());
        }
        let stmts = changes
            .iter()
            .map(|c| {
                if c.add {
                    store::mailbox::add_entry(local, c.kind, &c.entry, max)
                } else {
                    store::mailbox::remove_entry(local, c.kind, &c.entry)
                }
            })
            .collect();
        crate::live::batch(self.db, self.post.bell, stmts).await.map_err(port_error)?;
        Ok(())
    }

    /// How many databases the house's mailboxes are spread over.
    pub fn databases(&self) -> usize {
        self.db.databases()
    }

    /// Begins or takes up the move of `local`'s mailbox to database `to` and advances it by one
    /// bounded step (the tick takes the next ones).
    pub async fn move_step(&self, local: &str, to: usize) -> Result<crate::ports::MoveStep, Error> {
        self.db.move_step(local, to).await.map_err(port_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watermark rises over the named envelopes up to the first one waiting that the ack does
    /// not name, and never past it; what is named beyond moves one by one.
    #[test]
    fn an_ack_raises_the_watermark_over_what_it_names_in_order() {
        let w = |items: &[(&str, i64)]| items.iter().map(|(id, n)| ((*id).to_owned(), *n, true)).collect::<Vec<_>>();
        // A page read in order and acknowledged whole: one raise, nothing moved.
        let plan = plan_ack(4, None, &w(&[("a", 5), ("b", 6), ("c", 9)]));
        assert_eq!((plan.through, plan.moved.as_deref(), plan.acked, plan.counted), (9, None, 3, 3));
        // 7 waits and is not named: the watermark stops below it; 9 moves.
        let plan = plan_ack(4, Some(7), &w(&[("a", 5), ("b", 6), ("c", 9)]));
        assert_eq!((plan.through, plan.moved.as_deref()), (6, Some(r#"["c"]"#)));
        // The oldest waiting is not named: nothing rises.
        let plan = plan_ack(4, Some(5), &w(&[("b", 6), ("c", 9)]));
        assert_eq!((plan.through, plan.moved.as_deref()), (4, Some(r#"["b","c"]"#)));
        // Nothing waiting among the ids: nothing to write.
        let plan = plan_ack(4, Some(5), &[]);
        assert_eq!((plan.through, plan.moved.as_deref(), plan.acked), (4, None, 0));
        assert!(
            store::inbox::ack("bo", "[]", &plan, 0, store::mailbox::Quota { max_envelopes: 1, max_bytes: 1 })
                .is_empty()
        );
        // Notices do not count towards the quota.
        let plan = plan_ack(0, None, &[("n".to_owned(), 1, false), ("e".to_owned(), 2, true)]);
        assert_eq!((plan.acked, plan.counted, plan.through), (2, 1, 2));
    }

    /// The quota's edges: the last envelope that fits, by count and by bytes, is taken; one more
    /// of either is refused (429), and so is one over both. Kills every mutant of `quota_full`
    /// (`>` → `>=` or `==` on either side, `||` → `&&`, the whole → `None`).
    #[test]
    fn a_mailbox_takes_up_to_its_quota_and_not_one_more() {
        let quota = store::mailbox::Quota { max_envelopes: 10, max_bytes: 100 };
        let full = |envelopes, bytes, size| quota_full("bo", Held { envelopes, bytes }, size, quota);
        assert!(full(9, 90, 10).is_none(), "the tenth envelope, the hundredth byte");
        assert!(full(0, 0, 100).is_none());
        for (envelopes, bytes, size) in [(10, 0, 1), (0, 91, 10), (0, 0, 101), (10, 100, 10), (12, 0, 1), (0, 150, 1)] {
            let e = full(envelopes, bytes, size).unwrap_or_else(|| panic!("{envelopes} {bytes} {size}"));
            assert_eq!((e.code(), e.refusal()), (429, Some(Refusal::MailboxFull)));
            // What the mailbox holds is its agent's business: the reason names the quota only.
            assert_eq!(
                e.reason,
                "the mailbox of bo is full (at most 10 envelopes and 100 bytes waiting); try again later"
            );
        }
    }
}
