//! `nyx5 serve` over real HTTP on loopback: two houses, each its own process and SQLite file,
//! each with a hosts file naming the other. The card, registration with the printed admin token,
//! a sealed envelope delivered by the timer tick after its destination comes back, the mailbox,
//! the 413 and 400 JSON errors, and a clean stop on SIGINT and SIGTERM.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{TempDir, free_port};
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::card::DomainCard;
use nyx5_proto::crypto::{EncSecret, SigningKey};
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value, seal};

const READY_WAIT: Duration = Duration::from_secs(60);

fn now() -> Timestamp {
    Timestamp(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64)
}

/// A running `nyx5 serve`, killed if the test ends without stopping it.
struct Serve {
    child: Option<Child>,
    lines: Receiver<String>,
    port: u16,
    /// The admin token, when this start printed one.
    printed_token: Option<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Serve {
    /// Starts a house for `domain` on `port`, its database in `dir`, knowing `other` through a
    /// hosts file, and waits for its ready line.
    fn start(dir: &Path, domain: &str, port: u16, other: (&str, u16)) -> Serve {
        Serve::start_with(dir, domain, port, other, &[], &[])
    }

    /// As [`Serve::start`], with more options and environment variables.
    fn start_with(
        dir: &Path,
        domain: &str,
        port: u16,
        other: (&str, u16),
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let hosts = dir.join(format!("{domain}.hosts.json"));
        std::fs::write(&hosts, format!(r#"{{"{}":{{"url":"http://127.0.0.1:{}"}}}}"#, other.0, other.1)).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nyx5"))
            .args(["serve", "--domain", domain, "--registration", "admin", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--db")
            .arg(dir.join(format!("{domain}.db")))
            .arg("--hosts")
            .arg(&hosts)
            .args(extra)
            .env_remove("NYX5_ADMIN_TOKEN")
            .env_remove("NYX5_REQUIRE_RELAY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut serve = Serve { child: Some(child), lines, port, printed_token: None };
        let ready = format!("nyx5 serve: {domain} at http://127.0.0.1:{port}");
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = serve.lines.recv_timeout(left).unwrap_or_else(|_| panic!("{domain} never said it was ready"));
            if line == ready {
                break;
            }
            if let Some((_, token)) = line.split_once("admin token") {
                let token = token.rsplit(": ").next().unwrap().trim().to_owned();
                assert!(token.len() >= 32, "a generated token is long: {line}");
                serve.printed_token = Some(token);
            }
        }
        serve
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends a signal with kill(1) and waits for the exit.
    fn stop(&mut self, signal: &str) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{signal}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the house did not stop on {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One HTTP/1.1 exchange written by hand (`Connection: close`), so the server is checked by a
/// client that shares no code with it. Returns the status and the body.
fn exchange(port: u16, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) and close before it reads a body; that is its right.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete answer head");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "answers have a length");
    (status, answer[split + 4..].to_vec())
}

fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<u8>) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    exchange(port, &head, body)
}

fn json(answer: &(u16, Vec<u8>), status: u16) -> Object {
    let v = Value::parse(&answer.1, 1 << 24).unwrap_or_else(|e| {
        panic!("status {}: body is not JSON ({e}): {}", answer.0, String::from_utf8_lossy(&answer.1))
    });
    assert_eq!(answer.0, status, "unexpected status; body: {}", v.canonical_string());
    v.as_object().unwrap().clone()
}

/// An agent with real keys, speaking to its house as a client would.
struct Agent {
    address: Address,
    sig: SigningKey,
    enc: EncSecret,
}

static NONCE: AtomicU64 = AtomicU64::new(0);

impl Agent {
    fn new(address: &str, seed: u8) -> Agent {
        Agent {
            address: Address::parse(address).unwrap(),
            sig: SigningKey::from_seed([seed; 32]),
            enc: EncSecret::from_bytes([seed.wrapping_add(100); 32]),
        }
    }

    fn token(&self, house: &Serve, method: &str, target: &str, body: &[u8]) -> String {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let n = NONCE.fetch_add(1, Ordering::SeqCst);
        Claims {
            address: self.address.clone(),
            ts: now(),
            nonce: format!("serve-test-{}-{n:08}", std::process::id()),
            target: Target::new(method, path, query, &house.host(), body),
        }
        .sign(&self.sig)
    }

    fn registration(&self) -> Vec<u8> {
        let mut o = obj([
            ("local", self.address.local().into()),
            ("sig", self.sig.public().to_b64().into()),
            ("enc", self.enc.public().to_b64().into()),
            ("ts", now().to_rfc3339().into()),
        ]);
        nyx5_proto::sign::sign_object(&mut o, "signature", nyx5_proto::crypto::Context::Registration, &self.sig);
        Value::Object(o).canonical()
    }

    fn register(&self, house: &Serve, admin_token: &str) -> (u16, Vec<u8>) {
        let bearer = format!("Bearer {admin_token}");
        http(house.port, "POST", "/agents", &[("authorization", &bearer)], &self.registration())
    }

    fn get(&self, house: &Serve, path: &str) -> (u16, Vec<u8>) {
        let token = self.token(house, "GET", path, b"");
        http(house.port, "GET", path, &[("authorization", &token)], b"")
    }
}

fn domain_card(house: &Serve) -> nyx5_proto::Verified<DomainCard> {
    let answer = http(house.port, "GET", "/.well-known/nyx5.json", &[], b"");
    assert_eq!(answer.0, 200);
    DomainCard::parse(&answer.1).unwrap().verify(None).unwrap()
}

fn mailbox(house: &Serve, agent: &Agent) -> Vec<Envelope> {
    let answer = agent.get(house, &format!("/mailbox/{}", agent.address.local()));
    json(&answer, 200)["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Envelope::from_object(e.as_object().unwrap()["envelope"].as_object().unwrap().clone()).unwrap())
        .collect()
}

fn outbox_states(house: &Serve, agent: &Agent) -> Vec<String> {
    let answer = agent.get(house, &format!("/outbox/{}", agent.address.local()));
    json(&answer, 200)["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e.as_object().unwrap()["jobs"].as_array().unwrap().to_vec())
        .map(|j| j.as_object().unwrap()["state"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn two_houses_on_loopback_register_deliver_and_stop_cleanly() {
    let dir = TempDir::new("serve");
    let (pa, pb) = (free_port(), free_port());
    let mut a = Serve::start(dir.path(), "a.test", pa, ("b.test", pb));
    let mut b = Serve::start(dir.path(), "b.test", pb, ("a.test", pa));
    let token_a = a.printed_token.clone().expect("first start prints the admin token");
    let token_b = b.printed_token.clone().expect("first start prints the admin token");
    assert_ne!(token_a, token_b);

    // The domain card is served, self-signed, and names the house where it listens.
    let card_a = domain_card(&a);
    assert_eq!(card_a.domain(), "a.test");
    assert_eq!(card_a.estafeta(), format!("http://127.0.0.1:{pa}"));
    let key_b = domain_card(&b).object().clone();

    // Registration: the printed token opens it; no token (admin mode) does not.
    let ana = Agent::new("ana@a.test", 1);
    let bo = Agent::new("bo@b.test", 2);
    json(&ana.register(&a, &token_a), 201);
    json(&bo.register(&b, &token_b), 201);
    let nobody = Agent::new("nadie@a.test", 3);
    let refused = http(pa, "POST", "/agents", &[], &nobody.registration());
    assert!(matches!(refused.0, 401 | 403), "admin mode refuses strangers: {}", refused.0);
    json(&refused, refused.0);

    // Malformed input is the engine's 400 JSON; a body over 2 MiB is 413 JSON, refused on its
    // declared length before any of it is read.
    let bearer = format!("Bearer {token_a}");
    let bad = json(&http(pa, "POST", "/agents", &[("authorization", &bearer)], b"{\"local\":"), 400);
    assert_eq!(bad["ok"], Value::Bool(false));
    let head = format!(
        "POST /outbound HTTP/1.1\r\nhost: 127.0.0.1:{pa}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        3 * 1024 * 1024
    );
    let big = json(&exchange(pa, &head, b""), 413);
    assert_eq!(big["ok"], Value::Bool(false));
    assert_eq!(big["code"], Value::from(413_i64));

    // b.test goes away (SIGTERM: a clean exit) before ana writes to bo.
    assert!(b.stop("TERM").success(), "SIGTERM ends the house with status 0");
    let draft = Draft::new(
        "serve-test-1".into(),
        ana.address.clone(),
        vec![bo.address.clone()],
        now(),
        Content::new("text/plain", "hola bo, por HTTP de verdad".into()),
    )
    .build()
    .unwrap();
    let sealed = seal::seal(draft, &[(bo.address.clone(), bo.enc.public())], &mut |buf: &mut [u8]| {
        getrandom::fill(buf).unwrap()
    })
    .unwrap()
    .sign(&ana.sig)
    .unwrap();
    let token = ana.token(&a, "POST", "/outbound", &sealed.canonical());
    let queued = http(
        pa,
        "POST",
        "/outbound",
        &[("authorization", &token), ("content-type", "application/json")],
        &sealed.canonical(),
    );
    json(&queued, 202);

    // The kick after the 202 tries b.test at once and fails: the job is retrying.
    let deadline = Instant::now() + Duration::from_secs(20);
    while outbox_states(&a, &ana) != ["retrying"] {
        assert!(Instant::now() < deadline, "the kick never tried: {:?}", outbox_states(&a, &ana));
        std::thread::sleep(Duration::from_millis(100));
    }

    // b.test comes back on the same database: same key, and the token is not printed again.
    let mut b = Serve::start(dir.path(), "b.test", pb, ("a.test", pa));
    assert_eq!(b.printed_token, None, "the admin token is printed on first start only");
    assert_eq!(domain_card(&b).object(), &key_b, "the domain key is kept in the database");

    // Nothing sends again: the timer tick on a.test delivers, and bo reads and opens it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        let got = mailbox(&b, &bo);
        if !got.is_empty() {
            break got;
        }
        assert!(Instant::now() < deadline, "never delivered; outbox: {:?}", outbox_states(&a, &ana));
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id(), "serve-test-1");
    let verified = got[0].clone().verify_with_key(&ana.sig.public()).unwrap();
    let content = seal::open(&verified, &bo.address, &bo.enc).unwrap();
    assert_eq!(content.body, Value::from("hola bo, por HTTP de verdad"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while outbox_states(&a, &ana) != ["delivered"] {
        assert!(Instant::now() < deadline, "outbox: {:?}", outbox_states(&a, &ana));
        std::thread::sleep(Duration::from_millis(100));
    }

    // The stored token still works after the restart.
    json(&Agent::new("cy@b.test", 4).register(&b, &token_b), 201);

    assert!(a.stop("INT").success(), "SIGINT ends the house with status 0");
    assert!(b.stop("TERM").success(), "SIGTERM ends the house with status 0");
}

/// Issue 10 §6: what is not HTTP gets the JSON error shape from the binary too, and
/// `--require-relay` (or `NYX5_REQUIRE_RELAY`) sets what the domain card says of relays: on by
/// default, off when asked.
#[test]
fn unparseable_http_is_answered_in_json_and_require_relay_is_an_option() {
    let dir = TempDir::new("serve-relay");
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let requires = |house: &Serve| {
        let card = domain_card(house);
        card.object()["policy"].as_object().unwrap().get("require_relay").cloned()
    };
    let mut a = Serve::start(dir.path(), "a.test", pa, ("b.test", pb));
    assert_eq!(requires(&a), Some(Value::Bool(true)), "on by default");
    for garbage in ["EHLO a.test\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n"]
    {
        let bad = json(&exchange(pa, garbage, b""), 400);
        assert_eq!(bad["error"], Value::from("bad_http"), "{garbage:?}");
    }
    let mut b = Serve::start_with(dir.path(), "b.test", pb, ("a.test", pa), &["--require-relay=false"], &[]);
    assert_eq!(requires(&b), None);
    let mut c = Serve::start_with(dir.path(), "c.test", pc, ("a.test", pa), &[], &[("NYX5_REQUIRE_RELAY", "off")]);
    assert_eq!(requires(&c), None);
    for s in [&mut a, &mut b, &mut c] {
        assert!(s.stop("TERM").success());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_nyx5"))
        .args(["serve", "--domain", "x.test", "--require-relay=maybe", "--db"])
        .arg(dir.join("x.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_options_exit_2_with_one_line() {
    let dir = TempDir::new("serve-usage");
    let db = dir.join("x.db");
    for args in [
        vec!["--domain", "Not A Domain", "--db", db.to_str().unwrap()],
        vec!["--domain", "x.test", "--db", db.to_str().unwrap(), "--public-url", "ftp://x"],
        vec!["--domain", "x.test", "--db", db.to_str().unwrap(), "--hosts", "/nonexistent/hosts.json"],
        vec!["--domain", "x.test", "--db", db.to_str().unwrap(), "--registration", "maybe"],
        vec!["--domain", "x.test", "--db", db.to_str().unwrap(), "--tick-ms", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_nyx5")).arg("serve").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

/// A sealed envelope from `from` to `to`, sent through `house`'s `/outbound` (202).
fn send(house: &Serve, from: &Agent, to: &Agent, id: &str, text: &str) {
    let draft = Draft::new(
        id.into(),
        from.address.clone(),
        vec![to.address.clone()],
        now(),
        Content::new("text/plain", text.into()),
    )
    .build()
    .unwrap();
    let sealed = seal::seal(draft, &[(to.address.clone(), to.enc.public())], &mut |buf: &mut [u8]| {
        getrandom::fill(buf).unwrap()
    })
    .unwrap()
    .sign(&from.sig)
    .unwrap();
    let body = sealed.canonical();
    let token = from.token(house, "POST", "/outbound", &body);
    json(
        &http(
            house.port,
            "POST",
            "/outbound",
            &[("authorization", &token), ("content-type", "application/json")],
            &body,
        ),
        202,
    );
}

/// `agent`'s mailbox once it holds `n` envelopes (the tick delivers).
fn mailbox_of(house: &Serve, agent: &Agent, n: usize) -> Vec<Envelope> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = mailbox(house, agent);
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} holds {} of {n}", agent.address, got.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ack(house: &Serve, agent: &Agent, ids: &[&str]) -> Object {
    let path = format!("/mailbox/{}/ack", agent.address.local());
    let body = Value::Object(obj([("ids", Value::Array(ids.iter().map(|i| Value::from(*i)).collect()))])).canonical();
    let token = agent.token(house, "POST", &path, &body);
    json(
        &http(house.port, "POST", &path, &[("authorization", &token), ("content-type", "application/json")], &body),
        200,
    )
}

/// Envelope rows `local` has in the SQLite file at `path`.
fn rows_in(path: &Path, local: &str) -> i64 {
    use nyx5_house::ports::Db;
    let db = nyx5_house::sqlite::SqliteDb::open(path).unwrap();
    let rows =
        futures_lite_block_on(db.query(nyx5_house::stmt!("SELECT count(*) AS n FROM mailbox WHERE local = ?", local)))
            .unwrap();
    rows[0].int("n").unwrap()
}

fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(f).poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("SQLite answers at once"),
    }
}

/// Issue 36 §3: a house over two SQLite files. Agents placed on each send, read and acknowledge;
/// their envelopes are in their own file; `nyx5 shard move`, run beside the running house,
/// moves a mailbox and loses nothing, and mail keeps coming after.
#[test]
fn a_house_over_two_files_sends_reads_acks_and_moves_a_mailbox() {
    let dir = TempDir::new("serve-shards");
    let (port, nobody) = (free_port(), free_port());
    let primary = dir.path().join("s.test.db");
    let shard = dir.path().join("s.test.shard1.db");
    let shard_arg = shard.to_str().unwrap().to_owned();
    let a = Serve::start_with(dir.path(), "s.test", port, ("n.test", nobody), &["--shard", &shard_arg], &[]);
    let token = a.printed_token.clone().unwrap();
    // One agent on each database, by the house's own rule.
    let name_on = |want: usize| {
        (0..100).map(|i| format!("agent{i}")).find(|n| nyx5_house::shards::placement(n, 2) == want).unwrap()
    };
    let ana = Agent::new(&format!("{}@s.test", name_on(0)), 11);
    let bo = Agent::new(&format!("{}@s.test", name_on(1)), 12);
    json(&ana.register(&a, &token), 201);
    json(&bo.register(&a, &token), 201);

    send(&a, &ana, &bo, "shards-1", "to the shard");
    send(&a, &bo, &ana, "shards-2", "to the primary");
    let got = mailbox_of(&a, &bo, 1);
    assert_eq!(got[0].id(), "shards-1");
    assert_eq!(mailbox_of(&a, &ana, 1)[0].id(), "shards-2");
    let (bo_local, ana_local) = (bo.address.local().to_owned(), ana.address.local().to_owned());
    assert_eq!((rows_in(&primary, &bo_local), rows_in(&shard, &bo_local)), (0, 1), "bo's mail is in the shard file");
    assert_eq!((rows_in(&primary, &ana_local), rows_in(&shard, &ana_local)), (1, 0), "ana's in the primary");
    assert_eq!(ack(&a, &ana, &["shards-2"])["acked"], Value::from(1_i64));
    assert!(mailbox(&a, &ana).is_empty());

    // Another, acknowledged; one more waiting; then bo's mailbox moves to the primary file.
    send(&a, &ana, &bo, "shards-3", "before the move");
    mailbox_of(&a, &bo, 2);
    assert_eq!(ack(&a, &bo, &["shards-1"])["acked"], Value::from(1_i64));
    let out = Command::new(env!("CARGO_BIN_EXE_nyx5"))
        .args(["shard", "move", "--db"])
        .arg(&primary)
        .arg("--shard")
        .arg(&shard)
        .args([bo_local.as_str(), "0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "shard move: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved from database 1 to 0 (2 envelopes)"));
    assert_eq!((rows_in(&primary, &bo_local), rows_in(&shard, &bo_local)), (2, 0), "moved, and gone from the shard");

    // The running house finds it where it is now: what waited, and what comes after.
    let ids: Vec<String> = mailbox(&a, &bo).iter().map(|e| e.id().to_owned()).collect();
    assert_eq!(ids, ["shards-3"]);
    send(&a, &ana, &bo, "shards-4", "after the move");
    let ids: Vec<String> = mailbox_of(&a, &bo, 2).iter().map(|e| e.id().to_owned()).collect();
    assert_eq!(ids, ["shards-3", "shards-4"]);
    assert_eq!(ack(&a, &bo, &["shards-3", "shards-4"])["acked"], Value::from(2_i64));
    assert!(mailbox(&a, &bo).is_empty());
    assert_eq!(rows_in(&primary, &bo_local), 3);

    // The operator's route moves it back, in the running house; only the operator may.
    let body = Value::Object(obj([("local", Value::from(bo_local.as_str())), ("to", Value::from(1_i64))])).canonical();
    let bearer = format!("Bearer {token}");
    let refused = http(port, "POST", "/shards/move", &[], &body);
    assert!(matches!(refused.0, 401 | 403), "{}", refused.0);
    let far = Value::Object(obj([("local", Value::from(bo_local.as_str())), ("to", Value::from(2_i64))])).canonical();
    assert_eq!(
        json(&http(port, "POST", "/shards/move", &[("authorization", &bearer)], &far), 400)["error"],
        Value::from("bad_member")
    );
    let moved = json(&http(port, "POST", "/shards/move", &[("authorization", &bearer)], &body), 200);
    assert_eq!(
        (moved["from"].clone(), moved["to"].clone(), moved["envelopes"].clone()),
        (Value::from(0_i64), Value::from(1_i64), Value::from(3_i64))
    );
    assert_eq!((rows_in(&primary, &bo_local), rows_in(&shard, &bo_local)), (0, 3));
    send(&a, &ana, &bo, "shards-5", "back on the shard");
    let ids: Vec<String> = mailbox_of(&a, &bo, 1).iter().map(|e| e.id().to_owned()).collect();
    assert_eq!(ids, ["shards-5"]);
    assert_eq!(rows_in(&shard, &bo_local), 4);
}
