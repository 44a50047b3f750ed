//! The running house: one thread, tokio's current-thread runtime inside a `LocalSet` (the
//! engine is `!Send`, single-threaded as in workerd). hyper serves HTTP/1.1, one local task per
//! connection sharing an `Rc` of the house; one more task works the queue every tick and right
//! after any answer that asks for a kick; signals stop it all gracefully.

use std::cell::Cell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use nyx5_house::Response as HouseResponse;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::ServedHouse;
use super::http::{to_house, to_hyper};

/// Most connections served at once; more are closed as soon as they are accepted.
const MAX_CONNECTIONS: usize = 1024;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
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
    /// Wakes the ticker; a kick while a tick runs leaves a permit, so one more tick follows.
    kick: Notify,
    /// Set when the server stops: the ticker ends after the tick under way.
    stopping: Cell<bool>,
}

/// Serves until a signal, then stops accepting, lets open requests finish (up to [`GRACE`])
/// and returns.
pub(super) async fn serve(house: ServedHouse, listener: TcpListener, every: Duration, mut signals: Signals) {
    let shared = Rc::new(Shared { house, kick: Notify::new(), stopping: Cell::new(false) });
    let ticker = tokio::task::spawn_local(tick_loop(shared.clone(), every));
    let graceful = GracefulShutdown::new();
    let open = Rc::new(Cell::new(0usize));
    let why = loop {
        tokio::select! {
            why = signals.next() => break why,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    if open.get() >= MAX_CONNECTIONS {
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    open.set(open.get() + 1);
                    let conn = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service(shared.clone()));
                    let conn = graceful.watch(conn);
                    let open = open.clone();
                    tokio::task::spawn_local(async move {
                        // Errors here are the client's (reset, timed out, bad HTTP): hyper has
                        // already answered what could be answered.
                        let _ = conn.await;
                        open.set(open.get().saturating_sub(1));
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    eprintln!("nyx5 serve: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    };
    eprintln!("nyx5 serve: {why}, stopping");
    drop(listener);
    shared.stopping.set(true);
    shared.kick.notify_one();
    if tokio::time::timeout(GRACE, graceful.shutdown()).await.is_err() {
        eprintln!("nyx5 serve: requests still open after {} s; closing them", GRACE.as_secs());
    }
    // A tick cut short is safe: its jobs are leased and the next start retries them.
    let _ = tokio::time::timeout(GRACE, ticker).await;
}

/// The hyper service: every request to the engine; a kick wakes the ticker.
fn service(
    shared: Rc<Shared>,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = hyper::Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<hyper::Response<Full<Bytes>>, Infallible>>,
> {
    service_fn(move |req| {
        let shared = shared.clone();
        async move {
            let resp: HouseResponse = match to_house(req).await {
                Ok(req) => shared.house.handle(req).await,
                Err(e) => HouseResponse::error(&e),
            };
            if resp.kick {
                shared.kick.notify_one();
            }
            send_pushes(&shared);
            Ok(to_hyper(resp))
        }
    })
}

/// Sends waiting webhook pushes in a task of their own, so neither the answer nor the next tick
/// waits for a webhook.
fn send_pushes(shared: &Rc<Shared>) {
    if shared.house.has_pushes() {
        let shared = shared.clone();
        tokio::task::spawn_local(async move { shared.house.send_pushes().await });
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
            send_pushes(&shared);
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
