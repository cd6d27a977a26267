//! What `explain` shows, built from the objects as fetched: pure, so every line of reasoning is
//! tested without a cluster. The reasons are the ones status carries; [`sandcap_core::contract`] resolves
//! the same objects again, so a status that has not caught up with them is told apart. This file
//! holds what a lease's and a provider's explanations share.

use std::collections::BTreeMap;

use serde::Serialize;

use super::fix::{FixContext, fix};
use sandcap_core::api::{DriverDeclaration, Explanation};
use sandcap_core::contract::{self, KeyRule};
pub use sandcap_core::vocabulary::Gate;
use sandcap_core::vocabulary::{Capability, DriverKind, Reason};

/// One gate for one capability: whether it lets the capability through, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateReport {
    pub gate: Gate,
    pub passes: bool,
    pub detail: String,
}

impl GateReport {
    pub(super) fn new(gate: Gate, passes: bool, detail: impl Into<String>) -> GateReport {
        GateReport { gate, passes, detail: detail.into() }
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
    pub gates: Vec<GateReport>,
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
    pub(super) fn of(driver: &DriverDeclaration) -> DeclarationReport {
        let nested = driver.sandbox_capabilities.clone().unwrap_or_default();
        DeclarationReport {
            driver_key: driver.driver_key.clone(),
            kind: driver.kind,
            sandbox_capabilities: Capability::ALL
                .into_iter()
                .filter_map(|c| nested.get(c).map(|v| (c.key().to_string(), v)))
                .collect(),
            supports_reusable_leases: driver.supports_reusable_leases,
            legacy_decides: nested.get(Capability::ReusableLeases).is_none()
                && driver.supports_reusable_leases.is_some(),
        }
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

pub(super) fn capability(
    rule: &KeyRule,
    status: Option<&[Explanation]>,
    now: &contract::Resolution,
    gates: Vec<GateReport>,
    context: &FixContext,
) -> CapabilityReport {
    let cap = rule.capability;
    let reason_now = now.explanations.iter().find(|e| e.capability == cap).map_or(Reason::Granted, |e| e.reason);
    let said = status.and_then(|s| s.iter().find(|e| e.capability == cap));
    CapabilityReport {
        capability: cap,
        granted: said.map(|e| e.granted),
        reason: said.map(|e| e.reason),
        message: said.map(|e| e.message.clone()),
        reason_now,
        gates,
        fix: fix(rule, reason_now, context),
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

/// What to say of a status: none yet, behind the object's generation, or (when current) other
/// reasons than the objects give as they are now.
pub(super) fn status_notes(
    observed: Option<Option<i64>>,
    generation: Option<i64>,
    what: &str,
    capabilities: &[CapabilityReport],
) -> Vec<String> {
    match observed {
        None => vec![NOT_RESOLVED.to_string()],
        Some(observed) if observed < generation => vec![format!(
            "status is for generation {}, the {what} is at generation {}: sandcap has not resolved its latest change yet",
            observed.unwrap_or_default(),
            generation.unwrap_or_default()
        )],
        Some(_) => disagreement(capabilities).into_iter().collect(),
    }
}

const NOT_RESOLVED: &str =
    "sandcap has not resolved it yet (no status): is a controller running? kubectl sandcap check";
