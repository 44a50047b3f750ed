//! Issue 34 §2: `nyx5 serve` held by a few addresses. Eight loopback addresses (127.0.0.2 …
//! 127.0.0.9) attack a real `nyx5 serve` with its default caps, each as hard as the caps let it:
//! connections that never send a byte, request heads sent a byte at a time, and 2 MiB bodies
//! sent almost whole and then held; every connection the server closes or refuses is opened
//! again. Meanwhile a client on 127.0.0.1 makes a request every ~100 ms (GET /health, and a
//! POST) on a new connection and records how long each answer took. The test prints the
//! figures and asserts the issue's goals: at least 95 % of the legitimate requests answered
//! (by the engine, not refused by the connection layer) within 2 s, and the server's peak
//! resident memory at most 128 MiB. Its loops are bounded by the clock: it stops by itself, and
//! the server is killed when it ends.
//!
//! A second attack (issue 34, H1 of the hostile review), after the first (a lock keeps the
//! tests from running at once): requests the engine waits on a hanging house to answer (an
//! agent card fetched to check a token), some with 2 MiB bodies.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, clippy::print_stdout)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Attacking addresses.
const ATTACKERS: u8 = 8;
/// Connections each address keeps, by kind: silent, slow head, slow body (32: the default cap).
const SILENT: usize = 10;
const SLOW_HEAD: usize = 10;
const SLOW_BODY: usize = 12;
/// The declared size of a slow body: the largest the house takes (2 MiB).
const BODY: usize = 2 * 1024 * 1024;
/// How long the attack runs before the legitimate client starts, and then with it.
const WARM_UP: Duration = Duration::from_secs(4);
const MEASURED: Duration = Duration::from_secs(20);
/// How long a legitimate request may take to count as answered in time.
const IN_TIME: Duration = Duration::from_secs(2);
const RSS_LIMIT_KIB: u64 = 128 * 1024;

/// One flood at a time: they measure the server's latency on shared cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The serve process, killed on drop.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A field of /proc/<pid>/status, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The CPU time the process has used (user and system), in clock ticks (usually 1/100 s).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after.split_whitespace().skip(11).take(2).filter_map(|v| v.parse::<u64>().ok()).sum()
}

/// One attacking connection, opened again whenever it ends, until `stop`.
async fn attacker(from: Ipv4Addr, to: SocketAddr, kind: usize, stop: Arc<AtomicBool>, opened: Arc<AtomicUsize>) {
    let mut filler = vec![b'a'; 64 * 1024];
    filler[0] = b'{';
    while !stop.load(Ordering::Relaxed) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        if socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        let (mut reader, mut writer) = s.split();
        // Whatever the server says, the attacker waits for the close while it does its part.
        let closed = async {
            let mut sink = [0u8; 4096];
            loop {
                match reader.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        let work = async {
            match kind {
                // (a) Open, and send nothing.
                0 => std::future::pending::<()>().await,
                // (b) A head, a byte at a time, never ending.
                1 => {
                    if writer.write_all(b"GET / HTTP/1.1\r\nhost: flood.test\r\n").await.is_err() {
                        return;
                    }
                    loop {
                        for &b in b"x-slow: y\r\n" {
                            if writer.write_all(&[b]).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                // (c) A 2 MiB body, sent but for its last byte, which never comes (a byte a
                // second after it, so the connection is never quite silent).
                _ => {
                    let head = format!("POST /agents HTTP/1.1\r\nhost: flood.test\r\ncontent-length: {BODY}\r\n\r\n");
                    if writer.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let mut left = BODY - 1;
                    while left > 0 {
                        let n = left.min(filler.len());
                        if writer.write_all(&filler[..n]).await.is_err() {
                            return;
                        }
                        left -= n;
                    }
                    std::future::pending::<()>().await
                }
            }
        };
        tokio::select! {
            () = closed => {}
            () = work => {}
            () = async { while !stop.load(Ordering::Relaxed) { tokio::time::sleep(Duration::from_millis(200)).await } } => {}
        }
        drop(s);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One legitimate request on a new connection: its status (0 when none came) and its time.
fn legitimate(to: SocketAddr, post: bool) -> (u16, Duration) {
    let started = Instant::now();
    let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return (0, started.elapsed());
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = if post {
        let body = br#"{"name":"ana"}"#;
        let mut r =
            format!("POST /agents HTTP/1.1\r\nhost: flood.test\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len())
                .into_bytes();
        r.extend_from_slice(body);
        r
    } else {
        b"GET /health HTTP/1.1\r\nhost: flood.test\r\nconnection: close\r\n\r\n".to_vec()
    };
    if s.write_all(&request).is_err() {
        return (0, started.elapsed());
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let status = String::from_utf8_lossy(&got).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, started.elapsed())
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Starts `nyx5 serve` for flood.test with `extra` arguments: the process and its address.
fn start_serve(dir: &TempDir, extra: &[&std::ffi::OsStr]) -> (Serve, SocketAddr) {
    let port = common::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nyx5"))
        .args(["serve", "--domain", "flood.test", "--registration", "admin", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.join("flood.db"))
        .args(extra)
        .env_remove("NYX5_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let serve = Serve(child);
    let ready = format!("nyx5 serve: flood.test at http://127.0.0.1:{port}");
    let mut lines = BufReader::new(stdout).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l == ready)), "serve never said it was ready");
    std::thread::spawn(move || for _ in lines {});
    (serve, SocketAddr::from(([127, 0, 0, 1], port)))
}

#[test]
fn eight_addresses_cannot_hold_the_server_nor_its_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = TempDir::new("flood");
    let (serve, to) = start_serve(&dir, &[]);
    let pid = serve.0.id();
    let baseline = status_kib(pid, "VmRSS:");

    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let attack = {
        let (stop, opened) = (stop.clone(), opened.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let mut tasks = Vec::new();
                for a in 0..ATTACKERS {
                    let from = Ipv4Addr::new(127, 0, 0, 2 + a);
                    let kinds = [(0, SILENT), (1, SLOW_HEAD), (2, SLOW_BODY)];
                    for (kind, n) in kinds {
                        for _ in 0..n {
                            tasks.push(tokio::spawn(attacker(from, to, kind, stop.clone(), opened.clone())));
                        }
                    }
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        })
    };
    std::thread::sleep(WARM_UP);
    let during_warm_up = status_kib(pid, "VmRSS:");

    let mut results = Vec::new();
    let mut peak_rss = 0;
    let started = Instant::now();
    let mut i = 0u32;
    while started.elapsed() < MEASURED {
        let due = started + Duration::from_millis(100) * i;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        results.push(legitimate(to, i % 2 == 1));
        peak_rss = peak_rss.max(status_kib(pid, "VmRSS:"));
        i += 1;
    }
    let hwm = status_kib(pid, "VmHWM:");
    let cpu = cpu_ticks(pid);
    stop.store(true, Ordering::Relaxed);
    let _ = attack.join();
    drop(serve);

    // Answered: by the engine (not 0, nor a refusal of the connection layer: 408, 429, 503).
    let answered = |s: u16| s != 0 && !matches!(s, 408 | 429 | 503);
    let total = results.len();
    let served = results.iter().filter(|(s, _)| answered(*s)).count();
    let in_time = results.iter().filter(|(s, t)| answered(*s) && *t <= IN_TIME).count();
    let mut times: Vec<Duration> = results.iter().filter(|(s, _)| answered(*s)).map(|(_, t)| *t).collect();
    times.sort();
    let mut statuses: Vec<u16> = results.iter().map(|(s, _)| *s).collect();
    statuses.sort_unstable();
    statuses.dedup();
    let pct = in_time as f64 * 100.0 / total.max(1) as f64;
    println!(
        "flood: {total} legitimate requests, {served} answered, {in_time} within {:?} ({pct:.1} %); p50 {:?} p99 {:?}; statuses seen {statuses:?}",
        IN_TIME,
        percentile(&times, 50),
        percentile(&times, 99),
    );
    println!(
        "flood: serve RSS baseline {baseline} KiB, after warm-up {during_warm_up} KiB, peak sampled {peak_rss} KiB, VmHWM {hwm} KiB; serve CPU {cpu} ticks; attacker connections opened {}",
        opened.load(Ordering::Relaxed)
    );
    assert!(total >= 50, "the legitimate client made too few requests ({total})");
    assert!(pct >= 95.0, "only {pct:.1} % of legitimate requests answered within {IN_TIME:?}");
    assert!(hwm <= RSS_LIMIT_KIB, "serve's peak resident memory {hwm} KiB is over {RSS_LIMIT_KIB} KiB");
}

/// The legitimate client of the later flood: a request every ~100 ms (GET /health, and a
/// POST) for `how_long`; its statuses and times, and the server's peak resident memory.
fn legitimate_for(to: SocketAddr, how_long: Duration) -> Vec<(u16, Duration)> {
    let mut results = Vec::new();
    let started = Instant::now();
    let mut i = 0u32;
    while started.elapsed() < how_long {
        let due = started + Duration::from_millis(100) * i;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        results.push(legitimate(to, i % 2 == 1));
        i += 1;
    }
    results
}

/// Prints the legitimate client's figures under `name`; the share answered in time, in percent.
fn report(name: &str, results: &[(u16, Duration)]) -> f64 {
    let answered = |s: u16| s != 0 && !matches!(s, 408 | 429 | 503);
    let total = results.len();
    let in_time = results.iter().filter(|(s, t)| answered(*s) && *t <= IN_TIME).count();
    let mut times: Vec<Duration> = results.iter().filter(|(s, _)| answered(*s)).map(|(_, t)| *t).collect();
    times.sort();
    let mut statuses: Vec<u16> = results.iter().map(|(s, _)| *s).collect();
    statuses.sort_unstable();
    statuses.dedup();
    let pct = in_time as f64 * 100.0 / total.max(1) as f64;
    println!(
        "{name}: {total} legitimate requests, {in_time} answered within {IN_TIME:?} ({pct:.1} %); p50 {:?} p99 {:?}; statuses seen {statuses:?}",
        percentile(&times, 50),
        percentile(&times, 99),
    );
    pct
}

/// Runs `attack` on a thread of its own with a current-thread runtime until `stop`.
fn attack_thread<F: Future<Output = ()> + 'static>(
    attack: impl FnOnce() -> F + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, attack());
    })
}

/// A connection from `from` to `to`, or `None` (after a pause) when it cannot be made.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> Option<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).is_ok()
        && let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await
    {
        return Some(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    None
}

/// A well-formed token for `address`, signed by a key of no house: nothing checks it before its
/// agent card is fetched.
fn forged_token(address: &str, n: u64, path: &str) -> String {
    use nyx5_proto::auth::{Claims, Target};
    let key = nyx5_proto::crypto::SigningKey::from_seed([7; 32]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    Claims {
        address: nyx5_proto::Address::parse(address).unwrap(),
        ts: nyx5_proto::Timestamp::from_millis(i64::try_from(now).unwrap()),
        nonce: format!("forged-nonce-{n:016}"),
        target: Target::new("GET", path, "", "flood.test", b""),
    }
    .sign(&key)
}

/// H1: a hostile house that accepts and never answers (its domain in the victim's hosts file);
/// from eight addresses, every connection asks for an account with a token of a fresh address
/// there (20 connections of the first address with a 2 MiB body), again soon after it is
/// answered. The engine waits
/// on the hanging house for each; the legitimate client must still be answered.
#[test]
fn requests_waiting_on_a_hanging_house_cannot_hold_the_server_nor_its_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = TempDir::new("flood-hang");
    // The hanging house: accepts, reads, never answers.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hang_port = hang.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in hang.incoming().flatten() {
            held.push(s);
        }
    });
    let hosts = dir.join("hosts.json");
    std::fs::write(&hosts, format!(r#"{{"evil.test": {{"url": "http://127.0.0.1:{hang_port}"}}}}"#)).unwrap();
    let (serve, to) = start_serve(&dir, &["--allow-private-network".as_ref(), "--hosts".as_ref(), hosts.as_os_str()]);
    let pid = serve.0.id();
    let baseline = status_kib(pid, "VmRSS:");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let attack = {
        let (stop, sent) = (stop.clone(), sent.clone());
        attack_thread(move || async move {
            let mut tasks = Vec::new();
            for a in 0..ATTACKERS {
                for c in 0..32u64 {
                    let (stop, sent) = (stop.clone(), sent.clone());
                    let from = Ipv4Addr::new(127, 0, 0, 2 + a);
                    tasks.push(tokio::task::spawn_local(async move {
                        let body = if a == 0 && c < 20 { vec![b'a'; BODY] } else { Vec::new() };
                        let mut n = u64::from(a) * 1_000_000 + c * 10_000;
                        while !stop.load(Ordering::Relaxed) {
                            let Some(mut s) = connect_from(from, to).await else { continue };
                            n += 1;
                            let path = format!("/libro/cuenta/a{n}@evil.test");
                            let token = forged_token(&format!("a{n}@evil.test"), n, &path);
                            let mut req = format!(
                                "GET {path} HTTP/1.1\r\nhost: flood.test\r\nauthorization: {token}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                                body.len()
                            )
                            .into_bytes();
                            req.extend_from_slice(&body);
                            sent.fetch_add(1, Ordering::Relaxed);
                            let exchange = async {
                                if s.write_all(&req).await.is_ok() {
                                    let mut sink = Vec::new();
                                    let _ = s.read_to_end(&mut sink).await;
                                }
                            };
                            let stopped = async {
                                while !stop.load(Ordering::Relaxed) {
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                            };
                            tokio::select! { () = exchange => {}, () = stopped => {} }
                            drop(s);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }));
                }
            }
            for t in tasks {
                let _ = t.await;
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let results = legitimate_for(to, Duration::from_secs(10));
    let hwm = status_kib(pid, "VmHWM:");
    stop.store(true, Ordering::Relaxed);
    let _ = attack.join();
    drop(serve);
    println!(
        "hang: serve RSS baseline {baseline} KiB, VmHWM {hwm} KiB; attacker requests sent {}",
        sent.load(Ordering::Relaxed)
    );
    let pct = report("hang", &results);
    assert!(results.len() >= 20, "the legitimate client made too few requests ({})", results.len());
    assert!(pct >= 95.0, "only {pct:.1} % of legitimate requests answered within {IN_TIME:?}");
    assert!(hwm <= RSS_LIMIT_KIB, "serve's peak resident memory {hwm} KiB is over {RSS_LIMIT_KIB} KiB");
}
