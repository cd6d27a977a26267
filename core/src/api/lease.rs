//! `SandboxLease`: one run's lease on a provider's driver, and what sandcap resolved for it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocabulary::LeasePolicy;
use crate::vocabulary::{Capability, Reason};

use super::capabilities::{Capabilities, key_placeholder};
use super::rules::*;
use crate::versions::ContractVersion;

/// One run's lease on a provider's driver.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "sandcap.dev",
    version = "v1alpha1",
    kind = "SandboxLease",
    doc = "One run's lease on a SandboxProvider's driver. sandcap resolves which capabilities the run gets (verified by the worker, declared by the driver, narrowed by this lease) and writes them into status.",
    namespaced,
    shortname = "sbl",
    category = "sandcap",
    status = "SandboxLeaseStatus",
    derive = "Default",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.providerRef.name"}"#,
    printcolumn = r#"{"name":"Driver","type":"string","jsonPath":".spec.providerRef.driverKey"}"#,
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".spec.policy","description":"requested policy"}"#,
    printcolumn = r#"{"name":"Effective Policy","type":"string","jsonPath":".status.effectivePolicy","description":"the policy the lease gets"}"#,
    printcolumn = r#"{"name":"Resolved","type":"string","jsonPath":".status.conditions[?(@.type==\"Resolved\")].status"}"#,
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status","description":"whether the CRD and the webhook would admit the object today"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    selectable = ".spec.providerRef.name",
    selectable = ".spec.providerRef.driverKey"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.policy) || self.policy != 'ReuseByEnvironment' || (has(self.environment) && self.environment != '')",
    "message": "environment is required when policy is ReuseByEnvironment",
    "fieldPath": ".environment"
}]))]
pub struct SandboxLeaseSpec {
    /// The provider and driver this lease runs on. Immutable: to use another provider or driver,
    /// create a new SandboxLease.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "providerRef is immutable: to use another provider or driver, create a new SandboxLease"
    }]))]
    pub provider_ref: ProviderRef,
    /// `Ephemeral` (the default): a fresh environment per run. `ReuseByEnvironment`: runs with the
    /// same `environment` reuse one, if the driver's reusableLeases capability is effective;
    /// otherwise the lease gets `Ephemeral` (see status.effectivePolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "policy_schema")]
    pub policy: Option<LeasePolicy>,
    /// The environment runs share under `ReuseByEnvironment` (required with that policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 253))]
    pub environment: Option<String>,
    /// The backend as the provider reported it, an RFC 1123 label (lowercase: one spelling per
    /// backend); `job` means Job-backed, which turns native file sync off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = DNS_LABEL_PATTERN, "maxLength" = DNS_LABEL_MAX))]
    pub backend: Option<String>,
    /// The workload running this lease; a `batch/v1` Job makes the lease Job-backed (native file
    /// sync off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
    /// Set true when the run cannot use native file sync: turns nativeSyncIn and nativeSyncOut off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_file_sync_unsupported: Option<bool>,
    /// Inline, non-secret provider config (a JSON object of at most 128 keys and 65536 bytes as
    /// JSON); merged with `configFrom` and checked against the driver's configSchema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "lease_config")]
    pub config: Option<Value>,
    /// Set, with `config` dropped, where a config over [`MAX_CONFIG_BYTES`] is not kept (sandcap's
    /// caches never hold one): it fails to resolve. Written in `config`'s place as a stand-in just
    /// over the bound that holds nothing of it, so that what is judged of the lease breaks the
    /// rule the stored lease breaks.
    #[serde(
        skip_deserializing,
        rename = "config",
        skip_serializing_if = "std::ops::Not::not",
        serialize_with = "over_bound_stand_in"
    )]
    #[schemars(skip)]
    pub config_over_bound: bool,
    /// Up to 16 Secret keys, each holding a JSON object, merged over `config` in order. The Secret
    /// must carry the label `sandcap.dev/config-source: "true"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = MAX_CONFIG_SOURCES))]
    pub config_from: Vec<ConfigSource>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl SandboxLeaseSpec {
    pub fn policy(&self) -> LeasePolicy {
        self.policy.unwrap_or_default()
    }

    /// Drops a config over [`MAX_CONFIG_BYTES`], keeping only that it was (`config_over_bound`).
    pub fn drop_config_over_bound(&mut self) {
        if self.config.as_ref().is_some_and(exceeds_config_bound) {
            self.config = None;
            self.config_over_bound = true;
        }
    }

    /// Whether `config` is over [`MAX_CONFIG_BYTES`], held or dropped.
    pub fn config_too_large(&self) -> bool {
        self.config_over_bound || self.config.as_ref().is_some_and(exceeds_config_bound)
    }
}

/// `{"": "<spaces>"}`, one byte over [`MAX_CONFIG_BYTES`] as JSON: see `config_over_bound`.
fn over_bound_stand_in<S: serde::Serializer>(_: &bool, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    static SPACES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| " ".repeat(MAX_CONFIG_BYTES - 6));
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry("", SPACES.as_str())?;
    map.end()
}

/// A provider's driver.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct ProviderRef {
    /// Name of the SandboxProvider.
    #[schemars(extend("pattern" = DNS_SUBDOMAIN_PATTERN, "maxLength" = DNS_SUBDOMAIN_MAX))]
    pub name: String,
    /// One of the provider's `environmentDrivers[].driverKey`, declared with kind sandbox_provider.
    #[schemars(extend("pattern" = KEY_PATTERN, "maxLength" = 253))]
    pub driver_key: String,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// The object that runs the lease's workload.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct WorkloadRef {
    /// API version of the workload, such as batch/v1.
    #[schemars(extend("maxLength" = 253))]
    pub api_version: String,
    /// Kind of the workload, such as Job.
    #[schemars(extend("maxLength" = 63))]
    pub kind: String,
    /// Name of the workload.
    #[schemars(extend("maxLength" = 253))]
    pub name: String,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl WorkloadRef {
    pub fn is_batch_job(&self) -> bool {
        self.api_version == "batch/v1" && self.kind == "Job"
    }
}

/// One source of provider config.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct ConfigSource {
    /// A key of a Secret in the lease's namespace whose value is a JSON object.
    pub secret_key_ref: SecretKeyRef,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// A key of a Secret in the lease's namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(extend("pattern" = DNS_SUBDOMAIN_PATTERN, "maxLength" = DNS_SUBDOMAIN_MAX))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(extend("pattern" = SECRET_KEY_PATTERN, "maxLength" = 253))]
    pub key: String,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// Why one capability is on or off: `reason` is the first gate that removed it, or `Granted`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The capability key.
    #[schemars(schema_with = "key_placeholder")]
    pub capability: Capability,
    /// Whether the capability is effective.
    pub granted: bool,
    /// The first gate that removed the capability, or `Granted`.
    pub reason: Reason,
    /// The specifics: the missing method, the Secret that could not be read (never its value).
    pub message: String,
}

/// What sandcap resolved for this lease.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxLeaseStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Resolved`, `ConfigResolved`, `PluginIdentity` and `Valid` (the spec against today's rules).
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The provider identity pinned on the first resolution; a later mismatch turns every
    /// capability off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pinned>,
    /// The policy the lease gets: `ReuseByEnvironment` only when reusableLeases is effective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "policy_schema")]
    pub effective_policy: Option<LeasePolicy>,
    /// The contract version that resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<ContractVersion>,
    /// The capabilities of that contract after this lease's narrowing.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Why each capability is on or off.
    #[serde(default)]
    pub explanations: Vec<Explanation>,
}

/// What resolving a lease reads of it: its spec and its pin. The stored object has both; the
/// controller's cache holds a lease trimmed to these (and to what names and versions it).
pub trait ResolvableLease {
    fn spec(&self) -> &SandboxLeaseSpec;
    /// The identity it was first resolved against, once published.
    fn pinned(&self) -> Option<&Pinned>;
}

impl ResolvableLease for SandboxLease {
    fn spec(&self) -> &SandboxLeaseSpec {
        &self.spec
    }

    fn pinned(&self) -> Option<&Pinned> {
        self.status.as_ref().and_then(|s| s.pinned.as_ref())
    }
}

/// The exact plugin identity a lease was first resolved against.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Pinned {
    /// `metadata.uid` of the provider.
    #[serde(rename = "providerUID")]
    pub provider_uid: String,
    /// `spec.pluginKey` of the provider.
    pub plugin_key: String,
    /// The lease's `providerRef.driverKey`.
    pub driver_key: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(config: Value) -> SandboxLeaseSpec {
        SandboxLeaseSpec { config: Some(config), ..SandboxLeaseSpec::default() }
    }

    #[test]
    fn a_config_over_its_bound_is_dropped_and_written_as_a_stand_in_just_over_it() {
        let secret = "s3cr3t-".repeat(MAX_CONFIG_BYTES / 7 + 1);
        let mut over = spec(json!({"token": secret}));
        assert!(over.config_too_large());
        over.drop_config_over_bound();
        assert_eq!((over.config.as_ref(), over.config_over_bound, over.config_too_large()), (None, true, true));
        let written = serde_json::to_value(&over).unwrap();
        let stand_in = &written["config"];
        assert_eq!(serde_json::to_vec(stand_in).unwrap().len(), MAX_CONFIG_BYTES + 1);
        assert!(exceeds_config_bound(stand_in) && !written.to_string().contains("s3cr3t"));
        // What is read back is a config over the bound, not a flag anyone could set.
        let read: SandboxLeaseSpec = serde_json::from_value(written).unwrap();
        assert!(read.config_too_large() && !read.config_over_bound);

        let mut within = spec(json!({"image": "python:3.12"}));
        within.drop_config_over_bound();
        assert_eq!(within, spec(json!({"image": "python:3.12"})));
        assert!(!within.config_too_large());
    }

    #[test]
    fn the_bound_is_on_the_compact_json() {
        // `{"a":"..."}`: eight bytes around the string.
        let of = |n: usize| json!({"a": "x".repeat(n - 8)});
        assert!(!exceeds_config_bound(&of(MAX_CONFIG_BYTES)));
        assert!(exceeds_config_bound(&of(MAX_CONFIG_BYTES + 1)));
        assert!(!exceeds_config_bound(&Value::Null));
    }
}
