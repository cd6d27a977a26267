//! A plugin built on the host's SDK (`tests/bridge/plugin`, `@paperclipai/plugin-sdk` pinned by
//! its committed lockfile and installed with `npm ci`), behind the bridge and probed by the real
//! sandcap: the methods sandcap verifies are exactly the SDK's `supportedMethods` for it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandcap::probe::ProbeOutcome;
use serde_json::{Value, json};

use crate::harness::{Bridge, PROBE_TIMEOUT, RSS_BUDGET, node, probe, which};

/// The plugin tests/bridge/plugin is, as its manifest names it.
const PLUGIN: (&str, &str) = ("sandcap.bridge-test", "0.3.1");

/// The plugin package, copied under the target directory and installed there with `npm ci`
/// (again only when its lockfile changed); once per test process, whose tests run in parallel.
pub fn installed_plugin() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(install_plugin).clone()
}

fn install_plugin() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/plugin");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bridge-plugin");
    let lock = std::fs::read(source.join("package-lock.json")).expect("the committed lockfile");
    let installed = dir.join("node_modules/.sandcap-lock");
    if std::fs::read(&installed).ok().as_ref() != Some(&lock) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(source.join(file), dir.join(file)).unwrap();
        }
        let npm = which("npm").expect("npm");
        let started = Instant::now();
        let out = Command::new(npm)
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .expect("npm runs");
        assert!(out.status.success(), "npm ci failed:\n{}", String::from_utf8_lossy(&out.stderr));
        eprintln!("sdk: npm ci took {:?}", started.elapsed());
        std::fs::write(&installed, &lock).unwrap();
    }
    // The package's own files may change without its lockfile.
    std::fs::create_dir_all(dir.join("dist")).unwrap();
    for file in ["package.json", "dist/manifest.js", "dist/worker.js"] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    dir
}

/// What the SDK itself answers `initialize` with, the worker run by hand (no bridge).
fn sdk_answer(node: &Path, plugin: &Path) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "manifest": {"id": "sandcap.bridge-test"}, "config": {},
        "instanceInfo": {"instanceId": "by-hand", "hostVersion": "0.0.0"}, "apiVersion": 1}});
    let mut child = Command::new(node)
        .arg(plugin.join("dist/worker.js"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("node runs the worker");
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, format!("{request}\n").as_bytes()).unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let answer = loop {
        let line: Value = serde_json::from_str(&lines.next().expect("an answer").unwrap()).unwrap();
        if line["id"] == 1 && line.get("method").is_none() {
            break line;
        }
        // Its call into the host during setup: refuse it as the bridge does.
        let refusal = json!({"jsonrpc": "2.0", "id": line["id"], "error": {"code": -32601, "message": "no"}});
        std::io::Write::write_all(&mut stdin, format!("{refusal}\n").as_bytes()).unwrap();
    };
    drop(stdin);
    let _ = child.wait();
    answer["result"].clone()
}

async fn until_ready(url: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match probe(url, PLUGIN).await {
            (ProbeOutcome::Succeeded { methods, plugin }, _) => {
                let plugin = plugin.expect("the bridge says which plugin it runs");
                assert_eq!((plugin.id.as_str(), plugin.version.as_str()), PLUGIN);
                return methods;
            }
            (failed, _) if Instant::now() > deadline => panic!("the SDK worker never became ready: {failed:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_worker_behind_the_bridge_verifies_exactly_its_supported_methods() {
    let Some(node) = node() else { return };
    let plugin = installed_plugin();
    let bridge = Bridge::start(&plugin, &node, &[]);
    let methods = until_ready(&bridge.url).await;
    let sdk = sdk_answer(&node, &plugin);
    let mut expected: Vec<String> = serde_json::from_value(sdk["supportedMethods"].clone()).unwrap();
    expected.sort();
    assert_eq!(methods, expected, "sandcap verifies what the SDK reports");
    assert!(methods.contains(&"environmentSyncIn".to_string()) && methods.contains(&"health".to_string()));
    bridge.wait_for("validated=true", Duration::from_secs(1));

    // The answer itself: the SDK's result, with the manifest's identity.
    let answer: Value = reqwest::Client::new()
        .post(&bridge.url)
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let result = &answer["result"];
    assert_eq!(
        (result["ok"].clone(), result["supportedMethods"].clone()),
        (json!(true), sdk["supportedMethods"].clone())
    );
    let plugin_member = &result["plugin"];
    assert_eq!(
        (plugin_member["id"].as_str(), plugin_member["version"].as_str()),
        (Some("sandcap.bridge-test"), Some("0.3.1"))
    );
    let drivers = plugin_member["environmentDrivers"].as_array().unwrap();
    // `sandcap import` of the package declares the drivers exactly as the bridge reports them,
    // so the provider it writes matches the manifest (condition DeclarationsMatchManifest).
    let imported = Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .arg("import")
        .arg(&plugin)
        .arg("--node")
        .arg(&node)
        .args(["--worker-service", "sandbox-system/bridge-test:9000"])
        .output()
        .unwrap();
    let imported: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&imported.stdout)).unwrap();
    assert_eq!(
        &imported["spec"]["environmentDrivers"],
        plugin_member["environmentDrivers"].as_array().map(|_| &plugin_member["environmentDrivers"]).unwrap()
    );
    assert_eq!((drivers.len(), drivers[0]["driverKey"].as_str()), (1, Some("bridge-test")));
    assert_eq!(
        drivers[0]["sandboxCapabilities"],
        json!({"nativeSyncIn": true, "nativeSyncOut": true, "persistentProcessSessions": false})
    );

    // One initialize per worker process, however many probes.
    for _ in 0..20 {
        let (outcome, took) = probe(&bridge.url, PLUGIN).await;
        assert!(matches!(outcome, ProbeOutcome::Succeeded { .. }) && took < PROBE_TIMEOUT);
    }
    // Its answer names the plugin: a provider naming another version verifies nothing from it.
    let (other, _) = probe(&bridge.url, (PLUGIN.0, "0.3.2")).await;
    let ProbeOutcome::Failed(failure) = other else { panic!("a provider of 0.3.2 verified 0.3.1's worker") };
    let detail = failure.detail();
    assert!(detail.contains("0.3.1") && detail.contains("0.3.2"), "names both versions: {detail}");
    let setups = bridge.lines_with("setup ran in pid");
    assert_eq!(setups.len(), 1, "{:?}", bridge.log());
    bridge.wait_for("the host refused state.get: code -32601", Duration::from_secs(1));
    let after = setups[0].split("setup ran in pid ").nth(1).unwrap();
    let pid: u32 = after.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap();

    // sandcap resolve probes it too, and grants from it.
    let provider = crate::harness::provider("sandcap.bridge-test", "0.3.1", &bridge.url, json!(drivers));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&provider).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(["resolve", "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8", "--provider"])
        .arg(file.path())
        .args(["--worker-url", &bridge.url, "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resolved: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resolved["capabilities"]["nativeSyncIn"], true, "{resolved}");
    assert_eq!(resolved["capabilities"]["persistentProcessSessions"], false, "declared false");

    let peak = bridge.peak_rss();
    eprintln!("sdk: peak RSS {:.1} MiB", peak as f64 / 1048576.0);
    assert!(peak <= RSS_BUDGET);
    assert!(bridge.stop().success(), "SIGTERM stops the bridge cleanly");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the worker was killed with the bridge");
}
