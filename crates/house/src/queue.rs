//! The delivery queue (spec §7): one job per (envelope, destination domain), worked by
//! [`Queue::tick`]. Leases keep two ticks (the cron and the post-response kick) off the same job;
//! a failing domain is probed by one job while the others wait; temporary failures back off
//! exponentially; expiry, the give-up time and permanent refusals bounce. Bounces and delivery
//! receipts are notices signed by the domain key from `postmaster@<domain>`, put straight into
//! the (local) sender's mailbox in the same batch that ends the job.
//!
//! Decide, then do: [`Delivery`] is what the destination said, [`plan`] turns it into the next
//! state of the job and its domain (pure), and `apply` writes that plan in one guarded batch.

use std::cell::Cell;

use nyx5_proto::address::uuid_v4;
use nyx5_proto::crypto::Context;
use nyx5_proto::crypto::sha256;
use nyx5_proto::receipt::{self, Notice};
use nyx5_proto::relay::{self, RelayHeader};
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Timestamp, Value};

use crate::email::Email;
use crate::index::Index;
use crate::libro::Libro;
use crate::mailbox::Mailbox;
use crate::port_error;
use crate::ports::Local;
use crate::ports::{Db, Net, OutRequest, PortError, Row, Stmt};
use crate::store::queue::{self as store, Held};
use crate::view::{Core, Post, view};
use nyx5_rules::mailbox::Outcome;
pub use nyx5_rules::queue::{
    Bounce, Delivery, DomainEffect, Health, Job, JobState, MAX_ANSWER_BYTES, MAX_REASON_LEN, Place, Plan, Progress,
    Retry, Step, UNDETERMINED, UPKEEP_EVERY_MS, Verdict, clip, error_delivery, fair_order, is_temporary, late,
    left_a_backlog, plan, retry_at, took_whole_batch, undetermined_reason, upkeep_due, wire_reason,
};

pub use crate::config::{MAX_TICK_BATCH, TICK_BATCH};
/// How long into a tick it still attempts jobs sends took ([`Taken`]); the rest are given back
/// for the due scan. A Worker ends a kick 30 s after its answer, and an attempt can take one
/// delivery's timeout.
pub const TAKEN_BUDGET_MS: i64 = 15_000;
pub use nyx5_rules::queue::LEASE_MS;
/// How long finished envelopes stay listed in GET /outbox before they are purged.
pub const OUTBOX_KEEP_MS: i64 = 7 * 24 * 3_600_000;
/// Most finished envelopes one tick purges.
pub const PURGE_BATCH: i64 = 100;

/// What one tick did, counted in jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Delivery attempts made (local or over the network).
    pub attempted: usize,
    /// Jobs that ended delivered (to at least one recipient).
    pub delivered: usize,
    /// Jobs that stay pending after an attempt.
    pub retried: usize,
    /// Jobs that ended bounced (no recipient reached).
    pub bounced: usize,
    /// The federated index's crawl, when this house runs one.
    pub crawl: crate::index::CrawlReport,
    /// `verifica@`'s checks, when this house runs it.
    pub checks: crate::libro::verifica::ChecksReport,
    /// Escrows `tareas@` took back (tasks never delivered, or given up), when this house runs it.
    pub reclaimed: u32,
    /// Mailbox shards: what settling the hand-offs failed with (or gave up on), for the log.
    pub settle_error: Option<String>,
}

/// A due job as [`store::due`] reads it.
fn job_from_row(r: &Row) -> Option<Job> {
    let recipients = match r.text("recipients").map(Value::parse_str) {
        Some(Ok(Value::Array(list))) => {
            list.iter().filter_map(|a| a.as_str().and_then(|a| Address::parse(a).ok())).collect()
        }
        _ => Vec::new(),
    };
    let health = match (r.int("h_failures"), r.int("h_next_probe")) {
        (Some(failures), Some(next_probe)) => Some(Health { failures, next_probe }),
        _ => None,
    };
    Some(Job {
        made: r.int("made")?,
        envelope_id: r.text("envelope_id")?.to_owned(),
        domain: r.text("domain")?.to_owned(),
        recipients,
        attempts: r.int("attempts").unwrap_or(0),
        last_error: r.text("last_error").map(str::to_owned),
        progress: Progress::parse(r.text("result")),
        deadline: r.int("deadline").unwrap_or(0),
        expires: r.int("expires"),
        health,
    })
}

/// The upkeep of tables strangers fill, for the periodic tick, each statement with its cap
/// (`None`: it removes all it finds): the bodies of envelopes
/// acknowledged more than [`crate::mailbox::ACKED_BODY_KEEP_MS`] ago (a bounded number per
/// tick: moved ones by their `acked_at`, the rest by the watermark raises that acknowledged
/// them), cached cards past their five minutes, and names not verified for
/// [`crate::resolver::KNOWN_MS`].
pub fn upkeep_statements(now: i64) -> Vec<(crate::ports::Stmt, Option<i64>)> {
    use crate::mailbox::{BODY_DROP_BATCH, BODY_DROP_RANGES};
    use crate::store;
    let before = now.saturating_sub(crate::mailbox::ACKED_BODY_KEEP_MS);
    let [usage, bodies] = store::inbox::drop_bodies(before, BODY_DROP_BATCH);
    let [range_usage, range_bodies, raises] = store::inbox::drop_ranges(before, BODY_DROP_RANGES);
    // The statements whose count can reach their cap are the ones that mark a backlog.
    let mut stmts = vec![
        (usage, None),
        (bodies, Some(BODY_DROP_BATCH)),
        (range_usage, None),
        (range_bodies, None),
        (raises, Some(BODY_DROP_RANGES)),
    ];
    stmts.push((store::resolver::purge(now), None));
    stmts.push((store::resolver::forget_names(now, crate::resolver::KNOWN_MS), None));
    stmts
}

/// The delivery queue and the tick's upkeep: each due job delivered, retried, postponed or
/// bounced, then the services' own periodic work.
pub struct Queue<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
    pub(crate) upkept: &'h Cell<Option<i64>>,
    pub(crate) local: &'h dyn Local,
}

view!(Queue);

impl<'h, D: Db, N: Net> Queue<'h, D, N> {
    /// The mailboxes, over the same borrows.
    pub fn mailbox(&self) -> Mailbox<'h, D, N> {
        Mailbox { core: self.core, post: self.post }
    }

    /// The Libro and its system agents, over the same borrows.
    pub fn libro(&self) -> Libro<'h, D, N> {
        Libro { core: self.core, post: self.post }
    }

    /// The email bridge, over the same borrows.
    pub fn email(&self) -> Email<'h, D, N> {
        Email { core: self.core, post: self.post }
    }

    /// The index crawl, over the same borrows.
    pub fn index(&self) -> Index<'h, D, N> {
        Index { core: self.core, local: self.local }
    }
}

impl<'h, D: Db, N: Net> Queue<'h, D, N> {
    /// The purges of the tick's upkeep, in one batch, each with its cap (`None`: it removes all
    /// it finds): old nonces and rate windows, finished envelopes and their jobs, the bodies of
    /// acknowledged mail, expired cached cards and known names, sent email, the authority's
    /// counts past their hour (approvals decided a month ago), first arrivals of operations
    /// past their life (issue 34), and drafts a week past their expiry.
    fn upkeep_purges(&self, now: Timestamp) -> Vec<(crate::ports::Stmt, Option<i64>)> {
        let uncapped = |list: Vec<crate::ports::Stmt>| list.into_iter().map(|s| (s, None)).collect::<Vec<_>>();
        let capped = |list: Vec<crate::ports::Stmt>, cap: i64| list.into_iter().map(move |s| (s, Some(cap)));
        let mut purge = uncapped(crate::store::agents::purge(now.millis()));
        purge.extend(capped(store::purge(now.millis().saturating_sub(OUTBOX_KEEP_MS), PURGE_BATCH), PURGE_BATCH));
        purge.extend(upkeep_statements(now.millis()));
        let sent = crate::store::email::purge_out(now.millis().saturating_sub(OUTBOX_KEEP_MS), PURGE_BATCH);
        purge.push((sent, Some(PURGE_BATCH)));
        let authority = crate::store::libro::prune_authority(
            now.millis(),
            crate::libro::KEEP_DECIDED_MS,
            crate::libro::UPKEEP_BATCH,
        );
        purge.extend(capped(authority, crate::libro::UPKEEP_BATCH));
        let received = crate::store::libro::forget_received(
            now.millis().saturating_sub(2 * crate::libro::OP_LIFE_MS),
            PURGE_BATCH,
        );
        purge.push((received, Some(PURGE_BATCH)));
        // Drafts a week past their expiry, decided or not (docs/SPEC.md §7c): their asks first,
        // then the drafts (the same oldest ones both times).
        let [asks, drafts] = crate::store::drafts::purge(now.millis(), PURGE_BATCH);
        purge.push((asks, None));
        purge.push((drafts, Some(PURGE_BATCH)));
        // A2A tasks: ended ones after a week, open ones idle for a month (never one that owes).
        let tasks = crate::store::a2a::purge(
            now.millis().saturating_sub(crate::a2a_tasks::ENDED_LIFE_MS),
            now.millis().saturating_sub(crate::a2a_tasks::TASK_LIFE_MS),
            PURGE_BATCH,
        );
        purge.push((tasks, Some(PURGE_BATCH)));
        purge
    }

    /// Works the queue once: purges old nonces, rate windows and finished envelopes and does the
    /// time-driven upkeep (at most once a minute: [`upkeep_due`]), then takes up to
    /// `config.tick_batch` (default [`TICK_BATCH`]) due jobs and delivers, retries, postpones or
    /// bounces each. Safe to run twice at once and to repeat: every job is leased before it is
    /// worked.
    pub async fn tick(&self) -> Result<TickReport, Error> {
        let now = self.now();
        // The purges and the periodic work once a minute, before the deliveries (which a
        // hanging destination can hold until the runtime ends the invocation): a kick (every
        // accepted send ticks) otherwise delivers and nothing else (issue 36 §5). The minute
        // counts as done only once they and the mailbox moves' step (after the deliveries)
        // finished without leaving work behind: a tick whose deliveries failed early leaves the
        // minute undone, so the next tick steps the moves (the second hostile review of moves
        // in steps: a destination failing every minute starved them).
        let mut settled_error = None;
        let mut minute_done = None;
        let upkeep = upkeep_due(self.upkept.get(), now.millis());
        if upkeep {
            let (stmts, caps): (Vec<_>, Vec<_>) = self.upkeep_purges(now).into_iter().unzip();
            let changes = crate::live::batch(self.db, self.post.bell, stmts).await.map_err(port_error)?;
            // Mailbox shards: hand-offs a crash left, and those applied, settled (crate::shards).
            let settled = self.db.settle().await;
            let handoffs = *settled.as_ref().unwrap_or(&0);
            let more = self.periodic_upkeep(now).await || handoffs >= crate::shards::SETTLE_BATCH as u64;
            minute_done = (!left_a_backlog(&changes, &caps) && !more).then_some(now.millis());
            settled_error = settled.err();
        }
        let mut report = TickReport::default();

        // Each domain's health as this tick learns it: an earlier turn may find it failing.
        let mut health: VecMap<String, Option<Health>> = VecMap::new();
        let batch = self.config.tick_batch.clamp(1, MAX_TICK_BATCH);
        let mut left = usize::try_from(batch).unwrap_or(1);
        // Jobs sends took whose lease is no longer surely this process's go back before the scan,
        // which then finds them due as any job never tried.
        let (fresh, mut stale): (Vec<Taken>, Vec<Taken>) =
            self.post.taken.take().into_iter().partition(|t| within_window(t, now));
        *self.post.taken.borrow_mut() = fresh;
        self.release_untried(&mut stale, 0).await;
        // A second pass when the first delivered operations to the Libro that queued receipts
        // for other houses: they go out in this tick, not the next.
        for _pass in 0..2 {
            let rows = store::due(self.db, now.millis(), i64::try_from(left).unwrap_or(batch)).await?;
            left = left.saturating_sub(self.work_turns(&rows, left, &mut health, now, &mut report).await?);
            if left == 0 || !self.post.queued.take() {
                break;
            }
        }
        let emailed = self.email().send_emails(now).await;
        // The services' own work, each within its budget of fetches a tick (a house runs them
        // only when the operator turned them on).
        // `verifica@`'s checks.
        if self.config.verifica_enabled {
            report.checks = self.libro().run_checks(self.config.verifica_fetches).await.unwrap_or_default();
        }
        // And the desk's: escrows taken and never delivered go back to it.
        if self.config.tareas_enabled {
            report.reclaimed = self.libro().tareas_upkeep().await.unwrap_or_default();
        }
        // And the index's crawl, within its own budget of fetches.
        if self.config.index_enabled {
            report.crawl = self.index().crawl_index(self.config.index_fetches).await.unwrap_or_default();
        }
        // Each mailbox move under way, by one bounded step, last: a move's queries never take
        // the invocation's budget (D1's queries per invocation) from the deliveries, the email
        // or the services (the hostile reviews of moves in steps: before the deliveries, a step
        // past the budget left every tick delivering nothing; before the email and the
        // services, it could starve them). While one is under way the next tick takes the next
        // step rather than the next minute.
        if upkeep {
            let moves = self.db.advance_moves().await;
            self.upkept.set(if *moves.as_ref().unwrap_or(&false) { None } else { minute_done });
            let errors: Vec<String> =
                [settled_error, moves.err()].into_iter().flatten().map(|e| e.to_string()).collect();
            report.settle_error = (!errors.is_empty()).then(|| errors.join("; "));
        }
        emailed?;
        Ok(report)
    }

    /// What a tick does once a minute beside its purges (with them: [`upkeep_due`]), none of it
    /// failing the tick. Answers whether any part left work behind (a whole batch taken, or a
    /// failure): the next tick then runs it again, as a purge's backlog does.
    async fn periodic_upkeep(&self, now: Timestamp) -> bool {
        // Certifying stored cards again with a rotated domain key is upkeep, not delivery.
        let recertified = self.registry().recertify_some(now).await;
        let recertify_more =
            recertified.as_ref().map_or(true, |n| took_whole_batch(*n, crate::domain_keys::RECERTIFY_PER_TICK));
        // Pins made before migration 0005 are given their site, a few a minute (issue 35 §3).
        let sites = crate::store::resolver::fill_pin_sites(self.db, crate::store::resolver::PIN_SITES_PER_TICK).await;
        // So is the Libro's: welcome gifts owed, bonds that expired, approvals nobody decided.
        let libro_more = self.libro().libro_upkeep().await.unwrap_or(true);
        let sites_more = sites.map_or(true, |n| took_whole_batch(n, crate::store::resolver::PIN_SITES_PER_TICK));
        recertify_more || sites_more || libro_more
    }

    /// One job's turn, given its domain's `health` so far: late, it bounces; while the domain
    /// is failing and its probe is not due, the domain's jobs wait for the probe; otherwise it
    /// is attempted. Answers the domain's health afterwards.
    async fn work_turn(
        &self,
        job: Job,
        health: Option<Health>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<Option<Health>, Error> {
        if now.millis() >= job.deadline {
            let delivery = late(&job, now.millis(), &self.config.retry);
            return self.work(job, Some(delivery), health, now, report).await;
        }
        if let Some(h) = health
            && h.next_probe > now.millis()
        {
            let postpone = store::postpone_domain(&job.domain, h.next_probe, now.millis());
            crate::live::batch(self.db, self.post.bell, vec![postpone]).await.map_err(port_error)?;
            return Ok(health);
        }
        self.work(job, None, health, now, report).await
    }

    /// Leases `job`, then settles it with `decided` (a bounce decided without trying) or by
    /// attempting delivery; answers the domain's health afterwards.
    async fn work(
        &self,
        job: Job,
        decided: Option<Delivery>,
        health: Option<Health>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<Option<Health>, Error> {
        let pending = job.pending();
        let attempting = decided.is_none() && !pending.is_empty();
        let lease = now.millis().saturating_add(LEASE_MS);
        let first = attempting.then(|| self.first_attempt(&job, now));
        // The lease and the envelope it is for, in one round trip.
        let taken = self
            .db
            .write_returning(store::lease(
                (&job.envelope_id, &job.domain),
                now.millis(),
                lease,
                first.as_ref().map(|f| f.next_attempt),
                attempting.then_some(self.config.retry.give_up_after_ms),
                first.as_ref().map(|f| f.result.as_str()),
                Some(job.attempts),
            ))
            .await
            .map_err(port_error)?;
        let Some(row) = taken.first() else {
            return Ok(health); // another tick has it, or it changed since we looked
        };
        let held = Held { envelope_id: &job.envelope_id, domain: &job.domain, lease };
        let env = row.text("envelope").and_then(|text| Envelope::parse(text.as_bytes(), text.len()).ok());
        let Some(env) = env else {
            self.end_unreadable(held, &job, now, report).await?;
            return Ok(health);
        };
        self.attempt(&job, held, &env, decided, health, now, report).await
    }

    /// Ends a job whose envelope this house wrote and cannot read, rather than retry it forever.
    async fn end_unreadable(
        &self,
        held: Held<'_>,
        job: &Job,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), Error> {
        let delivery = Delivery::Permanent(ErrorKind::Internal.code(), "internal error".into());
        let plan = plan(job, &job.pending(), delivery, None, now.millis(), &self.config.retry);
        self.apply(held, job, None, &plan, now, report).await
    }

    /// What the lease of `job`'s next attempt writes (see [`store::lease`]): where the job waits
    /// should the attempt die, and the progress with every recipient it goes to `maybe`; the
    /// deadline as the job has it (the lease's SQL, or for a send `enqueue`, raises it to the
    /// give-up time while the attempt is out).
    fn first_attempt(&self, job: &Job, now: Timestamp) -> store::First {
        let pending = job.pending();
        store::First {
            lease_until: now.millis().saturating_add(LEASE_MS),
            next_attempt: retry_at(job, now.millis(), &self.config.retry),
            deadline: job.deadline,
            result: job.progress.with_maybe(&pending).to_value().canonical_string(),
        }
    }

    /// Settles a job whose lease this tick holds (`held`), with `decided` or by attempting
    /// delivery of `env`; answers the domain's health afterwards.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        job: &Job,
        held: Held<'_>,
        env: &Envelope,
        decided: Option<Delivery>,
        health: Option<Health>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<Option<Health>, Error> {
        let pending = job.pending();
        let attempting = decided.is_none() && !pending.is_empty();
        let (delivery, attempted, answered) = match decided {
            Some(d) => (d, false, false),
            None if !attempting => (Delivery::Delivered(Vec::new()), false, false),
            None => {
                let (d, answered) = self.deliver(&job.domain, env, &pending, now).await;
                (d, true, answered)
            }
        };
        if attempted {
            report.attempted += 1;
        }
        let health_in = if attempted { health } else { None };
        let mut plan = plan(job, &pending, delivery, health_in, now.millis(), &self.config.retry);
        plan.answered = answered;
        self.apply(held, job, Some(env), &plan, now, report).await?;
        Ok(match &plan.domain {
            DomainEffect::Failed(h, _) => Some(*h),
            DomainEffect::Recovered => None,
            DomainEffect::Unchanged => health,
        })
    }

    /// Works up to `limit` jobs in their turns ([`fair_order`]): the due ones the scan read
    /// (`rows`) and those whose first attempt a send took since the last tick ([`Taken`]), which
    /// the scan cannot see (they are leased) and the tick works without reading or leasing them.
    /// Answers how many turns it used.
    ///
    /// A taken job is attempted only while its lease is surely this process's: within the first
    /// half of it by a clock read afresh before each turn, and within [`TAKEN_BUDGET_MS`] of the
    /// tick's start (a Worker's kick is ended 30 s after its answer). Every taken job not
    /// attempted (past the limit, the window or the budget, or behind a failure) is given back
    /// untried in one guarded batch, due at once for the scan: a job whose send marked its
    /// recipients `maybe` for an attempt that never left would otherwise be told undetermined.
    async fn work_turns(
        &self,
        rows: &[Row],
        limit: usize,
        health: &mut VecMap<String, Option<Health>>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<usize, Error> {
        let taken = self.post.taken.take();
        let mut untried = Vec::new();
        let due: Vec<(Job, String, i64)> = rows
            .iter()
            .filter_map(|r| Some((job_from_row(r)?, r.text("root")?.to_owned(), r.int("next_attempt")?)))
            .collect();
        let places: Vec<Place<'_>> = due
            .iter()
            .map(|(job, root, next_attempt)| Place {
                domain: &job.domain,
                root,
                next_attempt: *next_attempt,
                made: job.made,
                envelope_id: &job.envelope_id,
                attempts: job.attempts,
            })
            .chain(taken.iter().zip(0_i64..).map(|(t, k)| Place {
                domain: &t.job.domain,
                root: &t.root,
                next_attempt: t.at,
                made: i64::MAX / 2 + k,
                envelope_id: &t.job.envelope_id,
                attempts: 0,
            }))
            .collect();
        let order = fair_order(&places);
        let turns = limit.min(order.len());
        let mut due: Vec<Option<Job>> = due.into_iter().map(|(job, _, _)| Some(job)).collect();
        let mut taken: Vec<Option<Taken>> = taken.into_iter().map(Some).collect();
        let first_taken = due.len();
        // Those past the batch go back at once, with those past their window: before any turn,
        // which a hanging destination may make the last this invocation gets.
        let (now_turns, later) = order.split_at(turns);
        untried
            .extend(later.iter().filter_map(|&i| i.checked_sub(first_taken)).filter_map(|k| taken.get_mut(k)?.take()));
        self.release_untried(&mut untried, 0).await;
        let mut failed = Ok(());
        for &i in now_turns {
            if failed.is_err() {
                break;
            }
            // Past the budget, every taken job not yet attempted goes back at once; the due
            // ones go on (each is leased as its turn comes).
            let at = self.now();
            if at.millis().saturating_sub(now.millis()) >= TAKEN_BUDGET_MS && taken.iter().any(Option::is_some) {
                untried.extend(taken.iter_mut().filter_map(Option::take));
                self.release_untried(&mut untried, now.millis().saturating_add(1)).await;
            }
            if let Some(job) = due.get_mut(i).and_then(Option::take) {
                // `due` hands them out round-robin over destinations; they are worked in that order.
                let domain = job.domain.clone();
                let known = *health.entry(domain.clone()).or_insert(job.health);
                match self.work_turn(job, known, now, report).await {
                    Ok(after) => {
                        health.insert(domain, after);
                    }
                    Err(e) => failed = Err(e),
                }
            } else if let Some(t) = i.checked_sub(first_taken).and_then(|k| taken.get_mut(k)).and_then(Option::take) {
                if within_window(&t, at) {
                    failed = self.work_taken(t, health, at, report).await;
                } else {
                    untried.push(t);
                }
            }
        }
        untried.extend(taken.iter_mut().filter_map(Option::take));
        self.release_untried(&mut untried, now.millis().saturating_add(1)).await;
        failed.map(|()| turns)
    }

    /// Gives the first attempts of `untried` back untried, in one guarded batch (best effort:
    /// one that stays taken lapses, and the scan finds it as a job whose tick died), each due at
    /// its send's time or at `due`, whichever is later: the time just past the tick's for those
    /// given back in its midst (a second pass of it leaves them to the next tick, which has its
    /// own budget).
    async fn release_untried(&self, untried: &mut Vec<Taken>, due: i64) {
        if untried.is_empty() {
            return;
        }
        let back = untried.drain(..).map(|t| {
            let held = Held { envelope_id: &t.job.envelope_id, domain: &t.job.domain, lease: t.lease };
            store::release(held, t.at.max(due), t.job.deadline)
        });
        let _ = crate::live::batch(self.db, self.post.bell, back.collect()).await;
    }

    /// One job whose first attempt a send took ([`Taken`]): bounced untried when late, given back
    /// untried when an earlier turn of this tick found its domain failing, else attempted under
    /// the lease its send wrote.
    async fn work_taken(
        &self,
        t: Taken,
        health: &mut VecMap<String, Option<Health>>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), Error> {
        let held = Held { envelope_id: &t.job.envelope_id, domain: &t.job.domain, lease: t.lease };
        let known = health.get(&t.job.domain).copied().flatten();
        if let Some(h) = known.filter(|h| h.next_probe > now.millis())
            && now.millis() < t.job.deadline
        {
            let wait = h.next_probe.min(t.job.deadline);
            crate::live::batch(self.db, self.post.bell, vec![store::release(held, wait, t.job.deadline)])
                .await
                .map_err(port_error)?;
            return Ok(());
        }
        let Ok(env) = Envelope::parse(t.text.as_bytes(), t.text.len()) else {
            return self.end_unreadable(held, &t.job, now, report).await;
        };
        let decided = (now.millis() >= t.job.deadline).then(|| late(&t.job, now.millis(), &self.config.retry));
        let after = self.attempt(&t.job, held, &env, decided, known, now, report).await?;
        health.insert(t.job.domain.clone(), after);
        Ok(())
    }

    /// Writes a plan in one batch: notices, domain health, then the job (which gives the lease
    /// back). Notices, health and the job are guarded by the lease, so a tick that lost it writes
    /// none of them (postponing the domain's other jobs is harmless either way).
    async fn apply(
        &self,
        held: Held<'_>,
        job: &Job,
        env: Option<&Envelope>,
        plan: &Plan,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), Error> {
        let mut stmts = Vec::new();
        // Notices go to this house's agents; the house's own addresses (the Libro) get none.
        if let Some(env) = env
            && env.from().domain() == self.config.domain
            && !crate::auth::RESERVED.contains(&env.from().local())
        {
            let postmaster = self.postmaster()?;
            for (id, text) in self.notices(env, plan, &postmaster, now)? {
                stmts.push(store::insert_notice(
                    held,
                    env.from().local(),
                    &id,
                    postmaster.as_str(),
                    &text,
                    now.millis(),
                ));
            }
        }
        match &plan.domain {
            DomainEffect::Failed(h, error) => {
                stmts.push(store::domain_failed(held, &job.domain, now.millis(), h.failures, h.next_probe, error));
                stmts.push(store::postpone_domain(&job.domain, h.next_probe, now.millis()));
            }
            DomainEffect::Recovered => stmts.extend(store::domain_recovered(held, &job.domain, now.millis())),
            DomainEffect::Unchanged => {}
        }
        let result = plan.progress.to_value().canonical_string();
        let state = plan.final_state();
        stmts.push(match &plan.step {
            // The lease moved the deadline to the give-up time while the attempt was out. An
            // answer (or a request that surely never arrived) gives the job its deadline back;
            // without one, it may have arrived, and expiry alone no longer bounces it. An answer
            // of the destination itself gives back the envelope's expiry too, though an earlier
            // attempt went unanswered: it has been heard from since (a recipient that attempt may
            // have reached ends undetermined at expiry, never bounced; seed 116 retried an expired
            // envelope until the give-up time, each answer "expired lately").
            Step::Retry { next_attempt, error } => {
                let deadline = match (plan.unanswered, plan.answered) {
                    (true, _) => None,
                    (false, true) => Some(job.expires.map_or(job.deadline, |e| job.deadline.min(e))),
                    (false, false) => Some(job.deadline),
                };
                store::retry(held, *next_attempt, error, &result, deadline)
            }
            Step::Finish { error } => store::finish(held, state, error.as_deref(), &result, now.millis()),
        });
        let job_stmt = stmts.len() - 1;
        if matches!(plan.step, Step::Finish { .. }) {
            stmts.push(store::forget_idle_domain(&job.domain));
        }
        let changes = crate::live::batch(self.db, self.post.bell, stmts).await.map_err(port_error)?;
        if changes.get(job_stmt) == Some(&1) {
            match (&plan.step, state) {
                (Step::Retry { .. }, _) => report.retried += 1,
                (Step::Finish { .. }, JobState::Delivered) => report.delivered += 1,
                (Step::Finish { .. }, _) => report.bounced += 1,
            }
        }
        Ok(())
    }

    fn postmaster(&self) -> Result<Address, Error> {
        Address::new("postmaster", &self.config.domain)
    }

    /// The signed notices a plan calls for: one bounce per (code, reason), and a delivery receipt
    /// when the envelope asked for one. Each is `(id, canonical JSON)`.
    fn notices(
        &self,
        env: &Envelope,
        plan: &Plan,
        postmaster: &Address,
        now: Timestamp,
    ) -> Result<Vec<(String, String)>, Error> {
        let mut groups: Vec<(u16, &str, Vec<Address>)> = Vec::new();
        for b in &plan.bounced {
            match groups.iter_mut().find(|(c, r, _)| *c == b.code && *r == b.reason) {
                Some((_, _, list)) => list.push(b.to.clone()),
                None => groups.push((b.code, &b.reason, vec![b.to.clone()])),
            }
        }
        let mut notices: Vec<Notice> = groups
            .into_iter()
            .map(|(code, reason, recipients)| Notice::Bounced { recipients, code, reason: reason.to_owned() })
            .collect();
        if !plan.undetermined.is_empty() {
            let reason = plan.undetermined_why.clone().unwrap_or_else(|| UNDETERMINED.to_owned());
            notices.push(Notice::Undetermined { recipients: plan.undetermined.clone(), reason });
        }
        if env.wants_delivery_receipt() && !plan.delivered.is_empty() {
            notices.push(Notice::Delivered { recipients: plan.delivered.clone() });
        }
        notices
            .iter()
            .map(|n| {
                let id = self.notice_id(env, n);
                let signed = receipt::notice(env, n, postmaster, id.clone(), now, &self.config.key)?;
                let text = String::from_utf8(signed.canonical())
                    .map_err(|_| Error::new(ErrorKind::Internal, "canonical JSON is not UTF-8"))?;
                Ok((id, text))
            })
            .collect()
    }

    /// A notice's id is derived from what it says (original id, status, recipients) with the
    /// domain key, so writing it twice leaves one copy and nobody else can predict it.
    fn notice_id(&self, env: &Envelope, n: &Notice) -> String {
        let (status, recipients) = match n {
            Notice::Delivered { recipients } => ("delivered", recipients),
            Notice::Bounced { recipients, .. } => ("bounced", recipients),
            Notice::Undetermined { recipients, .. } => ("undetermined", recipients),
        };
        let names: Vec<&str> = recipients.iter().map(Address::as_str).collect();
        let seed = self
            .config
            .key
            .sign(Context::NoticeId, format!("nyx5 notice:{}:{status}:{}", env.id(), names.join(",")).as_bytes());
        let mut bytes = [0u8; 16];
        for (b, d) in bytes.iter_mut().zip(sha256(&seed)) {
            *b = d;
        }
        uuid_v4(bytes)
    }

    /// One attempt to hand `env` to `recipients` at `domain`: directly for this house, else
    /// `POST <estafeta>/inbound` with the relay header.
    /// Delivers `env` to `recipients` at `domain`: how it went, and whether the destination
    /// itself answered (this house, or a Nyx5 answer over HTTP) rather than being unreachable.
    async fn deliver(&self, domain: &str, env: &Envelope, recipients: &[Address], now: Timestamp) -> (Delivery, bool) {
        if domain == self.config.domain {
            (self.deliver_here(env, recipients, now).await, true)
        } else {
            self.deliver_there(domain, env, recipients).await
        }
    }

    async fn deliver_here(&self, env: &Envelope, recipients: &[Address], now: Timestamp) -> Delivery {
        let card = match self.lookup().local_card(env.from().local()).await {
            Ok(Some(card)) => card,
            Ok(None) => return Delivery::Permanent(403, format!("{} has no card here any more", env.from())),
            Err(e) => return error_delivery(&e),
        };
        let verified = match env.clone().verify(&card, now) {
            Ok(v) => v,
            Err(e) => return error_delivery(&e),
        };
        match self.mailbox().accept(&verified, &card, recipients).await {
            Ok(outcomes) => Delivery::Delivered(
                outcomes
                    .into_iter()
                    .map(|(to, outcome)| {
                        let verdict = match outcome {
                            Outcome::Accepted | Outcome::Duplicate => Verdict::Accepted,
                            Outcome::Rejected(e) => Verdict::Rejected { code: e.code(), reason: wire_reason(&e) },
                        };
                        (to, verdict)
                    })
                    .collect(),
            ),
            Err(e) => error_delivery(&e),
        }
    }

    async fn deliver_there(&self, domain: &str, env: &Envelope, recipients: &[Address]) -> (Delivery, bool) {
        let resolved = match self.lookup().resolve_domain(domain).await {
            Ok(r) => r,
            Err(e) => return (error_delivery(&e), false),
        };
        let body = env.canonical();
        let max = resolved.card.max_bytes();
        if body.len() > max {
            let why = format!("envelope of {} bytes exceeds {domain}'s limit of {max}", body.len());
            return (Delivery::Permanent(ErrorKind::TooLarge.code(), why), false);
        }
        let header = RelayHeader::sign(&self.config.domain, env, domain, &self.config.key).to_header();
        let request = OutRequest {
            method: "POST".into(),
            url: format!("{}/inbound", resolved.url.trim_end_matches('/')),
            headers: vec![("content-type".into(), "application/json".into()), (relay::HEADER.into(), header)],
            body,
        };
        match self.net.send(request).await {
            Ok(answer) => (Delivery::from_answer(answer.status, &answer.body, recipients), true),
            Err(PortError::Refused(why)) => (
                Delivery::Permanent(ErrorKind::Forbidden.code(), format!("refused by the outbound policy: {why}")),
                false,
            ),
            // What failed, not the transport's text: that would tell a sender what answers where.
            Err(PortError::Unreached(_)) => {
                (Delivery::Temporary(format!("the house of {domain} is unreachable")), false)
            }
            Err(_) => (Delivery::Unanswered(format!("the house of {domain} did not answer")), false),
        }
    }
}

/// An envelope the owner hands to the queue, and its jobs (one per destination domain).
pub use crate::store::queue::{NewJob, Outgoing};

/// Whether `at` falls in the window a kick may attempt a job its send took ([`Taken`]): from the
/// send's time to half its lease later (before it, a clock that went back; after it, the lease
/// may lapse while the attempt is out).
fn within_window(t: &Taken, at: Timestamp) -> bool {
    at.millis() >= t.at && at.millis() < t.at.saturating_add(LEASE_MS / 2)
}

pub use crate::store::queue::Taken;

/// What became of an envelope handed to [`Queue::enqueue`].
#[derive(Debug, Clone)]
pub enum Enqueued {
    /// Queued now.
    Queued,
    /// The house holds an envelope with this id already: its outbox row.
    Held(Row),
    /// The sender's minute is full (and no envelope with this id is held).
    TooMany,
    /// Created before what the house may have forgotten (and none with this id is held).
    Forgotten,
    /// The sender's tree has holds this send was not judged against as they are now
    /// (docs/SPEC.md §7c): judge it (`crate::drafts`) and queue or hold it.
    Unjudged,
    /// A guard among the statements put before the outbox's refused the batch.
    Guarded,
}

/// The queue's reads and writes for the routes (issue 37 §2, "routes call services"): an
/// agent's outbound envelopes, their jobs, its outbox pages, and the queue's depth.
impl<'h, D: Db, N: Net> Queue<'h, D, N> {
    /// The outbox row of envelope `id` (`sender`, `sha256`), if the house still holds it.
    pub fn outbox_entry(&self, id: &str) -> impl Future<Output = Result<Option<Row>, Error>> {
        store::outbox_entry(self.db, id)
    }

    /// The jobs of envelope `id`, one per destination domain.
    pub fn jobs_of(&self, id: &str) -> impl Future<Output = Result<Vec<Row>, Error>> {
        store::jobs_of(self.db, id)
    }

    /// Queues `env` (as `out`) with a job per destination domain (`groups`, the recipients at
    /// each) in one batch that counts the envelope towards its sender's minute (`cap`) and is
    /// refused for an envelope `created` before what the house may have forgotten. A failed
    /// guard is told apart by the row of the same id: one the house holds is [`Enqueued::Held`]
    /// (SQLite checks the CHECK and NOT NULL before the UNIQUE id), and only the outbox's id says
    /// "sent before": any other constraint is a failure (hostile review of issue 36, L2).
    ///
    /// The envelope's id is the request's nonce: the agent's token is bound to the body, so a
    /// replay is this envelope again, which changes nothing (docs/SPEC.md §8).
    ///
    /// A job due now whose domain has no health row is queued with its first attempt taken
    /// ([`store::First`]), and handed to the kick that follows the answer ([`Taken`]): the
    /// delivery needs neither the due scan nor a lease of its own (issue 36 §1 and §5).
    ///
    /// `before` goes first in the batch (an approved draft's decision, `crate::drafts`).
    pub async fn enqueue(
        &self,
        out: &Outgoing<'_>,
        groups: &[(String, Vec<Address>)],
        created: i64,
        cap: i64,
        before: Vec<Stmt>,
    ) -> Result<Enqueued, Error> {
        let now = Timestamp(out.now);
        let fresh = |domain: &str, recipients: &[Address]| Job {
            made: 0,
            envelope_id: out.envelope_id.to_owned(),
            domain: domain.to_owned(),
            recipients: recipients.to_vec(),
            attempts: 0,
            last_error: None,
            progress: Progress::default(),
            deadline: out.deadline,
            expires: out.expires,
            health: None,
        };
        // Taken only while the house holds little text for kicks already (a kick that never
        // comes, or one far behind, must not let sends fill the isolate's memory).
        // What the list holds: each send's text once (its jobs are pushed together), and a
        // job's own strings, counted at a generous 512 bytes each.
        let held: usize = {
            let list = self.post.taken.borrow();
            let texts: usize = list
                .iter()
                .zip(std::iter::once(None).chain(list.iter().map(Some)))
                .filter(|(t, before)| before.is_none_or(|b| !std::rc::Rc::ptr_eq(&b.text, &t.text)))
                .map(|(t, _)| t.text.len())
                .sum();
            texts.saturating_add(list.len().saturating_mul(512))
        };
        let room = held.saturating_add(out.envelope.len()).saturating_add(groups.len() * 512) <= store::TAKEN_MAX_BYTES;
        let due_now = room && out.not_before <= out.now && out.now < out.deadline;
        let jobs: Vec<NewJob> = groups
            .iter()
            .map(|(domain, list)| NewJob {
                domain: domain.clone(),
                recipients: Value::Array(list.iter().map(|a| a.as_str().into()).collect()).canonical_string(),
                first: due_now.then(|| {
                    let first = self.first_attempt(&fresh(domain, list), now);
                    let give_up = out.not_before.saturating_add(self.config.retry.give_up_after_ms);
                    store::First { deadline: out.deadline.max(give_up), ..first }
                }),
            })
            .collect();
        let skip = before.len();
        let mut stmts = before;
        stmts.extend(store::enqueue_remembered(out, &jobs, created, cap));
        let id = out.envelope_id;
        match crate::live::batch(self.db, self.post.bell, stmts).await {
            Ok(changes) => {
                let taken = store::taken_jobs(&jobs, &changes, skip);
                let text: std::rc::Rc<str> = out.envelope.into();
                let root: std::rc::Rc<str> = store::root_address(out.sender).into();
                let mut list = self.post.taken.borrow_mut();
                for ((job, (domain, recipients)), taken) in jobs.iter().zip(groups).zip(taken) {
                    if let (true, Some(first)) = (taken, &job.first) {
                        let job = fresh(domain, recipients);
                        list.push(Taken {
                            job,
                            lease: first.lease_until,
                            text: text.clone(),
                            root: root.clone(),
                            at: out.now,
                        });
                    }
                }
                Ok(Enqueued::Queued)
            }
            Err(PortError::Constraint { name }) if name == store::RATE => {
                Ok(self.outbox_entry(id).await?.map_or(Enqueued::TooMany, Enqueued::Held))
            }
            Err(PortError::Constraint { name }) if name == store::FORGOTTEN => {
                Ok(self.outbox_entry(id).await?.map_or(Enqueued::Forgotten, Enqueued::Held))
            }
            Err(PortError::Constraint { name }) if skip > 0 && name == crate::store::constraint::GUARD => {
                Ok(Enqueued::Guarded)
            }
            Err(PortError::Constraint { name }) if name == crate::store::drafts::HELD => {
                Ok(self.outbox_entry(id).await?.map_or(Enqueued::Unjudged, Enqueued::Held))
            }
            Err(PortError::Constraint { name }) if name == crate::store::constraint::OUTBOX_ID => {
                match self.outbox_entry(id).await? {
                    Some(row) => Ok(Enqueued::Held(row)),
                    None => Err(port_error(PortError::Constraint { name })),
                }
            }
            Err(e) => Err(port_error(e)),
        }
    }

    /// A page of `sender`'s outbox, newest first (before `before`, at most `limit` envelopes),
    /// a row per job, read through the request's stale-tolerant `reads`.
    pub async fn outbox_page(
        &self,
        reads: &crate::ports::Reads,
        sender: &str,
        before: i64,
        limit: i64,
    ) -> Result<Vec<Row>, Error> {
        store::outbox_page(&self.stale(reads), sender, before, limit).await
    }

    /// The queue's depth at `now`: `depth` jobs waiting, the `oldest_due`'s time.
    pub fn depth(&self, now: i64) -> impl Future<Output = Result<Row, Error>> {
        store::depth(self.db, now)
    }
}
