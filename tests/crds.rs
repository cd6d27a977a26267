//! `crds/` (what admins `kubectl apply`) and `charts/sandcap/files/crds/` (what the chart's
//! `templates/crds.yaml` renders, adding only labels and the keep policy: tests/chart checks that)
//! must both hold exactly what `sandcap crds --contract VERSION` prints for every contract version
//! (the default's at the top, the others' in a folder named after the version), or a cluster would
//! run with a schema the binary does not expect. Regenerate both with
//! `SANDCAP_UPDATE_CRDS=1 cargo test --test crds`.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use sandcap_core::versions::ContractVersion;
use serde_json::Value;

const CRD_DIRS: [&str; 2] = ["crds", "charts/sandcap/files/crds"];

fn yaml_files(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .collect()
}

#[test]
fn crd_directories_match_sandcap_crds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var("SANDCAP_UPDATE_CRDS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    let dirs = ContractVersion::ALL
        .into_iter()
        .flat_map(|v| CRD_DIRS.map(|d| (v, root.join(d).join(sandcap::cli::crd_dir(v)))));
    for (version, dir) in dirs {
        let generated = sandcap::cli::crds(version);
        let expected: BTreeSet<String> = generated.iter().map(|(file, _)| file.clone()).collect();
        if update {
            fs::create_dir_all(&dir).unwrap();
        }
        for (file, yaml) in &generated {
            let path = dir.join(file);
            if fs::read_to_string(&path).ok().as_deref() == Some(yaml.as_str()) {
                continue;
            }
            if update {
                fs::write(&path, yaml).unwrap();
            } else {
                stale.push(format!("{} differs from `sandcap crds --contract {version}`", path.display()));
            }
        }
        // A CRD that was renamed or dropped must not linger: the chart and `kubectl apply -f`
        // would still install it.
        for extra in yaml_files(&dir).difference(&expected) {
            let path = dir.join(extra);
            if update {
                fs::remove_file(&path).unwrap();
            } else {
                stale.push(format!("{} is not produced by `sandcap crds`", path.display()));
            }
        }
    }

    assert!(
        stale.is_empty(),
        "stale CRD files:\n  {}\nregenerate with: SANDCAP_UPDATE_CRDS=1 cargo test --test crds",
        stale.join("\n  ")
    );
}

/// The nodes under `node` that nothing bounds: a string without maxLength or enum, a list without
/// maxItems, an object (or map) without maxProperties.
fn unbounded(node: &Value, path: &str, found: &mut Vec<String>) {
    let has = |key: &str| node.get(key).is_some();
    let bounded = match node.get("type").and_then(Value::as_str) {
        Some("string") => has("maxLength") || has("enum"),
        Some("array") => has("maxItems"),
        Some("object") => has("maxProperties"),
        _ => true,
    };
    if !bounded {
        found.push(path.to_string());
    }
    for (key, child) in node.get("properties").and_then(Value::as_object).into_iter().flatten() {
        unbounded(child, &format!("{path}.{key}"), found);
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", ".*")] {
        if let Some(child) = node.get(key).filter(|c| c.is_object()) {
            unbounded(child, &format!("{path}{suffix}"), found);
        }
    }
}

/// Every string, list and object in `spec` is bounded, unknown keys included: the apiserver
/// refuses an oversized object before the webhook is called, and the CEL rules' estimated cost
/// stays within its budget (docs/contract.md, "Limits").
#[test]
fn every_spec_node_is_bounded() {
    let mut found = Vec::new();
    for (file, yaml) in ContractVersion::ALL.into_iter().flat_map(sandcap::cli::crds) {
        let crd: Value = serde_saphyr::from_str(&yaml).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(spec.is_object(), "{file} has a spec schema");
        unbounded(spec, &format!("{file}: spec"), &mut found);
    }
    assert!(found.is_empty(), "unbounded in the CRDs:\n  {}", found.join("\n  "));
}

/// The formats the apiserver knows (k8s.io/apiextensions-apiserver's validation formats, and the
/// numeric ones of OpenAPI): any other makes `kubectl apply` print `Warning: unrecognized format`,
/// as `uint32` did from the provider status's endpoint counters.
const KNOWN_FORMATS: [&str; 29] = [
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "bsonobjectid",
    "password",
    "date",
    "date-time",
    "datetime",
    "duration",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
];

fn formats(node: &Value, path: &str, found: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(format)) = map.get("format")
                && !KNOWN_FORMATS.contains(&format.as_str())
            {
                found.push(format!("{path}: {format}"));
            }
            for (key, child) in map {
                formats(child, &format!("{path}.{key}"), found);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| formats(item, &format!("{path}[]"), found)),
        _ => {}
    }
}

/// Every `format` in every CRD is one the apiserver recognizes, so the CRDs apply without a warning.
#[test]
fn every_format_is_one_the_apiserver_knows() {
    let mut found = Vec::new();
    for (file, yaml) in ContractVersion::ALL.into_iter().flat_map(sandcap::cli::crds) {
        let crd: Value = serde_saphyr::from_str(&yaml).unwrap();
        formats(&crd["spec"], &file, &mut found);
    }
    assert!(found.is_empty(), "formats the apiserver does not know:\n  {}", found.join("\n  "));
}
