//! The leader election's tests: its timing, what a standby reports, and each transition of
//! [`follow`]'s loop in paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus_client::registry::Registry;

use super::*;

#[test]
fn the_renewal_is_due_before_the_renew_deadline_and_the_deadline_before_the_lease_ends() {
    let secs = |duration, grace, renew_deadline| Timing {
        duration: Duration::from_secs(duration),
        grace: Duration::from_secs(grace),
        renew_deadline: Duration::from_secs(renew_deadline),
    };
    assert!(Timing::default().check().is_ok());
    for (timing, why) in [
        (secs(15, 5, 10), "renewed only at the deadline"),
        (secs(15, 8, 15), "a deadline as long as the Lease"),
        (secs(15, 0, 10), "no grace"),
        (secs(15, 15, 10), "a grace as long as the Lease"),
    ] {
        assert!(timing.check().is_err(), "{why}: {timing:?}");
    }
}

#[test]
fn a_standby_reports_the_holder_once_and_again_when_it_changes() {
    let mut seen = None;
    let mut read = |holder: Option<&str>| holder_to_report(&mut seen, holder.map(String::from), "me");
    assert_eq!(read(Some("pod-a")), Some("pod-a".into()));
    assert_eq!(read(Some("pod-a")), None, "the same holder is reported once");
    assert_eq!(read(Some("pod-b")), Some("pod-b".into()));
    assert_eq!(read(None), None, "a free Lease is taken at once");
    assert_eq!(read(Some("me")), None, "the leader logs that it acquired the Lease instead");
    assert_eq!(read(Some("me")), None);
    assert_eq!(read(Some("pod-b")), Some("pod-b".into()), "lost to pod-b: reported again");
}

fn election() -> Election {
    let (lease_name, namespace, identity) = ("sandcap-controller".into(), "sandcap-system".into(), "me".into());
    Election { lease_name, namespace, identity, timing: Timing::default(), clock: RenewalClock::default() }
}

/// A `lead` that counts its starts, and whose controllers run until cancelled, or end by
/// themselves after `ends_after` with an error.
fn lead(
    started: &Arc<AtomicUsize>,
    ends_after: Option<Duration>,
) -> impl Fn(CancellationToken, Fence) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send>> {
    let started = started.clone();
    move |token, _fence| {
        started.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match ends_after {
                Some(after) => tokio::select! {
                    () = token.cancelled() => Ok(()),
                    () = tokio::time::sleep(after) => Err(Error::LeaderElection("a controller failed".into())),
                },
                None => {
                    token.cancelled().await;
                    Ok(())
                }
            }
        })
    }
}

/// Runs `test` with a follower of `election()` holding `lead`, its metrics and shutdown token.
async fn with_follower<L, Fut>(lead: L, test: impl AsyncFnOnce(&mut Follower<'_, L>, &Metrics, &CancellationToken))
where
    L: Fn(CancellationToken, Fence) -> Fut,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let (election, metrics, shutdown) =
        (election(), Metrics::register(&mut Registry::default()), CancellationToken::new());
    let mut follower = Follower {
        election: &election,
        metrics: &metrics,
        shutdown: &shutdown,
        lead: &lead,
        term: None,
        renew_again: None,
    };
    test(&mut follower, &metrics, &shutdown).await;
}

#[tokio::test(start_paused = true)]
async fn a_won_election_starts_the_controllers_and_a_lost_one_stops_them() {
    let started = Arc::new(AtomicUsize::new(0));
    with_follower(lead(&started, None), async |follower, metrics, _| {
        assert_eq!(follower.elected(Ok::<_, String>(true)).await, None);
        assert_eq!((started.load(Ordering::SeqCst), metrics.leader.get()), (1, 1));
        let token = follower.term.as_ref().expect("a term").token.clone();
        assert_eq!(follower.elected(Ok::<_, String>(false)).await, None, "a lost Lease ends the term, not the loop");
        assert!(token.is_cancelled() && follower.term.is_none());
        assert_eq!(metrics.leader.get(), 0);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_retries_a_failed_renewal_and_a_candidate_stands_again_later() {
    let started = Arc::new(AtomicUsize::new(0));
    with_follower(lead(&started, None), async |follower, _, _| {
        assert_eq!(follower.elected(Err("connection refused")).await, Some(Ended::ElectionFailed));
        follower.elected(Ok::<_, String>(true)).await;
        assert_eq!(follower.elected(Err("connection refused")).await, None);
        assert_eq!(follower.renew_again, Some(Instant::now() + RENEW_RETRY));
        assert!(follower.term.is_some(), "the controllers run on until the renew deadline");
        assert_eq!(follower.lapsed(), Ended::ElectionFailed);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn controllers_that_end_by_themselves_step_down_saying_how_long_they_ran() {
    let started = Arc::new(AtomicUsize::new(0));
    with_follower(lead(&started, Some(Duration::from_secs(5))), async |follower, metrics, _| {
        follower.elected(Ok::<_, String>(true)).await;
        follower.term.as_ref().expect("a term").done.clone().cancelled_owned().await;
        assert_eq!(follower.controllers_ended().await, Ended::ControllersStopped(Duration::from_secs(5)));
        assert!(follower.term.is_none() && metrics.leader.get() == 0);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn controllers_ended_by_a_shutdown_end_the_loop_as_a_shutdown() {
    let started = Arc::new(AtomicUsize::new(0));
    with_follower(lead(&started, None), async |follower, _, shutdown| {
        follower.elected(Ok::<_, String>(true)).await;
        shutdown.cancel();
        follower.term.as_ref().expect("a term").done.clone().cancelled_owned().await;
        assert_eq!(follower.controllers_ended().await, Ended::Shutdown);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_renew_deadline_passes_a_deadline_after_the_last_renewal_and_at_once_without_one() {
    let clock = RenewalClock::default();
    let deadline = Timing::default().renew_deadline;
    tokio::time::timeout(Duration::ZERO, lapsed(clock.clone(), deadline)).await.expect("never renewed: lapsed at once");
    clock.record(Instant::now());
    let lapses = tokio::spawn(lapsed(clock.clone(), deadline));
    tokio::time::sleep(deadline - Duration::from_secs(3)).await;
    clock.record(Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!lapses.is_finished(), "a renewal moves the deadline");
    tokio::time::sleep(deadline).await;
    assert!(lapses.is_finished());
}
