//! What both controllers build their statuses from: conditions that keep their
//! `lastTransitionTime` while their status stays, and the time to the second (the write is
//! [`super::publish`]'s).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use sandcap_core::vocabulary::{ConditionReason, ConditionStatus, ConditionType, Kind};

/// The `kind` label of the controller metrics.
pub fn kind_label<K: Resource<DynamicType = ()>>() -> &'static str {
    Kind::from_kind(&K::kind(&())).map_or("other", Kind::as_str)
}

/// Now, to the second: what the apiserver stores, so a status read back compares equal.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Builds one status's metav1.Conditions: each keeps its `lastTransitionTime` while its status
/// stays the same, so an unchanged condition compares equal and is not rewritten.
pub struct Conditions<'a> {
    pub generation: Option<i64>,
    pub previous: &'a [Condition],
    pub now: &'a Time,
}

impl Conditions<'_> {
    pub fn set(&self, type_: ConditionType, met: bool, reason: ConditionReason, message: String) -> Condition {
        self.set_tri(type_, ConditionStatus::met(met), reason, message)
    }

    pub fn set_tri(
        &self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: ConditionReason,
        message: String,
    ) -> Condition {
        let type_ = type_.as_str();
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && status.is(&c.status))
            .map_or_else(|| self.now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status: status.as_str().into(),
            reason: reason.to_string(),
            message,
            observed_generation: self.generation,
            last_transition_time,
        }
    }
}
