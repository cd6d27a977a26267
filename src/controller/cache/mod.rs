//! The caches the controllers read, and the changes that re-trigger reconciles.
//!
//! Each kind has one cache, filled by one watch that runs in its own task, so a cache fills
//! whether or not a controller is polling anything. The controllers start only once every cache has
//! been listed ([`Caches::start`] returns then): a reconcile never waits for a cache, and a relation
//! (provider -> leases, Secret -> leases) is never computed from a half-filled one.
//!
//! Every trigger is a key sent on a channel (a provider's `ObjectRef`, a [`LeaseKey`]): the
//! controller looks the object up in the cache when it reconciles, so it always reads the newest
//! version.
//! - own changes: an object whose `metadata.generation` changed (status writes never trigger);
//! - provider -> leases: a provider whose `lease_view` changed, or that was deleted;
//! - Secret -> leases: a Secret whose data changed, that was deleted, or that lost its label.
//!
//! What changed, for whom, is decided in `changes.rs`; what each event then does to the relations,
//! the queues and what the controllers keep, in `events.rs`.
//!
//! Leases are kept in sandcap's own table (`leases.rs`), which also holds what each lease reads and
//! the index from each provider and Secret to its leases. Every table a watch fills follows one
//! protocol (`relist.rs`): what a re-list no longer holds was deleted during the gap, and is
//! forgotten.
//!
//! Every watch (these and the observer's) lists by a streaming list, or in pages where the
//! apiserver refuses those (`listing.rs`).

mod changes;
pub mod endpoints;
mod events;
mod index;
pub(super) mod leases;
pub(crate) mod listing;
mod names;
pub mod providers;
pub(crate) mod relist;
mod secrets;

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use super::audit::Audits;
use super::cached::CachedLease;
use super::engine::Cause;
use super::error::Error;
use super::known;
use crate::metrics::Metrics;
use events::{LeaseEvents, ProviderEvents, SecretEvents};
pub use leases::Leases;
pub use names::LeaseKey;
pub use providers::ProviderTable;
use sandcap_core::api::SandboxProvider;
use sandcap_core::vocabulary::{CONFIG_SOURCE_LABEL, Kind};
use secrets::keep_config_values;
pub use secrets::{SecretCache, SecretScope};

/// Read-only views of every cache.
#[derive(Clone)]
pub struct Caches {
    pub providers: Store<SandboxProvider>,
    /// Also which leases read which provider and Secret.
    pub leases: Leases,
    pub secrets: SecretCache,
    /// The serving endpoints of every Service (for `spec.worker.service` workers).
    pub endpoints: endpoints::Endpoints,
    /// Notified on every provider event (the observer's wake-up).
    pub providers_changed: Arc<Notify>,
    /// The provider controller's queue, for what re-triggers providers from outside the caches.
    pub provider_queue: Queue<SandboxProvider>,
}

/// What re-triggers reconciles, and why.
pub struct Triggers {
    pub providers: UnboundedReceiver<(ObjectRef<SandboxProvider>, Cause)>,
    pub leases: UnboundedReceiver<(LeaseKey, Cause)>,
}

/// An object the controllers queue, and the key it is queued by.
pub trait Queued {
    type Key: Hash + Eq + Clone + Send + Sync + 'static;
}

impl Queued for SandboxProvider {
    type Key = ObjectRef<SandboxProvider>;
}

impl Queued for CachedLease {
    type Key = LeaseKey;
}

/// Where the triggers of one kind go: to its controller's engine, which deduplicates them, runs
/// own changes first and counts what waits (`sandcap_reconcile_queue_depth`).
pub struct Queue<K: Queued> {
    tx: UnboundedSender<(K::Key, Cause)>,
}

impl<K: Queued> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Queue { tx: self.tx.clone() }
    }
}

impl<K: Queued> Queue<K> {
    pub(super) fn new() -> (Queue<K>, UnboundedReceiver<(K::Key, Cause)>) {
        let (tx, rx) = unbounded_channel();
        (Queue { tx }, rx)
    }

    /// Triggers `object` for a change of something it reads.
    pub(super) fn send(&self, object: K::Key) {
        self.trigger(object, Cause::Related);
    }

    /// Triggers `object` for a change of its own (new, or a new generation).
    pub(super) fn send_own(&self, object: K::Key) {
        self.trigger(object, Cause::Own);
    }

    fn trigger(&self, object: K::Key, cause: Cause) {
        // Only fails once the controller is gone, when nothing is left to trigger.
        let _ = self.tx.send((object, cause));
    }
}

/// The two controllers' queues.
#[derive(Clone)]
pub struct Queues {
    pub providers: Queue<SandboxProvider>,
    pub leases: Queue<CachedLease>,
}

impl Queues {
    /// Both queues, and the receiving ends the controllers read.
    pub(super) fn new() -> (Queues, Triggers) {
        let (providers, provider_rx) = Queue::new();
        let (leases, lease_rx) = Queue::new();
        (Queues { providers, leases }, Triggers { providers: provider_rx, leases: lease_rx })
    }
}

/// The labelled Secrets' cache: one watch of `scope`'s Secrets, or one per namespace.
fn secret_watches(
    client: &Client,
    scope: &SecretScope,
) -> (SecretCache, Vec<impl Stream<Item = watcher::Event<Secret>> + Send + use<>>) {
    // Pages of 16 Secrets where streaming lists are refused: a Secret may hold 1 MiB, and a page
    // is decoded whole before it is trimmed.
    let selector = watcher::Config::default().labels(&format!("{CONFIG_SOURCE_LABEL}=true")).page_size(16);
    let mut secrets = SecretCache::default();
    let mut watches = Vec::new();
    let apis: Vec<(Option<String>, Api<Secret>)> = match scope {
        SecretScope::All => vec![(None, Api::all(client.clone()))],
        SecretScope::Namespaces(namespaces) => {
            namespaces.iter().map(|ns| (Some(ns.clone()), Api::namespaced(client.clone(), ns))).collect()
        }
    };
    for (namespace, api) in apis {
        let (store, events) = watch(api, selector.clone(), keep_config_values);
        match namespace {
            Some(ns) => secrets.namespaced.insert(ns, store),
            None => secrets.all.replace(store),
        };
        watches.push(events);
    }
    (secrets, watches)
}

/// One watch of `api`, its events applied to a new cache before anything else sees them. `config`
/// is that of the paged lists, should the apiserver refuse streaming ones; `trim` takes from each
/// object what nothing reads.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (Store<K>, impl Stream<Item = watcher::Event<K>> + Send)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    (store, logged(listing::watch(api, config, &()).default_backoff().modify(trim).reflect(writer)))
}

/// The events of a watch, its errors logged: the watcher retries with backoff on its own.
pub(super) fn logged<K: Send>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
) -> impl Stream<Item = watcher::Event<K>> + Send {
    events
        .filter_map(|event| async move { event.map_err(|error| tracing::warn!(%error, "watch failed; retrying")).ok() })
}

/// Nothing reads `managedFields`, and they can be as large as the rest of the object.
fn drop_managed_fields<K: Resource>(obj: &mut K) {
    obj.managed_fields_mut().clear();
}

impl Caches {
    /// Starts every watch in its own task (until `shutdown`), waits until each has listed once
    /// (at most `list_deadline`), and returns the caches and the triggers of both controllers.
    /// `forget` is called with the uid and name of every deleted provider (watch gaps included); each lease
    /// whose new generation its watch brings is judged early on `audits`.
    pub async fn start(
        client: &Client,
        scope: &SecretScope,
        forget: impl Fn(&str, &str) + Send + Sync + 'static,
        audits: Arc<Audits>,
        metrics: &Metrics,
        list_deadline: Duration,
        shutdown: &CancellationToken,
    ) -> Result<(Caches, Triggers), Error> {
        let (queues, triggers) = Queues::new();
        let (providers, provider_events) =
            watch(Api::<SandboxProvider>::all(client.clone()), watcher::Config::default(), drop_managed_fields);
        // Where streaming lists are refused, kube's default paged list: pages of 500 of the latest
        // version (a list "from any version", `resourceVersion=0`, would be served whole from the
        // apiserver's cache, every lease in one response).
        let lease_events = logged(
            listing::watch(Api::<CachedLease>::all(client.clone()), watcher::Config::default(), &()).default_backoff(),
        );
        let (leases, lease_table) =
            leases::table(known::nonconforming(metrics, Kind::SandboxLease), known::Verdicts::of(metrics));
        let (secrets, secret_watches) = secret_watches(client, scope);
        // Slices hold up to 100 endpoints (1,000 at most) each: pages of 50.
        let slice_selector = watcher::Config::default().labels(endpoints::SERVICE_NAME_LABEL).page_size(50);
        let slice_events =
            logged(listing::watch(Api::<EndpointSlice>::all(client.clone()), slice_selector, &()).default_backoff());
        let (endpoints, mut slice_table) = endpoints::table();
        let providers_changed = Arc::new(Notify::new());
        let provider_queue = queues.providers.clone();
        let caches = Caches { providers, leases, secrets, endpoints, providers_changed, provider_queue };

        let (table, leases) = (&caches.leases, &queues.leases);
        let mut on_provider = ProviderEvents::new(queues.providers.clone(), leases.clone(), table.clone(), forget);
        let changed = caches.providers_changed.clone();
        spawn_until(shutdown, provider_events, move |event| {
            on_provider.handle(event);
            changed.notify_one();
        });
        let judge_early = {
            let table = table.clone();
            move |key: &LeaseKey| table.judge_early(key, &audits)
        };
        let mut on_lease = LeaseEvents::new(leases.clone(), lease_table, judge_early);
        spawn_until(shutdown, lease_events, move |event| on_lease.handle(event));
        let (providers, queue) = (caches.providers.clone(), queues.providers.clone());
        spawn_until(shutdown, slice_events, move |event| {
            for service in slice_table.apply(event) {
                workers_of(&providers, &service).for_each(|p| queue.send(p));
            }
        });
        for events in secret_watches {
            let mut on_secret = SecretEvents::new(leases.clone(), table.clone());
            spawn_until(shutdown, events, move |event| on_secret.handle(event));
        }

        caches.ready(list_deadline, shutdown).await?;
        Ok((caches, triggers))
    }

    async fn ready(&self, deadline: Duration, shutdown: &CancellationToken) -> Result<(), Error> {
        let all = async {
            self.providers.wait_until_ready().await.map_err(|_| Error::CacheGone("SandboxProvider"))?;
            self.leases.listed().await.then_some(()).ok_or(Error::CacheGone("SandboxLease"))?;
            self.endpoints.listed().await.then_some(()).ok_or(Error::CacheGone("EndpointSlice"))?;
            for store in self.secrets.stores() {
                store.wait_until_ready().await.map_err(|_| Error::CacheGone("Secret"))?;
            }
            Ok(())
        };
        tokio::select! {
            result = tokio::time::timeout(deadline, all) => result.map_err(|_| Error::ListDeadline(deadline))?,
            _ = shutdown.cancelled() => Ok(()),
        }
    }
}

/// The providers whose worker is `service`.
fn workers_of(
    providers: &Store<SandboxProvider>,
    service: &endpoints::ServiceKey,
) -> impl Iterator<Item = ObjectRef<SandboxProvider>> {
    let of = |p: &SandboxProvider| {
        p.spec.worker.service.as_ref().is_some_and(|s| s.namespace == service.0 && s.name == service.1)
    };
    providers.state().into_iter().filter(move |p| of(p)).map(|p| ObjectRef::from_obj(p.as_ref()))
}

/// Drives `events` in a task until `shutdown`, handing each to `handle`.
pub(super) fn spawn_until<K: Send + 'static>(
    shutdown: &CancellationToken,
    events: impl Stream<Item = watcher::Event<K>> + Send + 'static,
    mut handle: impl FnMut(watcher::Event<K>) + Send + 'static,
) {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events.take_until(shutdown.cancelled_owned()));
        while let Some(event) = events.next().await {
            handle(event);
        }
    });
}

/// The channel as a stream, for the engine.
pub fn stream<T: Send + 'static>(mut rx: UnboundedReceiver<T>) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
