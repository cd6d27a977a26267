//! The gates of the resolution for one capability, each with whether it lets the capability
//! through and why, in the words status uses.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::report::{Gate, GateReport};
use crate::api::{DriverDeclaration, ProbeResult, SandboxLease, WorkerStatus};
use crate::contract::{KeyRule, NarrowedBy, Narrowing, Verified};
use crate::vocabulary::{Capability, ConditionStatus, ConditionType, LeasePolicy};

/// What today's rules say of an object, as its published `Valid` condition does: its problems
/// when it is False (what sandcap concluded, with the operator's own settings).
pub fn refusal(conditions: &[Condition]) -> Option<String> {
    let valid = conditions.iter().find(|c| c.type_ == ConditionType::Valid.as_str())?;
    ConditionStatus::False.is(&valid.status).then(|| valid.message.clone())
}

/// The gate of an object's validity (`LeaseValid` or `ProviderValid`).
pub fn validity(gate: Gate, refusal: Option<&str>) -> GateReport {
    match refusal {
        Some(problems) => GateReport::new(gate, false, format!("today's rules refuse it: {problems}")),
        None => GateReport::new(gate, true, "today's rules admit it (or sandcap has not judged it yet)"),
    }
}

pub fn worker(rule: &KeyRule, verified: &Verified, worker: Option<&WorkerStatus>) -> GateReport {
    let needs = rule.methods;
    if let Some(why) = verified.why_nothing() {
        let detail = match worker {
            None => "no probe yet: the worker verified nothing".to_string(),
            Some(w) if w.probe == ProbeResult::Succeeded => format!("the worker verified nothing: {why}"),
            Some(w) => format!("the worker verified nothing: {}", probe_summary(w)),
        };
        return GateReport::new(Gate::Worker, false, detail);
    }
    let (have, missing): (Vec<&str>, Vec<&str>) = needs.iter().partition(|m| verified.has(m));
    match (have.is_empty(), missing.is_empty()) {
        (_, true) => GateReport::new(Gate::Worker, true, format!("the worker advertises {}", have.join(", "))),
        (true, false) => {
            GateReport::new(Gate::Worker, false, format!("the worker does not advertise {}", missing.join(", ")))
        }
        (false, false) => GateReport::new(
            Gate::Worker,
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

pub fn declaration(rule: &KeyRule, driver: &DriverDeclaration) -> GateReport {
    let cap = rule.capability;
    let nested = driver.sandbox_capabilities.as_ref().and_then(|n| n.get(cap));
    let legacy = driver.supports_reusable_leases.filter(|_| cap == Capability::ReusableLeases);
    let key = cap.key();
    let (value, source) = match (nested, legacy) {
        (Some(v), Some(l)) => {
            (Some(v), format!("sandboxCapabilities.{key}; the legacy supportsReusableLeases: {l} is ignored"))
        }
        (Some(v), None) => (Some(v), format!("sandboxCapabilities.{key}")),
        (None, Some(l)) => {
            (Some(l), format!("the legacy supportsReusableLeases, as sandboxCapabilities.{key} is absent"))
        }
        (None, None) => (None, String::new()),
    };
    let kind = if driver.is_sandbox_provider() { "" } else { " (never read: the driver is not kind sandbox_provider)" };
    match value {
        Some(true) => GateReport::new(Gate::Declaration, true, format!("declared true ({source}){kind}")),
        Some(false) => GateReport::new(Gate::Declaration, false, format!("declared false ({source}){kind}")),
        None if rule.opt_in => {
            GateReport::new(Gate::Declaration, false, format!("not declared, and {key} is opt-in{kind}"))
        }
        None => GateReport::new(Gate::Declaration, true, format!("not declared: follows the worker{kind}")),
    }
}

/// The lease's own narrowings that apply to the key, in the order the gates apply them.
pub fn narrowings(rule: &KeyRule, lease: &SandboxLease, n: &Narrowing, config: Option<&Condition>) -> Vec<GateReport> {
    let gate = |narrowed_by| match narrowed_by {
        NarrowedBy::LeasePolicy => {
            let policy = lease.spec.policy();
            let reuse = policy == LeasePolicy::ReuseByEnvironment;
            let detail = if reuse {
                "the lease policy is ReuseByEnvironment".to_string()
            } else {
                format!("the lease policy is {policy}, not ReuseByEnvironment")
            };
            GateReport::new(Gate::Policy, reuse, detail)
        }
        NarrowedBy::JobBackend => match &n.job_backend {
            Some(why) => GateReport::new(Gate::JobBackend, false, why.clone()),
            None => GateReport::new(Gate::JobBackend, true, "the lease is not Job-backed"),
        },
        NarrowedBy::NativeFileSyncUnsupported => {
            if n.native_file_sync_unsupported {
                GateReport::new(Gate::NativeFileSync, false, "the lease sets nativeFileSyncUnsupported: true")
            } else {
                GateReport::new(Gate::NativeFileSync, true, "the lease does not set nativeFileSyncUnsupported")
            }
        }
        NarrowedBy::ConfigResolution => match config {
            Some(c) => GateReport::new(
                Gate::Config,
                !ConditionStatus::False.is(&c.status),
                format!("ConfigResolved {} ({}): {}", c.status, c.reason, c.message),
            ),
            None => GateReport::new(Gate::Config, true, "the config is not resolved yet"),
        },
    };
    NarrowedBy::ALL.into_iter().filter(|n| rule.narrowed_by(*n)).map(gate).collect()
}
