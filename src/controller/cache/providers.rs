//! The provider table: what is known of each provider besides the object the provider cache
//! holds ([`Known`], and what each endpoint of its Service worker last answered), by uid, until
//! the provider is deleted. The lease table (`leases.rs`) is its counterpart for leases.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;

use super::endpoints::Member;
use crate::controller::known::{self, Known};
use crate::metrics::Metrics;
use crate::probe::ProbeOutcome;
use sandcap_core::vocabulary::Kind;

/// What is known of each provider, by uid, with what its worker's endpoints last answered.
pub struct ProviderTable {
    known: Mutex<HashMap<String, ProviderState>>,
    nonconforming: Gauge,
}

/// What is known of one provider.
#[derive(Default)]
pub struct ProviderState {
    pub known: Known,
    /// What each of its Service worker's endpoints last answered.
    pub endpoints: Vec<Probed>,
}

impl ProviderTable {
    /// Counts into `sandcap_nonconforming_objects{kind="SandboxProvider"}`.
    pub fn new(metrics: &Metrics) -> ProviderTable {
        let nonconforming = known::nonconforming(metrics, Kind::SandboxProvider);
        ProviderTable { known: Mutex::default(), nonconforming }
    }

    /// Runs `f` on what is known of the provider with `uid` (kept from then on).
    pub fn with<R>(&self, uid: &str, f: impl FnOnce(&mut ProviderState, &Gauge) -> R) -> R {
        let mut known = self.known.lock().expect("not poisoned");
        let state = match known.get_mut(uid) {
            Some(state) => state,
            None => known.entry(uid.to_string()).or_default(),
        };
        f(state, &self.nonconforming)
    }

    /// The provider with this uid was deleted.
    pub fn forget(&self, uid: &str) {
        if let Some(old) = self.known.lock().expect("not poisoned").remove(uid) {
            old.known.forgotten(&self.nonconforming);
        }
    }
}

/// One endpoint's last probe.
#[derive(Clone, Debug)]
pub struct Probed {
    pub member: Member,
    pub outcome: ProbeOutcome,
    pub at: Instant,
    /// When it started failing (the first failure of the current run of failures).
    pub failing_since: Option<Instant>,
}
