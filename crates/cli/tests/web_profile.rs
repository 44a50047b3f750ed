//! The browser's profile file and the CLI's are one format: a profile written by nyx5-web's
//! `profile_export` is read (and written again) by the `nyx5` binary, and one `nyx5 init` wrote
//! is read by `profile_import`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{Run, TempDir, object, run, string};
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::json::{Object, Value, obj};

/// A house URL nothing answers at: the verbs that need a house fail fast with exit 3.
const NOWHERE: &str = "http://127.0.0.1:9";

/// `nyx5 ARGS… --agent PROFILE --json`, with no DNS-over-HTTPS and no hosts file.
fn nyx5_with(profile: &Path, args: &[&str]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nyx5"));
    command.args(args).args(["--agent", profile.to_str().unwrap(), "--json"]);
    command.env("NYX5_DOH", "off").env_remove("NYX5_HOSTS").env_remove("NYX5_AGENT");
    run(command, b"")
}

fn parse(text: &str) -> Object {
    object(text)
}

/// The agents of `profile_import`'s answer.
fn agents(imported: &Object) -> Vec<Object> {
    imported.get("agents").and_then(Value::as_array).unwrap().iter().map(|a| a.as_object().unwrap().clone()).collect()
}

#[test]
fn the_cli_reads_a_profile_the_browser_exported() {
    let dir = TempDir::new("web-profile-export");
    let profile = dir.join("agents.json");
    let keys = parse(&nyx5_web::new_keys().unwrap());
    let old = parse(&nyx5_web::new_keys().unwrap());
    let agent = obj([
        ("address", "al@a.example".into()),
        ("house", NOWHERE.into()),
        ("keys", Value::Object(keys.clone())),
        ("previous", Value::Array(vec![Value::Object(old.clone())])),
    ]);
    let pins = obj([("b.example", SigningKey::from_seed([2; 32]).public().to_b64().into())]);
    let text = nyx5_web::profile_export(
        &Value::Array(vec![Value::Object(agent)]).canonical_string(),
        &Value::Object(pins.clone()).canonical_string(),
    )
    .unwrap();
    std::fs::write(&profile, &text).unwrap();

    // An offline verb that signs with the profile's keys: its house is unreachable, so it shows
    // the local record of the agent it read.
    let out = nyx5_with(&profile, &["outbox"]).json();
    assert_eq!(string(&out, "agent"), "al@a.example");
    assert!(out.contains_key("house_unreachable"), "{out:?}");
    assert_eq!(out.get("unsent"), Some(&Value::Array(vec![])));
    assert_eq!(out.get("sent"), Some(&Value::Array(vec![])));

    // The CLI knows the agent is there, and keeps everything when it writes the profile again.
    let e = nyx5_with(&profile, &["init", "al@a.example", "--house", NOWHERE]).fails_with(2).0;
    assert!(e.contains("already in"), "{e}");
    let bo = nyx5_with(&profile, &["init", "bo@a.example", "--house", NOWHERE]).json();
    assert_eq!(bo.get("default"), Some(&Value::Bool(false)));
    let written = std::fs::read_to_string(&profile).unwrap();
    let back = parse(&nyx5_web::profile_import(&written).unwrap());
    let list = agents(&back);
    assert_eq!(list.len(), 2);
    assert_eq!(string(&list[0], "address"), "al@a.example");
    assert_eq!(string(&list[0], "house"), NOWHERE);
    assert_eq!(list[0].get("keys"), Some(&Value::Object(keys)));
    let previous = list[0].get("previous").and_then(Value::as_array).unwrap();
    assert_eq!(previous.len(), 1);
    let mut retired = previous[0].as_object().unwrap().clone();
    // The CLI dates a retired key set it read undated; the keys are the same.
    retired.remove("retired");
    assert_eq!(retired, old);
    assert_eq!(string(&list[1], "address"), "bo@a.example");
    assert_eq!(back.get("pins"), Some(&Value::Object(pins)));

    // `--as` finds the second agent in the file the browser will read.
    let out = nyx5_with(&profile, &["outbox", "--as", "bo@a.example"]).json();
    assert_eq!(string(&out, "agent"), "bo@a.example");
}

#[test]
fn the_browser_imports_a_profile_nyx5_init_wrote() {
    let dir = TempDir::new("web-profile-import");
    let profile = dir.join("agents.json");
    let made = nyx5_with(&profile, &["init", "Ana@A.example", "--house", "https://a.example/"]).json();
    let text = std::fs::read_to_string(&profile).unwrap();
    let imported = parse(&nyx5_web::profile_import(&text).unwrap());
    let list = agents(&imported);
    assert_eq!(list.len(), 1);
    let ana = &list[0];
    assert_eq!(string(ana, "address"), "ana@a.example");
    assert_eq!(string(ana, "address"), string(&made, "address"));
    assert_eq!(string(ana, "house"), string(&made, "house"));
    let keys = ana.get("keys").and_then(Value::as_object).unwrap();
    assert_eq!(string(keys, "sig"), string(&made, "sig"));
    assert_eq!(string(keys, "enc"), string(&made, "enc"));
    assert_eq!(ana.get("previous"), Some(&Value::Array(vec![])));
    assert_eq!(imported.get("pins"), Some(&Value::Object(Object::new())));

    // Written back by the browser, it is the file `nyx5 init` wrote.
    let again = nyx5_web::profile_export(
        &imported.get("agents").unwrap().canonical_string(),
        &imported.get("pins").unwrap().canonical_string(),
    )
    .unwrap();
    assert_eq!(again, text);

    // A file whose key pair does not match is refused by both readers.
    let enc = string(keys, "enc");
    let other = string(&parse(&nyx5_web::new_keys().unwrap()), "enc");
    std::fs::write(&profile, text.replace(&enc, &other)).unwrap();
    let e = nyx5_web::profile_import(&std::fs::read_to_string(&profile).unwrap()).unwrap_err();
    assert!(e.contains("`enc` is not the public key"), "{e}");
    let e = nyx5_with(&profile, &["outbox"]).fails_with(2).0;
    assert!(e.contains("`enc` is not the public key"), "{e}");
}
