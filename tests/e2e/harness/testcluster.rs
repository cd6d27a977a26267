//! The Kubernetes binaries the clusters run: etcd, kube-apiserver and kubectl of each minor in
//! testcluster/, built from their Go modules by `testcluster/build.sh` (cached under target/).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The binaries of one Kubernetes minor.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub minor: String,
    pub dir: PathBuf,
}

impl Binaries {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The version the directory is named after (`v1.37.2`).
    pub fn version(&self) -> String {
        self.dir.file_name().expect("versioned directory").to_string_lossy().into_owned()
    }
}

/// The minors to run: `SANDCAP_E2E_MINORS`, else every module in testcluster/, oldest first.
pub fn minors() -> Result<Vec<String>, String> {
    if Command::new("go").arg("version").output().is_err() {
        return Err("Go is not installed: the end-to-end tests build kube-apiserver and etcd with it; install Go 1.26 (https://go.dev/doc/install), or set SANDCAP_E2E=skip to skip them".into());
    }
    if let Ok(given) = std::env::var("SANDCAP_E2E_MINORS") {
        return Ok(given.split([',', ' ']).filter(|m| !m.is_empty()).map(String::from).collect());
    }
    let dir = repo_root().join("testcluster");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut minors: Vec<String> =
        entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("k8s-").map(String::from)).collect();
    minors.sort_by_key(|m| m.split('.').map(|n| n.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>());
    Ok(minors)
}

/// Builds (or finds cached) the binaries of `minor`: one minor at a time, so that the scenarios of
/// the first run while `.ci/prebuild.sh` builds the next in the background.
pub fn build(minor: &str) -> Result<Binaries, String> {
    build_minors(&[minor.to_string()])?.pop().ok_or_else(|| format!("testcluster/build.sh built no {minor}"))
}

fn build_minors(minors: &[String]) -> Result<Vec<Binaries>, String> {
    let root = repo_root();
    let output = Command::new("bash")
        .arg(root.join("testcluster/build.sh"))
        .args(minors)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run testcluster/build.sh: {e}"))?;
    if !output.status.success() {
        return Err(format!("testcluster/build.sh failed ({})", output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(minor, dir)| Binaries { minor: minor.into(), dir: dir.into() })
        .collect())
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
