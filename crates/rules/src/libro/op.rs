//! Operations (spec §16, docs/SPEC.md §16): the body `{op, …}` of an envelope to `libro@`, read
//! into [`Op`]. Pure.

use nyx5_proto::authority::{Authority, EvidenceKind};
use nyx5_proto::json::field;
use nyx5_proto::quote::Quote;
use nyx5_proto::{Address, Error, Object, Refusal, Timestamp, limits};

/// Most bytes of a claim, a note or a reason.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Most concepts a mandate's scope may list.
pub const MAX_CONCEPTS: usize = 32;
/// The default and largest `limit` of a statement.
pub const STATEMENT_DEFAULT: i64 = 20;
pub const STATEMENT_MAX: i64 = 100;

/// One operation, as its body says it.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Accept {
        quote: Box<Quote>,
    },
    Deliver {
        contract: String,
        evidence_sha256: Option<String>,
        evidence_kind: Option<EvidenceKind>,
        note: Option<String>,
    },
    /// `verdict`: the arbiter's reasons, as `verifica@` sends them (docs/SPEC.md §22).
    Release {
        contract: String,
        verdict: Option<Object>,
    },
    Refund {
        contract: String,
        note: Option<String>,
        verdict: Option<Object>,
    },
    Bond(Bond),
    Forfeit {
        contract: String,
        reason: String,
    },
    Mandate(MandateOp),
    Charge {
        mandate: String,
        amount: i64,
        concept: String,
    },
    Revoke {
        mandate: String,
    },
    Balance,
    Statement {
        limit: i64,
    },
    Contract {
        contract: String,
    },
    /// A grantor (or a subagent's parent) approves a movement its authority asked about.
    Approve {
        pending: String,
    },
    /// An approver declines it, or its operator withdraws it; the hold returns.
    Decline {
        pending: String,
        note: Option<String>,
    },
}

/// `bond {amount, claim, verifier, beneficiary?, arbiter?, evidence_sha256?, expires?, vouchee?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bond {
    pub amount: i64,
    pub claim: String,
    pub verifier: Address,
    pub beneficiary: Option<Address>,
    pub arbiter: Option<Address>,
    pub evidence_sha256: Option<String>,
    pub evidence_kind: Option<EvidenceKind>,
    pub expires: Option<Timestamp>,
    pub vouchee: Option<Address>,
}

/// `mandate {grantee, cap, scope?: {concepts?}, expires?, parent?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct MandateOp {
    pub grantee: Address,
    pub cap: i64,
    pub concepts: Option<Vec<String>>,
    pub expires: Option<Timestamp>,
    pub parent: Option<String>,
    /// How far its grantee goes alone (docs/SPEC.md §16b).
    pub authority: Option<Authority>,
}

fn amount(o: &Object, name: &str) -> Result<i64, Error> {
    let a = field::integer(o, name)?;
    if a <= 0 || a > limits::MAX_AMOUNT {
        return Err(
            Refusal::BadOperation.because(format!("`{name}` must be a whole number of tokens from 1 to 2^53 - 1"))
        );
    }
    Ok(a)
}

fn text(o: &Object, name: &str) -> Result<Option<String>, Error> {
    let Some(t) = field::opt_str(o, name)? else { return Ok(None) };
    if t.len() > MAX_TEXT_BYTES {
        return Err(Refusal::BadOperation.because(format!("`{name}` may be at most {MAX_TEXT_BYTES} bytes")));
    }
    Ok(Some(t.to_owned()))
}

fn required_text(o: &Object, name: &str) -> Result<String, Error> {
    match text(o, name)? {
        Some(t) if !t.trim().is_empty() => Ok(t),
        _ => Err(Refusal::BadOperation.because(format!("`{name}` is required"))),
    }
}

fn id(o: &Object, name: &str) -> Result<String, Error> {
    let v = field::str(o, name)?;
    nyx5_proto::address::check_id(v)?;
    Ok(v.to_owned())
}

fn address(o: &Object, name: &str) -> Result<Option<Address>, Error> {
    field::opt_str(o, name)?.map(Address::parse).transpose()
}

fn time(o: &Object, name: &str) -> Result<Option<Timestamp>, Error> {
    field::opt_str(o, name)?.map(Timestamp::parse).transpose()
}

fn evidence_kind(o: &Object) -> Result<Option<EvidenceKind>, Error> {
    field::opt_str(o, "evidence_kind")?.map(EvidenceKind::parse).transpose()
}

/// A mandate's authority: checked, and in `tok` if it caps an amount (the one currency here).
fn authority(o: &Object) -> Result<Option<Authority>, Error> {
    let Some(v) = o.get("authority") else { return Ok(None) };
    let a = Authority::from_value(v)?;
    if a.currency.as_deref().is_some_and(|c| c != nyx5_proto::libro::CURRENCY) {
        return Err(Refusal::BadOperation.because(format!(
            "this Libro keeps {}: an authority's cap is counted in it",
            nyx5_proto::libro::CURRENCY
        )));
    }
    Ok(Some(a))
}

/// Most bytes of a verdict (its canonical JSON): it repeats the contract's tests, which come
/// from a quote of at most `MAX_QUOTE_BYTES`, and adds a result and a reason to each.
pub const MAX_VERDICT_BYTES: usize = 2 * limits::MAX_QUOTE_BYTES;

/// An arbiter's `verdict`: an object of at most [`MAX_VERDICT_BYTES`], whose `outcome` is
/// `passed` or `failed` (an undecided verdict decides nothing, so it never operates).
fn verdict(o: &Object) -> Result<Option<Object>, Error> {
    let Some(v) = field::opt_object(o, "verdict")? else { return Ok(None) };
    if nyx5_proto::Value::Object(v.clone()).canonical().len() > MAX_VERDICT_BYTES {
        return Err(Refusal::BadVerdict.because(format!("a verdict may be at most {MAX_VERDICT_BYTES} bytes")));
    }
    match field::str(v, "outcome")? {
        "passed" | "failed" => Ok(Some(v.clone())),
        other => Err(Refusal::BadVerdict.because(format!("a verdict's outcome is passed or failed, not {other:?}"))),
    }
}

/// Checks a hex SHA-256 as an evidence hash.
pub fn sha256_hex(o: &Object, name: &str) -> Result<Option<String>, Error> {
    let Some(h) = field::opt_str(o, name)? else { return Ok(None) };
    nyx5_proto::crypto::check_sha256_hex(h, name)?;
    Ok(Some(h.to_owned()))
}

impl Op {
    /// Reads an operation's body.
    pub fn parse(body: &Object) -> Result<Op, Error> {
        let op = field::str(body, "op")?;
        Ok(match op {
            "accept" => {
                let quote = field::object(body, "quote")?.clone();
                Op::Accept { quote: Box::new(Quote::from_object(quote)?) }
            }
            "deliver" => Op::Deliver {
                contract: id(body, "contract")?,
                evidence_sha256: sha256_hex(body, "evidence_sha256")?,
                evidence_kind: evidence_kind(body)?,
                note: text(body, "note")?,
            },
            "release" => Op::Release { contract: id(body, "contract")?, verdict: verdict(body)? },
            "refund" => {
                Op::Refund { contract: id(body, "contract")?, note: text(body, "note")?, verdict: verdict(body)? }
            }
            "bond" => Op::Bond(Bond {
                amount: amount(body, "amount")?,
                claim: required_text(body, "claim")?,
                verifier: Address::parse(field::str(body, "verifier")?)?,
                beneficiary: address(body, "beneficiary")?,
                arbiter: address(body, "arbiter")?,
                evidence_sha256: sha256_hex(body, "evidence_sha256")?,
                evidence_kind: evidence_kind(body)?,
                expires: time(body, "expires")?,
                vouchee: address(body, "vouchee")?,
            }),
            "forfeit" => Op::Forfeit { contract: id(body, "contract")?, reason: required_text(body, "reason")? },
            "mandate" => {
                let concepts = match field::opt_object(body, "scope")? {
                    None => None,
                    Some(scope) => match field::opt_array(scope, "concepts")? {
                        None => None,
                        Some(list) => {
                            if list.len() > MAX_CONCEPTS {
                                return Err(Refusal::BadOperation
                                    .because(format!("a scope lists at most {MAX_CONCEPTS} concepts")));
                            }
                            let mut out = Vec::new();
                            for c in list {
                                let c = c.as_str().filter(|c| !c.is_empty() && c.len() <= 256).ok_or_else(|| {
                                    Refusal::BadOperation.because("`scope.concepts` lists non-empty strings")
                                })?;
                                out.push(c.to_owned());
                            }
                            Some(out)
                        }
                    },
                };
                Op::Mandate(MandateOp {
                    grantee: Address::parse(field::str(body, "grantee")?)?,
                    cap: amount(body, "cap")?,
                    concepts,
                    expires: time(body, "expires")?,
                    parent: field::opt_str(body, "parent")?
                        .map(|p| nyx5_proto::address::check_id(p).map(|()| p.to_owned()))
                        .transpose()?,
                    authority: authority(body)?,
                })
            }
            "charge" => {
                let concept = required_text(body, "concept")?;
                if concept.len() > limits::MAX_CONCEPT_BYTES {
                    return Err(
                        Refusal::BadOperation.because(format!("`concept` may be {} bytes", limits::MAX_CONCEPT_BYTES))
                    );
                }
                Op::Charge { mandate: id(body, "mandate")?, amount: amount(body, "amount")?, concept }
            }
            "revoke" => Op::Revoke { mandate: id(body, "mandate")? },
            "balance" => Op::Balance,
            "statement" => {
                let limit = field::opt_integer(body, "limit")?.unwrap_or(STATEMENT_DEFAULT);
                if !(1..=STATEMENT_MAX).contains(&limit) {
                    return Err(Refusal::BadOperation.because(format!("`limit` is 1 to {STATEMENT_MAX}")));
                }
                Op::Statement { limit }
            }
            "contract" => Op::Contract { contract: id(body, "contract")? },
            "approve" => Op::Approve { pending: id(body, "pending")? },
            "decline" => Op::Decline { pending: id(body, "pending")?, note: text(body, "note")? },
            other => return Err(Refusal::UnknownOperation.because(format!("unknown Libro operation {other:?}"))),
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Op::Accept { .. } => "accept",
            Op::Deliver { .. } => "deliver",
            Op::Release { .. } => "release",
            Op::Refund { .. } => "refund",
            Op::Bond(_) => "bond",
            Op::Forfeit { .. } => "forfeit",
            Op::Mandate(_) => "mandate",
            Op::Charge { .. } => "charge",
            Op::Revoke { .. } => "revoke",
            Op::Balance => "balance",
            Op::Statement { .. } => "statement",
            Op::Contract { .. } => "contract",
            Op::Approve { .. } => "approve",
            Op::Decline { .. } => "decline",
        }
    }

    /// The tokens this operation commits the operator to, which a delegated card's `scope.cap`
    /// bounds (spec §18): accept, bond, mandate and charge.
    pub fn commits(&self) -> Option<i64> {
        match self {
            Op::Accept { quote } => Some(quote.price),
            Op::Bond(b) => Some(b.amount),
            Op::Mandate(m) => Some(m.cap),
            Op::Charge { amount, .. } => Some(*amount),
            _ => None,
        }
    }

    /// Whether the operation makes the house keep or send something new for its operator (what a
    /// stranger to the Libro may not do).
    pub fn creates(&self) -> bool {
        matches!(self, Op::Accept { .. } | Op::Bond(_) | Op::Mandate(_) | Op::Balance | Op::Statement { .. })
    }

    /// The budget the operation spends at the house's door (docs/SPEC.md §16, "Operations a
    /// minute"): reads, settlements (what acts on a contract, a mandate or an approval that
    /// exists) and the rest each have their own, so a flood of one never starves another.
    pub fn budget(&self) -> &'static str {
        match self {
            Op::Balance | Op::Statement { .. } | Op::Contract { .. } => "read",
            Op::Deliver { .. }
            | Op::Release { .. }
            | Op::Refund { .. }
            | Op::Forfeit { .. }
            | Op::Revoke { .. }
            | Op::Approve { .. }
            | Op::Decline { .. } => "settle",
            Op::Accept { .. } | Op::Bond(_) | Op::Mandate(_) | Op::Charge { .. } => "create",
        }
    }

    /// Whether the operation changes anything (only reads may be signed with a key in its
    /// rotation grace).
    pub fn writes(&self) -> bool {
        !matches!(self, Op::Balance | Op::Statement { .. } | Op::Contract { .. })
    }

    /// The contract the operation names, if any (`accept`: its quote's id).
    pub fn contract(&self) -> Option<&str> {
        match self {
            Op::Accept { quote } => Some(&quote.id),
            Op::Deliver { contract, .. }
            | Op::Release { contract, .. }
            | Op::Refund { contract, .. }
            | Op::Forfeit { contract, .. }
            | Op::Contract { contract } => Some(contract),
            _ => None,
        }
    }

    /// The pending approval the operation decides, if any.
    pub fn pending(&self) -> Option<&str> {
        match self {
            Op::Approve { pending } | Op::Decline { pending, .. } => Some(pending),
            _ => None,
        }
    }

    /// The mandate the operation names, if any (`mandate`: its parent).
    pub fn mandate(&self) -> Option<&str> {
        match self {
            Op::Charge { mandate, .. } | Op::Revoke { mandate } => Some(mandate),
            Op::Mandate(m) => m.parent.as_deref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nyx5_proto::Value;

    fn parse(text: &str) -> Result<Op, Error> {
        let v = Value::parse_str(text).unwrap();
        Op::parse(v.as_object().unwrap())
    }

    #[test]
    fn bodies_read_as_pinned() {
        assert_eq!(
            parse(r#"{"op":"release","contract":"c1"}"#).unwrap(),
            Op::Release { contract: "c1".into(), verdict: None }
        );
        assert_eq!(parse(r#"{"op":"statement"}"#).unwrap(), Op::Statement { limit: STATEMENT_DEFAULT });
        let Op::Mandate(m) =
            parse(r#"{"op":"mandate","grantee":"b@x.test","cap":5,"scope":{"concepts":["gpu"]},"parent":"m1"}"#)
                .unwrap()
        else {
            panic!("a mandate")
        };
        assert_eq!((m.cap, m.concepts, m.parent.as_deref()), (5, Some(vec!["gpu".to_owned()]), Some("m1")));
        let Op::Bond(b) = parse(r#"{"op":"bond","amount":3,"claim":"true","verifier":"v@x.test"}"#).unwrap() else {
            panic!("a bond")
        };
        assert_eq!(b.amount, 3);
    }

    #[test]
    fn bad_bodies_are_refused_with_400() {
        for bad in [
            r#"{"op":"steal"}"#,
            r#"{}"#,
            r#"{"op":"charge","mandate":"m","amount":0,"concept":"x"}"#,
            r#"{"op":"charge","mandate":"m","amount":-4,"concept":"x"}"#,
            r#"{"op":"charge","mandate":"m","amount":1.5,"concept":"x"}"#,
            r#"{"op":"charge","mandate":"m","amount":9007199254740992,"concept":"x"}"#,
            r#"{"op":"charge","mandate":"m","amount":1,"concept":""}"#,
            r#"{"op":"bond","amount":3,"claim":"c","verifier":"nobody"}"#,
            r#"{"op":"deliver","contract":"c","evidence_sha256":"ABC"}"#,
            r#"{"op":"statement","limit":1000}"#,
            r#"{"op":"release","contract":""}"#,
            r#"{"op":"forfeit","contract":"c"}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.code(), 400, "{bad}: {}", e.reason);
        }
    }

    fn charge(amount: i64) -> Result<Op, Error> {
        parse(&format!(r#"{{"op":"charge","mandate":"m","amount":{amount},"concept":"x"}}"#))
    }

    #[test]
    fn amounts_run_from_one_to_the_largest_safe_integer() {
        assert!(matches!(charge(1), Ok(Op::Charge { amount: 1, .. })));
        assert!(matches!(charge(limits::MAX_AMOUNT), Ok(Op::Charge { amount: limits::MAX_AMOUNT, .. })));
        assert!(matches!(charge(limits::MAX_AMOUNT - 1), Ok(Op::Charge { .. })));
        assert_eq!(charge(0).unwrap_err().code(), 400);
    }

    #[test]
    fn a_note_may_be_exactly_its_most_bytes() {
        let deliver = |n: usize| parse(&format!(r#"{{"op":"deliver","contract":"c","note":"{}"}}"#, "n".repeat(n)));
        let Op::Deliver { note, .. } = deliver(MAX_TEXT_BYTES).unwrap() else { panic!("a deliver") };
        assert_eq!(note.map(|n| n.len()), Some(MAX_TEXT_BYTES));
        assert!(matches!(deliver(MAX_TEXT_BYTES - 1), Ok(Op::Deliver { .. })));
        assert_eq!(deliver(MAX_TEXT_BYTES + 1).unwrap_err().code(), 400);
    }

    fn mandate_scoped(concepts: &[String]) -> Result<Op, Error> {
        let list = Value::Array(concepts.iter().map(|c| Value::String(c.clone())).collect()).canonical_string();
        parse(&format!(r#"{{"op":"mandate","grantee":"b@x.test","cap":5,"scope":{{"concepts":{list}}}}}"#))
    }

    #[test]
    fn a_scope_lists_up_to_its_most_concepts_each_a_short_nonempty_string() {
        let many = |n: usize| (0..n).map(|i| format!("c{i}")).collect::<Vec<_>>();
        let Op::Mandate(m) = mandate_scoped(&many(MAX_CONCEPTS)).unwrap() else { panic!("a mandate") };
        assert_eq!(m.concepts.map(|c| c.len()), Some(MAX_CONCEPTS));
        assert!(mandate_scoped(&many(MAX_CONCEPTS - 1)).is_ok());
        assert_eq!(mandate_scoped(&many(MAX_CONCEPTS + 1)).unwrap_err().code(), 400);
        assert!(mandate_scoped(&["x".repeat(256)]).is_ok());
        for bad in [String::new(), "x".repeat(257)] {
            assert_eq!(mandate_scoped(std::slice::from_ref(&bad)).unwrap_err().code(), 400, "{}", bad.len());
        }
        let not_strings = parse(r#"{"op":"mandate","grantee":"b@x.test","cap":5,"scope":{"concepts":[7]}}"#);
        assert_eq!(not_strings.unwrap_err().code(), 400);
    }

    #[test]
    fn a_charges_concept_and_a_statements_limit_have_bounds_included() {
        let charge =
            |concept: &str| parse(&format!(r#"{{"op":"charge","mandate":"m","amount":1,"concept":"{concept}"}}"#));
        let long = "k".repeat(limits::MAX_CONCEPT_BYTES);
        assert!(matches!(charge(&long), Ok(Op::Charge { concept, .. }) if concept == long));
        assert_eq!(charge(&format!("{long}k")).unwrap_err().code(), 400);
        let statement = |limit: i64| parse(&format!(r#"{{"op":"statement","limit":{limit}}}"#));
        assert_eq!(statement(1).unwrap(), Op::Statement { limit: 1 });
        assert_eq!(statement(STATEMENT_MAX).unwrap(), Op::Statement { limit: STATEMENT_MAX });
        for bad in [0, STATEMENT_MAX + 1] {
            assert_eq!(statement(bad).unwrap_err().code(), 400, "{bad}");
        }
    }

    /// A verdict's canonical text of exactly `len` bytes.
    fn verdict_of(len: usize) -> String {
        let bare = r#"{"outcome":"passed","pad":""}"#.len();
        format!(r#"{{"outcome":"passed","pad":"{}"}}"#, "p".repeat(len - bare))
    }

    #[test]
    fn a_verdict_may_be_twice_a_quotes_bytes() {
        let release =
            |len: usize| parse(&format!(r#"{{"op":"release","contract":"c","verdict":{}}}"#, verdict_of(len)));
        assert_eq!(verdict_of(MAX_VERDICT_BYTES).len(), MAX_VERDICT_BYTES);
        assert!(matches!(release(MAX_VERDICT_BYTES), Ok(Op::Release { verdict: Some(_), .. })));
        assert!(matches!(release(limits::MAX_QUOTE_BYTES + 100), Ok(Op::Release { verdict: Some(_), .. })));
        assert_eq!(release(MAX_VERDICT_BYTES + 1).unwrap_err().code(), 400);
    }
}
