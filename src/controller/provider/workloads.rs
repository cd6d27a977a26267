//! A provider's `WorkloadsObserved` condition: whether the kinds its `spec.workloads` bind are
//! served, so that a kind not installed (agent-sandbox) is a state on the provider, not an error.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::controller::observe::Served;
use crate::controller::status::Conditions;
use sandcap_core::api::SandboxProvider;
use sandcap_core::vocabulary::{ConditionReason as Why, ConditionStatus, ConditionType as Type};
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, WorkloadKind};

/// The condition, for a provider that binds workloads; `None` for one that binds none.
pub fn workloads_condition(provider: &SandboxProvider, served: &Served, conditions: &Conditions) -> Option<Condition> {
    let mut kinds: Vec<WorkloadKind> = provider.spec.workloads.iter().map(|b| b.kind).collect();
    if kinds.is_empty() {
        return None;
    }
    kinds.sort();
    kinds.dedup();
    if !served.on() {
        let message = "sandcap runs with --observe-workloads=false: no workload gets an observed lease".to_string();
        return Some(conditions.set(Type::WorkloadsObserved, false, Why::ObserverOff, message));
    }
    let known = served.kinds();
    let (mut observing, mut missing, mut pending) = (Vec::new(), Vec::new(), Vec::new());
    for kind in kinds {
        let row = kind.row();
        match known.get(&kind) {
            Some(Some(version)) => observing.push(format!("{kind} ({version})")),
            Some(None) => missing.push(format!("{kind}: the apiserver serves no {}.{}", row.plural, row.group)),
            None => pending.push(kind.to_string()),
        }
    }
    let watching = format!(
        "in namespaces labelled {NAMESPACE_LABEL}={NAMESPACE_ENABLED}: observing {}",
        if observing.is_empty() { "nothing".to_string() } else { observing.join(", ") }
    );
    Some(if !missing.is_empty() {
        let message = format!("{}; {watching}", missing.join("; "));
        conditions.set(Type::WorkloadsObserved, false, Why::KindNotServed, message)
    } else if !pending.is_empty() {
        let message = format!("not yet discovered: {}; {watching}", pending.join(", "));
        conditions.set_tri(Type::WorkloadsObserved, ConditionStatus::Unknown, Why::Discovering, message)
    } else {
        conditions.set(Type::WorkloadsObserved, true, Why::Observing, watching)
    })
}
