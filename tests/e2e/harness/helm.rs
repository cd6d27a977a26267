//! The chart's CRD part through real Helm (its Go SDK, tests/chart/release.py): the chart written
//! out, a release of it installed, upgraded and uninstalled, and the admin's CRDs adopted by a
//! release and given back.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::cluster::{Cluster, repo_root};
use crate::harness::install::{NAMESPACE, chart_python};
use crate::support::ok;

/// The chart's CRDs.
pub const PROVIDER_CRD: &str = "sandboxproviders.sandcap.dev";
pub const CRD_NAMES: [&str; 2] = [PROVIDER_CRD, "sandboxleases.sandcap.dev"];

/// Helm's answer to `release.py ARGS`: `Ok(info)` or `Err(Helm's refusal)`.
pub fn helm(c: &Cluster, args: &[&str]) -> Result<String, String> {
    let output = Command::new(chart_python())
        .arg(repo_root().join("tests/chart/release.py"))
        .arg(&c.kubeconfig)
        .args(args)
        .output()
        .expect("python runs");
    let answer: Value = serde_json::from_str(&ok("release.py", output)).expect("release.py prints JSON");
    match answer["ok"].as_bool() {
        Some(true) => Ok(answer["info"].as_str().unwrap_or_default().to_string()),
        _ => Err(answer["error"].as_str().unwrap_or_default().to_string()),
    }
}

/// The chart's CRD part at `dir`: Chart.yaml, values and the files/ and templates that render the
/// CRDs, as charts/sandcap has them.
pub fn crd_chart(dir: &Path) -> PathBuf {
    let chart = repo_root().join("charts/sandcap");
    fs::create_dir_all(dir.join("templates")).expect("chart dir");
    for file in ["Chart.yaml", "values.yaml", "values.schema.json", "templates/_helpers.tpl", "templates/crds.yaml"] {
        fs::copy(chart.join(file), dir.join(file)).expect("chart file copied");
    }
    copy_dir(&chart.join("files/crds"), &dir.join("files/crds"));
    dir.to_path_buf()
}

/// Copies `from` into `to`, subdirectories included (files/crds/ holds one per contract version).
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("dir");
    for entry in fs::read_dir(from).expect("readable dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("file name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, target).expect("file copied");
        }
    }
}

/// `kubectl VERB crd <both CRDs> ARGS...` as admin.
fn on_the_crds(c: &Cluster, verb: &str, extra: &[&str]) {
    let mut args = vec![verb, "crd"];
    args.extend(CRD_NAMES);
    args.extend(extra);
    ok(verb, c.kubectl(&args));
}

/// What makes an object a release's.
pub const RELEASE_NAME: &str = "meta.helm.sh/release-name";
const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// docs/upgrade.md's adoption step: the CRDs applied by kubectl labelled and annotated as the release's,
/// so that Helm takes them over.
pub fn adopt(c: &Cluster) {
    on_the_crds(c, "label", &[&format!("{MANAGED_BY}=Helm"), "--overwrite"]);
    let namespace = format!("{RELEASE_NAMESPACE}={NAMESPACE}");
    on_the_crds(c, "annotate", &[&format!("{RELEASE_NAME}=sandcap"), &namespace, "--overwrite"]);
}

/// Undoes [`adopt`] after a release is uninstalled (its CRDs kept), so that the CRDs are the
/// admin's again, as a scenario that installs a release expects to find them.
pub fn disown(c: &Cluster) {
    on_the_crds(c, "label", &[&format!("{MANAGED_BY}-")]);
    on_the_crds(c, "annotate", &[&format!("{RELEASE_NAME}-"), &format!("{RELEASE_NAMESPACE}-")]);
}
