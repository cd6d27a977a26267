//! The lease table's keys and names: a lease's key is allocated once and shared by the table, the
//! index and the queues; namespaces, provider names and Secret names are held once each.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use kube::ResourceExt;

use crate::controller::cached::CachedLease;

/// A lease's namespace and name: what the queues and the index hold of it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseKey(pub(super) Arc<(Arc<str>, Box<str>)>);

impl LeaseKey {
    /// The key of `lease`, allocated afresh: to look a lease up, not to keep.
    pub fn of(lease: &CachedLease) -> LeaseKey {
        LeaseKey::new(Arc::from(lease.namespace().unwrap_or_default()), &lease.name_any())
    }

    pub(super) fn new(namespace: Arc<str>, name: &str) -> LeaseKey {
        LeaseKey(Arc::new((namespace, name.into())))
    }

    pub fn namespace(&self) -> &str {
        &self.0.0
    }

    pub fn name(&self) -> &str {
        &self.0.1
    }
}

impl fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace(), self.name())
    }
}

/// Namespaces, provider and Secret names, one copy each. A name no lease holds any more is
/// dropped by the next sweep, which runs once the set has doubled since the last one: the set
/// stays within twice the names in use (and [`SWEEP_FROM`]), at a constant cost per name.
#[derive(Default)]
pub(super) struct Interned {
    pub(super) names: HashSet<Arc<str>>,
    swept_at: usize,
}

/// The size under which the set is never swept.
const SWEEP_FROM: usize = 64;

impl Interned {
    pub(super) fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.names.get(name) {
            return known.clone();
        }
        if self.names.len() >= 2 * self.swept_at.max(SWEEP_FROM) {
            // Held by the set alone: no key, entry or index names it.
            self.names.retain(|name| Arc::strong_count(name) > 1);
            self.names.shrink_to_fit();
            self.swept_at = self.names.len();
        }
        let name: Arc<str> = name.into();
        self.names.insert(name.clone());
        name
    }
}
