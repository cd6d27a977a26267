//! What every reconcile shares, and what is done around every reconcile: metrics, the deadline
//! and the backoff after a failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::{Client, Resource, ResourceExt};

use super::audit::Audits;
use super::cache::Caches;
use super::engine::{Next, ReconcileFuture};
use super::error::Error;
use super::leader::Fence;
use super::provider::EndpointProbes;
use super::recorder::Events;
use super::status::kind_label;
use crate::metrics::{FailureLabels, KindLabels, Metrics};
use crate::probe::Prober;
use crate::versions::ContractVersion;

/// No reconcile may take longer (a probe has its own, shorter timeout): one that does fails and is
/// retried, so nothing can keep a controller's queue, or shutdown, waiting forever.
const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// After a write refused for a stale read: about the time the watch takes to bring the newer one.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// What a reconcile needs.
pub struct Context {
    pub client: Client,
    /// Every cache, listed before the first reconcile.
    pub caches: Caches,
    pub prober: Prober,
    /// The fence and the Event queue of this replica's term as leader.
    pub writes: Writes,
    pub metrics: Metrics,
    pub probe_interval: Duration,
    /// The contract version both reconciles resolve under.
    pub contract: ContractVersion,
    /// Failed reconciles in a row, by uid; an object's entry goes when it is deleted.
    failures: Arc<Mutex<HashMap<String, u32>>>,
    pub audits: Arc<Audits>,
    /// What each Service worker's endpoints last answered.
    pub endpoint_probes: Arc<EndpointProbes>,
}

/// What this replica writes through while it leads.
pub struct Writes {
    /// Whether this replica may write status now (see [`Fence`]).
    pub fence: Fence,
    /// Where reconciles leave their Events (`recorder.rs`).
    pub events: Events,
}

/// What the controllers keep of each object, by uid, until it is deleted (so an object deleted
/// and re-created starts afresh): its failed reconciles in a row, what the audit found and, of
/// a provider, what its worker's endpoints answered.
#[derive(Clone)]
pub struct PerObject {
    failures: Arc<Mutex<HashMap<String, u32>>>,
    pub audits: Arc<Audits>,
    endpoint_probes: Arc<EndpointProbes>,
}

impl PerObject {
    pub fn new(audits: Audits) -> PerObject {
        PerObject { failures: Arc::default(), audits: Arc::new(audits), endpoint_probes: Arc::default() }
    }

    /// The object with this uid was deleted.
    pub fn forget(&self, uid: &str) {
        self.failures.lock().expect("not poisoned").remove(uid);
        self.audits.forget(uid);
        self.endpoint_probes.forget(uid);
    }
}

impl Context {
    pub fn new(
        client: Client,
        caches: Caches,
        prober: Prober,
        metrics: Metrics,
        probe_interval: Duration,
        writes: Writes,
        per_object: PerObject,
    ) -> Context {
        Context {
            writes,
            client,
            caches,
            prober,
            metrics,
            probe_interval,
            contract: per_object.audits.contract(),
            failures: per_object.failures,
            audits: per_object.audits,
            endpoint_probes: per_object.endpoint_probes,
        }
    }

    /// Counts and times one reconcile, within [`RECONCILE_DEADLINE`]; a success forgets the
    /// object's earlier failures.
    async fn observe<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        work: impl Future<Output = Result<Next, Error>>,
    ) -> Result<Next, Error> {
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

/// `reconcile` as the engine runs it: counted, timed and bounded ([`Context::observe`]). Done
/// here, once, so no reconcile can forget it.
pub fn reconciler<K, Fut>(
    reconcile: impl Fn(Arc<K>, Arc<Context>) -> Fut,
) -> impl FnMut(Arc<K>, Arc<Context>) -> ReconcileFuture
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    move |obj, ctx| {
        let work = reconcile(obj.clone(), ctx.clone());
        Box::pin(async move { ctx.observe(obj.as_ref(), work).await })
    }
}

/// The backoff key: the uid, so an object deleted and re-created starts afresh.
fn key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    obj.meta().uid.clone().unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

/// A failed reconcile: counted, logged once, and retried after the returned delay.
pub fn retry_delay<K: Resource<DynamicType = ()>>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Duration {
    let kind = kind_label::<K>();
    ctx.metrics.reconcile_failures.get_or_create(&FailureLabels { kind, error: error.metric_label() }).inc();
    if matches!(error, Error::Conflict { .. } | Error::NotLeading) {
        // Not the object's fault: a stale read is soon fresh (the watch brings the version that
        // refused the write), and a replica that stepped down stops.
        tracing::debug!(kind, name = %obj.name_any(), namespace = obj.namespace(), %error, "reconcile again");
        return CONFLICT_RETRY;
    }
    let delay = ctx.backoff(obj.as_ref());
    tracing::warn!(kind, name = %obj.name_any(), namespace = obj.namespace(), %error, retry_in = ?delay, "reconcile failed");
    delay
}
