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
use nyx5_proto::sign::{Signature, Verified, verify_object};
use nyx5_proto::{Address, Envelope, Timestamp, Value};

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
        .map_err(|e| Failure::rejected(format!("{member} does not verify: {}", e.reason)).named(e.name()))?;
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
    /// The operation envelope the receipt answers (file); required with --receipt
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
    /// The operator's agent card (file; `nyx5 card ADDRESS --json`), instead of --key; its
    /// certification is checked when it is of the receipt's house (--house-card)
    #[arg(long, value_name = "FILE", requires = "op")]
    card: Option<PathBuf>,
    /// The seller's key (base64url)
    #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true, requires = "receipt")]
    seller_key: Option<String>,
    /// The seller's agent card (file), instead of --seller-key
    #[arg(long, value_name = "FILE", requires = "receipt")]
    seller_card: Option<PathBuf>,
    /// The domain card of the seller's house (file), when it is not the receipt's house: to check
    /// the certification of --seller-card
    #[arg(long, value_name = "FILE", requires = "seller_card")]
    seller_house_card: Option<PathBuf>,
    /// A status the receipt may state besides `done` (`pending`: the movement waits for approval
    /// and only a hold moved; `declined`: nothing moved); repeatable. Without it, a receipt that
    /// does not say `done` does not prove the movement happened, and the proof fails
    #[arg(long, value_name = "STATUS", requires = "receipt")]
    allow_status: Vec<String>,
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

/// The keys a signature is checked against, and what a signature by each proves: a key of
/// `named` proves `name` (an identity that was checked), a key of `raw` only that key given.
struct Signers {
    named: Vec<SigPublic>,
    name: String,
    raw: Vec<SigPublic>,
    raw_flag: &'static str,
}

impl Signers {
    fn accepts(&self, k: &SigPublic) -> bool {
        self.named.contains(k) || self.raw.contains(k)
    }

    /// What a good signature on `doc` would prove: never more than what was checked.
    fn claim(&self, doc: &Object) -> String {
        let kid = Signature::read(doc, "signature").ok().map(|s| s.kid);
        match kid {
            Some(k) if self.named.contains(&k) => format!("signed by {}", self.name),
            Some(k) if self.raw.contains(&k) => format!("signed by the key given ({})", self.raw_flag),
            _ if !self.named.is_empty() || self.raw.is_empty() => format!("signed by {}", self.name),
            _ => format!("signed by the key given ({})", self.raw_flag),
        }
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

/// A domain card file, its self-signature checked.
fn domain_card(p: &Path, flag: &str) -> Result<Verified<DomainCard>, Failure> {
    let card = DomainCard::from_object(read_doc(p)?).map_err(|e| Failure::input(flag, &e))?;
    card.verify(None).map_err(|e| Failure::rejected(format!("{flag} does not verify: {}", e.reason)).named(e.name()))
}

/// The receipt's house's keys: `--house-key` (taken as given) and the keys of `--house-card`
/// valid at the receipt's `issued`, when the card is the receipt's house's. Returns the card
/// too, to check the certification of agent cards of that domain.
fn house_signers(
    a: &ProofArgs,
    r: &Receipt,
    checks: &mut Checks,
) -> Result<(Signers, Option<Verified<DomainCard>>), Failure> {
    let raw = a.house_key.iter().map(|k| key_arg("--house-key", k)).collect::<Result<Vec<_>, _>>()?;
    let mut named = Vec::new();
    let mut card = None;
    if let Some(p) = &a.house_card {
        let c = domain_card(p, "--house-card")?;
        let ok = c.domain() == r.house;
        checks.record(
            format!("the house card (--house-card) is the card of the receipt's house {}", r.house),
            if ok { Ok(format!("domain {}", c.domain())) } else { Err(format!("it is the card of {}", c.domain())) },
        );
        if ok {
            named = c.keys().iter().map(|k| k.sig).filter(|k| c.accepts_key(k, r.issued)).collect();
            card = Some(c);
        }
    }
    if raw.is_empty() && a.house_card.is_none() {
        return Err(Failure::usage("give the house's key (--house-key) or its domain card (--house-card)"));
    }
    let name = format!("the house {} (a key of its domain card given, valid when the receipt was issued)", r.house);
    Ok((Signers { named, name, raw, raw_flag: "--house-key" }, card))
}

/// The keys of an agent `who` (`role`: "its sender", "its seller"): the key given (taken as
/// given), and the keys of the card given when it is `who`'s — its certification checked when
/// the domain card of `who`'s house is among `domains`, else said to be unchecked.
#[allow(clippy::too_many_arguments)]
fn agent_signers(
    key: Option<&str>,
    card: Option<&Path>,
    flags: (&'static str, &str),
    who: &Address,
    role: &str,
    domains: &[&Verified<DomainCard>],
    at: Timestamp,
    checks: &mut Checks,
) -> Result<Option<Signers>, Failure> {
    let (key_flag, card_flag) = flags;
    let raw: Vec<SigPublic> = key.map(|k| key_arg(key_flag, k)).transpose()?.into_iter().collect();
    let mut named = Vec::new();
    let mut name = format!("{role} {who}");
    let Some(p) = card else {
        return Ok((!raw.is_empty()).then_some(Signers { named, name, raw, raw_flag: key_flag }));
    };
    let c = AgentCard::from_object(read_doc(p)?).map_err(|e| Failure::input(&p.display().to_string(), &e))?;
    if c.address() != who {
        checks.record(
            format!("the card given ({card_flag}) is {role} {who}'s"),
            Err(format!("it is the card of {}", c.address())),
        );
        return Ok(Some(Signers { named, name, raw, raw_flag: key_flag }));
    }
    let keys = |c: &AgentCard| {
        std::iter::once(c.sig()).chain(c.previous().iter().map(|k| k.sig)).filter(|k| c.accepts_key(k, at)).collect()
    };
    match domains.iter().find(|d| d.domain() == who.domain()) {
        Some(d) => match c.clone().verify(d, None, at) {
            Ok(_) => {
                checks.record(
                    format!("the card of {who} ({card_flag}) is certified by its house {}", who.domain()),
                    Ok(format!("certified by a key of {}'s domain card given", who.domain())),
                );
                named = keys(&c);
                name = format!("{role} {who} (its card certified by {})", who.domain());
            }
            Err(e) => checks.record(
                format!("the card of {who} ({card_flag}) is certified by its house {}", who.domain()),
                Err(e.reason.to_string()),
            ),
        },
        None => {
            named = keys(&c);
            name = format!(
                "the key of the card given for {who} ({card_flag}; taken as given, its house's certification not \
                 checked)"
            );
        }
    }
    Ok(Some(Signers { named, name, raw, raw_flag: key_flag }))
}

/// Whether `got` is `want`: a check's result.
fn same(what: &str, got: &str, want: &str, whose: &str) -> Result<String, String> {
    if got == want { Ok(format!("{what} {got}")) } else { Err(format!("{what} {got}, but {whose} says {want}")) }
}

/// The statuses a proof accepts: `done`, and those `--allow-status` names.
fn allowed_statuses(given: &[String]) -> Result<Vec<receipt::Status>, Failure> {
    let mut out = vec![receipt::Status::Done];
    for g in given {
        let s = receipt::Status::parse(g).ok_or_else(|| {
            let names: Vec<&str> = receipt::Status::ALL.iter().map(|s| s.as_str()).collect();
            Failure::usage(format!("--allow-status is one of {}", names.join(", ")))
        })?;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

fn status_list(allowed: &[receipt::Status]) -> String {
    allowed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" or ")
}

/// Whether the receipt's status is one accepted, said in words either way.
fn status_check(status: receipt::Status, allowed: &[receipt::Status]) -> Result<String, String> {
    let what = match status {
        receipt::Status::Done => "done: the movement happened as the receipt says",
        receipt::Status::Pending => {
            "pending: the movement waits for approval; nothing moved but a hold, and it may never happen"
        }
        receipt::Status::Declined => "declined: the movement was declined and did not happen",
    };
    if allowed.contains(&status) {
        Ok(format!("status {what}"))
    } else {
        Err(format!("status {what} (allow it with --allow-status {})", status.as_str()))
    }
}

/// `nyx5 verify --receipt R --op E [--quote Q]`: see `ProofArgs`.
pub(crate) fn proof(a: &ProofArgs, key: Option<&str>) -> Outcome {
    let Some(receipt_path) = &a.receipt else { return Err(Failure::usage("give --receipt FILE")) };
    let Some(op_path) = &a.op else {
        return Err(Failure::usage("give the operation the receipt answers (--op FILE): a proof checks all of it"));
    };
    let doc = read_doc(receipt_path)?;
    let path = ["receipt", "content", "untrusted_content", "body"];
    let raw = find(&doc, &path, &|o| tipo(o, receipt::TIPO), 0)
        .ok_or_else(|| Failure::usage(format!("{}: no receipt (`tipo: recibo`) in it", receipt_path.display())))?;
    let r = Receipt::from_object(raw.clone()).map_err(|e| Failure::input("the receipt", &e))?;
    let allowed = allowed_statuses(&a.allow_status)?;
    let mut checks = Checks(Vec::new());
    // A receipt proves a movement only when it says it was done: a waiting one moved a hold, a
    // declined one nothing. Checked first, and said whatever the signatures show.
    let label = if allowed.contains(&r.status) {
        format!("the receipt's status is {}", status_list(&allowed))
    } else {
        format!(
            "the receipt's status is {}, but it says status {} (--allow-status {} accepts it)",
            status_list(&allowed),
            r.status.as_str(),
            r.status.as_str()
        )
    };
    checks.record(label, status_check(r.status, &allowed));
    let (house, house_card) = house_signers(a, &r, &mut checks)?;
    checks.record(
        format!("the receipt of {} ({}) is {}", r.of, r.op, house.claim(&raw)),
        signed(&raw, Context::Receipt, &|k| house.accepts(k)),
    );
    let seller_house = a.seller_house_card.as_deref().map(|p| domain_card(p, "--seller-house-card")).transpose()?;
    let domains: Vec<&Verified<DomainCard>> = house_card.iter().chain(seller_house.iter()).collect();

    // The operation: the operator's envelope the receipt answers.
    let doc = read_doc(op_path)?;
    let raw_env = find(&doc, &["envelope"], &is_envelope, 0)
        .ok_or_else(|| Failure::usage(format!("{}: no signed envelope in it", op_path.display())))?;
    let env = Envelope::from_object(raw_env).map_err(|e| Failure::input("the operation", &e))?;
    let sender = agent_signers(
        key,
        a.card.as_deref(),
        ("--key", "--card"),
        env.from(),
        "its sender",
        &domains,
        r.issued,
        &mut checks,
    )?
    .ok_or_else(|| Failure::usage("give the operator's key (--key) or agent card (--card) to check --op"))?;
    checks.record(
        format!("the operation {} is {}", env.id(), sender.claim(env.object())),
        signed(env.object(), Context::Envelope, &|k| sender.accepts(k)),
    );
    checks.record("the receipt answers this operation (of)".into(), same("id", env.id(), &r.of, "the receipt"));
    checks.record(
        "the receipt's op_sha256 is this operation's SHA-256".into(),
        same("SHA-256", &env.sha256_hex(), &r.op_sha256, "the receipt"),
    );
    checks.record(
        "the receipt names its sender (from)".into(),
        same("sender", env.from().as_str(), r.from.as_str(), "the receipt"),
    );
    let body = env.content().and_then(|c| c.body.as_object()).cloned();
    let op_quote = match &body {
        Some(b) => {
            let op = b.get("op").and_then(Value::as_str).unwrap_or("");
            checks.record("the receipt names this operation's op".into(), same("op", op, &r.op, "the receipt"));
            b.get("quote").and_then(Value::as_object).cloned()
        }
        None => {
            checks.record(
                "the operation's body can be read".into(),
                Err("the operation envelope is sealed (or its body is not an object): its op and the quote it \
                     carries could not be checked"
                    .into()),
            );
            None
        }
    };

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
    let named = r.object().get("cotizacion_sha256").and_then(Value::as_str);
    if let Some(raw) = quote_doc {
        let q = Quote::from_object(raw.clone()).map_err(|e| Failure::input("the quote", &e))?;
        let seller = agent_signers(
            a.seller_key.as_deref(),
            a.seller_card.as_deref(),
            ("--seller-key", "--seller-card"),
            &q.seller,
            "its seller",
            &domains,
            r.issued,
            &mut checks,
        )?
        .ok_or_else(|| Failure::usage("give the seller's key (--seller-key) or agent card (--seller-card)"))?;
        checks.record(
            format!("the quote {} is {}", q.id, seller.claim(&raw)),
            signed(&raw, Context::Quote, &|k| seller.accepts(k)),
        );
        let sha = q.sha256_hex();
        checks.record(
            "the receipt's cotizacion_sha256 is this quote's SHA-256".into(),
            match named {
                Some(n) if n == sha => Ok(format!("SHA-256 {sha}")),
                Some(n) => Err(format!("SHA-256 {sha}, but the receipt says {n}")),
                None => Err("the receipt names no quote (no cotizacion_sha256)".into()),
            },
        );
        checks.record("the quote is for the receipt's house".into(), same("house", &q.house, &r.house, "the receipt"));
        checks.record(
            "the quote's buyer is the receipt's operator".into(),
            same("buyer", q.buyer.as_str(), r.from.as_str(), "the receipt"),
        );
    } else if named.is_some() || r.op == "accept" {
        checks.record(
            "the quote the receipt names is checked".into(),
            Err("no quote was found to check: give it with --quote FILE".into()),
        );
    } else if a.seller_key.is_some() || a.seller_card.is_some() {
        return Err(Failure::usage("a seller's key was given but no quote: give --quote FILE (or an accept --op)"));
    }

    let failed = checks.failed();
    let mut out = obj([
        ("ok", Value::Bool(failed.is_empty())),
        ("receipt", r.of.as_str().into()),
        ("status", r.status.as_str().into()),
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
