//! The release as an admin meets it: `release/release.sh` publishes this checkout to the node's
//! own registry (examples/node.sh), image and chart signed with a throwaway cosign key; the suite
//! checks both signatures as docs/install.md's "Verify the release" does and installs the chart from there,
//! so the node pulls the image by digest.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::node::{Node, repo_root};
use crate::support::{ok, output_with_stdin};

/// What the release published to the node's registry.
pub struct Published {
    /// `oci://REGISTRY/charts/sandcap`.
    pub chart: String,
    pub chart_version: String,
    /// `REGISTRY/sandcap@sha256:...`, the image the chart runs.
    pub image: String,
}

impl Published {
    /// The chart as `helm install` and `helm upgrade` name it.
    pub fn chart_args(&self) -> [&str; 4] {
        [&self.chart, "--version", &self.chart_version, "--plain-http"]
    }
}

/// Publishes the release once, and checks its signatures.
pub fn published(node: &Node) -> &'static Published {
    static PUBLISHED: OnceLock<Published> = OnceLock::new();
    PUBLISHED.get_or_init(|| {
        let keys = node.state.join("release-keys");
        // A kept node's keys from an earlier run: cosign would ask before overwriting them.
        let _ = std::fs::remove_dir_all(&keys);
        std::fs::create_dir_all(&keys).expect("a directory for the keys");
        let password = format!("node-suite-{}", std::process::id());
        let cosign = tool("cosign");
        let mut generate = Command::new(&cosign);
        generate.args(["generate-key-pair"]).current_dir(&keys).env("COSIGN_PASSWORD", &password);
        ok("cosign generate-key-pair", output_with_stdin(&mut generate, b""));

        // release.sh builds its tools from registries the node's network cannot reach: here first.
        let mut tools = Command::new("bash");
        tools.arg(repo_root().join("release/release.sh")).arg("--tools-only");
        ok("release/release.sh --tools-only", output_with_stdin(&mut tools, b""));

        let key = keys.join("cosign.key").display().to_string();
        let release = ["bash", "release/release.sh", "--notes-from", "Unreleased", "--registry", &node.registry];
        let mut publish = node.in_network(&release);
        publish
            .args(["--key", &key, "--plain-http"])
            .env("COSIGN_PASSWORD", &password)
            // The suite installs what the checkout holds, committed or not.
            .env("SANDCAP_RELEASE_ALLOW_DIRTY", "1");
        ok("release/release.sh --registry (the node's)", output_with_stdin(&mut publish, b""));

        let dist = repo_root().join(format!("target/dist/v{}", env!("CARGO_PKG_VERSION")));
        let oci = std::fs::read_to_string(dist.join("OCI.txt")).expect("release.sh writes OCI.txt");
        let named = |what: &str| {
            oci.lines().find_map(|l| l.strip_prefix(what)).unwrap_or_else(|| panic!("{what} in {oci}")).to_string()
        };
        let (image, chart) = (named("image "), named("chart "));
        let public = keys.join("cosign.pub").display().to_string();
        for artifact in [&image, &chart] {
            let verify = [
                cosign.to_str().expect("a UTF-8 path"),
                "verify",
                "--key",
                &public,
                "--insecure-ignore-tlog",
                "--allow-http-registry",
                "--allow-insecure-registry",
                artifact,
            ];
            ok(&format!("cosign verify {artifact}"), output_with_stdin(&mut node.in_network(&verify), b""));
        }
        let chart_yaml = std::fs::read_to_string(repo_root().join("charts/sandcap/Chart.yaml")).expect("Chart.yaml");
        let chart_version = chart_yaml.lines().find_map(|l| l.strip_prefix("version: ")).expect("a chart version");
        println!("release: published and verified {image} and {chart}");
        Published {
            chart: format!("oci://{}/charts/sandcap", node.registry),
            chart_version: chart_version.trim().to_string(),
            image,
        }
    })
}

/// A release tool, built once (release/tools/go-tool.sh).
fn tool(name: &str) -> PathBuf {
    let mut build = Command::new("bash");
    build.arg(repo_root().join("release/tools/go-tool.sh")).arg(name);
    PathBuf::from(ok(&format!("go-tool.sh {name}"), output_with_stdin(&mut build, b"")).trim())
}
