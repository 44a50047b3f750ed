//! docs/SPEC.md lists the one table of refusals (issue 37 §4): every name, its code and what it
//! means, exactly as `nyx5_proto::Refusal` has them. The section between its two markers is the
//! table this test writes; a name added to the code and not to the spec (or the other way) fails.
//! To write it again: `NYX5_WRITE_SPEC=1 cargo test -p nyx5-proto --test spec_refusals`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nyx5_proto::{ErrorKind, Refusal};

const BEGIN: &str = "<!-- refusals: written by crates/proto/tests/spec_refusals.rs -->";
const END: &str = "<!-- refusals: end -->";

/// The table as the spec shows it: the kinds' own names first (an error whose cause has no name
/// of its own carries its kind's), then every refusal, by code.
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

/// Every kind's own name is still a name a client may meet (an error whose cause has none), and
/// no refusal's name is a kind's name with another code.
#[test]
fn kind_names_and_refusal_names_agree() {
    for r in Refusal::ALL {
        if let Some(k) = ErrorKind::ALL.iter().find(|k| k.slug() == r.name()) {
            assert_eq!(k.code(), r.kind().code(), "{}", r.name());
        }
    }
    assert!(table().lines().count() >= Refusal::ALL.len() + 2);
}
