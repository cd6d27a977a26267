//! The provider reconcile's pure parts: when a probe is due, what the status says.

use serde_json::json;

use super::*;
use crate::controller::fixtures::{T0, later, provider, time};
use crate::probe::{ProbeError, ProbeFailure};
use sandcap_core::addresses::{AddressClass, WorkerPolicy};
use sandcap_core::versions::V1;
use sandcap_core::vocabulary::Capability;

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
    // The interval's rest, and the provider's share of a tenth of the interval.
    assert!(wait >= Duration::from_secs(240) && wait < Duration::from_secs(270), "{wait:?}");
}

#[test]
fn a_probe_is_due_after_a_spec_change_or_once_the_interval_has_passed() {
    let p = provider("p").driver("k").probed_ok(&["environmentExecute"]).at(T0);
    let edited = p.generation(2).build();
    assert!(probe_not_due(&edited, &prober(false), INTERVAL, &later(T0, 1)).is_none(), "generation");
    let p = provider("p").driver("k").probed_ok(&["environmentExecute"]).at(T0).build();
    assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, 330)).is_none(), "interval and its spread");
    assert!(probe_not_due(&provider("p").driver("k").build(), &prober(false), INTERVAL, &time(T0)).is_none());
}

#[test]
fn a_success_through_a_url_no_longer_allowed_is_probed_again_at_once() {
    let p = provider("p").worker_url("http://worker.example:9000/").driver("k").probed_ok(&["environmentExecute"]);
    let p = p.build();
    assert!(probe_not_due(&p, &prober(true), INTERVAL, &later(T0, 1)).is_some(), "still allowed");
    assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, 1)).is_none(), "no longer allowed");
    // A failure costs nothing to keep: it is retried on its own schedule.
    let failed = provider("p").worker_url("http://worker.example:9000/").driver("k").probe_failed("refused");
    assert!(probe_not_due(&failed.build(), &prober(false), INTERVAL, &later(T0, 1)).is_some());
}

/// A provider whose probe at `last` (seconds after T0) failed, failing since T0.
fn failing_since_t0(last: i64) -> SandboxProvider {
    let mut p = provider("p").driver("k").probe_failed("refused").build();
    let status = p.status.as_mut().unwrap();
    status.worker.as_mut().unwrap().last_probe_time = Some(later(T0, last));
    let verified = Conditions { generation: Some(1), previous: &[], now: &time(T0) }.set(
        Type::WorkerVerified,
        false,
        Why::ProbeFailed,
        "refused".into(),
    );
    status.conditions.push(verified);
    p
}

#[test]
fn a_failing_worker_is_retried_after_as_long_as_it_has_failed_from_seconds_up_to_the_interval() {
    for (last, every) in [(0, 2), (1, 2), (2, 2), (4, 4), (8, 8), (64, 64), (1000, 300)] {
        let p = failing_since_t0(last);
        assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, last + every - 1)).is_some(), "{last}");
        assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, last + every)).is_none(), "{last}");
    }
    // A failure with no failing condition (published by a build before it) waits the least.
    let p = provider("p").driver("k").probe_failed("refused").build();
    assert!(probe_not_due(&p, &prober(false), INTERVAL, &later(T0, 2)).is_none());
}

#[test]
fn working_workers_spread_over_a_tenth_of_the_interval() {
    let worker = |uid: &str| {
        let mut p = provider("p").driver("k").probed_ok(&["environmentExecute"]).build();
        p.metadata.uid = Some(uid.into());
        let status = p.status.clone().unwrap();
        probe_every(&status, status.worker.as_ref().unwrap(), INTERVAL, uid)
    };
    let waits: std::collections::BTreeSet<Duration> = (0..100).map(|i| worker(&format!("uid-{i}"))).collect();
    assert!(waits.iter().all(|w| *w >= INTERVAL && *w < INTERVAL + INTERVAL / 10), "{waits:?}");
    assert!(waits.len() > 50, "spread: {waits:?}");
    assert_eq!(worker("uid-1"), worker("uid-1"), "the same provider keeps its share");
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
        (ProbeError::RefusedAddress(AddressClass::Metadata), "the worker's address is refused by the address policy"),
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
    assert!(granted("kubernetes").get(Capability::ReusableLeases) && !granted("shell").get(Capability::ReusableLeases));
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
