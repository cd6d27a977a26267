//! Which leases read which provider and which Secret: the reverse of what each lease names, kept
//! by the lease watch as events arrive, so that a provider or Secret event finds its leases
//! without reading every lease.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::cached::CachedLease;
use crate::api::SandboxLease;

type LeaseRef = ObjectRef<CachedLease>;

/// The index, shared between the watch that writes it and the watches that read it.
#[derive(Clone, Default)]
pub struct Relations(Arc<RwLock<Index>>);

#[derive(Default)]
struct Index {
    /// What each lease reads, to take it out of the reverse maps when that changes.
    reads: HashMap<LeaseRef, Reads>,
    by_provider: HashMap<String, HashSet<LeaseRef>>,
    /// By (namespace, name): a lease reads Secrets of its own namespace only.
    by_secret: HashMap<(String, String), HashSet<LeaseRef>>,
}

#[derive(Clone, PartialEq, Eq)]
struct Reads {
    provider: String,
    secrets: HashSet<(String, String)>,
}

impl Reads {
    fn of(lease: &SandboxLease) -> Reads {
        let namespace = lease.namespace().unwrap_or_default();
        let secrets =
            lease.spec.config_from.iter().map(|c| (namespace.clone(), c.secret_key_ref.name.clone())).collect();
        Reads { provider: lease.spec.provider_ref.name.clone(), secrets }
    }
}

impl Relations {
    /// Records what `lease` reads now (a new lease, or one whose references changed).
    pub fn apply(&self, lease: &CachedLease) {
        let key = reference(lease);
        let reads = Reads::of(lease);
        let mut index = self.0.write().expect("not poisoned");
        if index.reads.get(&key) == Some(&reads) {
            return;
        }
        index.unlink(&key);
        index.by_provider.entry(reads.provider.clone()).or_default().insert(key.clone());
        for secret in &reads.secrets {
            index.by_secret.entry(secret.clone()).or_default().insert(key.clone());
        }
        index.reads.insert(key, reads);
    }

    /// Forgets a deleted lease.
    pub fn remove(&self, lease: &LeaseRef) {
        self.0.write().expect("not poisoned").unlink(lease);
    }

    /// The leases that resolve against provider `name`.
    pub fn leases_of_provider(&self, name: &str) -> Vec<LeaseRef> {
        let index = self.0.read().expect("not poisoned");
        index.by_provider.get(name).map(|leases| leases.iter().cloned().collect()).unwrap_or_default()
    }

    /// The leases whose `configFrom` reads Secret `name` in `namespace`.
    pub fn leases_of_secret(&self, namespace: &str, name: &str) -> Vec<LeaseRef> {
        let index = self.0.read().expect("not poisoned");
        let key = (namespace.to_string(), name.to_string());
        index.by_secret.get(&key).map(|leases| leases.iter().cloned().collect()).unwrap_or_default()
    }
}

/// An object's reference without its uid and resourceVersion, which take no part in comparing
/// references: a map that holds one per object (this index, the caches' change detection) must
/// not hold copies of them.
pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectRef<K> {
    let mut key = ObjectRef::from_obj(obj);
    key.extra = Default::default();
    key
}

impl Index {
    fn unlink(&mut self, lease: &LeaseRef) {
        let Some(old) = self.reads.remove(lease) else { return };
        remove_from(&mut self.by_provider, &old.provider, lease);
        for secret in &old.secrets {
            remove_from(&mut self.by_secret, secret, lease);
        }
    }
}

/// Takes `lease` out of `map[key]`, and the entry with it once empty, so the index holds no more
/// keys than the leases name.
fn remove_from<Q: std::hash::Hash + Eq>(map: &mut HashMap<Q, HashSet<LeaseRef>>, key: &Q, lease: &LeaseRef) {
    if let Some(leases) = map.get_mut(key) {
        leases.remove(lease);
        if leases.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::lease;

    fn cached(lease: SandboxLease) -> CachedLease {
        lease.into()
    }

    fn names(mut leases: Vec<LeaseRef>) -> Vec<String> {
        leases.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        leases.into_iter().map(|l| format!("{}/{}", l.namespace.unwrap_or_default(), l.name)).collect()
    }

    #[test]
    fn a_lease_is_found_by_its_provider_and_by_each_secret_it_reads() {
        let relations = Relations::default();
        relations
            .apply(&cached(lease("team-a", "one").of("p", "k").config_from("s", "a").config_from("t", "b").build()));
        relations.apply(&cached(lease("team-b", "two").of("p", "k").build()));
        relations.apply(&cached(lease("team-a", "other").of("q", "k").build()));
        assert_eq!(names(relations.leases_of_provider("p")), ["team-a/one", "team-b/two"]);
        assert_eq!(names(relations.leases_of_secret("team-a", "s")), ["team-a/one"]);
        assert_eq!(names(relations.leases_of_secret("team-a", "t")), ["team-a/one"]);
        // A lease reads Secrets of its own namespace only.
        assert!(relations.leases_of_secret("team-b", "s").is_empty());
        assert!(relations.leases_of_provider("nobody").is_empty());
        let kept = relations.leases_of_provider("p");
        assert!(kept.iter().all(|l| l.extra.uid.is_none() && l.extra.resource_version.is_none()), "lean keys");
    }

    #[test]
    fn a_lease_moved_to_another_provider_leaves_the_first() {
        let relations = Relations::default();
        relations.apply(&cached(lease("team-a", "one").of("p", "k").build()));
        relations.apply(&cached(lease("team-a", "one").of("q", "k").build()));
        assert!(relations.leases_of_provider("p").is_empty());
        assert_eq!(names(relations.leases_of_provider("q")), ["team-a/one"]);
        assert_eq!(relations.0.read().unwrap().by_provider.len(), 1, "no empty entry is kept");
    }

    #[test]
    fn a_renamed_secret_reference_no_longer_relates_the_old_secret() {
        let relations = Relations::default();
        relations.apply(&cached(lease("team-a", "one").of("p", "k").config_from("old", "a").build()));
        relations.apply(&cached(lease("team-a", "one").of("p", "k").config_from("new", "a").build()));
        assert!(relations.leases_of_secret("team-a", "old").is_empty());
        assert_eq!(names(relations.leases_of_secret("team-a", "new")), ["team-a/one"]);
    }

    #[test]
    fn a_deleted_lease_is_in_no_relation() {
        let relations = Relations::default();
        relations.apply(&cached(lease("team-a", "one").of("p", "k").config_from("s", "a").build()));
        relations.apply(&cached(lease("team-a", "two").of("p", "k").config_from("s", "a").build()));
        relations.remove(&ObjectRef::new("one").within("team-a"));
        assert_eq!(names(relations.leases_of_provider("p")), ["team-a/two"]);
        assert_eq!(names(relations.leases_of_secret("team-a", "s")), ["team-a/two"]);
        relations.remove(&ObjectRef::new("two").within("team-a"));
        let index = relations.0.read().unwrap();
        assert!(index.reads.is_empty() && index.by_provider.is_empty() && index.by_secret.is_empty());
    }
}
