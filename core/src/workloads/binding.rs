//! Which binding a workload falls under, and the lease it gets.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{Selector, SelectorExt};
use serde_json::{Value, json};

use crate::api::{API_VERSION, ProviderRef, SandboxLeaseSpec, SandboxProvider, WorkloadBinding, WorkloadRef};
use crate::vocabulary::{Kind, LeasePolicy, WorkloadKind};

use super::OBSERVED_FROM_LABEL;

/// A workload as the observer knows it: its metadata, at the version the apiserver serves its kind.
#[derive(Clone, Copy, Debug)]
pub struct Workload<'a> {
    pub kind: WorkloadKind,
    /// `group/version` (or `v1` for the core group) as discovery serves the kind: what the lease's
    /// owner reference names, so that it never names a version no longer served.
    pub api_version: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// The lease a workload gets, in its namespace and under its name.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub spec: SandboxLeaseSpec,
    pub owner: OwnerReference,
}

impl Desired {
    /// The whole object, as the observer creates it.
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": Kind::SandboxLease.as_str(),
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {OBSERVED_FROM_LABEL: self.kind.row().label},
                "ownerReferences": [self.owner],
            },
            "spec": self.spec,
        })
    }
}

/// Which bindings a workload falls under.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    /// None: it gets no lease.
    Unbound,
    /// One, or several that give the same lease.
    One(Box<Desired>),
    /// Bindings that give different leases (named `<provider>/workloads[<i>]`): it gets none,
    /// since no one of them is more its own than the others.
    Ambiguous(Vec<String>),
}

/// Every provider's bindings, their selectors compiled.
pub struct Binder {
    bindings: Vec<Compiled>,
}

struct Compiled {
    provider: String,
    index: usize,
    binding: WorkloadBinding,
    selector: Selector,
}

impl Binder {
    pub fn new<'a>(providers: impl IntoIterator<Item = &'a SandboxProvider>) -> Binder {
        let mut bindings = Vec::new();
        for provider in providers {
            let Some(name) = provider.metadata.name.as_deref() else { continue };
            for (index, binding) in provider.spec.workloads.iter().enumerate() {
                // The typed selector converts (its operators are the apiserver's); one that selects
                // everything (stored before the CRD's rule) binds nothing.
                let Ok(selector) = Selector::try_from(binding.selector.label_selector()) else { continue };
                if selector.selects_all() {
                    continue;
                }
                bindings.push(Compiled { provider: name.to_string(), index, binding: binding.clone(), selector });
            }
        }
        Binder { bindings }
    }

    /// The distinct server-side selectors of each kind: one watch each.
    pub fn watches(&self) -> BTreeSet<(WorkloadKind, String)> {
        self.bindings.iter().map(|b| (b.binding.kind, b.selector.to_string())).collect()
    }

    /// The labels of a `kind` workload that binding it reads: every key its bindings' selectors
    /// name, and their `environmentLabel`s. The observer keeps no other label of a workload.
    pub fn labels_read(&self, kind: WorkloadKind) -> BTreeSet<String> {
        let mut read = BTreeSet::new();
        for binding in self.bindings.iter().filter(|b| b.binding.kind == kind).map(|b| &b.binding) {
            read.extend(binding.selector.match_labels.keys().cloned());
            read.extend(binding.selector.match_expressions.iter().map(|r| r.key.clone()));
            read.extend(binding.environment_label.iter().cloned());
        }
        read
    }

    /// Which bindings `workload` falls under.
    pub fn bind(&self, workload: &Workload) -> Bound {
        let matching: Vec<&Compiled> = self
            .bindings
            .iter()
            .filter(|b| b.binding.kind == workload.kind && b.selector.matches(workload.labels))
            .collect();
        let Some(first) = matching.first() else { return Bound::Unbound };
        let desired = lease_of(&first.provider, &first.binding, workload);
        if matching.iter().all(|b| lease_of(&b.provider, &b.binding, workload) == desired) {
            return Bound::One(Box::new(desired));
        }
        Bound::Ambiguous(matching.iter().map(|b| format!("{}/workloads[{}]", b.provider, b.index)).collect())
    }
}

/// The lease `binding` of `provider` gives `workload`: the binding's driver and policy, the
/// environment from the binding's label (a workload without it gets `Ephemeral`), the backend of
/// its kind, and the workload as its owner and `workloadRef`.
fn lease_of(provider: &str, binding: &WorkloadBinding, workload: &Workload) -> Desired {
    let environment = binding.environment_label.as_ref().and_then(|label| workload.labels.get(label));
    let (policy, environment) = match (binding.policy(), environment) {
        (LeasePolicy::ReuseByEnvironment, Some(environment)) if !environment.is_empty() => {
            (LeasePolicy::ReuseByEnvironment, Some(environment.clone()))
        }
        _ => (LeasePolicy::Ephemeral, None),
    };
    let row = workload.kind.row();
    let spec = SandboxLeaseSpec {
        provider_ref: ProviderRef {
            name: provider.to_string(),
            driver_key: binding.driver_key.clone(),
            extra: BTreeMap::new(),
        },
        policy: Some(policy),
        environment,
        backend: Some(row.backend.to_string()),
        workload_ref: Some(WorkloadRef {
            api_version: workload.api_version.to_string(),
            kind: workload.kind.as_str().to_string(),
            name: workload.name.to_string(),
            extra: BTreeMap::new(),
        }),
        ..SandboxLeaseSpec::default()
    };
    let owner = OwnerReference {
        api_version: workload.api_version.to_string(),
        kind: workload.kind.as_str().to_string(),
        name: workload.name.to_string(),
        uid: workload.uid.to_string(),
        // Not the lease's controller (sandcap is), and no right to hold the workload's deletion.
        controller: Some(false),
        block_owner_deletion: Some(false),
    };
    Desired {
        kind: workload.kind,
        namespace: workload.namespace.to_string(),
        name: workload.name.to_string(),
        spec,
        owner,
    }
}

#[cfg(test)]
#[path = "binding/tests.rs"]
mod tests;
