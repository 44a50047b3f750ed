//! End-to-end tests of the `nyx5` binary: key files, canon, seal/open, verify, usage errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Agent, TempDir, nyx5, object, string};
use nyx5_proto::address::check_id;
use nyx5_proto::b64;
use nyx5_proto::crypto::{Context, SigningKey};
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::sign::sign_object;
use nyx5_proto::time::Timestamp;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn key_file_is_0600_and_never_silently_overwritten() {
    let dir = TempDir::new("keys-new");
    let path = dir.join("agent.json");
    let p = path.to_str().unwrap();
    let shown = nyx5(&["keys", "new", "--out", p], b"").ok();
    assert_eq!(mode(&path), 0o600);
    let first = std::fs::read(&path).unwrap();
    let lines: Vec<&str> = shown.lines().collect();
    assert!(lines.len() == 2 && lines[0].starts_with("sig: ") && lines[1].starts_with("enc: "));

    let err = nyx5(&["keys", "new", "--out", p], b"").fails(2);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), first, "refused, yet changed");

    nyx5(&["keys", "new", "--out", p, "--force"], b"").ok();
    assert_eq!(mode(&path), 0o600);
    assert_ne!(std::fs::read(&path).unwrap(), first);

    // --force over a world-readable file still leaves a 0600 file behind.
    let loose = dir.join("loose.json");
    std::fs::write(&loose, b"{}").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    nyx5(&["keys", "new", "--out", loose.to_str().unwrap(), "--force"], b"").ok();
    assert_eq!(mode(&loose), 0o600);
    // No temporary files are left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 2);
}

#[test]
fn key_file_format_is_pinned_and_show_prints_public_keys() {
    let dir = TempDir::new("keys-format");
    let path = dir.join("agent.json");
    let p = path.to_str().unwrap();
    nyx5(&["keys", "new", "--out", p], b"").ok();
    let text = std::fs::read_to_string(&path).unwrap();
    let file = object(&text);
    // Canonical JSON plus one newline, exactly the six members.
    assert_eq!(text, format!("{}\n", Value::Object(file.clone()).canonical_string()));
    let names: Vec<&str> = file.keys().map(String::as_str).collect();
    assert_eq!(names, ["enc", "enc_secret", "kind", "nyx5", "sig", "sig_secret"]);
    assert_eq!(string(&file, "nyx5"), "1");
    assert_eq!(string(&file, "kind"), "agent-keys");
    for k in ["sig", "enc", "sig_secret", "enc_secret"] {
        assert_eq!(b64::decode(&string(&file, k)).unwrap().len(), 32, "{k}");
    }
    // The seed really is the Ed25519 seed of `sig`.
    let seed = b64::decode_array(&string(&file, "sig_secret")).unwrap();
    assert_eq!(SigningKey::from_seed(seed).public().to_b64(), string(&file, "sig"));

    let json = nyx5(&["keys", "show", p, "--json"], b"").ok();
    let expected = Value::Object(obj([("sig", string(&file, "sig").into()), ("enc", string(&file, "enc").into())]));
    assert_eq!(json, format!("{}\n", expected.canonical_string()));
    let human = nyx5(&["keys", "show", p], b"").ok();
    assert_eq!(human, format!("sig: {}\nenc: {}\n", string(&file, "sig"), string(&file, "enc")));
}

#[test]
fn key_file_whose_public_keys_do_not_match_is_refused() {
    let dir = TempDir::new("keys-mismatch");
    let a = Agent::new(&dir, "a@x.example");
    let b = Agent::new(&dir, "b@x.example");
    for (member, other) in [("sig", &b.sig), ("enc", &b.enc)] {
        let mut file = object(&std::fs::read_to_string(&a.file).unwrap());
        file.insert(member.into(), other.as_str().into());
        let bad = dir.join(&format!("bad-{member}.json"));
        std::fs::write(&bad, Value::Object(file).canonical()).unwrap();
        let err = nyx5(&["keys", "show", bad.to_str().unwrap()], b"").fails(2);
        assert!(err.contains(&format!("`{member}` is not the public key")), "{err}");
    }
    let mut file = object(&std::fs::read_to_string(&a.file).unwrap());
    file.insert("kind".into(), "house-keys".into());
    let bad = dir.join("bad-kind.json");
    std::fs::write(&bad, Value::Object(file).canonical()).unwrap();
    nyx5(&["keys", "show", bad.to_str().unwrap()], b"").fails(2);
    let missing = dir.join("missing.json");
    nyx5(&["keys", "show", missing.to_str().unwrap()], b"").fails(2);
}

#[test]
fn canon_writes_canonical_bytes_without_newline() {
    let cases: [(&str, &str); 6] = [
        (r#" { "b" : 1 , "a" : [ true , null ] } "#, r#"{"a":[true,null],"b":1}"#),
        ("[1e21, 1E20, 0.000001, 1.5e-7, -0, 1.0, -12.50]", "[1e+21,100000000000000000000,0.000001,1.5e-7,0,1,-12.5]"),
        (r#""\u00e9\u20ac\/\u001f\b\f\n\r\t\"\\""#, r#""é€/\u001f\b\f\n\r\t\"\\""#),
        ("{\"\u{fb01}\":1,\"\u{1f600}\":2,\"a\":3,\"\":0}", "{\"\":0,\"a\":3,\"\u{1f600}\":2,\"\u{fb01}\":1}"),
        (r#"{"z":{"y":{},"x":[]}}"#, r#"{"z":{"x":[],"y":{}}}"#),
        ("\"\\ud83d\\ude00\"", "\"\u{1f600}\""),
    ];
    for (input, want) in cases {
        assert_eq!(nyx5(&["canon"], input.as_bytes()).ok(), want, "{input}");
    }
}

#[test]
fn canon_refuses_what_the_strict_parser_refuses() {
    let err = nyx5(&["canon"], br#"{"a":1,"a":2}"#).fails(2);
    assert!(err.contains("duplicate key"), "{err}");
    let err = nyx5(&["canon"], br#"{"x":{"k":1,"k":1}}"#).fails(2);
    assert!(err.contains("duplicate key"), "{err}");
    for bad in [&b"{\"a\":1} x"[..], b"", b"[1,]", b"\"\\ud800\"", b"9007199254740993", b"\xff"] {
        nyx5(&["canon"], bad).fails(2);
    }
}

fn draft(from: &Agent, to: &[&Agent], body: Value) -> Vec<u8> {
    let to: Vec<Value> = to.iter().map(|a| a.address.as_str().into()).collect();
    Value::Object(obj([
        ("nyx5", "1".into()),
        ("from", from.address.as_str().into()),
        ("to", Value::Array(to)),
        ("type", "message".into()),
        ("expires", Value::Null),
        ("content", Value::Object(obj([("media", "application/json".into()), ("body", body)]))),
    ]))
    .canonical()
}

fn body() -> Value {
    Value::Object(obj([
        ("texto", "¿nos vemos el martes? 😀".into()),
        ("n", 42.into()),
        ("lista", Value::Array(vec![true.into(), Value::Null])),
    ]))
}

struct Trio {
    _dir: TempDir,
    alice: Agent,
    bob: Agent,
    carol: Agent,
    sealed: String,
}

/// Alice seals one envelope for Bob and Carol.
fn trio(name: &str) -> Trio {
    let dir = TempDir::new(name);
    let alice = Agent::new(&dir, "alice@a.example");
    let bob = Agent::new(&dir, "bob@b.example");
    let carol = Agent::new(&dir, "carol@c.example");
    let sealed = nyx5(
        &["seal", "--key", alice.key_path(), "--to", &bob.to_arg(), "--to", &carol.to_arg()],
        &draft(&alice, &[&bob, &carol], body()),
    )
    .ok();
    Trio { _dir: dir, alice, bob, carol, sealed }
}

fn open_as(env: &str, me: &Agent, sender_sig: &str) -> common::Run {
    nyx5(&["open", "--key", me.key_path(), "--as", &me.address, "--sender-key", sender_sig], env.as_bytes())
}

fn expected_open(body: Value) -> String {
    let content = Value::Object(obj([("media", "application/json".into()), ("body", body)]));
    format!("{}\n", Value::Object(obj([("content", content), ("verified", true.into())])).canonical_string())
}

#[test]
fn seal_then_open_for_two_recipients() {
    let t = trio("round-trip");
    let env = object(&t.sealed);
    assert!(t.sealed.ends_with('\n'));
    assert_eq!(t.sealed.trim_end(), Value::Object(env.clone()).canonical_string());
    assert!(!env.contains_key("content"), "content left in clear");
    let encrypted = env["encrypted"].as_object().unwrap();
    assert_eq!(string(encrypted, "alg"), "X25519+HKDF-SHA256+A256GCM");
    let keys = encrypted["keys"].as_object().unwrap();
    assert_eq!(keys.keys().collect::<Vec<_>>(), ["bob@b.example", "carol@c.example"]);
    // The CLI filled `id` and `created`.
    let id = string(&env, "id");
    assert!(check_id(&id).is_ok() && id.len() == 36 && id.as_bytes()[14] == b'4', "{id}");
    assert!(Timestamp::parse(&string(&env, "created")).is_ok());
    let sig = env["signature"].as_object().unwrap();
    assert_eq!(string(sig, "kid"), t.alice.sig);

    for me in [&t.bob, &t.carol] {
        assert_eq!(open_as(&t.sealed, me, &t.alice.sig).ok(), expected_open(body()));
    }
}

#[test]
fn seal_keeps_a_given_id_and_created_and_plain_signs_in_clear() {
    let dir = TempDir::new("plain");
    let alice = Agent::new(&dir, "alice@a.example");
    let bob = Agent::new(&dir, "bob@b.example");
    let mut doc = object(std::str::from_utf8(&draft(&alice, &[&bob], body())).unwrap());
    doc.insert("id".into(), "fixed-id-1".into());
    doc.insert("created".into(), "2026-09-04T19:00:00.000Z".into());
    let input = Value::Object(doc).canonical();
    let out = nyx5(&["seal", "--key", alice.key_path(), "--plain"], &input).ok();
    let env = object(&out);
    assert_eq!(string(&env, "id"), "fixed-id-1");
    assert_eq!(string(&env, "created"), "2026-09-04T19:00:00.000Z");
    assert!(!env.contains_key("encrypted"));
    let mut unsigned = env.clone();
    unsigned.remove("signature");
    assert_eq!(Value::Object(unsigned).canonical(), input);
    assert_eq!(open_as(&out, &bob, &alice.sig).ok(), expected_open(body()));
    // A clear envelope is still only opened by someone it is addressed to.
    let eve = Agent::new(&dir, "eve@e.example");
    open_as(&out, &eve, &alice.sig).fails(1);
}

/// Changes one member of the signed envelope and signs it again with the sender's own key.
fn readdress(t: &Trio, change: impl Fn(&mut Object)) -> String {
    let mut env = object(&t.sealed);
    change(&mut env);
    let resigned = nyx5(&["seal", "--key", t.alice.key_path(), "--plain"], &Value::Object(env).canonical()).ok();
    // The signature is valid: only decryption can catch the change.
    nyx5(&["verify", "--key", &t.alice.sig], resigned.as_bytes()).ok();
    resigned
}

#[test]
fn readdressed_envelopes_do_not_open_even_with_a_valid_signature() {
    let t = trio("readdress");
    let to = |list: &[&str]| Value::Array(list.iter().map(|a| Value::from(*a)).collect());
    // Each change keeps every wrapped key's address on the envelope, so it still parses.
    let changes = [
        ("to", to(&["bob@b.example", "carol@c.example", "dave@d.example"])),
        ("to", to(&["carol@c.example", "bob@b.example"])),
        ("from", "mallory@a.example".into()),
        ("id", "another-id".into()),
    ];
    for (member, value) in changes {
        let what = format!("{member} = {}", value.canonical_string());
        let env = readdress(&t, |e| {
            e.insert(member.into(), value.clone());
        });
        for me in [&t.bob, &t.carol] {
            let err = open_as(&env, me, &t.alice.sig).fails(1);
            assert!(err.contains("cannot open"), "{what}: {err}");
        }
    }
    // A member outside the AAD (here `type`) changes the signature, not the decryption.
    let env = readdress(&t, |e| {
        e.insert("type".into(), "task".into());
    });
    assert_eq!(open_as(&env, &t.bob, &t.alice.sig).ok(), expected_open(body()));
}

#[test]
fn open_fails_with_wrong_sender_key_or_wrong_recipient() {
    let t = trio("wrong");
    let err = open_as(&t.sealed, &t.bob, &t.carol.sig).fails(1);
    assert!(err.starts_with("nyx5: signature does not verify"), "{err}");

    // Bob's address with Carol's keys: the wrapped key is Bob's, Carol's secret cannot open it.
    let run = nyx5(
        &["open", "--key", t.carol.key_path(), "--as", "bob@b.example", "--sender-key", &t.alice.sig],
        t.sealed.as_bytes(),
    );
    assert!(run.fails(1).contains("cannot open"));
    // An address it was not sealed for.
    let run = nyx5(
        &["open", "--key", t.bob.key_path(), "--as", "dave@b.example", "--sender-key", &t.alice.sig],
        t.sealed.as_bytes(),
    );
    assert!(run.fails(1).contains("not sealed for dave@b.example"));

    // Tampering with a signed member without re-signing breaks the signature.
    let mut env = object(&t.sealed);
    env.insert("thread".into(), "t-1".into());
    let err = open_as(&Value::Object(env).canonical_string(), &t.bob, &t.alice.sig).fails(1);
    assert!(err.starts_with("nyx5: signature does not verify"), "{err}");

    // An unsigned envelope never opens.
    let mut env = object(&t.sealed);
    env.remove("signature");
    open_as(&Value::Object(env).canonical_string(), &t.bob, &t.alice.sig).fails(1);

    // Malformed input is a usage error, not a verification failure.
    open_as("{\"nyx5\":\"1\"}", &t.bob, &t.alice.sig).fails(2);
    open_as(&t.sealed, &t.bob, "not-a-key").fails(2);
}

#[test]
fn verify_envelopes_and_tampering() {
    let t = trio("verify");
    let out = nyx5(&["verify", "--key", &t.alice.sig], t.sealed.as_bytes()).ok();
    assert_eq!(out, "{\"member\":\"signature\",\"ok\":true}\n");
    // A named member must be there; one that is there is the one checked.
    nyx5(&["verify", "--key", &t.alice.sig, "--member", "signature"], t.sealed.as_bytes()).ok();
    let err = nyx5(&["verify", "--key", &t.alice.sig, "--member", "certification"], t.sealed.as_bytes()).fails(2);
    assert!(err.contains("has no `certification`"), "{err}");
    // Named, the kind must be the one it was signed as: an envelope's signature is no card's.
    nyx5(&["verify", "--key", &t.alice.sig, "--kind", "envelope"], t.sealed.as_bytes()).ok();
    let err = nyx5(&["verify", "--key", &t.alice.sig, "--kind", "domain-card"], t.sealed.as_bytes()).fails(1);
    assert!(err.contains("does not verify"), "{err}");

    let mut env = object(&t.sealed);
    env.insert("type".into(), "task".into());
    let tampered = Value::Object(env).canonical_string();
    let err = nyx5(&["verify", "--key", &t.alice.sig], tampered.as_bytes()).fails(1);
    assert!(err.contains("does not verify"), "{err}");

    let err = nyx5(&["verify", "--key", &t.bob.sig], t.sealed.as_bytes()).fails(1);
    assert!(err.contains("not by"), "{err}");

    // A garbled signature value is a failure to verify.
    let mut env = object(&t.sealed);
    let mut sig = env["signature"].as_object().unwrap().clone();
    sig.insert("value".into(), "AAAA".into());
    env.insert("signature".into(), Value::Object(sig));
    let garbled = Value::Object(env).canonical_string();
    nyx5(&["verify", "--key", &t.alice.sig], garbled.as_bytes()).fails(1);

    nyx5(&["verify", "--key", &t.alice.sig], br#"{"a":1}"#).fails(2);
    nyx5(&["verify", "--key", &t.alice.sig], b"[1]").fails(2);
}

#[test]
fn verify_an_agent_card_certification_with_the_domain_key() {
    let dir = TempDir::new("certification");
    let domain = Agent::new(&dir, "domain@b.example");
    let bob = Agent::new(&dir, "bob@b.example");
    let file = object(&std::fs::read_to_string(&domain.file).unwrap());
    let seed = b64::decode_array(&string(&file, "sig_secret")).unwrap();
    let mut card = obj([
        ("nyx5", "1".into()),
        ("address", bob.address.as_str().into()),
        ("sig", bob.sig.as_str().into()),
        ("enc", bob.enc.as_str().into()),
        ("valid_from", "2026-09-04T19:00:00.000Z".into()),
        ("valid_until", Value::Null),
    ]);
    sign_object(&mut card, "certification", Context::AgentCard, &SigningKey::from_seed(seed));
    let text = Value::Object(card.clone()).canonical();
    let out = nyx5(&["verify", "--key", &domain.sig], &text).ok();
    assert_eq!(out, "{\"member\":\"certification\",\"ok\":true}\n");
    // Bob's own key did not certify his card.
    nyx5(&["verify", "--key", &bob.sig], &text).fails(1);
    card.insert("enc".into(), domain.enc.as_str().into());
    nyx5(&["verify", "--key", &domain.sig], &Value::Object(card).canonical()).fails(1);
}

#[test]
fn seal_usage_errors() {
    let dir = TempDir::new("seal-usage");
    let alice = Agent::new(&dir, "alice@a.example");
    let bob = Agent::new(&dir, "bob@b.example");
    let carol = Agent::new(&dir, "carol@c.example");
    let input = draft(&alice, &[&bob, &carol], body());
    let key = alice.key_path();
    // No recipient keys and no --plain; --plain with --to.
    nyx5(&["seal", "--key", key], &input).fails(2);
    nyx5(&["seal", "--key", key, "--plain", "--to", &bob.to_arg()], &input).fails(2);
    // A recipient without a key, a key for a stranger, a bad pair, a repeated address.
    let err = nyx5(&["seal", "--key", key, "--to", &bob.to_arg()], &input).fails(2);
    assert!(err.contains("carol@c.example"), "{err}");
    let dave = format!("dave@d.example={}", bob.enc);
    let (b, c) = (bob.to_arg(), carol.to_arg());
    nyx5(&["seal", "--key", key, "--to", &b, "--to", &c, "--to", &dave], &input).fails(2);
    nyx5(&["seal", "--key", key, "--to", "bob@b.example"], &input).fails(2);
    nyx5(&["seal", "--key", key, "--to", &b, "--to", &b, "--to", &c], &input).fails(2);
    // Not an envelope; a missing key file.
    nyx5(&["seal", "--key", key, "--plain"], b"{\"content\":{}}").fails(2);
    nyx5(&["seal", "--key", key, "--plain"], b"[]").fails(2);
    let missing = dir.join("missing.json");
    nyx5(&["seal", "--key", missing.to_str().unwrap(), "--plain"], &input).fails(2);
}

#[test]
fn help_version_and_bad_arguments() {
    let version = nyx5(&["--version"], b"").ok();
    assert!(version.starts_with("nyx5 "), "{version}");
    let help = nyx5(&["help"], b"").ok();
    for verb in ["keys", "canon", "seal", "open", "verify"] {
        assert!(help.contains(verb), "{help}");
    }
    nyx5(&["help", "seal"], b"").ok();
    nyx5(&[], b"").fails(2);
    nyx5(&["frobnicate"], b"").fails(2);
    nyx5(&["open", "--key", "k"], b"").fails(2);
}

/// Tokens and codes are base64url or hex and may start with `-`: they are values, not options.
#[test]
fn secrets_starting_with_a_hyphen_are_values() {
    let dir = TempDir::new("hyphen");
    let profile = dir.path().join("agents.json");
    let profile = profile.to_str().unwrap();
    for args in [
        vec!["register", "--agent", profile, "--invite", "-1abc"],
        vec!["register", "--agent", profile, "--admin-token", "-Zx_9"],
        vec!["invite", "list", "--agent", profile, "--admin-token", "-Zx_9"],
    ] {
        let run = nyx5(&args, b"");
        assert!(!run.stderr.contains("unexpected argument"), "{args:?}: {}", run.stderr);
    }
}

/// `nyx5 simulate` runs seeds one line each, and the command a failure prints to run it again is
/// one it takes.
#[test]
fn simulate_runs_the_command_a_failure_prints() {
    let params =
        nyx5_house::sim::Params { steps: 6, houses: 2, agents: 2, services: true, ..nyx5_house::sim::Params::new(3) };
    let command = params.command();
    let (_, args) = command.split_once(" -- ").unwrap();
    let run = nyx5(&args.split(' ').collect::<Vec<_>>(), b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("seed 3: 6 steps: ") && run.stdout.lines().count() == 1, "{}", run.stdout);
    let run = nyx5(&["simulate", "--seed", "4", "--seeds", "2", "--steps", "3", "--houses", "1"], b"");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(lines.len() == 2 && lines[0].starts_with("seed 4: 3 steps: ") && lines[1].starts_with("seed 5: 3 steps: "));
    nyx5(&["simulate", "--houses", "17"], b"").fails_with(2);
}
