//! The agent's verbs against two `nyx5 serve` houses over real HTTP: init → register → send
//! across houses → inbox → ack → outbox, `--json` parsed, a retried send never duplicated, and
//! the documented exit codes (1 verification, 2 usage, 3 network, 4 refused).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;
mod houses;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use houses::{TOKEN_B, World, obj, s};
use nyx5_proto::Value;
use nyx5_proto::json::Object;

fn ids(list: &[Value]) -> Vec<String> {
    list.iter().filter_map(|m| m.as_object()).map(|m| s(m, "id")).collect()
}

fn status(o: &Object) -> i64 {
    o.get("status").and_then(Value::as_safe_integer).unwrap()
}

#[test]
fn journey_across_two_houses() {
    let w = World::new("journey");
    // init: keys in a 0600 profile in a 0700 directory; nothing sent.
    let ana = w.nyx5(&["init", "ana@a.test", "--house", &w.a.url(), "--json"]).json();
    assert_eq!(s(&ana, "address"), "ana@a.test");
    assert_eq!(ana.get("default"), Some(&Value::Bool(true)));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&w.profile), 0o600);
    assert_eq!(mode(w.profile.parent().unwrap()), 0o700);
    let human = w.nyx5(&["init", "bo@b.test", "--house", &w.b.url()]).ok();
    assert!(human.contains("bo@b.test: keys created") && human.contains("--as bo@b.test"), "{human}");
    let (err, _) = w.nyx5(&["init", "ana@a.test", "--house", &w.a.url()]).fails_with(2);
    assert!(err.contains("already in"), "{err}");

    // The pinned profile format.
    let text = std::fs::read_to_string(&w.profile).unwrap();
    let profile = match Value::parse_str(text.trim_end()).unwrap() {
        Value::Object(o) => o,
        _ => panic!(),
    };
    assert_eq!(text, format!("{}\n", Value::Object(profile.clone()).canonical_string()));
    assert_eq!(s(&profile, "kind"), "agent-profile");
    assert_eq!(s(&profile, "nyx5"), "1");
    let agents = profile.get("agents").and_then(Value::as_array).unwrap();
    let first = agents[0].as_object().unwrap();
    let mut names: Vec<&str> = first.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["address", "enc", "enc_secret", "house", "pending", "sent", "sig", "sig_secret"]);

    // register: open at a.test; b.test wants an invitation (exit 4, 403), then takes one.
    let reg = w.nyx5(&["register", "--listed", "--description", "Plans trips", "--json"]).json();
    assert_eq!(s(&reg, "registered_via"), "open");
    assert_eq!(reg.get("created"), Some(&Value::Bool(true)));
    assert_eq!(s(obj(&reg, "card"), "sig"), s(&ana, "sig"));
    let (err, doc) = w.nyx5(&["register", "--as", "bo@b.test", "--json"]).fails_with(4);
    assert_eq!(status(&doc.unwrap()), 403);
    assert!(err.contains("--invite"), "says what to do next: {err}");
    let inv = w.nyx5(&["invite", "new", "--house", "b.test", "--admin-token", TOKEN_B, "--json"]).json();
    let code = s(&inv, "code");
    let reg = w.nyx5(&["register", "--as", "bo@b.test", "--invite", &code, "--json"]).json();
    assert_eq!(s(&reg, "registered_via"), format!("invite:{code}"));
    let list = w.nyx5(&["invite", "list", "--house", "b.test", "--admin-token", TOKEN_B, "--json"]).json();
    let used = list.get("invitations").and_then(Value::as_array).unwrap()[0].as_object().unwrap().clone();
    assert_eq!(used.get("used").and_then(Value::as_safe_integer), Some(1));
    // Registering again updates the card and keeps what was set.
    let again = w.nyx5(&["register", "--json"]).json();
    assert_eq!(again.get("created"), Some(&Value::Bool(false)));
    assert_eq!(s(obj(obj(&again, "card"), "capabilities"), "description"), "Plans trips");

    // resolve, card, directory, health.
    let r = w.nyx5(&["resolve", "bo@b.test", "--json"]).json();
    assert_eq!(r.get("verified"), Some(&Value::Bool(true)));
    assert_eq!(s(obj(&r, "domain"), "via"), "hosts");
    let card = w.nyx5(&["card", "ana@a.test", "--json"]).json();
    assert_eq!(s(&card, "address"), "ana@a.test");
    let dir = w.nyx5(&["directory", "a.test", "--q", "trips", "--json"]).json();
    let listed = dir.get("agents").and_then(Value::as_array).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(s(listed[0].as_object().unwrap(), "address"), "ana@a.test");
    // A house named by its URL needs no hosts entry.
    let no_hosts = w.dir.join("no-hosts.json");
    std::fs::write(&no_hosts, "{}").unwrap();
    let by_url = w.nyx5(&["directory", &w.b.url(), "--hosts", no_hosts.to_str().unwrap(), "--json"]).json();
    assert_eq!(s(&by_url, "house"), "b.test");
    let health = w.nyx5(&["health", &w.b.url(), "--json"]).json();
    assert_eq!(s(&health, "house"), "b.test");

    // send across houses, sealed; bo reads it verified and opened, and acknowledges it.
    let sent = w.nyx5(&["send", "bo@b.test", "--body", "hola bo", "--type", "task", "--thread", "t1", "--json"]).json();
    assert_eq!(s(&sent, "status"), "queued");
    assert_eq!(sent.get("sealed"), Some(&Value::Bool(true)));
    let id = s(&sent, "id");
    let inbox = w.wait_inbox("bo@b.test", |l| !l.is_empty());
    let m = inbox[0].as_object().unwrap();
    assert_eq!(s(m, "id"), id);
    assert_eq!(s(m, "from"), "ana@a.test");
    assert_eq!(s(m, "trust"), "verified");
    assert_eq!(s(m, "type"), "task");
    assert_eq!(s(m, "thread"), "t1");
    assert_eq!(m.get("sealed"), Some(&Value::Bool(true)));
    assert_eq!(s(obj(m, "content"), "body"), "hola bo");
    let text = w.nyx5(&["inbox", "--as", "bo@b.test"]).ok();
    assert!(text.contains("from ana@a.test  verified, sealed  task") && text.contains("hola bo"), "{text}");

    // bo answers in clear JSON from standard input; ana gets it.
    let reply = w
        .nyx5_in(
            &[
                "send",
                "--as",
                "bo@b.test",
                "ana@a.test",
                "-",
                "--media",
                "application/json",
                "--in-reply-to",
                &id,
                "--json",
            ],
            br#"{"done":true}"#,
        )
        .json();
    let reply_id = s(&reply, "id");
    let got = w.wait_inbox("ana@a.test", |l| ids(l).contains(&reply_id));
    let r = got.iter().filter_map(Value::as_object).find(|m| s(m, "id") == reply_id).unwrap();
    assert_eq!(obj(r, "content").get("body"), Some(&Value::parse_str(r#"{"done":true}"#).unwrap()));
    assert_eq!(s(r, "in_reply_to"), id);

    let acked = w.nyx5(&["ack", "--as", "bo@b.test", &id, "--json"]).json();
    assert_eq!(acked.get("acked").and_then(Value::as_safe_integer), Some(1));
    let acked = w.nyx5(&["ack", "--as", "bo@b.test", &id, "--json"]).json();
    assert_eq!(acked.get("acked").and_then(Value::as_safe_integer), Some(0), "acknowledging twice changes nothing");
    let empty = w.nyx5(&["inbox", "--as", "bo@b.test", "--json"]).json();
    assert!(empty.get("envelopes").and_then(Value::as_array).unwrap().is_empty());

    // outbox: delivered to b.test.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = w.nyx5(&["outbox", "--json"]).json();
        let envs = out.get("envelopes").and_then(Value::as_array).unwrap();
        let e = envs.iter().filter_map(Value::as_object).find(|e| s(e, "id") == id).unwrap();
        let job = e.get("jobs").and_then(Value::as_array).unwrap()[0].as_object().unwrap().clone();
        if s(&job, "state") == "delivered" {
            assert_eq!(s(&job, "domain"), "b.test");
            break;
        }
        assert!(Instant::now() < deadline, "never delivered: {job:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = w.nyx5(&["outbox"]).ok();
    assert!(text.contains(&format!("{id}  queued")) && text.contains("b.test [\"bo@b.test\"]: delivered"), "{text}");

    // remind: sealed to yourself, not delivered before its time.
    let rem = w.nyx5(&["remind", "+2s", "call", "the", "hotel", "--json"]).json();
    let rem_id = s(&rem, "id");
    let due = nyx5_proto::Timestamp::parse(&s(&rem, "deliver_after")).unwrap();
    let got = w.wait_inbox("ana@a.test", |l| ids(l).contains(&rem_id));
    let r = got.iter().filter_map(Value::as_object).find(|m| s(m, "id") == rem_id).unwrap();
    assert_eq!(s(obj(r, "content"), "body"), "call the hotel");
    assert!(nyx5_proto::Timestamp::parse(&s(r, "received")).unwrap() >= due, "delivered early: {r:?}");
}

#[test]
fn a_retried_send_is_never_duplicated() {
    let mut w = World::new("retry");
    w.two_agents();
    // The sender's house is down: the envelope is saved, the exit says try again (3).
    w.a.kill();
    let args = ["send", "bo@b.test", "--body", "exactly once", "--json"];
    let (err, doc) = w.nyx5(&args).fails_with(3);
    assert!(err.contains("run the same command again"), "{err}");
    assert!(doc.unwrap().contains_key("hint"));
    let (_, _) = w.nyx5(&args).fails_with(3);
    // The outbox shows the local record instead of failing.
    let out = w.nyx5(&["outbox"]).ok();
    assert!(out.contains("house unreachable; showing the local record") && out.contains("no answer"), "{out}");
    assert!(out.contains("not yet accepted by the house"), "{out}");
    let profile = std::fs::read_to_string(&w.profile).unwrap();
    let pending: Vec<&str> = profile.match_indices("\"request\"").map(|(i, _)| &profile[i..i + 1]).collect();
    assert_eq!(pending.len(), 1, "one saved envelope for two attempts");

    // Back up: the same command sends the saved envelope, once.
    w.restart_a();
    let unsent = w.nyx5(&["outbox", "--json"]).json();
    let saved = unsent.get("unsent").and_then(Value::as_array).unwrap();
    assert_eq!(saved.len(), 1);
    let saved_id = s(saved[0].as_object().unwrap(), "id");
    let sent = w.nyx5(&args).json();
    assert_eq!(s(&sent, "id"), saved_id);
    assert_eq!(sent.get("resent"), Some(&Value::Bool(true)));
    // Retrying by id after success: answered from the profile, nothing new.
    let again = w.nyx5(&["send", "--id", &saved_id, "--json"]).json();
    assert_eq!(s(&again, "status"), "exists");
    let (err, _) = w.nyx5(&["send", "bo@b.test", "--body", "something else", "--id", &saved_id]).fails_with(2);
    assert!(err.contains("already used"), "{err}");

    // A chosen id: the house keeps one envelope under it even if asked again.
    let first = w.nyx5(&["send", "bo@b.test", "--body", "by id", "--id", "my-task-1", "--json"]).json();
    assert_eq!(s(&first, "status"), "queued");
    let second = w.nyx5(&["send", "bo@b.test", "--body", "by id", "--id", "my-task-1", "--json"]).json();
    assert_eq!(s(&second, "status"), "exists");

    let inbox = w.wait_inbox("bo@b.test", |l| l.len() >= 2);
    // Once no job of ana's is waiting, nothing more can arrive: read the mailbox again then.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = w.nyx5(&["outbox", "--json"]).json();
        let states: Vec<String> = out
            .get("envelopes")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .flat_map(|e| e.as_object().unwrap().get("jobs").and_then(Value::as_array).unwrap())
            .map(|j| s(j.as_object().unwrap(), "state"))
            .collect();
        if states.iter().all(|s| s == "delivered" || s == "bounced") {
            break;
        }
        assert!(Instant::now() < deadline, "the queue never settled: {states:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let inbox2 = w.wait_inbox("bo@b.test", |_| true);
    assert_eq!(inbox.len(), inbox2.len());
    let mut got = ids(&inbox2);
    got.sort();
    let mut want = vec![saved_id, "my-task-1".to_owned()];
    want.sort();
    assert_eq!(got, want, "each envelope exactly once");

    // The second, identical send after success is a new message (it is not a retry).
    let new = w.nyx5(&args).json();
    assert_eq!(new.get("resent"), Some(&Value::Bool(false)));
}

#[test]
fn refusals_have_documented_exit_codes() {
    let w = World::new("refusals");
    w.two_agents();
    // 4: the house refuses (unknown recipient 404; wrong operator token 401).
    let (err, doc) = w.nyx5(&["send", "nobody@b.test", "--body", "x", "--json"]).fails_with(4);
    assert_eq!(status(&doc.unwrap()), 404);
    assert!(err.contains("nobody@b.test"), "{err}");
    let (err, doc) = w.nyx5(&["invite", "list", "--house", "b.test", "--admin-token", "wrong", "--json"]).fails_with(4);
    assert_eq!(status(&doc.unwrap()), 401);
    assert!(err.contains("--admin-token"), "{err}");
    // A subagent out of its scope is refused by its house.
    let sub = w.nyx5(&["subagent", "helper", "--scope-types", "message", "--to-domains", "b.test", "--json"]).json();
    assert_eq!(s(&sub, "address"), "helper.ana@a.test");
    assert_eq!(s(&sub, "registered_via"), "delegation");
    w.nyx5(&["send", "--as", "helper.ana@a.test", "bo@b.test", "--body", "in scope", "--json"]).json();
    let (_, doc) =
        w.nyx5(&["send", "--as", "helper.ana@a.test", "ana@a.test", "--body", "out of scope", "--json"]).fails_with(4);
    assert_eq!(status(&doc.unwrap()), 403);
    let r = w.nyx5(&["resolve", "helper.ana@a.test", "--json"]).json();
    assert_eq!(r.get("parents").and_then(Value::as_array).unwrap().len(), 1);

    // 3: nobody answers.
    let (err, _) = w.nyx5(&["health", "http://127.0.0.1:1"]).fails_with(3);
    assert!(err.contains("no answer"), "{err}");

    // 2: usage.
    w.nyx5(&["send", "bo@b.test"]).fails_with(2);
    w.nyx5(&["send", "not-an-address", "--body", "x"]).fails_with(2);
    w.nyx5(&["remind", "yesterday", "x"]).fails_with(2);
    w.nyx5(&["inbox", "--as", "stranger@a.test"]).fails_with(2);
    w.nyx5(&["inbox", "--limit", "999"]).fails_with(2);
    w.nyx5(&["frobnicate"]).fails_with(2);

    // 1: a card that does not verify — the hosts file pins another key for b.test.
    let other = nyx5_proto::crypto::SigningKey::from_seed([7; 32]).public().to_b64();
    let pinned = w.dir.join("pinned-hosts.json");
    std::fs::write(
        &pinned,
        format!(r#"{{"a.test":{{"url":"{}"}},"b.test":{{"url":"{}","sig":"{other}"}}}}"#, w.a.url(), w.b.url()),
    )
    .unwrap();
    let run = w.nyx5(&["resolve", "bo@b.test", "--hosts", pinned.to_str().unwrap()]);
    let (err, _) = run.fails_with(1);
    assert!(err.contains("does not verify"), "{err}");
    let (_, doc) =
        w.nyx5(&["send", "bo@b.test", "--body", "x", "--hosts", pinned.to_str().unwrap(), "--json"]).fails_with(1);
    assert!(doc.is_some());
}

#[test]
fn rotation_keeps_old_mail_readable_and_proof_of_work_is_minted() {
    let w = World::new("rotate");
    w.two_agents();
    // Sealed to bo's first key, read after bo rotates.
    let before = s(&w.nyx5(&["send", "bo@b.test", "--body", "before rotation", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&before));
    let rot = w.nyx5(&["rotate-key", "--as", "bo@b.test", "--json"]).json();
    assert_ne!(s(&rot, "sig"), s(&rot, "previous_sig"));
    assert_eq!(s(obj(&rot, "card"), "sig"), s(&rot, "sig"));
    let inbox = w.wait_inbox("bo@b.test", |l| ids(l).contains(&before));
    let m = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == before).unwrap();
    assert_eq!(s(obj(m, "content"), "body"), "before rotation");

    // bo asks strangers for proof of work; ana's send mints it once she reads bo's card anew
    // (`card` fetches it; a send within five minutes of the last would use the kept one).
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "pow", "--pow-bits", "10", "--json"]).json();
    w.nyx5(&["card", "bo@b.test", "--json"]).json();
    let sent = w.nyx5(&["send", "bo@b.test", "--body", "worked for it", "--json"]).json();
    assert_eq!(sent.get("pow_bits").and_then(Value::as_safe_integer), Some(10));
    let id = s(&sent, "id");
    let inbox = w.wait_inbox("bo@b.test", |l| ids(l).contains(&id));
    let m = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == id).unwrap();
    assert_eq!(s(m, "trust"), "verified");

    // bo learns the old key leaked: drop it from the card at once, without waiting for its grace.
    let old = s(&rot, "previous_sig");
    let card = w.nyx5(&["card", "bo@b.test", "--json"]).json();
    assert!(format!("{card:?}").contains(&old), "the replaced key is still listed: {card:?}");
    let dropped = w.nyx5(&["register", "--as", "bo@b.test", "--drop-previous", &old, "--json"]).json();
    assert!(!format!("{:?}", obj(&dropped, "card")).contains(&old), "{dropped:?}");
    // A key the card does not list is refused (400, exit 4).
    w.nyx5(&["register", "--as", "bo@b.test", "--drop-previous", &old, "--json"]).fails_with(4);
    // --reset is the operator's, and needs its token.
    w.nyx5(&["register", "--as", "bo@b.test", "--reset", "--json"]).fails_with(2);
}

/// The client's resolver is the house's: a domain key rotated with a handover is followed and
/// re-pinned in the profile without the user; a changed key without one is refused (exit 1)
/// until `--repin`; a plain-http DNS-over-HTTPS endpoint is a usage error.
#[test]
fn the_client_follows_a_handover_and_refuses_other_key_changes() {
    let mut w = World::new("continuity");
    w.two_agents();
    let before = w.nyx5(&["resolve", "bo@b.test", "--json"]).json();
    let old_key = s(obj(&before, "domain"), "key");
    let pin = |w: &World| {
        let text = std::fs::read_to_string(&w.profile).unwrap();
        let profile = Value::parse_str(text.trim_end()).unwrap();
        let pins = profile.as_object().unwrap().get("pins").and_then(Value::as_object).unwrap().clone();
        s(&pins, "b.test")
    };
    assert_eq!(pin(&w), old_key);

    // b.test rotates its domain key: the old one stays listed with a handover to the new one.
    w.restart_b_with(&["--rotate-domain-key"]);
    let after = w.nyx5(&["resolve", "bo@b.test", "--json"]).json();
    let d = obj(&after, "domain");
    let new_key = s(d, "key");
    assert_ne!(new_key, old_key);
    assert_eq!(s(d, "anchor"), "rotation");
    assert_eq!(pin(&w), new_key);
    assert_eq!(s(obj(&w.nyx5(&["resolve", "bo@b.test", "--json"]).json(), "domain"), "anchor"), "pin");
    // Mail still flows both ways, and is verified.
    let id = s(&w.nyx5(&["send", "bo@b.test", "--body", "after the rotation", "--json"]).json(), "id");
    let inbox = w.wait_inbox("bo@b.test", |l| ids(l).contains(&id));
    let m = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == id).unwrap();
    assert_eq!(s(m, "trust"), "verified");

    // A key that does not continue from the pin (here: a pin the house never had).
    let stranger = nyx5_proto::crypto::SigningKey::from_seed([9; 32]).public().to_b64();
    let text = std::fs::read_to_string(&w.profile).unwrap().replace(&new_key, &stranger);
    std::fs::write(&w.profile, text).unwrap();
    let (err, _) = w.nyx5(&["resolve", "bo@b.test"]).fails_with(1);
    assert!(err.contains("pinned") && err.contains("--repin"), "{err}");
    assert_eq!(pin(&w), stranger);
    let again = w.nyx5(&["resolve", "bo@b.test", "--repin", "--json"]).json();
    assert_eq!(s(obj(&again, "domain"), "anchor"), "repin");
    assert_eq!(pin(&w), new_key);

    // DNS-over-HTTPS only over https.
    let mut c = w.command();
    c.env("NYX5_DOH", "http://dns.example/dns-query").args(["resolve", "bo@b.test"]);
    let (err, _) = common::run(c, b"").fails_with(2);
    assert!(err.contains("https://"), "{err}");
    let mut c = w.command();
    c.args(["serve", "--domain", "x.test", "--doh-url", "http://dns.example/dns-query", "--db"])
        .arg(w.dir.join("x.db"));
    let (err, _) = common::run(c, b"").fails_with(2);
    assert!(err.contains("https://"), "{err}");
}

/// The states of every job `who` queued, once none is waiting any more (each `delivered` or
/// `bounced`).
fn settled_jobs(w: &World, who: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = w.nyx5(&["outbox", "--as", who, "--json"]).json();
        let states: Vec<String> = out
            .get("envelopes")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .flat_map(|e| e.as_object().unwrap().get("jobs").and_then(Value::as_array).unwrap())
            .map(|j| s(j.as_object().unwrap(), "state"))
            .collect();
        if states.iter().all(|s| s == "delivered" || s == "bounced") {
            return states;
        }
        assert!(Instant::now() < deadline, "the queue of {who} never settled: {states:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 35 §2: a domain-key rotation bounces nothing. ana and bo write to each other, so each
/// house holds the other's domain card; a.test restarts with `--rotate-domain-key` and both
/// write again at once: b.test meets a relay header under a key its cached card does not list,
/// fetches the card anew, follows the handover, and everything is delivered, verified, with no
/// bounce.
#[test]
fn a_domain_key_rotation_bounces_nothing() {
    let mut w = World::new("rotation");
    w.two_agents();
    let send = |w: &World, from: &str, to: &str, body: &str| {
        s(&w.nyx5(&["send", "--as", from, to, "--body", body, "--json"]).json(), "id")
    };
    let before = [send(&w, "ana@a.test", "bo@b.test", "before"), send(&w, "bo@b.test", "ana@a.test", "before")];
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&before[0]));
    w.wait_inbox("ana@a.test", |l| ids(l).contains(&before[1]));

    w.restart_a_with(&["--rotate-domain-key"]);
    let after = [send(&w, "ana@a.test", "bo@b.test", "after"), send(&w, "bo@b.test", "ana@a.test", "after")];
    for (who, id) in [("bo@b.test", &after[0]), ("ana@a.test", &after[1])] {
        let inbox = w.wait_inbox(who, |l| ids(l).contains(id));
        let m = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == *id).unwrap();
        assert_eq!(s(m, "trust"), "verified", "{m:?}");
    }
    for who in ["ana@a.test", "bo@b.test"] {
        let states = settled_jobs(&w, who);
        assert_eq!(states, ["delivered", "delivered"], "{who}");
        let inbox = w.nyx5(&["inbox", "--as", who, "--json"]).json();
        let list = inbox.get("envelopes").and_then(Value::as_array).unwrap();
        let notices = list.iter().filter_map(Value::as_object).filter(|m| s(m, "from").starts_with("postmaster@"));
        assert_eq!(notices.count(), 0, "no bounce for {who}: {list:?}");
    }
}

/// Issue 35 §2, the client's kept cards: bo's client keeps ana's card when it reads her mail;
/// ana rotates her key and writes again within the card's five minutes. bo's client meets a
/// signature by a key the kept card does not accept, fetches the card anew once, and the
/// envelope reads as verified (before: INVALID until the kept card aged out).
#[test]
fn a_kept_card_is_fetched_anew_for_a_key_it_does_not_know() {
    let w = World::new("kept-rotation");
    w.two_agents();
    let first = s(&w.nyx5(&["send", "bo@b.test", "--body", "before", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&first));
    w.nyx5(&["rotate-key", "--json"]).json();
    let second = s(&w.nyx5(&["send", "bo@b.test", "--body", "after", "--json"]).json(), "id");
    let inbox = w.wait_inbox("bo@b.test", |l| ids(l).contains(&second));
    for id in [&first, &second] {
        let m = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == *id).unwrap();
        assert_eq!(s(m, "trust"), "verified", "{m:?}");
    }
}

/// The webhook is the owner's (issue 10 §4): `nyx5 settings` shows it with the lists and the
/// quotas, `register --no-webhook` clears it, and a rotation drops it unless `rotate-key
/// --webhook` names one.
#[test]
fn settings_show_the_webhook_which_the_owner_clears_and_a_rotation_drops() {
    const HOOK: &str = "https://hooks.example.com/ana";
    let w = World::new("settings");
    w.two_agents();
    let webhook = |w: &World| w.nyx5(&["settings", "--json"]).json().get("webhook").cloned().unwrap();
    assert_eq!(webhook(&w), Value::Null);
    w.nyx5(&["register", "--webhook", HOOK, "--json"]).json();
    let set = w.nyx5(&["settings", "--json"]).json();
    assert_eq!(s(&set, "agent"), "ana@a.test");
    assert_eq!(s(&set, "webhook"), HOOK);
    assert_eq!(obj(&set, "lists").get("allow"), Some(&Value::Array(vec![])));
    assert!(obj(&set, "quotas").get("max_envelope_bytes").and_then(Value::as_safe_integer).is_some(), "{set:?}");
    let text = w.nyx5(&["settings"]).ok();
    assert!(text.contains(&format!("webhook: {HOOK}")) && text.contains("max_envelope_bytes"), "{text}");
    // An update without --webhook keeps it; --no-webhook clears it; both at once is a usage error.
    w.nyx5(&["register", "--description", "Plans trips", "--json"]).json();
    assert_eq!(webhook(&w), Value::String(HOOK.into()));
    w.nyx5(&["register", "--webhook", HOOK, "--no-webhook"]).fails_with(2);
    w.nyx5(&["register", "--no-webhook", "--json"]).json();
    assert_eq!(webhook(&w), Value::Null);
    // A rotation keeps only the webhook it names.
    let rot = w.nyx5(&["rotate-key", "--webhook", HOOK, "--json"]).json();
    assert_eq!(s(&rot, "webhook"), HOOK);
    assert_eq!(webhook(&w), Value::String(HOOK.into()));
    let text = w.nyx5(&["rotate-key"]).ok();
    assert!(text.contains("no webhook now"), "{text}");
    assert_eq!(webhook(&w), Value::Null);
    // Each agent of the profile reads its own.
    assert_eq!(s(&w.nyx5(&["settings", "--as", "bo@b.test", "--json"]).json(), "agent"), "bo@b.test");
}

/// The card file beside the profile, its cards made to look fetched `minutes` ago.
fn age_kept_cards(w: &World, minutes: i64) {
    let path = w.dir.join("profile").join("agents.json.cards");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut file = Value::parse_str(text.trim_end()).unwrap().as_object().unwrap().clone();
    assert_eq!(s(&file, "kind"), "card-cache");
    let then = nyx5_proto::Timestamp(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
            - minutes * 60_000,
    );
    let mut cards = obj(&file, "cards").clone();
    assert!(!cards.is_empty());
    for card in cards.values_mut() {
        if let Value::Object(c) = card {
            c.insert("at".into(), then.to_rfc3339().into());
        }
    }
    file.insert("cards".into(), Value::Object(cards));
    std::fs::write(&path, format!("{}\n", Value::Object(file).canonical_string())).unwrap();
}

/// Issue 10 §6: a known agent whose house is down is written to all the same. Its card, kept
/// from the first contact and older than five minutes, cannot be fetched anew: the send seals
/// with the kept card (stderr says so), ana's house queues it, and delivers it when b.test is
/// back. A first contact with a house that is down is exit 3 and says why; ana's own house
/// being down leaves `outbox` showing the local record.
#[test]
fn a_known_agent_whose_house_is_down_is_written_to_with_its_kept_card() {
    let mut w = World::new("outage");
    w.two_agents();
    let first = w.nyx5(&["send", "bo@b.test", "--body", "first contact", "--json"]).json();
    assert_eq!(first.get("kept_cards"), Some(&Value::Array(vec![])));
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&s(&first, "id")));

    // b.test goes down, and the kept cards are past their five minutes.
    w.b.kill();
    age_kept_cards(&w, 10);
    let run = w.nyx5(&["send", "bo@b.test", "--body", "while you were out\nsecond line", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("could not be fetched now") && run.stderr.contains("kept since"), "{}", run.stderr);
    let sent = run.json();
    assert_eq!(s(&sent, "status"), "queued");
    assert_eq!(sent.get("sealed"), Some(&Value::Bool(true)));
    let kept = sent.get("kept_cards").and_then(Value::as_array).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(s(kept[0].as_object().unwrap(), "address"), "bo@b.test");
    let id = s(&sent, "id");
    let text = w.nyx5(&["send", "bo@b.test", "--body", "and in text"]).ok();
    assert!(text.contains("sealed for bo@b.test with its card kept from"), "{text}");

    // ana's house has it, retrying b.test.
    let out = w.nyx5(&["outbox", "--json"]).json();
    let envs = out.get("envelopes").and_then(Value::as_array).unwrap();
    let e = envs.iter().filter_map(Value::as_object).find(|e| s(e, "id") == id).expect("in ana's outbox");
    let job = e.get("jobs").and_then(Value::as_array).unwrap()[0].as_object().unwrap().clone();
    assert_eq!(s(&job, "domain"), "b.test");
    assert_ne!(s(&job, "state"), "delivered");

    // A first contact with a house that is down: nothing kept to seal to, exit 3 and why.
    let (err, doc) = w.nyx5(&["send", "cy@b.test", "--body", "hello?", "--json"]).fails_with(3);
    assert!(err.contains("cy@b.test") && err.contains("unreachable"), "{err}");
    assert!(err.contains("no card of cy@b.test kept from an earlier contact"), "{err}");
    assert!(doc.unwrap().contains_key("hint"));

    // ana's own house down: the outbox shows what is recorded locally, exit 0.
    w.a.kill();
    let local = w.nyx5(&["outbox", "--json"]).json();
    assert!(s(&local, "house_unreachable").contains("no answer"), "{local:?}");
    let recorded = local.get("sent").and_then(Value::as_array).unwrap();
    let r = recorded.iter().filter_map(Value::as_object).find(|r| s(r, "id") == id).expect("recorded");
    assert_eq!(r.get("to"), Some(&Value::Array(vec!["bo@b.test".into()])));
    assert_eq!(s(r, "summary"), "while you were out");
    let text = w.nyx5(&["outbox"]).ok();
    assert!(text.contains("house unreachable; showing the local record"), "{text}");
    assert!(text.contains(&format!("{id}  accepted by your house")) && text.contains("while you were out"), "{text}");

    // Both houses back: the queued envelope reaches bo, sealed to the key he has.
    w.restart_a();
    w.restart_b_with(&[]);
    let inbox = w.wait_inbox("bo@b.test", |l| ids(l).contains(&id));
    let m = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == id).unwrap();
    assert_eq!(s(m, "trust"), "verified");
    assert_eq!(s(obj(m, "content"), "body"), "while you were out\nsecond line");
}

fn strings(o: &Object, name: &str) -> Vec<String> {
    o.get(name).and_then(Value::as_array).unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// Issue 10 §6: the lists and pins the house keeps have verbs. `block` refuses a sender (its
/// envelope bounces), `allow` lets it in again and takes it off the block list, `unlist` forgets
/// an entry; `pins` is the operator's, with the admin token.
#[test]
fn allow_block_unlist_lists_and_pins() {
    let w = World::new("lists");
    w.two_agents();
    let bo = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--as", "bo@b.test", "--json"]);
        w.nyx5(&all).json()
    };
    let l = bo(&["lists"]);
    assert_eq!((strings(&l, "allow"), strings(&l, "block")), (vec![], vec![]));
    let l = bo(&["block", "ana@a.test", "@Spam.Example"]);
    assert_eq!(s(&l, "agent"), "bo@b.test");
    assert_eq!(strings(&l, "block"), ["ana@a.test", "spam.example"]);

    // ana's envelope to bo is refused by his house: it bounces.
    let id = s(&w.nyx5(&["send", "bo@b.test", "--body", "let me in", "--json"]).json(), "id");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = w.nyx5(&["outbox", "--json"]).json();
        let envs = out.get("envelopes").and_then(Value::as_array).unwrap();
        let e = envs.iter().filter_map(Value::as_object).find(|e| s(e, "id") == id).unwrap();
        let job = e.get("jobs").and_then(Value::as_array).unwrap()[0].as_object().unwrap().clone();
        if s(&job, "state") == "bounced" {
            break;
        }
        assert!(Instant::now() < deadline, "never bounced: {job:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // allow takes ana off the block list; unlist forgets a domain; lists reads them.
    let l = bo(&["allow", "ana@a.test"]);
    assert_eq!((strings(&l, "allow"), strings(&l, "block")), (vec!["ana@a.test".into()], vec!["spam.example".into()]));
    let l = bo(&["unlist", "spam.example", "--from", "block"]);
    assert_eq!(strings(&l, "block"), Vec::<String>::new());
    let text = w.nyx5(&["lists", "--as", "bo@b.test"]).ok();
    assert!(text.contains("allow:   ana@a.test") && text.contains("block:   (empty)"), "{text}");
    let id = s(&w.nyx5(&["send", "bo@b.test", "--body", "thanks", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&id));
    let l = bo(&["unlist", "ana@a.test"]);
    assert_eq!((strings(&l, "allow"), strings(&l, "block")), (vec![], vec![]));
    let (err, _) = w.nyx5(&["block", "not an address!"]).fails_with(2);
    assert!(err.contains("address or a domain"), "{err}");
    w.nyx5(&["unlist", "x.test", "--from", "grey"]).fails_with(2);

    // pins: b.test pinned a.test's key when it first verified ana's mail.
    let pins = w.nyx5(&["pins", "--house", "b.test", "--admin-token", TOKEN_B, "--json"]).json();
    let list = pins.get("pins").and_then(Value::as_array).unwrap();
    let a = list.iter().filter_map(Value::as_object).find(|p| s(p, "domain") == "a.test").expect("a.test pinned");
    assert_eq!(a.get("pending"), Some(&Value::Null));
    let text = w.nyx5(&["pins", "--house", "b.test", "--admin-token", TOKEN_B]).ok();
    assert!(text.contains(&format!("a.test  {}", s(a, "sig"))), "{text}");
    let (err, doc) = w.nyx5(&["pins", "--house", "b.test", "--admin-token", "wrong", "--json"]).fails_with(4);
    assert_eq!(status(&doc.unwrap()), 401);
    assert!(err.contains("--admin-token"), "{err}");
    // Nothing is waiting for a.test: a confirmation is refused and says where to look.
    let (err, doc) = w
        .nyx5(&[
            "pins",
            "--house",
            "b.test",
            "--admin-token",
            TOKEN_B,
            "--confirm",
            "a.test",
            "--sig",
            &s(a, "sig"),
            "--json",
        ])
        .fails_with(4);
    assert_eq!(status(&doc.unwrap()), 409);
    assert!(err.contains("nyx5 pins"), "{err}");
    w.nyx5(&["pins", "--house", "b.test", "--admin-token", TOKEN_B, "--confirm", "a.test"]).fails_with(2);
}

#[test]
fn search_asks_an_index_and_verifies_every_card() {
    let mut w = World::new("index");
    w.two_agents();
    w.nyx5(&["register", "--listed", "--description", "Plans trips", "--json"]).json();
    w.nyx5(&["register", "--as", "bo@b.test", "--listed", "--description", "Translates Quechua", "--json"]).json();
    // A house that runs no index says so, and what would change that.
    let (err, doc) = w.nyx5(&["search", "trips", "--index", "a.test", "--json"]).fails_with(4);
    assert_eq!(status(&doc.unwrap()), 404);
    assert!(err.contains("runs no index"), "{err}");
    // b.test runs one; it crawls a.test and itself on its tick.
    w.restart_b_with(&["--index", "--index-fetches", "20"]);
    let added = w.nyx5(&["index", "add", "a.test", "--index", "b.test", "--json"]).json();
    let row = added.get("houses").and_then(Value::as_array).unwrap()[0].as_object().unwrap().clone();
    assert_eq!(s(&row, "domain"), "a.test");
    w.nyx5(&["index", "add", "b.test", "--index", "b.test", "--json"]).json();
    let (err, _) = w.nyx5(&["index", "add", "nowhere.test", "--index", "b.test", "--json"]).fails_with(3);
    assert!(err.contains("nowhere.test"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = w.nyx5(&["index", "houses", "--index", "b.test", "--json"]).json();
        let houses = list.get("houses").and_then(Value::as_array).unwrap().to_vec();
        let crawled = houses
            .iter()
            .filter(|h| h.as_object().unwrap().get("cards").and_then(Value::as_safe_integer) == Some(1))
            .count();
        if crawled == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the index never crawled both houses: {houses:?}");
        std::thread::sleep(Duration::from_millis(150));
    }
    // Each card is checked with its own house before it is shown.
    let found = w.nyx5(&["search", "quechua", "--index", "b.test", "--json"]).json();
    assert_eq!(found.get("signed"), Some(&Value::Bool(true)));
    let agents = found.get("agents").and_then(Value::as_array).unwrap().to_vec();
    assert_eq!(agents.len(), 1, "{found:?}");
    assert_eq!(s(agents[0].as_object().unwrap(), "address"), "bo@b.test");
    assert_eq!(s(agents[0].as_object().unwrap(), "_house"), "b.test");
    assert_eq!(found.get("unverified").and_then(Value::as_array).map(<[Value]>::len), Some(0));
    let human = w.nyx5(&["search", "trips", "--index", &w.b.url()]).ok();
    assert!(human.contains("ana@a.test") && human.contains("answer signed"), "{human}");
    let none = w.nyx5(&["search", "--index", "b.test", "--house", "a.test", "--json"]).json();
    assert_eq!(none.get("agents").and_then(Value::as_array).map(<[Value]>::len), Some(1));
}

/// Reads `who`'s mailbox (`nyx5 inbox --json`) until a read says it mended a 402
/// (`stale_cards`), and answers what that read said.
fn first_mend(w: &World, who: &str) -> Vec<Object> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let inbox = w.nyx5(&["inbox", "--as", who, "--json"]).json();
        let done = inbox.get("stale_cards").and_then(Value::as_array).expect("stale_cards in every read");
        if !done.is_empty() {
            return done.iter().map(|o| o.as_object().unwrap().clone()).collect();
        }
        assert!(Instant::now() < deadline, "no 402 was mended for {who}: {inbox:?}");
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// The ids in `who`'s mailbox, each as often as it is there.
fn mailbox_ids(w: &World, who: &str) -> Vec<String> {
    let inbox = w.nyx5(&["inbox", "--as", who, "--json"]).json();
    ids(inbox.get("envelopes").and_then(Value::as_array).unwrap())
}

/// Issue 35 §2: a 402 caused by a stale card is refreshed and resent once. ana's client holds
/// bo's card (fetched a moment ago, open inbox); bo then asks strangers for proof of work. ana's
/// next send is sealed for the card she holds, without proof, and bo's house refuses it (402):
/// ana's house bounces it. The read of ana's mailbox that meets the bounce fetches bo's card
/// afresh and sends the same message once more, as a new envelope with the proof of work the
/// card asks; bo gets it exactly once, and reading again resends nothing.
#[test]
fn a_402_from_a_stale_card_is_resent_once_with_what_the_fresh_card_asks() {
    let w = World::new("stale402");
    w.two_agents();
    let first = s(&w.nyx5(&["send", "bo@b.test", "--body", "first", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&first));
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "pow", "--pow-bits", "10", "--json"]).json();

    let args = ["send", "bo@b.test", "--body", "second\nline", "--type", "task", "--thread", "t9", "--json"];
    let sent = w.nyx5(&args).json();
    assert_eq!(sent.get("pow_bits"), Some(&Value::Null), "sealed for the card ana's client holds: {sent:?}");
    let id = s(&sent, "id");
    let done = first_mend(&w, "ana@a.test");
    assert_eq!(done.len(), 1, "{done:?}");
    let m = &done[0];
    assert_eq!((s(m, "state"), s(m, "of")), ("resent".to_owned(), id.clone()), "{m:?}");
    assert_eq!(strings(m, "to"), ["bo@b.test"]);
    let asks = m.get("asks").and_then(Value::as_array).unwrap();
    assert_eq!(asks.len(), 1);
    let ask = asks[0].as_object().unwrap();
    assert_eq!(
        (s(ask, "address"), ask.get("pow_bits").and_then(Value::as_safe_integer)),
        ("bo@b.test".into(), Some(10))
    );
    let new = s(m, "id");
    assert_ne!(new, id);
    assert_eq!(obj(m, "sent").get("pow_bits").and_then(Value::as_safe_integer), Some(10));

    // bo reads the same message, verified, with its type and thread, under the new id.
    let inbox = w.wait_inbox("bo@b.test", |l| ids(l).contains(&new));
    let got = inbox.iter().filter_map(Value::as_object).find(|m| s(m, "id") == new).unwrap();
    assert_eq!(s(got, "trust"), "verified");
    assert_eq!(got.get("sealed"), Some(&Value::Bool(true)));
    assert_eq!((s(got, "type"), s(got, "thread")), ("task".into(), "t9".into()));
    assert_eq!(s(obj(got, "content"), "body"), "second\nline");

    // Reading again, as text or JSON, resends nothing: the profile records the resend.
    let text = w.nyx5(&["inbox"]).ok();
    assert!(text.contains("postmaster@a.test") && !text.contains("resent"), "{text}");
    let again = w.nyx5(&["inbox", "--json"]).json();
    assert_eq!(again.get("stale_cards"), Some(&Value::Array(vec![])));
    let (err, _) = w.nyx5(&["send", "--again", &id, "bo@b.test", "--json"]).fails_with(2);
    assert!(err.contains(&format!("already sent again to bo@b.test, as {new}")), "{err}");
    let states = settled_jobs(&w, "ana@a.test");
    assert_eq!(states.iter().filter(|s| *s == "bounced").count(), 1, "{states:?}");
    let mut got = mailbox_ids(&w, "bo@b.test");
    got.sort();
    let mut want = vec![first, new];
    want.sort();
    assert_eq!(got, want, "each message exactly once, the refused envelope never");
    assert_eq!(w.nyx5(&["inbox", "--json"]).json().get("stale_cards"), Some(&Value::Array(vec![])));
}

/// Issue 35 §2: a 402 the fresh card does not explain is not resent. bo asks a stamp of 1 and
/// ana's client knows it: her envelope pays it, but she has no tokens at b.test, so it is
/// refused (402) all the same. The read that meets the bounce finds bo's card asks nothing the
/// envelope lacked: nothing is sent, once and for all. Then bo raises his price above what is
/// paid without asking: the next bounce is not resent either, and the read says what bo asks
/// and the command that pays it, which sends one new envelope with that stamp.
#[test]
fn a_402_the_fresh_card_does_not_explain_is_not_resent() {
    let w = World::new("stale402-stamp");
    w.two_agents();
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "stamp", "--price", "1", "--json"]).json();
    w.nyx5(&["card", "bo@b.test", "--json"]).json();
    let sent = w.nyx5(&["send", "bo@b.test", "--body", "stamped, unfunded", "--json"]).json();
    assert_eq!(obj(&sent, "stamp").get("amount").and_then(Value::as_safe_integer), Some(1));
    let id = s(&sent, "id");
    let done = first_mend(&w, "ana@a.test");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((s(&done[0], "state"), s(&done[0], "of")), ("unchanged".to_owned(), id.clone()));
    assert_eq!(done[0].get("asks"), Some(&Value::Array(vec![])));
    assert_eq!(w.nyx5(&["inbox", "--json"]).json().get("stale_cards"), Some(&Value::Array(vec![])));
    let text = w.nyx5(&["inbox"]).ok();
    assert!(text.contains("postmaster@a.test") && !text.contains("(402)"), "{text}");

    // bo now asks 50 tokens, more than a send pays unasked; ana's client still holds the card
    // that asked 1.
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "stamp", "--price", "50", "--json"]).json();
    let sent = w.nyx5(&["send", "bo@b.test", "--body", "underpaid", "--json"]).json();
    assert_eq!(obj(&sent, "stamp").get("amount").and_then(Value::as_safe_integer), Some(1));
    let id = s(&sent, "id");
    let done = first_mend(&w, "ana@a.test");
    assert_eq!(done.len(), 1, "{done:?}");
    let m = &done[0];
    assert_eq!((s(m, "state"), s(m, "of")), ("needs_stamp".to_owned(), id.clone()), "{m:?}");
    let command = s(m, "command");
    assert_eq!(command, format!("nyx5 send --again {id} bo@b.test --stamp 50"));
    let ask = obj(m.get("asks").and_then(Value::as_array).unwrap()[0].as_object().unwrap(), "stamp").clone();
    assert_eq!((s(&ask, "house"), ask.get("amount").and_then(Value::as_safe_integer)), ("b.test".into(), Some(50)));
    // Not recorded: the next read says it again, in words too.
    let text = w.nyx5(&["inbox"]).ok();
    assert!(
        text.contains(&format!(
            "{id} was refused (402) by bo@b.test: its card changed since it was sealed (it now asks a stamp of 50 \
             tokens paid at b.test), more than is paid without asking; to pay it and send it again: {command}"
        )),
        "{text}"
    );
    // The command sends one new envelope with that stamp, once.
    let args: Vec<&str> = command.split(' ').skip(1).chain(["--json"]).collect();
    let again = w.nyx5(&args).json();
    assert_eq!(s(&again, "again_of"), id);
    assert_ne!(s(&again, "id"), id);
    assert_eq!(obj(&again, "stamp").get("amount").and_then(Value::as_safe_integer), Some(50));
    let (err, _) = w.nyx5(&args).fails_with(2);
    assert!(err.contains("already sent again"), "{err}");
    // ana has no 50 tokens at b.test either: that one is refused too, and not resent.
    let done = first_mend(&w, "ana@a.test");
    assert_eq!((s(&done[0], "state"), s(&done[0], "of")), ("unchanged".to_owned(), s(&again, "id")), "{done:?}");
    assert_eq!(w.nyx5(&["inbox", "--json"]).json().get("stale_cards"), Some(&Value::Array(vec![])));
    let states = settled_jobs(&w, "ana@a.test");
    assert_eq!(states, ["bounced", "bounced", "bounced"]);
    assert!(mailbox_ids(&w, "bo@b.test").is_empty(), "bo got nothing he was not paid for");
}

/// Issue 35 §2: MCP's inbox tool reads through the same path and mends the same 402s, but pays
/// no stamp unasked (as its send tool); the CLI pays one up to what `send` pays unasked. bo
/// starts asking a stamp of 1 while ana's client holds his open card: her envelope carries
/// none and is refused (402). Read from MCP, the bounce is not resent and the answer names the
/// command that pays; read by `nyx5 inbox`, it is resent once with the stamp.
#[test]
fn a_stamp_a_stale_card_hid_is_paid_unasked_only_within_sends_limit() {
    let w = World::new("stale402-mcp");
    w.two_agents();
    let first = s(&w.nyx5(&["send", "bo@b.test", "--body", "first", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&first));
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "stamp", "--price", "1", "--json"]).json();
    let sent = w.nyx5(&["send", "bo@b.test", "--body", "no stamp", "--json"]).json();
    assert_eq!(sent.get("stamp"), Some(&Value::Null), "sealed for the open card ana's client holds");
    let id = s(&sent, "id");

    let mut mcp = houses::Mcp::start(&w, "ana@a.test");
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let page = mcp.call("nyx5_inbox", &Value::parse_str("{}").unwrap());
        let done = page.get("stale_cards").and_then(Value::as_array).unwrap().to_vec();
        if !done.is_empty() {
            break done;
        }
        assert!(Instant::now() < deadline, "no 402 was mended from MCP: {page:?}");
        std::thread::sleep(Duration::from_millis(150));
    };
    assert_eq!(done.len(), 1, "{done:?}");
    let m = done[0].as_object().unwrap();
    assert_eq!((s(m, "state"), s(m, "of")), ("needs_stamp".to_owned(), id.clone()), "{m:?}");
    assert_eq!(s(m, "command"), format!("nyx5 send --again {id} bo@b.test --stamp 1"));
    drop(mcp);

    let done = first_mend(&w, "ana@a.test");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((s(&done[0], "state"), s(&done[0], "of")), ("resent".to_owned(), id.clone()), "{done:?}");
    let new = s(&done[0], "id");
    let stamp = obj(obj(&done[0], "sent"), "stamp");
    assert_eq!((s(stamp, "house"), stamp.get("amount").and_then(Value::as_safe_integer)), ("b.test".into(), Some(1)));
    // ana has no token at b.test: the new envelope is refused too. bo raises his price before
    // ana reads that bounce, so the card changed again: a resend is not resent unasked; the
    // read names the command.
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "stamp", "--price", "2", "--json"]).json();
    let done = first_mend(&w, "ana@a.test");
    assert_eq!((s(&done[0], "state"), s(&done[0], "of")), ("needs_again".to_owned(), new.clone()), "{done:?}");
    assert_eq!(s(&done[0], "resend_of"), id);
    assert_eq!(s(&done[0], "command"), format!("nyx5 send --again {new} bo@b.test --stamp 2"));
    let text = w.nyx5(&["inbox"]).ok();
    assert!(text.contains("so it is not sent a third time unasked"), "{text}");
    assert_eq!(settled_jobs(&w, "ana@a.test"), ["bounced", "bounced", "delivered"], "newest first");
}

/// Issue 35 §2: `nyx5 inbox --follow` mends a 402 from a stale card as it reads, once: its JSON
/// line for the bounce carries `stale_card`, and bo gets the message once.
#[test]
fn inbox_follow_mends_a_402_from_a_stale_card_once() {
    use std::io::BufRead;
    let w = World::new("stale402-follow");
    w.two_agents();
    let first = s(&w.nyx5(&["send", "bo@b.test", "--body", "first", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&first));
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "pow", "--pow-bits", "8", "--json"]).json();
    let id = s(&w.nyx5(&["send", "bo@b.test", "--body", "followed", "--json"]).json(), "id");

    let mut c = w.command();
    c.args(["inbox", "--follow", "--interval", "1", "--json"]);
    let mut child = c.spawn().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mended = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            panic!("inbox --follow never mended the 402");
        };
        let m = common::object(&line);
        if let Some(done) = m.get("stale_card").and_then(Value::as_object) {
            assert_eq!(s(&m, "from"), "postmaster@a.test");
            break done.clone();
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((s(&mended, "state"), s(&mended, "of")), ("resent".to_owned(), id.clone()), "{mended:?}");
    let new = s(&mended, "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&new));
    assert_eq!(w.nyx5(&["inbox", "--json"]).json().get("stale_cards"), Some(&Value::Array(vec![])));
    settled_jobs(&w, "ana@a.test");
    let got = mailbox_ids(&w, "bo@b.test");
    assert_eq!(got.iter().filter(|i| **i == new).count(), 1, "{got:?}");
    assert!(!got.contains(&id), "{got:?}");
}

/// A resend is never resent unasked, though its original has left the profile: 64 later sends
/// push the original (and its record of the resend) out of `sent`, while the resend itself is
/// kept four days. Without `resend_of` on the resend, its next 402 was taken for a first bounce
/// and sent — and paid — again, every 64 sends (hostile review of issue 35, M1).
#[test]
fn a_resend_is_not_resent_after_its_original_left_the_profile() {
    let mut w = World::new("resend-chain");
    // Sixty-odd sends within the test's minute.
    w.set_env_a("NYX5_OUTBOUND_PER_MINUTE", "1000");
    w.two_agents();
    let first = s(&w.nyx5(&["send", "bo@b.test", "--body", "first", "--json"]).json(), "id");
    w.wait_inbox("bo@b.test", |l| ids(l).contains(&first));
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "stamp", "--price", "1", "--json"]).json();
    let id = s(&w.nyx5(&["send", "bo@b.test", "--body", "no stamp", "--json"]).json(), "id");
    let done = first_mend(&w, "ana@a.test");
    assert_eq!((s(&done[0], "state"), s(&done[0], "of")), ("resent".to_owned(), id.clone()), "{done:?}");
    let new = s(&done[0], "id");
    // ana has no tokens at b.test: `new` bounces (402); bo raises his price meanwhile.
    w.nyx5(&["register", "--as", "bo@b.test", "--policy", "stamp", "--price", "2", "--json"]).json();
    let done = first_mend(&w, "ana@a.test");
    assert_eq!((s(&done[0], "state"), s(&done[0], "of")), ("needs_again".to_owned(), new.clone()), "{done:?}");

    // ana goes on with her work until `id` (the original) has left `sent`.
    let sent_ids = || -> Vec<String> {
        let p = Value::parse(&std::fs::read(&w.profile).unwrap(), 1 << 27).unwrap();
        let agents = p.as_object().unwrap().get("agents").and_then(Value::as_array).unwrap();
        let ana = agents.iter().filter_map(Value::as_object).find(|a| s(a, "address") == "ana@a.test").unwrap().clone();
        ana.get("sent").and_then(Value::as_object).map(|o| o.keys().cloned().collect()).unwrap_or_default()
    };
    let mut n = 0;
    while sent_ids().contains(&id) {
        w.nyx5(&["send", "ana@a.test", "--body", &format!("note {n}"), "--json"]).json();
        n += 1;
        assert!(n < 80, "the original never left `sent`");
    }
    assert!(sent_ids().contains(&new), "the resend is still kept");
    // The bounce of `new`, read again: still not resent.
    let inbox = w.nyx5(&["inbox", "--json", "--limit", "200"]).json();
    let done = inbox.get("stale_cards").and_then(Value::as_array).map(<[Value]>::to_vec).unwrap_or_default();
    assert!(
        done.iter().filter_map(Value::as_object).all(|m| s(m, "state") != "resent"),
        "after {n} sends a resend was resent unasked: {done:?}"
    );
}

/// The mail kept on the agent's side (issue 38 §1), across two `nyx5 serve` houses: what `inbox`
/// read and `send` sent is kept in `<profile>.mail.db` (0600), `thread` shows a conversation in
/// order with what the agent itself sent, `find` searches its words with each filter, an ack
/// keeps it (no longer unread), `forget` removes it.
#[test]
fn threads_and_search_over_kept_mail() {
    let w = World::new("kept");
    w.two_agents();
    let send = |w: &World, args: &[&str]| w.nyx5(&[&["send", "--json"], args].concat()).json();
    send(&w, &["bo@b.test", "--body", "the invoice for March is attached", "--thread", "inv-3", "--id", "q1"]);
    send(&w, &["bo@b.test", "--body", "lunch on Friday?", "--id", "other1"]);
    w.wait_inbox("bo@b.test", |l| l.len() >= 2);
    // bo answers within the thread; ana reads the answer.
    send(
        &w,
        &[
            "--as",
            "bo@b.test",
            "ana@a.test",
            "--body",
            "paid today",
            "--thread",
            "inv-3",
            "--in-reply-to",
            "q1",
            "--id",
            "r1",
        ],
    );
    w.wait_inbox("ana@a.test", |l| !l.is_empty());

    let store = std::path::PathBuf::from(format!("{}.mail.db", w.profile.display()));
    assert_eq!(std::fs::metadata(&store).unwrap().permissions().mode() & 0o777, 0o600, "readable by its user only");

    // ana's thread: what she sent and bo's answer, in order, each with its trust.
    let t = w.nyx5(&["thread", "r1", "--json"]).json();
    let messages = t.get("messages").and_then(Value::as_array).unwrap();
    assert_eq!(ids(messages), ["q1", "r1"]);
    let dirs: Vec<String> = messages.iter().map(|m| s(m.as_object().unwrap(), "dir")).collect();
    assert_eq!(dirs, ["out", "in"]);
    assert_eq!(s(messages[1].as_object().unwrap(), "trust"), "verified");
    let human = w.nyx5(&["thread", "q1"]).ok();
    assert!(human.contains("(sent by you)") && human.contains("paid today"), "{human}");
    // bo's side: the same conversation from his mailbox and his reply.
    let t = w.nyx5(&["thread", "q1", "--as", "bo@b.test", "--json"]).json();
    assert_eq!(ids(t.get("messages").and_then(Value::as_array).unwrap()), ["q1", "r1"]);

    let find = |args: &[&str]| {
        let v = w.nyx5(&[&["find", "--as", "bo@b.test", "--json"], args].concat()).json();
        ids(v.get("found").and_then(Value::as_array).unwrap())
    };
    assert_eq!(find(&["invoice"]), ["q1"]);
    assert_eq!(find(&["MARCH", "attached"]), ["q1"], "all the words, any case");
    assert!(find(&["invoice", "lunch"]).is_empty());
    assert_eq!(find(&["--from", "ana@a.test"]), ["other1", "q1"], "newest first");
    assert_eq!(find(&["--to", "ana@a.test"]), ["r1"], "what bo sent");
    assert_eq!(find(&["--unread"]), ["other1", "q1"]);
    assert_eq!(find(&["--since", "-1h", "--type", "message"]).len(), 3);
    assert!(find(&["--until", "-1h"]).is_empty());
    let (err, _) = w.nyx5(&["find", "--type", "letter"]).fails_with(2);
    assert!(err.contains("--type"), "{err}");

    // Acknowledged on the house: still kept, no longer unread.
    w.nyx5(&["ack", "--as", "bo@b.test", "q1"]).ok();
    assert_eq!(find(&["invoice"]), ["q1"]);
    assert_eq!(find(&["--unread"]), ["other1"]);
    // Forgotten: gone from search and threads.
    let f = w.nyx5(&["forget", "--as", "bo@b.test", "q1", "--json"]).json();
    assert_eq!(f.get("forgot").and_then(Value::as_safe_integer), Some(1));
    assert!(find(&["invoice"]).is_empty());
    let (err, _) = w.nyx5(&["thread", "q1", "--as", "bo@b.test"]).fails_with(2);
    assert!(err.contains("not kept"), "{err}");
    let (err, _) = w.nyx5(&["forget", "--as", "bo@b.test"]).fails_with(2);
    assert!(err.contains("--all"), "{err}");
    let all = w.nyx5(&["forget", "--as", "bo@b.test", "--all", "--json"]).json();
    assert_eq!(all.get("forgot").and_then(Value::as_safe_integer), Some(2));
    assert!(find(&[]).is_empty());
}
