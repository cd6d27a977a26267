//! Leader election on a `coordination.k8s.io/v1` Lease, so that of any number of replicas only one
//! writes status. The lock itself is kube-lease-manager's: it takes a free or expired Lease by
//! server-side apply without force, so two candidates racing for it cannot both win.
//!
//! The holder renews before the Lease expires; when it dies, another replica takes over once the
//! Lease has expired (at most `duration` later). On shutdown the holder releases it, so a rolling
//! update hands over at once.

use std::convert::Infallible;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::Error;
pub use super::renewal::{Fence, RenewalClock};
use crate::metrics::Metrics;

const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Controllers that ran this long before they stopped had started well: the next try is not
/// held back by the backoff of earlier failures.
const RAN_WELL: Duration = Duration::from_secs(60);
/// A leader whose renewal failed tries again this soon (client-go's retry period is 2 s; a
/// renewal attempt here lasts at most 2 s itself).
const RENEW_RETRY: Duration = Duration::from_secs(1);

/// Which Lease, and who is asking.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub timing: Timing,
    /// Stamped by the election client's accepted writes ([`RenewalClock::layer`]); a term whose
    /// clock is never stamped lapses at once.
    pub clock: RenewalClock,
}

/// `duration`: how long a Lease stays valid after its last renewal; `grace`: how long before that
/// the holder renews; `renew_deadline`: how long after its last renewal the holder still writes.
/// Whole seconds, `0 < duration - grace < renew_deadline < duration`: the renewal is due before the
/// deadline, and the deadline passes before a standby may take the Lease.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub duration: Duration,
    pub grace: Duration,
    pub renew_deadline: Duration,
}

impl Default for Timing {
    /// As client-go's defaults (15 s, renew deadline 10 s, retry period 2 s): a dead holder is
    /// replaced within about 15 seconds. The holder renews 2 s after each renewal, so one slow or
    /// failed renewal (the election client gives up on one after 2 s, and tries again after
    /// [`RENEW_RETRY`]) leaves several more tries before the deadline stops the controllers.
    fn default() -> Self {
        Timing {
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(13),
            renew_deadline: Duration::from_secs(10),
        }
    }
}

impl Timing {
    fn check(&self) -> Result<(), Error> {
        let (duration, grace, deadline) = (self.duration, self.grace, self.renew_deadline);
        if grace.is_zero() || grace >= duration || duration - grace >= deadline || deadline >= duration {
            return Err(Error::LeaderElection(format!(
                "the lease timing must satisfy 0 < duration - grace < renew deadline < duration \
                 (duration {duration:?}, grace {grace:?}, renew deadline {deadline:?})"
            )));
        }
        Ok(())
    }
}

/// How one term of [`follow`] ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Shutdown,
    /// The election failed, or the Lease could not be renewed within the renew deadline.
    ElectionFailed,
    /// The controllers stopped by themselves (an error, a panic) after running this long: the
    /// replica stepped down, and tries again after a backoff.
    ControllersStopped(Duration),
}

/// Runs `lead` while this replica holds the Lease: it is started with a fresh token and the
/// term's [`Fence`] on every acquisition, and the token is cancelled (and `lead` awaited) when the
/// Lease is lost, when it was not renewed within the renew deadline, when the election itself
/// fails (the apiserver is unreachable: stepping down is the safe side), or on `shutdown`, after
/// which the Lease is released. When `lead` ends by itself, the replica steps down too (releases
/// the Lease so that a standby may try) and stands again after a backoff: the webhook in the same
/// process keeps serving, which exiting for a restart would not. Returns when `shutdown` is
/// cancelled.
pub async fn run_elected<F, Fut>(
    client: Client,
    election: Election,
    metrics: Metrics,
    shutdown: CancellationToken,
    lead: F,
) -> Result<(), Error>
where
    F: Fn(CancellationToken, Fence) -> Fut,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    election.timing.check()?;
    let (duration, grace) = (election.timing.duration.as_secs(), election.timing.grace.as_secs());
    let leases: Api<Lease> = Api::namespaced(client.clone(), &election.namespace);
    let mut retry = RETRY_MIN;
    loop {
        let built = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            built = LeaseManagerBuilder::new(client.clone(), &election.lease_name)
                .with_namespace(&election.namespace)
                .with_identity(&election.identity)
                .with_field_manager(format!("sandcap-leader-{}", election.identity))
                .with_duration(duration)
                .with_grace(grace)
                .build() => built,
        };
        match built {
            Ok(manager) => {
                match follow(&manager, report_holder(&leases, &election), &election, &metrics, &shutdown, &lead).await {
                    Ended::Shutdown => return Ok(()),
                    Ended::ElectionFailed => retry = RETRY_MIN,
                    Ended::ControllersStopped(ran) if ran >= RAN_WELL => retry = RETRY_MIN,
                    Ended::ControllersStopped(_) => {}
                }
            }
            Err(error) => tracing::warn!(%error, lease = %election.lease_name, "cannot set up leader election"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => retry = (retry * 2).min(RETRY_MAX),
        }
    }
}

/// A term: the controllers' task, its token, and `done`, cancelled when the task ends however it
/// ends (a panic included).
struct Term {
    token: CancellationToken,
    done: CancellationToken,
    started: Instant,
    handle: JoinHandle<Result<(), Error>>,
}

/// Follows one manager until shutdown, an election error, a renewal past the deadline or the
/// controllers' end, with `report` telling meanwhile who holds the Lease.
async fn follow<F, Fut>(
    manager: &LeaseManager,
    report: impl Future<Output = Infallible>,
    election: &Election,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    lead: &F,
) -> Ended
where
    F: Fn(CancellationToken, Fence) -> Fut,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let mut follower = Follower { election, metrics, shutdown, lead, term: None, renew_again: None };
    tokio::pin!(report);
    let ended = loop {
        let done = follower.term.as_ref().map(|t| t.done.clone());
        let (leading, renew_again) = (done.is_some(), follower.renew_again);
        let ended = tokio::select! {
            _ = shutdown.cancelled() => Some(Ended::Shutdown),
            never = &mut report => match never {},
            () = lapsed(election.clock.clone(), election.timing.renew_deadline), if leading => Some(follower.lapsed()),
            () = async { if let Some(done) = done { done.cancelled_owned().await } }, if leading => {
                Some(follower.controllers_ended().await)
            }
            () = async { if let Some(at) = renew_again { tokio::time::sleep_until(at).await } }, if renew_again.is_some() => {
                follower.renew_again = None;
                None
            }
            changed = manager.changed(), if renew_again.is_none() => follower.elected(changed).await,
        };
        if let Some(ended) = ended {
            break ended;
        }
    };
    log_stopped(follower.stop().await);
    // Soft release: only if this replica still holds it. Failing here only delays the next holder.
    if let Err(error) = manager.release().await {
        tracing::warn!(%error, "cannot release the leader lease; it will expire");
    }
    ended
}

/// A replica following one election: its term while it leads, and when it retries a failed
/// renewal. Each method is one transition of [`follow`]'s loop; those that end the loop return how.
struct Follower<'a, F> {
    election: &'a Election,
    metrics: &'a Metrics,
    shutdown: &'a CancellationToken,
    lead: &'a F,
    term: Option<Term>,
    /// After a failed renewal: when to try again (the renew deadline decides when to give up).
    renew_again: Option<Instant>,
}

impl<F, Fut> Follower<'_, F>
where
    F: Fn(CancellationToken, Fence) -> Fut,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    /// The election's answer: this replica leads (`Ok(true)`), does not, or cannot tell.
    async fn elected(&mut self, changed: Result<bool, impl std::fmt::Display>) -> Option<Ended> {
        match changed {
            Ok(true) => self.start(),
            Ok(false) => {
                tracing::warn!("lost the leader lease; stopping the controllers");
                log_stopped(self.stop().await);
            }
            // As client-go: a leader retries its renewal until the renew deadline (`lapsed`).
            Err(error) if self.term.is_some() => {
                tracing::warn!(%error, "cannot renew the leader lease; trying again until the renew deadline");
                self.renew_again = Some(Instant::now() + RENEW_RETRY);
            }
            Err(error) => {
                tracing::warn!(%error, "leader election failed; trying again after a backoff");
                return Some(Ended::ElectionFailed);
            }
        }
        None
    }

    /// Starts a term: the controllers with a fresh token and the term's fence.
    fn start(&mut self) {
        tracing::info!("acquired the leader lease; starting the controllers");
        self.metrics.leader.set(1);
        let token = self.shutdown.child_token();
        let fence = Fence::Lease {
            clock: self.election.clock.clone(),
            deadline: self.election.timing.renew_deadline,
            closed: token.clone(),
        };
        let done = CancellationToken::new();
        let guard = done.clone().drop_guard();
        let work = (self.lead)(token.clone(), fence);
        let handle = tokio::spawn(async move {
            let _guard = guard;
            work.await
        });
        self.term = Some(Term { token, done, started: Instant::now(), handle });
    }

    /// The Lease was not renewed within the renew deadline.
    fn lapsed(&self) -> Ended {
        tracing::error!(
            renew_deadline = ?self.election.timing.renew_deadline,
            "the leader lease was not renewed within the renew deadline; stopping the controllers before another replica may lead"
        );
        Ended::ElectionFailed
    }

    /// The controllers' task ended (by itself, unless the replica shuts down).
    async fn controllers_ended(&mut self) -> Ended {
        if self.shutdown.is_cancelled() {
            return Ended::Shutdown;
        }
        let ran = self.term.as_ref().map_or(Duration::ZERO, |t| t.started.elapsed());
        let outcome = self.stop().await;
        tracing::error!(
            outcome = %outcome.unwrap_or_else(|| "finished".into()),
            ran = ?ran,
            "the controllers stopped by themselves; stepping down from the leader lease, to stand again after a backoff"
        );
        Ended::ControllersStopped(ran)
    }

    /// Ends the term, if one runs: no longer the leader (at once, also for the fence), then the
    /// controllers are cancelled and awaited. Returns how they ended, if not well.
    async fn stop(&mut self) -> Option<String> {
        let term = self.term.take()?;
        self.metrics.leader.set(0);
        term.token.cancel();
        match term.handle.await {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(format!("error: {error}")),
            Err(error) => Some(format!("task failed: {error}")),
        }
    }
}

/// Resolves once `clock`'s last renewal is `deadline` old.
async fn lapsed(clock: RenewalClock, deadline: Duration) {
    loop {
        let Some(last) = clock.last() else { return };
        if last.elapsed() >= deadline {
            return;
        }
        tokio::time::sleep_until(last + deadline).await;
    }
}

/// Logs, while another replica holds the Lease, that this one waits for it and who holds it: once,
/// and again whenever the holder changes. kube-lease-manager keeps the holder to itself, so the
/// Lease is read once per lease duration (about as often as the manager itself reads it).
async fn report_holder(leases: &Api<Lease>, election: &Election) -> Infallible {
    let mut seen = None;
    let mut ticks = tokio::time::interval(election.timing.duration);
    loop {
        ticks.tick().await;
        // A failed read is the election's to report: it reads the same Lease.
        let Ok(lease) = leases.get_opt(&election.lease_name).await else { continue };
        let holder = lease.and_then(|l| l.spec).and_then(|spec| spec.holder_identity);
        if let Some(holder) = holder_to_report(&mut seen, holder, &election.identity) {
            tracing::info!(
                lease = %format_args!("{}/{}", election.namespace, election.lease_name),
                %holder,
                "waiting for the leader lease: another replica holds it and runs the controllers"
            );
        }
    }
}

/// The holder to report when the Lease is read as held by `holder`: another replica than
/// `identity`, and not the one last seen. A free Lease is taken at once, so there is nothing to say.
fn holder_to_report(seen: &mut Option<String>, holder: Option<String>, identity: &str) -> Option<String> {
    if *seen == holder {
        return None;
    }
    seen.clone_from(&holder);
    holder.filter(|h| h != identity)
}

fn log_stopped(outcome: Option<String>) {
    if let Some(outcome) = outcome {
        tracing::warn!(%outcome, "the controllers stopped with an error");
    }
}

#[cfg(test)]
mod tests;
