//! `result.plugin` of a worker's `initialize` answer: the plugin it says it is (the manifest's
//! `id`, `version` and environment drivers, as `sandcap bridge` reports them). Read as
//! [`super::answer`] reads the rest: no tree is built of what the worker wrote, every list and map
//! is bounded while it is read, and nothing but a plugin key, version characters, driver keys and
//! capability keys is kept; errors are sandcap's own words, never the worker's.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use sandcap_core::api::{
    MAX_MANIFEST_CAPABILITIES, MAX_MANIFEST_DRIVERS, ManifestDriver, WorkerPlugin, is_capability_key, is_plugin_key,
    is_version_text,
};
use sandcap_core::vocabulary::DriverKind;

use super::error::ProbeError;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPlugin<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    environment_drivers: Option<&'a RawValue>,
}

/// `result.plugin`, given its text: `None` when it is absent or null.
pub(super) fn parse_plugin(raw: Option<&RawValue>) -> Result<Option<WorkerPlugin>, ProbeError> {
    let malformed = |what: &str| ProbeError::Malformed(format!("the answer's result.plugin{what}"));
    let Some(raw) = raw.filter(|r| r.get() != "null") else { return Ok(None) };
    let plugin: RawPlugin = serde_json::from_str(raw.get()).map_err(|_| malformed(" is not an object"))?;
    let id = plugin.id.filter(|id| is_plugin_key(id)).ok_or_else(|| malformed(".id is not a plugin key"))?;
    let version =
        plugin.version.filter(|v| is_version_text(v)).ok_or_else(|| malformed(".version is not a version"))?;
    let environment_drivers = match plugin.environment_drivers.map(RawValue::get) {
        None | Some("null") => None,
        Some(list) => Some(serde_json::from_str::<Drivers>(list).map_err(|e| Drivers::error(&e))?.0),
    };
    Ok(Some(WorkerPlugin { id: id.into_owned(), version: version.into_owned(), environment_drivers }))
}

/// `environmentDrivers`, read one driver at a time, at most [`MAX_MANIFEST_DRIVERS`].
struct Drivers(Vec<ManifestDriver>);

const TOO_MANY: &str = "too many";

impl Drivers {
    fn error(e: &serde_json::Error) -> ProbeError {
        let text = e.to_string();
        let what = if text.starts_with(TOO_MANY) {
            format!("lists more than {MAX_MANIFEST_DRIVERS} drivers")
        } else if let Some(index) = text.strip_prefix("item ").and_then(|t| t.split(' ').next()) {
            format!(
                "[{index}] is not a driver (a driverKey, a kind, boolean capabilities, at most {MAX_MANIFEST_CAPABILITIES})"
            )
        } else {
            "is not a list".into()
        };
        ProbeError::Malformed(format!(
            "the answer's result.plugin.environmentDrivers{}{what}",
            if what.starts_with('[') { "" } else { " " }
        ))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDriver<'a> {
    #[serde(borrow)]
    driver_key: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    supports_reusable_leases: Option<bool>,
    #[serde(default)]
    sandbox_capabilities: Option<Capabilities>,
}

impl<'de> Deserialize<'de> for Drivers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Drivers, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Drivers;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Drivers, A::Error> {
                let mut drivers: Vec<ManifestDriver> = Vec::new();
                for index in 0.. {
                    let not_a_driver = || de::Error::custom(format!("item {index} is not a driver"));
                    let Some(raw) = items.next_element::<RawDriver>().map_err(|_| not_a_driver())? else { break };
                    if index == MAX_MANIFEST_DRIVERS {
                        return Err(de::Error::custom(TOO_MANY));
                    }
                    let kind = match raw.kind.as_deref() {
                        None => None,
                        Some(kind) => Some(DriverKind::parse(kind).ok_or_else(not_a_driver)?),
                    };
                    if !is_plugin_key(&raw.driver_key) || drivers.iter().any(|d| d.driver_key == raw.driver_key) {
                        return Err(not_a_driver());
                    }
                    drivers.push(ManifestDriver {
                        driver_key: raw.driver_key.into_owned(),
                        kind,
                        supports_reusable_leases: raw.supports_reusable_leases,
                        sandbox_capabilities: raw.sandbox_capabilities.map(|c| c.0).unwrap_or_default(),
                    });
                }
                Ok(Drivers(drivers))
            }
        }
        deserializer.deserialize_seq(List)
    }
}

/// `sandboxCapabilities`: capability keys to booleans, at most [`MAX_MANIFEST_CAPABILITIES`].
struct Capabilities(BTreeMap<String, bool>);

impl<'de> Deserialize<'de> for Capabilities {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Capabilities, D::Error> {
        struct Map;
        impl<'de> Visitor<'de> for Map {
            type Value = Capabilities;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of booleans")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Capabilities, A::Error> {
                let mut map = BTreeMap::new();
                while let Some(key) = entries.next_key::<Cow<'de, str>>()? {
                    if map.len() == MAX_MANIFEST_CAPABILITIES || !is_capability_key(&key) {
                        return Err(de::Error::custom("not a capability"));
                    }
                    let value: bool = entries.next_value()?;
                    map.insert(key.into_owned(), value);
                }
                Ok(Capabilities(map))
            }
        }
        deserializer.deserialize_map(Map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<WorkerPlugin>, ProbeError> {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        parse_plugin(Some(&raw))
    }

    fn malformed(text: &str) -> String {
        match parse(text) {
            Err(ProbeError::Malformed(message)) => message,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_plugin_is_its_id_version_and_drivers_as_the_manifest_has_them() {
        let plugin = parse(
            r#"{"id":"acme.k8s","version":"1.4.0","apiVersion":1,"environmentDrivers":[
                {"driverKey":"k8s","kind":"sandbox_provider","displayName":"K","configSchema":{"type":"object"},
                 "supportsReusableLeases":true,"sandboxCapabilities":{"nativeSyncIn":true,"nativeSyncOut":false}}]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!((plugin.id.as_str(), plugin.version.as_str()), ("acme.k8s", "1.4.0"));
        let drivers = plugin.environment_drivers.unwrap();
        assert_eq!(drivers.len(), 1);
        assert_eq!(
            (drivers[0].kind, drivers[0].supports_reusable_leases),
            (Some(DriverKind::SandboxProvider), Some(true))
        );
        assert_eq!(
            drivers[0].sandbox_capabilities,
            BTreeMap::from([("nativeSyncIn".into(), true), ("nativeSyncOut".into(), false)])
        );
        assert_eq!(parse("null").unwrap(), None);
        assert_eq!(parse(r#"{"id":"a","version":"1.0.0"}"#).unwrap().unwrap().environment_drivers, None);
    }

    #[test]
    fn what_is_not_a_plugin_is_malformed_in_sandcaps_words() {
        assert_eq!(malformed("[1]"), "the answer's result.plugin is not an object");
        assert_eq!(
            malformed(r#"{"id":"Evil Corp\n","version":"1.0.0"}"#),
            "the answer's result.plugin.id is not a plugin key"
        );
        assert_eq!(
            malformed(r#"{"id":"a","version":"<script>"}"#),
            "the answer's result.plugin.version is not a version"
        );
        assert_eq!(
            malformed(r#"{"id":"a","version":"1.0.0","environmentDrivers":{}}"#),
            "the answer's result.plugin.environmentDrivers is not a list"
        );
        let bad_value = r#"{"id":"a","version":"1.0.0","environmentDrivers":[{"driverKey":"k","sandboxCapabilities":{"nativeSyncIn":"secret"}}]}"#;
        let message = malformed(bad_value);
        assert!(message.starts_with("the answer's result.plugin.environmentDrivers[0] is not a driver"), "{message}");
        assert!(!message.contains("secret"), "{message}");
        let twice = r#"{"id":"a","version":"1.0.0","environmentDrivers":[{"driverKey":"k"},{"driverKey":"k"}]}"#;
        assert!(malformed(twice).contains("[1] is not a driver"));
        let kind = r#"{"id":"a","version":"1.0.0","environmentDrivers":[{"driverKey":"k","kind":"other"}]}"#;
        assert!(malformed(kind).contains("[0] is not a driver"));
    }

    #[test]
    fn drivers_and_capabilities_are_bounded_while_they_are_read() {
        let driver = r#"{"driverKey":"d","configSchema":{"type":"object"}}"#;
        let many: Vec<String> = (0..65).map(|i| driver.replace("\"d\"", &format!("\"d{i}\""))).collect();
        let text = format!(r#"{{"id":"a","version":"1.0.0","environmentDrivers":[{}]}}"#, many.join(","));
        assert_eq!(malformed(&text), "the answer's result.plugin.environmentDrivers lists more than 64 drivers");
        let caps: Vec<String> = (0..17).map(|i| format!("\"k{i}\":true")).collect();
        let text = format!(
            r#"{{"id":"a","version":"1.0.0","environmentDrivers":[{{"driverKey":"d","sandboxCapabilities":{{{}}}}}]}}"#,
            caps.join(",")
        );
        assert!(malformed(&text).contains("[0] is not a driver"));
    }
}
