//! Sealed attachments from the command line (docs/SPEC.md "Attachments"): `nyx5 send --attach
//! FILE` seals each file under its own key and stores the ciphertext at the agent's house, part by
//! part, for the recipients; `nyx5 inbox --save DIR` fetches what a message attaches from its
//! sender's house, with this agent's own token, checks and opens it, and writes the file.

use std::path::{Path, PathBuf};

use nyx5_client::attach::{self as rules, Described, MAX_FILE_BYTES};
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Address, Timestamp, seal};

use super::Ctx;
use super::profile::AgentEntry;
use crate::error::Failure;
use crate::sys::OsRng;

/// A file to attach, read when the command was given.
#[derive(Debug, Clone, Default)]
pub(crate) struct File {
    pub(crate) name: String,
    pub(crate) media: String,
    pub(crate) bytes: Vec<u8>,
    /// Of the file (what the recipients check after opening it).
    pub(crate) sha256: String,
}

impl File {
    /// Reads `path` (at most 25 MiB).
    pub(crate) fn read(path: &Path) -> Result<File, Failure> {
        let shown = path.display();
        let size = std::fs::metadata(path).map_err(|e| Failure::usage(format!("--attach {shown}: {e}")))?.len();
        if size > MAX_FILE_BYTES {
            return Err(Failure::usage(format!(
                "--attach {shown}: {size} bytes; an attachment is at most {MAX_FILE_BYTES}"
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| Failure::usage(format!("--attach {shown}: {e}")))?;
        let name = rules::safe_name(&path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let media = rules::media_for(&name).to_owned();
        Ok(File { sha256: hex(&sha256(&bytes)), name, media, bytes })
    }
}

/// Seals `file`, describes it to `me`'s house for `readers` (until `expires`, else the house's
/// default) and stores its parts: what the sealed content says of it, and the envelope's public
/// entry.
pub(crate) fn upload(
    ctx: &Ctx,
    me: &AgentEntry,
    file: &File,
    readers: &[&Address],
    expires: Option<Timestamp>,
) -> Result<(Described, Value), Failure> {
    let mut rng = OsRng::new();
    let sealed = seal::seal_file(&file.bytes, &mut rng);
    rng.check()?;
    let mut ask = obj([
        ("bytes", i64::try_from(sealed.sealed.len()).unwrap_or(i64::MAX).into()),
        ("sha256", hex(&sha256(&sealed.sealed)).into()),
        ("to", Value::Array(readers.iter().map(|a| a.as_str().into()).collect())),
    ]);
    if let Some(t) = expires {
        ask.insert("expires".into(), t.to_rfc3339().into());
    }
    let what = format!("storing {}", file.name);
    let (_, made) = ctx.call(me, "POST", "/attachments", Some(&Value::Object(ask)), &what)?;
    let text = |name: &str| {
        field::str(&made, name).map(str::to_owned).map_err(|e| Failure::network(format!("{what}: {}", e.reason)))
    };
    let (id, url) = (text("id")?, text("url")?);
    let part =
        usize::try_from(field::integer(&made, "part_bytes").unwrap_or(1024 * 1024)).unwrap_or(1024 * 1024).max(1);
    for (n, chunk) in sealed.sealed.chunks(part).enumerate() {
        let target = format!("/attachments/{id}/{n}");
        ctx.call_bytes(me, &me.house, "PUT", &target, Some(chunk), &what)?;
    }
    let entry = rules::public_entry(&url, &sealed.sealed);
    let described = Described {
        url,
        name: file.name.clone(),
        media: file.media.clone(),
        bytes: file.bytes.len() as u64,
        sha256: file.sha256.clone(),
        key: sealed.key,
        iv: sealed.iv,
    };
    Ok((described, entry))
}

/// Removes at `me`'s house the files `env` attaches (its public `attachments` there), after the
/// house refused `env` for good. Best effort: what stays ends with its life.
pub(crate) fn remove_stored(ctx: &Ctx, me: &AgentEntry, env: &nyx5_proto::Envelope) {
    let list = env.object().get("attachments").and_then(Value::as_array).unwrap_or_default();
    let urls: Vec<String> =
        list.iter().filter_map(|a| a.as_object()?.get("url")?.as_str().map(str::to_owned)).collect();
    remove_urls(ctx, me, &urls);
}

/// Removes the attachments at these URLs of `me`'s house (others are left alone). Best effort.
pub(crate) fn remove_urls(ctx: &Ctx, me: &AgentEntry, urls: &[String]) {
    for id in urls.iter().filter_map(|u| rules::at_house(u, &me.house)) {
        let _ = ctx.call(me, "DELETE", &format!("/attachments/{id}"), None, "removing an attachment");
    }
}

/// [`save`] for every message of an inbox's answer (`{envelopes: [...]}`).
pub(crate) fn save_all(ctx: &Ctx, v: &mut Value, dir: &Path) -> Result<(), Failure> {
    let me = ctx.me()?;
    if let Value::Object(o) = v
        && let Some(Value::Array(list)) = o.get_mut("envelopes")
    {
        for m in list.iter_mut() {
            if let Value::Object(m) = m {
                save(ctx, &me, m, dir)?;
            }
        }
    }
    Ok(())
}

/// Fetches, checks, opens and writes into `dir` every file message `m` (as `nyx5 inbox` shows it)
/// attaches; adds `saved` (`{name, path, bytes}`) and `unsaved` (`{name, reason}`) to it.
pub(crate) fn save(ctx: &Ctx, me: &AgentEntry, m: &mut Object, dir: &Path) -> Result<(), Failure> {
    let content = m.get("content").and_then(Value::as_object).cloned().unwrap_or_default();
    let (files, unreadable) = rules::described(&content);
    if files.is_empty() && unreadable.is_empty() {
        return Ok(());
    }
    let mut saved = Vec::new();
    let mut unsaved: Vec<Value> =
        unreadable.into_iter().map(|why| Value::Object(obj([("name", Value::Null), ("reason", why.into())]))).collect();
    let from = m.get("from").and_then(Value::as_str).and_then(|f| Address::parse(f).ok());
    let house = match from {
        Some(from) => ctx.resolver(Some(me), crate::sys::now()?)?.domain(from.domain()).map(|d| d.url),
        None => Err(Failure::usage("the message names no sender")),
    };
    for d in files {
        let done =
            house.as_ref().map_err(Failure::one_line).and_then(|url| fetch(ctx, me, url, &d).map_err(|f| f.one_line()));
        match done.and_then(|plain| write_new(dir, &d.name, &plain).map_err(|e| e.one_line())) {
            Ok(path) => saved.push(Value::Object(obj([
                ("name", d.name.as_str().into()),
                ("path", path.display().to_string().into()),
                ("bytes", i64::try_from(d.bytes).unwrap_or(i64::MAX).into()),
            ]))),
            Err(why) => unsaved.push(Value::Object(obj([("name", d.name.as_str().into()), ("reason", why.into())]))),
        }
    }
    m.insert("saved".into(), Value::Array(saved));
    if !unsaved.is_empty() {
        m.insert("unsaved".into(), Value::Array(unsaved));
    }
    Ok(())
}

/// The file `d` describes, from the sender's house at `house` only, checked and opened.
pub(crate) fn fetch(ctx: &Ctx, me: &AgentEntry, house: &str, d: &Described) -> Result<Vec<u8>, Failure> {
    let id = rules::at_house(&d.url, house).ok_or_else(|| {
        Failure::usage(format!("{}: not an attachment of the sender's house ({house}); not fetched", d.url))
    })?;
    let what = format!("fetching {}", d.name);
    let (_, shown) = ctx.call_at(me, house, "GET", &format!("/attachments/{id}"), None, &what)?;
    let parts = field::integer(&shown, "parts").unwrap_or(0);
    let bytes = field::integer(&shown, "bytes").unwrap_or(0);
    let part_bytes = field::integer(&shown, "part_bytes").unwrap_or(0);
    // The sealed file is the file and its tag, in the parts its size makes: nothing else is read.
    let whole = u64::try_from(bytes).ok() == Some(d.bytes + 16);
    if !whole || part_bytes != rules::PART_BYTES || parts != (bytes + part_bytes - 1) / part_bytes {
        return Err(Failure::network(format!("{what}: the house describes another file")));
    }
    let mut sealed = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
    for n in 0..parts {
        sealed.extend(ctx.call_bytes(me, house, "GET", &format!("/attachments/{id}/{n}"), None, &what)?);
        if sealed.len() as u64 > d.bytes + 16 {
            return Err(Failure::network(format!("{what}: the house sent more than the file")));
        }
    }
    let plain = seal::open_file(&d.key, &d.iv, &sealed)
        .ok_or_else(|| Failure::network(format!("{what}: it does not open with the message's key")))?;
    if !d.matches(&plain) {
        return Err(Failure::network(format!("{what}: it is not the file the message describes (size or SHA-256)")));
    }
    Ok(plain)
}

/// Writes `bytes` as a new file named `name` in `dir`, never over another (`name (2).ext`, …).
fn write_new(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, Failure> {
    use std::io::Write;
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("--save {}: {e}", dir.display())))?;
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_owned(), format!(".{e}")),
        _ => (name.to_owned(), String::new()),
    };
    for k in 1..1000 {
        let file = if k == 1 { format!("{stem}{ext}") } else { format!("{stem} ({k}){ext}") };
        let path = dir.join(file);
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        match open.open(&path) {
            Ok(mut f) => {
                f.write_all(bytes).map_err(|e| Failure::usage(format!("writing {}: {e}", path.display())))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Failure::usage(format!("writing {}: {e}", path.display()))),
        }
    }
    Err(Failure::usage(format!("--save {}: too many files named {name}", dir.display())))
}
