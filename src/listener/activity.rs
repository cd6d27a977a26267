//! What one connection is doing: its open requests, when the last one ended, and whether a
//! request head is arriving. The listener closes a connection by these, not by bytes: HTTP/2
//! pings, window updates or a trickle of headers keep no connection alive, and an idle HTTP/1.1
//! connection waits for its next request under the idle timeout, not the header timeout (which
//! hyper's own header timer would apply between keep-alive requests too). An HTTP/1 head has the
//! header timeout from its first byte, the first request's head included.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

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
    /// The connection speaks HTTP/2, where bytes between requests are frames (pings, window
    /// updates, the preface), not the start of a head.
    http2: AtomicBool,
    /// Woken when a deadline may have moved earlier or become due (a head's first byte, a
    /// request's end), so that [`Activity::quiet`] never sleeps past it.
    changed: Notify,
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
        state.changed.notify_one();
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
            changed: Notify::new(),
        }))
    }

    /// Known before any request when TLS negotiated `h2`: its preface and settings are then not
    /// the start of a head.
    pub(super) fn speaks_http2(&self) {
        self.0.http2.store(true, Ordering::Relaxed);
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
        let head = (heard != 0 && !state.http2.load(Ordering::Relaxed)).then(|| state.at(heard) + deadlines.header);
        Some(match state.ended.load(Ordering::Relaxed) {
            0 => head.map_or(state.origin + deadlines.first_request, |head| {
                head.min(state.origin + deadlines.first_request)
            }),
            ended => head.unwrap_or(state.at(ended) + deadlines.idle),
        })
    }

    /// Returns once the connection is past its deadline with no request open.
    pub(super) async fn quiet(&self, deadlines: Deadlines) {
        loop {
            // `notify_one` keeps a wake-up for a waiter yet to come: none is lost between
            // reading the deadline and waiting.
            let changed = self.0.changed.notified();
            match self.deadline(deadlines) {
                Some(deadline) if Instant::now() >= deadline => return,
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline.into()) => {}
                        () = changed => {}
                    }
                }
                // A request is bounded by the request timeout; its end wakes this.
                None => changed.await,
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
            state.changed.notify_one();
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
        // Before any request and any byte: the first-request deadline.
        assert_eq!(after(&activity, activity.deadline(DEADLINES)), Some(DEADLINES.first_request));
        // The first head's first byte: the header timeout from it, as for any later head.
        activity.heard();
        let head = after(&activity, activity.deadline(DEADLINES)).unwrap();
        assert!(head >= DEADLINES.header && head < DEADLINES.first_request, "{head:?}");
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
    fn http2_frames_are_not_a_head() {
        let activity = Activity::new();
        activity.speaks_http2();
        activity.heard();
        assert_eq!(after(&activity, activity.deadline(DEADLINES)), Some(DEADLINES.first_request), "the preface");
        drop(activity.begin(true));
        let ended = after(&activity, activity.idle_since()).unwrap();
        activity.heard();
        assert_eq!(after(&activity, activity.deadline(DEADLINES)), Some(ended + DEADLINES.idle), "a ping");
    }

    /// The deadline a waiting connection sleeps towards moves earlier when a head starts: the
    /// wait must follow it, not sleep out the idle timeout.
    #[tokio::test]
    async fn a_head_starting_while_idle_wakes_the_wait() {
        let deadlines = Deadlines { header: Duration::from_millis(50), ..DEADLINES };
        let activity = Activity::new();
        let busy = activity.begin(false);
        let quiet = tokio::spawn({
            let activity = activity.clone();
            async move { activity.quiet(deadlines).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(busy);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!quiet.is_finished(), "idle for 120 s yet");
        activity.heard();
        tokio::time::timeout(Duration::from_secs(2), quiet).await.expect("closed at the head's deadline").unwrap();
    }
}
