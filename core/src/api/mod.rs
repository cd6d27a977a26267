//! The custom resources: `SandboxProvider` and `SandboxLease` (group `sandcap.dev`, `v1alpha1`).
//!
//! These types are what the controller reads and writes, and their schema attributes are the
//! admission rules the apiserver enforces (the CRD layer of docs/contract.md, "Resources and who
//! enforces what": patterns, lengths, enums, required fields, CEL rules), written once here and
//! carried by the generated CRDs. The types are deliberately tolerant: unknown keys are kept in
//! `extra` maps rather than failing deserialization, so one bad object never stops a watch stream;
//! the webhook rejects them ([`crate::validation`]) and `sandcap validate` evaluates the CRD itself
//! ([`crate::schema`]).

mod capabilities;
mod crd;
mod lease;
mod manifest;
mod provider;
mod rules;
mod status_patch;
mod workloads;

pub use crate::vocabulary::LeasePolicy;
pub use capabilities::{Capabilities, DeclaredCapabilities};
pub use crd::{crd, crd_schema};
pub use lease::*;
pub use manifest::*;
pub use provider::*;
pub use rules::{CONFIG_TOO_LARGE, MAX_CONFIG_BYTES, exceeds_config_bound, is_dns_label, is_dns_subdomain};
pub use status_patch::StatusPatch;
pub use workloads::*;

pub const GROUP: &str = "sandcap.dev";
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as objects of both kinds carry it (a unit test keeps the three in step).
pub const API_VERSION: &str = "sandcap.dev/v1alpha1";

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    #[test]
    fn the_api_version_constant_is_the_crds_own() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
        assert_eq!(API_VERSION, SandboxProvider::api_version(&()));
        assert_eq!(API_VERSION, SandboxLease::api_version(&()));
    }

    #[test]
    fn dns_names_follow_rfc_1123() {
        for ok in ["a", "0", "sandbox-system", "a1-b2", &"x".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", "é", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        for ok in ["a", "acme-kubernetes", "a.b-c.d", &vec!["x".repeat(63); 4].join(".")[..253]] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "a.-b", "A.b", "a b", &"x.".repeat(127)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        assert!(!is_dns_subdomain(&"x".repeat(254)));
    }
}
