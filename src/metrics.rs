//! Prometheus metrics for the webhook and the controllers, served on the admin port's `/metrics`.
//! One registry per process; every family is created here so their names are in one place.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub kind: &'static str,
    pub operation: &'static str,
    /// `allowed`, `denied` or `invalid` (the body was not a usable AdmissionReview).
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
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

/// Admission runs in microseconds and the apiserver gives up after seconds: cover both ends.
const ADMISSION_BUCKETS: [f64; 10] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0];
const RECONCILE_BUCKETS: [f64; 9] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];

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
    pub probes: Family<ResultLabels, Counter>,
    pub leader: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them (prefixed `sandcap_`) in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            admission_requests: Family::default(),
            admission_duration: Family::new_with_constructor(|| Histogram::new(ADMISSION_BUCKETS)),
            certificate_reloads: Family::default(),
            certificate_expiry: Gauge::default(),
            reconciles: Family::default(),
            reconcile_failures: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS)),
            probes: Family::default(),
            leader: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("sandcap");
        r.register(
            "admission_requests",
            "Admission reviews by kind, operation and verdict",
            m.admission_requests.clone(),
        );
        r.register("admission_duration_seconds", "Time to answer one admission review", m.admission_duration.clone());
        r.register("certificate_reloads", "Serving certificate reloads by result", m.certificate_reloads.clone());
        r.register(
            "certificate_expiry_timestamp_seconds",
            "Unix time at which the serving certificate expires",
            m.certificate_expiry.clone(),
        );
        r.register("reconciles", "Reconciles by kind", m.reconciles.clone());
        r.register("reconcile_failures", "Failed reconciles by kind and error", m.reconcile_failures.clone());
        r.register("reconcile_duration_seconds", "Time for one reconcile", m.reconcile_duration.clone());
        r.register("worker_probes", "Worker probes by result", m.probes.clone());
        r.register("leader", "1 while this replica holds the controller leader lease", m.leader.clone());
        m
    }
}

/// The registry in Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String cannot fail");
    out
}
