//! Runs the Node WebCrypto interop script (tests/interop/interop.mjs) against this `nyx5` binary.
#![allow(clippy::panic, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn node_webcrypto_interop() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("tests/interop/interop.mjs");
    assert!(script.is_file(), "missing {}", script.display());
    let out = match Command::new("node").arg(&script).arg(env!("CARGO_BIN_EXE_nyx5")).current_dir(&root).output() {
        Ok(out) => out,
        Err(e) => panic!("the interop test needs Node 20 or later as `node` on PATH, and could not run it: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "interop failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("checks passed"), "{stdout}\n{stderr}");
}
