//! The one reconcile engine both controllers run on: a triggered object is reconciled at once, in
//! its own task.
//!
//! kube-runtime's `Controller` passes every trigger through a timer queue of millisecond ticks,
//! which delays each reconcile by up to two of them: a large part of what a host waits between
//! creating a lease and seeing it resolved. This loop hands a trigger to a task as soon as fewer
//! than `concurrency` run, with the guarantees the controller gave: never two reconciles of one
//! object at once (a trigger during one runs it again afterwards), a reconcile scheduled again
//! after the time it asks for ([`Next::After`]: a provider's next probe) or after the delay its
//! error policy returns, and reconciles in flight finished at shutdown. The optional safety net is
//! one pass over the cache, not a timer per object. The queue-depth gauge counts what waits here,
//! so it is kept where the waiting is.
//!
//! An object's own change (a new lease, a new generation: what a host waits for) goes before the
//! re-triggers of what it reads, the resync and the retries ([`Cause`]): a provider's change
//! re-triggers every lease of it, and a lease created meanwhile does not wait behind them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

use super::cache::{LeaseKey, Leases};
use super::cached::CachedLease;
use super::capacity::give_back;
use super::error::Error;

/// Why an object is triggered, which decides its place in the queue (the lesser goes first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The object itself changed (new, or a new generation): reconciled before any [`Cause::Related`].
    Own,
    /// Something it reads changed, or the resync, a retry or a scheduled reconcile came.
    Related,
}

/// What a successful reconcile asks of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing until the object, or something it reads, changes (or the resync comes).
    Change,
    /// Reconcile again after this long, unless a trigger comes first.
    After(Duration),
}

pub type ReconcileFuture = Pin<Box<dyn Future<Output = Result<Next, Error>> + Send>>;

/// A cache the engine reads its objects from when their turn comes, so a reconcile always reads
/// the newest version.
pub trait Objects: Clone + Send + 'static {
    type Key: Hash + Eq + Clone + Send + Sync + 'static;
    type Object: Send + Sync + 'static;
    fn get(&self, key: &Self::Key) -> Option<Arc<Self::Object>>;
    /// Every cached object's key (the resync's pass).
    fn keys(&self) -> Vec<Self::Key>;
}

impl Objects for Leases {
    type Key = LeaseKey;
    type Object = CachedLease;

    fn get(&self, key: &LeaseKey) -> Option<Arc<CachedLease>> {
        Leases::get(self, key)
    }

    fn keys(&self) -> Vec<LeaseKey> {
        Leases::keys(self)
    }
}

impl<K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static> Objects for Store<K> {
    type Key = ObjectRef<K>;
    type Object = K;

    fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        Store::get(self, key)
    }

    fn keys(&self) -> Vec<ObjectRef<K>> {
        self.state().iter().map(|obj| ObjectRef::from_obj(obj.as_ref())).collect()
    }
}

/// How one controller runs on the engine.
pub struct Settings {
    /// Reconciles at most at once.
    pub concurrency: usize,
    /// Every cached object is reconciled again this often, if set.
    pub resync: Option<Duration>,
    /// `sandcap_reconcile_queue_depth` of the kind: triggered and not yet started.
    pub depth: Gauge,
}

/// What is waiting, running and scheduled.
struct State<Q> {
    /// Triggered by their own change, in order.
    own: VecDeque<Q>,
    /// Triggered otherwise, in order. A key that its own change moved to `own` while it waited
    /// here stays behind, and is skipped when its turn comes (its cause in `queued` says `Own`,
    /// or it is no longer queued).
    waiting: VecDeque<Q>,
    /// What is queued, and for what.
    queued: HashMap<Q, Cause>,
    running: HashSet<Q>,
    /// Triggered while running: queued again, for that cause, once the reconcile ends.
    again: HashMap<Q, Cause>,
    scheduled: DelayQueue<Q>,
    schedule_keys: HashMap<Q, delay_queue::Key>,
}

impl<Q: Hash + Eq + Clone> State<Q> {
    fn new() -> Self {
        State {
            own: VecDeque::new(),
            waiting: VecDeque::new(),
            queued: HashMap::new(),
            running: HashSet::new(),
            again: HashMap::new(),
            scheduled: DelayQueue::new(),
            schedule_keys: HashMap::new(),
        }
    }

    fn trigger(&mut self, object: Q, cause: Cause) {
        if let Some(key) = self.schedule_keys.remove(&object) {
            self.scheduled.remove(&key);
        }
        if self.running.contains(&object) {
            let again = self.again.entry(object).or_insert(cause);
            *again = (*again).min(cause);
            return;
        }
        match (self.queued.get_mut(&object), cause) {
            (None, _) => {
                self.queued.insert(object.clone(), cause);
                self.queue(cause).push_back(object);
            }
            (Some(queued @ Cause::Related), Cause::Own) => {
                *queued = Cause::Own;
                self.own.push_back(object);
            }
            (Some(_), _) => {}
        }
    }

    fn queue(&mut self, cause: Cause) -> &mut VecDeque<Q> {
        match cause {
            Cause::Own => &mut self.own,
            Cause::Related => &mut self.waiting,
        }
    }

    /// The next object to reconcile, own changes first; `None` once nothing waits.
    fn next(&mut self) -> Option<Q> {
        while let Some(object) = self.own.pop_front() {
            if self.queued.remove(&object).is_some() {
                return Some(object);
            }
        }
        while let Some(object) = self.waiting.pop_front() {
            // Skipped if its own change queued it again in `own` (taken above), or already ran it.
            if self.queued.get(&object) == Some(&Cause::Related) {
                self.queued.remove(&object);
                return Some(object);
            }
        }
        self.drained();
        None
    }

    /// A burst of triggers has drained: its capacity goes back (see [`give_back`]).
    fn drained(&mut self) {
        give_back(&mut self.own);
        give_back(&mut self.waiting);
        give_back(&mut self.queued);
    }

    /// A reconcile of `object` ended: it runs again after `after` (if set), or at once if it was
    /// triggered meanwhile.
    fn finished(&mut self, object: Q, after: Option<Duration>) {
        self.running.remove(&object);
        if let Some(after) = after {
            self.schedule(object.clone(), after);
        }
        if let Some(cause) = self.again.remove(&object) {
            self.trigger(object, cause);
        }
    }

    /// `object` is triggered after `after`, unless it is triggered first.
    fn schedule(&mut self, object: Q, after: Duration) {
        let key = self.scheduled.insert(object.clone(), after);
        if let Some(old) = self.schedule_keys.insert(object, key) {
            self.scheduled.remove(&old);
        }
    }
}

/// Reconciles the objects `triggers` names (looked up in `objects` when their turn comes: a
/// deleted one is skipped) until `shutdown`; then lets the reconciles in flight finish.
pub async fn run<O: Objects, Ctx>(
    objects: O,
    triggers: impl Stream<Item = (O::Key, Cause)>,
    settings: Settings,
    mut reconcile: impl FnMut(Arc<O::Object>, Arc<Ctx>) -> ReconcileFuture,
    retry_delay: impl Fn(Arc<O::Object>, &Error, Arc<Ctx>) -> Duration,
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
) {
    let mut state = State::new();
    let mut triggers = std::pin::pin!(triggers.take_until(shutdown.clone().cancelled_owned()));
    let mut triggers_open = true;
    let mut in_flight = FuturesUnordered::new();
    let mut resync = settings.resync.map(|every| tokio::time::interval_at(tokio::time::Instant::now() + every, every));
    loop {
        while in_flight.len() < settings.concurrency.max(1) && !shutdown.is_cancelled() {
            let Some(object) = state.next() else { break };
            let Some(obj) = objects.get(&object) else { continue };
            state.running.insert(object.clone());
            let task = tokio::spawn(reconcile(obj.clone(), ctx.clone()));
            in_flight.push(async move { (object, obj, joined(task).await) });
        }
        settings.depth.set(state.queued.len() as i64);
        if shutdown.is_cancelled() {
            while in_flight.next().await.is_some() {}
            return;
        }
        tokio::select! {
            Some((object, obj, result)) = in_flight.next() => {
                let after = match &result {
                    Ok(Next::Change) => None,
                    Ok(Next::After(after)) => Some(*after),
                    Err(error) => Some(retry_delay(obj, error, ctx.clone())),
                };
                state.finished(object, after);
            }
            next = triggers.next(), if triggers_open => match next {
                Some((object, cause)) => state.trigger(object, cause),
                None => triggers_open = false,
            },
            Some(expired) = state.scheduled.next() => {
                let object = expired.into_inner();
                state.schedule_keys.remove(&object);
                state.trigger(object, Cause::Related);
            }
            _ = tick(&mut resync) => objects.keys().into_iter().for_each(|key| state.trigger(key, Cause::Related)),
            _ = shutdown.cancelled() => {}
        }
    }
}

/// What a spawned reconcile returned. A panic is the loop's, as it was kube-runtime's
/// controller's; a task is cancelled only when the runtime shuts down, and the loop with it.
async fn joined(task: tokio::task::JoinHandle<Result<Next, Error>>) -> Result<Next, Error> {
    match task.await {
        Ok(result) => result,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => std::future::pending().await,
        },
    }
}

/// The resync's next tick; never without one.
async fn tick(resync: &mut Option<tokio::time::Interval>) {
    match resync {
        Some(interval) => _ = interval.tick().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
