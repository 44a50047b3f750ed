//! The client pins only what a domain's own chain gave it (issue 34 §3, docs/SPEC.md "Client
//! profile"): a server at a URL named for another purpose — a directory, an index, a catalogue
//! — that claims to be a domain changes nothing the profile keeps for that domain, and the real
//! house of that domain still works afterwards. Real `nyx5 serve` houses: a hostile one that
//! says it is `c.test`, and the real `c.test`, which the hosts file names only later.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use std::path::{Path, PathBuf};

use houses::{TOKEN_A, World, s};
use nyx5_proto::Value;
use nyx5_proto::json::Object;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/apps/echo")
}

/// The domain keys the profile at `profile` pins.
fn pins(profile: &Path) -> Object {
    let doc = common::object(&std::fs::read_to_string(profile).unwrap());
    doc.get("pins").and_then(Value::as_object).cloned().unwrap_or_default()
}

/// The keys of the cards kept beside the profile at `profile`.
fn kept(profile: &Path) -> String {
    let mut name = profile.as_os_str().to_owned();
    name.push(".cards");
    std::fs::read_to_string(PathBuf::from(name)).unwrap_or_default()
}

/// `nyx5 args… --agent PROFILE` in world `w`.
fn as_profile(w: &World, profile: &Path, args: &[&str]) -> common::Run {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--agent", profile.to_str().unwrap()]);
    w.nyx5(&all)
}

#[test]
fn a_server_at_a_url_that_claims_a_domain_pins_nothing_and_the_real_house_still_works() {
    let w = World::new("pins-claims");
    // The hostile server: a house of its own that says it is c.test, with an index and a
    // catalogue listing the example app. It reads a hosts file of its own.
    let elsewhere = w.dir.join("hostile-hosts.json");
    std::fs::write(&elsewhere, b"{}").unwrap();
    let hostile = houses::spawn(&w.dir.join("hostile"), "c.test", &elsewhere, &["--index"]);
    let ex = example();
    let ex = ex.to_str().unwrap();
    w.nyx5(&["app", "publish", ex, "--house", &hostile.url(), "--admin-token", TOKEN_A, "--json"]).json();
    // The real c.test, which this client's hosts file does not name yet.
    let real = houses::spawn(&w.dir.join("real"), "c.test", &elsewhere, &[]);

    // One profile per verb, each with an agent (at a.test) that pins what it resolves.
    let fresh = |name: &str| {
        let profile = w.dir.join(name).join("agents.json");
        as_profile(&w, &profile, &["init", "ana@a.test", "--house", &w.a.url()]).ok();
        profile
    };
    let url = hostile.url();
    let verbs: [(&str, Vec<&str>); 3] = [
        ("catalogue", vec!["app", "verify", ex, "--catalogue", &url, "--json"]),
        ("directory", vec!["directory", &url, "--json"]),
        ("search", vec!["search", "--index", &url, "--json"]),
    ];
    let mut profiles = Vec::new();
    for (name, args) in &verbs {
        let profile = fresh(name);
        let out = as_profile(&w, &profile, args).json();
        // The answer says nothing vouches for the name the server gave.
        let anchor = if *name == "catalogue" { "catalogue_anchor" } else { "anchor" };
        assert_eq!(s(&out, anchor), "none", "{name}: {out:?}");
        assert_eq!(pins(&profile).get("c.test"), None, "{name} pinned the key of the server at a URL");
        assert!(!kept(&profile).contains("\"c.test\""), "{name} kept its card: {}", kept(&profile));
        profiles.push(profile);
    }

    // The hosts file names the real c.test now: each profile reaches it, and pins its key.
    let before = std::fs::read_to_string(&w.hosts).unwrap();
    let hosts = before.replacen('{', &format!(r#"{{"c.test":{{"url":"{}"}},"#, real.url()), 1);
    std::fs::write(&w.hosts, hosts).unwrap();
    for (profile, (name, _)) in profiles.iter().zip(&verbs) {
        let out = as_profile(&w, profile, &["directory", "c.test", "--json"]).json();
        assert_eq!((s(&out, "house"), s(&out, "anchor")), ("c.test".into(), "first-use".into()), "{name}");
        assert!(pins(profile).get("c.test").is_some(), "{name}");
    }

    // Named by no hosts file again, c.test is held to that pin: the server at the URL is
    // refused now, and the pin does not move.
    std::fs::write(&w.hosts, &before).unwrap();
    let profile = &profiles[0];
    let pinned = pins(profile).get("c.test").cloned();
    for (name, args) in &verbs {
        let (err, _) = as_profile(&w, profile, args).fails_with(1);
        assert!(err.contains("c.test") && err.contains("URL given"), "{name}: {err}");
        assert_eq!(pins(profile).get("c.test").cloned(), pinned, "{name}");
    }
    // The real house named by its URL passes: its card kept from its chain, held to the pin.
    let out = as_profile(&w, profile, &["directory", &real.url(), "--json"]).json();
    assert_eq!((s(&out, "house"), s(&out, "anchor")), ("c.test".into(), "cache".into()));
    assert_eq!(pins(profile).get("c.test").cloned(), pinned);
}
