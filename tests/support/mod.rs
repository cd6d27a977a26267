//! The support module of the shell's tests and the benchmarks: the reference worker as a real
//! process and JSON objects for a live cluster (here), hostile input ([`hostile`]), the ports of a
//! process started on port 0 ([`ports`]). The core's tests have their own (core/tests/support).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

pub mod hostile;
pub mod ports;
pub mod workloads;

/// Runs `command` with `stdin` piped in from a thread of its own, so that a child that exits or
/// closes its stdin early never blocks the caller, and waits for its output.
pub fn output_with_stdin(command: &mut Command, stdin: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    let mut input = child.stdin.take().expect("stdin");
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let output = child.wait_with_output().expect("the command finishes");
    writer.join().expect("the stdin writer");
    output
}

/// Panics with the command's output unless it succeeded; returns its stdout.
pub fn ok(what: &str, output: Output) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The reference worker (`examples/reference-worker.rs`) running as a child process; killed on drop.
pub struct Worker {
    child: Child,
    pub url: String,
}

impl Worker {
    /// Starts it on a free port with `args` (`--methods ...`, `--mode ...`, `--delay ...`).
    pub fn start(args: &[&str]) -> Worker {
        Worker::spawn(Command::new(worker_binary()), "127.0.0.1:0", args)
    }

    /// Starts it inside network namespace `netns` (which the test created), listening at `listen`.
    pub fn in_netns(netns: &str, listen: &str, args: &[&str]) -> Worker {
        let mut command = Command::new("ip");
        // `ip netns exec` execs the worker: the child is the worker itself, killed on drop.
        command.args(["netns", "exec", netns]).arg(worker_binary());
        Worker::spawn(command, listen, args)
    }

    fn spawn(mut command: Command, listen: &str, args: &[&str]) -> Worker {
        let mut child = command
            .args(["--listen", listen])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the reference worker starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("it prints its address");
        let addr =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Worker { child, url: format!("http://{addr}/rpc") }
    }

    pub fn with_methods(methods: &[&str]) -> Worker {
        Worker::start(&["--methods", &methods.join(",")])
    }

    /// A worker serving every method `version`'s keys need.
    pub fn of_contract(version: ContractVersion) -> Worker {
        Worker::with_methods(&methods_of(version))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo test` builds the examples next to the test binaries (target/<profile>/examples).
fn worker_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let path = profile_dir.join("examples").join(format!("reference-worker{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --example reference-worker` (a plain `cargo test` builds it)",
        path.display()
    );
    path
}

/// The value of the sample `name` (labels included, as written) in a Prometheus text page.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Peak resident memory of process `pid` so far (`VmHWM` in /proc), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let kib = proc_status(pid, "VmHWM").expect("VmHWM in /proc/<pid>/status");
    kib.trim_end_matches("kB").trim().parse::<u64>().expect("VmHWM in kB") * 1024
}

/// The field `name` of /proc/`pid`/status, trimmed.
pub fn proc_status(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(|v| v.trim().to_string())
}

/// A provider of one `sandbox_provider` driver `kubernetes` whose worker is at `url` (the tests
/// run sandcap with worker URLs allowed), as JSON.
pub fn provider(name: &str, url: &str, capabilities: Value) -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxProvider",
        "metadata": {"name": name},
        "spec": {
            "pluginKey": "acme.kubernetes-sandbox-provider",
            "version": "1.4.0",
            "worker": {"url": url},
            "environmentDrivers": [{
                "driverKey": "kubernetes",
                "kind": "sandbox_provider",
                "displayName": "Kubernetes",
                "configSchema": {
                    "type": "object",
                    "properties": {"backend": {"type": "string"}, "apiToken": {"type": "string", "minLength": 8}},
                    "additionalProperties": false
                },
                "sandboxCapabilities": capabilities
            }]
        }
    })
}

/// The worker methods `version`'s keys need, for a worker that serves exactly those.
pub fn methods_of(version: ContractVersion) -> Vec<&'static str> {
    version.contract().worker_methods()
}

/// Declares every key of `version` true (the opt-in keys need it).
pub fn all_true_of(version: ContractVersion) -> Value {
    version.contract().capabilities().map(|cap| (cap.key().to_string(), json!(true))).collect()
}

/// Declares every key of contract v1 true.
pub fn all_true() -> Value {
    all_true_of(ContractVersion::V1)
}

/// A lease of `provider`'s `kubernetes` driver; `spec` is merged over the minimal spec.
pub fn lease(namespace: &str, name: &str, provider: &str, spec: Value) -> Value {
    let mut base = json!({"providerRef": {"name": provider, "driverKey": "kubernetes"}});
    base.as_object_mut().expect("object").extend(spec.as_object().expect("spec is an object").clone());
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxLease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": base
    })
}

/// A Secret holding `value` under `key`; labelled as a config source when `consent`.
pub fn secret(namespace: &str, name: &str, key: &str, value: &str, consent: bool) -> Value {
    let labels = if consent { json!({"sandcap.dev/config-source": "true"}) } else { json!({}) };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "stringData": {key: value}
    })
}
