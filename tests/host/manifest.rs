//! Generated driver declarations through the host's manifest validator (pluginManifestV1Schema,
//! one driver in an otherwise valid manifest) and `sandcap validate` (a SandboxProvider wrapping
//! the driver), under `v1` and `v2`. Each driver is a valid one changed in one to three ways;
//! the table says what each side does with each change, and where the two disagree the change
//! responsible is the class of the disagreement (docs/contract.md, "Differences from the
//! host's published resolver"). A quarter of the drivers go through `sandcap import` too.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

use crate::{CASES_PER_SEED, Rng, SEEDS, npm, sandcap, write};

/// What a side does with a change: admits it, refuses it, or (sandcap) refuses it under `v1`
/// only.
#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    Admits,
    Refuses,
    RefusesUnderV1,
}
use Verdict::{Admits, Refuses, RefusesUnderV1};

struct Change {
    name: &'static str,
    /// What it changes: a driver gets at most one change of each.
    field: &'static str,
    host: Verdict,
    sandcap: Verdict,
    apply: fn(&mut Value, &mut Rng),
}

/// A field and a value of it.
type Field = (&'static str, fn() -> Value);
const HOST_ONLY_FIELDS: [Field; 6] = [
    ("supportsLoginPty", || json!(true)),
    ("supportsSetupTokenLogin", || json!(false)),
    ("supportsInteractiveSetup", || json!(true)),
    ("supportsTemplateCapture", || json!(true)),
    ("templateRefKind", || json!("snapshot")),
    ("interactiveSetupConnectionTypes", || json!(["browser"])),
];

/// The same fields, of values the host's schema refuses.
const HOST_ONLY_FIELDS_REFUSED: [Field; 8] = [
    ("supportsLoginPty", || json!("yes")),
    ("supportsTemplateDelete", || Value::Null),
    ("templateRefKind", || json!("")),
    ("interactiveSetupConnectionTypes", || json!([""])),
    ("templateIdentityPaths", || json!(vec!["a"; 21])),
    ("templateConfigBinding", || json!({"field": "provider"})),
    ("templateConfigBinding", || json!({"field": "a", "unsetFields": ["b", "a"]})),
    ("templateConfigBinding", || json!({"field": "a", "unset": ["b"]})),
];

fn any<T: Copy>(rng: &mut Rng, items: &[T]) -> T {
    items[(rng.next_u64() % items.len() as u64) as usize]
}

fn capability(driver: &mut Value, key: &str, value: Value) {
    if !driver["sandboxCapabilities"].is_object() {
        driver["sandboxCapabilities"] = json!({});
    }
    driver["sandboxCapabilities"][key] = value;
}

#[rustfmt::skip]
const CHANGES: &[Change] = &[
    Change { name: "a v1 key declared true or false", field: "caps", host: Admits, sandcap: Admits,
             apply: |d, r| { let k = any(r, &crate::v1_keys()); capability(d, k, json!(r.chance(0.5))) } },
    Change { name: "a key of v2 only", field: "caps", host: Admits, sandcap: RefusesUnderV1,
             apply: |d, r| { let k = any(r, &crate::v2_only_keys()); capability(d, k, json!(r.chance(0.5))) } },
    Change { name: "a capability declared null", field: "caps", host: Refuses, sandcap: Refuses,
             apply: |d, r| { let k = any(r, &crate::v1_keys()); capability(d, k, Value::Null) } },
    Change { name: "a capability declared as a string", field: "caps", host: Refuses, sandcap: Refuses,
             apply: |d, r| { let k = any(r, &crate::v1_keys()); capability(d, k, json!("true")) } },
    Change { name: "the removed concurrentSyncAndExec", field: "caps", host: Refuses, sandcap: Refuses,
             apply: |d, r| capability(d, "concurrentSyncAndExec", json!(r.chance(0.5))) },
    Change { name: "an unknown capability key", field: "caps", host: Refuses, sandcap: Refuses,
             apply: |d, _| capability(d, "reuseableLeases", json!(true)) },
    Change { name: "sandboxCapabilities empty", field: "caps", host: Admits, sandcap: Admits,
             apply: |d, _| if !d["sandboxCapabilities"].is_object() { d["sandboxCapabilities"] = json!({}) } },
    Change { name: "sandboxCapabilities null", field: "caps", host: Refuses, sandcap: Admits,
             apply: |d, _| d["sandboxCapabilities"] = Value::Null },
    Change { name: "supportsReusableLeases true or false", field: "legacy", host: Admits, sandcap: Admits,
             apply: |d, r| d["supportsReusableLeases"] = json!(r.chance(0.5)) },
    Change { name: "supportsReusableLeases null", field: "legacy", host: Refuses, sandcap: Admits,
             apply: |d, _| d["supportsReusableLeases"] = Value::Null },
    Change { name: "a driver field of the host's that sandcap does not model", field: "extra", host: Admits, sandcap: Refuses,
             apply: |d, r| { let (k, v) = any(r, &HOST_ONLY_FIELDS); d[k] = v() } },
    Change { name: "a driver field of the host's of a value it refuses", field: "extra", host: Refuses, sandcap: Refuses,
             apply: |d, r| { let (k, v) = any(r, &HOST_ONLY_FIELDS_REFUSED); d[k] = v() } },
    Change { name: "an unknown driver field", field: "extra", host: Refuses, sandcap: Refuses,
             apply: |d, _| d["supportsLoginPTY"] = json!(true) },
    Change { name: "no configSchema", field: "configSchema", host: Refuses, sandcap: Admits,
             apply: |d, _| { d.as_object_mut().unwrap().remove("configSchema"); } },
    Change { name: "a configSchema without type, $ref or a composition keyword", field: "configSchema", host: Refuses, sandcap: Admits,
             apply: |d, _| d["configSchema"] = json!({"properties": {"a": {"type": "string"}}}) },
    Change { name: "an empty configSchema", field: "configSchema", host: Admits, sandcap: Admits,
             apply: |d, _| d["configSchema"] = json!({}) },
    Change { name: "a configSchema that does not compile", field: "configSchema", host: Admits, sandcap: Refuses,
             apply: |d, _| d["configSchema"] = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}) },
    Change { name: "no displayName", field: "displayName", host: Refuses, sandcap: Admits,
             apply: |d, _| { d.as_object_mut().unwrap().remove("displayName"); } },
    Change { name: "a displayName over 100 characters", field: "displayName", host: Refuses, sandcap: Refuses,
             apply: |d, _| d["displayName"] = json!("K".repeat(101)) },
    Change { name: "a description over 500 characters", field: "description", host: Refuses, sandcap: Refuses,
             apply: |d, _| d["description"] = json!("d".repeat(501)) },
    Change { name: "a driverKey with capitals", field: "driverKey", host: Refuses, sandcap: Refuses,
             apply: |d, _| d["driverKey"] = json!("Kube") },
    Change { name: "kind omitted", field: "kind", host: Admits, sandcap: Admits,
             apply: |d, _| { d.as_object_mut().unwrap().remove("kind"); } },
    Change { name: "an unknown kind", field: "kind", host: Refuses, sandcap: Refuses,
             apply: |d, _| d["kind"] = json!("plugin") },
];

/// Each seed's drivers: a valid one changed in one to three ways, by the changes' indices.
fn generated() -> Vec<(Value, Vec<usize>)> {
    let mut drivers = Vec::new();
    for seed in SEEDS {
        let mut rng = Rng::new(seed ^ 0xD21E);
        for _ in 0..CASES_PER_SEED {
            let mut driver = json!({"driverKey": "k", "kind": "sandbox_provider", "displayName": "K",
                                    "configSchema": {"type": "object"}});
            let mut changes: Vec<usize> = Vec::new();
            for _ in 0..=(rng.next_u64() % 3) {
                let c = (rng.next_u64() % CHANGES.len() as u64) as usize;
                if !changes.iter().any(|&d| CHANGES[d].field == CHANGES[c].field) {
                    (CHANGES[c].apply)(&mut driver, &mut rng);
                    changes.push(c);
                }
            }
            drivers.push((driver, changes));
        }
    }
    drivers
}

fn refuses(v: Verdict, contract: &str) -> bool {
    v == Refuses || (v == RefusesUnderV1 && contract == "v1")
}

#[test]
fn sandcap_validate_against_the_hosts_manifest_validator() {
    if npm::skipped() {
        return;
    }
    let started = Instant::now();
    let drivers = generated();
    let host = npm::host(&json!({"manifest": drivers.iter().map(|(d, _)| d).collect::<Vec<_>>()}));
    let host = host["manifest"].as_array().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, (driver, _)) in drivers.iter().enumerate() {
        let provider = json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": format!("d{i:04}")},
            "spec": {"pluginKey": "sandcap.host-differential", "version": "1.0.0",
                     "worker": {"service": {"namespace": "sandbox-system", "name": "worker", "port": 8080}},
                     "environmentDrivers": [driver]},
        });
        write(dir.path(), &format!("d{i:04}.json"), &provider.to_string());
    }
    let mut disagreements = BTreeMap::<String, usize>::new();
    for contract in ["v1", "v2"] {
        // `--client create`: the file as it is, nulls included, as the host's validator sees it.
        let o = sandcap(&[
            "validate",
            &dir.path().display().to_string(),
            "--contract",
            contract,
            "--client",
            "create",
            "-o",
            "json",
        ]);
        let mut records: Vec<Value> = serde_json::from_slice(&o.stdout).expect("validate -o json");
        // The compile budget's 1 s is wall-clock time: on a loaded machine, judge such a one again.
        for (i, record) in records.iter_mut().enumerate() {
            for _ in 0..3 {
                if !record["message"].as_str().unwrap_or("").contains("compiling it takes longer than") {
                    break;
                }
                let file = dir.path().join(format!("d{i:04}.json")).display().to_string();
                let o = sandcap(&["validate", &file, "--contract", contract, "--client", "create", "-o", "json"]);
                *record = serde_json::from_slice::<Vec<Value>>(&o.stdout).unwrap().remove(0);
            }
        }
        assert_eq!(records.len(), drivers.len());
        for (i, ((driver, changes), record)) in drivers.iter().zip(&records).enumerate() {
            assert_eq!(record["name"], format!("d{i:04}"));
            let names: Vec<&str> = changes.iter().map(|&c| CHANGES[c].name).collect();
            let host_admits = host[i]["admitted"] == true;
            let sandcap_admits = record["allowed"] == true;
            let detail =
                format!("driver {i} ({contract}, changes {names:?}): {driver}\nhost: {}\nsandcap: {record}", host[i]);
            let expect_host = !changes.iter().any(|&c| CHANGES[c].host == Refuses);
            let expect_sandcap = !changes.iter().any(|&c| refuses(CHANGES[c].sandcap, contract));
            assert_eq!(host_admits, expect_host, "the host's validator, not as the table says: {detail}");
            assert_eq!(sandcap_admits, expect_sandcap, "sandcap validate, not as the table says: {detail}");
            if host_admits != sandcap_admits {
                let refusing_side =
                    |c: &Change| if host_admits { refuses(c.sandcap, contract) } else { c.host == Refuses };
                let why: Vec<&str> =
                    changes.iter().map(|&c| &CHANGES[c]).filter(|c| refusing_side(c)).map(|c| c.name).collect();
                let side = if host_admits { "sandcap refuses" } else { "the host refuses" };
                for why in why {
                    *disagreements.entry(format!("{contract}: {side}: {why}")).or_default() += 1;
                }
            }
        }
    }
    eprintln!(
        "tests/host: {} drivers (seeds {SEEDS:x?}) under v1 and v2; disagreements (drivers) by the change responsible:",
        drivers.len()
    );
    for (class, n) in &disagreements {
        eprintln!("  {class}: {n}");
    }
    eprintln!("tests/host: manifest comparison took {:.1}s", started.elapsed().as_secs_f64());
}

/// Every fourth generated driver in a manifest as host.mjs wraps it, through the host's
/// validator and `sandcap import` of the manifest JSON (which has no host validator to ask, so
/// judges by sandcap's copy of the host's rules), under `v1` and `v2` in turn: the import
/// refuses exactly what the host refuses, and of the rest the cluster denies what the table says
/// sandcap refuses, but for the host's fields sandcap does not model, which the import leaves out
/// with a note.
#[test]
fn sandcap_import_refuses_what_the_hosts_manifest_validator_refuses() {
    if npm::skipped() {
        return;
    }
    let started = Instant::now();
    let drivers: Vec<(Value, Vec<usize>)> = generated().into_iter().step_by(4).collect();
    let host = npm::host(&json!({"manifest": drivers.iter().map(|(d, _)| d).collect::<Vec<_>>()}));
    let host = host["manifest"].as_array().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let left_out = CHANGES.iter().position(|c| c.name.contains("that sandcap does not model")).unwrap();
    for (i, (driver, changes)) in drivers.iter().enumerate() {
        let contract = if i % 2 == 0 { "v1" } else { "v2" };
        let manifest = json!({
            "id": "sandcap.host-differential", "apiVersion": 1, "version": "1.0.0", "displayName": "Differential",
            "description": "One generated driver.", "author": "sandcap tests", "categories": ["automation"],
            "capabilities": ["environment.drivers.register"], "entrypoints": {"worker": "./dist/worker.js"},
            "environmentDrivers": [driver],
        });
        let file = write(dir.path(), &format!("m{i:04}.json"), &manifest.to_string());
        let args = ["import", &file, "--worker-service", "sandbox-system/worker:8080", "--contract", contract];
        let mut o = sandcap(&args);
        // The compile budget's 1 s is wall-clock time: on a loaded machine, import such a one again.
        for _ in 0..3 {
            if !String::from_utf8_lossy(&o.stderr).contains("compiling it takes longer than") {
                break;
            }
            o = sandcap(&args);
        }
        let stderr = String::from_utf8_lossy(&o.stderr);
        let names: Vec<&str> = changes.iter().map(|&c| CHANGES[c].name).collect();
        let detail =
            format!("driver {i} ({contract}, changes {names:?}): {driver}\nhost: {}\nimport: {stderr}", host[i]);
        let host_admits = host[i]["admitted"] == true;
        assert_eq!(!stderr.contains("REFUSED"), host_admits, "the import's verdict is not the host's: {detail}");
        if !host_admits {
            assert_eq!(o.status.code(), Some(1), "{detail}");
            continue;
        }
        let denied = changes.iter().any(|&c| c != left_out && refuses(CHANGES[c].sandcap, contract));
        assert_eq!(stderr.contains("DENIED"), denied, "the cluster's verdict, not as the table says: {detail}");
        assert_eq!(o.status.code(), Some(if denied { 1 } else { 0 }), "{detail}");
        assert_eq!(o.stdout.is_empty(), denied, "YAML exactly when admitted: {detail}");
        if changes.contains(&left_out) {
            assert!(stderr.contains("is left out: sandcap does not model it"), "{detail}");
        }
    }
    eprintln!(
        "tests/host: import comparison of {} manifests took {:.1}s",
        drivers.len(),
        started.elapsed().as_secs_f64()
    );
}
