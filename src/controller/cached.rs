//! What the lease cache keeps of each lease: only what the next reconcile reads, so that memory
//! grows with the leases' specs and not with their statuses or their write history.
//!
//! A lease is trimmed as it is decoded from the watch ([`CachedLease`]), then kept between
//! reconciles in a compact form ([`Kept`]: its spec as JSON bytes, decoded again for each
//! reconcile, which costs microseconds where the decoded spec's maps and strings cost a kilobyte).
//! The watch's form: its spec, name, namespace, uid, generation
//! and resourceVersion stay; labels, annotations, managed fields and the other metadata are
//! skipped by the decoder (nothing reads them). A `spec.config` over its bound (a lease stored
//! without the webhook) is dropped as it is decoded, only that it was over is kept, and it fails
//! to resolve: no lease costs more than the bound. Of the published status stay the pin, each condition's status and
//! `lastTransitionTime` (what a condition that keeps its status keeps), and a digest of the whole
//! status: the reconcile writes when the status it computes hashes differently, and only then.

use std::borrow::Cow;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::LazyLock;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;

use sandcap_core::api::{Pinned, ResolvableLease, SandboxLease, SandboxLeaseSpec, SandboxLeaseStatus};
use sandcap_core::vocabulary::{ConditionStatus, ConditionType};
use sandcap_core::workloads::{KeptLease, OBSERVED_FROM_LABEL, Owner};

/// A lease as a reconcile reads it, which is all the cache holds of it: its spec, the metadata that
/// name and version it (name, namespace, uid, generation, resourceVersion), its pin and what is
/// known of its published status.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "Wire")]
pub struct CachedLease {
    /// Of the metadata, only the fields above are set.
    metadata: ObjectMeta,
    pub spec: SandboxLeaseSpec,
    pinned: Option<Pinned>,
    /// `None` while the lease has no status.
    published: Option<Published>,
    /// Set on a lease labelled [`OBSERVED_FROM_LABEL`] only.
    observed: Option<Box<Observed>>,
}

/// What the observer reads of a lease that carries [`OBSERVED_FROM_LABEL`]: the label's value
/// and its owner references (a hand-made lease keeps neither).
#[derive(Clone, Debug, PartialEq)]
struct Observed {
    from: Box<str>,
    owners: Box<[Owner]>,
}

/// What is kept of a published status besides the pin.
#[derive(Clone, Debug, PartialEq)]
struct Published {
    digest: u64,
    /// Whether it grants any capability.
    grants: bool,
    since: Box<[Since]>,
}

/// One condition's status and since when it holds it.
#[derive(Clone, Debug, PartialEq)]
struct Since {
    type_: ConditionType,
    status: ConditionStatus,
    at: Time,
}

/// A lease as the watch delivers it, as far as the cache reads it: the decoder skips labels,
/// annotations, managed fields and the rest of the metadata without allocating them (they would
/// be freed at once, leaving the allocator's pages with holes between the leases it keeps).
#[derive(Deserialize)]
struct Wire {
    metadata: Meta,
    spec: SandboxLeaseSpec,
    #[serde(default)]
    status: Option<SandboxLeaseStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    generation: Option<i64>,
    resource_version: Option<String>,
    #[serde(default)]
    labels: ObservedFrom,
    #[serde(default)]
    owner_references: Vec<WireOwner>,
}

/// Of the labels, only [`OBSERVED_FROM_LABEL`]'s value, read without allocating the others.
#[derive(Default)]
struct ObservedFrom(Option<String>);

impl<'de> Deserialize<'de> for ObservedFrom {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ObservedFrom;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ObservedFrom, A::Error> {
                let mut from = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == OBSERVED_FROM_LABEL {
                        from = Some(map.next_value()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(ObservedFrom(from))
            }
            fn visit_unit<E>(self) -> Result<ObservedFrom, E> {
                Ok(ObservedFrom(None))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireOwner {
    api_version: String,
    kind: String,
    uid: String,
}

impl From<SandboxLease> for CachedLease {
    fn from(lease: SandboxLease) -> Self {
        let m = lease.metadata;
        let from = m.labels.and_then(|mut labels| labels.remove(OBSERVED_FROM_LABEL));
        let owners = m.owner_references.into_iter().flatten();
        let metadata = Meta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            generation: m.generation,
            resource_version: m.resource_version,
            labels: ObservedFrom(from),
            owner_references: owners
                .map(|o| WireOwner { api_version: o.api_version, kind: o.kind, uid: o.uid })
                .collect(),
        };
        Wire { metadata, spec: lease.spec, status: lease.status }.into()
    }
}

impl From<Wire> for CachedLease {
    fn from(lease: Wire) -> Self {
        let published = lease.status.as_ref().map(|status| Published {
            digest: digest(status),
            grants: status.capabilities.entries().any(|(_, on)| on),
            since: status
                .conditions
                .iter()
                .filter_map(|c| {
                    let type_ = ConditionType::parse(&c.type_)?;
                    // A condition in another status is not sandcap's: none it computes keeps its time.
                    let status = ConditionStatus::parse(&c.status)?;
                    Some(Since { type_, status, at: c.last_transition_time.clone() })
                })
                .collect(),
        });
        let pinned = lease.status.and_then(|s| s.pinned);
        let Meta { name, namespace, uid, generation, resource_version, labels, owner_references } = lease.metadata;
        let observed = labels.0.map(|from| {
            let owners =
                owner_references.into_iter().map(|o| Owner { api_version: o.api_version, kind: o.kind, uid: o.uid });
            Box::new(Observed { from: from.into_boxed_str(), owners: owners.collect() })
        });
        let mut spec = lease.spec;
        spec.drop_config_over_bound();
        let metadata = ObjectMeta { name, namespace, uid, generation, resource_version, ..ObjectMeta::default() };
        CachedLease { metadata, spec, pinned, published, observed }
    }
}

/// What the lease table keeps of a lease between reconciles (its key holds the namespace and name).
pub struct Kept {
    uid: Option<Box<str>>,
    generation: Option<i64>,
    /// What the status write names as the version it was computed from (docs/controller.md,
    /// "Status writes carry a precondition").
    resource_version: Option<Box<str>>,
    spec: Box<[u8]>,
    /// The spec's `config_over_bound`, which its JSON does not carry.
    config_over_bound: bool,
    pinned: Option<Box<Pinned>>,
    published: Option<Published>,
    observed: Option<Box<Observed>>,
}

impl Kept {
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    #[cfg(test)]
    pub fn spec(&self) -> &[u8] {
        &self.spec
    }

    /// Takes the published status (and pin) and the version of `lease`, the same generation of
    /// this lease: its spec is the one kept. Whether what the observer reads of it changed.
    pub fn republish(&mut self, lease: CachedLease) -> bool {
        self.resource_version = lease.metadata.resource_version.map(String::into_boxed_str);
        if self.pinned.as_deref() != lease.pinned.as_ref() {
            self.pinned = lease.pinned.map(Box::new);
        }
        self.published = lease.published;
        // Labels and owners change without a new generation.
        let moved = self.observed != lease.observed;
        self.observed = lease.observed;
        moved
    }

    /// Whether the lease carries [`OBSERVED_FROM_LABEL`].
    pub fn is_observed(&self) -> bool {
        self.observed.is_some()
    }

    /// The lease as a reconcile reads it. `None` (with an error in the log) should its spec not
    /// decode, which would be a bug: it is the JSON this process encoded.
    pub fn view(&self, namespace: &str, name: &str) -> Option<CachedLease> {
        let mut spec: SandboxLeaseSpec = serde_json::from_slice(&self.spec)
            .map_err(|error| tracing::error!(namespace, name, %error, "a kept lease spec does not decode"))
            .ok()?;
        spec.config_over_bound = self.config_over_bound;
        let metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: self.uid.as_deref().map(String::from),
            generation: self.generation,
            resource_version: self.resource_version.as_deref().map(String::from),
            ..ObjectMeta::default()
        };
        let pinned = self.pinned.as_deref().cloned();
        let observed = self.observed.clone();
        Some(CachedLease { metadata, spec, pinned, published: self.published.clone(), observed })
    }
}

impl CachedLease {
    /// The compact form, for the table (see [`Kept`]).
    pub fn keep(self) -> Kept {
        let CachedLease { metadata, mut spec, pinned, published, observed } = self;
        // Kept as a flag, not as the stand-in the spec would be written with.
        let config_over_bound = std::mem::take(&mut spec.config_over_bound);
        Kept {
            uid: metadata.uid.map(String::into_boxed_str),
            generation: metadata.generation,
            resource_version: metadata.resource_version.map(String::into_boxed_str),
            // Serializing a spec cannot fail: no map with non-string keys, no I/O.
            spec: serde_json::to_vec(&spec).unwrap_or_default().into_boxed_slice(),
            config_over_bound,
            pinned: pinned.map(Box::new),
            published,
            observed,
        }
    }

    /// What the observer compares with the lease it would have under this name.
    pub fn kept_lease(&self) -> KeptLease {
        let observed = self.observed.as_deref();
        KeptLease {
            spec: self.spec.clone(),
            observed_from: observed.map(|o| o.from.to_string()),
            owners: observed.map(|o| o.owners.to_vec()).unwrap_or_default(),
            resource_version: self.metadata.resource_version.clone(),
        }
    }

    /// Whether `desired` is the status published now (by its digest: a status that differs in
    /// anything, a condition's time or message included, is written).
    pub fn is_published(&self, desired: &SandboxLeaseStatus) -> bool {
        self.published.as_ref().is_some_and(|p| p.digest == digest(desired))
    }

    /// Whether the published status grants any capability (none without a status).
    pub fn grants_any(&self) -> bool {
        self.published.as_ref().is_some_and(|p| p.grants)
    }

    /// The published conditions as far as [`super::status::Conditions`] reads them: type, status
    /// and `lastTransitionTime` (no reason, message or generation).
    pub fn conditions(&self) -> Vec<Condition> {
        let since = self.published.as_ref().map(|p| &p.since[..]).unwrap_or_default();
        since
            .iter()
            .map(|s| Condition {
                type_: s.type_.as_str().into(),
                status: s.status.as_str().into(),
                last_transition_time: s.at.clone(),
                reason: String::new(),
                message: String::new(),
                observed_generation: None,
            })
            .collect()
    }
}

/// The same resource as [`SandboxLease`]: the watch and the controller address it as such.
impl Resource for CachedLease {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        SandboxLease::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        SandboxLease::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        SandboxLease::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        SandboxLease::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What resolving it reads.
impl ResolvableLease for CachedLease {
    fn spec(&self) -> &SandboxLeaseSpec {
        &self.spec
    }

    fn pinned(&self) -> Option<&Pinned> {
        self.pinned.as_ref()
    }
}

/// Keyed per process, so that no one can craft a status that collides with the one sandcap would
/// write (and so keep it from being written).
static KEYS: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A digest of a status as it is written: its JSON (times to the second, as the apiserver
/// stores them and as sandcap computes them).
fn digest(status: &SandboxLeaseStatus) -> u64 {
    struct Digest(std::hash::DefaultHasher);
    impl std::io::Write for Digest {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = Digest(KEYS.build_hasher());
    // Serializing a status into a hasher cannot fail: no map with non-string keys, no I/O.
    let _ = serde_json::to_writer(&mut hasher, status);
    hasher.0.finish()
}

#[cfg(test)]
mod tests;
