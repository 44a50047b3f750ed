//! An App Card as `nyx5 app` takes it (docs/SPEC.md "Apps — Pinned"): read from a directory or
//! a URL, its signature, primitives and every listed file checked ([`check`]); and its author
//! held to the one the profile pins for its id ([`author_pin`]). `app verify` and `app run`
//! (`app_broker.rs`) both start here.

use std::path::{Path, PathBuf};

use nyx5_proto::app::{self, AppCard, MAX_CARD_BYTES, MAX_FILE_BYTES};

use crate::client::profile::AppPin;
use crate::error::Failure;
use crate::net;

/// Most directory entries `verify` looks at when it lists files the card does not.
const MAX_WALK: usize = 2000;

/// What the user said of an app's author on `app run`: `--author`, `--sha256`,
/// `--trust-new-author`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AuthorWord<'a> {
    pub(crate) author: Option<&'a str>,
    pub(crate) sha256: Option<&'a str>,
    pub(crate) trust_new_author: bool,
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
    a: &AuthorWord<'_>,
) -> Result<AuthorStep, Failure> {
    if let Some(want) = a.sha256
        && !want.eq_ignore_ascii_case(sha256)
    {
        return Err(Failure::rejected(format!("app {id}: the card's sha256 is {sha256}, not {want}")));
    }
    if let Some(want) = a.author {
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
pub(crate) fn author_pin(path: &Path, card: &AppCard, a: &AuthorWord<'_>) -> Result<(), Failure> {
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
