//! GET /agents/:local, GET /agents (directory), POST /agents (registration) — spec §4, §8b.

use nyx5_proto::auth::Keys;
use nyx5_proto::card::{AgentCard, AgentCardDraft, Delegation, PreviousKey};
use nyx5_proto::crypto::{Context, EncPublic, SigPublic};
use nyx5_proto::json::field;
use nyx5_proto::sign::verify_object;
use nyx5_proto::{Address, Error, ErrorKind, Object, Refusal, Timestamp, Value, limits};

use crate::auth::json_body;
use crate::auth::{Enrol, Via};
use crate::config::Registration;
use crate::http::{Request, Response};
use crate::outbound::Policy;
use crate::ports::{Db, Net, Reads};
use crate::{House, RESERVED, ok_body};

pub use crate::auth::client_share;

/// How long a replaced key keeps signing after a rotation.
pub const ROTATION_GRACE_MS: i64 = 7 * 24 * 3_600_000;
/// Directory page size: default and most.
pub const DIRECTORY_DEFAULT_LIMIT: i64 = 20;
pub const DIRECTORY_MAX_LIMIT: i64 = 100;

/// GET /agents/:local — any certified card, listed or not. Read on the primary, never a
/// replica: other houses verify signatures against this card, and the refetch that follows a
/// key reset or rotation must not be served the card from before it (hostile review of issue
/// 36 §2, M1: a thief's reset key accepted through a lagging replica).
pub async fn get<D: Db, N: Net>(house: &House<D, N>, local: &str) -> Result<Response, Error> {
    if let Some(card) = house.lookup().system_card(local) {
        return Ok(Response::json(200, &card.to_value()));
    }
    let card = house
        .registry()
        .card_text(local)
        .await?
        .ok_or_else(|| Refusal::UnknownAgent.because(format!("no agent {local}@{}", house.config.domain)))?;
    Ok(Response::bytes(200, "application/json", card.into_bytes()))
}

/// A whole-number query parameter from 0 to `max`, `default` when absent (400 otherwise).
pub(crate) fn page_param(req: &Request, name: &str, default: i64, max: i64) -> Result<i64, Error> {
    match req.query(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (0..=max).contains(n))
            .ok_or_else(|| Refusal::BadQuery.because(format!("`{name}` must be an integer from 0 to {max}"))),
    }
}

/// GET /agents — the cards that asked to be listed.
pub async fn directory<D: Db, N: Net>(house: &House<D, N>, req: &Request, reads: &Reads) -> Result<Response, Error> {
    let limit = page_param(req, "limit", DIRECTORY_DEFAULT_LIMIT, DIRECTORY_MAX_LIMIT)?;
    let offset = page_param(req, "offset", 0, i64::from(u32::MAX))?;
    let cards = house
        .registry()
        .directory(reads, req.query("q"), req.query("accepts"), req.query("capability"), limit, offset)
        .await?;
    let agents =
        cards.iter().map(|c| Value::parse(c.as_bytes(), limits::MAX_DOCUMENT_BYTES)).collect::<Result<Vec<_>, _>>()?;
    Ok(Response::json(
        200,
        &ok_body([
            ("house", house.config.domain.as_str().into()),
            ("agents", Value::Array(agents)),
            ("limit", limit.into()),
            ("offset", offset.into()),
        ]),
    ))
}

/// A registration request, after its own checks.
struct Enrolment {
    local: String,
    sig: SigPublic,
    enc: Option<EncPublic>,
    capabilities: Object,
    inbox: Object,
    valid_until: Option<Timestamp>,
    webhook: Webhook,
    invite: Option<String>,
    delegation: Option<Delegation>,
    /// Previous keys to drop now (`drop_previous`), before their grace ends.
    drop_previous: Vec<SigPublic>,
    /// The operator's reset (`reset: true`): the new key alone, nothing carried forward.
    reset: bool,
    signed: bool,
}

fn parse_enrolment(body: &Object, now: Timestamp, policy: &Policy) -> Result<Enrolment, Error> {
    let local = field::str(body, "local")?.to_owned();
    let sig = SigPublic::parse(field::str(body, "sig")?)?;
    let webhook = field::opt_str(body, "webhook")?.map(str::to_owned);
    // Pushes go through the outbound policy anyway; refusing here tells the owner now, not never.
    if let Some(w) = &webhook {
        policy.check_learnt(w).map_err(|r| Refusal::BadWebhook.because(format!("`webhook` is refused: {r}")))?;
    }
    let webhook = match webhook {
        Some(url) => Webhook::Set(url),
        None if body.contains_key("webhook") => Webhook::Clear,
        None => Webhook::Keep,
    };
    let drop_previous = field::opt_array(body, "drop_previous")?
        .unwrap_or_default()
        .iter()
        .map(|k| {
            k.as_str()
                .ok_or_else(|| Refusal::BadMember.because("`drop_previous` lists keys"))
                .and_then(SigPublic::parse)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if drop_previous.len() > limits::MAX_PREVIOUS_KEYS + 1 {
        return Err(Refusal::BadMember.because("`drop_previous` lists too many keys"));
    }
    let reset = match body.get("reset") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(Refusal::BadMember.because("`reset` must be true or false")),
    };
    // Proof of possession: the body is signed by the key being enrolled, with a fresh `ts`.
    let signed = match body.get("signature") {
        None => false,
        Some(_) => {
            verify_object(body, "signature", Context::Registration, |kid| *kid == sig)?;
            let ts = Timestamp::parse(field::str(body, "ts")?)?;
            if (now.millis() - ts.millis()).abs() > limits::AUTH_WINDOW_MS {
                return Err(Refusal::RegistrationStale.because("registration `ts` is outside its 5-minute window"));
            }
            true
        }
    };
    Ok(Enrolment {
        local,
        sig,
        enc: field::opt_str(body, "enc")?.map(EncPublic::parse).transpose()?,
        capabilities: field::opt_object(body, "capabilities")?.cloned().unwrap_or_default(),
        inbox: field::opt_object(body, "inbox")?
            .cloned()
            .unwrap_or_else(|| nyx5_proto::json::obj([("policy", "open".into())])),
        valid_until: field::opt_str(body, "valid_until")?.map(Timestamp::parse).transpose()?,
        webhook,
        invite: field::opt_str(body, "invite")?.map(str::to_owned),
        delegation: field::opt_object(body, "delegation")?.cloned().map(Delegation::from_object).transpose()?,
        drop_previous,
        reset,
        signed,
    })
}

/// What a registration does to the agent's private webhook: the body's `webhook` absent keeps
/// it, `null` clears it, a URL sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Webhook {
    Keep,
    Clear,
    Set(String),
}

impl Webhook {
    /// The webhook as this registration leaves it. A new key (a rotation, the operator's reset
    /// included) clears a webhook the body does not set again: a webhook set with a stolen key
    /// must not outlive the owner's rotation.
    fn after(self, rotation: bool) -> Webhook {
        match self {
            Webhook::Keep if rotation => Webhook::Clear,
            other => other,
        }
    }

    /// The URL to store, and whether the stored one stays instead (only `Keep` on an update).
    fn to_store(&self) -> (Option<&str>, bool) {
        match self {
            Webhook::Keep => (None, true),
            Webhook::Clear => (None, false),
            Webhook::Set(url) => (Some(url.as_str()), false),
        }
    }
}

/// A subagent stays inside its delegation: a dotted name `<name>.<parent>` is registered only
/// with its parent's delegation (in every mode, the operator's too), only a dotted name carries
/// one, and an update of a delegated card needs a delegation issued no earlier than the one it
/// holds (an older, broader delegation cannot be replayed).
fn check_lineage(
    address: &Address,
    current: Option<&AgentCard>,
    delegation: Option<&Delegation>,
    reset: bool,
    now: Timestamp,
) -> Result<(), Error> {
    match (address.parent(), delegation) {
        (Some(parent), None) => {
            return Err(Refusal::SubagentWithoutDelegation.because(format!(
                "{address} is a subagent's name: it registers only with a delegation signed by {parent}"
            )));
        }
        (None, Some(_)) => return Err(Refusal::BadSubagentName.because("a delegated agent is named <name>.<parent>")),
        _ => {}
    }
    // A delegation "issued" in the future would outrank every later one (below) for good.
    if let Some(new) = delegation
        && new.issued > now.plus_ms(limits::AUTH_WINDOW_MS)
    {
        return Err(Refusal::DelegationInFuture.because(format!("the delegation of {address} is issued in the future")));
    }
    // No replay of an older (broader) delegation; the operator's reset starts afresh.
    if let (Some(held), Some(new)) = (current.and_then(|c| c.delegation()), delegation)
        && new.issued < held.issued
        && !reset
    {
        return Err(Refusal::DelegationStale.because(format!(
            "the delegation of {address} was issued before the one its card holds ({})",
            held.issued.to_rfc3339()
        )));
    }
    Ok(())
}

/// The previous keys the new card lists: the current card's still in grace, the replaced key
/// (on a rotation) for [`ROTATION_GRACE_MS`], minus those named in `drop` — or none at all on a
/// reset. Every key in `drop` must be one the current card lists (or its key being replaced).
fn previous_keys(
    current: Option<&AgentCard>,
    new_sig: &SigPublic,
    drop: &[SigPublic],
    reset: bool,
    now: Timestamp,
) -> Result<Vec<PreviousKey>, Error> {
    let mut keys: Vec<PreviousKey> = match current {
        Some(c) => c.previous().to_vec(),
        None => Vec::new(),
    };
    if let Some(c) = current.filter(|c| c.sig() != *new_sig) {
        keys.insert(0, PreviousKey { sig: c.sig(), until: now.plus_ms(ROTATION_GRACE_MS) });
    }
    if let Some(unknown) = drop.iter().find(|d| !keys.iter().any(|k| k.sig == **d)) {
        return Err(Refusal::BadMember
            .because(format!("`drop_previous`: {} is not a previous key of this card", unknown.to_b64())));
    }
    if reset {
        return Ok(Vec::new());
    }
    keys.retain(|k| k.until > now && k.sig != *new_sig && !drop.contains(&k.sig));
    keys.truncate(limits::MAX_PREVIOUS_KEYS);
    Ok(keys)
}

/// POST /agents — register or update an agent (spec §8b).
pub async fn register<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    let now = house.now();
    let body = json_body(req)?;
    let e = parse_enrolment(&body, now, &house.net.policy)?;
    let address = house
        .registry()
        .local_address(&e.local)
        .map_err(|_| Refusal::BadLocalPart.because(format!("invalid local part {:?}", e.local)))?;
    if RESERVED.contains(&e.local.as_str()) {
        return Err(Refusal::ReservedName.because(format!("{:?} is reserved", e.local)));
    }
    let admin = house.registry().is_admin(req);
    if e.reset && !admin {
        return Err(Refusal::OperatorOnly.because("only the operator may reset an agent (`reset`)"));
    }
    // The stored card as it is now: the update is decided on it and guarded by its exact text.
    // The operator's path only parses it, so a card whose certification no longer verifies (the
    // domain key changed) can still be re-certified.
    let stored = house.registry().card_text(&e.local).await?;
    let existing = stored.as_deref().map(|t| AgentCard::parse(t.as_bytes())).transpose()?;

    // Who may do this, and how it is recorded.
    let via = match (&existing, &e.delegation) {
        (Some(_), _) if admin => Via::Admin,
        (Some(current), _) => {
            // Only the owner, with a token by the card's current key (the body carries the new
            // ones). Authentication reads and verifies the stored card once; only when it fails
            // is the card looked at again, to say why.
            match house.registry().authenticate_owner(req, &e.local, Keys::Current).await {
                Ok(_) => {}
                Err(err) if err.kind == ErrorKind::Unauthenticated => {
                    return Err(match house.lookup().local_card(&e.local).await {
                        Err(why) if why.kind == ErrorKind::Unavailable => why,
                        Err(why) => Refusal::CardNoLongerVerifies.because(format!(
                            "the card of {} no longer verifies here ({}); only the operator may update it",
                            current.address(),
                            why.reason
                        )),
                        Ok(_) => Refusal::AgentTaken.because(format!(
                            "{} is taken; only its owner or the house may update it",
                            current.address()
                        )),
                    });
                }
                Err(err) => return Err(err),
            }
            Via::Owner
        }
        (None, Some(_)) => Via::Delegation,
        (None, None) if admin => Via::Admin,
        (None, None) => match house.config.registration {
            Registration::Admin => {
                return Err(
                    Refusal::RegistrationClosed.because("this house registers agents only through its operator")
                );
            }
            Registration::Invite => Via::Invite(
                e.invite
                    .clone()
                    .ok_or_else(|| Refusal::InviteRequired.because("an invitation code is required (`invite`)"))?,
            ),
            Registration::Open => Via::Open,
        },
    };
    if !admin && !e.signed {
        return Err(Refusal::SignatureRequired
            .because("the body must be signed by the key being registered (`signature`, `ts`)"));
    }

    // Subagents: the parent's delegation, checked against the parent's card.
    check_lineage(&address, existing.as_ref(), e.delegation.as_ref(), e.reset, now)?;
    let parent = match address.parent() {
        Some(p) => Some(
            house
                .lookup()
                .local_card(p.local())
                .await?
                .ok_or_else(|| Refusal::UnknownParent.because(format!("parent {p} is not registered here")))?,
        ),
        None => None,
    };
    // A delegation new to this card is the parent's act, so it needs the parent's current key
    // (a replaced key in its grace only reads mail, §8); the one the card already holds may be
    // sent again as it is.
    if let (Some(d), Some(p)) = (&e.delegation, &parent) {
        let held = existing.as_ref().and_then(|c| c.delegation()).map(Delegation::to_value);
        if held.as_ref() != Some(&d.to_value()) && d.signer()? != p.sig() {
            return Err(Refusal::NeedsCurrentKey
                .because(format!("a new delegation needs the current key of {}, not a replaced one", p.address())));
        }
    }

    let mut draft = AgentCardDraft::new(address.clone(), e.sig, e.enc, now);
    draft.capabilities = e.capabilities;
    draft.inbox = e.inbox;
    draft.valid_until = e.valid_until;
    draft.delegation = e.delegation;
    draft.previous = previous_keys(existing.as_ref(), &e.sig, &e.drop_previous, e.reset, now)?;
    if let Some(current) = existing.as_ref().filter(|_| !e.reset) {
        draft.valid_from = current.valid_from().min(now);
    }
    let card = draft.certify(&house.config.key)?.verify(house.card(), parent.as_ref(), now)?;
    let card_text = String::from_utf8_lossy(&card.to_value().canonical()).into_owned();

    let via_text = via.text();
    let index = crate::index::card_index(&card);
    let sig = e.sig.to_b64();
    let rotation = e.reset || existing.as_ref().is_some_and(|c| c.sig() != e.sig);
    let webhook = e.webhook.after(rotation);
    let (webhook_url, keep_webhook) = webhook.to_store();
    let gifted = house
        .registry()
        .enrol(&Enrol {
            address: &address,
            card: &card_text,
            sig: &sig,
            index: &index,
            webhook: webhook_url,
            keep_webhook,
            reset: e.reset,
            via: &via,
            client: client(req).as_deref(),
            replaces: stored.as_deref(),
            now,
        })
        .await?;
    if gifted {
        // Posted by the next tick if not now: the debt is recorded either way.
        let _posted = house.libro().post_owed(&crate::libro::welcome_cause(&address)).await;
    }
    let status = if stored.is_some() { 200 } else { 201 };
    Ok(Response::json(status, &ok_body([("card", card.to_value()), ("registered_via", via_text.into())])))
}

/// The header that names the client's address: Cloudflare sets it on every request a Worker
/// gets, and a client cannot set it itself.
pub const CLIENT_HEADER: &str = "cf-connecting-ip";

/// The client a request comes from, for its share of open registration: the address in
/// [`CLIENT_HEADER`], an IPv6 one as its /64 (what one subscriber is given, so rotating
/// addresses inside it changes nothing). `None` without the header (`nyx5 serve` behind a proxy
/// has no address it can trust): then only the house's own minute applies.
pub fn client(req: &Request) -> Option<String> {
    let text = req.header(CLIENT_HEADER)?.trim();
    // Canonical: a proxy on a dual-stack socket writes an IPv4 client as `::ffff:a.b.c.d`.
    match text.parse::<std::net::IpAddr>().map(|ip| ip.to_canonical()) {
        Ok(std::net::IpAddr::V4(ip)) => Some(ip.to_string()),
        Ok(std::net::IpAddr::V6(ip)) => {
            let [a, b, c, d, ..] = ip.segments();
            Some(format!("{a:x}:{b:x}:{c:x}:{d:x}::/64"))
        }
        Err(_) if !text.is_empty() => Some(text.chars().take(64).collect()),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use nyx5_proto::crypto::SigningKey;
    use nyx5_proto::json::obj;

    #[test]
    fn the_directory_indexes_what_a_card_offers_and_searches_its_strings() {
        let key = SigningKey::from_seed([7; 32]);
        let mut draft = AgentCardDraft::new(Address::parse("ana@a.test").unwrap(), key.public(), None, Timestamp(0));
        draft.capabilities = obj([
            ("listed", true.into()),
            ("accepts", Value::Array(vec!["Text/Plain".into(), 3.into(), "application/JSON".into()])),
            ("lang", "ES".into()),
            ("GPU", true.into()),
            ("off", false.into()),
            ("none", Value::Null),
            ("description", "Translates Poems".into()),
        ]);
        let ix = crate::index::card_index(&draft.certify(&key).unwrap());
        assert!(ix.listed);
        // Every capability it has, lower-cased, but `listed` and those set to false or null.
        assert_eq!(ix.caps, " gpu accepts description lang ", "in the card's order of keys");
        assert_eq!(ix.accepts, " text/plain application/json ");
        // The address, then every string capability (the description a second time).
        assert_eq!(ix.search, "ana@a.test translates poems es translates poems");
    }

    #[test]
    fn a_client_is_its_address_an_ipv6_one_its_64() {
        let from =
            |value: &str| client(&Request::new("POST", "/agents", vec![(CLIENT_HEADER.into(), value.into())], vec![]));
        assert_eq!(from("203.0.113.9").as_deref(), Some("203.0.113.9"));
        assert_eq!(from(" 2001:db8:1:2:3:4:5:6 ").as_deref(), Some("2001:db8:1:2::/64"));
        // An IPv4 client a dual-stack proxy wrote as IPv6 is that IPv4 client, not one /64 of all.
        assert_eq!(from("::ffff:203.0.113.9").as_deref(), Some("203.0.113.9"));
        // Not an address: the text itself, at most 64 characters; nothing at all is no client.
        assert_eq!(from("proxy-7").as_deref(), Some("proxy-7"));
        assert_eq!(from(&"x".repeat(100)).map(|c| c.len()), Some(64));
        assert_eq!(from("   "), None);
        assert_eq!(client(&Request::new("POST", "/agents", vec![], vec![])), None);
    }

    fn enrolment_dropping(n: usize) -> Result<Enrolment, Error> {
        let keys: Vec<Value> =
            (0..n).map(|i| SigningKey::from_seed([u8::try_from(i).unwrap(); 32]).public().to_b64().into()).collect();
        let body = obj([
            ("local", "ana".into()),
            ("sig", SigningKey::from_seed([99; 32]).public().to_b64().into()),
            ("drop_previous", Value::Array(keys)),
        ]);
        parse_enrolment(&body, Timestamp(0), &Policy::new([""; 0], false, false))
    }

    #[test]
    fn a_registration_drops_at_most_every_previous_key_and_the_one_replaced() {
        let too_many = enrolment_dropping(limits::MAX_PREVIOUS_KEYS + 2).err().unwrap();
        assert_eq!(too_many.refusal(), Some(Refusal::BadMember));
        assert_eq!(too_many.reason, "`drop_previous` lists too many keys", "the reason names the member");
        let most = enrolment_dropping(limits::MAX_PREVIOUS_KEYS + 1).unwrap();
        assert_eq!(most.drop_previous.len(), limits::MAX_PREVIOUS_KEYS + 1);
    }
}
