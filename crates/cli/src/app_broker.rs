//! `nyx5 app run DIR -- ARGS…`: the app verified, then its `entry.main` started as a child with
//! a clean environment, and a per-run broker on a Unix socket in a fresh 0700 directory (path in
//! `NYX5_BROKER`, a fresh token in `NYX5_APP_TOKEN`). Each line is decided by
//! `nyx5_proto::app::decide_request`; a granted call runs the agent's own verb (send, inbox,
//! card, lists, remind, invite, register) and answers its JSON as `text`. A stamp passes the run's
//! authority first; without one the app moves no money. The broker ends with the child.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use nyx5_proto::app::{self, BrokerCall, BrokerCode, MAX_BROKER_LINE_BYTES, MAX_BROKER_TEXT_BYTES, Primitive};
use nyx5_proto::authority::{Authority, Consequence, HOUR_MS, Intent, Verdict};
use nyx5_proto::json::{Object, Value, field, obj};

use crate::app_card::{self, AuthorWord};
use crate::client::Ctx;
use crate::client::cli::{Common, authority_arg};
use crate::client::directory::{self, InviteRequest};
use crate::client::send::{self, SendRequest};
use crate::client::{lists, mailbox, register};
use crate::error::{Failure, Outcome};
use crate::sys::{self, OsRng};

/// Most connections one run accepts (an app needs one or a few).
const MAX_CONNECTIONS: usize = 16;
/// The longest `wait_for_message` waits.
const MAX_WAIT_S: i64 = 60;

/// What every call of one run shares.
struct Broker {
    token: String,
    granted: Vec<Primitive>,
    agent: Option<PathBuf>,
    as_address: Option<String>,
    hosts: Option<PathBuf>,
    authority: Option<Authority>,
    admin_token: Option<String>,
    /// When each stamp this run paid went out (for `max_per_hour`).
    paid: Mutex<Vec<i64>>,
}

/// A refusal or failure of one call.
struct Denied(BrokerCode, String);

impl From<Failure> for Denied {
    fn from(f: Failure) -> Denied {
        Denied(BrokerCode::Error, f.one_line())
    }
}

fn bad(why: impl Into<String>) -> Denied {
    Denied(BrokerCode::BadRequest, why.into())
}

/// `nyx5 app run`'s arguments.
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

pub(crate) fn run(a: &RunArgs) -> Outcome {
    let (card, _) = app_card::check(&a.dir.to_string_lossy())?;
    let main = card.main().ok_or_else(|| Failure::rejected("the app names no entry.main to run"))?.to_owned();
    let authority = a.authority.as_deref().map(authority_arg).transpose()?;
    let mut rng = OsRng::new();
    let token = nyx5_proto::crypto::hex(&rng.bytes::<32>());
    let tag = nyx5_proto::crypto::hex(&rng.bytes::<8>());
    rng.check()?;
    let run_dir = runs_dir()?.join(format!("nyx5-app-{tag}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&run_dir)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", run_dir.display())))?;
    let _cleanup = Cleanup(run_dir.clone());
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Failure::usage(format!("cannot restrict {}: {e}", run_dir.display())))?;
    let socket = run_dir.join("broker.sock");
    let listener = UnixListener::bind(&socket)
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", socket.display())))?;
    let broker = Arc::new(Broker {
        token: token.clone(),
        granted: card.grants(),
        agent: a.common.agent.clone(),
        as_address: a.common.as_address.clone(),
        hosts: a.common.hosts.clone(),
        authority,
        admin_token: a.admin_token.clone(),
        paid: Mutex::new(Vec::new()),
    });
    // Fail before starting anything when the profile cannot act, or the author is not the one
    // pinned for this app.
    let ctx = broker.ctx()?;
    ctx.me()?;
    let word =
        AuthorWord { author: a.author.as_deref(), sha256: a.sha256.as_deref(), trust_new_author: a.trust_new_author };
    app_card::author_pin(&ctx.profile_path, &card, &word)?;
    let b = Arc::clone(&broker);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(MAX_CONNECTIONS).flatten() {
            let b = Arc::clone(&b);
            std::thread::spawn(move || serve(&b, stream));
        }
    });
    let dir = private_copy(&a.dir, &card, &run_dir)?;
    let mut command = child_command(&dir, &main);
    command
        .args(&a.args)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()))
        .env("HOME", &run_dir)
        .env("NYX5_BROKER", &socket)
        .env("NYX5_APP_TOKEN", &token)
        .env("NYX5_APP_ID", card.id());
    let status = command.status().map_err(|e| Failure::usage(format!("cannot start {main}: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => {
            Err(Failure::usage(format!("the app exited with status {code}")).with_code(u8::try_from(code).unwrap_or(1)))
        }
        None => {
            use std::os::unix::process::ExitStatusExt;
            let sig = status.signal().unwrap_or(0);
            Err(Failure::usage(format!("the app was ended by signal {sig}"))
                .with_code(u8::try_from(128 + sig).unwrap_or(1)))
        }
    }
}

/// Where runs live: `$XDG_RUNTIME_DIR` (the user's own, 0700), else `~/.local/state/nyx5/apps`;
/// never the shared temp dir, whose other users' files (`/tmp/node_modules`, `/tmp/package.json`)
/// Node would find by walking up from the app.
fn runs_dir() -> Result<PathBuf, Failure> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = env("XDG_RUNTIME_DIR").filter(|d| d.is_dir()) {
        return Ok(d);
    }
    let home = env("HOME").ok_or_else(|| Failure::usage("no place to run the app: set XDG_RUNTIME_DIR or HOME"))?;
    let d = home.join(".local").join("state").join("nyx5").join("apps");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", d.display())))?;
    Ok(d)
}

/// The app's listed files, as verified, copied into `run_dir/app` (0700; files 0600, the entry
/// 0700): the app runs from there, so a file changed after `verify`, or one the card does not
/// list (a `node_modules`, a `package.json`), is not what runs.
fn private_copy(source: &Path, card: &nyx5_proto::app::AppCard, run_dir: &Path) -> Result<PathBuf, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    card.check_files(|p| {
        let bytes = crate::io::read_capped(&source.join(p), nyx5_proto::app::MAX_FILE_BYTES).ok()?;
        files.push((p.to_owned(), bytes.clone()));
        Some(bytes)
    })
    .map_err(|f| Failure::rejected(format!("{}: {f}", source.display())))?;
    let app = run_dir.join("app");
    let mut dirs = std::fs::DirBuilder::new();
    dirs.recursive(true).mode(0o700);
    let main = card.main();
    for (p, bytes) in files {
        // `p` passed `app::check_path`: relative, no `..`, no empty segment.
        let to = app.join(&p);
        let made = to.parent().map_or(Ok(()), |d| dirs.create(d)).and_then(|()| {
            let mode = if Some(p.as_str()) == main { 0o700 } else { 0o600 };
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&to)?;
            std::io::Write::write_all(&mut f, &bytes)
        });
        made.map_err(|e| Failure::usage(format!("cannot copy {p} into {}: {e}", app.display())))?;
    }
    dirs.create(&app).map_err(|e| Failure::usage(format!("cannot create {}: {e}", app.display())))?;
    Ok(app)
}

/// Removes the run's directory (and socket) when the run ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// JavaScript runs under `node`; any other entry is executed itself.
fn child_command(dir: &Path, main: &str) -> Command {
    if [".mjs", ".js", ".cjs"].iter().any(|e| main.ends_with(e)) {
        let mut c = Command::new("node");
        c.arg(dir.join(main));
        c
    } else {
        Command::new(dir.join(main))
    }
}

/// One connection: a line in, a line out, until it closes or a line is over the cap.
fn serve(b: &Broker, stream: UnixStream) {
    let Ok(mut out) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let cap = u64::try_from(MAX_BROKER_LINE_BYTES).unwrap_or(u64::MAX) + 2;
    loop {
        let mut line = Vec::new();
        match reader.by_ref().take(cap).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let ended = line.last() == Some(&b'\n');
        if ended {
            line.pop();
        }
        if !ended && line.len() > MAX_BROKER_LINE_BYTES {
            // The rest of the line cannot be told from the next request: answer and close.
            let _ = write_line(
                &mut out,
                &app::answer_err(&Value::Null, BrokerCode::TooLarge, "a request is at most 64 KiB"),
            );
            return;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let answer = match app::decide_request(&line, &b.token, &b.granted) {
            Err(r) => app::answer_err(&r.id, r.code, &r.message),
            Ok(call) => match b.call(&call) {
                Ok(v) => {
                    let text = v.canonical_string();
                    if text.len() > MAX_BROKER_TEXT_BYTES {
                        app::answer_err(&call.id, BrokerCode::TooLarge, "the answer is over 1 MiB; ask for less")
                    } else {
                        app::answer_ok(&call.id, &text)
                    }
                }
                Err(Denied(code, message)) => app::answer_err(&call.id, code, &message),
            },
        };
        if write_line(&mut out, &answer).is_err() {
            return;
        }
    }
}

fn write_line(out: &mut UnixStream, v: &Value) -> std::io::Result<()> {
    let mut bytes = v.canonical();
    bytes.push(b'\n');
    out.write_all(&bytes)
}

fn opt_str(p: &Object, name: &str) -> Result<Option<String>, Denied> {
    field::opt_str(p, name).map(|s| s.map(str::to_owned)).map_err(|e| bad(e.reason))
}

fn opt_int(p: &Object, name: &str) -> Result<Option<i64>, Denied> {
    field::opt_integer(p, name).map_err(|e| bad(e.reason))
}

fn req_str(p: &Object, name: &str) -> Result<String, Denied> {
    opt_str(p, name)?.ok_or_else(|| bad(format!("`{name}` is required")))
}

impl Broker {
    fn ctx(&self) -> Result<Ctx, Failure> {
        Ctx::new(self.agent.as_deref(), self.as_address.as_deref(), self.hosts.as_deref())
    }

    fn call(&self, call: &BrokerCall) -> Result<Value, Denied> {
        let p = &call.params;
        let ctx = self.ctx()?;
        match call.primitive {
            Primitive::SendMessage => {
                let to = match field::optional(p, "to") {
                    Some(Value::String(s)) => vec![s.clone()],
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad("`to` lists addresses")))
                        .collect::<Result<_, _>>()?,
                    _ => return Err(bad("`to` is an address or a list of them")),
                };
                let text = req_str(p, "text")?;
                let stamp = opt_int(p, "stamp")?;
                if let Some(amount) = stamp {
                    // A stamp is paid to each recipient whose inbox asks one: judged as that
                    // many movements, the hour's places taken before anything is sent.
                    self.judge_stamps(amount, to.len())?;
                }
                let req = SendRequest {
                    to,
                    body: Some(Value::String(text)),
                    thread: opt_str(p, "thread")?,
                    in_reply_to: opt_str(p, "in_reply_to")?,
                    stamp,
                    // Only a stamp the app names and the authority allows is paid.
                    auto_stamp_max: 0,
                    ..SendRequest::default()
                };
                Ok(send::send(&ctx, &req, false)?)
            }
            Primitive::ReadInbox => {
                let limit = mailbox::check_limit(opt_int(p, "limit")?.or(Some(20)), mailbox::INBOX_MAX_LIMIT)?;
                Ok(mailbox::inbox(&ctx, limit, opt_int(p, "after")?, 0)?)
            }
            Primitive::WaitForMessage => {
                let timeout = opt_int(p, "timeout_s")?.unwrap_or(30);
                if !(0..=MAX_WAIT_S).contains(&timeout) {
                    return Err(bad(format!("`timeout_s` is 0 to {MAX_WAIT_S}")));
                }
                let after = opt_int(p, "after")?;
                let deadline = Instant::now() + Duration::from_secs(u64::try_from(timeout).unwrap_or(0));
                loop {
                    let page = mailbox::inbox(&ctx, Some(20), after, 0)?;
                    let any = page
                        .as_object()
                        .and_then(|o| o.get("envelopes"))
                        .and_then(Value::as_array)
                        .is_some_and(|l| !l.is_empty());
                    if any || Instant::now() >= deadline {
                        return Ok(page);
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
            Primitive::Whoami => {
                let me = ctx.me()?;
                let card = directory::card(&ctx, me.address.as_str())?;
                Ok(Value::Object(obj([("address", me.address.as_str().into()), ("card", card)])))
            }
            Primitive::ListConnections => {
                let v = lists::lists(&ctx)?;
                let allow = v.as_object().and_then(|o| o.get("allow")).cloned().unwrap_or(Value::Array(vec![]));
                Ok(Value::Object(obj([("allow", allow)])))
            }
            Primitive::Remember => {
                let text = req_str(p, "text")?;
                let when = opt_str(p, "when")?.unwrap_or_else(|| "+1m".to_owned());
                Ok(send::remind(&ctx, &when, Value::String(text), opt_str(p, "thread")?, false)?)
            }
            Primitive::InviteCreate => {
                let Some(token) = &self.admin_token else {
                    return Err(Denied(
                        BrokerCode::CapabilityDenied,
                        "invitations need the house's token, and this run was given none (--admin-token)".into(),
                    ));
                };
                let req = InviteRequest { uses: opt_int(p, "uses")?, expires: None, note: opt_str(p, "note")? };
                Ok(directory::invite_new(&ctx, None, token, &req)?)
            }
            Primitive::InviteAccept => {
                let address = req_str(p, "address")?;
                let code = req_str(p, "invitation")?;
                Ok(register::accept_invitation(ctx, &address, &code)?)
            }
        }
    }

    /// A stamp moves money: allowed only within the run's authority, alone (an ask is a denial:
    /// no human stands by a running app).
    /// Judges `n` stamps of `amount` as `n` movements, and (all allowed) counts them in the hour
    /// at once, under one lock: calls at the same time cannot each find the hour free.
    fn judge_stamps(&self, amount: i64, n: usize) -> Result<(), Denied> {
        let denied = |why: String| Denied(BrokerCode::CapabilityDenied, why);
        let Some(authority) = &self.authority else {
            return Err(denied("this run moves no money (give `nyx5 app run --authority` to allow stamps)".into()));
        };
        if amount <= 0 {
            return Err(bad("`stamp` is a positive number of tokens"));
        }
        let now = now_ms()?;
        let mut paid = self.paid.lock().map_err(|_| Denied(BrokerCode::Error, "broker state".into()))?;
        paid.retain(|t| now - t < HOUR_MS);
        for i in 0..n {
            let intent = Intent {
                amount: Some(amount),
                currency: Some(nyx5_proto::libro::CURRENCY),
                consequence: Consequence::Costly,
                hour_ops: i64::try_from(paid.len() + i).unwrap_or(i64::MAX),
                approved: false,
            };
            match authority.judge(&intent) {
                Verdict::Allowed => {}
                Verdict::Ask(why) => return Err(denied(format!("needs a human's approval: {why}"))),
                Verdict::Refused(e) => return Err(denied(e.reason.into_owned())),
            }
        }
        paid.extend(std::iter::repeat_n(now, n));
        Ok(())
    }
}

fn now_ms() -> Result<i64, Denied> {
    Ok(sys::now()?.millis())
}
