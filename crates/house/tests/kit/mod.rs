//! The multi-house test kit: houses on real SQLite (the shared migrations) in one process, an
//! in-memory network that routes by host and can fail on purpose, a clock the test controls,
//! and agents that sign, seal and authenticate for real.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use nyx5_house::http::{Request, Response};
use nyx5_house::ports::{Clock, Db, Net, OutRequest, OutResponse, PortError, Reads, Rng, Row, Stmt};
use nyx5_house::queue::TickReport;
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::{Config, House, Registration};
use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::crypto::{EncSecret, SigningKey};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value, seal};

/// 2026-09-04T19:00:00Z: where every test's clock starts.
pub const START: i64 = 1_788_548_400_000;
pub const SECOND: i64 = 1_000;
pub const MINUTE: i64 = 60 * SECOND;
pub const HOUR: i64 = 60 * MINUTE;
pub const DAY: i64 = 24 * HOUR;

struct NoopWake;
impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Runs a future to completion. The engine's futures never wait on anything outside the
/// process here (SQLite and the in-memory network answer at once), so polling suffices.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// Runs two futures to completion, polling them in turn, so one can run while the other waits.
pub fn block_on_both<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    while ra.is_none() || rb.is_none() {
        if ra.is_none()
            && let Poll::Ready(v) = a.as_mut().poll(&mut cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let Poll::Ready(v) = b.as_mut().poll(&mut cx)
        {
            rb = Some(v);
        }
    }
    (ra.unwrap(), rb.unwrap())
}

/// A future that is pending once, then ready: a request that waits on the network.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// The clock every house of a test shares.
#[derive(Clone)]
pub struct TestClock(Rc<Cell<i64>>);

impl TestClock {
    pub fn advance(&self, ms: i64) {
        self.0.set(self.0.get() + ms);
    }
    pub fn now(&self) -> Timestamp {
        Timestamp(self.0.get())
    }
    /// Moves to the last millisecond of the current minute (still the same rate window).
    pub fn to_end_of_minute(&self) {
        self.advance(MINUTE - 1 - self.0.get().rem_euclid(MINUTE));
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.get())
    }

    /// The test's time passes only when a wait ends: pending once (whatever else is polled
    /// runs), then the clock moves `ms` on and the wait is over.
    fn sleep(&self, ms: u64) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + '_>>> {
        let (clock, mut first) = (self.0.clone(), true);
        Some(Box::pin(std::future::poll_fn(move |cx| {
            if std::mem::take(&mut first) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            clock.set(clock.get() + i64::try_from(ms).unwrap_or(i64::MAX));
            Poll::Ready(())
        })))
    }
}

/// Deterministic randomness for tests (never for real keys).
pub struct TestRng(Cell<u64>);

impl Rng for TestRng {
    fn fill(&self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            let n = self.0.get().wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            self.0.set(n);
            *b = (n >> 33) as u8;
        }
    }
}

pub type TestHouse = House<KitDb, MemNet>;

/// A hook run once, just before the next batch (to change the database under a request).
pub type BatchHook = Box<dyn FnOnce(&SqliteDb)>;

/// The houses' database: SQLite, which can be told to make every query and batch wait once
/// (so that [`block_on_both`] interleaves two requests between their reads and their writes), to
/// run a hook just before the next batch, and to fail one chosen read.
pub struct KitDb {
    pub sqlite: SqliteDb,
    stall: Cell<bool>,
    before_batch: RefCell<Option<BatchHook>>,
    /// The SQL text a read must be, and how many such reads to let through before failing one.
    fail_read: RefCell<Option<(&'static str, u32)>>,
    /// Queries and batches run so far: each is one round trip to D1 on the Worker.
    calls: Cell<u64>,
    /// Calls in flight now, and the waits for the database so far: a call that starts while
    /// another is in flight shares its wait (`join::both`), so it starts no new one.
    in_flight: Rc<Cell<u32>>,
    waits: Cell<u64>,
    /// A read replica that lags behind (see [`KitDb::lag`]), when the test asked for one.
    replica: RefCell<Option<Replica>>,
    /// Whether the tick's step of the mailbox moves uses up the invocation's queries (D1's 50 on
    /// the Free plan): every later call fails until [`KitDb::refill`].
    moves_exhaust: Cell<bool>,
    exhausted: Cell<bool>,
    /// Batches committed: the primary's bookmark is this count.
    written: Cell<u64>,
}

/// A call of [`KitDb`]'s in flight, until dropped.
struct InFlight(Rc<Cell<u32>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// A read replica as D1 keeps one: a copy of the primary that applies its writes only when a
/// read's bookmark asks for them (D1's replica holds such a read until it has caught up).
struct Replica {
    db: Rc<SqliteDb>,
    path: std::path::PathBuf,
    /// The primary's batches it has not applied yet, oldest first, each with the count it makes.
    /// Writes not applied yet: a batch, or (`true`) one write with `RETURNING`.
    pending: std::collections::VecDeque<(u64, Vec<Stmt>, bool)>,
    /// The count of batches its state reflects.
    applied: u64,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A bookmark of the kit's replicated database: the count of batches, sortable as text.
fn kit_bookmark(count: u64) -> String {
    format!("{count:020}")
}

impl KitDb {
    pub fn new(sqlite: SqliteDb) -> KitDb {
        KitDb {
            sqlite,
            stall: Cell::new(false),
            before_batch: RefCell::new(None),
            fail_read: RefCell::new(None),
            calls: Cell::new(0),
            in_flight: Rc::default(),
            waits: Cell::new(0),
            replica: RefCell::new(None),
            written: Cell::new(0),
            moves_exhaust: Cell::new(false),
            exhausted: Cell::new(false),
        }
    }
    /// From now on the tick's step of the mailbox moves uses up the invocation's queries.
    pub fn moves_exhaust_the_budget(&self, on: bool) {
        self.moves_exhaust.set(on);
    }
    /// A new invocation: its queries again.
    pub fn refill(&self) {
        self.exhausted.set(false);
    }
    fn exhausted(&self) -> Result<(), PortError> {
        if self.exhausted.get() {
            return Err(PortError::Failed("Too many API requests by single worker invocation".into()));
        }
        Ok(())
    }
    /// Queries and batches run so far (each a round trip to the database on the Worker).
    pub fn calls(&self) -> u64 {
        self.calls.get()
    }

    /// The waits for the database so far: round trips in sequence, two in flight together
    /// counted once. Only with [`KitDb::stall`] on does a call wait for the next to start.
    pub fn waits(&self) -> u64 {
        self.waits.get()
    }

    /// Counts a call in: a new wait if none is in flight. In flight until the guard drops.
    fn call(&self) -> InFlight {
        self.calls.set(self.calls.get() + 1);
        if self.in_flight.get() == 0 {
            self.waits.set(self.waits.get() + 1);
        }
        self.in_flight.set(self.in_flight.get() + 1);
        InFlight(self.in_flight.clone())
    }

    /// From now on, reads that may be stale come from a replica that starts as a copy of the
    /// primary and applies its later writes only when a read's bookmark asks for them.
    pub fn lag(&self) {
        static COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("nyx5-kit-replica-{}-{n}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let copy = nyx5_house::ports::Stmt::new("VACUUM INTO ?", vec![path.to_string_lossy().into_owned().into()]);
        block_on(self.sqlite.query(copy)).unwrap();
        let db = Rc::new(SqliteDb::open(&path).unwrap());
        let applied = self.written.get();
        *self.replica.borrow_mut() = Some(Replica { db, path, pending: Default::default(), applied });
    }
    /// The read of exactly `sql` after `skip` others of it fails, as an unavailable database does.
    pub fn fail_read(&self, sql: &'static str, skip: u32) {
        *self.fail_read.borrow_mut() = Some((sql, skip));
    }
    /// Whether a read of `sql` is the one to fail (counting it down otherwise).
    fn failing(&self, sql: &str) -> bool {
        let mut armed = self.fail_read.borrow_mut();
        match armed.as_mut() {
            Some((chosen, 0)) if *chosen == sql => {
                *armed = None;
                true
            }
            Some((chosen, skip)) if *chosen == sql => {
                *skip -= 1;
                false
            }
            _ => false,
        }
    }
    /// From now on, every query and batch waits once before it runs (or no longer does).
    pub fn stall(&self, on: bool) {
        self.stall.set(on);
    }
    /// Runs `hook` on the database just before the next batch.
    pub fn before_next_batch(&self, hook: impl FnOnce(&SqliteDb) + 'static) {
        *self.before_batch.borrow_mut() = Some(Box::new(hook));
    }
}

impl Db for KitDb {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let _call = self.call();
        self.exhausted()?;
        if self.stall.get() {
            YieldOnce(false).await;
        }
        if self.failing(stmt.sql) {
            return Err(PortError::Failed("the test failed this read".into()));
        }
        self.sqlite.query(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        let _call = self.call();
        self.exhausted()?;
        if self.stall.get() {
            YieldOnce(false).await;
        }
        let hook = self.before_batch.borrow_mut().take();
        if let Some(hook) = hook {
            hook(&self.sqlite);
        }
        let replicated = self.replica.borrow().is_some().then(|| stmts.clone());
        let changes = self.sqlite.batch(stmts).await?;
        self.written.set(self.written.get() + 1);
        if let (Some(stmts), Some(r)) = (replicated, self.replica.borrow_mut().as_mut()) {
            r.pending.push_back((self.written.get(), stmts, false));
        }
        Ok(changes)
    }

    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let _call = self.call();
        self.exhausted()?;
        if self.stall.get() {
            YieldOnce(false).await;
        }
        let replicated = self.replica.borrow().is_some().then(|| stmt.clone());
        let rows = self.sqlite.write_returning(stmt).await?;
        self.written.set(self.written.get() + 1);
        if let (Some(stmt), Some(r)) = (replicated, self.replica.borrow_mut().as_mut()) {
            r.pending.push_back((self.written.get(), vec![stmt], true));
        }
        Ok(rows)
    }

    async fn advance_moves(&self) -> Result<bool, PortError> {
        if self.moves_exhaust.get() {
            self.exhausted.set(true);
            return Err(PortError::Failed("Too many API requests by single worker invocation".into()));
        }
        self.sqlite.advance_moves().await
    }

    async fn query_stale(&self, reads: &Reads, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        let Some(db) = self.replica.borrow().as_ref().map(|r| r.db.clone()) else {
            return self.query(stmt).await;
        };
        let _call = self.call();
        // Catch up as far as the bookmark asks (a bookmark this database never gave asks nothing).
        let want = reads.bookmark().and_then(|b| b.parse::<u64>().ok()).unwrap_or(0);
        loop {
            let next = {
                let mut replica = self.replica.borrow_mut();
                let r = replica.as_mut().unwrap();
                if r.applied >= want {
                    break;
                }
                r.pending.pop_front()
            };
            let Some((count, mut stmts, returning)) = next else { break };
            match stmts.pop() {
                Some(stmt) if returning => drop(db.write_returning(stmt).await?),
                Some(last) => {
                    stmts.push(last);
                    db.batch(stmts).await?;
                }
                None => {}
            }
            self.replica.borrow_mut().as_mut().unwrap().applied = count;
        }
        let rows = db.query(stmt).await?;
        let applied = self.replica.borrow().as_ref().unwrap().applied;
        reads.set(kit_bookmark(applied.max(want)));
        Ok(rows)
    }

    fn bookmark(&self, reads: &Reads) -> Option<String> {
        if self.replica.borrow().is_none() {
            return reads.bookmark();
        }
        let seen = reads.bookmark().and_then(|b| b.parse::<u64>().ok()).unwrap_or(0);
        Some(kit_bookmark(seen.max(self.written.get())))
    }
}

/// Faults the network injects for one host.
#[derive(Default)]
struct Faults {
    down: bool,
    /// Fail this many requests before they reach the house.
    drop: u32,
    /// Deliver this many requests but lose the answer (a timeout, as the sender sees it).
    lose_answer: u32,
    /// Deliver this many requests twice.
    duplicate: u32,
    /// Make this many requests wait once (yield to the executor) before they are routed.
    stall: u32,
}

#[derive(Default)]
struct Network {
    houses: HashMap<String, Rc<TestHouse>>,
    faults: HashMap<String, Faults>,
    /// Every request sent: (url, status or None for a transport failure).
    log: Vec<(String, Option<u16>)>,
    /// Hosts answered by a closure instead of a house (DNS-over-HTTPS, webhooks).
    fakes: HashMap<String, Fake>,
}

/// A fake server: answers each request sent to its host.
pub type Fake = Rc<dyn Fn(&OutRequest) -> OutResponse>;

/// The in-memory network: routes `http://<host>/…` to the house serving that host.
#[derive(Clone, Default)]
pub struct MemNet(Rc<RefCell<Network>>);

impl Net for MemNet {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        let rest = request.url.split_once("://").map_or(request.url.as_str(), |(_, r)| r);
        let (host, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
        let fake = self.0.borrow().fakes.get(host).cloned();
        if let Some(fake) = fake {
            let resp = fake(&request);
            self.0.borrow_mut().log.push((request.url.clone(), Some(resp.status)));
            return Ok(resp);
        }
        let (house, times, lose, stall) = {
            let mut net = self.0.borrow_mut();
            let f = net.faults.entry(host.to_owned()).or_default();
            let verdict = if f.down {
                Err("host down")
            } else if f.drop > 0 {
                f.drop -= 1;
                Err("connection dropped")
            } else {
                let times = if f.duplicate > 0 {
                    f.duplicate -= 1;
                    2
                } else {
                    1
                };
                let lose = if f.lose_answer > 0 {
                    f.lose_answer -= 1;
                    true
                } else {
                    false
                };
                Ok((times, lose))
            };
            let stall = match &verdict {
                Ok(_) if f.stall > 0 => {
                    f.stall -= 1;
                    true
                }
                _ => false,
            };
            let house = net.houses.get(host).cloned();
            match (verdict, house) {
                (Ok((times, lose)), Some(h)) if stall => (h, times, lose, true),
                (Ok((times, lose)), Some(h)) => (h, times, lose, false),
                // Neither ever reached the host: the transport can tell.
                (Err(why), _) => {
                    net.log.push((request.url.clone(), None));
                    return Err(PortError::Unreached(why.into()));
                }
                (_, None) => {
                    net.log.push((request.url.clone(), None));
                    return Err(PortError::Unreached(format!("no route to {host}")));
                }
            }
        };
        if stall {
            YieldOnce(false).await;
        }
        let mut last = None;
        for _ in 0..times {
            let req = Request::new(&request.method, &path, request.headers.clone(), request.body.clone());
            last = Some(Box::pin(house.handle(req)).await);
            // As the adapters do once the answer is out.
            Box::pin(house.mailbox().send_pushes()).await;
        }
        let resp = last.expect("at least one delivery");
        self.0.borrow_mut().log.push((request.url.clone(), Some(resp.status)));
        if lose {
            return Err(PortError::Failed("answer lost".into()));
        }
        Ok(OutResponse { status: resp.status, body: resp.body })
    }
}

/// A test world: a clock, a network, and houses on it.
pub struct World {
    pub clock: TestClock,
    pub net: MemNet,
    seed: Cell<u8>,
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

impl World {
    pub fn new() -> World {
        World { clock: TestClock(Rc::new(Cell::new(START))), net: MemNet::default(), seed: Cell::new(1) }
    }

    fn next_seed(&self) -> u8 {
        let s = self.seed.get();
        self.seed.set(s.wrapping_add(1));
        s
    }

    /// A config for `domain` served at `http://<domain>`, with the admin token `admin-<domain>`.
    pub fn config(&self, domain: &str, registration: Registration) -> Config {
        let mut c = Config::new(
            domain,
            &format!("http://{domain}"),
            SigningKey::from_seed([self.next_seed(); 32]),
            self.clock.now(),
        );
        c.admin_token = Some(format!("admin-{domain}"));
        c.registration = registration;
        c.allow_http = true;
        c
    }

    /// Starts a house with `config` and puts it on the network; every house knows every other
    /// through `hosts` (pinned keys), as a private network would.
    pub fn start(&self, config: Config) -> Rc<TestHouse> {
        self.start_on(config, SqliteDb::memory().unwrap())
    }

    /// Stops the house serving `domain` and starts it again on the same database with `config`
    /// (e.g. another domain key), as a restart of `nyx5 serve` would.
    pub fn restart(&self, config: Config) -> Rc<TestHouse> {
        let old = self.net.0.borrow_mut().houses.remove(&config.domain).expect("a house serving that domain");
        let House { db, .. } = Rc::try_unwrap(old).expect("no one else holds the old house");
        self.start_on(config, db.sqlite)
    }

    /// As [`World::start`], on a database the test chose (a file two houses in turn can open,
    /// to restart a house with another configuration).
    pub fn start_on(&self, config: Config, sqlite: SqliteDb) -> Rc<TestHouse> {
        self.start_with(config, sqlite, None)
    }

    /// A house that keeps attachments in `blobs` (shared with the test, which may look in).
    pub fn house_with_blobs(&self, domain: &str, registration: Registration, blobs: &MemBlobs) -> Rc<TestHouse> {
        self.start_with(self.config(domain, registration), SqliteDb::memory().unwrap(), Some(blobs.clone()))
    }

    fn start_with(&self, mut config: Config, sqlite: SqliteDb, blobs: Option<MemBlobs>) -> Rc<TestHouse> {
        let domain = config.domain.clone();
        let mut hosts = config.hosts.clone();
        for (d, h) in self.net.0.borrow().houses.iter() {
            hosts.entry(d.clone()).or_insert(nyx5_house::config::HostEntry {
                url: h.config.public_url.clone(),
                sig: Some(h.config.key.public()),
            });
        }
        config.hosts = hosts;
        let seed = u64::from(self.next_seed());
        let house = House::new(
            config,
            KitDb::new(sqlite),
            self.net.clone(),
            Box::new(self.clock.clone()),
            Box::new(TestRng(Cell::new(seed))),
        )
        .unwrap();
        let house = match blobs {
            Some(b) => house.with_blobs(Box::new(b)),
            None => house,
        };
        let house = Rc::new(house);
        self.net.0.borrow_mut().houses.insert(domain, house.clone());
        house
    }

    /// Puts `house` back on the network for its domain, in place of whatever serves it now (an
    /// old house and a new one taking turns on one name).
    pub fn serve(&self, house: &Rc<TestHouse>) {
        self.net.0.borrow_mut().houses.insert(house.config.domain.clone(), house.clone());
    }

    /// A house with defaults and the given registration mode.
    pub fn house(&self, domain: &str, registration: Registration) -> Rc<TestHouse> {
        self.start(self.config(domain, registration))
    }

    /// Serves `host` with a closure instead of a house.
    pub fn fake(&self, host: &str, f: impl Fn(&OutRequest) -> OutResponse + 'static) {
        self.net.0.borrow_mut().fakes.insert(host.into(), Rc::new(f));
    }

    pub fn down(&self, host: &str, down: bool) {
        self.net.0.borrow_mut().faults.entry(host.into()).or_default().down = down;
    }
    pub fn drop_next(&self, host: &str, n: u32) {
        self.net.0.borrow_mut().faults.entry(host.into()).or_default().drop = n;
    }
    pub fn lose_answers(&self, host: &str, n: u32) {
        self.net.0.borrow_mut().faults.entry(host.into()).or_default().lose_answer = n;
    }
    pub fn duplicate_next(&self, host: &str, n: u32) {
        self.net.0.borrow_mut().faults.entry(host.into()).or_default().duplicate = n;
    }
    /// Makes the next `n` requests to `host` wait once before they arrive (see [`block_on_both`]).
    pub fn stall_next(&self, host: &str, n: u32) {
        self.net.0.borrow_mut().faults.entry(host.into()).or_default().stall = n;
    }
    /// Runs one queue tick on every house, in domain order, and adds up what they did.
    pub fn tick_all(&self) -> TickReport {
        let mut houses: Vec<(String, Rc<TestHouse>)> =
            self.net.0.borrow().houses.iter().map(|(d, h)| (d.clone(), h.clone())).collect();
        houses.sort_by(|a, b| a.0.cmp(&b.0));
        let mut total = TickReport::default();
        for (_, h) in houses {
            let r = block_on(h.tick()).unwrap();
            block_on(h.mailbox().send_pushes());
            total.attempted += r.attempted;
            total.delivered += r.delivered;
            total.retried += r.retried;
            total.bounced += r.bounced;
            total.reclaimed += r.reclaimed;
        }
        total
    }
    /// How many requests went to URLs containing `needle`.
    pub fn sent_to(&self, needle: &str) -> usize {
        self.net.0.borrow().log.iter().filter(|(u, _)| u.contains(needle)).count()
    }
}

/// An agent: its keys and address. It talks to its house like a real client would.
pub struct Agent {
    pub address: Address,
    pub sig: SigningKey,
    pub enc: EncSecret,
    seed: u8,
    nonce: Cell<u64>,
}

impl Agent {
    pub fn new(address: &str, seed: u8) -> Agent {
        Agent {
            address: Address::parse(address).unwrap(),
            sig: SigningKey::from_seed([seed; 32]),
            enc: EncSecret::from_bytes([seed.wrapping_add(128); 32]),
            seed,
            nonce: Cell::new(0),
        }
    }

    /// The `Authorization` header for `method path?query` at `house` carrying `body`.
    pub fn token(&self, house: &TestHouse, method: &str, target: &str, body: &[u8]) -> String {
        self.token_by(&self.sig, house, method, target, body)
    }

    /// [`Agent::token`] signed with another key (a rotated-out one, a thief's).
    pub fn token_by(&self, key: &SigningKey, house: &TestHouse, method: &str, target: &str, body: &[u8]) -> String {
        let n = self.nonce.get() + 1;
        self.nonce.set(n);
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Claims {
            address: self.address.clone(),
            ts: house.now(),
            // Two agents with one address (an old and a new key) never share a nonce.
            nonce: format!("{}-{:03}-{n:012}", self.address.local(), self.seed),
            target: Target::new(method, path, query, &house.config.host(), body),
        }
        .sign(key)
    }

    /// A signed registration body for self-service modes (proof of possession).
    pub fn registration(&self, house: &TestHouse, extra: &[(&str, Value)]) -> Value {
        let mut o = nyx5_proto::json::obj([
            ("local", self.address.local().into()),
            ("sig", self.sig.public().to_b64().into()),
            ("enc", self.enc.public().to_b64().into()),
            ("ts", house.now().to_rfc3339().into()),
        ]);
        for (k, v) in extra {
            o.insert((*k).to_owned(), v.clone());
        }
        nyx5_proto::sign::sign_object(&mut o, "signature", nyx5_proto::crypto::Context::Registration, &self.sig);
        Value::Object(o)
    }

    /// Registers through the operator (admin mode).
    pub fn register_admin(&self, house: &TestHouse) -> Response {
        let body = self.registration(house, &[]);
        call(house, "POST", "/agents", &[("authorization", &format!("Bearer admin-{}", house.config.domain))], &body)
    }

    /// A clear envelope from this agent, created at the kit's start.
    pub fn draft(&self, id: &str, to: &[&Address], body: &str) -> Envelope {
        self.draft_at(id, to, body, Timestamp(START))
    }

    /// A clear envelope from this agent, created at `created` (a house queues an envelope at
    /// most 6 days old: one sent after the clock moved that far is drafted at the clock).
    pub fn draft_at(&self, id: &str, to: &[&Address], body: &str, created: Timestamp) -> Envelope {
        Draft::new(
            id.into(),
            self.address.clone(),
            to.iter().map(|a| (*a).clone()).collect(),
            created,
            Content::new("text/plain", body.into()),
        )
        .build()
        .unwrap()
    }

    /// Seals `env` for `recipients` (address, their agent) and signs it.
    pub fn seal(&self, env: Envelope, recipients: &[&Agent]) -> Envelope {
        let keys: Vec<_> = recipients.iter().map(|a| (a.address.clone(), a.enc.public())).collect();
        let mut n = 7u64;
        let mut rng = move |buf: &mut [u8]| {
            for b in buf.iter_mut() {
                n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *b = (n >> 33) as u8;
            }
        };
        seal::seal(env, &keys, &mut rng).unwrap().sign(&self.sig).unwrap()
    }

    /// POST /outbound with this agent's token.
    pub fn send(&self, house: &TestHouse, env: &Envelope) -> Response {
        let token = self.token(house, "POST", "/outbound", &env.canonical());
        call_raw(house, "POST", "/outbound", &[("authorization", &token)], env.canonical())
    }

    /// GET with this agent's token.
    pub fn get(&self, house: &TestHouse, path: &str) -> Response {
        let token = self.token(house, "GET", path, &[]);
        call_raw(house, "GET", path, &[("authorization", &token)], vec![])
    }

    /// POST JSON with this agent's token.
    pub fn post(&self, house: &TestHouse, path: &str, body: &Value) -> Response {
        let token = self.token(house, "POST", path, &body.canonical());
        call(house, "POST", path, &[("authorization", &token)], body)
    }
}

/// Sends a request to a house directly (as the Worker adapter would).
pub fn call(house: &TestHouse, method: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    call_raw(house, method, path, headers, body.canonical())
}

pub fn call_raw(house: &TestHouse, method: &str, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Response {
    let headers = headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let resp = block_on(house.handle(Request::new(method, path, headers, body)));
    // As the adapters do once the answer is out.
    block_on(house.mailbox().send_pushes());
    resp
}

/// The JSON body of a response, with the status checked.
pub fn json(resp: &Response, status: u16) -> Value {
    let v = resp.value().unwrap();
    assert_eq!(resp.status, status, "unexpected status; body: {}", v.canonical_string());
    v
}

/// The envelopes waiting in `agent`'s mailbox (GET /mailbox, first 200), oldest first.
pub fn mailbox(house: &TestHouse, agent: &Agent) -> Vec<Envelope> {
    // Every page: a page stops at a byte budget as well as at its limit.
    let mut out = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let path = match after {
            Some(a) => format!("/mailbox/{}?limit=200&after={a}", agent.address.local()),
            None => format!("/mailbox/{}?limit=200", agent.address.local()),
        };
        let v = json(&agent.get(house, &path), 200);
        let page = v.as_object().expect("a JSON object");
        out.extend(page["envelopes"].as_array().expect("envelopes").iter().map(|e| {
            let item = e.as_object().expect("an item");
            Envelope::from_object(item["envelope"].as_object().expect("an envelope").clone()).expect("a valid envelope")
        }));
        match page.get("next").and_then(Value::as_safe_integer) {
            Some(n) if Some(n) != after => after = Some(n),
            _ => return out,
        }
    }
}

/// The draft of an operation for the Libro of `domain` (`libro@<domain>`: a task carrying
/// `OP_MEDIA`) from `from` at `now`, for the caller to sign (`.build()`, then `.sign(key)`).
pub fn libro_op(from: &Address, domain: &str, id: &str, now: Timestamp, body: Object) -> Draft {
    let libro = Address::new(nyx5_house::libro::LIBRO, domain).unwrap();
    let mut d = Draft::new(
        id.into(),
        from.clone(),
        vec![libro],
        now,
        Content::new(nyx5_house::libro::OP_MEDIA, Value::Object(body)),
    );
    d.kind = Kind::Task;
    d
}

/// An operation by `who` for the Libro of `domain`, signed with `who`'s key now.
pub fn signed_op(w: &World, who: &Agent, domain: &str, id: &str, body: Object) -> Envelope {
    libro_op(&who.address, domain, id, w.clock.now(), body).build().unwrap().sign(&who.sig).unwrap()
}

/// The operator tops `address` up with `amount` at `house` (`POST /libro/topup`).
pub fn topup(house: &TestHouse, address: &str, amount: i64) {
    let admin = format!("Bearer admin-{}", house.config.domain);
    let body = nyx5_proto::json::obj([("address", address.into()), ("amount", amount.into())]);
    assert_eq!(call(house, "POST", "/libro/topup", &[("authorization", &admin)], &Value::Object(body)).status, 200);
}

/// The balance of `account` in `house`'s Libro.
pub fn balance(house: &TestHouse, account: &str) -> i64 {
    block_on(nyx5_house::store::libro::balance(&house.db, account)).unwrap()
}

/// The code of the bounce `agent` holds from its postmaster for envelope `id`; 0 when it holds
/// none (it was delivered, or not yet refused).
pub fn bounce(house: &TestHouse, agent: &Agent, id: &str) -> u16 {
    for env in mailbox(house, agent) {
        let body = env.content().and_then(|c| c.body.as_object().cloned()).unwrap_or_default();
        if env.from().local() == "postmaster" && body.get("of").and_then(Value::as_str) == Some(id) {
            return u16::try_from(body["code"].as_safe_integer().unwrap()).unwrap();
        }
    }
    0
}

/// Attachments' parts in memory, shared between a house and its test.
#[derive(Clone, Default)]
pub struct MemBlobs(pub Rc<RefCell<std::collections::BTreeMap<String, Vec<u8>>>>);

impl nyx5_house::ports::Blobs for MemBlobs {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> nyx5_house::ports::PortFuture<'a, Result<(), PortError>> {
        self.0.borrow_mut().insert(key.to_owned(), bytes);
        Box::pin(std::future::ready(Ok(())))
    }
    fn get<'a>(&'a self, key: &'a str) -> nyx5_house::ports::PortFuture<'a, Result<Option<Vec<u8>>, PortError>> {
        Box::pin(std::future::ready(Ok(self.0.borrow().get(key).cloned())))
    }
    fn delete<'a>(&'a self, keys: Vec<String>) -> nyx5_house::ports::PortFuture<'a, Result<(), PortError>> {
        for k in keys {
            self.0.borrow_mut().remove(&k);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}
