#![allow(clippy::print_stdout)] // cargo reads a build script's directives from its stdout
//! Renders docs/SPEC.md into the protocol pages (`spec.html`, `llms.txt`) that native builds
//! embed. (The Public Suffix List is coded by nyx5-rules' build script.)

use std::path::PathBuf;

fn main() {
    pages();
}

fn fail(why: &str) -> ! {
    eprintln!("nyx5-house build: {why}");
    std::process::exit(1)
}

/// `spec.html` and `llms.txt` from docs/SPEC.md, for `web` to embed. Not for wasm32: the Worker
/// serves them as static assets (scripts/build-app writes them with `nyx5-pages`).
fn pages() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        return;
    }
    const SOURCE: &str = "../../docs/SPEC.md";
    println!("cargo::rerun-if-changed={SOURCE}");
    let md = std::fs::read_to_string(SOURCE).unwrap_or_else(|e| fail(&format!("cannot read {SOURCE}: {e}")));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| fail("OUT_DIR is not set")));
    for (name, text) in [("spec.html", nyx5_pages::page(&md)), ("llms.txt", nyx5_pages::llms(&md))] {
        std::fs::write(out.join(name), text).unwrap_or_else(|e| fail(&format!("cannot write {name}: {e}")));
    }
}
