//! A lease's explanation: its provider as it is now, the pinned identity, the driver's
//! declaration, the worker's last probe, the lease's narrowings and its `configFrom` Secrets.

use super::fix::FixContext;
use super::gates::{self, Gates};
use super::report::{CapabilityReport, DeclarationReport, ProviderLink, capability, status_notes};
use super::secret::SecretReport;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use sandcap_core::api::{DriverDeclaration, Pinned, SandboxLease, SandboxProvider, WorkerStatus};
use sandcap_core::contract::{
    self, Contract, Declared, FailedConfig, IdentityFailure, Narrowing, Refusals, Resolution, Verified,
};
use sandcap_core::vocabulary::{ConditionStatus, ConditionType, Kind, LeasePolicy};
use sandcap_core::workloads::OBSERVED_FROM_LABEL;
use serde::Serialize;

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
    /// The workload that runs the lease, as its `workloadRef` names it.
    pub workload: Option<WorkloadLink>,
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

/// The workload a lease names, and whether sandcap observed the lease from it (it carries the
/// observed-from label): then sandcap keeps its spec in step with the workload.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadLink {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub observed: bool,
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
    let worker = provider.and_then(|p| p.status.as_ref()).and_then(|s| s.worker.as_ref());
    let provider_conditions = provider.and_then(|p| p.status.as_ref()).map(|s| s.conditions.as_slice());
    let published =
        Refusals { lease: gates::refusal(&conditions), provider: provider_conditions.and_then(gates::refusal) };
    let inputs = LeaseInputs::read(lease, provider, published);
    let driver = inputs.identity.as_ref().ok().copied().or_else(|| {
        let key = &lease.spec.provider_ref.driver_key;
        provider.and_then(|p| p.spec.environment_drivers.iter().find(|d| d.driver_key == *key))
    });
    let capabilities = capabilities(facts, &inputs, driver);
    let notes = status_notes(status.map(|s| s.observed_generation), lease.metadata.generation, "lease", &capabilities);
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
        workload: lease.spec.workload_ref.as_ref().map(|w| WorkloadLink {
            api_version: w.api_version.clone(),
            kind: w.kind.clone(),
            name: w.name.clone(),
            observed: lease.labels().contains_key(OBSERVED_FROM_LABEL),
        }),
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

/// Each capability of the contract that resolved the lease (the one the cluster runs), explained
/// by `inputs`, the lease's as stored, with `driver` as found.
fn capabilities(facts: &LeaseFacts, inputs: &LeaseInputs, driver: Option<&DriverDeclaration>) -> Vec<CapabilityReport> {
    let LeaseFacts { lease, provider, .. } = *facts;
    let LeaseInputs { identity, verified, config, narrowing } = inputs;
    let status = lease.status.as_ref();
    let worker = provider.and_then(|p| p.status.as_ref()).and_then(|s| s.worker.as_ref());
    let contract = status.and_then(|s| s.contract).unwrap_or_default().contract();
    let now = inputs.resolve(contract);
    // The declaration shown is the driver's as found, even where the identity check fails and the
    // resolution reads none.
    let gates = Gates {
        verified,
        declared: driver.map(|d| Declared::from_driver(contract, d)).unwrap_or_default(),
        narrowing,
        provider,
        driver,
        identity: identity_detail(lease, provider),
        of_lease: true,
        config: *config,
    };
    let context = FixContext {
        provider: &lease.spec.provider_ref.name,
        driver: &lease.spec.provider_ref.driver_key,
        lease: Some((lease.metadata.namespace.as_deref().unwrap_or_default(), lease_name(lease))),
        identity: identity.as_ref().err(),
        refusals: &narrowing.refusals,
        declaration: driver,
        worker: worker.map(|w| w.message.as_str()),
        verified,
        config: *config,
        secrets: &facts.secrets,
    };
    let explained = status.map(|s| s.explanations.as_slice());
    contract.keys.iter().map(|rule| capability(rule, explained, &now, gates.of(rule), &context)).collect()
}

/// What a stored lease's resolution is read from: the provider's published worker status, the
/// identity check against the provider as it is now, and the lease's narrowings from its spec, its
/// config's outcome from its `ConfigResolved` condition (the Secrets' data is sandcap's alone).
/// `explain` resolves a lease from these, and `plan` under two contract versions.
pub struct LeaseInputs<'a> {
    pub identity: Result<&'a DriverDeclaration, IdentityFailure>,
    pub verified: Verified,
    pub config: Option<&'a Condition>,
    pub narrowing: Narrowing,
}

impl<'a> LeaseInputs<'a> {
    /// `refusals`: what today's rules refuse of the lease and its provider, which the caller
    /// decides (the published `Valid` conditions, or a judgment under another version).
    pub fn read(lease: &'a SandboxLease, provider: Option<&'a SandboxProvider>, refusals: Refusals) -> Self {
        let conditions = lease.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        let config = conditions.iter().find(|c| c.type_ == ConditionType::ConfigResolved.as_str());
        let identity = contract::check_identity(lease, provider);
        let narrowing = Narrowing {
            refusals,
            identity_failure: identity.as_ref().err().cloned(),
            policy: Some(lease.spec.policy()),
            job_backend: contract::job_backend(lease),
            native_file_sync_unsupported: lease.spec.native_file_sync_unsupported.unwrap_or(false),
            config_failure: config
                .filter(|c| ConditionStatus::False.is(&c.status))
                .map(|c| FailedConfig::Published(c.message.clone())),
        };
        let verified = provider.map_or_else(Verified::nothing, contract::verified_from_status);
        LeaseInputs { identity, verified, config, narrowing }
    }

    /// The resolution under `contract`: only a driver that passes the identity check declares
    /// anything.
    pub fn resolve(&self, contract: &Contract) -> Resolution {
        let declared = self.identity.as_ref().map(|d| Declared::from_driver(contract, d)).unwrap_or_default();
        contract::resolve(contract, &self.verified, &declared, &self.narrowing)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::explain::table;
    use crate::controller::fixtures::lease;

    #[test]
    fn the_workload_is_named_and_an_observed_lease_said_to_be_kept_by_sandcap() {
        let mut l = lease("paperclip-acme", "pc-1").of("k8s", "kubernetes").build();
        l.spec.workload_ref = Some(sandcap_core::api::WorkloadRef {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "pc-1".into(),
            extra: Default::default(),
        });
        let text = |l: &SandboxLease| {
            let mut out = Vec::new();
            table::lease(&mut out, &lease_report(&LeaseFacts { lease: l, provider: None, secrets: vec![] })).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(text(&l).contains("  workload      Job pc-1 (batch/v1)\n"), "{}", text(&l));
        l.labels_mut().insert(OBSERVED_FROM_LABEL.into(), "job".into());
        assert!(text(&l).contains("Job pc-1 (batch/v1), observed: sandcap keeps this lease in step with it"));
    }
}
