//! The live inbox (issue 38 §5, docs/decisions/0073-live-inbox.md): a mailbox read that finds
//! nothing may wait for mail, and this process's writers wake it.
//!
//! [`Bell`] is per process (per isolate on the Worker): a generation count per mailbox someone
//! waits on. The services that write mail batch through [`batch`], which names the mailboxes a
//! committed batch inserted into ([`Bell::arrived`]); the house rings the names once its entry
//! point is done (`House::handle`, `House::tick`, an email event). A waiter ([`Listener`]) notes
//! the generation *before* it reads, and waits for a change or for its clock's sleep (the
//! recheck), whichever comes first: mail written between its read and its wait still wakes it,
//! and mail another process wrote (another isolate, a shard's hand-off) is found at the next
//! recheck.
//!
//! A bell that does not ring (the Worker: `Config::live_bell`) only bounds the waiters, who
//! find mail at their rechecks.
//!
//! Bounded: at most [`MAX_PER_MAILBOX`] waiters on one mailbox and [`MAX_WAITERS`] in all; past
//! that a read answers at once. Each waiter holds one slot with its deadline and at most one
//! waker; a slot whose waiter was never dropped (a runtime that abandons a request without
//! dropping its future) is taken back [`SLOT_GRACE_MS`] after its deadline. Closing the bell
//! (a server that stops) wakes every waiter, and no new one waits.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Poll, Waker};

use nyx5_proto::vecmap::{VecMap, VecSet};

use crate::ports::{Db, Place, PortError, Stmt};

/// Most waiters on one mailbox in one process: a client follows its inbox with one; a few more
/// let a page and a browser tab follow it too.
pub const MAX_PER_MAILBOX: usize = 4;
/// Most waiters in one process.
pub const MAX_WAITERS: usize = 4096;
/// The longest a read may wait (`wait`, seconds): below the idle timeouts of the proxies a
/// client may stand behind (commonly 30 s), and Cloudflare's 100 s.
pub const MAX_WAIT_S: i64 = 25;
/// How often a waiter reads its mailbox again without being rung, for mail another process
/// wrote (on the Worker, any mail: its bell does not ring), unless its wait is longer than
/// [`MAX_RECHECKS`] of these: on D1 one indexed read of two rows, so a client that follows its
/// inbox all day costs about 350,000 rows read (Free plan: 5 million a day; decision 0073), and
/// sees mail at most half a second after it arrived.
pub const RECHECK_MS: i64 = 500;
/// Most rechecks of one waiting read, each one query (and the page's when mail is there): with
/// the token's, the first read's and the answer's, a read stays within the 50 queries a Worker
/// invocation may make on the Free plan, on a sharded house too. A longer wait rechecks less
/// often (25 s: every 625 ms).
pub const MAX_RECHECKS: i64 = 40;
/// How long after its deadline a waiter's slot is taken back if its waiter is never dropped.
pub const SLOT_GRACE_MS: i64 = 10_000;

/// The time between a waiting read's rechecks, for a wait of `wait_ms`.
pub fn recheck_every(wait_ms: i64) -> i64 {
    RECHECK_MS.max(wait_ms.saturating_add(MAX_RECHECKS - 1) / MAX_RECHECKS)
}

/// One waiter's place: its id, until when it may wait, and its waker once it has waited.
#[derive(Debug)]
struct Slot {
    id: u64,
    until: i64,
    waker: Option<Waker>,
}

/// What one mailbox's waiters share.
#[derive(Debug, Default)]
struct Ring {
    generation: u64,
    slots: Vec<Slot>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Whether writes ring at all (`Config::live_bell`): off, waiters recheck alone.
    ringing: bool,
    rings: VecMap<String, Ring>,
    waiters: usize,
    next_id: u64,
    /// Mailboxes written since the last [`Bell::ring_arrived`].
    arrived: VecSet<String>,
    closed: bool,
}

impl Inner {
    /// Takes back the slots of `local` (or of every mailbox) past their deadline and grace.
    fn reclaim(&mut self, local: Option<&str>, now: i64) {
        let mut freed = 0;
        for (name, ring) in self.rings.iter_mut() {
            if local.is_some_and(|l| l != name.as_str()) {
                continue;
            }
            let before = ring.slots.len();
            ring.slots.retain(|s| s.until.saturating_add(SLOT_GRACE_MS) >= now);
            freed += before - ring.slots.len();
        }
        self.waiters = self.waiters.saturating_sub(freed);
        self.rings.retain(|_, r| !r.slots.is_empty());
    }
}

/// The process's bell: who waits on which mailbox, and which were written.
#[derive(Debug)]
pub struct Bell(RefCell<Inner>);

impl Bell {
    /// A bell whose writes wake waiters (`ringing`), or one that only bounds them.
    pub fn new(ringing: bool) -> Bell {
        Bell(RefCell::new(Inner { ringing, ..Inner::default() }))
    }
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// The mailbox was written (or may have been): read it again.
    Rung,
    /// The recheck's time passed: read it again, for mail another process wrote.
    Slept,
    /// The bell closed: answer now.
    Closed,
}

/// Runs `stmts` as one batch on `db`, and once it committed notes every mailbox it inserted
/// mail into (a statement run in a mailbox that inserts into `mailbox`), for whoever waits on
/// it. The services that write mail batch through this, so no way mail arrives goes unheard.
pub async fn batch<D: Db>(db: &D, bell: &Bell, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
    let inserts: Vec<(usize, String)> = stmts
        .iter()
        .enumerate()
        .filter(|(_, s)| is_mail_insert(s.sql))
        .filter_map(|(i, s)| match &s.place {
            Place::Mailbox(local) => Some((i, local.clone())),
            _ => None,
        })
        .collect();
    let done = db.batch(stmts).await?;
    // Only an insert that wrote a row (not a duplicate, a block, a full mailbox) is mail.
    for (i, local) in &inserts {
        if done.get(*i).is_some_and(|n| *n > 0) {
            bell.arrived(local);
        }
    }
    Ok(done)
}

/// Whether a statement puts mail into a mailbox (every store function that does writes this).
pub fn is_mail_insert(sql: &str) -> bool {
    sql.contains("INSERT INTO mailbox (")
}

impl Bell {
    /// Notes that `local`'s mailbox was written; the house rings it when its entry point ends.
    /// Only mailboxes someone waits on are remembered.
    pub fn arrived(&self, local: &str) {
        if let Ok(mut inner) = self.0.try_borrow_mut()
            && inner.ringing
            && inner.rings.contains_key(local)
        {
            inner.arrived.insert(local.to_owned());
        }
    }

    /// Wakes the waiters of every mailbox written since the last call.
    pub fn ring_arrived(&self) {
        let Ok(mut inner) = self.0.try_borrow_mut() else { return };
        let arrived = std::mem::take(&mut inner.arrived);
        for local in arrived.iter() {
            if let Some(ring) = inner.rings.get_mut(local.as_str()) {
                ring.generation = ring.generation.wrapping_add(1);
                ring.slots.iter_mut().filter_map(|s| s.waker.take()).for_each(Waker::wake);
            }
        }
    }

    /// Wakes every waiter and lets none wait again: the server stops.
    pub fn close(&self) {
        let Ok(mut inner) = self.0.try_borrow_mut() else { return };
        inner.closed = true;
        for (_, ring) in inner.rings.iter_mut() {
            ring.slots.iter_mut().filter_map(|s| s.waker.take()).for_each(Waker::wake);
        }
    }

    /// A waiter on `local`'s mailbox that may wait until `until` (the house's time, `now`
    /// now), or `None` when the bounds are reached or the bell is closed (the read then answers
    /// at once). Arm it before each read.
    pub fn listen(&self, local: &str, now: i64, until: i64) -> Option<Listener<'_>> {
        let mut inner = self.0.try_borrow_mut().ok()?;
        if inner.closed {
            return None;
        }
        inner.reclaim(Some(local), now);
        if inner.waiters >= MAX_WAITERS {
            inner.reclaim(None, now);
        }
        if inner.waiters >= MAX_WAITERS || inner.rings.get(local).is_some_and(|r| r.slots.len() >= MAX_PER_MAILBOX) {
            return None;
        }
        inner.waiters += 1;
        inner.next_id = inner.next_id.wrapping_add(1);
        let id = inner.next_id;
        let ring = inner.rings.entry(local.to_owned()).or_default();
        ring.slots.push(Slot { id, until, waker: None });
        let seen = ring.generation;
        Some(Listener { bell: self, local: local.to_owned(), id, seen })
    }

    /// How many wait now (all mailboxes).
    pub fn waiting(&self) -> usize {
        self.0.try_borrow().map_or(0, |i| i.waiters)
    }

    fn generation(&self, local: &str) -> (u64, bool) {
        self.0.try_borrow().map_or((0, true), |i| (i.rings.get(local).map_or(0, |r| r.generation), i.closed))
    }
}

/// One waiter on one mailbox; dropping it lets another wait.
#[derive(Debug)]
pub struct Listener<'b> {
    bell: &'b Bell,
    local: String,
    id: u64,
    seen: u64,
}

impl Listener<'_> {
    /// Notes the mailbox's generation now: call it just before reading the mailbox.
    pub fn arm(&mut self) {
        self.seen = self.bell.generation(&self.local).0;
    }

    /// Waits until the mailbox is rung after [`Listener::arm`], `sleep` ends, or the bell closes.
    /// Without a `sleep` (a clock that cannot wait) answers [`Woke::Slept`] at once.
    pub async fn wait(&self, sleep: Option<Pin<Box<dyn Future<Output = ()> + '_>>>) -> Woke {
        let Some(mut sleep) = sleep else { return Woke::Slept };
        poll_fn(|cx| {
            let (generation, closed) = self.bell.generation(&self.local);
            if closed {
                return Poll::Ready(Woke::Closed);
            }
            if generation != self.seen {
                return Poll::Ready(Woke::Rung);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Woke::Slept);
            }
            // One waker per waiter, the latest; none where nothing rings.
            if let Ok(mut inner) = self.bell.0.try_borrow_mut()
                && inner.ringing
                && let Some(slot) =
                    inner.rings.get_mut(self.local.as_str()).and_then(|r| r.slots.iter_mut().find(|s| s.id == self.id))
                && !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
            {
                slot.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for Listener<'_> {
    fn drop(&mut self) {
        let Ok(mut inner) = self.bell.0.try_borrow_mut() else { return };
        let (removed, empty) = match inner.rings.get_mut(self.local.as_str()) {
            Some(ring) => {
                let before = ring.slots.len();
                ring.slots.retain(|s| s.id != self.id);
                (before - ring.slots.len(), ring.slots.is_empty())
            }
            None => (0, false),
        };
        inner.waiters = inner.waiters.saturating_sub(removed);
        if empty {
            inner.rings.remove(self.local.as_str());
            inner.arrived.remove(self.local.as_str());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use std::task::{Context, Wake};

    struct Count(std::sync::atomic::AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn never() -> Option<Pin<Box<dyn Future<Output = ()>>>> {
        Some(Box::pin(std::future::pending::<()>()))
    }

    fn poll<F: Future>(f: Pin<&mut F>, woken: &Arc<Count>) -> Poll<F::Output> {
        let waker = Waker::from(woken.clone());
        f.poll(&mut Context::from_waker(&waker))
    }

    fn woken(c: &Arc<Count>) -> usize {
        c.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn a_write_after_the_arm_wakes_the_waiter_once_its_entry_point_ends() {
        let bell = Bell::new(true);
        let count = Arc::new(Count(0.into()));
        let mut l = bell.listen("ana", 0, 1_000).unwrap();
        l.arm();
        // Written after the arm, before the wait: still heard.
        bell.arrived("ana");
        bell.arrived("bo"); // nobody waits on bo: not remembered
        let mut wait = Box::pin(l.wait(never()));
        assert!(poll(wait.as_mut(), &count).is_pending(), "not rung until the entry point ends");
        bell.ring_arrived();
        assert_eq!(woken(&count), 1, "the parked waiter is woken");
        assert_eq!(poll(wait.as_mut(), &count), Poll::Ready(Woke::Rung));
        drop(wait);
        // Rung before it waits again (after the arm): ready at its first poll.
        l.arm();
        bell.arrived("ana");
        bell.ring_arrived();
        let mut wait = Box::pin(l.wait(never()));
        assert_eq!(woken(&count), 1, "nobody parked to wake");
        assert_eq!(poll(wait.as_mut(), &count), Poll::Ready(Woke::Rung));
        drop(wait);
        // Another mailbox's mail leaves it waiting; its own sleep ends it.
        l.arm();
        bell.arrived("bo");
        bell.ring_arrived();
        let mut wait = Box::pin(l.wait(Some(Box::pin(std::future::ready(())))));
        assert_eq!(poll(wait.as_mut(), &count), Poll::Ready(Woke::Slept));
    }

    #[test]
    fn waiters_are_bounded_released_reclaimed_and_closed() {
        let bell = Bell::new(true);
        let held: Vec<_> = (0..MAX_PER_MAILBOX).map(|_| bell.listen("ana", 0, 1_000).unwrap()).collect();
        assert!(bell.listen("ana", 0, 1_000).is_none(), "one mailbox holds at most {MAX_PER_MAILBOX}");
        assert!(bell.listen("bo", 0, 1_000).is_some(), "another mailbox still may");
        assert_eq!(bell.waiting(), MAX_PER_MAILBOX);
        // Never dropped (a runtime that abandons requests): taken back after deadline and grace.
        std::mem::forget(held);
        assert!(bell.listen("ana", 1_000 + SLOT_GRACE_MS, 20_000).is_none(), "not before the grace");
        let l = bell.listen("ana", 1_001 + SLOT_GRACE_MS, 20_000).unwrap();
        assert_eq!(bell.waiting(), 1, "the forgotten slots were taken back");
        drop(l);
        assert_eq!(bell.waiting(), 0);
        assert!(bell.0.borrow().rings.is_empty(), "a mailbox nobody waits on is forgotten");
        let l = bell.listen("ana", 0, 1_000).unwrap();
        let count = Arc::new(Count(0.into()));
        let mut wait = Box::pin(l.wait(never()));
        assert!(poll(wait.as_mut(), &count).is_pending());
        bell.close();
        assert_eq!(woken(&count), 1);
        assert_eq!(poll(wait.as_mut(), &count), Poll::Ready(Woke::Closed));
        assert!(bell.listen("bo", 0, 1_000).is_none(), "a closed bell takes no new waiter");
    }

    /// A waiter keeps one waker, however often it is polled and by how many tasks in turn; a
    /// bell that does not ring keeps none.
    #[test]
    fn a_waiter_holds_one_waker_and_a_silent_bell_none() {
        for ringing in [true, false] {
            let bell = Bell::new(ringing);
            let keeper = bell.listen("ana", 0, 1_000).unwrap();
            let mut keep = Box::pin(keeper.wait(never()));
            for _ in 0..100 {
                // A new task each time (a new waker).
                assert!(poll(keep.as_mut(), &Arc::new(Count(0.into()))).is_pending());
                let short = bell.listen("ana", 0, 1_000).unwrap();
                let mut w = Box::pin(short.wait(never()));
                assert!(poll(w.as_mut(), &Arc::new(Count(0.into()))).is_pending());
            }
            let inner = bell.0.borrow();
            let wakers = inner.rings.get("ana").map_or(0, |r| r.slots.iter().filter(|s| s.waker.is_some()).count());
            assert_eq!(wakers, usize::from(ringing), "ringing: {ringing}");
            assert_eq!(inner.waiters, 1);
        }
    }

    #[test]
    fn a_long_wait_rechecks_at_most_forty_times() {
        assert_eq!(recheck_every(20_000), RECHECK_MS);
        assert_eq!(recheck_every(25_000), 625);
        for wait in [1, 999, 20_000, 20_001, 25_000] {
            assert!(wait / recheck_every(wait) <= MAX_RECHECKS, "{wait}");
        }
    }

    #[test]
    fn a_batch_names_the_mailboxes_it_inserted_into_once_committed() {
        struct Fails(bool);
        impl Db for Fails {
            async fn query(&self, _: Stmt) -> Result<Vec<crate::ports::Row>, PortError> {
                Ok(vec![])
            }
            async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, PortError> {
                let mut done = vec![1; stmts.len()];
                if let Some(last) = done.last_mut() {
                    *last = 0;
                }
                if self.0 { Err(PortError::Failed("no".into())) } else { Ok(done) }
            }
            async fn write_returning(&self, _: Stmt) -> Result<Vec<crate::ports::Row>, PortError> {
                Ok(vec![])
            }
        }
        let bell = Bell::new(true);
        let _a = bell.listen("ana", 0, 1_000).unwrap();
        let _b = bell.listen("bo", 0, 1_000).unwrap();
        let _c = bell.listen("cy", 0, 1_000).unwrap();
        let stmts = || {
            vec![
                Stmt::new("INSERT INTO mailbox (seq) SELECT 1", vec![]).in_mailbox("ana"),
                Stmt::new("UPDATE mailbox SET acked_at = 1", vec![]).in_mailbox("bo"),
                // An insert that wrote nothing (the fake answers 0 for the last statement).
                Stmt::new("INSERT INTO mailbox (seq) SELECT 1 WHERE false", vec![]).in_mailbox("cy"),
            ]
        };
        let run = |db: &Fails| {
            let mut cx = Context::from_waker(Waker::noop());
            match std::pin::pin!(batch(db, &bell, stmts())).poll(&mut cx) {
                Poll::Ready(v) => v,
                Poll::Pending => panic!("ready at once"),
            }
        };
        assert!(run(&Fails(true)).is_err());
        assert!(bell.0.borrow().arrived.is_empty(), "a batch that failed names nothing");
        run(&Fails(false)).unwrap();
        let arrived: Vec<String> = bell.0.borrow().arrived.iter().cloned().collect();
        assert_eq!(arrived, ["ana"], "only an insert into a mailbox that wrote a row");
    }

    /// Every statement the store writes mail with is one [`batch`] hears.
    #[test]
    fn every_mail_insert_of_the_store_is_heard() {
        use crate::store;
        let held = store::queue::Held { envelope_id: "e", domain: "d", lease: 1 };
        let quota = store::mailbox::Quota { max_envelopes: 1, max_bytes: 1 };
        for s in [
            store::mailbox::insert("ana", "e", "x@y", "{}", 1, quota),
            store::libro::deliver_local("ana", "e", "x@y", "{}", 1, "[]"),
            store::libro::deliver_counted("ana", "e", "x@y", "{}", 1, "[]", (quota, store::libro::Lane::NONE)),
            store::queue::insert_notice(held, "ana", "n", "postmaster@y", "{}", 1),
        ] {
            assert!(is_mail_insert(s.sql), "{}", s.sql);
            assert_eq!(s.place, Place::Mailbox("ana".into()));
        }
    }
}
