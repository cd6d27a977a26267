//! agent-sandbox's SandboxClaims as runs (docs/contract.md, "Claims"): with the extensions' CRD
//! installed, a binding of `kind: SandboxClaim` gives a labelled claim its lease, named as the
//! claim and owned by it; the Sandbox the claim controls gets none of its own, whatever its
//! labels; an unlabelled claim gets none; deleting the claim takes its lease. Run from the
//! workloads scenario, whose sandcap observes.

use std::time::Duration;

use kube::Client;
use serde_json::json;

use crate::harness::cluster::Cluster;
use crate::harness::install::{self, path_str};
use crate::harness::objects::get;
use crate::harness::waits::{WAIT, eventually};
use crate::support::workloads::{
    SANDBOX_CLAIM_API_VERSION, SANDBOX_CLAIM_CRD, bindings, observed_spec, run_labels, sandbox, sandbox_claim,
    sandbox_claim_crd,
};
use crate::support::{Worker, all_true, ok, provider};

const CLAIM: &str = "01JEF3KC0123456789ABCDEFGH";
const UNLABELLED: &str = "01JEF3KD0123456789ABCDEFGH";
/// The Sandbox the claim gets from its warm pool, under the pool's name.
const POOLED: &str = "agents-pool-x7k2p";

pub async fn a_claim_is_the_run(c: &Cluster, admin: &Client, worker: &Worker, ns: &str, name: &str) {
    ok(
        "install agent-sandbox's SandboxClaim CRD",
        c.kubectl(&["apply", "--server-side", "-f", path_str(&sandbox_claim_crd())]),
    );
    let established = r#"jsonpath={.status.conditions[?(@.type=="Established")].status}"#;
    eventually("the SandboxClaim CRD established", WAIT, || async {
        let said = c.kubectl(&["get", "crd", SANDBOX_CLAIM_CRD, "-o", established]);
        (String::from_utf8_lossy(&said.stdout) == "True").then_some(())
    })
    .await;
    let mut paperclip = provider(name, &worker.url, all_true());
    paperclip["spec"]["workloads"] = bindings(&["Job", "Sandbox", "SandboxClaim"]);
    install::apply(c, &[paperclip]);

    let (claim, labels) = run_labels(CLAIM);
    let (unlabelled, _) = run_labels(UNLABELLED);
    install::apply(
        c,
        &[sandbox_claim(ns, &claim, &labels, "agents-pool"), sandbox_claim(ns, &unlabelled, &json!({}), "agents-pool")],
    );
    let lease =
        eventually("the claim's lease", WAIT, || async { get(admin, "SandboxLease", Some(ns), &claim).await }).await;
    let stored = get(admin, "SandboxClaim", Some(ns), &claim).await.expect("the claim");
    assert_eq!(lease["spec"], observed_spec(name, "SandboxClaim", &claim), "{lease:#}");
    assert_eq!(lease["metadata"]["labels"]["sandcap.dev/observed-from"], "sandboxclaim", "{lease:#}");
    let owner = &lease["metadata"]["ownerReferences"][0];
    assert_eq!((&owner["kind"], &owner["uid"]), (&json!("SandboxClaim"), &stored["metadata"]["uid"]), "{lease:#}");

    // The Sandbox agent-sandbox adopts for the claim: the pool's name, controlled by the claim,
    // here even with the plugin's labels, which a Sandbox binding selects.
    let mut pooled = sandbox(ns, POOLED, &labels);
    pooled["metadata"]["ownerReferences"] = json!([{
        "apiVersion": SANDBOX_CLAIM_API_VERSION, "kind": "SandboxClaim", "name": claim,
        "uid": stored["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    }]);
    install::apply(c, &[pooled]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        get(admin, "SandboxLease", Some(ns), POOLED).await.is_none(),
        "the claim's Sandbox has no lease of its own"
    );
    assert!(get(admin, "SandboxLease", Some(ns), &unlabelled).await.is_none(), "an unlabelled claim has none");

    ok("delete the claim", c.kubectl(&["-n", ns, "delete", "sandboxclaim", &claim, "--wait=false"]));
    eventually("the claim's lease gone with it", WAIT, || async {
        get(admin, "SandboxLease", Some(ns), &claim).await.is_none().then_some(())
    })
    .await;
    println!("workloads: a SandboxClaim's lease came and went with the claim; its Sandbox had none");
    ok("clean up", c.kubectl(&["-n", ns, "delete", "sandbox", POOLED, "--wait=false"]));
    ok("clean up", c.kubectl(&["-n", ns, "delete", "sandboxclaim", "--all", "--wait=false"]));
    ok("clean up", c.kubectl(&["delete", "crd", SANDBOX_CLAIM_CRD, "--wait=false"]));
}
