//! Which leases read which provider and which Secret: the reverse of what each lease names, kept by
//! the lease table as the lease watch's events arrive, so that a provider or Secret event finds its
//! leases without reading every lease. It holds the table's keys and interned names.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use super::names::LeaseKey;

#[derive(Default)]
pub(super) struct Index {
    by_provider: HashMap<Arc<str>, HashSet<LeaseKey>>,
    /// By namespace and name: a lease reads Secrets of its own namespace only.
    by_secret: HashMap<(Arc<str>, Arc<str>), HashSet<LeaseKey>>,
}

impl Index {
    pub(super) fn of_provider(&self, name: &str) -> Vec<LeaseKey> {
        self.by_provider.get(name).map(|leases| leases.iter().cloned().collect()).unwrap_or_default()
    }

    pub(super) fn of_secret(&self, namespace: &str, name: &str) -> Vec<LeaseKey> {
        let at: (Arc<str>, Arc<str>) = (namespace.into(), name.into());
        self.by_secret.get(&at).map(|leases| leases.iter().cloned().collect()).unwrap_or_default()
    }

    /// `lease` reads `provider` and `secrets` of its namespace.
    pub(super) fn link(&mut self, lease: &LeaseKey, provider: &Arc<str>, secrets: &[Arc<str>]) {
        self.by_provider.entry(provider.clone()).or_default().insert(lease.clone());
        for secret in secrets {
            self.by_secret.entry((lease.0.0.clone(), secret.clone())).or_default().insert(lease.clone());
        }
    }

    /// `lease` no longer reads `provider` and `secrets`.
    pub(super) fn unlink(&mut self, lease: &LeaseKey, provider: &Arc<str>, secrets: &[Arc<str>]) {
        remove_from(&mut self.by_provider, provider, lease);
        for secret in secrets {
            remove_from(&mut self.by_secret, &(lease.0.0.clone(), secret.clone()), lease);
        }
    }

    pub(super) fn shrink(&mut self) {
        self.by_provider.shrink_to_fit();
        self.by_secret.shrink_to_fit();
    }

    /// Whether it holds no more than `providers` providers and no Secret (for the tests).
    #[cfg(test)]
    pub(super) fn is_empty_but(&self, providers: usize) -> bool {
        self.by_provider.len() == providers && self.by_secret.is_empty()
    }
}

/// Takes `lease` out of `map[at]`, and the entry with it once empty, so the index holds no more
/// keys than the leases name.
fn remove_from<Q: Hash + Eq>(map: &mut HashMap<Q, HashSet<LeaseKey>>, at: &Q, lease: &LeaseKey) {
    if let Some(leases) = map.get_mut(at) {
        leases.remove(lease);
        if leases.is_empty() {
            map.remove(at);
        }
    }
}
