//! A provider's `DeclarationsMatchManifest` condition: whether its drivers are declared as the
//! plugin's manifest has them, the manifest being what the worker reported
//! (`status.worker.plugin.environmentDrivers`; docs/contract.md, "The plugin is the one named").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::MAX_CONDITION_MESSAGE;
use crate::controller::status::Conditions;
use sandcap_core::api::{SandboxProvider, WorkerStatus};
use sandcap_core::contract::{differences, differences_message};
use sandcap_core::vocabulary::{ConditionReason as Why, ConditionType as Type};

/// The condition, when the worker reported its manifest's drivers and is the plugin the provider
/// names; `None` otherwise (a worker that does not report them, or another plugin, whose
/// manifest says nothing of this one).
pub fn declarations_condition(
    provider: &SandboxProvider,
    worker: &WorkerStatus,
    other_plugin: bool,
    conditions: &Conditions,
) -> Option<Condition> {
    if other_plugin {
        return None;
    }
    let plugin = worker.plugin.as_ref()?;
    let manifest = plugin.environment_drivers.as_ref()?;
    let declared = &provider.spec.environment_drivers;
    let found = differences(declared, manifest);
    if found.is_empty() {
        let message = format!(
            "the {} drivers are declared as the manifest of {} {} has them",
            declared.len(),
            plugin.id,
            plugin.version
        );
        return Some(conditions.set(Type::DeclarationsMatchManifest, true, Why::MatchesManifest, message));
    }
    let message = differences_message(&found, MAX_CONDITION_MESSAGE);
    Some(conditions.set(Type::DeclarationsMatchManifest, false, Why::DiffersFromManifest, message))
}
