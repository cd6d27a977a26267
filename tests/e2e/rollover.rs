//! Rolling restarts as a cluster admin meets them with `failurePolicy: Fail`:
//! two `sandcap run` replicas (webhook and elected controllers, as the chart runs them) behind the
//! chart's webhook Service, the test's proxy playing kube-proxy (one replica per connection, in
//! turn), a client creating a SandboxLease every 50 ms, and pods replaced as a Deployment replaces
//! them: a new pod first, ready, then the old one deleted. A deleted pod still gets new connections
//! for [`LAG`], the time its removal from the Service takes to reach the apiserver, while the
//! kubelet runs its preStop hook, sends SIGTERM and waits up to the grace period: all read from the
//! rendered chart. The chart's own rollouts (its preStop, window and grace period, `kubectl
//! rollout restart` and a `helm upgrade`) run for real on the node (tests/node); these cover the
//! settings the node does not run (the drain window alone, and none) on every minor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::binary::Sandcap;
use crate::harness::cluster::{Cluster, tail};
use crate::harness::install::{self, Install, NAMESPACE};
use crate::harness::objects::{holder, resource};
use crate::harness::waits::eventually;
use crate::support::{Worker, all_true, lease, ok, provider};

/// How long after a pod's deletion the Service still sends it new connections.
const LAG: Duration = Duration::from_secs(3);
/// A lease is created this often while the pods roll.
const EVERY: Duration = Duration::from_millis(50);

/// The chart's settings without the preStop hook: the drain window alone must cover [`LAG`].
fn drain_window_only(seconds: u64) -> Value {
    json!({"shutdown": {"preStopSleepSeconds": 0, "drainWindowSeconds": seconds, "timeoutSeconds": 15 + seconds}})
}

/// The drain window alone, through two rolling restarts: nothing is refused, every lease resolves.
pub async fn rolling_restarts_refuse_nothing(c: Arc<Cluster>) {
    let run = Rollover::start(&c, "e2e-rollover", drain_window_only(5)).await;
    let report = run.roll(&Install::chart(&c, drain_window_only(5)).await).await;
    report.print(&c, "drain window 5 s, no preStop");
    report.assert_nothing_refused();
    run.every_lease_resolves(&report).await;
    run.clean_up().await;
}

/// The same without a drain window (sandcap before it had one): the deleted pod closes its port at
/// once while the Service still sends it new connections, which are refused, and so are the
/// apiserver's reviews on them (how many creates that refuses depends on when the apiserver
/// happens to open connections: printed, not asserted).
pub async fn without_a_drain_window_requests_are_refused(c: Arc<Cluster>) {
    let run = Rollover::start(&c, "e2e-rollover-none", drain_window_only(0)).await;
    let report = run.roll(&Install::chart(&c, drain_window_only(0)).await).await;
    report.print(&c, "no drain window, no preStop");
    assert!(report.probes_refused > 0, "every new connection to the Service reached a pod: {report:?}");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    run.clean_up().await;
}

/// One scenario's cluster objects, worker and pods.
struct Rollover {
    cluster: Arc<Cluster>,
    admin: Client,
    namespace: &'static str,
    /// The Service's address as the apiserver dials it, which the proxy routes.
    service: String,
    /// Each with the way its Deployment has it stopped.
    pods: tokio::sync::Mutex<Vec<(Sandcap, Termination)>>,
    _worker: Worker,
    _registration: install::WebhookRegistration,
}

/// What the creates met while the pods rolled.
#[derive(Debug, Default)]
struct Report {
    created: Vec<String>,
    /// The apiserver's `failed calling webhook` refusals.
    refused: Vec<String>,
    failed: Vec<String>,
    took: Duration,
    /// Connections the Service sent to a pod that no longer accepted any: the apiserver's and the
    /// probes'.
    unreachable: usize,
    /// New connections to the Service opened meanwhile, one every [`EVERY`], as more clients (or
    /// more apiservers) would: how many, and how many reached a closed port.
    probes: usize,
    probes_refused: usize,
    /// Deletion to exit, per deleted pod.
    stops: Vec<Duration>,
    /// SIGTERM to the leader lease released, for a deleted pod that held it.
    handovers: Vec<Duration>,
}

impl Report {
    fn print(&self, c: &Cluster, what: &str) {
        let seconds = |all: &[Duration]| all.iter().map(|d| format!("{:.1} s", d.as_secs_f64())).collect::<Vec<_>>();
        println!(
            "{} rollover ({what}): {} creates in {:.1} s, {} refused, {} failed otherwise; {} of {} new connections \
             refused; {} connections to a closed port in all; deletion to exit: {}; SIGTERM to the leader lease \
             released: {}",
            c.bin.minor,
            self.created.len() + self.refused.len() + self.failed.len(),
            self.took.as_secs_f64(),
            self.refused.len(),
            self.failed.len(),
            self.probes_refused,
            self.probes,
            self.unreachable,
            seconds(&self.stops).join(", "),
            seconds(&self.handovers).join(", ")
        );
        // Why, in the apiserver's words (the part after `failed to call webhook: `), for a few.
        for refusal in self.refused.iter().chain(&self.failed).take(3) {
            let why = refusal.split("failed to call webhook: ").nth(1).unwrap_or(refusal);
            println!("  {}", why.split(": InternalError").next().unwrap_or(why));
        }
    }

    fn assert_nothing_refused(&self) {
        assert!(self.refused.is_empty() && self.failed.is_empty(), "{self:?}");
        assert_eq!(self.unreachable, 0, "connections reached a closed port: {self:?}");
        assert!(self.created.len() > 100, "too few creates to tell: {self:?}");
    }
}

impl Rollover {
    /// The CRDs, a provider whose worker answers, the chart rendered with `values` and applied,
    /// and two pods of it ready behind the Service.
    async fn start(c: &Arc<Cluster>, namespace: &'static str, values: Value) -> Rollover {
        install::crds(c);
        let install = Install::chart(c, values).await;
        install::namespaces(c, &[namespace]);
        let worker = Worker::of_contract(ContractVersion::V1);
        install::apply(c, &[provider(namespace, &worker.url, all_true())]);
        let registration = install.release(c, &c.ca.pem);
        let service = install.service_address(c).await;
        // The ClusterIP may be one an earlier scenario's Service had.
        c.proxy.unroute(&service);
        let run = Rollover {
            cluster: c.clone(),
            admin: c.admin().await,
            namespace,
            service,
            pods: Default::default(),
            _worker: worker,
            _registration: registration,
        };
        for name in ["a", "b"] {
            run.start_pod(&install, name).await;
        }
        run
    }

    /// A pod of `install`'s Deployment, added to the Service once ready.
    async fn start_pod(&self, install: &Install, name: &str) {
        let pod = Sandcap::start(&self.cluster, install, &format!("{}-{name}", self.namespace), &[]);
        pod.ready().await;
        self.cluster.proxy.add_backend(&self.service, pod.webhook_port);
        self.pods.lock().await.push((pod, Termination::of(install)));
    }

    /// Replaces every pod with one of `next`'s, one at a time, while creating leases.
    async fn roll(&self, next: &Install) -> Report {
        let stop = CancellationToken::new();
        let creating = tokio::spawn(create_leases(self.admin.clone(), self.namespace, stop.clone()));
        let probing = tokio::spawn(probe(self.cluster.clone(), self.service.clone(), stop.clone()));
        let (started, unreachable) = (Instant::now(), self.cluster.proxy.unreachable());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (mut stops, mut handovers) = (Vec::new(), Vec::new());
        for name in ["c", "d"] {
            self.start_pod(next, name).await;
            let (old, termination) = self.pods.lock().await.remove(0);
            let (stop, handover) = self.delete_pod(old, &termination).await;
            stops.push(stop);
            handovers.extend(handover);
        }
        // The last deleted pod may still get connections until its removal has spread.
        tokio::time::sleep(LAG + Duration::from_secs(1)).await;
        stop.cancel();
        let mut report = creating.await.expect("the creates");
        report.took = started.elapsed();
        report.unreachable = self.cluster.proxy.unreachable() - unreachable;
        report.stops = stops;
        report.handovers = handovers;
        (report.probes, report.probes_refused) = probing.await.expect("the probes");
        report
    }

    /// Deletes a pod as Kubernetes does: its removal from the Service reaches the apiserver
    /// [`LAG`] later, while the kubelet runs the preStop sleep, sends SIGTERM and waits for the exit
    /// up to the grace period (after which it would kill it). Returns how long the pod took and,
    /// if it led, how long after SIGTERM it released the leader lease: at once, not after its drain
    /// window, so that a standby can take over meanwhile.
    async fn delete_pod(&self, mut pod: Sandcap, termination: &Termination) -> (Duration, Option<Duration>) {
        let deleted = Instant::now();
        self.cluster.proxy.remove_backend(&self.service, pod.webhook_port, LAG);
        tokio::time::sleep(termination.pre_stop).await;
        let name = pod.name.clone();
        let leads = || async { holder(&self.admin).await.as_ref() == Some(&name) };
        let led = leads().await;
        pod.signal(libc::SIGTERM);
        let signalled = Instant::now();
        let mut released = None;
        let status = loop {
            if led && released.is_none() && !leads().await {
                released = Some(signalled.elapsed());
            }
            if let Some(status) = pod.wait_exit(Duration::ZERO) {
                break status;
            }
            assert!(
                deleted.elapsed() < termination.grace,
                "{} still runs at the end of its grace period ({:?}): the kubelet would kill it\n{}",
                pod.name,
                termination.grace,
                tail(&pod.log, 20)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let exited = signalled.elapsed();
        assert!(status.success(), "{} exited with {status}\n{}", pod.name, tail(&pod.log, 20));
        assert!(pod.problems().is_empty(), "{}: {:?}", pod.name, pod.problems());
        if led {
            assert!(!leads().await, "{} still holds the leader lease after its exit", pod.name);
            let released = released.unwrap_or(exited);
            assert!(
                termination.window.is_zero() || released < termination.window,
                "{} released the leader lease {released:?} after SIGTERM, not within its drain window",
                pod.name
            );
        }
        (deleted.elapsed(), released)
    }

    /// Every lease created during the rollover gets `Resolved` True from whichever pod leads.
    async fn every_lease_resolves(&self, report: &Report) {
        let leases =
            Api::<DynamicObject>::namespaced_with(self.admin.clone(), self.namespace, &resource("SandboxLease"));
        let pending = || async {
            let list = leases.list(&ListParams::default()).await.ok()?;
            let resolved: std::collections::HashSet<String> = list
                .items
                .iter()
                .filter(|l| {
                    let l = serde_json::to_value(l).expect("JSON");
                    let conditions = l["status"]["conditions"].as_array().cloned().unwrap_or_default();
                    l["status"]["observedGeneration"] == l["metadata"]["generation"]
                        && conditions.iter().any(|c| c["type"] == "Resolved" && c["status"] == "True")
                })
                .filter_map(|l| l.metadata.name.clone())
                .collect();
            report.created.iter().all(|name| resolved.contains(name)).then_some(())
        };
        eventually("every lease created during the rollover to resolve", Duration::from_secs(90), pending).await;
    }

    async fn clean_up(self) {
        let ns = self.namespace;
        ok("delete leases", self.cluster.kubectl(&["delete", "sbl", "--all", "-n", ns, "--wait=false"]));
        ok("delete provider", self.cluster.kubectl(&["delete", "sbp", ns, "--wait=false"]));
        let release = ["delete", "-n", NAMESPACE, "deployment/sandcap", "pdb/sandcap", "service/sandcap-webhook"];
        ok("delete the release", self.cluster.kubectl(&[&release[..], &["--ignore-not-found"]].concat()));
        self.cluster.proxy.unroute(&self.service);
    }
}

/// How the kubelet stops a pod of a rendered Deployment, and the drain window it gives sandcap.
struct Termination {
    pre_stop: Duration,
    grace: Duration,
    window: Duration,
}

impl Termination {
    fn of(install: &Install) -> Termination {
        let pod = &install.of_kind("Deployment")["spec"]["template"]["spec"];
        let pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"].as_u64().unwrap_or(0);
        let grace = pod["terminationGracePeriodSeconds"].as_u64().expect("a grace period");
        let (_, window) =
            install.env("any").into_iter().find(|(k, _)| k == "SANDCAP_SHUTDOWN_DRAIN_WINDOW").expect("a window");
        let window = humantime::parse_duration(&window).expect("a duration");
        Termination { pre_stop: Duration::from_secs(pre_stop), grace: Duration::from_secs(grace), window }
    }
}

/// Opens a new connection to the Service every [`EVERY`] until `stop`: (opened, refused).
async fn probe(cluster: Arc<Cluster>, service: String, stop: CancellationToken) -> (usize, usize) {
    let mut ticks = tokio::time::interval(EVERY);
    let (mut opened, mut refused) = (0, 0);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stop.cancelled() => return (opened, refused),
        }
        opened += 1;
        refused += usize::from(!cluster.proxy.dial(&service).await);
    }
}

/// Creates a lease every [`EVERY`] (each on its own task, so a slow answer delays no other) until
/// `stop`, and sorts what the apiserver answered.
async fn create_leases(admin: Client, namespace: &'static str, stop: CancellationToken) -> Report {
    let api = Api::<DynamicObject>::namespaced_with(admin, namespace, &resource("SandboxLease"));
    let mut ticks = tokio::time::interval(EVERY);
    let mut creates = tokio::task::JoinSet::new();
    for i in 0.. {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stop.cancelled() => break,
        }
        let name = format!("lease-{i:04}");
        let object: DynamicObject =
            serde_json::from_value(lease(namespace, &name, namespace, json!({}))).expect("a lease");
        let api = api.clone();
        creates.spawn(async move { (name, api.create(&PostParams::default(), &object).await.map(|_| ())) });
    }
    let mut report = Report::default();
    while let Some(done) = creates.join_next().await {
        match done.expect("a create") {
            (name, Ok(())) => report.created.push(name),
            (name, Err(e)) if e.to_string().contains("failed calling webhook") => {
                report.refused.push(format!("{name}: {e}"));
            }
            (name, Err(e)) => report.failed.push(format!("{name}: {e}")),
        }
    }
    report
}
