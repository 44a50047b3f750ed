//! The rules crate decides and does nothing (issue 37 §1): it depends on `nyx5-proto` (and the
//! MIME reader) alone, and its code names no clock, file, socket, process, environment, thread,
//! global cell or source of randomness. The compiler then holds "decide performs no I/O" for
//! whatever lives here; this test holds the crate to staying so.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// What the crate may depend on (its `[dependencies]`, by name).
const ALLOWED: &[&str] = &["nyx5-proto", "mail-parser"];

/// What the code may not name: each would let a rule read the world or keep state between calls.
const FORBIDDEN: &[&str] = &[
    "std::time",
    "SystemTime",
    "Instant::",
    "std::fs",
    "std::net",
    "std::io",
    "std::env::",
    "std::process",
    "std::thread",
    "thread_local!",
    "OnceLock",
    "LazyLock",
    "static mut",
    "std::sync",
    "getrandom",
    "Cell<",
    "nyx5_house",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names in `[dependencies]` of the crate's Cargo.toml.
fn dependencies(toml: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap().trim();
            out.push(name.to_owned());
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` that are code: comments (`//…`) dropped.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(n, line)| {
        let code = line.split("//").next().unwrap_or("");
        (!code.trim().is_empty()).then_some((n + 1, code))
    })
}

#[test]
fn the_rules_depend_on_proto_alone() {
    let toml = std::fs::read_to_string(manifest_dir().join("Cargo.toml")).unwrap();
    let deps = dependencies(&toml);
    assert!(deps.contains(&"nyx5-proto".to_owned()), "{deps:?}");
    let extra: Vec<_> = deps.iter().filter(|d| !ALLOWED.contains(&d.as_str())).collect();
    assert!(extra.is_empty(), "the rules crate may depend on {ALLOWED:?} only, not {extra:?}");
}

#[test]
fn the_rules_name_no_clock_io_or_global_state() {
    let mut files = Vec::new();
    sources(&manifest_dir().join("src"), &mut files);
    assert!(files.len() >= 10, "{files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, code) in code_lines(&text) {
            for word in FORBIDDEN {
                if code.contains(word) {
                    found.push(format!("{}:{n}: {word}", file.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "the rules must not reach the world: {found:#?}");
}

/// The reader above finds what it looks for (so the two tests can fail).
#[test]
fn the_checks_see_a_dependency_and_a_clock() {
    assert_eq!(
        dependencies(
            "[package]\nname = \"x\"\n[dependencies]\nnyx5-proto.workspace = true\ntokio = \"1\"\n# c\n[dev-dependencies]\nidna = \"1\"\n"
        ),
        ["nyx5-proto", "tokio"]
    );
    let code: Vec<_> = code_lines("let t = std::time::SystemTime::now(); // std::fs\n// std::net\n").collect();
    assert_eq!(code.len(), 1);
    assert!(code[0].1.contains("std::time") && !code[0].1.contains("std::fs"));
}
