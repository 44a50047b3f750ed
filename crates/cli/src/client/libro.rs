//! `nyx5 quote`, `accept` and the operations on the Libro — `deliver`, `release`, `refund`,
//! `bond`, `forfeit`, `mandate`, `charge`, `revoke`, `statement` (spec §15–§20, docs/SPEC.md §16).
//!
//! A quote is a document the seller signs; it travels to its buyer sealed, as any envelope
//! `nyx5 send` makes (saved before it leaves). An operation is an envelope to `libro@<house>`,
//! `type: task`, `media: application/nyx5.libro+json`, in clear, whose body is `{op, …}` exactly
//! as docs/SPEC.md §16 pins it; it leaves through the agent's own house like any send. Its answer
//! comes by mail: a receipt from `libro@<house>` in reply to the operation, or a bounce from a
//! postmaster. `--wait` reads the mailbox (verified, as `nyx5 inbox` does) until one of them
//! arrives; nothing is acknowledged.

use std::time::{Duration, Instant};

use nyx5_proto::address::{check_domain, check_id};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::quote::{self, ContractKind, Quote, QuoteDraft, Referrer};
use nyx5_proto::receipt::Receipt;
use nyx5_proto::{Address, Envelope, Timestamp, limits, seal};

use super::Ctx;
use super::http::new_id;
use super::output::{pretty, safe, show, text};
use super::profile::AgentEntry;
use super::send::{self, SendRequest};
use super::when;
use crate::error::{EXIT_NETWORK, Failure};
use crate::sys;

/// The media type of an operation (docs/SPEC.md §16).
pub(crate) const OP_MEDIA: &str = nyx5_proto::ops::MEDIA;
/// The extension a vouch travels in (docs/SPEC.md §19).
pub(crate) const AVAL_EXT: &str = nyx5_rules::policy::EXT_AVAL;
/// The local part of a house's Libro.
pub(crate) const LIBRO_LOCAL: &str = nyx5_client::libro::LIBRO;
/// How long `--wait` waits when given without a number of seconds.
pub(crate) const DEFAULT_WAIT_S: u64 = 30;
/// The longest `--wait`: an hour.
pub(crate) const MAX_WAIT_S: u64 = 3600;
/// Between two reads of the mailbox while waiting.
const POLL: Duration = Duration::from_millis(400);
/// How deep `accept` looks for a quote inside what it was given (item → envelope → content).
const MAX_NESTING: usize = 4;

/// The body of operation `op` from `args` (its members, as docs/SPEC.md §16 names them): each
/// checked and normalised by the one table clients share (`nyx5_proto::ops`); times may also be
/// relative (`+30d`).
pub(crate) fn op_body(op: &str, args: &Object, now: Timestamp) -> Result<Object, Failure> {
    nyx5_proto::ops::body(op, args, &|t| when::parse(t, now).map_err(|e| e.to_string()))
        .map_err(|e| Failure::usage(e.reason.to_string()).named(e.name()))
}

/// `urn:nyx5:ext:aval` from `VOUCHER:BOND` (`nyx5 send --aval`).
pub(crate) fn aval(text: &str) -> Result<Object, Failure> {
    let (voucher, bond) = text
        .split_once(':')
        .ok_or_else(|| Failure::usage("--aval is VOUCHER:BOND, the voucher's address and its bond contract's id"))?;
    aval_of(voucher, bond)
}

/// The extensions of an envelope that enters on a vouch: `{voucher, bond}`.
pub(crate) fn aval_of(voucher: &str, bond: &str) -> Result<Object, Failure> {
    let voucher = Address::parse_lenient(voucher)
        .map_err(|e| Failure::usage(format!("aval voucher: {}", e.reason)).named(e.name()))?;
    let bond = bond.trim();
    check_id(bond).map_err(|e| Failure::usage(format!("aval bond: {}", e.reason)).named(e.name()))?;
    let v = obj([("voucher", voucher.as_str().into()), ("bond", bond.into())]);
    Ok(obj([(AVAL_EXT, Value::Object(v))]))
}

/// A house named by its domain, lower-cased and checked.
pub(crate) fn house_domain(text: &str) -> Result<String, Failure> {
    let d = text.trim().trim_end_matches('.').to_ascii_lowercase();
    check_domain(&d).map_err(|why| {
        Failure::usage(format!("--house {text:?}: {why} (name the house by its domain, such as example.org)"))
    })?;
    Ok(d)
}

/// `--wait` as given: `None` without it, the default without a number.
pub(crate) fn wait_for(seconds: Option<u64>) -> Result<Option<Duration>, Failure> {
    match seconds {
        None => Ok(None),
        Some(s) if s > MAX_WAIT_S => Err(Failure::usage(format!("--wait: at most {MAX_WAIT_S} seconds"))),
        Some(s) => Ok(Some(Duration::from_secs(s))),
    }
}

/// Sends operation `body` to `libro@<house>` (the agent's own house by default) and, with
/// `wait`, waits for its receipt.
pub(crate) fn operate(ctx: &Ctx, house: Option<&str>, body: Object, wait: Option<Duration>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let house = match house {
        Some(h) => house_domain(h)?,
        None => me.address.domain().to_owned(),
    };
    let op = field::str(&body, "op").unwrap_or("").to_owned();
    let libro = format!("{LIBRO_LOCAL}@{house}");
    let req = SendRequest {
        to: vec![libro.clone()],
        body: Some(Value::Object(body)),
        media: Some(OP_MEDIA.into()),
        kind: Some("task".into()),
        plain: true,
        libro_op: true,
        ..SendRequest::default()
    };
    let (sent, env) = send::send_envelope(ctx, &req, false).map_err(|f| {
        if f.status() == Some(404) && f.one_line().contains(&libro) {
            f.hint(format!("{house} has no Libro (no card for {libro}), or the house name is wrong"))
        } else {
            f
        }
    })?;
    let sent = sent.as_object().cloned().unwrap_or_default();
    let id = text(&sent, "id").to_owned();
    let mut out = obj([
        ("op", op.as_str().into()),
        ("house", house.as_str().into()),
        ("to", libro.as_str().into()),
        ("id", id.as_str().into()),
        ("sha256", sent.get("sha256").cloned().unwrap_or(Value::Null)),
        ("status", sent.get("status").cloned().unwrap_or(Value::Null)),
        ("resent", sent.get("resent").cloned().unwrap_or(Value::Bool(false))),
        // The signed operation: one of the three signatures of a receipt's proof (`nyx5 verify`).
        ("envelope", env.map_or(Value::Null, |e| e.to_value())),
    ]);
    match wait {
        None => {
            out.insert(
                "note".into(),
                format!(
                    "the receipt will arrive in your mailbox from {libro}, in reply to {id} (nyx5 inbox); a \
                     refusal comes as a bounce from your house's postmaster"
                )
                .into(),
            );
        }
        Some(wait) => {
            let got = wait_receipt(ctx, &me, &house, &id, text(&sent, "sha256"), wait)?;
            for (k, v) in got {
                out.insert(k, v);
            }
        }
    }
    Ok(Value::Object(out))
}

/// What the mailbox said of an operation.
enum Answer {
    Receipt(Object),
    /// `name`: the refusal's name when the notice gives one (`error`), else `bounced`.
    Bounce {
        code: u16,
        name: String,
        reason: String,
    },
}

/// Reads the mailbox until the receipt of operation `id` arrives from `libro@<house>` (checked:
/// a verified envelope carrying the house's signed receipt of this very envelope), or a verified
/// bounce of it, or `wait` passes (exit 3).
fn wait_receipt(
    ctx: &Ctx,
    me: &AgentEntry,
    house: &str,
    id: &str,
    sha256: &str,
    wait: Duration,
) -> Result<Object, Failure> {
    let deadline = Instant::now() + wait;
    let mut after: Option<i64> = None;
    let mut last_trouble = None;
    loop {
        // The house holds an empty page open until mail arrives (at most the time left): the
        // receipt shows the moment it is written.
        let left = deadline.saturating_duration_since(Instant::now()).as_secs();
        let hold = i64::try_from(left).unwrap_or(0).min(nyx5_client::inbox::FOLLOW_WAIT_S);
        let asked = Instant::now();
        match super::mailbox::page(ctx, me, None, after, (hold > 0).then_some(hold)) {
            Ok(v) => {
                let page = v.as_object().cloned().unwrap_or_default();
                let list = page.get("envelopes").and_then(Value::as_array).unwrap_or_default();
                for m in list.iter().filter_map(Value::as_object) {
                    if let Some(seq) = m.get("seq").and_then(Value::as_safe_integer) {
                        after = Some(after.map_or(seq, |a| a.max(seq)));
                    }
                    match answer_in(ctx, me, house, id, sha256, m)? {
                        Some(Answer::Receipt(o)) => return Ok(o),
                        Some(Answer::Bounce { code, name, reason }) => {
                            return Err(Failure::http(
                                code,
                                &name,
                                format!("the Libro of {house} refused {id}: {reason}"),
                            )
                            .hint(super::http::next_step(code)));
                        }
                        None => {}
                    }
                }
                // A full page: more may be waiting now (but never past the deadline).
                if page.get("next").is_some_and(|n| *n != Value::Null) && Instant::now() < deadline {
                    continue;
                }
            }
            Err(f) if f.code() == EXIT_NETWORK => last_trouble = Some(f.one_line()),
            Err(f) => return Err(f),
        }
        if Instant::now() >= deadline {
            let trouble = last_trouble.map(|t| format!(" (last read failed: {t})")).unwrap_or_default();
            return Err(Failure::network(format!(
                "no receipt for {id} from {LIBRO_LOCAL}@{house} within {} s{trouble}",
                wait.as_secs()
            ))
            .hint(format!(
                "the operation was sent; its receipt (or a bounce) will arrive in your mailbox in reply to {id}: \
                 nyx5 inbox"
            )));
        }
        // A house that answered at once (nothing held the page open) is asked again after a pause.
        if asked.elapsed() < POLL {
            std::thread::sleep(
                POLL.min(deadline.saturating_duration_since(Instant::now())).max(Duration::from_millis(10)),
            );
        }
    }
}

/// Whether mailbox item `m` (as `nyx5 inbox` shows it) answers operation `id`.
fn answer_in(
    ctx: &Ctx,
    me: &AgentEntry,
    house: &str,
    id: &str,
    sha256: &str,
    m: &Object,
) -> Result<Option<Answer>, Failure> {
    let from = text(m, "from");
    let body = m.get("content").and_then(Value::as_object).and_then(|c| c.get("body")).and_then(Value::as_object);
    let libro = format!("{LIBRO_LOCAL}@{house}");
    if from == libro && text(m, "in_reply_to") == id {
        match text(m, "trust") {
            "verified" => {}
            // Its house could not be reached to check it: wait, and read it again.
            "unchecked" => return Ok(None),
            _ => {
                return Err(Failure::rejected(format!(
                    "an answer to {id} claims to come from {libro} but does not verify: {}",
                    safe(text(m, "trust_reason"))
                )));
            }
        }
        let body = body.ok_or_else(|| Failure::rejected(format!("the answer of {libro} to {id} holds no receipt")))?;
        let r = checked_receipt(ctx, me, house, body)?;
        if !nyx5_client::libro::is_receipt_of(&r, id, sha256, &me.address) {
            return Err(Failure::rejected(format!(
                "the receipt {libro} sent in reply to {id} is for another operation ({} by {})",
                safe(&r.of),
                r.from
            )));
        }
        return Ok(Some(Answer::Receipt(obj([
            ("receipt", r.to_value()),
            ("receipt_envelope", m.get("id").cloned().unwrap_or(Value::Null)),
            ("receipt_verified", Value::Bool(true)),
            // What became of the movement: only `done` means it happened (a verified `pending`
            // receipt proves a hold, not a payment).
            ("receipt_status", r.status.as_str().into()),
        ]))));
    }
    // A bounce: a verified notice of this very envelope (its SHA-256) from the agent's own
    // house's postmaster, the only one that bounces what the agent sent (§16). Another house's
    // postmaster, or an unverified notice, is not believed: a Libro that did the operation
    // could otherwise answer "refused" and be paid twice.
    if let Some(b) = nyx5_client::inbox::own_bounce(&me.address, m)
        && text(b, "of") == id
        && (sha256.is_empty() || text(b, "sha256") == sha256)
    {
        let code = b.get("code").and_then(Value::as_safe_integer).and_then(|c| u16::try_from(c).ok()).unwrap_or(400);
        // A bounce notice says a code and a reason (spec §7); its name is the code's class, unless
        // a notice ever carries one that may be believed.
        let name = nyx5_client::libro::bounce_name(code, text(b, "error"));
        return Ok(Some(Answer::Bounce { code, name: safe(name), reason: safe(text(b, "reason")) }));
    }
    Ok(None)
}

/// A receipt from `house`'s Libro, its signature checked against the house's domain keys.
fn checked_receipt(ctx: &Ctx, me: &AgentEntry, house: &str, body: &Object) -> Result<Receipt, Failure> {
    use nyx5_client::libro::{ReceiptFault, read_receipt, verify_receipt};
    let r = read_receipt(body, house).map_err(|f| match f {
        ReceiptFault::Malformed(e) => {
            Failure::rejected(format!("the receipt from {house} is malformed: {}", e.reason)).named(e.name())
        }
        ReceiptFault::OtherHouse(other) => Failure::rejected(format!("a receipt from {house} says it is from {other}")),
    })?;
    let now = sys::now()?;
    let res = ctx.resolver(Some(me), now)?;
    let d = res.domain(house)?;
    verify_receipt(r, &d.card, now).map_err(|e| {
        Failure::rejected(format!("the receipt from {house} does not verify: {}", e.reason)).named(e.name())
    })
}

pub(crate) fn operate_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let Some(r) = o.get("receipt").and_then(Value::as_object) else {
        let again =
            if o.get("resent") == Some(&Value::Bool(true)) { " (saved by an earlier attempt, sent again)" } else { "" };
        return format!(
            "sent {} to {} as {}{again}\n  its receipt will arrive in your mailbox from {}, in reply to {}: nyx5 inbox \
             (or add --wait next time)\n",
            text(&o, "op"),
            text(&o, "to"),
            text(&o, "id"),
            text(&o, "to"),
            text(&o, "id")
        );
    };
    // The receipt says what became of the movement: only `done` means it happened.
    let status = match text(r, "status") {
        "pending" => "waits for approval (only a hold moved)",
        "declined" => "was declined (nothing moved)",
        _ => "done",
    };
    let mut s = format!(
        "{} {status} at {}: receipt {} verified\n",
        text(&o, "op"),
        text(&o, "house"),
        show(&o, "receipt_envelope")
    );
    s.push_str(&receipt_summary(r));
    s.push_str(&pretty(&Value::Object(r.clone())));
    s
}

/// One contract on one line: `id kind state: N tokens, concept`.
pub(crate) fn contract_line(c: &Object) -> String {
    format!(
        "{} {} {}: {} tokens, {}",
        safe(text(c, "id")),
        safe(text(c, "kind")),
        safe(text(c, "state")),
        show(c, "amount"),
        safe(text(c, "concept"))
    )
}

/// One mandate on one line: `id grantor → grantee: spent of cap spent, state`.
pub(crate) fn mandate_line(m: &Object) -> String {
    format!(
        "{} {} → {}: {} of {} spent, {}",
        safe(text(m, "id")),
        safe(text(m, "grantor")),
        safe(text(m, "grantee")),
        show(m, "spent"),
        show(m, "cap"),
        safe(text(m, "state"))
    )
}

/// The lines that say what a receipt records.
pub(crate) fn receipt_summary(r: &Object) -> String {
    let mut s = String::new();
    if let Some(c) = r.get("contract").and_then(Value::as_object) {
        s.push_str(&format!("  contract {}\n", contract_line(c)));
    }
    if let Some(m) = r.get("mandate").and_then(Value::as_object) {
        s.push_str(&format!("  mandate {}\n", mandate_line(m)));
    }
    if let Some(a) = r.get("asiento").and_then(Value::as_object) {
        s.push_str(&format!("  entry {} ({}):\n", show(a, "n"), safe(text(a, "concept"))));
        s.push_str(&lines(a));
    }
    if let Some(b) = r.get("balance").and_then(Value::as_object) {
        s.push_str(&format!("  balance of {}: {} tokens\n", safe(text(b, "account")), show(b, "balance")));
    }
    if let Some(list) = r.get("statement").and_then(Value::as_array) {
        s.push_str(&format!("  statement: {} entries, newest first\n", list.len()));
        for e in list.iter().filter_map(Value::as_object) {
            s.push_str(&format!("  entry {} at {} ({}):\n", show(e, "n"), show(e, "at"), safe(text(e, "concept"))));
            s.push_str(&lines(e));
        }
    }
    s
}

/// An entry's lines, one per account.
pub(crate) fn lines(entry: &Object) -> String {
    let list = entry.get("lines").and_then(Value::as_array).unwrap_or_default();
    list.iter()
        .filter_map(Value::as_object)
        .map(|l| {
            let delta = l.get("delta").and_then(Value::as_safe_integer).unwrap_or(0);
            format!("    {delta:+} {}\n", safe(text(l, "account")))
        })
        .collect()
}

/// What `nyx5 quote` offers.
#[derive(Debug, Clone, Default)]
pub(crate) struct QuoteRequest {
    pub(crate) buyer: String,
    pub(crate) price: i64,
    pub(crate) concept: String,
    pub(crate) contract: Option<String>,
    pub(crate) terms: Option<Object>,
    pub(crate) arbiter: Option<String>,
    /// As typed (RFC 3339 or `+7d`).
    pub(crate) expires: Option<String>,
    pub(crate) referrer: Option<(String, i64)>,
    /// The Libro that will hold the deal [default: the seller's own house].
    pub(crate) house: Option<String>,
    /// Send it in clear: for a buyer that holds no encryption key and must read it, as the
    /// house's `tareas@` (docs/SPEC.md §23).
    pub(crate) plain: bool,
}

impl QuoteRequest {
    /// What makes this offer what it is (not its id or time): the key a repeated `nyx5 quote`
    /// finds its saved envelope by.
    fn key(&self, house: &str) -> Value {
        let opt = |v: &Option<String>| v.as_deref().map_or(Value::Null, Value::from);
        Value::Object(obj([
            ("quote", "cotizacion".into()),
            ("buyer", self.buyer.trim().to_ascii_lowercase().into()),
            ("price", self.price.into()),
            ("concept", self.concept.as_str().into()),
            ("contract", opt(&self.contract)),
            ("terms", self.terms.clone().map_or(Value::Null, Value::Object)),
            ("arbiter", opt(&self.arbiter)),
            ("expires", opt(&self.expires)),
            (
                "referrer",
                self.referrer.as_ref().map_or(Value::Null, |(a, s)| {
                    Value::Object(obj([("address", a.as_str().into()), ("share", (*s).into())]))
                }),
            ),
            ("house", house.into()),
        ]))
    }

    /// The signed quote: a new id, issued `now`.
    fn sign(&self, me: &AgentEntry, house: &str, now: Timestamp) -> Result<Quote, Failure> {
        let buyer = Address::parse_lenient(&self.buyer)
            .map_err(|e| Failure::usage(format!("the buyer: {}", e.reason)).named(e.name()))?;
        let contract = ContractKind::parse(self.contract.as_deref().unwrap_or("spot"))
            .map_err(|_| Failure::usage("--contract is spot, escrow or metered"))?;
        if !(1..=limits::MAX_AMOUNT).contains(&self.price) {
            return Err(Failure::usage("--price must be a positive whole number of tokens"));
        }
        if self.concept.trim().is_empty() {
            return Err(Failure::usage("--concept: say what is sold"));
        }
        let arbiter = self
            .arbiter
            .as_deref()
            .map(|a| {
                Address::parse_lenient(a)
                    .map_err(|e| Failure::usage(format!("--arbiter: {}", e.reason)).named(e.name()))
            })
            .transpose()?;
        let referrer = self
            .referrer
            .as_ref()
            .map(|(a, share)| -> Result<Referrer, Failure> {
                let address = Address::parse_lenient(a)
                    .map_err(|e| Failure::usage(format!("--referrer: {}", e.reason)).named(e.name()))?;
                if !(1..=limits::BPS_WHOLE).contains(share) {
                    return Err(Failure::usage("--share is 1 to 10000 basis points of the seller's part"));
                }
                Ok(Referrer { address, share_bps: *share })
            })
            .transpose()?;
        let expires = self
            .expires
            .as_deref()
            .map(|t| when::parse(t, now).map_err(|e| Failure::usage(format!("--expires: {e}"))))
            .transpose()?;
        if expires.is_some_and(|e| e <= now) {
            return Err(Failure::usage("--expires is not in the future"));
        }
        let draft = QuoteDraft {
            id: new_id()?,
            house: house.to_owned(),
            seller: me.address.clone(),
            buyer,
            contract,
            price: self.price,
            currency: "tok".into(),
            concept: self.concept.clone(),
            terms: self.terms.clone(),
            arbiter,
            referrer,
            issued: now,
            expires,
            extra: Object::new(),
        };
        draft.sign(&me.keys.sig).map_err(|e| Failure::usage(format!("the quote: {}", e.reason)).named(e.name()))
    }
}

/// `nyx5 quote BUYER …`: signs a quote and sends it to its buyer, sealed. A repeated command
/// after a failure sends the quote an earlier attempt saved, never a second one.
pub(crate) fn quote(ctx: &Ctx, req: &QuoteRequest) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let house = match &req.house {
        Some(h) => house_domain(h)?,
        None => me.address.domain().to_owned(),
    };
    let mut send_req = SendRequest {
        to: vec![req.buyer.clone()],
        media: Some(quote::MEDIA.into()),
        kind: Some("message".into()),
        request_key: Some(req.key(&house)),
        auto_stamp_max: send::AUTO_STAMP_MAX,
        plain: req.plain,
        ..SendRequest::default()
    };
    let saved =
        send::saved_body(&me, &send_req).and_then(|b| b.as_object().cloned()).and_then(|o| Quote::from_object(o).ok());
    let q = match saved {
        Some(q) => q,
        None => req.sign(&me, &house, sys::now()?)?,
    };
    send_req.body = Some(q.to_value());
    let sent = send::send(ctx, &send_req, false)?;
    let sent = sent.as_object().cloned().unwrap_or_default();
    Ok(Value::Object(obj([
        ("quote_id", q.id.as_str().into()),
        ("id", sent.get("id").cloned().unwrap_or(Value::Null)),
        ("status", sent.get("status").cloned().unwrap_or(Value::Null)),
        ("resent", sent.get("resent").cloned().unwrap_or(Value::Bool(false))),
        ("sealed", sent.get("sealed").cloned().unwrap_or(Value::Null)),
        ("buyer", q.buyer.as_str().into()),
        ("house", q.house.as_str().into()),
        ("quote_sha256", q.sha256_hex().into()),
        ("quote", q.to_value()),
    ])))
}

pub(crate) fn quote_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let q = o.get("quote").and_then(Value::as_object).cloned().unwrap_or_default();
    format!(
        "quote {} sent to {} ({}) as envelope {}: {} {} tokens ({}), for {}\n  the buyer accepts it with: nyx5 accept \
         <the quote, or the envelope from its inbox>\n{}",
        text(&o, "quote_id"),
        text(&o, "buyer"),
        if o.get("sealed") == Some(&Value::Bool(true)) { "sealed" } else { "in clear" },
        text(&o, "id"),
        text(&q, "contract"),
        show(&q, "price"),
        text(&q, "currency"),
        safe(text(&q, "concept")),
        pretty(&Value::Object(q.clone()))
    )
}

/// Finds the quote in what `accept` was given: the quote itself, `nyx5 quote --json`'s answer, a
/// mailbox item as `nyx5 inbox --json` or `nyx5_inbox` shows it, or an envelope (opened with
/// the agent's keys when sealed) whose content has the quote's media type.
pub(crate) fn find_quote(me: &AgentEntry, doc: &Value) -> Result<Object, Failure> {
    let (quote, carrier) = find_in(me, doc, 0, None).ok_or_else(|| {
        Failure::usage(
            "no quote found: give the quote (`tipo: cotizacion`), or the envelope or mailbox item that carries it \
             (media application/nyx5.cotizacion+json)",
        )
    })?;
    // A quote carried by someone's envelope is that sender's offer, or nobody's: one signed by
    // another seller would pay someone the agent did not deal with.
    let seller = quote.get("seller").and_then(Value::as_str).unwrap_or("");
    if let Some(from) = carrier
        && !from.eq_ignore_ascii_case(seller)
    {
        return Err(Failure::rejected(format!(
            "the quote in the envelope from {} is signed for seller {}: not that sender's offer",
            safe(&from),
            safe(seller)
        )));
    }
    Ok(quote)
}

/// The quote in `doc`, and the sender of the innermost envelope or item that carried it.
fn find_in(me: &AgentEntry, doc: &Value, depth: usize, carrier: Option<String>) -> Option<(Object, Option<String>)> {
    let o = doc.as_object()?;
    if depth > MAX_NESTING {
        return None;
    }
    if o.get("tipo").and_then(Value::as_str) == Some(quote::TIPO) {
        return Some((o.clone(), carrier));
    }
    let carrier = o.get("from").and_then(Value::as_str).map(str::to_owned).or(carrier);
    // A content `{media, body}`, or an item whose content is shown under those names.
    if o.get("media").and_then(Value::as_str).is_some_and(is_quote_media)
        && let Some(b) = o.get("body")
    {
        return find_in(me, b, depth + 1, carrier);
    }
    for name in ["quote", "content", "untrusted_content", "envelope"] {
        if let Some(found) = o.get(name).and_then(|v| find_in(me, v, depth + 1, carrier.clone())) {
            return Some(found);
        }
    }
    // A sealed envelope: open it as the agent.
    if o.contains_key("encrypted")
        && let Ok(env) = Envelope::from_object(o.clone())
        && let Some(c) = me.enc_secrets().find_map(|s| seal::open(&env, &me.address, s).ok())
        && is_quote_media(&c.media)
    {
        return find_in(me, &c.body, depth + 1, carrier);
    }
    None
}

fn is_quote_media(m: &str) -> bool {
    m.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case(quote::MEDIA))
}

/// `nyx5 accept QUOTE`: checks the quote (made for this agent, signed by its seller, current) and
/// sends `{op: "accept", quote}` to the Libro the quote names.
pub(crate) fn accept(ctx: &Ctx, doc: &Value, wait: Option<Duration>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let raw = find_quote(&me, doc)?;
    let q = Quote::from_object(raw).map_err(|e| Failure::usage(format!("the quote: {}", e.reason)).named(e.name()))?;
    if q.buyer != me.address {
        return Err(Failure::usage(format!(
            "this quote is for {}, not for {}; act as its buyer with --as {}",
            q.buyer, me.address, q.buyer
        )));
    }
    let now = sys::now()?;
    let res = ctx.resolver(Some(&me), now)?;
    let seller = res.agent(&q.seller)?;
    let q = q.verify(&seller, now).map_err(|e| match e.kind {
        nyx5_proto::ErrorKind::Expired => Failure::usage(format!("{}; ask the seller for a new one", e.reason)),
        _ => Failure::rejected(format!("the quote is not signed by its seller {}: {}", seller.address(), e.reason)),
    })?;
    let q = q.into_inner();
    let body = obj([("op", "accept".into()), ("quote", q.to_value())]);
    let mut out = operate(ctx, Some(&q.house), body, wait)?;
    if let Value::Object(o) = &mut out {
        o.insert("quote_id".into(), q.id.as_str().into());
        o.insert("quote_sha256".into(), q.sha256_hex().into());
        o.insert("seller".into(), q.seller.as_str().into());
        o.insert("price".into(), q.price.into());
        o.insert("contract_kind".into(), q.contract.as_str().into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    const NOW: Timestamp = Timestamp(1_800_000_000_000);

    fn args(json: &str) -> Object {
        match Value::parse_str(json).unwrap() {
            Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    fn body(op: &str, json: &str) -> String {
        Value::Object(op_body(op, &args(json), NOW).unwrap()).canonical_string()
    }

    fn refused(op: &str, json: &str) -> String {
        op_body(op, &args(json), NOW).unwrap_err().one_line()
    }

    #[test]
    fn op_bodies_are_exactly_as_pinned() {
        let h = "ab".repeat(32);
        assert_eq!(body("release", r#"{"contract":"c-1"}"#), r#"{"contract":"c-1","op":"release"}"#);
        assert_eq!(
            body("deliver", &format!(r#"{{"contract":"c-1","evidence_sha256":"{}","note":"done"}}"#, h.to_uppercase())),
            format!(r#"{{"contract":"c-1","evidence_sha256":"{h}","note":"done","op":"deliver"}}"#)
        );
        assert_eq!(body("refund", r#"{"contract":"c-1","note":null}"#), r#"{"contract":"c-1","op":"refund"}"#);
        assert_eq!(
            body(
                "bond",
                r#"{"amount":50,"claim":"the site is up","verifier":"Vera@B.test","expires":"+1d","vouchee":"x@c.test"}"#
            ),
            r#"{"amount":50,"claim":"the site is up","expires":"2027-01-16T08:00:00.000Z","op":"bond","verifier":"vera@b.test","vouchee":"x@c.test"}"#
        );
        assert_eq!(
            body("forfeit", r#"{"contract":"b1","reason":"lied"}"#),
            r#"{"contract":"b1","op":"forfeit","reason":"lied"}"#
        );
        assert_eq!(
            body("mandate", r#"{"grantee":"sub@a.test","cap":100,"scope":{"concepts":["api","gpu"]},"parent":"m0"}"#),
            r#"{"cap":100,"grantee":"sub@a.test","op":"mandate","parent":"m0","scope":{"concepts":["api","gpu"]}}"#
        );
        assert_eq!(
            body("charge", r#"{"mandate":"m1","amount":3,"concept":"api call"}"#),
            r#"{"amount":3,"concept":"api call","mandate":"m1","op":"charge"}"#
        );
        assert_eq!(body("revoke", r#"{"mandate":"m1"}"#), r#"{"mandate":"m1","op":"revoke"}"#);
        assert_eq!(body("statement", r#"{"limit":5}"#), r#"{"limit":5,"op":"statement"}"#);
        assert_eq!(body("statement", "{}"), r#"{"op":"statement"}"#);
        assert_eq!(body("balance", r#"{"op":"balance"}"#), r#"{"op":"balance"}"#);
        assert_eq!(body("contract", r#"{"contract":"c-1"}"#), r#"{"contract":"c-1","op":"contract"}"#);
    }

    #[test]
    fn malformed_operations_are_refused_before_anything_is_sent() {
        assert!(refused("teleport", "{}").contains("no operation"), "{}", refused("teleport", "{}"));
        assert!(refused("release", "{}").contains("needs `contract`"));
        assert!(refused("release", r#"{"contract":"c","amount":1}"#).contains("takes no `amount`"));
        assert!(refused("release", r#"{"contract":"a:b"}"#).contains("invalid id"));
        for amount in ["0", "-1", "1.5", "\"5\"", "9007199254740992"] {
            let r = refused("charge", &format!(r#"{{"mandate":"m","amount":{amount},"concept":"x"}}"#));
            assert!(r.contains("positive whole number"), "{amount}: {r}");
        }
        assert!(refused("deliver", r#"{"contract":"c","evidence_sha256":"abc"}"#).contains("64 digits"));
        assert!(refused("bond", r#"{"amount":1,"claim":" ","verifier":"v@b.test"}"#).contains("some text"));
        assert!(refused("bond", r#"{"amount":1,"claim":"x","verifier":"nobody"}"#).contains("verifier"));
        assert!(
            refused("mandate", r#"{"grantee":"g@a.test","cap":1,"scope":{"domains":[]}}"#).contains("only `concepts`")
        );
        assert!(refused("statement", r#"{"limit":101}"#).contains("1 to 100"));
        assert!(
            refused("bond", r#"{"amount":1,"claim":"x","verifier":"v@b.test","expires":"soon"}"#).contains("expires")
        );
        assert!(refused("accept", r#"{"quote":{"tipo":"cotizacion"}}"#).contains("the quote"));
    }

    #[test]
    fn an_aval_is_the_vouch_extension() {
        let x = aval("Voucher@A.test:bond-1").unwrap();
        assert_eq!(
            Value::Object(x).canonical_string(),
            r#"{"urn:nyx5:ext:aval":{"bond":"bond-1","voucher":"voucher@a.test"}}"#
        );
        assert!(aval("voucher@a.test").is_err());
        assert!(aval("voucher@a.test:bad id").is_err());
        assert!(aval("nobody:b1").is_err());
    }

    #[test]
    fn a_quote_is_found_in_what_carries_it() {
        use crate::keyfile::KeyFile;
        use nyx5_proto::envelope::{Content, Draft};
        let mut n = 0u8;
        let mut rng = |b: &mut [u8]| {
            n = n.wrapping_add(1);
            b.fill(n);
        };
        let seller =
            AgentEntry::new(Address::parse("sol@a.test").unwrap(), "http://a".into(), KeyFile::generate(&mut rng));
        let buyer =
            AgentEntry::new(Address::parse("bo@b.test").unwrap(), "http://b".into(), KeyFile::generate(&mut rng));
        let req = QuoteRequest {
            buyer: "BO@b.test".into(),
            price: 40,
            concept: "a deploy check".into(),
            contract: Some("escrow".into()),
            expires: Some("+1d".into()),
            ..QuoteRequest::default()
        };
        let q = req.sign(&seller, "a.test", NOW).unwrap();
        assert_eq!(q.buyer.as_str(), "bo@b.test");
        assert_eq!(q.contract, ContractKind::Escrow);
        assert_eq!(q.currency, "tok");
        assert_eq!(q.expires, Some(NOW.plus_ms(86_400_000)));
        q.clone().verify_with_key(&seller.keys.sig.public(), NOW).unwrap();
        let want = q.object().clone();

        let found = |v: &Value| find_quote(&buyer, v).map(Value::Object).map(|v| v.canonical_string());
        let want_text = Value::Object(want.clone()).canonical_string();
        assert_eq!(found(&q.to_value()).unwrap(), want_text, "the quote itself");
        let answer = Value::Object(obj([("id", "e1".into()), ("quote", q.to_value())]));
        assert_eq!(found(&answer).unwrap(), want_text, "nyx5 quote --json");
        let content = Value::Object(obj([("media", quote::MEDIA.into()), ("body", q.to_value())]));
        let item = Value::Object(obj([("id", "e1".into()), ("content", content.clone())]));
        assert_eq!(found(&item).unwrap(), want_text, "nyx5 inbox --json");
        let mcp = Value::Object(obj([("untrusted_content", content)]));
        assert_eq!(found(&mcp).unwrap(), want_text, "nyx5_inbox");

        // A sealed envelope, opened with the buyer's keys.
        let env = Draft::new(
            "e1".into(),
            seller.address.clone(),
            vec![buyer.address.clone()],
            NOW,
            Content::new(quote::MEDIA, q.to_value()),
        )
        .build()
        .unwrap();
        let sealed = seal::seal(env, &[(buyer.address.clone(), buyer.keys.enc_public())], &mut rng).unwrap();
        let sealed = sealed.sign(&seller.keys.sig).unwrap();
        let wrapped = Value::Object(obj([("seq", 1.into()), ("envelope", sealed.to_value())]));
        assert_eq!(found(&wrapped).unwrap(), want_text, "a raw mailbox item");
        // Not for the seller, who holds no key it was sealed to.
        assert!(find_quote(&seller, &wrapped).is_err());
        let other = Value::Object(obj([("media", "text/plain".into()), ("body", q.to_value())]));
        assert!(found(&other).is_err(), "a body is read as a quote only under the quote's media type");
        assert!(found(&Value::Object(obj([("body", "hello".into())]))).is_err());
        // Carried by someone else, it is nobody's offer: refused, not accepted on the carrier's word.
        let content = Value::Object(obj([("media", quote::MEDIA.into()), ("body", q.to_value())]));
        let from_seller = Value::Object(obj([("from", "sol@a.test".into()), ("content", content.clone())]));
        assert_eq!(found(&from_seller).unwrap(), want_text, "an item from the seller");
        let from_other = Value::Object(obj([("from", "mallory@x.test".into()), ("content", content)]));
        assert!(found(&from_other).unwrap_err().one_line().contains("not that sender's offer"));
    }

    #[test]
    fn quote_requests_are_checked() {
        use crate::keyfile::KeyFile;
        let me = AgentEntry::new(
            Address::parse("sol@a.test").unwrap(),
            "http://a".into(),
            KeyFile::generate(&mut |b: &mut [u8]| b.fill(7)),
        );
        let base = QuoteRequest { buyer: "bo@b.test".into(), price: 1, concept: "x".into(), ..QuoteRequest::default() };
        let fails = |r: QuoteRequest| r.sign(&me, "a.test", NOW).unwrap_err().one_line();
        assert!(fails(QuoteRequest { price: 0, ..base.clone() }).contains("--price"));
        assert!(fails(QuoteRequest { contract: Some("bond".into()), ..base.clone() }).contains("--contract"));
        assert!(
            fails(QuoteRequest { expires: Some("2020-01-01T00:00:00Z".into()), ..base.clone() }).contains("future")
        );
        assert!(fails(QuoteRequest { referrer: Some(("r@c.test".into(), 0)), ..base.clone() }).contains("--share"));
        assert!(fails(QuoteRequest { referrer: Some(("sol@a.test".into(), 10)), ..base.clone() }).contains("seller"));
        let q = QuoteRequest { referrer: Some(("r@c.test".into(), 1500)), ..base.clone() }
            .sign(&me, "a.test", NOW)
            .unwrap();
        assert_eq!(q.referrer.unwrap().share_bps, 1500);
        // The key a repeated command finds its saved envelope by leaves out the id and the time.
        assert_eq!(base.key("a.test"), base.clone().key("a.test"));
        assert_ne!(base.key("a.test"), QuoteRequest { price: 2, ..base.clone() }.key("a.test"));
    }
}
