//! The webhook's rules (docs/contract.md, "Resources and who enforces what": the webhook layer):
//! only what the apiserver cannot check from the CRD — `configSchema` compiles, worker URLs without
//! `--allow-worker-urls` or to refused addresses, unknown fields the schema keeps (so none is
//! pruned silently) — and the warnings. Everything the CRD can state is stated there
//! ([`crate::api`]) and nowhere here. One pure function over the raw JSON object: the webhook and
//! `sandcap validate` both call [`review`], so they can never disagree, and every problem is
//! reported at once with its Kubernetes field path.

mod verdict;

use std::fmt;
use std::sync::LazyLock;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::addresses::WorkerPolicy;
use crate::api::{
    ConfigSource, DriverDeclaration, ProviderRef, SandboxLeaseSpec, SandboxProviderSpec, SecretKeyRef, ServiceRef,
    WorkerRef, WorkloadRef,
};
use crate::config_schema::{self, Deadline};
pub use crate::decode::Shape;
use crate::text;
use crate::versions::ContractVersion;
use crate::vocabulary::{Capability, DriverKind, Kind};
pub use verdict::{MAX_MESSAGE, MAX_PER_KIND, MAX_WARNING_LEN, MAX_WARNINGS, Problem, Verdict, truncate_warning};

/// Operator settings that change what is admitted.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub workers: WorkerPolicy,
    /// The contract version the cluster enforces: its CRD is layer 1 ([`crate::judge`]).
    pub contract: ContractVersion,
}

/// Starts the warning for a problem that the stored object already has (see [`review`]).
pub const ALREADY_STORED: &str = "already stored, not blocking this update: ";

/// Reviews an object of either kind with the rules the apiserver cannot check (layer 2 of
/// docs/contract.md). The apiserver calls the webhook only for objects its CRD schema admitted, so
/// a part of the wrong shape here is skipped, not reported: layer 1 ([`crate::schema`]) names it.
///
/// On UPDATE `old` is the stored object, and the review ratchets, as the apiserver ratchets CRD
/// validation: a problem that `old` has too (the same problem at the same path) was admitted under
/// other rules or settings (an older sandcap, `--allow-worker-urls`, no webhook at all), and
/// refusing it now would block every update of the object, a label included, until someone fixes
/// it. It becomes a warning starting with [`ALREADY_STORED`]; only problems this update brings in
/// deny it.
///
/// Compiling the objects' `configSchema`s shares one deadline ([`config_schema::BUDGET`]), so a
/// review's time is bounded whatever the object holds.
pub fn review(object: &Value, old: Option<&Value>, options: &Options) -> Verdict {
    let deadline = Instant::now() + config_schema::BUDGET.deadline;
    let mut verdict = check(object, options, deadline);
    // Without a problem there is nothing to ratchet, and the stored object need not be reviewed.
    if let Some(old) = old.filter(|_| !verdict.allowed()) {
        let stored = check(old, options, deadline);
        let (kept, introduced): (Vec<Problem>, _) =
            verdict.problems.into_iter().partition(|p| stored.problems.contains(p));
        verdict.problems = introduced;
        // Omitted problems cannot be paired one by one: as many as the stored object has are
        // taken to be its own.
        let stored_omitted = |kind| stored.omitted.iter().find(|(k, _)| *k == kind).map_or(0, |(_, n)| *n);
        let (mut still, mut already) = (Vec::new(), Vec::new());
        for (kind, n) in verdict.omitted {
            match n.checked_sub(stored_omitted(kind)) {
                Some(0) | None => already.push(format!("and {n} more {kind}")),
                Some(_) => still.push((kind, n)),
            }
        }
        verdict.omitted = still;
        for p in kept.iter().map(ToString::to_string).chain(already) {
            verdict.warn(format!("{ALREADY_STORED}{p}"));
        }
    }
    verdict.finish_warnings();
    verdict
}

fn check(object: &Value, options: &Options, deadline: Instant) -> Verdict {
    let mut c = Checker { verdict: Verdict::default(), deadline };
    let spec = object.get("spec").and_then(Value::as_object);
    match (object.get("kind").and_then(Value::as_str).and_then(Kind::from_kind), spec) {
        (Some(Kind::SandboxProvider), Some(spec)) => c.provider(spec, options),
        (Some(Kind::SandboxLease), Some(spec)) => c.lease(spec),
        (Some(_), None) => {}
        (None, _) => {
            // The value as JSON (a string quoted), cut: it is the client's and may be anything.
            let found = object.get("kind").map_or_else(|| "missing".to_string(), |k| text::clip(&k.to_string(), 64));
            c.problem(KIND_PROBLEMS, "kind", format!("is {found}, not SandboxProvider or SandboxLease"))
        }
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
/// (ratcheting reviews it by the same rules). The webhook builds only these parts: the rest (`status`, `metadata.managedFields`, the last-applied annotation) is often most of the
/// bytes, and reviewing the parts gives the verdict of reviewing the whole (a property test in
/// tests/properties.rs and the fuzz target hold the two to that).
pub const REVIEWED: Shape = Shape::Keys(&[
    ("kind", Shape::Whole),
    ("metadata", Shape::Keys(&[("name", Shape::Whole), ("generateName", Shape::Whole)])),
    ("spec", Shape::Whole),
]);

/// The fields of each object in `spec` that has fields, in the order [`crate::api`] declares
/// them (the order a denial lists them in). Derived once, so that a field added to a type is
/// known here: the CRD's schema of the object gives a sample with every field set, which the type
/// reads and writes back, in declaration order, minus nothing but what the type keeps as unknown.
struct Fields {
    provider_spec: Known,
    worker: Known,
    service: Known,
    driver: Known,
    lease_spec: Known,
    provider_ref: Known,
    workload_ref: Known,
    config_source: Known,
    secret_key_ref: Known,
}

const PROVIDER: Kind = Kind::SandboxProvider;
const LEASE: Kind = Kind::SandboxLease;

static FIELDS: LazyLock<Fields> = LazyLock::new(|| Fields {
    provider_spec: Known::of::<SandboxProviderSpec>(PROVIDER, "/properties/spec"),
    worker: Known::of::<WorkerRef>(PROVIDER, "/properties/spec/properties/worker"),
    service: Known::of::<ServiceRef>(PROVIDER, "/properties/spec/properties/worker/properties/service"),
    driver: Known::of::<DriverDeclaration>(PROVIDER, "/properties/spec/properties/environmentDrivers/items"),
    lease_spec: Known::of::<SandboxLeaseSpec>(LEASE, "/properties/spec"),
    provider_ref: Known::of::<ProviderRef>(LEASE, "/properties/spec/properties/providerRef"),
    workload_ref: Known::of::<WorkloadRef>(LEASE, "/properties/spec/properties/workloadRef"),
    config_source: Known::of::<ConfigSource>(LEASE, "/properties/spec/properties/configFrom/items"),
    secret_key_ref: Known::of::<SecretKeyRef>(
        LEASE,
        "/properties/spec/properties/configFrom/items/properties/secretKeyRef",
    ),
});

/// The fields of one object, and where the CRD of `kind` describes it (a JSON pointer).
struct Known {
    #[cfg_attr(not(test), allow(dead_code))]
    kind: Kind,
    #[cfg_attr(not(test), allow(dead_code))]
    pointer: &'static str,
    fields: Vec<String>,
}

impl Known {
    /// The fields of `T`, in declaration order.
    fn of<T: DeserializeOwned + Serialize>(kind: Kind, pointer: &'static str) -> Known {
        let crd = crate::api::crd_schema(kind, ContractVersion::default());
        let schema = crd.pointer(pointer).expect("the CRD describes the object");
        let value: T = serde_json::from_value(sample(schema)).expect("the schema's sample fits its type");
        let json = serde_json::to_string(&value).expect("serializes");
        let OrderedKeys(fields) = serde_json::from_str(&json).expect("a type with fields writes an object");
        Known { kind, pointer, fields }
    }
}

/// A value that `schema` admits with every property set (patterns aside: the types do not check
/// them).
fn sample(schema: &Value) -> Value {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        return properties.iter().map(|(key, schema)| (key.clone(), sample(schema))).collect();
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.get(0)) {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Value::from(""),
        Some("integer" | "number") => Value::from(1),
        Some("boolean") => Value::from(true),
        Some("array") => Value::Array(vec![sample(&schema["items"])]),
        _ => Value::Object(Map::new()),
    }
}

/// The keys of a JSON object, in the order they are written.
struct OrderedKeys(Vec<String>);

impl<'de> Deserialize<'de> for OrderedKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeysInOrder;
        impl<'de> Visitor<'de> for KeysInOrder {
            type Value = OrderedKeys;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(OrderedKeys(keys))
            }
        }
        deserializer.deserialize_map(KeysInOrder)
    }
}

impl Verdict {
    /// Counts the warnings that did not fit in a last one.
    fn finish_warnings(&mut self) {
        if self.warnings.len() > MAX_WARNINGS {
            self.warnings.truncate(MAX_WARNINGS - 1);
            self.warnings.push(format!("and more warnings (at most {MAX_WARNINGS} are shown)"));
        }
    }
}

const UNKNOWN_FIELDS: &str = "unknown fields";
const SCHEMA_PROBLEMS: &str = "configSchema problems";
const WORKER_URL_PROBLEMS: &str = "worker URL problems";
const KIND_PROBLEMS: &str = "kind problems";
const DECLARATION_PROBLEMS: &str = "declaration problems";

struct Checker {
    verdict: Verdict,
    /// When compiling `configSchema`s must have finished.
    deadline: Instant,
}

impl Checker {
    fn finish(self) -> Verdict {
        self.verdict
    }

    fn problem(&mut self, kind: &'static str, path: impl fmt::Display, message: impl AsRef<str>) {
        self.verdict.add(kind, path, message);
    }

    fn warn(&mut self, warning: String) {
        self.verdict.warn(warning);
    }

    /// Rejects keys not in `allowed`; the CRD keeps such keys (it does not prune them) exactly so
    /// that a typo is refused here rather than silently dropped.
    fn known_fields(&mut self, map: &Map<String, Value>, path: &str, allowed: &[String]) {
        for key in map.keys().filter(|k| !allowed.contains(k)) {
            if !self.verdict.lists(UNKNOWN_FIELDS) {
                self.verdict.omit(UNKNOWN_FIELDS);
                continue;
            }
            let removed = |v: ContractVersion| v.contract().removed.iter().any(|r| r.key == key);
            let hint = if Capability::from_key(key).is_some() || ContractVersion::ALL.into_iter().any(removed) {
                format!(" (capability keys belong under {path}.sandboxCapabilities)")
            } else {
                String::new()
            };
            let mut at = path.to_string();
            text::push_key(&mut at, key);
            self.problem(UNKNOWN_FIELDS, at, format!("unknown field (allowed fields: {}){hint}", allowed.join(", ")));
        }
    }

    /// Checks the fields of the object at `map[key]`, if it is one, and returns it.
    fn child<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
        allowed: &[String],
    ) -> Option<&'v Map<String, Value>> {
        let child = field(map, key)?.as_object()?;
        self.known_fields(child, path, allowed);
        Some(child)
    }

    // ---- SandboxProvider --------------------------------------------------------------------

    fn provider(&mut self, spec: &Map<String, Value>, options: &Options) {
        self.known_fields(spec, "spec", &FIELDS.provider_spec.fields);
        if let Some(worker) = self.child(spec, "worker", "spec.worker", &FIELDS.worker.fields) {
            self.child(worker, "service", "spec.worker.service", &FIELDS.service.fields);
            if let Some(url) = field(worker, "url") {
                self.worker_url(url, options);
            }
        }
        let drivers = field(spec, "environmentDrivers").and_then(Value::as_array).into_iter().flatten();
        for (i, driver) in drivers.enumerate() {
            if let Some(d) = driver.as_object() {
                self.driver(d, &format!("spec.environmentDrivers[{i}]"));
            }
        }
    }

    /// Only the host as written can be judged here (the webhook resolves nothing); the probe checks
    /// every address a name resolves to. A URL that does not parse is the CRD's to report.
    fn worker_url(&mut self, url: &Value, options: &Options) {
        if !options.workers.allow_urls {
            self.problem(
                WORKER_URL_PROBLEMS,
                "spec.worker.url",
                "worker URLs are refused because the operator runs without --allow-worker-urls: use spec.worker.service instead",
            );
        } else if let Some(url) = url.as_str().and_then(|u| url::Url::parse(u).ok())
            && let Some(class) = options.workers.allowed_cidrs.refuses_host(&url)
        {
            let host = text::clip(url.host_str().unwrap_or_default(), 253);
            self.problem(
                WORKER_URL_PROBLEMS,
                "spec.worker.url",
                format!(
                    "host {host} is a refused address ({class}): worker URLs may not reach loopback, \
                     link-local, cloud metadata or unspecified addresses unless the operator allows them with \
                     --worker-url-allowed-cidrs; use spec.worker.service or another address"
                ),
            );
        }
    }

    fn driver(&mut self, d: &Map<String, Value>, path: &str) {
        self.known_fields(d, path, &FIELDS.driver.fields);
        if let Some(schema) = field(d, "configSchema")
            && let Err(e) = config_schema::compile(schema, Deadline::Shared(self.deadline))
        {
            self.problem(SCHEMA_PROBLEMS, format_args!("{path}.configSchema{}", e.at()), e.problem());
        }
        let Some(caps) = field(d, "sandboxCapabilities").and_then(Value::as_object) else {
            return;
        };
        for (key, _) in caps.iter().filter(|(_, v)| v.is_null()) {
            let mut at = format!("{path}.sandboxCapabilities");
            text::push_key(&mut at, key);
            self.problem(DECLARATION_PROBLEMS, at, "null declares nothing: write true or false, or delete the key");
        }
        if field(d, "kind").and_then(Value::as_str) != Some(DriverKind::SandboxProvider.as_str()) {
            // The other warnings are about how the declaration is read, and it never is.
            self.warn(format!("{path}: sandboxCapabilities is never read unless kind is sandbox_provider"));
            return;
        }
        let declared = |cap: Capability| field(caps, cap.key()).and_then(Value::as_bool);
        let legacy = field(d, "supportsReusableLeases").and_then(Value::as_bool);
        if let (Some(legacy), Some(nested)) = (legacy, declared(Capability::ReusableLeases)) {
            self.warn(format!(
                "{path}: supportsReusableLeases={legacy} and sandboxCapabilities.reusableLeases={nested}; nested wins"
            ));
        }
        let (sync_in, sync_out) = (declared(Capability::NativeSyncIn), declared(Capability::NativeSyncOut));
        if sync_in != sync_out {
            let shown = |v: Option<bool>| v.map_or_else(|| "omitted".to_string(), |v| v.to_string());
            self.warn(format!(
                "{path}: nativeSyncIn is {}, nativeSyncOut {}; declare both alike (a pair)",
                shown(sync_in),
                shown(sync_out)
            ));
        }
    }

    // ---- SandboxLease -----------------------------------------------------------------------

    fn lease(&mut self, spec: &Map<String, Value>) {
        self.known_fields(spec, "spec", &FIELDS.lease_spec.fields);
        self.child(spec, "providerRef", "spec.providerRef", &FIELDS.provider_ref.fields);
        self.child(spec, "workloadRef", "spec.workloadRef", &FIELDS.workload_ref.fields);
        let sources = field(spec, "configFrom").and_then(Value::as_array).into_iter().flatten();
        for (i, source) in sources.enumerate() {
            let path = format!("spec.configFrom[{i}]");
            if let Some(s) = source.as_object() {
                self.known_fields(s, &path, &FIELDS.config_source.fields);
                self.child(s, "secretKeyRef", &format!("{path}.secretKeyRef"), &FIELDS.secret_key_ref.fields);
            }
        }
    }
}

/// A field's value; `null` counts as absent, as the CRD schema (nullable) lets it through.
fn field<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    map.get(key).filter(|v| !v.is_null())
}

pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derivation may lose no field the CRD has, and invent none.
    #[test]
    fn the_known_fields_are_the_crds_properties() {
        let f = &*FIELDS;
        let all = [
            &f.provider_spec,
            &f.worker,
            &f.service,
            &f.driver,
            &f.lease_spec,
            &f.provider_ref,
            &f.workload_ref,
            &f.config_source,
            &f.secret_key_ref,
        ];
        for known in all {
            let crd = crate::api::crd_schema(known.kind, ContractVersion::default());
            let properties = crd.pointer(known.pointer).and_then(|s| s["properties"].as_object()).expect("properties");
            let mut fields = known.fields.clone();
            fields.sort();
            assert_eq!(fields, properties.keys().cloned().collect::<Vec<_>>(), "{}", known.pointer);
        }
    }

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
