//! The custom resources: `SandboxProvider` and `SandboxLease` (group `sandcap.dev`, `v1alpha1`).
//!
//! These types are what the controller reads and writes, and their schema attributes are the
//! admission rules the apiserver enforces (the CRD layer of docs/contract.md, "Resources and who
//! enforces what": patterns, lengths, enums, required fields, CEL rules), written once here and
//! carried by the generated CRDs. The types are deliberately tolerant: unknown keys are kept in
//! `extra` maps rather than failing deserialization, so one bad object never stops a watch stream;
//! the webhook rejects them ([`crate::validation`]) and `sandcap validate` evaluates the CRD itself
//! ([`crate::schema`]).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use regex::Regex;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::vocabulary::LeasePolicy;
use crate::vocabulary::{Capability, DriverKind, REMOVED_KEYS, Reason};

pub const GROUP: &str = "sandcap.dev";
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as objects of both kinds carry it (a unit test keeps the three in step).
pub const API_VERSION: &str = "sandcap.dev/v1alpha1";

// The apiserver enforces these (the CRD carries them); `sandcap validate` evaluates the same CRD.
// In `spec`, every string has a maxLength (or an enum), every list a maxItems and every object a
// maxProperties, which counts the unknown keys it keeps too: the apiserver refuses an oversized
// object before the webhook is called, and the CEL rules' worst-case cost stays within its budget.

/// Plugin and driver keys.
const KEY_PATTERN: &str = "^[a-z0-9][a-z0-9._-]*$";
/// Semantic versioning 2.0.0 (the regular expression semver.org gives, without named groups).
const SEMVER_PATTERN: &str = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$";
/// One RFC 1123 label, unanchored: the one spelling both patterns below are built from.
macro_rules! dns_label {
    () => {
        "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    };
}
/// An RFC 1123 label (Service names and namespaces), at most [`DNS_LABEL_MAX`] bytes.
const DNS_LABEL_PATTERN: &str = concat!("^", dns_label!(), "$");
const DNS_LABEL_MAX: u32 = 63;
/// An RFC 1123 subdomain (resource names), at most [`DNS_SUBDOMAIN_MAX`] bytes.
const DNS_SUBDOMAIN_PATTERN: &str = concat!("^", dns_label!(), r"(\.", dns_label!(), ")*$");
const DNS_SUBDOMAIN_MAX: u32 = 253;

/// Whether `s` is an RFC 1123 label, by the rule the CRD states: the probe checks a Service's
/// name and namespace with it before it builds a URL of them.
pub fn is_dns_label(s: &str) -> bool {
    static LABEL: LazyLock<Regex> = LazyLock::new(|| Regex::new(DNS_LABEL_PATTERN).expect("a valid pattern"));
    s.len() <= DNS_LABEL_MAX as usize && LABEL.is_match(s)
}

/// Whether `s` is an RFC 1123 subdomain, by the rule the CRD states (and the apiserver applies to
/// every object's `metadata.name`).
pub fn is_dns_subdomain(s: &str) -> bool {
    static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| Regex::new(DNS_SUBDOMAIN_PATTERN).expect("a valid pattern"));
    s.len() <= DNS_SUBDOMAIN_MAX as usize && SUBDOMAIN.is_match(s)
}
/// A Secret data key.
const SECRET_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";
/// Most drivers one provider declares, capability keys one driver sets (the six plus room for
/// the typos the CRD must still see to reject), and `configFrom` entries one lease merges.
const MAX_DRIVERS: u32 = 64;
const MAX_CAPABILITY_KEYS: u32 = 16;
const MAX_CONFIG_SOURCES: u32 = 16;
/// Keys of any object in `spec` that has fields (at most eight): its fields plus room for the
/// typos the schema keeps for the webhook to name. A flood of unknown keys (a request may carry
/// 3 MiB of them) is the apiserver's to refuse, before the webhook is called.
const MAX_OBJECT_KEYS: u32 = 16;
/// Top-level keys of a lease's `config`, and so the `properties` a `configSchema` may describe.
const MAX_CONFIG_KEYS: u32 = 128;
/// Top-level keywords of a `configSchema`: JSON Schema 2020-12 defines about sixty, annotations
/// and `x-` extensions included.
const MAX_SCHEMA_KEYWORDS: u32 = 64;

/// A sandbox-provider plugin: its driver declarations and where its live worker answers
/// `initialize`. The controller probes the worker and writes, per driver, which of the six
/// capabilities are verified, declared and effective into `status`.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "sandcap.dev",
    version = "v1alpha1",
    kind = "SandboxProvider",
    doc = "A sandbox-provider plugin registered with sandcap: its identity, its live worker and the environment drivers it declares. sandcap probes the worker and reports each driver's capabilities in status.",
    shortname = "sbp",
    category = "sandcap",
    status = "SandboxProviderStatus",
    derive = "Default",
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".spec.pluginKey"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Worker","type":"string","jsonPath":".status.worker.probe"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reuse","type":"boolean","jsonPath":".status.drivers[0].capabilities.reusableLeases","description":"first driver"}"#,
    printcolumn = r#"{"name":"SyncIn","type":"boolean","jsonPath":".status.drivers[0].capabilities.nativeSyncIn","description":"first driver"}"#,
    printcolumn = r#"{"name":"SyncOut","type":"boolean","jsonPath":".status.drivers[0].capabilities.nativeSyncOut","description":"first driver"}"#,
    printcolumn = r#"{"name":"Sessions","type":"boolean","priority":1,"jsonPath":".status.drivers[0].capabilities.persistentProcessSessions","description":"first driver"}"#,
    printcolumn = r#"{"name":"Control","type":"boolean","priority":1,"jsonPath":".status.drivers[0].capabilities.independentControlCommands","description":"first driver"}"#,
    printcolumn = r#"{"name":"Output","type":"boolean","priority":1,"jsonPath":".status.drivers[0].capabilities.incrementalSessionOutput","description":"first driver"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct SandboxProviderSpec {
    /// Plugin identity: lowercase letters, digits, '.', '_' and '-', starting with a letter or
    /// digit. Immutable: to register another plugin, create a new SandboxProvider.
    #[schemars(extend("pattern" = KEY_PATTERN, "maxLength" = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "pluginKey is immutable: to register another plugin, create a new SandboxProvider"
    }]))]
    pub plugin_key: String,
    /// Plugin version, a semantic version such as 1.4.0.
    #[schemars(extend("pattern" = SEMVER_PATTERN, "maxLength" = 128))]
    pub version: String,
    /// Where the live worker answers the JSON-RPC `initialize` probe: set exactly one of
    /// `service` or `url`.
    pub worker: WorkerRef,
    /// The plugin's driver declarations, 1 to 64, each with a unique `driverKey`.
    #[schemars(extend("minItems" = 1, "maxItems" = MAX_DRIVERS))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["driverKey"]))]
    pub environment_drivers: Vec<DriverDeclaration>,
    /// Keys the webhook rejects; kept so they are never pruned silently.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// Where the worker answers: exactly one of `service` or `url`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.service) != has(self.url)",
    "message": "set exactly one of service or url"
}]))]
pub struct WorkerRef {
    /// The in-cluster Service in front of the worker (the usual choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    /// An absolute http:// or https:// URL of the worker. Refused unless the operator runs with
    /// `--allow-worker-urls`; prefer `service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",
        "message": "must be an absolute http:// or https:// URL"
    }]))]
    pub url: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// A Service port that serves the worker's JSON-RPC endpoint over HTTP.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct ServiceRef {
    /// Namespace of the Service (an RFC 1123 label).
    #[schemars(extend("pattern" = DNS_LABEL_PATTERN, "maxLength" = DNS_LABEL_MAX))]
    pub namespace: String,
    /// Name of the Service (an RFC 1123 label).
    #[schemars(extend("pattern" = DNS_LABEL_PATTERN, "maxLength" = DNS_LABEL_MAX))]
    pub name: String,
    /// Service port, 1 to 65535.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// HTTP path of the JSON-RPC endpoint, starting with '/'; '/' when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^/", "maxLength" = 1024))]
    pub path: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// One driver the plugin declares.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
pub struct DriverDeclaration {
    /// The driver's key, unique within the provider; leases name it in `providerRef.driverKey`.
    /// Lowercase letters, digits, '.', '_' and '-', starting with a letter or digit.
    #[schemars(extend("pattern" = KEY_PATTERN, "maxLength" = 253))]
    pub driver_key: String,
    /// `sandbox_provider` (sandcap resolves its capabilities) or `environment_driver` (sandcap
    /// never reads its capabilities); omitted counts as neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "driver_kind_schema")]
    pub kind: Option<DriverKind>,
    /// Name shown to people, 1 to 100 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minLength" = 1, "maxLength" = 100))]
    pub display_name: Option<String>,
    /// What the driver does, at most 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 500))]
    pub description: Option<String>,
    /// JSON Schema (draft 2020-12 unless its `$schema` names another) that a lease's resolved
    /// config must pass; the webhook refuses one that does not compile. At most 64 keywords.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "driver_config_schema")]
    pub config_schema: Option<Value>,
    /// Legacy spelling of `sandboxCapabilities.reusableLeases`, read only when the nested key is
    /// absent; when both are set the nested key wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_reusable_leases: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "capabilities_schema")]
    pub sandbox_capabilities: Option<DeclaredCapabilities>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl DriverDeclaration {
    pub fn is_sandbox_provider(&self) -> bool {
        self.kind == Some(DriverKind::SandboxProvider)
    }
}

/// The six capability keys a driver may declare. Omitted = defer to the worker, except the opt-in
/// keys `reusableLeases` and `incrementalSessionOutput`. Its schema is a map of booleans
/// ([`capabilities_schema`]) rather than these fields, so that a typo'd or removed key reaches
/// the CRD's rules instead of being pruned.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reusable_leases: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_sync_in: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_sync_out: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_process_sessions: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub independent_control_commands: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_session_output: Option<bool>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

impl DeclaredCapabilities {
    pub fn get(&self, cap: Capability) -> Option<bool> {
        match cap {
            Capability::ReusableLeases => self.reusable_leases,
            Capability::NativeSyncIn => self.native_sync_in,
            Capability::NativeSyncOut => self.native_sync_out,
            Capability::PersistentProcessSessions => self.persistent_process_sessions,
            Capability::IndependentControlCommands => self.independent_control_commands,
            Capability::IncrementalSessionOutput => self.incremental_session_output,
        }
    }

    pub fn set(&mut self, cap: Capability, value: Option<bool>) {
        let slot = match cap {
            Capability::ReusableLeases => &mut self.reusable_leases,
            Capability::NativeSyncIn => &mut self.native_sync_in,
            Capability::NativeSyncOut => &mut self.native_sync_out,
            Capability::PersistentProcessSessions => &mut self.persistent_process_sessions,
            Capability::IndependentControlCommands => &mut self.independent_control_commands,
            Capability::IncrementalSessionOutput => &mut self.incremental_session_output,
        };
        *slot = value;
    }
}

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
    printcolumn = r#"{"name":"Reuse","type":"boolean","jsonPath":".status.capabilities.reusableLeases"}"#,
    printcolumn = r#"{"name":"SyncIn","type":"boolean","jsonPath":".status.capabilities.nativeSyncIn"}"#,
    printcolumn = r#"{"name":"SyncOut","type":"boolean","jsonPath":".status.capabilities.nativeSyncOut"}"#,
    printcolumn = r#"{"name":"Sessions","type":"boolean","jsonPath":".status.capabilities.persistentProcessSessions"}"#,
    printcolumn = r#"{"name":"Control","type":"boolean","jsonPath":".status.capabilities.independentControlCommands"}"#,
    printcolumn = r#"{"name":"Output","type":"boolean","jsonPath":".status.capabilities.incrementalSessionOutput"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
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
    /// The backend as the provider reported it; `job` means Job-backed, which turns native file
    /// sync off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 63))]
    pub backend: Option<String>,
    /// The workload running this lease; a `batch/v1` Job makes the lease Job-backed (native file
    /// sync off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
    /// Set true when the run cannot use native file sync: turns nativeSyncIn and nativeSyncOut off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_file_sync_unsupported: Option<bool>,
    /// Inline, non-secret provider config (a JSON object of at most 128 keys); merged with
    /// `configFrom` and checked against the driver's configSchema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "lease_config")]
    pub config: Option<Value>,
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

// ---------------------------------------------------------------------------------------------
// Status

/// What sandcap found: the worker's probe and, per driver, the provider-level capabilities.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxProviderStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `WorkerVerified` (the last probe succeeded) and `Ready`.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The last probe of the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerStatus>,
    /// One entry per declared driver: verified ∩ declared, before any lease narrows it.
    #[serde(default)]
    pub drivers: Vec<DriverStatus>,
}

/// The last `initialize` probe of the worker.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    /// The methods the worker advertised; empty when the probe failed (nothing is verified).
    #[serde(default)]
    pub supported_methods: Vec<String>,
    /// `Succeeded` or `Failed` (timeout, connection error, JSON-RPC error, `ok: false`).
    pub probe: ProbeResult,
    /// When the probe ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    /// What the probe found, or why it failed.
    #[serde(default)]
    pub message: String,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ProbeResult {
    Succeeded,
    #[default]
    Failed,
}

/// One driver's provider-level resolution.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriverStatus {
    /// The driver's `driverKey`.
    pub driver_key: String,
    /// The driver's declared kind; only `sandbox_provider` drivers get capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "driver_kind_status_schema")]
    pub kind: Option<DriverKind>,
    /// The keys the declaration sets (legacy flag folded in).
    #[serde(default)]
    pub declared: BTreeMap<String, bool>,
    /// The six capabilities at provider level.
    pub capabilities: Capabilities,
    /// Why each capability is on or off.
    #[serde(default)]
    pub explanations: Vec<Explanation>,
}

/// All six capabilities, each on or off.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Leases may be resumed, released and destroyed (reuse by environment).
    pub reusable_leases: bool,
    /// The plugin syncs files into the sandbox itself.
    pub native_sync_in: bool,
    /// The plugin syncs files out of the sandbox itself.
    pub native_sync_out: bool,
    /// Processes survive between executions.
    pub persistent_process_sessions: bool,
    /// Control commands run alongside an execution.
    pub independent_control_commands: bool,
    /// Output streams while a session runs.
    pub incremental_session_output: bool,
}

impl Capabilities {
    pub fn get(&self, cap: Capability) -> bool {
        match cap {
            Capability::ReusableLeases => self.reusable_leases,
            Capability::NativeSyncIn => self.native_sync_in,
            Capability::NativeSyncOut => self.native_sync_out,
            Capability::PersistentProcessSessions => self.persistent_process_sessions,
            Capability::IndependentControlCommands => self.independent_control_commands,
            Capability::IncrementalSessionOutput => self.incremental_session_output,
        }
    }

    pub fn set(&mut self, cap: Capability, on: bool) {
        let slot = match cap {
            Capability::ReusableLeases => &mut self.reusable_leases,
            Capability::NativeSyncIn => &mut self.native_sync_in,
            Capability::NativeSyncOut => &mut self.native_sync_out,
            Capability::PersistentProcessSessions => &mut self.persistent_process_sessions,
            Capability::IndependentControlCommands => &mut self.independent_control_commands,
            Capability::IncrementalSessionOutput => &mut self.incremental_session_output,
        };
        *slot = on;
    }
}

/// Why one capability is on or off: `reason` is the first gate that removed it, or `Granted`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The capability key.
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
    /// `Resolved`, `ConfigResolved` and `PluginIdentity`.
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
    /// The six capabilities after this lease's narrowing.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Why each capability is on or off.
    #[serde(default)]
    pub explanations: Vec<Explanation>,
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

/// A lease's inline config: any JSON object, bounded in its top-level keys only (the apiserver
/// cannot bound what has no schema; the request size bounds the rest).
fn lease_config(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "maxProperties": MAX_CONFIG_KEYS})
}

/// A JSON Schema: any object, bounded in its keywords and in the `properties` it describes (a
/// driver's settings are as many as an inline config may hold, [`MAX_CONFIG_KEYS`]).
fn driver_config_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "maxProperties": MAX_SCHEMA_KEYWORDS,
        "properties": {
            "properties": {
                "description": format!("The properties the schema describes, at most {MAX_CONFIG_KEYS} (as many as a lease's inline config may hold)."),
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "maxProperties": MAX_CONFIG_KEYS,
            },
        },
    })
}

/// A hand-written enum schema: the derived one of an `Option` lists `null` among the values,
/// which `kubectl explain` shows as `<no value>` and the apiserver's message as `"null"`.
fn driver_kind_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": DriverKind::ALL.map(DriverKind::as_str)})
}

/// Status repeats the declaration's kind; its schema has stayed a plain string since the first
/// CRDs, which the typed field does not need to change.
fn driver_kind_status_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["string", "null"]})
}

/// As [`driver_kind_schema`]; the default makes the requested policy visible (the POLICY column).
fn policy_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": LeasePolicy::ALL.map(LeasePolicy::as_str),
        "default": LeasePolicy::default().as_str(),
    })
}

/// A map of booleans rather than an object with six properties: the apiserver's CEL sees a map's
/// keys, but not the unknown fields of an object, and a typo'd or removed key must reach the
/// rules (not be pruned) to be rejected.
fn capabilities_schema(_: &mut SchemaGenerator) -> Schema {
    let keys: Vec<&str> = Capability::ALL.map(Capability::key).into();
    let known = |keys: &[&str]| keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ");
    let mut rules: Vec<Value> = REMOVED_KEYS
        .iter()
        .map(|key| {
            serde_json::json!({
                "rule": format!("!('{key}' in self)"),
                "message": format!("{key} was removed from the contract (concurrency is no longer declared): delete it"),
            })
        })
        .collect();
    let all: Vec<&str> = keys.iter().chain(&REMOVED_KEYS).copied().collect();
    rules.push(serde_json::json!({
        "rule": format!("self.all(k, k in [{}])", known(&all)),
        "message": format!("unknown capability key: the keys are {}", keys.join(", ")),
    }));
    let meanings: Vec<String> = Capability::ALL.iter().map(|c| format!("{}: {}", c.key(), c.meaning())).collect();
    json_schema!({
        "description": format!(
            "Capabilities the driver declares, each true or false; omitted defers to the worker, except the opt-in keys. Read only for kind sandbox_provider. Keys: {}.",
            meanings.join("; ")
        ),
        "type": "object",
        "additionalProperties": {"type": "boolean"},
        "maxProperties": MAX_CAPABILITY_KEYS,
        "x-kubernetes-validations": rules,
    })
}

/// `metav1.Condition` list keyed by `type`, so server-side apply merges conditions per type.
fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    #[test]
    fn the_api_version_constant_is_the_crds_own() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
        assert_eq!(API_VERSION, SandboxProvider::api_version(&()));
        assert_eq!(API_VERSION, SandboxLease::api_version(&()));
    }

    #[test]
    fn dns_names_follow_rfc_1123() {
        for ok in ["a", "0", "sandbox-system", "a1-b2", &"x".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", "é", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        for ok in ["a", "acme-kubernetes", "a.b-c.d", &vec!["x".repeat(63); 4].join(".")[..253]] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "a.-b", "A.b", "a b", &"x.".repeat(127)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        assert!(!is_dns_subdomain(&"x".repeat(254)));
    }
}
