//! The capability contract: `effective = verified ∩ declared ∩ narrowing` (docs/contract.md,
//! "Capabilities").
//!
//! Pure functions only. The webhook, the controllers and `sandcap resolve` all call these, so there
//! is exactly one place where a capability is granted or removed. By concern: what the worker
//! verified (`verified.rs`) and, for a Service worker, what its endpoints agree on
//! (`endpoints.rs`), the gates in their order (`gates.rs`, which `explain` walks too), the
//! resolution by the first gate that removes a key (`resolution.rs`), a lease's plugin identity
//! (`identity.rs`, also a worker's: the plugin it says it is) and config (`config.rs`), one lease
//! resolved from all of them (`lease.rs`), and how a provider's declarations differ from the
//! plugin's manifest (`manifest.rs`).

mod config;
mod endpoints;
mod gates;
mod identity;
mod lease;
mod manifest;
mod resolution;
mod verified;

pub use crate::versions::{Contract, ContractVersion, KeyRule, NarrowedBy};
pub use crate::vocabulary::{Capability, LeasePolicy, Reason, WorkerMethod};
pub use config::{ConfigFailure, FailedConfig, SecretLookup, resolve_config};
pub use endpoints::{Agreement, EndpointAnswer, EndpointProbe, agree};
pub use gates::{GateVerdict, Removal, gates};
pub use identity::{IdentityFailure, OtherPlugin, check_identity, check_worker_plugin, driver_kind_failure, pin_for};
pub use lease::{JobBackend, LeaseResolution, job_backend, resolve_lease};
pub use manifest::{Difference, MAX_LISTED_DIFFERENCES, differences, differences_message};
pub use resolution::{
    Declared, MAX_REFUSAL_IN_EXPLANATION, Narrowing, Refusals, Resolution, effective_policy, resolve, resolve_driver,
};
pub use verified::{Unverified, Verified, verified_from_status, verified_from_worker};
