//! The operator half: two controllers, on one engine (`engine.rs`), that write the status
//! docs/contract.md ("Status") describes.
//!
//! - The provider controller probes each provider's worker (on a spec change and every probe
//!   interval) and publishes `SandboxProvider.status`: the verified methods and, per driver,
//!   verified ∩ declared. That status is the verified set: one probe per provider, not per lease.
//! - The lease controller resolves each `SandboxLease` with [`contract::resolve_lease`] against the
//!   provider's published status and the lease's `configFrom` Secrets. It is re-triggered by its
//!   provider's changes and by changes of a Secret it references, not by a full resync.
//!
//! Both end in one step, `publish.rs`: the status with the audit's `Valid` condition, replacing the
//! published one (one merge patch, field manager [`sandcap_core::vocabulary::FIELD_MANAGER`]) only when it
//! differs, and the Events of what turned. With leader election only the
//! holder of the `coordination.k8s.io/v1` Lease runs them.
//!
//! [`contract::resolve_lease`]: sandcap_core::contract::resolve_lease

mod audit;
pub mod cache;
mod cached;
mod capacity;
mod context;
mod engine;
mod error;
pub mod fenced;
#[cfg(test)]
pub(crate) mod fixtures;
mod known;
pub mod leader;
mod lease;
mod observe;
mod provider;
mod publish;
mod recorder;
mod renewal;
mod status;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use audit::Audits;
/// The form of a stored object the controllers judge, which `sandcap plan` judges too.
pub(crate) use audit::stored;
use cache::Triggers;
pub use cache::endpoints::{EndpointSlices, EndpointTrust};
pub use cache::{Caches, SecretScope};
use context::{Context, Stateful, Writes, reconciler, retry_delay};
pub use error::Error;
use lease::reconcile_lease;
pub use observe::ObserverOptions;
use provider::reconcile_provider;
/// The statuses the controllers write, for the tests of what reads them (`sandcap explain`).
#[cfg(test)]
pub(crate) use {lease::lease_status, provider::provider_status};

use crate::metrics::{KindLabels, Metrics};
use crate::probe::Prober;
use sandcap_core::judge::Options;
use sandcap_core::vocabulary::Kind;

/// Probes are slow I/O; a few at a time keeps a burst of new providers from piling up sockets.
const PROVIDER_CONCURRENCY: usize = 16;
/// Bounds the apiserver load when every lease is resolved at once (startup, leader change).
const LEASE_CONCURRENCY: usize = 32;

/// How the controllers run; `sandcap run` fills it from its flags.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    /// Which endpoints of a worker Service are probed.
    pub endpoint_trust: EndpointTrust,
    /// How long the controllers wait for the first list of every cache before they stop (and,
    /// behind leader election, step down to try again after a backoff).
    pub cache_sync_timeout: Duration,
    /// The rules this process's webhook runs with: the audit judges with them, the probe obeys
    /// the worker policy and the reconciles resolve under the contract version.
    pub rules: Options,
    pub leader_elect: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    /// This replica's leader identity (the pod name); also the probe's `instanceInfo.instanceId`.
    pub identity: String,
    /// Where leases may read `configFrom` Secrets; Secrets are watched only there, so the
    /// operator's RBAC can stay namespaced.
    pub secret_namespaces: SecretScope,
    /// The observer's, if it runs: it turns the workloads that providers bind into observed leases.
    pub observer: Option<ObserverOptions>,
}

/// Runs both controllers until `shutdown` is cancelled: behind leader election when
/// `options.leader_elect`, otherwise right away. Watch errors (an apiserver that goes away) are
/// retried with kube-runtime's default backoff; they never end the run.
pub async fn run(
    client: ControllersClient,
    election: ElectionClient,
    options: ControllerOptions,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    if !options.leader_elect {
        metrics.leader.set(1);
        let result = controllers(client, options, metrics.clone(), shutdown, leader::Fence::Open).await;
        metrics.leader.set(0);
        return result;
    }
    let ElectionClient { client: election_client, clock } = election;
    let election = leader::Election {
        lease_name: options.lease_name.clone(),
        namespace: options.lease_namespace.clone(),
        identity: options.identity.clone(),
        timing: leader::Timing::default(),
        clock,
    };
    let lead = {
        let metrics = metrics.clone();
        move |token, fence| controllers(client.clone(), options.clone(), metrics.clone(), token, fence)
    };
    leader::run_elected(election_client, election, metrics, shutdown, lead).await
}

/// The controllers' client, whose writes pass the fence of the term they run in
/// ([`fenced`]).
#[derive(Clone)]
pub struct ControllersClient {
    pub client: Client,
    pub fence: fenced::FenceCell,
}

/// The leader election's own client: its requests time out well within the renew deadline, and
/// its accepted writes stamp `clock` (see [`leader::RenewalClock`]).
#[derive(Clone)]
pub struct ElectionClient {
    pub client: Client,
    pub clock: leader::RenewalClock,
}

/// Both controllers, until `shutdown` is cancelled (they finish the reconciles in flight). They
/// start only once every cache is listed (see [`cache`]).
async fn controllers(
    client: ControllersClient,
    options: ControllerOptions,
    metrics: Metrics,
    shutdown: CancellationToken,
    fence: leader::Fence,
) -> Result<(), Error> {
    let (_term, client) = (client.fence.enter(fence.clone()), client.client);
    let prober = Prober::new(options.probe_timeout, options.rules.workers.clone(), &options.identity)?;
    let audits = Arc::new(Audits::new(options.rules.clone()));
    known::count_none(&metrics);
    let provider_table = Arc::new(cache::ProviderTable::new(&metrics));
    let forget = forgetting(provider_table.clone(), metrics.clone());
    // The watches end with the controllers, also when they stop for a lost leader lease.
    let watches = shutdown.child_token();
    let _stop_watches = watches.clone().drop_guard();
    let (caches, triggers) = Caches::start(
        &client,
        &options.secret_namespaces,
        forget,
        audits.clone(),
        &metrics,
        options.cache_sync_timeout,
        &watches,
    )
    .await?;
    if shutdown.is_cancelled() {
        return Ok(());
    }
    // Before the first provider reconcile, so that its `WorkloadsObserved` is right from the start.
    let served = served(&client, options.observer.is_some()).await;
    metrics.controllers_running.set(1);
    let _running = running(&metrics);
    let (events, publisher) =
        recorder::channel(client.clone(), &options.identity, metrics.events_dropped.clone(), fence.clone());
    let publishing = CancellationToken::new();
    let publisher = tokio::spawn(publisher.run(publishing.clone()));
    let writes = Writes { fence, events };
    let ctx = Context {
        client,
        caches: caches.clone(),
        prober,
        writes,
        metrics: metrics.clone(),
        probe_interval: options.probe_interval,
        endpoint_trust: options.endpoint_trust.clone(),
        contract: audits.contract(),
        audits,
        provider_table,
        served,
    };
    run_on(Arc::new(ctx), triggers, options.observer, shutdown).await;
    publishing.cancel();
    // A publisher that panicked only lost Events, which are counted as dropped.
    let _ = publisher.await;
    // Another replica, or the next run, counts from scratch.
    known::count_none(&metrics);
    tracing::info!("controllers stopped");
    Ok(())
}

/// What forgets a deleted provider (by uid and name): what is known of it, and its metrics' series.
fn forgetting(table: Arc<cache::ProviderTable>, metrics: Metrics) -> impl Fn(&str, &str) + Send + Sync + 'static {
    move |uid, name| {
        table.forget(uid);
        metrics.forget_provider(name);
    }
}

/// The observed kinds the apiserver serves, when the observer runs (`observed`).
async fn served(client: &Client, observed: bool) -> observe::Served {
    let served = if observed { observe::Served::observed() } else { observe::Served::default() };
    if served.on() {
        served.update(observe::discover(client).await);
    }
    served
}

/// Runs both controllers and the observer (when `observer` is set) on `ctx` until `shutdown`.
async fn run_on(ctx: Arc<Context>, triggers: Triggers, observer: Option<ObserverOptions>, shutdown: CancellationToken) {
    let observer = {
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        async move {
            if let Some(options) = observer {
                observe::run(ctx, options, shutdown).await
            }
        }
    };
    let caches = &ctx.caches;
    // Providers need no resync: each reconcile schedules the next probe.
    let providers = Controller { kind: Kind::SandboxProvider, concurrency: PROVIDER_CONCURRENCY, resync: None };
    let provider_controller =
        providers.run(&ctx, caches.providers.clone(), triggers.providers, reconcile_provider, shutdown.clone());
    let leases = Controller { kind: Kind::SandboxLease, concurrency: LEASE_CONCURRENCY, resync: Some(lease::RESYNC) };
    let lease_controller = leases.run(&ctx, caches.leases.clone(), triggers.leases, reconcile_lease, shutdown);
    tracing::info!(
        providers = caches.providers.state().len(),
        leases = caches.leases.count(),
        "caches listed; controllers started"
    );
    futures::join!(provider_controller, lease_controller, observer);
}

/// One kind's controller: its reconcile on the engine, wrapped as every reconcile is
/// ([`reconciler`], [`retry_delay`]).
struct Controller {
    kind: Kind,
    concurrency: usize,
    resync: Option<Duration>,
}

impl Controller {
    fn run<O, Fut>(
        self,
        ctx: &Arc<Context>,
        objects: O,
        triggers: UnboundedReceiver<(O::Key, engine::Cause)>,
        reconcile: impl Fn(Arc<O::Object>, Arc<Context>) -> Fut,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()>
    where
        O: engine::Objects,
        O::Object: Stateful,
        Fut: Future<Output = Result<engine::Next, Error>> + Send + 'static,
    {
        let depth = ctx.metrics.reconcile_queue.get_or_create(&KindLabels { kind: self.kind.as_str() }).clone();
        let settings = engine::Settings { concurrency: self.concurrency, resync: self.resync, depth };
        let triggers = cache::stream(triggers);
        engine::run(objects, triggers, settings, reconciler(reconcile), retry_delay, ctx.clone(), shutdown)
    }
}

/// Sets `sandcap_controllers_running` back to 0 however the controllers end.
fn running(metrics: &Metrics) -> impl Drop + use<> {
    struct Running(prometheus_client::metrics::gauge::Gauge);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.set(0);
        }
    }
    Running(metrics.controllers_running.clone())
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
        // With this one the only subscriber alive, tracing judges a callsite first hit on another
        // test's thread by that thread's subscriber alone (none: of no interest, for good), and
        // this test's lines lose their spans. A global one that takes nothing keeps two alive.
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
        });
        (lines, tracing::subscriber::set_default(subscriber))
    }

    #[tokio::test]
    async fn every_reconcile_is_counted() {
        let metrics = fixtures::metrics();
        let lease = Arc::new(cached::CachedLease::from(fixtures::lease("team-a", "l").of("p", "k").build()));
        let mut run = reconciler(|_lease: Arc<cached::CachedLease>, _ctx| async { Ok(engine::Next::Change) });
        run(lease, fixtures::context(&metrics).ctx).await.unwrap();
        assert_eq!(metrics.reconciles.get_or_create(&KindLabels { kind: "SandboxLease" }).get(), 1);
    }

    #[tokio::test]
    async fn every_line_a_reconcile_logs_names_its_object() {
        let (lines, _guard) = capture();
        let lease = Arc::new(cached::CachedLease::from(fixtures::lease("team-a", "run-42").of("p", "k").build()));
        let mut run = reconciler(|_lease: Arc<cached::CachedLease>, _ctx| async {
            tracing::warn!("a line with no field of the object");
            Ok(engine::Next::Change)
        });
        run(lease, fixtures::context(&fixtures::metrics()).ctx).await.unwrap();
        let logs = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert!(logs.contains(r#"reconcile{kind="SandboxLease" namespace="team-a" name=run-42}"#), "{logs}");
    }

    #[tokio::test]
    async fn a_failed_reconcile_is_logged_once_with_the_object_the_error_and_the_retry_delay() {
        let (lines, _guard) = capture();
        let ctx = fixtures::context(&fixtures::metrics()).ctx;
        let lease = cached::CachedLease::from(fixtures::lease("team-a", "run-42").of("p", "k").build());
        let failed = || Error::CacheGone("SandboxProvider");
        assert_eq!(retry_delay(Arc::new(lease), &failed(), ctx), Duration::from_secs(1));

        let logs = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert_eq!(logs.lines().count(), 1, "{logs}");
        for part in ["WARN", "reconcile failed", "kind=\"SandboxLease\"", "name=run-42", "namespace=\"team-a\""] {
            assert!(logs.contains(part), "{part} in {logs}");
        }
        assert!(logs.contains("the SandboxProvider cache was dropped") && logs.contains("retry_in=1s"), "{logs}");
    }
}
