//! One table-driven test per rule of docs/contract.md, "Capabilities" (and the reason order of
//! "Status"), for every key of every contract version: the tests resolve under v2, whose keys are
//! v1's six with the same rules (properties.rs checks that the six resolve alike in both)
//! and three more.

#[path = "../support/mod.rs"]
mod support;

mod config;
mod gates;
mod lease;
mod provider;

use sandcap_core::api::{DriverDeclaration, SandboxLease, SandboxProvider};
use sandcap_core::contract::{
    self, Capability, Declared, LeaseResolution, Narrowing, Reason, Refusals, Resolution, SecretLookup, Verified,
};
use sandcap_core::versions::V2;
use support::*;

fn reason(r: &contract::Resolution, cap: Capability) -> Reason {
    r.explanations.iter().find(|e| e.capability == cap).expect("every capability is explained").reason
}

fn message(r: &contract::Resolution, cap: Capability) -> String {
    r.explanations.iter().find(|e| e.capability == cap).unwrap().message.clone()
}

fn resolve(verified: &Verified, declared: &Declared, narrowing: &Narrowing) -> Resolution {
    contract::resolve(&V2, verified, declared, narrowing)
}

fn resolve_driver(verified: &Verified, driver: &DriverDeclaration, refused: Option<&str>) -> Resolution {
    contract::resolve_driver(&V2, verified, driver, refused)
}

fn resolve_lease(
    lease: &SandboxLease,
    provider: Option<&SandboxProvider>,
    verified: &Verified,
    refusals: &Refusals,
    secret: impl Fn(&sandcap_core::api::SecretKeyRef) -> SecretLookup,
) -> LeaseResolution {
    contract::resolve_lease(&V2, lease, provider, verified, refusals, secret)
}

fn declared(driver: &DriverDeclaration) -> Declared {
    Declared::from_driver(&V2, driver)
}

fn full_driver() -> sandcap_core::api::DriverDeclaration {
    let mut d = driver("kubernetes");
    d.sandbox_capabilities = Some(all_declared_true());
    d
}

fn acme() -> sandcap_core::api::SandboxProvider {
    provider("acme-kubernetes", "uid-1", vec![full_driver()])
}
