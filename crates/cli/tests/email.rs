//! `nyx5 email-in` against a `nyx5 serve` house: an MTA's message lands in the mailbox as
//! unsigned mail, once, and `nyx5 inbox` shows it unverified with its real sender.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use houses::{TOKEN_A, World, obj, s};
use nyx5_proto::Value;

const MAIL: &[u8] = b"From: Bob <bob@example.com>\r\nTo: ana@a.test\r\nSubject: Hello from email\r\n\
Message-ID: <cli-1@example.com>\r\n\r\nHi Ana, this came by email.\r\n";

#[test]
fn email_in_delivers_unsigned_mail_once() {
    let w = World::new("email-in");
    w.nyx5(&["init", "ana@a.test", "--house", &w.a.url()]).ok();
    w.nyx5(&["register", "--json"]).json();
    let args =
        ["email-in", "--house", &w.a.url(), "--token", TOKEN_A, "--to", "ana@a.test", "--from", "bob@example.com"];
    let first = w.nyx5_in(&[&args[..], &["--json"]].concat(), MAIL).json();
    assert_eq!(first.get("duplicate"), Some(&Value::Bool(false)));
    let again = w.nyx5_in(&args, MAIL).ok();
    assert!(again.contains("already in the mailbox of ana@a.test"), "{again}");

    let list = w.wait_inbox("ana@a.test", |l| !l.is_empty());
    assert_eq!(list.len(), 1);
    let m = list[0].as_object().unwrap();
    assert_eq!(s(m, "id"), s(&first, "id"));
    assert_eq!(s(m, "from"), "email@a.test");
    assert_eq!(s(m, "trust"), "unverified");
    let email = obj(m, "email");
    assert_eq!(s(email, "from"), "bob@example.com");
    assert_eq!(s(email, "subject"), "Hello from email");
    assert_eq!(s(obj(m, "content"), "body"), "Hi Ana, this came by email.\n");

    // Refusals exit 4 with the house's reason; a wrong token is refused too.
    let (err, _) =
        w.nyx5_in(&["email-in", "--house", &w.a.url(), "--token", TOKEN_A, "--to", "zed@a.test"], MAIL).fails(4);
    assert!(err.contains("no agent zed@a.test"), "{err}");
    let (err, _) =
        w.nyx5_in(&["email-in", "--house", &w.a.url(), "--token", "wrong", "--to", "ana@a.test"], MAIL).fails(4);
    assert!(err.contains("401"), "{err}");
    let (err, _) = w.nyx5_in(&["email-in", "--house", &w.a.url(), "--to", "ana@a.test"], MAIL).fails(2);
    assert!(err.contains("--token"), "{err}");
}
