//! Revoke at once, grant again only when stable: how a Service worker's verified methods are
//! damped, so that an endpoint that flaps (a Pod whose readiness toggles, a replica failing under
//! load) cannot rewrite every lease of its provider at each flip (docs/controller.md, "Flapping
//! endpoints").
//!
//! What the endpoints agree on narrows the grant at once. A grant that widens it again after a
//! narrowing is held back until the serving endpoints and what they agree on have stayed unchanged
//! for a window that starts at [`WINDOW_MIN`] and doubles with each narrowing, up to the probe
//! interval; the count starts again once they have stayed unchanged for [`QUIET_INTERVALS`]
//! intervals. Nothing here ever grants more than the endpoints
//! agree on: a held grant is the intersection of the last grant and the agreement.

use std::time::{Duration, Instant};

/// The first window a grant after a narrowing waits for.
pub const WINDOW_MIN: Duration = Duration::from_secs(5);
/// After this many probe intervals (at least [`WINDOW_MIN`] each) with the endpoints unchanged, a
/// provider's flaps are forgotten.
const QUIET_INTERVALS: u32 = 2;

/// The damping state of one provider's grant, kept by the provider table while this replica leads
/// (a new leader starts with none, and grants what it verifies).
#[derive(Clone, Debug, Default)]
pub struct Settling {
    /// The methods granted last (`None`: nothing verified); unset before the first decision.
    granted: Option<Option<Vec<String>>>,
    /// Narrowings since the endpoints were last calm for [`QUIET_INTERVALS`] probe intervals.
    flaps: u32,
    /// What the endpoints looked like last (who serves and what they agree on, hashed), and since when.
    seen: Option<(u64, Instant)>,
}

/// What may be granted now.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The methods granted (`None`: nothing verified).
    pub methods: Option<Vec<String>>,
    /// Set when part of the agreement is held back: until when, and after how many narrowings.
    pub held: Option<Held>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub until: Instant,
    pub window: Duration,
    pub flaps: u32,
}

impl Held {
    /// What status says of a held grant.
    pub fn message(&self) -> String {
        format!(
            "granting again once the serving endpoints and their answers stay unchanged for {} s (narrowed {} time(s) recently)",
            self.window.as_secs(),
            self.flaps
        )
    }
}

impl Settling {
    /// Decides what to grant of `agreed` (what the endpoints agree on now; `None`: nothing), where
    /// `serving` identifies who serves and what each answered, at `now`, for a probe `interval`.
    pub fn decide(&mut self, agreed: Option<Vec<String>>, serving: u64, now: Instant, interval: Duration) -> Decision {
        if self.seen.map(|(s, _)| s) != Some(serving) {
            self.seen = Some((serving, now));
        }
        let stable_since = self.seen.map_or(now, |(_, since)| since);
        let Some(granted) = self.granted.take() else {
            self.granted = Some(agreed.clone());
            return Decision { methods: agreed, held: None };
        };
        // Calm for long enough: the flaps before are forgotten.
        if now.duration_since(stable_since) >= interval.max(WINDOW_MIN) * QUIET_INTERVALS {
            self.flaps = 0;
        }
        if narrows(&granted, &agreed) {
            self.flaps = self.flaps.saturating_add(1);
        }
        let window = window(self.flaps, interval);
        let decision = if self.flaps > 0 && narrows(&agreed, &granted) && now.duration_since(stable_since) < window {
            let held = Held { until: stable_since + window, window, flaps: self.flaps };
            Decision { methods: intersection(&granted, &agreed), held: Some(held) }
        } else {
            Decision { methods: agreed, held: None }
        };
        self.granted = Some(decision.methods.clone());
        decision
    }
}

/// How long the endpoints must stay unchanged for a grant after `flaps` narrowings: doubling
/// from [`WINDOW_MIN`], at most the probe interval.
fn window(flaps: u32, interval: Duration) -> Duration {
    let doubled = WINDOW_MIN.saturating_mul(1 << flaps.saturating_sub(1).min(20));
    doubled.min(interval.max(WINDOW_MIN))
}

/// Whether `to` grants less than `from` does.
fn narrows(from: &Option<Vec<String>>, to: &Option<Vec<String>>) -> bool {
    match (from, to) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(from), Some(to)) => from.iter().any(|m| !to.contains(m)),
    }
}

fn intersection(a: &Option<Vec<String>>, b: &Option<Vec<String>>) -> Option<Vec<String>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.iter().filter(|m| b.contains(m)).cloned().collect()),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
