//! A lease's exact-plugin identity: the pin it takes, and why it fails against the provider as it
//! is now (or a driver that is no sandbox provider at all); and a worker's, the plugin it says it
//! is against the one its provider names.

use crate::api::{
    DriverDeclaration, MAX_PLUGIN_ID, MAX_PLUGIN_VERSION, Pinned, ResolvableLease, SandboxProvider,
    SandboxProviderSpec, WorkerPlugin, is_plugin_key, is_version_text,
};
use crate::text;
use crate::vocabulary::ConditionReason;

/// Why a driver's capabilities are never read, if they are not: it is not `kind: sandbox_provider`.
pub fn driver_kind_failure(driver: &DriverDeclaration) -> Option<IdentityFailure> {
    (!driver.is_sandbox_provider()).then(|| IdentityFailure::NotSandboxProvider {
        driver: driver.driver_key.clone(),
        kind: driver.kind.map_or_else(|| "(omitted)".into(), |k| k.to_string()),
    })
}

/// Why a lease's exact-plugin identity check failed. The message is the condition's; the variant
/// names the `PluginIdentity` condition's reason ([`IdentityFailure::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityFailure {
    #[error("provider {name} does not exist (yet); the lease is not pinned")]
    ProviderNotFound { name: String },
    #[error("pinned provider {name} (uid {uid}) no longer exists")]
    PinnedProviderGone { name: String, uid: String },
    #[error("provider {name} was re-created: pinned uid {pinned}, found uid {found}")]
    ProviderRecreated { name: String, pinned: String, found: String },
    #[error("provider {name} now has pluginKey {found}, pinned {pinned}")]
    PluginKeyChanged { name: String, pinned: String, found: String },
    #[error("lease pinned driver {pinned} but now asks for {wanted}")]
    DriverChanged { pinned: String, wanted: String },
    #[error("provider {name} does not declare driver {driver}")]
    DriverNotDeclared { name: String, driver: String },
    #[error("driver {driver} is declared with kind {kind}, not sandbox_provider; its capabilities are never read")]
    NotSandboxProvider { driver: String, kind: String },
}

impl IdentityFailure {
    /// The reason of the `PluginIdentity` condition: the variant's name.
    pub fn reason(&self) -> ConditionReason {
        match self {
            IdentityFailure::ProviderNotFound { .. } => ConditionReason::ProviderNotFound,
            IdentityFailure::PinnedProviderGone { .. } => ConditionReason::PinnedProviderGone,
            IdentityFailure::ProviderRecreated { .. } => ConditionReason::ProviderRecreated,
            IdentityFailure::PluginKeyChanged { .. } => ConditionReason::PluginKeyChanged,
            IdentityFailure::DriverChanged { .. } => ConditionReason::DriverChanged,
            IdentityFailure::DriverNotDeclared { .. } => ConditionReason::DriverNotDeclared,
            IdentityFailure::NotSandboxProvider { .. } => ConditionReason::NotSandboxProvider,
        }
    }
}

/// The identity a lease pins on its first resolution.
pub fn pin_for(provider: &SandboxProvider, driver_key: &str) -> Option<Pinned> {
    Some(Pinned {
        provider_uid: provider.metadata.uid.clone()?,
        plugin_key: provider.spec.plugin_key.clone(),
        driver_key: driver_key.to_string(),
    })
}

/// Checks the exact-plugin identity of a lease against the provider as it is now.
/// Returns the driver on success, or the reason every capability must be off.
pub fn check_identity<'p>(
    lease: &impl ResolvableLease,
    provider: Option<&'p SandboxProvider>,
) -> Result<&'p DriverDeclaration, IdentityFailure> {
    let wanted = &lease.spec().provider_ref;
    let name = || wanted.name.clone();
    let pinned = lease.pinned();
    let Some(provider) = provider else {
        return Err(match pinned {
            Some(p) => IdentityFailure::PinnedProviderGone { name: name(), uid: p.provider_uid.clone() },
            None => IdentityFailure::ProviderNotFound { name: name() },
        });
    };
    if let Some(p) = pinned {
        let uid = provider.metadata.uid.as_deref().unwrap_or("");
        if p.provider_uid != uid {
            let found = if uid.is_empty() { "(none)" } else { uid }.to_string();
            return Err(IdentityFailure::ProviderRecreated { name: name(), pinned: p.provider_uid.clone(), found });
        }
        if p.plugin_key != provider.spec.plugin_key {
            let (pinned, found) = (p.plugin_key.clone(), provider.spec.plugin_key.clone());
            return Err(IdentityFailure::PluginKeyChanged { name: name(), pinned, found });
        }
        if p.driver_key != wanted.driver_key {
            let (pinned, wanted) = (p.driver_key.clone(), wanted.driver_key.clone());
            return Err(IdentityFailure::DriverChanged { pinned, wanted });
        }
    }
    let Some(driver) = provider.spec.environment_drivers.iter().find(|d| d.driver_key == wanted.driver_key) else {
        return Err(IdentityFailure::DriverNotDeclared { name: name(), driver: wanted.driver_key.clone() });
    };
    driver_kind_failure(driver).map_or(Ok(driver), Err)
}

/// A worker that says it is another plugin, or another version of it, than the provider names.
/// Both sides are plugin keys and version characters (the probe keeps nothing else of what a
/// worker reports), each bounded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the worker is plugin {id} version {version}, the provider names {named_id} version {named_version}")]
pub struct OtherPlugin {
    pub id: String,
    pub version: String,
    pub named_id: String,
    pub named_version: String,
}

/// Whether the plugin a worker reported is the one `spec` names: the same `id` as
/// `spec.pluginKey` and the same `version` as `spec.version`, exactly.
pub fn check_worker_plugin(spec: &SandboxProviderSpec, plugin: &WorkerPlugin) -> Result<(), OtherPlugin> {
    if plugin.id == spec.plugin_key && plugin.version == spec.version {
        return Ok(());
    }
    Err(OtherPlugin {
        id: plugin.id.clone(),
        version: plugin.version.clone(),
        named_id: shown(&spec.plugin_key, is_plugin_key(&spec.plugin_key), MAX_PLUGIN_ID),
        named_version: shown(&spec.version, is_version_text(&spec.version), MAX_PLUGIN_VERSION),
    })
}

/// A spec's own value as a message shows it: as it is when it reads as what it should be (the CRD
/// holds both fields to that), else JSON-quoted, each cut to `max`.
fn shown(value: &str, plain: bool, max: usize) -> String {
    if plain { value.to_string() } else { serde_json::to_string(&text::clip(value, max)).unwrap_or_default() }
}
