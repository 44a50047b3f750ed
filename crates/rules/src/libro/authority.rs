//! Authority in the Libro (docs/SPEC.md §16b): every money-moving operation judged by the
//! authorities over it, and the movements that wait for a human. Pure, like the kernel.
//!
//! [`gate`] finds the authorities over an operation — the operator's own (a delegated card's
//! `scope.authority`) for `accept`, `bond`, `mandate` and a buyer's `release`, every link's of a
//! mandate's chain for `charge` — and judges it under each ([`Authority::judge`]). A refusal
//! refuses the operation; an ask turns the kernel's decision into a [`Pending`] approval
//! ([`pending`]) that holds what the movement would pay in `escrow:hold.<id>` (and, for a
//! charge, reserves its amount in the chain's `spent`). [`approval`] decides `approve` and `decline`;
//! once every ask is approved, the house decides the original operation again with the
//! approval in its context and [`merge`] makes one entry of the hold's return and the movement.
//! [`expire`] returns the hold of an approval nobody decided in time.
//!
//! It reads and writes [`super::model`] alone, never the kernel: the kernel calls [`gate`],
//! [`pending`], [`mark_approved`] and [`check_contract_id`]; the house calls the rest.

use nyx5_proto::authority::{Authority, Consequence, Intent, Verdict};
use nyx5_proto::json::obj;
use nyx5_proto::libro::{CURRENCY, ESCROW_PREFIX, Line, Primitive};
use nyx5_proto::quote::ContractKind;
use nyx5_proto::receipt;
use nyx5_proto::{Address, Error, ErrorKind, Object, Refusal, Timestamp, Value};

use super::model::{
    Approved, Ask, Ctx, Decision, Facts, HOLD_PREFIX, Kind, MandateWrite, Pending, PendingWrite, Posting, Rules, Use,
    addresses, broken, fold, hold_account, move_all, refuse, reword,
};
use super::op::Op;
use super::state::{ApprovalState, Role};

/// The longest an approval may wait, in seconds (`NYX5_APPROVAL_SECONDS`, 1 to this; a day by
/// default): past it, its hold returns.
pub const MAX_APPROVAL_SECONDS: i64 = 30 * 86_400;
/// Most approvals one operator may have waiting (409 beyond).
pub const MAX_PENDING: i64 = 100;
/// Most approvals one operator's movements may have in the table at once, waiting or decided
/// (decided ones are kept [`super::KEEP_DECIDED_MS`]); 409 beyond.
pub const MAX_APPROVALS_KEPT: i64 = 1_000;
/// The largest operating envelope that may wait for approval (it is kept whole, to be decided
/// again); 413 beyond. Operations are small: a quote's terms are the largest part.
pub const MAX_PENDING_ENVELOPE_BYTES: usize = 64 * 1024;

/// A contract's id may not be one whose escrow account would be a hold's (400).
pub fn check_contract_id(id: &str) -> Result<(), Error> {
    if id.starts_with(HOLD_PREFIX) {
        return Err(refuse(Refusal::ReservedContractId, format!("a contract's id may not start with {HOLD_PREFIX:?}")));
    }
    Ok(())
}

/// What a decision's receipt says became of its movement: `done` unless the decision leaves an
/// approval waiting (`pending`: only a hold moved) or declines one (`declined`: the hold went
/// back). An approval that completes is the movement done.
pub fn receipt_status(d: &Decision) -> receipt::Status {
    match &d.pending {
        Some(PendingWrite::Insert(p) | PendingWrite::Update(p)) => match p.state {
            ApprovalState::Approved => receipt::Status::Done,
            ApprovalState::Pending => receipt::Status::Pending,
            // Declined, or expired: nothing moved.
            ApprovalState::Declined | ApprovalState::Expired => receipt::Status::Declined,
        },
        None => receipt::Status::Done,
    }
}

/// One authority that allowed the movement, as the entry and the receipt show it.
#[derive(Debug, Clone)]
struct Applied {
    of: String,
    authority: Authority,
    hour_ops: i64,
}

/// What the authorities over an operation said.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    pub asks: Vec<Ask>,
    applied: Vec<Applied>,
    uses: Vec<Use>,
}

impl Gate {
    /// Writes who allowed the movement into its entry and receipt, and what the hour counts.
    pub fn apply(&self, d: &mut Decision) {
        if self.applied.is_empty() {
            return;
        }
        let rules = self
            .applied
            .iter()
            .map(|a| {
                let mut o = match a.authority.to_value() {
                    Value::Object(o) => o,
                    _ => Object::new(),
                };
                o.insert("of".into(), a.of.as_str().into());
                o.insert("hour_ops".into(), (a.hour_ops + 1).into());
                Value::Object(o)
            })
            .collect();
        let v = Value::Object(obj([("allowed_by", Value::Array(rules))]));
        if let Some(p) = &mut d.posting {
            p.meta.insert("authority".into(), v.clone());
        }
        d.receipt.insert("authority".into(), v);
        d.uses.clone_from(&self.uses);
    }
}

/// What an operation by `me` commits, and how grave it is, when an authority judges it.
/// Whether `op` is of a kind an authority may make wait (`movement` names what it moves).
pub fn may_wait(op: &Op) -> bool {
    matches!(op, Op::Accept { .. } | Op::Bond(_) | Op::Mandate(_) | Op::Charge { .. } | Op::Release { .. })
}

fn movement(op: &Op, me: &Address, facts: &Facts) -> Option<(i64, Consequence)> {
    Some(match op {
        Op::Accept { quote } => (
            quote.price,
            match quote.contract {
                // An escrow is the buyer's again only until its seller delivers; then only a release
                // or the seller's refund ends it, and a seller who never acts keeps it held.
                ContractKind::Escrow | ContractKind::Spot | ContractKind::Metered => Consequence::Costly,
            },
        ),
        Op::Bond(b) => (b.amount, Consequence::Costly),
        // A grant moves nothing until charged, and is revoked at will.
        Op::Mandate(m) => (m.cap, Consequence::Reversible),
        Op::Charge { amount, .. } => (*amount, Consequence::Costly),
        // A buyer releasing its escrow pays the seller: what was reversible while held is not.
        Op::Release { contract, .. } => {
            let c = facts
                .contract
                .as_ref()
                .filter(|c| &c.id == contract && c.kind == Kind::Escrow && c.is(Role::Buyer, me))?;
            (c.amount, Consequence::Costly)
        }
        _ => return None,
    })
}

/// Whether the operator's own card's authority judges `op` (a release: when it is the buyer's);
/// the house looks for who approves a card's asks only for these.
pub fn judged_by_card(op: &Op) -> bool {
    matches!(op, Op::Accept { .. } | Op::Bond(_) | Op::Mandate(_) | Op::Release { .. })
}

/// Judges `op` under every authority over it (see the module's notes).
pub fn gate(op: &Op, ctx: &Ctx, facts: &Facts) -> Result<Gate, Error> {
    let Some((amount, consequence)) = movement(op, &ctx.operator, facts) else { return Ok(Gate::default()) };
    let mut over: Vec<(String, &Authority, Vec<Address>, String)> = Vec::new();
    match op {
        Op::Charge { .. } => {
            for (i, link) in facts.chain.iter().enumerate() {
                if let Some(a) = &link.authority {
                    let mut approvers: Vec<Address> = Vec::new();
                    for l in facts.chain.iter().take(i + 1) {
                        let who = l.approver.as_ref().unwrap_or(&l.grantor);
                        if !approvers.contains(who) {
                            approvers.push(who.clone());
                        }
                    }
                    over.push((format!("mandate:{}", link.id), a, approvers, format!("mandate {}", link.id)));
                }
            }
        }
        _ if judged_by_card(op) => {
            if let Some(c) = &ctx.card {
                let who = format!("the authority {} holds from {}", ctx.operator, c.delegator);
                over.push((format!("card:{}", ctx.operator), &c.authority, vec![c.delegator.clone()], who));
            }
        }
        _ => {}
    }
    let mut gate = Gate::default();
    for (of, authority, mut approvers, what) in over {
        // Its operator never approves its own movement (a cycle of mandates could name it).
        approvers.retain(|a| *a != ctx.operator);
        let hour_ops = facts.uses.get(&of).copied().unwrap_or(0);
        // An approval lifts the gates of the authorities that asked, no other's.
        let approved = ctx.approved.as_ref().is_some_and(|a| a.asked.contains(&of));
        let intent = Intent { amount: Some(amount), currency: Some(CURRENCY), consequence, hour_ops, approved };
        match authority.judge(&intent) {
            Verdict::Refused(e) => return Err(reword(e, ErrorKind::Forbidden, |r| format!("{what}: {r}"))),
            Verdict::Ask(_) if approvers.is_empty() => {
                return Err(refuse(
                    Refusal::NoApprover,
                    format!("{what} asks for approval, and nobody but its operator could give it"),
                ));
            }
            Verdict::Ask(reason) => {
                gate.asks.push(Ask { of, reason: format!("{what}: {reason}"), approvers, authority: authority.clone() })
            }
            Verdict::Allowed => {
                if let Some(limit) = authority.max_per_hour {
                    let limit = (!approved).then_some(limit);
                    gate.uses.push(Use { subject: of.clone(), amount, limit });
                }
                gate.applied.push(Applied { of, authority: authority.clone(), hour_ops });
            }
        }
    }
    Ok(gate)
}

/// The kernel's decision `d` turned into a movement waiting for approval: nothing happens but a
/// hold of what it would pay (the posting's one debit) and the approval's row; the operator and
/// everyone who may approve get the receipt.
pub fn pending(
    op: &Op,
    ctx: &Ctx,
    rules: &Rules,
    facts: &Facts,
    d: Decision,
    asks: Vec<Ask>,
) -> Result<Decision, Error> {
    if facts.pending_count >= MAX_PENDING {
        return Err(refuse(
            Refusal::TooManyPending,
            format!(
                "{} has {MAX_PENDING} movements waiting for approval; once some are decided, ask again with a new envelope",
                ctx.operator
            ),
        ));
    }
    if facts.approvals_kept >= MAX_APPROVALS_KEPT {
        return Err(refuse(
            Refusal::TooManyApprovals,
            format!("{} has asked for {MAX_APPROVALS_KEPT} approvals in the past 30 days", ctx.operator),
        ));
    }
    let debits: Vec<&Line> = d.posting.iter().flat_map(|p| p.lines.iter()).filter(|l| l.delta < 0).collect();
    let hold = match debits.as_slice() {
        [] => None,
        // What a contract holds already stays held: a release waits without moving it.
        [one] if one.account.starts_with(ESCROW_PREFIX) => None,
        [one] => Some((one.account.clone(), -one.delta)),
        _ => return Err(broken("a movement with two payers cannot wait for approval")),
    };
    let concept = d.posting.as_ref().map(|p| p.concept.clone()).unwrap_or_else(|| op.name().to_owned());
    // A waiting charge counts in its chain's `spent` already, so waiting charges never hold more
    // than the caps allow; the same guards as a charge's keep it from racing one.
    let spend: Vec<MandateWrite> =
        d.mandates.iter().filter(|m| matches!(m, MandateWrite::Spend { .. })).cloned().collect();
    let reserved = spend.iter().find_map(|m| match m {
        MandateWrite::Spend { links, amount } => Some((links.iter().map(|(id, _)| id.clone()).collect(), *amount)),
        _ => None,
    });
    let p = Pending {
        id: ctx.envelope.clone(),
        house: rules.house.clone(),
        operator: ctx.operator.clone(),
        op: op.name().to_owned(),
        op_sha256: ctx.sha256.clone(),
        hold: hold.clone(),
        concept: concept.clone(),
        summary: summary(op, ctx, facts),
        card: ctx.card.clone(),
        reserved,
        asks,
        approved_by: Vec::new(),
        state: ApprovalState::Pending,
        created: ctx.now,
        // The house's time for a decision, or the envelope's own `expires` if that comes first.
        expires: Timestamp::from_millis(ctx.now.millis().saturating_add(rules.approval_ttl_ms))
            .min(ctx.expires.unwrap_or(Timestamp(i64::MAX))),
        decided_by: None,
        note: None,
        version: 1,
    };
    let asked = Value::Object(obj([("asks", Value::Array(p.asks.iter().map(Ask::to_value).collect()))]));
    let posting = hold.map(|(account, amount)| Posting {
        concept,
        lines: move_all(&account, &hold_account(&p.id), amount),
        meta: obj([
            ("primitive", Primitive::Hold.as_str().into()),
            ("pending", p.id.as_str().into()),
            ("authority", asked),
        ]),
        refs: obj([
            ("op", ctx.envelope.as_str().into()),
            ("op_sha256", ctx.sha256.as_str().into()),
            ("pending", p.id.as_str().into()),
        ]),
    });
    let receipt = obj([("pending", p.to_value())]);
    Ok(Decision {
        posting,
        parties: p.parties(),
        receipt,
        pending: Some(PendingWrite::Insert(Box::new(p))),
        mandates: spend,
        ..Decision::default()
    })
}

/// What a movement is, in a few members, for whoever is asked to approve it.
fn summary(op: &Op, ctx: &Ctx, facts: &Facts) -> Object {
    let short = |t: &str| -> Value { t.chars().take(200).collect::<String>().into() };
    match op {
        Op::Accept { quote } => {
            let mut o = obj([
                ("quote", quote.id.as_str().into()),
                ("contract", quote.contract.as_str().into()),
                ("price", quote.price.into()),
                ("seller", quote.seller.as_str().into()),
                ("concept", short(&quote.concept)),
            ]);
            if let Some(a) = &quote.arbiter {
                o.insert("arbiter".into(), a.as_str().into());
            }
            o
        }
        Op::Bond(b) => {
            let mut o = obj([
                ("amount", b.amount.into()),
                ("verifier", b.verifier.as_str().into()),
                ("claim", short(&b.claim)),
            ]);
            if let Some(a) = &b.beneficiary {
                o.insert("beneficiary".into(), a.as_str().into());
            }
            if let Some(a) = &b.arbiter {
                o.insert("arbiter".into(), a.as_str().into());
            }
            o
        }
        Op::Mandate(m) => {
            let mut o = obj([("grantee", m.grantee.as_str().into()), ("cap", m.cap.into())]);
            if let Some(p) = &m.parent {
                o.insert("parent".into(), p.as_str().into());
            }
            if let Some(a) = &m.authority {
                o.insert("authority".into(), a.to_value());
            }
            o
        }
        Op::Charge { mandate, amount, concept } => {
            let mut o = obj([
                ("mandate", mandate.as_str().into()),
                ("amount", (*amount).into()),
                ("to", ctx.operator.as_str().into()),
                ("concept", short(concept)),
            ]);
            if let Some(root) = facts.chain.first() {
                o.insert("payer".into(), root.grantor.as_str().into());
            }
            o
        }
        Op::Release { contract, .. } => {
            let mut o = obj([("contract", contract.as_str().into())]);
            if let Some(c) = facts.contract.as_ref() {
                o.insert("amount".into(), c.amount.into());
                if let Some(s) = c.get(Role::Seller) {
                    o.insert("to".into(), s.as_str().into());
                }
            }
            o
        }
        _ => Object::new(),
    }
}

/// Writes an approval's names into the entry and receipt of the movement it allowed.
pub fn mark_approved(d: &mut Decision, a: &Approved) {
    let note = Value::Object(obj([
        ("approved_by", addresses(&a.by)),
        ("pending", a.pending.as_str().into()),
        ("approval", a.envelope.as_str().into()),
    ]));
    let merge = |into: &mut Object| match into.get_mut("authority") {
        Some(Value::Object(o)) => {
            if let Value::Object(n) = note.clone() {
                o.extend(n);
            }
        }
        _ => {
            into.insert("authority".into(), note.clone());
        }
    };
    if let Some(p) = &mut d.posting {
        merge(&mut p.meta);
        p.refs.insert("approval".into(), a.envelope.as_str().into());
    }
    merge(&mut d.receipt);
}

/// What `approve` or `decline` leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Written as it is: a decline (the hold returns), or an approval that leaves asks open.
    Decided(Box<Decision>),
    /// Every ask is approved: the house decides the original operation again under
    /// [`approved_ctx`], then [`merge`]s it.
    Complete(Box<Pending>),
}

/// The pending approval `id`, for one of its parties (404 to anyone else).
fn pending_of<'a>(facts: &'a Facts, id: &str, me: &Address) -> Result<&'a Pending, Error> {
    facts
        .pending
        .as_ref()
        .filter(|p| p.id == id && p.parties().contains(me))
        .ok_or_else(|| refuse(Refusal::UnknownApproval, format!("no approval {id} waits here")))
}

fn open(p: &Pending, now: Timestamp) -> Result<&Pending, Error> {
    if p.state != ApprovalState::Pending {
        return Err(refuse(Refusal::ApprovalDecided, format!("approval {} is {} already", p.id, p.state)));
    }
    if now >= p.expires {
        return Err(refuse(Refusal::ApprovalExpired, format!("approval {} has expired; its hold returns", p.id)));
    }
    Ok(p)
}

/// Decides `approve` or `decline` by `ctx.operator`.
pub fn approval(op: &Op, ctx: &Ctx, facts: &Facts) -> Result<Step, Error> {
    let me = &ctx.operator;
    match op {
        Op::Approve { pending } => {
            let p = open(pending_of(facts, pending, me)?, ctx.now)?;
            if !p.approvers().contains(me) {
                return Err(refuse(
                    Refusal::NotAnApprover,
                    format!("{me} asked for approval {pending}; only {} may give it", list(&p.approvers())),
                ));
            }
            if p.approved_by.contains(me) {
                return Err(refuse(Refusal::AlreadyApproved, format!("{me} approved {pending} already")));
            }
            let mut next = p.clone();
            next.approved_by.push(me.clone());
            if next.awaiting().is_empty() {
                next.state = ApprovalState::Approved;
                next.decided_by = Some(me.clone());
                return Ok(Step::Complete(Box::new(next)));
            }
            let mut d = Decision { parties: next.parties(), ..Decision::default() };
            d.receipt.insert("pending".into(), next.to_value());
            d.pending = Some(PendingWrite::Update(Box::new(next)));
            Ok(Step::Decided(Box::new(d)))
        }
        Op::Decline { pending, note } => {
            let p = open(pending_of(facts, pending, me)?, ctx.now)?;
            let mut next = p.clone();
            next.state = ApprovalState::Declined;
            next.decided_by = Some(me.clone());
            next.note.clone_from(note);
            let mut d = Decision { parties: next.parties(), ..Decision::default() };
            d.posting = returned(
                &next,
                facts,
                obj([("op", ctx.envelope.as_str().into()), ("op_sha256", ctx.sha256.as_str().into())]),
            )?;
            d.mandates.extend(unreserve(&next));
            d.receipt.insert("pending".into(), next.to_value());
            d.pending = Some(PendingWrite::Update(Box::new(next)));
            Ok(Step::Decided(Box::new(d)))
        }
        _ => Err(broken("not an approval")),
    }
}

fn list(a: &[Address]) -> String {
    a.iter().map(Address::as_str).collect::<Vec<_>>().join(", ")
}

/// The entry returning an approval's hold to its payer (declined, expired), if it held anything.
fn returned(p: &Pending, facts: &Facts, mut refs: Object) -> Result<Option<Posting>, Error> {
    let Some((account, amount)) = &p.hold else { return Ok(None) };
    let held = hold_account(&p.id);
    if facts.balance(&held) < *amount {
        return Err(broken(format!("the hold of {} is not in {held}", p.id)));
    }
    refs.insert("pending".into(), p.id.as_str().into());
    Ok(Some(Posting {
        concept: p.concept.clone(),
        lines: move_all(&held, account, *amount),
        meta: obj([
            ("primitive", Primitive::Refund.as_str().into()),
            ("pending", p.id.as_str().into()),
            ("state", p.state.as_str().into()),
        ]),
        refs,
    }))
}

/// What a decided (declined, expired) charge gives back of its chain's `spent`.
pub fn unreserve(p: &Pending) -> Option<MandateWrite> {
    p.reserved.as_ref().map(|(links, amount)| MandateWrite::Unspend { links: links.clone(), amount: *amount })
}

/// The context the original operation is decided again in, once approved: its operator, its
/// envelope, now, and who approved (its own authority was judged when it asked).
pub fn approved_ctx(p: &Pending, envelope: &str, now: Timestamp) -> Ctx {
    let mut ctx = Ctx::new(p.operator.clone(), p.id.clone(), p.op_sha256.clone(), now);
    ctx.card.clone_from(&p.card);
    ctx.approved = Some(Approved {
        pending: p.id.clone(),
        by: p.approved_by.clone(),
        envelope: envelope.to_owned(),
        asked: p.asks.iter().map(|a| a.of.clone()).collect(),
    });
    ctx
}

/// The facts the original operation is decided on again: its payer has the hold back.
pub fn with_hold_returned(p: &Pending, mut facts: Facts) -> Facts {
    if let Some((account, amount)) = &p.hold {
        *facts.balances.entry(account.clone()).or_insert(0) += amount;
    }
    if let Some((links, amount)) = &p.reserved {
        for m in facts.chain.iter_mut().filter(|m| links.contains(&m.id)) {
            m.spent -= amount;
        }
    }
    facts
}

/// One decision for a completed approval: the original operation's, its entry paid from the hold
/// (the hold's return and the movement folded into one entry), the approval written approved,
/// and every party of both told.
pub fn merge(p: &Pending, facts: &Facts, mut d: Decision) -> Result<Decision, Error> {
    if let Some((account, amount)) = &p.hold {
        let held = hold_account(&p.id);
        if facts.balance(&held) < *amount {
            return Err(broken(format!("the hold of {} is not in {held}", p.id)));
        }
        let posting = d.posting.as_mut().ok_or_else(|| broken("an approved movement that moves nothing"))?;
        let mut lines = move_all(&held, account, *amount);
        lines.append(&mut posting.lines);
        posting.lines = fold(lines);
        posting.refs.insert("pending".into(), p.id.as_str().into());
    }
    // What the charge reserved is spent now: its guards stay, its amount is not added twice.
    if p.reserved.is_some() {
        for m in &mut d.mandates {
            if let MandateWrite::Spend { amount, .. } = m {
                *amount = 0;
            }
        }
    }
    for a in p.parties() {
        if !d.parties.contains(&a) {
            d.parties.push(a);
        }
    }
    d.receipt.insert("pending".into(), p.to_value());
    d.pending = Some(PendingWrite::Update(Box::new(p.clone())));
    Ok(d)
}

/// An approval nobody decided before `expires`: the hold returns (by the house, no operator).
pub fn expire(p: &Pending, facts: &Facts, now: Timestamp) -> Result<(Option<Posting>, Pending), Error> {
    if p.state != ApprovalState::Pending || now < p.expires {
        return Err(refuse(Refusal::NotDue, format!("approval {} is not due to expire", p.id)));
    }
    let mut next = p.clone();
    next.state = ApprovalState::Expired;
    let posting = returned(&next, facts, obj([("key", format!("approval-expiry:{}", p.id).into())]))?;
    Ok((posting, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libro::kernel::decide;
    use crate::libro::model::Mandate;
    use nyx5_proto::libro::escrow_account;

    fn at(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    fn rules() -> Rules {
        Rules { house: "a.test".into(), fee_bps: 1000, approval_ttl_ms: 3_600_000 }
    }

    fn authority(text: &str) -> Authority {
        Authority::from_value(&Value::parse_str(text).unwrap()).unwrap()
    }

    fn mandate(id: &str, grantor: &str, grantee: &str, chain: &[&str], a: Option<&str>) -> Mandate {
        Mandate {
            id: id.into(),
            grantor: at(grantor),
            grantee: at(grantee),
            cap: 1000,
            spent: 0,
            concepts: None,
            expires: None,
            parent: chain.len().checked_sub(2).and_then(|i| chain.get(i)).map(|p| (*p).to_owned()),
            root: chain[0].into(),
            chain: chain.iter().map(|c| (*c).to_owned()).collect(),
            active: true,
            contract: None,
            authority: a.map(authority),
            approver: None,
            version: 1,
        }
    }

    /// ana → cy (m1, 50 alone) → eve (m2, 20 alone); eve charges.
    fn chain_facts() -> Facts {
        let mut f = Facts { known: true, ..Facts::default() };
        f.chain = vec![
            mandate(
                "m1",
                "ana@a.test",
                "cy@a.test",
                &["m1"],
                Some(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok"}"#),
            ),
            mandate(
                "m2",
                "cy@a.test",
                "eve@a.test",
                &["m1", "m2"],
                Some(r#"{"level":"autonomous","consequence":"costly","max_amount":20,"currency":"tok"}"#),
            ),
        ];
        f.balances.insert("ana@a.test".into(), 500);
        f
    }

    fn charge(amount: i64) -> Op {
        Op::Charge { mandate: "m2".into(), amount, concept: "gpu".into() }
    }

    fn ctx(who: &str, id: &str) -> Ctx {
        Ctx::new(at(who), id.into(), "ab".repeat(32), Timestamp(1_800_000_000_000))
    }

    #[test]
    fn hold_accounts_never_name_a_contract_and_always_name_an_account() {
        assert_eq!(hold_account("c2"), "escrow:hold.c2");
        let long = "x".repeat(128);
        let named = hold_account(&long);
        assert!(named.starts_with("escrow:hold.-") && named.len() == "escrow:hold.-".len() + 32, "{named}");
        // A contract may not take a hold's name.
        assert_eq!(check_contract_id("hold.c2").unwrap_err().code(), 400);
        assert!(check_contract_id("c2").is_ok());
        for id in ["c2", long.as_str()] {
            assert!(nyx5_proto::libro::check_account(&hold_account(id)).is_ok());
            assert_ne!(hold_account(id), escrow_account(id));
        }
    }

    #[test]
    fn a_charge_past_both_caps_asks_each_link_of_its_own_approvers() {
        let facts = chain_facts();
        let gate = gate(&charge(60), &ctx("eve@a.test", "c1"), &facts).unwrap();
        let asks: Vec<(&str, Vec<&str>)> =
            gate.asks.iter().map(|a| (a.of.as_str(), a.approvers.iter().map(Address::as_str).collect())).collect();
        assert_eq!(asks, vec![("mandate:m1", vec!["ana@a.test"]), ("mandate:m2", vec!["ana@a.test", "cy@a.test"])]);
        // Within both, nothing asks; between them, only the lower link.
        assert!(gate_of(10).asks.is_empty());
        assert_eq!(gate_of(30).asks.iter().map(|a| a.of.as_str()).collect::<Vec<_>>(), vec!["mandate:m2"]);
    }

    fn gate_of(amount: i64) -> Gate {
        gate(&charge(amount), &ctx("eve@a.test", "c1"), &chain_facts()).unwrap()
    }

    #[test]
    fn a_waiting_charge_holds_its_debit_and_an_approval_pays_from_it_in_one_entry() {
        let facts = chain_facts();
        let d = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").unwrap();
        let Some(PendingWrite::Insert(p)) = &d.pending else { panic!("a pending approval: {d:?}") };
        assert_eq!(p.hold, Some(("ana@a.test".to_owned(), 60)));
        let hold = d.posting.as_ref().unwrap();
        assert_eq!(hold.lines, vec![Line::new("ana@a.test", -60), Line::new("escrow:hold.c1", 60)]);
        // Nothing else is written while it waits, but its amount counts in the chain's caps.
        assert!(d.contract.is_none());
        assert!(matches!(&d.mandates[..], [MandateWrite::Spend { amount: 60, links }] if links.len() == 2));
        assert_eq!(p.reserved, Some((vec!["m1".to_owned(), "m2".to_owned()], 60)));
        assert_eq!(
            d.parties.iter().map(Address::as_str).collect::<Vec<_>>(),
            ["eve@a.test", "ana@a.test", "cy@a.test"]
        );
        // cy's yes leaves ana's ask open; ana's completes it.
        let mut facts = facts;
        facts.pending = Some((**p).clone());
        let Step::Decided(after_cy) =
            approval(&Op::Approve { pending: "c1".into() }, &ctx("cy@a.test", "a1"), &facts).unwrap()
        else {
            panic!("cy alone does not complete it")
        };
        let Some(PendingWrite::Update(p1)) = &after_cy.pending else { panic!() };
        assert_eq!(p1.awaiting(), vec![at("ana@a.test")]);
        assert_eq!(after_cy.posting, None);
        facts.pending = Some((**p1).clone());
        let e = approval(&Op::Approve { pending: "c1".into() }, &ctx("eve@a.test", "a2"), &facts).unwrap_err();
        assert_eq!(e.code(), 403);
        let e = approval(&Op::Approve { pending: "c1".into() }, &ctx("bo@b.test", "a2"), &facts).unwrap_err();
        assert_eq!(e.code(), 404);
        let Step::Complete(done) =
            approval(&Op::Approve { pending: "c1".into() }, &ctx("ana@a.test", "a2"), &facts).unwrap()
        else {
            panic!("ana completes it")
        };
        assert_eq!(done.state.as_str(), "approved");
        // Decided again under the approval, on facts with the hold back with ana and in the hold.
        facts.balances.insert("ana@a.test".into(), 440);
        facts.balances.insert(hold_account("c1"), 60);
        for m in &mut facts.chain {
            m.spent = 60;
        }
        let again = with_hold_returned(&done, facts.clone());
        assert!(again.chain.iter().all(|m| m.spent == 0), "the reservation is the charge's own");
        let d = decide(&charge(60), &approved_ctx(&done, "a2", Timestamp(1_800_000_000_500)), &rules(), &again, "e2")
            .unwrap();
        let d = merge(&done, &again, d).unwrap();
        let posting = d.posting.unwrap();
        assert_eq!(
            posting.lines,
            vec![Line::new("escrow:hold.c1", -60), Line::new("eve@a.test", 54), Line::new("casa@a.test", 6)],
            "ana's line folds away: she paid when the hold was placed"
        );
        assert_eq!(posting.refs.get("pending").and_then(Value::as_str), Some("c1"));
        assert_eq!(posting.refs.get("approval").and_then(Value::as_str), Some("a2"));
        // Reserved when it asked, it is not spent twice: the guards stay, the amount is 0.
        assert!(matches!(&d.mandates[..], [MandateWrite::Spend { amount: 0, .. }]));
        // A hold that is not where it should be is never paid from.
        let mut short = again.clone();
        short.balances.insert(hold_account("c1"), 59);
        let d = decide(&charge(60), &approved_ctx(&done, "a2", Timestamp(1_800_000_000_500)), &rules(), &short, "e2")
            .unwrap();
        assert!(merge(&done, &short, d).is_err());
    }

    #[test]
    fn an_operator_waits_on_at_most_so_many_approvals_and_keeps_at_most_so_many() {
        let mut facts = chain_facts();
        facts.pending_count = MAX_PENDING - 1;
        facts.approvals_kept = MAX_APPROVALS_KEPT - 1;
        let d = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").unwrap();
        assert!(matches!(d.pending, Some(PendingWrite::Insert(_))));
        facts.pending_count = MAX_PENDING;
        let e = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").unwrap_err();
        assert_eq!((e.code(), e.refusal()), (409, Some(Refusal::TooManyPending)), "{e:?}");
        facts.pending_count = 0;
        facts.approvals_kept = MAX_APPROVALS_KEPT;
        let e = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").unwrap_err();
        assert_eq!((e.code(), e.refusal()), (409, Some(Refusal::TooManyApprovals)), "{e:?}");
        // What asks nobody is not bounded by either.
        assert!(decide(&charge(10), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").is_ok());
        // The house counts an operator's approvals only for an operation that may wait.
        assert!(may_wait(&charge(10)));
        assert!(!may_wait(&Op::Balance) && !may_wait(&Op::Revoke { mandate: "m1".into() }));
    }

    #[test]
    fn a_prohibited_link_refuses_even_an_approved_charge() {
        let mut facts = chain_facts();
        facts.chain[0].authority = Some(authority(r#"{"level":"prohibited","consequence":"reversible"}"#));
        let mut c = ctx("eve@a.test", "c1");
        assert_eq!(gate(&charge(1), &c, &facts).unwrap_err().code(), 403);
        c.approved = Some(Approved {
            pending: "c1".into(),
            by: vec![at("ana@a.test")],
            envelope: "a1".into(),
            asked: vec!["mandate:m1".into()],
        });
        assert_eq!(gate(&charge(1), &c, &facts).unwrap_err().code(), 403);
    }

    #[test]
    fn an_approval_expires_once_and_returns_what_it_held() {
        let facts = chain_facts();
        let d = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").unwrap();
        let Some(PendingWrite::Insert(p)) = d.pending else { panic!() };
        let mut held = Facts::default();
        held.balances.insert(hold_account("c1"), 60);
        assert!(expire(&p, &held, p.created).is_err(), "not before its time");
        let (posting, next) = expire(&p, &held, p.expires).unwrap();
        assert_eq!(next.state.as_str(), "expired");
        assert_eq!(posting.unwrap().lines, vec![Line::new("escrow:hold.c1", -60), Line::new("ana@a.test", 60)]);
        assert!(expire(&next, &held, p.expires).is_err(), "and only once");
        // Round trip through the stored record.
        let stored = next.to_value().as_object().unwrap().clone();
        let again = Pending::from_value(&stored, 2).unwrap();
        assert_eq!(again, Pending { version: 2, ..next });
        // A stored approval in a state none of the four is the house's own fault, never read as
        // one of them (issue 37 §5).
        let mut lost = stored;
        lost.insert("state".into(), "lost".into());
        assert_eq!(Pending::from_value(&lost, 2).unwrap_err().kind, ErrorKind::Internal);
    }

    /// A link whose only approver is the charge's own operator refuses the charge (403): nobody
    /// else could approve it. Kills `gate`: the guard `approvers.is_empty()` → `false` (an ask
    /// nobody may answer, left waiting).
    #[test]
    fn an_ask_only_its_operator_could_approve_refuses_the_charge() {
        // ana → cy (m1, 50 alone) → ana (m2): ana charging 60 through m2 passes m1's cap, and m1's
        // approver is its grantor, ana.
        let mut facts = chain_facts();
        facts.chain[1] = mandate("m2", "cy@a.test", "ana@a.test", &["m1", "m2"], None);
        let e = gate(&charge(60), &ctx("ana@a.test", "c1"), &facts).unwrap_err();
        assert_eq!(e.code(), 403);
        assert_eq!(e.refusal(), Some(Refusal::NoApprover), "{e:?}");
    }

    /// The receipt of a movement that waits is the approval itself. Kills `pending`: delete the
    /// field `receipt` of its decision.
    #[test]
    fn a_waiting_movements_receipt_is_its_approval() {
        let d = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &chain_facts(), "e1").unwrap();
        let Some(PendingWrite::Insert(p)) = &d.pending else { panic!("a pending approval: {d:?}") };
        assert_eq!(d.receipt, obj([("pending", p.to_value())]));
    }

    /// Each authority that allowed a movement is named in its entry and receipt, whole, with
    /// whose it is and the hour's movements with this one. Kills `Gate::apply`: `hour_ops + 1` →
    /// `- 1` or `* 1`, and delete the arm `Value::Object(o)`.
    #[test]
    fn an_entry_names_each_authority_that_allowed_it_and_its_hour() {
        let mut facts = chain_facts();
        facts.uses.insert("mandate:m1".into(), 3);
        let g = gate(&charge(10), &ctx("eve@a.test", "c1"), &facts).unwrap();
        let mut d = decide(&charge(10), &ctx("eve@a.test", "c1"), &rules(), &facts, "e1").unwrap();
        assert!(g.asks.is_empty());
        let shown = |link: usize, n: i64| {
            let Value::Object(mut o) = facts.chain[link].authority.as_ref().unwrap().to_value() else {
                panic!("an authority is an object")
            };
            o.insert("of".into(), format!("mandate:{}", facts.chain[link].id).into());
            o.insert("hour_ops".into(), n.into());
            Value::Object(o)
        };
        let want = Value::Object(obj([("allowed_by", Value::Array(vec![shown(0, 4), shown(1, 1)]))]));
        assert_eq!(d.receipt.get("authority"), Some(&want));
        assert_eq!(d.posting.as_ref().unwrap().meta.get("authority"), Some(&want));
        // `apply` again on a fresh decision writes the same.
        d.receipt = Object::new();
        g.apply(&mut d);
        assert_eq!(d.receipt.get("authority"), Some(&want));
    }

    /// An approval is noted beside the authorities that allowed the movement, not in their
    /// place. Kills `mark_approved`: delete the arm `Some(Value::Object(o))` (the note replacing
    /// `allowed_by`).
    #[test]
    fn an_approval_is_noted_beside_the_authorities_that_allowed_the_movement() {
        let allowed = Value::Object(obj([("allowed_by", Value::Array(vec!["x".into()]))]));
        let mut d = Decision::default();
        d.receipt.insert("authority".into(), allowed.clone());
        d.posting = Some(Posting {
            concept: "gpu".into(),
            lines: Vec::new(),
            meta: obj([("authority", allowed)]),
            refs: Object::new(),
        });
        let a = Approved { pending: "c1".into(), by: vec![at("ana@a.test")], envelope: "a2".into(), asked: Vec::new() };
        mark_approved(&mut d, &a);
        let want = Value::Object(obj([
            ("allowed_by", Value::Array(vec!["x".into()])),
            ("approved_by", Value::Array(vec!["ana@a.test".into()])),
            ("pending", "c1".into()),
            ("approval", "a2".into()),
        ]));
        assert_eq!(d.receipt.get("authority"), Some(&want));
        let p = d.posting.unwrap();
        assert_eq!(p.meta.get("authority"), Some(&want));
        assert_eq!(p.refs.get("approval").and_then(Value::as_str), Some("a2"));
    }

    /// A hold returns only from an account that holds at least its amount. Kills `returned`:
    /// `<` → `>`.
    #[test]
    fn a_hold_returns_only_when_its_account_holds_its_amount() {
        let d = decide(&charge(60), &ctx("eve@a.test", "c1"), &rules(), &chain_facts(), "e1").unwrap();
        let Some(PendingWrite::Insert(p)) = d.pending else { panic!() };
        for (held, returns) in [(59, false), (60, true), (61, true)] {
            let mut facts = Facts::default();
            facts.balances.insert(hold_account("c1"), held);
            assert_eq!(expire(&p, &facts, p.expires).is_ok(), returns, "{held} held");
        }
    }

    /// An approval waits at most 30 days. The CLI (`--approval-seconds`) and the Worker
    /// (`NYX5_APPROVAL_SECONDS`) bound the setting by it; their tests are outside this crate.
    /// Kills `MAX_APPROVAL_SECONDS`: `*` → `+` or `/`.
    #[test]
    fn an_approval_waits_at_most_thirty_days() {
        assert_eq!(MAX_APPROVAL_SECONDS, 2_592_000);
    }
}
