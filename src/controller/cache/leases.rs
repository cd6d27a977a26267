//! The lease table: one entry per lease, holding everything the controllers keep of it: what the
//! next reconcile reads ([`Kept`]), the generation its change detection compares, what it reads
//! (its provider, its `configFrom` Secrets) and what else is known of it ([`Known`]: its failed
//! reconciles, what the audit found of its spec, the judgment started early), with the reverse
//! index from each provider and Secret to its leases.
//!
//! A key is allocated once per lease and shared by the table, the index and the queues (an `Arc`);
//! namespaces, provider names and Secret names are interned (`names.rs`), so a thousand leases of
//! one namespace and provider hold one copy of each. Only the lease watch writes the leases
//! ([`Writer::apply`]); a reconcile writes what is known of its lease ([`Leases::known`]).

use std::collections::HashMap;
use std::sync::Arc;

use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use super::index::Index;
use super::names::{Interned, LeaseKey};
use super::relist::{self, Shared, shared};
use crate::controller::audit::{Audits, Pending};
use crate::controller::cached::{CachedLease, Kept};
use crate::controller::capacity::give_back;
use crate::controller::known::{Known, Verdicts};

/// Early judgments waiting for their reconcile, at most (a burst beyond it, or a start's listing,
/// is judged by the reconciles, as many at once as run).
pub const EARLY_MAX: usize = 64;

/// The table, shared between the lease watch that writes it and everything that reads it.
#[derive(Clone)]
pub struct Leases {
    table: Shared<Table>,
    /// Notified on every event the watch applies (the observer's wake-up).
    changed: Arc<Notify>,
}

/// The lease watch's end: [`Writer::apply`] takes its events.
pub struct Writer {
    table: relist::Writer<Table>,
    changed: Arc<Notify>,
}

#[derive(Default)]
pub(super) struct Table {
    entries: HashMap<LeaseKey, Entry>,
    index: Index,
    names: Interned,
    /// `sandcap_nonconforming_objects{kind="SandboxLease"}`: the leases whose finding does not conform.
    nonconforming: Gauge,
    /// What the leases' published statuses count in.
    verdicts: Verdicts,
    /// The entries whose [`Known`] holds an early judgment.
    early: usize,
}

struct Entry {
    kept: Kept,
    provider: Arc<str>,
    secrets: Box<[Arc<str>]>,
    known: Known,
}

/// The table and the writer that fills it; `nonconforming` counts the leases whose finding does
/// not conform, `verdicts` what their published statuses say.
pub fn table(nonconforming: Gauge, verdicts: Verdicts) -> (Leases, Writer) {
    let (table, writer) = shared(Table { nonconforming, verdicts, ..Table::default() });
    let changed = Arc::new(Notify::new());
    (Leases { table, changed: changed.clone() }, Writer { table: writer, changed })
}

impl Leases {
    /// The lease as the next reconcile reads it.
    pub fn get(&self, key: &LeaseKey) -> Option<Arc<CachedLease>> {
        let table = self.table.read();
        table.entries.get(key)?.kept.view(key.namespace(), key.name()).map(Arc::new)
    }

    /// Runs `f` on what is known of `lease`, with the leases' gauge; `None` if the table no longer
    /// holds it (deleted, or created again under its name).
    pub fn known<R>(&self, lease: &CachedLease, f: impl FnOnce(&mut Known, &Gauge) -> R) -> Option<R> {
        let mut table = self.table.write();
        let Table { entries, nonconforming, early, .. } = &mut *table;
        let entry = entries.get_mut(&LeaseKey::of(lease)).filter(|e| e.kept.uid() == lease.meta().uid.as_deref())?;
        let waited = entry.known.waits_early();
        let result = f(&mut entry.known, nonconforming);
        *early = *early + usize::from(entry.known.waits_early()) - usize::from(waited);
        Some(result)
    }

    /// Starts judging the generation of the lease at `key` on `audits`' thread, for the reconcile
    /// that asks for its finding next, unless [`EARLY_MAX`] other judgments wait for theirs. Only
    /// the lease watch calls it, so the room it finds is still there once the lease is encoded
    /// (off the lock the reconciles take).
    pub fn judge_early(&self, key: &LeaseKey, audits: &Audits) {
        let room = {
            let table = self.table.read();
            table.early < EARLY_MAX || table.entries.get(key).is_some_and(|e| e.known.waits_early())
        };
        let Some(lease) = room.then(|| self.get(key)).flatten() else { return };
        let pending: Pending = audits.submit(lease.as_ref(), &lease.spec);
        self.known(&lease, |known, _| known.start_early(lease.meta().generation, pending));
    }

    /// Every lease's key (the hourly pass).
    pub fn keys(&self) -> Vec<LeaseKey> {
        self.table.read().entries.keys().cloned().collect()
    }

    /// The lease named `name` in `namespace`.
    pub fn lookup(&self, namespace: &str, name: &str) -> Option<Arc<CachedLease>> {
        self.get(&LeaseKey::new(Arc::from(namespace), name))
    }

    /// The keys of the leases labelled as observed.
    pub fn observed(&self) -> Vec<LeaseKey> {
        let table = self.table.read();
        table.entries.iter().filter(|(_, e)| e.kept.is_observed()).map(|(k, _)| k.clone()).collect()
    }

    /// Resolves once the watch has applied a change the observer reads since the last call (a
    /// lease new, deleted, of a new generation, or whose observed-from label or owners moved; not
    /// a new status, the most frequent event).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    pub fn count(&self) -> usize {
        self.table.read().entries.len()
    }

    /// The leases that resolve against provider `name`.
    pub fn of_provider(&self, name: &str) -> Vec<LeaseKey> {
        self.table.read().index.of_provider(name)
    }

    /// The leases whose `configFrom` reads Secret `name` in `namespace`.
    pub fn of_secret(&self, namespace: &str, name: &str) -> Vec<LeaseKey> {
        self.table.read().index.of_secret(namespace, name)
    }

    /// Waits until the first list has completed; `false` if the writer is gone first.
    pub async fn listed(&self) -> bool {
        self.table.listed().await
    }
}

impl Writer {
    /// Applies one watch event; returns the leases to reconcile: a new lease, or one whose
    /// generation moved. A deleted one (also one a re-list no longer holds) leaves the table and
    /// the index, and what is known of it with it.
    pub fn apply(&mut self, event: Event<CachedLease>) -> Vec<LeaseKey> {
        let changes = self.table.apply(event);
        if changes.moved {
            self.changed.notify_one();
        }
        changes.triggered
    }
}

/// What a lease event changed.
#[derive(Default)]
pub(super) struct Changes {
    /// The leases to reconcile.
    triggered: Vec<LeaseKey>,
    /// Whether what the observer reads moved.
    moved: bool,
}

impl relist::Table for Table {
    type Object = CachedLease;
    type Key = LeaseKey;
    type Changes = Changes;

    fn put(&mut self, lease: CachedLease, changes: &mut Changes) -> LeaseKey {
        let (key, moved) = self.insert(lease, &mut changes.triggered);
        changes.moved |= moved || !changes.triggered.is_empty();
        key
    }

    fn remove(&mut self, key: &LeaseKey, changes: &mut Changes) {
        changes.moved |= self.forget(key);
    }

    fn key(lease: &CachedLease) -> LeaseKey {
        LeaseKey::of(lease)
    }

    fn keys(&self) -> impl Iterator<Item = &LeaseKey> {
        self.entries.keys()
    }

    fn relisted(&mut self, changes: &mut Changes) {
        changes.moved = true;
    }
}

impl Table {
    /// Keeps `lease`, replacing what was kept of it; returns its key (the one kept, when there was)
    /// and whether what the observer reads of it moved.
    fn insert(&mut self, lease: CachedLease, triggered: &mut Vec<LeaseKey>) -> (LeaseKey, bool) {
        let namespace = self.names.get(lease.namespace().as_deref().unwrap_or_default());
        let probe = LeaseKey::new(namespace, &lease.name_any());
        if let Some(key) = self.at_its_generation(&probe, &lease) {
            let moved = self.entries.get_mut(&key).expect("found above").kept.republish(lease);
            return (key, moved);
        }
        let provider = self.names.get(&lease.spec.provider_ref.name);
        let secrets: Box<[Arc<str>]> =
            lease.spec.config_from.iter().map(|c| self.names.get(&c.secret_key_ref.name)).collect();
        let kept = lease.keep();
        // A lease deleted and created again under its name while the watch was away (a uid of its
        // own) is a new lease: its generations count afresh, and nothing judged of the old holds.
        if self.entries.get(&probe).is_some_and(|old| old.kept.uid() != kept.uid()) {
            self.forget(&probe);
        }
        let (key, mut old) = match self.entries.remove_entry(&probe) {
            Some((key, old)) => (key, Some(old)),
            None => (probe, None),
        };
        if old.as_ref().is_none_or(|old| old.kept.generation() != kept.generation()) {
            triggered.push(key.clone());
        }
        let known = old.as_mut().map(|old| std::mem::take(&mut old.known)).unwrap_or_default();
        let new = Entry { kept, provider, secrets, known };
        let moved = old.as_ref().is_none_or(|old| old.provider != new.provider || old.secrets != new.secrets);
        if moved {
            if let Some(old) = &old {
                self.index.unlink(&key, &old.provider, &old.secrets);
            }
            self.index.link(&key, &new.provider, &new.secrets);
        }
        self.entries.insert(key.clone(), new);
        (key, true)
    }

    /// The key of `lease`'s entry if it is kept at this generation: then the event is a new
    /// status of it (most often sandcap's own write, which the watch brings back: at a cold start,
    /// once per lease), which changes its published status alone. The apiserver moves the
    /// generation with every change of the spec (the CRD has a status subresource), so the spec
    /// and what it reads are those kept, not allocated again: what lives on stays where it was
    /// allocated instead of landing between each event's short-lived allocations.
    fn at_its_generation(&self, probe: &LeaseKey, lease: &CachedLease) -> Option<LeaseKey> {
        let (key, entry) = self.entries.get_key_value(probe)?;
        let (uid, generation) = (lease.meta().uid.as_deref(), lease.meta().generation);
        let same = entry.kept.uid() == uid && entry.kept.generation() == generation;
        same.then(|| key.clone())
    }

    /// Forgets the lease at `key`, and what is known of it; whether it was kept.
    fn forget(&mut self, key: &LeaseKey) -> bool {
        let Some((key, old)) = self.entries.remove_entry(key) else { return false };
        self.index.unlink(&key, &old.provider, &old.secrets);
        self.early -= usize::from(old.known.waits_early());
        old.known.forgotten(&self.nonconforming, &self.verdicts);
        if give_back(&mut self.entries) {
            self.index.shrink();
        }
        true
    }
}

#[cfg(test)]
mod tests;
