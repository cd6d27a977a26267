//! The observer (docs/contract.md, "Observed leases"): the workloads that providers'
//! `spec.workloads` bind, turned into observed `SandboxLease`s and kept in step with them. It
//! runs with the controllers (on the leader, behind its fence) in one task: every change of a
//! workload, a namespace, a provider, a lease or what the apiserver serves wakes it, and one pass
//! compares what every name should hold ([`sandcap_core::workloads::Binder`]) with what the lease
//! table holds, and writes only the differences ([`sandcap_core::workloads::step`]). So a restart
//! or a new leader writes nothing for workloads that did not change.
//!
//! It decides only about kinds it knows: served, and every watch of the kind listed. Leases of a
//! kind not served (agent-sandbox uninstalled) or not yet listed are left as they are.

mod awaiting;
mod backoff;
mod served;
mod watches;
mod writes;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use crate::metrics::KindLabels;
use sandcap_core::workloads::{Binder, Bound, Desired, Step, Workload, WorkloadKind, step};
pub use served::{Kinds, Served, discover};
use watches::{Namespaces, Selection, Workloads};
use writes::Reported;

/// A burst of changes within this long is one pass.
const COALESCE: Duration = Duration::from_millis(200);
/// A pass runs at least this often, to retry what failed.
const RESYNC: Duration = Duration::from_secs(30);

/// How the observer runs.
#[derive(Clone, Debug)]
pub struct ObserverOptions {
    /// The operator's own namespace, never observed.
    pub own_namespace: String,
    /// How often the apiserver's discovery is asked which kinds it serves.
    pub discovery_interval: Duration,
}

/// Runs the observer until `shutdown`.
pub async fn run(ctx: Arc<Context>, options: ObserverOptions, shutdown: CancellationToken) {
    let changed = Arc::new(Notify::new());
    let namespaces = watches::namespaces(&ctx.client, options.own_namespace.clone(), changed.clone(), &shutdown);
    let mut observer = Observer {
        ctx,
        namespaces,
        changed,
        watches: BTreeMap::new(),
        opted_in: 0,
        reported: Reported::default(),
        backoff: backoff::Backoff::default(),
        awaiting: awaiting::Awaiting::default(),
        shutdown: shutdown.clone(),
    };
    let mut discovery = tokio::time::interval(options.discovery_interval);
    discovery.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = discovery.tick() => observer.discover().await,
            _ = observer.changed.notified() => {}
            _ = observer.ctx.caches.leases.changed() => {}
            _ = observer.ctx.caches.providers_changed.notified() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(COALESCE) => {}
        }
        observer.pass().await;
    }
    // Another replica, or the next term, counts from scratch.
    for kind in WorkloadKind::ALL {
        observer.ctx.metrics.observed_workloads.get_or_create(&KindLabels { kind: kind.as_str() }).set(0);
    }
}

struct Observer {
    ctx: Arc<Context>,
    namespaces: Namespaces,
    changed: Arc<Notify>,
    /// One watch per kind and distinct selector.
    watches: BTreeMap<(WorkloadKind, String), Workloads>,
    /// [`Namespaces::opted_in`] when the watches last listed.
    opted_in: u64,
    reported: Reported,
    /// When a name the apiserver refused may be written again.
    backoff: backoff::Backoff,
    /// The writes the lease watch has not shown yet.
    awaiting: awaiting::Awaiting,
    shutdown: CancellationToken,
}

impl Observer {
    /// Asks which kinds are served; a change re-triggers the providers that bind workloads
    /// (their `WorkloadsObserved` condition).
    async fn discover(&mut self) {
        let found = served::discover(&self.ctx.client).await;
        if self.ctx.served.update(found) {
            tracing::info!(kinds = ?self.ctx.served.kinds(), "served workload kinds changed");
            for provider in self.ctx.caches.providers.state() {
                if !provider.spec.workloads.is_empty() {
                    self.ctx.caches.provider_queue.send(ObjectRef::from_obj(provider.as_ref()));
                }
            }
        }
    }

    async fn pass(&mut self) {
        let providers = self.ctx.caches.providers.state();
        let binder = Binder::new(providers.iter().map(AsRef::as_ref));
        let served = self.ctx.served.kinds();
        self.keep_watches(&binder, &served);
        if !self.namespaces.listed() {
            return;
        }
        let known: BTreeSet<WorkloadKind> = served
            .iter()
            .filter(|(_, version)| version.is_some())
            .map(|(kind, _)| *kind)
            .filter(|kind| self.watches.iter().filter(|((k, _), _)| k == kind).all(|(_, w)| w.listed()))
            .collect();
        let desired = self.desired(&binder, &known);
        let steps = self.steps(&desired, &known);
        if !steps.is_empty() && self.ctx.writes.fence.holds() {
            writes::apply(&self.ctx, steps, &mut self.backoff, &mut self.awaiting).await;
        }
    }

    /// Starts the watches the bindings need (of served kinds) and stops the others; all list again
    /// once a namespace opted in.
    fn keep_watches(&mut self, binder: &Binder, served: &Kinds) {
        let opted_in = self.namespaces.opted_in();
        if opted_in != self.opted_in {
            self.opted_in = opted_in;
            self.watches.clear();
        }
        let wanted: BTreeMap<(WorkloadKind, String), &str> = binder
            .watches()
            .into_iter()
            .filter_map(|(kind, selector)| Some(((kind, selector), served.get(&kind)?.as_deref()?)))
            .collect();
        // A watch keeps only the labels the bindings read: when they read others, it lists again.
        let read: BTreeMap<WorkloadKind, Arc<BTreeSet<String>>> =
            WorkloadKind::ALL.into_iter().map(|kind| (kind, Arc::new(binder.labels_read(kind)))).collect();
        self.watches.retain(|key, watch| {
            wanted.get(key).is_some_and(|version| *version == watch.api_version) && watch.labels == read[&key.0]
        });
        for ((kind, selector), version) in wanted {
            if !self.watches.contains_key(&(kind, selector.clone())) {
                let (namespaces, changed) = (self.namespaces.clone(), self.changed.clone());
                let selection = Selection { selector: selector.clone(), labels: read[&kind].clone() };
                let watch =
                    Workloads::start(&self.ctx.client, kind, version, &selection, namespaces, changed, &self.shutdown);
                self.watches.insert((kind, selector), watch);
            }
        }
        for watch in self.watches.values() {
            watch.retain(&self.namespaces);
        }
    }

    /// What every name of an observed workload of a known kind should hold. A name two workloads
    /// (a Job and a Sandbox) would give different leases to, or bindings disagree on, gets none.
    fn desired(&mut self, binder: &Binder, known: &BTreeSet<WorkloadKind>) -> HashMap<(String, String), Desired> {
        let mut desired: HashMap<(String, String), Desired> = HashMap::new();
        let mut clashes = HashSet::new();
        let mut counts: BTreeMap<WorkloadKind, i64> = known.iter().map(|k| (*k, 0)).collect();
        let Observer { watches, reported, ctx, .. } = self;
        for watch in watches.values().filter(|w| known.contains(&w.kind)) {
            watch.each(|namespace, name, item| {
                let (kind, api_version, uid, labels) =
                    (watch.kind, watch.api_version.as_str(), &item.uid, &item.labels);
                let workload = Workload { kind, api_version, namespace, name, uid, labels };
                match binder.bind(&workload) {
                    Bound::Unbound => {}
                    Bound::Ambiguous(bindings) => reported.ambiguous(ctx, &workload, &bindings),
                    Bound::One(lease) => {
                        let key = (namespace.to_string(), name.to_string());
                        match desired.get(&key) {
                            Some(other) if *other != *lease => {
                                clashes.insert(key);
                            }
                            Some(_) => {}
                            None => {
                                *counts.entry(kind).or_default() += 1;
                                desired.insert(key, *lease);
                            }
                        }
                    }
                }
            });
        }
        for key in clashes {
            if let Some(lease) = desired.remove(&key) {
                *counts.entry(lease.kind).or_default() -= 1;
                tracing::warn!(namespace = key.0, name = key.1, "two workloads of one name: neither gets a lease");
            }
        }
        for (kind, count) in counts {
            ctx.metrics.observed_workloads.get_or_create(&KindLabels { kind: kind.as_str() }).set(count);
        }
        desired
    }

    /// The steps from the lease table to `desired`: every desired name, and every observed lease
    /// of a known kind that no name desires any more.
    fn steps(
        &mut self,
        desired: &HashMap<(String, String), Desired>,
        known: &BTreeSet<WorkloadKind>,
    ) -> Vec<writes::Write> {
        let leases = &self.ctx.caches.leases;
        let mut steps = Vec::new();
        for ((namespace, name), lease) in desired {
            let kept = leases.lookup(namespace, name).map(|l| l.kept_lease());
            match step(Some(lease), kept.as_ref()) {
                Step::Nothing => {}
                Step::Taken => self.reported.taken(&self.ctx, lease),
                step => steps.push(writes::Write {
                    step,
                    namespace: namespace.clone(),
                    name: name.clone(),
                    desired: Some(lease.clone()),
                    kept,
                }),
            }
        }
        for key in leases.observed() {
            if desired.contains_key(&(key.namespace().to_string(), key.name().to_string())) {
                continue;
            }
            let Some(kept) = leases.get(&key).map(|l| l.kept_lease()) else { continue };
            if kept.observed().is_some_and(|kind| known.contains(&kind)) && step(None, Some(&kept)) == Step::Delete {
                let (namespace, name) = (key.namespace().to_string(), key.name().to_string());
                steps.push(writes::Write { step: Step::Delete, namespace, name, desired: None, kept: Some(kept) });
            }
        }
        self.reported.forget_others();
        steps
    }
}

#[cfg(test)]
mod tests;
