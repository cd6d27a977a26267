//! Contract versions through the real apiserver: the differential test under v2 (its CRDs, its
//! webhook and `sandcap validate --contract v2` agree on every object), and leases resolving the
//! nine keys of v2 with `sandcap run --contract v2` (the chart's `contract.version`).

use std::sync::Arc;

use sandcap_core::versions::ContractVersion::{self, V1, V2};
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::contracts::{
    ADDED_IN_V2, expected, lease_reasons, resolved_under, the_keys_of_each_version, values_of,
};
use crate::harness::differential::{CORPUS_NAMESPACE, differential};
use crate::harness::install::{self, Install};
use crate::harness::objects::delete;
use crate::support::{Worker, all_true, all_true_of, lease, ok, provider};

/// The CRDs of `version` applied and the chart rendered with its `contract.version` (so that
/// `sandcap run` gets `SANDCAP_CONTRACT` from the chart's Deployment, as a pod would).
async fn installed(c: &Cluster, version: ContractVersion) -> Install {
    install::crds_of(c, version);
    Install::chart(c, values_of(version)).await
}

pub async fn the_corpus_under_contract_v2(c: Arc<Cluster>) {
    let install = installed(&c, V2).await;
    install::namespaces(&c, &[CORPUS_NAMESPACE, "team-a"]);
    let webhook = Sandcap::start(&c, &install, "webhook-v2", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    webhook.ready().await;
    let registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);
    let verdicts = differential(&c, &c.admin().await, V2).await;
    the_keys_of_each_version(V2, &verdicts);
    assert!(webhook.problems().is_empty(), "{:?}", webhook.problems());
    drop(registration);
    install::crds(&c);
}

pub async fn leases_resolve_the_nine_keys_of_contract_v2(c: Arc<Cluster>) {
    const NS: &str = "e2e-nine";
    let install = installed(&c, V2).await;
    install::namespaces(&c, &[NS]);
    let worker = Worker::of_contract(V2);
    let v1_worker = Worker::of_contract(V1);
    let controllers = [("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_PROBE_INTERVAL", "2s")];
    let sandcap = Sandcap::start(&c, &install, "nine", &controllers);
    let admin = c.admin().await;
    let reuse = json!({"policy": "ReuseByEnvironment", "environment": "env-9"});
    let with = |extra: Value| {
        let mut spec = reuse.clone();
        spec.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        spec
    };
    install::apply(
        &c,
        &[
            provider("e2e-nine", &worker.url, all_true_of(V2)),
            // v1's six declared: the three keys of v2 are opt-in.
            provider("e2e-nine-six", &worker.url, all_true()),
            // A worker that serves v1's methods only verifies none of the two new ones.
            provider("e2e-nine-v1-worker", &v1_worker.url, all_true_of(V2)),
            lease(NS, "all", "e2e-nine", reuse.clone()),
            lease(NS, "job", "e2e-nine", with(json!({"backend": "job"}))),
            lease(NS, "bad-config", "e2e-nine", with(json!({"config": {"apiToken": "short"}}))),
            lease(NS, "six", "e2e-nine-six", reuse.clone()),
            lease(NS, "v1-worker", "e2e-nine-v1-worker", reuse.clone()),
        ],
    );

    let status = resolved_under(&admin, "SandboxProvider", None, "e2e-nine", V2).await;
    assert_eq!(status["drivers"][0]["capabilities"], all_true_of(V2), "{status:#}");
    let all = lease_reasons(&admin, NS, "all", V2, &expected(V2, &[])).await;
    assert_eq!(all["capabilities"], all_true_of(V2), "{all:#}");
    let sync = ["nativeSyncIn", "nativeSyncOut", "concurrentSyncOperations"];
    lease_reasons(&admin, NS, "job", V2, &expected(V2, &[(&sync, "NarrowedByJobBackend")])).await;
    let sessions = ["persistentProcessSessions", "incrementalSessionOutput", "duplexCommandStream"];
    lease_reasons(&admin, NS, "bad-config", V2, &expected(V2, &[(&sessions, "NarrowedByConfigResolution")])).await;
    lease_reasons(&admin, NS, "six", V2, &expected(V2, &[(&ADDED_IN_V2, "NotOptedIn")])).await;
    let unserved = ["duplexCommandStream", "runnerWebSocketIngress"];
    lease_reasons(&admin, NS, "v1-worker", V2, &expected(V2, &[(&unserved, "MissingWorkerMethods")])).await;

    // The columns of v2's keys and of the contract, shown with -o wide: the table the apiserver
    // serves kubectl, with each column's priority (1: -o wide only).
    let table = format!("/apis/sandcap.dev/v1alpha1/namespaces/{NS}/sandboxleases/all");
    let request = http::Request::get(table)
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .expect("a request");
    let table: Value = admin.request(request).await.expect("the lease as a table");
    let columns = table["columnDefinitions"].as_array().expect("columns");
    let cells = table["rows"][0]["cells"].as_array().expect("one row");
    for (name, cell) in
        [("ConcurrentSync", json!(true)), ("Duplex", json!(true)), ("Ingress", json!(true)), ("Contract", json!("v2"))]
    {
        let at =
            columns.iter().position(|c| c["name"] == name).unwrap_or_else(|| panic!("no column {name}: {table:#}"));
        assert_eq!((&columns[at]["priority"], &cells[at]), (&json!(1), &cell), "{name}: {table:#}");
    }

    assert!(sandcap.problems().is_empty(), "{:?}", sandcap.problems());
    drop(sandcap);
    ok("delete leases", c.kubectl(&["delete", "sbl", "-n", NS, "--all"]));
    for name in ["e2e-nine", "e2e-nine-six", "e2e-nine-v1-worker"] {
        delete(&admin, "SandboxProvider", None, name).await;
    }
    install::crds(&c);
}
