//! How both controllers write status: whole, by server-side apply, with conditions that keep
//! their `lastTransitionTime` while their status stays.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::Error;
use crate::vocabulary::{ConditionReason, ConditionStatus, ConditionType, FIELD_MANAGER, Kind};

/// The `kind` label of the controller metrics.
pub fn kind_label<K: Resource<DynamicType = ()>>() -> &'static str {
    Kind::from_kind(&K::kind(&())).map_or("other", Kind::as_str)
}

/// Server-side apply of a whole status with the `sandcap` field manager. The whole status is
/// always sent, so the fields sandcap owns are exactly the ones it computed.
pub async fn apply_status<K>(api: &Api<K>, name: &str, status: &impl Serialize) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map(drop)
        .map_err(|source| Error::WriteStatus { kind: kind_label::<K>(), name: name.to_string(), source })
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
