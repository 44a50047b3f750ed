//! Sealed attachments end to end over two `nyx5 serve` houses (docs/SPEC.md "Attachments"; issue
//! 38 §4): ana sends bo a file with `--attach`; a.test keeps only ciphertext, in parts; bo's
//! `nyx5 inbox --save DIR` fetches it from a.test with his own token, checks and opens it, and
//! writes the very bytes; a second save never writes over the first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use houses::{World, obj, s};
use nyx5_proto::Value;

#[test]
fn a_sealed_file_reaches_its_recipient_and_the_house_never_reads_it() {
    let w = World::new("attachments");
    w.two_agents();
    // A file of two parts and a bit, with a recognisable text inside.
    let mut file: Vec<u8> = b"QUARTERLY-NUMBERS ".repeat(4).to_vec();
    file.extend((0..(2 * 1024 * 1024 + 5000)).map(|i: u32| (i % 251) as u8));
    let path = w.dir.join("report.bin");
    std::fs::write(&path, &file).unwrap();
    let small = w.dir.join("note.txt");
    std::fs::write(&small, b"see the report").unwrap();
    let sent = w
        .nyx5(&[
            "send",
            "bo@b.test",
            "--body",
            "the numbers",
            "--attach",
            path.to_str().unwrap(),
            "--attach",
            small.to_str().unwrap(),
            "--json",
        ])
        .json();
    let id = s(&sent, "id");

    // a.test keeps three parts of the big file and one of the small, none in clear.
    let parts: Vec<std::path::PathBuf> = walk(&w.dir.join("a.test.attachments"));
    assert_eq!(parts.len(), 4, "{parts:?}");
    for p in &parts {
        let bytes = std::fs::read(p).unwrap();
        assert!(!bytes.windows(17).any(|x| x == b"QUARTERLY-NUMBERS"), "{p:?} holds the file's text");
        assert!(!bytes.windows(14).any(|x| x == b"see the report"), "{p:?} holds the note's text");
    }

    let inbox = w.wait_inbox("bo@b.test", |l| l.iter().any(|m| m.as_object().is_some_and(|m| s(m, "id") == id)));
    assert!(!inbox.is_empty());
    let dir = w.dir.join("saved");
    let read = w.nyx5(&["inbox", "--as", "bo@b.test", "--save", dir.to_str().unwrap(), "--json"]).json();
    let m = read
        .get("envelopes")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .filter_map(Value::as_object)
        .find(|m| s(m, "id") == id)
        .unwrap()
        .clone();
    assert_eq!(s(&m, "trust"), "verified");
    let saved = m.get("saved").and_then(Value::as_array).unwrap();
    assert_eq!(saved.len(), 2, "{m:?}");
    assert_eq!(std::fs::read(dir.join("report.bin")).unwrap(), file);
    assert_eq!(std::fs::read(dir.join("note.txt")).unwrap(), b"see the report");
    assert_eq!(s(saved[0].as_object().unwrap(), "name"), "report.bin");
    // The envelope's public member says the ciphertexts only; its sealed content the keys.
    let public = m.get("attachments").and_then(Value::as_array);
    assert!(public.is_none_or(|p| p.iter().all(|a| a.as_object().is_some_and(|a| !a.contains_key("key")))));
    let content = obj(&m, "content");
    assert_eq!(content.get("attachments").and_then(Value::as_array).map(<[Value]>::len), Some(2));

    // Saved again: beside, never over.
    let again = w.nyx5(&["inbox", "--as", "bo@b.test", "--save", dir.to_str().unwrap(), "--json"]).json();
    let m = again
        .get("envelopes")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .filter_map(Value::as_object)
        .find(|m| s(m, "id") == id)
        .unwrap()
        .clone();
    let paths: Vec<String> =
        m.get("saved").and_then(Value::as_array).unwrap().iter().map(|x| s(x.as_object().unwrap(), "path")).collect();
    assert!(paths[0].ends_with("report (2).bin"), "{paths:?}");
    assert_eq!(std::fs::read(dir.join("report (2).bin")).unwrap(), file);

    // Through MCP: the note as text, the report as an embedded blob, both checked and opened.
    let mut mcp = houses::Mcp::start(&w, "bo@b.test");
    let note = mcp.request(
        "tools/call",
        &format!(r#"{{"name":"nyx5_attachment","arguments":{{"id":"{id}","name":"note.txt"}}}}"#),
    );
    let parts = note.get("content").and_then(Value::as_array).unwrap();
    let said = s(parts[0].as_object().unwrap(), "text");
    assert!(said.starts_with("untrusted_file") && said.contains(r#""name":"note.txt""#), "{said}");
    assert_eq!(s(obj(parts[1].as_object().unwrap(), "resource"), "text"), "see the report");
    let report = mcp.request("tools/call", &format!(r#"{{"name":"nyx5_attachment","arguments":{{"id":"{id}"}}}}"#));
    let parts = report.get("content").and_then(Value::as_array).unwrap();
    let blob = s(obj(parts[1].as_object().unwrap(), "resource"), "blob");
    assert_eq!(decode_standard(&blob), file);
    assert_eq!(s(obj(&report, "structuredContent"), "name"), "report.bin");
    let missing = mcp
        .request("tools/call", &format!(r#"{{"name":"nyx5_attachment","arguments":{{"id":"{id}","name":"nope"}}}}"#));
    assert_eq!(missing.get("isError"), Some(&Value::Bool(true)));
    drop(mcp);

    // In clear, the keys would be too: refused, and nothing is stored.
    let before = walk(&w.dir.join("a.test.attachments")).len();
    let (err, _) =
        w.nyx5(&["send", "bo@b.test", "--body", "x", "--plain", "--attach", small.to_str().unwrap()]).fails_with(2);
    assert!(err.contains("--plain"), "{err}");
    assert_eq!(walk(&w.dir.join("a.test.attachments")).len(), before);
    // A send that fails after its files were stored (an end before its delivery) removes them.
    let (err, _) = w
        .nyx5(&[
            "send",
            "bo@b.test",
            "--body",
            "x",
            "--deliver-after",
            "+2d",
            "--expires",
            "+1d",
            "--attach",
            small.to_str().unwrap(),
        ])
        .fails_with(2);
    assert!(err.contains("expires") || err.contains("deliver"), "{err}");
    assert_eq!(walk(&w.dir.join("a.test.attachments")).len(), before, "nothing left behind");

    // Too large a file is refused before anything is sent.
    let big = w.dir.join("big.bin");
    std::fs::File::create(&big).unwrap().set_len(25 * 1024 * 1024 + 1).unwrap();
    let (err, _) = w.nyx5(&["send", "bo@b.test", "--body", "x", "--attach", big.to_str().unwrap()]).fails_with(2);
    assert!(err.contains("at most"), "{err}");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

/// Standard base64 (with padding) decoded, as any MCP client decodes a blob.
fn decode_standard(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for quad in text.as_bytes().chunks(4) {
        let pad = quad.iter().filter(|c| **c == b'=').count();
        let n = quad.iter().filter(|c| **c != b'=').fold(0_u32, |n, c| (n << 6) | u32::from(value(*c))) << (6 * pad);
        out.extend(&n.to_be_bytes()[1..4 - pad]);
    }
    out
}
