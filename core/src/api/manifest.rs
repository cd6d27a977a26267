//! What a worker says of the plugin it is (`result.plugin` of its `initialize` answer, as
//! `sandcap bridge` answers for a plugin package): the manifest's `id`, `version` and environment
//! drivers. Kept in `status.worker.plugin`, bounded like the rest of what a worker wrote.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::vocabulary::DriverKind;

/// The most characters of a reported plugin id (the length `spec.pluginKey` may have).
pub const MAX_PLUGIN_ID: usize = 253;
/// The most characters of a reported plugin version (the length `spec.version` may have).
pub const MAX_PLUGIN_VERSION: usize = 128;
/// The most drivers a worker may report (as many as a provider may declare).
pub const MAX_MANIFEST_DRIVERS: usize = 64;
/// The most capability keys of one reported driver (as many as a declaration may have).
pub const MAX_MANIFEST_CAPABILITIES: usize = 16;
/// The most characters of one reported capability key.
pub const MAX_CAPABILITY_KEY: usize = 64;

/// The plugin a worker says it is.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPlugin {
    /// The manifest's `id` (a plugin key: lowercase letters, digits, '.', '_' and '-').
    #[schemars(extend("maxLength" = MAX_PLUGIN_ID))]
    pub id: String,
    /// The manifest's `version`.
    #[schemars(extend("maxLength" = MAX_PLUGIN_VERSION))]
    pub version: String,
    /// The manifest's environment drivers, as far as sandcap compares them with the provider's
    /// (condition `DeclarationsMatchManifest`), when the worker reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxItems" = MAX_MANIFEST_DRIVERS))]
    pub environment_drivers: Option<Vec<ManifestDriver>>,
}

/// One driver of the manifest: what of it the declarations are compared on.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestDriver {
    #[schemars(extend("maxLength" = MAX_PLUGIN_ID))]
    pub driver_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DriverKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_reusable_leases: Option<bool>,
    /// The manifest's `sandboxCapabilities`, every key as the manifest has it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_MANIFEST_CAPABILITIES))]
    pub sandbox_capabilities: BTreeMap<String, bool>,
}

/// Whether `id` is a plugin key (`^[a-z0-9][a-z0-9._-]*$`, at most [`MAX_PLUGIN_ID`]): what the
/// host's manifest validator and the CRD's `pluginKey` both require.
pub fn is_plugin_key(id: &str) -> bool {
    let mut chars = id.chars();
    id.len() <= MAX_PLUGIN_ID
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// Whether `version` is written in a semantic version's characters (digits, letters, '.', '-',
/// '+'; at most [`MAX_PLUGIN_VERSION`]): nothing else of a reported version is ever repeated.
pub fn is_version_text(version: &str) -> bool {
    !version.is_empty()
        && version.len() <= MAX_PLUGIN_VERSION
        && version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
}

/// Whether `key` may name a reported capability (ASCII letters and digits, at most
/// [`MAX_CAPABILITY_KEY`]).
pub fn is_capability_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_CAPABILITY_KEY && key.chars().all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plugin_keys_and_version_characters_are_kept() {
        for ok in ["acme.kubernetes", "0a", "a_b-c.d", &"x".repeat(253)] {
            assert!(is_plugin_key(ok), "{ok}");
        }
        for bad in ["", "Acme", "-a", "a b", "a/b", "@acme/x", "é", &"x".repeat(254)] {
            assert!(!is_plugin_key(bad), "{bad}");
        }
        for ok in ["1.4.0", "1.0.0-beta.1+build.5"] {
            assert!(is_version_text(ok), "{ok}");
        }
        for bad in ["", "1.0 ", "1.0\n", "v1;rm", &"1".repeat(129)] {
            assert!(!is_version_text(bad), "{bad}");
        }
        assert!(is_capability_key("nativeSyncIn") && !is_capability_key("native-sync") && !is_capability_key(""));
    }
}
