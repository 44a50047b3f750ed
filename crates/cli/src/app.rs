//! `nyx5 app verify|sign|run|publish`: App Cards (docs/SPEC.md "Apps — Pinned"). `verify` checks
//! a card in a directory or at a URL (signature, every listed file, the primitives, optionally a
//! catalogue's pin); `sign` writes `entry.integrity` and `sig` with an agent key file; `run`
//! verifies, holds the card's author to the one pinned for its id in the profile (pinned on the
//! first run: [`author_pin`]), and then starts the app under a per-run broker (`app_broker.rs`);
//! `publish` lists a card in (or removes it from) a house's catalogue with the operator's token.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use nyx5_proto::app::{self, AppCard, MAX_CARD_BYTES, MAX_FILE_BYTES, integrity_of};
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::sign::verify_object;

use crate::client::cli::{Common, emit};
use crate::client::http::{read_object, send};
use crate::client::profile::AppPin;
use crate::client::{Ctx, house_target};
use crate::error::{Failure, Outcome};
use crate::keyfile::KeyFile;
use crate::{io, net, sys};

/// Most directory entries `verify` looks at when it lists files the card does not.
const MAX_WALK: usize = 2000;

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
    Run(RunArgs),
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

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The app's directory.
    pub(crate) dir: PathBuf,
    /// The most the app may move (a stamp on a send), as `nyx5 subagent --authority`: JSON or
    /// @FILE [default: no money at all].
    #[arg(long, value_name = "JSON|@FILE")]
    pub(crate) authority: Option<String>,
    /// The house's operator token, for an app that declares `invite_create` [default: none, and
    /// such calls are denied].
    #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
    pub(crate) admin_token: Option<String>,
    /// The author the card must be signed by (its did:key, as `app verify` shows it, or the
    /// base64url key); pinned for this app, replacing any other.
    #[arg(long, value_name = "DID")]
    pub(crate) author: Option<String>,
    /// The SHA-256 (hex) the card must have (as `app verify` shows it): that very card is taken
    /// and its author pinned for this app, replacing any other.
    #[arg(long, value_name = "HEX")]
    pub(crate) sha256: Option<String>,
    /// Take a card signed by another author than the one pinned for this app, and pin it.
    #[arg(long)]
    pub(crate) trust_new_author: bool,
    #[command(flatten)]
    pub(crate) common: Common,
    /// Arguments for the app.
    #[arg(last = true)]
    pub(crate) args: Vec<String>,
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

/// What `app run` does about the app's author, decided from the pin the profile holds for its
/// id ([`decide_author`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthorStep {
    /// The card's author is the one pinned: nothing to write.
    Same,
    /// Pin `to`, where the pin is `from` now (`None`: the first run).
    Pin { from: Option<AppPin>, to: AppPin },
}

/// Decides whether a card with `author` (did:key) and `sha256` may run under the app pin
/// `pinned`: a first run pins its author; a card by the pinned author runs; another author
/// only when the user said so (`--trust-new-author`, or `--author`/`--sha256` naming exactly
/// this author or this card), and is pinned then. `--author` and `--sha256` are checked first.
pub(crate) fn decide_author(
    id: &str,
    pinned: Option<&AppPin>,
    author: &str,
    sha256: &str,
    a: &RunArgs,
) -> Result<AuthorStep, Failure> {
    if let Some(want) = &a.sha256
        && !want.eq_ignore_ascii_case(sha256)
    {
        return Err(Failure::rejected(format!("app {id}: the card's sha256 is {sha256}, not {want}")));
    }
    if let Some(want) = &a.author {
        let key = app::parse_did_key(want)
            .or_else(|_| nyx5_proto::crypto::SigPublic::parse(want))
            .map_err(|_| Failure::usage(format!("--author {want:?} is neither a did:key nor a base64url key")))?;
        if app::did_key(&key) != author {
            return Err(Failure::rejected(format!("app {id} is signed by {author}, not by {}", app::did_key(&key))));
        }
    }
    let to = AppPin { author: author.to_owned(), sha256: sha256.to_owned() };
    let explicit = a.trust_new_author || a.author.is_some() || a.sha256.is_some();
    match pinned {
        None => Ok(AuthorStep::Pin { from: None, to }),
        Some(p) if p.author == author => Ok(AuthorStep::Same),
        Some(p) if explicit => Ok(AuthorStep::Pin { from: Some(p.clone()), to }),
        Some(p) => Err(Failure::rejected(format!(
            "app {id} is signed by {author}, but this profile pins its author {} (since its first run); \
             refused",
            p.author
        ))
        .hint(format!(
            "if you checked that {author} may publish {id}, run it again with --trust-new-author (or \
             --author {author})"
        ))),
    }
}

/// Holds the verified `card`'s author to the pin for its id in the profile at `path`, pinning
/// it on the first run (or when the user said to take another author): decided by
/// [`decide_author`], then written under the profile's lock only while the pin is still the one
/// decided on. Says on stderr when it pins.
pub(crate) fn author_pin(path: &Path, card: &AppCard, a: &RunArgs) -> Result<(), Failure> {
    let (id, author, sha256) = (card.id(), card.author_did(), card.sha256_hex());
    let pinned = crate::client::profile::Profile::load(path)?.apps.get(id).cloned();
    let AuthorStep::Pin { from, to } = decide_author(id, pinned.as_ref(), &author, &sha256, a)? else {
        return Ok(());
    };
    crate::client::profile::Profile::update(path, |p| {
        if p.apps.get(id) != from.as_ref() {
            return Err(Failure::usage(format!("the author pinned for app {id} changed meanwhile; run it again")));
        }
        p.apps.insert(id.to_owned(), to.clone());
        Ok(())
    })?;
    match from {
        None => eprintln!("nyx5: app {id}: its author {author} is pinned in the profile (first run)"),
        Some(old) => eprintln!("nyx5: app {id}: its author pinned is now {author} (was {})", old.author),
    }
    Ok(())
}

fn text(o: &Object, name: &str) -> String {
    o.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Where an app's files come from.
enum Source {
    Dir(PathBuf),
    /// The URL of app.json's directory, ending in `/`.
    Url(String),
}

impl Source {
    fn of(text: &str) -> Source {
        if text.starts_with("https://") || text.starts_with("http://") {
            let base = match text.rfind('/') {
                Some(i) if i > text.find("://").unwrap_or(0) + 2 => text.get(..=i).unwrap_or(text).to_owned(),
                _ => format!("{text}/"),
            };
            Source::Url(base)
        } else {
            Source::Dir(PathBuf::from(text))
        }
    }

    /// A file of the app by its (checked) relative path; `None` when missing or too large.
    fn read(&self, path: &str, max: usize) -> Option<Vec<u8>> {
        match self {
            Source::Dir(d) => crate::io::read_capped(&d.join(path), max).ok(),
            Source::Url(base) => fetch(base, &format!("{base}{path}"), max).ok(),
        }
    }
}

/// GET `url` through the CLI's outbound client: no redirects, a deadline, at most `max` bytes,
/// and only to the origin the user named (`base`, checked again after DNS): an app's files never
/// send the command anywhere else.
fn fetch(base: &str, url: &str, max: usize) -> Result<Vec<u8>, Failure> {
    let policy = nyx5_client::outbound::Policy::new([base], false, false);
    let (status, body) = net::Client::guarded(net::TIMEOUT, max, policy, None)
        .request("GET", url, &[], &[])
        .map_err(|e| Failure::network(format!("fetching {url}: {e}")))?;
    if status != 200 {
        return Err(Failure::rejected(format!("fetching {url}: HTTP {status}")));
    }
    Ok(body)
}

/// Reads and parses the card of `source` (a card that does not parse is rejected, exit 1).
fn load(source: &Source, shown: &str) -> Result<AppCard, Failure> {
    let bytes = match source {
        Source::Dir(d) => crate::io::read_capped(&d.join("app.json"), MAX_CARD_BYTES)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", d.join("app.json").display())))?,
        Source::Url(base) => fetch(base, &format!("{base}app.json"), MAX_CARD_BYTES)?,
    };
    AppCard::parse(&bytes).map_err(|e| Failure::rejected(format!("{shown}: {}", e.reason)).named(e.name()))
}

/// The card of `source`, its signature, primitives and files checked; and the files in the
/// directory the card does not list (reported, not refused: a checkout holds other files).
pub(crate) fn check(source_text: &str) -> Result<(AppCard, Vec<String>), Failure> {
    let source = Source::of(source_text);
    let card = load(&source, source_text)?;
    let verified =
        card.verify().map_err(|e| Failure::rejected(format!("{source_text}: {}", e.reason)).named(e.name()))?;
    verified
        .check_files(|p| source.read(p, MAX_FILE_BYTES))
        .map_err(|f| Failure::rejected(format!("{source_text}: {f}")))?;
    let unlisted = match &source {
        Source::Dir(d) => unlisted(d, &card),
        Source::Url(_) => vec![],
    };
    Ok((verified.into_inner(), unlisted))
}

/// Files under `dir` (not following links, dot-directories skipped) that the card does not list.
fn unlisted(dir: &Path, card: &AppCard) -> Vec<String> {
    let listed: std::collections::BTreeSet<&str> = card.files().collect();
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    let mut seen = 0usize;
    while let Some((d, prefix)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK {
                out.push("… (more not shown)".to_owned());
                return out;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = format!("{prefix}{name}");
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                if !name.starts_with('.') {
                    stack.push((e.path(), format!("{rel}/")));
                }
            } else if rel != "app.json" && !listed.contains(rel.as_str()) {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
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
