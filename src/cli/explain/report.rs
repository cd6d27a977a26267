//! What `explain` shows, built from the objects as fetched: pure, so every line of reasoning is
//! tested without a cluster. The reasons are the ones status carries; [`crate::contract`] resolves
//! the same objects again, so a status that has not caught up with them is told apart.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

use super::fix::{FixContext, fix};
use crate::api::{DriverDeclaration, Explanation, Pinned, SandboxLease, SandboxProvider, WorkerStatus};
use crate::contract::{self, Declared, Narrowing, Verified};
use crate::vocabulary::{Capability, ConditionType, DriverKind, Kind, LeasePolicy, Reason};

/// The gates of the resolution, in the order the contract applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GateName {
    Identity,
    Worker,
    Declaration,
    Policy,
    JobBackend,
    NativeFileSync,
    Config,
}

impl GateName {
    pub fn as_str(self) -> &'static str {
        match self {
            GateName::Identity => "identity",
            GateName::Worker => "worker",
            GateName::Declaration => "declaration",
            GateName::Policy => "policy",
            GateName::JobBackend => "jobBackend",
            GateName::NativeFileSync => "nativeFileSync",
            GateName::Config => "config",
        }
    }
}

/// One gate for one capability: whether it lets the capability through, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gate {
    pub gate: GateName,
    pub passes: bool,
    pub detail: String,
}

impl Gate {
    fn new(gate: GateName, passes: bool, detail: impl Into<String>) -> Gate {
        Gate { gate, passes, detail: detail.into() }
    }
}

/// One capability: what status says, the chain behind it, and what to change.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityReport {
    pub capability: Capability,
    /// `granted`, `reason` and `message` as status has them; absent before sandcap resolved it.
    pub granted: Option<bool>,
    pub reason: Option<Reason>,
    pub message: Option<String>,
    /// The reason the objects give as they are now; another than status's while sandcap catches up.
    pub reason_now: Reason,
    pub gates: Vec<Gate>,
    pub fix: Option<String>,
}

/// A driver's declaration as sandcap reads it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclarationReport {
    pub driver_key: String,
    pub kind: Option<DriverKind>,
    /// The keys of `sandboxCapabilities` that are set.
    pub sandbox_capabilities: BTreeMap<String, bool>,
    /// The legacy `supportsReusableLeases`, if set.
    pub supports_reusable_leases: Option<bool>,
    /// Whether the legacy field decides `reusableLeases` (the nested key is absent).
    pub legacy_decides: bool,
}

impl DeclarationReport {
    fn of(driver: &DriverDeclaration) -> DeclarationReport {
        let nested = driver.sandbox_capabilities.clone().unwrap_or_default();
        DeclarationReport {
            driver_key: driver.driver_key.clone(),
            kind: driver.kind,
            sandbox_capabilities: Capability::ALL
                .into_iter()
                .filter_map(|c| nested.get(c).map(|v| (c.key().to_string(), v)))
                .collect(),
            supports_reusable_leases: driver.supports_reusable_leases,
            legacy_decides: nested.reusable_leases.is_none() && driver.supports_reusable_leases.is_some(),
        }
    }
}

/// What the command could see of a `configFrom` Secret: metadata only, never its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    Found { labelled: bool },
    NotFound,
    /// The command could not look (forbidden, unreachable); the text says why.
    Unknown(String),
}

/// One `configFrom` entry, with the Secret as the caller sees it and whether sandcap reads it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretReport {
    pub name: String,
    pub key: String,
    pub found: Option<bool>,
    pub labelled: Option<bool>,
    /// Its namespace is one sandcap reads Secrets in (`--secret-namespaces`).
    pub in_scope: bool,
    /// Found, labelled and in scope: sandcap reads it; otherwise it reads as missing.
    pub sandcap_reads_it: bool,
    pub detail: String,
}

impl SecretReport {
    pub fn new(name: &str, key: &str, namespace: &str, lookup: &Lookup, in_scope: bool, scope: &str) -> SecretReport {
        let label = crate::controller::CONFIG_SOURCE_LABEL;
        let (found, labelled, detail) = match lookup {
            Lookup::NotFound => (Some(false), None, "not found".to_string()),
            Lookup::Unknown(why) => (None, None, format!("cannot tell whether it exists: {why}")),
            Lookup::Found { labelled: false } => (
                Some(true),
                Some(false),
                format!("found, but not labelled {label}=true: sandcap does not read it, so it reads as missing"),
            ),
            Lookup::Found { labelled: true } if !in_scope => (
                Some(true),
                Some(true),
                format!(
                    "found and labelled, but sandcap reads Secrets only in {scope} (--secret-namespaces), \
                     not in {namespace}: it reads as missing"
                ),
            ),
            Lookup::Found { labelled: true } => {
                (Some(true), Some(true), format!("found, labelled {label}=true, in a namespace sandcap serves"))
            }
        };
        let sandcap_reads_it = found == Some(true) && labelled == Some(true) && in_scope;
        SecretReport { name: name.into(), key: key.into(), found, labelled, in_scope, sandcap_reads_it, detail }
    }
}

/// The provider a lease names, as it is now.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderLink {
    pub name: String,
    pub driver_key: String,
    pub found: bool,
    pub uid: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub provider: ProviderLink,
    pub pinned: Option<Pinned>,
    pub requested_policy: LeasePolicy,
    pub effective_policy: Option<LeasePolicy>,
    pub declaration: Option<DeclarationReport>,
    pub worker: Option<WorkerStatus>,
    pub config_from: Vec<SecretReport>,
    pub capabilities: Vec<CapabilityReport>,
    /// Every condition of status, whatever its type.
    pub conditions: Vec<Condition>,
    pub notes: Vec<String>,
}

/// Everything a lease's explanation is built from; `secrets` has one entry per `configFrom`.
pub struct LeaseFacts<'a> {
    pub lease: &'a SandboxLease,
    pub provider: Option<&'a SandboxProvider>,
    pub secrets: Vec<SecretReport>,
}

pub fn lease_report(facts: &LeaseFacts) -> LeaseReport {
    let LeaseFacts { lease, provider, .. } = *facts;
    let status = lease.status.as_ref();
    let conditions = status.map(|s| s.conditions.clone()).unwrap_or_default();
    let config = conditions.iter().find(|c| c.type_ == ConditionType::ConfigResolved.as_str());
    let worker = provider.and_then(|p| p.status.as_ref()).and_then(|s| s.worker.as_ref());
    let verified = contract::verified_from_worker(worker);
    let identity = contract::check_identity(lease, provider);
    let driver = identity.as_ref().ok().copied().or_else(|| {
        let key = &lease.spec.provider_ref.driver_key;
        provider.and_then(|p| p.spec.environment_drivers.iter().find(|d| d.driver_key == *key))
    });
    let config_failure = config.filter(|c| c.status == "False").map(|c| c.message.clone());
    let narrowing = Narrowing {
        identity_failure: identity.as_ref().err().map(ToString::to_string),
        policy: Some(lease.spec.policy()),
        job_backend: contract::job_backend(lease),
        native_file_sync_unsupported: lease.spec.native_file_sync_unsupported.unwrap_or(false),
        config_failure,
    };
    let declared = driver.filter(|_| identity.is_ok()).map(Declared::from_driver).unwrap_or_default();
    let now = contract::resolve(&verified, &declared, &narrowing);
    let identity_gate = match &identity {
        Err(why) => Gate::new(GateName::Identity, false, why.to_string()),
        Ok(_) => Gate::new(GateName::Identity, true, identity_detail(lease, provider)),
    };
    let context = FixContext {
        provider: &lease.spec.provider_ref.name,
        driver: &lease.spec.provider_ref.driver_key,
        lease: Some((lease.metadata.namespace.as_deref().unwrap_or_default(), lease_name(lease))),
        identity: identity.as_ref().err(),
        worker: worker.map(|w| w.message.as_str()),
        verified: &verified,
        config,
        secrets: &facts.secrets,
    };
    let capabilities = Capability::ALL
        .into_iter()
        .map(|cap| {
            let mut gates = vec![identity_gate.clone()];
            if provider.is_some() {
                gates.push(worker_gate(cap, &verified, worker));
            }
            if let Some(driver) = driver {
                gates.push(declaration_gate(cap, driver));
            }
            gates.extend(narrowing_gates(cap, lease, &narrowing, config));
            capability(cap, status.map(|s| s.explanations.as_slice()), &now, gates, &context)
        })
        .collect::<Vec<_>>();
    let mut notes = Vec::new();
    match status {
        None => notes.push(NOT_RESOLVED.to_string()),
        Some(s) if s.observed_generation < lease.metadata.generation => notes.push(format!(
            "status is for generation {}, the lease is at generation {}: sandcap has not resolved its latest change yet",
            s.observed_generation.unwrap_or_default(),
            lease.metadata.generation.unwrap_or_default()
        )),
        Some(_) => notes.extend(disagreement(&capabilities)),
    }
    LeaseReport {
        kind: Kind::SandboxLease,
        namespace: lease.metadata.namespace.clone().unwrap_or_default(),
        name: lease_name(lease).to_string(),
        generation: lease.metadata.generation,
        observed_generation: status.and_then(|s| s.observed_generation),
        provider: ProviderLink {
            name: lease.spec.provider_ref.name.clone(),
            driver_key: lease.spec.provider_ref.driver_key.clone(),
            found: provider.is_some(),
            uid: provider.and_then(|p| p.metadata.uid.clone()),
        },
        pinned: status.and_then(|s| s.pinned.clone()),
        requested_policy: lease.spec.policy(),
        effective_policy: status.and_then(|s| s.effective_policy),
        declaration: driver.map(DeclarationReport::of),
        worker: worker.cloned(),
        config_from: facts.secrets.clone(),
        capabilities,
        conditions,
        notes,
    }
}

const NOT_RESOLVED: &str = "sandcap has not resolved it yet (no status): is a controller running? kubectl sandcap check";

fn lease_name(lease: &SandboxLease) -> &str {
    lease.metadata.name.as_deref().unwrap_or_default()
}

fn identity_detail(lease: &SandboxLease, provider: Option<&SandboxProvider>) -> String {
    match lease.status.as_ref().and_then(|s| s.pinned.as_ref()) {
        Some(p) => format!(
            "pinned to provider uid {} (pluginKey {}, driver {}), which is the provider as it is now",
            p.provider_uid, p.plugin_key, p.driver_key
        ),
        None => format!(
            "provider {} found (uid {}); sandcap pins it on the first resolution",
            lease.spec.provider_ref.name,
            provider.and_then(|p| p.metadata.uid.as_deref()).unwrap_or("none")
        ),
    }
}

fn capability(
    cap: Capability,
    status: Option<&[Explanation]>,
    now: &contract::Resolution,
    gates: Vec<Gate>,
    context: &FixContext,
) -> CapabilityReport {
    let reason_now = now.explanations.iter().find(|e| e.capability == cap).map_or(Reason::Granted, |e| e.reason);
    let said = status.and_then(|s| s.iter().find(|e| e.capability == cap));
    CapabilityReport {
        capability: cap,
        granted: said.map(|e| e.granted),
        reason: said.map(|e| e.reason),
        message: said.map(|e| e.message.clone()),
        reason_now,
        gates,
        fix: fix(cap, reason_now, context),
    }
}

/// A note when status and the objects as they are now give other reasons.
fn disagreement(capabilities: &[CapabilityReport]) -> Option<String> {
    let differ: Vec<&str> = capabilities
        .iter()
        .filter(|c| c.reason.is_some_and(|r| r != c.reason_now))
        .map(|c| c.capability.key())
        .collect();
    (!differ.is_empty()).then(|| {
        format!(
            "status and the objects as they are now give other reasons for {}: sandcap has not caught up with a \
             change yet (kubectl sandcap check tells whether its controllers run)",
            differ.join(", ")
        )
    })
}

fn worker_gate(cap: Capability, verified: &Verified, worker: Option<&WorkerStatus>) -> Gate {
    let needs = cap.required_methods();
    if verified.is_nothing() {
        let detail = match worker {
            None => "no probe yet: the worker verified nothing".to_string(),
            Some(w) => format!("the worker verified nothing: {}", probe_summary(w)),
        };
        return Gate::new(GateName::Worker, false, detail);
    }
    let (have, missing): (Vec<&str>, Vec<&str>) = needs.iter().partition(|m| verified.has(m));
    match (have.is_empty(), missing.is_empty()) {
        (_, true) => Gate::new(GateName::Worker, true, format!("the worker advertises {}", have.join(", "))),
        (true, false) => Gate::new(GateName::Worker, false, format!("the worker does not advertise {}", missing.join(", "))),
        (false, false) => Gate::new(
            GateName::Worker,
            false,
            format!("the worker advertises {} but not {}", have.join(", "), missing.join(", ")),
        ),
    }
}

/// `probe Failed at <time>: <message>`.
pub fn probe_summary(worker: &WorkerStatus) -> String {
    let at = worker.last_probe_time.as_ref().map(|t| format!(" at {}", t.0)).unwrap_or_default();
    format!("probe {:?}{at}: {}", worker.probe, worker.message)
}

fn declaration_gate(cap: Capability, driver: &DriverDeclaration) -> Gate {
    let nested = driver.sandbox_capabilities.as_ref().and_then(|n| n.get(cap));
    let legacy = driver.supports_reusable_leases.filter(|_| cap == Capability::ReusableLeases);
    let key = cap.key();
    let (value, source) = match (nested, legacy) {
        (Some(v), Some(l)) => {
            (Some(v), format!("sandboxCapabilities.{key}; the legacy supportsReusableLeases: {l} is ignored"))
        }
        (Some(v), None) => (Some(v), format!("sandboxCapabilities.{key}")),
        (None, Some(l)) => (Some(l), format!("the legacy supportsReusableLeases, as sandboxCapabilities.{key} is absent")),
        (None, None) => (None, String::new()),
    };
    let kind = if driver.is_sandbox_provider() { "" } else { " (never read: the driver is not kind sandbox_provider)" };
    match value {
        Some(true) => Gate::new(GateName::Declaration, true, format!("declared true ({source}){kind}")),
        Some(false) => Gate::new(GateName::Declaration, false, format!("declared false ({source}){kind}")),
        None if cap.opt_in() => {
            Gate::new(GateName::Declaration, false, format!("not declared, and {key} is opt-in{kind}"))
        }
        None => Gate::new(GateName::Declaration, true, format!("not declared: follows the worker{kind}")),
    }
}

/// The lease's own narrowings that apply to `cap`.
fn narrowing_gates(cap: Capability, lease: &SandboxLease, n: &Narrowing, config: Option<&Condition>) -> Vec<Gate> {
    let mut gates = Vec::new();
    if cap == Capability::ReusableLeases {
        let policy = lease.spec.policy();
        let reuse = policy == LeasePolicy::ReuseByEnvironment;
        let detail = if reuse {
            "the lease policy is ReuseByEnvironment".to_string()
        } else {
            format!("the lease policy is {policy}, not ReuseByEnvironment")
        };
        gates.push(Gate::new(GateName::Policy, reuse, detail));
    }
    if cap.is_sync() {
        gates.push(match &n.job_backend {
            Some(why) => Gate::new(GateName::JobBackend, false, why.clone()),
            None => Gate::new(GateName::JobBackend, true, "the lease is not Job-backed"),
        });
        gates.push(if n.native_file_sync_unsupported {
            Gate::new(GateName::NativeFileSync, false, "the lease sets nativeFileSyncUnsupported: true")
        } else {
            Gate::new(GateName::NativeFileSync, true, "the lease does not set nativeFileSyncUnsupported")
        });
    }
    if matches!(cap, Capability::PersistentProcessSessions | Capability::IncrementalSessionOutput) {
        gates.push(match config {
            Some(c) => Gate::new(
                GateName::Config,
                c.status != "False",
                format!("ConfigResolved {} ({}): {}", c.status, c.reason, c.message),
            ),
            None => Gate::new(GateName::Config, true, "the config is not resolved yet"),
        });
    }
    gates
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverReport {
    pub declaration: DeclarationReport,
    pub capabilities: Vec<CapabilityReport>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderReport {
    pub kind: Kind,
    pub name: String,
    pub plugin_key: String,
    pub version: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// Where the worker is: `service NAMESPACE/NAME:PORT/PATH` or the URL.
    pub worker_at: String,
    pub worker: Option<WorkerStatus>,
    pub drivers: Vec<DriverReport>,
    pub conditions: Vec<Condition>,
    pub notes: Vec<String>,
}

pub fn provider_report(provider: &SandboxProvider) -> ProviderReport {
    let status = provider.status.as_ref();
    let worker = status.and_then(|s| s.worker.as_ref());
    let verified = contract::verified_from_worker(worker);
    let name = provider.metadata.name.clone().unwrap_or_default();
    let drivers: Vec<DriverReport> = provider
        .spec
        .environment_drivers
        .iter()
        .map(|driver| {
            let now = contract::resolve_driver(&verified, driver);
            let identity = contract::driver_kind_failure(driver);
            let context = FixContext {
                provider: &name,
                driver: &driver.driver_key,
                lease: None,
                identity: identity.as_ref(),
                worker: worker.map(|w| w.message.as_str()),
                verified: &verified,
                config: None,
                secrets: &[],
            };
            let explanations =
                status.and_then(|s| s.drivers.iter().find(|d| d.driver_key == driver.driver_key)).map(|d| &d.explanations);
            let capabilities = Capability::ALL
                .into_iter()
                .map(|cap| {
                    let kind = match &identity {
                        Some(why) => Gate::new(GateName::Identity, false, why.to_string()),
                        None => Gate::new(GateName::Identity, true, "the driver is kind sandbox_provider"),
                    };
                    let gates = vec![kind, worker_gate(cap, &verified, worker), declaration_gate(cap, driver)];
                    capability(cap, explanations.map(Vec::as_slice), &now, gates, &context)
                })
                .collect();
            DriverReport { declaration: DeclarationReport::of(driver), capabilities }
        })
        .collect();
    let mut notes = Vec::new();
    match status {
        None => notes.push(NOT_RESOLVED.to_string()),
        Some(s) if s.observed_generation < provider.metadata.generation => notes.push(format!(
            "status is for generation {}, the provider is at generation {}: sandcap has not probed its latest change yet",
            s.observed_generation.unwrap_or_default(),
            provider.metadata.generation.unwrap_or_default()
        )),
        Some(_) => notes.extend(disagreement(&drivers.iter().flat_map(|d| d.capabilities.clone()).collect::<Vec<_>>())),
    }
    let w = &provider.spec.worker;
    let worker_at = match (&w.service, &w.url) {
        (Some(s), _) => format!("service {}/{}:{}{}", s.namespace, s.name, s.port, s.path.as_deref().unwrap_or("/")),
        (None, Some(url)) => url.clone(),
        (None, None) => "nowhere (spec.worker names neither a service nor a URL)".into(),
    };
    ProviderReport {
        kind: Kind::SandboxProvider,
        plugin_key: provider.spec.plugin_key.clone(),
        version: provider.spec.version.clone(),
        generation: provider.metadata.generation,
        observed_generation: status.and_then(|s| s.observed_generation),
        worker_at,
        worker: worker.cloned(),
        drivers,
        conditions: status.map(|s| s.conditions.clone()).unwrap_or_default(),
        notes,
        name,
    }
}
