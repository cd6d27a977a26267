//! The gates of the resolution for one capability as `explain` shows them: which gates there are,
//! in which order, and whether each lets the capability through is the core's walk
//! ([`contract::gates`]), the one the resolution reads; the words are explain's, saying more than
//! status's message where the objects do.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::report::{Gate, GateReport};
use sandcap_core::api::{DriverDeclaration, ProbeResult, SandboxProvider, WorkerStatus};
use sandcap_core::contract::{self, Declared, GateVerdict, KeyRule, Narrowing, Verified};
use sandcap_core::vocabulary::{Capability, ConditionStatus, ConditionType, WorkerMethod};

/// What today's rules say of an object, as its published `Valid` condition does: its problems
/// when it is False (what sandcap concluded, with the operator's own settings).
pub fn refusal(conditions: &[Condition]) -> Option<String> {
    let valid = conditions.iter().find(|c| c.type_ == ConditionType::Valid.as_str())?;
    ConditionStatus::False.is(&valid.status).then(|| valid.message.clone())
}

/// The walk's inputs, and the objects explain words the gates from.
pub struct Gates<'a> {
    pub verified: &'a Verified,
    pub declared: Declared,
    pub narrowing: &'a Narrowing,
    /// `None` for a lease whose provider is not found: the provider's gates are not shown.
    pub provider: Option<&'a SandboxProvider>,
    /// The driver whose declaration is shown (found by key, whatever the identity check says);
    /// `None` shows no declaration gate.
    pub driver: Option<&'a DriverDeclaration>,
    /// What an identity that holds says.
    pub identity: String,
    /// Whether a lease is explained: a driver's explanation shows no gate that reads a lease.
    pub of_lease: bool,
    /// The lease's `ConfigResolved` condition.
    pub config: Option<&'a Condition>,
}

impl Gates<'_> {
    /// Each gate of `rule` this explanation shows.
    pub fn of(&self, rule: &KeyRule) -> Vec<GateReport> {
        contract::gates(rule, self.verified, &self.declared, self.narrowing)
            .filter_map(|verdict| self.report(rule, verdict))
            .collect()
    }

    /// The gate as shown, or `None` when this explanation does not show it.
    fn report(&self, rule: &KeyRule, GateVerdict { gate, removal }: GateVerdict) -> Option<GateReport> {
        let reads_lease =
            matches!(gate, Gate::LeaseValid | Gate::Policy | Gate::JobBackend | Gate::NativeFileSync | Gate::Config);
        if reads_lease && !self.of_lease {
            return None;
        }
        let passes = removal.is_none();
        let refusals = &self.narrowing.refusals;
        let detail = match (gate, removal) {
            (Gate::LeaseValid, _) => validity(refusals.lease.as_deref()),
            // Without the provider its gates are not shown, without the driver its declaration.
            (Gate::ProviderValid, _) => self.provider.map(|_| validity(refusals.provider.as_deref()))?,
            (Gate::Worker, _) => {
                let status = self.provider?.status.as_ref();
                worker(rule, self.verified, status.and_then(|s| s.worker.as_ref()))
            }
            (Gate::Declaration, _) => declaration(rule, self.driver?),
            (Gate::Config, _) => match self.config {
                Some(c) => format!("ConfigResolved {} ({}): {}", c.status, c.reason, c.message),
                None => "the config is not resolved yet".into(),
            },
            // Status's message says all there is of these gates when they remove the capability.
            (_, Some(removal)) => removal.message,
            (Gate::Identity, None) => self.identity.clone(),
            (Gate::Policy, None) => "the lease policy is ReuseByEnvironment".into(),
            (Gate::JobBackend, None) => "the lease is not Job-backed".into(),
            (Gate::NativeFileSync, None) => "the lease does not set nativeFileSyncUnsupported".into(),
        };
        Some(GateReport::new(gate, passes, detail))
    }
}

/// An object's validity (`LeaseValid` or `ProviderValid`).
fn validity(refusal: Option<&str>) -> String {
    match refusal {
        Some(problems) => format!("today's rules refuse it: {problems}"),
        None => "today's rules admit it (or sandcap has not judged it yet)".into(),
    }
}

fn worker(rule: &KeyRule, verified: &Verified, worker: Option<&WorkerStatus>) -> String {
    if let Some(why) = verified.why_nothing() {
        return match worker {
            None => "no probe yet: the worker verified nothing".to_string(),
            Some(w) if w.probe == ProbeResult::Succeeded => format!("the worker verified nothing: {why}"),
            Some(w) => format!("the worker verified nothing: {}", probe_summary(w)),
        };
    }
    let (have, missing): (Vec<WorkerMethod>, Vec<WorkerMethod>) =
        rule.methods.iter().partition(|m| verified.has(m.as_str()));
    let (have, missing) = (WorkerMethod::list(&have), WorkerMethod::list(&missing));
    match (have.is_empty(), missing.is_empty()) {
        (_, true) => format!("the worker advertises {have}"),
        (true, false) => format!("the worker does not advertise {missing}"),
        (false, false) => format!("the worker advertises {have} but not {missing}"),
    }
}

/// `probe Failed at <time>: <message>`.
pub fn probe_summary(worker: &WorkerStatus) -> String {
    let at = worker.last_probe_time.as_ref().map(|t| format!(" at {}", t.0)).unwrap_or_default();
    format!("probe {:?}{at}: {}", worker.probe, worker.message)
}

fn declaration(rule: &KeyRule, driver: &DriverDeclaration) -> String {
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
        Some(true) => format!("declared true ({source}){kind}"),
        Some(false) => format!("declared false ({source}){kind}"),
        None if rule.opt_in => format!("not declared, and {key} is opt-in{kind}"),
        None => format!("not declared: follows the worker{kind}"),
    }
}
