use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kube::runtime::watcher;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use kube::ResourceExt;

use super::*;
use crate::controller::cache::{leases, stream};
use crate::controller::capacity::KEPT_CAPACITY;
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
    /// What each reconcile that does not fail asks for.
    next: Next,
}

impl Default for Fake {
    /// Every reconcile waits until the test lets it go on.
    fn default() -> Self {
        let (started, running, most, failed) = Default::default();
        Fake { started, running, most, gate: Semaphore::new(0), fails: 0, failed, next: Next::Change }
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
                let name = obj.name_any();
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
                Ok(fake.next)
            })
        }
    }
}

/// Settings of `concurrency` and `resync`, with a gauge of their own.
fn settings(concurrency: usize, resync: Option<Duration>) -> Settings {
    Settings { concurrency, resync, depth: Gauge::default() }
}

/// The loop over a cache of `names` with `fake`, and its trigger channel and shutdown.
fn start(
    names: &[&str],
    fake: &Arc<Fake>,
    settings: Settings,
    retry: Duration,
) -> (UnboundedSender<(LeaseKey, Cause)>, CancellationToken, JoinHandle<()>) {
    let (reader, mut writer) = leases::table(Default::default(), Default::default());
    writer.apply(watcher::Event::Init);
    for name in names {
        writer.apply(watcher::Event::InitApply(lease("team-a", name).build().into()));
    }
    writer.apply(watcher::Event::InitDone);
    let (tx, rx) = unbounded_channel();
    let shutdown = CancellationToken::new();
    let policy = move |_: Arc<CachedLease>, _: &Error, _: Arc<()>| retry;
    let run = tokio::spawn(run(reader, stream(rx), settings, fake.reconcile(), policy, Arc::new(()), shutdown.clone()));
    (tx, shutdown, run)
}

/// A trigger of lease `name` for a change of what it reads.
fn key(name: &str) -> (LeaseKey, Cause) {
    (LeaseKey::of(&lease("team-a", name).build().into()), Cause::Related)
}

/// A trigger of lease `name` for its own change.
fn own(name: &str) -> (LeaseKey, Cause) {
    (key(name).0, Cause::Own)
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
    let (tx, shutdown, run) = start(&["a", "b", "c"], &fake, settings(2, None), HOUR);
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
    let (tx, shutdown, run) = start(&["a"], &fake, settings(4, None), retry);
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
    let (tx, shutdown, run) = start(&["a"], &fake, settings(4, None), HOUR);
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
    let settings = settings(4, Some(Duration::from_millis(100)));
    let (_tx, shutdown, run) = start(&["a", "b"], &fake, settings, HOUR);
    until(|| fake.started().len() >= 2).await;
    let mut started = fake.started()[..2].to_vec();
    started.sort();
    assert_eq!(started, ["a", "b"]);
    shutdown.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_reconcile_that_asks_for_it_runs_again_after_the_time_it_names() {
    let after = Duration::from_millis(100);
    let fake = Arc::new(Fake { next: Next::After(after), gate: Semaphore::new(100), ..Fake::default() });
    let (tx, shutdown, run) = start(&["a"], &fake, settings(4, None), HOUR);
    let sent = Instant::now();
    tx.send(key("a")).unwrap();
    until(|| fake.started().len() == 3).await;
    assert!(sent.elapsed() >= 2 * after, "not before its time");
    shutdown.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn the_depth_gauge_counts_what_was_triggered_and_has_not_started() {
    let fake = Arc::new(Fake::default());
    let settings = settings(1, None);
    let depth = settings.depth.clone();
    let (tx, shutdown, run) = start(&["a", "b", "c"], &fake, settings, HOUR);
    for name in ["a", "b", "c", "b"] {
        tx.send(key(name)).unwrap();
    }
    until(|| fake.started().len() == 1 && depth.get() == 2).await;
    fake.gate.add_permits(1);
    until(|| fake.started().len() == 2 && depth.get() == 1).await;
    fake.gate.add_permits(2);
    until(|| fake.started().len() == 3 && depth.get() == 0).await;
    shutdown.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_drained_burst_gives_its_memory_back() {
    let mut state = State::new();
    for i in 0..4 * KEPT_CAPACITY {
        let cause = if i % 2 == 0 { Cause::Own } else { Cause::Related };
        state.trigger(format!("team-a/l-{i}"), cause);
    }
    assert!(state.waiting.capacity() > KEPT_CAPACITY / 2 && state.own.capacity() > KEPT_CAPACITY / 2);
    assert!(state.queued.capacity() > KEPT_CAPACITY);
    let mut ran = 0;
    while state.next().is_some() {
        ran += 1;
    }
    assert_eq!(ran, 4 * KEPT_CAPACITY);
    assert!(state.waiting.capacity() <= KEPT_CAPACITY && state.own.capacity() <= KEPT_CAPACITY);
    assert!(state.queued.capacity() <= KEPT_CAPACITY);
}

#[test]
fn own_changes_go_before_related_ones_and_nothing_runs_twice() {
    let mut state = State::new();
    for name in ["r1", "r2", "both", "r3"] {
        state.trigger(name, Cause::Related);
    }
    state.trigger("new", Cause::Own);
    // Queued for a related change, then changed itself: moved ahead, once.
    state.trigger("both", Cause::Own);
    state.trigger("both", Cause::Related);
    state.trigger("new", Cause::Related);
    assert_eq!(state.queued.len(), 5);
    let order: Vec<&str> = std::iter::from_fn(|| state.next()).collect();
    assert_eq!(order, ["new", "both", "r1", "r2", "r3"]);
    assert!(state.queued.is_empty());
}

#[test]
fn a_trigger_while_running_keeps_its_cause_for_the_next_run() {
    let mut state = State::new();
    state.running.insert("a");
    state.trigger("a", Cause::Related);
    state.trigger("a", Cause::Own);
    state.trigger("a", Cause::Related);
    assert_eq!(state.again.get("a"), Some(&Cause::Own));
}

#[tokio::test]
async fn a_new_lease_does_not_wait_behind_a_burst_of_related_triggers() {
    let names: Vec<String> = (0..200).map(|i| format!("l-{i}")).chain(["new".to_string()]).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let fake = Arc::new(Fake::default());
    let (tx, shutdown, run) = start(&names, &fake, settings(1, None), HOUR);
    // A provider's change: its 200 leases; the first starts and holds the only slot.
    for name in &names[..200] {
        tx.send(key(name)).unwrap();
    }
    until(|| fake.started().len() == 1).await;
    tx.send(own("new")).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    fake.gate.add_permits(1);
    until(|| fake.started().len() == 2).await;
    assert_eq!(fake.started()[1], "new", "the new lease ran next");
    fake.gate.add_permits(300);
    until(|| fake.started().len() == 201).await;
    shutdown.cancel();
    run.await.unwrap();
}
