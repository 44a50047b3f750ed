//! The Worker package's build check: wrangler applies `migrations/` to D1, while the engine this
//! package links embeds its own list of them (crates/house/src/migrations.rs) for `nyx5 serve`,
//! the tests and the simulator. A file in one and not in the other would give D1 houses and
//! SQLite houses different schemas, so the build stops unless the directory holds exactly the
//! embedded files, numbered 0001, 0002, … in order. (The protocol pages are rendered by
//! crates/pages: the engine embeds them natively, scripts/build-app writes them as static assets.)
#![allow(clippy::panic)]

fn main() {
    println!("cargo::rerun-if-changed=migrations");
    println!("cargo::rerun-if-changed=crates/house/src/migrations.rs");
    let mut files: Vec<String> = std::fs::read_dir("migrations")
        .unwrap_or_else(|e| panic!("migrations/: {e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort();
    let list = std::fs::read_to_string("crates/house/src/migrations.rs")
        .unwrap_or_else(|e| panic!("crates/house/src/migrations.rs: {e}"));
    // Each entry is a line `("NNNN_name.sql", include_str!(…)),`.
    let embedded: Vec<&str> = list
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("(\"")?.split_once('"').map(|(name, _)| name))
        .collect();
    if files != embedded {
        panic!("migrations/ holds {files:?} but the engine embeds {embedded:?}: add the file to both");
    }
    for (i, name) in files.iter().enumerate() {
        let number = format!("{:04}_", i + 1);
        if !name.starts_with(&number) {
            panic!("migration {name} should be numbered {number}: wrangler applies them in name order");
        }
    }
}
