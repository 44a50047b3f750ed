//! The running house: one thread, tokio's current-thread runtime inside a `LocalSet` (the
//! engine is `!Send`, single-threaded as in workerd). Each connection is one local task speaking
//! HTTP/1.1 (`conn.rs`) and sharing an `Rc` of the house; one more task works the queue every
//! tick and right after any answer that asks for a kick; signals stop it all gracefully. At most
//! `max_connections` connections are served at once, `max_per_ip` from one address and
//! `max_per_site` from one IPv6 /48; when every slot is held, a newcomer takes one from the
//! client holding the most (`share`), else it is answered 503 and closed.

use std::cell::Cell;
use std::net::IpAddr;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use super::assets::Assets;
use nyx5_house::http::{Request as HouseRequest, Response as HouseResponse};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout_at};

use super::ServedHouse;
use super::conn::{self, Handler, Limits, Stop};
use super::share::{Caps, Registry};

/// How long a stop waits for open requests, and for a tick under way, to finish.
const GRACE: Duration = Duration::from_secs(5);
/// Most queue ticks in a row while every one of them finds a full batch of due jobs.
const MAX_TICKS_IN_A_ROW: usize = 16;

/// SIGINT and SIGTERM, caught from before the house says it is ready.
pub(super) struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    pub(super) fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals { interrupt: signal(SignalKind::interrupt())?, terminate: signal(SignalKind::terminate())? })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for either signal and says which.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// What the connection tasks and the ticker share.
struct Shared {
    house: ServedHouse,
    /// The browser client's files (`--app`), empty without it.
    assets: Assets,
    /// Wakes the ticker; a kick while a tick runs leaves a permit, so one more tick follows.
    kick: Notify,
    /// Wakes the pusher (webhook pushes wait for the answer or the tick to be over).
    push: Notify,
    /// Set when the server stops: the ticker ends after the tick under way.
    stopping: Cell<bool>,
}

impl Shared {
    fn wake_pusher(&self) {
        if self.house.mailbox().has_pushes() {
            self.push.notify_one();
        }
    }
}

impl Handler for Shared {
    /// Every request to the engine; a kick wakes the ticker.
    async fn handle(&self, req: HouseRequest) -> HouseResponse {
        if let Some(resp) = self.assets.answer(&req) {
            return resp;
        }
        let resp = self.house.handle(req).await;
        if resp.kick {
            self.kick.notify_one();
        }
        self.wake_pusher();
        resp
    }

    async fn follow(&self, f: &mut nyx5_house::a2a_stream::Follow) -> Option<Vec<u8>> {
        self.house.follow(f).await
    }
}

/// Serves the house until a signal, then stops accepting, lets open requests finish (up to
/// [`GRACE`]) and the tick under way, and returns.
pub(super) async fn serve(
    house: ServedHouse,
    assets: Assets,
    listener: TcpListener,
    every: Duration,
    limits: Limits,
    mut signals: Signals,
) {
    let shared =
        Rc::new(Shared { house, assets, kick: Notify::new(), push: Notify::new(), stopping: Cell::new(false) });
    let ticker = tokio::task::spawn_local(tick_loop(shared.clone(), every));
    let pusher = tokio::task::spawn_local(push_loop(shared.clone()));
    let signalled = async {
        let why = signals.next().await;
        eprintln!("nyx5 serve: {why}, stopping");
        // Reads waiting for mail answer now, so that open requests end within the grace.
        shared.house.bell().close();
    };
    run(shared.clone(), listener, limits, signalled).await;
    shared.stopping.set(true);
    shared.kick.notify_one();
    shared.push.notify_one();
    // A tick cut short is safe: its jobs are leased and the next start retries them. Pushes
    // still waiting are dropped: the mailbox stays authoritative.
    let _ = tokio::time::timeout(GRACE, ticker).await;
    let _ = tokio::time::timeout(GRACE, pusher).await;
}

/// Serves connections with `handler` until `stop_when` is ready; then stops accepting, closes
/// idle connections, lets requests under way finish (up to [`GRACE`]) and answers what
/// `stop_when` gave.
pub(super) async fn run<H: Handler + 'static, T>(
    handler: Rc<H>,
    listener: TcpListener,
    limits: Limits,
    stop_when: impl Future<Output = T>,
) -> T {
    let limits = Rc::new(limits);
    let stop = Rc::new(Stop::default());
    let registry = Rc::new(Registry::new(Caps {
        connections: limits.max_connections,
        per_address: limits.max_per_ip,
        per_site: limits.max_per_site,
        body_budget: limits.body_budget,
        answer_budget: limits.answer_budget,
        busy_per_client: limits.max_busy_per_client,
    }));
    let mut stop_when = pin!(stop_when);
    let why = loop {
        tokio::select! {
            why = &mut stop_when => break why,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => admit(stream, peer.ip(), &handler, &limits, &stop, &registry),
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    eprintln!("nyx5 serve: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    };
    drop(listener);
    stop.stop();
    let deadline = Instant::now() + GRACE;
    loop {
        let closed = registry.closed.notified();
        if registry.running() == 0 {
            break;
        }
        if timeout_at(deadline, closed).await.is_err() {
            eprintln!("nyx5 serve: requests still open after {} s; closing them", GRACE.as_secs());
            break;
        }
    }
    why
}

/// Serves a new connection on its own task, or refuses it (429 over a client's caps, 503 when
/// every slot is held and none may be taken for it; see `share`): the refusal is written if
/// the socket takes it at once, and it closes.
fn admit<H: Handler + 'static>(
    stream: TcpStream,
    ip: IpAddr,
    handler: &Rc<H>,
    limits: &Rc<Limits>,
    stop: &Rc<Stop>,
    registry: &Rc<Registry>,
) {
    let ticket = match registry.admit(ip) {
        Ok(ticket) => ticket,
        Err(e) => {
            let _ = stream.try_write(&conn::refusal(&e));
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let (handler, limits, stop) = (handler.clone(), limits.clone(), stop.clone());
    tokio::task::spawn_local(async move {
        conn::serve(stream, handler.as_ref(), &limits, &stop, &ticket).await;
        // The connection and its buffers are gone; now its place and its memory are given back.
        drop(ticket);
    });
}

/// Sends webhook pushes whenever an answer or a tick left some, in a task of its own, so neither
/// the answer nor the next tick waits for a webhook.
async fn push_loop(shared: Rc<Shared>) {
    loop {
        shared.push.notified().await;
        if shared.stopping.get() {
            return;
        }
        shared.house.mailbox().send_pushes().await;
    }
}

/// Works the queue every `every` and whenever kicked, until the server stops. One ticker, so
/// ticks never overlap here (the engine's leases would make that safe anyway).
async fn tick_loop(shared: Rc<Shared>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = shared.kick.notified() => {}
        }
        if shared.stopping.get() {
            return;
        }
        // Let the answer that kicked us go out before the tick takes the thread.
        tokio::task::yield_now().await;
        let full = usize::try_from(shared.house.config.tick_batch).unwrap_or(usize::MAX);
        for _ in 0..MAX_TICKS_IN_A_ROW {
            let done = shared.house.tick().await;
            shared.wake_pusher();
            if let Ok(Some(why)) = done.as_ref().map(|r| r.settle_error.as_deref()) {
                eprintln!("nyx5 serve: settling mailbox shard hand-offs: {why}");
            }
            match done {
                Ok(report) if report.attempted >= full && !shared.stopping.get() => continue,
                Ok(_) => break,
                Err(e) => {
                    eprintln!("nyx5 serve: queue tick: {e}");
                    break;
                }
            }
        }
    }
}
