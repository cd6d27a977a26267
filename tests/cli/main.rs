//! The built `sandcap` binary on `examples/` and on bad input (docs/contract.md, "Command line").

mod import;
mod input;
mod plan;
mod resolve;
mod validate;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::LazyLock;

use sandcap_core::versions::V1;

/// Every worker method, as `--worker-methods` takes them.
static ALL: LazyLock<String> = LazyLock::new(|| V1.worker_methods().join(","));

fn sandcap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sandcap runs")
}

/// `resolve --provider examples/provider-full.yaml --lease <lease> [--secret <secret>]`.
fn resolve_lease_args<'a>(lease: &'a str, secret: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec!["resolve", "--provider", "examples/provider-full.yaml", "--lease", lease];
    args.extend(secret.into_iter().flat_map(|s| ["--secret", s]));
    args
}

/// `sandcap resolve` of examples/lease-reuse.yaml against examples/provider-full.yaml with every
/// worker method verified and `secret` as its configFrom Secret.
fn resolve_reuse_lease(secret: &str, extra: &[&str]) -> Output {
    let args = resolve_lease_args("examples/lease-reuse.yaml", Some(secret));
    sandcap(&[&args[..], &["--worker-methods", &ALL], extra].concat())
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}
