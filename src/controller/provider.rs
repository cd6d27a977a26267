//! The provider controller: probe the worker, publish verified ∩ declared per driver.
//!
//! The probe is stateless across replicas: whether one is due is read from the published status
//! (`observedGeneration` behind the spec, or `lastProbeTime` older than the probe interval). So a
//! status write that the controller's own watch brings back computes the same status and writes
//! nothing, and `lastProbeTime` moves once per probe interval at most.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::context::Context;
use super::error::Error;
use super::publish::publish;
use super::status::{Conditions, now};
use crate::api::{DriverStatus, ProbeResult, SandboxProvider, SandboxProviderStatus, WorkerStatus};
use crate::config_schema::{self, Deadline, SchemaError};
use crate::contract::{self, Contract, Declared};
use crate::metrics::ProbeLabels;
use crate::probe::{ProbeOutcome, Prober};
use crate::text;
use crate::vocabulary::{ConditionReason as Why, ConditionType as Type};

/// Reconciles one provider: probes its worker if a probe is due, judges its spec against today's
/// rules ([`super::audit`]) and [`publish`]es the status: written if it differs from the published
/// one, with an Event for every capability that turned on or off and when its `Valid` condition
/// turned.
pub async fn reconcile_provider(provider: Arc<SandboxProvider>, ctx: Arc<Context>) -> Result<Action, Error> {
    let provider = provider.as_ref();
    let now = now();
    let (worker, next_probe) = match probe_not_due(provider, &ctx.prober, ctx.probe_interval, &now) {
        // Not due, so the probe was of this generation's spec.worker: its address can be filled
        // in for a status written before addresses were recorded.
        Some((worker, wait)) => {
            let address = worker.address.clone().or_else(|| provider.spec.worker.address());
            (WorkerStatus { address, ..worker.clone() }, wait)
        }
        None => {
            let outcome = ctx.prober.probe(provider).await;
            let labels = ProbeLabels { result: outcome.label(), reason: outcome.reason() };
            ctx.metrics.probes.get_or_create(&labels).inc();
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
            (worker_status(provider, outcome, &now), ctx.probe_interval)
        }
    };
    let finding = ctx.audits.finding(provider, &provider.spec).await;
    let refusal = finding.refusal();
    // Compiling the drivers' configSchemas is CPU work (bounded by the compile budget): off the
    // async workers, so that it delays no other reconcile, watch or probe. Schemas compiled before
    // are checked here: each hand-over to another thread would leave that thread holding memory.
    let schemas = provider.spec.environment_drivers.iter().filter_map(|d| d.config_schema.as_ref());
    let status = || provider_status(ctx.contract.contract(), provider, worker, refusal.as_deref(), &now);
    let desired =
        if schemas.clone().all(config_schema::is_cached) { status() } else { tokio::task::block_in_place(status) };
    publish(&ctx, provider, desired, &finding, &now).await?;
    Ok(Action::requeue(next_probe))
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
    // A success through a URL the operator no longer allows must not outlive the setting.
    if worker.probe == ProbeResult::Succeeded && prober.endpoint(&provider.spec.worker).is_err() {
        return None;
    }
    let last = worker.last_probe_time.as_ref()?;
    let elapsed = now.0.duration_since(last.0);
    let elapsed = Duration::try_from(elapsed).ok()?;
    interval.checked_sub(elapsed).filter(|wait| !wait.is_zero()).map(|wait| (worker, wait))
}

fn worker_status(provider: &SandboxProvider, outcome: ProbeOutcome, now: &Time) -> WorkerStatus {
    let (probe, supported_methods, message) = match outcome {
        ProbeOutcome::Succeeded { methods } => {
            let message = format!("initialize answered ok: true with {} supportedMethods", methods.len());
            (ProbeResult::Succeeded, methods, message)
        }
        ProbeOutcome::Failed(failure) => (ProbeResult::Failed, Vec::new(), failure.to_string()),
    };
    let address = provider.spec.worker.address();
    WorkerStatus { supported_methods, probe, last_probe_time: Some(now.clone()), address, message }
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
    let verified = contract::verified_from_worker(Some(&worker));
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
    let (verified_ok, reason, message) = match worker.probe {
        ProbeResult::Failed => (false, Why::ProbeFailed, worker.message.clone()),
        ProbeResult::Succeeded if verified.is_nothing() => {
            (false, Why::NoMethodsAdvertised, "the worker answered ok: true but listed no supportedMethods".into())
        }
        ProbeResult::Succeeded => (true, Why::ProbeSucceeded, worker.message.clone()),
    };
    let conditions = Conditions { generation, previous, now };
    let worker_verified = conditions.set(Type::WorkerVerified, verified_ok, reason, message);
    let schemas = config_schemas_condition(provider, &conditions);
    let ready = if refused.is_some() {
        let message = "today's rules refuse the provider, so it grants nothing (see its Valid condition)".to_string();
        conditions.set(Type::Ready, false, Why::ProviderNotValid, message)
    } else if verified_ok {
        let granted: Vec<String> = drivers
            .iter()
            .map(|d| {
                let on = d.capabilities.entries().filter(|(_, on)| *on).count();
                format!("{} {on}/{}", d.driver_key, contract.keys.len())
            })
            .collect();
        conditions.set(
            Type::Ready,
            true,
            Why::CapabilitiesResolved,
            format!("capabilities granted: {}", granted.join(", ")),
        )
    } else {
        let message = "the worker is not verified, so every capability is off".to_string();
        conditions.set(Type::Ready, false, Why::WorkerNotVerified, message)
    };
    SandboxProviderStatus {
        observed_generation: generation,
        conditions: vec![worker_verified, ready, schemas],
        worker: Some(worker),
        contract: Some(contract.version),
        drivers,
    }
}

/// `ConfigSchemasCompiled`: whether every driver's `configSchema` compiles within the budget
/// ([`crate::config_schema::BUDGET`]). A schema that does not leaves its leases without the
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
const MAX_CONDITION_MESSAGE: usize = 4096;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::addresses::{AddressClass, WorkerPolicy};
    use crate::controller::fixtures::{T0, later, provider, time};
    use crate::probe::{ProbeError, ProbeFailure};
    use crate::versions::V1;
    use crate::vocabulary::Capability;

    const INTERVAL: Duration = Duration::from_secs(300);

    fn prober(allow_worker_urls: bool) -> Prober {
        Prober::new(
            Duration::from_secs(1),
            WorkerPolicy { allow_urls: allow_worker_urls, ..WorkerPolicy::default() },
            "test",
        )
        .unwrap()
    }

    fn condition<'s>(status: &'s SandboxProviderStatus, type_: &str) -> &'s Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("{type_} in {status:?}"))
    }

    /// The status after `worker`, by type: (status, reason).
    fn verdicts(provider: &SandboxProvider, worker: WorkerStatus) -> Vec<(String, String, String)> {
        let status = provider_status(&V1, provider, worker, None, &time(T0));
        status.conditions.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect()
    }

    fn row(type_: &str, status: &str, reason: &str) -> (String, String, String) {
        (type_.into(), status.into(), reason.into())
    }

    fn published_worker(provider: &SandboxProvider) -> WorkerStatus {
        provider.status.clone().unwrap().worker.unwrap()
    }

    #[test]
    fn a_recent_probe_of_the_current_generation_is_not_repeated_until_the_interval_ends() {
        let p = provider("p").driver("k").probed_ok(&["environmentExecute"]).at(T0).build();
        let (worker, wait) = probe_not_due(&p, &prober(false), INTERVAL, &later(T0, 60)).expect("not due");
        assert_eq!(worker, p.status.as_ref().unwrap().worker.as_ref().unwrap());
        assert_eq!(wait, Duration::from_secs(240));
    }

    #[test]
    fn a_probe_is_due_after_a_spec_change_or_once_the_interval_has_passed() {
        let p = provider("p").driver("k").probed_ok(&["environmentExecute"]).at(T0);
        let edited = p.generation(2).build();
        assert!(probe_not_due(&edited, &prober(false), INTERVAL, &later(T0, 1)).is_none(), "generation");
        let p = provider("p").driver("k").probed_ok(&["environmentExecute"]).at(T0).build();
        assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, 300)).is_none(), "interval");
        assert!(probe_not_due(&provider("p").driver("k").build(), &prober(false), INTERVAL, &time(T0)).is_none());
    }

    #[test]
    fn a_success_through_a_url_no_longer_allowed_is_probed_again_at_once() {
        let p = provider("p").worker_url("http://worker.example:9000/").driver("k").probed_ok(&["environmentExecute"]);
        let p = p.build();
        assert!(probe_not_due(&p, &prober(true), INTERVAL, &later(T0, 1)).is_some(), "still allowed");
        assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, 1)).is_none(), "no longer allowed");
        // A failure costs nothing to keep: it waits for the interval like any other.
        let failed = provider("p").worker_url("http://worker.example:9000/").driver("k").probe_failed("refused");
        assert!(probe_not_due(&failed.build(), &prober(false), INTERVAL, &later(T0, 1)).is_some());
    }

    #[test]
    fn a_failed_probe_verifies_nothing_and_says_why() {
        let p = provider("p").driver("k").declares(&["nativeSyncIn"]).probe_failed("cannot connect").build();
        let worker = published_worker(&p);
        assert_eq!(
            verdicts(&p, worker.clone()),
            [
                row("WorkerVerified", "False", "ProbeFailed"),
                row("Ready", "False", "WorkerNotVerified"),
                row("ConfigSchemasCompiled", "True", "Compiled")
            ]
        );
        let status = provider_status(&V1, &p, worker, None, &time(T0));
        assert_eq!(condition(&status, "WorkerVerified").message, "cannot connect");
        assert!(status.drivers[0].explanations.iter().all(|e| !e.granted));
    }

    /// The status of a provider is read by its author, who chose where its worker is: it says the
    /// coarse class only (the log has the rest).
    #[test]
    fn a_failed_probe_publishes_only_its_coarse_class() {
        let p = provider("p").driver("k").build();
        let failed = |error| {
            let endpoint = Some("http://10.0.0.7:6379/".to_string());
            ProbeOutcome::Failed(ProbeFailure { endpoint, error, cause: Some("os error 111".into()) })
        };
        let cases = [
            (
                ProbeError::HttpStatus(http::StatusCode::NOT_FOUND),
                "the worker answered something that is not the worker protocol",
            ),
            (ProbeError::ConnectionRefused, "the worker is unreachable"),
            (ProbeError::Timeout(Duration::from_secs(5)), "the worker is unreachable"),
            (
                ProbeError::RefusedAddress(AddressClass::Metadata),
                "the worker's address is refused by the address policy",
            ),
        ];
        for (error, class) in cases {
            let worker = worker_status(&p, failed(error.clone()), &time(T0));
            let said = format!("probe of http://10.0.0.7:6379/ failed: {class}; sandcap's log has the detail");
            assert_eq!(worker.message, said, "{error:?}");
            let status = provider_status(&V1, &p, worker, None, &time(T0));
            assert_eq!(condition(&status, "WorkerVerified").message, said);
        }
    }

    #[test]
    fn a_worker_that_lists_no_methods_is_not_verified() {
        let p = provider("p").driver("k").probed_ok(&[]).build();
        let rows = verdicts(&p, published_worker(&p));
        assert_eq!(
            rows[..2],
            [row("WorkerVerified", "False", "NoMethodsAdvertised"), row("Ready", "False", "WorkerNotVerified")]
        );
    }

    #[test]
    fn a_verified_worker_makes_the_provider_ready_with_each_drivers_count() {
        let methods =
            ["environmentResumeLease", "environmentReleaseLease", "environmentDestroyLease", "environmentExecute"];
        // reusableLeases is opt-in: granted only where declared.
        let p = provider("p").driver("kubernetes").declares(&["reusableLeases"]).driver("shell");
        let p = p.probed_ok(&methods).build();
        let status = provider_status(&V1, &p, published_worker(&p), None, &time(T0));
        let rows = verdicts(&p, published_worker(&p));
        assert_eq!(
            rows[..2],
            [row("WorkerVerified", "True", "ProbeSucceeded"), row("Ready", "True", "CapabilitiesResolved")]
        );
        let granted = |key: &str| status.drivers.iter().find(|d| d.driver_key == key).unwrap().capabilities;
        assert!(
            granted("kubernetes").get(Capability::ReusableLeases) && !granted("shell").get(Capability::ReusableLeases)
        );
        assert!(condition(&status, "Ready").message.starts_with("capabilities granted: kubernetes "), "{status:?}");
        assert!(status.conditions.iter().all(|c| c.observed_generation == Some(1)));
    }

    #[test]
    fn conditions_keep_their_transition_time_while_their_status_stays() {
        let p = provider("p").driver("k").probed_ok(&["environmentExecute"]).build();
        let mut published = p.clone();
        published.status = Some(provider_status(&V1, &p, published_worker(&p), None, &time(T0)));
        let again = provider_status(&V1, &published, published_worker(&p), None, &later(T0, 600));
        assert_eq!(Some(&again), published.status.as_ref(), "nothing to write");
        let failed = provider("p").driver("k").probe_failed("timed out").build();
        let turned = provider_status(&V1, &published, published_worker(&failed), None, &later(T0, 600));
        assert_eq!(condition(&turned, "WorkerVerified").last_transition_time, later(T0, 600));
        assert_eq!(condition(&turned, "ConfigSchemasCompiled").last_transition_time, time(T0));
    }

    #[test]
    fn config_schemas_compiled_names_the_driver_whose_schema_breaks_a_limit() {
        let schemas = |schema| {
            let p = provider("p").driver("fine").config_schema(json!({"type": "object"})).driver("bad");
            let p = p.config_schema(schema).probed_ok(&["environmentExecute"]).build();
            provider_status(&V1, &p, published_worker(&p), None, &time(T0))
        };
        let over = schemas(json!({"properties": {"a": {"pattern": "\\w{50000}"}}}));
        let over = condition(&over, "ConfigSchemasCompiled");
        assert_eq!((over.status.as_str(), over.reason.as_str()), ("False", "SchemaOverBudget"));
        assert!(over.message.starts_with("driver bad: "), "{}", over.message);
        let invalid = schemas(json!({"type": "strin"}));
        let invalid = condition(&invalid, "ConfigSchemasCompiled");
        assert_eq!((invalid.status.as_str(), invalid.reason.as_str()), ("False", "SchemaDoesNotCompile"));
        let fine = schemas(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        let fine = condition(&fine, "ConfigSchemasCompiled");
        assert_eq!((fine.status.as_str(), fine.reason.as_str()), ("True", "Compiled"));
        assert_eq!(fine.message, "2 of 2 drivers declare a configSchema; each compiles within the budget");
    }
}
