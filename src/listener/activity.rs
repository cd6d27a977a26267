//! What one connection is doing: its open requests, when the last one ended, and whether a
//! request head is arriving. The listener closes a connection by these, not by bytes: HTTP/2
//! pings, window updates or a trickle of headers keep no connection alive, and an idle HTTP/1.1
//! connection waits for its next request under the idle timeout, not the header timeout (which
//! hyper's own header timer would apply between keep-alive requests too).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Clone)]
pub(super) struct Activity(Arc<State>);

struct State {
    /// When the connection was accepted.
    origin: Instant,
    open: AtomicUsize,
    /// Milliseconds after `origin` at which the last request ended, plus one; 0 before any.
    ended: AtomicU64,
    /// Milliseconds after `origin`, plus one, at which bytes arrived while no request was open:
    /// the start of a request head; 0 when none is arriving.
    heard: AtomicU64,
    /// The connection's requests are HTTP/2, where bytes between requests are frames (pings,
    /// window updates), not the start of a head.
    http2: AtomicBool,
}

/// When a connection that has no open request is to be closed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadlines {
    /// From the accept to the first request (the handshake included).
    pub first_request: Duration,
    /// From the first byte of an HTTP/1 request head to the whole head.
    pub header: Duration,
    /// From the end of a request to the start of the next.
    pub idle: Duration,
}

/// An open request of an [`Activity`]; it ends when dropped (answered, or its connection gone).
pub(super) struct Busy(Activity);

impl Drop for Busy {
    fn drop(&mut self) {
        let state = &self.0.0;
        state.ended.store(state.stamp(), Ordering::Relaxed);
        state.heard.store(0, Ordering::Relaxed);
        state.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl State {
    fn stamp(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1)
    }

    fn at(&self, stamp: u64) -> Instant {
        self.origin + Duration::from_millis(stamp - 1)
    }
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity(Arc::new(State {
            origin: Instant::now(),
            open: AtomicUsize::new(0),
            ended: AtomicU64::new(0),
            heard: AtomicU64::new(0),
            http2: AtomicBool::new(false),
        }))
    }

    pub(super) fn begin(&self, http2: bool) -> Busy {
        let state = &self.0;
        state.open.fetch_add(1, Ordering::Relaxed);
        state.heard.store(0, Ordering::Relaxed);
        if http2 {
            state.http2.store(true, Ordering::Relaxed);
        }
        Busy(self.clone())
    }

    /// Since when the connection has had no open request; `None` while one is open.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        let state = &self.0;
        if state.open.load(Ordering::Relaxed) > 0 {
            return None;
        }
        Some(match state.ended.load(Ordering::Relaxed) {
            0 => state.origin,
            ended => state.at(ended),
        })
    }

    /// When the connection is to be closed if nothing changes; `None` while a request is open
    /// (bounded by the request timeout instead).
    fn deadline(&self, deadlines: Deadlines) -> Option<Instant> {
        let state = &self.0;
        if state.open.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let heard = state.heard.load(Ordering::Relaxed);
        Some(match state.ended.load(Ordering::Relaxed) {
            0 => state.origin + deadlines.first_request,
            _ if heard != 0 && !state.http2.load(Ordering::Relaxed) => state.at(heard) + deadlines.header,
            ended => state.at(ended) + deadlines.idle,
        })
    }

    /// Returns once the connection is past its deadline with no request open.
    pub(super) async fn quiet(&self, deadlines: Deadlines) {
        loop {
            match self.deadline(deadlines) {
                Some(deadline) if Instant::now() >= deadline => return,
                Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                // A request is bounded by the request timeout; look again after it.
                None => tokio::time::sleep(deadlines.idle).await,
            }
        }
    }

    /// `io`, telling this activity when bytes arrive between requests.
    pub(super) fn watch<S>(&self, io: S) -> Watched<S> {
        Watched { io, activity: self.clone() }
    }

    fn heard(&self) {
        let state = &self.0;
        if state.open.load(Ordering::Relaxed) == 0 && state.heard.load(Ordering::Relaxed) == 0 {
            state.heard.store(state.stamp(), Ordering::Relaxed);
        }
    }
}

/// A connection's byte stream (after TLS), reporting reads to its [`Activity`].
pub(super) struct Watched<S> {
    io: S,
    activity: Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.heard();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINES: Deadlines = Deadlines {
        first_request: Duration::from_secs(10),
        header: Duration::from_secs(5),
        idle: Duration::from_secs(120),
    };

    fn after(activity: &Activity, deadline: Option<Instant>) -> Option<Duration> {
        deadline.map(|d| d.duration_since(activity.0.origin))
    }

    #[test]
    fn each_phase_has_its_own_deadline() {
        let activity = Activity::new();
        // Before any request, bytes or not: the first-request deadline.
        activity.heard();
        assert_eq!(after(&activity, activity.deadline(DEADLINES)), Some(Duration::from_secs(10)));
        let busy = activity.begin(false);
        assert_eq!(activity.deadline(DEADLINES), None, "an open request");
        assert_eq!(activity.idle_since(), None);
        drop(busy);
        // Between keep-alive requests: the idle timeout, not the header timeout.
        let ended = after(&activity, activity.idle_since()).unwrap();
        assert_eq!(after(&activity, activity.deadline(DEADLINES)), Some(ended + DEADLINES.idle));
        // A head arriving: the header timeout from its first byte.
        activity.heard();
        let deadline = after(&activity, activity.deadline(DEADLINES)).unwrap();
        assert!(deadline >= ended + DEADLINES.header && deadline < ended + DEADLINES.idle, "{deadline:?}");
    }

    #[test]
    fn http2_frames_between_requests_are_not_a_head() {
        let activity = Activity::new();
        drop(activity.begin(true));
        let ended = after(&activity, activity.idle_since()).unwrap();
        activity.heard();
        assert_eq!(after(&activity, activity.deadline(DEADLINES)), Some(ended + DEADLINES.idle));
    }
}
