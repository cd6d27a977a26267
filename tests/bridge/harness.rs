//! The bridge as a real process (the built `sandcap bridge`), plugin packages for it, node, and
//! sandcap's own probe against it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use sandcap::probe::{FailureClass, ProbeOutcome, Prober, parse_worker_url};
use sandcap_core::addresses::{AllowedCidrs, WorkerPolicy};
use sandcap_core::api::SandboxProvider;

/// The memory the bridge stays within whatever its worker does (docs/provider-authors.md): peak
/// RSS of the debug build the tests run, measured at 33.4 to 35.8 MiB across the workers here.
pub const RSS_BUDGET: u64 = 48 * 1024 * 1024;
/// sandcap's probe timeout: every probe of the bridge is answered well within it.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// node, or `None` (said on stderr) where it is missing outside CI: the bridge's tests run SDK
/// workers, which need it. In CI (`CI` set) a missing node fails, and `SANDCAP_BRIDGE=skip`
/// skips the suite anywhere.
pub fn node() -> Option<PathBuf> {
    if std::env::var("SANDCAP_BRIDGE").as_deref() == Ok("skip") {
        eprintln!("bridge: skipped (SANDCAP_BRIDGE=skip): no SDK worker ran behind sandcap bridge");
        return None;
    }
    let found = which("node").filter(|_| which("npm").is_some());
    if found.is_none() {
        let message = "node and npm are not installed: the bridge's tests run plugin workers under node and install \
                       the plugin SDK with npm; install them (.ci/run installs Debian's nodejs and npm), or set \
                       SANDCAP_BRIDGE=skip";
        assert!(std::env::var_os("CI").is_none(), "{message}");
        eprintln!("bridge: skipped: {message}");
    }
    found
}

pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

fn workers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/workers")
}

/// The plugin [`misbehaving`] packages are.
pub const MISBEHAVING: (&str, &str) = ("sandcap.misbehaving", "0.0.1");

/// A plugin package whose worker is `tests/bridge/workers/<script>.js`, with a manifest of one
/// `sandbox_provider` driver and no SDK (so its manifest is sent as it exports it).
pub fn misbehaving(script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("a package file");
    write(
        "package.json",
        r#"{"name": "misbehaving", "type": "module", "paperclipPlugin": {"manifest": "./manifest.js"}}"#,
    );
    write(
        "manifest.js",
        r#"export default { id: "sandcap.misbehaving", apiVersion: 1, version: "0.0.1",
             entrypoints: { worker: "./worker.js" },
             environmentDrivers: [{ driverKey: "misbehaving", kind: "sandbox_provider", displayName: "M" }] };"#,
    );
    for (from, to) in [("common.js", "common.js"), (&format!("{script}.js"), "worker.js")] {
        std::fs::copy(workers_dir().join(from), dir.path().join(to)).expect("a worker script");
    }
    dir
}

/// The lines a worker script appended to `name` next to itself.
pub fn records(package: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(package.join(name)).unwrap_or_default().lines().map(String::from).collect()
}

/// When each worker started (`starts.log`), in milliseconds since the epoch.
pub fn starts(package: &Path) -> Vec<u64> {
    records(package, "starts.log").iter().filter_map(|l| l.split(' ').next()?.parse().ok()).collect()
}

/// `sandcap bridge` running; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Bridge {
    child: Child,
    pub url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Bridge {
    pub fn start(package: &Path, node: &Path, args: &[&str]) -> Bridge {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandcap"))
            .args(["bridge", "--listen", "127.0.0.1:0", "--package"])
            .arg(package)
            .arg("--node")
            .arg(node)
            .args(args)
            .env("RUST_LOG", "info,sandcap::bridge=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sandcap bridge starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found, listening) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (log, found) = (log.clone(), found.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some(addr) = line.strip_prefix("listening on ") {
                        let _ = found.send(addr.to_string());
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let Ok(addr) = listening.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("the bridge did not listen:\n{}", log.lock().unwrap().join("\n"));
        };
        Bridge { child, url: format!("http://{addr}/rpc"), log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.log().into_iter().filter(|l| l.contains(needle)).collect()
    }

    /// Waits up to `timeout` for a log line with `needle`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(line) = self.lines_with(needle).pop() {
                return line;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no log line with {needle:?} within {timeout:?}:\n{}", self.log().join("\n"));
    }

    /// The bridge's peak resident memory so far (`VmHWM`).
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc/<pid>/status");
        let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).expect("VmHWM");
        kib.trim().trim_end_matches("kB").trim().parse::<u64>().expect("kB") * 1024
    }

    /// SIGTERM, and the exit status (SIGKILL after 10 s).
    pub fn stop(mut self) -> ExitStatus {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the bridge did not stop on SIGTERM:\n{}", self.log().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: a signal to our own child, which kills its worker as it stops.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            for _ in 0..100 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A provider for `plugin` at `version` whose worker is at `url`, with `drivers`.
pub fn provider(plugin: &str, version: &str, url: &str, drivers: serde_json::Value) -> SandboxProvider {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxProvider",
        "metadata": {"name": "bridged"},
        "spec": {"pluginKey": plugin, "version": version, "worker": {"url": url}, "environmentDrivers": drivers}
    }))
    .expect("a SandboxProvider")
}

/// One probe by sandcap's probe module, as the controller makes it for a provider of `plugin`
/// at `version`, and how long it took.
pub async fn probe(url: &str, (plugin, version): (&str, &str)) -> (ProbeOutcome, Duration) {
    let loopback = AllowedCidrs::new(["127.0.0.0/8".parse().unwrap()]);
    let prober = Prober::new(PROBE_TIMEOUT, WorkerPolicy { allow_urls: true, allowed_cidrs: loopback }, "bridge-test")
        .expect("a prober");
    let spec = provider(plugin, version, url, serde_json::json!([])).spec;
    let started = Instant::now();
    let outcome = prober.probe_url(&parse_worker_url(url).unwrap(), &spec).await;
    (outcome, started.elapsed())
}

/// What the probes of [`probe_for`] found.
#[derive(Debug, Default)]
pub struct Probes {
    pub succeeded: usize,
    pub unreachable: usize,
    /// Failures of any other class: the bridge never answers one.
    pub other: Vec<String>,
    pub slowest: Duration,
}

/// Probes `url` (a [`misbehaving`] package's bridge) every 100 ms for `duration`.
pub async fn probe_for(url: &str, duration: Duration) -> Probes {
    let (mut found, deadline) = (Probes::default(), Instant::now() + duration);
    while Instant::now() < deadline {
        let (outcome, took) = probe(url, MISBEHAVING).await;
        found.slowest = found.slowest.max(took);
        match outcome {
            ProbeOutcome::Succeeded { .. } => found.succeeded += 1,
            ProbeOutcome::Failed(f) if f.error.class() == Some(FailureClass::Unreachable) => found.unreachable += 1,
            ProbeOutcome::Failed(f) => found.other.push(f.detail()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    found
}
