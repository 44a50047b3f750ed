//! The rules crate decides and does nothing (issue 37 §1): it depends on `nyx5-proto` and the
//! MIME reader alone (for every target), and its code reaches no clock, file, socket, process,
//! environment, thread, global or shared mutable state, or source of randomness. The compiler
//! then holds "decide performs no I/O" for whatever lives here; this test holds the crate to
//! staying so. (`nyx5-proto` itself keeps two process-wide hooks, the native Ed25519 back ends;
//! this crate sets none.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

/// What the crate may depend on, for any target.
const ALLOWED: &[&str] = &["nyx5-proto", "mail-parser"];

/// The modules of `std`, `core` and `alloc` the rules may name: data, text and arithmetic.
const PLAIN: &[&str] = &[
    "borrow",
    "boxed",
    "char",
    "cmp",
    "collections",
    "convert",
    "fmt",
    "hash",
    "iter",
    "marker",
    "mem",
    "num",
    "ops",
    "option",
    "result",
    "slice",
    "str",
    "string",
    "vec",
    "array",
    "ascii",
    "ptr",
];

/// Words that would give a rule state between calls, whatever path they come by.
const STATEFUL: &[&str] =
    &["thread_local", "OnceLock", "OnceCell", "LazyLock", "LazyCell", "Atomic", "Cell<", "RefCell", "Mutex", "RwLock"];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names of the crate's normal dependencies, every target's, as cargo reads the manifest.
fn dependencies() -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
        .arg(manifest_dir().join("Cargo.toml"))
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"].as_array().unwrap().iter().find(|p| p["name"] == "nyx5-rules").unwrap();
    package["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null())
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect()
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

/// `text` without comments and string or char literals' insides (so `"https://…"` is no
/// comment and a path in a string is no path), whitespace collapsed to single spaces.
fn code_of(text: &str) -> String {
    let (b, mut out, mut i) = (text.as_bytes(), String::new(), 0);
    while i < b.len() {
        match (b[i], b.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                i = end;
            }
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                out.push_str("\"\"");
                i += 1;
            }
            (b'\'', Some(b'\\')) => {
                let close = b[i + 2..].iter().take(12).skip(1).position(|&c| c == b'\'');
                i += close.map_or(2, |at| at + 4);
            }
            (b'\'', _) if b.get(i + 2) == Some(&b'\'') => i += 3,
            (c, _) if c.is_ascii_whitespace() => {
                if !out.ends_with(' ') {
                    out.push(' ');
                }
                i += 1;
            }
            (c, _) => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// Every module of `std`, `core` or `alloc` the code names, `use` groups opened
/// (`std::{fs, time::Instant}` names `fs` and `time`), each as `root::module`.
fn std_modules(code: &str) -> Vec<String> {
    let code = &code.replace(" ::", "::").replace(":: ", "::");
    let mut out = Vec::new();
    for root in ["std", "core", "alloc"] {
        let needle = format!("{root}::");
        for (at, _) in code.match_indices(&needle) {
            if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = code[at + needle.len()..].trim_start();
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name: String =
                        item.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.push(format!("{root}::{name}"));
                    }
                }
            } else {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                out.push(format!("{root}::{name}"));
            }
        }
    }
    out
}

/// What in `code` reaches the world or keeps state: modules of std outside [`PLAIN`], and
/// [`STATEFUL`] words.
fn reaches(code: &str) -> Vec<String> {
    let mut found: Vec<String> = std_modules(code)
        .into_iter()
        .filter(|m| !PLAIN.contains(&m.split_once("::").map_or("", |(_, name)| name)))
        .collect();
    found.extend(STATEFUL.iter().filter(|w| code.contains(*w)).map(|w| (*w).to_owned()));
    // A `static` item (a `'static` lifetime is no item).
    let item = code
        .match_indices("static ")
        .any(|(at, _)| !code[..at].ends_with(|c: char| c == '\'' || c.is_ascii_alphanumeric() || c == '_'));
    if item {
        found.push("static".to_owned());
    }
    found
}

#[test]
fn the_rules_depend_on_proto_alone() {
    let deps = dependencies();
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
        // The code before its test module (tests may read files, as the MIME corpus does).
        let code = code_of(text.split("#[cfg(test)]\nmod tests").next().unwrap());
        for what in reaches(&code) {
            found.push(format!("{}: {what}", file.display()));
        }
    }
    assert!(found.is_empty(), "the rules must not reach the world: {found:#?}");
}

/// The reader sees each way of reaching the world, however it is spelled (so the test above can
/// fail), and lets plain data through.
#[test]
fn the_checks_see_every_spelling() {
    for bad in [
        "use std::{fs, time};",
        "use std::env; fn f() { env::var(\"X\"); }",
        "let t = std::time::SystemTime::now();",
        "use core::sync::atomic::AtomicU64;",
        "static CALLS: u64 = 0;",
        "use std::net::TcpStream;",
        "use std :: { io :: Read };",
        "thread_local! { static X: u8 = 0; }",
    ] {
        assert!(!reaches(&code_of(bad)).is_empty(), "{bad}");
    }
    for fine in [
        "use std::borrow::Cow; use std::collections::{BTreeMap, BTreeSet};",
        "let u = \"https://std::fs.example\"; // std::fs",
        "fn f(s: &'static str) -> &'static str { s }",
        "/* std::time */ let c = '\\''; let q = '\"'; use std::fmt::Write as _;",
    ] {
        assert_eq!(reaches(&code_of(fine)), Vec::<String>::new(), "{fine}");
    }
}
