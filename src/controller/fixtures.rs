//! Fluent fixtures for the controller's in-process tests: objects as the apiserver would hand
//! them over, built from JSON so that they read like the manifests they stand for.
//!
//! `provider("p").driver("k").declares(&["nativeSyncIn"]).probed_ok(&["environmentSyncIn"]).at(T0)`,
//! `lease("team-a", "l").of("p", "k").config_from("s", "config.json")`; a [`Context`] around them
//! ([`context`]), whose client may be a scripted apiserver ([`apiserver`]).

pub mod apiserver;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::runtime::reflector;
use serde_json::{Value, json};

use super::audit::Audits;
use super::cache::{self, Caches, ProviderTable, leases::Writer};
use super::context::{Context, Writes};
use super::known;
use super::leader::Fence;
use super::recorder;
use crate::metrics::Metrics;
use crate::probe::Prober;
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::judge::Options;
use sandcap_core::vocabulary::Kind;

/// The time of a fixture's probe or status: `at(T0)`, then `later(T0, 90)`.
pub const T0: &str = "2030-01-01T00:00:00Z";

pub fn time(at: &str) -> Time {
    Time(at.parse().expect("an RFC 3339 time"))
}

/// `seconds` after `at`.
pub fn later(at: &str, seconds: i64) -> Time {
    let at = time(at).0;
    Time(at.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds)).expect("in range"))
}

pub struct ProviderFixture(Value);

/// A provider at generation 1, with uid `<name>-uid`, whose worker is a Service; no drivers yet.
pub fn provider(name: &str) -> ProviderFixture {
    ProviderFixture(json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 1},
        "spec": {
            "pluginKey": "acme.sandbox", "version": "1.0.0",
            "worker": {"service": {"namespace": "sandbox-system", "name": "acme", "port": 8080}},
            "environmentDrivers": []
        }
    }))
}

impl ProviderFixture {
    pub fn uid(mut self, uid: &str) -> Self {
        self.0["metadata"]["uid"] = json!(uid);
        self
    }

    /// A spec change: `metadata.generation` moves on, the published status stays behind.
    pub fn generation(mut self, generation: i64) -> Self {
        self.0["metadata"]["generation"] = json!(generation);
        self
    }

    pub fn plugin_key(mut self, key: &str) -> Self {
        self.0["spec"]["pluginKey"] = json!(key);
        self
    }

    /// Adds a `sandbox_provider` driver; `declares` and `config_schema` apply to the last one.
    pub fn driver(mut self, key: &str) -> Self {
        self.drivers().push(json!({"driverKey": key, "kind": "sandbox_provider"}));
        self
    }

    pub fn declares(mut self, capabilities: &[&str]) -> Self {
        let declared: serde_json::Map<String, Value> =
            capabilities.iter().map(|c| (c.to_string(), json!(true))).collect();
        self.last_driver()["sandboxCapabilities"] = Value::Object(declared);
        self
    }

    pub fn config_schema(mut self, schema: Value) -> Self {
        self.last_driver()["configSchema"] = schema;
        self
    }

    /// The worker by URL instead of by Service.
    pub fn worker_url(mut self, url: &str) -> Self {
        self.0["spec"]["worker"] = json!({"url": url});
        self
    }

    /// A published status whose probe succeeded with `methods` (at [`T0`] unless `at` says
    /// otherwise), observed at the current generation.
    pub fn probed_ok(self, methods: &[&str]) -> Self {
        let message = format!("initialize answered ok: true with {} supportedMethods", methods.len());
        self.probed(json!({"probe": "Succeeded", "supportedMethods": methods, "message": message}))
    }

    pub fn probe_failed(self, message: &str) -> Self {
        self.probed(json!({"probe": "Failed", "supportedMethods": [], "message": message}))
    }

    /// When the published probe ran.
    pub fn at(mut self, time: &str) -> Self {
        self.0["status"]["worker"]["lastProbeTime"] = json!(time);
        self
    }

    pub fn build(self) -> SandboxProvider {
        serde_json::from_value(self.0).expect("a valid SandboxProvider")
    }

    fn probed(mut self, mut worker: Value) -> Self {
        worker["lastProbeTime"] = json!(T0);
        let generation = self.0["metadata"]["generation"].clone();
        self.0["status"] = json!({"observedGeneration": generation, "worker": worker});
        self
    }

    fn drivers(&mut self) -> &mut Vec<Value> {
        self.0["spec"]["environmentDrivers"].as_array_mut().expect("an array")
    }

    fn last_driver(&mut self) -> &mut Value {
        self.drivers().last_mut().expect("driver(..) first")
    }
}

pub struct LeaseFixture(Value);

/// A lease at generation 1 with uid `<namespace>-<name>-uid`; `of` names its provider.
pub fn lease(namespace: &str, name: &str) -> LeaseFixture {
    LeaseFixture(json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}-uid"), "generation": 1},
        "spec": {"providerRef": {"name": "", "driverKey": ""}}
    }))
}

impl LeaseFixture {
    pub fn of(mut self, provider: &str, driver: &str) -> Self {
        self.0["spec"]["providerRef"] = json!({"name": provider, "driverKey": driver});
        self
    }

    pub fn with_config(mut self, config: Value) -> Self {
        self.0["spec"]["config"] = config;
        self
    }

    /// Adds a `configFrom` entry.
    pub fn config_from(mut self, secret: &str, key: &str) -> Self {
        let entry = json!({"secretKeyRef": {"name": secret, "key": key}});
        match self.0["spec"]["configFrom"].as_array_mut() {
            Some(entries) => entries.push(entry),
            None => self.0["spec"]["configFrom"] = json!([entry]),
        }
        self
    }

    pub fn build(self) -> SandboxLease {
        serde_json::from_value(self.0).expect("a valid SandboxLease")
    }
}

/// A Secret with uid `<namespace>-<name>-uid`, `data` (its values base64, as the apiserver hands
/// them over) and `labels`.
pub fn secret(namespace: &str, name: &str, data: Value, labels: Value) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}-uid"), "labels": labels},
        "data": data
    }))
    .expect("a valid Secret")
}

/// A context and the ends of it a test drives: the lease table's writer (what the lease watch
/// would write) and the Event publisher (which runs once a test takes and spawns it).
pub struct Parts {
    pub ctx: Arc<Context>,
    pub leases: Writer,
    pub publisher: Option<recorder::Publisher>,
}

/// A context whose client is `client`, with empty caches.
pub fn context_with(client: Client, metrics: &Metrics) -> Parts {
    let prober = Prober::new(Duration::from_secs(1), Default::default(), "test").expect("a prober");
    let (leases, leases_writer) =
        cache::leases::table(known::nonconforming(metrics, Kind::SandboxLease), known::Verdicts::of(metrics));
    let caches = Caches {
        providers: reflector::store().0,
        leases,
        secrets: cache::SecretCache::default(),
        endpoints: cache::endpoints::table().0,
        providers_changed: Default::default(),
        provider_queue: cache::Queue::new().0,
    };
    let (audits, provider_table) = (Arc::new(Audits::new(Options::default())), Arc::new(ProviderTable::new(metrics)));
    let (events, publisher) = recorder::channel(client.clone(), "test", metrics.events_dropped.clone(), Fence::Open);
    let (probe_interval, contract) = (Duration::from_secs(60), audits.contract());
    let writes = Writes { fence: Fence::Open, events };
    let metrics = metrics.clone();
    let served = Default::default();
    let endpoint_trust = cache::endpoints::EndpointTrust::default();
    let ctx = Context {
        client,
        caches,
        prober,
        writes,
        metrics,
        probe_interval,
        endpoint_trust,
        contract,
        audits,
        provider_table,
        served,
    };
    Parts { ctx: Arc::new(ctx), leases: leases_writer, publisher: Some(publisher) }
}

/// A context whose client is never connected to (see [`context_with`]).
pub fn context(metrics: &Metrics) -> Parts {
    let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"))).expect("a client");
    context_with(client, metrics)
}

pub fn metrics() -> Metrics {
    Metrics::register(&mut prometheus_client::registry::Registry::default())
}
