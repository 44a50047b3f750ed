//! `nyx5 verify`: check the detached Ed25519 signature of any signed document against one key.
//!
//! Every signature is made for one kind of document (its context label is part of what is
//! signed), so the kind is told by `--kind` or by the members only that kind carries.

use nyx5_proto::Value;
use nyx5_proto::crypto::{Context, SigPublic};
use nyx5_proto::json::{Object, obj};
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::sign::{Signature, verify_object};

use crate::error::{Failure, Outcome};
use crate::io;

/// The members a document may be signed in, in the order they are looked for.
const MEMBERS: [&str; 2] = ["signature", "certification"];

/// The kinds `--kind` names, and their contexts.
const KINDS: [(&str, Context); 7] = [
    ("domain-card", Context::DomainCard),
    ("agent-card", Context::AgentCard),
    ("delegation", Context::Delegation),
    ("envelope", Context::Envelope),
    ("registration", Context::Registration),
    ("quote", Context::Quote),
    ("receipt", Context::Receipt),
];

/// The kind of a signed document, from the members only that kind carries.
fn kind_of(doc: &Object, member: &str) -> Option<Context> {
    let has = |m: &str| doc.contains_key(m);
    Some(match doc.get("tipo").and_then(Value::as_str) {
        Some("cotizacion") => Context::Quote,
        Some("recibo") => Context::Receipt,
        _ if member == "certification" => Context::AgentCard,
        _ if has("keys") && has("estafeta") => Context::DomainCard,
        _ if has("by") && has("address") && has("issued") => Context::Delegation,
        _ if has("id") && has("from") && has("to") => Context::Envelope,
        _ if has("local") && has("sig") && has("ts") => Context::Registration,
        _ => return None,
    })
}

/// Reads a document (card, envelope, quote, receipt, entry), verifies `member` (by default
/// `signature`, else `certification`) was made by `key` for its kind, and prints
/// `{"member","ok":true}`.
pub(crate) fn run(key: &str, member: Option<&str>, kind: Option<&str>) -> Outcome {
    let key = SigPublic::parse(key).map_err(|e| Failure::input("--key", &e))?;
    let bytes = io::read_stdin(MAX_ENVELOPE_BYTES)?;
    let doc = match Value::parse(&bytes, MAX_ENVELOPE_BYTES) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(Failure::usage("a signed document is a JSON object")),
        Err(e) => return Err(Failure::input("document", &e)),
    };
    let member = match member {
        Some(m) if doc.contains_key(m) => m,
        Some(m) => return Err(Failure::usage(format!("the document has no `{m}`"))),
        None => MEMBERS
            .into_iter()
            .find(|m| doc.contains_key(*m))
            .ok_or_else(|| Failure::usage("the document has no `signature` or `certification` to verify"))?,
    };
    let sig = Signature::read(&doc, member)
        .map_err(|e| Failure::rejected(format!("{member} does not verify: {}", e.reason)))?;
    if sig.kid != key {
        return Err(Failure::rejected(format!(
            "{member} does not verify: it was made by {}, not by {}",
            sig.kid.to_b64(),
            key.to_b64()
        )));
    }
    let context = match kind {
        Some(k) => KINDS.iter().find(|(name, _)| *name == k).map(|(_, c)| *c).ok_or_else(|| {
            let names: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
            Failure::usage(format!("--kind is one of {}", names.join(", ")))
        })?,
        None => kind_of(&doc, member)
            .ok_or_else(|| Failure::usage("cannot tell what kind of document this is; say it with --kind"))?,
    };
    verify_object(&doc, member, context, |kid| *kid == key).map_err(|_| {
        Failure::rejected(format!("{member} does not verify: the document was altered or the signature is forged"))
    })?;
    io::write_json_line(&Value::Object(obj([("member", member.into()), ("ok", true.into())])))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn doc(members: &[&str]) -> Object {
        members.iter().map(|m| ((*m).to_owned(), Value::from(1))).collect()
    }

    #[test]
    fn the_kind_is_told_by_all_the_members_only_that_kind_carries() {
        let kind = |members: &[&str], member: &str| kind_of(&doc(members), member);
        let mut quote = doc(&["id"]);
        quote.insert("tipo".into(), "cotizacion".into());
        assert_eq!(kind_of(&quote, "signature"), Some(Context::Quote));
        quote.insert("tipo".into(), "recibo".into());
        assert_eq!(kind_of(&quote, "signature"), Some(Context::Receipt));
        assert_eq!(kind(&["address", "sig"], "certification"), Some(Context::AgentCard));
        let kinds = [
            (&["keys", "estafeta"][..], Context::DomainCard),
            (&["by", "address", "issued"][..], Context::Delegation),
            (&["id", "from", "to"][..], Context::Envelope),
            (&["local", "sig", "ts"][..], Context::Registration),
        ];
        for (members, context) in kinds {
            assert_eq!(kind(members, "signature"), Some(context), "{members:?}");
            // Any one member missing, and the kind is not told.
            for left_out in members {
                let some: Vec<&str> = members.iter().copied().filter(|m| m != left_out).collect();
                assert_eq!(kind(&some, "signature"), None, "{some:?}");
            }
        }
        assert_eq!(kind(&[], "signature"), None);
    }
}
