//! The host's manifest rules for what `sandcap import` takes from a manifest: `id`, `version`
//! and `environmentDrivers` as `pluginManifestV1Schema` of `@paperclipai/shared` 2026.916.1
//! judges them (its `pluginEnvironmentDriverDeclarationSchema`, strict at both levels). Used when
//! the host's own validator is not at hand (a manifest JSON file, a package without
//! `@paperclipai/shared` installed); tests/host holds the two to the same verdicts.

use sandcap_core::vocabulary::Capability;
use serde_json::{Map, Value};

/// Whether the host's `sandboxProviderCapabilitiesSchema` has `key`: it has every key of
/// sandcap's vocabulary (`v2`'s nine, the host's current contract), which is why `v2`'s keys
/// pass here and a `v1` cluster adds its own refusal.
fn is_capability_key(key: &str) -> bool {
    Capability::ALL.iter().any(|c| c.key() == key)
}

/// The driver fields of the host's schema that sandcap does not model: login, interactive setup
/// and templates, which the host runs and no capability depends on.
pub const HOST_ONLY_FIELDS: [&str; 9] = [
    "supportsInteractiveSetup",
    "interactiveSetupConnectionTypes",
    "supportsTemplateCapture",
    "templateRefKind",
    "templateConfigBinding",
    "templateIdentityPaths",
    "supportsTemplateDelete",
    "supportsLoginPty",
    "supportsSetupTokenLogin",
];

/// The manifest's problems in the host's words (`path: message`), none when the host admits
/// what the import uses.
pub fn problems(manifest: &Map<String, Value>) -> Vec<String> {
    let mut out = Problems(Vec::new());
    key(manifest.get("id"), "id", "Plugin id", &mut out);
    match manifest.get("version") {
        Some(Value::String(v)) if is_semver(v) => {}
        Some(Value::String(_)) => out.add("version", "Version must follow semver (e.g. 1.0.0 or 1.0.0-beta.1)"),
        other => out.expected("version", "string", other),
    }
    match manifest.get("environmentDrivers") {
        None => {}
        Some(Value::Array(drivers)) => {
            for (i, d) in drivers.iter().enumerate() {
                driver(d, &format!("environmentDrivers.{i}"), &mut out);
            }
            let declares = manifest.get("capabilities").and_then(Value::as_array);
            let register = Value::String("environment.drivers.register".into());
            if !drivers.is_empty() && !declares.is_some_and(|c| c.contains(&register)) {
                out.add(
                    "capabilities",
                    "Capability 'environment.drivers.register' is required when environmentDrivers are declared",
                );
            }
            let keys: Vec<&str> = drivers.iter().filter_map(|d| d.get("driverKey")?.as_str()).collect();
            let mut duplicates: Vec<&str> =
                keys.iter().enumerate().filter(|(i, k)| keys[..*i].contains(k)).map(|(_, k)| *k).collect();
            duplicates.sort_unstable();
            duplicates.dedup();
            if !duplicates.is_empty() {
                out.add("environmentDrivers", &format!("Duplicate environment driver keys: {}", duplicates.join(", ")));
            }
        }
        other => out.expected("environmentDrivers", "array", other),
    }
    out.0
}

struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, path: &str, message: &str) {
        self.0.push(format!("{path}: {message}"));
    }

    fn expected(&mut self, path: &str, what: &str, got: Option<&Value>) {
        let got = match got {
            None => "undefined",
            Some(Value::Null) => "null",
            Some(Value::Bool(_)) => "boolean",
            Some(Value::Number(_)) => "number",
            Some(Value::String(_)) => "string",
            Some(Value::Array(_)) => "array",
            Some(Value::Object(_)) => "object",
        };
        self.add(path, &format!("Invalid input: expected {what}, received {got}"));
    }
}

fn is_key(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// `^[a-z0-9][a-z0-9._-]*$`, the host's pattern for plugin ids and driver keys.
fn key(value: Option<&Value>, path: &str, what: &str, out: &mut Problems) {
    match value {
        Some(Value::String(s)) if is_key(s) => {}
        Some(Value::String(_)) => out.add(
            path,
            &format!(
                "{what} must start with a lowercase alphanumeric and contain only lowercase letters, digits, dots, \
                 hyphens, or underscores"
            ),
        ),
        other => out.expected(path, "string", other),
    }
}

/// The host's semver pattern:
/// `^\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`.
fn is_semver(v: &str) -> bool {
    let identifiers = |s: &str| {
        s.split('.').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    };
    let (rest, build) = v.split_once('+').map_or((v, None), |(a, b)| (a, Some(b)));
    let (core, pre) = rest.split_once('-').map_or((rest, None), |(a, b)| (a, Some(b)));
    let numbers: Vec<&str> = core.split('.').collect();
    numbers.len() == 3
        && numbers.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && pre.is_none_or(identifiers)
        && build.is_none_or(identifiers)
}

fn boolean(value: &Value, path: &str, out: &mut Problems) {
    if !value.is_boolean() {
        out.expected(path, "boolean", Some(value));
    }
}

/// The host's limits count a string's length as JavaScript does, in UTF-16 code units.
fn string(value: &Value, path: &str, min: usize, max: usize, out: &mut Problems) {
    let len = |s: &str| s.encode_utf16().count();
    match value {
        Value::String(s) if len(s) < min => {
            out.add(path, &format!("Too small: expected string to have >={min} characters"))
        }
        Value::String(s) if len(s) > max => {
            out.add(path, &format!("Too big: expected string to have <={max} characters"))
        }
        Value::String(_) => {}
        other => out.expected(path, "string", Some(other)),
    }
}

fn strings(value: &Value, path: &str, max_items: usize, max: usize, out: &mut Problems) {
    match value {
        Value::Array(items) => {
            if items.len() > max_items {
                out.add(path, &format!("Too big: expected array to have <={max_items} items"));
            }
            for (i, item) in items.iter().enumerate() {
                string(item, &format!("{path}.{i}"), 1, max, out);
            }
        }
        other => out.expected(path, "array", Some(other)),
    }
}

/// An object's members, or the problem of not being one.
fn object<'a>(value: &'a Value, path: &str, out: &mut Problems) -> Option<&'a Map<String, Value>> {
    let map = value.as_object();
    if map.is_none() {
        out.expected(path, "object", Some(value));
    }
    map
}

fn unknown_keys<'a>(
    keys: impl Iterator<Item = &'a String>,
    known: impl Fn(&str) -> bool,
    path: &str,
    out: &mut Problems,
) {
    let unknown: Vec<String> = keys.filter(|k| !known(k)).map(|k| format!("\"{k}\"")).collect();
    if !unknown.is_empty() {
        let s = if unknown.len() > 1 { "s" } else { "" };
        out.add(path, &format!("Unrecognized key{s}: {}", unknown.join(", ")));
    }
}

fn driver(value: &Value, path: &str, out: &mut Problems) {
    let Some(d) = object(value, path, out) else { return };
    let at = |field: &str| format!("{path}.{field}");
    key(d.get("driverKey"), &at("driverKey"), "Environment driver key", out);
    if let Some(kind) = d.get("kind")
        && !matches!(kind.as_str(), Some("environment_driver" | "sandbox_provider"))
    {
        out.add(&at("kind"), "Invalid option: expected one of \"environment_driver\"|\"sandbox_provider\"");
    }
    match d.get("displayName") {
        Some(v) => string(v, &at("displayName"), 1, 100, out),
        None => out.expected(&at("displayName"), "string", None),
    }
    if let Some(v) = d.get("description") {
        string(v, &at("description"), 0, 500, out);
    }
    for flag in [
        "supportsReusableLeases",
        "supportsInteractiveSetup",
        "supportsTemplateCapture",
        "supportsTemplateDelete",
        "supportsLoginPty",
        "supportsSetupTokenLogin",
    ] {
        if let Some(v) = d.get(flag) {
            boolean(v, &at(flag), out);
        }
    }
    if let Some(caps) = d.get("sandboxCapabilities")
        && let Some(caps) = object(caps, &at("sandboxCapabilities"), out)
    {
        unknown_keys(caps.keys(), is_capability_key, &at("sandboxCapabilities"), out);
        for (k, v) in caps.iter().filter(|(k, _)| is_capability_key(k)) {
            boolean(v, &format!("{path}.sandboxCapabilities.{k}"), out);
        }
    }
    if let Some(v) = d.get("interactiveSetupConnectionTypes") {
        strings(v, &at("interactiveSetupConnectionTypes"), 10, 100, out);
    }
    if let Some(v) = d.get("templateRefKind") {
        string(v, &at("templateRefKind"), 1, 100, out);
    }
    if let Some(v) = d.get("templateIdentityPaths") {
        strings(v, &at("templateIdentityPaths"), 20, 200, out);
    }
    if let Some(v) = d.get("templateConfigBinding") {
        template_binding(v, &at("templateConfigBinding"), out);
    }
    config_schema(d.get("configSchema"), &at("configSchema"), out);
    login_alias(d, &at("supportsLoginPty"), out);
    let known = ["driverKey", "kind", "displayName", "description", "sandboxCapabilities", "configSchema"];
    let flags = ["supportsReusableLeases"];
    let known = [&known[..], &flags, &HOST_ONLY_FIELDS].concat();
    unknown_keys(d.keys(), |k| known.contains(&k), path, out);
}

/// `configSchema`: a record that, unless empty, has a `type`, a `$ref` or a composition keyword.
fn config_schema(value: Option<&Value>, path: &str, out: &mut Problems) {
    match value {
        Some(Value::Object(schema)) => {
            let keyword = schema.get("type").is_some_and(Value::is_string)
                || ["$ref", "oneOf", "anyOf", "allOf"].iter().any(|k| schema.contains_key(*k));
            if !schema.is_empty() && !keyword {
                out.add(
                    path,
                    "Must be a valid JSON Schema object (requires at least a 'type', '$ref', or composition keyword)",
                );
            }
        }
        other => out.expected(path, "record", other),
    }
}

/// `supportsSetupTokenLogin`, the deprecated alias, may not say otherwise than `supportsLoginPty`.
fn login_alias(d: &Map<String, Value>, path: &str, out: &mut Problems) {
    let (login, alias) = (d.get("supportsLoginPty"), d.get("supportsSetupTokenLogin"));
    if let (Some(Value::Bool(a)), Some(Value::Bool(b))) = (login, alias)
        && a != b
    {
        out.add(
            path,
            "supportsSetupTokenLogin is a deprecated alias for supportsLoginPty; the two flags must not carry \
             different values",
        );
    }
}

/// `pluginEnvironmentTemplateConfigBindingSchema`: `{field, unsetFields?}`, strict, each a
/// top-level config key other than `provider`, the unset ones unique and not the set one.
fn template_binding(value: &Value, path: &str, out: &mut Problems) {
    let Some(binding) = object(value, path, out) else { return };
    let field = |value: &Value, path: &str, out: &mut Problems| {
        string(value, path, 1, 100, out);
        let Some(s) = value.as_str() else { return };
        let mut chars = s.chars();
        let shaped = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !s.is_empty() && !shaped {
            out.add(
                path,
                "Template config binding fields must be top-level config keys using letters, digits, underscores, \
                 or hyphens",
            );
        }
        if s == "provider" {
            out.add(path, "Template config binding must not replace the sandbox provider key");
        }
    };
    match binding.get("field") {
        Some(v) => field(v, &format!("{path}.field"), out),
        None => out.expected(&format!("{path}.field"), "string", None),
    }
    if let Some(unset) = binding.get("unsetFields") {
        match unset {
            Value::Array(items) => {
                if items.len() > 20 {
                    out.add(&format!("{path}.unsetFields"), "Too big: expected array to have <=20 items");
                }
                for (i, item) in items.iter().enumerate() {
                    let at = format!("{path}.unsetFields.{i}");
                    field(item, &at, out);
                    if Some(item) == binding.get("field") {
                        out.add(&at, "Template config binding cannot unset the same field it sets");
                    }
                    if items[..i].contains(item) {
                        out.add(&at, "Template config binding unsetFields must be unique");
                    }
                }
            }
            other => out.expected(&format!("{path}.unsetFields"), "array", Some(other)),
        }
    }
    unknown_keys(binding.keys(), |k| ["field", "unsetFields"].contains(&k), path, out);
}

#[cfg(test)]
mod tests;
