//! `sandcap check` as the plugin scenarios run it and read its lines, and the plugin on kubectl's
//! PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::binary::sandcap;
use crate::harness::cluster::Cluster;

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `check` with `args`: its exit code and its lines as `(level, check, message)`.
pub fn check(c: &Cluster, args: &[&str]) -> (Option<i32>, Vec<(String, String, String)>, String) {
    let o = sandcap(c, &[&["check"], args].concat());
    let lines = text(&o.stdout)
        .lines()
        .map(|l| {
            let mut words = l.splitn(2, ' ');
            let level = words.next().unwrap_or_default().to_string();
            let rest = words.next().unwrap_or_default().trim_start();
            let (check, message) = rest.split_once(' ').unwrap_or((rest, ""));
            (level, check.to_string(), message.trim_start().to_string())
        })
        .collect();
    (o.status.code(), lines, format!("{}{}", text(&o.stdout), text(&o.stderr)))
}

/// Asserts that `check` passes every check up to `passing`, then fails `failing` with `words`.
pub fn fails_at(c: &Cluster, args: &[&str], passing: &[&str], failing: &str, words: &str) -> String {
    let (code, lines, all) = check(c, args);
    assert_eq!(code, Some(1), "{all}");
    let levels: Vec<(&str, &str)> = lines.iter().map(|(l, c, _)| (l.as_str(), c.as_str())).collect();
    let mut want: Vec<(&str, &str)> = passing.iter().map(|p| ("ok", *p)).collect();
    want.push(("FAIL", failing));
    assert_eq!(levels, want, "{all}");
    let message = lines.last().map(|l| l.2.clone()).unwrap_or_default();
    assert!(message.contains(words), "{failing} should say {words:?}:\n{all}");
    message
}

pub const ALL: [&str; 7] = ["crds", "webhook", "admission", "leader", "controllers", "providers", "workloads"];

pub fn passes(c: &Cluster, args: &[&str]) -> Vec<(String, String, String)> {
    let (code, lines, all) = check(c, args);
    assert_eq!(code, Some(0), "{all}");
    let names: Vec<&str> = lines.iter().map(|l| l.1.as_str()).collect();
    assert_eq!(names, ALL, "{all}");
    assert!(lines.iter().all(|l| l.0 == "ok"), "{all}");
    lines
}

/// A directory holding `kubectl-sandcap` and `kubectl_complete-sandcap` links to the built
/// binary, for kubectl to find.
pub fn plugin_dir(c: &Cluster) -> PathBuf {
    let dir = c.dir.join("plugin-path");
    let _ = std::fs::create_dir_all(&dir);
    for name in [sandcap::cli::PLUGIN_NAME, sandcap::cli::HELPER_NAME] {
        let link = dir.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sandcap"), &link).expect("symlink");
        }
    }
    dir
}

/// `kubectl ARGS` with the plugin on the PATH.
pub fn kubectl_with_plugin(c: &Cluster, dir: &Path, args: &[&str]) -> Output {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    Command::new(c.bin.path("kubectl")).args(args).env("PATH", path).env("KUBECONFIG", &c.kubeconfig).output().unwrap()
}
