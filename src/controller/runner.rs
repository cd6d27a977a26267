//! The lease controller's loop: a triggered lease is reconciled at once, in its own task.
//!
//! kube-runtime's `Controller` passes every trigger through a timer queue of millisecond ticks,
//! which delays each reconcile by up to two of them: a large part of what a host waits between
//! creating a lease and seeing it resolved. This loop hands a trigger to a task as soon as fewer
//! than `concurrency` run, with the guarantees the controller gave: never two reconciles of one
//! lease at once (a trigger during one runs it again afterwards), a failed one retried after
//! the delay its error policy returns, and reconciles in flight finished at shutdown. The hourly
//! safety net is one pass over the cache, not a timer per lease.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

use super::cache::{KEPT_CAPACITY, LeaseKey, Leases};
use super::cached::CachedLease;
use super::context::ReconcileFuture;
use super::error::Error;

/// How the loop runs.
pub struct Settings {
    /// Reconciles at most at once.
    pub concurrency: usize,
    /// Every cached object is reconciled again this often.
    pub resync: Duration,
}

/// What is waiting, running and retrying.
struct State<Q> {
    waiting: VecDeque<Q>,
    queued: HashSet<Q>,
    running: HashSet<Q>,
    /// Triggered while running: queued again once the reconcile ends.
    again: HashSet<Q>,
    retries: DelayQueue<Q>,
    retrying: HashMap<Q, delay_queue::Key>,
}

impl<Q: Hash + Eq + Clone> State<Q> {
    fn new() -> Self {
        State {
            waiting: VecDeque::new(),
            queued: HashSet::new(),
            running: HashSet::new(),
            again: HashSet::new(),
            retries: DelayQueue::new(),
            retrying: HashMap::new(),
        }
    }

    fn trigger(&mut self, object: Q) {
        if let Some(key) = self.retrying.remove(&object) {
            self.retries.remove(&key);
        }
        if self.running.contains(&object) {
            self.again.insert(object);
        } else if self.queued.insert(object.clone()) {
            self.waiting.push_back(object);
        }
    }

    /// A burst of triggers has drained: its capacity goes back (see [`KEPT_CAPACITY`]).
    fn drained(&mut self) {
        if self.waiting.is_empty() && self.waiting.capacity() > KEPT_CAPACITY {
            self.waiting.shrink_to_fit();
            self.queued.shrink_to_fit();
        }
    }

    fn retry(&mut self, object: Q, after: Duration) {
        let key = self.retries.insert(object.clone(), after);
        if let Some(old) = self.retrying.insert(object, key) {
            self.retries.remove(&old);
        }
    }
}

/// Reconciles the leases `triggers` names (looked up in `leases` when their turn comes: a deleted
/// one is skipped) until `shutdown`; then lets the reconciles in flight finish.
pub async fn run<Ctx>(
    leases: Leases,
    triggers: impl Stream<Item = LeaseKey>,
    settings: Settings,
    mut reconcile: impl FnMut(Arc<CachedLease>, Arc<Ctx>) -> ReconcileFuture,
    retry_delay: impl Fn(Arc<CachedLease>, &Error, Arc<Ctx>) -> Duration,
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
) {
    let mut state = State::new();
    let mut triggers = std::pin::pin!(triggers.take_until(shutdown.clone().cancelled_owned()));
    let mut triggers_open = true;
    let mut in_flight = FuturesUnordered::new();
    let mut resync = tokio::time::interval_at(tokio::time::Instant::now() + settings.resync, settings.resync);
    loop {
        while in_flight.len() < settings.concurrency.max(1) && !shutdown.is_cancelled() {
            let Some(object) = state.waiting.pop_front() else {
                state.drained();
                break;
            };
            state.queued.remove(&object);
            let Some(obj) = leases.get(&object) else { continue };
            state.running.insert(object.clone());
            let task = tokio::spawn(reconcile(obj.clone(), ctx.clone()));
            in_flight.push(async move {
                let result = match task.await {
                    Ok(result) => result,
                    // A panic is the loop's, as it was the controller's; a task is cancelled only
                    // when the runtime shuts down, and the loop with it.
                    Err(e) => match e.try_into_panic() {
                        Ok(panic) => std::panic::resume_unwind(panic),
                        Err(_) => std::future::pending().await,
                    },
                };
                (object, obj, result)
            });
        }
        if shutdown.is_cancelled() {
            while in_flight.next().await.is_some() {}
            return;
        }
        tokio::select! {
            Some((object, obj, result)) = in_flight.next() => {
                state.running.remove(&object);
                if let Err(error) = &result {
                    state.retry(object.clone(), retry_delay(obj, error, ctx.clone()));
                }
                if state.again.remove(&object) {
                    state.trigger(object);
                }
            }
            next = triggers.next(), if triggers_open => match next {
                Some(object) => state.trigger(object),
                None => triggers_open = false,
            },
            Some(expired) = state.retries.next() => {
                let object = expired.into_inner();
                state.retrying.remove(&object);
                state.trigger(object);
            }
            _ = resync.tick() => leases.keys().into_iter().for_each(|key| state.trigger(key)),
            _ = shutdown.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use kube::runtime::watcher;
    use tokio::sync::Semaphore;
    use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
    use tokio::task::JoinHandle;

    use kube::runtime::controller::Action;

    use super::*;
    use crate::controller::cache::{leases, stream};
    use crate::controller::fixtures::lease;

    /// A fake reconcile: it records which lease started, waits for a permit of `gate`, and fails
    /// the first `fails` times per lease.
    struct Fake {
        started: Mutex<Vec<String>>,
        running: AtomicUsize,
        most: AtomicUsize,
        gate: Semaphore,
        fails: usize,
        failed: Mutex<HashMap<String, usize>>,
    }

    impl Default for Fake {
        /// Every reconcile waits until the test lets it go on.
        fn default() -> Self {
            let (started, running, most, failed) = Default::default();
            Fake { started, running, most, gate: Semaphore::new(0), fails: 0, failed }
        }
    }

    impl Fake {
        fn started(&self) -> Vec<String> {
            self.started.lock().unwrap().clone()
        }

        fn reconcile(self: &Arc<Self>) -> impl FnMut(Arc<CachedLease>, Arc<()>) -> ReconcileFuture + use<> {
            let fake = self.clone();
            move |obj, _| {
                let fake = fake.clone();
                Box::pin(async move {
                    let name = obj.metadata.name.clone().unwrap();
                    fake.started.lock().unwrap().push(name.clone());
                    let now = fake.running.fetch_add(1, Ordering::SeqCst) + 1;
                    fake.most.fetch_max(now, Ordering::SeqCst);
                    fake.gate.acquire().await.unwrap().forget();
                    fake.running.fetch_sub(1, Ordering::SeqCst);
                    let mut failed = fake.failed.lock().unwrap();
                    let failed = failed.entry(name).or_default();
                    if *failed < fake.fails {
                        *failed += 1;
                        return Err(Error::Deadline(Duration::ZERO));
                    }
                    Ok(Action::await_change())
                })
            }
        }
    }

    /// The loop over a cache of `names` with `fake`, and its trigger channel and shutdown.
    fn start(
        names: &[&str],
        fake: &Arc<Fake>,
        settings: Settings,
        retry: Duration,
    ) -> (UnboundedSender<LeaseKey>, CancellationToken, JoinHandle<()>) {
        let (reader, mut writer) = leases::table(Default::default());
        writer.apply(watcher::Event::Init);
        for name in names {
            writer.apply(watcher::Event::InitApply(lease("team-a", name).build().into()));
        }
        writer.apply(watcher::Event::InitDone);
        let (tx, rx) = unbounded_channel();
        let shutdown = CancellationToken::new();
        let policy = move |_: Arc<CachedLease>, _: &Error, _: Arc<()>| retry;
        let run =
            tokio::spawn(run(reader, stream(rx), settings, fake.reconcile(), policy, Arc::new(()), shutdown.clone()));
        (tx, shutdown, run)
    }

    fn key(name: &str) -> LeaseKey {
        LeaseKey::of(&lease("team-a", name).build().into())
    }

    /// Waits until `done` holds (at most 10 s).
    async fn until(done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn each_trigger_is_reconciled_at_once_at_most_concurrency_at_a_time_and_none_twice_at_once() {
        let fake = Arc::new(Fake::default());
        let (tx, shutdown, run) = start(&["a", "b", "c"], &fake, Settings { concurrency: 2, resync: HOUR }, HOUR);
        for name in ["a", "b", "c", "c", "gone"] {
            tx.send(key(name)).unwrap();
        }
        until(|| fake.started().len() == 2).await;
        assert_eq!(fake.started(), ["a", "b"], "two at a time");
        tx.send(key("a")).unwrap(); // while `a` runs: once more afterwards
        tx.send(key("a")).unwrap();
        fake.gate.add_permits(2);
        until(|| fake.started().len() == 4).await;
        assert_eq!(fake.started(), ["a", "b", "c", "a"], "one `c` for two triggers; `gone` skipped");
        fake.gate.add_permits(2);
        until(|| fake.running.load(Ordering::SeqCst) == 0).await;
        assert_eq!(fake.most.load(Ordering::SeqCst), 2);
        assert_eq!(fake.started().len(), 4);
        shutdown.cancel();
        run.await.unwrap();
    }

    #[tokio::test]
    async fn a_failed_reconcile_is_retried_after_the_delay_its_policy_returns() {
        let fake = Arc::new(Fake { fails: 1, gate: Semaphore::new(100), ..Fake::default() });
        let retry = Duration::from_millis(100);
        let (tx, shutdown, run) = start(&["a"], &fake, Settings { concurrency: 4, resync: HOUR }, retry);
        let sent = Instant::now();
        tx.send(key("a")).unwrap();
        until(|| fake.started().len() == 2).await;
        assert!(sent.elapsed() >= retry, "not before its delay");
        shutdown.cancel();
        run.await.unwrap();
    }

    #[tokio::test]
    async fn shutdown_lets_the_reconciles_in_flight_finish() {
        let fake = Arc::new(Fake::default());
        let (tx, shutdown, run) = start(&["a"], &fake, Settings { concurrency: 4, resync: HOUR }, HOUR);
        tx.send(key("a")).unwrap();
        until(|| fake.started().len() == 1).await;
        shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!run.is_finished(), "waits for the reconcile in flight");
        fake.gate.add_permits(1);
        run.await.unwrap();
        assert_eq!(fake.running.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn every_cached_object_is_reconciled_again_each_resync() {
        let fake = Arc::new(Fake { gate: Semaphore::new(100), ..Fake::default() });
        let settings = Settings { concurrency: 4, resync: Duration::from_millis(100) };
        let (_tx, shutdown, run) = start(&["a", "b"], &fake, settings, HOUR);
        until(|| fake.started().len() >= 2).await;
        let mut started = fake.started()[..2].to_vec();
        started.sort();
        assert_eq!(started, ["a", "b"]);
        shutdown.cancel();
        run.await.unwrap();
    }

    #[tokio::test]
    async fn a_drained_burst_gives_its_memory_back() {
        let mut state = State::new();
        for i in 0..4 * KEPT_CAPACITY {
            state.trigger(format!("team-a/l-{i}"));
        }
        while let Some(object) = state.waiting.pop_front() {
            state.queued.remove(&object);
        }
        assert!(state.waiting.capacity() > KEPT_CAPACITY && state.queued.capacity() > KEPT_CAPACITY);
        state.drained();
        assert!(state.waiting.capacity() <= KEPT_CAPACITY && state.queued.capacity() <= KEPT_CAPACITY);
    }
}
