//! Two futures awaited together: on the Worker, two requests to D1 in flight at once, so a
//! route pays the latency of one round trip for both (issue 36 §5). Polled in order, `a` first,
//! so a runtime that never waits (SQLite) runs them one after the other, deterministically.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

/// Awaits `a` and `b` together and answers both outputs.
pub async fn both<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut got_a, mut got_b) = (None, None);
    poll_fn(|cx| {
        if got_a.is_none()
            && let Poll::Ready(v) = a.as_mut().poll(cx)
        {
            got_a = Some(v);
        }
        if got_b.is_none()
            && let Poll::Ready(v) = b.as_mut().poll(cx)
        {
            got_b = Some(v);
        }
        match (got_a.take(), got_b.take()) {
            (Some(x), Some(y)) => Poll::Ready((x, y)),
            (x, y) => {
                (got_a, got_b) = (x, y);
                Poll::Pending
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::both;
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    /// Pending once, then ready: a request in flight.
    struct Once(bool);
    impl Future for Once {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn both_start_before_either_ends_and_both_outputs_come_back() {
        let log = RefCell::new(Vec::new());
        let step = |name: &'static str, out: u32| {
            let log = &log;
            async move {
                log.borrow_mut().push(("start", name));
                Once(false).await;
                log.borrow_mut().push(("end", name));
                out
            }
        };
        let mut fut = std::pin::pin!(both(step("a", 1), step("b", 2)));
        let mut cx = Context::from_waker(Waker::noop());
        let out = loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                break v;
            }
        };
        assert_eq!(out, (1, 2));
        assert_eq!(*log.borrow(), [("start", "a"), ("start", "b"), ("end", "a"), ("end", "b")]);
    }
}
