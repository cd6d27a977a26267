//! The node suite: sandcap's chart installed with `helm` on a real single-node Kubernetes
//! (`examples/node.sh`: a kubelet, containerd, kube-proxy and CoreDNS in network and mount
//! namespaces of their own), the image built from the repository's Dockerfile. What the e2e suite
//! plays (probes, preStop, the grace period, endpoint removal, the PDB, in-cluster configuration,
//! the Service DNS name a worker is probed at, `helm test` as a pod) happens here for real.
//!
//!   cargo test --test node                 every scenario, in order, on one node
//!   cargo test --test node -- rollouts     a filter (the install comes first whatever it selects)
//!   SANDCAP_NODE=skip cargo test           skips the suite (it says so)
//!   SANDCAP_NODE_KEEP=1 cargo test --test node   leaves the node running afterwards, to look at it
//!
//! It needs root (namespaces, mounts, cgroups), Debian's runc and CNI plugins, and buildah; see
//! docs/testing.md, "The node".

mod bridge;
mod node;
mod observed;
mod release;
mod rollout;
mod scenarios;
#[path = "../support/mod.rs"]
mod support;
mod versions;

use std::sync::OnceLock;

use libtest_mimic::{Arguments, Trial};

use node::Node;

fn main() {
    let mut args = Arguments::from_args();
    // One node, one chart release: the scenarios run in order, one at a time.
    args.test_threads = Some(1);
    if std::env::var("SANDCAP_NODE").as_deref() == Ok("skip") {
        eprintln!("node: skipped (SANDCAP_NODE=skip): the chart did not run as pods");
        return;
    }
    sandcap::tls::install_default_provider();
    static NODE: OnceLock<Node> = OnceLock::new();
    let trials = scenarios::all()
        .into_iter()
        .map(|(name, scenario)| {
            Trial::test(name, move || {
                let node = NODE.get_or_init(Node::up);
                scenarios::install(node);
                scenario(node);
                scenarios::settle(node);
                Ok(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    // Stops the node (node.sh down) before the exit code is set, unless asked to keep it for a look.
    if let Some(node) = NODE.get() {
        if std::env::var("SANDCAP_NODE_KEEP").as_deref() == Ok("1") {
            eprintln!("node: kept running (SANDCAP_NODE_KEEP=1): ./examples/node.sh down stops it");
        } else {
            node.down();
        }
    }
    conclusion.exit();
}
