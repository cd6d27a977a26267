//! Declaration validation (API.md sections 2 and 5): every admission rule, as one pure function
//! over the raw JSON object. The webhook and `sandcap validate` both call [`review`], so they can
//! never disagree. It works on `serde_json::Value` rather than the typed CRDs so that every problem
//! (a wrong type, an unknown key, a typo) is reported at once with its Kubernetes field path,
//! instead of stopping at the first serde error.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::value::SeqAccessDeserializer;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::api::{API_VERSION, DRIVER_KINDS, SANDBOX_PROVIDER_KIND};
use crate::contract::{Capability, REMOVED_KEYS, compile_schema};

/// Kubernetes refuses admission warnings longer than this, so ours stay below it.
pub const MAX_WARNING_LEN: usize = 120;

/// Operator settings that change what is admitted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    pub allow_worker_urls: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    SandboxProvider,
    SandboxLease,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SandboxProvider => "SandboxProvider",
            Kind::SandboxLease => "SandboxLease",
        }
    }

    pub fn from_kind(kind: &str) -> Option<Kind> {
        match kind {
            "SandboxProvider" => Some(Kind::SandboxProvider),
            "SandboxLease" => Some(Kind::SandboxLease),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem: `<field path>: <problem>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The answer for one object: allowed when there are no problems.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub problems: Vec<Problem>,
    pub warnings: Vec<String>,
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        self.problems.is_empty()
    }

    /// The denial message of API.md section 5: one `<path>: <problem>` per problem, joined by `; `.
    pub fn message(&self) -> String {
        self.problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    }
}

/// Starts the warning for a problem that the stored object already has (see [`review`]).
pub const ALREADY_STORED: &str = "already stored, not blocking this update: ";

/// Reviews an object of either kind. An object that is not a sandcap resource is denied with a
/// problem at `apiVersion`/`kind`.
///
/// On UPDATE `old` is the stored object, and the review ratchets, as the apiserver ratchets CRD
/// validation: a problem that `old` has too (the same problem at the same path, found by the same
/// rules) was admitted under other rules or settings, and refusing it now would block every
/// update of the object, a label included, until someone fixes it. It becomes a warning starting
/// with [`ALREADY_STORED`]; only problems this update brings in deny it. Immutable fields are
/// checked against `old` only, so changing one is always denied.
pub fn review(object: &Value, old: Option<&Value>, options: &Options) -> Verdict {
    let mut verdict = check(object, old, options);
    // Without a problem there is nothing to ratchet, and the stored object need not be reviewed.
    if let Some(old) = old.filter(|_| !verdict.allowed()) {
        let stored = check(old, None, options).problems;
        let (kept, introduced): (Vec<Problem>, _) = verdict.problems.into_iter().partition(|p| stored.contains(p));
        verdict.problems = introduced;
        verdict.warnings.extend(kept.iter().map(|p| truncate_warning(format!("{ALREADY_STORED}{p}"))));
    }
    verdict
}

fn check(object: &Value, old: Option<&Value>, options: &Options) -> Verdict {
    let mut c = Checker::default();
    let Some(root) = object.as_object() else {
        c.problem("object", "must be a JSON object");
        return c.finish();
    };
    match field(root, "apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(Value::String(v)) => {
            c.problem("apiVersion", format!("unsupported apiVersion {v:?}, expected {API_VERSION:?}"))
        }
        _ => c.problem("apiVersion", format!("required: {API_VERSION:?}")),
    }
    c.metadata(root);
    match field(root, "kind").and_then(Value::as_str).and_then(Kind::from_kind) {
        Some(Kind::SandboxProvider) => c.provider(root, old, options),
        Some(Kind::SandboxLease) => c.lease(root, old),
        None => c.problem("kind", "must be SandboxProvider or SandboxLease"),
    }
    c.finish()
}

/// The object's kind and name for reporting (`<kind>/<name>`), whatever shape it has.
pub fn identify(object: &Value) -> (String, String) {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("(no kind)").to_string();
    let metadata = object.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .or_else(|| metadata.and_then(|m| m.get("generateName")))
        .and_then(Value::as_str)
        .unwrap_or("(no name)")
        .to_string();
    (kind, name)
}

/// What [`review`] and [`identify`] read of an object, and on UPDATE of the stored object too
/// (ratcheting reviews it by the same rules). The webhook builds only these parts: the rest
/// (`status`, `metadata.managedFields`, the last-applied annotation) is often most of the bytes,
/// and reviewing the parts gives the verdict of reviewing the whole (a property test in
/// tests/properties.rs and the fuzz target hold the two to that).
pub const REVIEWED: Shape = Shape::Keys(&[
    ("apiVersion", Shape::Whole),
    ("kind", Shape::Whole),
    ("metadata", Shape::Keys(&[("name", Shape::Whole), ("generateName", Shape::Whole)])),
    ("spec", Shape::Whole),
]);

/// Which parts of a JSON document to build into a [`Value`]: all of it, or some keys of an object,
/// each with its own shape. Other keys are checked for syntax and skipped without allocating. A
/// value that is not an object where the shape names keys is built whole, so the rules still see
/// (and name) its real type.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    Whole,
    Keys(&'static [(&'static str, Shape)]),
}

impl Shape {
    /// Decodes one JSON document. Errors are serde_json's, including its nesting limit of 128
    /// levels in the parts built (skipped parts are scanned without recursion).
    pub fn decode(self, json: &str) -> serde_json::Result<Value> {
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let value = self.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(value)
    }
}

impl<'de> DeserializeSeed<'de> for Shape {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Shape::Whole => Value::deserialize(deserializer),
            Shape::Keys(keys) => deserializer.deserialize_any(KeysVisitor(keys)),
        }
    }
}

struct KeysVisitor(&'static [(&'static str, Shape)]);

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut built = Map::new();
        while let Some(Key(key)) = map.next_key()? {
            match self.0.iter().find(|(name, _)| *name == key) {
                // Inserting keeps the last of duplicate keys, as serde_json's own Value does.
                Some((_, shape)) => drop(built.insert(key.into_owned(), map.next_value_seed(*shape)?)),
                None => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(Value::Object(built))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// An object key, borrowed from the input unless it had escapes: skipped keys cost no allocation.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

const PROVIDER_SPEC_FIELDS: &[&str] = &["pluginKey", "version", "worker", "environmentDrivers"];
const WORKER_FIELDS: &[&str] = &["service", "url"];
const SERVICE_FIELDS: &[&str] = &["namespace", "name", "port", "path"];
const DRIVER_FIELDS: &[&str] = &[
    "driverKey",
    "kind",
    "displayName",
    "description",
    "configSchema",
    "supportsReusableLeases",
    "sandboxCapabilities",
];
const LEASE_SPEC_FIELDS: &[&str] = &[
    "providerRef",
    "policy",
    "environment",
    "backend",
    "workloadRef",
    "nativeFileSyncUnsupported",
    "config",
    "configFrom",
];
const PROVIDER_REF_FIELDS: &[&str] = &["name", "driverKey"];
const WORKLOAD_REF_FIELDS: &[&str] = &["apiVersion", "kind", "name"];
const CONFIG_SOURCE_FIELDS: &[&str] = &["secretKeyRef"];
const SECRET_KEY_REF_FIELDS: &[&str] = &["name", "key"];
const POLICIES: &[&str] = &["Ephemeral", "ReuseByEnvironment"];

#[derive(Default)]
struct Checker {
    verdict: Verdict,
}

impl Checker {
    fn finish(self) -> Verdict {
        self.verdict
    }

    /// Paths arrive as `Display` (often `format_args!`) and are written out only here: a review
    /// that finds nothing formats no path at all.
    fn problem(&mut self, path: impl fmt::Display, message: impl Into<String>) {
        self.verdict.problems.push(Problem { path: path.to_string(), message: message.into() });
    }

    fn warn(&mut self, warning: String) {
        self.verdict.warnings.push(truncate_warning(warning));
    }

    /// `spec` must be an object; returns it for field checks.
    fn spec<'v>(&mut self, root: &'v Map<String, Value>) -> Option<&'v Map<String, Value>> {
        match field(root, "spec") {
            None => {
                self.problem("spec", "required");
                None
            }
            Some(v) => self.object(v, "spec"),
        }
    }

    fn object<'v>(&mut self, value: &'v Value, path: impl fmt::Display) -> Option<&'v Map<String, Value>> {
        let map = value.as_object();
        if map.is_none() {
            self.problem(path, format!("must be an object, got {}", type_name(value)));
        }
        map
    }

    /// Rejects keys not in `allowed`; the CRD keeps such keys (it does not prune them) exactly so
    /// that a typo is refused here rather than silently dropped.
    fn known_fields(&mut self, map: &Map<String, Value>, path: &str, allowed: &[&str]) {
        for key in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
            let hint = if Capability::from_key(key).is_some() || REMOVED_KEYS.contains(&key.as_str()) {
                format!(" (capability keys belong under {path}.sandboxCapabilities)")
            } else {
                String::new()
            };
            self.problem(
                format_args!("{path}.{key}"),
                format!("unknown field (allowed fields: {}){hint}", allowed.join(", ")),
            );
        }
    }

    fn required<'v>(&mut self, map: &'v Map<String, Value>, path: &str, key: &str) -> Option<&'v Value> {
        let v = field(map, key);
        if v.is_none() {
            self.problem(format_args!("{path}.{key}"), "required");
        }
        v
    }

    fn string<'v>(&mut self, value: &'v Value, path: impl fmt::Display) -> Option<&'v str> {
        let s = value.as_str();
        if s.is_none() {
            self.problem(path, format!("must be a string, got {}", type_name(value)));
        }
        s
    }

    fn boolean(&mut self, value: &Value, path: impl fmt::Display) -> Option<bool> {
        let b = value.as_bool();
        if b.is_none() {
            self.problem(path, format!("must be a boolean (true or false), got {}", type_name(value)));
        }
        b
    }

    fn required_string<'v>(&mut self, map: &'v Map<String, Value>, path: &str, key: &str) -> Option<&'v str> {
        let v = self.required(map, path, key)?;
        self.string(v, format_args!("{path}.{key}"))
    }

    fn optional_string<'v>(&mut self, map: &'v Map<String, Value>, path: &str, key: &str) -> Option<&'v str> {
        let v = field(map, key)?;
        self.string(v, format_args!("{path}.{key}"))
    }

    fn key_pattern(&mut self, value: &str, path: impl fmt::Display) {
        if !is_key(value) {
            self.problem(path, format!("{value:?} must match ^[a-z0-9][a-z0-9._-]*$ (at most 253 characters)"));
        }
    }

    fn dns_label(&mut self, value: &str, path: impl fmt::Display) {
        if !is_dns_label(value) {
            self.problem(
                path,
                format!("{value:?} is not a valid DNS-1123 label (lowercase alphanumerics and '-', at most 63)"),
            );
        }
    }

    fn dns_subdomain(&mut self, value: &str, path: impl fmt::Display) {
        if !is_dns_subdomain(value) {
            self.problem(path, format!("{value:?} is not a valid resource name (DNS-1123 subdomain)"));
        }
    }

    fn immutable(&mut self, new: Option<&Value>, old: Option<&Value>, path: &str, instead: &str) {
        if let (Some(new), Some(old)) = (new, old)
            && new != old
        {
            self.problem(path, format!("field is immutable (was {}): {instead}", compact(old)));
        }
    }

    /// The apiserver checks names itself; `sandcap validate` repeats it so the offline verdict
    /// matches what `kubectl apply` would say.
    fn metadata(&mut self, root: &Map<String, Value>) {
        let Some(meta) = field(root, "metadata").and_then(|m| self.object(m, "metadata")) else {
            self.problem("metadata.name", "required");
            return;
        };
        if let Some(name) = self.required_string(meta, "metadata", "name") {
            self.dns_subdomain(name, "metadata.name");
        }
    }

    // ---- SandboxProvider --------------------------------------------------------------------

    fn provider(&mut self, root: &Map<String, Value>, old: Option<&Value>, options: &Options) {
        let Some(spec) = self.spec(root) else { return };
        self.known_fields(spec, "spec", PROVIDER_SPEC_FIELDS);
        if let Some(key) = self.required_string(spec, "spec", "pluginKey") {
            self.key_pattern(key, "spec.pluginKey");
        }
        if let Some(version) = self.required_string(spec, "spec", "version")
            && let Err(e) = semver::Version::parse(version)
        {
            self.problem("spec.version", format!("{version:?} is not a semantic version (e.g. 1.4.0): {e}"));
        }
        if let Some(worker) = self.required(spec, "spec", "worker") {
            self.worker(worker, options);
        }
        if let Some(drivers) = self.required(spec, "spec", "environmentDrivers") {
            self.drivers(drivers);
        }
        self.immutable(
            field(spec, "pluginKey"),
            old.and_then(|o| o.pointer("/spec/pluginKey")),
            "spec.pluginKey",
            "to register another plugin, create a new SandboxProvider",
        );
    }

    fn worker(&mut self, worker: &Value, options: &Options) {
        let Some(w) = self.object(worker, "spec.worker") else {
            return;
        };
        self.known_fields(w, "spec.worker", WORKER_FIELDS);
        match (field(w, "service"), field(w, "url")) {
            (Some(_), Some(_)) => self.problem("spec.worker", "set exactly one of service or url, not both"),
            (None, None) => self.problem("spec.worker", "set exactly one of service or url"),
            (Some(service), None) => self.service(service),
            (None, Some(url)) => {
                if let Some(url) = self.string(url, "spec.worker.url") {
                    self.worker_url(url, options);
                }
            }
        }
    }

    fn service(&mut self, service: &Value) {
        let path = "spec.worker.service";
        let Some(s) = self.object(service, path) else {
            return;
        };
        self.known_fields(s, path, SERVICE_FIELDS);
        if let Some(ns) = self.required_string(s, path, "namespace") {
            self.dns_label(ns, "spec.worker.service.namespace");
        }
        if let Some(name) = self.required_string(s, path, "name") {
            self.dns_label(name, "spec.worker.service.name");
        }
        if let Some(port) = self.required(s, path, "port") {
            match port.as_i64() {
                Some(1..=65535) => {}
                _ => self.problem(
                    "spec.worker.service.port",
                    format!("must be an integer from 1 to 65535, got {}", compact(port)),
                ),
            }
        }
        if let Some(p) = self.optional_string(s, path, "path")
            && !p.starts_with('/')
        {
            self.problem("spec.worker.service.path", format!("{p:?} must start with /"));
        }
    }

    fn worker_url(&mut self, url: &str, options: &Options) {
        if !options.allow_worker_urls {
            self.problem(
                "spec.worker.url",
                "worker URLs are refused because the operator runs without --allow-worker-urls: use spec.worker.service instead",
            );
            return;
        }
        match url.parse::<http::Uri>() {
            Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {}
            _ => self.problem("spec.worker.url", format!("{url:?} must be an absolute http:// or https:// URL")),
        }
    }

    fn drivers(&mut self, drivers: &Value) {
        let Some(list) = drivers.as_array() else {
            self.problem("spec.environmentDrivers", format!("must be a list, got {}", type_name(drivers)));
            return;
        };
        if list.is_empty() {
            self.problem("spec.environmentDrivers", "must declare at least one driver");
        }
        let mut seen: Vec<(&str, usize)> = Vec::new();
        for (i, driver) in list.iter().enumerate() {
            let path = format!("spec.environmentDrivers[{i}]");
            let Some(key) = self.driver(driver, &path) else {
                continue;
            };
            match seen.iter().find(|(k, _)| *k == key) {
                Some((_, first)) => self.problem(
                    format_args!("{path}.driverKey"),
                    format!("duplicate driverKey {key:?} (first declared at spec.environmentDrivers[{first}])"),
                ),
                None => seen.push((key, i)),
            }
        }
    }

    /// Checks one driver entry; returns its driverKey when it is a string.
    fn driver<'v>(&mut self, driver: &'v Value, path: &str) -> Option<&'v str> {
        let d = self.object(driver, path)?;
        self.known_fields(d, path, DRIVER_FIELDS);
        let key = self.required_string(d, path, "driverKey");
        if let Some(key) = key {
            self.key_pattern(key, format_args!("{path}.driverKey"));
        }
        let kind = self.optional_string(d, path, "kind");
        if let Some(kind) = kind
            && !DRIVER_KINDS.contains(&kind)
        {
            self.problem(
                format_args!("{path}.kind"),
                format!("{kind:?} is not a driver kind: use sandbox_provider or environment_driver (or omit it)"),
            );
        }
        if let Some(name) = self.optional_string(d, path, "displayName") {
            let n = name.chars().count();
            if !(1..=100).contains(&n) {
                self.problem(format_args!("{path}.displayName"), format!("must be 1 to 100 characters, got {n}"));
            }
        }
        if let Some(description) = self.optional_string(d, path, "description") {
            let n = description.chars().count();
            if n > 500 {
                self.problem(format_args!("{path}.description"), format!("must be at most 500 characters, got {n}"));
            }
        }
        if let Some(schema) = field(d, "configSchema") {
            self.config_schema(schema, format_args!("{path}.configSchema"));
        }
        let legacy = field(d, "supportsReusableLeases")
            .and_then(|v| self.boolean(v, format_args!("{path}.supportsReusableLeases")));
        if let Some(caps) = field(d, "sandboxCapabilities") {
            self.capabilities(caps, path, legacy, kind == Some(SANDBOX_PROVIDER_KIND));
        }
        key
    }

    fn config_schema(&mut self, schema: &Value, path: impl fmt::Display) {
        if !schema.is_object() {
            self.problem(path, format!("must be a JSON Schema object, got {}", type_name(schema)));
        } else if let Err(e) = compile_schema(schema) {
            self.problem(path, format!("is not a valid JSON Schema: {e}"));
        }
    }

    fn capabilities(&mut self, caps: &Value, driver_path: &str, legacy: Option<bool>, is_sandbox_provider: bool) {
        let path = format_args!("{driver_path}.sandboxCapabilities");
        let Some(map) = self.object(caps, path) else {
            return;
        };
        let mut declared = [None; 6];
        for (key, value) in map.iter().filter(|(_, v)| !v.is_null()) {
            let at = format_args!("{path}.{key}");
            match Capability::from_key(key) {
                Some(cap) => declared[cap as usize] = self.boolean(value, at),
                None if REMOVED_KEYS.contains(&key.as_str()) => self.problem(
                    at,
                    "unknown capability key: it was removed from the contract (concurrency is no longer declared), delete it",
                ),
                None => self.problem(
                    at,
                    format!(
                        "unknown capability key (the keys are {})",
                        Capability::ALL.map(Capability::key).join(", ")
                    ),
                ),
            }
        }
        let nested_reuse = declared[Capability::ReusableLeases as usize];
        if let (Some(legacy), Some(nested)) = (legacy, nested_reuse) {
            self.warn(format!(
                "{driver_path}: supportsReusableLeases={legacy} and sandboxCapabilities.reusableLeases={nested}; nested wins"
            ));
        }
        let (sync_in, sync_out) =
            (declared[Capability::NativeSyncIn as usize], declared[Capability::NativeSyncOut as usize]);
        if sync_in != sync_out {
            self.warn(format!(
                "{driver_path}: nativeSyncIn and nativeSyncOut differ; the worker verifies them only as a pair"
            ));
        }
        if !is_sandbox_provider {
            self.warn(format!("{driver_path}: sandboxCapabilities is never read unless kind is sandbox_provider"));
        }
    }

    // ---- SandboxLease -----------------------------------------------------------------------

    fn lease(&mut self, root: &Map<String, Value>, old: Option<&Value>) {
        let Some(spec) = self.spec(root) else { return };
        self.known_fields(spec, "spec", LEASE_SPEC_FIELDS);
        if let Some(r) = self.required(spec, "spec", "providerRef")
            && let Some(r) = self.object(r, "spec.providerRef")
        {
            self.known_fields(r, "spec.providerRef", PROVIDER_REF_FIELDS);
            if let Some(name) = self.required_string(r, "spec.providerRef", "name") {
                self.dns_subdomain(name, "spec.providerRef.name");
            }
            if let Some(key) = self.required_string(r, "spec.providerRef", "driverKey") {
                self.key_pattern(key, "spec.providerRef.driverKey");
            }
        }
        let policy = self.optional_string(spec, "spec", "policy");
        if let Some(p) = policy
            && !POLICIES.contains(&p)
        {
            self.problem("spec.policy", format!("{p:?} is not a policy: use Ephemeral or ReuseByEnvironment"));
        }
        let environment = self.optional_string(spec, "spec", "environment");
        if policy == Some("ReuseByEnvironment") && environment.is_none_or(str::is_empty) {
            self.problem("spec.environment", "required when policy is ReuseByEnvironment");
        }
        self.optional_string(spec, "spec", "backend");
        if let Some(w) = field(spec, "workloadRef")
            && let Some(w) = self.object(w, "spec.workloadRef")
        {
            self.known_fields(w, "spec.workloadRef", WORKLOAD_REF_FIELDS);
            for key in WORKLOAD_REF_FIELDS {
                self.required_string(w, "spec.workloadRef", key);
            }
        }
        if let Some(v) = field(spec, "nativeFileSyncUnsupported") {
            self.boolean(v, "spec.nativeFileSyncUnsupported");
        }
        if let Some(config) = field(spec, "config") {
            self.object(config, "spec.config");
        }
        if let Some(sources) = field(spec, "configFrom") {
            self.config_from(sources);
        }
        self.immutable(
            field(spec, "providerRef"),
            old.and_then(|o| o.pointer("/spec/providerRef")),
            "spec.providerRef",
            "to use another provider or driver, create a new SandboxLease",
        );
    }

    fn config_from(&mut self, sources: &Value) {
        let Some(list) = sources.as_array() else {
            self.problem("spec.configFrom", format!("must be a list, got {}", type_name(sources)));
            return;
        };
        for (i, source) in list.iter().enumerate() {
            let path = format!("spec.configFrom[{i}]");
            let Some(s) = self.object(source, &path) else {
                continue;
            };
            self.known_fields(s, &path, CONFIG_SOURCE_FIELDS);
            let Some(r) = self.required(s, &path, "secretKeyRef") else {
                continue;
            };
            let path = format!("{path}.secretKeyRef");
            let Some(r) = self.object(r, &path) else {
                continue;
            };
            self.known_fields(r, &path, SECRET_KEY_REF_FIELDS);
            if let Some(name) = self.required_string(r, &path, "name") {
                self.dns_subdomain(name, format_args!("{path}.name"));
            }
            if let Some(key) = self.required_string(r, &path, "key")
                && !is_secret_key(key)
            {
                self.problem(
                    format_args!("{path}.key"),
                    format!("{key:?} is not a valid Secret key ([-._a-zA-Z0-9]+)"),
                );
            }
        }
    }
}

/// The apiserver drops warnings of 120 characters or more; a longer one keeps its start (which
/// names the field) and ends in an ellipsis, cut on a character boundary. Applied where warnings
/// are made, so the webhook and `sandcap validate` give the same text.
pub fn truncate_warning(warning: String) -> String {
    const ELLIPSIS: &str = "...";
    // Bytes bound characters from above, so counting bytes keeps every client's count in range.
    if warning.len() < MAX_WARNING_LEN {
        return warning;
    }
    format!("{}{ELLIPSIS}", prefix(&warning, MAX_WARNING_LEN - 1 - ELLIPSIS.len()))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A field's value; `null` counts as absent, as the CRD schema (nullable) lets it through.
fn field<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    map.get(key).filter(|v| !v.is_null())
}

pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A short rendering of a value for messages (never used for Secret data).
fn compact(value: &Value) -> String {
    let s = value.to_string();
    if s.chars().count() > 80 { format!("{}...", s.chars().take(77).collect::<String>()) } else { s }
}

/// `^[a-z0-9][a-z0-9._-]*$`, at most 253 characters.
fn is_key(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 253
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
}

/// RFC 1123 label, as Service names and namespaces are.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_secret_key(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_cut_below_the_limit_on_a_char_boundary() {
        let short = "x".repeat(MAX_WARNING_LEN - 1);
        assert_eq!(truncate_warning(short.clone()), short);
        for filler in ["y", "é", "😀"] {
            let long = filler.repeat(200);
            let cut = truncate_warning(long);
            assert!(cut.len() < MAX_WARNING_LEN, "{} bytes", cut.len());
            assert!(cut.ends_with("..."));
        }
    }
}
