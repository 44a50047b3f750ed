//! Envelopes out: a message sealed for its recipients and its sender (spec §5, as `nyx5 send`
//! builds it), and an operation for a Libro (docs/SPEC.md §16, as `nyx5 accept`, `release` …
//! send it: to `libro@<house>`, `type: task`, `media: application/nyx5.libro+json`, in clear).

use nyx5_proto::address::{check_id, uuid_v4};
use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::EncPublic;
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::quote::Quote;
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Timestamp, Verified, limits, pow, seal};

use crate::keys::Keys;
use crate::trust::{agent_card, domain_card, domain_name, parents};
use crate::util::{OsRandom, about, address, object, value};

/// The media type of a Libro operation (docs/SPEC.md §16).
pub(crate) const OP_MEDIA: &str = "application/nyx5.libro+json";
/// The local part of a house's Libro.
pub(crate) const LIBRO_LOCAL: &str = "libro";
/// The media type of a text body, as `nyx5 send` writes it.
const TEXT_MEDIA: &str = "text/plain; charset=utf-8";
/// Proof-of-work bits asked when a `pow` inbox names none (docs/SPEC.md §9b).
const DEFAULT_POW_BITS: i64 = 16;
/// Hashes tried per call of `pow::mint`.
const POW_CHUNK: u64 = 1 << 16;

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

/// Whether `media` names JSON (`application/json` or `…+json`).
fn is_json(media: &str) -> bool {
    let m = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    m == "application/json" || m.ends_with("+json")
}

/// The recipients' verified cards, in order, without repeats.
fn recipients(list: &Value, now: Timestamp) -> Result<Vec<Verified<AgentCard>>, Error> {
    let list = list.as_array().ok_or_else(|| Error::malformed("recipients must be an array of {card, domain}"))?;
    if list.is_empty() || list.len() > limits::MAX_RECIPIENTS {
        return Err(Error::malformed(format!("give 1 to {} recipients", limits::MAX_RECIPIENTS)));
    }
    let mut cards: Vec<Verified<AgentCard>> = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let what = format!("recipient {}", i + 1);
        let r = r.as_object().ok_or_else(|| Error::malformed(format!("{what} must be an object {{card, domain}}")))?;
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
pub const BROWSER_MAX_POW_BITS: u32 = 22;

/// The proof-of-work bits the recipients' inboxes ask (the largest), as `nyx5 send` reads them.
fn pow_bits(cards: &[Verified<AgentCard>]) -> u32 {
    let bits = cards
        .iter()
        .filter(|c| c.inbox().get("policy").and_then(Value::as_str) == Some("pow"))
        .map(|c| c.inbox().get("pow_bits").and_then(Value::as_safe_integer).unwrap_or(DEFAULT_POW_BITS))
        .max()
        .unwrap_or(0)
        .clamp(0, i64::from(limits::MAX_POW_BITS));
    u32::try_from(bits).unwrap_or(limits::MAX_POW_BITS)
}

/// A proof of work of `bits` for the envelope whose work digest is `digest`, searched from a
/// random start; gives up after 64 times the expected work.
fn mint(digest: &str, bits: u32, rng: &mut OsRandom) -> Result<String, Error> {
    let start = u64::from_le_bytes(rng.bytes()) >> 1;
    rng.check()?;
    let expected = 1u64 << bits.min(62);
    let mut tried = 0u64;
    loop {
        if let Some(nonce) = pow::mint(digest, bits, start.wrapping_add(tried), POW_CHUNK) {
            return Ok(nonce);
        }
        tried = tried.saturating_add(POW_CHUNK);
        if tried > expected.saturating_mul(64) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("no proof of work of {bits} bits found; try again"),
            ));
        }
    }
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
    let keys = Keys::parse(m.keys)?;
    let from = address(m.from, "from")?;
    let cards = recipients(&value(m.recipients, "recipients")?, now)?;
    let media = match m.media.trim() {
        "" => TEXT_MEDIA,
        media => media,
    };
    // Money moves through the Libro's own operations, never through a message.
    if cards.iter().any(|c| c.address().local() == LIBRO_LOCAL) || media == OP_MEDIA {
        return Err(Error::malformed("operations for a Libro are sent with libro_op, not as a message"));
    }
    let kind = Kind::parse(match m.kind.trim() {
        "" => "message",
        k => k,
    })?;
    let thread = reference(m.thread, "thread")?;
    let in_reply_to = reference(m.in_reply_to, "in_reply_to")?;
    let body = if is_json(media) {
        Value::parse(m.body.as_bytes(), limits::MAX_ENVELOPE_BYTES)
            .map_err(about("the body is not JSON, as its media type says"))?
    } else {
        Value::String(m.body.to_owned())
    };
    // A stamp is money: the browser pays none unasked, as `nyx5 mcp` pays none (spec §19).
    if let Some(c) = cards.iter().find(|c| c.inbox().get("policy").and_then(Value::as_str) == Some("stamp")) {
        let price = c.inbox().get("price").and_then(Value::as_safe_integer).unwrap_or(1);
        return Err(Error::new(
            ErrorKind::PaymentRequired,
            format!("{} asks for a stamp of {price} tokens; this client pays no stamps", c.address()),
        ));
    }
    let mut sealed_for: Vec<(Address, EncPublic)> = Vec::new();
    for c in &cards {
        let enc = c.enc().ok_or_else(|| {
            Error::forbidden(format!("{} publishes no encryption key, so nothing can be sealed for it", c.address()))
        })?;
        sealed_for.push((c.address().clone(), enc));
    }
    if !sealed_for.iter().any(|(a, _)| *a == from) {
        sealed_for.push((from.clone(), keys.enc_public()));
    }
    let mut rng = OsRandom::default();
    let id = new_id(&mut rng)?;
    let to = cards.iter().map(|c| c.address().clone()).collect();
    let mut draft = Draft::new(id, from, to, now, Content::new(media, body));
    draft.kind = kind;
    draft.thread = thread;
    draft.in_reply_to = in_reply_to;
    let env = draft.build().map_err(about("the envelope"))?;
    let mut env = seal::seal(env, &sealed_for, &mut rng).map_err(about("cannot seal"))?;
    rng.check()?;
    // The proof covers the sealed envelope, so it comes after sealing and before signing.
    let bits = pow_bits(&cards);
    if bits > BROWSER_MAX_POW_BITS {
        // The search runs on the page's own thread: 2^bits hashes on average, with no way to stop.
        return Err(Error::new(
            ErrorKind::PaymentRequired,
            format!(
                "a recipient asks a proof of work of {bits} bits; this browser mints at most {BROWSER_MAX_POW_BITS} (send it with nyx5)"
            ),
        ));
    }
    if bits > 0 {
        let nonce = mint(&env.work_digest(), bits, &mut rng)?;
        env = env.with_pow(bits, &nonce).map_err(about("the envelope"))?;
    }
    signed(env, &keys)
}

/// Signs `env` and checks its size.
fn signed(env: Envelope, keys: &Keys) -> Result<Value, Error> {
    let env = env.sign(&keys.sig).map_err(about("cannot sign"))?;
    env.check_size(limits::MAX_ENVELOPE_BYTES).map_err(about("the envelope"))?;
    Ok(sent(&env))
}

/// How one member of an operation is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// An id: contracts, mandates.
    Id,
    /// An address, written lower-cased.
    Address,
    /// Tokens: 1 to 2^53 − 1.
    Amount,
    /// A statement's length: 1 to 100.
    Limit,
    /// 64 hex digits, written lower-cased.
    Sha256,
    /// Non-empty words.
    Text,
    /// An RFC 3339 instant, written as `toISOString` writes it.
    Time,
    /// A mandate's scope `{concepts?: [text, …]}`, as it is.
    Scope,
    /// A signed quote, as it is.
    Quote,
}

/// A member of an operation: its name, how it is read, whether it is required.
type Spec = (&'static str, Member, bool);

/// Every operation and its members (docs/SPEC.md §16, the table `nyx5`'s Libro verbs and MCP
/// tools share).
const OPS: &[(&str, &[Spec])] = &[
    ("accept", &[("quote", Member::Quote, true)]),
    (
        "deliver",
        &[("contract", Member::Id, true), ("evidence_sha256", Member::Sha256, false), ("note", Member::Text, false)],
    ),
    ("release", &[("contract", Member::Id, true)]),
    ("refund", &[("contract", Member::Id, true), ("note", Member::Text, false)]),
    (
        "bond",
        &[
            ("amount", Member::Amount, true),
            ("claim", Member::Text, true),
            ("verifier", Member::Address, true),
            ("beneficiary", Member::Address, false),
            ("arbiter", Member::Address, false),
            ("evidence_sha256", Member::Sha256, false),
            ("expires", Member::Time, false),
            ("vouchee", Member::Address, false),
        ],
    ),
    ("forfeit", &[("contract", Member::Id, true), ("reason", Member::Text, true)]),
    (
        "mandate",
        &[
            ("grantee", Member::Address, true),
            ("cap", Member::Amount, true),
            ("scope", Member::Scope, false),
            ("expires", Member::Time, false),
            ("parent", Member::Id, false),
        ],
    ),
    ("charge", &[("mandate", Member::Id, true), ("amount", Member::Amount, true), ("concept", Member::Text, true)]),
    ("revoke", &[("mandate", Member::Id, true)]),
    ("balance", &[]),
    ("statement", &[("limit", Member::Limit, false)]),
    ("contract", &[("contract", Member::Id, true)]),
];

/// Reads member `name` of operation `op` as `kind` says.
fn member(op: &str, name: &str, kind: Member, v: &Value) -> Result<Value, Error> {
    let bad = |what: &str| Error::malformed(format!("{op}: `{name}` must be {what}"));
    let string = || v.as_str().map(str::trim).filter(|s| !s.is_empty());
    let amount = |max: i64| v.as_safe_integer().filter(|n| (1..=max).contains(n));
    Ok(match kind {
        Member::Id => {
            let id = string().ok_or_else(|| bad("an id"))?;
            check_id(id).map_err(about(&format!("{op}: `{name}`")))?;
            id.into()
        }
        Member::Address => {
            let a = string().ok_or_else(|| bad("an address, name@domain"))?;
            address(a, &format!("{op}: `{name}`"))?.as_str().into()
        }
        Member::Amount => amount(limits::MAX_AMOUNT).ok_or_else(|| bad("a positive whole number of tokens"))?.into(),
        Member::Limit => amount(100).ok_or_else(|| bad("1 to 100"))?.into(),
        Member::Sha256 => {
            let h = string().ok_or_else(|| bad("a SHA-256 in hex"))?.to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad("a SHA-256 in hex (64 digits)"));
            }
            h.into()
        }
        Member::Text => v.as_str().filter(|s| !s.trim().is_empty()).ok_or_else(|| bad("some text"))?.into(),
        Member::Time => {
            let t = string().ok_or_else(|| bad("an RFC 3339 time"))?;
            Timestamp::parse(t).map_err(about(&format!("{op}: `{name}`")))?.to_rfc3339().into()
        }
        Member::Scope => {
            let o = v.as_object().ok_or_else(|| bad("an object {concepts?: [text, …]}"))?;
            if let Some(k) = o.keys().find(|k| *k != "concepts") {
                return Err(Error::malformed(format!("{op}: a mandate's scope names only `concepts`, not `{k}`")));
            }
            if let Some(c) = o.get("concepts") {
                let list = c.as_array().ok_or_else(|| bad("an object {concepts: [text, …]}"))?;
                if !list.iter().all(|c| c.as_str().is_some_and(|s| !s.trim().is_empty())) {
                    return Err(bad("an object {concepts: [text, …]}"));
                }
            }
            v.clone()
        }
        Member::Quote => {
            let o = v.as_object().ok_or_else(|| bad("a signed quote (an object)"))?;
            Quote::from_object(o.clone()).map_err(about(&format!("{op}: the quote")))?;
            v.clone()
        }
    })
}

/// The body of an operation, `{op, …}`: a known op, its required members present, no member it
/// does not take, `null` taken as absent.
fn op_body(args: &Object) -> Result<Object, Error> {
    let op = field::str(args, "op")?;
    let names = || OPS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let (op, members) = OPS
        .iter()
        .find(|(name, _)| *name == op)
        .ok_or_else(|| Error::malformed(format!("no operation {op:?}; the Libro's are {}", names())))?;
    if let Some(k) = args.keys().find(|k| *k != "op" && !members.iter().any(|(m, _, _)| m == k)) {
        return Err(Error::malformed(format!("{op} takes no `{k}`")));
    }
    let mut body = obj([("op", (*op).into())]);
    for (name, kind, required) in members.iter() {
        match args.get(*name) {
            None | Some(Value::Null) if *required => {
                return Err(Error::malformed(format!("{op} needs `{name}`")));
            }
            None | Some(Value::Null) => {}
            Some(v) => {
                body.insert((*name).to_owned(), member(op, name, *kind, v)?);
            }
        }
    }
    Ok(body)
}

/// An `accept` is the buyer's, at the Libro its quote names, before the quote expires (its
/// seller's signature is the buyer's to check against the seller's card, as `nyx5 accept` does).
fn check_accept(body: &Object, from: &Address, house: &str, now: Timestamp) -> Result<(), Error> {
    let Some(Value::Object(q)) = body.get("quote") else { return Ok(()) };
    let q = Quote::from_object(q.clone())?;
    if q.buyer != *from {
        return Err(Error::forbidden(format!("this quote is for {}, not for {from}", q.buyer)));
    }
    if q.house != house {
        return Err(Error::malformed(format!("the quote is to be accepted at the Libro of {}, not {house}", q.house)));
    }
    if q.expires.is_some_and(|e| now >= e) {
        return Err(Error::new(
            ErrorKind::Expired,
            format!("quote {} has expired; ask the seller for a new one", q.id),
        ));
    }
    Ok(())
}

/// `libro_op`: see the crate's documentation.
pub(crate) fn libro_op(keys: &str, from: &str, house: &str, op_json: &str, now: Timestamp) -> Result<Value, Error> {
    let keys = Keys::parse(keys)?;
    let from = address(from, "from")?;
    let house = domain_name(house)?;
    let body = op_body(&object(op_json, "operation")?)?;
    check_accept(&body, &from, &house, now)?;
    let libro = Address::new(LIBRO_LOCAL, &house)?;
    let mut rng = OsRandom::default();
    let id = new_id(&mut rng)?;
    let mut draft = Draft::new(id, from, vec![libro], now, Content::new(OP_MEDIA, Value::Object(body)));
    draft.kind = Kind::Task;
    signed(draft.build().map_err(about("the envelope"))?, &keys)
}
