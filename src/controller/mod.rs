//! The operator half: two kube-runtime controllers that write the status docs/contract.md
//! ("Status") describes.
//!
//! - The provider controller probes each provider's worker (on a spec change and every probe
//!   interval) and publishes `SandboxProvider.status`: the verified methods and, per driver,
//!   verified ∩ declared. That status is the verified set: one probe per provider, not per lease.
//! - The lease controller resolves each `SandboxLease` with [`contract::resolve_lease`] against the
//!   provider's published status and the lease's `configFrom` Secrets. It is re-triggered by its
//!   provider's changes and by changes of a Secret it references, not by a full resync.
//!
//! Both write status by server-side apply (field manager [`FIELD_MANAGER`], forced) and write
//! nothing when the desired status equals the current one. With leader election only the holder of
//! the `coordination.k8s.io/v1` Lease runs them.
//!
//! [`contract::resolve_lease`]: crate::contract::resolve_lease

pub mod cache;
pub mod leader;
mod lease;
mod provider;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub use cache::Caches;
use lease::{leases_for_provider, leases_for_secret, reconcile_lease};
use provider::reconcile_provider;

use crate::metrics::{FailureLabels, KindLabels, Metrics};
use crate::probe::{AllowedCidrs, Prober};
use crate::vocabulary::{ConditionReason, ConditionType, Kind};

/// The field manager of every write: status, the certificate Secret, the webhook's caBundle.
pub const FIELD_MANAGER: &str = "sandcap";
/// Probes are slow I/O; a few at a time keeps a burst of new providers from piling up sockets.
const PROVIDER_CONCURRENCY: u16 = 16;
/// Bounds the apiserver load when every lease is resolved at once (startup, leader change).
const LEASE_CONCURRENCY: u16 = 32;
/// No reconcile may take longer (a probe has its own, shorter timeout): one that does fails and is
/// retried, so nothing can keep a controller's queue, or shutdown, waiting forever.
const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How the controllers run; `sandcap run` fills it from its flags.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub allow_worker_urls: bool,
    pub worker_url_allowed_cidrs: AllowedCidrs,
    pub leader_elect: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    /// This replica's leader identity (the pod name); also the probe's `instanceInfo.instanceId`.
    pub identity: String,
    /// Where leases may read `configFrom` Secrets; Secrets are watched only there, so the
    /// operator's RBAC can stay namespaced.
    pub secret_namespaces: SecretScope,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            probe_interval: Duration::from_secs(300),
            probe_timeout: crate::probe::DEFAULT_TIMEOUT,
            allow_worker_urls: false,
            worker_url_allowed_cidrs: AllowedCidrs::default(),
            leader_elect: true,
            lease_name: "sandcap-controller".into(),
            lease_namespace: "default".into(),
            identity: "sandcap".into(),
            secret_namespaces: SecretScope::All,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write the status of {kind} {name}: {source}")]
    WriteStatus {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the {0} cache was dropped before it was filled")]
    CacheGone(&'static str),
    #[error("the caches were not listed within {0:?}")]
    ListDeadline(Duration),
    #[error("the reconcile took longer than {0:?}")]
    Deadline(Duration),
    #[error("leader election: {0}")]
    LeaderElection(String),
}

impl Error {
    /// The `error` label of the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::WriteStatus { .. } => "write_status",
            Error::CacheGone(_) => "cache_gone",
            Error::ListDeadline(_) => "list_deadline",
            Error::Deadline(_) => "deadline",
            Error::LeaderElection(_) => "leader_election",
        }
    }
}

/// What a reconcile needs.
pub struct Context {
    pub client: Client,
    /// Every cache, listed before the first reconcile.
    pub caches: Caches,
    pub prober: Prober,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub probe_interval: Duration,
    /// Failed reconciles in a row, by uid; an object's entry goes when it is deleted.
    failures: Arc<Mutex<HashMap<String, u32>>>,
    /// What the watches triggered and no reconcile has started yet.
    queues: cache::Queues,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    fn new(
        client: Client,
        caches: Caches,
        queues: cache::Queues,
        prober: Prober,
        metrics: Metrics,
        probe_interval: Duration,
        identity: &str,
        failures: Arc<Mutex<HashMap<String, u32>>>,
    ) -> Context {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: Some(identity.into()) };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            caches,
            prober,
            metrics,
            probe_interval,
            failures,
            queues,
        }
    }

    /// Counts and times one reconcile, within [`RECONCILE_DEADLINE`]; a success forgets the
    /// object's earlier failures.
    async fn observe<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        work: impl Future<Output = Result<Action, Error>>,
    ) -> Result<Action, Error> {
        let labels = KindLabels { kind: kind_label::<K>() };
        let started = Instant::now();
        let result =
            tokio::time::timeout(RECONCILE_DEADLINE, work).await.unwrap_or(Err(Error::Deadline(RECONCILE_DEADLINE)));
        self.metrics.reconciles.get_or_create(&labels).inc();
        self.metrics.reconcile_duration.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
        if result.is_ok() {
            let mut failures = self.failures.lock().expect("not poisoned");
            // Nearly always empty: then there is no key to build.
            if !failures.is_empty() {
                failures.remove(&key(obj));
            }
        }
        result
    }

    /// Exponential backoff per object: 1s, 2s, 4s ... up to 5 minutes.
    fn backoff<K: Resource<DynamicType = ()>>(&self, obj: &K) -> Duration {
        let mut failures = self.failures.lock().expect("not poisoned");
        let n = failures.entry(key(obj)).or_insert(0);
        let delay = BACKOFF_BASE.saturating_mul(1 << (*n).min(16)).min(BACKOFF_MAX);
        *n = n.saturating_add(1);
        delay
    }
}

fn kind_label<K: Resource<DynamicType = ()>>() -> &'static str {
    Kind::from_kind(&K::kind(&())).map_or("other", Kind::as_str)
}

/// The backoff key: the uid, so an object deleted and re-created starts afresh.
fn key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    obj.meta().uid.clone().unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

fn error_policy<K: Resource<DynamicType = ()>>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let kind = kind_label::<K>();
    ctx.metrics.reconcile_failures.get_or_create(&FailureLabels { kind, error: error.metric_label() }).inc();
    let delay = ctx.backoff(obj.as_ref());
    tracing::warn!(kind, name = %obj.name_any(), namespace = obj.namespace(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs both controllers until `shutdown` is cancelled: behind leader election when
/// `options.leader_elect`, otherwise right away. Watch errors (an apiserver that goes away) are
/// retried with kube-runtime's default backoff; they never end the run.
pub async fn run(
    client: Client,
    options: ControllerOptions,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    if !options.leader_elect {
        metrics.leader.set(1);
        let result = controllers(client, options, metrics.clone(), shutdown).await;
        metrics.leader.set(0);
        return result;
    }
    let election = leader::Election {
        lease_name: options.lease_name.clone(),
        namespace: options.lease_namespace.clone(),
        identity: options.identity.clone(),
        timing: leader::Timing::default(),
    };
    let lead = {
        let (client, metrics) = (client.clone(), metrics.clone());
        move |token| controllers(client.clone(), options.clone(), metrics.clone(), token)
    };
    leader::run_elected(client, election, metrics, shutdown, lead).await
}

/// Both controllers, until `shutdown` is cancelled (they finish the reconciles in flight). They
/// start only once every cache is listed (see [`cache`]).
async fn controllers(
    client: Client,
    options: ControllerOptions,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let prober = Prober::new(
        options.probe_timeout,
        options.allow_worker_urls,
        options.worker_url_allowed_cidrs.clone(),
        &options.identity,
    );
    let failures: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let forget = {
        let failures = failures.clone();
        move |uid: &str| {
            failures.lock().expect("not poisoned").remove(uid);
        }
    };
    // The watches end with the controllers, also when they stop for a lost leader lease.
    let watches = shutdown.child_token();
    let _stop_watches = watches.clone().drop_guard();
    let (caches, queues, triggers) =
        Caches::start(&client, &options.secret_namespaces, forget, &metrics, &watches).await?;
    if shutdown.is_cancelled() {
        return Ok(());
    }
    let ctx = Context::new(
        client,
        caches.clone(),
        queues,
        prober,
        metrics,
        options.probe_interval,
        &options.identity,
        failures,
    );
    let ctx = Arc::new(ctx);

    let provider_controller = Controller::for_stream(futures::stream::pending(), caches.providers.clone())
        .with_config(ControllerConfig::default().concurrency(PROVIDER_CONCURRENCY))
        .reconcile_on(cache::stream(triggers.providers))
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile_provider, error_policy, ctx.clone())
        .for_each(log_outcome);
    let lease_controller = Controller::for_stream(futures::stream::pending(), caches.leases.clone())
        .with_config(ControllerConfig::default().concurrency(LEASE_CONCURRENCY))
        .reconcile_on(cache::stream(triggers.leases))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile_lease, error_policy, ctx)
        .for_each(log_outcome);

    tracing::info!(
        providers = caches.providers.state().len(),
        leases = caches.leases.state().len(),
        "caches listed; controllers started"
    );
    futures::join!(provider_controller, lease_controller);
    tracing::info!("controllers stopped");
    Ok(())
}

/// The namespaces whose Secrets sandcap reads (`--secret-namespaces`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretScope {
    All,
    /// Possibly none: then every `configFrom` reads as a missing Secret and narrows.
    Namespaces(Vec<String>),
}

impl std::str::FromStr for SecretScope {
    type Err = std::convert::Infallible;

    /// `*` is every namespace; otherwise a comma-separated list (empty: none).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s.trim() == "*" {
            SecretScope::All
        } else {
            SecretScope::Namespaces(s.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect())
        })
    }
}

/// What the controllers report besides reconciles. A failed reconcile is not repeated here: it
/// is [`error_policy`]'s one line, with the object, the error and the retry delay.
async fn log_outcome<K: Resource>(outcome: Result<(ObjectRef<K>, Action), controller::Error<Error, watcher::Error>>) {
    match outcome {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(error) => tracing::debug!(%error, "controller event"),
    }
}

/// Server-side apply of a whole status with the `sandcap` field manager. The whole status is
/// always sent, so the fields sandcap owns are exactly the ones it computed.
async fn apply_status<K>(api: &Api<K>, name: &str, status: &impl Serialize) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map(drop)
        .map_err(|source| Error::WriteStatus { kind: kind_label::<K>(), name: name.to_string(), source })
}

/// Now, to the second: what the apiserver stores, so a status read back compares equal.
fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Builds one status's metav1.Conditions: each keeps its `lastTransitionTime` while its status
/// stays the same, so an unchanged condition compares equal and is not rewritten.
struct Conditions<'a> {
    generation: Option<i64>,
    previous: &'a [Condition],
    now: &'a Time,
}

impl Conditions<'_> {
    fn set(&self, type_: ConditionType, status: bool, reason: ConditionReason, message: String) -> Condition {
        self.set_tri(type_, if status { "True" } else { "False" }, reason, message)
    }

    /// `status` is `True`, `False` or `Unknown`.
    fn set_tri(&self, type_: ConditionType, status: &str, reason: ConditionReason, message: String) -> Condition {
        let type_ = type_.as_str();
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| self.now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.to_string(),
            message,
            observed_generation: self.generation,
            last_transition_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log lines written while the returned guard lives (on this thread), at every level.
    pub(super) fn capture() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
        #[derive(Clone)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer(Arc::default());
        let lines = buffer.0.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || buffer.clone())
            .finish();
        (lines, tracing::subscriber::set_default(subscriber))
    }

    #[tokio::test]
    async fn a_failed_reconcile_is_logged_once_with_the_object_the_error_and_the_retry_delay() {
        let (lines, _guard) = capture();
        // Never connected to: the failure below is made up.
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let prober = Prober::new(Duration::from_secs(1), false, AllowedCidrs::default(), "test");
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let caches = Caches {
            providers: kube::runtime::reflector::store().0,
            leases: kube::runtime::reflector::store().0,
            secrets: cache::SecretCache::default(),
        };
        let (queues, _triggers) = cache::Queues::new(&metrics);
        let ctx = Arc::new(Context::new(
            client,
            caches,
            queues,
            prober,
            metrics,
            Duration::from_secs(60),
            "test",
            Arc::default(),
        ));
        let lease: crate::api::SandboxLease = serde_json::from_value(serde_json::json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
            "metadata": {"name": "run-42", "namespace": "team-a"},
            "spec": {"providerRef": {"name": "p", "driverKey": "k"}}
        }))
        .unwrap();
        let failed = || Error::CacheGone("SandboxProvider");
        let lease = Arc::new(lease);
        error_policy(lease.clone(), &failed(), ctx);
        let reference = Box::new(ObjectRef::from_obj(lease.as_ref()).erase());
        log_outcome::<crate::api::SandboxLease>(Err(controller::Error::ReconcilerFailed(failed(), reference))).await;

        let logs = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert_eq!(logs.lines().count(), 1, "{logs}");
        for part in ["WARN", "reconcile failed", "kind=\"SandboxLease\"", "name=run-42", "namespace=\"team-a\""] {
            assert!(logs.contains(part), "{part} in {logs}");
        }
        assert!(logs.contains("the SandboxProvider cache was dropped") && logs.contains("retry_in=1s"), "{logs}");
    }
}
