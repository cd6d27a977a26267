//! The CRDs and the admission webhook through the real apiserver, and the differential test:
//! `sandcap validate` must give, for every object, the verdict and the message that the apiserver
//! gives with the webhook registered.

use std::sync::Arc;

use sandcap_core::versions::ContractVersion;
use serde_json::json;

use crate::harness::binary::Sandcap;
use crate::harness::cluster::{Cluster, repo_root};
use crate::harness::contracts::the_keys_of_each_version;
use crate::harness::differential::{
    CORPUS_NAMESPACE, apiserver_verdict, as_the_apiserver_says, differential, objects, validate, validate_with,
};
use crate::harness::install::{self, Install};
use crate::harness::waits::eventually;
use crate::support::ok;

pub async fn crds_are_served_with_their_names_columns_and_descriptions(c: Arc<Cluster>) {
    install::crds(&c);
    let resources = ok("api-resources", c.kubectl(&["api-resources", "--api-group", "sandcap.dev", "-o", "wide"]));
    for expected in
        ["sandboxproviders", "sbp", "false", "SandboxProvider", "sandboxleases", "sbl", "true", "SandboxLease"]
    {
        assert!(resources.contains(expected), "{expected} missing from:\n{resources}");
    }
    let columns = ok("get sbp", c.kubectl(&["get", "sbp", "-o", "wide"]));
    assert!(columns.is_empty() || columns.contains("PLUGIN"), "{columns}");
    // The apiserver publishes a new CRD's OpenAPI a moment after it is Established.
    eventually("kubectl explain", std::time::Duration::from_secs(60), || async {
        c.kubectl(&["explain", "sandboxproviders"]).status.success().then_some(())
    })
    .await;
    for (path, words) in [
        ("sandboxproviders", "SandboxProvider"),
        ("sandboxproviders.spec.pluginKey", "plugin"),
        ("sandboxproviders.spec.environmentDrivers.sandboxCapabilities", "reusableLeases"),
        ("sandboxleases.spec.policy", "ReuseByEnvironment"),
        ("sandboxleases.status.explanations.reason", "Granted"),
    ] {
        let explained = ok("explain", c.kubectl(&["explain", path]));
        assert!(explained.contains("DESCRIPTION"), "kubectl explain {path}:\n{explained}");
        assert!(explained.contains(words), "kubectl explain {path} does not mention {words}:\n{explained}");
        assert!(!explained.contains("Auto-generated derived type"), "kubectl explain {path}:\n{explained}");
    }
}

pub async fn denials_warnings_and_dry_run_through_the_apiserver(c: Arc<Cluster>) {
    install::crds(&c);
    install::namespaces(&c, &[CORPUS_NAMESPACE, "team-a"]);
    let install = Install::chart(&c, json!({})).await;
    let webhook = Sandcap::start(&c, &install, "webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    webhook.ready().await;
    let _registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);
    let admin = c.admin().await;
    let verdicts = differential(&c, &admin, ContractVersion::V1).await;
    the_keys_of_each_version(ContractVersion::V1, &verdicts);
    let root = repo_root();

    // Warnings reach kubectl, and a server-side dry run creates nothing.
    let corpus = root.join("tests/e2e/corpus/providers.yaml");
    let verdicts = validate(&c, &corpus, ContractVersion::V1);
    let mut warned = 0;
    for (object, verdict) in objects(&corpus).iter().zip(&verdicts) {
        let expected = verdict["warnings"].as_array().expect("warnings");
        if verdict["allowed"] != true || expected.is_empty() {
            continue;
        }
        warned += 1;
        let applied = c.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &object.to_string());
        let stderr = String::from_utf8_lossy(&applied.stderr);
        for warning in expected {
            let warning = warning.as_str().expect("string");
            assert!(stderr.contains(&format!("Warning: {warning}")), "kubectl does not show {warning:?}:\n{stderr}");
        }
        let name = object["metadata"]["name"].as_str().unwrap();
        let listed = ok("get sbp", c.kubectl(&["get", "sbp", "-o", "name"]));
        assert!(!listed.contains(name), "a dry run created {name}: {listed}");
    }
    assert!(warned >= 2, "the corpus has {warned} allowed objects with warnings");
    a_null_is_judged_per_client(&c, &objects(&corpus)[0]);

    // A removed key is refused whatever the field validation mode: never pruned silently.
    let removed = root.join("examples/provider-removed-key.yaml");
    for mode in ["strict", "warn", "ignore"] {
        let validate = format!("--validate={mode}");
        let applied = c.kubectl(&["apply", &validate, "-f", install::path_str(&removed)]);
        let stderr = String::from_utf8_lossy(&applied.stderr);
        assert!(!applied.status.success(), "--validate={mode} accepted a removed key");
        assert!(
            stderr.contains("concurrentSyncAndExec") && stderr.contains("removed from the contract"),
            "{mode}: {stderr}"
        );
    }

    // Immutable fields on UPDATE.
    let provider = objects(&root.join("tests/e2e/corpus/providers.yaml")).remove(0);
    let mut provider = provider.clone();
    provider["metadata"]["name"] = json!("e2e-immutable");
    install::apply(&c, &[provider.clone()]);
    provider["spec"]["pluginKey"] = json!("acme.other");
    let changed =
        c.kubectl_stdin(&["apply", "--server-side", "--field-manager", "e2e", "-f", "-"], &provider.to_string());
    let stderr = String::from_utf8_lossy(&changed.stderr);
    assert!(!changed.status.success() && stderr.contains("spec.pluginKey") && stderr.contains("immutable"), "{stderr}");
    ok("delete", c.kubectl(&["delete", "sbp", "e2e-immutable"]));
    assert!(webhook.problems().is_empty(), "{:?}", webhook.problems());
    drop(_registration);
    drop(webhook);

    // Without --allow-worker-urls (the chart's default) a worker URL is refused, as offline.
    let strict = Sandcap::start(
        &c,
        &install,
        "webhook-no-urls",
        &[("SANDCAP_WEBHOOK_ONLY", "true"), ("SANDCAP_ALLOW_WORKER_URLS", "false")],
    );
    strict.ready().await;
    let _registration = install.register_webhook(&c, strict.webhook_port, &c.ca.pem);
    let corpus = root.join("tests/e2e/corpus/providers.yaml");
    let offline = validate_with(&c, &corpus, &[]).remove(0);
    assert_eq!(offline["allowed"], false, "{offline}");
    assert!(offline["message"].as_str().unwrap().contains("--allow-worker-urls"), "{offline}");
    let server = apiserver_verdict(&admin, &objects(&corpus)[0]).await;
    assert_eq!(server, Some(as_the_apiserver_says(offline["message"].as_str().unwrap())));
}

/// A null member, per client, as `sandcap validate --client` says: `kubectl create` sends it and
/// the webhook refuses it; client-side `kubectl apply` drops it first, and admits.
fn a_null_is_judged_per_client(c: &Cluster, provider: &serde_json::Value) {
    let mut provider = provider.clone();
    provider["metadata"]["name"] = json!("e2e-null-capability");
    provider["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["nativeSyncIn"] = serde_json::Value::Null;
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().expect("a file");
    std::fs::write(file.path(), serde_json::to_string(&provider).expect("JSON")).expect("written");
    let urls = ["--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8"];
    for (client, verb) in [("create", "create"), ("apply", "apply")] {
        let verdict = validate_with(c, file.path(), &[&["--client", client][..], &urls].concat()).remove(0);
        let notes = verdict["notes"].as_array().cloned().unwrap_or_default();
        assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("nativeSyncIn"))), "{verdict}");
        let sent = c.kubectl(&[verb, "--dry-run=server", "-f", install::path_str(file.path())]);
        let stderr = String::from_utf8_lossy(&sent.stderr);
        if verdict["allowed"] == true {
            assert!(sent.status.success(), "validate --client {client} admits, kubectl {verb} refuses: {stderr}");
        } else {
            let message = as_the_apiserver_says(verdict["message"].as_str().expect("a message"));
            assert!(message.contains("null declares nothing"), "{verdict}");
            assert!(
                !sent.status.success() && stderr.contains(&message),
                "kubectl {verb}: {stderr}\nvalidate: {message}"
            );
        }
        assert_eq!(verdict["allowed"], client == "apply", "{client}: {verdict}");
    }
}
