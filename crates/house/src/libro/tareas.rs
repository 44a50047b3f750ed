//! `tareas@<house>` (spec §23, docs/SPEC.md §23): paid work the house publishes, so an agent
//! that just arrived has something to do.
//!
//! The operator keeps a catalogue (`POST /tareas`, `nyx5 tareas add|list|retire`); `GET /tareas`
//! publishes it whole, each task with its price, its statement and its full test. An agent takes
//! a task by sending `tareas@` its quote in the clear (`application/nyx5.cotizacion+json`): an
//! escrow, `tareas@` the buyer, the house's `verifica@` the arbiter, the task's price, and
//! `terms` byte for byte the catalogue's ([`compare`]). [`Libro::take_task`] checks the quota
//! (one task in flight per agent, a daily cap per agent and one for the house, each task paid
//! once per agent) and has `tareas@` accept the quote with an envelope to `libro@`, through the
//! same door as any buyer; the claim is written in the accept's batch, whose CHECK
//! (`tareas_quota`) undoes it all when a race took the quota meanwhile. What is left is the
//! Libro's: the agent delivers, `verifica@` judges, the escrow releases or refunds. The desk pays
//! from its own account, which the operator tops up like any other.

use nyx5_proto::card::{AgentCard, AgentCardDraft};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{self, ContractKind, Quote};
use nyx5_proto::{Address, DomainCard, Envelope, Error, Object, Refusal, Timestamp, Value, Verified};

use super::Libro;
use crate::ports::{Db, Net};
use crate::store::services as store;
use nyx5_rules::mailbox::Outcome;

/// `tareas@`'s local part.
pub use nyx5_rules::libro::TAREAS;
/// Most tasks offered at once.
pub const MAX_TASKS: i64 = 200;
/// Most bytes of a task's statement.
pub const MAX_STATEMENT_BYTES: usize = 4096;
/// A day, in the quota's sense: UTC days since the epoch.
pub const DAY_MS: i64 = 86_400_000;
/// How long a task taken and never delivered holds the desk's money (and the agent's one slot):
/// past it, the desk takes the escrow back (`refund`, which a buyer may do before delivery).
pub const HOLD_MS: i64 = 2 * DAY_MS;
/// Stale escrows the desk takes back per tick (each an operation: a few subrequests).
pub const UPKEEP_BATCH: i64 = 3;

/// A task as the catalogue keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub price: i64,
    pub statement: String,
    /// The exact terms a quote must carry (canonical JSON).
    pub terms: String,
    pub retired: bool,
}

impl Task {
    pub fn from_row(row: &crate::ports::Row) -> Option<Task> {
        Some(Task {
            id: row.text("id")?.to_owned(),
            price: row.int("price")?,
            statement: row.text("statement")?.to_owned(),
            terms: row.text("terms")?.to_owned(),
            retired: row.int("retired_at").is_some(),
        })
    }

    /// The task as `GET /tareas` shows it.
    pub fn to_value(&self) -> Value {
        Value::Object(obj([
            ("id", self.id.as_str().into()),
            ("price", self.price.into()),
            ("statement", self.statement.as_str().into()),
            ("terms", Value::parse_str(&self.terms).unwrap_or(Value::Null)),
        ]))
    }
}

/// The terms of a new task `id`: the operator's `terms` (without `task`) with `task` set to the
/// id and `verify` its tests.
pub fn task_terms(id: &str, verify: Value, mut terms: Object) -> Object {
    terms.insert("task".into(), id.into());
    terms.insert("verify".into(), verify);
    terms
}

/// Whether `q` takes task `t` as the desk `desk` with the arbiter `verifier` offers it: anything
/// else is refused, compared with the catalogue, never with what the quote says of itself.
pub fn compare(q: &Quote, t: &Task, desk: &Address, verifier: &Address) -> Result<(), Error> {
    let differs = |what: &str| {
        Refusal::QuoteNotAsCatalogued
            .because(format!("the quote's {what} is not what the catalogue says of task {}", t.id))
    };
    if q.buyer != *desk {
        return Err(Refusal::QuoteNotAsCatalogued.because(format!("a quote to {desk} names {desk} as its buyer")));
    }
    if q.contract != ContractKind::Escrow {
        return Err(differs("contract (an escrow)"));
    }
    if q.arbiter.as_ref() != Some(verifier) {
        return Err(differs("arbiter"));
    }
    if q.price != t.price {
        return Err(differs("price"));
    }
    if q.referrer.is_some() {
        return Err(differs("referrer (none)"));
    }
    let terms = q.terms.as_ref().map(|o| Value::Object(o.clone()).canonical_string());
    if terms.as_deref() != Some(t.terms.as_str()) {
        return Err(differs("terms"));
    }
    Ok(())
}

/// What the quota says for one agent, one task and one day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    pub in_flight: i64,
    pub agent_today: i64,
    pub all_today: i64,
    pub taken: bool,
}

/// The refusal the quota answers, if any: 409, never 429 (which a sender's house would retry for
/// days).
pub fn within(q: Quota, per_agent: i64, per_day: i64) -> Result<(), Error> {
    if q.taken {
        return Err(Refusal::TaskTakenBefore
            .because("this task was paid to you before, or is in flight: each task pays once per agent"));
    }
    if q.in_flight > 0 {
        return Err(Refusal::TaskInFlight
            .because("you have a task in flight: deliver it (or have it refunded) before taking another"));
    }
    if q.agent_today >= per_agent {
        return Err(Refusal::TaskQuotaUsed
            .because(format!("you took {per_agent} task(s) today, the most per agent; come back tomorrow (UTC)")));
    }
    if q.all_today >= per_day {
        return Err(Refusal::TaskQuotaUsed
            .because(format!("the house gave out its {per_day} task(s) for today; come back tomorrow (UTC)")));
    }
    Ok(())
}

/// The address whose quota a seller spends: a subagent (`bot.ana@h`) spends its root's
/// (`ana@h`), so delegating does not multiply what one agent may take.
pub fn quota_holder(seller: &Address) -> String {
    let local = seller.local();
    let root = local.rsplit('.').next().unwrap_or(local);
    format!("{root}@{}", seller.domain())
}

/// Whether `verify` (a task's tests) can pay for work: every test with a URL (the delivery's own
/// hash proves nothing when the catalogue publishes what it must be), and at least one that
/// names the claim, so each agent passes by doing its own task rather than by pointing at
/// someone else's.
pub fn pays_for_work(tests: &[super::verifica::Test]) -> Result<(), Error> {
    use super::verifica::{CONTRACT_PLACEHOLDER, SELLER_PLACEHOLDER, Test, names_the_claim};
    if tests.iter().any(|t| matches!(t, Test::Sha256 { url: None, .. })) {
        return Err(Refusal::BadTask.because(
            "a task's sha256 test fetches a url: the catalogue publishes `expect`, so the delivery's own hash proves nothing",
        ));
    }
    // A claim's page that must be missing (404) is missing for every agent that did nothing.
    let pays =
        |t: &Test| names_the_claim(t) && !matches!(t, Test::HttpStatus { expect, .. } if !(200..300).contains(expect));
    if !tests.iter().any(pays) {
        return Err(Refusal::BadTask.because(format!(
            "at least one test's url names the claim ({CONTRACT_PLACEHOLDER} or {SELLER_PLACEHOLDER} in its path or query, \
             an http_status expecting 2xx): a test every agent passes alike pays for nothing"
        )));
    }
    Ok(())
}

/// Whether `id` is a UUID in lower case (`8-4-4-4-12` hex digits, in one case for the hosts that
/// read paths without it): the form a quote to the desk must have, as its id becomes the
/// contract's, which a task's URLs may name (`{contract}`). A seller free to pick any id could
/// name a page that exists already (`index.html`) and pass without working.
pub fn is_uuid(id: &str) -> bool {
    id.len() == 36
        && id
            .bytes()
            .enumerate()
            // Lower case only, as pinned: `is_ascii_hexdigit` takes `A-F` too, and the same UUID
            // in upper case is another contract id naming the same page on a case-blind host.
            .all(
                |(i, b)| if matches!(i, 8 | 13 | 18 | 23) { b == b'-' } else { matches!(b, b'0'..=b'9' | b'a'..=b'f') },
            )
}

/// The task id a quote's terms name.
pub fn task_id(q: &Quote) -> Option<&str> {
    q.terms.as_ref()?.get("task")?.as_str()
}

/// The card of `tareas@<domain>`: the domain key as its `sig`, certified by itself, saying where
/// the catalogue is and who judges.
pub fn tareas_card(
    domain_card: &Verified<DomainCard>,
    key: &nyx5_proto::crypto::SigningKey,
    since: Timestamp,
) -> Result<Verified<AgentCard>, Error> {
    let address = Address::new(TAREAS, domain_card.domain())?;
    let verifier = Address::new(super::verifica::VERIFICA, domain_card.domain())?;
    let mut draft = AgentCardDraft::new(address, key.public(), None, since);
    draft.capabilities = obj([
        ("accepts", Value::Array(vec![quote::MEDIA.into()])),
        (
            "tareas",
            Value::Object(obj([
                ("catalogue", format!("{}/tareas", domain_card.estafeta()).into()),
                ("arbiter", verifier.as_str().into()),
                ("contract", "escrow".into()),
            ])),
        ),
    ]);
    draft.certify(key)?.verify(domain_card, None, since)
}

impl<'h, D: Db, N: Net> Libro<'h, D, N> {
    /// `tareas@`'s address here.
    pub fn tareas_address(&self) -> Result<Address, Error> {
        Address::new(TAREAS, &self.config.domain)
    }

    /// The day `now` falls in, for the quota.
    pub fn tareas_day(&self) -> i64 {
        self.now().millis().div_euclid(DAY_MS)
    }

    /// The desk takes back what it holds for tasks taken more than [`HOLD_MS`] ago and never
    /// delivered, or delivered and given up by `verifica@`, a few a tick, each with a `refund`
    /// from `tareas@` through `Libro::operate`, as any agent's.
    /// Answers how many it took back.
    pub async fn tareas_upkeep(&self) -> Result<u32, Error> {
        let now = self.now();
        let desk = self.tareas_address()?;
        // A seller's `deliver` queued within the hold is decided before the hold is taken back.
        let libro = Address::new(crate::libro::LIBRO, &self.config.domain)?;
        let cutoff = now.millis().saturating_sub(HOLD_MS);
        let stale =
            store::stale_tasks(self.db, desk.as_str(), cutoff, UPKEEP_BATCH, HOLD_MS, self.waiting(&libro, now))
                .await?;
        let mut taken = 0;
        for contract in stale {
            let body = obj([
                ("op", "refund".into()),
                ("contract", contract.as_str().into()),
                ("note", "not delivered within the desk's hold, or delivered and never checked".into()),
            ]);
            let id = self.derived_id("tarea-hold", &contract, desk.as_str());
            if matches!(self.operate_as(&self.systems.tareas, id, body, None).await?, Outcome::Accepted) {
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// An agent's quote for a task, sent to `tareas@`: compared with the catalogue, held to the
    /// quota, and accepted by `tareas@` through `libro@`. `Accepted` when the escrow holds now,
    /// `Duplicate` when this quote was taken before; `Rejected` with why otherwise.
    pub async fn take_task(&self, env: &Verified<Envelope>, sender: &Verified<AgentCard>) -> Outcome {
        match self.take_task_checked(env, sender).await {
            Ok(o) => o,
            Err(e) => Outcome::Rejected(e),
        }
    }

    async fn take_task_checked(
        &self,
        env: &Verified<Envelope>,
        sender: &Verified<AgentCard>,
    ) -> Result<Outcome, Error> {
        if !self.config.tareas_enabled {
            return Err(Refusal::NoTareas.because(format!("no tareas@{} here", self.config.domain)));
        }
        let content = env.content().filter(|c| c.media == quote::MEDIA).ok_or_else(|| {
            Refusal::BadQuote.because(format!("tareas@ reads a quote in the clear ({})", quote::MEDIA))
        })?;
        let body = content.body.as_object().ok_or_else(|| Refusal::BadQuote.because("a quote is a JSON object"))?;
        let q = Quote::from_object(body.clone())?;
        // Seeded work is for the agents who joined this house (spec §23): strangers from other
        // houses, which mint addresses at will, would share its daily quota.
        if env.from().domain() != self.config.domain {
            return Err(
                Refusal::TareasLocalOnly.because(format!("tareas@{} pays this house's own agents", self.config.domain))
            );
        }
        if q.seller != *env.from() {
            return Err(Refusal::NotTheSeller.because("a quote to tareas@ is sent by its seller"));
        }
        if q.house != self.config.domain {
            return Err(Refusal::QuoteWrongHouse
                .because(format!("the quote is for the Libro of {}, not this house's", q.house)));
        }
        if !is_uuid(&q.id) {
            return Err(Refusal::QuoteNotAsCatalogued
                .because("a quote to tareas@ has a UUID in lower case as its id: a task's URLs may name it"));
        }
        let now = self.now();
        if nyx5_proto::sign::Signature::read(q.object(), "signature")?.kid != sender.sig() {
            return Err(Refusal::NeedsCurrentKey.because("the quote is not signed with its seller's current key"));
        }
        q.clone().verify(sender, now)?;
        let desk = self.tareas_address()?;
        let verifier = self.verifica_address()?;
        let id = task_id(&q)
            .ok_or_else(|| Refusal::QuoteNotAsCatalogued.because("the quote's terms name no task (`task`)"))?;
        // The same quote again (a retry, a late copy) is answered by the Libro as done before,
        // whatever the quota says now.
        let accept_id = self.derived_id("tarea", env.id(), &q.id);
        let holder = quota_holder(env.from());
        let query = store::DeskQuery {
            desk: desk.as_str(),
            agent: &holder,
            task: id,
            day: self.tareas_day(),
            accept_id: &accept_id,
        };
        let row = store::desk_facts(self.db, &query).await?;
        let task = Task::from_row(&row)
            .filter(|t| !t.retired)
            .ok_or_else(|| Refusal::UnknownTask.because(format!("no task {id} is offered here (GET /tareas)")))?;
        compare(&q, &task, &desk, &verifier)?;
        if row.int("done") != Some(1) {
            let quota = Quota {
                in_flight: row.int("in_flight").unwrap_or(0),
                agent_today: row.int("agent_today").unwrap_or(0),
                all_today: row.int("all_today").unwrap_or(0),
                taken: row.int("taken") == Some(1),
            };
            within(quota, self.config.tareas_per_agent_per_day, self.config.tareas_per_day)?;
            // A desk without the price is refused by the Libro, which keeps the refusal: the same
            // quote again, after the operator tops the desk up, is refused again rather than
            // taken (issue 34; a quote signed afresh is a new take).
        }
        let body = obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))]);
        self.operate_as(&self.systems.tareas, accept_id, body, Some(env.id())).await
    }
}

/// `tareas@`'s catalogue for the routes (issue 37 §2, "routes call services"): the tasks
/// offered, the day's claims, adding and retiring a task.
impl<'h, D: Db, N: Net> Libro<'h, D, N> {
    /// The tasks offered (and the retired ones too when `all`), as the desk lists them.
    pub async fn tasks(&self, all: bool) -> Result<Vec<Task>, Error> {
        Ok(store::tasks(self.db, all).await?.iter().filter_map(Task::from_row).collect())
    }

    /// How many tasks were claimed today (the house's quota counts them).
    pub fn claims_today(&self) -> impl Future<Output = Result<i64, Error>> {
        store::claims_on(self.db, self.tareas_day())
    }

    /// Task `id`, retired or not.
    pub async fn task(&self, id: &str) -> Result<Option<Task>, Error> {
        Ok(store::task(self.db, id).await?.as_ref().and_then(Task::from_row))
    }

    /// Offers `task` in one batch guarded by the catalogue's size ([`MAX_TASKS`]; 409 when
    /// full). Answers whether it was added (else one with its id was there already).
    pub async fn add_task(&self, task: &Task) -> Result<bool, Error> {
        let stmts = store::add_task(&task.id, task.price, &task.statement, &task.terms, self.now().millis(), MAX_TASKS);
        let changed = crate::live::batch(self.db, self.post.bell, stmts).await.map_err(|e| match e {
            // (The terms name the task's id, so no two tasks' terms are alike: `tareas.terms`,
            // UNIQUE, cannot refuse an insert this route makes.)
            crate::ports::PortError::Constraint { name } if name == crate::store::constraint::GUARD => {
                Refusal::TooManyTasks.because(format!("{MAX_TASKS} tasks are offered; retire one first"))
            }
            e => crate::port_error(e),
        })?;
        Ok(changed.get(1) == Some(&1))
    }

    /// Retires task `id`: no longer offered, its claims kept.
    pub async fn retire_task(&self, id: &str) -> Result<(), Error> {
        crate::live::batch(self.db, self.post.bell, vec![store::retire_task(id, self.now().millis())])
            .await
            .map_err(crate::port_error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_quota_refuses_with_409_in_order() {
        let free = Quota::default();
        assert!(within(free, 1, 10).is_ok());
        for (q, named) in [
            (Quota { taken: true, ..free }, Refusal::TaskTakenBefore),
            (Quota { in_flight: 1, ..free }, Refusal::TaskInFlight),
            (Quota { agent_today: 1, ..free }, Refusal::TaskQuotaUsed),
            (Quota { all_today: 10, ..free }, Refusal::TaskQuotaUsed),
        ] {
            let e = within(q, 1, 10).unwrap_err();
            assert_eq!((e.code(), e.refusal()), (409, Some(named)), "{q:?}");
        }
        assert!(within(Quota { agent_today: 1, all_today: 9, ..free }, 2, 10).is_ok());
    }

    #[test]
    fn only_uuids_name_claims() {
        assert!(is_uuid("6f1f2c8a-1c7e-4d6b-9d3e-0a1b2c3d4e5f"));
        for id in [
            "index.html",
            "6f1f2c8a-1c7e-4d6b-9d3e-0a1b2c3d4e5",
            "6f1f2c8a1c7e-4d6b-9d3e-0a1b2c3d4e5f0",
            "6f1f2c8a-1c7e-4d6b-9d3e-0a1b2c3d4e5g",
            "6F1F2C8A-1C7E-4D6B-9D3E-0A1B2C3D4E5F",
            "6f1f2c8a-1c7e-4d6b-9d3e-0a1b2c3d4e5F",
        ] {
            assert!(!is_uuid(id), "{id}");
        }
    }
}
