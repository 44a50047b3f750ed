//! The Libro's operations as a client writes them (spec §16, docs/SPEC.md §16): every operation,
//! the members of its body and how each is read. `nyx5` (its Libro verbs and MCP tools) and the
//! browser (`nyx5-web`) build bodies with [`body`], so both refuse and normalise alike before
//! anything is signed; the house reads what arrives with its own parser (`libro/op.rs`), which
//! stays the rule.

use crate::address::check_id;
use crate::json::{Object, Value, obj};
use crate::quote::Quote;
use crate::{Address, Error, Refusal, Timestamp, limits};

/// The media type of an operation's envelope.
pub const MEDIA: &str = "application/nyx5.libro+json";
/// The most entries a `statement` asks for.
pub const MAX_STATEMENT: i64 = 100;

/// How one member of an operation's body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An id (`check_id`): contracts, mandates.
    Id,
    /// An address, lower-cased.
    Address,
    /// Tokens: an integer from 1 to 2^53 − 1.
    Amount,
    /// A statement's length: 1 to [`MAX_STATEMENT`].
    Limit,
    /// 64 hex digits, lower-cased.
    Sha256,
    /// Words: a non-empty string.
    Text,
    /// An instant, written as RFC 3339 (the caller says which forms it reads).
    Time,
    /// A mandate's scope: `{concepts?: [text, …]}`, each concept trimmed.
    Scope,
    /// A signed quote, as it is.
    Quote,
    /// An authority (`authority::Authority`), checked.
    Authority,
    /// An evidence kind: source, calculation, user, external or inference.
    Evidence,
}

/// One member: its name, how it is read, whether the operation needs it.
#[derive(Debug)]
pub struct Member {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
}

const fn need(name: &'static str, kind: Kind) -> Member {
    Member { name, kind, required: true }
}

const fn may(name: &'static str, kind: Kind) -> Member {
    Member { name, kind, required: false }
}

/// Every operation and the members of its body.
pub const OPS: &[(&str, &[Member])] = &[
    ("accept", &[need("quote", Kind::Quote)]),
    (
        "deliver",
        &[
            need("contract", Kind::Id),
            may("evidence_sha256", Kind::Sha256),
            may("evidence_kind", Kind::Evidence),
            may("note", Kind::Text),
        ],
    ),
    ("release", &[need("contract", Kind::Id)]),
    ("refund", &[need("contract", Kind::Id), may("note", Kind::Text)]),
    (
        "bond",
        &[
            need("amount", Kind::Amount),
            need("claim", Kind::Text),
            need("verifier", Kind::Address),
            may("beneficiary", Kind::Address),
            may("arbiter", Kind::Address),
            may("evidence_sha256", Kind::Sha256),
            may("evidence_kind", Kind::Evidence),
            may("expires", Kind::Time),
            may("vouchee", Kind::Address),
        ],
    ),
    ("forfeit", &[need("contract", Kind::Id), need("reason", Kind::Text)]),
    (
        "mandate",
        &[
            need("grantee", Kind::Address),
            need("cap", Kind::Amount),
            may("scope", Kind::Scope),
            may("expires", Kind::Time),
            may("parent", Kind::Id),
            may("authority", Kind::Authority),
        ],
    ),
    ("charge", &[need("mandate", Kind::Id), need("amount", Kind::Amount), need("concept", Kind::Text)]),
    ("revoke", &[need("mandate", Kind::Id)]),
    ("balance", &[]),
    ("statement", &[may("limit", Kind::Limit)]),
    ("contract", &[need("contract", Kind::Id)]),
    ("approve", &[need("pending", Kind::Id)]),
    ("decline", &[need("pending", Kind::Id), may("note", Kind::Text)]),
];

/// The names of every operation, for messages.
pub fn names() -> String {
    OPS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Reads one member of `op` as its kind says; `time` reads an instant as the caller allows.
fn member(op: &str, m: &Member, v: &Value, time: &dyn Fn(&str) -> Result<Timestamp, String>) -> Result<Value, Error> {
    let name = m.name;
    let bad = |what: &str| Refusal::BadOperation.because(format!("{op}: `{name}` must be {what}"));
    let about = |why: &str| Refusal::BadOperation.because(format!("{op}: `{name}`: {why}"));
    let string = || v.as_str().map(str::trim).filter(|s| !s.is_empty());
    let amount = |max: i64| v.as_safe_integer().filter(|n| (1..=max).contains(n));
    let concepts = || bad("an object {concepts: [text, …]}");
    Ok(match m.kind {
        Kind::Id => {
            let id = string().ok_or_else(|| bad("an id"))?;
            check_id(id).map_err(|e| about(&e.reason))?;
            id.into()
        }
        Kind::Address => {
            let a = string().ok_or_else(|| bad("an address, name@domain"))?;
            Address::parse_lenient(a).map_err(|e| about(&e.reason))?.as_str().into()
        }
        Kind::Amount => amount(limits::MAX_AMOUNT).ok_or_else(|| bad("a positive whole number of tokens"))?.into(),
        Kind::Limit => amount(MAX_STATEMENT).ok_or_else(|| bad(&format!("1 to {MAX_STATEMENT}")))?.into(),
        Kind::Sha256 => {
            let h = string().ok_or_else(|| bad("a SHA-256 in hex"))?.to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad("a SHA-256 in hex (64 digits)"));
            }
            h.into()
        }
        Kind::Text => v.as_str().filter(|s| !s.trim().is_empty()).ok_or_else(|| bad("some text"))?.into(),
        Kind::Time => {
            let t = string().ok_or_else(|| bad("a time"))?;
            time(t).map_err(|e| about(&e))?.to_rfc3339().into()
        }
        Kind::Scope => {
            let o = v.as_object().ok_or_else(|| bad("an object {concepts?: [..]}"))?;
            let mut scope = Object::new();
            for (k, c) in o {
                if k != "concepts" {
                    return Err(Refusal::BadOperation
                        .because(format!("{op}: a mandate's scope names only `concepts`, not `{k}`")));
                }
                let list = c.as_array().ok_or_else(concepts)?;
                let mut out = Vec::with_capacity(list.len());
                for c in list {
                    out.push(Value::from(c.as_str().map(str::trim).filter(|s| !s.is_empty()).ok_or_else(concepts)?));
                }
                scope.insert("concepts".into(), Value::Array(out));
            }
            Value::Object(scope)
        }
        Kind::Authority => crate::authority::Authority::from_value(v).map_err(|e| about(&e.reason))?.to_value(),
        Kind::Evidence => {
            let k = string().ok_or_else(|| bad("an evidence kind"))?.to_ascii_lowercase();
            crate::authority::EvidenceKind::parse(&k).map_err(|e| about(&e.reason))?.as_str().into()
        }
        Kind::Quote => {
            let o = v.as_object().ok_or_else(|| bad("a signed quote (an object)"))?;
            Quote::from_object(o.clone())
                .map_err(|e| Refusal::BadOperation.because(format!("{op}: the quote: {}", e.reason)))?;
            v.clone()
        }
    })
}

/// The body of operation `op` from `args` (its members): each checked and normalised, unknown
/// ones refused, `null` taken as absent, times written as RFC 3339. `time` reads an instant (the
/// CLI also takes `+30d`; the browser only RFC 3339).
pub fn body(op: &str, args: &Object, time: &dyn Fn(&str) -> Result<Timestamp, String>) -> Result<Object, Error> {
    let (op, members) = OPS.iter().find(|(name, _)| *name == op).ok_or_else(|| {
        Refusal::UnknownOperation.because(format!("no operation {op:?}; the Libro's are {}", names()))
    })?;
    if let Some(k) = args.keys().find(|k| *k != "op" && !members.iter().any(|m| m.name == k.as_str())) {
        let takes: Vec<&str> = members.iter().map(|m| m.name).collect();
        let takes = if takes.is_empty() { "nothing".to_owned() } else { takes.join(", ") };
        return Err(Refusal::BadOperation.because(format!("{op} takes no `{k}` (it takes {takes})")));
    }
    let mut body = obj([("op", (*op).into())]);
    for m in members.iter() {
        match args.get(m.name) {
            None | Some(Value::Null) if m.required => {
                return Err(Refusal::BadOperation.because(format!("{op} needs `{}`", m.name)));
            }
            None | Some(Value::Null) => {}
            Some(v) => {
                body.insert(m.name.to_owned(), member(op, m, v, time)?);
            }
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rfc3339(t: &str) -> Result<Timestamp, String> {
        Timestamp::parse(t).map_err(|e| e.reason.to_string())
    }

    fn read(op: &str, json: &str) -> Result<String, String> {
        let args = Value::parse(json.as_bytes(), 4096).unwrap();
        body(op, args.as_object().unwrap(), &rfc3339)
            .map(|b| Value::Object(b).canonical_string())
            .map_err(|e| e.reason.to_string())
    }

    #[test]
    fn bodies_are_checked_and_normalised_member_by_member() {
        assert_eq!(read("release", r#"{"contract":" c-1 "}"#).unwrap(), r#"{"contract":"c-1","op":"release"}"#);
        assert_eq!(
            read("deliver", r#"{"contract":"c","evidence_sha256":"AB"}"#).unwrap_err(),
            "deliver: `evidence_sha256` must be a SHA-256 in hex (64 digits)"
        );
        assert_eq!(
            read("bond", r#"{"amount":5,"claim":"x","verifier":"V@B.test","expires":"2026-12-01T00:00:00+01:00"}"#)
                .unwrap(),
            r#"{"amount":5,"claim":"x","expires":"2026-11-30T23:00:00.000Z","op":"bond","verifier":"v@b.test"}"#
        );
        assert_eq!(
            read("mandate", r#"{"grantee":"g@a.test","cap":3,"scope":{"concepts":[" tea "]}}"#).unwrap(),
            r#"{"cap":3,"grantee":"g@a.test","op":"mandate","scope":{"concepts":["tea"]}}"#
        );
        assert!(
            read("mandate", r#"{"grantee":"g@a.test","cap":3,"scope":{"other":1}}"#)
                .unwrap_err()
                .contains("only `concepts`")
        );
        assert_eq!(read("release", "{}").unwrap_err(), "release needs `contract`");
        assert_eq!(
            read("release", r#"{"contract":"c","amount":1}"#).unwrap_err(),
            "release takes no `amount` (it takes contract)"
        );
        assert_eq!(read("balance", r#"{"x":1}"#).unwrap_err(), "balance takes no `x` (it takes nothing)");
        assert!(read("statement", r#"{"limit":101}"#).unwrap_err().contains("1 to 100"));
        assert!(read("charge", r#"{"mandate":"m","amount":0,"concept":"c"}"#).unwrap_err().contains("positive whole"));
        assert_eq!(
            read("steal", "{}").unwrap_err(),
            "no operation \"steal\"; the Libro's are accept, deliver, release, refund, bond, forfeit, mandate, \
             charge, revoke, balance, statement, contract, approve, decline"
        );
        assert_eq!(
            read(
                "mandate",
                r#"{"grantee":"g@a.test","cap":3,"authority":{"level":"autonomous","consequence":"costly"}}"#
            )
            .unwrap_err(),
            "mandate: `authority`: an authority that acts alone on costly movements needs a max_amount"
        );
        assert_eq!(
            read("deliver", r#"{"contract":"c","evidence_kind":" Source "}"#).unwrap(),
            r#"{"contract":"c","evidence_kind":"source","op":"deliver"}"#
        );
        assert!(read("deliver", r#"{"contract":"c","evidence_kind":"vibes"}"#).unwrap_err().contains("evidence kind"));
        assert_eq!(read("approve", r#"{"pending":"p-1"}"#).unwrap(), r#"{"op":"approve","pending":"p-1"}"#);
        let hex = "AB".repeat(32);
        assert_eq!(
            read("deliver", &format!(r#"{{"contract":"c","evidence_sha256":"{hex}"}}"#)).unwrap(),
            format!(r#"{{"contract":"c","evidence_sha256":"{}","op":"deliver"}}"#, hex.to_lowercase())
        );
        assert!(read("deliver", &format!(r#"{{"contract":"c","evidence_sha256":"{}"}}"#, "g".repeat(64))).is_err());
        assert_eq!(
            read("revoke", r#"{"mandate":"m","note":null}"#).unwrap_err(),
            "revoke takes no `note` (it takes mandate)"
        );
        assert_eq!(read("refund", r#"{"contract":"c","note":null}"#).unwrap(), r#"{"contract":"c","op":"refund"}"#);
    }
}
