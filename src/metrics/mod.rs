//! Prometheus metrics for the webhook and the controllers, served on the admin port's `/metrics`.
//! One registry per process; every family is created here so their names are in one place, and
//! the process metrics ([`process`]) join them.

mod process;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub kind: &'static str,
    pub operation: &'static str,
    /// `allowed`, `denied` or `invalid` (the body was not a usable AdmissionReview).
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// A provider's `Ready` condition: its status and reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadyLabels {
    pub ready: String,
    pub reason: String,
}

/// One capability of leases, and the reason it is on (`Granted`) or off.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapabilityLabels {
    pub capability: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub kind: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// One worker probe.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `succeeded` or `failed`.
    pub result: &'static str,
    /// A failure's class ([`crate::probe::ProbeError::reason`]), empty on success.
    pub reason: &'static str,
}

/// One SandboxProvider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: String,
}

/// One request sandcap made to the apiserver.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` (as the audit log says).
    pub verb: &'static str,
    /// The resource, with its subresource: `secrets`, `sandboxleases/status`, ...
    pub resource: String,
}

impl ApiLabels {
    /// Classifies a request by method and path as the apiserver does (`/api/v1/...` or
    /// `/apis/GROUP/VERSION/...`, optionally `namespaces/NS/`, then resource, name, subresource).
    pub fn of(method: &http::Method, uri: &http::Uri) -> ApiLabels {
        let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
            _ => &[][..],
        };
        let rest = match rest {
            ["namespaces", _namespace, rest @ ..] if !rest.is_empty() => rest,
            other => other,
        };
        let (resource, named) = match rest {
            [] => ("other".to_string(), false),
            [resource] => (resource.to_string(), false),
            [resource, _name] => (resource.to_string(), true),
            [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
        };
        let watch = uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let verb = match *method {
            http::Method::GET if watch => "watch",
            http::Method::GET if named => "get",
            http::Method::GET => "list",
            http::Method::POST => "create",
            http::Method::PUT => "update",
            http::Method::PATCH => "patch",
            http::Method::DELETE => "delete",
            _ => "other",
        };
        ApiLabels { verb, resource }
    }
}

/// Admission runs in microseconds and the apiserver gives up after seconds: cover both ends.
const ADMISSION_BUCKETS: [f64; 10] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0];
const RECONCILE_BUCKETS: [f64; 9] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];
/// A probe takes at most `--probe-timeout` (at most a minute).
const PROBE_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0];

/// Every metric sandcap exports. Cheap to clone (each family is an `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    pub admission_requests: Family<AdmissionLabels, Counter>,
    pub admission_duration: Family<KindLabels, Histogram>,
    pub certificate_reloads: Family<ResultLabels, Counter>,
    pub certificate_expiry: Gauge,
    pub reconciles: Family<KindLabels, Counter>,
    pub reconcile_failures: Family<FailureLabels, Counter>,
    pub reconcile_duration: Family<KindLabels, Histogram>,
    pub probes: Family<ProbeLabels, Counter>,
    /// By provider name: a deleted provider's series goes with it ([`Metrics::forget_provider`]).
    pub probe_duration: Family<ProviderLabels, Histogram>,
    pub leader: Gauge,
    pub controllers_running: Gauge,
    pub events_dropped: Counter,
    pub api_requests: Family<ApiLabels, Counter>,
    pub reconcile_queue: Family<KindLabels, Gauge>,
    pub nonconforming: Family<KindLabels, Gauge>,
    pub observed_workloads: Family<KindLabels, Gauge>,
    pub observer_writes: Family<OperationLabels, Counter>,
    pub providers: Family<ReadyLabels, Gauge>,
    pub lease_capabilities: Family<CapabilityLabels, Gauge>,
}

impl Metrics {
    /// Creates the metrics and registers them (prefixed `sandcap_`) in `registry`, in this order,
    /// after the process metrics.
    pub fn register(registry: &mut Registry) -> Metrics {
        registry.register_collector(Box::new(process::ProcessCollector));
        let r = registry.sub_registry_with_prefix("sandcap");
        Metrics {
            admission_requests: registered(
                r,
                "admission_requests",
                "Admission reviews by kind, operation and verdict",
                Family::default(),
            ),
            admission_duration: registered(
                r,
                "admission_duration_seconds",
                "Time to answer one admission review",
                Family::new_with_constructor(|| Histogram::new(ADMISSION_BUCKETS)),
            ),
            certificate_reloads: registered(
                r,
                "certificate_reloads",
                "Serving certificate reloads by result",
                Family::default(),
            ),
            certificate_expiry: registered(
                r,
                "certificate_expiry_timestamp_seconds",
                "Unix time at which the serving certificate expires",
                Gauge::default(),
            ),
            reconciles: registered(r, "reconciles", "Reconciles by kind", Family::default()),
            reconcile_failures: registered(
                r,
                "reconcile_failures",
                "Failed reconciles by kind and error",
                Family::default(),
            ),
            reconcile_duration: registered(
                r,
                "reconcile_duration_seconds",
                "Time for one reconcile",
                Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS)),
            ),
            probes: registered(r, "worker_probes", "Worker probes by result and failure reason", Family::default()),
            probe_duration: registered(
                r,
                "worker_probe_duration_seconds",
                "Time for one worker probe, by provider (a Service worker's: each endpoint's)",
                Family::new_with_constructor(|| Histogram::new(PROBE_BUCKETS)),
            ),
            leader: registered(r, "leader", "1 while this replica holds the controller leader lease", Gauge::default()),
            controllers_running: registered(
                r,
                "controllers_running",
                "1 while this replica's controllers run (their caches listed); a leader at 0 writes nothing",
                Gauge::default(),
            ),
            events_dropped: registered(
                r,
                "events_dropped",
                "Events not recorded: the queue to the apiserver was full, or the replica stopped leading",
                Counter::default(),
            ),
            api_requests: registered(
                r,
                "api_requests",
                "Requests to the Kubernetes API by verb and resource",
                Family::default(),
            ),
            reconcile_queue: registered(
                r,
                "reconcile_queue_depth",
                "Objects triggered by a change and not yet reconciled, by kind",
                Family::default(),
            ),
            nonconforming: registered(
                r,
                "nonconforming_objects",
                "Stored objects that the CRD or the webhook would refuse today, by kind (on the leader)",
                Family::default(),
            ),
            observed_workloads: registered(
                r,
                "observed_workloads",
                "Workloads that have an observed SandboxLease, by workload kind (on the leader)",
                Family::default(),
            ),
            observer_writes: registered(
                r,
                "observer_writes",
                "The observer's writes of observed SandboxLeases, by operation (create, update, delete)",
                Family::default(),
            ),
            providers: registered(
                r,
                "providers",
                "SandboxProviders by their published Ready condition's status and reason (on the leader)",
                Family::default(),
            ),
            lease_capabilities: registered(
                r,
                "lease_capabilities",
                "Capabilities of SandboxLeases by the reason each is on (Granted) or off, as published (on the leader)",
                Family::default(),
            ),
        }
    }
}

impl Metrics {
    /// One probe of `provider`'s worker, which took `took` and was `labels`.
    pub fn probed(&self, provider: &str, labels: &ProbeLabels, took: std::time::Duration) {
        self.probes.get_or_create(labels).inc();
        self.probe_duration.get_or_create(&ProviderLabels { provider: provider.into() }).observe(took.as_secs_f64());
    }

    /// The provider named `provider` was deleted: its series go too.
    pub fn forget_provider(&self, provider: &str) {
        self.probe_duration.remove(&ProviderLabels { provider: provider.into() });
    }
}

/// Registers a handle to `metric` and returns it (the registry keeps its own clone).
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The registry in Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::{ApiLabels, Metrics, ProbeLabels, Registry, encode};

    #[test]
    fn requests_are_classified_as_the_audit_log_does() {
        let cases = [
            ("GET", "/api/v1/namespaces/a/secrets?labelSelector=x&watch=true&resourceVersion=1", "watch", "secrets"),
            ("GET", "/api/v1/secrets?labelSelector=x", "list", "secrets"),
            ("GET", "/api/v1/namespaces/a/secrets/creds", "get", "secrets"),
            (
                "PATCH",
                "/apis/sandcap.dev/v1alpha1/namespaces/a/sandboxleases/l/status?fieldManager=sandcap",
                "patch",
                "sandboxleases/status",
            ),
            ("PATCH", "/apis/sandcap.dev/v1alpha1/sandboxproviders/p/status", "patch", "sandboxproviders/status"),
            ("POST", "/apis/events.k8s.io/v1/namespaces/default/events", "create", "events"),
            ("PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/sandcap-controller", "update", "leases"),
            ("GET", "/apis/sandcap.dev/v1alpha1/sandboxproviders", "list", "sandboxproviders"),
            ("GET", "/version", "list", "other"),
        ];
        for (method, uri, verb, resource) in cases {
            let labels = ApiLabels::of(&method.parse().unwrap(), &uri.parse().unwrap());
            assert_eq!((labels.verb, labels.resource.as_str()), (verb, resource), "{method} {uri}");
        }
    }

    #[test]
    fn a_probe_is_counted_and_timed_by_provider_until_the_provider_goes() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let failed = ProbeLabels { result: "failed", reason: "timeout" };
        metrics.probed("acme", &failed, std::time::Duration::from_millis(30));
        metrics.probed("other", &ProbeLabels { result: "succeeded", reason: "" }, std::time::Duration::from_secs(2));
        let text = encode(&registry);
        assert!(text.contains(r#"sandcap_worker_probes_total{result="failed",reason="timeout"} 1"#), "{text}");
        assert!(
            text.contains(r#"sandcap_worker_probe_duration_seconds_bucket{le="0.05",provider="acme"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"sandcap_worker_probe_duration_seconds_count{provider="other"} 1"#), "{text}");
        metrics.forget_provider("acme");
        let text = encode(&registry);
        assert!(!text.contains(r#"provider="acme""#), "{text}");
        assert!(text.contains(r#"provider="other""#), "{text}");
    }
}
