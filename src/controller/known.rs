//! What sandcap knows of each object besides the object itself: its failed reconciles in a row,
//! what the audit found of its generation and the judgment started early for it. Each kind's table
//! alone holds it (the lease table, `cache/leases.rs`, and the provider table,
//! `cache/providers.rs`), next to the rest of what is kept of the object, and forgets it with the
//! object: an object deleted and re-created (a uid of its own) starts afresh. The gauges
//! `sandcap_nonconforming_objects` (both kinds, as findings come and go), `sandcap_providers` and
//! `sandcap_lease_capabilities` (as statuses are published) are counted here.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::audit::{Finding, Pending};
use crate::metrics::{CapabilityLabels, KindLabels, Metrics, ReadyLabels};
use sandcap_core::vocabulary::{Capability, Kind, Reason};

const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What is known of one object.
#[derive(Default)]
pub struct Known {
    failures: u32,
    /// The audit's finding, and of which generation.
    judged: Option<(Option<i64>, Arc<Finding>)>,
    /// A judgment under way for the reconcile of this generation
    /// ([`super::cache::Leases::judge_early`]).
    early: Option<(Option<i64>, Pending)>,
    /// The verdict its published status counts in.
    verdict: Verdict,
}

/// What a published status counts in: a provider's `Ready` (status, reason), a lease's
/// capabilities with their reasons (two bytes each: kept for every lease).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Verdict {
    #[default]
    None,
    Ready(Box<(String, String)>),
    Capabilities(Box<[(Capability, Reason)]>),
}

/// The gauges verdicts count in (`sandcap_providers`, `sandcap_lease_capabilities`).
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    providers: Family<ReadyLabels, Gauge>,
    capabilities: Family<CapabilityLabels, Gauge>,
}

impl Verdicts {
    pub fn of(metrics: &Metrics) -> Verdicts {
        Verdicts { providers: metrics.providers.clone(), capabilities: metrics.lease_capabilities.clone() }
    }

    fn count(&self, verdict: &Verdict, by: i64) {
        match verdict {
            Verdict::None => {}
            Verdict::Ready(ready) => {
                let (ready, reason) = (ready.0.clone(), ready.1.clone());
                self.providers.get_or_create(&ReadyLabels { ready, reason }).inc_by(by);
            }
            Verdict::Capabilities(each) => {
                for (capability, reason) in each.iter() {
                    let labels = CapabilityLabels { capability: capability.key(), reason: reason.as_str() };
                    self.capabilities.get_or_create(&labels).inc_by(by);
                }
            }
        }
    }
}

impl Known {
    /// What the audit found of `generation`, if it was judged.
    pub fn finding(&self, generation: Option<i64>) -> Option<Arc<Finding>> {
        self.judged.as_ref().filter(|(judged, _)| *judged == generation).map(|(_, finding)| finding.clone())
    }

    /// Remembers what the audit found of `generation` (until a newer one is judged, or the object
    /// is deleted), counted in `nonconforming`.
    pub fn judged(&mut self, generation: Option<i64>, finding: Arc<Finding>, nonconforming: &Gauge) {
        finding.count(nonconforming, 1);
        if let Some((_, old)) = self.judged.replace((generation, finding)) {
            old.count(nonconforming, -1);
        }
    }

    /// The judgment started early of `generation`, if there is one: taken, so it is awaited once.
    pub fn take_early(&mut self, generation: Option<i64>) -> Option<Pending> {
        match self.early.take() {
            Some((judging, pending)) if judging == generation => Some(pending),
            _ => None,
        }
    }

    /// Keeps the judgment started of `generation` for its reconcile; whether there was none.
    pub fn start_early(&mut self, generation: Option<i64>, pending: Pending) -> bool {
        self.early.replace((generation, pending)).is_none()
    }

    pub fn waits_early(&self) -> bool {
        self.early.is_some()
    }

    /// A reconcile failed: how long until the next, by exponential backoff per object (1s, 2s,
    /// 4s ... up to 5 minutes).
    pub fn failed(&mut self) -> Duration {
        let delay = BACKOFF_BASE.saturating_mul(1 << self.failures.min(16)).min(BACKOFF_MAX);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Its status as published now counts as `verdict` (and no longer as the one before).
    pub fn published(&mut self, verdict: Verdict, verdicts: &Verdicts) {
        if verdict != self.verdict {
            verdicts.count(&verdict, 1);
            verdicts.count(&std::mem::replace(&mut self.verdict, verdict), -1);
        }
    }

    /// The object is gone: its finding and its verdict no longer count.
    pub fn forgotten(self, nonconforming: &Gauge, verdicts: &Verdicts) {
        if let Some((_, finding)) = self.judged {
            finding.count(nonconforming, -1);
        }
        verdicts.count(&self.verdict, -1);
    }
}

/// The gauge of `kind`'s nonconforming objects.
pub fn nonconforming(metrics: &Metrics, kind: Kind) -> Gauge {
    metrics.nonconforming.get_or_create(&KindLabels { kind: kind.as_str() }).clone()
}

/// Both kinds count 0: the controllers start, or stopped (the leader lease was lost, or shutdown),
/// and the leader counts. The series exist before anything breaks a rule.
pub fn count_none(metrics: &Metrics) {
    for kind in Kind::ALL {
        nonconforming(metrics, kind).set(0);
    }
    metrics.providers.clear();
    metrics.lease_capabilities.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_per_object_until_one_succeeds() {
        let mut known = Known::default();
        let delays: Vec<u64> = (0..10).map(|_| known.failed().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        known.succeeded();
        assert_eq!(known.failed(), Duration::from_secs(1));
    }

    #[test]
    fn a_verdict_counts_once_while_published_and_not_after_its_object_goes() {
        let verdicts = Verdicts::default();
        let granted = |capability| CapabilityLabels { capability, reason: Reason::Granted.as_str() };
        let (sync_in, sync_out) = (Capability::NativeSyncIn, Capability::NativeSyncOut);
        let count = |capability: Capability| verdicts.capabilities.get_or_create(&granted(capability.key())).get();
        let mut known = Known::default();
        let both = Verdict::Capabilities(Box::new([(sync_in, Reason::Granted), (sync_out, Reason::Granted)]));
        known.published(both.clone(), &verdicts);
        known.published(both, &verdicts);
        assert_eq!((count(sync_in), count(sync_out)), (1, 1), "published twice, counted once");
        known.published(Verdict::Capabilities(Box::new([(sync_in, Reason::Granted)])), &verdicts);
        assert_eq!((count(sync_in), count(sync_out)), (1, 0));
        known.forgotten(&Gauge::default(), &verdicts);
        assert_eq!(count(sync_in), 0);
    }
}
