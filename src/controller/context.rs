//! What every reconcile shares, and what is done around every reconcile: metrics, the deadline
//! and the backoff after a failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::{Client, Resource, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;
use tracing::Instrument;

use super::audit::{Audits, Finding, judged};
use super::cache::endpoints::EndpointTrust;
use super::cache::{Caches, ProviderTable};
use super::cached::CachedLease;
use super::engine::{Next, ReconcileFuture};
use super::error::Error;
use super::known::Known;
use super::leader::Fence;
use super::observe::Served;
use super::recorder::Events;
use super::status::kind_label;
use crate::metrics::{FailureLabels, KindLabels, Metrics};
use crate::probe::Prober;
use sandcap_core::api::SandboxProvider;
use sandcap_core::versions::ContractVersion;

/// No reconcile may take longer (a probe has its own, shorter timeout): one that does fails and is
/// retried, so nothing can keep a controller's queue, or shutdown, waiting forever.
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);
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
    /// Which endpoints of a worker Service are probed.
    pub endpoint_trust: EndpointTrust,
    /// The contract version both reconciles resolve under.
    pub contract: ContractVersion,
    pub audits: Arc<Audits>,
    /// What is known of each provider (of each lease: the lease table, in [`Caches`]).
    pub provider_table: Arc<ProviderTable>,
    /// Which workload kinds the apiserver serves (the observer's discovery).
    pub served: Served,
}

/// What this replica writes through while it leads.
pub struct Writes {
    /// Whether this replica may write status now (see [`Fence`]).
    pub fence: Fence,
    /// Where reconciles leave their Events (`recorder.rs`).
    pub events: Events,
}

impl Context {
    /// Counts and times one reconcile, within [`RECONCILE_DEADLINE`]; a success forgets the
    /// object's earlier failures.
    async fn observe<K: Stateful>(
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
            K::known(self, obj, |known, _| known.succeeded());
        }
        result
    }
}

/// An object whose table keeps what is known of it.
pub trait Stateful: Resource<DynamicType = ()> + Sized {
    /// Runs `f` on what `ctx` knows of `obj`, with its kind's gauge; `None` if its table no longer
    /// holds it (a lease deleted while it reconciled).
    fn known<R>(ctx: &Context, obj: &Self, f: impl FnOnce(&mut Known, &Gauge) -> R) -> Option<R>;
}

impl Stateful for SandboxProvider {
    fn known<R>(ctx: &Context, obj: &Self, f: impl FnOnce(&mut Known, &Gauge) -> R) -> Option<R> {
        let uid = obj.uid()?;
        Some(ctx.provider_table.with(&uid, |state, gauge| f(&mut state.known, gauge)))
    }
}

impl Stateful for CachedLease {
    fn known<R>(ctx: &Context, obj: &Self, f: impl FnOnce(&mut Known, &Gauge) -> R) -> Option<R> {
        ctx.caches.leases.known(obj, f)
    }
}

/// The finding of `obj`'s generation: remembered by its table, or judged now.
pub async fn finding<K: Stateful>(ctx: &Context, obj: &K, spec: &impl Serialize) -> Arc<Finding> {
    let generation = obj.meta().generation;
    let early = K::known(ctx, obj, |known, _| match known.finding(generation) {
        Some(found) => Ok(found),
        None => Err(known.take_early(generation)),
    });
    let early = match early {
        Some(Ok(found)) => return found,
        Some(Err(early)) => early,
        None => None,
    };
    let finding = judged(early.unwrap_or_else(|| ctx.audits.submit(obj, spec))).await;
    K::known(ctx, obj, |known, gauge| known.judged(generation, finding.clone(), gauge));
    finding
}

/// `reconcile` as the engine runs it: counted, timed and bounded ([`Context::observe`]). Done
/// here, once, so no reconcile can forget it.
pub fn reconciler<K, Fut>(
    reconcile: impl Fn(Arc<K>, Arc<Context>) -> Fut,
) -> impl FnMut(Arc<K>, Arc<Context>) -> ReconcileFuture
where
    K: Stateful + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    move |obj, ctx| {
        // Every line logged within the reconcile (its status write, its probe, its findings)
        // names its object, and a tracing layer sees one span per reconcile.
        let span = tracing::info_span!(
            "reconcile",
            kind = kind_label::<K>(),
            namespace = obj.namespace(),
            name = %obj.name_any()
        );
        let work = reconcile(obj.clone(), ctx.clone());
        Box::pin(async move { ctx.observe(obj.as_ref(), work).await }.instrument(span))
    }
}

/// A failed reconcile: counted, logged once, and retried after the returned delay.
pub fn retry_delay<K: Stateful>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Duration {
    let kind = kind_label::<K>();
    ctx.metrics.reconcile_failures.get_or_create(&FailureLabels { kind, error: error.metric_label() }).inc();
    if matches!(error, Error::Conflict { .. } | Error::NotLeading) {
        // Not the object's fault: a stale read is soon fresh (the watch brings the version that
        // refused the write), and a replica that stepped down stops.
        tracing::debug!(kind, name = %obj.name_any(), namespace = obj.namespace(), %error, "reconcile again");
        return CONFLICT_RETRY;
    }
    // An object its table no longer holds is gone (its retry finds nothing to reconcile): it
    // waits as after a first failure.
    let delay = K::known(&ctx, obj.as_ref(), |known, _| known.failed()).unwrap_or_else(|| Known::default().failed());
    tracing::warn!(kind, name = %obj.name_any(), namespace = obj.namespace(), %error, retry_in = ?delay, "reconcile failed");
    delay
}

#[cfg(test)]
mod tests;
