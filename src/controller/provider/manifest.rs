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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::controller::fixtures::{T0, provider, time};
    use crate::controller::provider::provider_status;
    use sandcap_core::api::{ProbeResult, SandboxProviderStatus, WorkerPlugin, WorkerStatus};
    use sandcap_core::versions::V1;

    fn worker(plugin: serde_json::Value) -> WorkerStatus {
        WorkerStatus {
            supported_methods: vec!["environmentSyncIn".into(), "environmentSyncOut".into()],
            probe: ProbeResult::Succeeded,
            message: "initialize answered ok: true with 2 supportedMethods".into(),
            plugin: Some(serde_json::from_value::<WorkerPlugin>(plugin).unwrap()),
            ..WorkerStatus::default()
        }
    }

    fn condition(status: &SandboxProviderStatus, type_: &str) -> Option<(String, String, String)> {
        let c = status.conditions.iter().find(|c| c.type_ == type_)?;
        Some((c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    #[test]
    fn a_worker_of_another_plugin_or_version_verifies_nothing_and_says_both() {
        let p = provider("p").driver("k").declares(&["nativeSyncIn"]).build();
        let status =
            provider_status(&V1, &p, worker(json!({"id": "acme.sandbox", "version": "1.2.0"})), None, &time(T0));
        let (on, reason, message) = condition(&status, "WorkerVerified").unwrap();
        assert_eq!((on.as_str(), reason.as_str()), ("False", "PluginIdentityMismatch"));
        assert_eq!(
            message,
            "the worker is plugin acme.sandbox version 1.2.0, the provider names acme.sandbox version 1.0.0, so nothing is verified"
        );
        assert!(status.drivers[0].capabilities.entries().all(|(_, on)| !on), "{:?}", status.drivers);
        assert_eq!(condition(&status, "Ready").unwrap().1, "WorkerNotVerified");
        assert_eq!(condition(&status, "DeclarationsMatchManifest"), None, "another plugin's manifest says nothing");
        let other = provider_status(&V1, &p, worker(json!({"id": "evil", "version": "1.0.0"})), None, &time(T0));
        assert_eq!(condition(&other, "WorkerVerified").unwrap().1, "PluginIdentityMismatch");
    }

    #[test]
    fn the_same_plugin_verifies_and_its_manifest_is_compared_with_the_declarations() {
        let p = provider("p").driver("k").declares(&["nativeSyncIn"]).build();
        let same = json!({"id": "acme.sandbox", "version": "1.0.0", "environmentDrivers": [
            {"driverKey": "k", "kind": "sandbox_provider", "sandboxCapabilities": {"nativeSyncIn": true}}]});
        let status = provider_status(&V1, &p, worker(same), None, &time(T0));
        assert_eq!(condition(&status, "WorkerVerified").unwrap().1, "ProbeSucceeded");
        let (on, reason, message) = condition(&status, "DeclarationsMatchManifest").unwrap();
        assert_eq!((on.as_str(), reason.as_str()), ("True", "MatchesManifest"), "{message}");
        let differs = json!({"id": "acme.sandbox", "version": "1.0.0", "environmentDrivers": [
            {"driverKey": "k", "kind": "sandbox_provider", "sandboxCapabilities": {"nativeSyncIn": false}}, {"driverKey": "gpu"}]});
        let status = provider_status(&V1, &p, worker(differs), None, &time(T0));
        let (on, reason, message) = condition(&status, "DeclarationsMatchManifest").unwrap();
        assert_eq!((on.as_str(), reason.as_str()), ("False", "DiffersFromManifest"));
        assert_eq!(
            message,
            "the declarations differ from the plugin's manifest: driver k: sandboxCapabilities.nativeSyncIn declared true, \
             the manifest false; driver gpu: in the manifest, not declared"
        );
        let silent =
            provider_status(&V1, &p, worker(json!({"id": "acme.sandbox", "version": "1.0.0"})), None, &time(T0));
        assert_eq!(condition(&silent, "DeclarationsMatchManifest"), None, "no drivers reported, no condition");
    }
}
