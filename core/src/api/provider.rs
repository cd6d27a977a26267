//! `SandboxProvider`: the plugin's declarations, and what sandcap found about its worker.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocabulary::DriverKind;

use super::capabilities::{Capabilities, DeclaredCapabilities, declared_placeholder};
use super::lease::Explanation;
use super::manifest::WorkerPlugin;
use super::rules::*;
use super::workloads::{MAX_BINDINGS, WorkloadBinding};
use crate::versions::ContractVersion;

/// A sandbox-provider plugin: its driver declarations and where its live worker answers
/// `initialize`. The controller probes the worker and writes, per driver, which of the
/// contract's capabilities are verified, declared and effective into `status`.
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
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status","description":"whether the CRD and the webhook would admit the object today"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.workloads) || self.workloads.all(w, self.environmentDrivers.exists(d, d.driverKey == w.driverKey && has(d.kind) && d.kind == 'sandbox_provider'))",
    "message": "every workloads[].driverKey must name one of environmentDrivers with kind sandbox_provider",
    "fieldPath": ".workloads"
}]))]
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
    /// The running workloads (Jobs, agent-sandbox Sandboxes) that are this plugin's leases, at
    /// most 8 bindings: each matching workload in a namespace labelled
    /// `sandcap.dev/workloads: enabled` gets an observed SandboxLease, kept by sandcap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = MAX_BINDINGS))]
    pub workloads: Vec<WorkloadBinding>,
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
    "messageExpression": "'set exactly one of service or url: ' + (has(self.service) ? 'both are set' : 'neither is set')",
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
    /// PEM CA certificates, base64-encoded (as a webhook's `clientConfig.caBundle`), that an https
    /// worker's certificate must chain to, instead of the operator's system store; at most
    /// 65536 bytes of PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte", "maxLength" = MAX_CA_BUNDLE_BASE64))]
    pub ca_bundle: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

/// The most PEM bytes `spec.worker.caBundle` holds, and its base64 length.
pub const MAX_CA_BUNDLE_BYTES: usize = 65536;
const MAX_CA_BUNDLE_BASE64: usize = MAX_CA_BUNDLE_BYTES.div_ceil(3) * 4;

/// How a Service worker is spoken to.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WorkerScheme {
    #[default]
    Http,
    /// TLS, the worker's certificate verified for the Service's name `<name>.<namespace>.svc`
    /// at each endpoint.
    Https,
}

impl WorkerScheme {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerScheme::Http => "http",
            WorkerScheme::Https => "https",
        }
    }
}

impl WorkerRef {
    /// The worker's address as the probe reaches it and status records it: `<scheme>://<name>.<namespace>.svc:<port><path>`
    /// for a Service, else the URL without credentials, query or fragment (they may hold secrets;
    /// a URL that does not parse has no address). Status shows it, and a worker answer counts only
    /// while `spec.worker` still names this address.
    pub fn address(&self) -> Option<String> {
        match (&self.service, &self.url) {
            (Some(service), None) => Some(service.url()),
            (None, Some(url)) => url::Url::parse(url).ok().map(|url| redacted(&url)),
            _ => None,
        }
    }
}

/// A URL without credentials, query or fragment: safe to show.
pub fn redacted(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{host}{port}{}", url.scheme(), url.path())
}

impl ServiceRef {
    /// Where the Service answers, by its cluster DNS name; the path defaults to `/`.
    pub fn url(&self) -> String {
        let path = self.path.as_deref().unwrap_or("/");
        format!("{}://{}:{}{path}", self.scheme.unwrap_or_default().as_str(), self.host(), self.port)
    }

    /// The Service's cluster DNS name, which an https worker's certificate is verified for.
    pub fn host(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

/// A Service port that serves the worker's JSON-RPC endpoint over HTTP or HTTPS.
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
    /// `http` (the default) or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<WorkerScheme>,
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
    #[schemars(schema_with = "declared_placeholder")]
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

// ---------------------------------------------------------------------------------------------
// Status

/// What sandcap found: the worker's probe and, per driver, the provider-level capabilities.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxProviderStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `WorkerVerified` (the last probe succeeded), `Ready`, `ConfigSchemasCompiled` and `Valid`
    /// (the spec against today's rules).
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The last probe of the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerStatus>,
    /// The contract version that resolved the drivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<ContractVersion>,
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
    /// The worker the probe asked ([`WorkerRef::address`]): its answer verifies methods only
    /// while `spec.worker` names this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// What the probe found, or why it failed.
    #[serde(default)]
    pub message: String,
    /// For a Service worker: its endpoints that may serve a run, each probed at its own address;
    /// `supportedMethods` is what every one of them advertises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointsStatus>,
    /// The plugin the worker says it is (`result.plugin` of its answer: the manifest's `id`,
    /// `version` and drivers), when it said: a worker of another `id` or `version` than
    /// `spec.pluginKey` and `spec.version` verifies nothing. For a Service worker, an endpoint's
    /// that is another plugin, else the first endpoint's that said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<WorkerPlugin>,
}

/// The most endpoints a status names in `EndpointsStatus.differing`.
pub const MAX_NAMED_ENDPOINTS: usize = 8;

/// What the endpoints of a Service worker answered.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointsStatus {
    /// Endpoints that may serve a run: those the Service's EndpointSlices mark serving (ready, or
    /// still serving while terminating), at the Service port's target port.
    #[schemars(extend("format" = "int32"))]
    pub serving: u32,
    /// Of those, how many answered `ok: true`.
    #[schemars(extend("format" = "int32"))]
    pub answered: u32,
    /// Of those that answered, how many advertised no method beyond the ones every endpoint
    /// advertises.
    #[schemars(extend("format" = "int32"))]
    pub agreeing: u32,
    /// Up to 8 endpoints that failed their probe or lack a method another endpoint advertises.
    #[serde(default)]
    #[schemars(extend("maxItems" = MAX_NAMED_ENDPOINTS))]
    pub differing: Vec<EndpointDifference>,
}

/// One endpoint that failed or lacks a method, named by its Pod. Why a probe failed is left to
/// sandcap's log: status is readable wherever providers are, and a class per address would tell
/// any reader what answers where.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointDifference {
    /// The Pod behind it (the endpoint's `targetRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 253))]
    pub pod: Option<String>,
    /// `ip:port`, only for an endpoint that names no Pod (believed under `--endpoint-slices=any`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 64))]
    pub address: Option<String>,
    /// The methods of the contract's keys that another endpoint advertises and this one does not
    /// (only the contract's own method names: nothing a worker wrote is repeated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lacks: Vec<String>,
    /// Its probe failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

impl EndpointDifference {
    /// How status names it: `pod <name>`, or its address when it names no Pod.
    pub fn name(&self) -> String {
        match (&self.pod, &self.address) {
            (Some(pod), _) => format!("pod {pod}"),
            (None, Some(address)) => address.clone(),
            (None, None) => String::new(),
        }
    }
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
    /// The capabilities of the contract at provider level.
    pub capabilities: Capabilities,
    /// Why each capability is on or off.
    #[serde(default)]
    pub explanations: Vec<Explanation>,
}
