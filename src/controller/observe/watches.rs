//! The observer's watches, all metadata-only: the opted-in namespaces, and per binding selector
//! the workloads of one kind, cluster-wide, with the selector as the apiserver's label selector.
//! A workload of a namespace not opted in is dropped as it arrives, never kept; when a namespace
//! opts in, the workload watches list again (what they dropped of it is not kept anywhere).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Client, Resource};
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::controller::cache::{logged, spawn_until};
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, WorkloadKind, namespace_observed};

/// The opted-in namespaces; `None` until first listed.
#[derive(Clone, Default)]
pub struct Namespaces {
    state: Arc<RwLock<NamespaceState>>,
}

#[derive(Default)]
struct NamespaceState {
    observed: Option<HashSet<String>>,
    listing: Option<HashSet<String>>,
    /// Counts the namespaces that opted in: each one asks the workload watches to list again.
    opted_in: u64,
}

impl Namespaces {
    pub fn listed(&self) -> bool {
        self.state.read().expect("not poisoned").observed.is_some()
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.state.read().expect("not poisoned").observed.as_ref().is_some_and(|o| o.contains(namespace))
    }

    pub fn opted_in(&self) -> u64 {
        self.state.read().expect("not poisoned").opted_in
    }

    fn apply(&self, event: Event<PartialObjectMeta<Namespace>>, own: &str) -> bool {
        let observed = |ns: &PartialObjectMeta<Namespace>| {
            let name = ns.metadata.name.clone().unwrap_or_default();
            let labels = ns.metadata.labels.clone().unwrap_or_default();
            namespace_observed(&name, &labels, own).then_some(name)
        };
        let mut state = self.state.write().expect("not poisoned");
        match event {
            Event::Init => state.listing = Some(HashSet::new()),
            Event::InitApply(ns) => {
                if let (Some(listing), Some(name)) = (state.listing.as_mut(), observed(&ns)) {
                    listing.insert(name);
                }
            }
            Event::InitDone => {
                let listed = state.listing.take().unwrap_or_default();
                let before = state.observed.replace(listed).unwrap_or_default();
                let now = state.observed.as_ref().expect("just set");
                if now.iter().any(|ns| !before.contains(ns)) {
                    state.opted_in += 1;
                }
                return true;
            }
            Event::Apply(ns) => {
                let name = ns.metadata.name.clone().unwrap_or_default();
                let Some(set) = state.observed.as_mut() else { return false };
                let changed = match observed(&ns) {
                    Some(name) => set.insert(name),
                    None => set.remove(&name),
                };
                if changed && set.contains(&name) {
                    state.opted_in += 1;
                }
                return changed;
            }
            Event::Delete(ns) => {
                let name = ns.metadata.name.unwrap_or_default();
                return state.observed.as_mut().is_some_and(|set| set.remove(&name));
            }
        }
        false
    }
}

/// Watches the namespaces labelled [`NAMESPACE_LABEL`]`=enabled` until `shutdown` (`own` is never
/// observed), notifying `changed` on each change.
pub fn namespaces(client: &Client, own: String, changed: Arc<Notify>, shutdown: &CancellationToken) -> Namespaces {
    let namespaces = Namespaces::default();
    let config = watcher::Config::default().labels(&format!("{NAMESPACE_LABEL}={NAMESPACE_ENABLED}"));
    let events = watch(Api::<PartialObjectMeta<Namespace>>::all(client.clone()), config).default_backoff();
    let state = namespaces.clone();
    spawn_until(shutdown, logged(events), move |event| {
        if state.apply(event, &own) {
            changed.notify_one();
        }
    });
    namespaces
}

/// What the observer keeps of a workload.
pub struct Item {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
}

/// One watch of one kind's workloads that one selector selects.
pub struct Workloads {
    pub kind: WorkloadKind,
    pub api_version: String,
    table: Arc<RwLock<Table>>,
    _stop: DropGuard,
}

#[derive(Default)]
struct Table {
    listed: bool,
    items: HashMap<(String, String), Item>,
    listing: Option<HashMap<(String, String), Item>>,
}

impl Workloads {
    /// Starts the watch of `kind` at `api_version` selected by `selector`; it stops when dropped.
    pub fn start(
        client: &Client,
        kind: WorkloadKind,
        api_version: &str,
        selector: &str,
        namespaces: Namespaces,
        changed: Arc<Notify>,
        shutdown: &CancellationToken,
    ) -> Workloads {
        let row = kind.row();
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        let resource = ApiResource {
            group: row.group.to_string(),
            version: version.to_string(),
            api_version: api_version.to_string(),
            kind: kind.as_str().to_string(),
            plural: row.plural.to_string(),
        };
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &resource);
        let events = watch(api, watcher::Config::default().labels(selector)).default_backoff();
        let table = Arc::new(RwLock::new(Table::default()));
        let stop = shutdown.child_token();
        let writer = table.clone();
        spawn_until(&stop, logged(events), move |event| {
            if writer.write().expect("not poisoned").apply(event, &namespaces) {
                changed.notify_one();
            }
        });
        Workloads { kind, api_version: api_version.to_string(), table, _stop: stop.drop_guard() }
    }

    /// Whether it has listed once.
    pub fn listed(&self) -> bool {
        self.table.read().expect("not poisoned").listed
    }

    /// Calls `f` with every workload it holds: namespace, name, what is kept of it.
    pub fn each(&self, mut f: impl FnMut(&str, &str, &Item)) {
        let table = self.table.read().expect("not poisoned");
        for ((namespace, name), item) in &table.items {
            f(namespace, name, item);
        }
    }

    /// Forgets the workloads of namespaces no longer observed.
    pub fn retain(&self, namespaces: &Namespaces) {
        self.table.write().expect("not poisoned").items.retain(|(ns, _), _| namespaces.contains(ns));
    }
}

impl Table {
    /// Applies one event; whether what is held changed.
    fn apply(&mut self, event: Event<PartialObjectMeta<DynamicObject>>, namespaces: &Namespaces) -> bool {
        let keep = |meta: &PartialObjectMeta<DynamicObject>| {
            let namespace = meta.metadata.namespace.clone().filter(|ns| namespaces.contains(ns))?;
            let name = meta.metadata.name.clone()?;
            let item =
                Item { uid: meta.metadata.uid.clone()?, labels: meta.metadata.labels.clone().unwrap_or_default() };
            Some(((namespace, name), item))
        };
        match event {
            Event::Init => self.listing = Some(HashMap::new()),
            Event::InitApply(meta) => {
                if let (Some(listing), Some((key, item))) = (self.listing.as_mut(), keep(&meta)) {
                    listing.insert(key, item);
                }
            }
            Event::InitDone => {
                self.items = self.listing.take().unwrap_or_default();
                self.listed = true;
                return true;
            }
            Event::Apply(meta) => match keep(&meta) {
                Some((key, item)) => {
                    self.items.insert(key, item);
                    return true;
                }
                None => return self.items.remove(&key_of(&meta)).is_some(),
            },
            Event::Delete(meta) => return self.items.remove(&key_of(&meta)).is_some(),
        }
        false
    }
}

fn key_of<K: Resource>(meta: &K) -> (String, String) {
    (meta.meta().namespace.clone().unwrap_or_default(), meta.meta().name.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta<K>(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<K> {
        let metadata = kube::api::ObjectMeta {
            namespace: namespace.map(Into::into),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        };
        PartialObjectMeta { types: None, metadata, _phantom: std::marker::PhantomData }
    }

    const ENABLED: (&str, &str) = (NAMESPACE_LABEL, NAMESPACE_ENABLED);

    #[test]
    fn namespaces_are_observed_once_listed_never_the_own_or_the_clusters_and_each_opt_in_counts() {
        let ns = Namespaces::default();
        let own = "sandcap-system";
        ns.apply(Event::Init, own);
        for name in ["paperclip-acme", "kube-system", own] {
            ns.apply(Event::InitApply(meta(None, name, &[ENABLED])), own);
        }
        assert!(!ns.listed());
        assert!(ns.apply(Event::InitDone, own));
        assert!(ns.listed() && ns.contains("paperclip-acme"));
        assert!(!ns.contains("kube-system") && !ns.contains(own));
        let before = ns.opted_in();
        assert!(ns.apply(Event::Apply(meta(None, "paperclip-beta", &[ENABLED])), own));
        assert_eq!(ns.opted_in(), before + 1);
        // Relabelled out: the watch's selector reports it as deleted, or as changed without the label.
        assert!(ns.apply(Event::Apply(meta(None, "paperclip-beta", &[])), own));
        assert!(ns.apply(Event::Delete(meta(None, "paperclip-acme", &[ENABLED])), own));
        assert!(!ns.contains("paperclip-acme") && !ns.contains("paperclip-beta"));
        assert_eq!(ns.opted_in(), before + 1, "leaving asks for no new list");
    }

    #[test]
    fn workloads_of_namespaces_not_observed_are_dropped_as_they_arrive() {
        let ns = Namespaces::default();
        ns.apply(Event::Init, "");
        ns.apply(Event::InitApply(meta(None, "paperclip-acme", &[ENABLED])), "");
        ns.apply(Event::InitDone, "");
        let mut table = Table::default();
        table.apply(Event::Init, &ns);
        table.apply(Event::InitApply(meta(Some("paperclip-acme"), "pc-1", &[("a", "b")])), &ns);
        table.apply(Event::InitApply(meta(Some("other"), "pc-2", &[])), &ns);
        assert!(!table.listed);
        assert!(table.apply(Event::InitDone, &ns));
        let keys: Vec<_> = table.items.keys().cloned().collect();
        assert_eq!(keys, [("paperclip-acme".to_string(), "pc-1".to_string())]);
        assert_eq!(table.items[&keys[0]].labels["a"], "b");
        assert!(!table.apply(Event::Apply(meta(Some("other"), "pc-3", &[])), &ns));
        assert!(table.apply(Event::Delete(meta(Some("paperclip-acme"), "pc-1", &[])), &ns));
        assert!(table.items.is_empty());
    }
}
