//! The core stays pure: nothing it depends on, directly or not, is an async runtime, an HTTP
//! stack, a TLS stack or a Kubernetes client. The compiler keeps the shells out of the core (it
//! cannot name them); this keeps their libraries out.

use std::process::Command;

/// Crates that do I/O, or exist to serve it.
const FORBIDDEN: [&str; 14] = [
    "tokio",
    "mio",
    "futures-io",
    "hyper",
    "hyper-util",
    "h2",
    "http-body",
    "reqwest",
    "axum",
    "tower",
    "rustls",
    "kube-client",
    "kube-runtime",
    "socket2",
];

#[test]
fn the_core_depends_on_no_runtime_http_stack_or_client() {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--offline", "-p", "sandcap-core", "-e", "normal", "--prefix", "none", "-f", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8(output.stdout).expect("UTF-8");
    let crates: Vec<&str> = tree.lines().filter_map(|line| line.split_whitespace().next()).collect();
    assert!(crates.contains(&"sandcap-core") && crates.contains(&"serde"), "not the core's tree:\n{tree}");
    let found: Vec<&&str> = FORBIDDEN.iter().filter(|name| crates.contains(name)).collect();
    assert!(found.is_empty(), "the core depends on {found:?}:\n{tree}");
}
