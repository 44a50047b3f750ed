//! The Libro's verbs on the command line (clap) and how their answers are printed: quotes,
//! operations, direct reads and the operator's top-ups and journal.

use std::path::Path;

use clap::{Args, Subcommand};
use nyx5_proto::Value;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, obj};

use super::cli::{Common, emit};
use super::libro::{self, QuoteRequest, op_body, wait_for};
use super::libro_read::{self, TopupRequest};
use crate::error::{Failure, Outcome};
use crate::{io, sys};

/// The largest evidence file hashed by `deliver --evidence`, and the largest quote read.
const MAX_EVIDENCE_BYTES: u64 = 1 << 30;

/// Options every operation takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct OpOptions {
    /// The house whose Libro holds the deal (`libro@<DOMAIN>`), e.g. the seller's [default: your
    /// own house]
    #[arg(long, value_name = "DOMAIN")]
    house: Option<String>,
    /// Wait for the receipt (or the bounce) in your mailbox and print it [default: 30 s when
    /// given without a number]. Exit 4 when the Libro refused, 3 when nothing came in time.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "30")]
    wait: Option<u64>,
    #[command(flatten)]
    common: Common,
}

/// The Libro's verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum LibroCommand {
    /// Offer BUYER a service at a price: a quote you sign, sent to the buyer sealed.
    Quote(QuoteArgs),
    /// Accept a quote and commit its payment (this moves money): QUOTE is a file, `-` for
    /// standard input, or the JSON itself; the quote, or the envelope or inbox item carrying it.
    Accept {
        #[arg(value_name = "QUOTE", allow_hyphen_values = true)]
        quote: String,
        #[command(flatten)]
        op: OpOptions,
    },
    /// As the seller of an escrow: say the work is delivered, with a hash of the evidence.
    Deliver {
        contract: String,
        /// The SHA-256 (hex) of the evidence
        #[arg(long, value_name = "HEX", conflicts_with = "evidence")]
        evidence_sha256: Option<String>,
        /// A file whose SHA-256 is the evidence's
        #[arg(long, value_name = "FILE")]
        evidence: Option<std::path::PathBuf>,
        /// Where the evidence comes from: source, calculation, user, external or inference (the
        /// terms may require one)
        #[arg(long, value_name = "KIND")]
        evidence_kind: Option<String>,
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Pay the seller of an escrow, or return a bond to its bondholder (this moves money).
    Release {
        contract: String,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Give an escrow back to its buyer (this moves money).
    Refund {
        contract: String,
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Back a claim with your tokens, held until the verifier releases or forfeits them (this
    /// moves money).
    Bond(BondArgs),
    /// As a bond's verifier or arbiter: the claim was false; the bond goes to its beneficiary
    /// (this moves money).
    Forfeit {
        contract: String,
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Let GRANTEE spend up to a cap of your tokens (or, with --parent, of a mandate you hold).
    Mandate(MandateArgs),
    /// Spend under a mandate you hold: its root grantor pays you (this moves money).
    Charge {
        mandate: String,
        #[arg(long, value_name = "N")]
        amount: i64,
        #[arg(long)]
        concept: String,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Movements waiting for approval that you asked for or may decide, at a Libro (read
    /// directly with your signature).
    Approvals {
        /// The house's domain (a URL only for your own house) [default: your own]
        #[arg(long)]
        house: Option<String>,
        /// Decided and expired ones too
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Approve a movement an authority you set asked you about: it happens now, paid from what
    /// it held (this moves money). Shows it and asks first on a terminal, unless --yes.
    Approve {
        /// The approval's id (`nyx5 approvals`)
        id: String,
        /// Approve without asking on the terminal
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Decline a movement waiting for approval (yours to decide, or your own request): what it
    /// held returns to its payer.
    Decline {
        id: String,
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Revoke a mandate you granted (and every mandate under it).
    Revoke {
        mandate: String,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Ask the Libro for your latest entries, by mail (the answer is a signed receipt).
    Statement {
        /// Entries (1-100) [default: 20]
        #[arg(long)]
        limit: Option<i64>,
        #[command(flatten)]
        op: OpOptions,
    },
    /// Your balance, contracts and mandates at a Libro, read directly with your signature.
    Balance {
        /// The house's domain (a URL only for your own house) [default: your own]
        #[arg(long)]
        house: Option<String>,
        /// Another account you may read [default: yours]
        #[arg(long, value_name = "ADDRESS")]
        account: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// A contract you are party to: its state and history.
    Contract {
        id: String,
        /// The house's domain (a URL only for your own house) [default: your own]
        #[arg(long)]
        house: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// An agent's public record of deals, signed by its house.
    Historial {
        address: String,
        #[command(flatten)]
        common: Common,
    },
    /// Issue tokens to an account (the house's operator only).
    Topup {
        address: String,
        amount: i64,
        /// Makes it idempotent: the same id again answers the same entry
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        note: Option<String>,
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN, for your own house only]
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long, visible_alias = "house-url", value_name = "HOUSE")]
        house: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Offline checks of a Libro.
    #[command(subcommand)]
    Libro(LibroTool),
    /// The house's journal: every signed entry, in order (the house's operator only).
    Journal {
        /// Entries after this number
        #[arg(long, value_name = "N")]
        after: Option<i64>,
        /// Entries per page (1-200) [default: 100]
        #[arg(long)]
        limit: Option<i64>,
        /// Follow every page and print one `{house, entries}` document
        #[arg(long, conflicts_with = "limit")]
        all: bool,
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN, for your own house only]
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long, visible_alias = "house-url", value_name = "HOUSE")]
        house: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum LibroTool {
    /// Check a whole journal: every entry's signature against the house's domain keys, its sum,
    /// the hash chain, and that no balance but casa@'s is ever negative. SOURCE is a file
    /// holding `{house, entries}` (`nyx5 journal --all --json`) or a house's URL, whose
    /// `/libro/diario` is read page by page with the operator's token. The keys come from the
    /// house's domain card resolved the usual way (hosts file, DNS, well-known), never from the
    /// URL read, and a URL must be where that house answers. Exit 1 when it does not hold,
    /// naming the first entry that fails.
    Audit {
        #[arg(value_name = "FILE|URL")]
        source: String,
        /// A domain key of the house (base64url); repeatable [default: the keys of its domain
        /// card, resolved and verified, each valid at the entry's time]
        #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true)]
        key: Vec<String>,
        /// The house's operator token, to read a URL [default: $NYX5_ADMIN_TOKEN, for your own
        /// house only]
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Args)]
pub(crate) struct QuoteArgs {
    /// Who the quote is for
    buyer: String,
    /// Tokens, a whole number
    #[arg(long, value_name = "N")]
    price: i64,
    /// What is sold
    #[arg(long, value_name = "TEXT")]
    concept: String,
    /// spot (paid on acceptance), escrow (held until released) or metered (a mandate)
    #[arg(long, default_value = "spot", value_parser = ["spot", "escrow", "metered"])]
    contract: String,
    /// The terms as a JSON object (acceptance criteria, `deadline`, …)
    #[arg(long, value_name = "JSON")]
    terms: Option<String>,
    /// Who settles a dispute
    #[arg(long, value_name = "ADDRESS")]
    arbiter: Option<String>,
    /// When the offer lapses (RFC 3339 or +7d)
    #[arg(long, value_name = "WHEN")]
    expires: Option<String>,
    /// Who brought the deal; paid --share of your part
    #[arg(long, value_name = "ADDRESS", requires = "share")]
    referrer: Option<String>,
    /// The referrer's share, in basis points (1-10000) of your part
    #[arg(long, value_name = "BPS", requires = "referrer")]
    share: Option<i64>,
    /// The house whose Libro will hold the deal [default: your own]
    #[arg(long, value_name = "DOMAIN")]
    house: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct BondArgs {
    /// Tokens held
    #[arg(long, value_name = "N")]
    amount: i64,
    /// What you assert
    #[arg(long, value_name = "TEXT")]
    claim: String,
    /// Who judges the claim
    #[arg(long, value_name = "ADDRESS")]
    verifier: String,
    /// Who gets the bond if it is forfeited [default: the house]
    #[arg(long, value_name = "ADDRESS")]
    beneficiary: Option<String>,
    #[arg(long, value_name = "ADDRESS")]
    arbiter: Option<String>,
    #[arg(long, value_name = "HEX")]
    evidence_sha256: Option<String>,
    /// Where the claim's evidence comes from: source, calculation, user, external or inference
    #[arg(long, value_name = "KIND")]
    evidence_kind: Option<String>,
    /// When the bond returns to you by itself (RFC 3339 or +30d)
    #[arg(long, value_name = "WHEN")]
    expires: Option<String>,
    /// Vouch for this agent: the bond opens allowlist inboxes to it (`send --aval`)
    #[arg(long, value_name = "ADDRESS")]
    vouchee: Option<String>,
    #[command(flatten)]
    op: OpOptions,
}

#[derive(Debug, Args)]
pub(crate) struct MandateArgs {
    /// Who may spend
    grantee: String,
    /// The most it may spend, in tokens
    #[arg(long, value_name = "N")]
    cap: i64,
    /// Only for these concepts (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "CONCEPTS")]
    concepts: Option<Vec<String>>,
    /// When it ends (RFC 3339 or +30d)
    #[arg(long, value_name = "WHEN")]
    expires: Option<String>,
    /// A mandate you hold, to delegate part of it
    #[arg(long, value_name = "ID")]
    parent: Option<String>,
    /// How far the grantee goes alone: an authority as JSON, or @FILE (docs/SPEC.md §16b), e.g.
    /// '{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok"}': above
    /// 50 a charge waits for your `nyx5 approve`
    #[arg(long, value_name = "JSON")]
    authority: Option<String>,
    #[command(flatten)]
    op: OpOptions,
}

/// The members given on the command line, `None` left out.
fn members<const N: usize>(pairs: [(&str, Option<Value>); N]) -> Object {
    pairs.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v))).collect()
}

fn some_str(v: &Option<String>) -> Option<Value> {
    v.as_deref().map(Value::from)
}

/// Reads a JSON document from a file, `-` (standard input), or the text itself when it is an
/// object.
fn document(arg: &str) -> Result<Value, Failure> {
    let max = nyx5_proto::limits::MAX_ENVELOPE_BYTES;
    let bytes = if arg.trim_start().starts_with('{') {
        arg.as_bytes().to_vec()
    } else if arg == "-" {
        io::read_stdin(max)?
    } else {
        read_file(Path::new(arg), u64::try_from(max).unwrap_or(u64::MAX))?
    };
    Value::parse(&bytes, max).map_err(|e| Failure::usage(format!("{arg}: not JSON: {}", e.reason)).named(e.name()))
}

fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let mut buf = Vec::new();
    f.take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    if u64::try_from(buf.len()).unwrap_or(u64::MAX) > max {
        return Err(Failure::usage(format!("{} is larger than {max} bytes", path.display())));
    }
    Ok(buf)
}

/// Builds operation `op` from its members and sends it.
fn operate(op: &str, args: Object, o: &OpOptions) -> Result<Value, Failure> {
    let wait = wait_for(o.wait)?;
    let body = op_body(op, &args, sys::now()?)?;
    let ctx = o.common.ctx()?;
    libro::operate(&ctx, o.house.as_deref(), body, wait)
}

fn quote_request(a: &QuoteArgs) -> Result<QuoteRequest, Failure> {
    let terms = match &a.terms {
        None => None,
        Some(t) => match Value::parse_str(t) {
            Ok(Value::Object(o)) => Some(o),
            _ => return Err(Failure::usage("--terms must be a JSON object")),
        },
    };
    Ok(QuoteRequest {
        buyer: a.buyer.clone(),
        price: a.price,
        concept: a.concept.clone(),
        contract: Some(a.contract.clone()),
        terms,
        arbiter: a.arbiter.clone(),
        expires: a.expires.clone(),
        referrer: a.referrer.clone().zip(a.share),
        house: a.house.clone(),
        plain: false,
    })
}

/// Runs one Libro verb.
pub(crate) fn run(command: LibroCommand) -> Outcome {
    use libro::operate_human as human;
    match command {
        LibroCommand::Quote(a) => {
            let r = quote_request(&a).and_then(|req| libro::quote(&a.common.ctx()?, &req));
            emit(a.common.json, r, libro::quote_human)
        }
        LibroCommand::Accept { quote, op } => {
            let r = (|| {
                let wait = wait_for(op.wait)?;
                let doc = document(&quote)?;
                if op.house.is_some() {
                    return Err(Failure::usage("accept goes to the Libro the quote names; drop --house"));
                }
                libro::accept(&op.common.ctx()?, &doc, wait)
            })();
            emit(op.common.json, r, human)
        }
        LibroCommand::Deliver { contract, evidence_sha256, evidence, evidence_kind, note, op } => {
            let r = (|| {
                let evidence = match (&evidence_sha256, &evidence) {
                    (Some(h), _) => Some(Value::from(h.as_str())),
                    (None, Some(f)) => Some(hex(&sha256(&read_file(f, MAX_EVIDENCE_BYTES)?)).into()),
                    (None, None) => None,
                };
                let args = members([
                    ("contract", Some(contract.as_str().into())),
                    ("evidence_sha256", evidence),
                    ("evidence_kind", some_str(&evidence_kind)),
                    ("note", some_str(&note)),
                ]);
                operate("deliver", args, &op)
            })();
            emit(op.common.json, r, human)
        }
        LibroCommand::Release { contract, op } => {
            let r = operate("release", obj([("contract", contract.as_str().into())]), &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Refund { contract, note, op } => {
            let args = members([("contract", Some(contract.as_str().into())), ("note", some_str(&note))]);
            let r = operate("refund", args, &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Bond(a) => {
            let args = members([
                ("amount", Some(a.amount.into())),
                ("claim", Some(a.claim.as_str().into())),
                ("verifier", Some(a.verifier.as_str().into())),
                ("beneficiary", some_str(&a.beneficiary)),
                ("arbiter", some_str(&a.arbiter)),
                ("evidence_sha256", some_str(&a.evidence_sha256)),
                ("evidence_kind", some_str(&a.evidence_kind)),
                ("expires", some_str(&a.expires)),
                ("vouchee", some_str(&a.vouchee)),
            ]);
            let r = operate("bond", args, &a.op);
            emit(a.op.common.json, r, human)
        }
        LibroCommand::Forfeit { contract, reason, op } => {
            let args = obj([("contract", contract.as_str().into()), ("reason", reason.as_str().into())]);
            let r = operate("forfeit", args, &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Mandate(a) => {
            let scope = a.concepts.as_ref().map(|c| {
                let list = c.iter().map(|c| Value::from(c.as_str())).collect();
                Value::Object(obj([("concepts", Value::Array(list))]))
            });
            let r = (|| {
                let authority = a.authority.as_deref().map(super::cli::authority_arg).transpose()?;
                let args = members([
                    ("grantee", Some(a.grantee.as_str().into())),
                    ("cap", Some(a.cap.into())),
                    ("scope", scope),
                    ("expires", some_str(&a.expires)),
                    ("parent", some_str(&a.parent)),
                    ("authority", authority.map(|x| x.to_value())),
                ]);
                operate("mandate", args, &a.op)
            })();
            emit(a.op.common.json, r, human)
        }
        LibroCommand::Charge { mandate, amount, concept, op } => {
            let args = obj([
                ("mandate", mandate.as_str().into()),
                ("amount", amount.into()),
                ("concept", concept.as_str().into()),
            ]);
            let r = operate("charge", args, &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Approvals { house, all, common } => {
            let r = common.ctx().and_then(|ctx| libro_read::approvals(&ctx, house.as_deref(), all));
            emit(common.json, r, libro_read::approvals_human)
        }
        LibroCommand::Approve { id, yes, op } => {
            let r = (|| {
                if !yes {
                    let ctx = op.common.ctx()?;
                    libro_read::confirm_approval(&ctx, op.house.as_deref(), &id)?;
                }
                operate("approve", obj([("pending", id.as_str().into())]), &op)
            })();
            emit(op.common.json, r, human)
        }
        LibroCommand::Decline { id, note, op } => {
            let args = members([("pending", Some(id.as_str().into())), ("note", some_str(&note))]);
            let r = operate("decline", args, &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Revoke { mandate, op } => {
            let r = operate("revoke", obj([("mandate", mandate.as_str().into())]), &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Statement { limit, op } => {
            let r = operate("statement", members([("limit", limit.map(Value::from))]), &op);
            emit(op.common.json, r, human)
        }
        LibroCommand::Balance { house, account, common } => {
            let r = common.ctx().and_then(|ctx| libro_read::balance(&ctx, house.as_deref(), account.as_deref()));
            emit(common.json, r, libro_read::balance_human)
        }
        LibroCommand::Contract { id, house, common } => {
            let r = common.ctx().and_then(|ctx| libro_read::contract(&ctx, &id, house.as_deref()));
            emit(common.json, r, libro_read::contract_human)
        }
        LibroCommand::Historial { address, common } => {
            let r = common.ctx().and_then(|ctx| libro_read::historial(&ctx, &address));
            emit(common.json, r, libro_read::historial_human)
        }
        LibroCommand::Topup { address, amount, id, note, admin_token: t, house, common } => {
            let r = (|| {
                let req = TopupRequest { address: address.clone(), amount, id: id.clone(), note: note.clone() };
                libro_read::topup(&common.ctx()?, house.as_deref(), t.as_deref(), &req)
            })();
            emit(common.json, r, libro_read::topup_human)
        }
        LibroCommand::Libro(LibroTool::Audit { source, key, admin_token: t, common }) => {
            let r = common.ctx().and_then(|ctx| libro_read::audit(&ctx, &source, t.as_deref(), &key));
            emit(common.json, r, libro_read::audit_human)
        }
        LibroCommand::Journal { after, limit, all, admin_token: t, house, common } => {
            let r = common
                .ctx()
                .and_then(|ctx| libro_read::journal(&ctx, house.as_deref(), t.as_deref(), after, limit, all));
            emit(common.json, r, libro_read::journal_human)
        }
    }
}
