//! The provider table: what is known of each provider besides the object the provider cache
//! holds ([`Known`], and what each endpoint of its Service worker last answered), by uid, until
//! the provider is deleted. The lease table (`leases.rs`) is its counterpart for leases.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;

use super::endpoints::Member;
use crate::controller::known::{self, Known, Verdicts};
use crate::controller::provider::settle::Settling;
use crate::metrics::Metrics;
use crate::probe::ProbeOutcome;
use sandcap_core::vocabulary::Kind;

/// Deleted providers remembered, so that a reconcile that was running as one was deleted does not
/// bring its entry back (and keep it counted); uids are never reused, so the oldest can go.
const FORGOTTEN_KEPT: usize = 1024;

/// What is known of each provider, by uid, with what its worker's endpoints last answered.
pub struct ProviderTable {
    known: Mutex<Table>,
    nonconforming: Gauge,
    verdicts: Verdicts,
}

#[derive(Default)]
struct Table {
    providers: HashMap<String, ProviderState>,
    /// The uids of the last [`FORGOTTEN_KEPT`] deleted providers, oldest first, and as a set.
    forgotten: VecDeque<String>,
    gone: HashSet<String>,
}

/// What is known of one provider.
#[derive(Default)]
pub struct ProviderState {
    pub known: Known,
    /// What each of its Service worker's endpoints last answered.
    pub endpoints: Vec<Probed>,
    /// What endpoints that stopped serving last answered, while it is fresh: one that serves
    /// again is not new, and waits for its own schedule.
    pub departed: Vec<Probed>,
    /// How its Service worker's grant is damped.
    pub settling: Settling,
}

impl ProviderTable {
    /// Counts into `sandcap_nonconforming_objects{kind="SandboxProvider"}`.
    pub fn new(metrics: &Metrics) -> ProviderTable {
        let nonconforming = known::nonconforming(metrics, Kind::SandboxProvider);
        ProviderTable { known: Mutex::default(), nonconforming, verdicts: Verdicts::of(metrics) }
    }

    /// Runs `f` on what is known of the provider with `uid` (kept from then on, unless the
    /// provider was deleted: then on a state of its own that nothing keeps or counts).
    pub fn with<R>(&self, uid: &str, f: impl FnOnce(&mut ProviderState, &Gauge) -> R) -> R {
        let mut table = self.known.lock().expect("not poisoned");
        if table.gone.contains(uid) {
            drop(table);
            return f(&mut ProviderState::default(), &Gauge::default());
        }
        let state = match table.providers.get_mut(uid) {
            Some(state) => state,
            None => table.providers.entry(uid.to_string()).or_default(),
        };
        f(state, &self.nonconforming)
    }

    /// The provider with this uid was deleted.
    pub fn forget(&self, uid: &str) {
        let mut table = self.known.lock().expect("not poisoned");
        if let Some(old) = table.providers.remove(uid) {
            old.known.forgotten(&self.nonconforming, &self.verdicts);
        }
        if table.gone.insert(uid.to_string()) {
            if table.forgotten.len() == FORGOTTEN_KEPT {
                let oldest = table.forgotten.pop_front().expect("full");
                table.gone.remove(&oldest);
            }
            table.forgotten.push_back(uid.to_string());
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
