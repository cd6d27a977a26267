//! The custom resources: `SandboxProvider` and `SandboxLease` (group `sandcap.dev`, `v1alpha1`).
//!
//! These types are what the controller reads and writes. They are deliberately tolerant: anything
//! the webhook would reject (unknown keys, typos) is kept in `extra` maps rather than failing
//! deserialization, so one bad object never stops a watch stream. The webhook and `sandcap validate`
//! judge the raw JSON with [`crate::validation`], not these types.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{Capability, Reason};

pub const GROUP: &str = "sandcap.dev";
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as objects of both kinds carry it (a unit test keeps the three in step).
pub const API_VERSION: &str = "sandcap.dev/v1alpha1";
/// The driver kind whose capabilities sandcap resolves; any other kind is never read.
pub const SANDBOX_PROVIDER_KIND: &str = "sandbox_provider";
/// Every driver kind a declaration may name.
pub const DRIVER_KINDS: &[&str] = &[SANDBOX_PROVIDER_KIND, "environment_driver"];

/// A sandbox-provider plugin: its driver declarations and where its live worker answers.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "sandcap.dev",
    version = "v1alpha1",
    kind = "SandboxProvider",
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
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SandboxProviderSpec {
    /// Plugin identity, `^[a-z0-9][a-z0-9._-]*$`. Immutable: re-register under a new name instead.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9._-]*$"), length(max = 253))]
    pub plugin_key: String,
    /// Plugin version (semver).
    pub version: String,
    /// Where the live worker answers `initialize`.
    pub worker: WorkerRef,
    /// The plugin's driver declarations; `driverKey` is unique.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["driverKey"]))]
    pub environment_drivers: Vec<DriverDeclaration>,
    /// Keys the webhook rejects; kept so they are never pruned silently.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// Exactly one of `service` or `url`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkerRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    /// Only accepted when the operator runs with `--allow-worker-urls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// HTTP path of the JSON-RPC endpoint; `/` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// One driver the plugin declares.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DriverDeclaration {
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9._-]*$"), length(max = 253))]
    pub driver_key: String,
    /// `sandbox_provider` or `environment_driver`; capabilities are read only for `sandbox_provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "driver_kind_schema")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 500))]
    pub description: Option<String>,
    /// JSON Schema (draft 2020-12 unless `$schema` says otherwise) for the lease's resolved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub config_schema: Option<Value>,
    /// Legacy spelling of `sandboxCapabilities.reusableLeases`; the nested key wins when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_reusable_leases: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_capabilities: Option<DeclaredCapabilities>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl DriverDeclaration {
    pub fn is_sandbox_provider(&self) -> bool {
        self.kind.as_deref() == Some(SANDBOX_PROVIDER_KIND)
    }
}

/// The six capability keys a driver may declare. Omitted = defer to the worker, except the opt-in
/// keys `reusableLeases` and `incrementalSessionOutput`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
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
    #[schemars(skip)]
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
    namespaced,
    shortname = "sbl",
    category = "sandcap",
    status = "SandboxLeaseStatus",
    derive = "Default",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.providerRef.name"}"#,
    printcolumn = r#"{"name":"Driver","type":"string","jsonPath":".spec.providerRef.driverKey"}"#,
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".status.effectivePolicy"}"#,
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
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SandboxLeaseSpec {
    /// Immutable: a lease belongs to one provider driver for its whole life.
    pub provider_ref: ProviderRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<LeasePolicy>,
    /// Required with `ReuseByEnvironment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// As the provider reported it; `job` means Job-backed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_file_sync_unsupported: Option<bool>,
    /// Inline, non-secret provider config (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub config: Option<Value>,
    /// Secret keys holding JSON objects, merged over `config` in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ProviderRef {
    pub name: String,
    pub driver_key: String,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum LeasePolicy {
    #[default]
    Ephemeral,
    ReuseByEnvironment,
}

impl LeasePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            LeasePolicy::Ephemeral => "Ephemeral",
            LeasePolicy::ReuseByEnvironment => "ReuseByEnvironment",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkloadRef {
    pub api_version: String,
    pub kind: String,
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

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ConfigSource {
    pub secret_key_ref: SecretKeyRef,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

// ---------------------------------------------------------------------------------------------
// Status

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerStatus>,
    #[serde(default)]
    pub drivers: Vec<DriverStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    #[serde(default)]
    pub supported_methods: Vec<String>,
    pub probe: ProbeResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default)]
    pub message: String,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ProbeResult {
    Succeeded,
    #[default]
    Failed,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriverStatus {
    pub driver_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The keys the declaration sets (legacy flag folded in).
    #[serde(default)]
    pub declared: BTreeMap<String, bool>,
    pub capabilities: Capabilities,
    #[serde(default)]
    pub explanations: Vec<Explanation>,
}

/// All six capabilities, each on or off.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub reusable_leases: bool,
    pub native_sync_in: bool,
    pub native_sync_out: bool,
    pub persistent_process_sessions: bool,
    pub independent_control_commands: bool,
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
    pub capability: Capability,
    pub granted: bool,
    pub reason: Reason,
    pub message: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxLeaseStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pinned>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_policy: Option<LeasePolicy>,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub explanations: Vec<Explanation>,
}

/// The exact plugin identity a lease was first resolved against.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Pinned {
    #[serde(rename = "providerUID")]
    pub provider_uid: String,
    pub plugin_key: String,
    pub driver_key: String,
}

fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// The driver kind is checked by the webhook (so its message names the allowed values) but the
/// schema still states the enum so `kubectl explain` shows it.
fn driver_kind_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": DRIVER_KINDS})
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
}
