//! What the connections of `nyx5 serve` share, and who gets it when it runs out: the connection
//! slots, the memory of request bodies, and the memory of answers waiting to be written. Issue 34 §2: with first come, first
//! served, eight addresses held every slot without sending a byte, and slow 2 MiB bodies took
//! half a gigabyte.
//!
//! Clients are counted by **keys**: an IPv4 address is one key; an IPv6 address counts under its
//! /64 (one subscriber's usual allocation) for the per-address cap and under its /48 (one site)
//! for the per-site cap and for fairness, so rotating addresses inside a prefix gains nothing.
//!
//! - **Slots.** A new connection over a client's caps is refused (429). When every slot is held,
//!   a newcomer takes the place of a connection idle between requests, else of one that has
//!   sent nothing for a second, whoever holds them; else of a connection of the client holding
//!   the most slots, provided that client holds at least two more than the newcomer's (so two
//!   clients never take turns evicting each other): one that has sent nothing yet, then one
//!   reading a head, a body, writing an answer. A connection whose request the engine is
//!   answering is never evicted for its slot; instead a client may have only
//!   [`Caps::busy_per_client`] requests with the engine at once (429 beyond), so requests the
//!   engine is slow to answer (it waits on a house the client runs) cannot hold every slot. With
//!   no such connection the newcomer is refused (503).
//! - **Bodies.** Every byte of body buffer is reserved from one budget before it is allocated,
//!   so bodies in flight never take more than the budget, by construction. When it is spent, a
//!   reservation takes from the client holding the most body bytes if that one holds more than
//!   the requester would with its reservation; the evicted connections are shed (their memory
//!   goes when their task ends) and the reservation waits a moment for it. Otherwise it is
//!   refused (503 with `retry-after`). A body handed to the engine keeps its reservation until
//!   the engine has answered, and can be taken like one being read (the engine's work for it
//!   is dropped): a request waiting on the engine must not pin the budget.
//! - **Answers.** An answer waiting to be written holds its bytes of a second budget, taken the
//!   same way from the client holding the most unsent answer bytes (connections writing them are
//!   shed). A safe request (GET, HEAD) whose answer does not fit is answered 503 instead; any
//!   other request's answer is written anyway (its change is made; a retry must not repeat it),
//!   and so is an answer when no other is unsent.
//!
//! The choices are pure functions ([`admission`], [`slot_victim`], [`budget_victims`]) over a
//! snapshot; [`Registry`] applies them in one borrow, so nothing is decided across an await.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::rc::Rc;
use std::time::Duration;

use nyx5_proto::{Error, Refusal};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout_at};

/// How long a reservation waits for the memory of the connections it evicted.
const RESERVE_WAIT: Duration = Duration::from_secs(1);

/// Where a client is counted: `narrow` for the per-address cap (an IPv4 address, an IPv6 /64),
/// `wide` for the per-site cap and for fairness (an IPv4 address, an IPv6 /48).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Keys {
    pub(super) narrow: IpAddr,
    pub(super) wide: IpAddr,
}

/// The keys of a peer address (an IPv4 address mapped into IPv6 is the IPv4 address).
pub(super) fn keys(ip: IpAddr) -> Keys {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            Keys {
                narrow: IpAddr::V6(Ipv6Addr::from(bits & (u128::MAX << 64))),
                wide: IpAddr::V6(Ipv6Addr::from(bits & (u128::MAX << 80))),
            }
        }
        v4 => Keys { narrow: v4, wide: v4 },
    }
}

/// What a connection is doing, in the order connections are evicted when slots run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    /// Kept alive between requests.
    Idle,
    /// New, and nothing received for more than [`SILENT_GRACE`] (the registry's view of a
    /// `Fresh` connection; a connection never sets it itself).
    Silent,
    /// The engine holds a mailbox read open until mail arrives (`wait`, docs/SPEC.md §8c):
    /// not counted among the client's busy requests, and anyone's to take for a slot after the
    /// idle ones (the read was answered nothing yet; its client reads again).
    Waiting,
    /// New, nothing received yet.
    Fresh,
    /// Reading a request head.
    Head,
    /// Reading a request body.
    Body,
    /// Writing an answer.
    Answer,
    /// The engine is answering: never evicted for a slot (a client has only a few), but its
    /// body's memory may be taken.
    Busy,
}

/// How long a new connection may say nothing before any newcomer may take its place.
const SILENT_GRACE: Duration = Duration::from_secs(1);

/// The caps [`Registry`] keeps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caps {
    /// Connections served at once.
    pub(super) connections: usize,
    /// Connections from one narrow key (0: no cap).
    pub(super) per_address: usize,
    /// Connections from one wide key (0: no cap).
    pub(super) per_site: usize,
    /// Bytes of request body buffers at once, across all connections.
    pub(super) body_budget: usize,
    /// Bytes of answers waiting to be written at once, across all connections.
    pub(super) answer_budget: usize,
    /// Requests of one wide key the engine answers at once (0: no cap).
    pub(super) busy_per_client: usize,
}

/// One connection, as the choices see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holder {
    /// Increasing with age: a smaller id is an older connection.
    pub(super) id: u64,
    pub(super) wide: IpAddr,
    pub(super) phase: Phase,
    /// Body bytes reserved.
    pub(super) bytes: usize,
    /// Answer bytes reserved.
    pub(super) answer: usize,
}

/// The two memory budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pool {
    /// Request bodies, read or handed to the engine.
    Body,
    /// Answers waiting to be written.
    Answer,
}

impl Pool {
    fn held(self, h: &Holder) -> usize {
        match self {
            Pool::Body => h.bytes,
            Pool::Answer => h.answer,
        }
    }

    /// Whether a connection in `phase` may give up its bytes of this pool.
    fn takeable(self, phase: Phase) -> bool {
        match self {
            Pool::Body => matches!(phase, Phase::Body | Phase::Busy),
            Pool::Answer => phase == Phase::Answer,
        }
    }

    fn refusal(self) -> Error {
        match self {
            Pool::Body => unavailable("is reading as many request bodies as it can hold now"),
            Pool::Answer => unavailable("holds as many unsent answers as it can now"),
        }
    }
}

/// Whether one more request of a client that has `busy` with the engine now may go to it; or
/// the refusal (429).
pub(super) fn busy_admission(caps: &Caps, busy: usize) -> Result<(), Error> {
    if caps.busy_per_client > 0 && busy >= caps.busy_per_client {
        return Err(Refusal::TooManyRequests.because(format!(
            "too many of your requests are being answered already (at most {} at once)",
            caps.busy_per_client
        )));
    }
    Ok(())
}

fn unavailable(what: &str) -> Error {
    Refusal::HouseBusy.because(format!("this house {what}; try again in a moment"))
}

/// Whether a new connection is let in, from the counts now (its own key's and in all): `Ok(false)`
/// at once, `Ok(true)` if a slot must be freed for it first, or the refusal (429 over a
/// client's caps).
pub(super) fn admission(caps: &Caps, total: usize, narrow: usize, wide: usize) -> Result<bool, Error> {
    if caps.per_address > 0 && narrow >= caps.per_address {
        return Err(Refusal::TooManyConnections
            .because(format!("too many connections from your address (at most {} at once)", caps.per_address)));
    }
    if caps.per_site > 0 && wide >= caps.per_site {
        return Err(Refusal::TooManyConnections
            .because(format!("too many connections from your network (at most {} at once)", caps.per_site)));
    }
    Ok(total >= caps.connections)
}

/// The connection a newcomer from `wide` takes the place of when every slot is held, if any
/// (see the module's rules).
pub(super) fn slot_victim(holders: &[Holder], wide: IpAddr) -> Option<u64> {
    let mut counts: HashMap<IpAddr, usize> = HashMap::new();
    for h in holders {
        *counts.entry(h.wide).or_insert(0) += 1;
    }
    let mine = counts.get(&wide).copied().unwrap_or(0);
    holders
        .iter()
        .map(|h| (h, counts.get(&h.wide).copied().unwrap_or(0)))
        .filter(|(h, theirs)| match h.phase {
            // Doing nothing: anyone's.
            Phase::Idle | Phase::Silent | Phase::Waiting => true,
            Phase::Busy => false,
            // Otherwise only from a client holding at least two more.
            _ => h.wide != wide && *theirs >= mine.saturating_add(2),
        })
        .min_by_key(|(h, theirs)| (h.phase, std::cmp::Reverse(*theirs), h.id))
        .map(|(h, _)| h.id)
}

/// The connections whose memory of `pool` goes to a reservation of `need` bytes from `wide`
/// when only `free` bytes of the budget are left: from the client holding the most, while it
/// holds more than the requester would, largest first. Empty when that cannot free enough.
pub(super) fn budget_victims(holders: &[Holder], wide: IpAddr, need: usize, free: usize, pool: Pool) -> Vec<u64> {
    let mut held: HashMap<IpAddr, usize> = HashMap::new();
    for h in holders {
        *held.entry(h.wide).or_insert(0) += pool.held(h);
    }
    let mine = held.get(&wide).copied().unwrap_or(0).saturating_add(need);
    // Each client's takeable holdings, the largest (then the oldest) last, to be popped first.
    let mut candidates: HashMap<IpAddr, Vec<&Holder>> = HashMap::new();
    for h in holders.iter().filter(|h| pool.takeable(h.phase) && pool.held(h) > 0 && h.wide != wide) {
        candidates.entry(h.wide).or_default().push(h);
    }
    for list in candidates.values_mut() {
        list.sort_by_key(|h| (pool.held(h), std::cmp::Reverse(h.id)));
    }
    let mut victims = Vec::new();
    let mut freed = free;
    while freed < need {
        // The client holding the most now, among those with something to evict.
        let top = candidates
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(k, _)| (held.get(k).copied().unwrap_or(0), *k))
            .max_by_key(|(v, k)| (*v, std::cmp::Reverse(*k)));
        let Some((theirs, top)) = top else { return Vec::new() };
        if theirs <= mine {
            return Vec::new();
        }
        let Some(victim) = candidates.get_mut(&top).and_then(Vec::pop) else { return Vec::new() };
        victims.push(victim.id);
        freed = freed.saturating_add(pool.held(victim));
        if let Some(v) = held.get_mut(&top) {
            *v = v.saturating_sub(pool.held(victim));
        }
    }
    victims
}

struct Entry {
    keys: Keys,
    /// Whose requests with the engine this one counts among (see [`Ticket::busy`]).
    client: IpAddr,
    phase: Phase,
    /// When it was let in.
    since: Instant,
    bytes: usize,
    answer: usize,
    /// Evicted: no longer counted in the slots, waiting for its task to end.
    evicted: bool,
    wake: Rc<Notify>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    conns: BTreeMap<u64, Entry>,
    /// Connections counted in the slots (not evicted), in all and per key.
    total: usize,
    narrow: HashMap<IpAddr, usize>,
    wide: HashMap<IpAddr, usize>,
    /// Body bytes reserved, evicted connections' included until their task ends.
    bytes: usize,
    /// Answer bytes reserved, the same way.
    answers: usize,
}

fn decrement(map: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    if let Some(n) = map.get_mut(&key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(&key);
        }
    }
}

impl Inner {
    fn holders(&self) -> Vec<Holder> {
        let now = Instant::now();
        self.conns
            .iter()
            .filter(|(_, e)| !e.evicted)
            .map(|(&id, e)| {
                let silent = e.phase == Phase::Fresh && now.saturating_duration_since(e.since) >= SILENT_GRACE;
                let phase = if silent { Phase::Silent } else { e.phase };
                Holder { id, wide: e.keys.wide, phase, bytes: e.bytes, answer: e.answer }
            })
            .collect()
    }

    fn used(&mut self, pool: Pool) -> &mut usize {
        match pool {
            Pool::Body => &mut self.bytes,
            Pool::Answer => &mut self.answers,
        }
    }

    /// Takes connection `id` out of the slots and tells its task to stop.
    fn evict(&mut self, id: u64) {
        let Some(e) = self.conns.get_mut(&id) else { return };
        if e.evicted {
            return;
        }
        e.evicted = true;
        e.wake.notify_one();
        let keys = e.keys;
        self.total = self.total.saturating_sub(1);
        decrement(&mut self.narrow, keys.narrow);
        decrement(&mut self.wide, keys.wide);
    }
}

/// The connections open now and what they hold.
pub(super) struct Registry {
    caps: Caps,
    inner: RefCell<Inner>,
    /// Woken when body bytes are given back.
    released: Notify,
    /// Woken when a connection's task ends.
    pub(super) closed: Notify,
}

impl Registry {
    pub(super) fn new(caps: Caps) -> Registry {
        Registry { caps, inner: RefCell::default(), released: Notify::new(), closed: Notify::new() }
    }

    /// Connection tasks still running, evicted ones included.
    pub(super) fn running(&self) -> usize {
        self.inner.borrow().conns.len()
    }

    /// Lets a connection from `ip` in, evicting another if every slot is held and the rules
    /// allow; or the refusal (429, 503).
    pub(super) fn admit(self: &Rc<Registry>, ip: IpAddr) -> Result<Ticket, Error> {
        let keys = keys(ip);
        let mut inner = self.inner.borrow_mut();
        let narrow = inner.narrow.get(&keys.narrow).copied().unwrap_or(0);
        let wide = inner.wide.get(&keys.wide).copied().unwrap_or(0);
        if admission(&self.caps, inner.total, narrow, wide)? {
            let victim = slot_victim(&inner.holders(), keys.wide)
                .ok_or_else(|| unavailable("serves as many connections as it can now"))?;
            inner.evict(victim);
        }
        let id = inner.next;
        inner.next += 1;
        let wake = Rc::new(Notify::new());
        let entry = Entry {
            keys,
            client: keys.wide,
            phase: Phase::Fresh,
            since: Instant::now(),
            bytes: 0,
            answer: 0,
            evicted: false,
            wake: wake.clone(),
        };
        inner.conns.insert(id, entry);
        inner.total += 1;
        *inner.narrow.entry(keys.narrow).or_insert(0) += 1;
        *inner.wide.entry(keys.wide).or_insert(0) += 1;
        Ok(Ticket { id, registry: self.clone(), wake })
    }
}

/// A connection's place in the [`Registry`], given back when dropped (after its buffers).
pub(super) struct Ticket {
    id: u64,
    registry: Rc<Registry>,
    wake: Rc<Notify>,
}

impl Ticket {
    pub(super) fn set_phase(&self, phase: Phase) {
        if let Some(e) = self.registry.inner.borrow_mut().conns.get_mut(&self.id) {
            e.phase = phase;
        }
    }

    /// Whether the registry has evicted this connection.
    pub(super) fn is_evicted(&self) -> bool {
        self.registry.inner.borrow().conns.get(&self.id).is_none_or(|e| e.evicted)
    }

    /// Ready once the connection has been evicted (at once if it was before this was called).
    pub(super) async fn evicted(&self) {
        self.wake.notified().await;
    }

    /// Hands this connection's request to the engine (phase [`Phase::Busy`]), unless its client
    /// has as many there as it may; then the refusal (429). The client is `client` (the address
    /// a trusted proxy's header names, counted by its wide key) when given, else the
    /// connection's address: behind a proxy every connection has the proxy's.
    pub(super) fn busy(&self, client: Option<IpAddr>) -> Result<(), Error> {
        let mut inner = self.registry.inner.borrow_mut();
        let Some(own) = inner.conns.get(&self.id).map(|e| e.keys.wide) else { return Ok(()) };
        let client = client.map_or(own, |ip| keys(ip).wide);
        let busy = inner.conns.values().filter(|e| !e.evicted && e.client == client && e.phase == Phase::Busy).count();
        busy_admission(&self.registry.caps, busy)?;
        if let Some(e) = inner.conns.get_mut(&self.id) {
            e.phase = Phase::Busy;
            e.client = client;
        }
        Ok(())
    }

    /// Hands this connection's request to the engine as a read it may hold open ([`Phase::Waiting`]):
    /// never refused for the client's busy requests, and takeable for a slot. The client is
    /// counted as [`Ticket::busy`] counts it.
    pub(super) fn waiting(&self, client: Option<IpAddr>) {
        let mut inner = self.registry.inner.borrow_mut();
        let Some(own) = inner.conns.get(&self.id).map(|e| e.keys.wide) else { return };
        if let Some(e) = inner.conns.get_mut(&self.id) {
            e.phase = Phase::Waiting;
            e.client = client.map_or(own, |ip| keys(ip).wide);
        }
    }

    /// Reserves `n` more bytes of the body budget for this connection, before they are
    /// allocated; or the refusal (503).
    pub(super) async fn reserve(&self, n: usize) -> Result<(), Error> {
        self.take(Pool::Body, n, false).await
    }

    /// Reserves the `n` bytes of an answer about to be written; or the refusal (503), unless
    /// `must` (the answer goes whether it fits or not: its request changed something).
    pub(super) async fn reserve_answer(&self, n: usize, must: bool) -> Result<(), Error> {
        self.take(Pool::Answer, n, must).await
    }

    /// Reserves `n` bytes of `pool`, taking them from a bigger holder if the budget is spent
    /// (see the module's rules). With `must`, or when nothing else is held, they are reserved
    /// even past the budget once no one can give them back.
    async fn take(&self, pool: Pool, n: usize, must: bool) -> Result<(), Error> {
        let registry = &self.registry;
        let budget = match pool {
            Pool::Body => registry.caps.body_budget,
            Pool::Answer => registry.caps.answer_budget,
        };
        let deadline = Instant::now() + RESERVE_WAIT;
        let mut evicted = false;
        loop {
            let released = registry.released.notified();
            {
                let mut inner = registry.inner.borrow_mut();
                let used = *inner.used(pool);
                let free = budget.saturating_sub(used);
                let mine = inner.conns.get(&self.id).map_or(0, |e| match pool {
                    Pool::Body => e.bytes,
                    Pool::Answer => e.answer,
                });
                // Past the budget only when forced, or when this connection is all there is
                // (a single body or answer larger than the whole budget).
                let alone = pool == Pool::Answer && used == mine;
                let forced = (must || pool == Pool::Answer) && evicted;
                if n <= free || alone || forced {
                    *inner.used(pool) += n;
                    if let Some(e) = inner.conns.get_mut(&self.id) {
                        match pool {
                            Pool::Body => e.bytes += n,
                            Pool::Answer => e.answer += n,
                        }
                    }
                    return Ok(());
                }
                if !evicted {
                    let wide = inner.conns.get(&self.id).map(|e| e.keys.wide);
                    let victims = match wide {
                        Some(wide) => budget_victims(&inner.holders(), wide, n, free, pool),
                        None => Vec::new(),
                    };
                    if victims.is_empty() && !must {
                        return Err(pool.refusal());
                    }
                    for v in victims {
                        inner.evict(v);
                    }
                    evicted = true;
                    // An answer is built already: waiting would hold it longer than the
                    // victims hold theirs (they end at once). Bodies wait, not yet allocated.
                    if must || pool == Pool::Answer {
                        continue;
                    }
                }
            }
            if timeout_at(deadline, released).await.is_err() {
                return Err(pool.refusal());
            }
        }
    }

    /// Gives back every body byte this connection holds (its request is answered).
    pub(super) fn release(&self) {
        self.give_back(Pool::Body);
    }

    /// Gives back the bytes of the answer this connection wrote.
    pub(super) fn release_answer(&self) {
        self.give_back(Pool::Answer);
    }

    fn give_back(&self, pool: Pool) {
        let mut inner = self.registry.inner.borrow_mut();
        let held = inner.conns.get_mut(&self.id).map_or(0, |e| match pool {
            Pool::Body => std::mem::take(&mut e.bytes),
            Pool::Answer => std::mem::take(&mut e.answer),
        });
        let used = inner.used(pool);
        *used = used.saturating_sub(held);
        drop(inner);
        if held > 0 {
            self.registry.released.notify_waiters();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.release();
        self.release_answer();
        {
            let mut inner = self.registry.inner.borrow_mut();
            if inner.conns.get(&self.id).is_some_and(|e| !e.evicted) {
                inner.evict(self.id);
            }
            inner.conns.remove(&self.id);
        }
        self.registry.closed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn h(id: u64, wide: &str, phase: Phase, bytes: usize) -> Holder {
        Holder { id, wide: ip(wide), phase, bytes, answer: 0 }
    }

    fn a(id: u64, wide: &str, phase: Phase, answer: usize) -> Holder {
        Holder { id, wide: ip(wide), phase, bytes: 0, answer }
    }

    #[test]
    fn ipv6_counts_by_64_and_48_ipv4_by_address() {
        let k = keys(ip("2001:db8:aaaa:bbbb:1:2:3:4"));
        assert_eq!((k.narrow, k.wide), (ip("2001:db8:aaaa:bbbb::"), ip("2001:db8:aaaa::")));
        // The eight /64s of one /61 are eight addresses but one site.
        let sites: std::collections::HashSet<IpAddr> =
            (0..8).map(|i| keys(ip(&format!("2001:db8:aaaa:bbb{i}::9"))).wide).collect();
        let subnets: std::collections::HashSet<IpAddr> =
            (0..8).map(|i| keys(ip(&format!("2001:db8:aaaa:bbb{i}::9"))).narrow).collect();
        assert_eq!((sites.len(), subnets.len()), (1, 8));
        let k = keys(ip("192.0.2.7"));
        assert_eq!((k.narrow, k.wide), (ip("192.0.2.7"), ip("192.0.2.7")));
        assert_eq!(keys(ip("::ffff:192.0.2.7")), k, "an IPv4 client on a dual-stack listener");
    }

    #[test]
    fn admission_caps_an_address_and_a_site_and_says_when_to_evict() {
        let caps =
            Caps { connections: 10, per_address: 3, per_site: 5, body_budget: 0, answer_budget: 0, busy_per_client: 0 };
        assert_eq!(admission(&caps, 0, 0, 0), Ok(false));
        assert_eq!(admission(&caps, 3, 3, 3).unwrap_err().code(), 429);
        assert_eq!(admission(&caps, 5, 1, 5).unwrap_err().code(), 429, "a site's /64s together");
        assert_eq!(admission(&caps, 10, 0, 0), Ok(true));
        let open = Caps { per_address: 0, per_site: 0, ..caps };
        assert_eq!(admission(&open, 9, 9, 9), Ok(false));
    }

    #[test]
    fn a_newcomer_evicts_from_the_biggest_holder_idle_ones_first_and_never_a_busy_one() {
        let mut held: Vec<Holder> = (0..6).map(|i| h(i, "10.0.0.9", Phase::Fresh, 0)).collect();
        held.push(h(6, "10.0.0.9", Phase::Busy, 0));
        held.push(h(7, "10.0.0.8", Phase::Idle, 0));
        held.push(h(8, "10.0.0.8", Phase::Head, 0));
        held.push(h(9, "10.0.0.9", Phase::Idle, 0));
        // Idle first (the biggest holder's), then the oldest silent one.
        assert_eq!(slot_victim(&held, ip("10.0.0.1")), Some(9));
        held.retain(|x| x.id != 9);
        assert_eq!(slot_victim(&held, ip("10.0.0.1")), Some(7), "idle goes first, whoever holds it");
        held.retain(|x| x.id != 7);
        assert_eq!(slot_victim(&held, ip("10.0.0.1")), Some(0));
        // Holding 1, 10.0.0.8 may take from 10.0.0.9, which holds 7.
        assert_eq!(slot_victim(&held, ip("10.0.0.8")), Some(0));
        // The biggest holder itself is refused; so is one only one behind.
        assert_eq!(slot_victim(&held, ip("10.0.0.9")), None);
        let pair =
            [h(0, "10.0.0.8", Phase::Fresh, 0), h(1, "10.0.0.9", Phase::Fresh, 0), h(2, "10.0.0.9", Phase::Fresh, 0)];
        assert_eq!(slot_victim(&pair, ip("10.0.0.8")), None, "2 is not 2 more than 1: no taking turns");
        // Busy connections are never evicted.
        let mut busy: Vec<Holder> = (0..5).map(|i| h(i, "10.0.0.9", Phase::Busy, 0)).collect();
        assert_eq!(slot_victim(&busy, ip("10.0.0.1")), None);
        // A read held open for mail is anyone's, after an idle one.
        busy.push(h(5, "10.0.0.7", Phase::Waiting, 0));
        assert_eq!(slot_victim(&busy, ip("10.0.0.7")), Some(5), "even its own client's");
        busy.push(h(6, "10.0.0.7", Phase::Idle, 0));
        assert_eq!(slot_victim(&busy, ip("10.0.0.1")), Some(6));
        // Many clients holding one slot each: one idle, or silent for a second, is anyone's; a
        // writing, reading or new one is not.
        let mut spread: Vec<Holder> = (0..4u8)
            .map(|i| {
                h(
                    u64::from(i),
                    &format!("10.0.1.{i}"),
                    [Phase::Fresh, Phase::Head, Phase::Body, Phase::Answer][usize::from(i)],
                    0,
                )
            })
            .collect();
        assert_eq!(slot_victim(&spread, ip("10.0.0.1")), None);
        spread.push(h(4, "10.0.1.4", Phase::Silent, 0));
        assert_eq!(slot_victim(&spread, ip("10.0.1.4")), Some(4));
        spread.push(h(5, "10.0.1.5", Phase::Idle, 0));
        assert_eq!(slot_victim(&spread, ip("10.0.0.1")), Some(5));
    }

    #[test]
    fn a_client_has_a_few_requests_with_the_engine_at_once() {
        let caps =
            Caps { connections: 10, per_address: 3, per_site: 5, body_budget: 0, answer_budget: 0, busy_per_client: 4 };
        assert_eq!(busy_admission(&caps, 3), Ok(()));
        assert_eq!(busy_admission(&caps, 4).unwrap_err().code(), 429);
        assert_eq!(busy_admission(&Caps { busy_per_client: 0, ..caps }, 400), Ok(()), "0: no cap");
    }

    #[test]
    fn behind_a_proxy_each_client_the_header_names_has_its_own_few_with_the_engine() {
        // Hostile review M1: keyed on the connection's address, everyone behind a proxy shared 8.
        let caps = Caps {
            connections: 100,
            per_address: 0,
            per_site: 0,
            body_budget: 0,
            answer_budget: 0,
            busy_per_client: 4,
        };
        let registry = Rc::new(Registry::new(caps));
        let proxy = ip("127.0.0.1");
        let tickets: Vec<Ticket> = (0..20).map(|_| registry.admit(proxy).unwrap()).collect();
        for (i, t) in tickets.iter().take(16).enumerate() {
            t.busy(Some(ip(&format!("192.0.2.{i}")))).expect("each client its own few");
        }
        for t in &tickets[16..20] {
            t.busy(Some(ip("198.51.100.7"))).unwrap();
        }
        let extra = registry.admit(proxy).unwrap();
        assert_eq!(extra.busy(Some(ip("198.51.100.7"))).unwrap_err().code(), 429, "one client still has 4");
        assert!(extra.busy(Some(ip("198.51.100.8"))).is_ok());
    }

    #[test]
    fn a_body_the_engine_holds_is_taken_like_one_being_read() {
        let mb = 1 << 20;
        // Issue 34 H1: bodies of requests waiting on the engine held the whole budget.
        let busy = [h(0, "10.0.0.9", Phase::Busy, 2 * mb), h(1, "10.0.0.9", Phase::Busy, mb)];
        assert_eq!(budget_victims(&busy, ip("10.0.0.1"), 100, 0, Pool::Body), vec![0]);
        assert!(budget_victims(&busy, ip("10.0.0.9"), 100, 0, Pool::Body).is_empty());
    }

    #[test]
    fn unsent_answers_go_from_the_biggest_holder_writing_them() {
        let kb = 1024;
        let held = [
            a(0, "10.0.0.9", Phase::Answer, 175 * kb),
            a(1, "10.0.0.9", Phase::Answer, 175 * kb),
            a(2, "10.0.0.9", Phase::Busy, 0),
            a(3, "10.0.0.8", Phase::Answer, 175 * kb),
        ];
        assert_eq!(budget_victims(&held, ip("10.0.0.1"), 10 * kb, 0, Pool::Answer), vec![0]);
        assert_eq!(budget_victims(&held, ip("10.0.0.8"), 10 * kb, 0, Pool::Answer), vec![0]);
        assert!(budget_victims(&held, ip("10.0.0.9"), 10 * kb, 0, Pool::Answer).is_empty());
        // Body bytes are not answer bytes.
        assert!(budget_victims(&held, ip("10.0.0.1"), 10 * kb, 0, Pool::Body).is_empty());
    }

    #[test]
    fn body_memory_goes_from_the_biggest_holder_to_a_smaller_one_only() {
        let mb = 1 << 20;
        let held = [
            h(0, "10.0.0.9", Phase::Body, 2 * mb),
            h(1, "10.0.0.9", Phase::Body, mb),
            h(2, "10.0.0.9", Phase::Answer, 2 * mb),
            h(3, "10.0.0.8", Phase::Body, 2 * mb),
        ];
        // A small request from a newcomer frees the biggest holder's largest body.
        assert_eq!(budget_victims(&held, ip("10.0.0.1"), 100, 0, Pool::Body), vec![0]);
        // More than one body when one is not enough, while the holder still holds more.
        assert_eq!(budget_victims(&held, ip("10.0.0.1"), 5 * mb / 2, 0, Pool::Body), vec![0, 1]);
        assert!(
            budget_victims(&held, ip("10.0.0.1"), 3 * mb, 0, Pool::Body).is_empty(),
            "it would hold no more than 3 MiB"
        );
        // 10.0.0.8 holds 2 MiB; wanting 64 KiB more, it may still take from 10.0.0.9 (5 MiB).
        assert_eq!(budget_victims(&held, ip("10.0.0.8"), 64 * 1024, 0, Pool::Body), vec![0]);
        // The biggest holder takes from no one.
        assert!(budget_victims(&held, ip("10.0.0.9"), 100, 0, Pool::Body).is_empty());
        // Two equal holders do not take from each other.
        let equal = [h(0, "10.0.0.9", Phase::Body, mb), h(1, "10.0.0.8", Phase::Body, mb)];
        assert!(budget_victims(&equal, ip("10.0.0.8"), 100, 0, Pool::Body).is_empty());
    }
}
