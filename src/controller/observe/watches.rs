//! The observer's watches, all metadata-only: the opted-in namespaces, and per binding selector
//! the workloads of one kind, cluster-wide, with the selector as the apiserver's label selector.
//! A workload of a namespace not opted in is dropped as it arrives, never kept; when a namespace
//! opts in, the workload watches list again (what they dropped of it is not kept anywhere).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
#[cfg(test)]
use kube::runtime::watcher::Event;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::controller::cache::listing;
use crate::controller::cache::relist::{Shared, Table, Writer, shared};
use crate::controller::cache::{logged, spawn_until};
use crate::controller::capacity::give_back;
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, WorkloadKind, namespace_observed, run_by_another};

/// The opted-in namespaces, once first listed.
#[derive(Clone)]
pub struct Namespaces {
    table: Shared<Opted>,
}

/// The namespaces' table.
pub struct Opted {
    /// sandcap's own namespace, never observed.
    own: String,
    observed: HashSet<String>,
    /// Counts the namespaces that opted in: each one asks the workload watches to list again.
    opted_in: u64,
}

impl Namespaces {
    /// The namespaces, and the watch's end that fills them; `own` is never observed.
    fn new(own: String) -> (Namespaces, Writer<Opted>) {
        let (table, writer) = shared(Opted { own, observed: HashSet::new(), opted_in: 0 });
        (Namespaces { table }, writer)
    }

    pub fn listed(&self) -> bool {
        self.table.is_listed()
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.listed() && self.table.read().observed.contains(namespace)
    }

    pub fn opted_in(&self) -> u64 {
        self.table.read().opted_in
    }

    /// As if the watch had listed `namespaces` (the observer's tests).
    #[cfg(test)]
    pub fn listed_for_tests(namespaces: Vec<PartialObjectMeta<Namespace>>) -> Namespaces {
        let (listed, mut writer) = Namespaces::new(String::new());
        writer.apply(Event::Init);
        namespaces.into_iter().for_each(|ns| _ = writer.apply(Event::InitApply(ns)));
        writer.apply(Event::InitDone);
        listed
    }
}

impl Table for Opted {
    type Object = PartialObjectMeta<Namespace>;
    type Key = String;
    /// Whether the namespaces observed changed.
    type Changes = bool;

    fn put(&mut self, ns: PartialObjectMeta<Namespace>, changed: &mut bool) -> String {
        let name = Self::key(&ns);
        let labels = ns.metadata.labels.unwrap_or_default();
        if !namespace_observed(&name, &labels, &self.own) {
            self.remove(&name, changed);
        } else if self.observed.insert(name.clone()) {
            self.opted_in += 1;
            *changed = true;
        }
        name
    }

    fn remove(&mut self, name: &String, changed: &mut bool) {
        *changed |= self.observed.remove(name);
    }

    fn key(ns: &PartialObjectMeta<Namespace>) -> String {
        ns.metadata.name.clone().unwrap_or_default()
    }

    fn keys(&self) -> impl Iterator<Item = &String> {
        self.observed.iter()
    }

    fn relisted(&mut self, changed: &mut bool) {
        *changed = true;
    }
}

/// Watches the namespaces labelled [`NAMESPACE_LABEL`]`=enabled` until `shutdown` (`own` is never
/// observed), notifying `changed` on each change.
pub fn namespaces(client: &Client, own: String, changed: Arc<Notify>, shutdown: &CancellationToken) -> Namespaces {
    let (namespaces, mut writer) = Namespaces::new(own);
    let config = watcher::Config::default().labels(&format!("{NAMESPACE_LABEL}={NAMESPACE_ENABLED}"));
    let events =
        listing::watch(Api::<PartialObjectMeta<Namespace>>::all(client.clone()), config, &()).default_backoff();
    spawn_until(shutdown, logged(events), move |event| {
        if writer.apply(event) {
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
    /// The labels it keeps of each workload.
    pub labels: Arc<BTreeSet<String>>,
    table: Shared<Items>,
    _stop: DropGuard,
}

/// What a watch selects on the apiserver, and the labels the bindings read of what it brings
/// (no other is kept: Kubernetes bounds each label's size, not their number).
pub struct Selection {
    pub selector: String,
    pub labels: Arc<BTreeSet<String>>,
}

/// The workloads of one watch, of the namespaces observed.
pub struct Items {
    namespaces: Namespaces,
    labels: Arc<BTreeSet<String>>,
    items: HashMap<(String, String), Item>,
}

impl Workloads {
    /// Starts the watch of `kind` at `api_version` selected as `selection` says; it stops when
    /// dropped.
    pub fn start(
        client: &Client,
        kind: WorkloadKind,
        api_version: &str,
        selection: &Selection,
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
        let config = watcher::Config::default().labels(&selection.selector);
        let events = listing::watch(api, config, &resource).default_backoff();
        let labels = selection.labels.clone();
        let (table, mut writer) = shared(Items { namespaces, labels: labels.clone(), items: HashMap::new() });
        let stop = shutdown.child_token();
        spawn_until(&stop, logged(events), move |event| {
            if writer.apply(event) {
                changed.notify_one();
            }
        });
        Workloads { kind, api_version: api_version.to_string(), labels, table, _stop: stop.drop_guard() }
    }

    /// A watch that never ran, holding `items` as listed (the observer's tests).
    #[cfg(test)]
    pub fn listed_with(kind: WorkloadKind, api_version: &str, items: Vec<(&str, &str, Item)>) -> Workloads {
        let items = items.into_iter().map(|(ns, name, item)| ((ns.to_string(), name.to_string()), item)).collect();
        let namespaces = Namespaces::new(String::new()).0;
        let (table, mut writer) = shared(Items { namespaces, labels: Arc::default(), items });
        // An end of a list whose start was never seen: it takes nothing away.
        writer.apply(Event::InitDone);
        let stop = CancellationToken::new().drop_guard();
        Workloads { kind, api_version: api_version.to_string(), labels: Arc::default(), table, _stop: stop }
    }

    /// Whether it has listed once.
    pub fn listed(&self) -> bool {
        self.table.is_listed()
    }

    /// Calls `f` with every workload it holds: namespace, name, what is kept of it.
    pub fn each(&self, mut f: impl FnMut(&str, &str, &Item)) {
        let table = self.table.read();
        for ((namespace, name), item) in &table.items {
            f(namespace, name, item);
        }
    }

    /// Forgets the workloads of namespaces no longer observed.
    pub fn retain(&self, namespaces: &Namespaces) {
        self.table.write().items.retain(|(ns, _), _| namespaces.contains(ns));
    }
}

impl Table for Items {
    type Object = PartialObjectMeta<DynamicObject>;
    type Key = (String, String);
    /// Whether what is held changed.
    type Changes = bool;

    fn put(&mut self, meta: PartialObjectMeta<DynamicObject>, changed: &mut bool) -> (String, String) {
        let key = Self::key(&meta);
        let metadata = meta.metadata;
        // A workload being deleted has no lease to get: the garbage collector takes it meanwhile;
        // one of a namespace not observed is dropped as it arrives, and one another workload runs
        // (a claim's Sandbox) has its controller's lease.
        let owners = metadata.owner_references.as_deref().unwrap_or_default();
        let kept = metadata.deletion_timestamp.is_none() && self.namespaces.contains(&key.0) && !run_by_another(owners);
        match metadata.uid.filter(|_| kept) {
            Some(uid) => {
                let mut labels = metadata.labels.unwrap_or_default();
                labels.retain(|label, _| self.labels.contains(label));
                self.items.insert(key.clone(), Item { uid, labels });
                *changed = true;
            }
            None => self.remove(&key, changed),
        }
        key
    }

    fn remove(&mut self, key: &(String, String), changed: &mut bool) {
        *changed |= self.items.remove(key).is_some();
        give_back(&mut self.items);
    }

    fn key(meta: &PartialObjectMeta<DynamicObject>) -> (String, String) {
        (meta.metadata.namespace.clone().unwrap_or_default(), meta.metadata.name.clone().unwrap_or_default())
    }

    fn keys(&self) -> impl Iterator<Item = &(String, String)> {
        self.items.keys()
    }

    fn relisted(&mut self, changed: &mut bool) {
        *changed = true;
    }
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
        let own = "sandcap-system";
        let (ns, mut writer) = Namespaces::new(own.into());
        writer.apply(Event::Init);
        for name in ["paperclip-acme", "kube-system", own] {
            writer.apply(Event::InitApply(meta(None, name, &[ENABLED])));
        }
        assert!(!ns.listed() && !ns.contains("paperclip-acme"));
        assert!(writer.apply(Event::InitDone));
        assert!(ns.listed() && ns.contains("paperclip-acme"));
        assert!(!ns.contains("kube-system") && !ns.contains(own));
        let before = ns.opted_in();
        assert!(writer.apply(Event::Apply(meta(None, "paperclip-beta", &[ENABLED]))));
        assert_eq!(ns.opted_in(), before + 1);
        // Relabelled out: the watch's selector reports it as deleted, or as changed without the label.
        assert!(writer.apply(Event::Apply(meta(None, "paperclip-beta", &[]))));
        assert!(writer.apply(Event::Delete(meta(None, "paperclip-acme", &[ENABLED]))));
        assert!(!ns.contains("paperclip-acme") && !ns.contains("paperclip-beta"));
        assert_eq!(ns.opted_in(), before + 1, "leaving asks for no new list");
    }

    #[test]
    fn workloads_of_namespaces_not_observed_are_dropped_as_they_arrive_and_unread_labels_never_kept() {
        let ns = Namespaces::listed_for_tests(vec![meta(None, "paperclip-acme", &[ENABLED])]);
        let labels = Arc::new(BTreeSet::from(["a".to_string()]));
        let (table, mut writer) = shared(Items { namespaces: ns, labels, items: HashMap::new() });
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(meta(
            Some("paperclip-acme"),
            "pc-1",
            &[("a", "b"), ("unread", "x".repeat(63).as_str())],
        )));
        writer.apply(Event::InitApply(meta(Some("other"), "pc-2", &[])));
        assert!(!table.is_listed());
        assert!(writer.apply(Event::InitDone));
        let keys: Vec<_> = table.read().items.keys().cloned().collect();
        assert_eq!(keys, [("paperclip-acme".to_string(), "pc-1".to_string())]);
        assert_eq!(table.read().items[&keys[0]].labels, BTreeMap::from([("a".into(), "b".into())]), "no label unread");
        assert!(!writer.apply(Event::Apply(meta(Some("other"), "pc-3", &[]))));
        assert!(writer.apply(Event::Delete(meta(Some("paperclip-acme"), "pc-1", &[]))));
        assert!(table.read().items.is_empty());
        writer.apply(Event::Apply(meta(Some("paperclip-acme"), "pc-4", &[])));
        let mut deleting = meta(Some("paperclip-acme"), "pc-4", &[]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
        assert!(writer.apply(Event::Apply(deleting)), "a workload being deleted is dropped");
        assert!(table.read().items.is_empty());
    }
}
