//! `nyx5 verify`: check the detached Ed25519 signature of any signed document against one key;
//! or, with `--receipt`, the three signatures of a Libro receipt's proof (spec §20): the house's
//! receipt, the operator's envelope it answers and the seller's quote it names.
//!
//! Every signature is made for one kind of document (its context label is part of what is
//! signed), so the kind is told by `--kind` or by the members only that kind carries.

use std::path::{Path, PathBuf};

use clap::Args;
use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::{Context, SigPublic};
use nyx5_proto::json::{Object, obj};
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::quote::{self, Quote};
use nyx5_proto::receipt::{self, Receipt};
use nyx5_proto::sign::{Signature, verify_object};
use nyx5_proto::{Envelope, Value};

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

/// What `nyx5 verify --receipt` checks (see `nyx5 help verify`).
#[derive(Debug, Clone, Args)]
pub(crate) struct ProofArgs {
    /// A Libro receipt (file): checked against the house's keys
    #[arg(long, value_name = "FILE")]
    pub(crate) receipt: Option<PathBuf>,
    /// The operation envelope the receipt answers (file)
    #[arg(long, value_name = "FILE", requires = "receipt")]
    op: Option<PathBuf>,
    /// The quote the receipt names (file) [default: the quote of an `accept` operation]
    #[arg(long, value_name = "FILE", requires = "receipt")]
    quote: Option<PathBuf>,
    /// A domain key of the receipt's house (base64url); repeatable
    #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true, requires = "receipt")]
    house_key: Vec<String>,
    /// The house's domain card (file; `GET /.well-known/nyx5.json`): its keys, current and previous
    #[arg(long, value_name = "FILE", requires = "receipt")]
    house_card: Option<PathBuf>,
    /// The operator's agent card (file; `nyx5 card ADDRESS --json`), instead of --key
    #[arg(long, value_name = "FILE", requires = "op")]
    card: Option<PathBuf>,
    /// The seller's key (base64url)
    #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true, requires = "receipt")]
    seller_key: Option<String>,
    /// The seller's agent card (file), instead of --seller-key
    #[arg(long, value_name = "FILE", requires = "receipt")]
    seller_card: Option<PathBuf>,
}

/// How deep a document is searched for the part wanted (answer → envelope → content → body).
const MAX_NESTING: usize = 5;

/// Reads a JSON object from a file.
fn read_doc(path: &Path) -> Result<Object, Failure> {
    use std::io::Read;
    let shown = path.display();
    let f = std::fs::File::open(path).map_err(|e| Failure::usage(format!("cannot read {shown}: {e}")))?;
    let mut buf = Vec::new();
    f.take(u64::try_from(MAX_ENVELOPE_BYTES).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("cannot read {shown}: {e}")))?;
    match Value::parse(&buf, MAX_ENVELOPE_BYTES) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Failure::usage(format!("{shown} is not a JSON object"))),
        Err(e) => Err(Failure::usage(format!("{shown}: {}", e.reason))),
    }
}

/// The first object in `doc` (itself, then its members, depth first, in the order of `path`)
/// that `is` says is the one wanted.
fn find(doc: &Object, path: &[&str], is: &dyn Fn(&Object) -> bool, depth: usize) -> Option<Object> {
    if is(doc) {
        return Some(doc.clone());
    }
    if depth >= MAX_NESTING {
        return None;
    }
    path.iter().filter_map(|m| doc.get(*m).and_then(Value::as_object)).find_map(|o| find(o, path, is, depth + 1))
}

fn tipo(o: &Object, t: &str) -> bool {
    o.get("tipo").and_then(Value::as_str) == Some(t)
}

fn is_envelope(o: &Object) -> bool {
    o.contains_key("nyx5") && o.contains_key("from") && o.contains_key("to") && o.contains_key("signature")
}

/// A key given on the command line.
fn key_arg(name: &str, k: &str) -> Result<SigPublic, Failure> {
    SigPublic::parse(k).map_err(|e| Failure::input(name, &e))
}

/// One check and how it went.
struct Checks(Vec<Value>);

impl Checks {
    fn record(&mut self, what: String, result: Result<String, String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.0.push(Value::Object(obj([("check", what.into()), ("ok", ok.into()), ("detail", detail.into())])));
    }

    fn failed(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(Value::as_object)
            .filter(|c| c.get("ok") != Some(&Value::Bool(true)))
            .filter_map(|c| c.get("check").and_then(Value::as_str).map(str::to_owned))
            .collect()
    }
}

/// Whether `doc`'s `signature` was made for `context` by a key `accepts` takes: the signer.
fn signed(doc: &Object, context: Context, accepts: &dyn Fn(&SigPublic) -> bool) -> Result<String, String> {
    let sig = Signature::read(doc, "signature").map_err(|e| e.reason.to_string())?;
    if !accepts(&sig.kid) {
        return Err(format!("signed by {}, not by a key given", sig.kid.to_b64()));
    }
    verify_object(doc, "signature", context, |kid| accepts(kid))
        .map(|_| format!("signed by {}", sig.kid.to_b64()))
        .map_err(|_| "the signature does not verify: the document was altered or the signature is forged".to_owned())
}

/// The keys of a domain card file (its self-signature checked) or the keys given.
fn house_keys(a: &ProofArgs) -> Result<Vec<SigPublic>, Failure> {
    let mut keys = a.house_key.iter().map(|k| key_arg("--house-key", k)).collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = &a.house_card {
        let card = DomainCard::from_object(read_doc(p)?).map_err(|e| Failure::input("--house-card", &e))?;
        let card =
            card.verify(None).map_err(|e| Failure::rejected(format!("--house-card does not verify: {}", e.reason)))?;
        keys.extend(card.keys().iter().map(|k| k.sig));
    }
    if keys.is_empty() {
        return Err(Failure::usage("give the house's key (--house-key) or its domain card (--house-card)"));
    }
    Ok(keys)
}

/// The keys of an agent card file (current and previous) or the key given.
fn agent_keys(key: Option<&str>, card: Option<&Path>, name: &str) -> Result<Option<Vec<SigPublic>>, Failure> {
    if let Some(k) = key {
        return Ok(Some(vec![key_arg(name, k)?]));
    }
    let Some(p) = card else { return Ok(None) };
    let c = AgentCard::from_object(read_doc(p)?).map_err(|e| Failure::input(&p.display().to_string(), &e))?;
    Ok(Some(std::iter::once(c.sig()).chain(c.previous().iter().map(|k| k.sig)).collect()))
}

/// `nyx5 verify --receipt R [--op E] [--quote Q]`: see `ProofArgs`.
pub(crate) fn proof(a: &ProofArgs, key: Option<&str>) -> Outcome {
    let Some(receipt_path) = &a.receipt else { return Err(Failure::usage("give --receipt FILE")) };
    let house = house_keys(a)?;
    let doc = read_doc(receipt_path)?;
    let path = ["receipt", "content", "untrusted_content", "body"];
    let raw = find(&doc, &path, &|o| tipo(o, receipt::TIPO), 0)
        .ok_or_else(|| Failure::usage(format!("{}: no receipt (`tipo: recibo`) in it", receipt_path.display())))?;
    let r = Receipt::from_object(raw.clone()).map_err(|e| Failure::input("the receipt", &e))?;
    let mut checks = Checks(Vec::new());
    checks.record(
        format!("the receipt of {} ({}) is signed by the house {}", r.of, r.op, r.house),
        signed(&raw, Context::Receipt, &|k| house.contains(k)),
    );

    // The operation: the operator's envelope the receipt answers.
    let mut op_quote = None;
    if let Some(p) = &a.op {
        let doc = read_doc(p)?;
        let raw = find(&doc, &["envelope"], &is_envelope, 0)
            .ok_or_else(|| Failure::usage(format!("{}: no signed envelope in it", p.display())))?;
        let env = Envelope::from_object(raw).map_err(|e| Failure::input("the operation", &e))?;
        let keys = agent_keys(key, a.card.as_deref(), "--key")?
            .ok_or_else(|| Failure::usage("give the operator's key (--key) or agent card (--card) to check --op"))?;
        checks.record(
            format!("the operation {} is signed by its sender {}", env.id(), env.from()),
            signed(env.object(), Context::Envelope, &|k| keys.contains(k)),
        );
        let same = |what: &str, got: &str, want: &str| {
            if got == want {
                Ok(format!("{what} {got}"))
            } else {
                Err(format!("{what} {got}, but the receipt says {want}"))
            }
        };
        checks.record("the receipt answers this operation (of)".into(), same("id", env.id(), &r.of));
        checks.record(
            "the receipt's op_sha256 is this operation's SHA-256".into(),
            same("SHA-256", &env.sha256_hex(), &r.op_sha256),
        );
        checks
            .record("the receipt names its sender (from)".into(), same("sender", env.from().as_str(), r.from.as_str()));
        op_quote = env
            .content()
            .and_then(|c| c.body.as_object())
            .and_then(|b| b.get("quote"))
            .and_then(Value::as_object)
            .cloned();
    }

    // The quote: the seller's signed offer the receipt names.
    let quote_doc = match &a.quote {
        Some(p) => {
            let doc = read_doc(p)?;
            let path = ["quote", "content", "untrusted_content", "body", "envelope"];
            Some(
                find(&doc, &path, &|o| tipo(o, quote::TIPO), 0)
                    .ok_or_else(|| Failure::usage(format!("{}: no quote (`tipo: cotizacion`) in it", p.display())))?,
            )
        }
        None => op_quote,
    };
    if let Some(raw) = quote_doc {
        let q = Quote::from_object(raw.clone()).map_err(|e| Failure::input("the quote", &e))?;
        let keys = agent_keys(a.seller_key.as_deref(), a.seller_card.as_deref(), "--seller-key")?
            .ok_or_else(|| Failure::usage("give the seller's key (--seller-key) or agent card (--seller-card)"))?;
        checks.record(
            format!("the quote {} is signed by its seller {}", q.id, q.seller),
            signed(&raw, Context::Quote, &|k| keys.contains(k)),
        );
        let named = r.object().get("cotizacion_sha256").and_then(Value::as_str);
        let sha = q.sha256_hex();
        checks.record(
            "the receipt's cotizacion_sha256 is this quote's SHA-256".into(),
            match named {
                Some(n) if n == sha => Ok(format!("SHA-256 {sha}")),
                Some(n) => Err(format!("SHA-256 {sha}, but the receipt says {n}")),
                None => Err("the receipt names no quote (no cotizacion_sha256)".into()),
            },
        );
    } else if a.seller_key.is_some() || a.seller_card.is_some() {
        return Err(Failure::usage("a seller's key was given but no quote: give --quote FILE (or an accept --op)"));
    }

    let failed = checks.failed();
    let mut out = obj([
        ("ok", Value::Bool(failed.is_empty())),
        ("receipt", r.of.as_str().into()),
        ("checks", Value::Array(checks.0)),
    ]);
    if failed.is_empty() {
        return io::write_json_line(&Value::Object(out));
    }
    let reason = format!("the proof does not hold: {}", failed.join("; "));
    out.insert("exit".into(), i64::from(crate::error::EXIT_REJECTED).into());
    out.insert("reason".into(), reason.as_str().into());
    io::write_json_line(&Value::Object(out))?;
    Err(Failure::rejected(reason))
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
