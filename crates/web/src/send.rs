//! Envelopes out: a message sealed for its recipients and its sender (spec §5, as `nyx5 send`
//! builds it), and an operation for a Libro (docs/SPEC.md §16, as `nyx5 accept`, `release` …
//! send it: to `libro@<house>`, `type: task`, `media: application/nyx5.libro+json`, in clear).

use nyx5_client::send as out;
use nyx5_proto::address::{check_id, uuid_v4};
use nyx5_proto::card::AgentCard;
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::quote::Quote;
use nyx5_proto::{Address, Envelope, Error, Refusal, Timestamp, Verified, limits};

use crate::cards::{agent_card, domain_card, domain_name, parents};
use crate::keys::Keys;
use crate::util::{OsRandom, about, address, object, value};

/// The answer of [`seal_message`] and [`libro_op`]: the envelope, and the exact text to POST.
fn sent(env: &Envelope) -> Value {
    Value::Object(obj([
        ("id", env.id().into()),
        ("sha256", env.sha256_hex().into()),
        ("envelope", env.to_value()),
        ("text", env.canonical_str().into()),
    ]))
}

/// A fresh envelope id (UUID v4).
fn new_id(rng: &mut OsRandom) -> Result<String, Error> {
    let id = uuid_v4(rng.bytes());
    rng.check()?;
    Ok(id)
}

/// `thread` or `in_reply_to`: `""` is none.
fn reference(text: &str, what: &str) -> Result<Option<String>, Error> {
    match text.trim() {
        "" => Ok(None),
        id => {
            check_id(id).map_err(about(what))?;
            Ok(Some(id.to_owned()))
        }
    }
}

/// The recipients' verified cards, in order, without repeats.
pub(crate) fn recipients(list: &Value, now: Timestamp) -> Result<Vec<Verified<AgentCard>>, Error> {
    let list =
        list.as_array().ok_or_else(|| Refusal::BadInput.because("recipients must be an array of {card, domain}"))?;
    if list.is_empty() || list.len() > limits::MAX_RECIPIENTS {
        return Err(Refusal::BadInput.because(format!("give 1 to {} recipients", limits::MAX_RECIPIENTS)));
    }
    let mut cards: Vec<Verified<AgentCard>> = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let what = format!("recipient {}", i + 1);
        let r = r
            .as_object()
            .ok_or_else(|| Refusal::BadInput.because(format!("{what} must be an object {{card, domain}}")))?;
        let domain = domain_card(field::required(r, "domain").map_err(about(&what))?, now).map_err(about(&what))?;
        let card = field::required(r, "card").map_err(about(&what))?;
        let card = agent_card(card, &domain, &parents(r.get("parent")), now).map_err(about(&what))?;
        if !cards.iter().any(|c| c.address() == card.address()) {
            cards.push(card);
        }
    }
    Ok(cards)
}

/// The most proof-of-work bits the browser mints: about 4 M hashes, a few seconds of one tab.
pub(crate) const BROWSER_MAX_POW_BITS: u32 = 22;

/// A proof of work of `bits` for the envelope whose work digest is `digest`, searched from a
/// random start; gives up after 64 times the expected work.
fn mint(digest: &str, bits: u32, rng: &mut OsRandom) -> Result<String, Error> {
    let start = u64::from_le_bytes(rng.bytes()) >> 1;
    rng.check()?;
    out::mint(digest, bits, start, &mut |_| {})
        .ok_or_else(|| Refusal::PowNotFound.because(format!("no proof of work of {bits} bits found; try again")))
}

/// What [`seal_message`] is asked to send.
#[derive(Debug)]
pub(crate) struct Message<'a> {
    pub(crate) keys: &'a str,
    pub(crate) from: &'a str,
    pub(crate) recipients: &'a str,
    pub(crate) body: &'a str,
    pub(crate) media: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) thread: &'a str,
    pub(crate) in_reply_to: &'a str,
}

/// `seal_message`: see the crate's documentation.
pub(crate) fn seal_message(m: &Message<'_>, now: Timestamp) -> Result<Value, Error> {
    let keys = crate::keys::parse(m.keys)?;
    let from = address(m.from, "from")?;
    let cards = recipients(&value(m.recipients, "recipients")?, now)?;
    let media = match m.media.trim() {
        "" => out::TEXT_MEDIA,
        media => media,
    };
    // Money moves through the Libro's own operations, never through a message.
    if out::is_libro_op(cards.iter().map(|c| c.address()), media) {
        return Err(
            Refusal::LibroOpAsMessage.because("operations for a Libro are sent with libro_op, not as a message")
        );
    }
    let kind = Kind::parse(match m.kind.trim() {
        "" => "message",
        k => k,
    })?;
    let thread = reference(m.thread, "thread")?;
    let in_reply_to = reference(m.in_reply_to, "in_reply_to")?;
    let body = if out::is_json(media) {
        Value::parse(m.body.as_bytes(), limits::MAX_ENVELOPE_BYTES)
            .map_err(about("the body is not JSON, as its media type says"))?
    } else {
        Value::String(m.body.to_owned())
    };
    // A stamp is money: the browser pays none unasked, as `nyx5 mcp` pays none (spec §19).
    if let Some(c) = cards.iter().find(|c| c.inbox().get("policy").and_then(Value::as_str) == Some("stamp")) {
        let price = c.inbox().get("price").and_then(Value::as_safe_integer).unwrap_or(1);
        return Err(Refusal::StampRequired
            .because(format!("{} asks for a stamp of {price} tokens; this client pays no stamps", c.address())));
    }
    if let Some(a) = out::lacking_enc(&cards).first() {
        return Err(Refusal::NoEncryptionKey
            .because(format!("{a} publishes no encryption key, so nothing can be sealed for it")));
    }
    let sealed_for = out::seal_keys(&cards, &from, keys.enc_public());
    let mut rng = OsRandom::default();
    let id = new_id(&mut rng)?;
    let to = cards.iter().map(|c| c.address().clone()).collect();
    let mut draft = Draft::new(id, from, to, now, Content::new(media, body));
    draft.kind = kind;
    draft.thread = thread;
    draft.in_reply_to = in_reply_to;
    let env = draft.build().map_err(about("the envelope"))?;
    let env = out::sealed(env, &sealed_for, &mut rng)?;
    rng.check()?;
    // The proof covers the sealed envelope, so it comes after sealing and before signing.
    let bits = out::pow_bits(&cards);
    if bits > BROWSER_MAX_POW_BITS {
        // The search runs on the page's own thread: 2^bits hashes on average, with no way to stop.
        return Err(Refusal::PowTooHard.because(
            format!(
                "a recipient asks a proof of work of {bits} bits; this browser mints at most {BROWSER_MAX_POW_BITS} (send it with nyx5)"
            ),
        ));
    }
    let nonce = if bits > 0 { Some(mint(&env.work_digest(), bits, &mut rng)?) } else { None };
    signed(env, nonce.as_deref().map(|n| (bits, n)), &keys)
}

/// Proves (when asked), signs and checks the size of `env`.
fn signed(env: Envelope, proof: Option<(u32, &str)>, keys: &Keys) -> Result<Value, Error> {
    Ok(sent(&out::signed(env, proof, &keys.sig)?))
}

/// The body of an operation, `{op, …}`, by the table `nyx5` shares (`nyx5_proto::ops`); times
/// only as RFC 3339 (a page has no `+30d`).
fn op_body(args: &Object) -> Result<Object, Error> {
    let op = field::str(args, "op")?;
    nyx5_proto::ops::body(op, args, &|t| Timestamp::parse(t).map_err(|e| e.reason.to_string()))
}

/// An `accept` is the buyer's, at the Libro its quote names, before the quote expires (its
/// seller's signature is the buyer's to check against the seller's card, as `nyx5 accept` does).
fn check_accept(body: &Object, from: &Address, house: &str, now: Timestamp) -> Result<(), Error> {
    let Some(Value::Object(q)) = body.get("quote") else { return Ok(()) };
    let q = Quote::from_object(q.clone())?;
    if q.buyer != *from {
        return Err(Refusal::QuoteNotYours.because(format!("this quote is for {}, not for {from}", q.buyer)));
    }
    if q.house != house {
        return Err(Refusal::QuoteWrongHouse
            .because(format!("the quote is to be accepted at the Libro of {}, not {house}", q.house)));
    }
    if q.expires.is_some_and(|e| now >= e) {
        return Err(Refusal::QuoteExpired.because(format!("quote {} has expired; ask the seller for a new one", q.id)));
    }
    Ok(())
}

/// `libro_op`: see the crate's documentation.
pub(crate) fn libro_op(keys: &str, from: &str, house: &str, op_json: &str, now: Timestamp) -> Result<Value, Error> {
    let keys = crate::keys::parse(keys)?;
    let from = address(from, "from")?;
    let house = domain_name(house)?;
    let body = op_body(&object(op_json, "operation")?)?;
    check_accept(&body, &from, &house, now)?;
    let mut rng = OsRandom::default();
    let id = new_id(&mut rng)?;
    let env = nyx5_client::libro::op_envelope(id, from, &house, body, now).map_err(about("the envelope"))?;
    signed(env, None, &keys)
}
