//! Apps from the agent's side: `nyx5 app verify` on the example (and a tampered copy of it),
//! `nyx5 app sign`, and `nyx5 app run` under the broker against two `nyx5 serve` houses — a
//! granted verb really acts as the agent, an undeclared one is `capability_denied`, an unknown
//! one `unknown_primitive`, a wrong token `bad_token`, and a stamp without an authority is
//! denied. (docs/SPEC.md "Apps — Pinned".)
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use std::path::{Path, PathBuf};

use common::{TempDir, nyx5, object};
use houses::{World, s};
use nyx5_proto::Value;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/apps/echo")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn the_example_verifies_and_a_tampered_copy_does_not() {
    let ex = example();
    let ok = nyx5(&["app", "verify", ex.to_str().unwrap(), "--json"], b"").json();
    assert_eq!(s(&ok, "id"), "echo");
    assert!(s(&ok, "author").starts_with("did:key:z6Mk"));
    let grants: Vec<String> = ok["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_object().unwrap()["primitive"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(grants, ["send_message", "read_inbox", "whoami"]);
    let sha = s(&ok, "sha256");
    nyx5(&["app", "verify", ex.to_str().unwrap(), "--sha256", &sha], b"").ok();
    let (err, _) = nyx5(&["app", "verify", ex.to_str().unwrap(), "--sha256", &"0".repeat(64)], b"").fails_with(1);
    assert!(err.contains("sha256"), "{err}");

    // One byte of main.mjs changed: named, exit 1.
    let dir = TempDir::new("app-tamper");
    let copy = dir.join("echo");
    copy_dir(&ex, &copy);
    let main = copy.join("main.mjs");
    let mut bytes = std::fs::read(&main).unwrap();
    bytes[3] ^= 1;
    std::fs::write(&main, &bytes).unwrap();
    let (err, doc) = nyx5(&["app", "verify", copy.to_str().unwrap(), "--json"], b"").fails_with(1);
    assert!(err.contains("main.mjs") && err.contains("does not match"), "{err}");
    assert!(doc.is_some());

    // A missing file, and an unlisted one (reported, not refused).
    copy_dir(&ex, &copy);
    std::fs::write(copy.join("notes.txt"), b"mine").unwrap();
    let ok = nyx5(&["app", "verify", copy.to_str().unwrap(), "--json"], b"").json();
    assert_eq!(ok["unlisted"], Value::Array(vec!["notes.txt".into()]));
    std::fs::remove_file(copy.join("README.md")).unwrap();
    let (err, _) = nyx5(&["app", "verify", copy.to_str().unwrap()], b"").fails_with(1);
    assert!(err.contains("README.md") && err.contains("missing"), "{err}");
    // A FIFO under a listed name is not read (it would never end): missing, at once.
    let made = std::process::Command::new("mkfifo").arg(copy.join("README.md")).status().unwrap();
    assert!(made.success());
    let (err, _) = nyx5(&["app", "verify", copy.to_str().unwrap()], b"").fails_with(1);
    assert!(err.contains("README.md") && err.contains("missing"), "{err}");
    std::fs::remove_file(copy.join("README.md")).unwrap();

    // The card itself changed (a primitive added): the signature no longer verifies.
    copy_dir(&ex, &copy);
    let card = std::fs::read_to_string(copy.join("app.json")).unwrap();
    std::fs::write(copy.join("app.json"), card.replace("\"whoami\"", "\"whoami\",\"remember\"")).unwrap();
    let (err, _) = nyx5(&["app", "verify", copy.to_str().unwrap()], b"").fails_with(1);
    assert!(err.contains("does not verify"), "{err}");

    // Signed again by another key with a primitive Nyx5 has no meaning for: refused as such.
    nyx5(&["keys", "new", "--out", dir.join("k.json").to_str().unwrap()], b"").ok();
    std::fs::write(copy.join("app.json"), card.replace("\"whoami\"", "\"whoami\",\"rooms\"")).unwrap();
    nyx5(&["app", "sign", copy.to_str().unwrap(), "--key", dir.join("k.json").to_str().unwrap()], b"").ok();
    let (err, _) = nyx5(&["app", "verify", copy.to_str().unwrap()], b"").fails_with(1);
    assert!(err.contains("unknown_primitive") && err.contains("rooms"), "{err}");
}

/// `nyx5 app run EXAMPLE -- args…` as `who`, in world `w`.
fn run_app(w: &World, who: &str, extra: &[&str], args: &[&str]) -> common::Run {
    let ex = example();
    let mut all = vec!["app", "run", ex.to_str().unwrap(), "--as", who];
    all.extend_from_slice(extra);
    all.push("--");
    all.extend_from_slice(args);
    w.nyx5(&all)
}

#[test]
fn an_app_gets_exactly_the_verbs_it_declares() {
    let w = World::new("apps");
    w.two_agents();

    // whoami: the agent's own address, through the broker.
    let out = run_app(&w, "ana@a.test", &[], &["whoami"]).ok();
    assert_eq!(out.trim(), "ana@a.test");

    // send_message really sends: bo finds it in his mailbox.
    let out = run_app(&w, "ana@a.test", &[], &["send", "bo@b.test", "hola", "from", "an", "app"]).ok();
    let sent = object(out.trim());
    assert!(!s(&sent, "id").is_empty());
    let list = w.wait_inbox("bo@b.test", |l| !l.is_empty());
    let text = Value::Array(list).canonical_string();
    assert!(text.contains("hola from an app"), "{text}");

    // read_inbox as bo.
    let out = run_app(&w, "bo@b.test", &[], &["inbox"]).ok();
    assert!(out.contains("hola from an app"), "{out}");

    // The broker's refusals, as the app sees them.
    let answer = |args: &[&str]| object(run_app(&w, "ana@a.test", &[], args).ok().trim());
    let denied = answer(&["raw", "remember", r#"{"text":"x"}"#]);
    assert_eq!((s(&denied, "error"), denied["ok"].clone()), ("capability_denied".into(), Value::Bool(false)));
    assert_eq!(s(&answer(&["raw", "rooms_send", "{}"]), "error"), "unknown_primitive");
    assert_eq!(s(&answer(&["raw", "launch", "{}"]), "error"), "unknown_primitive");
    assert_eq!(s(&answer(&["raw", "whoami", "{}", "not-the-token"]), "error"), "bad_token");
    assert_eq!(s(&answer(&["raw", "send_message", r#"{"to":7}"#]), "error"), "bad_request");
    // Money: a stamp without an authority is denied; with a prohibiting one too.
    let stamp = r#"{"to":"bo@b.test","text":"paid","stamp":5}"#;
    let d = answer(&["raw", "send_message", stamp]);
    assert_eq!(s(&d, "error"), "capability_denied");
    assert!(s(&d, "message").contains("no money"), "{d:?}");
    let prohibited = r#"{"level":"prohibited","consequence":"costly"}"#;
    let d =
        object(run_app(&w, "ana@a.test", &["--authority", prohibited], &["raw", "send_message", stamp]).ok().trim());
    assert_eq!(s(&d, "error"), "capability_denied");
    let small = r#"{"level":"autonomous","consequence":"costly","max_amount":2,"currency":"tok"}"#;
    let d = object(run_app(&w, "ana@a.test", &["--authority", small], &["raw", "send_message", stamp]).ok().trim());
    assert!(s(&d, "message").contains("approval"), "{d:?}");
    // A stamp to two recipients is two movements: one an hour allows neither.
    let once = r#"{"level":"autonomous","consequence":"costly","max_amount":10,"currency":"tok","max_per_hour":1}"#;
    let two = r#"{"to":["bo@b.test","ana@a.test"],"text":"paid","stamp":5}"#;
    let d = object(run_app(&w, "ana@a.test", &["--authority", once], &["raw", "send_message", two]).ok().trim());
    assert_eq!(s(&d, "error"), "capability_denied", "{d:?}");
    assert!(s(&d, "message").contains("past hour"), "{d:?}");

    // The catalogue: the operator lists the example; verify --catalogue checks the house's
    // signature and the pin; a card under the same id signed by another key is refused.
    let ex = example();
    let ex = ex.to_str().unwrap();
    w.nyx5(&["app", "publish", ex, "--house", "a.test", "--admin-token", "wrong", "--json"]).fails_with(4);
    w.nyx5(&["app", "publish", ex, "--house", "a.test", "--admin-token", houses::TOKEN_A, "--json"]).json();
    let ok = w.nyx5(&["app", "verify", ex, "--catalogue", "a.test", "--json"]).json();
    assert_eq!(s(&ok, "catalogue"), "a.test");
    let dir = TempDir::new("app-fork");
    let copy = dir.join("echo");
    copy_dir(&example(), &copy);
    nyx5(&["keys", "new", "--out", dir.join("k.json").to_str().unwrap()], b"").ok();
    nyx5(&["app", "sign", copy.to_str().unwrap(), "--key", dir.join("k.json").to_str().unwrap()], b"").ok();
    w.nyx5(&["app", "verify", copy.to_str().unwrap()]).ok();
    let (err, _) = w.nyx5(&["app", "verify", copy.to_str().unwrap(), "--catalogue", "a.test"]).fails_with(1);
    assert!(err.contains("not the app it lists"), "{err}");
    let (err, _) = w.nyx5(&["app", "verify", ex, "--catalogue", "b.test"]).fails_with(1);
    assert!(err.contains("does not list"), "{err}");
    w.nyx5(&["app", "publish", "echo", "--remove", "--house", "a.test", "--admin-token", houses::TOKEN_A]).ok();
    w.nyx5(&["app", "verify", ex, "--catalogue", "a.test"]).fails_with(1);

    // A clean environment: the run's three names, PATH and HOME; none of the profile's.
    let mut c = w.command();
    c.args(["app", "run", ex, "--as", "ana@a.test", "--", "env"]).env("NYX5_ADMIN_TOKEN", "secret");
    let names = common::run(c, b"").ok();
    assert_eq!(names.trim(), "HOME NYX5_APP_ID NYX5_APP_TOKEN NYX5_BROKER PATH", "{names}");

    // The app's exit status is passed on (usage: 2).
    let r = run_app(&w, "ana@a.test", &[], &["nonsense"]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn an_app_verifies_from_a_url_and_a_tampered_one_does_not() {
    let mut w = World::new("apps-url");
    // `nyx5 serve --app ROOT` serves ROOT/app/* under /app/: the example, and a changed copy.
    let root = w.dir.join("site");
    std::fs::create_dir_all(root.join("app")).unwrap();
    std::fs::write(root.join("_headers"), b"").unwrap();
    std::fs::write(root.join("app/index.html"), b"<!doctype html>").unwrap();
    copy_dir(&example(), &root.join("app/echo"));
    copy_dir(&example(), &root.join("app/bad"));
    let main = root.join("app/bad/main.mjs");
    let mut bytes = std::fs::read(&main).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 1;
    std::fs::write(&main, bytes).unwrap();
    w.restart_a_with(&["--app", root.to_str().unwrap()]);
    let base = format!("{}/app", w.a.url());
    let ok = w.nyx5(&["app", "verify", &format!("{base}/echo/app.json"), "--json"]).json();
    assert_eq!(s(&ok, "id"), "echo");
    let (err, _) = w.nyx5(&["app", "verify", &format!("{base}/bad/app.json")]).fails_with(1);
    assert!(err.contains("main.mjs") && err.contains("does not match"), "{err}");
    let (err, _) = w.nyx5(&["app", "verify", &format!("{base}/none/app.json")]).fails_with(1);
    assert!(err.contains("404"), "{err}");
}

#[test]
fn an_app_redeems_an_invitation_for_a_new_agent_and_leaves_nothing_when_refused() {
    let w = World::new("apps-invite");
    w.two_agents();
    // The example, declaring both invitation primitives, signed by another author as another
    // app (an app's author is pinned by its id).
    let dir = TempDir::new("app-invite");
    let copy = dir.join("inviter");
    copy_dir(&example(), &copy);
    let card = std::fs::read_to_string(copy.join("app.json")).unwrap();
    let card = card
        .replace("\"whoami\"", "\"whoami\",\"invite_create\",\"invite_accept\"")
        .replace("\"id\":\"echo\"", "\"id\":\"inviter\"");
    std::fs::write(copy.join("app.json"), card).unwrap();
    nyx5(&["keys", "new", "--out", dir.join("k.json").to_str().unwrap()], b"").ok();
    nyx5(&["app", "sign", copy.to_str().unwrap(), "--key", dir.join("k.json").to_str().unwrap()], b"").ok();
    let app = copy.to_str().unwrap();
    let raw = |who: &str, extra: &[&str], method: &str, params: &str| {
        let mut all = vec!["app", "run", app, "--as", who];
        all.extend_from_slice(extra);
        all.extend_from_slice(&["--", "raw", method, params]);
        object(w.nyx5(&all).ok().trim())
    };
    let text = |a: &nyx5_proto::json::Object| object(&s(a, "text"));

    // bo's app, given b.test's token, makes an invitation; ana's app redeems it for cy@b.test.
    let made = raw("bo@b.test", &["--admin-token", houses::TOKEN_B], "invite_create", "{}");
    assert_eq!(made["ok"], Value::Bool(true), "{made:?}");
    let code = s(&text(&made), "code");
    let params = format!(r#"{{"address":"cy@b.test","invitation":"{code}"}}"#);
    let joined = raw("ana@a.test", &[], "invite_accept", &params);
    assert_eq!(joined["ok"], Value::Bool(true), "{joined:?}");
    let joined = text(&joined);
    assert_eq!(s(&joined, "address"), "cy@b.test");
    assert_eq!(s(&joined, "registered_via"), format!("invite:{code}"));
    // cy is a real agent of b.test now, its keys in the profile: it reads its own (empty) inbox.
    let card = w.nyx5(&["card", "cy@b.test", "--json"]).json();
    assert_eq!(s(&card, "address"), "cy@b.test");
    w.nyx5(&["inbox", "--as", "cy@b.test", "--json"]).json();

    // The same address again: refused, and cy's keys are not replaced.
    let before = std::fs::read(&w.profile).unwrap();
    let again = raw("ana@a.test", &[], "invite_accept", &params);
    assert_eq!(s(&again, "error"), "error", "{again:?}");
    assert!(s(&again, "message").contains("already"), "{again:?}");
    assert_eq!(std::fs::read(&w.profile).unwrap(), before);
    // A used or unknown invitation: the house refuses, and the fresh entry is taken out again.
    let bad = format!(r#"{{"address":"dz@b.test","invitation":"{code}x"}}"#);
    // A domain that names no house: nothing is registered anywhere, nothing is kept.
    let nowhere = raw("ana@a.test", &[], "invite_accept", r#"{"address":"eve@nowhere.test","invitation":"x"}"#);
    assert_eq!(s(&nowhere, "error"), "error", "{nowhere:?}");
    assert_eq!(std::fs::read(&w.profile).unwrap(), before);
    let refused = raw("ana@a.test", &[], "invite_accept", &bad);
    assert_eq!(s(&refused, "error"), "error", "{refused:?}");
    assert_eq!(std::fs::read(&w.profile).unwrap(), before);
    w.nyx5(&["inbox", "--as", "dz@b.test"]).fails_with(2);
    // Undeclared, it is denied like any other primitive.
    let denied = object(run_app(&w, "ana@a.test", &[], &["raw", "invite_accept", &params]).ok().trim());
    assert_eq!(s(&denied, "error"), "capability_denied");
}

/// The `apps` pins of the profile at `profile`: app id → author.
fn app_pins(profile: &Path) -> Vec<(String, String)> {
    let doc = object(&std::fs::read_to_string(profile).unwrap());
    let apps = doc.get("apps").and_then(Value::as_object).cloned().unwrap_or_default();
    apps.iter().map(|(id, p)| (id.clone(), s(p.as_object().unwrap(), "author"))).collect()
}

#[test]
fn an_app_author_is_pinned_on_its_first_run_and_another_is_refused_unless_the_user_says_so() {
    let w = World::new("apps-author");
    w.nyx5(&["init", "ana@a.test", "--house", &w.a.url()]).ok();
    w.nyx5(&["register", "--json"]).json();
    let ex = example();
    let ex = ex.to_str().unwrap();
    let original = w.nyx5(&["app", "verify", ex, "--json"]).json();
    let (author, sha) = (s(&original, "author"), s(&original, "sha256"));
    let run = |dir: &str, extra: &[&str]| {
        let mut all = vec!["app", "run", dir, "--as", "ana@a.test"];
        all.extend_from_slice(extra);
        all.extend_from_slice(&["--", "whoami"]);
        w.nyx5(&all)
    };

    // The first run pins the author, and says so; the next runs change nothing.
    let first = run(ex, &[]);
    assert!(first.stderr.contains("pinned") && first.stderr.contains(&author), "{}", first.stderr);
    assert_eq!(first.ok().trim(), "ana@a.test");
    assert_eq!(app_pins(&w.profile), [("echo".to_owned(), author.clone())]);
    let before = std::fs::read(&w.profile).unwrap();
    run(ex, &[]).ok();
    assert_eq!(std::fs::read(&w.profile).unwrap(), before);

    // The same app re-signed by another key: refused, naming both keys; nothing runs or moves.
    let dir = TempDir::new("app-author");
    let copy = dir.join("echo");
    copy_dir(&example(), &copy);
    nyx5(&["keys", "new", "--out", dir.join("k.json").to_str().unwrap()], b"").ok();
    nyx5(&["app", "sign", copy.to_str().unwrap(), "--key", dir.join("k.json").to_str().unwrap()], b"").ok();
    let copy = copy.to_str().unwrap();
    let forged = w.nyx5(&["app", "verify", copy, "--json"]).json();
    let (other, other_sha) = (s(&forged, "author"), s(&forged, "sha256"));
    assert_ne!(other, author);
    let (err, _) = run(copy, &[]).fails_with(1);
    assert!(err.contains(&author) && err.contains(&other) && err.contains("--trust-new-author"), "{err}");
    assert_eq!(std::fs::read(&w.profile).unwrap(), before);

    // --author and --sha256 must match the card; then they pin its author explicitly.
    let (err, _) = run(copy, &["--author", &author]).fails_with(1);
    assert!(err.contains(&other) && err.contains(&author), "{err}");
    let (err, _) = run(copy, &["--sha256", &sha]).fails_with(1);
    assert!(err.contains("sha256"), "{err}");
    run(copy, &["--author", "nonsense"]).fails_with(2);
    assert_eq!(std::fs::read(&w.profile).unwrap(), before);
    let moved = run(copy, &["--author", &other]);
    assert!(moved.stderr.contains(&other) && moved.stderr.contains(&author), "{}", moved.stderr);
    assert_eq!(moved.ok().trim(), "ana@a.test");
    assert_eq!(app_pins(&w.profile), [("echo".to_owned(), other.clone())]);
    // Now the original author is the stranger, until its very card is named.
    let (err, _) = run(ex, &[]).fails_with(1);
    assert!(err.contains(&author) && err.contains(&other), "{err}");
    run(ex, &["--sha256", &sha]).ok();
    assert_eq!(app_pins(&w.profile), [("echo".to_owned(), author.clone())]);
    // --trust-new-author takes whichever author the card has, and pins it.
    run(copy, &["--trust-new-author"]).ok();
    assert_eq!(app_pins(&w.profile), [("echo".to_owned(), other.clone())]);
    run(copy, &["--sha256", &other_sha]).ok();
    assert_eq!(app_pins(&w.profile), [("echo".to_owned(), other)]);
}
