//! What a round of the churn part measured (`churn.rs`), and how rounds are summed up: each
//! lease's time from its create's answer to seen resolved, split by the apiserver's audit log
//! into the controller's part, the write and the watch's delivery.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::{median, ms, quantile};

/// A moment, by the monotonic clock (for the figures) and by the wall clock (to place it among the
/// apiserver's audit timestamps).
pub type At = (Instant, SystemTime);

pub fn now() -> At {
    (Instant::now(), SystemTime::now())
}

/// What one round measured.
pub struct Round {
    /// Create answered to seen resolved: p50, p99.
    pub total: (Duration, Duration),
    /// Leases not resolved within 60 s.
    pub missed: usize,
    /// Where each lease's time went, by the apiserver's audit log: create answered to the status
    /// write received (the watch's delivery to the controller and the controller's own time), the
    /// write itself, and written to seen resolved (the watch's delivery to the bench); p50s, p99s.
    pub parts: [(Duration, Duration); 3],
    /// Status writes per lease (conflicts included).
    pub writes: f64,
}

/// [`Round::parts`] and [`Round::writes`] of the leases `created`, from the apiserver's `audit`
/// log (every request of a ServiceAccount: sandcap's and the baselines', which use its token):
/// each lease's first successful status write.
pub fn parts(
    audit: &[Value],
    created: &HashMap<String, At>,
    resolved: &HashMap<String, At>,
) -> ([(Duration, Duration); 3], f64) {
    let stamp = |event: &Value, field: &str| -> Option<SystemTime> {
        let time: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime =
            serde_json::from_value(event[field].clone()).ok()?;
        Some(time.0.into())
    };
    let mut written: HashMap<&str, (SystemTime, SystemTime)> = HashMap::new();
    let mut writes = 0;
    for event in audit {
        let object = &event["objectRef"];
        let name = object["name"].as_str().unwrap_or_default();
        if event["verb"] != "patch" || object["subresource"] != "status" || !created.contains_key(name) {
            continue;
        }
        writes += 1;
        let first = event["responseStatus"]["code"] == 200 && !written.contains_key(name);
        if let (true, Some(received), Some(done)) =
            (first, stamp(event, "requestReceivedTimestamp"), stamp(event, "stageTimestamp"))
        {
            written.insert(name, (received, done));
        }
    }
    let since = |later: SystemTime, earlier: SystemTime| later.duration_since(earlier).unwrap_or_default();
    let mut parts: [Vec<Duration>; 3] = Default::default();
    for (name, created) in created {
        let (Some((received, done)), Some(seen)) = (written.get(name.as_str()), resolved.get(name)) else { continue };
        parts[0].push(since(*received, created.1));
        parts[1].push(since(*done, *received));
        parts[2].push(since(seen.1, *done));
    }
    let quantiles = parts.map(|mut part| {
        part.sort();
        if part.is_empty() { (Duration::ZERO, Duration::ZERO) } else { (quantile(&part, 0.5), quantile(&part, 0.99)) }
    });
    (quantiles, writes as f64 / created.len().max(1) as f64)
}

/// The medians of rounds' p50s and p99s, and the leases not resolved in all of them.
pub struct Medians {
    p50: Duration,
    p99: Duration,
    missed: usize,
}

impl Medians {
    pub fn of(rounds: &[Round]) -> Medians {
        Medians {
            p50: median(rounds.iter().map(|r| r.total.0).collect()),
            p99: median(rounds.iter().map(|r| r.total.1).collect()),
            missed: rounds.iter().map(|r| r.missed).sum(),
        }
    }

    /// "p50 / p99", and how many leases were not resolved, if any.
    pub fn show(&self) -> String {
        let missed = if self.missed > 0 { format!(" ({} not resolved)", self.missed) } else { String::new() };
        format!("{} / {}{missed}", ms(self.p50), ms(self.p99))
    }

    /// Both ratios to `baseline`'s.
    pub fn ratios(&self, baseline: &Medians) -> String {
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        format!("{:.2} / {:.2}", ratio(self.p50, baseline.p50), ratio(self.p99, baseline.p99))
    }
}

/// The medians of rounds' [`Round::parts`] and [`Round::writes`].
pub struct Parts {
    parts: [(Duration, Duration); 3],
    writes: f64,
}

impl Parts {
    pub fn of(rounds: &[Round]) -> Parts {
        let part = |i: usize| {
            let p50 = median(rounds.iter().map(|r| r.parts[i].0).collect());
            (p50, median(rounds.iter().map(|r| r.parts[i].1).collect()))
        };
        let mut writes: Vec<f64> = rounds.iter().map(|r| r.writes).collect();
        writes.sort_by(f64::total_cmp);
        Parts { parts: [part(0), part(1), part(2)], writes: writes[writes.len() / 2] }
    }

    /// "to the write, the write, to the watch (p50 / p99 each); writes per lease".
    pub fn show(&self) -> String {
        let [a, b, c] =
            self.parts.map(|(p50, p99)| format!("{:.1} / {:.1}", p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3));
        format!("{a}, {b}, {c}; {:.2}", self.writes)
    }
}
