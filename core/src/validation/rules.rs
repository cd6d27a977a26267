//! The rules of layer 2 over one object, per kind: unknown fields, worker URLs, `configSchema`s
//! that compile, declarations the CRD admits but that declare nothing, a lease's config within
//! its bound, and the warnings.

use std::fmt;
use std::time::Instant;

use serde_json::{Map, Value};

use super::fields::FIELDS;
use super::{Options, Verdict};
use crate::api::{CONFIG_TOO_LARGE, exceeds_config_bound};
use crate::config_schema::{self, Deadline};
use crate::text;
use crate::versions::ContractVersion;
use crate::vocabulary::{Capability, DriverKind, Kind};

/// The verdict of the rules on `object` alone: [`super::review`] ratchets it against the stored
/// object.
pub(super) fn check(object: &Value, options: &Options, deadline: Instant) -> Verdict {
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

const UNKNOWN_FIELDS: &str = "unknown fields";
const SCHEMA_PROBLEMS: &str = "configSchema problems";
const WORKER_URL_PROBLEMS: &str = "worker URL problems";
const KIND_PROBLEMS: &str = "kind problems";
const DECLARATION_PROBLEMS: &str = "declaration problems";
const SIZE_PROBLEMS: &str = "size problems";

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
        let bindings = field(spec, "workloads").and_then(Value::as_array).into_iter().flatten();
        for (i, binding) in bindings.enumerate() {
            let Some(b) = binding.as_object() else { continue };
            let path = format!("spec.workloads[{i}]");
            self.known_fields(b, &path, &FIELDS.binding.fields);
            let selector = format!("{path}.selector");
            let Some(s) = self.child(b, "selector", &selector, &FIELDS.selector.fields) else { continue };
            let requirements = field(s, "matchExpressions").and_then(Value::as_array).into_iter().flatten();
            for (j, requirement) in requirements.enumerate() {
                if let Some(r) = requirement.as_object() {
                    self.known_fields(r, &format!("{selector}.matchExpressions[{j}]"), &FIELDS.requirement.fields);
                }
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
        if field(spec, "config").is_some_and(exceeds_config_bound) {
            self.problem(SIZE_PROBLEMS, "spec.config", CONFIG_TOO_LARGE);
        }
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
