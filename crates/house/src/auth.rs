//! Who is asking: agents by signed token (spec §8), the operator by bearer token.

use nyx5_proto::auth::{AuthHeader, Keys, NonceClaim, Target};
use nyx5_proto::card::AgentCard;
use nyx5_proto::{Address, Error, ErrorKind, Refusal, Timestamp, Verified, limits};

use crate::http::Request;
use crate::ports::{Db, Net, PortError};
use crate::store::constraint;
use crate::view::{Core, view};
use crate::{port_error, store};

/// 401 for a token whose agent has no card here that verifies.
fn signer_unknown(reason: &str) -> Error {
    Refusal::TokenSignerUnknown.because(reason.to_owned())
}

/// The statement that stores a token's nonce as used (a second use breaks its key).
fn spend_nonce(claim: &NonceClaim) -> crate::ports::Stmt {
    store::agents::use_nonce(claim.address.as_str(), &claim.nonce, claim.keep_until.millis())
}

/// The error of a batch that spent a token's nonce: 401 when the token was used before.
pub fn nonce_error(e: PortError) -> Error {
    match e {
        PortError::Constraint { name } if name == constraint::NONCE_USED => {
            Refusal::NonceUsed.because("token already used")
        }
        e => port_error(e),
    }
}

/// Local parts no agent may register (spec §8b).
pub const RESERVED: &[&str] = &[
    "postmaster",
    "libro",
    "casa",
    "admin",
    "root",
    "abuse",
    "security",
    "hostmaster",
    "noreply",
    "support",
    "estafeta",
    "nyx5",
    "verifica",
    "tareas",
    "indice",
    crate::config::GATEWAY_LOCAL,
    nyx5_rules::a2a::GATEWAY,
];

/// The registry: who is asking (agents by token, the operator by bearer token; their cards come
/// from the `Lookup`), and the re-certification of stored cards under a rotated domain key
/// (`domain_keys`).
pub struct Registry<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
}

view!(Registry);

impl<'h, D, N> Core<'h, D, N> {
    /// The registry (who is asking, the operator), over the same borrows.
    pub fn registry(&self) -> Registry<'h, D, N> {
        Registry { core: *self }
    }
}

impl<'h, D: Db, N: Net> Registry<'h, D, N> {
    /// Authenticates a local agent: a valid token for this request (method, path, query, host
    /// and body), signed by a key `keys` allows (403 for a replaced key where only the current
    /// one will do), with a nonce never seen before.
    pub async fn authenticate(&self, req: &Request, keys: Keys) -> Result<Verified<AgentCard>, Error> {
        let (card, nonce) = self.authenticate_unspent(req, keys).await?;
        self.db.batch(vec![nonce]).await.map_err(nonce_error)?;
        Ok(card)
    }

    /// As [`Self::authenticate_owner`], but the token's nonce is not yet spent: the statement
    /// that spends it is returned, for the route to put first in the batch that does what the
    /// request asks (one round trip fewer; a replayed token then fails that batch whole, and
    /// [`nonce_error`] tells it 401). A route that writes nothing must still run it.
    pub async fn authenticate_owner_unspent(
        &self,
        req: &Request,
        local: &str,
        keys: Keys,
    ) -> Result<(Verified<AgentCard>, crate::ports::Stmt), Error> {
        let (card, nonce) = self.authenticate_unspent(req, keys).await?;
        if card.address().local() != local {
            return Err(Refusal::NotTheOwner.because(format!("{} may not act for {local}", card.address())));
        }
        Ok((card, nonce))
    }

    /// As [`Self::authenticate`], but the nonce is not yet spent (see
    /// [`Self::authenticate_owner_unspent`]).
    pub async fn authenticate_unspent(
        &self,
        req: &Request,
        keys: Keys,
    ) -> Result<(Verified<AgentCard>, crate::ports::Stmt), Error> {
        let header = req
            .header("authorization")
            .ok_or_else(|| Refusal::BadToken.because("Authorization: Nyx5 token required"))?;
        let parsed = AuthHeader::parse(header)?;
        let address = &parsed.claims.address;
        if address.domain() != self.config.domain {
            return Err(Refusal::TokenWrongHouse.because("this house authenticates only its own agents"));
        }
        if RESERVED.contains(&address.local()) {
            return Err(signer_unknown("the house's own addresses take no tokens"));
        }
        let card = self
            .lookup()
            .local_card(address.local())
            .await
            .map_err(|e| if e.kind == ErrorKind::Unavailable { e } else { signer_unknown(&e.reason) })?
            .ok_or_else(|| signer_unknown("no such agent here"))?;
        let target = Target::new(&req.method, &req.path, &req.raw_query, &self.config.host(), &req.body);
        let claim = parsed.verify(&card, &target, keys, self.now())?;
        Ok((card, spend_nonce(&claim)))
    }

    /// Stores a token's nonce as used; a second use is refused (401).
    async fn use_nonce(&self, claim: NonceClaim) -> Result<(), Error> {
        self.db.batch(vec![spend_nonce(&claim)]).await.map(drop).map_err(nonce_error)
    }

    /// Authenticates any verifiable agent, local or foreign (the Libro's direct reads, spec
    /// §16): a foreign agent's card is resolved through its domain (refreshed once when the token's
    /// key is unknown: a rotation), and its nonce is kept like a local agent's.
    pub async fn authenticate_any(&self, req: &Request) -> Result<std::sync::Arc<Verified<AgentCard>>, Error> {
        let header = req
            .header("authorization")
            .ok_or_else(|| Refusal::BadToken.because("Authorization: Nyx5 token required"))?;
        let parsed = AuthHeader::parse(header)?;
        let address = parsed.claims.address.clone();
        if address.domain() == self.config.domain {
            return self.authenticate(req, Keys::Current).await.map(std::sync::Arc::new);
        }
        let soft = |e: Error| if e.kind.is_temporary() { e } else { signer_unknown(&e.reason) };
        let target = Target::new(&req.method, &req.path, &req.raw_query, &self.config.host(), &req.body);
        let mut card = self.lookup().resolve_agent(&address, false).await.map_err(soft)?;
        let claim = match parsed.verify(&card, &target, Keys::Current, self.now()) {
            Ok(claim) => claim,
            // The card may have rotated since it was cached: fetch it again, once.
            Err(e) if e.kind == ErrorKind::Unauthenticated => {
                card = self.lookup().resolve_agent(&address, true).await.map_err(soft)?;
                parsed.verify(&card, &target, Keys::Current, self.now())?
            }
            Err(e) => return Err(e),
        };
        self.use_nonce(claim).await?;
        Ok(card)
    }

    /// Authenticates the agent and checks it is `local` (the owner of the resource).
    pub async fn authenticate_owner(
        &self,
        req: &Request,
        local: &str,
        keys: Keys,
    ) -> Result<Verified<AgentCard>, Error> {
        let card = self.authenticate(req, keys).await?;
        if card.address().local() != local {
            return Err(Refusal::NotTheOwner.because(format!("{} may not act for {local}", card.address())));
        }
        Ok(card)
    }

    /// Whether the request carries the operator's bearer token (compared in constant time).
    pub fn is_admin(&self, req: &Request) -> bool {
        let (Some(token), Some(given)) = (self.config.admin_token.as_deref(), req.header("authorization")) else {
            return false;
        };
        let Some(given) = given.strip_prefix("Bearer ") else {
            return false;
        };
        given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    pub fn require_admin(&self, req: &Request) -> Result<(), Error> {
        if self.is_admin(req) {
            Ok(())
        } else {
            Err(Refusal::OperatorTokenRequired.because("house token required (Authorization: Bearer …)"))
        }
    }

    /// A local address from a path segment.
    pub fn local_address(&self, local: &str) -> Result<Address, Error> {
        Address::new(local, &self.config.domain)
            .map_err(|_| Refusal::UnknownAgent.because(format!("no agent {local:?}")))
    }
}

/// The request body as a small JSON object (at most [`limits::MAX_DOCUMENT_BYTES`]).
pub fn json_body(req: &Request) -> Result<nyx5_proto::Object, Error> {
    nyx5_proto::Value::parse_object(small_body(req)?, limits::MAX_DOCUMENT_BYTES, "the request body")
}

/// Like [`json_body`], but an empty body is an empty object (every member optional).
pub fn optional_json_body(req: &Request) -> Result<nyx5_proto::Object, Error> {
    if req.body.is_empty() { Ok(nyx5_proto::Object::new()) } else { json_body(req) }
}

/// Body size guard for requests whose bodies are small documents.
pub fn small_body(req: &Request) -> Result<&[u8], Error> {
    if req.body.len() > limits::MAX_DOCUMENT_BYTES {
        return Err(Refusal::BodyTooLarge.because("body too large"));
    }
    Ok(&req.body)
}

/// Who registers, as `registered_via` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    Admin,
    Owner,
    Delegation,
    Invite(String),
    Open,
}

impl Via {
    pub fn text(&self) -> String {
        match self {
            Via::Admin => "admin".into(),
            Via::Owner => "self".into(),
            Via::Delegation => "delegation".into(),
            Via::Invite(code) => format!("invite:{code}"),
            Via::Open => "open".into(),
        }
    }
}

/// One client's share of the house's open registrations per minute: a fifth, at least one.
pub fn client_share(per_minute: i64) -> i64 {
    (per_minute / 5).max(1)
}

/// A registration decided by `POST /agents`: what [`Registry::enrol`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Enrol<'a> {
    pub address: &'a Address,
    /// The certified card's canonical text, its key and its directory index.
    pub card: &'a str,
    pub sig: &'a str,
    pub index: &'a crate::store::agents::Index,
    /// The webhook to store, and whether the stored one stays instead.
    pub webhook: Option<&'a str>,
    pub keep_webhook: bool,
    /// The operator's reset: nothing of the card it replaces is carried forward.
    pub reset: bool,
    pub via: &'a Via,
    /// The client the request comes from, for its share of open registration.
    pub client: Option<&'a str>,
    /// The stored card's exact text this one replaces (the update's guard); `None` for a new name.
    pub replaces: Option<&'a str>,
    /// The time the card was certified at: the rows, the rate windows and the invitation's
    /// expiry are judged at it too, never at a later reading of the clock.
    pub now: nyx5_proto::Timestamp,
}

/// The registry's reads and writes for the routes (issue 37 §2, "routes call services"): the
/// agents' stored cards, the directory, registrations, invitations and private settings.
impl<'h, D: Db, N: Net> Registry<'h, D, N> {
    /// The stored card of `local`, as its text: read on the primary (a card verified against
    /// must never be one from before a reset or rotation).
    pub fn card_text(&self, local: &str) -> impl Future<Output = Result<Option<String>, Error>> {
        store::agents::card(self.db, local)
    }

    /// When `local` was first registered (ms), on the primary; `None` for no such agent.
    pub fn created_at(&self, local: &str) -> impl Future<Output = Result<Option<i64>, Error>> {
        store::agents::created_at(self.db, local)
    }

    /// A page of the directory (listed cards, as their texts) matching the filters, read
    /// through the request's stale-tolerant `reads`.
    pub async fn directory(
        &self,
        reads: &crate::ports::Reads,
        q: Option<&str>,
        accepts: Option<&str>,
        capability: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<String>, Error> {
        let stale = self.stale(reads);
        store::agents::directory(&stale, q, accepts, capability, limit, offset).await
    }

    /// Writes a registration in one guarded batch: the invitation it uses or the minute it
    /// counts towards (the house's and the client's share of it; a parent's for subagents), the
    /// card (inserted, or replacing exactly `replaces`), and a new name's welcome gift, owed.
    /// Answers whether a gift is owed (the Libro posts it next); a failed guard is the refusal
    /// it means.
    pub async fn enrol(&self, e: &Enrol<'_>) -> Result<bool, Error> {
        let now = e.now;
        let via = e.via.text();
        let new = store::agents::NewCard {
            local: e.address.local(),
            card: e.card,
            sig: e.sig,
            index: e.index,
            webhook: e.webhook,
            via: &via,
            now: now.millis(),
        };
        // Invitations and open registration enrol new names only (a taken name is the owner's or
        // the operator's to update).
        let mut stmts = Vec::new();
        match e.via {
            Via::Invite(code) => stmts.extend(store::agents::use_invitation(code, now.millis())),
            // The house's minute, and the client's share of it: one client cannot take it all.
            Via::Open => {
                let (window, cap) = (now.millis() / 60_000, self.config.open_registrations_per_minute);
                if let Some(client) = e.client {
                    stmts.push(store::agents::count_in_window(
                        &format!("register:client:{client}"),
                        window,
                        client_share(cap),
                    ));
                }
                stmts.push(store::agents::count_in_window("register", window, cap));
            }
            // Any agent may enrol subagents in any mode: as many a minute per parent as the house
            // takes open registrations.
            Via::Delegation => stmts.push(store::agents::count_in_window(
                &format!("subagents:{}", e.address.parent().map(|p| p.local().to_owned()).unwrap_or_default()),
                now.millis() / 60_000,
                self.config.open_registrations_per_minute,
            )),
            _ => {}
        }
        match e.replaces {
            None => stmts.extend(store::agents::insert(&new)),
            Some(replaces) => stmts.extend(store::agents::update(&new, replaces, e.keep_webhook, e.reset)),
        }
        // A new name earns the house's welcome gift and its invitation's (subagents none: a parent
        // could enrol them by the minute), owed in this batch and posted to the Libro right after.
        let gift = match (e.replaces, e.via) {
            (None, Via::Invite(code)) => {
                Some(store::libro::owe_welcome(e.address, self.config.welcome, Some(code), now.millis()))
            }
            (None, Via::Open | Via::Admin) => {
                Some(store::libro::owe_welcome(e.address, self.config.welcome, None, now.millis()))
            }
            _ => None,
        };
        let gifted = gift.is_some();
        stmts.extend(gift);
        match self.db.batch(stmts).await {
            Ok(_) => Ok(gifted),
            Err(PortError::Constraint { name }) => Err(refused(&name, e.replaces.is_some(), e.address)),
            Err(err) => Err(port_error(err)),
        }
    }

    /// Stores a new invitation and answers its row as stored.
    pub async fn invite(
        &self,
        code: &str,
        uses: i64,
        expires: Option<Timestamp>,
        note: Option<&str>,
        welcome: i64,
    ) -> Result<crate::ports::Row, Error> {
        let now = self.now();
        let stmt =
            store::agents::insert_invitation(code, uses, expires.map(Timestamp::millis), note, welcome, now.millis());
        self.db.batch(vec![stmt]).await.map_err(port_error)?;
        Ok(store::agents::invitation(self.db, code).await?.unwrap_or_default())
    }

    /// Every invitation, as rows.
    pub fn invitations(&self) -> impl Future<Output = Result<Vec<crate::ports::Row>, Error>> {
        store::agents::invitations(self.db)
    }

    /// An agent's private settings in one query: a row per list entry (`webhook`, `kind`,
    /// `entry`); none when there is no such agent.
    pub fn settings(&self, local: &str) -> impl Future<Output = Result<Vec<crate::ports::Row>, Error>> {
        store::agents::settings(self.db, local)
    }
}

/// What a constraint that failed a registration's batch means to the client. An update's batch
/// carries one guard (the card it replaces), a new name's at most one (its invitation).
fn refused(name: &str, update: bool, address: &Address) -> Error {
    match name {
        constraint::GUARD if update => {
            Refusal::ChangedMeanwhile.because(format!("the card of {address} changed meanwhile; try again"))
        }
        constraint::GUARD | constraint::INVITATION_USES => {
            Refusal::BadInvite.because("invitation code unknown, used up or expired")
        }
        constraint::RATE_CAP => {
            Refusal::TooManyRegistrations.because("too many registrations this minute, try again shortly")
        }
        constraint::AGENT_TAKEN => Refusal::AgentTaken
            .because(format!("{address} was registered meanwhile; only its owner or the house may update it")),
        constraint::MAILBOX_NUMBER => {
            Refusal::HouseFull.because("this house holds as many agents as it can give mailboxes to")
        }
        other => port_error(PortError::Constraint { name: other.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A small document's body may be exactly [`limits::MAX_DOCUMENT_BYTES`]; one byte more is
    /// 413, before anything reads it.
    #[test]
    fn a_small_body_is_at_most_the_document_limit_exactly() {
        let at = |n: usize| small_body(&Request::new("POST", "/x", Vec::new(), vec![b' '; n])).map(<[u8]>::len);
        assert_eq!(at(limits::MAX_DOCUMENT_BYTES).unwrap(), limits::MAX_DOCUMENT_BYTES);
        assert_eq!(at(0).unwrap(), 0);
        let over = at(limits::MAX_DOCUMENT_BYTES + 1).unwrap_err();
        assert_eq!((over.kind, over.refusal()), (ErrorKind::TooLarge, Some(Refusal::BodyTooLarge)));
    }
}
