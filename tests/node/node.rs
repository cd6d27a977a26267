//! The node as the suite sees it: `examples/node.sh` starts and stops it, commands run inside its
//! namespaces, and a thread that joins its network namespace talks to its apiserver directly.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The running node; [`Node::down`] stops it.
pub struct Node {
    pub worker_image: String,
    /// The SDK plugin of tests/bridge/plugin behind `sandcap bridge` (examples/bridge/Dockerfile).
    pub bridge_image: String,
    /// The node's own OCI registry, `HOST:PORT` inside its network namespace.
    pub registry: String,
    pub state: PathBuf,
}

impl Node {
    /// `node.sh up`: builds what is missing and starts the node.
    pub fn up() -> Node {
        let started = Instant::now();
        let output = node_sh(&["up"], "");
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "node.sh up failed:\n{said}{}", String::from_utf8_lossy(&output.stderr));
        let line = |key: &str| {
            said.lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("node.sh up printed no {key}:\n{said}"))
                .trim()
                .to_string()
        };
        println!("node: up in {:.0?}", started.elapsed());
        Node {
            worker_image: line("worker-image:"),
            bridge_image: line("bridge-image:"),
            registry: line("registry:"),
            state: repo_root().join("target/node"),
        }
    }

    /// `node.sh down`: stops the node and everything it started.
    pub fn down(&self) {
        let output = node_sh(&["down"], "");
        assert!(output.status.success(), "node.sh down failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }

    /// Runs `args` inside the node (kubectl, helm, the host's `sandcap` binary), with `stdin`.
    pub fn exec(&self, args: &[&str], stdin: &str) -> Output {
        let mut all = vec!["exec", "--"];
        all.extend_from_slice(args);
        node_sh(&all, stdin)
    }

    /// [`Node::exec`] that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_with(args, "")
    }

    pub fn ok_with(&self, args: &[&str], stdin: &str) -> String {
        crate::support::ok(&format!("{args:?}"), self.exec(args, stdin))
    }

    pub fn kubectl_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["kubectl"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).expect("kubectl prints JSON")
    }

    /// `kubectl apply -f -` of `objects`.
    pub fn apply(&self, objects: &[Value]) {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
        self.ok_with(&["kubectl", "apply", "-f", "-"], &list.to_string());
    }

    /// `args` as a command run in the node's network namespace only: this machine's files and
    /// environment (cargo, the release tools), the node's addresses (its registry).
    pub fn in_network(&self, args: &[&str]) -> Command {
        let holder = fs::read_to_string(self.state.join("holder.pid")).expect("the node runs");
        let mut command = Command::new("nsenter");
        command.args(["--target", holder.trim(), "--net", "--"]).args(args).current_dir(repo_root());
        command
    }

    /// Runs `f` on a thread that joined the node's network namespace: every connection it opens
    /// is the node's (its apiserver, its Services' addresses), and nothing else on this machine's.
    pub fn inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let holder = fs::read_to_string(self.state.join("holder.pid")).expect("the node runs");
        let netns = File::open(format!("/proc/{}/ns/net", holder.trim())).expect("the node's network namespace");
        std::thread::scope(|s| {
            s.spawn(|| {
                // Only this thread moves; the process and its other threads stay where they are.
                let joined = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(joined, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("the thread inside the node")
        })
    }

    /// The pod template of a Deployment of the reference worker's image: pods labelled `labels`,
    /// serving `methods` on port 8080.
    pub fn worker_template(&self, labels: &Value, methods: &[&str]) -> Value {
        json!({
            "metadata": {"labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "worker",
                    "image": self.worker_image,
                    "imagePullPolicy": "Never",
                    "args": ["--listen", "0.0.0.0:8080", "--methods", methods.join(",")],
                    "ports": [{"containerPort": 8080}],
                    "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true,
                                        "allowPrivilegeEscalation": false}
                }]
            }
        })
    }

    /// A client of the node's apiserver as its admin; only usable on a thread [`Node::inside`].
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.state.join("admin.kubeconfig")).expect("kubeconfig");
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.expect("client config");
        kube::Client::try_from(config).expect("client")
    }
}

fn node_sh(args: &[&str], stdin: &str) -> Output {
    let mut command = Command::new("bash");
    command.arg(repo_root().join("examples/node.sh")).args(args).current_dir(repo_root());
    crate::support::output_with_stdin(&mut command, stdin.as_bytes())
}

/// Polls `f` until it returns `Some` or `within` passes.
pub fn eventually<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The host-built `sandcap` binary (for `sandcap check` run from inside the node).
pub fn sandcap_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandcap"))
}
