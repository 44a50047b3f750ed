//! What the Libro's kernel and its authority gate read and decide over (docs/SPEC.md §16–§18,
//! §16b): the house's [`Rules`], what it read ([`Facts`]) and who asks ([`Ctx`]), contracts,
//! mandates and approvals ([`Pending`]) with their codecs, and what an operation does
//! ([`Decision`]: the posting, the writes, the receipt). With them the small helpers both call:
//! lines folded and moved ([`fold`], [`move_all`], [`settle`]), and the refusals in their words.
//! Below both: [`super::kernel`] decides, [`super::authority`] gates, and this names neither.

use nyx5_proto::authority::Authority;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{field, obj};
use nyx5_proto::libro::{ESCROW_PREFIX, Line, house_account};
use nyx5_proto::quote::Referrer;
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Address, Error, ErrorKind, Object, Refusal, Timestamp, Value, limits};

use super::state::{self, ApprovalState, ContractState, MandateState, Role};

/// What the house's own configuration says.
#[derive(Debug, Clone)]
pub struct Rules {
    pub house: String,
    pub fee_bps: i64,
    /// How long a movement waits for approval before its hold returns.
    pub approval_ttl_ms: i64,
}

impl Rules {
    pub fn casa(&self) -> String {
        house_account(&self.house)
    }
}

/// `floor(amount × bps / 10000)`, never more than `amount`: a referrer's share.
pub fn part(amount: i64, bps: i64) -> i64 {
    let p = i128::from(amount) * i128::from(bps.clamp(0, limits::BPS_WHOLE)) / i128::from(limits::BPS_WHOLE);
    i64::try_from(p).unwrap_or(amount).min(amount)
}

/// The house's fee: `ceil(amount × bps / 10000)`, so no settlement under a fee is free (a fee
/// rounded down to nothing would let puppets trade at no cost and split payments to dodge it).
/// With the share rounded down, fee and share never pass the amount while `bps + share ≤ 10000`.
pub fn fee(amount: i64, bps: i64) -> i64 {
    let whole = i128::from(limits::BPS_WHOLE);
    let p = (i128::from(amount) * i128::from(bps.clamp(0, limits::BPS_WHOLE)) + whole - 1) / whole;
    i64::try_from(p).unwrap_or(amount).min(amount)
}

/// Lines folded by account, zero deltas dropped, in first-appearance order.
pub fn fold(lines: Vec<Line>) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for l in lines {
        match out.iter_mut().find(|o| o.account == l.account) {
            Some(o) => o.delta += l.delta,
            None => out.push(l),
        }
    }
    out.retain(|l| l.delta != 0);
    out
}

/// A settlement with fee (charge, release, stamp): `from` pays `amount`; the house takes its fee,
/// a referrer its share of the seller's part, `to` the rest.
pub fn settle(from: &str, to: &str, amount: i64, rules: &Rules, referrer: Option<&Referrer>) -> (Vec<Line>, Object) {
    let fee = fee(amount, rules.fee_bps);
    let share = referrer.map_or(0, |r| part(amount, r.share_bps));
    let rest = amount - fee - share;
    let mut lines = vec![Line::new(from, -amount), Line::new(to, rest), Line::new(rules.casa(), fee)];
    let mut meta = obj([("fee", fee.into())]);
    if let Some(r) = referrer {
        lines.push(Line::new(r.address.as_str(), share));
        meta.insert("share".into(), share.into());
        meta.insert("referrer".into(), r.address.as_str().into());
    }
    (fold(lines), meta)
}

/// A movement without fee (hold, refund, bond, forfeit, a bond's return).
pub fn move_all(from: &str, to: &str, amount: i64) -> Vec<Line> {
    fold(vec![Line::new(from, -amount), Line::new(to, amount)])
}

/// The kind of a contract (§17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Spot,
    Escrow,
    Bond,
    Metered,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Spot => "spot",
            Kind::Escrow => "escrow",
            Kind::Bond => "bond",
            Kind::Metered => "metered",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "spot" => Kind::Spot,
            "escrow" => Kind::Escrow,
            "bond" => Kind::Bond,
            "metered" => Kind::Metered,
            _ => return None,
        })
    }
}

/// The `acp` view of a contract's state (§17's table).
pub fn acp(kind: Kind, state: ContractState) -> Value {
    use ContractState as S;
    let (phase, outcome) = match (kind, state) {
        (_, S::Held | S::Posted | S::Active) => ("Funded", None),
        (_, S::Delivered) => ("Submitted", None),
        (Kind::Bond, S::Released) => ("Terminal", Some("returned")),
        (_, S::Released) => ("Terminal", Some("completed")),
        (_, S::Refunded) => ("Terminal", Some("refunded")),
        (_, S::Settled) => ("Terminal", Some("paid")),
        (_, S::Forfeited) => ("Terminal", Some("forfeited")),
        (_, S::Accepted) => ("Open", None),
    };
    let mut o = obj([("phase", phase.into())]);
    if let Some(outcome) = outcome {
        o.insert("outcome".into(), outcome.into());
    }
    Value::Object(o)
}

/// A contract as the house keeps it: the typed fields the kernel decides on, and its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Contract {
    pub id: String,
    pub kind: Kind,
    pub state: ContractState,
    pub amount: i64,
    pub version: i64,
    /// The record: `{id, kind, house, seller?, buyer?, …, state, history}` (docs/SPEC.md §16).
    pub record: Object,
}

fn party(record: &Object, role: Role) -> Option<Address> {
    record.get(role.as_str()).and_then(Value::as_str).and_then(|s| Address::parse(s).ok())
}

impl Contract {
    /// Reads a stored record (and its version).
    pub fn from_record(record: Object, version: i64) -> Result<Contract, Error> {
        let bad = |what: &str| Error::new(ErrorKind::Internal, format!("stored contract: {what}"));
        let kind = Kind::parse(field::str(&record, "kind").map_err(|_| bad("kind"))?).ok_or_else(|| bad("kind"))?;
        let said = field::str(&record, "state").map_err(|_| bad("state"))?;
        Ok(Contract {
            id: field::str(&record, "id").map_err(|_| bad("id"))?.to_owned(),
            kind,
            state: ContractState::parse(said).ok_or_else(|| state::stored("contract state", said))?,
            amount: field::integer(&record, "amount").map_err(|_| bad("amount"))?,
            version,
            record,
        })
    }

    /// The party it names in `role`, if any.
    pub fn get(&self, role: Role) -> Option<Address> {
        party(&self.record, role)
    }

    /// Whether `who` is its party in `role`.
    pub fn is(&self, role: Role, who: &Address) -> bool {
        self.get(role).as_ref() == Some(who)
    }

    pub fn expires(&self) -> Option<Timestamp> {
        self.record.get("expires").and_then(Value::as_str).and_then(|t| Timestamp::parse(t).ok())
    }

    pub fn referrer(&self) -> Option<Referrer> {
        let r = self.record.get("referrer")?.as_object()?;
        Some(Referrer {
            address: Address::parse(r.get("address")?.as_str()?).ok()?,
            share_bps: r.get("share")?.as_safe_integer()?,
        })
    }

    /// Everyone named in the contract, each once.
    pub fn parties(&self) -> Vec<Address> {
        let mut out: Vec<Address> = Vec::new();
        use Role as R;
        for role in [R::Buyer, R::Seller, R::Bondholder, R::Verifier, R::Beneficiary, R::Arbiter, R::Vouchee] {
            if let Some(a) = self.get(role)
                && !out.contains(&a)
            {
                out.push(a);
            }
        }
        out
    }

    /// Whether `who` is a party.
    pub fn has_party(&self, who: &Address) -> bool {
        self.parties().contains(who)
    }

    /// The public view: the record and its `acp`.
    pub fn view(&self) -> Value {
        let mut v = self.record.clone();
        v.insert("acp".into(), acp(self.kind, self.state));
        Value::Object(v)
    }

    pub(super) fn moved(&self, state: ContractState, event: Object) -> Contract {
        let mut next = self.clone();
        next.state = state;
        next.record.insert("state".into(), state.as_str().into());
        let mut history =
            next.record.get("history").and_then(Value::as_array).map(<[Value]>::to_vec).unwrap_or_default();
        history.push(Value::Object(event));
        next.record.insert("history".into(), Value::Array(history));
        next
    }
}

/// A mandate (§18).
#[derive(Debug, Clone, PartialEq)]
pub struct Mandate {
    pub id: String,
    pub grantor: Address,
    pub grantee: Address,
    pub cap: i64,
    pub spent: i64,
    pub concepts: Option<Vec<String>>,
    pub expires: Option<Timestamp>,
    pub parent: Option<String>,
    pub root: String,
    pub chain: Vec<String>,
    pub active: bool,
    pub contract: Option<String>,
    /// How far its grantee goes alone; the ceiling of every sub-mandate under it.
    pub authority: Option<Authority>,
    /// Who decides what its authority asks, when not its grantor: the parent of a grantor whose
    /// own card's authority was the ceiling (a subagent does not approve its own spending).
    pub approver: Option<Address>,
    pub version: i64,
}

impl Mandate {
    pub fn to_value(&self) -> Value {
        let scope = match &self.concepts {
            Some(c) => obj([("concepts", Value::Array(c.iter().map(|s| s.as_str().into()).collect()))]),
            None => Object::new(),
        };
        let mut o = obj([
            ("id", self.id.as_str().into()),
            ("grantor", self.grantor.as_str().into()),
            ("grantee", self.grantee.as_str().into()),
            ("cap", self.cap.into()),
            ("spent", self.spent.into()),
            ("scope", Value::Object(scope)),
            ("expires", self.expires.map(|t| t.to_rfc3339()).into()),
            ("parent", self.parent.clone().into()),
            ("root", self.root.as_str().into()),
            ("chain", Value::Array(self.chain.iter().map(|s| s.as_str().into()).collect())),
            ("state", if self.active { MandateState::Active } else { MandateState::Revoked }.as_str().into()),
            ("contract", self.contract.clone().into()),
        ]);
        if let Some(a) = &self.authority {
            o.insert("authority".into(), a.to_value());
        }
        if let Some(a) = &self.approver {
            o.insert("approver".into(), a.as_str().into());
        }
        Value::Object(o)
    }

    pub fn from_value(v: &Object, version: i64) -> Result<Mandate, Error> {
        let bad = |e: Error| Error::new(ErrorKind::Internal, format!("stored mandate: {}", e.reason));
        let strings = |name: &str| -> Result<Vec<String>, Error> {
            Ok(field::array(v, name)?.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        };
        let said = field::str(v, "state").map_err(bad)?;
        let concepts = match field::object(v, "scope").map_err(bad)?.get("concepts") {
            Some(Value::Array(a)) => Some(a.iter().filter_map(Value::as_str).map(str::to_owned).collect()),
            _ => None,
        };
        Ok(Mandate {
            id: field::str(v, "id").map_err(bad)?.to_owned(),
            grantor: Address::parse(field::str(v, "grantor").map_err(bad)?).map_err(bad)?,
            grantee: Address::parse(field::str(v, "grantee").map_err(bad)?).map_err(bad)?,
            cap: field::integer(v, "cap").map_err(bad)?,
            spent: field::integer(v, "spent").map_err(bad)?,
            concepts,
            expires: field::opt_str(v, "expires").map_err(bad)?.map(Timestamp::parse).transpose().map_err(bad)?,
            parent: field::opt_str(v, "parent").map_err(bad)?.map(str::to_owned),
            root: field::str(v, "root").map_err(bad)?.to_owned(),
            chain: strings("chain").map_err(bad)?,
            active: MandateState::parse(said).ok_or_else(|| state::stored("mandate state", said))?
                == MandateState::Active,
            contract: field::opt_str(v, "contract").map_err(bad)?.map(str::to_owned),
            authority: v.get("authority").map(Authority::from_value).transpose().map_err(bad)?,
            approver: field::opt_str(v, "approver").map_err(bad)?.map(Address::parse).transpose().map_err(bad)?,
            version,
        })
    }

    pub(super) fn expired(&self, now: Timestamp) -> bool {
        self.expires.is_some_and(|e| now >= e)
    }

    pub(super) fn allows(&self, concept: &str) -> bool {
        self.concepts.as_ref().is_none_or(|c| c.iter().any(|x| x == concept))
    }
}

/// What the house read before deciding.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Balances of the accounts the operation may touch (absent = 0).
    pub balances: VecMap<String, i64>,
    /// The contract the operation names (for `accept`: one with the quote's id, if any).
    pub contract: Option<Contract>,
    /// The mandate the operation names and every mandate above it, root first.
    pub chain: Vec<Mandate>,
    /// The operator has an account here (a local agent always has).
    pub known: bool,
    /// Active mandates the operator granted.
    pub active_mandates: i64,
    /// The contract's delivery is one `verifica@` gave up checking (its last attempt undecided):
    /// a delivery nobody could check, which its buyer may refund (docs/SPEC.md §22).
    pub unchecked: bool,
    /// Movements each authority allowed in the past hour, by subject (`card:<address>`,
    /// `mandate:<id>`).
    pub uses: VecMap<String, i64>,
    /// The pending approval the operation decides (approve, decline).
    pub pending: Option<Pending>,
    /// Approvals the operator has waiting.
    pub pending_count: i64,
    /// Approvals of the operator's movements kept, waiting or decided.
    pub approvals_kept: i64,
    /// For a revoke: the grantees of the active mandates under the one named (at most
    /// [`super::kernel::MAX_CASCADE_NOTICES`], distinct), and how many active mandates are under
    /// it in all.
    pub below: Vec<Address>,
    pub below_count: i64,
}

impl Facts {
    pub fn balance(&self, account: &str) -> i64 {
        self.balances.get(account).copied().unwrap_or(0)
    }
}

/// Who operates, with which envelope, when.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub operator: Address,
    /// The operating envelope's id and hex SHA-256.
    pub envelope: String,
    pub sha256: String,
    pub now: Timestamp,
    /// The operator's own authority, when its card is delegated with one, and who delegated it.
    pub card: Option<CardRule>,
    /// The movement was approved by a human (`approve`): the gates lift, prohibition does not.
    pub approved: Option<Approved>,
    /// The operating envelope's own `expires`: an approval it waits for ends no later.
    pub expires: Option<Timestamp>,
}

/// A delegated card's authority, and who approves what it asks: the nearest agent up its
/// chain of delegations that is ruled by no authority of its own (a subagent never approves
/// for a subagent it made).
#[derive(Debug, Clone, PartialEq)]
pub struct CardRule {
    pub authority: Authority,
    pub delegator: Address,
}

impl CardRule {
    pub fn to_value(&self) -> Value {
        Value::Object(obj([("authority", self.authority.to_value()), ("approver", self.delegator.as_str().into())]))
    }

    pub fn from_value(v: &Object) -> Result<CardRule, Error> {
        Ok(CardRule {
            authority: Authority::from_value(field::required(v, "authority")?)?,
            delegator: Address::parse(field::str(v, "approver")?)?,
        })
    }
}

/// Who approved a pending movement, and which.
#[derive(Debug, Clone)]
pub struct Approved {
    pub pending: String,
    pub by: Vec<Address>,
    /// The `approve` envelope that completed it.
    pub envelope: String,
    /// The authorities whose asks were approved (`card:…`, `mandate:…`): only their gates lift.
    pub asked: Vec<String>,
}

impl Ctx {
    /// A context with no authority of the operator's own and no approval.
    pub fn new(operator: Address, envelope: String, sha256: String, now: Timestamp) -> Ctx {
        Ctx { operator, envelope, sha256, now, card: None, approved: None, expires: None }
    }
}

/// An entry to post, before the house numbers and signs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Posting {
    pub concept: String,
    pub lines: Vec<Line>,
    pub meta: Object,
    pub refs: Object,
}

/// What changes in the contract table.
#[derive(Debug, Clone, PartialEq)]
pub enum ContractWrite {
    Insert(Contract),
    /// The contract as it becomes; the batch guards that it still has `version`.
    Update(Contract),
}

/// What changes in the mandate table.
#[derive(Debug, Clone, PartialEq)]
pub enum MandateWrite {
    Insert(Box<Mandate>),
    /// `spent` of these mandates (each guarded by its version) rises by `amount`.
    Spend {
        links: Vec<(String, i64)>,
        amount: i64,
    },
    /// This mandate and everything under it are revoked (guarded by its version, and by the
    /// number of active mandates under it: those told of it are those revoked).
    Revoke {
        id: String,
        version: i64,
        below: i64,
    },
    /// `spent` of these mandates falls by `amount`: what a charge waiting for approval reserved,
    /// given back (declined, expired). The approval's own guard makes it happen once.
    Unspend {
        links: Vec<String>,
        amount: i64,
    },
}

/// A deadline notice to send through the queue (docs/SPEC.md §16).
#[derive(Debug, Clone, PartialEq)]
pub struct Deadline {
    /// The contract it is the deadline of: the notices' ids derive from it, so that settling
    /// the contract can cancel them (`libro::deadline_notice_ids`).
    pub contract: String,
    pub at: Timestamp,
    pub to: Vec<Address>,
    pub body: Object,
}

/// What an operation does.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    pub posting: Option<Posting>,
    pub contract: Option<ContractWrite>,
    pub mandates: Vec<MandateWrite>,
    /// Who gets a receipt, the operator first.
    pub parties: Vec<Address>,
    /// Members of the receipt beyond the common ones (`contract`, `mandate`, `chain`, …).
    pub receipt: Object,
    /// What the operation reads for the operator (`statement`: the account's entries).
    pub read: Option<Read>,
    pub deadlines: Vec<Deadline>,
    /// The contract `verifica@` now owes a check (a delivery of an escrow naming it arbiter with
    /// `terms.verify`; docs/SPEC.md §22).
    pub verify: Option<String>,
    /// A movement waiting for approval, or one decided (docs/SPEC.md §16b).
    pub pending: Option<PendingWrite>,
    /// What the authorities with an hourly limit count of this movement.
    pub uses: Vec<Use>,
}

/// A read the receipt needs that the kernel cannot do itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Statement { account: String, limit: i64 },
}

pub(super) fn refuse(refusal: Refusal, reason: impl Into<String>) -> Error {
    refusal.because(reason.into())
}

/// `e` said again in other words, keeping its name, as a refusal of `kind`: the name of a cause
/// some rule below named already (an authority looser than its ceiling, evidence the terms do
/// not admit) is the one a client branches on. An `e` of another kind (no rule answers one now)
/// is refused as `kind` by that kind's own name.
pub(super) fn reword(e: Error, kind: ErrorKind, say: impl FnOnce(&str) -> String) -> Error {
    let reason = say(&e.reason);
    if e.kind == kind { e.with_reason(reason) } else { Error::new(kind, reason) }
}

/// What the house's own records should never say (500; the reason is logged, never sent).
pub(super) fn broken(reason: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, reason.into())
}

/// What starts every hold account's id; no contract's id may start so
/// ([`super::authority::check_contract_id`]).
pub const HOLD_PREFIX: &str = "hold.";

/// The account that holds what a pending movement would pay: `escrow:hold.<id>`, or, for an id
/// too long to name an account, `escrow:hold.-<hash>` (no id starts with `-`, so the two forms
/// never meet).
pub fn hold_account(id: &str) -> String {
    let named = format!("{HOLD_PREFIX}{id}");
    if nyx5_proto::address::check_id(&named).is_ok() {
        format!("{ESCROW_PREFIX}{named}")
    } else {
        format!("{ESCROW_PREFIX}{HOLD_PREFIX}-{}", hex(&sha256(id.as_bytes())).get(..32).unwrap_or_default())
    }
}

/// What one authority asked of a human.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Whose authority: `card:<address>` or `mandate:<id>`.
    pub of: String,
    pub reason: String,
    /// Who may approve it: the subagent's parent; the grantor of the link or any above it.
    pub approvers: Vec<Address>,
    pub authority: Authority,
}

impl Ask {
    pub(super) fn to_value(&self) -> Value {
        Value::Object(obj([
            ("of", self.of.as_str().into()),
            ("reason", self.reason.as_str().into()),
            ("approvers", addresses(&self.approvers)),
            ("authority", self.authority.to_value()),
        ]))
    }

    fn from_value(v: &Value) -> Result<Ask, Error> {
        let o = v.as_object().ok_or_else(|| stored("ask"))?;
        Ok(Ask {
            of: field::str(o, "of")?.to_owned(),
            reason: field::str(o, "reason")?.to_owned(),
            approvers: read_addresses(o, "approvers")?,
            authority: Authority::from_value(field::required(o, "authority")?)?,
        })
    }
}

pub(super) fn addresses(list: &[Address]) -> Value {
    Value::Array(list.iter().map(|a| a.as_str().into()).collect())
}

fn read_addresses(o: &Object, name: &str) -> Result<Vec<Address>, Error> {
    field::array(o, name)?.iter().map(|a| Address::parse(a.as_str().unwrap_or_default())).collect()
}

fn stored(what: &str) -> Error {
    Error::new(ErrorKind::Internal, format!("stored approval: {what}"))
}

/// A movement waiting for approval (docs/SPEC.md §16b), as the house keeps it and receipts
/// show it. Its id is the operating envelope's.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub id: String,
    pub house: String,
    pub operator: Address,
    pub op: String,
    pub op_sha256: String,
    /// What it holds: the account that would pay, and how much (none for a grant).
    pub hold: Option<(String, i64)>,
    pub concept: String,
    /// What the movement is, for whoever decides: counterparty, amount or cap, quote, parent.
    pub summary: Object,
    /// The operator's own card's rule when it asked, kept for the movement's decision once
    /// approved (a mandate it grants keeps its ceiling and its approver).
    pub card: Option<CardRule>,
    /// What a waiting charge reserved of its chain's caps: the links, and the amount counted in
    /// their `spent` until it is decided (given back when declined or expired).
    pub reserved: Option<(Vec<String>, i64)>,
    pub asks: Vec<Ask>,
    pub approved_by: Vec<Address>,
    pub state: ApprovalState,
    pub created: Timestamp,
    pub expires: Timestamp,
    pub decided_by: Option<Address>,
    pub note: Option<String>,
    pub version: i64,
}

impl Pending {
    pub fn to_value(&self) -> Value {
        let hold = match &self.hold {
            Some((account, amount)) => Value::Object(obj([
                ("account", account.as_str().into()),
                ("amount", (*amount).into()),
                ("held_in", hold_account(&self.id).into()),
            ])),
            None => Value::Null,
        };
        let mut o = obj([
            ("id", self.id.as_str().into()),
            ("house", self.house.as_str().into()),
            ("operator", self.operator.as_str().into()),
            ("op", self.op.as_str().into()),
            ("op_sha256", self.op_sha256.as_str().into()),
            ("hold", hold),
            ("concept", self.concept.as_str().into()),
            ("summary", Value::Object(self.summary.clone())),
            ("asks", Value::Array(self.asks.iter().map(Ask::to_value).collect())),
            ("approved_by", addresses(&self.approved_by)),
            ("awaiting", addresses(&self.awaiting())),
            ("state", self.state.as_str().into()),
            ("created", self.created.to_rfc3339().into()),
            ("expires", self.expires.to_rfc3339().into()),
        ]);
        if let Some(c) = &self.card {
            o.insert("card".into(), c.to_value());
        }
        if let Some((links, amount)) = &self.reserved {
            let links = Value::Array(links.iter().map(|l| l.as_str().into()).collect());
            o.insert("reserved".into(), Value::Object(obj([("links", links), ("amount", (*amount).into())])));
        }
        if let Some(d) = &self.decided_by {
            o.insert("decided_by".into(), d.as_str().into());
        }
        if let Some(n) = &self.note {
            o.insert("note".into(), n.as_str().into());
        }
        Value::Object(o)
    }

    pub fn from_value(v: &Object, version: i64) -> Result<Pending, Error> {
        let time = |name: &str| Timestamp::parse(field::str(v, name)?);
        let hold = match v.get("hold") {
            Some(Value::Object(h)) => Some((field::str(h, "account")?.to_owned(), field::integer(h, "amount")?)),
            _ => None,
        };
        let asks = field::array(v, "asks")?.iter().map(Ask::from_value).collect::<Result<Vec<_>, _>>()?;
        Ok(Pending {
            id: field::str(v, "id")?.to_owned(),
            house: field::str(v, "house")?.to_owned(),
            operator: Address::parse(field::str(v, "operator")?)?,
            op: field::str(v, "op")?.to_owned(),
            op_sha256: field::str(v, "op_sha256")?.to_owned(),
            hold,
            concept: field::str(v, "concept")?.to_owned(),
            summary: field::opt_object(v, "summary")?.cloned().unwrap_or_default(),
            card: field::opt_object(v, "card")?.map(CardRule::from_value).transpose()?,
            reserved: match field::opt_object(v, "reserved")? {
                Some(r) => Some((
                    field::array(r, "links")?.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                    field::integer(r, "amount")?,
                )),
                None => None,
            },
            asks,
            approved_by: read_addresses(v, "approved_by")?,
            state: {
                let said = field::str(v, "state")?;
                ApprovalState::parse(said).ok_or_else(|| state::stored("approval state", said))?
            },
            created: time("created")?,
            expires: time("expires")?,
            decided_by: field::opt_str(v, "decided_by")?.map(Address::parse).transpose()?,
            note: field::opt_str(v, "note")?.map(str::to_owned),
            version,
        })
    }

    /// Everyone who may approve one of its asks, each once.
    pub fn approvers(&self) -> Vec<Address> {
        let mut out: Vec<Address> = Vec::new();
        for a in self.asks.iter().flat_map(|a| a.approvers.iter()) {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }

    /// The operator and every approver: who may see it (to anyone else it does not exist).
    pub fn parties(&self) -> Vec<Address> {
        let mut out = vec![self.operator.clone()];
        for a in self.approvers() {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }

    /// The asks nobody who may approve them has approved yet.
    fn open_asks(&self) -> impl Iterator<Item = &Ask> {
        self.asks.iter().filter(|a| !a.approvers.iter().any(|x| self.approved_by.contains(x)))
    }

    /// Who could approve what is still open.
    pub fn awaiting(&self) -> Vec<Address> {
        let mut out: Vec<Address> = Vec::new();
        for a in self.open_asks().flat_map(|a| a.approvers.iter()) {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }
}

/// What changes in the approvals table.
#[derive(Debug, Clone, PartialEq)]
pub enum PendingWrite {
    Insert(Box<Pending>),
    /// The approval as it becomes; the batch guards that it still has its version.
    Update(Box<Pending>),
}

/// A movement an authority with an hourly limit counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub subject: String,
    pub amount: i64,
    /// Its `max_per_hour`: the batch refuses a count past it (a race lost); none for a movement
    /// a human approved past it.
    pub limit: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(fee_bps: i64) -> Rules {
        Rules { house: "a.test".into(), fee_bps, approval_ttl_ms: 86_400_000 }
    }

    fn sum(lines: &[Line]) -> i64 {
        lines.iter().map(|l| l.delta).sum()
    }

    #[test]
    fn a_settlement_pays_fee_and_referrer_from_the_sellers_part() {
        let r = Referrer { address: Address::parse("ref@b.test").unwrap(), share_bps: 1500 };
        let (lines, meta) = settle("buyer@a.test", "seller@b.test", 40, &rules(1000), Some(&r));
        assert_eq!(
            lines,
            vec![
                Line::new("buyer@a.test", -40),
                Line::new("seller@b.test", 30),
                Line::new("casa@a.test", 4),
                Line::new("ref@b.test", 6)
            ]
        );
        assert_eq!((meta["fee"].as_safe_integer(), meta["share"].as_safe_integer()), (Some(4), Some(6)));
        // Rounding down never leaves a line unbalanced, and a zero fee is no line.
        // The fee rounds up: no settlement under a fee is free.
        let (lines, _) = settle("b@a.test", "s@a.test", 9, &rules(1000), None);
        assert_eq!(lines, vec![Line::new("b@a.test", -9), Line::new("s@a.test", 8), Line::new("casa@a.test", 1)]);
        assert_eq!(sum(&lines), 0);
        let (lines, _) = settle("b@a.test", "s@a.test", 9, &rules(0), None);
        assert_eq!(lines, vec![Line::new("b@a.test", -9), Line::new("s@a.test", 9)]);
        // Fee and share at their largest still leave no one but the payer below zero.
        let r = Referrer { address: Address::parse("ref@b.test").unwrap(), share_bps: 9000 };
        for amount in 1..50 {
            let (lines, _) = settle("b@a.test", "s@a.test", amount, &rules(1000), Some(&r));
            assert_eq!(sum(&lines), 0);
            assert!(lines.iter().all(|l| l.account == "b@a.test" || l.delta > 0), "{amount}: {lines:?}");
        }
        // Paying oneself folds into one line per account.
        let (lines, _) = settle("s@a.test", "s@a.test", 10, &rules(1000), None);
        assert_eq!(lines, vec![Line::new("s@a.test", -1), Line::new("casa@a.test", 1)]);
    }

    #[test]
    fn parts_round_down_and_never_pass_the_whole() {
        assert_eq!(part(40, 1000), 4);
        assert_eq!(part(9, 1000), 0);
        assert_eq!(part(limits::MAX_AMOUNT, 10_000), limits::MAX_AMOUNT);
        assert_eq!(part(10, 20_000), 10);
        assert_eq!(part(10, -5), 0);
        assert_eq!((fee(9, 1000), fee(10, 1000), fee(11, 1000), fee(1, 1)), (1, 1, 2, 1));
        assert_eq!((fee(0, 1000), fee(7, 0), fee(limits::MAX_AMOUNT, 10_000)), (0, 0, limits::MAX_AMOUNT));
    }

    #[test]
    fn acp_follows_the_table() {
        let phase = |k, s| acp(k, ContractState::parse(s).unwrap()).as_object().unwrap().clone();
        assert_eq!(phase(Kind::Escrow, "held")["phase"].as_str(), Some("Funded"));
        assert_eq!(phase(Kind::Escrow, "delivered")["phase"].as_str(), Some("Submitted"));
        assert_eq!(phase(Kind::Escrow, "released")["outcome"].as_str(), Some("completed"));
        assert_eq!(phase(Kind::Bond, "released")["outcome"].as_str(), Some("returned"));
        assert_eq!(phase(Kind::Spot, "settled")["outcome"].as_str(), Some("paid"));
        assert_eq!(phase(Kind::Bond, "forfeited")["outcome"].as_str(), Some("forfeited"));
        assert_eq!(phase(Kind::Escrow, "refunded")["outcome"].as_str(), Some("refunded"));
        assert!(!phase(Kind::Metered, "active").contains_key("outcome"));
        assert_eq!(phase(Kind::Escrow, "accepted")["phase"].as_str(), Some("Open"));
    }

    /// A contract or mandate the house stored in a state it does not know is its own fault
    /// (500), never read as some state: not a contract that moves on, nor a mandate revoked by a
    /// typo (issue 37 §5).
    #[test]
    fn a_stored_state_none_of_the_known_is_the_houses_fault() {
        let contract = |state: &str| {
            let record = obj([
                ("id", "c1".into()),
                ("kind", "escrow".into()),
                ("state", state.into()),
                ("amount", 10.into()),
                ("buyer", "ana@a.test".into()),
            ]);
            Contract::from_record(record, 1)
        };
        assert_eq!(contract("held").unwrap().state, ContractState::Held);
        assert_eq!(contract("Held").unwrap_err().kind, ErrorKind::Internal);
        assert_eq!(contract("holding").unwrap_err().kind, ErrorKind::Internal);
        let m = Mandate {
            id: "m1".into(),
            grantor: Address::parse("ana@a.test").unwrap(),
            grantee: Address::parse("bo@a.test").unwrap(),
            cap: 100,
            spent: 0,
            concepts: None,
            expires: None,
            parent: None,
            root: "m1".into(),
            chain: vec!["m1".into()],
            active: true,
            contract: None,
            authority: None,
            approver: None,
            version: 1,
        };
        let stored = |state: &str| {
            let mut v = m.to_value().as_object().unwrap().clone();
            v.insert("state".into(), state.into());
            Mandate::from_value(&v, 1)
        };
        assert!(stored("active").unwrap().active);
        assert!(!stored("revoked").unwrap().active);
        assert_eq!(stored("paused").unwrap_err().kind, ErrorKind::Internal);
    }
}
