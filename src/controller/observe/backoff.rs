//! When the observer writes a name again after the apiserver refused its write (a quota, the
//! webhook, an admission policy): per name, as controller-runtime's per-item rate limiter does,
//! after [`FIRST`], doubling with each refusal in a row, at most [`MAX`]. A name whose write
//! succeeds, or that no pass asks to write any more, starts again from nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::controller::capacity::give_back;

/// The delay after a first refusal.
pub const FIRST: Duration = Duration::from_millis(5);
/// The longest delay.
pub const MAX: Duration = Duration::from_secs(1000);
/// Refusals in a row after which the provider gets a Warning Event (once per run of refusals).
pub const REPORT_AFTER: u32 = 3;

/// Refusals in a row, and when the name may be written again, by namespace and name.
#[derive(Debug, Default)]
pub struct Backoff {
    names: HashMap<(String, String), (u32, Instant)>,
}

impl Backoff {
    /// Whether `key` may be written at `now`.
    pub fn due(&self, key: &(String, String), now: Instant) -> bool {
        self.names.get(key).is_none_or(|(_, next)| *next <= now)
    }

    /// Counts a refusal at `now`; the refusals in a row and the delay until the next write.
    pub fn refused(&mut self, key: (String, String), now: Instant) -> (u32, Duration) {
        let (count, next) = self.names.entry(key).or_insert((0, now));
        *count = count.saturating_add(1);
        let delay = delay(*count);
        *next = now + delay;
        (*count, delay)
    }

    pub fn written(&mut self, key: &(String, String)) {
        self.names.remove(key);
    }

    /// Forgets every name but those `wanted` (the names the last pass meant to write).
    pub fn retain(&mut self, wanted: impl Fn(&(String, String)) -> bool) {
        self.names.retain(|key, _| wanted(key));
        give_back(&mut self.names);
    }
}

/// The delay after `refusals` in a row: [`FIRST`] doubled for each but the first, at most [`MAX`].
fn delay(refusals: u32) -> Duration {
    let doublings = refusals.saturating_sub(1).min(31);
    FIRST.saturating_mul(1 << doublings).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_name_waits_from_milliseconds_doubling_to_the_cap_and_a_write_resets_it() {
        let (mut backoff, now) = (Backoff::default(), Instant::now());
        let key = ("team-a".to_string(), "run-1".to_string());
        assert!(backoff.due(&key, now), "a name never refused is due");
        let delays: Vec<Duration> = (0..5).map(|_| backoff.refused(key.clone(), now).1).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80].map(Duration::from_millis));
        assert!(!backoff.due(&key, now + Duration::from_millis(79)));
        assert!(backoff.due(&key, now + Duration::from_millis(80)));
        let (count, last) = (0..40).map(|_| backoff.refused(key.clone(), now)).last().unwrap();
        assert_eq!((count, last), (45, MAX), "at most the cap, however long it is refused");
        backoff.written(&key);
        assert_eq!(backoff.refused(key.clone(), now), (1, FIRST), "a write starts it again");
        backoff.retain(|_| false);
        assert!(backoff.due(&key, now), "a name no pass writes is forgotten");
    }
}
