//! The differential test: every example and corpus object judged by the apiserver (a server-side
//! dry run, sandcap's webhook registered) and by `sandcap validate`, which must agree on the
//! verdict and the message.

use std::collections::BTreeMap;
use std::process::Command;

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::cluster::{Cluster, repo_root};

const WEBHOOK: &str = "validate.sandcap.dev";
/// The namespace of the corpus's leases.
pub const CORPUS_NAMESPACE: &str = "e2e-corpus";

/// What `sandcap validate -o json` says of every object in `file` under `contract` with the
/// settings of [`crate::harness::binary::Sandcap::start`] (worker URLs on loopback allowed), for
/// the cluster's minor (the apiserver's message forms may differ between minors:
/// `sandcap_core::schema::Server`), of the request [`apiserver_verdict`] sends: the object as
/// written, nulls included (`--client create`).
pub fn validate(c: &Cluster, file: &std::path::Path, contract: ContractVersion) -> Vec<Value> {
    let flags = [
        "--contract",
        contract.as_str(),
        "--client",
        "create",
        "--allow-worker-urls",
        "--worker-url-allowed-cidrs",
        "127.0.0.0/8",
    ];
    validate_with(c, file, &flags)
}

/// `sandcap validate -o json` of `file` with `flags`.
pub fn validate_with(c: &Cluster, file: &std::path::Path, flags: &[&str]) -> Vec<Value> {
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
pub fn objects(file: &std::path::Path) -> Vec<Value> {
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
pub fn as_the_apiserver_says(message: &str) -> String {
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
