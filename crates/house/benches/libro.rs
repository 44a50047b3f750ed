//! The Libro natively on SQLite, on one core: operations per second for `accept` (spot and
//! escrow), `release`, `charge` under a 3-deep mandate chain and the operator's top-up, in memory
//! and on a file; the signature work each operation cannot avoid, timed alone with the same keys,
//! and the operation's cost as a multiple of it; and the database round trips per operation
//! (`Db::query` and `Db::batch` calls, counted by a wrapper around the SQLite `Db`).
//!
//! `cargo bench -p nyx5-house --features sqlite --bench libro`
//!
//! One house, `a.test`, with every agent local (so no network): the buyer and payer `ana`, the
//! seller `bo`, and `cy`, `dee` below them in the mandate chain `ana → bo → cy → dee`. An
//! operation is timed as the queue hands it to the Libro (`queue.rs`, `deliver_here`): the stored
//! envelope parsed, the operator's card read and verified, the envelope verified, then
//! `House::accept`, which does the operation (read, decide, sign, one batch). Envelopes, quotes
//! and requests are built and signed before the clock starts. A top-up is `POST /libro/topup`
//! through `House::handle`. Each figure is the best of [`ROUNDS`] rounds, a fresh house per round,
//! memory and file interleaved so that a slow moment of the shared VM hits both alike.
//!
//! The signature work an operation cannot avoid: verify the operating envelope (and the quote,
//! for `accept`), sign the entry (when money moves), sign the receipt, and sign one receipt
//! envelope per party. Each primitive is timed alone over the documents the operation produced
//! (its envelope, its receipt, its entry), with the same keys. `NYX5_LIBRO_BENCH_OPS=N` runs one
//! small round and the primitives, silently, for callgrind. Method, figures and how to read them:
//! benches/README.md, "house Libro".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::indexing_slicing, clippy::panic)]

#[path = "../tests/kit/mod.rs"]
mod kit;

use std::cell::Cell;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kit::*;
use nyx5_house::libro::{LIBRO, OP_MEDIA};
use nyx5_house::mailbox::Outcome;
use nyx5_house::ports::{Db, PortError, Row, Stmt};
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::{House, Registration, Request};
use nyx5_proto::crypto::Context;
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, Quote, QuoteDraft};
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Address, Envelope, Object, Value};

/// Operations per kind and round, in memory and on a file (every batch of a file waits for an
/// fsync of the WAL, so fewer).
const OPS_MEMORY: usize = 600;
const OPS_FILE: usize = 150;
const ROUNDS: usize = 3;
/// Iterations of each signature primitive timed alone.
const PRIMITIVE_ITERS: usize = 2_000;

// ---------------------------------------------------------------------------------------------
// A `Db` that counts what the engine asks of it.

#[derive(Default, Clone, Copy, Debug, PartialEq)]
struct Counts {
    queries: u64,
    batches: u64,
    statements: u64,
}

struct Counting {
    inner: SqliteDb,
    counts: Cell<Counts>,
    /// What `House::accept` alone asked (the Libro, without the queue's read of the card).
    libro: Cell<Counts>,
}

impl Counting {
    fn take(&self) -> (Counts, Counts) {
        (self.counts.replace(Counts::default()), self.libro.replace(Counts::default()))
    }
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, o: Counts) -> Counts {
        Counts {
            queries: self.queries - o.queries,
            batches: self.batches - o.batches,
            statements: self.statements - o.statements,
        }
    }
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            queries: self.queries + o.queries,
            batches: self.batches + o.batches,
            statements: self.statements + o.statements,
        }
    }
}

impl Db for Counting {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let mut c = self.counts.get();
        c.queries += 1;
        self.counts.set(c);
        self.inner.query(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        let mut c = self.counts.get();
        c.batches += 1;
        c.statements += stmts.len() as u64;
        self.counts.set(c);
        self.inner.batch(stmts).await
    }
    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let mut c = self.counts.get();
        c.batches += 1;
        c.statements += 1;
        self.counts.set(c);
        self.inner.write_returning(stmt).await
    }
}

type BenchHouse = House<Counting, MemNet>;

/// Deterministic ids (never for keys).
struct BenchRng(Cell<u64>);

impl nyx5_house::Rng for BenchRng {
    fn fill(&self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            let n = self.0.get().wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            self.0.set(n);
            *b = (n >> 33) as u8;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The house and its agents.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    Memory,
    File,
}

struct Setup {
    w: World,
    house: BenchHouse,
    ana: Agent,
    bo: Agent,
    cy: Agent,
    dee: Agent,
    libro: Address,
    file: Option<PathBuf>,
    seq: Cell<u64>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(path) = &self.file {
            for ext in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
            }
        }
    }
}

fn admin() -> (String, String) {
    ("authorization".to_owned(), "Bearer admin-a.test".to_owned())
}

fn request(method: &str, path: &str, body: &Value) -> Request {
    let headers = vec![admin(), ("content-type".to_owned(), "application/json".to_owned())];
    Request::new(method, path, headers, body.canonical())
}

impl Setup {
    fn new(store: Store, tag: &str) -> Setup {
        let w = World::new();
        let mut config = w.config("a.test", Registration::Admin);
        // Operations count per sending site (120 a minute by default) and this clock stands still:
        // the window's row is still written in every batch, it just never fills.
        config.inbound_per_domain_per_minute = 1_000_000;
        let (sqlite, file) = match store {
            Store::Memory => (SqliteDb::memory().unwrap(), None),
            Store::File => {
                let path = std::env::temp_dir().join(format!("nyx5-bench-libro-{}-{tag}.db", std::process::id()));
                for ext in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
                }
                (SqliteDb::open(&path).unwrap(), Some(path))
            }
        };
        let db = Counting { inner: sqlite, counts: Cell::new(Counts::default()), libro: Cell::new(Counts::default()) };
        let house =
            House::new(config, db, MemNet::default(), Box::new(w.clock.clone()), Box::new(BenchRng(Cell::new(7))))
                .unwrap();
        let s = Setup {
            ana: Agent::new("ana@a.test", 10),
            bo: Agent::new("bo@a.test", 20),
            cy: Agent::new("cy@a.test", 30),
            dee: Agent::new("dee@a.test", 40),
            libro: Address::new(LIBRO, "a.test").unwrap(),
            w,
            house,
            file,
            seq: Cell::new(0),
        };
        for a in [&s.ana, &s.bo, &s.cy, &s.dee] {
            let body = Value::Object(obj([
                ("local", a.address.local().into()),
                ("sig", a.sig.public().to_b64().into()),
                ("enc", a.enc.public().to_b64().into()),
            ]));
            let resp = block_on(s.house.handle(request("POST", "/agents", &body)));
            assert_eq!(resp.status, 201, "register {}", a.address);
        }
        s
    }

    fn next(&self, what: &str) -> String {
        let n = self.seq.get() + 1;
        self.seq.set(n);
        format!("{what}-{n}")
    }

    /// The operator tops `who` up by `amount` (POST /libro/topup).
    fn topup_request(&self, who: &Agent, amount: i64) -> Request {
        let body = obj([
            ("address", who.address.as_str().into()),
            ("amount", amount.into()),
            ("id", self.next("topup").into()),
        ]);
        request("POST", "/libro/topup", &Value::Object(body))
    }

    /// A quote from `bo` to `ana`.
    fn quote(&self, kind: ContractKind, price: i64) -> Quote {
        QuoteDraft {
            id: self.next("q"),
            house: "a.test".into(),
            seller: self.bo.address.clone(),
            buyer: self.ana.address.clone(),
            contract: kind,
            price,
            currency: "tok".into(),
            concept: "a benchmark".into(),
            terms: None,
            arbiter: None,
            referrer: None,
            issued: self.w.clock.now(),
            expires: None,
            extra: Object::new(),
        }
        .sign(&self.bo.sig)
        .unwrap()
    }

    /// An operation of `who`: the envelope's canonical bytes, as the queue stores them.
    fn op(&self, who: &Agent, body: Object) -> Vec<u8> {
        let mut d = Draft::new(
            self.next("op"),
            who.address.clone(),
            vec![self.libro.clone()],
            self.w.clock.now(),
            Content::new(OP_MEDIA, Value::Object(body)),
        );
        d.kind = Kind::Task;
        d.build().unwrap().sign(&who.sig).unwrap().canonical()
    }

    fn accept_op(&self, quote: &Quote) -> Vec<u8> {
        self.op(&self.ana, obj([("op", "accept".into()), ("quote", quote.to_value())]))
    }

    /// What the queue does with a stored operation for `libro@` (`deliver_here`): parse, the
    /// sender's card, the envelope's signature, then `accept`, which operates.
    async fn operate(&self, bytes: &[u8]) -> Outcome {
        let h = &self.house;
        let env = Envelope::parse(bytes, h.config.max_bytes).unwrap();
        let card = h.lookup().local_card(env.from().local()).await.unwrap().unwrap();
        let verified = env.verify(&card, h.now()).unwrap();
        let before = h.db.counts.get();
        let mut outcomes = h.mailbox().accept(&verified, &card, std::slice::from_ref(&self.libro)).await.unwrap();
        h.db.libro.set(h.db.libro.get() + (h.db.counts.get() - before));
        outcomes.pop().unwrap().1
    }

    /// One operation, start to end.
    fn run(&self, bytes: &[u8]) {
        let outcome = block_on(self.operate(bytes));
        assert_eq!(outcome, Outcome::Accepted);
    }

    /// [`Setup::run`] named by operation kind `K` for a profiler (`libro::Setup::run_kind::<K>`).
    #[inline(never)]
    fn run_kind<const K: u8>(&self, bytes: &[u8]) {
        black_box(K);
        self.run(bytes);
    }

    fn run_as(&self, op: Op, bytes: &[u8]) {
        match op {
            Op::Topup => unreachable!(),
            Op::Spot => self.run_kind::<1>(bytes),
            Op::Escrow => self.run_kind::<2>(bytes),
            Op::Release => self.run_kind::<3>(bytes),
            Op::Charge => self.run_kind::<4>(bytes),
        }
    }

    /// The mandate chain ana → bo → cy → dee; answers the last link's id.
    fn chain(&self) -> String {
        let mut parent: Option<String> = None;
        for (grantor, grantee) in [(&self.ana, &self.bo), (&self.bo, &self.cy), (&self.cy, &self.dee)] {
            let mut body = obj([
                ("op", "mandate".into()),
                ("grantee", grantee.address.as_str().into()),
                ("cap", 1_000_000_000_000_i64.into()),
            ]);
            if let Some(p) = &parent {
                body.insert("parent".into(), p.as_str().into());
            }
            let bytes = self.op(grantor, body);
            self.run(&bytes);
            parent = Some(Envelope::parse(&bytes, usize::MAX).unwrap().id().to_owned());
        }
        parent.unwrap()
    }

    /// The newest envelope from `libro@` in `who`'s mailbox.
    fn last_receipt(&self, who: &Agent) -> Envelope {
        let rows = block_on(self.house.db.inner.query(nyx5_house::stmt!(
            "SELECT envelope FROM mailbox WHERE local = ? AND sender = ? ORDER BY seq DESC LIMIT 1",
            who.address.local(),
            self.libro.as_str()
        )))
        .unwrap();
        Envelope::parse(rows[0].text("envelope").unwrap().as_bytes(), usize::MAX).unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// One round: every kind of operation, timed and counted.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Topup,
    Spot,
    Escrow,
    Release,
    Charge,
}

const OPS: [Op; 5] = [Op::Topup, Op::Spot, Op::Escrow, Op::Release, Op::Charge];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Topup => "topup (POST /libro/topup)",
            Op::Spot => "accept spot",
            Op::Escrow => "accept escrow",
            Op::Release => "release escrow",
            Op::Charge => "charge, 3-deep mandate chain",
        }
    }
}

#[derive(Clone, Copy, Default, Debug)]
struct Measure {
    per_sec: f64,
    /// Totals over `n` operations: everything, and `House::accept` alone.
    counts: Counts,
    libro: Counts,
    n: usize,
}

impl Measure {
    fn per_op(&self, total: u64) -> f64 {
        total as f64 / self.n as f64
    }
}

/// What a round leaves for the primitives: an envelope, receipt envelope and entry per kind.
struct Samples {
    ops: Vec<(Op, Vec<u8>, Option<Envelope>)>,
    quote: Quote,
}

fn timed(s: &Setup, n: usize, mut f: impl FnMut(usize)) -> Measure {
    s.house.db.take();
    let start = Instant::now();
    for i in 0..n {
        f(i);
    }
    let secs = start.elapsed().as_secs_f64();
    let (counts, libro) = s.house.db.take();
    Measure { per_sec: n as f64 / secs, counts, libro, n }
}

/// One top-up, not inlined (`libro::topup_once` for a profiler).
#[inline(never)]
fn topup_once(s: &Setup, request: Request) {
    let resp = block_on(s.house.handle(request));
    assert_eq!(resp.status, 200);
}

fn round(store: Store, tag: &str, n: usize) -> (Vec<(Op, Measure)>, Samples) {
    let s = Setup::new(store, tag);
    let mut out = Vec::new();
    let mut samples = Vec::new();

    // Top-ups: the requests are built first.
    let requests: Vec<Request> = (0..n).map(|_| s.topup_request(&s.ana, 1_000_000)).collect();
    let mut requests = requests.into_iter();
    out.push((Op::Topup, timed(&s, n, |_| topup_once(&s, requests.next().unwrap()))));

    for (op, kind) in [(Op::Spot, ContractKind::Spot), (Op::Escrow, ContractKind::Escrow)] {
        let quotes: Vec<Quote> = (0..n).map(|_| s.quote(kind, 100)).collect();
        let envs: Vec<Vec<u8>> = quotes.iter().map(|q| s.accept_op(q)).collect();
        out.push((op, timed(&s, n, |i| s.run_as(op, &envs[i]))));
        samples.push((op, envs[n - 1].clone(), Some(s.last_receipt(&s.ana))));
        if op == Op::Escrow {
            // The escrows just accepted are released.
            let releases: Vec<Vec<u8>> = quotes
                .iter()
                .map(|q| s.op(&s.ana, obj([("op", "release".into()), ("contract", q.id.as_str().into())])))
                .collect();
            out.push((Op::Release, timed(&s, n, |i| s.run_as(Op::Release, &releases[i]))));
            samples.push((Op::Release, releases[n - 1].clone(), Some(s.last_receipt(&s.ana))));
        }
    }

    let last = s.chain();
    let charges: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let body = obj([
                ("op", "charge".into()),
                ("mandate", last.as_str().into()),
                ("amount", 10_i64.into()),
                ("concept", "gpu".into()),
            ]);
            s.op(&s.dee, body)
        })
        .collect();
    out.push((Op::Charge, timed(&s, n, |i| s.run_as(Op::Charge, &charges[i]))));
    samples.push((Op::Charge, charges[n - 1].clone(), Some(s.last_receipt(&s.dee))));
    samples.insert(0, (Op::Topup, Vec::new(), None));
    let quote = s.quote(ContractKind::Escrow, 100);
    (out, Samples { ops: samples, quote })
}

// ---------------------------------------------------------------------------------------------
// The signature primitives, alone.

/// Iterations of each primitive (fewer under a profiler).
static ITERS: AtomicUsize = AtomicUsize::new(PRIMITIVE_ITERS);

/// One call of a primitive, not inlined and named by kind `K` and part `P`, so that callgrind
/// counts each apart (`libro::once::<K, P, _>`; see benches/README.md).
#[inline(never)]
fn once<const K: u8, const P: u8>(f: &mut impl FnMut()) {
    // Distinct code per (K, P), so that the linker folds no two of them into one symbol.
    black_box((K, P));
    f();
}

fn per_op_us<const K: u8, const P: u8>(mut f: impl FnMut()) -> f64 {
    let iters = ITERS.load(Ordering::Relaxed);
    for _ in 0..iters / 10 {
        once::<K, P>(&mut f);
    }
    let start = Instant::now();
    for _ in 0..iters {
        once::<K, P>(&mut f);
    }
    start.elapsed().as_secs_f64() * 1e6 / iters as f64
}

/// Parts of the signature work (`P` of [`once`]).
const ENV: u8 = 1;
const QUOTE: u8 = 2;
const ENTRY: u8 = 3;
const RECEIPT: u8 = 4;
const ENVELOPE: u8 = 5;

/// The unavoidable signature work of each kind, in µs, and what it is made of.
struct Work {
    us: f64,
    parts: String,
}

/// Re-signs a document the house signed, as the house signs it (canonical text, Ed25519).
fn resign<const K: u8, const P: u8>(doc: &Object, context: Context, key: &nyx5_proto::crypto::SigningKey) -> f64 {
    let mut d = doc.clone();
    d.remove("signature");
    per_op_us::<K, P>(|| {
        let mut x = d.clone();
        sign_object(&mut x, "signature", context, key);
        black_box(x);
    })
}

/// The primitives of operation kind `K`, over what its last operation produced.
fn kind_work<const K: u8>(s: &Setup, op: Op, bytes: &[u8], receipt_env: &Envelope, quote: &Quote) -> Work {
    let key = &s.house.config.key;
    let now = s.house.now();
    let env = Envelope::parse(bytes, usize::MAX).unwrap();
    let card = block_on(s.house.lookup().local_card(env.from().local())).unwrap().unwrap();
    let verify_env = per_op_us::<K, ENV>(|| {
        black_box(env.clone().verify(&card, now).unwrap());
    });
    let verify_quote = if matches!(op, Op::Spot | Op::Escrow) {
        let bo_card = block_on(s.house.lookup().local_card("bo")).unwrap().unwrap();
        per_op_us::<K, QUOTE>(|| {
            black_box(quote.clone().verify(&bo_card, now).unwrap());
        })
    } else {
        0.0
    };
    let receipt = receipt_env.content().unwrap().body.as_object().unwrap().clone();
    let sign_receipt = resign::<K, RECEIPT>(&receipt, Context::Receipt, key);
    let entry = receipt.get("asiento").and_then(Value::as_object).cloned();
    let sign_entry = entry.as_ref().map_or(0.0, |e| resign::<K, ENTRY>(e, Context::Entry, key));
    let parties = match op {
        Op::Charge => 4,
        _ => 2,
    };
    let sign_env = per_op_us::<K, ENVELOPE>(|| {
        let mut d = Draft::new(
            receipt_env.id().to_owned(),
            receipt_env.from().clone(),
            receipt_env.to().to_vec(),
            now,
            Content::new(nyx5_proto::receipt::MEDIA, Value::Object(receipt.clone())),
        );
        d.kind = Kind::Receipt;
        d.in_reply_to = Some(env.id().to_owned());
        black_box(d.build().unwrap().sign(key).unwrap());
    });
    let us = verify_env + verify_quote + sign_entry + sign_receipt + parties as f64 * sign_env;
    let mut parts = format!("env {verify_env:.0}");
    if verify_quote > 0.0 {
        parts += &format!(" + quote {verify_quote:.0}");
    }
    parts += &format!(" + entry {sign_entry:.0} + receipt {sign_receipt:.0} + {parties}×envelope {sign_env:.0}");
    Work { us, parts }
}

fn signature_work(samples: &Samples) -> Vec<(Op, Work)> {
    let s = Setup::new(Store::Memory, "primitives");
    let mut out = Vec::new();
    for (op, bytes, receipt_env) in &samples.ops {
        let Some(r) = receipt_env else {
            // A top-up signs its entry, nothing else: time it on an entry of the same shape.
            let resp = block_on(s.house.handle(s.topup_request(&s.ana, 5)));
            let v = resp.value().unwrap();
            let entry = v.as_object().unwrap()["asiento"].as_object().unwrap().clone();
            let us = resign::<0, ENTRY>(&entry, Context::Entry, &s.house.config.key);
            out.push((*op, Work { us, parts: format!("entry {us:.0}") }));
            continue;
        };
        let q = &samples.quote;
        let w = match op {
            Op::Topup => unreachable!(),
            Op::Spot => kind_work::<1>(&s, *op, bytes, r, q),
            Op::Escrow => kind_work::<2>(&s, *op, bytes, r, q),
            Op::Release => kind_work::<3>(&s, *op, bytes, r, q),
            Op::Charge => kind_work::<4>(&s, *op, bytes, r, q),
        };
        out.push((*op, w));
    }
    out
}

/// Work the engine does that no rule asks for, timed alone: reading and verifying a local card
/// (the operator's, and for `accept` the seller's), and the Ed25519 signature that derives each
/// receipt envelope's id.
fn avoidable() -> (f64, f64) {
    let s = Setup::new(Store::Memory, "avoidable");
    let card = per_op_us::<9, 1>(|| {
        black_box(block_on(s.house.lookup().local_card("ana")).unwrap().unwrap());
    });
    let key = &s.house.config.key;
    let derive = per_op_us::<9, 2>(|| {
        black_box(key.sign(Context::NoticeId, b"nyx5 receipt:op-123456789:ana@a.test"));
    });
    (card, derive)
}

fn main() {
    if let Some(n) = std::env::var("NYX5_LIBRO_BENCH_OPS").ok().and_then(|n| n.parse::<usize>().ok()) {
        // For a profiler: one round in memory of `n` operations of each kind, then each
        // primitive `n` times (plus a tenth to warm up), nothing printed.
        let (m, samples) = round(Store::Memory, "profile", n);
        assert_eq!(m.len(), OPS.len());
        ITERS.store(n, Ordering::Relaxed);
        signature_work(&samples);
        avoidable();
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        // Under `cargo test --all-targets`: a few operations of each kind, checked.
        let (m, samples) = round(Store::Memory, "smoke", 3);
        assert_eq!(m.len(), OPS.len());
        signature_work(&Samples { ops: samples.ops.into_iter().take(2).collect(), quote: samples.quote });
        return;
    }
    let mut best: Vec<(Store, Op, Measure)> = Vec::new();
    // The primitives too are the best of the rounds, timed between the operations.
    let mut work: Vec<(Op, Work)> = Vec::new();
    let (mut card_us, mut derive_us) = (f64::MAX, f64::MAX);
    for r in 0..ROUNDS {
        for (store, n) in [(Store::Memory, OPS_MEMORY), (Store::File, OPS_FILE)] {
            let (measures, samples) = round(store, &format!("{r}"), n);
            for (op, m) in measures {
                match best.iter_mut().find(|(s, o, _)| *s == store && *o == op) {
                    Some((_, _, b)) if b.per_sec >= m.per_sec => {}
                    Some((_, _, b)) => *b = m,
                    None => best.push((store, op, m)),
                }
            }
            if store == Store::Memory {
                for (op, w) in signature_work(&samples) {
                    match work.iter_mut().find(|(o, _)| *o == op) {
                        Some((_, b)) if b.us <= w.us => {}
                        Some((_, b)) => *b = w,
                        None => work.push((op, w)),
                    }
                }
                let (c, d) = avoidable();
                card_us = card_us.min(c);
                derive_us = derive_us.min(d);
            }
        }
    }
    let rate = |store: Store, op: Op| best.iter().find(|(s, o, _)| *s == store && *o == op).unwrap().2;

    println!(
        "the Libro on SQLite, one core, best of {ROUNDS} rounds ({OPS_MEMORY} operations of each kind in memory, \
         {OPS_FILE} on a file; signature primitives {PRIMITIVE_ITERS} times each)"
    );
    println!(
        "{:<30} {:>9} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7}",
        "operation", "mem op/s", "µs/op", "file op/s", "µs/op", "sig µs", "op/sig", "sig %"
    );
    for op in OPS {
        let m = rate(Store::Memory, op);
        let f = rate(Store::File, op);
        let w = &work.iter().find(|(o, _)| *o == op).unwrap().1;
        let us = 1e6 / m.per_sec;
        println!(
            "{:<30} {:>9.0} {:>8.1} {:>9.0} {:>8.1} {:>8.1} {:>7.2} {:>6.0}%",
            op.name(),
            m.per_sec,
            us,
            f.per_sec,
            1e6 / f.per_sec,
            w.us,
            us / w.us,
            100.0 * w.us / us
        );
    }
    println!("\nunavoidable signature work per operation, µs (each primitive timed alone, same keys):");
    for (op, w) in &work {
        println!("  {:<30} {}", op.name(), w.parts);
    }
    println!(
        "\nwork no rule asks for, timed alone: a local card read and verified {card_us:.1} µs (once per operation, \
         twice for accept: the seller's); a derived receipt-envelope id (Ed25519 sign) {derive_us:.1} µs per party"
    );
    println!(
        "\ndatabase round trips per operation: Db::query, Db::batch and statements in the batches, in all \
         (the queue's read of the operator's card included) and in House::accept alone"
    );
    for op in OPS {
        let m = rate(Store::Memory, op);
        let (c, l) = (m.counts, m.libro);
        let libro = if op == Op::Topup {
            String::new()
        } else {
            format!("; accept: {:.2} q, {:.2} b", m.per_op(l.queries), m.per_op(l.batches))
        };
        println!(
            "  {:<30} {:.2} queries, {:.2} batches, {:.1} statements{libro}",
            op.name(),
            m.per_op(c.queries),
            m.per_op(c.batches),
            m.per_op(c.statements)
        );
    }
}
