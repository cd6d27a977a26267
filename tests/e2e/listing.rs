//! How sandcap's caches list, seen in the apiserver's audit log: each watch asks for a streaming
//! list (`sendInitialEvents=true`) and makes no list request; with the apiserver's `WatchList`
//! feature gate off, each watch is refused once, says so once, lists in pages, and the leases
//! still resolve and follow their provider.

use std::sync::Arc;

use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install};
use crate::harness::objects::delete;
use crate::harness::waits::lease_reason;
use crate::support::{Worker, all_true, lease, provider, secret};

/// What the caches watch.
const RESOURCES: [&str; 3] = ["sandboxproviders", "sandboxleases", "secrets"];
/// sandcap's log line when a watch falls back.
const FALLBACK: &str = "the apiserver refuses streaming lists; this watch lists in pages from now on";

/// sandcap running on a provider and a lease reading a labelled Secret in `namespace` (its one
/// Secret namespace), the lease resolved; with the worker (which must outlive the scenario) and
/// where sandcap's requests start in the audit log.
async fn started(c: &Cluster, namespace: &str) -> (Sandcap, Worker, usize) {
    install::crds(c);
    let install = Install::chart(c, json!({"secretNamespaces": [namespace]})).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let from = json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    install::apply(
        c,
        &[
            provider(namespace, &worker.url, all_true()),
            secret(namespace, "creds", "config.json", r#"{"apiToken": "0123456789"}"#, true),
            lease(namespace, "lease", namespace, from),
        ],
    );
    let audited = c.audit().len();
    let sandcap = Sandcap::start(c, &install, namespace, &[("SANDCAP_CONTROLLERS_ONLY", "true")]);
    lease_reason(&c.admin().await, namespace, "lease", "incrementalSessionOutput", "Granted").await;
    (sandcap, worker, audited)
}

/// sandcap's requests for what its caches watch, since the audit log held `from` events: one
/// event each (a watch has one when its response starts and another when it completes).
fn cache_requests(c: &Cluster, from: usize) -> Vec<Value> {
    let by_sandcap = |e: &Value| e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"));
    let of_caches = |e: &Value| RESOURCES.iter().any(|r| e["objectRef"]["resource"] == *r);
    let mut seen = std::collections::HashSet::new();
    let events = c.audit().into_iter().skip(from).filter(|e| by_sandcap(e) && of_caches(e));
    events.filter(|e| seen.insert(e["auditID"].as_str().unwrap_or_default().to_string())).collect()
}

/// The requests of `verb` for `resource`, as `(requestURI, response code)`.
fn requests(all: &[Value], verb: &str, resource: &str) -> Vec<(String, i64)> {
    all.iter()
        .filter(|e| e["verb"] == verb && e["objectRef"]["resource"] == resource)
        .map(|e| {
            (e["requestURI"].as_str().unwrap_or_default().into(), e["responseStatus"]["code"].as_i64().unwrap_or(0))
        })
        .collect()
}

fn streaming(uri: &str) -> bool {
    uri.contains("sendInitialEvents=true")
}

/// `sandcap_api_requests_total{verb="list"}` of `resource`, as sandcap exports it (0 if absent).
async fn lists_counted(sandcap: &Sandcap, resource: &str) -> u64 {
    let name = format!("sandcap_api_requests_total{{verb=\"list\",resource=\"{resource}\"}}");
    crate::support::sample(&sandcap.metrics().await, &name).map_or(0, |n| n as u64)
}

pub async fn the_caches_ask_for_streaming_lists(c: Arc<Cluster>) {
    const NS: &str = "e2e-streaming";
    let (sandcap, _worker, from) = started(&c, NS).await;
    let all = cache_requests(&c, from);
    for resource in RESOURCES {
        let watches = requests(&all, "watch", resource);
        assert!(watches.iter().any(|(uri, _)| streaming(uri)), "no streaming list of {resource}: {watches:#?}");
        assert_eq!(requests(&all, "list", resource), [], "a list of {resource}");
        assert_eq!(lists_counted(&sandcap, resource).await, 0, "{resource}");
    }
    assert!(!sandcap.log_text().contains(FALLBACK), "{}", sandcap.log_text());
    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    delete(&c.admin().await, "SandboxProvider", None, NS).await;
}

/// The cluster's apiserver restarted with its `WatchList` feature gate off (beta on 1.35 and 1.37,
/// so it can be), until dropped: then restarted as the other scenarios have it.
struct WatchListOff<'a>(&'a Cluster);

impl<'a> WatchListOff<'a> {
    fn new(c: &'a Cluster) -> Self {
        c.stop_apiserver();
        c.start_apiserver_with(&["--feature-gates=WatchList=false"]);
        WatchListOff(c)
    }
}

impl Drop for WatchListOff<'_> {
    fn drop(&mut self) {
        self.0.stop_apiserver();
        self.0.start_apiserver();
    }
}

pub async fn without_watch_list_each_cache_lists_in_pages(c: Arc<Cluster>) {
    const NS: &str = "e2e-paged";
    let _gate = WatchListOff::new(&c);
    let (sandcap, worker, from) = started(&c, NS).await;

    let log = sandcap.log_text();
    for (kind, namespace) in [("SandboxProvider", None), ("SandboxLease", None), ("Secret", Some(NS))] {
        let said: Vec<&str> =
            log.lines().filter(|l| l.contains(FALLBACK) && l.contains(&format!("kind=\"{kind}\""))).collect();
        assert_eq!(said.len(), 1, "{kind}:\n{log}");
        let message = "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
        assert!(said[0].contains(" WARN ") && said[0].contains(message), "{}", said[0]);
        if let Some(ns) = namespace {
            assert!(said[0].contains(&format!("namespace=\"{ns}\"")), "{}", said[0]);
        }
    }
    let all = cache_requests(&c, from);
    for resource in RESOURCES {
        let refused: Vec<i64> =
            requests(&all, "watch", resource).into_iter().filter(|(uri, _)| streaming(uri)).map(|(_, c)| c).collect();
        assert_eq!(refused, [422], "{resource}: one streaming list, refused");
        let lists = requests(&all, "list", resource);
        // Secrets in pages of 16 (one may hold 1 MiB), the rest in kube's pages of 500.
        let page = if resource == "secrets" { "limit=16" } else { "limit=500" };
        assert!(lists.iter().any(|(uri, code)| uri.contains(page) && *code == 200), "{resource}: {lists:#?}");
        assert!(lists_counted(&sandcap, resource).await >= 1, "{resource}");
    }

    // The watches that follow the paged lists: a provider's change reaches its lease.
    let mut changed = provider(NS, &worker.url, all_true());
    changed["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["nativeSyncIn"] = json!(false);
    install::apply(&c, &[changed]);
    let admin = c.admin().await;
    lease_reason(&admin, NS, "lease", "nativeSyncIn", "DeclaredFalse").await;
    let log = sandcap.log_text();
    assert!(!log.contains("panicked"), "{log}");
    delete(&admin, "SandboxProvider", None, NS).await;
    // sandcap stops before the apiserver restarts as it was.
    drop(sandcap);
}
