//! `nyx5 app verify|sign|run|publish`: App Cards (docs/SPEC.md "Apps — Pinned"). `verify` checks
//! a card in a directory or at a URL (signature, every listed file, the primitives, optionally a
//! catalogue's pin); `sign` writes `entry.integrity` and `sig` with an agent key file; `run`
//! verifies, holds the card's author to the one pinned for its id in the profile (pinned on the
//! first run: `app_card::author_pin`), and then starts the app under a per-run broker (`app_broker.rs`);
//! `publish` lists a card in (or removes it from) a house's catalogue with the operator's token.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use nyx5_proto::app::{self, AppCard, MAX_CARD_BYTES, MAX_FILE_BYTES, integrity_of};
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::sign::verify_object;

use crate::app_card::check;
use crate::client::cli::{Common, emit};
use crate::client::http::{read_object, send};
use crate::client::{Ctx, house_target};
use crate::error::{Failure, Outcome};
use crate::keyfile::KeyFile;
use crate::{io, sys};

/// Apps: a signed App Card and the files it pins, run under a broker that grants exactly the
/// primitives it declares.
#[derive(Debug, Subcommand)]
pub(crate) enum AppCommand {
    /// Check an app: DIR/app.json or a URL to an app.json (its files beside it): the author's
    /// signature, every file of entry.integrity, and that Nyx5 grants every primitive it asks.
    Verify(VerifyArgs),
    /// Sign DIR/app.json: hash the files it names into entry.integrity, set `author` to the key's
    /// did:key, and write `sig`.
    Sign {
        /// The app's directory.
        dir: PathBuf,
        /// The author's key file (`nyx5 keys new`); its Ed25519 key signs.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// List a verified app in a house's catalogue (operator: the house token), or remove it.
    Publish {
        /// The app's directory (or, with --remove, its id).
        app: String,
        /// The house: a domain, or its URL [default: the acting agent's].
        #[arg(long, value_name = "HOUSE")]
        house: Option<String>,
        /// Where to get the app (its app.json's URL), written in the entry.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Remove the app with this id instead.
        #[arg(long)]
        remove: bool,
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN].
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Verify DIR, then run its entry.main with ARGS under a per-run broker acting as the
    /// profile's agent; the app's exit status is passed on. The first run pins the app's
    /// author (per app id, in the profile); a card by another author is refused unless
    /// --trust-new-author, --author or --sha256 says to take it.
    Run(crate::app_broker::RunArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The app's directory, or an http(s) URL to its app.json.
    pub(crate) source: String,
    /// The SHA-256 (hex) the card must have (its canonical JSON, `sig` included).
    #[arg(long, value_name = "HEX")]
    pub(crate) sha256: Option<String>,
    /// A house (domain or URL) whose signed catalogue (GET /apps) must list this very card.
    #[arg(long, value_name = "HOUSE")]
    pub(crate) catalogue: Option<String>,
    #[command(flatten)]
    pub(crate) common: Common,
}

pub(crate) fn run(command: AppCommand) -> Outcome {
    match command {
        AppCommand::Verify(a) => {
            let json = a.common.json;
            emit(json, verify(&a), human)
        }
        AppCommand::Sign { dir, key } => {
            let v = sign(&dir, &key)?;
            io::write_text(&format!(
                "signed {} {} as {}\n  sha256 {}\n",
                text(&v, "id"),
                text(&v, "version"),
                text(&v, "author"),
                text(&v, "sha256")
            ))
        }
        AppCommand::Run(a) => crate::app_broker::run(&a),
        AppCommand::Publish { app, house, url, remove, admin_token, common } => {
            let r = crate::client::cli::admin_token(admin_token)
                .and_then(|token| publish(&common.ctx()?, &app, house.as_deref(), url.as_deref(), remove, &token));
            emit(common.json, r, |v| format!("{}\n", v.canonical_string()))
        }
    }
}

fn text(o: &Object, name: &str) -> String {
    o.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn verify(a: &VerifyArgs) -> Result<Value, Failure> {
    let (card, unlisted) = check(&a.source)?;
    if let Some(want) = &a.sha256
        && !want.eq_ignore_ascii_case(&card.sha256_hex())
    {
        return Err(Failure::rejected(format!("{}: the card's sha256 is {}, not {want}", a.source, card.sha256_hex())));
    }
    let anchor = match &a.catalogue {
        Some(house) => Some(catalogue(&a.common.ctx()?, house, &card)?),
        None => None,
    };
    let grants = card
        .grants()
        .into_iter()
        .map(|p| Value::Object(obj([("primitive", p.as_str().into()), ("verb", p.verb().into())])))
        .collect();
    let mut o = obj([
        ("ok", Value::Bool(true)),
        ("id", card.id().into()),
        ("name", card.name().into()),
        ("version", card.version().into()),
        ("category", card.category().as_str().into()),
        ("author", card.author_did().into()),
        ("sha256", card.sha256_hex().into()),
        ("files", Value::Array(card.files().map(Value::from).collect())),
        ("unlisted", Value::Array(unlisted.into_iter().map(Value::from).collect())),
        ("grants", Value::Array(grants)),
    ]);
    if let (Some(house), Some(anchor)) = (&a.catalogue, anchor) {
        o.insert("catalogue".into(), house.as_str().into());
        o.insert("catalogue_anchor".into(), anchor.into());
    }
    Ok(Value::Object(o))
}

/// Fetches `house`'s catalogue, checks its signature by the house's domain key (its card
/// resolved as every card is), and that it pins this very card; what that key was checked
/// against (`none` for a house named by URL whose domain the profile holds no pin for: the
/// profile keeps nothing from it).
fn catalogue(ctx: &Ctx, house: &str, card: &AppCard) -> Result<&'static str, Failure> {
    let now = sys::now()?;
    let res = ctx.resolver(None, now)?;
    let (url, named) = house_target(&res, house)?;
    let what = format!("the catalogue of {house}");
    let (status, body) = send(ctx.net.as_ref(), "GET", &format!("{url}/apps"), &[], &[], &what)?;
    let doc = read_object(status, &body, &what)?;
    let domain =
        field::str(&doc, "house").map_err(|_| Failure::rejected(format!("{what}: it names no house")))?.to_owned();
    if named.is_none() {
        res.at(&domain, &url);
    } else if named.as_deref() != Some(domain.as_str()) {
        return Err(Failure::rejected(format!("{what}: the house at {url} says it is {domain}")));
    }
    let d = res.domain(&domain)?;
    verify_object(&doc, "signature", Context::AppCatalogue, |k| d.card.accepts_key(k, now))
        .map_err(|_| Failure::rejected(format!("{what}: not signed by {domain}, or altered on the way")))?;
    app::check_catalogue(&doc, card).map_err(|e| Failure::rejected(format!("{what}: {}", e.reason)).named(e.name()))?;
    Ok(d.anchor)
}

fn human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let list = |name: &str| -> Vec<String> {
        o.get(name)
            .and_then(Value::as_array)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let mut s = format!(
        "app {} {} ({}) — {}\n  author    {}\n  sha256    {}\n  signature verifies (nyx5/1 app)\n",
        text(&o, "id"),
        text(&o, "version"),
        text(&o, "category"),
        crate::client::output::safe(&text(&o, "name")),
        text(&o, "author"),
        text(&o, "sha256"),
    );
    s.push_str(&format!("  files     {} listed, every one matches\n", list("files").len()));
    let unlisted = list("unlisted");
    if !unlisted.is_empty() {
        s.push_str(&format!(
            "  unlisted  {} (not covered by the signature)\n",
            crate::client::output::safe(&unlisted.join(", "))
        ));
    }
    if let Some(c) = o.get("catalogue").and_then(Value::as_str) {
        s.push_str(&format!("  catalogue listed by {c}, same sha256\n"));
        if text(&o, "catalogue_anchor") == "none" {
            s.push_str("            (its domain key was checked against nothing; nothing was pinned)\n");
        }
    }
    s.push_str("  grants\n");
    for g in o.get("grants").and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_object) {
        s.push_str(&format!("    {:<18} → {}\n", text(g, "primitive"), text(g, "verb")));
    }
    s
}

/// Signs DIR/app.json in place (canonical JSON and a newline).
fn sign(dir: &Path, key_path: &Path) -> Result<Object, Failure> {
    let keys = KeyFile::read(key_path)?;
    let path = dir.join("app.json");
    let bytes = crate::io::read_capped(&path, MAX_CARD_BYTES)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let mut draft =
        Value::parse_object(&bytes, MAX_CARD_BYTES, "app.json").map_err(|e| Failure::input("app.json", &e))?;
    let mut entry = match draft.get("entry") {
        Some(Value::Object(e)) => e.clone(),
        _ => return Err(Failure::usage("app.json: `entry` must be an object")),
    };
    // Every file entry.integrity lists, and every file the entry names.
    let mut paths: Vec<String> = match entry.get("integrity") {
        Some(Value::Object(i)) => i.keys().cloned().collect(),
        _ => vec![],
    };
    for member in app::ENTRY_FILES {
        match entry.get(member) {
            Some(Value::String(s)) => paths.push(s.clone()),
            Some(Value::Array(a)) => paths.extend(a.iter().filter_map(Value::as_str).map(str::to_owned)),
            _ => {}
        }
    }
    let mut integrity = Object::new();
    for p in paths {
        app::check_path(&p).map_err(|e| Failure::input("app.json", &e))?;
        let file = dir.join(&p);
        let bytes = crate::io::read_capped(&file, MAX_FILE_BYTES)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
        integrity.insert(p, integrity_of(&bytes).into());
    }
    entry.insert("integrity".into(), Value::Object(integrity));
    draft.insert("entry".into(), Value::Object(entry));
    draft.remove("author");
    let card = AppCard::sign(draft, &keys.sig).map_err(|e| Failure::input("app.json", &e))?;
    let mut out = card.to_value().canonical();
    out.push(b'\n');
    std::fs::write(&path, out).map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?;
    Ok(obj([
        ("id", card.id().into()),
        ("version", card.version().into()),
        ("author", card.author_did().into()),
        ("sha256", card.sha256_hex().into()),
    ]))
}

/// POST /apps (or DELETE /apps/:id) on the operator's house.
fn publish(
    ctx: &Ctx,
    app: &str,
    house: Option<&str>,
    url: Option<&str>,
    remove: bool,
    token: &str,
) -> Result<Value, Failure> {
    let base = crate::client::directory::operator_house(ctx, house)?;
    let auth = format!("Bearer {token}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    if remove {
        app::check_app_id(app).map_err(|e| Failure::input("APP", &e))?;
        let what = format!("removing {app} from the catalogue");
        let (status, body) = send(ctx.net.as_ref(), "DELETE", &format!("{base}/apps/{app}"), &headers, &[], &what)?;
        return read_object(status, &body, &what).map(Value::Object);
    }
    let (card, _) = check(app)?;
    let mut body = obj([("card", card.to_value())]);
    if let Some(u) = url {
        body.insert("url".into(), u.into());
    }
    let what = format!("listing {} in the catalogue", card.id());
    let (status, answer) =
        send(ctx.net.as_ref(), "POST", &format!("{base}/apps"), &headers, &Value::Object(body).canonical(), &what)?;
    read_object(status, &answer, &what).map(Value::Object)
}
