//! The delivery queue's rules (spec §7), pure: what a destination's answer means
//! ([`Delivery`]), what a job has settled so far ([`Progress`]), and [`plan`], which turns one
//! attempt's outcome into the next state of the job and its domain. The house's queue
//! (`nyx5_house::queue`) reads the jobs, makes the attempts and writes each plan in one guarded
//! batch.

use nyx5_proto::{Address, Error, ErrorKind, Object, Refusal, Timestamp, Value, limits};

/// How long a tick holds a job it is working on: longer than one attempt can take (a DNS
/// lookup, the domain card, the agent card and the POST, each with the 10 s outbound deadline),
/// so an overlapping tick never takes a job whose attempt is still under way.
pub const LEASE_MS: i64 = 120_000;
/// Longest failure reason the queue stores or puts in a notice.
pub const MAX_REASON_LEN: usize = 300;
/// Largest answer to POST /inbound the queue reads.
pub const MAX_ANSWER_BYTES: usize = limits::MAX_DOCUMENT_BYTES;

/// Retry schedule for deliveries (spec §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub first_ms: i64,
    pub max_ms: i64,
    pub give_up_after_ms: i64,
}

impl Default for Retry {
    fn default() -> Self {
        Retry { first_ms: 1_000, max_ms: 60_000, give_up_after_ms: 3 * 24 * 3_600_000 }
    }
}

impl Retry {
    /// The wait after the `attempts`-th failure: first, 2×, 4× … capped at `max_ms`.
    pub fn backoff_ms(&self, attempts: i64) -> i64 {
        let shift = attempts.saturating_sub(1).clamp(0, 30) as u32;
        self.first_ms.saturating_mul(1_i64 << shift).min(self.max_ms)
    }
}

/// What one recipient's house said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Rejected { code: u16, reason: String },
}

/// The outcome of one delivery attempt, as a value that drives the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The destination answered for each recipient (accepted, or rejected with a code).
    Delivered(Vec<(Address, Verdict)>),
    /// The destination had it already (an earlier answer was lost): delivered.
    Duplicate,
    /// Try again later (408, 421, 429, 5xx, a request that never arrived): the reason is kept as
    /// `last_error`.
    Temporary(String),
    /// Try again later, said by a Nyx5 house that read the request (its error document with a
    /// temporary code): as `Temporary`, and each
    /// recipient it named is one a copy of that request may yet reach — networks repeat
    /// requests, and the house that said "not now" may take a copy later (seeds 853, 1267 and
    /// 1289 of the long run: a copy taken after the sender gave up).
    Deferred(String),
    /// Try again later, not knowing whether it arrived (a timeout, an answer lost): as
    /// `Temporary`, and the job is not bounced as expired until the destination answers (spec
    /// §7b, docs/SPEC.md).
    Unanswered(String),
    /// Refused for good (400, 402, 403, 404, 409, 410, 413, …): every recipient bounces.
    Permanent(u16, String),
}

/// Whether a wire code means "retry" (spec §6: 421, 429, 5xx; 408, a request a server did not
/// get in time; and anything not 2xx–4xx).
pub fn is_temporary(code: u16) -> bool {
    matches!(code, 408 | 421 | 429) || !(200..300).contains(&code) && !(400..500).contains(&code)
}

/// `text` cut to [`MAX_REASON_LEN`] characters (and an ellipsis), as the queue stores reasons.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_REASON_LEN) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or_default()),
        None => text.to_owned(),
    }
}

/// What a peer may read of `e`: its reason, clipped; an internal error says only that.
pub fn wire_reason(e: &Error) -> String {
    if e.kind == ErrorKind::Internal { "internal error".to_owned() } else { clip(&e.reason) }
}

/// The delivery an error stands for: temporary if its kind is, else a permanent refusal.
pub fn error_delivery(e: &Error) -> Delivery {
    if e.kind.is_temporary() {
        Delivery::Temporary(format!("{} {}", e.code(), wire_reason(e)))
    } else {
        Delivery::Permanent(e.code(), wire_reason(e))
    }
}

impl Delivery {
    /// Reads a destination's answer to `POST /inbound` about `recipients` (spec §6):
    /// `{ok, code, accepted: [...], rejected: [{to, code, reason}], duplicate?}`.
    ///
    /// A 2xx counts only as that answer: `ok: true`, naming every recipient as accepted or
    /// rejected (or `duplicate: true`). Anything else at an estafeta (a captive portal, a default
    /// web server, a truncated body) is a temporary failure, never "delivered": mail is not
    /// swallowed by whatever happens to answer 200.
    pub fn from_answer(status: u16, body: &[u8], recipients: &[Address]) -> Delivery {
        let parsed = Value::parse(body, MAX_ANSWER_BYTES).ok();
        let answer = parsed.as_ref().and_then(Value::as_object);
        let text = |o: &Object, name: &str| o.get(name).and_then(Value::as_str).map(clip);
        let reason = answer.and_then(|o| text(o, "reason")).unwrap_or_else(|| format!("HTTP {status}"));
        if is_temporary(status) {
            let nyx5 = answer.is_some_and(|o| {
                o.get("code").and_then(Value::as_safe_integer) == Some(i64::from(status))
                    && o.get("error").and_then(Value::as_str).is_some()
            });
            let reason = format!("{status} {reason}");
            return if nyx5 { Delivery::Deferred(reason) } else { Delivery::Temporary(reason) };
        }
        let ok = (200..300).contains(&status);
        if ok && answer.and_then(|o| o.get("ok")) != Some(&Value::Bool(true)) {
            return Delivery::Temporary(format!("{status} without a Nyx5 answer"));
        }
        let list = |name: &str| answer.and_then(|o| o.get(name)).and_then(Value::as_array);
        let (accepted, rejected) = (list("accepted"), list("rejected"));
        if ok
            && answer.and_then(|o| o.get("duplicate")) == Some(&Value::Bool(true))
            && rejected.is_none_or(<[_]>::is_empty)
        {
            return Delivery::Duplicate;
        }
        if !ok && accepted.is_none() && rejected.is_none() {
            return Delivery::Permanent(status, reason);
        }
        let mut verdicts = Vec::with_capacity(recipients.len());
        for to in recipients {
            let refusal = rejected
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .find(|r| r.get("to").and_then(Value::as_str) == Some(to.as_str()));
            let named = accepted.into_iter().flatten().any(|a| a.as_str() == Some(to.as_str()));
            let verdict = match refusal {
                Some(r) => Verdict::Rejected {
                    code: r
                        .get("code")
                        .and_then(Value::as_safe_integer)
                        .and_then(|c| u16::try_from(c).ok())
                        .filter(|c| *c >= 400)
                        .unwrap_or(if ok { 400 } else { status }),
                    reason: text(r, "reason").unwrap_or_else(|| reason.clone()),
                },
                None if named => Verdict::Accepted,
                // A Nyx5 answer that leaves this one out read the request and said nothing of
                // it: "not now" for it alone, and what it said of the others stands.
                None if ok => Verdict::Rejected {
                    code: ErrorKind::Unavailable.code(),
                    reason: format!("{status} without an answer for {to}"),
                },
                None => Verdict::Rejected { code: status, reason: reason.clone() },
            };
            verdicts.push((to.clone(), verdict));
        }
        Delivery::Delivered(verdicts)
    }
}

/// A recipient that bounced, with the code and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounce {
    pub to: Address,
    pub code: u16,
    pub reason: String,
}

/// What a job has settled so far (`jobs.result`): `{delivered: [...], bounced: [{to, code,
/// reason}], maybe?: [...], undetermined?: [...]}`.
///
/// `maybe` is not a settlement: it names the recipients some attempt may have reached (it went
/// unanswered after the request left), which the house may never report as not delivered. When
/// the job ends without an answer for them they are `undetermined`, never `bounced`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub delivered: Vec<Address>,
    pub bounced: Vec<Bounce>,
    pub maybe: Vec<Address>,
    pub undetermined: Vec<Address>,
}

/// The addresses of a JSON array of strings (what is not one is left out).
fn addresses(o: &Object, name: &str) -> Vec<Address> {
    o.get(name)
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(|a| a.as_str().and_then(|a| Address::parse(a).ok()))
        .collect()
}

fn address_list(list: &[Address]) -> Value {
    Value::Array(list.iter().map(|a| a.as_str().into()).collect())
}

impl Progress {
    /// Reads `jobs.result` (null or unreadable is "nothing settled").
    pub fn parse(text: Option<&str>) -> Progress {
        let Some(Value::Object(o)) = text.and_then(|t| Value::parse_str(t).ok()) else {
            return Progress::default();
        };
        let delivered = addresses(&o, "delivered");
        let bounced = o
            .get("bounced")
            .and_then(Value::as_array)
            .unwrap_or_default()
            .iter()
            .filter_map(|b| {
                let b = b.as_object()?;
                Some(Bounce {
                    to: Address::parse(b.get("to")?.as_str()?).ok()?,
                    code: u16::try_from(b.get("code")?.as_safe_integer()?).ok()?,
                    reason: b.get("reason").and_then(Value::as_str).unwrap_or_default().to_owned(),
                })
            })
            .collect();
        Progress { delivered, bounced, maybe: addresses(&o, "maybe"), undetermined: addresses(&o, "undetermined") }
    }

    pub fn to_value(&self) -> Value {
        let bounced = self
            .bounced
            .iter()
            .map(|b| {
                Value::Object(nyx5_proto::json::obj([
                    ("to", b.to.as_str().into()),
                    ("code", i64::from(b.code).into()),
                    ("reason", b.reason.as_str().into()),
                ]))
            })
            .collect();
        let mut o =
            nyx5_proto::json::obj([("delivered", address_list(&self.delivered)), ("bounced", Value::Array(bounced))]);
        for (name, list) in [("maybe", &self.maybe), ("undetermined", &self.undetermined)] {
            if !list.is_empty() {
                o.insert(name.into(), address_list(list));
            }
        }
        Value::Object(o)
    }

    /// This progress with `to` named `maybe` too: what a job's result says while an attempt to
    /// them is out (the house's lease).
    pub fn with_maybe(&self, to: &[Address]) -> Progress {
        let mut p = self.clone();
        for a in to {
            if !p.maybe.contains(a) {
                p.maybe.push(a.clone());
            }
        }
        p
    }

    pub fn settled(&self, a: &Address) -> bool {
        self.delivered.contains(a) || self.bounced.iter().any(|b| b.to == *a) || self.undetermined.contains(a)
    }
}

/// A failing domain: how many failures in a row, and when the next probe may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub failures: i64,
    pub next_probe: i64,
}

/// A due job, as the tick sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The order it was made in (`jobs.made`).
    pub made: i64,
    pub envelope_id: String,
    pub domain: String,
    pub recipients: Vec<Address>,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub progress: Progress,
    pub deadline: i64,
    pub expires: Option<i64>,
    pub health: Option<Health>,
}

impl Job {
    /// Recipients not yet delivered or bounced.
    pub fn pending(&self) -> Vec<Address> {
        self.recipients.iter().filter(|a| !self.progress.settled(a)).cloned().collect()
    }
}

/// What happens to the job after this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Still pending: try again at `next_attempt`.
    Retry { next_attempt: i64, error: String },
    /// Done: `delivered` if anyone got it, else `bounced`.
    Finish { error: Option<String> },
}

/// What happens to the destination domain's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainEffect {
    Unchanged,
    /// It failed (again): the others wait for the probe at `next_probe`.
    Failed(Health, String),
    /// It answered after failing: forget it, and let the waiting jobs go now.
    Recovered,
}

/// The next state of a job and its domain, decided from one [`Delivery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub progress: Progress,
    /// Newly delivered in this step (a delivery receipt names them).
    pub delivered: Vec<Address>,
    /// Newly bounced in this step (bounce notices name them).
    pub bounced: Vec<Bounce>,
    /// Newly undetermined in this step: refused or given up without an answer about them, after
    /// an attempt that may have reached them (an "undetermined" notice names them).
    pub undetermined: Vec<Address>,
    /// Why `undetermined` are (the refusal or give-up that ended them), when there are any.
    pub undetermined_why: Option<String>,
    pub step: Step,
    pub domain: DomainEffect,
    /// The attempt got no answer ([`Delivery::Unanswered`]): it may have arrived, and the job
    /// keeps the deadline its lease gave it (the house's `store::queue::lease`) rather than its own.
    pub unanswered: bool,
    /// The destination itself answered the attempt (set by the tick: `plan` does not know).
    pub answered: bool,
}

impl Plan {
    /// The job's final state if this step finishes it.
    pub fn final_state(&self) -> JobState {
        if self.progress.delivered.is_empty() { JobState::Bounced } else { JobState::Delivered }
    }
}

/// Where a delivery job is: waiting for an attempt, or ended (`jobs.state`; the schema's CHECK
/// allows these three and no other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Still to be delivered to someone (retrying, or not yet tried).
    Pending,
    /// Ended, delivered to at least one recipient.
    Delivered,
    /// Ended with nobody's delivery confirmed: bounced, or undetermined for a recipient an
    /// attempt may have reached (its `Progress` says which).
    Bounced,
}

impl JobState {
    pub const ALL: [JobState; 3] = [JobState::Pending, JobState::Delivered, JobState::Bounced];

    /// Its text in the `jobs` table.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Delivered => "delivered",
            JobState::Bounced => "bounced",
        }
    }

    /// The state a row's text names; `None` for text the schema would not have let in.
    pub fn parse(text: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// Where an outbound email is (`email_out.state`; the schema's CHECK allows these three and no
/// other): retried on the delivery queue's schedule, then sent or failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmailState {
    /// Still to be sent (retrying, or not yet tried).
    Pending,
    /// Its provider took it.
    Sent,
    /// Refused for good, or not sent in time.
    Failed,
}

impl EmailState {
    pub const ALL: [EmailState; 3] = [EmailState::Pending, EmailState::Sent, EmailState::Failed];

    /// Its text in the `email_out` table.
    pub const fn as_str(self) -> &'static str {
        match self {
            EmailState::Pending => "pending",
            EmailState::Sent => "sent",
            EmailState::Failed => "failed",
        }
    }

    /// The state a row's text names; `None` for text the schema would not have let in.
    pub fn parse(text: &str) -> Option<EmailState> {
        EmailState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// When `job` is tried again if the attempt made at `now` fails: its backoff, never past its
/// deadline (where it bounces).
pub fn retry_at(job: &Job, now: i64, retry: &Retry) -> i64 {
    now.saturating_add(retry.backoff_ms(job.attempts.saturating_add(1))).min(job.deadline)
}

/// Decides what `delivery` means for `job` (whose unsettled recipients are `pending`) at `now`,
/// given its domain's `health` (`None`: healthy). Pure.
pub fn plan(
    job: &Job,
    pending: &[Address],
    delivery: Delivery,
    health: Option<Health>,
    now: i64,
    retry: &Retry,
) -> Plan {
    let mut progress = job.progress.clone();
    let mut delivered = Vec::new();
    let mut bounced = Vec::new();
    let mut undetermined = Vec::new();
    let mut refusal = None;
    let mut waiting = Vec::new();
    match delivery {
        Delivery::Temporary(ref reason) | Delivery::Unanswered(ref reason) | Delivery::Deferred(ref reason) => {
            let failures = health.map_or(1, |h| h.failures.saturating_add(1));
            let next_probe = now.saturating_add(retry.backoff_ms(failures));
            if matches!(delivery, Delivery::Unanswered(_) | Delivery::Deferred(_)) {
                // It left and no answer came, or a house read it and said "not now": it (or a
                // copy of it) may reach every recipient it named.
                for to in pending {
                    if !progress.maybe.contains(to) {
                        progress.maybe.push(to.clone());
                    }
                }
            }
            return Plan {
                progress,
                delivered,
                bounced,
                undetermined,
                undetermined_why: None,
                step: Step::Retry { next_attempt: next_probe.min(job.deadline), error: reason.clone() },
                domain: DomainEffect::Failed(Health { failures, next_probe }, reason.clone()),
                unanswered: matches!(delivery, Delivery::Unanswered(_)),
                answered: false,
            };
        }
        // A refusal (or our own give-up at the deadline) says nothing of what an earlier
        // unanswered attempt delivered: the destination did not look (it refuses a relay or a
        // signature before it looks for the id), that copy may land later, or nobody answered
        // at all. Only a recipient no attempt may have reached bounces; the others are
        // undetermined.
        Delivery::Permanent(code, reason) => {
            refusal = Some(format!("{code} {reason}"));
            for to in pending {
                if job.progress.maybe.contains(to) {
                    undetermined.push(to.clone());
                } else {
                    bounced.push(Bounce { to: to.clone(), code, reason: reason.clone() });
                }
            }
        }
        Delivery::Duplicate => delivered = pending.to_vec(),
        Delivery::Delivered(verdicts) => {
            for to in pending {
                match verdicts.iter().find(|(a, _)| a == to).map(|(_, v)| v) {
                    None | Some(Verdict::Accepted) => delivered.push(to.clone()),
                    // The house read it and said "not now" for this one: a copy may yet reach it.
                    Some(Verdict::Rejected { code, reason }) if is_temporary(*code) => {
                        waiting.push(format!("{to}: {code} {reason}"));
                        if !progress.maybe.contains(to) {
                            progress.maybe.push(to.clone());
                        }
                    }
                    // Even a refusal by name says only that the id was not there *yet*: an
                    // earlier copy may still be on its way (seed 55: held in the network, it
                    // landed after a destination whose clock ran ahead refused the next one as
                    // expired).
                    Some(Verdict::Rejected { code, reason }) if job.progress.maybe.contains(to) => {
                        refusal.get_or_insert_with(|| format!("{code} {reason}"));
                        undetermined.push(to.clone());
                    }
                    Some(Verdict::Rejected { code, reason }) => {
                        bounced.push(Bounce { to: to.clone(), code: *code, reason: reason.clone() });
                    }
                }
            }
        }
    }
    progress.delivered.extend(delivered.iter().cloned());
    progress.bounced.extend(bounced.iter().cloned());
    progress.undetermined.extend(undetermined.iter().cloned());
    let undetermined_why = refusal.filter(|_| !undetermined.is_empty()).map(|r| undetermined_reason(&r));
    let step = if waiting.is_empty() {
        let error = bounced.first().map(|b| format!("{} {}", b.code, b.reason));
        Step::Finish { error: error.or_else(|| undetermined_why.clone()) }
    } else {
        Step::Retry { next_attempt: retry_at(job, now, retry), error: clip(&waiting.join("; ")) }
    };
    let domain = if health.is_some() { DomainEffect::Recovered } else { DomainEffect::Unchanged };
    Plan {
        progress,
        delivered,
        bounced,
        undetermined,
        undetermined_why,
        step,
        domain,
        unanswered: false,
        answered: false,
    }
}

/// What the outbox and an "undetermined" notice say of a recipient that may have been delivered.
pub const UNDETERMINED: &str = "undetermined (it may have been delivered)";

/// Why recipients are undetermined, given the refusal or give-up (`<code> <reason>`) that ended
/// the job after an attempt that went unanswered or was deferred (a copy of it may yet land).
pub fn undetermined_reason(refusal: &str) -> String {
    clip(&format!("{UNDETERMINED}: an earlier attempt may yet land, then {refusal}"))
}

/// Why a job past its deadline bounces: its envelope expired (410), or the give-up time passed.
pub fn late(job: &Job, now: i64, retry: &Retry) -> Delivery {
    if job.expires.is_some_and(|e| now >= e) {
        Delivery::Permanent(ErrorKind::Expired.code(), "expired while queued".to_owned())
    } else {
        let hours = retry.give_up_after_ms / 3_600_000;
        let last = job.last_error.as_deref().unwrap_or("no attempt succeeded");
        Delivery::Permanent(ErrorKind::Unavailable.code(), clip(&format!("not delivered within {hours} h: {last}")))
    }
}

/// How often a process runs the tick's purges (by the house's clock): once per minute of the
/// clock (the Worker's cron ticks once a minute, with jitter), not at every kick — every accepted
/// send kicks a tick, and the purges are ~15 statements, each reading what it drops.
pub const UPKEEP_EVERY_MS: i64 = 60_000;

/// Whether a tick at `now` runs the purges, the last run having been at `last` (none yet in
/// this process: yes): once per minute of the clock, and at once after the clock was set back.
pub fn upkeep_due(last: Option<i64>, now: i64) -> bool {
    last.is_none_or(|last| now < last || now.div_euclid(UPKEEP_EVERY_MS) != last.div_euclid(UPKEEP_EVERY_MS))
}

/// Where a job stands among a tick's turns: its destination, its sender's root agent (a sender
/// counted with its subagents), when it came due, the order it was made in (`made`, then its
/// envelope's id: two roots' envelopes may share a `seq`) and the attempts it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    pub domain: &'a str,
    pub root: &'a str,
    pub next_attempt: i64,
    pub made: i64,
    pub envelope_id: &'a str,
    pub attempts: i64,
}

/// The order a tick works `places` in, as indexes into it: round-robin over destinations (each
/// domain's first turn, then each one's second, …), where within a destination the senders'
/// root agents take turns (each root's earliest job, then each one's second, …), then fewer
/// attempts, earlier due and older first. It is the order of the due scan's query
/// (`store::queue::DUE_SQL` in the house, held to it by a test), for a tick that also works jobs
/// the scan did not read: those a send took for its kick. Pure.
pub fn fair_order<'a>(places: &[Place<'a>]) -> Vec<usize> {
    // One key type for the three sorts (one sort in the Worker's code, not three): the group,
    // the rank within it, and the time. Keys are unique (a job's envelope and place), so an
    // unstable sort orders them all the same way every time.
    type Key<'a> = (&'a str, &'a str, usize, i64, i64, i64, &'a str, usize);
    let key = |p: &Place<'a>, group: (&'a str, &'a str), rank: usize, attempts: i64, i: usize| -> Key<'a> {
        (group.0, group.1, rank, attempts, p.next_attempt, p.made, p.envelope_id, i)
    };
    let sorted = |keys: &mut Vec<Key<'_>>| -> Vec<usize> {
        keys.sort_unstable();
        keys.iter().map(|k| k.7).collect()
    };
    let ranks = |order: &[usize], same: &dyn Fn(usize, usize) -> bool| -> Vec<usize> {
        let mut out = vec![0_usize; places.len()];
        let mut n = 0;
        for (at, &i) in order.iter().enumerate() {
            n = if at > 0 && order.get(at - 1).is_some_and(|&b| same(b, i)) { n + 1 } else { 1 };
            if let Some(slot) = out.get_mut(i) {
                *slot = n;
            }
        }
        out
    };
    let place = |i: usize| places.get(i);
    // Each job's turn among its root's jobs to its domain …
    let mut keys: Vec<Key<'a>> = places.iter().enumerate().map(|(i, p)| key(p, (p.domain, p.root), 0, 0, i)).collect();
    let order = sorted(&mut keys);
    let same_root =
        |a: usize, b: usize| place(a).zip(place(b)).is_some_and(|(x, y)| (x.domain, x.root) == (y.domain, y.root));
    let sender_turn = ranks(&order, &same_root);
    // … then its turn at its domain …
    let mut keys: Vec<Key<'a>> = places
        .iter()
        .enumerate()
        .map(|(i, p)| key(p, (p.domain, ""), sender_turn.get(i).copied().unwrap_or(0), 0, i))
        .collect();
    let order = sorted(&mut keys);
    let same_domain = |a: usize, b: usize| place(a).zip(place(b)).is_some_and(|(x, y)| x.domain == y.domain);
    let turn = ranks(&order, &same_domain);
    // … and the turns in order.
    let mut keys: Vec<Key<'a>> = places
        .iter()
        .enumerate()
        .map(|(i, p)| key(p, ("", ""), turn.get(i).copied().unwrap_or(0), p.attempts, i))
        .collect();
    sorted(&mut keys)
}

/// Whether a turn of upkeep that handled `n` items took its whole batch of `cap`, so more may
/// wait: the next tick runs it again rather than the next minute.
pub fn took_whole_batch(n: usize, cap: i64) -> bool {
    i64::try_from(n).is_ok_and(|n| n >= cap)
}

/// Whether a purge batch left work behind: a capped statement removed as many rows as its own
/// cap (`caps`, one per statement, `None` for one without a cap). The next tick then purges
/// again rather than waiting for the next minute, so the purges keep up with any traffic, as
/// they did when every tick ran them (hostile reviews of issue 35, M2 and L7).
pub fn left_a_backlog(changes: &[u64], caps: &[Option<i64>]) -> bool {
    changes.iter().zip(caps).any(|(n, cap)| cap.is_some_and(|cap| i64::try_from(*n).unwrap_or(i64::MAX) >= cap))
}

/// The furthest ahead `deliver_after` may be when an envelope is queued: 30 days.
pub const MAX_DELIVER_AFTER_MS: i64 = 30 * 24 * 3_600_000;

/// Refuses an envelope due later than [`MAX_DELIVER_AFTER_MS`] from `now` (400). Pure.
pub fn check_due(due: Timestamp, now: Timestamp) -> Result<(), Error> {
    if due.millis() > now.millis().saturating_add(MAX_DELIVER_AFTER_MS) {
        return Err(Refusal::DeliverAfterTooFar.because(format!(
            "`deliver_after` may be at most {} days ahead; this is {}",
            MAX_DELIVER_AFTER_MS / (24 * 3_600_000),
            due.to_rfc3339()
        )));
    }
    Ok(())
}

/// `to` grouped by domain, in order of first appearance.
pub fn by_domain(to: &[Address]) -> Vec<(String, Vec<Address>)> {
    let mut groups: Vec<(String, Vec<Address>)> = Vec::new();
    for a in to {
        match groups.iter_mut().find(|(d, _)| d == a.domain()) {
            Some((_, list)) => list.push(a.clone()),
            None => groups.push((a.domain().to_owned(), vec![a.clone()])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    /// Destinations take turns, and within one the senders' roots do; then fewer attempts, and
    /// the earlier and older.
    #[test]
    fn a_flood_of_one_root_waits_behind_the_first_turn_of_every_other() {
        let p = |domain, root, next_attempt, made, attempts| Place {
            domain,
            root,
            next_attempt,
            made,
            envelope_id: "e",
            attempts,
        };
        let places = [
            p("b", "ana", 1, 1, 0),
            p("b", "ana", 2, 2, 0),
            p("b", "ana", 3, 3, 0),
            p("b", "bo", 4, 4, 0),
            p("c", "ana", 5, 5, 3),
            p("c", "ana", 6, 6, 0),
            p("b", "cy", 9, 9, 0),
        ];
        // Turn 1: b's ana (1), c's ana (5, three attempts: after those with none), and in b the
        // roots take turns: ana 1, bo 4, cy 9 are b's turns 1, 2 and 3.
        assert_eq!(fair_order(&places), [0, 4, 3, 5, 6, 1, 2]);
        assert!(fair_order(&[]).is_empty());
    }

    use super::*;

    #[test]
    fn the_upkeep_runs_once_a_minute_and_at_once_after_the_clock_went_back() {
        assert!(upkeep_due(None, 0), "a new process purges at its first tick");
        assert!(!upkeep_due(Some(60_000), 60_000 + UPKEEP_EVERY_MS - 1));
        assert!(upkeep_due(Some(60_000), 60_000 + UPKEEP_EVERY_MS));
        // Per minute of the clock: a cron a little early still finds its minute new.
        assert!(upkeep_due(Some(119_900), 120_000));
        assert!(!upkeep_due(Some(120_000), 179_999));
        assert!(upkeep_due(Some(1_000), 999), "a clock set back does not wait for it to catch up");
        assert!(upkeep_due(Some(i64::MAX), i64::MAX - 1));
        // A capped purge that removed its whole cap leaves the upkeep due at the next tick; an
        // uncapped one, however many it removed, does not.
        const PURGE_BATCH: i64 = 100;
        let caps = [None, Some(20), Some(PURGE_BATCH)];
        assert!(left_a_backlog(&[0, 20, 0], &caps));
        assert!(left_a_backlog(&[0, 3, PURGE_BATCH as u64], &caps));
        assert!(!left_a_backlog(&[5_000, 19, PURGE_BATCH as u64 - 1], &caps));
    }

    fn a(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    fn job(recipients: &[&str]) -> Job {
        Job {
            made: 1,
            envelope_id: "e1".into(),
            domain: "b.test".into(),
            recipients: recipients.iter().map(|r| a(r)).collect(),
            attempts: 0,
            last_error: None,
            progress: Progress::default(),
            deadline: 1_000_000,
            expires: None,
            health: None,
        }
    }

    #[test]
    fn answers_map_to_deliveries() {
        let to = [a("x@b.test"), a("y@b.test")];
        let body = br#"{"ok":true,"code":202,"accepted":["x@b.test"],"rejected":[{"to":"y@b.test","code":404,"reason":"no"}]}"#;
        assert_eq!(
            Delivery::from_answer(202, body, &to),
            Delivery::Delivered(vec![
                (to[0].clone(), Verdict::Accepted),
                (to[1].clone(), Verdict::Rejected { code: 404, reason: "no".into() })
            ])
        );
        assert_eq!(Delivery::from_answer(200, br#"{"ok":true,"code":200,"duplicate":true}"#, &to), Delivery::Duplicate);
        assert_eq!(
            Delivery::from_answer(403, br#"{"ok":false,"code":403,"error":"forbidden","reason":"bad relay"}"#, &to),
            Delivery::Permanent(403, "bad relay".into())
        );
        for code in [421, 429, 500, 503, 302] {
            assert!(matches!(Delivery::from_answer(code, b"<html>", &to), Delivery::Temporary(_)), "{code}");
        }
        // "Not now" from a Nyx5 house (its error document, the code the status): it read the
        // request, and a copy may yet be taken. A document whose code is not the status is not
        // one (a proxy relaying some other answer).
        let later = br#"{"ok":false,"code":503,"error":"unavailable","reason":"card unreachable"}"#;
        assert_eq!(Delivery::from_answer(503, later, &to), Delivery::Deferred("503 card unreachable".into()));
        assert!(matches!(Delivery::from_answer(502, later, &to), Delivery::Temporary(_)));
        assert!(matches!(Delivery::from_answer(503, br#"{"code":503}"#, &to), Delivery::Temporary(_)));
        for code in [400, 402, 404, 409, 410, 413] {
            assert!(matches!(Delivery::from_answer(code, b"", &to), Delivery::Permanent(c, _) if c == code));
        }
        // A 2xx that is not a Nyx5 answer naming every recipient delivers nothing.
        let not_answers: [&[u8]; 4] = [
            b"",
            b"<html>Welcome to nginx!</html>",
            br#"{"ok":false,"code":202,"accepted":["x@b.test"]}"#,
            br#"{"code":202,"accepted":["x@b.test","y@b.test"]}"#,
        ];
        for body in not_answers {
            let d = Delivery::from_answer(202, body, &to);
            assert!(matches!(d, Delivery::Temporary(_)), "{}: {d:?}", String::from_utf8_lossy(body));
        }
        // A Nyx5 answer that leaves a recipient out read the request: "not now" for that one
        // (a temporary refusal by name), and what it said of the others stands.
        let partial = br#"{"ok":true,"code":202,"accepted":["x@b.test"]}"#;
        assert_eq!(
            Delivery::from_answer(202, partial, &to),
            Delivery::Delivered(vec![
                (to[0].clone(), Verdict::Accepted),
                (to[1].clone(), Verdict::Rejected { code: 503, reason: "202 without an answer for y@b.test".into() }),
            ])
        );
    }

    /// A refusal that is not a 2xx still settles every recipient: the ones it names with their
    /// own code and reason, the others with the answer's. Kills `from_answer`'s `ok && …` → `||`
    /// and its `None if ok` guard → `true` (both made such an answer a temporary failure, and
    /// the mail was retried for days).
    #[test]
    fn a_refusal_names_some_recipients_and_answers_for_the_rest() {
        let to = [a("x@b.test"), a("y@b.test")];
        let body = br#"{"ok":false,"code":403,"reason":"not from your house","rejected":[{"to":"x@b.test","code":404,"reason":"no x"}]}"#;
        assert_eq!(
            Delivery::from_answer(403, body, &to),
            Delivery::Delivered(vec![
                (to[0].clone(), Verdict::Rejected { code: 404, reason: "no x".into() }),
                (to[1].clone(), Verdict::Rejected { code: 403, reason: "not from your house".into() })
            ])
        );
    }

    /// What a failure of our own says on the wire: "internal error", never its reason (which may
    /// name tables or paths); any other refusal says why. Kills `wire_reason` → `""`/`"xyzzy"`
    /// and its `==` → `!=`.
    #[test]
    fn an_internal_failure_is_told_without_its_reason() {
        let internal = Error::new(ErrorKind::Internal, "no such table: outbox_v2");
        assert_eq!(error_delivery(&internal), Delivery::Temporary("500 internal error".into()));
        let refused = Error::new(ErrorKind::Forbidden, "the relay is not signed by b.test");
        assert_eq!(error_delivery(&refused), Delivery::Permanent(403, "the relay is not signed by b.test".into()));
    }

    /// A recipient is pending until it is delivered or bounced itself: another recipient's bounce
    /// settles nobody else. Kills `Progress::settled`'s `b.to == *a` → `!=`.
    #[test]
    fn only_a_recipients_own_bounce_settles_it() {
        let mut j = job(&["x@b.test", "y@b.test", "z@b.test"]);
        j.progress.bounced.push(Bounce { to: a("x@b.test"), code: 404, reason: "no x".into() });
        j.progress.delivered.push(a("z@b.test"));
        assert_eq!(j.pending(), vec![a("y@b.test")]);
    }

    #[test]
    fn plans_follow_deliveries() {
        let r = Retry::default();
        let j = job(&["x@b.test", "y@b.test"]);
        let pending = j.pending();
        // Temporary: the domain starts failing; the job retries at the probe time.
        let p = plan(&j, &pending, Delivery::Temporary("503 down".into()), None, 0, &r);
        assert_eq!(p.step, Step::Retry { next_attempt: 1_000, error: "503 down".into() });
        assert_eq!(p.domain, DomainEffect::Failed(Health { failures: 1, next_probe: 1_000 }, "503 down".into()));
        let h = Some(Health { failures: 7, next_probe: 0 });
        let p = plan(&j, &pending, Delivery::Temporary("x".into()), h, 0, &r);
        assert_eq!(p.domain, DomainEffect::Failed(Health { failures: 8, next_probe: 60_000 }, "x".into()));
        // Never past the deadline.
        let late_job = Job { deadline: 500, ..j.clone() };
        let p = plan(&late_job, &pending, Delivery::Temporary("x".into()), None, 0, &r);
        assert_eq!(p.step, Step::Retry { next_attempt: 500, error: "x".into() });
        // Mixed verdicts: one delivered, one bounced, finished; the domain recovers.
        let d = Delivery::Delivered(vec![
            (a("x@b.test"), Verdict::Accepted),
            (a("y@b.test"), Verdict::Rejected { code: 404, reason: "no".into() }),
        ]);
        let p = plan(&j, &pending, d, h, 0, &r);
        assert_eq!(p.delivered, vec![a("x@b.test")]);
        assert_eq!(p.bounced.len(), 1);
        assert_eq!(p.final_state(), JobState::Delivered);
        assert_eq!(p.domain, DomainEffect::Recovered);
        // A per-recipient 429 waits; the accepted one is settled. The house read the request and
        // said "not now" for y: a copy may yet reach it, so a later refusal leaves it undetermined.
        let d = Delivery::Delivered(vec![
            (a("x@b.test"), Verdict::Accepted),
            (a("y@b.test"), Verdict::Rejected { code: 429, reason: "slow down".into() }),
        ]);
        let p = plan(&j, &pending, d, None, 0, &r);
        assert!(matches!(p.step, Step::Retry { next_attempt: 1_000, .. }));
        assert_eq!(p.progress.maybe, [a("y@b.test")]);
        let j2 = Job { progress: p.progress.clone(), attempts: 1, ..j.clone() };
        assert_eq!(j2.pending(), vec![a("y@b.test")]);
        let p = plan(&j2, &j2.pending(), Delivery::Permanent(403, "no".into()), None, 0, &r);
        assert_eq!(p.final_state(), JobState::Delivered);
        assert!(p.progress.bounced.is_empty());
        assert_eq!(p.progress.undetermined, [a("y@b.test")]);
        // Permanent, with no earlier attempt in doubt: everyone pending bounces.
        let fresh = Job { progress: Progress { delivered: vec![a("x@b.test")], ..Progress::default() }, ..j.clone() };
        let p = plan(&fresh, &fresh.pending(), Delivery::Permanent(403, "no".into()), None, 0, &r);
        assert_eq!(p.final_state(), JobState::Delivered);
        assert_eq!(p.progress.bounced.len(), 1);
        let p = plan(&j, &pending, Delivery::Permanent(403, "no".into()), None, 0, &r);
        assert_eq!(p.final_state(), JobState::Bounced);
        assert_eq!(p.step, Step::Finish { error: Some("403 no".into()) });
        // Progress round-trips through its JSON.
        assert_eq!(Progress::parse(Some(&p.progress.to_value().canonical_string())), p.progress);
    }

    /// Issue 35 §1: a recipient an unanswered attempt may have reached is never bounced — by a
    /// refusal of the whole envelope, by one naming it (the unanswered copy may land later), nor
    /// by the give-up time: it ends "undetermined". One no attempt reached bounces as before; an
    /// answer that the destination holds it delivers it.
    #[test]
    fn a_recipient_an_attempt_may_have_reached_is_never_bounced_without_an_answer() {
        let r = Retry::default();
        let j = job(&["x@b.test", "y@b.test"]);
        let p = plan(&j, &j.pending(), Delivery::Unanswered("no answer".into()), None, 0, &r);
        assert_eq!(p.progress.maybe, [a("x@b.test"), a("y@b.test")]);
        assert!(p.unanswered && matches!(p.step, Step::Retry { .. }));
        // A plain temporary failure (it never left) marks nobody.
        let t = plan(&j, &j.pending(), Delivery::Temporary("unreachable".into()), None, 0, &r);
        assert!(t.progress.maybe.is_empty());
        // A house that read it and said "not now" marks everyone it named, as the unanswered
        // attempt does (a copy may yet be taken), but its answer gives the deadline back.
        let d = plan(&j, &j.pending(), Delivery::Deferred("503 card unreachable".into()), None, 0, &r);
        assert_eq!(d.progress.maybe, p.progress.maybe);
        assert!(!d.unanswered && matches!(d.step, Step::Retry { .. }));
        let deferred = Job { progress: d.progress.clone(), attempts: 1, ..j.clone() };
        let gave_up = plan(&deferred, &deferred.pending(), late(&deferred, 2_000_000, &r), None, 2_000_000, &r);
        assert!(gave_up.bounced.is_empty(), "a deferred recipient bounced at the give-up time: {gave_up:?}");
        assert_eq!(gave_up.undetermined, [a("x@b.test"), a("y@b.test")]);
        let j2 = Job { progress: p.progress.clone(), attempts: 1, ..j.clone() };
        assert_eq!(j2.pending(), j.pending(), "maybe settles nobody");
        // The give-up time passes with no answer: undetermined, not bounced.
        let given_up = plan(&j2, &j2.pending(), late(&j2, 2_000_000, &r), None, 2_000_000, &r);
        assert!(given_up.bounced.is_empty() && given_up.progress.bounced.is_empty(), "{given_up:?}");
        assert_eq!(given_up.undetermined, [a("x@b.test"), a("y@b.test")]);
        assert_eq!(given_up.progress.undetermined, given_up.undetermined);
        let Step::Finish { error: Some(why) } = &given_up.step else { panic!("{:?}", given_up.step) };
        assert!(
            why.starts_with("undetermined (it may have been delivered): an earlier attempt may yet land, then 503"),
            "{why}"
        );
        assert_eq!(given_up.undetermined_why.as_deref(), Some(why.as_str()));
        assert_eq!(given_up.final_state(), JobState::Bounced, "stored as ended without a delivery");
        let settled = Job { progress: given_up.progress.clone(), ..j2.clone() };
        assert!(settled.pending().is_empty());
        // A 403 of the whole envelope (a signature the destination no longer takes): the same.
        let refused = plan(&j2, &j2.pending(), Delivery::Permanent(403, "no".into()), None, 0, &r);
        assert_eq!((refused.bounced.len(), refused.undetermined.len()), (0, 2));
        // Only x may have been reached: y bounces, x is undetermined.
        let only_x = Job { progress: Progress { maybe: vec![a("x@b.test")], ..Progress::default() }, ..j.clone() };
        let mixed = plan(&only_x, &only_x.pending(), Delivery::Permanent(410, "expired".into()), None, 0, &r);
        assert_eq!(mixed.undetermined, [a("x@b.test")]);
        assert_eq!(mixed.bounced, [Bounce { to: a("y@b.test"), code: 410, reason: "expired".into() }]);
        assert_eq!(mixed.step, Step::Finish { error: Some("410 expired".into()) });
        // The destination answers for each: x held it (delivered); y it refuses by name, which
        // an earlier copy still on its way may yet contradict (undetermined); z, which no
        // attempt reached, bounces.
        let j3 = Job { recipients: vec![a("x@b.test"), a("y@b.test"), a("z@b.test")], ..j2.clone() };
        let answered = Delivery::Delivered(vec![
            (a("x@b.test"), Verdict::Accepted),
            (a("y@b.test"), Verdict::Rejected { code: 410, reason: "expired".into() }),
            (a("z@b.test"), Verdict::Rejected { code: 404, reason: "no z".into() }),
        ]);
        let p = plan(&j3, &j3.pending(), answered, None, 0, &r);
        assert_eq!(p.delivered, [a("x@b.test")]);
        assert_eq!(p.undetermined, [a("y@b.test")]);
        assert_eq!(p.bounced, [Bounce { to: a("z@b.test"), code: 404, reason: "no z".into() }]);
        let why = p.undetermined_why.as_deref().unwrap_or_default();
        assert!(why.ends_with("an earlier attempt may yet land, then 410 expired"), "{why}");
        let dup = plan(&j2, &j2.pending(), Delivery::Duplicate, None, 0, &r);
        assert_eq!(dup.delivered.len(), 2);
        // What a job remembers round-trips through `jobs.result`, and a job without any of it
        // writes what it always wrote.
        assert_eq!(Progress::parse(Some(&given_up.progress.to_value().canonical_string())), given_up.progress);
        assert_eq!(Progress::default().to_value().canonical_string(), r#"{"bounced":[],"delivered":[]}"#);
    }

    /// A job's states are the ones the schema allows, each read back from its own text.
    #[test]
    fn job_states_read_back_from_their_text() {
        // The newest migration that makes the `jobs` table says what its states are.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        let schema = files
            .iter()
            .rev()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .find(|text| text.contains("CREATE TABLE jobs"))
            .unwrap();
        assert!(schema.contains("CHECK (state IN ('pending', 'delivered', 'bounced'))"));
        for state in [JobState::Pending, JobState::Delivered, JobState::Bounced] {
            assert_eq!(JobState::parse(state.as_str()), Some(state));
        }
        assert_eq!(JobState::parse("retrying"), None);
        let mut p = plan(&job(&["a@b.test"]), &[a("a@b.test")], Delivery::Duplicate, None, 0, &Retry::default());
        assert_eq!(p.final_state(), JobState::Delivered);
        p.progress.delivered.clear();
        assert_eq!(p.final_state(), JobState::Bounced);
    }

    #[test]
    fn late_jobs_bounce_with_the_right_code() {
        let r = Retry::default();
        let j = Job { expires: Some(10), ..job(&["x@b.test"]) };
        assert!(matches!(late(&j, 10, &r), Delivery::Permanent(410, _)));
        let j = Job { last_error: Some("503 down".into()), ..job(&["x@b.test"]) };
        assert_eq!(late(&j, 10, &r), Delivery::Permanent(503, "not delivered within 72 h: 503 down".into()));
    }

    #[test]
    fn reasons_are_clipped_on_a_char_boundary() {
        let long = "é".repeat(MAX_REASON_LEN + 5);
        assert_eq!(clip(&long).chars().count(), MAX_REASON_LEN + 1);
        assert_eq!(clip("short"), "short");
    }
}
