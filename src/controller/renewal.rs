//! When the leader last renewed its Lease, as its own client saw it, and the fence that follows
//! from it: the leader writes only while its last renewal is younger than the renew deadline.
//!
//! kube-lease-manager renews on its own schedule and keeps the outcome to itself, and a renewal
//! that hangs or fails over and over never ends `changed()`. So the leader election's client is
//! stamped instead: every write it makes that the apiserver accepts (the election writes nothing
//! but its Lease) records the instant it was *sent*, which is never later than the `renewTime` the
//! apiserver stored. A standby may take the Lease `duration` after that `renewTime`; the fence
//! closes the renew deadline (`leader::Timing::renew_deadline`, client-go's 10 s) after the send,
//! so well before.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use tokio::time::Instant;
use tower::{Layer, Service};

/// The last accepted write of the election's client.
#[derive(Clone, Debug, Default)]
pub struct RenewalClock(Arc<Mutex<Option<Instant>>>);

impl RenewalClock {
    pub fn last(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn record(&self, sent: Instant) {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Responses may come back out of order; the newest send is what counts.
        if last.is_none_or(|last| last < sent) {
            *last = Some(sent);
        }
    }

    /// The layer that stamps this clock, for the election's client.
    pub fn layer(&self) -> StampLayer {
        StampLayer(self.clone())
    }
}

/// Who may write status now.
#[derive(Clone, Debug)]
pub enum Fence {
    /// No leader election (`--leader-elect=false`): this replica is the only writer.
    Open,
    /// The leader: it may write while its last renewal is younger than `deadline`, and not at all
    /// once `closed` (it stepped down).
    Lease { clock: RenewalClock, deadline: Duration, closed: tokio_util::sync::CancellationToken },
}

impl Fence {
    /// Whether a write sent now is this replica's to send.
    pub fn holds(&self) -> bool {
        match self {
            Fence::Open => true,
            Fence::Lease { clock, deadline, closed } => {
                !closed.is_cancelled() && clock.last().is_some_and(|last| last.elapsed() < *deadline)
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct StampLayer(RenewalClock);

impl<S> Layer<S> for StampLayer {
    type Service = Stamp<S>;

    fn layer(&self, inner: S) -> Stamp<S> {
        Stamp { inner, clock: self.0.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct Stamp<S> {
    inner: S,
    clock: RenewalClock,
}

impl<S, B, R> Service<Request<B>> for Stamp<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let write = request.method() != Method::GET;
        let sent = Instant::now();
        let answer = self.inner.call(request);
        let clock = self.clock.clone();
        Box::pin(async move {
            let answer = answer.await;
            if write && answer.as_ref().is_ok_and(|answer| answer.status().is_success()) {
                clock.record(sent);
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tokio_util::sync::CancellationToken;
    use tower::ServiceExt;

    use super::*;

    async fn send(clock: &RenewalClock, method: Method, status: u16) {
        let service = tower::service_fn(move |_: Request<()>| async move {
            Ok::<_, Infallible>(Response::builder().status(status).body(()).unwrap())
        });
        let request = Request::builder().method(method).body(()).unwrap();
        clock.layer().layer(service).oneshot(request).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn only_an_accepted_write_renews_and_the_fence_closes_at_the_deadline_or_on_stepping_down() {
        let clock = RenewalClock::default();
        let closed = CancellationToken::new();
        let fence = Fence::Lease { clock: clock.clone(), deadline: Duration::from_secs(10), closed: closed.clone() };
        assert!(!fence.holds(), "nothing renewed yet");
        send(&clock, Method::GET, 200).await;
        send(&clock, Method::PATCH, 409).await;
        send(&clock, Method::PATCH, 503).await;
        assert_eq!(clock.last(), None, "reads and refused writes renew nothing");
        send(&clock, Method::PATCH, 200).await;
        let renewed = clock.last().expect("an accepted write renews");
        assert!(fence.holds());
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(fence.holds(), "within the deadline");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!fence.holds(), "closed at the deadline");
        send(&clock, Method::PATCH, 200).await;
        assert!(clock.last() > Some(renewed) && fence.holds());
        closed.cancel();
        assert!(!fence.holds(), "closed once the leader stepped down");
        assert!(Fence::Open.holds());
    }

    #[test]
    fn a_late_answer_to_an_older_write_does_not_turn_the_clock_back() {
        let clock = RenewalClock::default();
        let now = Instant::now();
        clock.record(now);
        clock.record(now - Duration::from_secs(3));
        assert_eq!(clock.last(), Some(now));
    }
}
