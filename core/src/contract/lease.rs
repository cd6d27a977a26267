//! One lease resolved against its provider: identity, config, narrowing, then the gates.

use super::config::{ConfigFailure, FailedConfig, SecretLookup, resolve_config};
use super::identity::{IdentityFailure, check_identity, pin_for};
use super::resolution::{Declared, Narrowing, Refusals, Resolution, effective_policy, resolve};
use super::verified::Verified;
use crate::api::{Pinned, ResolvableLease, SandboxProvider, SecretKeyRef};
use crate::versions::{Contract, ContractVersion};
use crate::vocabulary::LeasePolicy;

/// Which field makes a lease Job-backed; the message is the `NarrowedByJobBackend` explanation's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobBackend {
    /// `spec.backend`, as written.
    #[error("the lease is Job-backed (spec.backend: {0:?})")]
    Backend(String),
    /// `spec.workloadRef`, a batch/v1 Job: its name.
    #[error("the lease is Job-backed (spec.workloadRef is batch/v1 Job {0})")]
    WorkloadRef(String),
}

/// Why a lease is Job-backed, if it is. The CRD admits `backend` only in lowercase; a stored
/// lease from before that rule is Job-backed in any case and with any surrounding space (and
/// grants nothing anyway, as today's rules refuse it).
pub fn job_backend(lease: &impl ResolvableLease) -> Option<JobBackend> {
    if let Some(backend) = lease.spec().backend.as_deref().filter(|b| b.trim().eq_ignore_ascii_case("job")) {
        return Some(JobBackend::Backend(backend.to_string()));
    }
    lease.spec().workload_ref.as_ref().filter(|w| w.is_batch_job()).map(|w| JobBackend::WorkloadRef(w.name.clone()))
}

/// Everything the lease controller and `sandcap resolve --lease` decide for one lease.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseResolution {
    pub driver_key: String,
    pub effective_policy: LeasePolicy,
    pub resolution: Resolution,
    /// The contract version it was resolved under.
    pub contract: ContractVersion,
    /// Set when the identity check passed and the lease had not been pinned yet.
    pub pin: Option<Pinned>,
    pub identity: Result<(), IdentityFailure>,
    /// `None` when config was not resolved because the identity check failed.
    pub config: Option<Result<(), ConfigFailure>>,
}

/// Resolves a lease under `contract` against its provider (if it exists), the provider's verified methods and
/// what today's rules refuse of the two.
pub fn resolve_lease(
    contract: &Contract,
    lease: &impl ResolvableLease,
    provider: Option<&SandboxProvider>,
    verified: &Verified,
    refusals: &Refusals,
    secret: impl Fn(&SecretKeyRef) -> SecretLookup,
) -> LeaseResolution {
    let driver_key = lease.spec().provider_ref.driver_key.clone();
    let driver = match check_identity(lease, provider) {
        Ok(driver) => driver,
        Err(why) => {
            let narrowing =
                Narrowing { refusals: refusals.clone(), identity_failure: Some(why.clone()), ..Narrowing::default() };
            return LeaseResolution {
                driver_key,
                effective_policy: LeasePolicy::Ephemeral,
                resolution: resolve(contract, verified, &Declared::default(), &narrowing),
                contract: contract.version,
                pin: None,
                identity: Err(why),
                config: None,
            };
        }
    };
    let provider = provider.expect("the identity check passed, so the provider exists");
    let config = resolve_config(lease, driver, secret).map(|_| ());
    let narrowing = Narrowing {
        refusals: refusals.clone(),
        identity_failure: None,
        policy: Some(lease.spec().policy()),
        job_backend: job_backend(lease),
        native_file_sync_unsupported: lease.spec().native_file_sync_unsupported.unwrap_or(false),
        config_failure: config.clone().err().map(FailedConfig::Resolved),
    };
    let resolution = resolve(contract, verified, &Declared::from_driver(contract, driver), &narrowing);
    let already_pinned = lease.pinned().is_some();
    LeaseResolution {
        driver_key,
        effective_policy: effective_policy(&resolution),
        resolution,
        contract: contract.version,
        pin: if already_pinned { None } else { pin_for(provider, &lease.spec().provider_ref.driver_key) },
        identity: Ok(()),
        config: Some(config),
    }
}
