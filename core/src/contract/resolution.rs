//! The resolution: `effective = verified ∩ declared ∩ narrowing`, each capability explained by the
//! first gate (gates.rs) that removes it, at provider level and at lease level.

use std::collections::BTreeMap;

use serde::Serialize;

use super::config::FailedConfig;
use super::gates::{Removal, gates};
use super::identity::{IdentityFailure, driver_kind_failure};
use super::lease::JobBackend;
use super::verified::Verified;
use crate::api::{Capabilities, DriverDeclaration, Explanation};
use crate::versions::{Contract, KeyRule};
use crate::vocabulary::{Capability, LeasePolicy, Reason, WorkerMethod};

/// A driver's declaration as the host reads it: per key of the contract `Some(bool)` or omitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Declared([Option<bool>; Capability::ALL.len()]);

impl Declared {
    /// The contract's keys only (another version's are never read), with the legacy
    /// `supportsReusableLeases` folded in when the nested key is absent.
    pub fn from_driver(contract: &Contract, driver: &DriverDeclaration) -> Self {
        let mut declared = Declared::default();
        if let Some(nested) = &driver.sandbox_capabilities {
            for cap in contract.capabilities() {
                declared.0[cap as usize] = nested.get(cap);
            }
        }
        if declared.get(Capability::ReusableLeases).is_none() {
            declared.0[Capability::ReusableLeases as usize] = driver.supports_reusable_leases;
        }
        declared
    }

    pub fn get(&self, cap: Capability) -> Option<bool> {
        self.0[cap as usize]
    }

    /// Whether the declaration allows the key (before the worker is asked).
    pub fn allows(&self, rule: &KeyRule) -> bool {
        self.get(rule.capability).unwrap_or(!rule.opt_in)
    }

    /// The present keys, as `status.drivers[].declared` shows them.
    pub fn present(&self) -> BTreeMap<String, bool> {
        Capability::ALL.into_iter().filter_map(|c| self.get(c).map(|v| (c.key().to_string(), v))).collect()
    }
}

/// What today's rules (the CRD's and the webhook's, [`crate::judge`]) refuse of the objects a
/// resolution reads: each refused object's problems, as its `Valid` condition states them. A
/// refused object grants nothing (docs/contract.md, "Fail closed"); the caller judges, this module
/// only obeys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    pub lease: Option<String>,
    pub provider: Option<String>,
}

/// How much of a refusal's problems each explanation repeats: the `Valid` condition has them all.
pub const MAX_REFUSAL_IN_EXPLANATION: usize = 1024;

impl Refusals {
    /// The refusal of a provider alone (provider-level resolution, or a lease that today's rules admit).
    pub fn provider(problems: Option<String>) -> Refusals {
        Refusals { lease: None, provider: problems }
    }
}

/// Everything about one lease that can only remove capabilities. Each failure's `Display` is the
/// message the explanation shows (never a secret value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narrowing {
    pub refusals: Refusals,
    pub identity_failure: Option<IdentityFailure>,
    /// The lease's requested policy; `None` at provider level (nothing narrowed).
    pub policy: Option<LeasePolicy>,
    pub job_backend: Option<JobBackend>,
    pub native_file_sync_unsupported: bool,
    pub config_failure: Option<FailedConfig>,
}

impl Narrowing {
    /// A provider-level resolution's: nothing of a lease, only whether the driver is read as a
    /// sandbox provider and the provider's refusal (`refused`, its problems).
    pub fn of_driver(driver: &DriverDeclaration, refused: Option<&str>) -> Narrowing {
        Narrowing {
            refusals: Refusals::provider(refused.map(str::to_string)),
            identity_failure: driver_kind_failure(driver),
            ..Narrowing::default()
        }
    }
}

/// One driver's resolved capabilities with an explanation for each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    pub capabilities: Capabilities,
    pub explanations: Vec<Explanation>,
}

impl Resolution {
    pub fn is_granted(&self, cap: Capability) -> bool {
        self.capabilities.get(cap)
    }
}

/// Resolves every key of `contract` through its gates.
pub fn resolve(contract: &Contract, verified: &Verified, declared: &Declared, narrowing: &Narrowing) -> Resolution {
    let mut capabilities = Capabilities::default();
    let explanations = contract
        .keys
        .iter()
        .map(|rule| {
            let removal = gates(rule, verified, declared, narrowing).find_map(|g| g.removal);
            let granted = removal.is_none();
            let Removal { reason, message } =
                removal.unwrap_or_else(|| Removal { reason: Reason::Granted, message: why_granted(rule, declared) });
            capabilities.set(rule.capability, granted);
            Explanation { capability: rule.capability, granted, reason, message }
        })
        .collect();
    Resolution { capabilities, explanations }
}

/// Why a key that every gate lets through is granted.
fn why_granted(rule: &KeyRule, declared: &Declared) -> String {
    let methods = WorkerMethod::list(rule.methods);
    if declared.get(rule.capability) == Some(true) {
        format!("declared true and the worker verified {methods}")
    } else {
        format!("the driver defers to the worker, which verified {methods}")
    }
}

/// Provider-level resolution of one driver under `contract`: verified ∩ declared. A driver that is not
/// `kind: sandbox_provider` is never read as a sandbox provider, and a provider that today's
/// rules refuse (`refused`, its problems) is not trusted: either way nothing is granted.
pub fn resolve_driver(
    contract: &Contract,
    verified: &Verified,
    driver: &DriverDeclaration,
    refused: Option<&str>,
) -> Resolution {
    resolve(contract, verified, &Declared::from_driver(contract, driver), &Narrowing::of_driver(driver, refused))
}

/// The policy a lease actually gets: reuse exactly when its resolution grants reusableLeases
/// (which the lease's own policy already narrows). Over a provider-level resolution: the best
/// policy any lease of that driver could get.
pub fn effective_policy(resolution: &Resolution) -> LeasePolicy {
    if resolution.is_granted(Capability::ReusableLeases) {
        LeasePolicy::ReuseByEnvironment
    } else {
        LeasePolicy::Ephemeral
    }
}
