//! Accepting verified inbound envelopes into SQLite, on one core: envelopes per second through
//! `POST /inbound` (parse, relay signature, sender card from the 5-minute cache, envelope
//! signature, policy, one batch), against the raw Ed25519 verify rate on the same bytes.
//!
//! `cargo bench -p nyx5-house --features sqlite --bench inbound`
//!
//! Requests are built before the clock starts and handed to `House::handle` by value, so the
//! timed loop is the engine alone. Each row is the best of [`ROUNDS`] rounds (a fresh pair of
//! houses per round), interleaved so that a slow moment of the shared VM hits every row alike.
//!
//! On the 2-vCPU VM (benches/README.md, "house inbound", for the table, the profile and the
//! history): raw verify ~40–45 µs (~36 µs with the key decoded once); with relay ~93–105 µs per
//! envelope (ratio ~0.44, from ~0.30); without ~56–65 µs (ratio ~0.72, from ~0.45).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::indexing_slicing, clippy::panic)]

#[path = "../tests/kit/mod.rs"]
mod kit;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use kit::*;
use nyx5_house::{Db, Registration, Request};
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::sign::Signature;
use nyx5_proto::{Envelope, json::canonical_without};

const ENVELOPES: usize = 3_000;

/// The system allocator, counting allocations and the bytes they ask for (reallocations count
/// as one each), so the bench can say what one envelope costs the heap.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to `System` unchanged; the counters are only added to.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(new_size as u64, Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;
const ROUNDS: usize = 3;

fn envelopes(from: &Agent, to: &Agent, n: usize, tag: &str) -> Vec<Envelope> {
    (0..n)
        .map(|i| from.draft(&format!("{tag}-{i}"), &[&to.address], &"x".repeat(900)).sign(&from.sig).unwrap())
        .collect()
}

/// Two houses, `a.test` sending to `b.test`, and the requests `a` would make to `b`.
struct Setup {
    _world: World,
    b: Rc<TestHouse>,
    requests: Vec<Request>,
    size: usize,
}

fn setup(with_relay: bool, round: usize, n: usize) -> Setup {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut cb = w.config("b.test", Registration::Admin);
    cb.require_relay = with_relay;
    cb.inbound_per_domain_per_minute = 1_000_000;
    let b = w.start(cb);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    ana.register_admin(&a);
    bo.register_admin(&b);
    let tag = format!("{}{round}", if with_relay { "r" } else { "n" });
    let envs = envelopes(&ana, &bo, n + 1, &tag);
    let requests = envs
        .iter()
        .map(|e| {
            let mut h = vec![("content-type".to_owned(), "application/json".to_owned())];
            if with_relay {
                let relay = RelayHeader::sign("a.test", e, "b.test", &a.config.key).to_header();
                h.push(("x-nyx5-relay".to_owned(), relay));
            }
            Request::new("POST", "/inbound", h, e.canonical())
        })
        .collect();
    Setup { _world: w, b, requests, size: envs[0].canonical().len() }
}

/// Envelopes per second through POST /inbound of `b`, with or without relay headers.
fn inbound_rate(with_relay: bool, round: usize, n: usize) -> (f64, usize) {
    let Setup { _world, b, requests, size } = setup(with_relay, round, n);
    let mut requests = requests.into_iter();
    // The first one warms the card cache (a real house keeps cards for five minutes).
    assert_eq!(block_on(b.handle(requests.next().unwrap())).status, 202);
    let start = Instant::now();
    for r in requests {
        let resp = block_on(b.handle(r));
        assert_eq!(resp.status, 202);
    }
    let secs = start.elapsed().as_secs_f64();
    (n as f64 / secs, size)
}

/// The yardstick of the engine's share (issue 12): envelope rows per second written to `bo`'s
/// mailbox through the SQLite port, one INSERT per transaction, the statement the engine writes
/// an accepted envelope's row with (`store::mailbox::insert`), text of the
/// size the other rows send. Nothing else: no parse, no verify, no facts read, no usage or rate
/// window.
fn insert_rate(round: usize, n: usize) -> f64 {
    let Setup { _world, b, size, .. } = setup(false, round, 0);
    let text = "x".repeat(size);
    let quota = b.config.quota();
    let ids: Vec<String> = (0..n).map(|i| format!("insert-{round}-{i}")).collect();
    let one = |id: &str| {
        let insert = nyx5_house::store::mailbox::insert("bo", id, "ana@a.test", &text, 1, quota);
        let changed = block_on(b.db.sqlite.batch(vec![insert])).expect("a new id in bo's mailbox inserts");
        assert_eq!(changed, [1]);
    };
    one("insert-warm");
    let start = Instant::now();
    for id in &ids {
        one(id);
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Raw strict Ed25519 verifications per second over the bytes an envelope signature covers:
/// `SigPublic::verify` (the key decoded each time), and with the key decoded once, as a house
/// does for the cards it keeps.
fn raw_verify_rates() -> (f64, f64) {
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    let env = envelopes(&ana, &bo, 1, "v").remove(0);
    let bytes = nyx5_proto::crypto::Context::Envelope.frame(&canonical_without(env.object(), "signature"));
    let sig = Signature::read(env.object(), "signature").unwrap();
    let start = Instant::now();
    for _ in 0..ENVELOPES {
        assert!(black_box(sig.kid.verify_raw(black_box(&bytes), &sig.value)));
    }
    let raw = ENVELOPES as f64 / start.elapsed().as_secs_f64();
    let key = sig.kid.prepare().unwrap();
    let start = Instant::now();
    for _ in 0..ENVELOPES {
        assert!(black_box(&key).verify_raw(black_box(&bytes), &sig.value));
    }
    (raw, ENVELOPES as f64 / start.elapsed().as_secs_f64())
}

/// Rows SQLite changes per accepted envelope (`total_changes`, triggers included, index entries
/// not), over `n` envelopes after the warm-up: the native cross-check of D1's `rows_written`.
fn rows_changed_per_envelope(n: usize) -> f64 {
    let Setup { _world, b, requests, .. } = setup(false, 9, n);
    let mut requests = requests.into_iter();
    assert_eq!(block_on(b.handle(requests.next().unwrap())).status, 202);
    let before = b.db.sqlite.total_changes().unwrap();
    for r in requests {
        assert_eq!(block_on(b.handle(r)).status, 202);
    }
    (b.db.sqlite.total_changes().unwrap() - before) as f64 / n as f64
}

/// Heap allocations and bytes asked for per accepted envelope, over `n` after the warm-up (the
/// engine's share beside the signatures is mostly these: benches/README.md, "the engine's share").
fn allocations_per_envelope(with_relay: bool, n: usize) -> (f64, f64) {
    let Setup { _world, b, requests, .. } = setup(with_relay, 8, n);
    let mut requests = requests.into_iter();
    assert_eq!(block_on(b.handle(requests.next().unwrap())).status, 202);
    let (count, bytes) = (ALLOCATIONS.load(Relaxed), ALLOCATED.load(Relaxed));
    for r in requests {
        assert_eq!(block_on(b.handle(r)).status, 202);
    }
    let per = |now: u64, then: u64| (now - then) as f64 / n as f64;
    (per(ALLOCATIONS.load(Relaxed), count), per(ALLOCATED.load(Relaxed), bytes))
}

fn print_allocations(n: usize) {
    for (with_relay, what) in [(true, "with relay header"), (false, "relay not required")] {
        let (count, bytes) = allocations_per_envelope(with_relay, n);
        println!("heap per accepted envelope, {what}: {count:.0} allocations, {bytes:.0} bytes");
    }
}

/// The steady-state loop alone, for a profiler: `valgrind --tool=callgrind
/// --toggle-collect='*steady_state*' target/release/deps/inbound-… --profile N` counts only
/// the engine handling `N` envelopes (no relay header) after the warm-up.
#[inline(never)]
fn steady_state(b: &TestHouse, requests: impl Iterator<Item = Request>) {
    for r in requests {
        assert_eq!(block_on(b.handle(r)).status, 202);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(n) = args.iter().position(|a| a == "--profile").and_then(|i| args.get(i + 1)) {
        let n = n.parse().expect("--profile takes a number of envelopes");
        let Setup { _world, b, requests, .. } = setup(false, 7, n);
        let mut requests = requests.into_iter();
        let warm = requests.next().expect("setup makes one envelope more than asked, to warm up");
        assert_eq!(block_on(b.handle(warm)).status, 202);
        steady_state(&b, requests);
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        // Under `cargo test --all-targets`: a few envelopes each way, checked, as a smoke test.
        inbound_rate(true, 0, 3);
        inbound_rate(false, 0, 3);
        insert_rate(0, 3);
        println!("rows changed per accepted envelope (SQLite total_changes): {}", rows_changed_per_envelope(10));
        print_allocations(10);
        return;
    }
    let (mut raw, mut prepared, mut relayed, mut direct, mut insert, mut size) = (0f64, 0f64, 0f64, 0f64, 0f64, 0);
    for round in 0..ROUNDS {
        let (r, p) = raw_verify_rates();
        raw = raw.max(r);
        prepared = prepared.max(p);
        let (r, s) = inbound_rate(true, round, ENVELOPES);
        relayed = relayed.max(r);
        size = s;
        direct = direct.max(inbound_rate(false, round, ENVELOPES).0);
        insert = insert.max(insert_rate(round, ENVELOPES));
    }
    println!("inbound into SQLite, {ENVELOPES} envelopes of {size} bytes, one core, best of {ROUNDS} rounds");
    println!("{:<44} {:>10} {:>9}", "path", "env/s", "µs/env");
    println!("{:<44} {:>10.0} {:>9.1}", "raw Ed25519 verify (strict)", raw, 1e6 / raw);
    println!("{:<44} {:>10.0} {:>9.1}", "raw Ed25519 verify, key decoded once", prepared, 1e6 / prepared);
    println!("{:<44} {:>10.0} {:>9.1}", "POST /inbound with relay header (2 sigs)", relayed, 1e6 / relayed);
    println!("{:<44} {:>10.0} {:>9.1}", "POST /inbound, relay not required (1 sig)", direct, 1e6 / direct);
    println!("{:<44} {:>10.0} {:>9.1}", "one INSERT of the envelope's row", insert, 1e6 / insert);
    println!("ratio to raw verify: with relay {:.2}, without {:.2}", relayed / raw, direct / raw);
    // The route less the verifies it must make (with the key decoded once, as a house keeps it).
    let share = 1e6 / direct - 1e6 / prepared;
    println!("engine's share beside its verify: {share:.1} µs, {:.1} INSERTs", share * insert / 1e6);
    println!("rows changed per accepted envelope (SQLite total_changes): {}", rows_changed_per_envelope(100));
    print_allocations(100);
}
