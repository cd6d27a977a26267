//! Change detection for the watches of [`super::cache`]: what of an object each reader reads (a
//! view), and which objects a watch event changed for them, deletions included (those a re-list
//! no longer holds too).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

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

/// Remembers a view of every object of one watch and tells which objects it changed for.
pub(super) struct Seen<K: Resource<DynamicType = ()>> {
    view: fn(&K) -> u64,
    values: HashMap<ObjectRef<K>, u64>,
    /// The objects of the list in progress (between `Init` and `InitDone`).
    listing: Option<HashSet<ObjectRef<K>>>,
    listed: bool,
}

impl<K: Resource<DynamicType = ()> + Clone> Seen<K> {
    pub(super) fn new(view: fn(&K) -> u64) -> Self {
        Seen { view, values: HashMap::new(), listing: None, listed: false }
    }

    /// Whether the first list has completed (before that, every object is new to every reader).
    pub(super) fn listed(&self) -> bool {
        self.listed
    }

    /// The objects whose view this event changed, deletions included: for `Delete` and
    /// `InitDone` (the objects a re-list no longer holds) every object returned is deleted.
    pub(super) fn observe(&mut self, event: &watcher::Event<K>) -> Vec<ObjectRef<K>> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let key = key_of(obj);
                if let (watcher::Event::InitApply(_), Some(listing)) = (event, self.listing.as_mut()) {
                    listing.insert(key.clone());
                }
                let view = (self.view)(obj);
                if self.values.insert(key.clone(), view) == Some(view) { Vec::new() } else { vec![key] }
            }
            watcher::Event::Delete(obj) => {
                let key = key_of(obj);
                self.values.remove(&key);
                vec![key]
            }
            watcher::Event::InitDone => {
                self.listed = true;
                let Some(listing) = self.listing.take() else { return Vec::new() };
                let gone: Vec<ObjectRef<K>> = self.values.keys().filter(|k| !listing.contains(*k)).cloned().collect();
                for key in &gone {
                    self.values.remove(key);
                }
                gone
            }
        }
    }
}

/// An object's reference with its uid (to forget it by when it is deleted) and without its
/// resourceVersion: one is kept per object, and the version changes with every write.
fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectRef<K> {
    let mut key = ObjectRef::from_obj(obj);
    key.extra.resource_version = None;
    key
}

/// Calls `forget` with the uid of each object `event` deleted (for `Delete` and `InitDone`,
/// [`Seen::observe`] returns deleted objects only, each reference with the uid first seen).
pub(super) fn forget_deleted<K: Resource>(event: &watcher::Event<K>, changed: &[ObjectRef<K>], forget: &impl Fn(&str)) {
    if matches!(event, watcher::Event::Delete(_) | watcher::Event::InitDone) {
        changed.iter().filter_map(|r| r.extra.uid.as_deref()).for_each(forget);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use crate::controller::fixtures::{T0, lease, provider, secret, time};
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

    #[test]
    fn a_status_write_triggers_nothing_a_spec_change_or_a_deletion_does() {
        let mut spec = Seen::new(generation);
        let first = lease("team-a", "l").of("p", "k").build();
        let key = ObjectRef::from_obj(&first);
        assert_eq!(spec.observe(&watcher::Event::Apply(first.clone())), std::slice::from_ref(&key), "new");
        let mut status_only = first.clone();
        status_only.status = Some(Default::default());
        assert!(spec.observe(&watcher::Event::Apply(status_only)).is_empty(), "status write");
        let mut edited = first.clone();
        edited.metadata.generation = Some(2);
        assert_eq!(spec.observe(&watcher::Event::Apply(edited.clone())), std::slice::from_ref(&key), "spec change");
        assert_eq!(spec.observe(&watcher::Event::Delete(edited)), [key], "deletion");
    }

    #[test]
    fn a_relist_reports_what_was_deleted_during_the_gap_and_nothing_else() {
        let mut spec = Seen::new(generation);
        let kept = lease("team-a", "kept").build();
        let gone = lease("team-a", "gone").build();
        assert!(!spec.listed());
        spec.observe(&watcher::Event::Init);
        spec.observe(&watcher::Event::InitApply(kept.clone()));
        spec.observe(&watcher::Event::InitApply(gone.clone()));
        assert!(spec.observe(&watcher::Event::InitDone).is_empty(), "the first list deletes nothing");
        assert!(spec.listed());

        spec.observe(&watcher::Event::Init);
        assert!(spec.observe(&watcher::Event::InitApply(kept.clone())).is_empty(), "unchanged");
        let deleted = spec.observe(&watcher::Event::InitDone);
        assert_eq!(deleted, [ObjectRef::from_obj(&gone)]);
        assert!(spec.values.len() == 1, "the deleted object is forgotten");
        // ... and so is everything the controllers kept about it, by its uid.
        let forgotten = std::cell::RefCell::new(Vec::new());
        let forget = |uid: &str| forgotten.borrow_mut().push(uid.to_string());
        forget_deleted(&watcher::Event::InitDone, &deleted, &forget);
        forget_deleted(&watcher::Event::Apply(kept.clone()), &[ObjectRef::from_obj(&kept)], &forget);
        assert_eq!(*forgotten.borrow(), ["team-a-gone-uid"]);
    }
}
