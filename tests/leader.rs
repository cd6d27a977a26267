//! Leader election against the in-memory API: one holder at a time, handover on release and after
//! the holder dies. Lease duration 4s here (15s in production) so expiry happens within the test.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use sandcap::controller::leader::{Election, Timing, run_elected};
use sandcap::metrics::Metrics;
use support::{FakeApi, eventually, metrics};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

struct Candidate {
    shutdown: CancellationToken,
    leading: Arc<AtomicBool>,
    metrics: Metrics,
    task: JoinHandle<Result<(), sandcap::controller::Error>>,
}

/// A replica whose "controllers" only raise a flag while they run.
fn candidate(api: &FakeApi, identity: &str) -> Candidate {
    let election = Election {
        lease_name: "sandcap-controller".into(),
        namespace: "default".into(),
        identity: identity.into(),
        timing: Timing { duration: Duration::from_secs(4), grace: Duration::from_secs(2) },
    };
    let leading = Arc::new(AtomicBool::new(false));
    let flag = leading.clone();
    let lead = move |token: CancellationToken| {
        let flag = flag.clone();
        async move {
            flag.store(true, Ordering::SeqCst);
            token.cancelled().await;
            flag.store(false, Ordering::SeqCst);
            Ok(())
        }
    };
    let shutdown = CancellationToken::new();
    let (metrics, _) = metrics();
    let task = tokio::spawn(run_elected(api.client.clone(), election, metrics.clone(), shutdown.clone(), lead));
    Candidate { shutdown, leading, metrics, task }
}

impl Candidate {
    fn leads(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }
}

async fn holder(api: &FakeApi) -> Option<String> {
    let lease = Api::<Lease>::namespaced(api.client.clone(), "default").get("sandcap-controller").await.ok()?;
    lease.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_with_handover_on_release_and_on_death() {
    let api = FakeApi::new().await;
    let a = candidate(&api, "replica-a");
    eventually("the first candidate becomes leader", || async { a.leads() }).await;
    assert_eq!(a.metrics.leader.get(), 1);
    assert_eq!(holder(&api).await.as_deref(), Some("replica-a"));

    // While a renews, b waits: more than a lease duration passes without b leading.
    let b = candidate(&api, "replica-b");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.leads() && !b.leads());
    assert_eq!(b.metrics.leader.get(), 0);

    // a shuts down: it stops its controllers, releases the lease, and b takes over.
    a.shutdown.cancel();
    a.task.await.unwrap().unwrap();
    assert!(!a.leading.load(Ordering::SeqCst));
    assert_eq!(a.metrics.leader.get(), 0);
    eventually("b takes over the released lease", || async { b.leads() }).await;
    assert_eq!(holder(&api).await.as_deref(), Some("replica-b"));

    // b dies without releasing: c takes over once the lease has expired.
    b.task.abort();
    let c = candidate(&api, "replica-c");
    eventually("c takes over the expired lease", || async { c.leads() }).await;
    assert_eq!(holder(&api).await.as_deref(), Some("replica-c"));
    c.shutdown.cancel();
    c.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_impossible_timing_is_refused() {
    let api = FakeApi::new().await;
    let election = Election {
        lease_name: "l".into(),
        namespace: "default".into(),
        identity: "x".into(),
        timing: Timing { duration: Duration::from_secs(5), grace: Duration::from_secs(5) },
    };
    let result =
        run_elected(api.client.clone(), election, metrics().0, CancellationToken::new(), |_| async { Ok(()) }).await;
    assert!(result.unwrap_err().to_string().contains("shorter than its duration"));
}
