//! The chart's CRDs through real Helm (its Go SDK, tests/chart/release.py) and the real apiserver:
//! an install whose CRDs the admin applied with `kubectl apply --server-side` (the chart's crds/
//! layout before the CRDs were templates) upgraded to the chart that renders them, by docs/upgrade.md's
//! "8. Upgrade" steps. The apiserver then enforces the new rules, and `helm uninstall` leaves the
//! CRDs and every object.
//!
//! The charts installed hold the CRD part of charts/sandcap only: the rest (a webhook configuration
//! whose Service has no pods here, with `failurePolicy: Fail`) would refuse every create.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::cluster::{Cluster, repo_root};
use crate::harness::differential::apiserver_verdict;
use crate::harness::helm::{CRD_NAMES, PROVIDER_CRD, RELEASE_NAME, adopt, crd_chart, disown, helm};
use crate::harness::install::{self, NAMESPACE, path_str};
use crate::harness::waits::eventually;
use crate::support::{ok, provider};

/// The sandboxCapabilities rules of a provider CRD.
fn capability_rules(crd: &mut Value) -> &mut Vec<Value> {
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let caps = &mut spec["properties"]["environmentDrivers"]["items"]["properties"]["sandboxCapabilities"];
    caps["x-kubernetes-validations"].as_array_mut().expect("the capability rules")
}

/// The chart as it was: version 0.1.0, its CRDs in crds/ (which Helm installs once and never
/// upgrades), and a provider CRD without two of today's rules: `concurrentSyncOperations` not yet
/// removed, unknown keys not named.
fn old_chart(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir.join("crds")).expect("chart dir");
    let chart_yaml = fs::read_to_string(repo_root().join("charts/sandcap/Chart.yaml")).expect("Chart.yaml");
    let version = chart_yaml.lines().find(|l| l.starts_with("version: ")).expect("a version line");
    fs::write(dir.join("Chart.yaml"), chart_yaml.replace(version, "version: 0.1.0")).expect("Chart.yaml written");
    for name in CRD_NAMES {
        let file = format!("{name}.yaml");
        let text = fs::read_to_string(repo_root().join("crds").join(&file)).expect("crds/");
        let mut crd: Value = serde_saphyr::from_str(&text).expect("a CRD");
        if name == PROVIDER_CRD {
            let rules = capability_rules(&mut crd);
            rules.retain(|r| r["rule"] != "!('concurrentSyncOperations' in self)");
            rules.iter_mut().for_each(|r| _ = r.as_object_mut().expect("a rule").remove("messageExpression"));
        }
        // JSON is YAML.
        fs::write(dir.join("crds").join(file), crd.to_string()).expect("CRD written");
    }
    dir.to_path_buf()
}

/// The apiserver's verdicts on a provider declaring the removed key and one with a typo.
async fn verdicts(admin: &kube::Client) -> (Option<String>, Option<String>) {
    let removed = provider("e2e-crd-removed", "http://127.0.0.1:9/rpc", json!({"concurrentSyncOperations": true}));
    let typo = provider("e2e-crd-typo", "http://127.0.0.1:9/rpc", json!({"reuseableLeases": true}));
    (apiserver_verdict(admin, &removed).await, apiserver_verdict(admin, &typo).await)
}

fn crd_annotation(c: &Cluster, name: &str, key: &str) -> String {
    let path = format!("jsonpath={{.metadata.annotations.{}}}", key.replace('.', "\\."));
    ok("get crd", c.kubectl(&["get", "crd", name, "-o", &path]))
}

pub async fn an_upgrade_brings_the_crds_new_rules_and_uninstall_keeps_them(c: Arc<Cluster>) {
    install::namespaces(&c, &[NAMESPACE]);
    let dir = c.dir.join("crd-charts");
    let _ = fs::remove_dir_all(&dir);
    let old = old_chart(&dir.join("old"));
    let new = crd_chart(&dir.join("new"));
    let admin = c.admin().await;
    let wait = Duration::from_secs(30);

    // Before: the old CRDs, applied by the admin; the old release installs none of its own.
    install::crds_from(&c, &old.join("crds"));
    eventually("the old rules", wait, || async {
        let (removed, typo) = verdicts(&admin).await;
        (removed.is_none() && typo.is_some_and(|m| m.contains("unknown capability key: the keys of contract v1 are")))
            .then_some(())
    })
    .await;
    helm(&c, &["install", path_str(&old)]).expect("the old chart installs");

    // The new chart renders the CRDs, which Helm will not take over unannounced.
    let refused = helm(&c, &["upgrade", path_str(&new)]).expect_err("Helm refuses CRDs it does not own");
    assert!(refused.contains("exists and cannot be imported into the current release"), "{refused}");
    adopt(&c);
    // Helm 4 applies server side, and the rules it changes are kubectl's (its earlier apply):
    // docs/upgrade.md says --force-conflicts.
    let conflict = helm(&c, &["upgrade", path_str(&new)]).expect_err("a conflict with kubectl's fields");
    assert!(conflict.contains("conflict with \"kubectl\""), "{conflict}");
    helm(&c, &["upgrade", path_str(&new), "--force-conflicts"]).expect("the upgrade");

    // The apiserver enforces the new rules.
    eventually("the new rules", wait, || async {
        let (removed, typo) = verdicts(&admin).await;
        let removed = removed.is_some_and(|m| m.contains("concurrentSyncOperations was removed from the contract"));
        (removed && typo.is_some_and(|m| m.contains("unknown capability key \"reuseableLeases\""))).then_some(())
    })
    .await;
    for name in CRD_NAMES {
        assert_eq!(crd_annotation(&c, name, "helm.sh/resource-policy"), "keep");
        assert_eq!(crd_annotation(&c, name, RELEASE_NAME), "sandcap");
    }

    // Neither turning crds.install off nor uninstalling deletes the CRDs or the objects under them.
    let kept = provider("e2e-crd-kept", "http://127.0.0.1:9/rpc", json!({"reusableLeases": true}));
    install::apply(&c, &[kept]);
    let off = json!({"crds": {"install": false}}).to_string();
    helm(&c, &["upgrade", path_str(&new), &off]).expect("the upgrade without the CRDs");
    for name in CRD_NAMES {
        ok("the CRD is still there", c.kubectl(&["get", "crd", name]));
    }
    // Turned on again (explicitly: an upgrade without values reuses the last ones), the release
    // takes them back, as they still name it.
    let on = json!({"crds": {"install": true}}).to_string();
    helm(&c, &["upgrade", path_str(&new), &on]).expect("the upgrade with the CRDs");
    let info = helm(&c, &["uninstall"]).expect("the uninstall");
    assert!(info.contains("kept due to the resource policy"), "{info}");
    for name in CRD_NAMES {
        ok("the CRD is still there", c.kubectl(&["get", "crd", name]));
    }
    ok("the provider is still there", c.kubectl(&["get", "sbp", "e2e-crd-kept"]));
    ok("delete", c.kubectl(&["delete", "sbp", "e2e-crd-kept"]));
    // The cluster's CRDs as the other scenarios expect them.
    disown(&c);
    install::crds(&c);
}
