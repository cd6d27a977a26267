//! Whether a provider's drivers are declared as the plugin's manifest has them (the drivers the
//! worker reported, `status.worker.plugin.environmentDrivers`): the condition
//! `DeclarationsMatchManifest` (docs/contract.md, "The plugin is the one named").

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::api::{DriverDeclaration, ManifestDriver};
use crate::text;
use crate::vocabulary::DriverKind;

/// The most differences a message lists; the rest are counted.
pub const MAX_LISTED_DIFFERENCES: usize = 16;

/// One way the declarations differ from the manifest.
#[derive(Clone, Debug, PartialEq)]
pub enum Difference {
    /// A driver the provider declares and the manifest does not have.
    OnlyDeclared(String),
    /// A driver of the manifest the provider does not declare.
    OnlyInManifest(String),
    /// A driver of both whose `kind` differs.
    Kind { driver: String, declared: Option<DriverKind>, manifest: Option<DriverKind> },
    /// A driver of both with a capability field that differs: a key of `sandboxCapabilities`, or
    /// `supportsReusableLeases`; `None` where it is not set.
    Field { driver: String, field: String, declared: Option<Value>, manifest: Option<bool> },
}

/// Every way `declared` differs from `manifest`, drivers in the provider's order, then the
/// manifest's drivers it lacks.
pub fn differences(declared: &[DriverDeclaration], manifest: &[ManifestDriver]) -> Vec<Difference> {
    let mut found = Vec::new();
    for driver in declared {
        let Some(theirs) = manifest.iter().find(|m| m.driver_key == driver.driver_key) else {
            found.push(Difference::OnlyDeclared(driver.driver_key.clone()));
            continue;
        };
        let name = || driver.driver_key.clone();
        if driver.kind != theirs.kind {
            found.push(Difference::Kind { driver: name(), declared: driver.kind, manifest: theirs.kind });
        }
        if driver.supports_reusable_leases != theirs.supports_reusable_leases {
            let (field, declared) =
                ("supportsReusableLeases".to_string(), driver.supports_reusable_leases.map(Value::Bool));
            found.push(Difference::Field {
                driver: name(),
                field,
                declared,
                manifest: theirs.supports_reusable_leases,
            });
        }
        let ours = driver.sandbox_capabilities.as_ref().map(|c| &c.0);
        let keys: BTreeSet<&String> =
            ours.into_iter().flat_map(|c| c.keys()).chain(theirs.sandbox_capabilities.keys()).collect();
        for key in keys {
            let (declared, manifest) = (ours.and_then(|c| c.get(key)), theirs.sandbox_capabilities.get(key));
            if declared.map(Value::as_bool) != manifest.map(|m| Some(*m)) {
                let field = format!("sandboxCapabilities.{key}");
                found.push(Difference::Field {
                    driver: name(),
                    field,
                    declared: declared.cloned(),
                    manifest: manifest.copied(),
                });
            }
        }
    }
    for theirs in manifest {
        if !declared.iter().any(|d| d.driver_key == theirs.driver_key) {
            found.push(Difference::OnlyInManifest(theirs.driver_key.clone()));
        }
    }
    found
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn kind(k: &Option<DriverKind>) -> &'static str {
            k.map_or("(not set)", |k| k.as_str())
        }
        match self {
            Difference::OnlyDeclared(driver) => write!(f, "driver {driver}: declared, not in the manifest"),
            Difference::OnlyInManifest(driver) => write!(f, "driver {driver}: in the manifest, not declared"),
            Difference::Kind { driver, declared, manifest } => {
                write!(f, "driver {driver}: kind declared {}, the manifest {}", kind(declared), kind(manifest))
            }
            Difference::Field { driver, field, declared, manifest } => {
                let declared = declared.as_ref().map_or_else(|| "(not set)".into(), |v| text::clip(&v.to_string(), 32));
                let manifest = manifest.map_or_else(|| "(not set)".into(), |m| m.to_string());
                write!(f, "driver {driver}: {field} declared {declared}, the manifest {manifest}")
            }
        }
    }
}

/// The message of `DeclarationsMatchManifest` False: the first [`MAX_LISTED_DIFFERENCES`]
/// differences, the rest counted, the whole cut to `max` bytes.
pub fn differences_message(found: &[Difference], max: usize) -> String {
    let listed: Vec<String> = found.iter().take(MAX_LISTED_DIFFERENCES).map(ToString::to_string).collect();
    let more = found.len().saturating_sub(MAX_LISTED_DIFFERENCES);
    let more = if more > 0 { format!("; and {more} more differences") } else { String::new() };
    text::clip(&format!("the declarations differ from the plugin's manifest: {}{more}", listed.join("; ")), max)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn declared(value: Value) -> DriverDeclaration {
        serde_json::from_value(value).unwrap()
    }

    fn manifest(value: Value) -> ManifestDriver {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_same_declarations_differ_in_nothing() {
        let ours = [declared(json!({"driverKey": "k8s", "kind": "sandbox_provider", "displayName": "K",
            "sandboxCapabilities": {"nativeSyncIn": true}}))];
        let theirs = [manifest(
            json!({"driverKey": "k8s", "kind": "sandbox_provider", "sandboxCapabilities": {"nativeSyncIn": true}}),
        )];
        assert_eq!(differences(&ours, &theirs), vec![]);
    }

    #[test]
    fn each_driver_kind_and_capability_that_differs_is_named_with_both_values() {
        let ours = [
            declared(json!({"driverKey": "k8s", "kind": "sandbox_provider", "supportsReusableLeases": true,
                "sandboxCapabilities": {"nativeSyncIn": true, "nativeSyncOut": null}})),
            declared(json!({"driverKey": "typo"})),
        ];
        let theirs = [
            manifest(
                json!({"driverKey": "k8s", "kind": "environment_driver", "sandboxCapabilities": {"nativeSyncIn": false, "reusableLeases": true}}),
            ),
            manifest(json!({"driverKey": "gpu"})),
        ];
        let found: Vec<String> = differences(&ours, &theirs).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "driver k8s: kind declared sandbox_provider, the manifest environment_driver",
                "driver k8s: supportsReusableLeases declared true, the manifest (not set)",
                "driver k8s: sandboxCapabilities.nativeSyncIn declared true, the manifest false",
                "driver k8s: sandboxCapabilities.nativeSyncOut declared null, the manifest (not set)",
                "driver k8s: sandboxCapabilities.reusableLeases declared (not set), the manifest true",
                "driver typo: declared, not in the manifest",
                "driver gpu: in the manifest, not declared",
            ]
        );
    }

    #[test]
    fn the_message_lists_sixteen_and_counts_the_rest_within_its_bound() {
        let theirs: Vec<ManifestDriver> = (0..40)
            .map(|i| ManifestDriver {
                driver_key: format!("d{i}"),
                sandbox_capabilities: BTreeMap::new(),
                ..Default::default()
            })
            .collect();
        let found = differences(&[], &theirs);
        let message = differences_message(&found, 4096);
        assert!(message.ends_with("; and 24 more differences"), "{message}");
        assert!(differences_message(&found, 100).len() <= 100);
    }
}
