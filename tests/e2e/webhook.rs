//! The CRDs and the admission webhook through the real apiserver, and the differential test:
//! `sandcap validate` must give, for every object, the verdict and the message that the apiserver
//! gives with the webhook registered.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use sandcap::versions::ContractVersion;
use serde_json::{Value, json};

use crate::cluster::{Cluster, repo_root};
use crate::install::{self, Install, Sandcap, eventually, ok};
use crate::versions;

const WEBHOOK: &str = "validate.sandcap.dev";
pub const CORPUS_NAMESPACE: &str = "e2e-corpus";

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

/// What `sandcap validate -o json` says of every object in `file` under `contract` with the
/// settings of [`Sandcap::start`] (worker URLs on loopback allowed), for the cluster's minor (the
/// apiserver's message forms may differ between minors: `sandcap::schema::Server`).
fn validate(c: &Cluster, file: &std::path::Path, contract: ContractVersion) -> Vec<Value> {
    let flags = ["--contract", contract.as_str(), "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8"];
    validate_with(c, file, &flags)
}

fn validate_with(c: &Cluster, file: &std::path::Path, flags: &[&str]) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(["validate", "-o", "json", "--kubernetes-version", &c.bin.minor])
        .args(flags)
        .arg(file)
        .output()
        .expect("sandcap validate runs");
    assert!(output.status.code().is_some_and(|c| c <= 1), "sandcap validate {}: {output:?}", file.display());
    serde_json::from_slice(&output.stdout).expect("sandcap validate -o json prints JSON")
}

/// The corpus's objects as `sandcap validate` reads them, so the apiserver judges the same ones.
fn objects(file: &std::path::Path) -> Vec<Value> {
    sandcap::cli::load_objects(file).expect("corpus file")
}

fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"].as_str().expect("apiVersion").split_once('/').expect("group/version");
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().expect("kind"));
    let resource = ApiResource::from_gvk(&gvk);
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The apiserver's answer to a server-side dry-run create: `None` if allowed, else its message.
pub async fn apiserver_verdict(client: &Client, object: &Value) -> Option<String> {
    let api = api_for(client, object);
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("a Kubernetes object");
    match api.create(&PostParams { dry_run: true, ..Default::default() }, &object).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message.clone()),
        Err(other) => panic!("dry-run create failed without an answer: {other}"),
    }
}

/// The apiserver lists several schema errors in the order its validators produced them; compare
/// them as a set, and everything else exactly.
fn normalized(message: &str) -> String {
    match message.split_once(" is invalid: [") {
        Some((head, rest)) => {
            let mut causes: Vec<&str> = rest.trim_end_matches(']').split(", ").collect();
            causes.sort_unstable();
            format!("{head} is invalid: [{}]", causes.join(", "))
        }
        None => message.to_string(),
    }
}

/// What `kubectl apply` shows for a `sandcap validate` verdict: a webhook denial is wrapped by the
/// apiserver, a schema (layer 1) message is the apiserver's own.
fn as_the_apiserver_says(message: &str) -> String {
    if message.contains(".sandcap.dev \"") && message.contains(" is invalid: ") {
        message.to_string()
    } else {
        format!("admission webhook \"{WEBHOOK}\" denied the request: {message}")
    }
}

/// The differential test: every example and corpus object judged by the apiserver (a server-side
/// dry run, the webhook of sandcap under `contract` registered, the CRDs of `contract` installed)
/// and by `sandcap validate --contract`, which must agree on the verdict and the message. Returns
/// the apiserver's verdicts (`None`: admitted) by `<file name>:<object name>`.
pub async fn differential(c: &Cluster, admin: &Client, contract: ContractVersion) -> BTreeMap<String, Option<String>> {
    let root = repo_root();
    let mut files: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.push(root.join("tests/e2e/corpus/providers.yaml"));
    files.push(root.join("tests/e2e/corpus/leases.yaml"));
    let mut by_name = BTreeMap::new();
    let mut compared = 0;
    let mut disagreements = Vec::new();
    for file in &files {
        let verdicts = validate(c, file, contract);
        let objects = objects(file);
        assert_eq!(verdicts.len(), objects.len(), "{}: one verdict per object", file.display());
        for (object, verdict) in objects.iter().zip(&verdicts) {
            let mut object = object.clone();
            if object["kind"] == "SandboxLease" && object["metadata"]["namespace"].is_null() {
                object["metadata"]["namespace"] = json!("default");
            }
            let server = apiserver_verdict(admin, &object).await;
            let offline = match verdict["allowed"].as_bool() {
                Some(true) => None,
                _ => Some(as_the_apiserver_says(verdict["message"].as_str().unwrap_or_default())),
            };
            compared += 1;
            let name = format!(
                "{}:{}",
                file.file_name().unwrap().to_string_lossy(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            if server.as_deref().map(normalized) != offline.as_deref().map(normalized) {
                disagreements.push(format!("{name}:\n  apiserver:        {server:?}\n  sandcap validate: {offline:?}"));
            }
            by_name.insert(name, server);
        }
    }
    assert!(compared >= 50, "the corpus holds {compared} objects");
    assert!(
        disagreements.is_empty(),
        "contract {contract}: {} of {compared} disagree:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    by_name
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
    versions::the_keys_of_each_version(ContractVersion::V1, &verdicts);
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
