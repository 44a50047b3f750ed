//! nyx5-house: the estafeta (spec §2–§9), written once over small ports (`Db`, `Net`, `Clock`,
//! `Rng`). The Worker and `nyx5 serve` only adapt it.
//!
//! [`House::handle`] answers one HTTP request; [`House::tick`] works the delivery queue. Every state
//! change is one atomic `Db::batch` whose guards are SQL constraints.
#![forbid(unsafe_code)]

pub mod a2a;
pub mod a2a_stream;
pub mod a2a_tasks;
pub mod apps;
pub mod attachments;
pub mod auth;
pub mod bookmark;
pub mod config;
pub mod domain_keys;
pub mod drafts;
pub mod email;
pub mod ground;
pub mod http;
pub mod inboxes;
pub mod index;
pub mod join;
pub mod libro;
pub mod live;
pub mod mailbox;
pub mod migrations;
pub mod outbound;

pub mod ports;
pub mod queue;
pub mod resolver;
mod router;
pub mod routes;
pub mod shards;
#[cfg(feature = "sim")]
pub mod sim;
pub use nyx5_client::site;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod store;
pub mod view;
pub mod warm;
pub mod web;
pub use nyx5_client::weburl;

use nyx5_proto::card::{DomainCard, DomainCardDraft};
use nyx5_proto::json::obj;
use nyx5_proto::{Error, ErrorKind, Timestamp, Value, Verified};

pub use auth::RESERVED;
pub use config::{Config, Registration};
pub use http::{Request, Response};
pub use ports::{Clock, Db, Net, PortError, Reads, Rng};
pub use store::port_error;

use apps::Apps;
use auth::Registry;
use drafts::Drafts;
use email::Email;
use ground::Ground;
use index::Index;
use libro::Libro;
use mailbox::Mailbox;
use queue::Queue;
use resolver::Lookup;
use view::{CardMemo, Core, PolicyMemo, Post, SystemCards};

/// Extensions this house declares in its domain card.
pub const EXTENSIONS: &[&str] = &[web::a2a::EXT_A2A, email::EXT_EMAIL, libro::EXT_LIBRO, nyx5_rules::policy::EXT_AVAL];

/// A house: its configuration, its signed domain card, and its ports.
pub struct House<D, N> {
    pub config: Config,
    pub db: D,
    /// The network behind the outbound policy: every request the house sends passes it.
    pub net: outbound::Guarded<N>,
    pub clock: Box<dyn Clock>,
    pub rng: Box<dyn Rng>,
    card: Verified<DomainCard>,
    /// The cards of `libro@`, `verifica@` and `tareas@` (signed with the domain key; see `libro`).
    systems: SystemCards,
    /// Verified cards of other houses and their agents, for five minutes (see `resolver`).
    cards: CardMemo,
    /// The inbox policies read from this house's own stored cards (see `mailbox`).
    policies: PolicyMemo,
    /// Webhook pushes waiting for the answer to go out (see [`Mailbox::send_pushes`]).
    pushes: std::cell::RefCell<Vec<ports::OutRequest>>,
    /// The Libro queued mail due now (receipts for other houses) since this was last taken: the
    /// answer asks for a delivery kick, and a tick works the queue once more.
    queued: std::cell::Cell<bool>,
    /// Jobs whose first attempt a send took, for the kick that follows its answer (see
    /// [`store::queue::Taken`]).
    taken: std::cell::RefCell<Vec<store::queue::Taken>>,
    /// When (by the house's clock) a tick last ran the purges of its upkeep: at most once a
    /// minute per process (`queue::UPKEEP_EVERY_MS`), not at every kick.
    upkept: std::cell::Cell<Option<i64>>,
    /// What the `nyx5-bookmark` header is sealed with (see `bookmark`).
    bookmark_key: bookmark::BookmarkKey,
    /// Who waits for mail, and which mailboxes were written (see `live`).
    bell: live::Bell,
    /// Where attachments' sealed parts are kept (see `attachments`); none: the house takes none.
    blobs: Option<Box<dyn ports::Blobs>>,
    /// When (by the house's clock) a tick last purged ended attachments.
    purged: std::cell::Cell<Option<i64>>,
}

impl<D, N> std::fmt::Debug for House<D, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("House").field("domain", &self.config.domain).finish_non_exhaustive()
    }
}

impl<D: Db, N: Net> House<D, N> {
    /// Builds the house and signs its domain card.
    pub fn new(config: Config, db: D, net: N, clock: Box<dyn Clock>, rng: Box<dyn Rng>) -> Result<Self, Error> {
        // Sites decide limits, blocks and pin caps: no house without the list (a wasm32 caller
        // installs it first, `site::install`).
        if !site::loaded() {
            return Err(Error::new(ErrorKind::Internal, "the Public Suffix List is not loaded (site::install)"));
        }
        let mut policy = config.policy_extra.clone();
        policy.insert("inbound".into(), "verified".into());
        policy.insert("max_bytes".into(), (config.max_bytes as i64).into());
        policy.insert("registration".into(), config.registration.as_str().into());
        if config.require_relay {
            policy.insert("require_relay".into(), Value::Bool(true));
        }
        if let Some(doh) = &config.doh_url {
            resolver::check_doh_url(doh)?;
        }
        let now = clock.now();
        let previous: Vec<_> = config
            .previous_keys
            .iter()
            .filter(|p| p.until > now && p.key.public() != config.key.public())
            .cloned()
            .collect();
        let card = DomainCardDraft {
            domain: config.domain.clone(),
            estafeta: config.public_url.clone(),
            other_keys: vec![],
            previous,
            policy,
            extensions: EXTENSIONS
                .iter()
                .filter(|e| config.email_enabled || **e != email::EXT_EMAIL)
                .map(|s| (*s).to_owned())
                .collect(),
            issued: config.key_created,
        }
        .sign(&config.key, config.key_created)?
        .verify(Some(&config.key.public()))?;
        let since = config.system_cards_since();
        let libro = libro::libro_card(&card, &config.key, since, config.fee_bps)?;
        let verifica = libro::verifica::verifica_card(&card, &config.key, since)?;
        let tareas = libro::tareas::tareas_card(&card, &config.key, since)?;
        let a2a = a2a_tasks::gateway_card(&card, &config.key, since)?;
        let net = outbound::Guarded { net, policy: config.outbound_policy() };
        let (cards, pushes) = (CardMemo::default(), Default::default());
        let bookmark_key = bookmark::BookmarkKey::derive(&config.key.seed());
        let bell = live::Bell::new(config.live_bell);
        Ok(House {
            config,
            db,
            net,
            clock,
            rng,
            card,
            systems: SystemCards { libro, verifica, tareas, a2a },
            cards,
            policies: Default::default(),
            pushes,
            queued: Default::default(),
            taken: Default::default(),
            upkept: Default::default(),
            bookmark_key,
            bell,
            blobs: None,
            purged: Default::default(),
        })
    }

    /// This house's verified domain card.
    pub fn card(&self) -> &Verified<DomainCard> {
        &self.card
    }

    /// The card of this house's Libro, `libro@<domain>`.
    pub fn libro_card(&self) -> &Verified<nyx5_proto::AgentCard> {
        &self.systems.libro
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// `N` random bytes.
    pub fn random<const K: usize>(&self) -> [u8; K] {
        self.ground().random()
    }

    /// A fresh UUID v4.
    pub fn new_id(&self) -> String {
        self.ground().new_id()
    }

    /// The configuration, clock and randomness every service stands on.
    pub fn ground(&self) -> Ground<'_> {
        Ground { config: &self.config, clock: &*self.clock, rng: &*self.rng }
    }

    /// The registry: who is asking, the operator.
    pub fn registry(&self) -> Registry<'_, D, N> {
        self.core().registry()
    }

    /// The house's cards of agents and houses, local or fetched and verified.
    pub fn lookup(&self) -> Lookup<'_, D, N> {
        self.core().lookup()
    }

    /// The mailboxes: accepting mail, the webhook pushes.
    pub fn mailbox(&self) -> Mailbox<'_, D, N> {
        Mailbox { core: self.core(), post: self.post() }
    }

    /// The Libro and its system agents.
    pub fn libro(&self) -> Libro<'_, D, N> {
        Libro { core: self.core(), post: self.post() }
    }

    /// The A2A gateway.
    pub fn a2a(&self) -> a2a::Gateway<'_, D, N> {
        a2a::Gateway { core: self.core(), post: self.post() }
    }

    /// The A2A gateway's tasks once written (answers, settlements, pushes).
    pub fn a2a_tasks(&self) -> a2a_tasks::Tasks<'_, D, N> {
        a2a_tasks::Tasks { core: self.core(), post: self.post() }
    }

    /// The email bridge.
    pub fn email(&self) -> Email<'_, D, N> {
        Email { core: self.core(), post: self.post() }
    }

    /// The index crawl.
    pub fn index(&self) -> Index<'_, D, N> {
        Index { core: self.core(), local: self }
    }

    /// The delivery queue and the tick's upkeep.
    pub fn queue(&self) -> Queue<'_, D, N> {
        Queue { core: self.core(), post: self.post(), upkept: &self.upkept, local: self }
    }

    /// Holds, drafts and the approvers' decisions (docs/SPEC.md §7c).
    pub fn drafts(&self) -> Drafts<'_, D, N> {
        Drafts { core: self.core() }
    }

    /// Sealed attachments.
    pub fn attachments(&self) -> attachments::Attachments<'_, D, N> {
        attachments::Attachments { core: self.core() }
    }

    /// The app catalogue.
    pub fn apps(&self) -> Apps<'_, D, N> {
        Apps { core: self.core() }
    }

    /// The borrows every service holds.
    fn core(&self) -> Core<'_, D, N> {
        Core {
            ground: self.ground(),
            config: &self.config,
            db: &self.db,
            net: &self.net,
            cards: &self.cards,
            card: &self.card,
            systems: &self.systems,
            blobs: self.blobs.as_deref(),
        }
    }

    /// The cells the services that take or write mail share.
    fn post(&self) -> Post<'_> {
        Post {
            policies: &self.policies,
            pushes: &self.pushes,
            queued: &self.queued,
            taken: &self.taken,
            bell: &self.bell,
        }
    }

    /// The house with a store for attachments' sealed parts (see `attachments`): without one it
    /// refuses them (`attachments_off`).
    #[must_use]
    pub fn with_blobs(mut self, blobs: Box<dyn ports::Blobs>) -> Self {
        self.blobs = Some(blobs);
        self
    }

    /// Who waits for mail in this process (see `live`): a server that stops closes it.
    pub fn bell(&self) -> &live::Bell {
        &self.bell
    }

    /// Works the queue once (see [`Queue::tick`]); then wakes whoever waits on a mailbox it wrote.
    pub async fn tick(&self) -> Result<queue::TickReport, Error> {
        let done = self.queue().tick().await;
        self.bell.ring_arrived();
        // Once a minute per process: attachments past their end lose their parts. A failure is
        // the next minute's to retry; it never holds up the queue's report.
        let now = self.now().millis();
        if self.blobs.is_some() && self.purged.get().is_none_or(|at| now - at >= queue::UPKEEP_EVERY_MS) {
            self.purged.set(Some(now));
            let _ = self.attachments().purge().await;
        }
        done
    }

    /// The tick a request leaves behind it (`Response::kick`), for a runtime whose queue has no
    /// timer of its own between the cron's minutes (the Worker). Works the queue; when a delivery
    /// failed for now and the runtime can wait, waits the first retry's delay and works the queue
    /// once more, so that a passing refusal (a peer's 503, a lost request) costs a second and
    /// not the cron's minute. A delivery that fails again waits for the cron. Only after a kick
    /// that attempted one delivery (a send's own): the second tick costs the invocation what a
    /// cron's tick costs, and a Free-plan invocation has 50 subrequests for both. Answers the
    /// last tick's report.
    pub async fn kick(&self) -> Result<queue::TickReport, Error> {
        let first = self.tick().await?;
        let nap = u64::try_from(self.config.retry.first_ms).unwrap_or(0);
        match (first.retried, first.attempted, self.clock.sleep(nap)) {
            (1.., ..=1, Some(wait)) => {
                wait.await;
                self.tick().await
            }
            _ => Ok(first),
        }
    }

    /// Forgets the jobs whose first attempt a send took ([`store::queue::Taken`]) without working
    /// them, as a process does that ends before its kick: their leases lapse and the due scan
    /// finds them, as it finds a job whose tick died. Answers how many there were.
    pub fn drop_kick(&self) -> usize {
        self.taken.take().len()
    }

    /// Answers one request. Never panics on input; every failure is a JSON error. An answer
    /// after which mail waits in the queue (the Libro's receipts for other houses) asks for a
    /// delivery kick.
    ///
    /// `HEAD` is answered as `GET` (the adapter sends no body); `OPTIONS` on a route the house
    /// has is a CORS preflight (204), elsewhere 404.
    ///
    /// Reads that may be a moment stale start from the request's `nyx5-bookmark` (a malformed one
    /// is 400), and the answer carries the newest bookmark the database knows, sealed
    /// (docs/SPEC.md "Reading your own writes").
    pub async fn handle(&self, mut req: Request) -> Response {
        let reads = match bookmark::open(&self.bookmark_key, req.header(bookmark::HEADER)) {
            Ok(after) => Reads::after(after),
            Err(e) => return web::finish(&req, Response::error(&e)),
        };
        let resp = match req.method.as_str() {
            "OPTIONS" => match router::route(self, &req, &reads).await {
                Err(e) if e.kind == ErrorKind::MethodNotAllowed => web::preflight(),
                Err(e) => Response::error(&e),
                Ok(_) => web::preflight(),
            },
            method => {
                if method == "HEAD" {
                    req.method = "GET".into();
                }
                match router::route(self, &req, &reads).await {
                    Ok(resp) => resp,
                    Err(e) => Response::error(&e),
                }
            }
        };
        let resp = self.with_bookmark(web::finish(&req, resp), &reads);
        // Whoever waits on a mailbox this request wrote reads it now: its batches are committed.
        self.bell.ring_arrived();
        if self.queued.take() { resp.kick() } else { resp }
    }

    /// The next chunk of a stream an answer began (`Response::follow`), or `None` when it is
    /// over: the runtime writes each chunk as it comes (`a2a_stream`).
    pub async fn follow(&self, f: &mut a2a_stream::Follow) -> Option<Vec<u8>> {
        a2a_stream::Streams { core: self.core(), post: self.post() }.follow(f).await
    }

    /// `resp` with the newest bookmark the database knows after `reads`, sealed, when it has one.
    fn with_bookmark(&self, resp: Response, reads: &Reads) -> Response {
        let sealed = self.db.bookmark(reads).and_then(|b| bookmark::seal(&self.bookmark_key, self.random(), &b));
        match sealed {
            Some(sealed) => resp
                .with_header(bookmark::HEADER, sealed)
                .with_header("access-control-expose-headers", bookmark::HEADER),
            None => resp,
        }
    }
}

impl<D: Db, N: Net> ports::Local for House<D, N> {
    /// The answer as `handle` gives it, except that mail left waiting in the queue stays the
    /// caller's to kick: a tick's crawl of its own directory must not swallow the kick of the
    /// receipts a verdict queued before it (the flag is set again, not taken).
    fn answer<'a>(&'a self, req: Request) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + 'a>> {
        Box::pin(async move {
            let resp = self.handle(req).await;
            if resp.kick {
                self.queued.set(true);
            }
            resp
        })
    }
}

/// `{"ok": true, …members}`.
pub fn ok_body<const N: usize>(members: [(&str, Value); N]) -> Value {
    let mut o = obj(members);
    o.insert("ok".into(), Value::Bool(true));
    Value::Object(o)
}
