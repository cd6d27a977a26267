//! A provider's explanation: where its worker is, the worker's last probe, and each driver's
//! declaration and capabilities.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

use super::fix::FixContext;
use super::gates::{self, Gates};
use super::report::{CapabilityReport, DeclarationReport, capability, status_notes};
use sandcap_core::api::{DriverDeclaration, SandboxProvider, WorkerStatus};
use sandcap_core::contract::{self, Declared, Narrowing, Refusals};
use sandcap_core::vocabulary::Kind;

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
    /// Where the worker is: its address (`http://NAME.NAMESPACE.svc:PORT/PATH`, or the URL without
    /// credentials, query or fragment).
    pub worker_at: String,
    pub worker: Option<WorkerStatus>,
    pub drivers: Vec<DriverReport>,
    pub conditions: Vec<Condition>,
    pub notes: Vec<String>,
}

pub fn provider_report(provider: &SandboxProvider) -> ProviderReport {
    let status = provider.status.as_ref();
    let worker = status.and_then(|s| s.worker.as_ref());
    let name = provider.metadata.name.clone().unwrap_or_default();
    let drivers: Vec<DriverReport> =
        provider.spec.environment_drivers.iter().map(|driver| driver_report(provider, &name, driver)).collect();
    let all: Vec<CapabilityReport> = drivers.iter().flat_map(|d| d.capabilities.clone()).collect();
    let notes = status_notes(status.map(|s| s.observed_generation), provider.metadata.generation, "provider", &all);
    // The address, never the URL as written: it may hold credentials.
    let worker_at =
        provider.spec.worker.address().unwrap_or_else(|| "nowhere (spec.worker names no usable service or URL)".into());
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

/// What `driver` of `provider` (named `name`) grants any lease, and why each capability is off.
fn driver_report(provider: &SandboxProvider, name: &str, driver: &DriverDeclaration) -> DriverReport {
    let status = provider.status.as_ref();
    let verified = contract::verified_from_status(provider);
    let refusals = Refusals::provider(status.and_then(|s| gates::refusal(&s.conditions)));
    // Explained under the contract that resolved it (the one the cluster runs).
    let contract = status.and_then(|s| s.contract).unwrap_or_default().contract();
    let narrowing = Narrowing::of_driver(driver, refusals.provider.as_deref());
    let declared = Declared::from_driver(contract, driver);
    let now = contract::resolve(contract, &verified, &declared, &narrowing);
    let identity = contract::driver_kind_failure(driver);
    let context = FixContext {
        provider: name,
        driver: &driver.driver_key,
        lease: None,
        identity: identity.as_ref(),
        refusals: &refusals,
        declaration: Some(driver),
        worker: status.and_then(|s| s.worker.as_ref()).map(|w| w.message.as_str()),
        verified: &verified,
        config: None,
        secrets: &[],
    };
    let explanations = status
        .and_then(|s| s.drivers.iter().find(|d| d.driver_key == driver.driver_key))
        .map(|d| d.explanations.as_slice());
    let gates = Gates {
        verified: &verified,
        declared,
        narrowing: &narrowing,
        provider: Some(provider),
        driver: Some(driver),
        identity: "the driver is kind sandbox_provider".into(),
        of_lease: false,
        config: None,
    };
    let capabilities =
        contract.keys.iter().map(|rule| capability(rule, explanations, &now, gates.of(rule), &context)).collect();
    DriverReport { declaration: DeclarationReport::of(driver), capabilities }
}
