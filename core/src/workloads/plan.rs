//! The one step that brings a stored lease to what is desired of its name.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Map, Value, json};

use crate::api::SandboxLeaseSpec;

use super::{Desired, OBSERVED_FROM_LABEL, WorkloadKind};

/// An owner reference as the observer reads it from a stored lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub uid: String,
}

/// What is stored under a name an observed lease has or would have.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptLease {
    pub spec: SandboxLeaseSpec,
    /// The value of [`OBSERVED_FROM_LABEL`], if it carries one.
    pub observed_from: Option<String>,
    pub owners: Vec<Owner>,
    pub resource_version: Option<String>,
}

impl KeptLease {
    /// The kind it was observed from, if the observer made it: it carries the label and an owner
    /// reference to a workload of that kind. Anything else is never written.
    pub fn observed(&self) -> Option<WorkloadKind> {
        let kind = WorkloadKind::labelled(self.observed_from.as_deref()?)?;
        let row = kind.row();
        let owned = self.owners.iter().any(|o| o.kind == row.kind.as_str() && group_of(&o.api_version) == row.group);
        owned.then_some(kind)
    }

    fn owner_uid(&self, kind: WorkloadKind) -> Option<&str> {
        self.owners.iter().find(|o| o.kind == kind.as_str()).map(|o| o.uid.as_str())
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// What the observer does about one name.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Nothing,
    Create,
    /// Bring the stored lease's labels, owner and spec to the desired ones ([`Desired::patch`]).
    Update,
    /// Delete the stored lease: the desired one is created once it is gone (it belongs to an
    /// earlier workload of the name, or names another provider or driver, which is immutable).
    Replace,
    Delete,
    /// A lease the observer did not make has the name: it is reported, never written.
    Taken,
}

/// The step from `kept` (what is stored under the name) to `desired` (what the name should hold).
pub fn step(desired: Option<&Desired>, kept: Option<&KeptLease>) -> Step {
    match (desired, kept) {
        (None, None) => Step::Nothing,
        (Some(_), None) => Step::Create,
        (None, Some(kept)) => {
            if kept.observed().is_some() {
                Step::Delete
            } else {
                Step::Nothing
            }
        }
        (Some(desired), Some(kept)) => {
            let Some(kind) = kept.observed() else { return Step::Taken };
            if kind != desired.kind
                || kept.owner_uid(kind) != Some(desired.owner.uid.as_str())
                || kept.spec.provider_ref != desired.spec.provider_ref
            {
                return Step::Replace;
            }
            let owner = Owner {
                api_version: desired.owner.api_version.clone(),
                kind: desired.owner.kind.clone(),
                uid: desired.owner.uid.clone(),
            };
            if kept.spec == desired.spec && kept.owners == [owner] { Step::Nothing } else { Step::Update }
        }
    }
}

impl Desired {
    /// The JSON merge patch of [`Step::Update`]: the label, the one owner reference and the spec,
    /// every key of the stored spec that is not desired deleted, under the stored
    /// resourceVersion (a write that crossed another is refused, and done again from the newer).
    pub fn patch(&self, kept: &KeptLease) -> Value {
        let stored = serde_json::to_value(&kept.spec).unwrap_or(Value::Null);
        let desired = serde_json::to_value(&self.spec).unwrap_or(Value::Null);
        json!({
            "metadata": {
                "resourceVersion": kept.resource_version,
                "labels": {OBSERVED_FROM_LABEL: self.kind.row().label},
                "ownerReferences": [owner_value(&self.owner)],
            },
            "spec": merge_patch(&stored, &desired),
        })
    }
}

fn owner_value(owner: &OwnerReference) -> Value {
    serde_json::to_value(owner).unwrap_or(Value::Null)
}

/// The JSON merge patch (RFC 7386) that turns `from` into `to`: what `to` has differently, and
/// `null` for what only `from` has.
pub fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = Map::new();
            for (key, old) in from {
                match to.get(key) {
                    None => {
                        patch.insert(key.clone(), Value::Null);
                    }
                    Some(new) if new != old => {
                        patch.insert(key.clone(), merge_patch(old, new));
                    }
                    Some(_) => {}
                }
            }
            for (key, new) in to.iter().filter(|(key, _)| !from.contains_key(*key)) {
                patch.insert(key.clone(), new.clone());
            }
            Value::Object(patch)
        }
        _ => to.clone(),
    }
}

#[cfg(test)]
#[path = "plan/tests.rs"]
mod tests;
