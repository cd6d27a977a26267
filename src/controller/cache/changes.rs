//! Change detection for the caches' watches: what of an object each reader reads (a
//! view), and which objects a watch event changed for them, deletions included (those a re-list
//! no longer holds too).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::relist::{Relist, Table};
use crate::controller::capacity::give_back;
use sandcap_core::api::SandboxProvider;

/// What of a provider a lease reads: its identity, its drivers and the worker's verdict. A probe
/// that returns what it returned before (a new `lastProbeTime` only) changes none of it.
pub fn lease_view(provider: &SandboxProvider) -> u64 {
    let mut hasher = DefaultHasher::new();
    provider.metadata.uid.hash(&mut hasher);
    provider.spec.plugin_key.hash(&mut hasher);
    serde_json::to_string(&provider.spec.environment_drivers).unwrap_or_default().hash(&mut hasher);
    if let Some(worker) = provider.status.as_ref().and_then(|s| s.worker.as_ref()) {
        serde_json::to_string(&worker.probe).unwrap_or_default().hash(&mut hasher);
        worker.supported_methods.hash(&mut hasher);
    }
    hasher.finish()
}

pub(super) fn secret_view(secret: &Secret) -> u64 {
    let mut hasher = DefaultHasher::new();
    if let Some(data) = &secret.data {
        for (key, value) in data {
            key.hash(&mut hasher);
            value.0.hash(&mut hasher);
        }
    }
    hasher.finish()
}

pub(super) fn generation<K: Resource>(obj: &K) -> u64 {
    obj.meta().generation.map_or(0, |g| g as u64)
}

/// What is read of a provider: its generation (by its own reconcile) and its [`lease_view`].
#[derive(Clone, Copy, PartialEq)]
pub(super) struct ProviderView {
    pub generation: u64,
    pub lease_view: u64,
}

pub(super) fn provider_view(provider: &SandboxProvider) -> ProviderView {
    ProviderView { generation: generation(provider), lease_view: lease_view(provider) }
}

/// Remembers a view of every object of one watch and tells what each event changed of it.
pub(super) struct Seen<K: Resource<DynamicType = ()>, V> {
    views: Views<K, V>,
    relist: Relist<ObjectRef<K>>,
}

/// What one event changed of one object's view: `before` is `None` for a new object, `after` for
/// a deleted one (also one a re-list no longer holds), whose key holds the uid first seen.
pub(super) struct Change<K: Resource<DynamicType = ()>, V> {
    pub key: ObjectRef<K>,
    pub before: Option<V>,
    pub after: Option<V>,
}

struct Views<K: Resource<DynamicType = ()>, V> {
    view: fn(&K) -> V,
    values: HashMap<ObjectRef<K>, V>,
}

impl<K: Resource<DynamicType = ()> + Clone, V: Clone + PartialEq> Seen<K, V> {
    pub(super) fn new(view: fn(&K) -> V) -> Self {
        Seen { views: Views { view, values: HashMap::new() }, relist: Relist::default() }
    }

    /// Whether the first list has completed (before that, every object is new to every reader).
    pub(super) fn listed(&self) -> bool {
        self.relist.listed()
    }

    /// The objects whose view `event` changed, deletions included.
    pub(super) fn observe(&mut self, event: watcher::Event<K>) -> Vec<Change<K, V>> {
        self.relist.apply(&mut self.views, event)
    }
}

impl<K: Resource<DynamicType = ()> + Clone, V: Clone + PartialEq> Table for Views<K, V> {
    type Object = K;
    type Key = ObjectRef<K>;
    type Changes = Vec<Change<K, V>>;

    fn put(&mut self, object: K, changes: &mut Self::Changes) -> ObjectRef<K> {
        let key = Self::key(&object);
        let after = (self.view)(&object);
        let before = self.values.insert(key.clone(), after.clone());
        if before.as_ref() != Some(&after) {
            changes.push(Change { key: key.clone(), before, after: Some(after) });
        }
        key
    }

    fn remove(&mut self, key: &ObjectRef<K>, changes: &mut Self::Changes) {
        if let Some((key, before)) = self.values.remove_entry(key) {
            changes.push(Change { key, before: Some(before), after: None });
        }
        give_back(&mut self.values);
    }

    /// An object's reference with its uid (to forget it by when it is deleted) and without its
    /// resourceVersion: one is kept per object, and the version changes with every write.
    fn key(object: &K) -> ObjectRef<K> {
        let mut key = ObjectRef::from_obj(object);
        key.extra.resource_version = None;
        key
    }

    fn keys(&self) -> impl Iterator<Item = &ObjectRef<K>> {
        self.values.keys()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use crate::controller::fixtures::{T0, lease, provider, secret, time};
    use sandcap_core::api::SandboxLease;
    use sandcap_core::vocabulary::CONFIG_SOURCE_LABEL;

    #[test]
    fn a_probe_that_answers_as_before_changes_no_lease_view() {
        let before = provider("p").driver("k").probed_ok(&["environmentExecute"]).at(T0).build();
        let mut reprobed =
            provider("p").driver("k").probed_ok(&["environmentExecute"]).at("2030-01-01T00:05:00Z").build();
        reprobed.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "CapabilitiesResolved".into(),
            message: "a new transition".into(),
            observed_generation: Some(1),
            last_transition_time: time("2030-01-01T00:05:00Z"),
        }];
        assert_eq!(lease_view(&before), lease_view(&reprobed));
    }

    #[test]
    fn what_a_lease_reads_of_its_provider_changes_its_view() {
        let base = || provider("p").driver("k").probed_ok(&["environmentExecute"]);
        let view = lease_view(&base().build());
        let changed = [
            ("uid", base().uid("re-created").build()),
            ("pluginKey", base().plugin_key("other.plugin").build()),
            ("drivers", base().declares(&["nativeSyncIn"]).build()),
            ("methods", provider("p").driver("k").probed_ok(&["environmentSyncIn"]).build()),
            ("verdict", provider("p").driver("k").probe_failed("timed out").build()),
            ("no status", provider("p").driver("k").build()),
        ];
        for (what, provider) in changed {
            assert_ne!(lease_view(&provider), view, "{what}");
        }
    }

    #[test]
    fn only_a_secrets_data_changes_its_view() {
        let data = json!({"config.json": "e30="});
        let secret = |data, labels| secret("team-a", "s", data, labels);
        let view = secret_view(&secret(data.clone(), json!({CONFIG_SOURCE_LABEL: "true"})));
        assert_eq!(secret_view(&secret(data, json!({CONFIG_SOURCE_LABEL: "true", "team": "a"}))), view);
        assert_ne!(secret_view(&secret(json!({"config.json": "e30K"}), json!({}))), view);
        assert_ne!(secret_view(&secret(json!({"other.json": "e30="}), json!({}))), view);
    }

    fn keys<V>(changes: Vec<Change<SandboxLease, V>>) -> Vec<ObjectRef<SandboxLease>> {
        changes.into_iter().map(|change| change.key).collect()
    }

    #[test]
    fn a_status_write_triggers_nothing_a_spec_change_or_a_deletion_does() {
        let mut spec = Seen::new(generation);
        let first = lease("team-a", "l").of("p", "k").build();
        let key = ObjectRef::from_obj(&first);
        assert_eq!(keys(spec.observe(watcher::Event::Apply(first.clone()))), std::slice::from_ref(&key), "new");
        let mut status_only = first.clone();
        status_only.status = Some(Default::default());
        assert!(spec.observe(watcher::Event::Apply(status_only)).is_empty(), "status write");
        let mut edited = first.clone();
        edited.metadata.generation = Some(2);
        let changed = spec.observe(watcher::Event::Apply(edited.clone()));
        assert_eq!((changed[0].before, changed[0].after), (Some(1), Some(2)), "spec change");
        let deleted = spec.observe(watcher::Event::Delete(edited));
        assert_eq!((&deleted[0].key, deleted[0].after), (&key, None), "deletion");
    }

    #[test]
    fn a_relist_reports_what_was_deleted_during_the_gap_and_nothing_else() {
        let mut spec = Seen::new(generation);
        let kept = lease("team-a", "kept").build();
        let gone = lease("team-a", "gone").build();
        assert!(!spec.listed());
        spec.observe(watcher::Event::Init);
        spec.observe(watcher::Event::InitApply(kept.clone()));
        spec.observe(watcher::Event::InitApply(gone.clone()));
        assert!(spec.observe(watcher::Event::InitDone).is_empty(), "the first list deletes nothing");
        assert!(spec.listed());

        spec.observe(watcher::Event::Init);
        assert!(spec.observe(watcher::Event::InitApply(kept.clone())).is_empty(), "unchanged");
        let deleted = spec.observe(watcher::Event::InitDone);
        assert_eq!(deleted.iter().map(|c| &c.key).collect::<Vec<_>>(), [&ObjectRef::from_obj(&gone)]);
        assert_eq!(deleted[0].after, None);
        // ... with the uid first seen, by which everything the controllers kept about it is forgotten.
        assert_eq!(deleted[0].key.extra.uid.as_deref(), Some("team-a-gone-uid"));
        assert!(spec.views.values.len() == 1, "the deleted object is forgotten");
    }
}
