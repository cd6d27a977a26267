//! Observed leases (docs/contract.md, "Observed leases"): which running workloads a provider's
//! `spec.workloads` binds, the `SandboxLease` each one gets, and what the observer does to bring
//! the stored leases in step. Pure: the observer (src/controller/observe/) reads the workloads'
//! metadata, the namespaces and the leases, and writes what [`step`] says.
//!
//! - [`KINDS`]: the workload kinds, one row each (another kind is another row);
//! - `binding.rs`: which binding a workload falls under, and its lease ([`Binder`], [`Desired`]);
//! - `plan.rs`: the one step that brings a stored lease to what is desired ([`step`]).

mod binding;
mod plan;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub use crate::vocabulary::WorkloadKind;
pub use binding::{Binder, Bound, Desired, Workload};
pub use plan::{KeptLease, Owner, Step, merge_patch, step};

/// The namespace label that opts a namespace's workloads in, and its one value.
pub const NAMESPACE_LABEL: &str = "sandcap.dev/workloads";
pub const NAMESPACE_ENABLED: &str = "enabled";
/// The label of an observed lease: the kind of workload it was observed from ([`KindRow::label`]).
/// The observer deletes only leases that carry it and an owner reference to a workload kind of
/// [`KINDS`]; a lease without it is never written.
pub const OBSERVED_FROM_LABEL: &str = "sandcap.dev/observed-from";
/// The field manager of the observer's writes (the lease controller's status writes are
/// [`crate::vocabulary::FIELD_MANAGER`]'s).
pub const OBSERVER_FIELD_MANAGER: &str = "sandcap-observer";
/// Namespaces never observed, whatever their labels say: the cluster's own (sandcap's own is
/// the operator's to add, see [`namespace_observed`]).
pub const NEVER_OBSERVED: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// One kind of workload: where the apiserver serves it and what a lease it runs is.
#[derive(Debug, PartialEq, Eq)]
pub struct KindRow {
    pub kind: WorkloadKind,
    pub group: &'static str,
    /// The resource's plural, as discovery lists it.
    pub plural: &'static str,
    /// The observed lease's `spec.backend`.
    pub backend: &'static str,
    /// The value of [`OBSERVED_FROM_LABEL`].
    pub label: &'static str,
}

/// Every kind a binding may name. A `Job` is Job-backed (`backend: job`, which turns native file
/// sync off); an agent-sandbox `Sandbox` is a pod with a stable identity and storage, on which
/// the provider's own sync works, so it narrows nothing (`backend: sandbox-cr`, the host's name).
/// A `SandboxClaim` (agent-sandbox's extensions) is a run served from a warm pool: the Sandbox it
/// gets keeps the pool's name and carries none of the claim's labels, so the claim is the run,
/// and its lease is named as the claim (`sandbox-cr` too).
pub const KINDS: [KindRow; 3] = [
    KindRow { kind: WorkloadKind::Job, group: "batch", plural: "jobs", backend: "job", label: "job" },
    KindRow {
        kind: WorkloadKind::Sandbox,
        group: "agents.x-k8s.io",
        plural: "sandboxes",
        backend: "sandbox-cr",
        label: "sandbox",
    },
    KindRow {
        kind: WorkloadKind::SandboxClaim,
        group: "extensions.agents.x-k8s.io",
        plural: "sandboxclaims",
        backend: "sandbox-cr",
        label: "sandboxclaim",
    },
];

/// Whether a workload with these owner references is run by another workload of [`KINDS`] (a
/// Sandbox a SandboxClaim controls): it gets no lease of its own, the run's lease being its
/// controller's.
pub fn run_by_another(owners: &[OwnerReference]) -> bool {
    owners.iter().filter(|o| o.controller == Some(true)).any(|o| {
        let group = o.api_version.rsplit_once('/').map_or("", |(group, _)| group);
        KINDS.iter().any(|row| row.group == group && row.kind.as_str() == o.kind)
    })
}

impl WorkloadKind {
    pub fn row(self) -> &'static KindRow {
        KINDS.iter().find(|row| row.kind == self).expect("every kind has a row")
    }

    /// The kind whose [`KindRow::label`] is `label`.
    pub fn labelled(label: &str) -> Option<WorkloadKind> {
        KINDS.iter().find(|row| row.label == label).map(|row| row.kind)
    }
}

/// Whether the workloads of namespace `name` (labelled `labels`) are observed: it carries
/// [`NAMESPACE_LABEL`]`: enabled` and is neither one of [`NEVER_OBSERVED`] nor `own`, the
/// operator's own namespace.
pub fn namespace_observed(name: &str, labels: &BTreeMap<String, String>, own: &str) -> bool {
    labels.get(NAMESPACE_LABEL).is_some_and(|v| v == NAMESPACE_ENABLED)
        && name != own
        && !NEVER_OBSERVED.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_row_and_labels_tell_them_apart() {
        for kind in WorkloadKind::ALL {
            assert_eq!(KINDS.iter().filter(|row| row.kind == kind).count(), 1);
            assert_eq!(WorkloadKind::labelled(kind.row().label), Some(kind));
        }
        assert_eq!(WorkloadKind::labelled("deployment"), None);
    }

    #[test]
    fn a_sandbox_a_claim_controls_is_run_by_another() {
        let owner = |api_version: &str, kind: &str, controller| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "pc-01jef".into(),
            uid: "u".into(),
            controller: Some(controller),
            ..OwnerReference::default()
        };
        assert!(run_by_another(&[owner("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim", true)]));
        assert!(
            !run_by_another(&[owner("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim", false)]),
            "not its controller"
        );
        assert!(
            !run_by_another(&[owner("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool", true)]),
            "a pool runs nothing"
        );
        assert!(!run_by_another(&[owner("evil.example/v1", "SandboxClaim", true)]), "another group's kind");
        assert!(!run_by_another(&[]));
    }

    #[test]
    fn only_opted_in_namespaces_are_observed_and_never_the_clusters_own() {
        let enabled = BTreeMap::from([(NAMESPACE_LABEL.to_string(), NAMESPACE_ENABLED.to_string())]);
        let other = BTreeMap::from([(NAMESPACE_LABEL.to_string(), "true".to_string())]);
        assert!(namespace_observed("paperclip-acme", &enabled, "sandcap-system"));
        assert!(!namespace_observed("paperclip-acme", &other, "sandcap-system"));
        assert!(!namespace_observed("paperclip-acme", &BTreeMap::new(), "sandcap-system"));
        for name in NEVER_OBSERVED.into_iter().chain(["sandcap-system"]) {
            assert!(!namespace_observed(name, &enabled, "sandcap-system"), "{name}");
        }
    }
}
