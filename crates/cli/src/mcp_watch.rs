//! `nyx5 mcp`'s inbox resource (issue 38 §5): `nyx5://inbox` is the agent's mailbox as
//! `nyx5_inbox` reads it, and a client that subscribes to it is told
//! (`notifications/resources/updated`) when new mail arrives, instead of polling.
//!
//! A [`Watch`] is a thread that follows the mailbox as `nyx5 inbox --follow` does: each read
//! asks the house to hold an empty page open until mail arrives (`wait`, docs/SPEC.md §8), so
//! the notification goes out within a moment of the mail's arrival. It reads the pages raw (it
//! opens nothing and keeps nothing: the client reads the resource for that) and tells once per
//! arrival, after reading up to the newest envelope: mail already waiting when the client
//! subscribed is one notification, once. A read that brought nothing new and was not held open,
//! or failed, is followed by a pause that doubles up to 30 s (`nyx5_client::inbox::follow_pause`),
//! as every follower does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nyx5_proto::Value;
use nyx5_proto::json::obj;

use crate::mcp_tools::Setup;

/// The inbox's URI.
pub(crate) const INBOX_URI: &str = "nyx5://inbox";

/// What a watcher tells the client with: writes one JSON-RPC notification.
pub(crate) type Notify = Arc<dyn Fn(&Value) + Send + Sync>;

/// A running watcher: [`Watch::pause`] (unsubscribed) keeps the thread, idle, for a later
/// [`Watch::resume`]; dropping it ends the thread (after the read under way).
#[derive(Debug)]
pub(crate) struct Watch {
    paused: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
}

impl Watch {
    /// Follows the mailbox of `setup`'s agent in a thread of its own, telling `notify`.
    pub(crate) fn start(setup: Setup, notify: Notify) -> std::io::Result<Watch> {
        let (paused, gone) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let flags = (paused.clone(), gone.clone());
        std::thread::Builder::new()
            .name("nyx5-mcp-watch".into())
            .spawn(move || follow(&setup, &flags.0, &flags.1, &notify))?;
        Ok(Watch { paused, gone })
    }

    /// Tells nothing more until [`Watch::resume`].
    pub(crate) fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Tells again (mail that arrived meanwhile is one notification).
    pub(crate) fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::SeqCst);
    }
}

/// `notifications/resources/updated` for the inbox.
pub(crate) fn updated() -> Value {
    Value::Object(obj([
        ("jsonrpc", "2.0".into()),
        ("method", "notifications/resources/updated".into()),
        ("params", Value::Object(obj([("uri", INBOX_URI.into())]))),
    ]))
}

/// How often a paused watcher looks whether it was resumed or dropped.
const IDLE: Duration = Duration::from_millis(200);

fn follow(setup: &Setup, paused: &AtomicBool, gone: &AtomicBool, notify: &Notify) {
    use nyx5_client::inbox::{FOLLOW_HELD_MS, FOLLOW_WAIT_S, Followed, follow_pause, page_target};
    let (mut after, mut unseen, mut draining, mut pause, mut quick) = (None::<i64>, false, true, 0_u64, 0_u32);
    while !gone.load(Ordering::SeqCst) {
        if paused.load(Ordering::SeqCst) {
            std::thread::sleep(IDLE);
            continue;
        }
        // Mail seen while the client was unsubscribed: told as soon as it subscribes again.
        if unseen && !draining {
            unseen = false;
            notify(&updated());
        }
        let asked = std::time::Instant::now();
        let waited = !draining;
        let read = setup.ctx().and_then(|ctx| {
            let me = ctx.me()?;
            let wait = (!draining).then_some(FOLLOW_WAIT_S);
            let target = page_target(me.address.local(), Some(200), after, wait);
            ctx.call(&me, "GET", &target, None, "watching the mailbox").map(|(_, page)| page)
        });
        let before = after;
        match read {
            Ok(page) => {
                let newest = page
                    .get("envelopes")
                    .and_then(Value::as_array)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|i| i.as_object()?.get("seq")?.as_safe_integer())
                    .max();
                if let Some(seq) = newest {
                    after = Some(after.map_or(seq, |a| a.max(seq)));
                    unseen = unseen || after != before;
                }
                // Read on past a full page at once, but only while it brings new mail.
                draining = page.get("next").is_some_and(|n| *n != Value::Null) && after != before;
                if !draining && unseen && !paused.load(Ordering::SeqCst) && !gone.load(Ordering::SeqCst) {
                    unseen = false;
                    notify(&updated());
                }
                let held = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX);
                let read = Followed { advanced: after != before, held_ms: waited.then_some(held), quick };
                pause = follow_pause(read, pause, 0);
                quick = if held < FOLLOW_HELD_MS { quick.saturating_add(1) } else { 0 };
            }
            Err(f) => {
                if f.code() != crate::error::EXIT_NETWORK && !matches!(f.status(), Some(429 | 503)) {
                    eprintln!("nyx5 mcp: watching the inbox: {}", f.one_line());
                }
                pause = follow_pause(Followed { advanced: false, held_ms: Some(0), quick }, pause, 0);
            }
        }
        // In short steps, so that a drop or a pause is heard.
        let until = std::time::Instant::now() + Duration::from_millis(pause);
        while std::time::Instant::now() < until && !gone.load(Ordering::SeqCst) {
            std::thread::sleep(IDLE.min(until.saturating_duration_since(std::time::Instant::now())));
        }
    }
}
