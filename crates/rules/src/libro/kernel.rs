//! The Libro's kernel (spec §14, §16–§18): what an operation does, decided as a pure function.
//!
//! [`decide`] takes the operation, who asks and what the house read ([`Facts`]) and answers a
//! [`Decision`]: the entry's lines (balanced, by construction and by [`check_lines`]), the
//! contract and mandates as they become, and who gets a receipt. No I/O: the caller signs the
//! entry and writes it all in one guarded batch (`libro/mod.rs`), and the schema refuses again
//! what must never be.
//!
//! What it reads and answers is [`super::model`]; what an authority lets through,
//! [`super::authority`], which it calls.

use nyx5_proto::json::obj;
use nyx5_proto::libro::{Line, Primitive, check_lines, escrow_account};
use nyx5_proto::quote::{ContractKind, Quote};
use nyx5_proto::{Address, Error, ErrorKind, Object, Refusal, Timestamp, Value, limits};

use nyx5_proto::authority::EvidenceKind;

use super::authority as rule;
use super::model::{
    Contract, ContractWrite, Ctx, Deadline, Decision, Facts, Kind, Mandate, MandateWrite, Posting, Read, Rules, broken,
    move_all, refuse, reword, settle,
};
use super::op::{Bond, MandateOp, Op};
use super::state::{ContractState, Role};

/// Most active mandates one grantor may hold granted.
pub const MAX_ACTIVE_MANDATES: i64 = 1000;
/// Most holders of mandates under a revoked one that are sent its receipt (distinct grantees,
/// nearest first); the others learn it at their next charge (409).
pub const MAX_CASCADE_NOTICES: i64 = 100;

/// The refusal of a creating operation by a stranger to this Libro (402).
pub fn stranger(who: &Address, rules: &Rules) -> Error {
    refuse(
        Refusal::NoLibroAccount,
        format!("{who} has no account at the Libro of {}; ask its house for a top-up", rules.house),
    )
}

fn push_party(list: &mut Vec<Address>, a: Option<Address>) {
    if let Some(a) = a
        && !list.contains(&a)
    {
        list.push(a);
    }
}

fn event(ctx: &Ctx, op: &str) -> Object {
    obj([
        ("at", ctx.now.to_rfc3339().into()),
        ("op", op.into()),
        ("by", ctx.operator.as_str().into()),
        ("envelope", ctx.envelope.as_str().into()),
    ])
}

fn refs(ctx: &Ctx, contract: Option<&str>) -> Object {
    let mut r = obj([("op", ctx.envelope.as_str().into()), ("op_sha256", ctx.sha256.as_str().into())]);
    if let Some(c) = contract {
        r.insert("contract".into(), c.into());
    }
    r
}

fn meta(primitive: Primitive, mut extra: Object) -> Object {
    extra.insert("primitive".into(), primitive.as_str().into());
    extra
}

fn need(facts: &Facts, account: &str, amount: i64) -> Result<(), Error> {
    let have = facts.balance(account);
    if have < amount {
        return Err(refuse(
            Refusal::InsufficientFunds,
            format!("{account} has {have} tok here and this needs {amount}; top up or pay less"),
        ));
    }
    Ok(())
}

/// The contract `id`, for one of its parties: to anyone else it does not exist (404), so no
/// operation tells a stranger a contract's kind or state.
fn contract_of<'a>(facts: &'a Facts, id: &str, me: &Address) -> Result<&'a Contract, Error> {
    facts
        .contract
        .as_ref()
        .filter(|c| c.id == id && c.has_party(me))
        .ok_or_else(|| refuse(Refusal::UnknownContract, format!("no contract {id} here")))
}

/// The fee a contract settles under: the one in force when it was accepted (so a referrer's
/// share, checked against it then, still fits), else the house's.
fn rules_of(c: &Contract, rules: &Rules) -> Rules {
    let fee_bps = c.record.get("fee_bps").and_then(Value::as_safe_integer).unwrap_or(rules.fee_bps);
    Rules { fee_bps, ..rules.clone() }
}

/// The contract's record after an event, with the entry id it posted (if any).
fn record_event(
    c: &Contract,
    state: ContractState,
    ctx: &Ctx,
    op: &str,
    entry: Option<&str>,
    extra: Object,
) -> Contract {
    let mut e = event(ctx, op);
    if let Some(id) = entry {
        e.insert("asiento".into(), id.into());
    }
    e.extend(extra);
    let mut next = c.moved(state, e);
    next.record.insert("updated".into(), ctx.now.to_rfc3339().into());
    next
}

/// Whether `verifica@` of this house owes contract `c` a check once it is delivered: an escrow
/// naming it arbiter and declaring `terms.verify` (accepted only when the tests were ones this
/// house runs: `libro::verifica::check_terms`).
pub fn verified_here(c: &Contract, rules: &Rules) -> bool {
    c.kind == Kind::Escrow
        && c.get(Role::Arbiter).is_some_and(|a| a.local() == super::VERIFICA && a.domain() == rules.house)
        && c.record.get("terms").and_then(Value::as_object).is_some_and(|t| t.contains_key("verify"))
}

/// The `verdict` an operation carries, checked: only the contract's arbiter gives one, and its
/// `outcome` must be what the operation does (`passed` to release, `failed` to refund).
fn arbiters_verdict<'a>(
    c: &Contract,
    me: &Address,
    verdict: Option<&'a Object>,
    outcome: &str,
) -> Result<Option<&'a Object>, Error> {
    let Some(v) = verdict else { return Ok(None) };
    if !c.is(Role::Arbiter, me) {
        return Err(refuse(Refusal::WrongParty, format!("only the arbiter of {} gives a verdict", c.id)));
    }
    if v.get("outcome").and_then(Value::as_str) != Some(outcome) {
        return Err(refuse(Refusal::BadVerdict, format!("a verdict that does not say {outcome} cannot move {}", c.id)));
    }
    if v.get("contract").and_then(Value::as_str) != Some(c.id.as_str()) {
        return Err(refuse(Refusal::BadVerdict, format!("the verdict is not about {}", c.id)));
    }
    // What the contract keeps says who judged: the arbiter that sent it, in its own words.
    if v.get("tipo").and_then(Value::as_str) != Some("veredicto")
        || v.get("verifier").and_then(Value::as_str) != Some(me.as_str())
    {
        return Err(refuse(Refusal::BadVerdict, "a verdict is a `veredicto` whose `verifier` is its sender"));
    }
    Ok(Some(v))
}

/// The contract after a settling event, with the arbiter's verdict (if any) in the event and in
/// the record, where the reasons stay auditable.
fn with_verdict(
    c: &Contract,
    state: ContractState,
    ctx: &Ctx,
    (op, mut extra): (&str, Object),
    entry_id: &str,
    verdict: Option<&Object>,
) -> Contract {
    if let Some(v) = verdict {
        extra.insert("verdict".into(), Value::Object(v.clone()));
    }
    let mut next = record_event(c, state, ctx, op, Some(entry_id), extra);
    if let Some(v) = verdict {
        next.record.insert("verdict".into(), Value::Object(v.clone()));
    }
    next
}

/// What every family of operation decides over: who asks with which envelope and when, the
/// house's rules, what the house read, and the id the entry will have if one is posted.
#[derive(Clone, Copy)]
struct Given<'a> {
    ctx: &'a Ctx,
    rules: &'a Rules,
    facts: &'a Facts,
    entry_id: &'a str,
}

/// Decides operation `op` by `ctx.operator`. `entry_id` is the id the entry will have, if one is
/// posted. A quote must have been verified (seller's signature, validity) by the caller.
///
/// The dispatch: who may create anything (`admit`), then the operation's own family decides
/// its movement, then every authority over it judges it (`authorize`).
pub fn decide(op: &Op, ctx: &Ctx, rules: &Rules, facts: &Facts, entry_id: &str) -> Result<Decision, Error> {
    admit(op, ctx, rules, facts)?;
    let given = Given { ctx, rules, facts, entry_id };
    let mut d = Decision { parties: vec![ctx.operator.clone()], ..Decision::default() };
    match op {
        Op::Accept { quote } => accept(quote, &given, &mut d)?,
        Op::Deliver { contract, evidence_sha256, evidence_kind, note } => {
            let evidence = (evidence_sha256.as_deref(), *evidence_kind);
            deliver(contract, evidence, note.as_deref(), &given, &mut d)?;
        }
        Op::Release { contract, verdict } => release(contract, verdict.as_ref(), &given, &mut d)?,
        Op::Refund { contract, note, verdict } => refund(contract, note.as_deref(), verdict.as_ref(), &given, &mut d)?,
        Op::Bond(b) => bond(b, &given, &mut d)?,
        Op::Forfeit { contract, reason } => forfeit(contract, reason, &given, &mut d)?,
        Op::Mandate(m) => mandate(m, &given, &mut d)?,
        Op::Charge { mandate, amount, concept } => charge(mandate, *amount, concept, &given, &mut d)?,
        Op::Revoke { mandate } => revoke(mandate, &given, &mut d)?,
        Op::Balance | Op::Statement { .. } | Op::Contract { .. } => read(op, &given, &mut d)?,
        Op::Approve { .. } | Op::Decline { .. } => {
            return Err(broken("approvals are decided by libro::authority::approval"));
        }
    }
    authorize(op, ctx, rules, facts, d)
}

/// Who may operate at all: a stranger to this Libro (a foreign agent no entry ever named) may
/// act on the contracts and mandates that name it, but creates nothing and reads nothing here
/// (what strangers can make the house store and send is bounded by what they paid in); and no
/// grantor passes [`MAX_ACTIVE_MANDATES`].
fn admit(op: &Op, ctx: &Ctx, rules: &Rules, facts: &Facts) -> Result<(), Error> {
    let me = &ctx.operator;
    if op.creates() && !facts.known {
        return Err(stranger(me, rules));
    }
    if matches!(op, Op::Mandate(_)) && facts.active_mandates >= MAX_ACTIVE_MANDATES {
        return Err(refuse(
            Refusal::TooManyMandates,
            format!("{me} has {MAX_ACTIVE_MANDATES} active mandates; revoke one first"),
        ));
    }
    Ok(())
}

/// Every authority over the movement `d` judges it: refused, allowed now, or asked of a human
/// first (a pending approval holding what it would move); an approved movement keeps its
/// approval; and the entry's lines are checked once more.
fn authorize(op: &Op, ctx: &Ctx, rules: &Rules, facts: &Facts, mut d: Decision) -> Result<Decision, Error> {
    let gate = rule::gate(op, ctx, facts)?;
    if ctx.approved.is_some()
        && let Some(ask) = gate.asks.first()
    {
        // Approved for what it asked then; what asks now nobody has approved.
        return Err(refuse(
            Refusal::ApprovalAskedAgain,
            format!("it asks for approval again ({}); decline it, and ask again", ask.reason),
        ));
    }
    let mut d = if gate.asks.is_empty() {
        gate.apply(&mut d);
        d
    } else {
        rule::pending(op, ctx, rules, facts, d, gate.asks)?
    };
    if let Some(a) = &ctx.approved {
        rule::mark_approved(&mut d, a);
    }
    if let Some(p) = &d.posting {
        check_lines(&p.lines)?;
    }
    Ok(d)
}

/// `deliver` (escrow): its seller says the work is done, with the evidence the terms ask for;
/// nothing moves, and `verifica@` owes a check when it arbitrates.
fn deliver(
    contract: &str,
    (evidence_sha256, evidence_kind): (Option<&str>, Option<EvidenceKind>),
    note: Option<&str>,
    given: &Given<'_>,
    d: &mut Decision,
) -> Result<(), Error> {
    let Given { ctx, rules, facts, .. } = *given;
    let me = &ctx.operator;
    let c = contract_of(facts, contract, me)?;
    if c.kind != Kind::Escrow {
        return Err(refuse(
            Refusal::WrongContractKind,
            format!("{contract} is a {} contract: nothing to deliver", c.kind.as_str()),
        ));
    }
    if !c.is(Role::Seller, me) {
        return Err(refuse(Refusal::WrongParty, format!("only the seller delivers {contract}")));
    }
    if c.state != ContractState::Held {
        return Err(refuse(Refusal::WrongContractState, format!("{contract} is {}, not held", c.state)));
    }
    // What the terms ask a delivery to show for itself (docs/SPEC.md §16b).
    let terms = c.record.get("terms").and_then(Value::as_object);
    if let Some(policy) = nyx5_proto::authority::EvidencePolicy::of_terms(terms)? {
        policy
            .admits(evidence_kind, evidence_sha256)
            .map_err(|e| reword(e, ErrorKind::Malformed, |r| format!("{contract} cannot be delivered so: {r}")))?;
    }
    let mut extra = Object::new();
    if let Some(h) = evidence_sha256 {
        extra.insert("evidence_sha256".into(), h.into());
    }
    if let Some(k) = evidence_kind {
        extra.insert("evidence_kind".into(), k.as_str().into());
    }
    if let Some(n) = note {
        extra.insert("note".into(), n.into());
    }
    let mut next = record_event(c, ContractState::Delivered, ctx, "deliver", None, extra);
    if let Some(h) = evidence_sha256 {
        next.record.insert("evidence_sha256".into(), h.into());
    }
    if let Some(k) = evidence_kind {
        next.record.insert("evidence_kind".into(), k.as_str().into());
    }
    if verified_here(c, rules) {
        d.verify = Some(c.id.clone());
    }
    finish_contract(d, next, c);
    Ok(())
}

/// `release`: what a contract holds goes to whom it was held for (an escrow's seller, a bond's
/// bondholder), with an arbiter's verdict if one gave it.
fn release(contract: &str, verdict: Option<&Object>, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let me = &given.ctx.operator;
    let c = contract_of(given.facts, contract, me)?;
    let verdict = arbiters_verdict(c, me, verdict, "passed")?;
    match c.kind {
        Kind::Escrow => release_escrow(c, verdict, given, d),
        Kind::Bond => release_bond(c, verdict, given, d),
        Kind::Spot | Kind::Metered => Err(refuse(
            Refusal::WrongContractKind,
            format!("{contract} is a {} contract: nothing is held", c.kind.as_str()),
        )),
    }
}

/// An escrow released by its buyer or arbiter (from `held` or `delivered`): the seller is paid,
/// less the fee it was accepted under and its referrer's share.
fn release_escrow(c: &Contract, verdict: Option<&Object>, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, rules, facts, entry_id } = *given;
    let (me, contract) = (&ctx.operator, &c.id);
    let escrow = escrow_account(&c.id);
    if !(c.is(Role::Buyer, me) || c.is(Role::Arbiter, me)) {
        return Err(refuse(Refusal::WrongParty, format!("only the buyer or the arbiter releases {contract}")));
    }
    if !matches!(c.state, ContractState::Held | ContractState::Delivered) {
        return Err(refuse(Refusal::WrongContractState, format!("{contract} is {}: nothing to release", c.state)));
    }
    let seller = c.get(Role::Seller).ok_or_else(|| broken("an escrow without seller"))?;
    need(facts, &escrow, c.amount)?;
    let referrer = c.referrer();
    let (lines, m) = settle(&escrow, seller.as_str(), c.amount, &rules_of(c, rules), referrer.as_ref());
    post(d, c, meta(Primitive::Release, m), ctx, lines);
    if let Some(r) = referrer {
        push_party(&mut d.parties, Some(r.address));
    }
    finish_contract(d, with_verdict(c, ContractState::Released, ctx, ("release", Object::new()), entry_id, verdict), c);
    Ok(())
}

/// A bond released by its verifier or arbiter (or its bondholder once it expired): it returns
/// whole to its bondholder.
fn release_bond(c: &Contract, verdict: Option<&Object>, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, facts, entry_id, .. } = *given;
    let (me, contract) = (&ctx.operator, &c.id);
    let escrow = escrow_account(&c.id);
    let expired = c.expires().is_some_and(|e| ctx.now >= e);
    if !(c.is(Role::Verifier, me) || c.is(Role::Arbiter, me) || (c.is(Role::Bondholder, me) && expired)) {
        return Err(refuse(
            Refusal::WrongParty,
            format!("only the verifier or the arbiter releases bond {contract} (its bondholder once it expires)"),
        ));
    }
    if c.state != ContractState::Posted {
        return Err(refuse(Refusal::WrongContractState, format!("bond {contract} is {}", c.state)));
    }
    let holder = c.get(Role::Bondholder).ok_or_else(|| broken("a bond without bondholder"))?;
    need(facts, &escrow, c.amount)?;
    post(d, c, meta(Primitive::Release, Object::new()), ctx, move_all(&escrow, holder.as_str(), c.amount));
    finish_contract(d, with_verdict(c, ContractState::Released, ctx, ("release", Object::new()), entry_id, verdict), c);
    Ok(())
}

/// `refund` (escrow): what it holds returns whole to its buyer, by its seller or arbiter, or by
/// the buyer itself before delivery (or once `verifica@` gave up checking the delivery).
fn refund(
    contract: &str,
    note: Option<&str>,
    verdict: Option<&Object>,
    given: &Given<'_>,
    d: &mut Decision,
) -> Result<(), Error> {
    let Given { ctx, facts, entry_id, .. } = *given;
    let me = &ctx.operator;
    let c = contract_of(facts, contract, me)?;
    let verdict = arbiters_verdict(c, me, verdict, "failed")?;
    if c.kind != Kind::Escrow {
        return Err(refuse(
            Refusal::WrongContractKind,
            format!("{contract} is a {} contract: only an escrow is refunded", c.kind.as_str()),
        ));
    }
    if !matches!(c.state, ContractState::Held | ContractState::Delivered) {
        return Err(refuse(Refusal::WrongContractState, format!("{contract} is {}: nothing to refund", c.state)));
    }
    let buyer_may = c.state == ContractState::Held || facts.unchecked;
    let allowed = c.is(Role::Seller, me) || c.is(Role::Arbiter, me) || (c.is(Role::Buyer, me) && buyer_may);
    if !allowed {
        return Err(refuse(
            Refusal::WrongParty,
            format!(
                "only the seller or the arbiter refunds {contract} (its buyer only before delivery, or once \
                 verifica@ gave up checking it)"
            ),
        ));
    }
    let escrow = escrow_account(&c.id);
    let buyer = c.get(Role::Buyer).ok_or_else(|| broken("an escrow without buyer"))?;
    need(facts, &escrow, c.amount)?;
    post(d, c, meta(Primitive::Refund, Object::new()), ctx, move_all(&escrow, buyer.as_str(), c.amount));
    let extra = note.map(|n| obj([("note", n.into())])).unwrap_or_default();
    finish_contract(d, with_verdict(c, ContractState::Refunded, ctx, ("refund", extra), entry_id, verdict), c);
    Ok(())
}

/// `forfeit` (bond): its verifier or arbiter takes a standing bond for its beneficiary (the
/// house when none is named).
fn forfeit(contract: &str, reason: &str, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, rules, facts, entry_id } = *given;
    let me = &ctx.operator;
    let c = contract_of(facts, contract, me)?;
    if c.kind != Kind::Bond {
        return Err(refuse(Refusal::WrongContractKind, format!("{contract} is not a bond")));
    }
    if !(c.is(Role::Verifier, me) || c.is(Role::Arbiter, me)) {
        return Err(refuse(Refusal::WrongParty, format!("only the verifier or the arbiter forfeits bond {contract}")));
    }
    if c.state != ContractState::Posted {
        return Err(refuse(Refusal::WrongContractState, format!("bond {contract} is {}", c.state)));
    }
    if c.expires().is_some_and(|e| ctx.now >= e) {
        return Err(refuse(Refusal::BondExpired, format!("bond {contract} has expired: it returns to its bondholder")));
    }
    let escrow = escrow_account(&c.id);
    let to = c.get(Role::Beneficiary).map_or_else(|| rules.casa(), |a| a.as_str().to_owned());
    need(facts, &escrow, c.amount)?;
    post(d, c, meta(Primitive::Forfeit, Object::new()), ctx, move_all(&escrow, &to, c.amount));
    let extra = obj([("reason", reason.into())]);
    finish_contract(d, record_event(c, ContractState::Forfeited, ctx, "forfeit", Some(entry_id), extra), c);
    Ok(())
}

/// `revoke`: a grantor of the mandate (or of one above it) stops it and every mandate under it;
/// its holders hear of it.
fn revoke(mandate: &str, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, facts, .. } = *given;
    let me = &ctx.operator;
    let m = facts
        .chain
        .last()
        .filter(|m| m.id == mandate)
        .ok_or_else(|| refuse(Refusal::UnknownMandate, format!("no mandate {mandate} here")))?;
    if !facts.chain.iter().any(|link| link.grantor == *me) {
        return Err(refuse(Refusal::WrongParty, format!("only a grantor of {mandate} or above it revokes it")));
    }
    if !m.active {
        return Err(refuse(Refusal::MandateRevoked, format!("mandate {mandate} is already revoked")));
    }
    let mut revoked = m.clone();
    revoked.active = false;
    d.mandates.push(MandateWrite::Revoke { id: m.id.clone(), version: m.version, below: facts.below_count });
    push_party(&mut d.parties, Some(m.grantor.clone()));
    push_party(&mut d.parties, Some(m.grantee.clone()));
    // The cascade stops every mandate under it: their holders hear of it as the direct
    // holder does (their grantors are holders above them, or the revoked one's grantee).
    for holder in &facts.below {
        push_party(&mut d.parties, Some(holder.clone()));
    }
    d.receipt.insert("mandate".into(), revoked.to_value());
    Ok(())
}

/// The reads (`balance`, `statement`, `contract`): nothing moves; the receipt says what the
/// operator may see (a contract only to its parties).
fn read(op: &Op, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, facts, .. } = *given;
    let me = &ctx.operator;
    match op {
        Op::Balance => {
            d.receipt.insert(
                "balance".into(),
                Value::Object(obj([("account", me.as_str().into()), ("balance", facts.balance(me.as_str()).into())])),
            );
        }
        Op::Statement { limit } => d.read = Some(Read::Statement { account: me.as_str().to_owned(), limit: *limit }),
        Op::Contract { contract } => {
            let c = contract_of(facts, contract, me)?;
            d.receipt.insert("contract".into(), c.view());
        }
        _ => return Err(broken("only a read is decided as one")),
    }
    Ok(())
}

/// The posting of an operation on contract `c`: its concept, these lines, and refs to the
/// operation and the contract.
fn post(d: &mut Decision, c: &Contract, meta: Object, ctx: &Ctx, lines: Vec<Line>) {
    let concept = c.record.get("concept").and_then(Value::as_str).unwrap_or(c.kind.as_str()).to_owned();
    d.posting = Some(Posting { concept, lines, meta, refs: refs(ctx, Some(&c.id)) });
}

fn finish_contract(d: &mut Decision, next: Contract, before: &Contract) {
    for p in before.parties() {
        push_party(&mut d.parties, Some(p));
    }
    d.receipt.insert("contract".into(), next.view());
    d.contract = Some(ContractWrite::Update(next));
}

fn base_record(id: &str, kind: Kind, rules: &Rules, amount: i64, concept: &str, ctx: &Ctx) -> Object {
    obj([
        ("id", id.into()),
        ("kind", kind.as_str().into()),
        ("house", rules.house.as_str().into()),
        ("amount", amount.into()),
        ("concept", concept.into()),
        ("created", ctx.now.to_rfc3339().into()),
        ("updated", ctx.now.to_rfc3339().into()),
    ])
}

/// `accept` (a quote): the buyer takes the seller's quote, and the contract it offers begins:
/// a spot paid at once, an escrow held, a metered contract's mandate granted to the seller.
fn accept(quote: &Quote, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, rules, facts, entry_id } = *given;
    let me = &ctx.operator;
    if quote.house != rules.house {
        // Not 421: between houses that says "try again elsewhere", and the sender's queue would
        // retry an operation that can never succeed here.
        return Err(refuse(
            Refusal::QuoteWrongHouse,
            format!("quote {} is for the Libro of {}; send it to libro@{}", quote.id, quote.house, quote.house),
        ));
    }
    if quote.buyer != *me {
        return Err(refuse(Refusal::QuoteNotYours, format!("quote {} is for {}, not {me}", quote.id, quote.buyer)));
    }
    if quote.seller == quote.buyer {
        return Err(refuse(Refusal::UnacceptableQuote, "a seller cannot sell to itself"));
    }
    if quote.arbiter.as_ref().is_some_and(|a| *a == quote.seller || *a == quote.buyer) {
        return Err(refuse(Refusal::UnacceptableQuote, "a quote's arbiter is neither its seller nor its buyer"));
    }
    if kind_of(quote.contract) == Kind::Metered && facts.active_mandates >= MAX_ACTIVE_MANDATES {
        return Err(refuse(
            Refusal::TooManyMandates,
            format!("{me} has {MAX_ACTIVE_MANDATES} active mandates; revoke one first"),
        ));
    }
    if quote.currency != nyx5_proto::libro::CURRENCY {
        return Err(refuse(Refusal::UnacceptableQuote, format!("this Libro keeps tok, not {:?}", quote.currency)));
    }
    if let Some(r) = &quote.referrer
        && rules.fee_bps + r.share_bps > limits::BPS_WHOLE
    {
        return Err(refuse(
            Refusal::UnacceptableQuote,
            format!(
                "the house's fee ({} bps) and the referrer's share ({} bps) pass 10000",
                rules.fee_bps, r.share_bps
            ),
        ));
    }
    if facts.contract.as_ref().is_some_and(|c| c.id == quote.id) {
        return Err(refuse(Refusal::QuoteAlreadyAccepted, format!("quote {} was accepted before", quote.id)));
    }
    rule::check_contract_id(&quote.id)?;
    // A contract never holds terms whose evidence policy nobody could keep or read.
    nyx5_proto::authority::EvidencePolicy::of_terms(quote.terms.as_ref())?;
    let kind = kind_of(quote.contract);
    let mut record = base_record(&quote.id, kind, rules, quote.price, &quote.concept, ctx);
    record.insert("fee_bps".into(), rules.fee_bps.into());
    record.insert(Role::Seller.as_str().into(), quote.seller.as_str().into());
    record.insert(Role::Buyer.as_str().into(), quote.buyer.as_str().into());
    if let Some(a) = &quote.arbiter {
        record.insert(Role::Arbiter.as_str().into(), a.as_str().into());
    }
    record.insert("terms".into(), quote.terms.clone().map_or(Value::Null, Value::Object));
    record.insert("quote_id".into(), quote.id.as_str().into());
    record.insert("quote_sha256".into(), quote.sha256_hex().into());
    record.insert("accept_sha256".into(), ctx.sha256.as_str().into());
    if let Some(r) = &quote.referrer {
        record.insert(
            "referrer".into(),
            Value::Object(obj([("address", r.address.as_str().into()), ("share", r.share_bps.into())])),
        );
    }
    let mut r = refs(ctx, Some(&quote.id));
    r.insert("quote".into(), quote.id.as_str().into());
    r.insert("quote_sha256".into(), quote.sha256_hex().into());
    let (state, posted) = match kind {
        Kind::Spot => {
            need(facts, me.as_str(), quote.price)?;
            let (lines, m) = settle(me.as_str(), quote.seller.as_str(), quote.price, rules, quote.referrer.as_ref());
            d.posting =
                Some(Posting { concept: quote.concept.clone(), lines, meta: meta(Primitive::Charge, m), refs: r });
            if let Some(rf) = &quote.referrer {
                push_party(&mut d.parties, Some(rf.address.clone()));
            }
            (ContractState::Settled, true)
        }
        Kind::Escrow => {
            need(facts, me.as_str(), quote.price)?;
            let lines = move_all(me.as_str(), &escrow_account(&quote.id), quote.price);
            d.posting = Some(Posting {
                concept: quote.concept.clone(),
                lines,
                meta: meta(Primitive::Hold, Object::new()),
                refs: r,
            });
            (ContractState::Held, true)
        }
        Kind::Metered => {
            let m = Mandate {
                id: ctx.envelope.clone(),
                grantor: me.clone(),
                grantee: quote.seller.clone(),
                cap: quote.price,
                spent: 0,
                concepts: None,
                expires: quote.expires,
                parent: None,
                root: ctx.envelope.clone(),
                chain: vec![ctx.envelope.clone()],
                active: true,
                contract: Some(quote.id.clone()),
                // The buyer's own ceiling bounds what it lets the seller charge.
                authority: ctx.card.as_ref().map(|c| c.authority.clone()),
                approver: ctx.card.as_ref().map(|c| c.delegator.clone()),
                version: 1,
            };
            record.insert("mandate".into(), m.id.as_str().into());
            d.receipt.insert("mandate".into(), m.to_value());
            d.mandates.push(MandateWrite::Insert(Box::new(m)));
            (ContractState::Active, false)
        }
        // `kind_of` never answers a bond: a quote offers spot, escrow or metered.
        Kind::Bond => return Err(refuse(Refusal::UnacceptableQuote, "a quote does not offer a bond")),
    };
    record.insert("state".into(), state.as_str().into());
    let mut e = event(ctx, "accept");
    if posted {
        e.insert("asiento".into(), entry_id.into());
    }
    record.insert("history".into(), Value::Array(vec![Value::Object(e)]));
    let contract = Contract { id: quote.id.clone(), kind, state, amount: quote.price, version: 1, record };
    if kind == Kind::Escrow
        && let Some(deadline) =
            quote.terms.as_ref().and_then(|t| t.get("deadline")).and_then(Value::as_str).and_then(parse_deadline)
        && deadline > ctx.now
    {
        d.deadlines.push(Deadline {
            contract: quote.id.clone(),
            at: deadline,
            to: vec![quote.buyer.clone(), quote.seller.clone()],
            body: obj([("contract", quote.id.as_str().into()), ("deadline", deadline.to_rfc3339().into())]),
        });
    }
    push_party(&mut d.parties, Some(quote.seller.clone()));
    push_party(&mut d.parties, quote.arbiter.clone());
    d.receipt.insert("cotizacion_sha256".into(), quote.sha256_hex().into());
    d.receipt.insert("contract".into(), contract.view());
    d.contract = Some(ContractWrite::Insert(contract));
    Ok(())
}

fn kind_of(k: ContractKind) -> Kind {
    match k {
        ContractKind::Spot => Kind::Spot,
        ContractKind::Escrow => Kind::Escrow,
        ContractKind::Metered => Kind::Metered,
    }
}

/// A deadline in `terms`: RFC 3339, or a date (`2026-09-15`, its midnight UTC).
pub fn parse_deadline(text: &str) -> Option<Timestamp> {
    Timestamp::parse(text).ok().or_else(|| Timestamp::parse(&format!("{text}T00:00:00Z")).ok())
}

/// `bond`: its bondholder holds an amount behind a claim, for a verifier (and arbiter) to
/// release or forfeit.
fn bond(b: &Bond, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, rules, facts, entry_id } = *given;
    let me = &ctx.operator;
    if b.expires.is_some_and(|e| e <= ctx.now) {
        return Err(refuse(Refusal::BadBond, "a bond's `expires` must be in the future"));
    }
    if b.verifier == *me || b.arbiter.as_ref() == Some(me) {
        return Err(refuse(Refusal::BadBond, "a bondholder cannot verify or arbitrate its own bond"));
    }
    need(facts, me.as_str(), b.amount)?;
    let id = ctx.envelope.clone();
    rule::check_contract_id(&id)?;
    let mut record = base_record(&id, Kind::Bond, rules, b.amount, &b.claim, ctx);
    record.insert(Role::Bondholder.as_str().into(), me.as_str().into());
    record.insert(Role::Verifier.as_str().into(), b.verifier.as_str().into());
    record.insert(
        Role::Beneficiary.as_str().into(),
        b.beneficiary.as_ref().map_or_else(|| rules.casa(), |a| a.as_str().to_owned()).into(),
    );
    if let Some(a) = &b.arbiter {
        record.insert(Role::Arbiter.as_str().into(), a.as_str().into());
    }
    if let Some(v) = &b.vouchee {
        record.insert(Role::Vouchee.as_str().into(), v.as_str().into());
    }
    record.insert("claim".into(), b.claim.as_str().into());
    record.insert("terms".into(), Value::Null);
    record.insert("evidence_sha256".into(), b.evidence_sha256.clone().into());
    if let Some(k) = b.evidence_kind {
        record.insert("evidence_kind".into(), k.as_str().into());
    }
    record.insert("expires".into(), b.expires.map(|t| t.to_rfc3339()).into());
    record.insert("state".into(), ContractState::Posted.as_str().into());
    let mut e = event(ctx, "bond");
    e.insert("asiento".into(), entry_id.into());
    record.insert("history".into(), Value::Array(vec![Value::Object(e)]));
    let contract = Contract {
        id: id.clone(),
        kind: Kind::Bond,
        state: ContractState::Posted,
        amount: b.amount,
        version: 1,
        record,
    };
    d.posting = Some(Posting {
        concept: b.claim.chars().take(200).collect(),
        lines: move_all(me.as_str(), &escrow_account(&id), b.amount),
        meta: meta(Primitive::Hold, obj([("bond", true.into())])),
        refs: refs(ctx, Some(&id)),
    });
    for p in contract.parties() {
        push_party(&mut d.parties, Some(p));
    }
    // The house's own account gets no receipt.
    d.parties.retain(|a| a.as_str() != rules.casa());
    d.receipt.insert("contract".into(), contract.view());
    d.contract = Some(ContractWrite::Insert(contract));
    Ok(())
}

fn check_chain(chain: &[Mandate], now: Timestamp) -> Result<(), Error> {
    for link in chain {
        if !link.active {
            return Err(refuse(Refusal::MandateRevoked, format!("mandate {} is revoked", link.id)));
        }
        if link.expired(now) {
            return Err(refuse(Refusal::MandateExpired, format!("mandate {} has expired", link.id)));
        }
    }
    Ok(())
}

/// `mandate`: a grantor lets a grantee charge it up to a cap, directly or under a mandate it
/// holds itself (within that one's cap, time, concepts and authority).
fn mandate(m: &MandateOp, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, facts, .. } = *given;
    let me = &ctx.operator;
    if m.grantee == *me {
        return Err(refuse(Refusal::BadMandate, "a mandate is granted to someone else"));
    }
    if m.expires.is_some_and(|e| e <= ctx.now) {
        return Err(refuse(Refusal::BadMandate, "a mandate's `expires` must be in the future"));
    }
    let id = ctx.envelope.clone();
    // The grantee's authority: what the grantor declared, under every ceiling above it (the
    // parent mandate's, the grantor's own card's); what it leaves unsaid comes from them.
    let parent_rule = m.parent.as_ref().and_then(|_| facts.chain.last()).and_then(|p| p.authority.clone());
    let mut authority = m.authority.clone();
    for ceiling in [parent_rule, ctx.card.as_ref().map(|c| c.authority.clone())].into_iter().flatten() {
        authority = Some(match authority {
            Some(a) => {
                a.under(&ceiling).map_err(|e| reword(e, ErrorKind::Forbidden, |r| format!("this mandate: {r}")))?
            }
            None => ceiling,
        });
    }
    let (root, chain, expires, concepts) = match &m.parent {
        None => (id.clone(), vec![id.clone()], m.expires, m.concepts.clone()),
        Some(parent_id) => {
            let parent = facts
                .chain
                .last()
                .filter(|p| &p.id == parent_id)
                .ok_or_else(|| refuse(Refusal::UnknownMandate, format!("no mandate {parent_id} here")))?;
            if parent.grantee != *me {
                return Err(refuse(Refusal::WrongParty, format!("only the grantee of {parent_id} delegates under it")));
            }
            check_chain(&facts.chain, ctx.now)?;
            let left = parent.cap - parent.spent;
            if m.cap > left {
                return Err(refuse(
                    Refusal::BeyondParentMandate,
                    format!("a sub-mandate of {parent_id} may cap at most {left} (its cap less what is spent)"),
                ));
            }
            let expires = match (m.expires, parent.expires) {
                (Some(e), Some(p)) if e > p => {
                    return Err(refuse(
                        Refusal::BeyondParentMandate,
                        format!("a sub-mandate of {parent_id} ends by {}", p.to_rfc3339()),
                    ));
                }
                (Some(e), _) => Some(e),
                (None, p) => p,
            };
            let concepts = match (&m.concepts, &parent.concepts) {
                (Some(c), Some(p)) if c.iter().any(|x| !p.contains(x)) => {
                    return Err(refuse(
                        Refusal::BeyondParentMandate,
                        format!("a sub-mandate of {parent_id} keeps within its concepts"),
                    ));
                }
                (Some(c), _) => Some(c.clone()),
                (None, p) => p.clone(),
            };
            let mut chain = parent.chain.clone();
            chain.push(id.clone());
            (parent.root.clone(), chain, expires, concepts)
        }
    };
    let new = Mandate {
        id,
        grantor: me.clone(),
        grantee: m.grantee.clone(),
        cap: m.cap,
        spent: 0,
        concepts,
        expires,
        parent: m.parent.clone(),
        root,
        chain,
        active: true,
        contract: None,
        authority,
        approver: ctx.card.as_ref().map(|c| c.delegator.clone()),
        version: 1,
    };
    push_party(&mut d.parties, Some(new.grantee.clone()));
    d.receipt.insert("mandate".into(), new.to_value());
    d.receipt.insert("chain".into(), Value::Array(new.chain.iter().map(|s| s.as_str().into()).collect()));
    d.mandates.push(MandateWrite::Insert(Box::new(new)));
    Ok(())
}

/// `charge`: a mandate's grantee is paid by its root grantor, within every link of the chain.
fn charge(id: &str, amount: i64, concept: &str, given: &Given<'_>, d: &mut Decision) -> Result<(), Error> {
    let Given { ctx, rules, facts, .. } = *given;
    let me = &ctx.operator;
    let m = facts
        .chain
        .last()
        .filter(|m| m.id == id)
        .ok_or_else(|| refuse(Refusal::UnknownMandate, format!("no mandate {id} here")))?;
    if m.grantee != *me {
        return Err(refuse(Refusal::WrongParty, format!("only the grantee of {id} charges under it")));
    }
    let root = facts.chain.first().ok_or_else(|| broken("a mandate without its chain"))?;
    if root.id != m.root || facts.chain.len() != m.chain.len() {
        return Err(broken(format!("the chain of mandate {id} is incomplete")));
    }
    check_chain(&facts.chain, ctx.now)?;
    for link in &facts.chain {
        if !link.allows(concept) {
            return Err(refuse(Refusal::ConceptNotCovered, format!("mandate {} does not cover {concept:?}", link.id)));
        }
        if link.spent + amount > link.cap {
            return Err(refuse(
                Refusal::MandateExhausted,
                format!("mandate {} has {} of {} left", link.id, link.cap - link.spent, link.cap),
            ));
        }
    }
    let payer = root.grantor.as_str();
    if payer == me.as_str() {
        return Err(refuse(
            Refusal::PaysItself,
            format!("{me} is the root grantor of mandate {id}: it would pay itself"),
        ));
    }
    // Said without the number: the grantee has no business knowing the payer's balance.
    if facts.balance(payer) < amount {
        return Err(refuse(
            Refusal::PayerCannotCover,
            format!("the payer of mandate {id} cannot cover {amount} tok now"),
        ));
    }
    let (lines, mut m_meta) = settle(payer, me.as_str(), amount, rules, None);
    let chain = Value::Array(facts.chain.iter().map(|l| l.id.as_str().into()).collect());
    m_meta.insert("chain".into(), chain.clone());
    let mut r = refs(ctx, m.contract.as_deref());
    r.insert("mandate".into(), id.into());
    d.posting = Some(Posting { concept: concept.to_owned(), lines, meta: meta(Primitive::Charge, m_meta), refs: r });
    d.mandates
        .push(MandateWrite::Spend { links: facts.chain.iter().map(|l| (l.id.clone(), l.version)).collect(), amount });
    for link in &facts.chain {
        push_party(&mut d.parties, Some(link.grantor.clone()));
        push_party(&mut d.parties, Some(link.grantee.clone()));
    }
    let mut after = m.clone();
    after.spent += amount;
    d.receipt.insert("mandate".into(), after.to_value());
    d.receipt.insert("chain".into(), chain);
    Ok(())
}

/// A bond past its `expires`, returned to its bondholder by the house (no operator).
pub fn expire_bond(c: &Contract, rules: &Rules, now: Timestamp, entry_id: &str) -> Result<(Posting, Contract), Error> {
    if c.kind != Kind::Bond || c.state != ContractState::Posted || c.expires().is_none_or(|e| now < e) {
        return Err(refuse(Refusal::NotDue, format!("bond {} is not due to return", c.id)));
    }
    let holder = c.get(Role::Bondholder).ok_or_else(|| broken("a bond without bondholder"))?;
    let lines = move_all(&escrow_account(&c.id), holder.as_str(), c.amount);
    check_lines(&lines)?;
    let posting = Posting {
        concept: c.record.get("concept").and_then(Value::as_str).unwrap_or("bond").to_owned(),
        lines,
        meta: meta(Primitive::Release, obj([("expired", true.into())])),
        refs: obj([("contract", c.id.as_str().into()), ("key", format!("expiry:{}", c.id).into())]),
    };
    let mut e = obj([
        ("at", now.to_rfc3339().into()),
        ("op", "expire".into()),
        ("by", rules.casa().into()),
        ("asiento", entry_id.into()),
    ]);
    e.insert("note".into(), "the bond expired and returned to its bondholder".into());
    let mut next = c.moved(ContractState::Released, e);
    next.record.insert("updated".into(), now.to_rfc3339().into());
    Ok((posting, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(fee_bps: i64) -> Rules {
        Rules { house: "a.test".into(), fee_bps, approval_ttl_ms: 86_400_000 }
    }

    fn at(t: &str) -> Timestamp {
        Timestamp::parse(t).unwrap()
    }

    /// The tick returns a bond only when it is one, still posted, and past its end.
    #[test]
    fn only_a_posted_bond_past_its_end_is_returned() {
        let now = at("2026-09-04T12:00:00Z");
        let bond = |kind, state: &str, expires: Option<&str>| {
            let mut record = obj([("bondholder", "ana@a.test".into()), ("state", state.into())]);
            if let Some(e) = expires {
                record.insert("expires".into(), e.into());
            }
            Contract {
                id: "b1".into(),
                kind,
                state: ContractState::parse(state).unwrap(),
                amount: 10,
                version: 1,
                record,
            }
        };
        let (past, future) = (Some("2026-09-04T11:00:00Z"), Some("2026-09-04T13:00:00Z"));
        let (posting, after) = expire_bond(&bond(Kind::Bond, "posted", past), &rules(0), now, "e1").unwrap();
        assert_eq!(posting.lines, vec![Line::new("escrow:b1", -10), Line::new("ana@a.test", 10)]);
        assert_eq!(after.state.as_str(), "released");
        for c in [
            bond(Kind::Escrow, "posted", past),
            bond(Kind::Bond, "released", past),
            bond(Kind::Bond, "forfeited", past),
            bond(Kind::Bond, "posted", future),
            bond(Kind::Bond, "posted", None),
        ] {
            let refused = expire_bond(&c, &rules(0), now, "e1").unwrap_err();
            assert_eq!((refused.code(), refused.refusal()), (409, Some(Refusal::NotDue)), "{:?} {}", c.kind, c.state);
        }
    }

    /// A charge runs only on a whole chain as the store read it: its first link the mandate's
    /// root, and as many links as the mandate names. A chain that misses either is the house's
    /// fault (500), never a charge.
    #[test]
    fn a_charge_needs_the_whole_chain_it_names() {
        let now = at("2026-09-04T12:00:00Z");
        let addr = |a: &str| Address::parse(a).unwrap();
        let link = |id: &str, grantor: &str, grantee: &str, chain: &[&str]| Mandate {
            id: id.into(),
            grantor: addr(grantor),
            grantee: addr(grantee),
            cap: 100,
            spent: 0,
            concepts: None,
            expires: None,
            parent: (chain.len() > 1).then(|| chain[chain.len() - 2].to_owned()),
            root: chain[0].into(),
            chain: chain.iter().map(|c| (*c).to_owned()).collect(),
            active: true,
            contract: None,
            authority: None,
            approver: None,
            version: 1,
        };
        let root = link("r1", "ana@a.test", "cy@a.test", &["r1"]);
        let op = Op::Charge { mandate: "r2".into(), amount: 10, concept: "gpu".into() };
        let ctx = Ctx::new(addr("bo@a.test"), "op1".into(), "00".repeat(32), now);
        let facts = |chain: Vec<Mandate>| Facts {
            balances: [("ana@a.test".to_owned(), 50)].into(),
            chain,
            known: true,
            ..Facts::default()
        };
        let whole = facts(vec![root.clone(), link("r2", "cy@a.test", "bo@a.test", &["r1", "r2"])]);
        let d = decide(&op, &ctx, &rules(0), &whole, "e1").unwrap();
        assert_eq!(d.posting.unwrap().lines, vec![Line::new("ana@a.test", -10), Line::new("bo@a.test", 10)]);
        // The root right, a link missing; every link there, the first not the root.
        let short = facts(vec![root.clone(), link("r2", "cy@a.test", "bo@a.test", &["r1", "rx", "r2"])]);
        let rootless = facts(vec![
            link("r0", "ana@a.test", "cy@a.test", &["r0"]),
            link("r2", "cy@a.test", "bo@a.test", &["r1", "r2"]),
        ]);
        for f in [short, rootless] {
            assert_eq!(decide(&op, &ctx, &rules(0), &f, "e1").unwrap_err().kind, ErrorKind::Internal);
        }
    }

    #[test]
    fn deadlines_read_instants_and_dates() {
        assert_eq!(parse_deadline("2026-09-15"), Timestamp::parse("2026-09-15T00:00:00Z").ok());
        assert_eq!(parse_deadline("2026-09-15T10:00:00Z"), Timestamp::parse("2026-09-15T10:00:00Z").ok());
        assert_eq!(parse_deadline("soon"), None);
    }
}
