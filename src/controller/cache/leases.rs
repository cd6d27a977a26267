//! The lease table: one entry per lease, holding everything the controllers keep of it: what the
//! next reconcile reads ([`Kept`]), the generation its change detection compares, what it reads
//! (its provider, its `configFrom` Secrets) and what the audit found of its spec, with the reverse
//! index from each provider and Secret to its leases.
//!
//! A key is allocated once per lease and shared by the table, the index and the queues (an `Arc`);
//! namespaces, provider names and Secret names are interned (`names.rs`), so a thousand leases of
//! one namespace and provider hold one copy of each. Only the lease watch writes the leases
//! ([`Writer::apply`]); a reconcile writes its lease's finding ([`Leases::judged`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher::Event;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use super::index::Index;
use super::names::{Interned, LeaseKey};
use crate::controller::audit::Finding;
use crate::controller::cached::{CachedLease, Kept};

/// The table, shared between the lease watch that writes it and everything that reads it.
#[derive(Clone)]
pub struct Leases {
    table: Arc<RwLock<Table>>,
    listed: watch::Receiver<bool>,
}

/// The lease watch's end: [`Leases::apply`] takes its events.
pub struct Writer {
    table: Arc<RwLock<Table>>,
    listed: watch::Sender<bool>,
    /// The keys of the list in progress (between `Init` and `InitDone`).
    listing: Option<HashSet<LeaseKey>>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<LeaseKey, Entry>,
    index: Index,
    names: Interned,
    /// `sandcap_nonconforming_objects{kind="SandboxLease"}`: the leases whose finding does not conform.
    nonconforming: Gauge,
}

struct Entry {
    kept: Kept,
    provider: Arc<str>,
    secrets: Box<[Arc<str>]>,
    /// The audit's finding, and of which generation.
    judged: Option<(Option<i64>, Arc<Finding>)>,
}

/// What one event changed: the leases to reconcile, and the uids of those deleted.
#[derive(Debug, Default, PartialEq)]
pub struct Changed {
    pub triggered: Vec<LeaseKey>,
    pub deleted: Vec<String>,
}

/// The table and the writer that fills it; `nonconforming` counts the leases whose finding does
/// not conform.
pub fn table(nonconforming: Gauge) -> (Leases, Writer) {
    let (listed_tx, listed) = watch::channel(false);
    let table = Arc::new(RwLock::new(Table { nonconforming, ..Table::default() }));
    (Leases { table: table.clone(), listed }, Writer { table, listed: listed_tx, listing: None })
}

impl Leases {
    /// The lease as the next reconcile reads it, with the finding of its generation if it was
    /// judged.
    pub fn get(&self, key: &LeaseKey) -> Option<Arc<CachedLease>> {
        let table = self.table.read().expect("not poisoned");
        let entry = table.entries.get(key)?;
        let judged = entry.judged.as_ref().filter(|(generation, _)| *generation == entry.kept.generation());
        entry.kept.view(key.namespace(), key.name(), judged.map(|(_, finding)| finding.clone())).map(Arc::new)
    }

    /// Remembers what the audit found of `lease`'s generation (until a newer one is judged, or the
    /// lease is deleted).
    pub fn judged(&self, lease: &CachedLease, finding: Arc<Finding>) {
        let mut table = self.table.write().expect("not poisoned");
        let Table { entries, nonconforming, .. } = &mut *table;
        let Some(entry) = entries.get_mut(&LeaseKey::of(lease)) else { return };
        finding.count(nonconforming, 1);
        if let Some((_, old)) = entry.judged.replace((lease.metadata.generation, finding)) {
            old.count(nonconforming, -1);
        }
    }

    /// Every lease's key (the hourly pass).
    pub fn keys(&self) -> Vec<LeaseKey> {
        self.table.read().expect("not poisoned").entries.keys().cloned().collect()
    }

    pub fn count(&self) -> usize {
        self.table.read().expect("not poisoned").entries.len()
    }

    /// The leases that resolve against provider `name`.
    pub fn of_provider(&self, name: &str) -> Vec<LeaseKey> {
        self.table.read().expect("not poisoned").index.of_provider(name)
    }

    /// The leases whose `configFrom` reads Secret `name` in `namespace`.
    pub fn of_secret(&self, namespace: &str, name: &str) -> Vec<LeaseKey> {
        self.table.read().expect("not poisoned").index.of_secret(namespace, name)
    }

    /// Waits until the first list has completed; `false` if the writer is gone first.
    pub async fn listed(&self) -> bool {
        self.listed.clone().wait_for(|listed| *listed).await.is_ok()
    }
}

impl Writer {
    /// Applies one watch event: a new lease, or one whose generation moved, is triggered; a
    /// deleted one (also one a re-list no longer holds) leaves the table and the index.
    pub fn apply(&mut self, event: Event<CachedLease>) -> Changed {
        let mut changed = Changed::default();
        let mut table = self.table.write().expect("not poisoned");
        match event {
            Event::Init => self.listing = Some(HashSet::new()),
            Event::InitApply(lease) | Event::Apply(lease) => {
                let key = table.insert(lease, &mut changed);
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(key);
                }
            }
            Event::Delete(lease) => {
                let key = LeaseKey::of(&lease);
                changed.deleted.extend(table.remove(&key));
            }
            Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    let gone: Vec<LeaseKey> = table.entries.keys().filter(|k| !listing.contains(*k)).cloned().collect();
                    gone.iter().for_each(|key| changed.deleted.extend(table.remove(key)));
                }
                self.listed.send_replace(true);
            }
        }
        changed
    }
}

/// A table or set larger than this gives memory back once it holds less than a quarter of its
/// capacity (a hash table never shrinks by itself).
const SHRINK_ABOVE: usize = 1024;

impl Table {
    /// Keeps `lease`, replacing what was kept of it; returns its key (the one kept, when there was).
    fn insert(&mut self, lease: CachedLease, changed: &mut Changed) -> LeaseKey {
        let namespace = self.names.get(lease.namespace().as_deref().unwrap_or_default());
        let probe = LeaseKey::new(namespace, &lease.name_any());
        let lease = match self.republish(&probe, lease) {
            Ok(key) => return key,
            Err(lease) => lease,
        };
        let provider = self.names.get(&lease.spec.provider_ref.name);
        let secrets: Box<[Arc<str>]> =
            lease.spec.config_from.iter().map(|c| self.names.get(&c.secret_key_ref.name)).collect();
        let kept = lease.keep();
        // A lease deleted and created again under its name while the watch was away (a uid of its
        // own) is a new lease: its generations count afresh, and nothing judged of the old holds.
        if self.entries.get(&probe).is_some_and(|old| old.kept.uid() != kept.uid()) {
            changed.deleted.extend(self.remove(&probe));
        }
        let (key, old) = match self.entries.remove_entry(&probe) {
            Some((key, old)) => (key, Some(old)),
            None => (probe, None),
        };
        if old.as_ref().is_none_or(|old| old.kept.generation() != kept.generation()) {
            changed.triggered.push(key.clone());
        }
        let judged = old.as_ref().and_then(|old| old.judged.clone());
        let new = Entry { kept, provider, secrets, judged };
        let moved = old.as_ref().is_none_or(|old| old.provider != new.provider || old.secrets != new.secrets);
        if moved {
            if let Some(old) = &old {
                self.index.unlink(&key, &old.provider, &old.secrets);
            }
            self.index.link(&key, &new.provider, &new.secrets);
        }
        self.entries.insert(key.clone(), new);
        key
    }

    /// A new status of a lease kept at this generation (most often sandcap's own write, which the
    /// watch brings back: at a cold start, once per lease) changes its published status alone. The
    /// apiserver moves the generation with every change of the spec (the CRD has a status
    /// subresource), so the spec and what it reads are those kept, not allocated again: what
    /// lives on stays where it was allocated instead of landing between each event's short-lived
    /// allocations. The lease back if it is new, or another generation or uid.
    fn republish(&mut self, probe: &LeaseKey, lease: CachedLease) -> Result<LeaseKey, CachedLease> {
        let same = |entry: &Entry| {
            entry.kept.uid() == lease.metadata.uid.as_deref() && entry.kept.generation() == lease.metadata.generation
        };
        let Some((key, _)) = self.entries.get_key_value(probe).filter(|(_, entry)| same(entry)) else {
            return Err(lease);
        };
        let key = key.clone();
        self.entries.get_mut(&key).expect("found above").kept.republish(lease);
        Ok(key)
    }

    /// Forgets the lease at `key`; its uid, if it was kept.
    fn remove(&mut self, key: &LeaseKey) -> Option<String> {
        let (key, old) = self.entries.remove_entry(key)?;
        self.index.unlink(&key, &old.provider, &old.secrets);
        if let Some((_, finding)) = &old.judged {
            finding.count(&self.nonconforming, -1);
        }
        self.shrink();
        old.kept.uid().map(String::from)
    }

    fn shrink(&mut self) {
        let capacity = self.entries.capacity();
        if capacity > SHRINK_ABOVE && capacity / 4 > self.entries.len() {
            self.entries.shrink_to_fit();
            self.index.shrink();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SandboxLeaseStatus;
    use crate::controller::fixtures::{LeaseFixture, lease};
    use crate::vocabulary::Capability;

    fn apply(writer: &mut Writer, lease: LeaseFixture) -> Changed {
        writer.apply(Event::Apply(lease.build().into()))
    }

    fn names(mut leases: Vec<LeaseKey>) -> Vec<String> {
        leases.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
        leases.into_iter().map(|l| format!("{l:?}")).collect()
    }

    #[test]
    fn a_lease_is_found_by_its_provider_and_by_each_secret_it_reads() {
        let (leases, mut writer) = table(Gauge::default());
        apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("s", "a").config_from("t", "b"));
        apply(&mut writer, lease("team-b", "two").of("p", "k"));
        apply(&mut writer, lease("team-a", "other").of("q", "k"));
        assert_eq!(names(leases.of_provider("p")), ["team-a/one", "team-b/two"]);
        assert_eq!(names(leases.of_secret("team-a", "s")), ["team-a/one"]);
        assert_eq!(names(leases.of_secret("team-a", "t")), ["team-a/one"]);
        // A lease reads Secrets of its own namespace only.
        assert!(leases.of_secret("team-b", "s").is_empty());
        assert!(leases.of_provider("nobody").is_empty());
    }

    #[test]
    fn one_key_and_one_copy_of_each_name_are_kept_per_lease() {
        let (leases, mut writer) = table(Gauge::default());
        apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("s", "a"));
        apply(&mut writer, lease("team-a", "two").of("p", "k").config_from("s", "a"));
        let table = leases.table.read().unwrap();
        let [one, two] =
            ["one", "two"].map(|n| table.entries.get_key_value(&LeaseKey::new("team-a".into(), n)).unwrap());
        assert!(Arc::ptr_eq(&one.0.0.0, &two.0.0.0), "one namespace");
        assert!(Arc::ptr_eq(&one.1.provider, &two.1.provider) && Arc::ptr_eq(&one.1.secrets[0], &two.1.secrets[0]));
        let indexed = table.index.of_provider("p");
        assert!(indexed.iter().all(|k| Arc::ptr_eq(&k.0, &one.0.0) || Arc::ptr_eq(&k.0, &two.0.0)), "the table's keys");
        assert_eq!(table.names.names.len(), 3, "team-a, p, s");
    }

    #[test]
    fn a_lease_is_triggered_when_new_or_when_its_generation_moves_not_by_a_status_write() {
        let (leases, mut writer) = table(Gauge::default());
        assert_eq!(names(apply(&mut writer, lease("team-a", "l").of("p", "k")).triggered), ["team-a/l"]);
        let mut written = lease("team-a", "l").of("p", "k").build();
        written.status = Some(Default::default());
        assert_eq!(writer.apply(Event::Apply(written.into())), Changed::default());
        let mut moved = lease("team-a", "l").of("q", "k").build();
        moved.metadata.generation = Some(2);
        assert_eq!(names(writer.apply(Event::Apply(moved.into())).triggered), ["team-a/l"]);
        assert!(leases.of_provider("p").is_empty());
        assert_eq!(names(leases.of_provider("q")), ["team-a/l"]);
        assert!(leases.table.read().unwrap().index.is_empty_but(1), "no empty entry is kept");
    }

    #[test]
    fn a_status_write_changes_the_published_status_alone() {
        let (leases, mut writer) = table(Gauge::default());
        apply(&mut writer, lease("team-a", "l").of("p", "k").config_from("s", "a"));
        let key = LeaseKey::new("team-a".into(), "l");
        let spec = |leases: &Leases| leases.table.read().unwrap().entries[&key].kept.spec().as_ptr();
        let before = spec(&leases);
        let mut written = lease("team-a", "l").of("p", "k").config_from("s", "a").build();
        let mut status = SandboxLeaseStatus::default();
        status.capabilities.set(Capability::ReusableLeases, true);
        written.status = Some(status);
        assert_eq!(writer.apply(Event::Apply(written.into())), Changed::default());
        assert!(leases.get(&key).unwrap().grants_any(), "the new status is the published one");
        assert_eq!(spec(&leases), before, "the spec kept is not allocated again");
        assert_eq!(names(leases.of_secret("team-a", "s")), ["team-a/l"]);
    }

    #[test]
    fn a_renamed_secret_reference_no_longer_relates_the_old_secret() {
        let (leases, mut writer) = table(Gauge::default());
        apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("old", "a"));
        // A spec change moves the generation (the CRDs have a status subresource).
        let mut renamed = lease("team-a", "one").of("p", "k").config_from("new", "a").build();
        renamed.metadata.generation = Some(2);
        writer.apply(Event::Apply(renamed.into()));
        assert!(leases.of_secret("team-a", "old").is_empty());
        assert_eq!(names(leases.of_secret("team-a", "new")), ["team-a/one"]);
    }

    #[test]
    fn a_deleted_lease_is_in_no_relation_and_nothing_of_it_is_kept() {
        let (leases, mut writer) = table(Gauge::default());
        apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("s", "a"));
        apply(&mut writer, lease("team-a", "two").of("p", "k").config_from("s", "a"));
        let deleted = writer.apply(Event::Delete(lease("team-a", "one").of("p", "k").build().into()));
        assert_eq!(deleted, Changed { triggered: vec![], deleted: vec!["team-a-one-uid".into()] });
        assert_eq!(names(leases.of_provider("p")), ["team-a/two"]);
        assert_eq!(names(leases.of_secret("team-a", "s")), ["team-a/two"]);
        writer.apply(Event::Delete(lease("team-a", "two").of("p", "k").build().into()));
        let table = leases.table.read().unwrap();
        assert!(table.entries.is_empty() && table.index.is_empty_but(0));
    }

    #[test]
    fn names_no_lease_reads_any_more_are_dropped() {
        let (leases, mut writer) = table(Gauge::default());
        for round in 0..4 {
            for i in 0..1000 {
                apply(
                    &mut writer,
                    lease("team-a", &format!("l-{i}")).of("p", "k").config_from(&format!("s-{round}-{i}"), "a"),
                );
            }
        }
        let held = leases.table.read().unwrap().names.names.len();
        assert!(held <= 2 * 1002, "{held} names held for 1002 in use");
    }

    #[test]
    fn a_finding_is_kept_for_its_generation_and_counted_until_the_lease_is_gone() {
        let gauge = Gauge::default();
        let (leases, mut writer) = table(gauge.clone());
        let at = |generation: i64| {
            let mut l = lease("team-a", "l").of("p", "k").build();
            l.metadata.generation = Some(generation);
            l
        };
        writer.apply(Event::Apply(at(1).into()));
        let key = LeaseKey::new("team-a".into(), "l");
        let first = leases.get(&key).unwrap();
        assert!(first.finding().is_none(), "not judged yet");
        let broken = Arc::new(Finding { conforms: false, message: "breaks".into() });
        leases.judged(&first, broken.clone());
        assert_eq!(gauge.get(), 1);
        let mut written = at(1);
        written.status = Some(Default::default());
        writer.apply(Event::Apply(written.into()));
        assert!(Arc::ptr_eq(&leases.get(&key).unwrap().finding().unwrap(), &broken), "a status write keeps it");
        writer.apply(Event::Apply(at(2).into()));
        let second = leases.get(&key).unwrap();
        assert!(second.finding().is_none(), "a new generation is judged again");
        assert_eq!(gauge.get(), 1, "and counts as it was until then");
        leases.judged(&second, Arc::new(Finding { conforms: true, message: "ok".into() }));
        assert_eq!(gauge.get(), 0);
        leases.judged(&second, broken);
        writer.apply(Event::Delete(at(2).into()));
        assert_eq!(gauge.get(), 0, "a deleted lease no longer counts");
    }

    #[test]
    fn a_lease_created_again_under_its_name_is_a_new_lease() {
        let gauge = Gauge::default();
        let (leases, mut writer) = table(gauge.clone());
        writer.apply(Event::Apply(lease("team-a", "l").of("p", "k").build().into()));
        let key = LeaseKey::new("team-a".into(), "l");
        leases.judged(&leases.get(&key).unwrap(), Arc::new(Finding { conforms: false, message: "breaks".into() }));
        let mut again = lease("team-a", "l").of("p", "k").build();
        again.metadata.uid = Some("another-uid".into());
        let changed = writer.apply(Event::Apply(again.into()));
        assert_eq!(changed, Changed { triggered: vec![key.clone()], deleted: vec!["team-a-l-uid".into()] });
        assert!(leases.get(&key).unwrap().finding().is_none(), "judged afresh");
        assert_eq!(gauge.get(), 0, "the old one no longer counts");
    }

    #[tokio::test]
    async fn a_relist_forgets_the_leases_it_no_longer_holds_and_marks_the_table_listed() {
        let (leases, mut writer) = table(Gauge::default());
        let [kept, gone] = ["kept", "gone"].map(|name| CachedLease::from(lease("team-a", name).of("p", "k").build()));
        for event in [Event::Init, Event::InitApply(kept.clone()), Event::InitApply(gone), Event::InitDone] {
            writer.apply(event);
        }
        assert!(leases.listed().await);
        assert_eq!(leases.count(), 2);
        writer.apply(Event::Init);
        assert_eq!(writer.apply(Event::InitApply(kept)), Changed::default(), "unchanged");
        let relisted = writer.apply(Event::InitDone);
        assert_eq!(relisted, Changed { triggered: vec![], deleted: vec!["team-a-gone-uid".into()] });
        assert_eq!(names(leases.keys()), ["team-a/kept"]);
        assert_eq!(leases.get(&LeaseKey::new("team-a".into(), "kept")).unwrap().metadata.name.as_deref(), Some("kept"));
    }

    #[tokio::test]
    async fn a_table_whose_writer_is_gone_before_the_list_is_never_listed() {
        let (leases, writer) = table(Gauge::default());
        drop(writer);
        assert!(!leases.listed().await);
    }
}
