//! examples/provider-paperclip-kubernetes.yaml against the host's own Kubernetes plugin: the
//! example is what `sandcap import` makes of the plugin's manifest (tests/host/plugins/, a
//! stand-in with the real plugin's identity, driver and declarations), and with the real
//! worker's methods sandcap grants nothing on its leases that the host's published resolver,
//! given the plugin's own manifest, does not. The same for the plugin as a change to reusable
//! leases would have it (`supportsReusableLeases: true`, the legacy form).

use serde_json::{Value, json};

use crate::{npm, sandcap, write};

const EXAMPLE: &str = "examples/provider-paperclip-kubernetes.yaml";
const MANIFEST: &str = "tests/host/plugins/kubernetes-0.2.0.json";
/// What the plugin's worker registers (its `supportedMethods`).
const WORKER_METHODS: [&str; 11] = [
    "health",
    "environmentValidateConfig",
    "environmentProbe",
    "environmentAcquireLease",
    "environmentResumeLease",
    "environmentReleaseLease",
    "environmentDestroyLease",
    "environmentRealizeWorkspace",
    "environmentExecute",
    "environmentSyncIn",
    "environmentSyncOut",
];
/// The leases the plugin makes: (policy, backend).
const LEASES: [(&str, &str); 3] =
    [("Ephemeral", "sandbox-cr"), ("ReuseByEnvironment", "sandbox-cr"), ("Ephemeral", "job")];

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example() -> Value {
    let text = std::fs::read_to_string(root().join(EXAMPLE)).expect("the example");
    serde_saphyr::from_str(&text).expect("the example is YAML")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join(MANIFEST)).expect("the manifest")).expect("JSON")
}

#[test]
fn the_example_is_what_import_makes_of_the_plugins_manifest() {
    let example = example();
    let output = sandcap(&[
        "import",
        MANIFEST,
        "--worker-service",
        "sandbox-system/paperclip-kubernetes-worker:8080",
        "--worker-path",
        "/rpc",
        "--name",
        "paperclip-kubernetes",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let imported: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&output.stdout)).expect("YAML");
    let mut spec = example["spec"].clone();
    spec.as_object_mut().expect("a spec").remove("workloads");
    assert_eq!(imported["spec"], spec, "the example's spec, but its workload bindings, is the manifest's");
    assert_eq!(imported["metadata"]["name"], example["metadata"]["name"]);
}

#[test]
fn the_example_grants_nothing_the_host_does_not_on_the_plugins_leases() {
    if npm::skipped() {
        return;
    }
    let host_driver = manifest()["environmentDrivers"][0].clone();
    let provider = example();
    let mut reusable = (provider.clone(), host_driver.clone());
    reusable.0["spec"]["environmentDrivers"][0]["supportsReusableLeases"] = json!(true);
    reusable.1["supportsReusableLeases"] = json!(true);
    let dir = tempfile::tempdir().unwrap();
    let known: Vec<&str> = WORKER_METHODS.into_iter().filter(|m| crate::methods().contains(m)).collect();
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (what, (provider, driver)) in [("as released", (provider, host_driver)), ("with reusable leases", reusable)] {
        let p = write(dir.path(), "provider.json", &provider.to_string());
        for contract in ["v1", "v2"] {
            for (policy, backend) in LEASES {
                let mut spec = json!({"providerRef": {"name": "paperclip-kubernetes", "driverKey": "kubernetes"},
                                      "policy": policy, "backend": backend});
                if policy != "Ephemeral" {
                    spec["environment"] = json!("env-1");
                }
                let lease = json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
                                   "metadata": {"name": "run", "namespace": "paperclip-acme"}, "spec": spec});
                let l = write(dir.path(), "lease.json", &lease.to_string());
                let args = ["resolve", "--provider", &p, "--lease", &l, "--contract", contract, "-o", "json"];
                let output = sandcap(&[&args[..], &["--worker-methods", &known.join(",")]].concat());
                assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
                ours.push((
                    format!("{what}, {contract}, {policy} {backend}"),
                    serde_json::from_slice::<Value>(&output.stdout).unwrap(),
                ));
                cases.push(json!({
                    "driver": driver, "pinnedPluginDeclaresDriver": true, "verifiedMethods": WORKER_METHODS,
                    "leasePolicy": if policy == "Ephemeral" { "ephemeral" } else { "reuse_by_environment" },
                    "leaseMetadata": {"backend": backend}, "configResolutionFailed": false,
                }));
            }
        }
    }
    let host = npm::host(&json!({"resolve": cases}));
    let mut granted = Vec::new();
    for ((what, ours), theirs) in ours.iter().zip(host["resolve"].as_array().expect("answers")) {
        assert!(theirs.get("error").is_none(), "{theirs}");
        for (key, grant) in ours["capabilities"].as_object().expect("capabilities") {
            let context = format!("{what}, {key}: host {}, sandcap {grant}", theirs[key]);
            assert!(theirs[key] == true || *grant != true, "sandcap grants what the host does not: {context}");
            if *grant == true {
                granted.push(context);
            }
        }
    }
    eprintln!("tests/host: the paperclip-kubernetes example grants, as the host does: {granted:#?}");
}
