//! `nyx5 send` and `nyx5 remind` — envelopes out (spec §5, docs/SPEC.md §7b).
//!
//! Every recipient's card is resolved and verified; the content is sealed for every recipient
//! (and the sender) unless `--plain`; proof of work is minted when a recipient's inbox asks for
//! it. The signed envelope is saved in the profile's `pending` map *before* it is sent and
//! removed when the house answers 202 or 200 (or refuses it for good), so a `send` repeated after
//! a crash or a timeout sends the same envelope again — never a second one.
//!
//! The agent's own house queues what it accepts and delivers it when the recipient's house
//! answers, so a recipient's house being down does not stop a send: a card verified earlier and
//! kept beside the profile is sealed to (`Resolver::agent_or_kept`). Only a first contact needs
//! the recipient's house up.

use std::io::{IsTerminal, Write};

use nyx5_client::send as out;
use nyx5_proto::address::check_id;
use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::envelope::{Content, Draft, Kind, Stamp};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Address, Envelope, Timestamp, Verified, limits, seal};

use super::Ctx;
use super::http::new_id;
use super::output::{show, text};
use super::profile::{MAX_PENDING, Pending, Profile};
use super::when;
use crate::error::Failure;
use crate::sys::{self, OsRng};

/// What to send.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendRequest {
    pub(crate) to: Vec<String>,
    /// The body: a string (text) or any JSON. `None` only to resend a saved envelope by `id`.
    pub(crate) body: Option<Value>,
    pub(crate) media: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) thread: Option<String>,
    pub(crate) in_reply_to: Option<String>,
    /// As typed (RFC 3339 or `+10m`); kept as typed in the request fingerprint.
    pub(crate) deliver_after: Option<String>,
    pub(crate) expires: Option<String>,
    pub(crate) receipt: bool,
    pub(crate) plain: bool,
    pub(crate) id: Option<String>,
    pub(crate) extensions: Option<Object>,
    /// Forget the saved envelope `id` instead of sending it.
    pub(crate) discard: bool,
    /// The stamp to pay (`--stamp N`), instead of the price the recipients' cards ask.
    pub(crate) stamp: Option<i64>,
    /// The most a stamp paid without `stamp` may be (the CLI's [`AUTO_STAMP_MAX`]; 0 from
    /// MCP, where a model must name any stamp it pays).
    pub(crate) auto_stamp_max: i64,
    /// An operation for a Libro (the Libro's verbs only): may be addressed to `libro@`.
    pub(crate) libro_op: bool,
    /// What the request is, when the body is made fresh each time (a quote has a new id and
    /// time): fingerprinted instead of the body, so a repeated command finds the saved envelope.
    pub(crate) request_key: Option<Value>,
    /// The envelope this one sends again after a 402 a stale card caused (`client::stale`),
    /// recorded with it in the profile.
    pub(crate) resend_of: Option<String>,
    /// Files to send sealed beside the body (`--attach`), read when the request was made.
    pub(crate) attach: Vec<super::attach::File>,
}

impl SendRequest {
    /// SHA-256 of everything that makes this request what it is (not the id): a repeated
    /// `send` with the same fingerprint finds the envelope an earlier attempt saved.
    pub(crate) fn fingerprint(&self) -> String {
        let opt = |v: &Option<String>| v.as_deref().map_or(Value::Null, Value::from);
        let body = self.request_key.clone().or_else(|| self.body.clone()).unwrap_or(Value::Null);
        let mut doc = obj([
            ("to", Value::Array(self.to.iter().map(|t| t.trim().to_ascii_lowercase().into()).collect())),
            ("body", body),
            ("media", opt(&self.media)),
            ("type", opt(&self.kind)),
            ("thread", opt(&self.thread)),
            ("in_reply_to", opt(&self.in_reply_to)),
            ("deliver_after", opt(&self.deliver_after)),
            ("expires", opt(&self.expires)),
            ("receipt", Value::Bool(self.receipt)),
            ("plain", Value::Bool(self.plain)),
            ("extensions", self.extensions.clone().map_or(Value::Null, Value::Object)),
        ]);
        // Only when given, so the fingerprints of requests without one stay what they were.
        if let Some(n) = self.stamp {
            doc.insert("stamp".into(), n.into());
        }
        if !self.attach.is_empty() {
            let files = self.attach.iter().map(|f| Value::from(format!("{}:{}", f.name, f.sha256))).collect();
            doc.insert("attach".into(), Value::Array(files));
        }
        hex(&sha256(&Value::Object(doc).canonical()))
    }
}

/// The media type of a body: as given, else text for strings and JSON for the rest.
fn media_of(req: &SendRequest, body: &Value) -> String {
    match (&req.media, body) {
        (Some(m), _) => m.clone(),
        (None, Value::String(_)) => out::TEXT_MEDIA.into(),
        (None, _) => "application/json".into(),
    }
}

/// Reads a body as typed on the command line: JSON when `media` is JSON, else UTF-8 text.
pub(crate) fn body_from_bytes(bytes: &[u8], media: Option<&str>) -> Result<Value, Failure> {
    if bytes.len() > limits::MAX_ENVELOPE_BYTES {
        return Err(Failure::usage(format!("the body is larger than {} bytes", limits::MAX_ENVELOPE_BYTES)));
    }
    if media.is_some_and(out::is_json) {
        return Value::parse(bytes, limits::MAX_ENVELOPE_BYTES).map_err(|e| {
            Failure::usage(format!("the body is not JSON, as its media type says: {}", e.reason)).named(e.name())
        });
    }
    String::from_utf8(bytes.to_vec())
        .map(Value::String)
        .map_err(|_| Failure::usage("the body is not UTF-8 text; give --media application/json for JSON"))
}

/// Proof of work for the envelope whose work digest is `digest`, with `bits`, showing progress
/// on standard error when asked.
fn mint(digest: &str, bits: u32, progress: bool) -> Result<String, Failure> {
    let mut rng = OsRng::new();
    let start: [u8; 8] = rng.bytes();
    rng.check()?;
    let start = u64::from_le_bytes(start) >> 1;
    let expected = 1u64 << bits.min(62);
    let mut done = 0u64;
    let found = out::mint(digest, bits, start, &mut |tried| {
        done = tried;
        if progress {
            let pct = (tried.saturating_mul(100) / expected).min(999);
            eprint!("\rproof of work: {bits} bits, {tried} hashes (~{pct}% of the expected work)");
            let _ = std::io::stderr().flush();
        }
    });
    let nonce = found.ok_or_else(|| Failure::usage(format!("no proof of work of {bits} bits found; try again")))?;
    if progress {
        eprintln!("\rproof of work: {bits} bits done after {done} hashes            ");
    }
    Ok(nonce)
}

/// A refusal of the client crate's, as a usage failure with its name.
fn usage(e: nyx5_proto::Error) -> Failure {
    Failure::usage(e.reason.to_string()).named(e.name())
}

/// A recipient's verified card, and when it was fetched if it is a kept one used because its
/// house could not be reached.
type Recipient = (Verified<AgentCard>, Option<Timestamp>);

/// The recipients' verified cards, in order, without repeats: as [`Resolver::agent_or_kept`]
/// finds them, or with `fresh` as their houses serve them now (no kept card, in the card file or
/// from an outage).
///
/// [`Resolver::agent_or_kept`]: super::resolve::Resolver::agent_or_kept
fn recipients(
    ctx: &Ctx,
    me: &super::profile::AgentEntry,
    to: &[String],
    now: Timestamp,
    fresh: bool,
) -> Result<Vec<Recipient>, Failure> {
    let mut addrs: Vec<Address> = Vec::new();
    for t in to {
        let a = Address::parse_lenient(t)
            .map_err(|e| Failure::usage(format!("recipient: {}", e.reason)).named(e.name()))?;
        if !addrs.contains(&a) {
            addrs.push(a);
        }
    }
    if addrs.is_empty() || addrs.len() > limits::MAX_RECIPIENTS {
        return Err(Failure::usage(format!("give 1 to {} recipients", limits::MAX_RECIPIENTS)));
    }
    if fresh {
        let res = ctx.fresh_resolver(Some(me), now)?;
        return addrs
            .iter()
            .map(|a| res.agent(a).map(|c| (c, None)).map_err(|f| f.context(&format!("recipient {a}"))))
            .collect();
    }
    let res = ctx.resolver(Some(me), now)?;
    addrs.iter().map(|a| res.agent_or_kept(a).map_err(|f| f.context(&format!("recipient {a}")))).collect()
}

/// A new envelope, and the recipients whose kept cards it was sealed to.
struct Built {
    env: Envelope,
    kept: Vec<(Address, Timestamp)>,
}

/// Builds, seals, proves and signs a new envelope for `req` (against the recipients' cards as
/// their houses serve them now with `fresh`: see [`recipients`]).
fn build(
    ctx: &Ctx,
    me: &super::profile::AgentEntry,
    req: &SendRequest,
    id: String,
    now: Timestamp,
    progress: bool,
    fresh: bool,
) -> Result<Built, Failure> {
    let body = req
        .body
        .clone()
        .ok_or_else(|| Failure::usage("give the body: --body TEXT, --file FILE or - for standard input"))?;
    let resolved = recipients(ctx, me, &req.to, now, fresh)?;
    let kept = resolved.iter().filter_map(|(c, at)| at.map(|at| (c.address().clone(), at))).collect();
    let cards: Vec<Verified<AgentCard>> = resolved.into_iter().map(|(c, _)| c).collect();
    let kind = Kind::parse(req.kind.as_deref().unwrap_or("message"))
        .map_err(|_| Failure::usage("--type: use message, task, result, receipt or intro"))?;
    for r in [&req.thread, &req.in_reply_to].into_iter().flatten() {
        check_id(r).map_err(|e| Failure::usage(e.reason.to_string()).named(e.name()))?;
    }
    let time = |v: &Option<String>, name: &str| {
        v.as_deref().map(|t| when::parse(t, now).map_err(|e| Failure::usage(format!("--{name}: {e}")))).transpose()
    };
    let deliver_after = time(&req.deliver_after, "deliver-after")?;
    let expires = time(&req.expires, "expires")?;
    let lacking: Vec<String> = out::lacking_enc(&cards).into_iter().map(Address::to_string).collect();
    if !req.plain && !lacking.is_empty() {
        return Err(Failure::usage(format!(
            "{} publish no encryption key, so the envelope cannot be sealed for them; send with --plain to \
             send it in clear to everyone",
            lacking.join(", ")
        )));
    }
    let bits = out::pow_bits(&cards);
    let body_media = media_of(req, &body);
    if !req.libro_op {
        not_for_a_libro(cards.iter().map(|c| c.address()), &body_media)?;
    }
    let stamp = stamp_for(&cards, req.stamp)?;
    if let (Some(st), None) = (&stamp, req.stamp) {
        let paying = cards.iter().filter(|c| c.inbox().get("policy").and_then(Value::as_str) == Some("stamp")).count();
        unnamed_stamp(st, paying, req.auto_stamp_max)?;
    }
    let mut content = Content::new(&body_media, body);
    let mut public = Vec::new();
    let mut uploaded: Vec<String> = Vec::new();
    if !req.attach.is_empty() && req.plain {
        return Err(Failure::usage(
            "--attach with --plain would send the files' keys in clear: every house on the way could read them",
        ));
    }
    if !req.attach.is_empty() {
        // Each file sealed under its own key and kept at this agent's house for the recipients
        // (and until the envelope's end); the keys travel in the sealed content alone.
        let readers: Vec<&Address> = cards.iter().map(|c| c.address()).collect();
        // The files live as long as the envelope; one without an end keeps them the house's
        // default, past a deferred delivery by as much (the house allows 30 days at most).
        // Held within what a house takes (an hour to 30 days), with a margin for clocks apart.
        let life = expires
            .or_else(|| deliver_after.map(|d| Timestamp(d.millis().saturating_add(14 * 86_400_000))))
            .map(|t| Timestamp(t.millis().clamp(now.millis() + 2 * 3_600_000, now.millis() + 29 * 86_400_000)));
        let mut described = Vec::new();
        for file in &req.attach {
            match super::attach::upload(ctx, me, file, &readers, life) {
                Ok((d, entry)) => {
                    uploaded.push(d.url.clone());
                    described.push(d.to_value());
                    public.push(entry);
                }
                Err(f) => {
                    super::attach::remove_urls(ctx, me, &uploaded);
                    return Err(f);
                }
            }
        }
        content.extra.insert("attachments".into(), Value::Array(described));
    }
    // Whatever fails from here leaves no file stored for an envelope that never was.
    let finished =
        finish(me, req, &cards, (id, now, kind, deliver_after, expires), content, public, stamp, (bits, progress));
    if finished.is_err() {
        super::attach::remove_urls(ctx, me, &uploaded);
    }
    finished.map(|env| Built { env, kept })
}

/// The rest of [`build`]: the draft, sealed, with its proof of work, signed.
#[allow(clippy::too_many_arguments)]
fn finish(
    me: &super::profile::AgentEntry,
    req: &SendRequest,
    cards: &[Verified<AgentCard>],
    (id, now, kind, deliver_after, expires): (String, Timestamp, Kind, Option<Timestamp>, Option<Timestamp>),
    content: Content,
    public: Vec<Value>,
    stamp: Option<Stamp>,
    (bits, progress): (u32, bool),
) -> Result<Envelope, Failure> {
    let mut draft =
        Draft::new(id.clone(), me.address.clone(), cards.iter().map(|c| c.address().clone()).collect(), now, content);
    if !public.is_empty() {
        draft.extra.insert("attachments".into(), Value::Array(public));
    }
    draft.kind = kind;
    draft.thread = req.thread.clone();
    draft.in_reply_to = req.in_reply_to.clone();
    draft.deliver_after = deliver_after;
    draft.expires = expires;
    if req.receipt {
        draft.extra.insert("receipt".into(), "delivered".into());
    }
    if let Some(x) = &req.extensions {
        draft.extra.insert("extensions".into(), Value::Object(x.clone()));
    }
    if let Some(st) = &stamp {
        let v = obj([("house", st.house.as_str().into()), ("amount", st.amount.into())]);
        draft.extra.insert("stamp".into(), Value::Object(v));
    }
    let mut env = draft.build().map_err(|e| Failure::usage(format!("the envelope: {}", e.reason)).named(e.name()))?;
    if !req.plain {
        let keys = out::seal_keys(cards, &me.address, me.keys.enc_public());
        let mut rng = OsRng::new();
        env = out::sealed(env, &keys, &mut rng).map_err(usage)?;
        rng.check()?;
    }
    // The proof covers the finished envelope (sealed content included), so it comes last.
    let nonce = if bits > 0 { Some(mint(&env.work_digest(), bits, progress)?) } else { None };
    out::signed(env, nonce.as_deref().map(|n| (bits, n)), &me.keys.sig).map_err(usage)
}

/// The most a stamp `nyx5 send` pays without `--stamp`.
pub(crate) const AUTO_STAMP_MAX: i64 = 10;

/// Money moves through the Libro's verbs, which say so, never through a plain send: no
/// envelope to `libro@`, and no operation's media.
fn not_for_a_libro<'a>(to: impl IntoIterator<Item = &'a Address>, media: &str) -> Result<(), Failure> {
    if out::is_libro_op(to, media) {
        return Err(Failure::usage(
            "operations for a Libro are sent by its verbs (nyx5 accept, release, bond, mandate, charge …), not by send",
        ));
    }
    Ok(())
}

/// A stamp the sender did not name is paid only when it is small (at most `max`) and charged
/// once: a stamp is charged for each recipient that asks for one.
pub(crate) fn unnamed_stamp(st: &Stamp, paying: usize, max: i64) -> Result<(), Failure> {
    if st.amount > max || paying > 1 {
        return Err(Failure::rejected(format!(
            "the recipients ask for stamps ({} tok at {}, charged to you for each of the {paying} recipient(s) who \
             ask); say you pay it: --stamp {} (the `stamp` argument from MCP)",
            st.amount, st.house, st.amount
        )));
    }
    Ok(())
}

/// The stamp an envelope to `cards` pays (spec §19): the price their inboxes ask (`inbox:
/// {policy: "stamp", price, house?}`, the house being the recipient's own unless named), or
/// `explicit`. One envelope carries one stamp, so recipients asking for stamps at different
/// houses are refused: send to them one at a time.
pub(crate) fn stamp_for(cards: &[Verified<AgentCard>], explicit: Option<i64>) -> Result<Option<Stamp>, Failure> {
    let mut asked: Option<Stamp> = None;
    for c in cards {
        let Some((house, price)) = nyx5_client::asks::stamp_asked(c.inbox(), c.address()) else { continue };
        match &mut asked {
            None => asked = Some(Stamp { house, amount: price }),
            Some(a) if a.house == house => a.amount = a.amount.max(price),
            Some(a) => {
                return Err(Failure::usage(format!(
                    "{} asks for a stamp paid at {house} and another recipient for one at {}; an envelope \
                     carries one stamp, so send to them separately",
                    c.address(),
                    a.house
                )));
            }
        }
    }
    let Some(amount) = explicit else { return Ok(asked) };
    if !(1..=limits::MAX_AMOUNT).contains(&amount) {
        return Err(Failure::usage("--stamp must be a positive whole number of tokens"));
    }
    match asked {
        Some(a) if amount < a.amount => Err(Failure::usage(format!(
            "--stamp {amount} is less than the {} tokens the recipient's inbox asks (paid at {})",
            a.amount, a.house
        ))),
        Some(a) => Ok(Some(Stamp { house: a.house, amount })),
        None => {
            let mut domains: Vec<&str> = cards.iter().map(|c| c.address().domain()).collect();
            domains.dedup();
            match domains.as_slice() {
                [one] => Ok(Some(Stamp { house: (*one).to_owned(), amount })),
                _ => Err(Failure::usage("--stamp: the recipients are at several houses; say which by sending to one")),
            }
        }
    }
}

/// The body of the envelope an earlier attempt of `req` saved but did not get accepted (opened
/// with the agent's own keys when sealed), so a repeated command can say what it sends again.
pub(crate) fn saved_body(me: &super::profile::AgentEntry, req: &SendRequest) -> Option<Value> {
    let fingerprint = req.fingerprint();
    let (_, p) = me.pending.iter().find(|(_, p)| p.request == fingerprint)?;
    let env = Envelope::from_object(p.envelope.clone()).ok()?;
    if let Some(c) = env.content() {
        return Some(c.body.clone());
    }
    me.enc_secrets().find_map(|s| seal::open(&env, &me.address, s).ok()).map(|c| c.body)
}

/// Whether a refusal with `status` is final: the same envelope would be refused again.
pub(crate) fn final_refusal(status: Option<u16>) -> bool {
    matches!(status, Some(s) if (400..500).contains(&s) && !matches!(s, 401 | 408 | 429))
}

/// `nyx5 send`: see the module documentation.
pub(crate) fn send(ctx: &Ctx, req: &SendRequest, progress: bool) -> Result<Value, Failure> {
    send_envelope(ctx, req, progress).map(|(answer, _)| answer)
}

/// As [`send`], with the envelope sent (`None` when the house had it already and nothing was
/// sent again).
pub(crate) fn send_envelope(
    ctx: &Ctx,
    req: &SendRequest,
    progress: bool,
) -> Result<(Value, Option<Envelope>), Failure> {
    send_with(ctx, req, progress, false)
}

/// As [`send_envelope`], sealing to the recipients' cards as their houses serve them now, never
/// to a kept one (a resend after a 402 that a stale card caused: `client::stale`).
pub(crate) fn send_with_fresh_cards(ctx: &Ctx, req: &SendRequest) -> Result<(Value, Option<Envelope>), Failure> {
    send_with(ctx, req, false, true)
}

fn send_with(ctx: &Ctx, req: &SendRequest, progress: bool, fresh: bool) -> Result<(Value, Option<Envelope>), Failure> {
    let me = ctx.me()?;
    if let Some(id) = &req.id {
        check_id(id).map_err(|e| Failure::usage(format!("--id: {}", e.reason)).named(e.name()))?;
    }
    if req.discard {
        let id = req.id.clone().ok_or_else(|| Failure::usage("--discard needs the --id of a saved envelope"))?;
        let found = Profile::update(&ctx.profile_path, |p| {
            Ok(p.agent_mut(&me.address).and_then(|a| a.pending.remove(&id)).is_some())
        })?;
        if !found {
            return Err(Failure::usage(format!("no saved envelope {id}; `nyx5 outbox` lists the saved ones")));
        }
        return Ok((Value::Object(obj([("id", id.into()), ("discarded", Value::Bool(true))])), None));
    }
    let fingerprint = req.fingerprint();
    if let Some(s) = req.id.as_ref().and_then(|id| me.sent.get(id).map(|s| (id, s))) {
        let (id, s) = s;
        if req.body.is_some() && s.request != fingerprint {
            return Err(Failure::usage(format!(
                "the id {id} was already used for another envelope, which the house accepted; choose another --id"
            )));
        }
        return Ok((
            Value::Object(obj([
                ("id", id.as_str().into()),
                ("status", "exists".into()),
                ("resent", Value::Bool(false)),
                ("sha256", s.sha256.as_str().into()),
                ("accepted", s.at.to_rfc3339().into()),
            ])),
            None,
        ));
    }
    let saved = match &req.id {
        Some(id) => me.pending.get(id).map(|p| (id.clone(), p.clone())),
        None => me.pending.iter().find(|(_, p)| p.request == fingerprint).map(|(id, p)| (id.clone(), p.clone())),
    };
    let (env, resent, kept) = match saved {
        Some((_, p)) => {
            let env = Envelope::from_object(p.envelope)
                .map_err(|e| Failure::usage(format!("the saved envelope is damaged: {}", e.reason)).named(e.name()))?;
            (env, true, Vec::new())
        }
        None => {
            if req.body.is_none() {
                return Err(Failure::usage(match &req.id {
                    Some(id) => format!("no saved envelope {id}; give the body to send a new one under that id"),
                    None => "give the body: --body TEXT, --file FILE or - for standard input".into(),
                }));
            }
            if me.pending.len() >= MAX_PENDING {
                return Err(Failure::usage(format!(
                    "{MAX_PENDING} envelopes are saved but not yet accepted by the house; send them again \
                     (`nyx5 send --id ID`) or drop them (`--discard`) first; `nyx5 outbox` lists them"
                )));
            }
            let now = sys::now()?;
            let id = match &req.id {
                Some(id) => id.clone(),
                None => new_id()?,
            };
            let Built { env, kept } = build(ctx, &me, req, id.clone(), now, progress, fresh)?;
            let body = req.body.as_ref().unwrap_or(&Value::Null);
            let summary = nyx5_client::profile::summary(body, &media_of(req, body));
            let resend_of = req.resend_of.clone();
            let pending =
                Pending { envelope: env.object().clone(), request: fingerprint, saved: now, summary, resend_of };
            let env = Profile::update(&ctx.profile_path, |p| {
                let a = p
                    .agent_mut(&me.address)
                    .ok_or_else(|| Failure::usage(format!("{} left the profile", me.address)))?;
                // Another process may have saved one under this id a moment ago: send that one.
                let kept = a.pending.entry(id.clone()).or_insert(pending);
                Envelope::from_object(kept.envelope.clone())
                    .map_err(|e| Failure::usage(e.reason.to_string()).named(e.name()))
            })?;
            (env, false, kept)
        }
    };
    let kept_env = env.clone();
    deliver(ctx, &me, env, resent, &kept).map(|answer| (answer, Some(kept_env)))
}

/// Hands a saved envelope to the house and clears it from `pending` when the house has it.
/// `kept`: the recipients sealed to with kept cards, reported in the answer.
fn deliver(
    ctx: &Ctx,
    me: &super::profile::AgentEntry,
    env: Envelope,
    resent: bool,
    kept: &[(Address, Timestamp)],
) -> Result<Value, Failure> {
    let id = env.id().to_owned();
    let sha256 = env.sha256_hex();
    let to: Vec<String> = env.to().iter().map(|a| a.as_str().to_owned()).collect();
    let forget = |accepted: bool| {
        Profile::update(&ctx.profile_path, |p| {
            if let Some(a) = p.agent_mut(&me.address) {
                if accepted {
                    a.mark_sent(&id, &sha256, to.clone(), sys::now()?);
                } else {
                    a.pending.remove(&id);
                }
            }
            Ok(())
        })
    };
    let what = format!("sending {id}");
    let mut sent = ctx.call(me, "POST", "/outbound", Some(&env.to_value()), &what);
    // Held for a person (docs/SPEC.md §7c) and sealed: the same envelope again, with the key
    // wrapped for each approver.
    if let Err(f) = &sent
        && f.name() == Some("approver_cannot_read")
        && env.content().is_none()
    {
        let readers = super::drafts::readers_for(ctx, me, &env)?;
        sent = ctx.call(me, "POST", &format!("/outbound?readers={readers}"), Some(&env.to_value()), &what);
    }
    match sent {
        Ok((status, answer)) => {
            forget(true)?;
            super::kept::keep_sent(ctx, me.address.as_str(), own_view(me, &env));
            let mut shown = obj([
                ("id", id.as_str().into()),
                ("sha256", sha256.as_str().into()),
                (
                    "status",
                    match (answer.get("draft"), status) {
                        (Some(_), _) => "held",
                        (None, 200) => "exists",
                        (None, _) => "queued",
                    }
                    .into(),
                ),
                ("resent", Value::Bool(resent)),
                ("to", Value::Array(env.to().iter().map(|a| a.as_str().into()).collect())),
                ("sealed", Value::Bool(env.content().is_none())),
                ("pow_bits", env.pow().map_or(Value::Null, |p| i64::from(p.bits).into())),
                (
                    "stamp",
                    env.stamp().map_or(Value::Null, |st| {
                        Value::Object(obj([("house", st.house.as_str().into()), ("amount", st.amount.into())]))
                    }),
                ),
                ("deliver_after", env.deliver_after().map(|t| t.to_rfc3339()).into()),
                ("jobs", answer.get("jobs").cloned().unwrap_or(Value::Array(vec![]))),
                ("kept_cards", kept_cards(kept)),
            ]);
            if let Some(draft) = answer.get("draft") {
                shown.insert("draft".into(), draft.clone());
            }
            Ok(Value::Object(shown))
        }
        Err(f) if final_refusal(f.status()) => {
            forget(false)?;
            // The files stored for it would count against the quota until they end: gone now.
            super::attach::remove_stored(ctx, me, &env);
            Err(f)
        }
        Err(f) => Err(f.hint(format!(
            "the envelope {id} is saved in the profile; run the same command again (or `nyx5 send --id {id}`) \
             to send it — it will not be sent twice"
        ))),
    }
}

/// What the agent sent, as its mailbox would show it (opened with its own keys: an envelope is
/// sealed to its sender too), to be kept on its side.
fn own_view(me: &super::profile::AgentEntry, env: &Envelope) -> Value {
    let item = obj([("seq", Value::Null), ("envelope", env.to_value())]);
    nyx5_proto::mailbox::view(
        &item,
        &me.address,
        |_, _| ("verified", None),
        |env| nyx5_proto::mailbox::open_with(env, &me.address, me.enc_secrets()),
    )
}

/// `[{address, fetched}]`: the recipients sealed to with a kept card.
fn kept_cards(kept: &[(Address, Timestamp)]) -> Value {
    let list = kept
        .iter()
        .map(|(a, at)| Value::Object(obj([("address", a.as_str().into()), ("fetched", at.to_rfc3339().into())])))
        .collect();
    Value::Array(list)
}

pub(crate) fn send_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    if o.get("discarded") == Some(&Value::Bool(true)) {
        return format!("dropped the saved envelope {}\n", text(&o, "id"));
    }
    if o.contains_key("accepted") {
        return format!(
            "{} was already accepted by the house at {} (nothing sent twice)\n",
            text(&o, "id"),
            text(&o, "accepted")
        );
    }
    let to: Vec<String> = o
        .get("to")
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let sealed = if o.get("sealed") == Some(&Value::Bool(true)) { "sealed" } else { "in clear" };
    let mut s = match text(&o, "status") {
        "exists" => format!("{} was already with the house (nothing sent twice)", text(&o, "id")),
        "held" => {
            let d = o.get("draft").and_then(Value::as_object).cloned().unwrap_or_default();
            let asks: Vec<&str> =
                d.get("asks").and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_str).collect();
            format!(
                "{} waits at the house for approval by {} (until {})",
                text(&o, "id"),
                asks.join(", "),
                show(&d, "expires")
            )
        }
        _ => format!("queued {}", text(&o, "id")),
    };
    s.push_str(&format!(" for {} ({sealed}", to.join(", ")));
    if let Some(bits) = o.get("pow_bits").and_then(Value::as_safe_integer) {
        s.push_str(&format!(", {bits}-bit proof of work"));
    }
    if let Some(st) = o.get("stamp").and_then(Value::as_object) {
        s.push_str(&format!(", a stamp of {} tokens paid at {}", show(st, "amount"), text(st, "house")));
    }
    s.push_str(")\n");
    if o.get("resent") == Some(&Value::Bool(true)) {
        s.push_str("  (this is the envelope an earlier attempt saved, sent again)\n");
    }
    if let Some(of) = o.get("again_of").and_then(Value::as_str) {
        s.push_str(&format!("  (a new envelope with the body of {of}, made for what the recipients' cards ask now)\n"));
    }
    for k in o.get("kept_cards").and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_object) {
        s.push_str(&format!(
            "  sealed for {} with its card kept from {}: its house did not answer now; yours will keep trying\n",
            text(k, "address"),
            text(k, "fetched")
        ));
    }
    for j in o.get("jobs").and_then(Value::as_array).unwrap_or_default() {
        if let Some(j) = j.as_object() {
            s.push_str(&format!("  {}: first attempt {}\n", text(j, "domain"), show(j, "next_attempt")));
        }
    }
    s.push_str("  follow it with: nyx5 outbox\n");
    s
}

/// `nyx5 remind WHEN BODY`: an envelope to yourself, sealed, delivered at `WHEN`.
pub(crate) fn remind(
    ctx: &Ctx,
    when_text: &str,
    body: Value,
    thread: Option<String>,
    progress: bool,
) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let now = sys::now()?;
    let at = when::parse(when_text, now).map_err(|e| Failure::usage(format!("WHEN: {e}")))?;
    if at <= now {
        return Err(Failure::usage(format!("WHEN ({}) is not in the future", at.to_rfc3339())));
    }
    let req = SendRequest {
        to: vec![me.address.to_string()],
        body: Some(body),
        kind: Some("task".into()),
        thread,
        deliver_after: Some(when_text.to_owned()),
        ..SendRequest::default()
    };
    send(ctx, &req, progress)
}

pub(crate) fn remind_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    format!(
        "reminder {} will reach your mailbox at {}{}\n",
        text(&o, "id"),
        show(&o, "deliver_after"),
        if o.get("resent") == Some(&Value::Bool(true)) { " (saved by an earlier attempt, sent again)" } else { "" }
    )
}

/// Whether progress may be drawn on standard error.
pub(crate) fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// The saved envelopes of an agent, for `outbox`.
pub(crate) fn unsent(me: &super::profile::AgentEntry) -> Value {
    let list = me
        .pending
        .iter()
        .map(|(id, p)| {
            let to = field::opt_array(&p.envelope, "to").ok().flatten().map(<[Value]>::to_vec).unwrap_or_default();
            Value::Object(obj([
                ("id", id.as_str().into()),
                ("to", Value::Array(to)),
                ("saved", p.saved.to_rfc3339().into()),
                ("summary", p.summary.as_str().into()),
            ]))
        })
        .collect();
    Value::Array(list)
}

/// The local record of what the house accepted from the agent, newest first: id, recipients,
/// when, and the first line (see `Sent`).
pub(crate) fn accepted(me: &super::profile::AgentEntry) -> Value {
    let mut list: Vec<_> = me.sent.iter().collect();
    list.sort_by(|a, b| b.1.at.cmp(&a.1.at).then_with(|| a.0.cmp(b.0)));
    let list = list
        .into_iter()
        .map(|(id, s)| {
            Value::Object(obj([
                ("id", id.as_str().into()),
                ("to", Value::Array(s.to.iter().map(|t| t.as_str().into()).collect())),
                ("accepted", s.at.to_rfc3339().into()),
                ("summary", s.summary.as_str().into()),
            ]))
        })
        .collect();
    Value::Array(list)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_plain_send_carries_no_libro_operation() {
        let libro = Address::parse("libro@a.test").unwrap();
        let bo = Address::parse("bo@a.test").unwrap();
        assert!(not_for_a_libro([&bo], "text/plain").is_ok());
        assert!(not_for_a_libro([&bo, &libro], "text/plain").is_err());
        assert!(not_for_a_libro([&bo], nyx5_proto::ops::MEDIA).is_err());
    }

    #[test]
    fn only_a_small_single_stamp_is_paid_unnamed() {
        let st = |amount| Stamp { house: "a.test".into(), amount };
        assert!(unnamed_stamp(&st(3), 1, AUTO_STAMP_MAX).is_ok());
        assert!(unnamed_stamp(&st(AUTO_STAMP_MAX + 1), 1, AUTO_STAMP_MAX).is_err());
        assert!(unnamed_stamp(&st(3), 2, AUTO_STAMP_MAX).is_err(), "charged once per recipient");
        assert!(unnamed_stamp(&st(1), 1, 0).is_err(), "from MCP a stamp is always named");
    }
}
