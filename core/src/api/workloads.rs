//! `SandboxProvider.spec.workloads`: which running workloads get an observed `SandboxLease` of
//! the provider (docs/contract.md, "Observed leases"). What the observer does with a binding is
//! [`crate::workloads`]'s.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocabulary::{LeasePolicy, WorkloadKind};

use super::rules::*;

/// Most bindings one provider declares, and requirements one selector holds.
pub(super) const MAX_BINDINGS: u32 = 8;
pub(super) const MAX_REQUIREMENTS: u32 = 8;

/// Workloads of one kind, selected by their labels, that run leases of one of the provider's
/// drivers: each gets an observed SandboxLease in its namespace, kept by sandcap.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.policy) || self.policy != 'ReuseByEnvironment' || has(self.environmentLabel)",
    "message": "environmentLabel is required when policy is ReuseByEnvironment: it names the label that gives each lease its environment",
    "fieldPath": ".environmentLabel"
}]))]
pub struct WorkloadBinding {
    /// `Job` (batch/v1; its leases are Job-backed) or `Sandbox` (agents.x-k8s.io, agent-sandbox).
    #[schemars(schema_with = "workload_kind_schema")]
    pub kind: WorkloadKind,
    /// The labels that mark a workload of this provider; at least one requirement. Only
    /// namespaces labelled `sandcap.dev/workloads: enabled` are observed.
    pub selector: WorkloadSelector,
    /// The driver the workloads' leases name: one of `environmentDrivers` with kind sandbox_provider.
    #[schemars(extend("pattern" = KEY_PATTERN, "maxLength" = 253))]
    pub driver_key: String,
    /// The policy of the observed leases: `Ephemeral` (the default) or `ReuseByEnvironment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "policy_schema")]
    pub policy: Option<LeasePolicy>,
    /// The workload label whose value is the lease's `environment` (required with
    /// `ReuseByEnvironment`; a workload without it gets an `Ephemeral` lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = LABEL_KEY_PATTERN, "maxLength" = LABEL_KEY_MAX))]
    pub environment_label: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl WorkloadBinding {
    pub fn policy(&self) -> LeasePolicy {
        self.policy.unwrap_or_default()
    }
}

/// A label selector, as Kubernetes writes one, bounded: at most 16 labels and 8 requirements.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
    "message": "select workloads by at least one label: set matchLabels or matchExpressions"
}]))]
pub struct WorkloadSelector {
    /// Labels a workload must carry, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "match_labels_schema")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements a workload's labels must meet, all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = MAX_REQUIREMENTS))]
    pub match_expressions: Vec<Requirement>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl WorkloadSelector {
    /// As the apiserver reads it (a list's `labelSelector`, and its meaning).
    pub fn label_selector(&self) -> LabelSelector {
        let requirements = self.match_expressions.iter().map(|r| LabelSelectorRequirement {
            key: r.key.clone(),
            operator: r.operator.as_str().to_string(),
            values: (!r.values.is_empty()).then(|| r.values.clone()),
        });
        LabelSelector {
            match_labels: (!self.match_labels.is_empty()).then(|| self.match_labels.clone()),
            match_expressions: (!self.match_expressions.is_empty()).then(|| requirements.collect()),
        }
    }
}

/// One requirement of a selector: `In` and `NotIn` take 1 to 16 values, `Exists` and
/// `DoesNotExist` none.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = MAX_OBJECT_KEYS))]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(self.operator == 'In' || self.operator == 'NotIn') == (has(self.values) && size(self.values) > 0)",
    "message": "In and NotIn take at least one value, Exists and DoesNotExist none"
}]))]
pub struct Requirement {
    /// The label's key.
    #[schemars(extend("pattern" = LABEL_KEY_PATTERN, "maxLength" = LABEL_KEY_MAX))]
    pub key: String,
    #[schemars(schema_with = "selector_operator_schema")]
    pub operator: SelectorOperator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "label_values_schema")]
    pub values: Vec<String>,
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}

crate::vocabulary::words! {
    /// A selector requirement's operator, as Kubernetes spells it.
    #[derive(Default)]
    pub enum SelectorOperator (as_str, parse) {
        #[default]
        In = "In",
        NotIn = "NotIn",
        Exists = "Exists",
        DoesNotExist = "DoesNotExist",
    }
}
