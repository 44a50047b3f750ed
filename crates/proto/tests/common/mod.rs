//! Helpers shared by the vector tests: where the vectors live, hex, and reading JSON files.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::path::PathBuf;

/// `tests/vectors/` at the workspace root.
pub const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors");

/// The path of a file under `tests/vectors/`.
pub fn path(rel: &str) -> PathBuf {
    PathBuf::from(VECTORS).join(rel)
}

/// Reads a vector file, failing loudly (never skipping) when it is missing.
pub fn read(rel: &str) -> Vec<u8> {
    let p = path(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("cannot read vector file {}: {e}", p.display()))
}

pub fn read_text(rel: &str) -> String {
    String::from_utf8(read(rel)).unwrap_or_else(|_| panic!("{rel} is not UTF-8"))
}

/// Parses a vector JSON file with serde_json (only the vectors; our parser is what is tested).
pub fn read_json(rel: &str) -> serde_json::Value {
    serde_json::from_slice(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Decodes lowercase or uppercase hex; panics on anything else.
pub fn unhex(text: &str) -> Vec<u8> {
    let text = text.trim();
    assert!(text.len().is_multiple_of(2), "odd-length hex: {text:?}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap_or_else(|_| panic!("bad hex: {text:?}")))
        .collect()
}

/// Decodes hex of exactly `N` bytes.
pub fn unhex_array<const N: usize>(text: &str) -> [u8; N] {
    let bytes = unhex(text);
    bytes.clone().try_into().unwrap_or_else(|_| panic!("expected {N} bytes, got {}: {text}", bytes.len()))
}

/// A string field of a serde_json object.
pub fn s<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("field {key:?} missing or not a string in {v}"))
}

/// A non-negative integer field of a serde_json object.
pub fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("field {key:?} missing or not an integer in {v}"))
}

/// The `flags` array of a Wycheproof or CCTV case.
pub fn flags(v: &serde_json::Value) -> Vec<String> {
    v["flags"].as_array().map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}
