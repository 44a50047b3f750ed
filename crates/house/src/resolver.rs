//! The house's side of the one resolver ([`nyx5_client::resolver`], docs/SPEC.md §6.1): its pins
//! and card cache in the database ([`DbPins`]), with the bounds a stranger cannot push past, its
//! memo of cards, and the house's own domain and agents answered from itself.

use std::sync::Arc;

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Address, Error, Refusal, Verified};
use nyx5_rules::libro::{LIBRO, TAREAS, VERIFICA};

pub use nyx5_client::resolver::*;

use crate::ports::{Db, Net, PortError};
use crate::view::{Core, view};
use crate::{outbound, port_error, store};

/// Names under one site (`site.rs`) the house fetches a domain card for per minute, pinned
/// domains and names known without a pin (`known_names`, [`KNOWN_FETCHES_PER_SITE_PER_MINUTE`])
/// aside.
pub const NEW_NAMES_PER_SITE_PER_MINUTE: i64 = 30;
/// Most pins for the domains of one site: a party that mints names cannot make the house pin
/// more than these; past them a new domain of the site is trusted unpinned, as past
/// [`MAX_PINS`] (a house that needs more of one site anchors them in DNS, which pins nothing).
pub const MAX_PINS_PER_SITE: i64 = 64;
/// Fetches a minute of names under one site that are known without a pin (`known_names`): a
/// budget of their own, apart from the site's new names. A peer's names each refetch once per
/// cached five minutes, so 64 known names of a site need about 13 a minute.
pub const KNOWN_FETCHES_PER_SITE_PER_MINUTE: i64 = 60;
/// Names known without a pin (`known_names`, migration 0020) per site, and in all: as for pins,
/// a name past either bound spends its site's budget as any new name does.
pub const MAX_KNOWN_PER_SITE: i64 = 64;
pub const MAX_KNOWN: i64 = 100_000;
/// How long a name whose card verified without a pin stays known: 30 days after its last
/// verification (a peer the house writes to is verified again every few minutes).
pub const KNOWN_MS: i64 = 30 * 24 * 3_600_000;

/// Most pins in all. Past it a new domain is not refused but trusted unpinned (anchor
/// `unpinned`): strangers who fill the table from many sites must not shut every new domain
/// out, nor push an existing pin out to re-open trust on first use for it.
pub const MAX_PINS: i64 = 100_000;

/// The house's [`PinStore`]: the `pins` and `card_slots` tables.
#[derive(Debug)]
pub struct DbPins<'a, D>(pub &'a D);

impl<D: Db> PinStore for DbPins<'_, D> {
    async fn pin(&self, domain: &str) -> Result<Option<SigPublic>, Error> {
        let row = store::resolver::pin(self.0, domain).await?;
        Ok(row.and_then(|r| r.text("sig").and_then(|s| SigPublic::parse(s).ok())))
    }

    async fn first_pin(&self, domain: &str, key: &SigPublic, c: ChainCard<'_>) -> Result<bool, Error> {
        let c = c.entry();
        let kid = key.to_b64();
        let site = crate::site::site(domain);
        let stmts = vec![
            store::resolver::insert_pin(domain, site, &kid, c.at, MAX_PINS_PER_SITE, MAX_PINS),
            store::resolver::cache_if_pinned(domain, c.card, c.url, c.at, &kid),
        ];
        let changes = self.0.batch(stmts).await.map_err(port_error)?;
        Ok(changes.first().is_some_and(|n| *n > 0))
    }

    async fn admit(&self, domain: &str, now: i64) -> Result<(), Error> {
        let site = crate::site::site(domain);
        let (cap, known) = (NEW_NAMES_PER_SITE_PER_MINUTE, KNOWN_FETCHES_PER_SITE_PER_MINUTE);
        match self.0.batch(store::resolver::count_new_name(domain, site, now / 60_000, cap, known)).await {
            Ok(_) => Ok(()),
            Err(PortError::Constraint { name }) if name == store::constraint::RATE_CAP => Err(Refusal::TooManyFetches
                .because(format!(
                    "too many card fetches under {site} this minute (at most {cap} new names, and {known} of \
                     names known there); try again shortly"
                ))),
            Err(e) => Err(port_error(e)),
        }
    }

    async fn move_pin(&self, domain: &str, from: &SigPublic, to: &SigPublic, c: ChainCard<'_>) -> Result<bool, Error> {
        let c = c.entry();
        let (from, to) = (from.to_b64(), to.to_b64());
        let changes = self
            .0
            .batch(vec![
                store::resolver::move_pin(domain, &from, &to),
                store::resolver::cache_if_pinned(domain, c.card, c.url, c.at, &to),
            ])
            .await
            .map_err(port_error)?;
        Ok(changes.first().is_some_and(|n| *n > 0))
    }

    async fn admit_refresh(&self, key: &str, kid: &SigPublic, now: i64) -> Result<(), Error> {
        // One refresh of `key`'s card per half minute, whatever the key: rate windows are
        // minutes (and purged as such), so the half is named in the bucket.
        let half = now.div_euclid(REFRESH_WINDOW_MS).rem_euclid(60_000 / REFRESH_WINDOW_MS);
        let stmt = store::resolver::count_refresh(&format!("refresh:{key} {half}"), now.div_euclid(60_000), 1);
        match self.0.batch(vec![stmt]).await {
            Ok(_) => Ok(()),
            Err(PortError::Constraint { name }) if name == store::constraint::RATE_CAP => {
                Err(Refusal::CardRefetchedLately.because(format!(
                    "the card of {key} does not list the key {} and was fetched anew a moment ago; try again in {} s",
                    kid.to_b64(),
                    REFRESH_WINDOW_MS / 1000
                )))
            }
            Err(e) => Err(port_error(e)),
        }
    }

    async fn refuse(&self, domain: &str, key: &SigPublic, now: i64) -> Result<(), Error> {
        match self.0.batch(vec![store::resolver::set_pending(domain, &key.to_b64(), now)]).await {
            Ok(_) | Err(PortError::Constraint { .. }) => Ok(()),
            Err(e) => Err(port_error(e)),
        }
    }

    async fn cached(&self, key: &str, fresh_after: i64) -> Result<Option<CachedCard>, Error> {
        let row = store::resolver::cached(self.0, key, fresh_after).await?;
        Ok(row.and_then(|r| {
            Some(CachedCard {
                card: r.text("card")?.to_owned(),
                url: r.text("url")?.to_owned(),
                at: r.int("fetched_at")?,
                pin: r.text("pin").map(str::to_owned),
            })
        }))
    }

    async fn cache(&self, c: CacheEntry<'_>) -> Result<(), Error> {
        self.0.batch(vec![store::resolver::cache(c.key, c.card, c.url, c.at)]).await.map_err(port_error).map(drop)
    }

    async fn cache_pinned(&self, pin: &SigPublic, c: ChainCard<'_>) -> Result<(), Error> {
        let c = c.entry();
        let stmt = store::resolver::cache_if_pinned(c.key, c.card, c.url, c.at, &pin.to_b64());
        self.0.batch(vec![stmt]).await.map_err(port_error).map(drop)
    }

    async fn cache_known(&self, c: ChainCard<'_>) -> Result<(), Error> {
        let c = c.entry();
        let site = crate::site::site(c.key);
        let stmts = vec![
            store::resolver::cache(c.key, c.card, c.url, c.at),
            store::resolver::remember_name(c.key, site, c.at, MAX_KNOWN_PER_SITE, MAX_KNOWN),
        ];
        self.0.batch(stmts).await.map_err(port_error).map(drop)
    }

    async fn known(&self, domain: &str, now: i64) -> Result<(), Error> {
        let site = crate::site::site(domain);
        let stmt = store::resolver::remember_name(domain, site, now, MAX_KNOWN_PER_SITE, MAX_KNOWN);
        self.0.batch(vec![stmt]).await.map_err(port_error).map(drop)
    }
}

/// The house's view of cards: its own domain card, its agents' (stored and system), and other
/// houses' and their agents', fetched and verified by a [`Resolver`] over the house's network,
/// pins and memo.
pub struct Lookup<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
}

view!(Lookup);

impl<'h, D, N> Core<'h, D, N> {
    /// The house's cards of agents and houses, local or fetched, over the same borrows.
    pub fn lookup(&self) -> Lookup<'h, D, N> {
        Lookup { core: *self }
    }
}

impl<'h, D: Db, N: Net> Lookup<'h, D, N> {
    /// The card of one of the house's own agents, by local part.
    pub fn system_card(&self, local: &str) -> Option<&'h Verified<AgentCard>> {
        let systems = self.systems;
        match local {
            LIBRO => Some(&systems.libro),
            VERIFICA => Some(&systems.verifica),
            TAREAS => Some(&systems.tareas),
            nyx5_rules::a2a::GATEWAY => Some(&systems.a2a),
            _ => None,
        }
    }

    /// The verified card of a local agent, with its parent's for a delegated card.
    pub async fn local_card(&self, local: &str) -> Result<Option<Verified<AgentCard>>, Error> {
        if let Some(card) = self.system_card(local) {
            return Ok(Some(card.clone()));
        }
        let Some(card) = self.stored_card(local).await? else {
            return Ok(None);
        };
        let parent = match (&card.delegation(), card.address().parent()) {
            (Some(_), Some(parent)) => Box::pin(self.local_card(parent.local())).await?,
            _ => None,
        };
        card.verify(self.card, parent.as_ref(), self.now()).map(Some)
    }

    /// A local agent's card as stored, parsed but NOT verified: for the operator, who may
    /// re-certify a card whose certification no longer verifies (the domain key changed).
    pub async fn stored_card(&self, local: &str) -> Result<Option<AgentCard>, Error> {
        store::agents::card(self.db, local).await?.map(|text| AgentCard::parse(text.as_bytes())).transpose()
    }

    /// The resolver over this house's network, database, memo and configuration.
    pub(crate) fn resolver(&self) -> Resolver<'_, outbound::Guarded<N>, DbPins<'_, D>> {
        self.resolver_within(None)
    }

    /// The same, its requests out of `budget` when there is one (the index crawl's). One
    /// resolver type for both: a wrapper network for the crawl made the Worker carry the whole
    /// resolver twice (benches/README.md, "Bundle").
    pub(crate) fn resolver_within<'a>(
        &'a self,
        budget: Option<&'a Budget>,
    ) -> Resolver<'a, outbound::Guarded<N>, DbPins<'a, D>> {
        static NONE: VecMap<String, (String, &'static str)> = VecMap::new();
        static NO_URLS: VecMap<String, String> = VecMap::new();
        Resolver {
            net: self.net,
            budget,
            store: DbPins(self.db),
            memo: &self.cards.memo,
            sources: Sources {
                hosts: &self.config.hosts,
                known: &NONE,
                given: &NO_URLS,
                doh: self.config.doh_url.as_deref(),
                allow_http: self.config.allow_http,
            },
            repin: false,
            now: self.now(),
        }
    }

    /// The estafeta and verified card of `domain` (this house's own for its own domain).
    pub fn resolve_domain(&self, domain: &str) -> impl Future<Output = Result<Resolved, Error>> {
        self.resolve_domain_with(domain, false)
    }

    /// As [`Lookup::resolve_domain`]; `refresh` skips both caches.
    pub async fn resolve_domain_with(&self, domain: &str, refresh: bool) -> Result<Resolved, Error> {
        if domain == self.config.domain {
            return Ok(Resolved {
                url: self.config.public_url.clone(),
                card: Arc::new(self.card.clone()),
                via: "self",
                anchor: "self",
            });
        }
        self.resolver().domain(domain, refresh).await
    }

    /// As [`Lookup::resolve_domain`], to check something signed by `kid`: a cached card that does
    /// not accept `kid` is fetched anew, within bounds ([`Resolver::domain_knowing`]).
    pub async fn resolve_domain_knowing(&self, domain: &str, kid: &SigPublic) -> Result<Resolved, Error> {
        if domain == self.config.domain {
            return self.resolve_domain(domain).await;
        }
        self.resolver().domain_knowing(domain, kid).await
    }

    /// As [`Lookup::resolve_agent`], to check something signed by `kid`: a remote card that does
    /// not accept `kid` is fetched anew with its chain, within bounds
    /// ([`Resolver::agent_knowing`]).
    pub async fn resolve_agent_knowing(
        &self,
        address: &Address,
        kid: &SigPublic,
    ) -> Result<Arc<Verified<AgentCard>>, Error> {
        if address.domain() == self.config.domain {
            return self.resolve_agent(address, false).await;
        }
        self.resolver().agent_knowing(address, kid).await
    }

    /// The verified card of `address`: local agents from this house, remote ones fetched from
    /// their estafeta and verified against their domain (and parent) cards. Cached for five
    /// minutes unless `refresh`, which refetches the whole chain.
    pub async fn resolve_agent(&self, address: &Address, refresh: bool) -> Result<Arc<Verified<AgentCard>>, Error> {
        if address.domain() == self.config.domain {
            return self
                .local_card(address.local())
                .await?
                .map(Arc::new)
                .ok_or_else(|| Refusal::UnknownAgent.because(format!("no agent {address}")));
        }
        self.resolver().agent(address, refresh).await
    }

    /// The operator confirms the pending key of `domain` (optionally naming it): it becomes the
    /// pin, and every cached card of that domain is dropped. 404 without a pin, 409 when nothing
    /// (or another key) is pending.
    pub async fn confirm_pin(&self, domain: &str, expected: Option<&SigPublic>) -> Result<String, Error> {
        let expected = expected.map(SigPublic::to_b64);
        let changes = self
            .db
            .batch(vec![
                store::resolver::confirm_pin(domain, expected.as_deref()),
                store::resolver::forget_domain(domain),
            ])
            .await
            .map_err(port_error)?;
        self.cards.memo.forget_domain(domain);
        let pin = store::resolver::pin(self.db, domain).await?;
        match (changes.first(), pin) {
            (_, None) => Err(Refusal::NoPin.because(format!("no pin for {domain}"))),
            (Some(&1), Some(row)) => Ok(row.text("sig").unwrap_or_default().to_owned()),
            (_, Some(_)) => Err(Refusal::NoPendingKey.because(format!("no such key is pending for {domain}"))),
        }
    }
}

/// The lookup's reads for the routes (issue 37 §2, "routes call services").
impl<'h, D: Db, N: Net> Lookup<'h, D, N> {
    /// Every house key pinned here, with any key pending confirmation.
    pub fn pins(&self) -> impl Future<Output = Result<Vec<crate::ports::Row>, Error>> {
        store::resolver::pins(self.db)
    }
}
