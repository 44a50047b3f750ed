//! The simulated world: houses on in-memory SQLite, one clock with a skew per house, seeded
//! randomness, and a network that drops, loses answers, duplicates, delays (and so reorders),
//! partitions, and can hold a house down. Nothing here waits for anything: every future is
//! ready when first polled, unless a house was told to die mid-tick (see [`SimDb`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use nyx5_proto::Timestamp;

use crate::http::{Request, Response};
use crate::ports::{Clock, Db, Net, OutRequest, OutResponse, PortError, Rng, Row, Stmt};
use crate::shards::Shards;
use crate::sqlite::SqliteDb;
use crate::{Config, House};

/// A splitmix64 generator: every draw of the simulation comes from one of these, seeded from the
/// run's seed, so a seed is a whole run.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Prng {
        Prng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        usize::try_from(self.next_u64() % u64::try_from(n).unwrap_or(u64::MAX)).unwrap_or(0)
    }
    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = u64::try_from(hi.saturating_sub(lo)).unwrap_or(0).saturating_add(1);
        lo.saturating_add(i64::try_from(self.next_u64() % span).unwrap_or(0))
    }
    /// True `per_mille` times in a thousand.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.next_u64() % 1000 < u64::from(per_mille)
    }
    /// One of `items` (`None` when there are none).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len()))
    }
    /// 32 bytes, for a key seed.
    pub fn bytes32(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        out
    }
}

/// A house's clock: the world's time plus the house's own skew, which a clock jump changes
/// (days forward or back, and later set right).
#[derive(Debug, Clone)]
pub struct SimClock {
    world: Rc<Cell<i64>>,
    skew: Rc<Cell<i64>>,
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.world.get().saturating_add(self.skew.get()))
    }
}

/// A house's randomness (its ids and nonces), from the run's seed.
#[derive(Debug)]
pub struct SimRng(RefCell<Prng>);

impl Rng for SimRng {
    fn fill(&self, buf: &mut [u8]) {
        let mut rng = self.0.borrow_mut();
        for chunk in buf.chunks_mut(8) {
            let word = rng.next_u64().to_le_bytes();
            let n = chunk.len();
            chunk.copy_from_slice(word.get(..n).unwrap_or(&[]));
        }
    }
}

/// One of a house's databases: SQLite, which can be told to die after a number of calls (the
/// count shared by all of the house's databases). A call past that point never returns (its
/// future stays pending), so nothing after it runs — what a process killed there would have
/// done. [`run`] then drops the whole future.
#[derive(Debug)]
pub struct Gate {
    pub sqlite: SqliteDb,
    /// Calls left before the house dies; `None`: it does not.
    dies_after: Rc<Cell<Option<u32>>>,
}

impl Gate {
    async fn gate(&self) {
        match self.dies_after.get() {
            Some(0) => std::future::pending::<()>().await,
            Some(n) => self.dies_after.set(Some(n - 1)),
            None => {}
        }
    }
}

impl Db for Gate {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.gate().await;
        self.sqlite.query(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        self.gate().await;
        self.sqlite.batch(stmts).await
    }
    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.gate().await;
        self.sqlite.write_returning(stmt).await
    }
}

/// A house's databases: the primary and its mailbox shards (issue 36 §3), behind the one
/// sharding port every adapter uses.
#[derive(Debug)]
pub struct SimDb {
    shards: Shards<Gate>,
    /// Calls left before the house dies; `None`: it does not.
    pub dies_after: Rc<Cell<Option<u32>>>,
}

impl SimDb {
    /// Over `dbs`, the primary first (at least one).
    pub fn new(dbs: Vec<SqliteDb>, clock: SimClock, rng: SimRng) -> Result<SimDb, String> {
        let dies_after = Rc::new(Cell::new(None));
        let gates = dbs.into_iter().map(|sqlite| Gate { sqlite, dies_after: dies_after.clone() }).collect();
        let shards = Shards::new(gates, Box::new(clock), Box::new(rng)).ok_or("a house needs a database")?;
        Ok(SimDb { shards, dies_after })
    }
    /// The primary's SQLite, for checks and sabotage (no call counted).
    pub fn sqlite(&self) -> &SqliteDb {
        match self.shards.get(0) {
            Some(g) => &g.sqlite,
            None => unreachable!("a SimDb has its primary"),
        }
    }
    /// Every database's SQLite, the primary first.
    pub fn all(&self) -> impl Iterator<Item = &SqliteDb> {
        (0..self.shards.count()).filter_map(|i| self.shards.get(i)).map(|g| &g.sqlite)
    }
    /// The databases, to start the house again on them.
    pub fn into_sqlite(self) -> Vec<SqliteDb> {
        self.shards.into_inner().into_iter().map(|g| g.sqlite).collect()
    }
}

impl Db for SimDb {
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.shards.query(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
        self.shards.batch(stmts).await
    }
    async fn write_returning(&self, stmt: Stmt) -> Result<Vec<Row>, PortError> {
        self.shards.write_returning(stmt).await
    }
    fn sharded(&self) -> bool {
        self.shards.sharded()
    }
    async fn settle(&self) -> Result<u64, PortError> {
        self.shards.settle().await
    }
    fn databases(&self) -> usize {
        self.shards.count()
    }
    async fn move_mailbox(&self, local: &str, to: usize) -> Result<(usize, usize, u64), PortError> {
        Db::move_mailbox(&self.shards, local, to).await
    }
    async fn move_step(&self, local: &str, to: usize) -> Result<crate::ports::MoveStep, PortError> {
        Db::move_step(&self.shards, local, to).await
    }
    async fn advance_moves(&self) -> Result<bool, PortError> {
        self.shards.advance_moves().await
    }
}

struct NoopWake;
impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Polls `f` once. In the simulation every future is ready at once, except one that reached a
/// dead house's database: that one is dropped where it stands, and the answer is `None`.
pub fn run<F: Future>(f: F) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    match pin!(f).as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

pub type SimHouse = House<SimDb, SimNet>;

/// How often (per mille of requests) the network misbehaves, and how.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Lost before it arrives.
    pub drop: u32,
    /// Arrives, but the answer is lost (the sender sees a timeout).
    pub lose_answer: u32,
    /// Arrives twice.
    pub duplicate: u32,
    /// Held in the network and delivered at some later step (the sender sees a timeout).
    pub delay: u32,
}

/// What the network did, for the run's summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetStats {
    pub sent: u64,
    /// Requests a house handled (a duplicate twice, a late one when it lands).
    pub arrived: u64,
    /// Of the refused: those between two houses that were up, over a cut link.
    pub cut_off: u64,
    pub refused: u64,
    pub dropped: u64,
    pub lost_answers: u64,
    pub duplicated: u64,
    pub delayed: u64,
    /// Held requests released later: landed, or lost to a house down by then.
    pub late: u64,
}

#[derive(Default)]
struct NetState {
    houses: BTreeMap<String, Rc<SimHouse>>,
    /// Houses down until this world time.
    down: BTreeMap<String, i64>,
    /// Pairs of houses that cannot reach each other (the smaller name first).
    cut: BTreeSet<(String, String)>,
    faults: Faults,
    rng: Option<Prng>,
    /// Requests held in the network: (destination host, request).
    held: Vec<(String, OutRequest)>,
    /// Every request that left for a house (delivered, answer lost, or held), by its host and a
    /// hash of its body: when it last left (world time). Only such a request can arrive again late.
    left: BTreeMap<(String, u64), i64>,
    stats: NetStats,
}

/// The network as one house sees it (its own name is the source of every request it sends).
#[derive(Clone)]
pub struct SimNet {
    state: Rc<RefCell<NetState>>,
    world: Rc<Cell<i64>>,
    from: String,
}

impl std::fmt::Debug for SimNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNet").field("from", &self.from).finish()
    }
}

fn body_hash(body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}

fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b { (a.to_owned(), b.to_owned()) } else { (b.to_owned(), a.to_owned()) }
}

fn split_url(url: &str) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split_once('/').map_or((rest.to_owned(), "/".to_owned()), |(h, p)| (h.to_owned(), format!("/{p}")))
}

/// What the network decided for one request.
enum Route {
    Refused(&'static str),
    Held,
    Deliver { house: Rc<SimHouse>, times: u32, lose: bool },
}

impl SimNet {
    fn route(&self, host: &str, request: &OutRequest) -> Route {
        let mut st = self.state.borrow_mut();
        let now = self.world.get();
        st.stats.sent += 1;
        let down = |st: &NetState, h: &str| st.down.get(h).is_some_and(|until| *until > now);
        let is_down = down(&st, &self.from) || down(&st, host);
        if is_down || st.cut.contains(&pair(&self.from, host)) {
            st.stats.refused += 1;
            st.stats.cut_off += u64::from(!is_down);
            return Route::Refused("unreachable");
        }
        let Some(house) = st.houses.get(host).cloned() else {
            st.stats.refused += 1;
            return Route::Refused("no such host");
        };
        let faults = st.faults;
        let Some(mut rng) = st.rng.take() else {
            st.left.insert((host.to_owned(), body_hash(&request.body)), now);
            return Route::Deliver { house, times: 1, lose: false };
        };
        let route = if rng.chance(faults.drop) {
            st.stats.dropped += 1;
            Route::Refused("dropped")
        } else if rng.chance(faults.delay) {
            st.stats.delayed += 1;
            st.held.push((host.to_owned(), request.clone()));
            Route::Held
        } else {
            let times = if rng.chance(faults.duplicate) {
                st.stats.duplicated += 1;
                2
            } else {
                1
            };
            let lose = rng.chance(faults.lose_answer);
            if lose {
                st.stats.lost_answers += 1;
            }
            Route::Deliver { house, times, lose }
        };
        st.rng = Some(rng);
        if !matches!(route, Route::Refused(_)) {
            st.left.insert((host.to_owned(), body_hash(&request.body)), now);
        }
        route
    }
}

async fn deliver(house: &SimHouse, request: &OutRequest, path: &str) -> Response {
    let req = Request::new(&request.method, path, request.headers.clone(), request.body.clone());
    let resp = Box::pin(house.handle(req)).await;
    Box::pin(house.mailbox().send_pushes()).await;
    resp
}

impl Net for SimNet {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        let (host, path) = split_url(&request.url);
        match self.route(&host, &request) {
            Route::Refused(why) => Err(PortError::Unreached(format!("{host}: {why}"))),
            Route::Held => Err(PortError::Failed(format!("{host}: timed out"))),
            Route::Deliver { house, times, lose } => {
                let mut last = None;
                for _ in 0..times {
                    self.state.borrow_mut().stats.arrived += 1;
                    last = Some(deliver(&house, &request, &path).await);
                }
                match last {
                    Some(resp) if !lose => Ok(OutResponse { status: resp.status, body: resp.body }),
                    _ => Err(PortError::Failed(format!("{host}: answer lost"))),
                }
            }
        }
    }
}

/// The houses, their clock and their network.
pub struct World {
    pub clock: Rc<Cell<i64>>,
    state: Rc<RefCell<NetState>>,
    configs: BTreeMap<String, Config>,
    skews: BTreeMap<String, Rc<Cell<i64>>>,
    seed: u64,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("now", &self.clock.get()).field("houses", &self.configs.keys()).finish()
    }
}

/// Each house's [`SimNet`] holds the network's state, and the state holds the houses: an `Rc`
/// cycle that would keep every house, its database and the state alive after the world ends.
/// Dropping the houses here breaks it (found by the `libro_sequence` fuzz target: LeakSanitizer
/// on any script, the empty one included).
impl Drop for World {
    fn drop(&mut self) {
        // Taken out first, so no house is dropped while the state is borrowed.
        let houses = self.state.try_borrow_mut().map(|mut st| std::mem::take(&mut st.houses)).unwrap_or_default();
        drop(houses);
    }
}

impl World {
    /// A world at `start` whose network draws its faults from `rng`.
    pub fn new(start: i64, seed: u64) -> World {
        let state = NetState { rng: Some(Prng::new(seed ^ 0x6e65_7477_6f72_6b00)), ..NetState::default() };
        World {
            clock: Rc::new(Cell::new(start)),
            state: Rc::new(RefCell::new(state)),
            configs: BTreeMap::new(),
            skews: BTreeMap::new(),
            seed,
        }
    }

    pub fn now(&self) -> i64 {
        self.clock.get()
    }
    pub fn advance(&self, ms: i64) {
        self.clock.set(self.clock.get().saturating_add(ms));
    }

    /// Starts (or starts again, on `sqlite`) the house `config` describes, `skew` ms off the
    /// world's clock.
    pub fn start(&mut self, config: Config, skew: i64, sqlite: Vec<SqliteDb>) -> Result<Rc<SimHouse>, String> {
        let domain = config.domain.clone();
        let net = SimNet { state: self.state.clone(), world: self.clock.clone(), from: domain.clone() };
        let skew = self.skews.get(&domain).cloned().unwrap_or_else(|| Rc::new(Cell::new(skew)));
        let clock = SimClock { world: self.clock.clone(), skew: skew.clone() };
        // Each start draws from its own stream: the seed, how far the run is, and the name.
        let salt =
            domain.bytes().fold(self.state.borrow().stats.sent, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let rng = SimRng(RefCell::new(Prng::new(self.seed ^ salt)));
        // The port's hand-off keys from a stream of their own (the house's stays as it was).
        let keys = SimRng(RefCell::new(Prng::new(self.seed ^ salt ^ 0x5eed_5a1d)));
        let house =
            House::new(config.clone(), SimDb::new(sqlite, clock.clone(), keys)?, net, Box::new(clock), Box::new(rng))
                .map_err(|e| format!("{domain} does not start: {}", e.reason))?;
        let house = Rc::new(house);
        self.state.borrow_mut().houses.insert(domain.clone(), house.clone());
        self.configs.insert(domain.clone(), config);
        self.skews.insert(domain, skew);
        Ok(house)
    }

    /// The house serving `domain`.
    pub fn house(&self, domain: &str) -> Option<Rc<SimHouse>> {
        self.state.borrow().houses.get(domain).cloned()
    }
    pub fn domains(&self) -> Vec<String> {
        self.configs.keys().cloned().collect()
    }

    /// Stops the house serving `domain` (all it held in memory is gone) and starts it again on
    /// its database.
    pub fn restart(&mut self, domain: &str) -> Result<Rc<SimHouse>, String> {
        let old = self.state.borrow_mut().houses.remove(domain).ok_or_else(|| format!("no house {domain}"))?;
        let house = Rc::try_unwrap(old).map_err(|_| format!("{domain} is still in use"))?;
        let config = self.configs.get(domain).cloned().ok_or_else(|| format!("no config for {domain}"))?;
        let skew = self.skews.get(domain).map_or(0, |s| s.get());
        let House { db, .. } = house;
        self.start(config, skew, db.into_sqlite())
    }

    /// Stops the house `config` names and starts it again on its database with `config`: an
    /// operator restarting a house with a new domain key.
    pub fn restart_with(&mut self, config: Config) -> Result<Rc<SimHouse>, String> {
        let domain = config.domain.clone();
        if !self.configs.contains_key(&domain) {
            return Err(format!("no house {domain}"));
        }
        self.configs.insert(domain.clone(), config);
        self.restart(&domain)
    }

    /// Runs one tick of `domain`'s queue; with `dies_after`, the house dies after that many
    /// database calls (and is started again). Answers whether the tick ran to its end.
    pub fn tick(&mut self, domain: &str, dies_after: Option<u32>) -> Result<bool, String> {
        let house = self.house(domain).ok_or_else(|| format!("no house {domain}"))?;
        house.db.dies_after.set(dies_after);
        let done = run(async {
            let report = house.tick().await;
            house.mailbox().send_pushes().await;
            report
        });
        house.db.dies_after.set(None);
        drop(house);
        match done {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(format!("{domain}: the tick failed: {}", e.reason)),
            None => {
                self.restart(domain)?;
                Ok(false)
            }
        }
    }

    /// How far `domain`'s clock is off the world's.
    pub fn skew(&self, domain: &str) -> i64 {
        self.skews.get(domain).map_or(0, |s| s.get())
    }
    /// Sets `domain`'s clock `skew` ms off the world's: a clock that jumps (forward or back), or
    /// is set right. The house notices only by reading it.
    pub fn set_skew(&self, domain: &str, skew: i64) {
        if let Some(s) = self.skews.get(domain) {
            s.set(skew);
        }
    }

    /// Whether `domain` is down now.
    pub fn is_down(&self, domain: &str) -> bool {
        let now = self.now();
        self.state.borrow().down.get(domain).is_some_and(|until| *until > now)
    }
    /// Takes `domain` down until world time `until`.
    pub fn down_until(&self, domain: &str, until: i64) {
        self.state.borrow_mut().down.insert(domain.to_owned(), until);
    }
    /// Cuts the link between two houses, or mends it.
    pub fn cut(&self, a: &str, b: &str, cut: bool) {
        let mut st = self.state.borrow_mut();
        if cut {
            st.cut.insert(pair(a, b));
        } else {
            st.cut.remove(&pair(a, b));
        }
    }
    pub fn set_faults(&self, faults: Faults) {
        self.state.borrow_mut().faults = faults;
    }
    pub fn stats(&self) -> NetStats {
        self.state.borrow().stats
    }
    pub fn held(&self) -> usize {
        self.state.borrow().held.len()
    }
    /// When a request with this `body` last left for `host` and was not lost before it arrived
    /// (delivered, answer lost, or held), in world time.
    pub fn left(&self, host: &str, body: &[u8]) -> Option<i64> {
        self.state.borrow().left.get(&(host.to_owned(), body_hash(body))).copied()
    }

    /// Delivers the `i`-th request the network held, late (its answer goes nowhere). A house
    /// that is down by then loses it (a cut made since does not: the request was already on its
    /// way).
    pub fn deliver_held(&self, i: usize) {
        let taken = {
            let mut st = self.state.borrow_mut();
            if i < st.held.len() { Some(st.held.remove(i)) } else { None }
        };
        let Some((host, request)) = taken else { return };
        let house = {
            let mut st = self.state.borrow_mut();
            st.stats.late += 1;
            let now = self.now();
            if st.down.get(&host).is_some_and(|until| *until > now) { None } else { st.houses.get(&host).cloned() }
        };
        if let Some(house) = house {
            self.state.borrow_mut().stats.arrived += 1;
            let (_, path) = split_url(&request.url);
            let _late = run(deliver(&house, &request, &path));
        }
    }

    /// Heals the network: no faults, no cuts, every house up, nothing held.
    pub fn heal(&self) {
        let mut st = self.state.borrow_mut();
        st.faults = Faults::default();
        st.cut.clear();
        st.down.clear();
        st.held.clear();
    }

    /// Sends `req` to `domain` as a client of that house would (no network faults: the client
    /// is next to its house). `None` when the house is down.
    pub fn call(&self, domain: &str, req: Request) -> Option<Response> {
        if self.is_down(domain) {
            return None;
        }
        let house = self.house(domain)?;
        run(async {
            let resp = house.handle(req).await;
            house.mailbox().send_pushes().await;
            resp
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use nyx5_proto::crypto::SigningKey;

    use super::*;

    const START: i64 = 1_788_548_400_000;

    /// The generator is splitmix64 exactly: a seed replays the same run on every build.
    #[test]
    fn the_generator_is_splitmix64() {
        let mut rng = Prng::new(0);
        let first: Vec<u64> = (0..4).map(|_| rng.next_u64()).collect();
        assert_eq!(first, [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f, 0xf88b_b8a8_724c_81ec]);
        let mut a = Prng::new(0);
        let bytes = a.bytes32();
        assert_eq!(bytes.get(..8).unwrap(), &0xe220_a839_7b1d_cdafu64.to_le_bytes());
        assert_eq!(bytes.get(24..).unwrap(), &0xf88b_b8a8_724c_81ecu64.to_le_bytes());
        let mut filled = [0u8; 11];
        SimRng(RefCell::new(Prng::new(0))).fill(&mut filled);
        assert_eq!(filled.get(..8).unwrap(), &0xe220_a839_7b1d_cdafu64.to_le_bytes());
        assert_eq!(filled.get(8..).unwrap(), 0x6e78_9e6a_a1b9_65f4u64.to_le_bytes().get(..3).unwrap());
    }

    #[test]
    fn draws_stay_in_their_bounds_and_reach_both_ends() {
        let mut rng = Prng::new(42);
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.pick::<u8>(&[]), None);
        let (mut lo, mut hi, mut below, mut yes) = (false, false, [false; 3], 0);
        for _ in 0..2_000 {
            let r = rng.range(5, 8);
            assert!((5..=8).contains(&r), "{r}");
            lo |= r == 5;
            hi |= r == 8;
            let b = rng.below(3);
            *below.get_mut(b).unwrap() = true;
            yes += u32::from(rng.chance(250));
            assert!(!rng.chance(0));
            assert!(rng.chance(1000));
        }
        assert!(lo && hi && below == [true; 3]);
        assert!((400..600).contains(&yes), "chance(250) came {yes} times in 2000");
        assert_eq!(rng.range(7, 7), 7);
        assert_eq!(rng.pick(&[9]), Some(&9));
    }

    /// Each house draws its own stream, the same one each time the world is made again.
    #[test]
    fn houses_draw_streams_of_their_own() {
        for seed in [0, 1, 3, u64::MAX] {
            let first = |world: &World| -> Vec<[u8; 8]> {
                world
                    .domains()
                    .iter()
                    .map(|d| {
                        let mut b = [0u8; 8];
                        world.house(d).unwrap().rng.fill(&mut b);
                        b
                    })
                    .collect()
            };
            let (a, b) = (first(&three_from(seed, 0).0), first(&three_from(seed, 0).0));
            assert_eq!(a, b, "seed {seed}: a world made again draws again what it drew");
            assert!(a[0] != a[1] && a[1] != a[2] && a[0] != a[2], "seed {seed}: two houses draw alike: {a:?}");
        }
    }

    /// Three houses, h0, h1 (`skew` ms ahead) and h2, and h0's view of the network.
    fn three(skew: i64) -> (World, SimNet) {
        three_from(3, skew)
    }

    fn three_from(seed: u64, skew: i64) -> (World, SimNet) {
        let mut world = World::new(START, seed);
        for (i, name) in ["h0.test", "h1.test", "h2.test"].into_iter().enumerate() {
            let key = SigningKey::from_seed([u8::try_from(i).unwrap() + 1; 32]);
            let mut config = Config::new(name, &format!("http://{name}"), key, Timestamp(START));
            config.allow_http = true;
            world.start(config, if i == 1 { skew } else { 0 }, vec![SqliteDb::memory().unwrap()]).unwrap();
        }
        let net = SimNet { state: world.state.clone(), world: world.clock.clone(), from: "h0.test".into() };
        (world, net)
    }

    fn health(net: &SimNet, host: &str) -> Result<OutResponse, PortError> {
        let request = OutRequest {
            method: "GET".into(),
            url: format!("http://{host}/health"),
            headers: Vec::new(),
            body: Vec::new(),
        };
        run(net.send(request)).unwrap()
    }

    fn faults(drop: u32, lose_answer: u32, duplicate: u32, delay: u32) -> Faults {
        Faults { drop, lose_answer, duplicate, delay }
    }

    #[test]
    fn the_network_does_each_fault_it_is_told_to() {
        let (world, net) = three(0);
        assert_eq!(health(&net, "h1.test").unwrap().status, 200);
        assert!(matches!(health(&net, "h9.test"), Err(PortError::Unreached(m)) if m.contains("no such host")));
        world.set_faults(faults(1000, 0, 0, 0));
        assert!(matches!(health(&net, "h1.test"), Err(PortError::Unreached(m)) if m.contains("dropped")));
        world.set_faults(faults(0, 1000, 0, 0));
        assert!(matches!(health(&net, "h1.test"), Err(PortError::Failed(m)) if m.contains("answer lost")));
        world.set_faults(faults(0, 0, 1000, 0));
        assert_eq!(health(&net, "h1.test").unwrap().status, 200);
        world.set_faults(faults(0, 0, 0, 1000));
        assert!(matches!(health(&net, "h1.test"), Err(PortError::Failed(m)) if m.contains("timed out")));
        assert_eq!(world.held(), 1);
        let s = world.stats();
        // One plain, one dropped, one lost answer (arrived), one duplicate (arrived twice), one held.
        assert_eq!(
            (s.sent, s.refused, s.dropped, s.lost_answers, s.duplicated, s.delayed, s.arrived, s.late),
            (6, 1, 1, 1, 1, 1, 4, 0)
        );
        world.deliver_held(1);
        assert_eq!((world.held(), world.stats().late), (1, 0), "no second request is held");
        world.deliver_held(0);
        assert_eq!((world.held(), world.stats().late, world.stats().arrived), (0, 1, 5));
        world.set_faults(faults(0, 0, 0, 1000));
        let _ = health(&net, "h1.test");
        world.heal();
        assert_eq!(world.held(), 0, "healing lets nothing held land later");
        assert_eq!(health(&net, "h1.test").unwrap().status, 200);
    }

    #[test]
    fn cut_links_and_houses_down_refuse_until_mended() {
        let (world, net) = three(0);
        // (Their debug forms, which a failing test prints, name them without the houses' state.)
        assert_eq!(format!("{net:?}"), r#"SimNet { from: "h0.test" }"#);
        assert_eq!(
            format!("{world:?}"),
            format!(r#"World {{ now: {START}, houses: ["h0.test", "h1.test", "h2.test"] }}"#)
        );
        world.cut("h1.test", "h0.test", true);
        assert!(matches!(health(&net, "h1.test"), Err(PortError::Unreached(m)) if m.contains("unreachable")));
        assert_eq!(health(&net, "h2.test").unwrap().status, 200, "one link cut, not all");
        assert_eq!((world.stats().refused, world.stats().cut_off), (1, 1));
        world.cut("h0.test", "h1.test", false);
        assert_eq!(health(&net, "h1.test").unwrap().status, 200);
        world.down_until("h1.test", START + 1_000);
        assert!(world.is_down("h1.test") && !world.is_down("h0.test"));
        assert!(health(&net, "h1.test").is_err());
        assert!(world.call("h1.test", Request::new("GET", "/health", Vec::new(), Vec::new())).is_none());
        // Nor can a house that is down send.
        world.down_until("h0.test", START + 500);
        world.down_until("h1.test", START);
        assert!(health(&net, "h1.test").is_err());
        world.advance(500);
        assert!(!world.is_down("h0.test"), "down until a time means up at that time");
        assert_eq!(health(&net, "h1.test").unwrap().status, 200);
        assert_eq!((world.stats().refused, world.stats().cut_off), (3, 1), "a house down is not a cut");
        // A request held for a house that is down when it lands is lost.
        world.set_faults(faults(0, 0, 0, 1000));
        let _ = health(&net, "h1.test");
        world.down_until("h1.test", START + 10_000);
        let arrived = world.stats().arrived;
        world.deliver_held(0);
        assert_eq!((world.held(), world.stats().late, world.stats().arrived), (0, 1, arrived));
        // Down until now is up: the late request lands.
        world.down_until("h1.test", world.now());
        assert!(matches!(health(&net, "h1.test"), Err(PortError::Failed(m)) if m.contains("timed out")));
        world.deliver_held(0);
        assert_eq!((world.held(), world.stats().late, world.stats().arrived), (0, 2, arrived + 1));
    }

    #[test]
    fn each_house_keeps_its_skew_and_a_tick_that_dies_starts_it_again() {
        let (mut world, _) = three(60_000);
        let h1 = world.house("h1.test").unwrap();
        assert_eq!(h1.now().millis(), world.now() + 60_000);
        world.advance(5);
        assert_eq!(h1.now().millis(), START + 60_005);
        drop(h1);
        assert_eq!(world.domains(), ["h0.test", "h1.test", "h2.test"]);
        assert!(world.tick("h1.test", None).unwrap());
        // A weak reference keeps the old allocation (not the house), so the new house cannot be
        // given its address and compare equal by chance.
        let before = Rc::downgrade(&world.house("h1.test").unwrap());
        assert!(!world.tick("h1.test", Some(0)).unwrap(), "a house told to die at its first call dies");
        let after = world.house("h1.test").unwrap();
        assert_ne!(Rc::as_ptr(&after), before.as_ptr(), "it was started again");
        assert!(before.upgrade().is_none(), "the old house is gone");
        assert_eq!(after.now().millis(), START + 60_005, "with its skew");
        assert_eq!(after.db.dies_after.get(), None);
        drop(after);
        assert!(world.tick("h1.test", None).unwrap());
        // Told to die after one call, an idle tick (which makes several, its minute's upkeep
        // included) dies; after a thousand, it ends first.
        world.advance(60_000);
        assert!(!world.tick("h1.test", Some(1)).unwrap());
        assert!(world.tick("h1.test", Some(1_000)).unwrap());
        assert!(world.tick("h9.test", None).is_err());
    }
}
