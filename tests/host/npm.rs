//! The host's packages, installed by the test itself from tests/host/package-lock.json into
//! `target/tmp/host-npm/` (once per lockfile), and `host.mjs` run on them.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::Value;

/// The package directory in the repository: package.json, package-lock.json, host.mjs.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host")
}

/// `SANDCAP_HOST=skip` skips the suite (it says so), as `SANDCAP_E2E=skip` does the e2e suite.
pub fn skipped() -> bool {
    if std::env::var("SANDCAP_HOST").is_ok_and(|v| v == "skip") {
        eprintln!("tests/host: skipped (SANDCAP_HOST=skip)");
        return true;
    }
    false
}

fn tool_version(tool: &str) -> Option<String> {
    let out = Command::new(tool).arg("--version").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The install directory, installed: `npm install` of the committed lockfile (never newer
/// versions: every installed package is checked against the lockfile afterwards). Reused while
/// the lockfile is unchanged.
pub fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let (Some(node), Some(npm)) = (tool_version("node"), tool_version("npm")) else {
            panic!(
                "tests/host needs node and npm on the PATH (Debian: apt-get install nodejs npm), \
                 and the npm registry; SANDCAP_HOST=skip skips it"
            )
        };
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("host-npm");
        let lock = fs::read(package_dir().join("package-lock.json")).expect("tests/host/package-lock.json");
        let stamp = dir.join("installed-lock.json");
        if fs::read(&stamp).is_ok_and(|s| s == lock) {
            return dir;
        }
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for f in ["package.json", "package-lock.json"] {
            fs::copy(package_dir().join(f), dir.join(f)).unwrap();
        }
        // Not `npm ci`: the lockfile cannot list other platforms' optional binaries of some of
        // the server's dependencies (the registry does not serve them at the locked version), and
        // `npm ci` refuses a lockfile without them even when it would omit them. `npm install
        // --no-save` installs exactly the locked versions and writes nothing back.
        let started = Instant::now();
        let out = Command::new("npm")
            .args(["install", "--no-save", "--ignore-scripts", "--omit=dev", "--omit=optional"])
            .args(["--no-audit", "--no-fund", "--loglevel=error", "--engine-strict=false"])
            .current_dir(&dir)
            .output()
            .expect("npm runs");
        assert!(
            out.status.success(),
            "npm install of tests/host/package-lock.json failed (node {node}, npm {npm}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_against_lock(&dir, &lock);
        eprintln!(
            "tests/host: installed the host's packages in {:.1}s ({} MB, node {node}, npm {npm})",
            started.elapsed().as_secs_f64(),
            size(&dir.join("node_modules")) / 1_000_000
        );
        fs::write(&stamp, &lock).unwrap();
        dir
    })
}

/// Every package installed is the lockfile's, at its version and integrity.
fn check_against_lock(dir: &Path, lock: &[u8]) {
    let lock: Value = serde_json::from_slice(lock).unwrap();
    let hidden: Value =
        serde_json::from_slice(&fs::read(dir.join("node_modules/.package-lock.json")).unwrap()).unwrap();
    let installed = hidden["packages"].as_object().expect("npm's hidden lockfile");
    for name in ["node_modules/@paperclipai/server", "node_modules/@paperclipai/shared"] {
        assert_eq!(installed[name]["version"], "2026.916.1", "{name}");
    }
    for (path, entry) in installed {
        let locked = &lock["packages"][path];
        assert!(
            locked["version"] == entry["version"] && locked["integrity"] == entry["integrity"],
            "{path} installed as {entry}, but the lockfile has {locked}"
        );
    }
}

fn size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    fs::read_dir(path).map(|d| d.flatten().map(|e| size(&e.path())).sum()).unwrap_or(0)
}

/// `node host.mjs` on `input`: the host's answers.
pub fn host(input: &Value) -> Value {
    let dir = installed();
    let mut child = Command::new("node")
        .arg(package_dir().join("host.mjs"))
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    let written = writer.join().unwrap();
    assert!(out.status.success(), "host.mjs failed: {}", String::from_utf8_lossy(&out.stderr));
    written.expect("host.mjs reads its cases");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("host.mjs answers JSON");
    assert_eq!(answer["versions"]["server"], "2026.916.1");
    assert_eq!(answer["versions"]["shared"], "2026.916.1");
    answer
}
