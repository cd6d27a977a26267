//! `sandcap validate`: one verdict per object, in the apiserver's forms, from every kind of input.

use serde_json::{Value, json};

use super::{sandcap, stderr, stdout, write};

#[test]
fn validate_examples_prints_one_verdict_per_object_and_exits_1_on_a_denial() {
    let o = sandcap(&[
        "validate",
        "examples/provider-full.yaml",
        "examples/provider-legacy.yaml",
        "examples/provider-removed-key.yaml",
        "examples/lease-reuse.yaml",
        "examples/lease-job.yaml",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let expected = "\
ALLOWED SandboxProvider/acme-kubernetes
ALLOWED SandboxProvider/legacy-vm
DENIED SandboxProvider/old-style: SandboxProvider.sandcap.dev \"old-style\" is invalid: spec.environmentDrivers[0].sandboxCapabilities: Invalid value: concurrentSyncAndExec was removed from the contract (concurrency is no longer declared): delete it
ALLOWED SandboxLease/run-42
ALLOWED SandboxLease/batch-7
";
    assert_eq!(stdout(&o), expected);
}

#[test]
fn validate_exits_0_when_everything_is_allowed_and_json_has_the_contract_shape() {
    let o = sandcap(&["validate", "-o", "json", "examples/provider-full.yaml", "examples/provider-removed-key.yaml"]);
    assert_eq!(o.status.code(), Some(1));
    let records: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        records[0],
        json!({"kind": "SandboxProvider", "name": "acme-kubernetes", "allowed": true, "message": "", "warnings": []})
    );
    assert_eq!(records[1]["allowed"], json!(false));
    assert!(records[1]["message"].as_str().unwrap().contains("concurrentSyncAndExec"));
    // The CRD rejects it, so the webhook (and its warnings) is never asked.
    assert_eq!(records[1]["warnings"], json!([]));

    let o = sandcap(&["validate", "examples/provider-full.yaml", "examples/lease-job.yaml"]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn validate_knows_the_message_forms_of_1_35_and_1_37_only() {
    let default = sandcap(&["validate", "examples/provider-removed-key.yaml"]);
    for minor in ["1.35", "1.37"] {
        let o = sandcap(&["validate", "--kubernetes-version", minor, "examples/provider-removed-key.yaml"]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&default), "1.35 and 1.37 write the same forms");
    }
    for minor in ["1.34", "1.36", "1.38", "v1.37"] {
        let o = sandcap(&["validate", "--kubernetes-version", minor, "examples/provider-removed-key.yaml"]);
        assert_eq!(o.status.code(), Some(2), "{minor}");
        assert!(stderr(&o).contains("the message forms are known for 1.35 and 1.37"), "{}", stderr(&o));
    }
}

#[test]
fn validate_reads_multi_document_yaml_json_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let provider = std::fs::read_to_string("examples/provider-legacy.yaml").unwrap();
    let lease = std::fs::read_to_string("examples/lease-job.yaml").unwrap();
    let multi = write(dir.path(), "multi.yaml", &format!("---\n{provider}\n---\n{lease}\n---\n"));
    let o = sandcap(&["validate", &multi]);
    assert_eq!(stdout(&o), "ALLOWED SandboxProvider/legacy-vm\nALLOWED SandboxLease/batch-7\n");

    let object: Value = serde_saphyr::from_str(&lease).unwrap();
    let json_file = write(dir.path(), "lease.json", &serde_json::to_string(&object).unwrap());
    assert_eq!(stdout(&sandcap(&["validate", &json_file])), "ALLOWED SandboxLease/batch-7\n");

    let list = json!({"apiVersion": "v1", "kind": "List", "items": [object.clone(), object]});
    let list_file = write(dir.path(), "list.json", &list.to_string());
    assert_eq!(
        stdout(&sandcap(&["validate", &list_file])),
        "ALLOWED SandboxLease/batch-7\nALLOWED SandboxLease/batch-7\n"
    );
}

#[test]
fn validate_denies_worker_urls_to_refused_addresses_unless_the_cidrs_allow_them() {
    let dir = tempfile::tempdir().unwrap();
    let provider = std::fs::read_to_string("examples/provider-legacy.yaml").unwrap();
    let mut object: Value = serde_saphyr::from_str(&provider).unwrap();
    object["spec"]["worker"] = json!({"url": "http://169.254.169.254/latest/meta-data/"});
    let metadata = write(dir.path(), "metadata.json", &object.to_string());
    let o = sandcap(&["validate", "--allow-worker-urls", &metadata]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).starts_with(
            "DENIED SandboxProvider/legacy-vm: spec.worker.url: host 169.254.169.254 is a refused address (cloud metadata)"
        ),
        "{}",
        stdout(&o)
    );
    let o =
        sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8,::1/128", &metadata]);
    assert_eq!(o.status.code(), Some(1), "loopback allowed, metadata still refused");
    object["spec"]["worker"] = json!({"url": "http://[64:ff9b::7f00:1]/"});
    let nat64 = write(dir.path(), "nat64.json", &object.to_string());
    let o = sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8", &nat64]);
    assert!(
        stdout(&o).starts_with(
            "DENIED SandboxProvider/legacy-vm: spec.worker.url: host [64:ff9b::7f00:1] is a refused address (loopback)"
        ),
        "the NAT64 gateway's loopback is not sandcap's: {}",
        stdout(&o)
    );
    let o =
        sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "169.254.169.254/32", &metadata]);
    assert_eq!(stdout(&o), "ALLOWED SandboxProvider/legacy-vm\n");
    let o = sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "localhost", &metadata]);
    assert_eq!(o.status.code(), Some(2), "a bad CIDR is a usage error: {o:?}");
    assert!(stderr(&o).contains("--worker-url-allowed-cidrs"), "{}", stderr(&o));
}
