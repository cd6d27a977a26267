//! The Secrets leases read as `configFrom`: which namespaces are in scope (`--secret-namespaces`),
//! the labelled Secrets cached there, and what is kept of each.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::drop_managed_fields;
use sandcap_core::api::{MAX_CONFIG_BYTES, SecretKeyRef};
use sandcap_core::contract::SecretLookup;

/// The namespaces whose Secrets sandcap reads (`--secret-namespaces`, which `run` parses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretScope {
    All,
    /// Possibly none: then every `configFrom` reads as a missing Secret and narrows.
    Namespaces(Vec<String>),
}

/// The labelled `configFrom` Secrets of every namespace in scope, one cache per namespace (a
/// re-list of one namespace must not empty the others), each as [`keep_config_values`] trims it.
#[derive(Clone, Default)]
pub struct SecretCache {
    pub(super) all: Option<Store<Secret>>,
    pub(super) namespaced: BTreeMap<String, Store<Secret>>,
}

impl SecretCache {
    /// What a lease in `namespace` finds for `r`. A Secret out of scope or without the label is
    /// not in the cache, so it reads as missing, with the same message: nothing about it leaks.
    pub fn lookup(&self, namespace: &str, r: &SecretKeyRef) -> SecretLookup {
        let store = self.all.as_ref().or_else(|| self.namespaced.get(namespace));
        let Some(secret) = store.and_then(|s| s.get(&ObjectRef::new(&r.name).within(namespace))) else {
            return SecretLookup::MissingSecret;
        };
        match secret.data.as_ref().and_then(|data| data.get(&r.key)) {
            Some(value) => SecretLookup::Found(value.0.clone()),
            None if secret.annotations().contains_key(&r.key) => SecretLookup::TooLarge,
            None => SecretLookup::MissingKey,
        }
    }

    /// Every store (for readiness).
    pub(super) fn stores(&self) -> impl Iterator<Item = &Store<Secret>> {
        self.all.iter().chain(self.namespaced.values())
    }
}

/// What is kept of a labelled Secret: its data, each value within the bound of a config source
/// ([`MAX_CONFIG_BYTES`]), so that a Secret costs at most its values within the bound (a value of
/// 1 MiB costs nothing). A value over the bound is dropped and its key kept as an annotation of
/// the copy, which says that it was: the Secret's own annotations are dropped (nothing reads
/// them, and kubectl's last-applied one repeats the data).
pub(super) fn keep_config_values(secret: &mut Secret) {
    drop_managed_fields(secret);
    let mut over = BTreeMap::new();
    if let Some(data) = &mut secret.data {
        data.retain(|key, value| {
            let within = value.0.len() <= MAX_CONFIG_BYTES;
            if !within {
                over.insert(key.clone(), String::new());
            }
            within
        });
    }
    secret.metadata.annotations = Some(over).filter(|over| !over.is_empty());
    secret.string_data = None;
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;

    use kube::runtime::{reflector, watcher};

    use super::*;
    use crate::controller::fixtures::secret;
    use sandcap_core::vocabulary::CONFIG_SOURCE_LABEL;

    #[test]
    fn a_secret_is_kept_with_its_values_within_the_bound_and_the_rest_named() {
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let big = vec![b'7'; 1024 * 1024 - 64];
        let within = vec![b' '; MAX_CONFIG_BYTES];
        let data = json!({"big.json": b64(&big), "within.json": b64(&within), "small.json": b64(b"{}")});
        let mut s = secret("team-a", "creds", data, json!({CONFIG_SOURCE_LABEL: "true"}));
        s.metadata.annotations = Some([("kubectl.kubernetes.io/last-applied-configuration".into(), b64(&big))].into());
        keep_config_values(&mut s);
        let kept: usize = s.data.iter().flatten().map(|(_, v)| v.0.len()).sum();
        assert_eq!(kept, MAX_CONFIG_BYTES + 2, "the big value and the annotation are gone");

        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(s));
        let cache = SecretCache { all: Some(store), namespaced: BTreeMap::new() };
        let lookup = |name: &str, key: &str| {
            cache.lookup("team-a", &SecretKeyRef { name: name.into(), key: key.into(), ..Default::default() })
        };
        assert_eq!(lookup("creds", "big.json"), SecretLookup::TooLarge);
        assert_eq!(lookup("creds", "small.json"), SecretLookup::Found(b"{}".to_vec()));
        assert_eq!(lookup("creds", "within.json"), SecretLookup::Found(within));
        assert_eq!(lookup("creds", "other.json"), SecretLookup::MissingKey);
        assert_eq!(lookup("other", "big.json"), SecretLookup::MissingSecret);
    }
}
