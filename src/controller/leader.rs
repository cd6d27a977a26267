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
use tokio_util::sync::CancellationToken;

use super::error::Error;
use crate::metrics::Metrics;

const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Which Lease, and who is asking.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub timing: Timing,
}

/// `duration`: how long a Lease stays valid after its last renewal; `grace`: how long before that
/// the holder renews. Whole seconds, `0 < grace < duration`.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub duration: Duration,
    pub grace: Duration,
}

impl Default for Timing {
    /// As kubebuilder's defaults: a dead holder is replaced within about 15 seconds.
    fn default() -> Self {
        Timing { duration: Duration::from_secs(15), grace: Duration::from_secs(5) }
    }
}

/// Runs `lead` while this replica holds the Lease: it is started with a fresh token on every
/// acquisition, and the token is cancelled (and `lead` awaited) when the Lease is lost, when the
/// election itself fails (the apiserver is unreachable: stepping down is the safe side), or on
/// `shutdown`, after which the Lease is released. Returns when `shutdown` is cancelled.
pub async fn run_elected<F, Fut>(
    client: Client,
    election: Election,
    metrics: Metrics,
    shutdown: CancellationToken,
    lead: F,
) -> Result<(), Error>
where
    F: Fn(CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let (duration, grace) = (election.timing.duration.as_secs(), election.timing.grace.as_secs());
    if grace == 0 || grace >= duration {
        return Err(Error::LeaderElection(format!(
            "the lease grace ({grace}s) must be at least 1s and shorter than its duration ({duration}s)"
        )));
    }
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
                if follow(&manager, report_holder(&leases, &election), &metrics, &shutdown, &lead).await {
                    return Ok(());
                }
                retry = RETRY_MIN;
            }
            Err(error) => tracing::warn!(%error, lease = %election.lease_name, "cannot set up leader election"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => retry = (retry * 2).min(RETRY_MAX),
        }
    }
}

/// Follows one manager until shutdown (returns true) or an election error (false), with `report`
/// telling meanwhile who holds the Lease.
async fn follow<F, Fut>(
    manager: &LeaseManager,
    report: impl Future<Output = Infallible>,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    lead: &F,
) -> bool
where
    F: Fn(CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let mut leading: Option<(CancellationToken, JoinHandle<Result<(), Error>>)> = None;
    tokio::pin!(report);
    let shut_down = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break true,
            never = &mut report => match never {},
            changed = manager.changed() => match changed {
                Ok(true) => {
                    tracing::info!("acquired the leader lease; starting the controllers");
                    metrics.leader.set(1);
                    let token = shutdown.child_token();
                    leading = Some((token.clone(), tokio::spawn(lead(token))));
                }
                Ok(false) => {
                    tracing::warn!("lost the leader lease; stopping the controllers");
                    stop(&mut leading, metrics).await;
                }
                Err(error) => {
                    tracing::warn!(%error, "leader election failed; stepping down until it works again");
                    break false;
                }
            },
        }
    };
    stop(&mut leading, metrics).await;
    // Soft release: only if this replica still holds it. Failing here only delays the next holder.
    if let Err(error) = manager.release().await {
        tracing::warn!(%error, "cannot release the leader lease; it will expire");
    }
    shut_down
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

async fn stop(leading: &mut Option<(CancellationToken, JoinHandle<Result<(), Error>>)>, metrics: &Metrics) {
    if let Some((token, handle)) = leading.take() {
        token.cancel();
        match handle.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the controllers stopped with an error"),
            Err(error) => tracing::error!(%error, "the controllers task failed"),
        }
        metrics.leader.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
