//! The provider controller: probe the worker, publish verified ∩ declared per driver.
//!
//! The probe is stateless across replicas: whether one is due is read from the published status
//! (`observedGeneration` behind the spec, or `lastProbeTime` older than [`probe_every`]). So a
//! status write that the controller's own watch brings back computes the same status and writes
//! nothing, and `lastProbeTime` moves once per probe interval at most while the worker answers
//! (on the retry schedule while it fails).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::context::{self, Context};
use super::engine::Next;
use super::error::Error;
use super::publish::publish;
use super::status::{Conditions, now};
use crate::metrics::ProbeLabels;
use crate::probe::{ProbeOutcome, Prober};
use sandcap_core::api::{DriverStatus, ProbeResult, SandboxProvider, SandboxProviderStatus, WorkerStatus};
use sandcap_core::config_schema::{self, Deadline, SchemaError};
use sandcap_core::contract::{self, Contract, Declared, Verified};
use sandcap_core::text;
use sandcap_core::vocabulary::{ConditionReason as Why, ConditionType as Type};

/// Reconciles one provider: probes its worker if a probe is due, judges its spec against today's
/// rules ([`super::audit`]) and [`publish`]es the status: written if it differs from the published
/// one, with an Event for every capability that turned on or off and when its `Valid` condition
/// turned.
pub async fn reconcile_provider(provider: Arc<SandboxProvider>, ctx: Arc<Context>) -> Result<Next, Error> {
    let provider = provider.as_ref();
    let now = now();
    let by_endpoint = match &provider.spec.worker.service {
        Some(service) if ctx.prober.endpoint(&provider.spec.worker).is_ok() => {
            endpoints::probe_endpoints(provider, service, &ctx, &now).await?
        }
        _ => None,
    };
    let (worker, next_probe) = match by_endpoint {
        Some((worker, wait)) => (worker, Some(wait)),
        None => probe_by_address(provider, &ctx, &now).await,
    };
    let finding = context::finding(&ctx, provider, &provider.spec).await;
    let refusal = finding.refusal();
    // Compiling the drivers' configSchemas is CPU work (bounded by the compile budget): off the
    // async workers, so that it delays no other reconcile, watch or probe. Schemas compiled before
    // are checked here: each hand-over to another thread would leave that thread holding memory.
    let schemas = provider.spec.environment_drivers.iter().filter_map(|d| d.config_schema.as_ref());
    let status = || provider_status(ctx.contract.contract(), provider, worker, refusal.as_deref(), &now);
    let mut desired =
        if schemas.clone().all(config_schema::is_cached) { status() } else { tokio::task::block_in_place(status) };
    let previous = provider.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let conditions = Conditions { generation: provider.metadata.generation, previous, now: &now };
    desired.conditions.extend(workloads::workloads_condition(provider, &ctx.served, &conditions));
    let next_probe = next_probe.unwrap_or_else(|| match &desired.worker {
        Some(worker) => probe_every(&desired, worker, ctx.probe_interval, &provider.uid().unwrap_or_default()),
        None => ctx.probe_interval,
    });
    publish(&ctx, provider, desired, &finding, &now).await?;
    Ok(Next::After(next_probe))
}

/// The worker probed at its one address (`spec.worker.url`, an `ExternalName` Service, or a
/// spec the probe cannot use), unless a probe is not due: its status and, when not due, the time
/// until it is.
async fn probe_by_address(provider: &SandboxProvider, ctx: &Context, now: &Time) -> (WorkerStatus, Option<Duration>) {
    match probe_not_due(provider, &ctx.prober, ctx.probe_interval, now) {
        // Not due, so the probe was of this generation's spec.worker: its address can be filled
        // in for a status written before addresses were recorded.
        Some((worker, wait)) => {
            let address = worker.address.clone().or_else(|| provider.spec.worker.address());
            (WorkerStatus { address, ..worker.clone() }, Some(wait))
        }
        None => {
            let started = std::time::Instant::now();
            let outcome = ctx.prober.probe(provider).await;
            let labels = ProbeLabels { result: outcome.label(), reason: outcome.reason() };
            ctx.metrics.probed(&provider.name_any(), &labels, started.elapsed());
            // The detail is for the operator only: the provider's status carries the coarse class.
            match &outcome {
                ProbeOutcome::Failed(failure) => tracing::info!(
                    provider = %provider.name_any(), result = labels.result, reason = labels.reason,
                    detail = %failure.detail(), "probed worker"
                ),
                ProbeOutcome::Succeeded { .. } => tracing::info!(
                    provider = %provider.name_any(), result = labels.result, reason = labels.reason, "probed worker"
                ),
            }
            (worker_status(provider, outcome, now), None)
        }
    }
}

/// The published worker status and the time until the next probe, unless a probe is due now:
/// pure, it reads the prober's URL policy only (never the network).
fn probe_not_due<'p>(
    provider: &'p SandboxProvider,
    prober: &Prober,
    interval: Duration,
    now: &Time,
) -> Option<(&'p WorkerStatus, Duration)> {
    let status = provider.status.as_ref()?;
    if status.observed_generation != provider.metadata.generation {
        return None;
    }
    let worker = status.worker.as_ref()?;
    // Written by the probe of every endpoint: this Service no longer has endpoints of its own.
    if worker.endpoints.is_some() {
        return None;
    }
    // A success through a URL the operator no longer allows must not outlive the setting.
    if worker.probe == ProbeResult::Succeeded && prober.endpoint(&provider.spec.worker).is_err() {
        return None;
    }
    let last = worker.last_probe_time.as_ref()?;
    let elapsed = now.0.duration_since(last.0);
    let elapsed = Duration::try_from(elapsed).ok()?;
    let every = probe_every(status, worker, interval, &provider.uid().unwrap_or_default());
    every.checked_sub(elapsed).filter(|wait| !wait.is_zero()).map(|wait| (worker, wait))
}

/// The shortest wait before a failed probe is tried again.
const RETRY_MIN: Duration = Duration::from_secs(2);

/// How long after its last probe the worker in `status` is due again. One whose last probe failed
/// is tried again after as long as it has been failing (since its `WorkerVerified` condition
/// turned False), at least [`RETRY_MIN`] and at most `interval`: retries double from seconds, so
/// a worker that comes up late or one lost probe costs seconds, and the schedule is read from the
/// status alone (a restart or another leader keeps it). A working worker is probed again after
/// `interval` plus its own share, by uid, of a tenth of it, so that providers created together
/// do not probe in step.
fn probe_every(status: &SandboxProviderStatus, worker: &WorkerStatus, interval: Duration, uid: &str) -> Duration {
    if worker.probe == ProbeResult::Failed {
        let verified = status.conditions.iter().find(|c| c.type_ == Type::WorkerVerified.as_str());
        let since = verified.filter(|c| c.status == "False").map(|c| &c.last_transition_time);
        let failing = match (since, &worker.last_probe_time) {
            (Some(since), Some(last)) => Duration::try_from(last.0.duration_since(since.0)).unwrap_or_default(),
            _ => Duration::ZERO,
        };
        return failing.clamp(RETRY_MIN, interval.max(RETRY_MIN));
    }
    interval + interval / 10 * share_of(uid, "") as u32 / 1000
}

/// A share in thousandths, the same for the same provider (`uid`) and endpoint: what spreads the
/// probes of providers, and of endpoints, created together.
fn share_of(uid: &str, endpoint: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&(uid, endpoint), &mut hasher);
    std::hash::Hasher::finish(&hasher) % 1000
}

fn worker_status(provider: &SandboxProvider, outcome: ProbeOutcome, now: &Time) -> WorkerStatus {
    let plugin = outcome.plugin().cloned();
    let (probe, supported_methods, message) = match outcome {
        ProbeOutcome::Succeeded { methods, .. } => {
            let message = format!("initialize answered ok: true with {} supportedMethods", methods.len());
            (ProbeResult::Succeeded, methods, message)
        }
        ProbeOutcome::Failed(failure) => (ProbeResult::Failed, Vec::new(), failure.to_string()),
    };
    let address = provider.spec.worker.address();
    let last_probe_time = Some(now.clone());
    WorkerStatus { supported_methods, probe, last_probe_time, address, message, endpoints: None, plugin }
}

/// The status the provider should have with this worker status and, when today's rules refuse
/// the provider, their problems (`refused`): pure, everything it reads is passed in.
pub fn provider_status(
    contract: &Contract,
    provider: &SandboxProvider,
    worker: WorkerStatus,
    refused: Option<&str>,
    now: &Time,
) -> SandboxProviderStatus {
    let generation = provider.metadata.generation;
    let previous = provider.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    // A worker that says it is another plugin verifies nothing, whatever it listed.
    let other_plugin = worker.plugin.as_ref().and_then(|p| contract::check_worker_plugin(&provider.spec, p).err());
    let verified =
        if other_plugin.is_some() { Verified::nothing() } else { contract::verified_from_worker(Some(&worker)) };
    let drivers: Vec<DriverStatus> = provider
        .spec
        .environment_drivers
        .iter()
        .map(|driver| {
            let resolution = contract::resolve_driver(contract, &verified, driver, refused);
            DriverStatus {
                driver_key: driver.driver_key.clone(),
                kind: driver.kind,
                declared: Declared::from_driver(contract, driver).present(),
                capabilities: resolution.capabilities,
                explanations: resolution.explanations,
            }
        })
        .collect();
    let (verified_ok, reason, message) = match (&other_plugin, worker.probe) {
        (Some(other), _) => (false, Why::PluginIdentityMismatch, format!("{other}, so nothing is verified")),
        (None, ProbeResult::Failed) => (false, Why::ProbeFailed, worker.message.clone()),
        (None, ProbeResult::Succeeded) if verified.is_nothing() => {
            (false, Why::NoMethodsAdvertised, "the worker answered ok: true but listed no supportedMethods".into())
        }
        (None, ProbeResult::Succeeded) => (true, Why::ProbeSucceeded, worker.message.clone()),
    };
    let conditions = Conditions { generation, previous, now };
    let worker_verified = conditions.set(Type::WorkerVerified, verified_ok, reason, message);
    let schemas = config_schemas_condition(provider, &conditions);
    let ready = ready_condition(&conditions, contract, &drivers, verified_ok, refused.is_some());
    let mut all = vec![worker_verified, ready, schemas];
    all.extend(manifest::declarations_condition(provider, &worker, other_plugin.is_some(), &conditions));
    SandboxProviderStatus {
        observed_generation: generation,
        conditions: all,
        worker: Some(worker),
        contract: Some(contract.version),
        drivers,
    }
}

/// `Ready`: the capabilities each driver grants, or why the provider grants nothing.
fn ready_condition(
    conditions: &Conditions,
    contract: &Contract,
    drivers: &[DriverStatus],
    verified: bool,
    refused: bool,
) -> Condition {
    if refused {
        let message = "today's rules refuse the provider, so it grants nothing (see its Valid condition)".to_string();
        return conditions.set(Type::Ready, false, Why::ProviderNotValid, message);
    }
    if !verified {
        let message = "the worker is not verified, so every capability is off".to_string();
        return conditions.set(Type::Ready, false, Why::WorkerNotVerified, message);
    }
    let granted: Vec<String> = drivers
        .iter()
        .map(|d| {
            let on = d.capabilities.entries().filter(|(_, on)| *on).count();
            format!("{} {on}/{}", d.driver_key, contract.keys.len())
        })
        .collect();
    let message = format!("capabilities granted: {}", granted.join(", "));
    conditions.set(Type::Ready, true, Why::CapabilitiesResolved, message)
}

/// `ConfigSchemasCompiled`: whether every driver's `configSchema` compiles within the budget
/// ([`sandcap_core::config_schema::BUDGET`]). A schema that does not leaves its leases without the
/// capabilities that need a resolved config; this says so once, on the provider, with the limit
/// it broke. Over budget wins the reason over a schema that is merely invalid.
fn config_schemas_condition(provider: &SandboxProvider, conditions: &Conditions) -> Condition {
    let drivers = &provider.spec.environment_drivers;
    let failures: Vec<(&str, SchemaError)> = drivers
        .iter()
        .filter_map(|d| Some((d.driver_key.as_str(), d.config_schema.as_ref()?)))
        .filter_map(|(key, schema)| Some((key, config_schema::compile(schema, Deadline::Own).err()?)))
        .collect();
    if failures.is_empty() {
        let declared = drivers.iter().filter(|d| d.config_schema.is_some()).count();
        let message =
            format!("{declared} of {} drivers declare a configSchema; each compiles within the budget", drivers.len());
        return conditions.set(Type::ConfigSchemasCompiled, true, Why::Compiled, message);
    }
    let over = failures.iter().any(|(_, e)| matches!(e, SchemaError::OverBudget { .. }));
    let reason = if over { Why::SchemaOverBudget } else { Why::SchemaDoesNotCompile };
    let message: Vec<String> = failures.iter().map(|(key, e)| format!("driver {key}: {e}")).collect();
    let message = text::clip(&message.join("; "), MAX_CONDITION_MESSAGE);
    conditions.set(Type::ConfigSchemasCompiled, false, reason, message)
}

/// The longest condition message sandcap writes (the apiserver allows 32,768 bytes).
pub(super) const MAX_CONDITION_MESSAGE: usize = 4096;

mod endpoints;
mod manifest;
pub mod settle;
#[cfg(test)]
mod tests;
mod workloads;
