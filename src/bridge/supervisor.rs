//! The worker kept running: started, restarted with exponential backoff whenever it ends, and the
//! state the probe endpoint answers from (the cached answer while a worker is initialized).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Budgets;
use super::worker::{self, Ended, Spawn};

/// What the probe is answered from.
#[derive(Clone, Debug)]
pub enum State {
    /// A worker was started and has not answered `initialize` yet.
    Starting { restarts: u64 },
    /// The worker's `InitializeResult`, with the plugin's identity: the probe's `result`.
    Ready { result: Arc<RawValue>, restarts: u64 },
    /// The last worker ended; the next starts at `next_start`.
    Down { reason: Arc<str>, next_start: Instant, restarts: u64 },
}

impl State {
    pub fn restarts(&self) -> u64 {
        match self {
            State::Starting { restarts } | State::Ready { restarts, .. } | State::Down { restarts, .. } => *restarts,
        }
    }
}

/// Exponential backoff: `min`, doubling, at most `max`; back to `min` once a worker has been
/// initialized for `max` (so a worker that fails at once, each time, waits ever longer, and one
/// that served a while before it failed is restarted quickly).
#[derive(Clone, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff { min, max, next: min }
    }

    /// The delay before the next start, after a worker that was initialized for `served` (none:
    /// never initialized).
    pub fn after(&mut self, served: Option<Duration>) -> Duration {
        if served.is_some_and(|s| s >= self.max) {
            self.next = self.min;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }
}

/// Runs workers until `stop`, publishing the state in `state`.
pub async fn supervise(spawn: Spawn, budgets: Budgets, state: watch::Sender<State>, stop: CancellationToken) {
    let mut backoff = Backoff::new(budgets.backoff_min, budgets.backoff_max);
    let mut restarts = 0u64;
    loop {
        state.send_replace(State::Starting { restarts });
        let mut ready_at = None;
        let ended = worker::run(&spawn, &budgets, &stop, |result| {
            ready_at = Some(Instant::now());
            state.send_replace(State::Ready { result: result.into(), restarts });
            tracing::info!(restarts, "worker initialized; its answer is served to the probe");
        })
        .await;
        if matches!(ended, Ended::Stopped) || stop.is_cancelled() {
            return;
        }
        let delay = backoff.after(ready_at.map(|at: Instant| at.elapsed()));
        restarts += 1;
        tracing::warn!(reason = %ended, restart_in = %humantime::format_duration(delay), restarts, "worker ended; restarting");
        let reason: Arc<str> = ended.to_string().into();
        state.send_replace(State::Down { reason, next_start: Instant::now() + delay, restarts });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_resets_after_a_worker_that_served() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let delays: Vec<u64> = (0..8).map(|_| backoff.after(None).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.after(Some(Duration::from_secs(5))), Duration::from_secs(60), "served too briefly");
        assert_eq!(backoff.after(Some(Duration::from_secs(60))), Duration::from_secs(1), "served a while");
        assert_eq!(backoff.after(None), Duration::from_secs(2));
    }
}
