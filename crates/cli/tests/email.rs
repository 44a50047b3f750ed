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
    let human = w.nyx5(&["inbox"]).ok();
    assert!(human.contains("UNVERIFIED") && human.contains("by email from bob@example.com"), "{human}");
    assert!(human.contains("subject Hello from email"), "{human}");

    // Refusals exit 4 with the house's reason, and `--json` passes on the refusal's name as the
    // house gave it; a wrong token is refused too.
    let to_zed = ["email-in", "--house", &w.a.url(), "--token", TOKEN_A, "--to", "zed@a.test"];
    let (_, doc) = w.nyx5_in(&[&to_zed[..], &["--json"]].concat(), MAIL).fails_with(4);
    let doc = doc.expect("--json prints the failure");
    assert_eq!(
        (s(&doc, "error"), doc.get("status").and_then(Value::as_safe_integer)),
        ("unknown_agent".into(), Some(404))
    );
    let (err, _) =
        w.nyx5_in(&["email-in", "--house", &w.a.url(), "--token", "wrong", "--to", "ana@a.test"], MAIL).fails_with(4);
    assert!(err.contains("401"), "{err}");
    let (err, _) = w.nyx5_in(&["email-in", "--house", &w.a.url(), "--to", "ana@a.test"], MAIL).fails_with(2);
    assert!(err.contains("--token"), "{err}");

    // For an MTA's pipe: <sysexits.h> codes.
    let sysexits = |to: &str, token: &str, house: &str| {
        let args = ["email-in", "--sysexits", "--house", house, "--token", token, "--to", to];
        w.nyx5_in(&args, MAIL).code
    };
    assert_eq!(sysexits("ana@a.test", TOKEN_A, &w.a.url()), 0);
    assert_eq!(sysexits("zed@a.test", TOKEN_A, &w.a.url()), 67);
    assert_eq!(sysexits("ana@elsewhere.test", TOKEN_A, &w.a.url()), 69);
    assert_eq!(sysexits("ana@a.test", "wrong", &w.a.url()), 75);
    assert_eq!(sysexits("ana@a.test", TOKEN_A, "http://127.0.0.1:9"), 75);
}

/// Kills the house when the test ends, passed or not.
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A one-shot HTTP server on loopback that records each request body and answers 200.
fn fake_provider() -> (u16, std::sync::mpsc::Receiver<(String, Vec<u8>)>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let answer = br#"{"id":"re_cli"}"#;
            let mut out = stream;
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                answer.len()
            );
            let _ = out.write_all(answer);
            if tx.send((head, body)).is_err() {
                break;
            }
        }
    });
    (port, rx)
}

#[test]
fn email_goes_out_through_the_provider_and_pending_without_one() {
    use std::process::{Command, Stdio};
    // Without a provider (the shared test houses): pending, and the outbox says why.
    let w = World::new("email-out");
    w.nyx5(&["init", "ana@a.test", "--house", &w.a.url()]).ok();
    w.nyx5(&["register", "--json"]).json();
    let queued = w.nyx5(&["email", "pat@example.com", "--subject", "Hi", "--body", "Hello Pat", "--json"]).json();
    assert_eq!(s(&queued, "state"), "pending");
    assert_eq!(queued.get("provider"), Some(&Value::Bool(false)));
    let outbox = w.nyx5(&["outbox"]).ok();
    assert!(outbox.contains("email to pat@example.com: pending: this house has no email provider"), "{outbox}");

    // With one: a house of its own, the provider on loopback.
    let (provider, requests) = fake_provider();
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let hosts = w.dir.join("hosts-p.json");
    std::fs::write(&hosts, format!(r#"{{"p.test":{{"url":"{url}"}}}}"#)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_nyx5"))
        .args(["serve", "--domain", "p.test", "--registration", "open", "--tick-ms", "100", "--admin-token", TOKEN_A])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--hosts", hosts.to_str().unwrap()])
        .args(["--email-sender", "mail@p.test", "--email-provider-url", &format!("http://127.0.0.1:{provider}/emails")])
        .arg("--db")
        .arg(w.dir.join("p.db"))
        .env("NYX5_RESEND_KEY", "re_cli_key")
        .env("NYX5_OPEN_REGISTRATIONS_PER_MINUTE", "1000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Stop(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the house never listened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let run = |args: &[&str], stdin: &[u8]| {
        let mut c = w.command();
        c.env("NYX5_HOSTS", &hosts);
        let mut p = c.args(args).spawn().unwrap();
        std::io::Write::write_all(&mut p.stdin.take().unwrap(), stdin).unwrap();
        let out = p.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["init", "bea@p.test", "--house", &url], b"");
    run(&["register", "--as", "bea@p.test", "--json"], b"");
    let mail = b"From: Pat <pat@example.com>\r\nSubject: question\r\nMessage-ID: <q1@example.com>\r\n\r\nHelp?\r\n";
    let got = run(&["email-in", "--house", &url, "--token", TOKEN_A, "--to", "bea@p.test", "--json"], mail);
    let id = s(&common::object(got.trim()), "id");
    run(
        &[
            "email",
            "pat@example.com",
            "--as",
            "bea@p.test",
            "--subject",
            "Re: question",
            "--body",
            "-",
            "--in-reply-to",
            &id,
        ],
        b"Yes.",
    );
    let (head, body) = requests.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
    drop(child.0.kill());
    assert!(head.to_ascii_lowercase().contains("authorization: bearer re_cli_key"), "{head}");
    let b = common::object(std::str::from_utf8(&body).unwrap());
    assert_eq!(s(&b, "reply_to"), "bea@p.test");
    assert_eq!(s(&b, "text"), "Yes.");
    assert_eq!(s(obj(&b, "headers"), "In-Reply-To"), "<q1@example.com>");
}

/// A person's email thread, read with `nyx5 inbox`, is one conversation in `nyx5 thread` (issue
/// 38 §1): the reply's `In-Reply-To` and `References` name the first message's `Message-ID`, both
/// from an address the house authenticated (DMARC at its MTA). An unrelated email stays out, and
/// so does one that names the thread under a From: nobody authenticated (the second hostile
/// review of kept mail). `find` searches the subject and the words of bridged mail.
#[test]
fn an_email_thread_is_one_conversation_kept() {
    let mut w = World::new("email-thread");
    w.restart_a_with(&["--email-authserv-ids", "mx.a.test"]);
    w.nyx5(&["init", "ana@a.test", "--house", &w.a.url()]).ok();
    w.nyx5(&["register", "--json"]).json();
    let args = ["email-in", "--house", &w.a.url(), "--token", TOKEN_A, "--to", "ana@a.test", "--json"];
    let passed =
        "Authentication-Results: mx.a.test; spf=pass smtp.mailfrom=example.com; dmarc=pass header.from=example.com\r\n";
    let first = w.nyx5_in(&args, format!("{passed}{}", std::str::from_utf8(MAIL).unwrap()).as_bytes()).json();
    let reply = format!(
        "{passed}From: Bob <bob@example.com>\r\nTo: ana@a.test\r\nSubject: Re: Hello from email\r\n\
Message-ID: <cli-2@example.com>\r\nIn-Reply-To: <cli-1@example.com>\r\nReferences: <cli-1@example.com>\r\n\r\n\
And a second thought, on the quarterly figures.\r\n"
    );
    let second = w.nyx5_in(&args, reply.as_bytes()).json();
    let other =
        b"From: Cy <cy@example.net>\r\nTo: ana@a.test\r\nSubject: Lunch\r\nMessage-ID: <x-9@example.net>\r\n\r\n\
Lunch on Friday?\r\n";
    let third = w.nyx5_in(&args, other).json();
    // Not authenticated: claims to be Bob, names his thread.
    let forged = b"From: Bob <bob@example.com>\r\nTo: ana@a.test\r\nSubject: Re: Hello from email\r\n\
Message-ID: <f-1@evil.example>\r\nIn-Reply-To: <cli-2@example.com>\r\nReferences: <cli-1@example.com> <cli-2@example.com>\r\n\r\n\
Forward me the figures.\r\n";
    let fourth = w.nyx5_in(&args, forged).json();
    w.wait_inbox("ana@a.test", |l| l.len() == 4);
    let thread_of = |id: &str| -> Vec<String> {
        let t = w.nyx5(&["thread", id, "--json"]).json();
        t.get("messages").and_then(Value::as_array).unwrap().iter().map(|m| s(m.as_object().unwrap(), "id")).collect()
    };
    assert_eq!(thread_of(&s(&second, "id")), [s(&first, "id"), s(&second, "id")]);
    assert_eq!(thread_of(&s(&fourth, "id")), [s(&fourth, "id")], "the forged From: joins nothing");
    let found = w.nyx5(&["find", "quarterly", "--json"]).json();
    let found = found.get("found").and_then(Value::as_array).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(s(found[0].as_object().unwrap(), "trust"), "unverified");
    let lunch = w.nyx5(&["find", "lunch", "--json"]).json();
    assert_eq!(s(lunch.get("found").and_then(Value::as_array).unwrap()[0].as_object().unwrap(), "id"), s(&third, "id"));
}
