//! `sandcap import` of the SDK plugin package (`tests/bridge/plugin`, installed as the bridge's
//! tests install it): from its directory, where its `@paperclipai/shared` validates the manifest,
//! and from a tarball packed as `npm pack` packs it, where sandcap's copy of the host's rules
//! does; the same provider either way, and the same refusal.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Value, json};

use crate::harness::node;
use crate::sdk::installed_plugin;

/// What the package is made of (`npm pack` packs these and leaves `node_modules` out).
const FILES: [&str; 3] = ["package.json", "dist/manifest.js", "dist/worker.js"];

fn import(source: &Path, node: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .arg("import")
        .arg(source)
        .arg("--node")
        .arg(node)
        .args(["--worker-service", "sandbox-system/bridge-test:9000"])
        .args(extra)
        .output()
        .expect("sandcap runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The package's files under `package/` in a gzip tarball, as `npm pack` writes it.
fn pack(package: &Path, to: &Path) {
    let gz = GzEncoder::new(std::fs::File::create(to).unwrap(), Compression::default());
    let mut tar = tar::Builder::new(gz);
    for file in FILES {
        tar.append_path_with_name(package.join(file), Path::new("package").join(file)).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

#[test]
fn import_of_the_sdk_plugin_from_its_directory_and_its_tarball() {
    let Some(node) = node() else { return };
    let plugin = installed_plugin();
    let o = import(&plugin, &node, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("sandcap's copy"), "the package's own validator judged it: {}", text(&o.stderr));
    let provider: Value = serde_saphyr::from_str(&text(&o.stdout)).unwrap();
    assert_eq!(provider["metadata"]["name"], "sandcap.bridge-test");
    assert_eq!(
        (&provider["spec"]["pluginKey"], &provider["spec"]["version"]),
        (&json!("sandcap.bridge-test"), &json!("0.3.1"))
    );
    assert_eq!(
        provider["spec"]["environmentDrivers"],
        json!([{"driverKey": "bridge-test", "kind": "sandbox_provider", "displayName": "Bridge test sandbox",
                "sandboxCapabilities": {"nativeSyncIn": true, "nativeSyncOut": true, "persistentProcessSessions": false},
                "configSchema": {"type": "object", "properties": {"region": {"type": "string"}}}}]),
        "the drivers as tests/bridge/plugin/dist/manifest.js declares them"
    );

    let dir = tempfile::tempdir().unwrap();
    let tgz = dir.path().join("sandcap-bridge-test-plugin-0.3.1.tgz");
    pack(&plugin, &tgz);
    let packed = import(&tgz, &node, &[]);
    assert_eq!(packed.status.code(), Some(0), "{}", text(&packed.stderr));
    assert_eq!(text(&packed.stdout), text(&o.stdout), "the same provider from the tarball");
    assert!(text(&packed.stderr).contains("sandcap's copy of the host's manifest rules"), "{}", text(&packed.stderr));

    let missing = import(&plugin, Path::new("/nonexistent/node"), &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("cannot run /nonexistent/node"), "{}", text(&missing.stderr));
}

#[test]
fn the_host_validator_and_sandcaps_copy_refuse_the_same_manifest() {
    let Some(node) = node() else { return };
    let plugin = installed_plugin();
    let dir = tempfile::tempdir().unwrap();
    let (with_shared, without) = (dir.path().join("with"), dir.path().join("without"));
    for package in [&with_shared, &without] {
        std::fs::create_dir_all(package.join("dist")).unwrap();
        for file in FILES {
            let original = std::fs::read_to_string(plugin.join(file)).unwrap();
            std::fs::write(package.join(file), original.replace("persistentProcessSessions", "persistentSessions"))
                .unwrap();
        }
    }
    // A copy, not a link: the box lets the manifest module read inside its package only, and a
    // link's target is outside it.
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(plugin.join("node_modules"))
        .arg(with_shared.join("node_modules"))
        .status()
        .expect("cp runs");
    assert!(copied.success());
    for package in [&with_shared, &without] {
        let o = import(package, &node, &[]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        assert!(o.stdout.is_empty());
        let refused = "the host's manifest validator refuses it: environmentDrivers.0.sandboxCapabilities: \
                       Unrecognized key: \"persistentSessions\"";
        assert!(text(&o.stderr).contains(refused), "{}: {}", package.display(), text(&o.stderr));
    }
}

/// examples/bridge/plugin.yaml's SandboxProvider is what `sandcap import` makes of the package it
/// runs: the example's declarations are the manifest's.
#[test]
fn the_bridge_examples_provider_is_the_import_of_its_package() {
    let Some(node) = node() else { return };
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bridge/plugin.yaml");
    let objects = sandcap::cli::load_objects(&example).expect("the example");
    let provider = objects.into_iter().find(|o| o["kind"] == "SandboxProvider").expect("a SandboxProvider");
    let service = &provider["spec"]["worker"]["service"];
    let address =
        format!("{}/{}:{}", service["namespace"].as_str().unwrap(), service["name"].as_str().unwrap(), service["port"]);
    let o = Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .arg("import")
        .arg(installed_plugin())
        .arg("--node")
        .arg(&node)
        .args(["--name", provider["metadata"]["name"].as_str().unwrap(), "--worker-service", &address])
        .args(["--worker-path", service["path"].as_str().unwrap()])
        .output()
        .expect("sandcap runs");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let imported: Value = serde_saphyr::from_str(&text(&o.stdout)).unwrap();
    assert_eq!(
        imported,
        provider,
        "sandcap import {} --name ... --worker-service {address}",
        installed_plugin().display()
    );
}

/// A manifest module that prints as it is imported, a line or a flood of 64 MiB, still gives its
/// manifest: what it prints goes to stderr, which sandcap drains and keeps 4 KiB of, so node never
/// waits on (or, buffering, grows with) a pipe nobody reads.
#[test]
fn a_manifest_module_that_prints_still_imports() {
    let Some(node) = node() else { return };
    let plugin = installed_plugin();
    let manifest = std::fs::read_to_string(plugin.join("dist/manifest.js")).unwrap();
    let expected = import(&plugin, &node, &["--name", "printing"]);
    assert_eq!(expected.status.code(), Some(0), "{}", text(&expected.stderr));
    for prints in
        ["console.log('loading the manifest');", "for (let i = 0; i < 65536; i++) console.log('x'.repeat(1023));"]
    {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dist")).unwrap();
        for file in FILES {
            std::fs::copy(plugin.join(file), dir.path().join(file)).unwrap();
        }
        std::fs::write(dir.path().join("dist/manifest.js"), format!("{prints}\n{manifest}")).unwrap();
        let o = import(dir.path(), &node, &["--name", "printing"]);
        assert_eq!(o.status.code(), Some(0), "{prints}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), text(&expected.stdout), "{prints}");
    }
}

/// From a running bridge's `GET /manifest` (the manifest it loaded, as the package's validator
/// parsed it): the same provider as from the package, and no plugin code evaluated by the import.
#[test]
fn import_from_a_running_bridge_gives_the_packages_provider() {
    let Some(node) = node() else { return };
    let plugin = installed_plugin();
    let from_package = import(&plugin, &node, &[]);
    assert_eq!(from_package.status.code(), Some(0), "{}", text(&from_package.stderr));
    let bridge = crate::harness::Bridge::start(&plugin, &node, &[]);
    let url = bridge.url.replace("/rpc", "/manifest");
    // No node is needed, and none is run: a --node that does not exist is never asked for.
    let from_bridge = import(Path::new(&url), Path::new("/nonexistent/node"), &[]);
    bridge.stop();
    assert_eq!(from_bridge.status.code(), Some(0), "{}", text(&from_bridge.stderr));
    assert_eq!(text(&from_bridge.stdout), text(&from_package.stdout));
    let refused = import(Path::new("http://127.0.0.1:9/manifest"), &node, &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
}
