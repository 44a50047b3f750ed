//! Inbound policies (spec §9), decided as pure functions: what the lists say about a sender,
//! the recipient's `inbox.policy`, and the envelope give accept or a refusal with its code.
//!
//! Blocklist first, always. Then `open` (a rate limit per sending domain), `allowlist` (listed
//! senders; strangers only with an `intro` of up to 4 KB), `pow` (allowlisted senders exempt)
//! and `stamp` (a charge in the Libro, which the mailbox posts in the batch that stores the
//! envelope). A stranger may also enter an allowlist with a vouch: a bond a listed voucher posted
//! for it (`urn:nyx5:ext:aval`, judged by [`vouch`]).

use nyx5_proto::address::check_domain;
use nyx5_proto::envelope::Kind;
use nyx5_proto::{Address, Envelope, Error, Object, Refusal, Value, limits, pow};

use crate::site::Psl;

/// Bits asked by a `pow` inbox that does not say `pow_bits` (spec §9's example).
pub const DEFAULT_POW_BITS: u32 = nyx5_proto::pow::DEFAULT_BITS;
/// An agent's two lists (`GET /lists/:local`), in the order they are written.
pub const LIST_KINDS: [&str; 2] = ["allow", "block"];
/// Most entries one agent's allow or block list may hold.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Most additions and removals in one `POST /lists/:local`.
pub const MAX_LIST_CHANGES: usize = 100;
/// The extension a voucher's bond travels under (spec §9).
pub const EXT_AVAL: &str = "urn:nyx5:ext:aval";

/// A recipient's `inbox.policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    Open,
    Allowlist,
    Pow {
        bits: u32,
    },
    /// A stamp of at least `price` tokens, charged in this house's Libro.
    Stamp {
        price: i64,
    },
    Unknown(String),
}

impl Policy {
    /// Reads a card's `inbox` object; no `policy` means `open`. `pow_bits` defaults to
    /// [`DEFAULT_POW_BITS`] and never exceeds [`limits::MAX_POW_BITS`].
    pub fn of(inbox: &Object) -> Policy {
        match inbox.get("policy").and_then(Value::as_str) {
            None | Some("open") => Policy::Open,
            Some("allowlist") => Policy::Allowlist,
            Some("pow") => Policy::Pow { bits: nyx5_proto::pow::bits_asked(inbox) },
            Some("stamp") => {
                let price = inbox.get("price").and_then(Value::as_safe_integer).filter(|p| *p > 0).unwrap_or(1);
                Policy::Stamp { price }
            }
            Some(other) => Policy::Unknown(other.to_owned()),
        }
    }
}

/// What the house knows about the sender, from the recipient's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The sender's address or domain is on the recipient's blocklist.
    pub blocked: bool,
    /// The sender's address or domain is on the recipient's allowlist.
    pub allowed: bool,
    /// Envelopes from the sender's domain already counted in this minute's window.
    pub rate_count: i64,
    /// The most per minute (`inbound_per_domain_per_minute`).
    pub rate_cap: i64,
    /// What the sender has in this house's Libro (for a stamp).
    pub balance: i64,
    /// What the envelope's vouch is worth, if it carries one.
    pub vouch: Vouch,
}

/// The verdict on a vouch (`urn:nyx5:ext:aval`, spec §9) for one recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouch {
    /// The envelope carries none.
    Absent,
    Valid,
    Refused(VouchFault),
}

/// Why a vouch does not open the mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VouchFault {
    Malformed,
    NoBond,
    NotPosted,
    Expired,
    NotVoucher,
    NotVouchee,
    NotRecipients,
    VoucherNotAllowed,
}

impl VouchFault {
    fn reason(self) -> &'static str {
        match self {
            VouchFault::Malformed => "the vouch is `{voucher, bond}`",
            VouchFault::NoBond => "the vouch names no bond of this house",
            VouchFault::NotPosted => "the vouching bond is no longer posted",
            VouchFault::Expired => "the vouching bond expires within 7 days",
            VouchFault::NotVoucher => "the vouching bond was not posted by the voucher",
            VouchFault::NotVouchee => "the vouching bond does not vouch for this sender",
            VouchFault::NotRecipients => {
                "the vouching bond must name the recipient as verifier and beneficiary, and no other arbiter"
            }
            VouchFault::VoucherNotAllowed => "the voucher is not on the recipient's allowlist",
        }
    }
}

/// The `{voucher, bond}` an envelope carries under [`EXT_AVAL`], if any (`Err` when malformed).
pub fn aval(env: &Envelope) -> Option<Result<(Address, String), VouchFault>> {
    let ext = env.object().get("extensions").and_then(Value::as_object)?.get(EXT_AVAL)?;
    let read = || -> Option<(Address, String)> {
        let o = ext.as_object()?;
        let voucher = Address::parse(o.get("voucher")?.as_str()?).ok()?;
        let bond = o.get("bond")?.as_str()?;
        nyx5_proto::address::check_id(bond).ok()?;
        Some((voucher, bond.to_owned()))
    };
    Some(read().ok_or(VouchFault::Malformed))
}

/// How long a vouching bond must still stand when it opens a mailbox: the recipient needs time to
/// read the mail and forfeit the bond if it was junk.
pub const VOUCH_MIN_LIFE_MS: i64 = 7 * 24 * 3_600_000;

/// Judges a vouch for `recipient` (pure): the bond must be a bond of this house, posted, held by
/// the voucher, for this sender, with the recipient as its verifier and beneficiary and no other
/// arbiter (so the recipient alone can forfeit it, and gets what it forfeits), standing for
/// [`VOUCH_MIN_LIFE_MS`] more (or without end), and the voucher must be on the recipient's
/// allowlist. Anything less lets a voucher take its bond back before the recipient can punish.
pub fn vouch(
    voucher: &Address,
    bond: Option<&crate::libro::model::Contract>,
    sender: &Address,
    recipient: &Address,
    voucher_allowed: bool,
    now: nyx5_proto::Timestamp,
) -> Vouch {
    use crate::libro::model::Kind;
    use crate::libro::state::{ContractState, Role};
    let fault = match bond {
        None => VouchFault::NoBond,
        Some(b) if b.kind != Kind::Bond => VouchFault::NoBond,
        Some(b) if b.state != ContractState::Posted => VouchFault::NotPosted,
        Some(b) if b.expires().is_some_and(|e| now.millis().saturating_add(VOUCH_MIN_LIFE_MS) > e.millis()) => {
            VouchFault::Expired
        }
        Some(b) if !b.is(Role::Bondholder, voucher) => VouchFault::NotVoucher,
        Some(b) if !b.is(Role::Vouchee, sender) => VouchFault::NotVouchee,
        Some(b)
            if !(b.is(Role::Beneficiary, recipient) && b.is(Role::Verifier, recipient))
                || b.get(Role::Arbiter).is_some_and(|a| a != *recipient) =>
        {
            VouchFault::NotRecipients
        }
        Some(_) if !voucher_allowed => VouchFault::VoucherNotAllowed,
        Some(_) => return Vouch::Valid,
    };
    Vouch::Refused(fault)
}

/// The verdict for one recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Accept; `counted` says whether it counts against the per-domain window.
    Accept {
        counted: bool,
    },
    /// Accept once the stamp of `amount` is charged to the sender (and count it).
    Stamped {
        amount: i64,
    },
    Reject(Error),
}

fn reject(refusal: Refusal, reason: impl Into<String>) -> Decision {
    Decision::Reject(refusal.because(reason.into()))
}

fn counted(facts: &Facts, domain: &str) -> Decision {
    if facts.rate_count >= facts.rate_cap {
        reject(Refusal::TooManyFromDomain, format!("too many envelopes from {domain} this minute, try again shortly"))
    } else {
        Decision::Accept { counted: true }
    }
}

/// Applies `policy` to `env` from `sender`, for a recipient at `here`.
pub fn decide(policy: &Policy, env: &Envelope, sender: &Address, facts: &Facts, here: &str) -> Decision {
    if facts.blocked {
        return reject(Refusal::SenderBlocked, format!("{sender} is blocked by the recipient"));
    }
    let domain = sender.domain();
    match policy {
        Policy::Open if facts.allowed => Decision::Accept { counted: false },
        Policy::Open => counted(facts, domain),
        Policy::Allowlist if facts.allowed => Decision::Accept { counted: false },
        Policy::Allowlist if env.kind() == Kind::Intro => {
            let size = env.canonical_str().len();
            if size > limits::MAX_INTRO_BYTES {
                reject(
                    Refusal::IntroTooLarge,
                    format!("an intro may be {} bytes; this is {size}", limits::MAX_INTRO_BYTES),
                )
            } else {
                counted(facts, domain)
            }
        }
        Policy::Allowlist if vouched(env) => match facts.vouch {
            Vouch::Valid => counted(facts, domain),
            Vouch::Refused(fault) => reject(Refusal::BadVouch, format!("{EXT_AVAL}: {}", fault.reason())),
            Vouch::Absent => reject(Refusal::BadVouch, format!("{EXT_AVAL}: the vouch was not checked")),
        },
        Policy::Allowlist => {
            reject(Refusal::NotOnAllowlist, format!("{sender} is not on the recipient's allowlist; send an intro"))
        }
        Policy::Pow { .. } if facts.allowed => Decision::Accept { counted: false },
        Policy::Pow { bits } => match &env.pow() {
            // The proof is bound to this envelope (sender, recipients, content); it buys entry,
            // not exemption: such mail counts towards the per-domain rate like open mail.
            Some(p) if pow::check(&env.work_digest(), &p.nonce, *bits) => counted(facts, domain),
            _ => reject(Refusal::PowRequired, format!("proof of work of {bits} bits required (`pow`)")),
        },
        Policy::Stamp { .. } if facts.allowed => Decision::Accept { counted: false },
        Policy::Stamp { price } => match env.stamp() {
            None => {
                reject(Refusal::StampRequired, format!("a stamp of {price} tok in the Libro of {here} is required"))
            }
            Some(s) if s.house != here => {
                reject(Refusal::StampWrongHouse, format!("the stamp must be paid at {here}, not {}", s.house))
            }
            Some(s) if s.amount < *price => {
                reject(Refusal::StampTooSmall, format!("the stamp is {} tok; this mailbox asks {price}", s.amount))
            }
            Some(s) if facts.balance < s.amount => reject(
                Refusal::StampUnaffordable,
                format!("{sender} has {} tok at {here}, short of its stamp of {}", facts.balance, s.amount),
            ),
            Some(s) => match counted(facts, domain) {
                Decision::Accept { .. } => Decision::Stamped { amount: s.amount },
                refusal => refusal,
            },
        },
        Policy::Unknown(p) => {
            reject(Refusal::UnsupportedPolicy, format!("the recipient's inbox policy {p:?} is not supported"))
        }
    }
}

fn vouched(env: &Envelope) -> bool {
    env.object().get("extensions").and_then(Value::as_object).is_some_and(|e| e.contains_key(EXT_AVAL))
}

/// The allow-list entries that match `sender`: its address and its domain, exactly (an allow
/// entry vouches for that name only).
pub fn sender_entries(sender: &Address) -> [String; 2] {
    [sender.as_str().to_owned(), sender.domain().to_owned()]
}

/// The block-list entries that match `sender`: its address, the address of every agent above it
/// (a subagent `a.b.ceo@d` is `b.ceo@d`'s and `ceo@d`'s: a block of its root holds every
/// subagent the root enrols, docs/SPEC.md §1), its domain and every parent of the domain down to
/// its site ([`Psl::lineage`]), so a block of `evil.example` also holds mail from
/// `x.evil.example` and any other name its owner mints. A public suffix never matches.
pub fn block_entries(sender: &Address, psl: Psl<'_>) -> Vec<String> {
    let local = sender.local();
    let parents = local
        .match_indices('.')
        .filter_map(|(i, _)| local.get(i + 1..))
        .map(|parent| format!("{parent}@{}", sender.domain()));
    std::iter::once(sender.as_str().to_owned())
        .chain(parents)
        .chain(psl.lineage(sender.domain()).into_iter().map(str::to_owned))
        .collect()
}

/// Normalizes a list entry as people type it: an address (`a@b`) or a domain (`b` or `@b`),
/// lower-cased. Stored as the address or the bare domain.
pub fn list_entry(text: &str) -> Result<String, Error> {
    let t = text.trim().to_ascii_lowercase();
    match t.strip_prefix('@') {
        Some(domain) => {
            check_domain(domain).map_err(|why| Refusal::BadListEntry.because(format!("list entry {text:?}: {why}")))?;
            Ok(domain.to_owned())
        }
        None if t.contains('@') => Ok(Address::parse(&t)?.as_str().to_owned()),
        None => {
            check_domain(&t).map_err(|why| Refusal::BadListEntry.because(format!("list entry {text:?}: {why}")))?;
            Ok(t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libro::model::Contract;

    fn psl() -> Psl<'static> {
        Psl::embedded().unwrap()
    }
    use nyx5_proto::Timestamp;
    use nyx5_proto::envelope::{Content, Draft};
    use nyx5_proto::json::obj;

    fn env(kind: Kind, body: &str) -> Envelope {
        let mut d = Draft::new(
            "e1".into(),
            Address::parse("a@x.test").unwrap(),
            vec![Address::parse("b@y.test").unwrap()],
            Timestamp(0),
            Content::new("text/plain", body.into()),
        );
        d.kind = kind;
        d.build().unwrap()
    }

    /// A message from a@x.test to b@y.test with one more member in its signed part.
    fn message_with(name: &str, value: Value) -> Envelope {
        let mut d = Draft::new(
            "e1".into(),
            Address::parse("a@x.test").unwrap(),
            vec![Address::parse("b@y.test").unwrap()],
            Timestamp(0),
            Content::new("text/plain", "hi".into()),
        );
        d.extra.insert(name.into(), value);
        d.build().unwrap()
    }

    const FREE: Facts =
        Facts { blocked: false, allowed: false, rate_count: 0, rate_cap: 2, balance: 0, vouch: Vouch::Absent };

    #[test]
    fn policies() {
        let from = Address::parse("a@x.test").unwrap();
        let msg = env(Kind::Message, "hi");
        let code = |d: Decision| match d {
            Decision::Accept { counted } => 200 + u16::from(counted),
            Decision::Stamped { .. } => 202,
            Decision::Reject(e) => e.code(),
        };
        assert_eq!(code(decide(&Policy::Open, &msg, &from, &FREE, "y.test")), 201);
        assert_eq!(code(decide(&Policy::Open, &msg, &from, &Facts { rate_count: 2, ..FREE }, "y.test")), 429);
        assert_eq!(
            code(decide(&Policy::Open, &msg, &from, &Facts { blocked: true, allowed: true, ..FREE }, "y.test")),
            403
        );
        assert_eq!(code(decide(&Policy::Allowlist, &msg, &from, &FREE, "y.test")), 403);
        assert_eq!(code(decide(&Policy::Allowlist, &msg, &from, &Facts { allowed: true, ..FREE }, "y.test")), 200);
        assert_eq!(code(decide(&Policy::Allowlist, &env(Kind::Intro, "hello"), &from, &FREE, "y.test")), 201);
        assert_eq!(code(decide(&Policy::Allowlist, &env(Kind::Intro, &"x".repeat(5000)), &from, &FREE, "y.test")), 413);
        assert_eq!(code(decide(&Policy::Pow { bits: 8 }, &msg, &from, &FREE, "y.test")), 402);
        assert_eq!(
            code(decide(&Policy::Pow { bits: 8 }, &msg, &from, &Facts { allowed: true, ..FREE }, "y.test")),
            200
        );
        assert_eq!(code(decide(&Policy::Stamp { price: 3 }, &msg, &from, &FREE, "y.test")), 402);
        assert_eq!(code(decide(&Policy::Unknown("x".into()), &msg, &from, &FREE, "y.test")), 403);
    }

    #[test]
    fn reads_policies() {
        assert_eq!(Policy::of(&Object::new()), Policy::Open);
        assert_eq!(Policy::of(&obj([("policy", "pow".into())])), Policy::Pow { bits: DEFAULT_POW_BITS });
        assert_eq!(Policy::of(&obj([("policy", "pow".into()), ("pow_bits", 40.into())])), Policy::Pow { bits: 32 });
        assert_eq!(Policy::of(&obj([("policy", "pow".into()), ("pow_bits", 8.into())])), Policy::Pow { bits: 8 });
    }

    /// A stamp's price is at least 1: 0, a negative price or none asks 1.
    #[test]
    fn a_stamp_costs_at_least_one() {
        let stamp = |price: Value| Policy::of(&obj([("policy", "stamp".into()), ("price", price)]));
        assert_eq!(stamp(0.into()), Policy::Stamp { price: 1 });
        assert_eq!(stamp((-5).into()), Policy::Stamp { price: 1 });
        assert_eq!(stamp(Value::Null), Policy::Stamp { price: 1 });
        assert_eq!(stamp(1.into()), Policy::Stamp { price: 1 });
        assert_eq!(stamp(7.into()), Policy::Stamp { price: 7 });
    }

    /// A bond of this house, posted by `voucher` for `sender`, with `recipient` as verifier and
    /// beneficiary, expiring at `expires`.
    fn bond(kind: &str, voucher: &str, sender: &str, recipient: &str, expires: Option<Timestamp>) -> Contract {
        let mut record = obj([
            ("id", "bond-1".into()),
            ("kind", kind.into()),
            ("state", "posted".into()),
            ("amount", 50.into()),
            ("bondholder", voucher.into()),
            ("vouchee", sender.into()),
            ("verifier", recipient.into()),
            ("beneficiary", recipient.into()),
        ]);
        if let Some(t) = expires {
            record.insert("expires".into(), t.to_string().into());
        }
        Contract::from_record(record, 1).unwrap()
    }

    /// Only a bond vouches, and only one that stands seven days more (604,800,000 ms): a contract
    /// of another kind with the same parties and state is no bond.
    #[test]
    fn a_vouch_needs_a_bond_that_stands_seven_days_more() {
        let (ana, eve, cy) = (
            Address::parse("ana@a.test").unwrap(),
            Address::parse("eve@e.test").unwrap(),
            Address::parse("cy@a.test").unwrap(),
        );
        let now = Timestamp(1_000_000_000_000);
        let judge = |b: &Contract| vouch(&ana, Some(b), &eve, &cy, true, now);
        let week = 604_800_000;
        assert_eq!(VOUCH_MIN_LIFE_MS, week);
        let standing = bond("bond", "ana@a.test", "eve@e.test", "cy@a.test", Some(Timestamp(now.millis() + week)));
        assert_eq!(judge(&standing), Vouch::Valid);
        let short = bond("bond", "ana@a.test", "eve@e.test", "cy@a.test", Some(Timestamp(now.millis() + week - 1)));
        assert_eq!(judge(&short), Vouch::Refused(VouchFault::Expired));
        assert_eq!(judge(&bond("bond", "ana@a.test", "eve@e.test", "cy@a.test", None)), Vouch::Valid);
        for kind in ["escrow", "spot", "metered"] {
            let other = bond(kind, "ana@a.test", "eve@e.test", "cy@a.test", None);
            assert_eq!(judge(&other), Vouch::Refused(VouchFault::NoBond), "{kind}");
        }
        // An arbiter other than the recipient could forfeit it elsewhere; the recipient is fine.
        let mut arbitrated = bond("bond", "ana@a.test", "eve@e.test", "cy@a.test", None);
        arbitrated.record.insert("arbiter".into(), "dee@a.test".into());
        assert_eq!(judge(&arbitrated), Vouch::Refused(VouchFault::NotRecipients));
        arbitrated.record.insert("arbiter".into(), "cy@a.test".into());
        assert_eq!(judge(&arbitrated), Vouch::Valid);
    }

    /// A stamp counts only where it is paid: at the recipient's house, for the price at least.
    #[test]
    fn a_stamp_paid_at_another_house_opens_nothing() {
        let from = Address::parse("a@x.test").unwrap();
        let stamped = |house: &str, amount: i64| {
            message_with("stamp", Value::Object(obj([("house", house.into()), ("amount", amount.into())])))
        };
        let rich = Facts { balance: 100, ..FREE };
        let verdict = |env: &Envelope| match decide(&Policy::Stamp { price: 3 }, env, &from, &rich, "y.test") {
            Decision::Reject(e) => format!("{} {}", e.code(), e.name()),
            Decision::Stamped { .. } => "stamped".into(),
            other => format!("{other:?}"),
        };
        assert_eq!(verdict(&stamped("x.test", 5)), "402 stamp_wrong_house");
        assert_eq!(verdict(&stamped("y.test", 2)), "402 stamp_too_small");
        assert_eq!(verdict(&stamped("y.test", 3)), "stamped");
    }

    /// Each fault says what it is, and the refusal carries it.
    #[test]
    fn a_refused_vouch_says_why() {
        let from = Address::parse("a@x.test").unwrap();
        let aval = obj([("voucher", "v@y.test".into()), ("bond", "bond-1".into())]);
        let msg = message_with("extensions", Value::Object(obj([(EXT_AVAL, Value::Object(aval))])));
        let facts = Facts { vouch: Vouch::Refused(VouchFault::NotPosted), ..FREE };
        match decide(&Policy::Allowlist, &msg, &from, &facts, "y.test") {
            Decision::Reject(e) => {
                assert_eq!((e.code(), e.refusal()), (402, Some(Refusal::BadVouch)));
                assert_eq!(e.reason, format!("{EXT_AVAL}: the vouching bond is no longer posted"));
            }
            other => panic!("{other:?}"),
        }
        let reasons = [
            VouchFault::Malformed,
            VouchFault::NoBond,
            VouchFault::NotPosted,
            VouchFault::Expired,
            VouchFault::NotVoucher,
            VouchFault::NotVouchee,
            VouchFault::NotRecipients,
            VouchFault::VoucherNotAllowed,
        ]
        .map(VouchFault::reason);
        let distinct: std::collections::BTreeSet<_> = reasons.iter().collect();
        assert_eq!(distinct.len(), reasons.len());
        assert!(reasons.iter().all(|r| r.starts_with("the vouch")));
    }

    #[test]
    fn blocks_reach_subdomains_down_to_the_site() {
        let from = Address::parse("m@a.r1.evil.example").unwrap();
        assert_eq!(
            block_entries(&from, psl()),
            ["m@a.r1.evil.example", "a.r1.evil.example", "r1.evil.example", "evil.example"]
        );
        assert_eq!(sender_entries(&from), ["m@a.r1.evil.example", "a.r1.evil.example"]);
        assert_eq!(block_entries(&Address::parse("m@x.co.uk").unwrap(), psl()), ["m@x.co.uk", "x.co.uk"]);
    }

    #[test]
    fn a_block_of_an_agent_holds_its_subagents() {
        let from = Address::parse("a.b.ceo@x.test").unwrap();
        assert_eq!(block_entries(&from, psl()), ["a.b.ceo@x.test", "b.ceo@x.test", "ceo@x.test", "x.test"]);
        assert_eq!(sender_entries(&from), ["a.b.ceo@x.test", "x.test"]);
    }

    #[test]
    fn list_entries() {
        assert_eq!(list_entry(" Bob@Y.test ").unwrap(), "bob@y.test");
        assert_eq!(list_entry("@y.test").unwrap(), "y.test");
        assert_eq!(list_entry("y.test").unwrap(), "y.test");
        assert!(list_entry("@").is_err());
        assert!(list_entry("a@").is_err());
        assert!(list_entry("bad domain").is_err());
    }
}
