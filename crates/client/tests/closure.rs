//! The client crate links no engine (issue 37 §6): whatever it depends on, directly or through
//! another crate, for any target, is neither the house's engine nor a database, an async runtime
//! or an HTTP client. The agent's verbs and the browser use it; `nyx5 serve` and the simulator
//! link the engine, the client need not. The transport is a `ports::Net` its caller supplies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Packages the client must never reach.
const FORBIDDEN: &[&str] = &["nyx5-house", "nyx5-cli", "rusqlite", "libsqlite3-sys", "tokio", "ureq", "mio", "hyper"];

/// The names of every package the `root` package reaches through normal dependencies (build
/// and dev dependencies left out), for every target, as cargo resolves the workspace.
fn closure(root: &str) -> BTreeSet<String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--manifest-path"])
        .arg(manifest)
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> =
        meta["resolve"]["nodes"].as_array().unwrap().iter().map(|n| (n["id"].as_str().unwrap(), n)).collect();
    let start = names.iter().find(|(_, n)| **n == root).map(|(id, _)| *id).expect("the root package");
    let (mut seen, mut todo) = (BTreeSet::new(), vec![start]);
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null());
            if normal {
                todo.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    seen.into_iter().filter(|id| *id != start).map(|id| names[id].to_owned()).collect()
}

#[test]
fn the_client_links_no_engine_database_runtime_or_http_client() {
    let reached = closure("nyx5-client");
    println!("nyx5-client reaches {} packages: {reached:?}", reached.len());
    assert!(reached.contains("nyx5-proto") && reached.contains("nyx5-rules"), "{reached:?}");
    let bad: Vec<_> = FORBIDDEN.iter().filter(|f| reached.contains(**f)).collect();
    assert!(bad.is_empty(), "nyx5-client reaches {bad:?}");
}

/// The reader sees what the house reaches (so the test above can fail): the engine links SQLite.
#[test]
fn the_closure_reader_sees_a_database_where_there_is_one() {
    let house = closure("nyx5-house");
    assert!(house.contains("nyx5-client"), "{house:?}");
    assert!(house.contains("rusqlite"), "{house:?}");
}
