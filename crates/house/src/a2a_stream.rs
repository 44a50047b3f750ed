//! A2A streaming (issue 39; docs/SPEC.md "A2A gateway", Streaming): `SendStreamingMessage`
//! and `SubscribeToTask` answer Server-Sent Events that follow one task until it ends or waits
//! for its caller.
//!
//! The engine answers whole bodies, so a stream is an answer plus a [`Follow`]: the answer's
//! body is the first event (the task as it is), and the runtime then calls
//! [`crate::House::follow`] again and again, writing each chunk it gives, until it gives none.
//! A `Follow` is a plain value (which task, what the stream last saw, until when), so the
//! runtime holds no borrow of the house between calls: `nyx5 serve` writes the chunks as an
//! HTTP/1.1 chunked body, the Worker as a `ReadableStream`.
//!
//! Each call waits on the live bell ([`crate::live`]) under the task's own name
//! ([`nyx5_rules::a2a::stream_key`]), which
//! the task's writers ring, and rechecks the task as a mailbox read does; it answers the events
//! of a change ([`nyx5_rules::a2a::stream_events`]), or a keep-alive comment when nothing moved
//! for [`BEAT_MS`], or nothing once the stream is over. A stream lasts at most [`life`]: on the
//! Worker 20 s of rereads every second (one invocation's D1 queries), under `nyx5 serve` ten
//! minutes. A reread reads where the task is and when it moved, from an index; the task is read
//! whole only when it moved. A client whose stream ended with the task still open subscribes
//! again. Streams are bounded as waiting reads are: a few per task, a few thousand per process;
//! past that the stream answers its first event and ends.

use nyx5_proto::json::Value;
use nyx5_proto::{Error, Refusal};
use nyx5_rules::a2a as rules;

pub use nyx5_rules::a2a::Follow;

use crate::http::Response;
use crate::ports::{Db, Net};
use crate::view::{Core, Post, view};

/// The streams, over one call's borrows.
pub struct Streams<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Streams);

/// How long a quiet stream goes without a byte: a comment keeps proxies from closing it.
pub const BEAT_MS: i64 = 15_000;
/// The longest a stream lasts under `nyx5 serve`, whose bell rings (its waits cost no queries).
pub const SERVE_LIFE_MS: i64 = 600_000;
/// How often a stream under `nyx5 serve` rereads its task without being rung.
pub const SERVE_RECHECK_MS: i64 = 2_000;

/// The longest a stream lasts on the Worker, whose bell does not ring: every wait is a reread.
pub const WORKER_LIFE_MS: i64 = 20_000;
/// How often a stream on the Worker rereads its task: 20 rereads in its life, one more per
/// keep-alive and one when the task moves; with the call's own (about 12 at most) within the 50
/// queries a Worker invocation may make on the Free plan.
pub const WORKER_RECHECK_MS: i64 = 1_000;

/// How long a stream lasts and how often it rereads its task: under `nyx5 serve` (`ringing`)
/// [`SERVE_LIFE_MS`] every [`SERVE_RECHECK_MS`], on the Worker [`WORKER_LIFE_MS`] every
/// [`WORKER_RECHECK_MS`].
pub fn life(ringing: bool) -> (i64, i64) {
    if ringing { (SERVE_LIFE_MS, SERVE_RECHECK_MS) } else { (WORKER_LIFE_MS, WORKER_RECHECK_MS) }
}

/// The first event of a stream over task `t` and its follow, unless the task already ended or
/// waits for its caller (then the one event is the whole answer).
pub fn open(id: &Value, t: &rules::Task, now: i64, ringing: bool) -> Response {
    let first = rules::sse_event(id, Value::Object(nyx5_proto::json::obj([("task", t.to_wire(None, true))])));
    let resp = Response::bytes(200, "text/event-stream", first).with_header("cache-control", "no-store");
    if t.state.ends_stream() {
        return resp;
    }
    let (life, every) = life(ringing);
    // A reread per recheck, one more after each keep-alive (a call starts with one), and the
    // task read whole when it moved.
    let reads = life / every + life / BEAT_MS + 2;
    resp.following(Follow {
        local: t.agent.local().to_owned(),
        task: t.id.clone(),
        rpc_id: id.canonical_string(),
        seen: (t.state, t.updated.0),
        until: now.saturating_add(life),
        reads,
        every,
        done: false,
    })
}

impl<D: Db, N: Net> Streams<'_, D, N> {
    /// The next chunk of stream `f`: the events of the task's change, a keep-alive comment, or
    /// `None` once the stream is over (the task ended or waits, the stream's life or reads are
    /// spent, the bell closed, or the task is gone).
    pub async fn follow(&self, f: &mut Follow) -> Option<Vec<u8>> {
        if f.done {
            return None;
        }
        let id = Value::parse_str(&f.rpc_id).unwrap_or(Value::Null);
        let start = self.now().millis();
        let beat = start.saturating_add(BEAT_MS).min(f.until);
        let mut listener = self.post.bell.listen(&rules::stream_key(&f.task), start, f.until);
        loop {
            let now = self.now().millis();
            if now >= f.until || f.reads <= 0 {
                f.done = true;
                return None;
            }
            if now >= beat {
                return Some(rules::SSE_KEEPALIVE.to_vec());
            }
            if let Some(l) = listener.as_mut() {
                l.arm();
            }
            f.reads -= 1;
            match self.changed(f).await {
                Ok(None) => {}
                Ok(Some(t)) => {
                    let (events, ends) = rules::stream_events(&id, f.seen, &t);
                    f.seen = (t.state, t.updated.0);
                    f.done = ends;
                    if !events.is_empty() {
                        return Some(events);
                    }
                }
                Err(e) => {
                    f.done = true;
                    return Some(rules::sse_error(&id, &e));
                }
            }
            // No bell to wait on (its bounds) or a clock that cannot wait: the stream ends.
            let now = self.now().millis();
            let nap = u64::try_from(f.every.min(beat - now).max(0)).unwrap_or(0);
            let (Some(l), Some(sleep)) = (listener.as_ref(), self.ground.clock.sleep(nap)) else {
                f.done = true;
                return None;
            };
            if l.wait(Some(sleep)).await == crate::live::Woke::Closed {
                f.done = true;
                return None;
            }
        }
    }

    /// The task, read whole, if it moved since the stream last told it; else nothing. Each
    /// reread reads only where the task is and when it moved (an index, not the task's text).
    async fn changed(&self, f: &mut Follow) -> Result<Option<rules::Task>, Error> {
        let gone = || Refusal::UnknownA2aTask.because(format!("task {} is gone", f.task));
        let (state, at) = crate::store::a2a::moved_at(self.db, &f.local, &f.task).await?.ok_or_else(gone)?;
        if rules::State::parse(&state).is_some_and(|s| (s, at) == f.seen) {
            return Ok(None);
        }
        f.reads -= 1;
        let row = crate::store::a2a::get(self.db, &f.local, &f.task).await?.ok_or_else(gone)?;
        crate::a2a_tasks::task_of(&row, &self.config.domain).map(Some)
    }
}
