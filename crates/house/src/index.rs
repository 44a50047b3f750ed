//! The federated index (spec §13, `urn:nyx5:ext:indice`; docs/SPEC.md §13): a house that runs
//! one crawls the directories of the houses registered with it and answers searches over the
//! cards it found, signed.
//!
//! The crawl is a sequence of small steps, each of which reads one house's row, fetches one
//! thing and writes one batch guarded by the row it read, so a tick can stop anywhere and the
//! next resumes where it stopped. A pass over a house is: `start` (fetch and verify its domain
//! card again), `cards` (its directory a page at a time: each card verified against the domain
//! card, kept; one that no longer verifies dropped), then, once the directory ends, the cards
//! the pass did not see are dropped and `history` reads each card's signed public history (§21)
//! for the ranking. A domain card that no longer verifies drops every card of its house.
//!
//! A tick spends at most [`crate::Config::index_fetches`] outbound requests on the crawl
//! ([`Budget`]); a step that runs out of budget halfway writes nothing and is done again by the
//! next tick.

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Value, field};
use nyx5_proto::sign::verify_object;
use nyx5_proto::vecmap::VecSet;
use nyx5_proto::{Address, Error, Refusal, Timestamp, limits};

use crate::http::Request;
use crate::ports::Local;
use crate::ports::{Db, Net};
use crate::resolver::{Budget, Resolved};
use crate::store::index::{self as store, CardRow, HouseRow};
use crate::view::{Core, view};

/// Cards asked for per directory page.
pub const PAGE: i64 = 50;
/// Most houses an index crawls. Registration past it is refused (`507`-free: a 409 says so).
pub const MAX_HOUSES: i64 = 1_000;
/// Most cards kept of one house; a directory longer than this is read up to it.
pub const MAX_CARDS_PER_HOUSE: i64 = 1_000;
/// A finished pass waits this long before the next one over the same house.
pub const RECRAWL_MS: i64 = 60 * 60 * 1000;
/// A card's history is read again after this long.
pub const HISTORY_MS: i64 = 24 * 60 * 60 * 1000;
/// After a failed step the house waits this long, doubled for each failure in a row.
pub const RETRY_MS: i64 = 10 * 60 * 1000;
/// The longest wait between attempts at a failing house.
pub const RETRY_MAX_MS: i64 = 24 * 60 * 60 * 1000;
/// A house that has not verified for this long is forgotten, with its cards.
pub const FORGET_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Most steps one tick takes (the house's own directory costs no fetch, so fetches alone do not
/// bound a tick).
pub const MAX_STEPS: u32 = 64;
/// The ranking every answer states.
pub const RANKING: &str = "text score (3: a capability named q, 2: q in the address, 1: q elsewhere in the card), \
then released sales in the origin's signed history, then address";

/// What one tick's crawl did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrawlReport {
    pub steps: u32,
    pub fetches: u32,
    pub failed: u32,
}

/// How long a house that failed `failures` times in a row waits.
pub fn retry_after(failures: i64) -> i64 {
    let doublings = u32::try_from(failures.clamp(0, 16)).unwrap_or(16);
    RETRY_MS.saturating_mul(1i64 << doublings).min(RETRY_MAX_MS)
}

/// A step's outcome.
enum Outcome {
    /// Written; go on.
    Done,
    /// The budget ran out before the step could finish: nothing was written.
    OutOfBudget,
}

/// What the directory indexes about a card.
pub fn card_index(card: &AgentCard) -> crate::store::agents::Index {
    let caps = card.capabilities();
    let mut search = vec![card.address().as_str().to_owned()];
    let mut accepts = String::from(" ");
    let mut names = String::from(" ");
    for (k, v) in caps {
        if !matches!(v, Value::Bool(false) | Value::Null) && k != "listed" {
            names.push_str(&k.to_lowercase());
            names.push(' ');
        }
        match (k.as_str(), v) {
            ("accepts", Value::Array(list)) => {
                for m in list.iter().filter_map(Value::as_str) {
                    accepts.push_str(&m.to_lowercase());
                    accepts.push(' ');
                }
            }
            (_, Value::String(s)) => search.push(s.to_lowercase()),
            _ => {}
        }
    }
    if let Some(Value::String(d)) = caps.get("description") {
        search.push(d.to_lowercase());
    }
    crate::store::agents::Index { listed: card.listed(), search: search.join(" "), accepts, caps: names }
}

/// The index crawl (spec "Index"): other houses' directories and histories, read a few
/// fetches a tick; the house's own through its routes (`local`).
pub struct Index<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) local: &'h dyn Local,
}

view!(Index);

impl<'h, D: Db, N: Net> Index<'h, D, N> {
    /// One tick's share of the crawl: steps over the due houses until the budget of fetches or
    /// of steps is spent or nothing is due.
    pub async fn crawl_index(&self, fetches: u32) -> Result<CrawlReport, Error> {
        let budget = Budget::new(fetches);
        let mut report = CrawlReport::default();
        while report.steps < MAX_STEPS {
            let now = self.now().millis();
            let Some(h) = store::due(self.db, now).await? else { break };
            report.steps += 1;
            let before = budget.left();
            let outcome = self.step(&budget, &h, now, &mut report).await?;
            report.fetches += before - budget.left();
            if matches!(outcome, Outcome::OutOfBudget) {
                break;
            }
        }
        Ok(report)
    }

    async fn step(&self, budget: &Budget, h: &HouseRow, now: i64, report: &mut CrawlReport) -> Result<Outcome, Error> {
        let result = match h.phase.as_str() {
            "cards" => self.read_page(budget, h, now).await,
            "history" => self.read_history(budget, h, now).await,
            _ => self.begin(budget, h, now).await,
        };
        let writes = match result {
            _ if budget.spent() => return Ok(Outcome::OutOfBudget),
            Ok(writes) => writes,
            Err(e) => {
                report.failed += 1;
                self.failure_writes(h, &e, now)
            }
        };
        self.db.batch(writes).await.map_err(crate::port_error)?;
        Ok(Outcome::Done)
    }

    /// A failed step: a house that is not (or no longer) a house its domain certifies loses its
    /// cards; one merely unreachable keeps them until [`FORGET_MS`] without a verified pass.
    fn failure_writes(&self, h: &HouseRow, e: &Error, now: i64) -> Vec<crate::ports::Stmt> {
        let last_ok = h.ok_at.unwrap_or(0);
        if now.saturating_sub(last_ok) > FORGET_MS && h.failures > 0 {
            return vec![store::forget(&h.domain)];
        }
        let mut writes = Vec::new();
        if !e.kind.is_temporary() {
            writes.push(store::drop_cards(&h.domain));
        }
        writes.push(store::failed(h, &e.reason, now.saturating_add(retry_after(h.failures))));
        writes
    }

    /// The domain this house crawls, resolved afresh (`refresh`) or from the caches.
    async fn crawl_domain(&self, budget: &Budget, domain: &str, refresh: bool) -> Result<Resolved, Error> {
        if domain == self.config.domain {
            return self.lookup().resolve_domain(domain).await;
        }
        self.lookup().resolver_within(Some(budget)).domain(domain, refresh).await
    }

    /// GETs `path` at the crawled house: the house's own routes answer its own domain without a
    /// fetch.
    async fn crawl_get(&self, budget: &Budget, h: &HouseRow, path: &str) -> Result<Vec<u8>, Error> {
        let what = format!("{path} of {}", h.domain);
        if h.domain == self.config.domain {
            let resp = self.local.answer(Request::new("GET", path, vec![], vec![])).await;
            return match resp.status {
                200 => Ok(resp.body),
                404 => Err(Refusal::PeerNotFound.because(format!("{what}: not found"))),
                s => Err(Refusal::PeerUnavailable.because(format!("{what}: answered {s}"))),
            };
        }
        self.lookup().resolver_within(Some(budget)).fetch(format!("{}{path}", h.url), &what).await
    }

    async fn begin(&self, budget: &Budget, h: &HouseRow, now: i64) -> Result<Vec<crate::ports::Stmt>, Error> {
        let domain = self.crawl_domain(budget, &h.domain, true).await?;
        Ok(vec![store::begin_pass(h, &domain.url, now)])
    }

    async fn read_page(&self, budget: &Budget, h: &HouseRow, now: i64) -> Result<Vec<crate::ports::Stmt>, Error> {
        let body = self.crawl_get(budget, h, &format!("/agents?limit={PAGE}&offset={}", h.cursor)).await?;
        let page = Value::parse(&body, limits::MAX_DOCUMENT_BYTES)
            .map_err(|e| Refusal::BadDirectory.because(format!("the directory of {}: {}", h.domain, e.reason)))?;
        let page = page
            .as_object()
            .ok_or_else(|| Refusal::BadDirectory.because(format!("the directory of {} is not an object", h.domain)))?;
        if field::str(page, "house").ok() != Some(h.domain.as_str()) {
            return Err(
                Refusal::BadDirectory.because(format!("the directory at {} does not say it is {}", h.url, h.domain))
            );
        }
        let cards = field::opt_array(page, "agents")?.unwrap_or_default();
        let domain = self.crawl_domain(budget, &h.domain, false).await?;
        let pass = h.pass;
        let mut writes = Vec::new();
        let shown = cards.iter().take(usize::try_from(PAGE).unwrap_or(0));
        let mut seen = 0i64;
        // A page may show an address twice: one good copy is kept, whatever else it shows.
        let mut kept = VecSet::new();
        for c in shown {
            seen += 1;
            let Some(o) = c.as_object() else { continue };
            let Ok(card) = AgentCard::from_object(o.clone()) else { continue };
            let address = card.address().clone();
            if address.domain() != h.domain || !card.listed() {
                continue;
            }
            match self.verify_crawled(budget, card, &domain).await {
                Ok(card) => {
                    kept.insert(address.as_str().to_owned());
                    let text = card.to_value().canonical_string();
                    let idx = card_index(&card);
                    writes.push(store::put_card(
                        &CardRow {
                            address: address.as_str(),
                            house: &h.domain,
                            card: &text,
                            search: &idx.search,
                            accepts: &idx.accepts,
                            caps: &idx.caps,
                            valid_until: card.valid_until().map(|t| t.millis()),
                            pass,
                        },
                        MAX_CARDS_PER_HOUSE,
                    ));
                }
                Err(e) if e.kind.is_temporary() => writes.push(store::keep_card(address.as_str(), &h.domain, pass)),
                Err(_) if !kept.contains(address.as_str()) => writes.push(store::drop_card(address.as_str())),
                Err(_) => {}
            }
        }
        let read = h.cursor.saturating_add(seen);
        if seen < PAGE || read >= MAX_CARDS_PER_HOUSE {
            writes.push(store::drop_unseen(&h.domain, pass));
            writes.push(store::advance(h, "history", 0, now));
        } else {
            writes.push(store::advance(h, "cards", read, now));
        }
        Ok(writes)
    }

    async fn verify_crawled(
        &self,
        budget: &Budget,
        card: AgentCard,
        domain: &Resolved,
    ) -> Result<nyx5_proto::sign::Verified<AgentCard>, Error> {
        if card.address().domain() == self.config.domain {
            // Our own cards: verified as any local card is, parent included.
            return self
                .lookup()
                .local_card(card.address().local())
                .await?
                .filter(|c| c.to_value() == card.to_value())
                .ok_or_else(|| {
                    Refusal::WrongCard.because(format!("{} is not the card this house holds", card.address()))
                });
        }
        self.lookup().resolver_within(Some(budget)).verify_card(card, domain).await
    }

    async fn read_history(&self, budget: &Budget, h: &HouseRow, now: i64) -> Result<Vec<crate::ports::Stmt>, Error> {
        let Some(address) = store::history_due(self.db, &h.domain, now.saturating_sub(HISTORY_MS)).await? else {
            return Ok(vec![store::advance(h, "start", 0, now.saturating_add(RECRAWL_MS))]);
        };
        let Ok(who) = Address::parse(&address) else {
            return Ok(vec![store::drop_card(&address)]);
        };
        match self.crawl_get(budget, h, &format!("/agents/{}/historial", who.local())).await {
            Ok(body) => {
                let domain = self.crawl_domain(budget, &h.domain, false).await?;
                Ok(vec![store::set_history(&address, released_sales(&body, &who, &domain, self.now()), now)])
            }
            // Unreachable now: the last reading stands, and the pass goes on.
            Err(e) if e.kind.is_temporary() => Ok(vec![store::history_tried(&address, now)]),
            Err(_) => Ok(vec![store::set_history(&address, None, now)]),
        }
    }
}

/// The released sales (`vendiendo.liberados`) of an agent's public history, if `body` is one for
/// `who` signed by its domain; `None` for anything else (the ranking then counts none).
pub fn released_sales(body: &[u8], who: &Address, domain: &Resolved, now: Timestamp) -> Option<i64> {
    let doc = Value::parse(body, limits::MAX_DOCUMENT_BYTES).ok()?;
    let doc = doc.as_object()?;
    verify_object(doc, "signature", Context::Historial, |k| domain.card.accepts_key(k, now)).ok()?;
    if field::str(doc, "address").ok()? != who.as_str() {
        return None;
    }
    let selling = doc.get("vendiendo")?.as_object()?;
    selling.get("liberados")?.as_safe_integer().filter(|n| *n >= 0)
}

/// A search of the index's cards, as `GET /index/search` asks it.
pub use crate::store::index::Search;

/// The index's reads and writes for the routes (issue 37 §2, "routes call services"): the houses
/// it crawls, enlisting one, and its answers.
impl<'h, D: Db, N: Net> Index<'h, D, N> {
    /// The row of house `domain` in the index, if it is listed.
    pub fn house(&self, domain: &str) -> impl Future<Output = Result<Option<crate::ports::Row>, Error>> {
        store::house(self.db, domain)
    }

    /// Lists house `domain` (its estafeta at `url`) for crawling, in one batch guarded by the
    /// index's size ([`MAX_HOUSES`]; 409 when full); a listed house is crawled again soon.
    pub async fn enlist(&self, domain: &str, url: &str) -> Result<(), Error> {
        let now = self.now().millis();
        match self.db.batch(store::register(domain, url, now, MAX_HOUSES)).await {
            Ok(_) => Ok(()),
            Err(crate::ports::PortError::Constraint { name }) if name == crate::store::constraint::GUARD => {
                Err(Refusal::IndexFull
                    .because(format!("this index crawls {MAX_HOUSES} houses already and takes no more")))
            }
            Err(e) => Err(crate::port_error(e)),
        }
    }

    /// A page of the houses listed, read through the request's stale-tolerant `reads`.
    pub async fn houses(
        &self,
        reads: &crate::ports::Reads,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<crate::ports::Row>, Error> {
        store::houses(&self.stale(reads), limit, offset).await
    }

    /// The cards that answer `s` (each with the house it came from), ranked, read through the
    /// request's stale-tolerant `reads`.
    pub async fn search(&self, reads: &crate::ports::Reads, s: &Search<'_>) -> Result<Vec<(String, String)>, Error> {
        store::search(&self.stale(reads), s).await
    }
}
