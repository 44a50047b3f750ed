//! docs/SPEC.md lists the one table of refusals (issue 37 §4): every name, its code and what it
//! means, exactly as `nyx5_proto::Refusal` has them. The section between its two markers is the
//! table this test writes; a name added to the code and not to the spec (or the other way) fails.
//! To write it again: `NYX5_WRITE_SPEC=1 cargo test -p nyx5-proto --test spec_refusals`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nyx5_proto::{ErrorKind, Refusal};

const BEGIN: &str = "<!-- refusals: written by crates/proto/tests/spec_refusals.rs -->";
const END: &str = "<!-- refusals: end -->";

/// The refusals as the spec shows them, by code, then name.
fn table() -> String {
    let mut out = String::from("| code | `error` | meaning |\n|---|---|---|\n");
    let mut rows: Vec<(u16, &str, String)> =
        Refusal::ALL.iter().map(|r| (r.kind().code(), r.name(), r.meaning().replace('|', "\\|"))).collect();
    rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    for (code, name, meaning) in rows {
        out.push_str(&format!("| {code} | `{name}` | {meaning} |\n"));
    }
    out
}

fn spec_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/SPEC.md")
}

#[test]
fn the_spec_lists_every_refusal_by_name() {
    let spec = std::fs::read_to_string(spec_path()).unwrap();
    let begin = spec.find(BEGIN).expect("docs/SPEC.md has no refusals table") + BEGIN.len();
    let end = spec[begin..].find(END).expect("the refusals table has no end marker") + begin;
    let want = format!("\n{}", table());
    if std::env::var_os("NYX5_WRITE_SPEC").is_some() {
        std::fs::write(spec_path(), format!("{}{want}{}", &spec[..begin], &spec[end..])).unwrap();
        return;
    }
    assert!(
        spec[begin..end] == want,
        "docs/SPEC.md's refusals differ from the code's table: run NYX5_WRITE_SPEC=1 cargo test -p nyx5-proto --test spec_refusals"
    );
}

/// The classes' table (§6, written by hand: it says what a relaying house does) has one row per
/// kind, by its code and name, and says "retries" exactly for the temporary ones.
#[test]
fn the_spec_lists_every_class_and_what_a_relay_does() {
    let spec = std::fs::read_to_string(spec_path()).unwrap();
    let head = spec.find("| code | slug | meaning | a relaying house |").expect("the classes' table");
    let rows: Vec<Vec<&str>> = spec[head..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), ErrorKind::ALL.len(), "one row per kind");
    for kind in ErrorKind::ALL {
        let row = rows
            .iter()
            .find(|r| r[0] == kind.code().to_string() && r[1] == kind.slug())
            .unwrap_or_else(|| panic!("no row for {} {}", kind.code(), kind.slug()));
        if kind.is_temporary() {
            assert_eq!(row[3], "retries", "{}", kind.slug());
        } else {
            assert_ne!(row[3], "retries", "{}", kind.slug());
        }
    }
    // No refusal takes a class's name with another code.
    for r in Refusal::ALL {
        if let Some(k) = ErrorKind::ALL.iter().find(|k| k.slug() == r.name()) {
            assert_eq!(k.code(), r.kind().code(), "{}", r.name());
        }
    }
}
