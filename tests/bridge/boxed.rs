//! `sandcap import` evaluates a package's manifest module in a box (src/bridge/confine.rs): a
//! hostile module cannot read outside its package, write, start a process, resolve a module
//! planted above it or connect anywhere, and a package that bundles a validator of its own is
//! still judged by sandcap's copy of the host's rules.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;

use serde_json::{Value, json};

use crate::harness::node;

/// Each attempt's outcome, the error code or `allowed`, in the driver's description.
const HOSTILE: &str = r#"
import fs from "node:fs";
import net from "node:net";
const [port, secret, outside] = JSON.parse(fs.readFileSync(new URL("./targets.json", import.meta.url), "utf8"));
const tried = {};
const attempt = async (what, f) => { try { await f(); tried[what] = "allowed"; } catch (e) { tried[what] = e.code ?? String(e); } };
await attempt("read", () => fs.readFileSync(secret));
await attempt("home", () => fs.readdirSync(process.env.HOME ?? "/root"));
await attempt("write", () => fs.writeFileSync(outside, "written"));
await attempt("spawn", async () => (await import("node:child_process")).spawnSync("sh", ["-c", "true"], { stdio: "ignore" }).error ?? null);
await attempt("bare", () => import("planted"));
await attempt("connect", () => new Promise((ok, no) => { const s = net.connect(port, "127.0.0.1", () => { s.destroy(); ok(); }); s.on("error", no); }));
export default {
  id: "acme.hostile", apiVersion: 1, version: "1.0.0", displayName: "Hostile", description: "x", author: "x",
  categories: ["automation"], capabilities: ["environment.drivers.register"], entrypoints: { worker: "./worker.js" },
  environmentDrivers: [{ driverKey: "k", kind: "sandbox_provider", displayName: "K", configSchema: { type: "object" },
                         description: JSON.stringify(tried) }],
};
"#;

fn import(package: &Path, node: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .arg("import")
        .arg(package)
        .arg("--node")
        .arg(node)
        .args(["--worker-service", "sandbox-system/hostile:9000", "--name", "hostile"])
        .output()
        .expect("sandcap runs")
}

fn package(dir: &Path, manifest: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let pj = json!({"name": "hostile", "version": "1.0.0", "type": "module", "paperclipPlugin": {"manifest": "./manifest.js"}});
    std::fs::write(dir.join("package.json"), pj.to_string()).unwrap();
    std::fs::write(dir.join("manifest.js"), manifest).unwrap();
}

#[test]
fn a_hostile_manifest_module_reads_writes_spawns_resolves_and_connects_nothing() {
    let Some(node) = node() else { return };
    let root = tempfile::tempdir().unwrap();
    let (pkg, secret, outside) =
        (root.path().join("pkg"), root.path().join("secret.txt"), root.path().join("written.txt"));
    std::fs::write(&secret, "the admin's secret").unwrap();
    // A module planted where an unconfined bare import would resolve it: a node_modules above the package.
    let planted = root.path().join("node_modules/planted");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("package.json"), r#"{"name":"planted","type":"module","main":"index.js"}"#).unwrap();
    std::fs::write(planted.join("index.js"), "export default 'planted';").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    package(&pkg, HOSTILE);
    std::fs::write(pkg.join("targets.json"), json!([port, secret, outside]).to_string()).unwrap();

    let o = import(&pkg, &node);
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "a boxed module still gives its manifest: {stderr}");
    let provider: Value = serde_saphyr::from_str(&stdout).unwrap();
    let tried: Value =
        serde_json::from_str(provider["spec"]["environmentDrivers"][0]["description"].as_str().unwrap()).unwrap();
    eprintln!("boxed: what the hostile module tried: {tried}");
    for what in ["read", "home", "write", "spawn", "bare", "connect"] {
        assert!(tried[what].is_string() && tried[what] != "allowed", "{what} was allowed: {tried}");
    }
    assert!(!stdout.contains("the admin's secret"), "{stdout}");
    assert!(!outside.exists(), "the module wrote outside its package");
    assert_eq!(listener.accept().map(drop).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock), "it connected");
}

#[test]
fn a_package_that_bundles_its_own_validator_is_still_judged_by_sandcaps_rules() {
    let Some(node) = node() else { return };
    let root = tempfile::tempdir().unwrap();
    let pkg = root.path().join("pkg");
    // Refused by the host's rules: a driver without its kind, and no displayName.
    package(
        &pkg,
        r#"export default { id: "acme.lenient", apiVersion: 1, version: "1.0.0", displayName: "L", description: "x",
           author: "x", categories: ["automation"], capabilities: ["environment.drivers.register"],
           entrypoints: { worker: "./worker.js" }, environmentDrivers: [{ driverKey: "k" }] };"#,
    );
    // A @paperclipai/shared of the package's own that admits anything.
    let shared = pkg.join("node_modules/@paperclipai/shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("package.json"), r#"{"name":"@paperclipai/shared","type":"module","main":"index.js"}"#)
        .unwrap();
    std::fs::write(
        shared.join("index.js"),
        "export const pluginManifestV1Schema = { safeParse: (m) => ({ success: true, data: m }) };",
    )
    .unwrap();
    let o = import(&pkg, &node);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "refused: {stderr}");
    assert!(stderr.starts_with("REFUSED "), "{stderr}");
}

/// A module that hoards memory stops at the box's heap (128 MiB: node ends, well before the time
/// budget), one that never ends at the import's 15 s, and neither leaves a process behind.
#[test]
fn a_module_that_hoards_memory_or_never_ends_is_stopped_within_its_budgets() {
    let Some(node) = node() else { return };
    let root = tempfile::tempdir().unwrap();
    let hoard = "const kept = []; for (;;) kept.push(new Array(1 << 20).fill(7)); export default {};";
    let never = "setInterval(() => {}, 1000); for (;;) {} export default {};";
    for (what, module, within) in [("heap", hoard, 14), ("time", never, 30)] {
        let pkg = root.path().join(what);
        package(&pkg, module);
        let started = std::time::Instant::now();
        let o = import(&pkg, &node);
        let (took, stderr) = (started.elapsed(), String::from_utf8_lossy(&o.stderr));
        eprintln!("boxed: the {what} hog ended the import in {took:.1?}: {}", stderr.trim());
        assert_eq!(o.status.code(), Some(2), "{what}: {stderr}");
        assert!(took < std::time::Duration::from_secs(within), "{what}: took {took:?}");
        let why = if what == "heap" { "heap out of memory" } else { "no answer within 15s" };
        assert!(stderr.contains(why), "{what}: {stderr}");
        let left = processes_naming(&pkg.display().to_string());
        assert!(left.is_empty(), "{what}: a process outlived the import: {left:?}");
    }
}

/// The command lines of the running processes that name `text` (read from /proc: no pgrep needed).
fn processes_naming(text: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        .filter(|line| line.contains(text))
        .collect()
}
