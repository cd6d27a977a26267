//! The sandcap binary under test: `sandcap run` as a local process with the chart Deployment's
//! environment (pod-only parts such as mounted certificates and `0.0.0.0` replaced by loopback
//! equivalents) and a token of the chart's ServiceAccount ([`Sandcap`]); its command line as admin
//! ([`sandcap()`]).

use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use crate::harness::cluster::{self, Cluster, spawn_logged};
use crate::harness::install::Install;

/// One `sandcap run` process; killed when dropped.
pub struct Sandcap {
    child: Child,
    pub name: String,
    pub webhook_port: u16,
    pub admin_port: u16,
    pub log: PathBuf,
}

impl Sandcap {
    /// Starts `sandcap run` with the chart's environment for pod `name`, the given kubeconfig,
    /// loopback addresses, and `overrides` (replacing or adding variables) on top; returns once it
    /// listens.
    pub fn start(cluster: &Cluster, install: &Install, name: &str, overrides: &[(&str, &str)]) -> Sandcap {
        let report = cluster.dir.join(format!("{name}.listening"));
        let tls = cluster.dir.join(format!("{name}-tls"));
        let (cert, key) = cluster.ca.write_serving(&tls, &install.service_names());
        let mut env = install.env(name);
        let loopback = [
            ("SANDCAP_WEBHOOK_ADDR", "127.0.0.1:0".to_string()),
            ("SANDCAP_ADMIN_ADDR", "127.0.0.1:0".to_string()),
            ("SANDCAP_LISTEN_REPORT", report.display().to_string()),
            ("SANDCAP_TLS_CERT", cert.display().to_string()),
            ("SANDCAP_TLS_KEY", key.display().to_string()),
            // The Secret would be mounted by the kubelet; here the webhook serves the test CA's pair.
            ("SANDCAP_SELF_MANAGED_CERTS", "false".to_string()),
            // Workers listen on loopback URLs, which must be allowed explicitly; a Service would
            // need cluster DNS.
            ("SANDCAP_ALLOW_WORKER_URLS", "true".to_string()),
            ("SANDCAP_WORKER_URL_ALLOWED_CIDRS", "127.0.0.0/8".to_string()),
            ("SANDCAP_LOG_FORMAT", "text".to_string()),
        ];
        for (k, v) in loopback.iter().map(|(k, v)| (*k, v.as_str())).chain(overrides.iter().copied()) {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v.to_string()));
        }
        let log = cluster.dir.join(format!("{name}.log"));
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&report);
        // SANDCAP_E2E_SANDCAP runs another build (an older commit, to see a test fail first).
        let binary = std::env::var_os("SANDCAP_E2E_SANDCAP").unwrap_or_else(|| env!("CARGO_BIN_EXE_sandcap").into());
        let mut command = Command::new(binary);
        command.arg("run").env_clear().envs(env).env("KUBECONFIG", &install.kubeconfig).env("RUST_LOG", "info");
        let mut child = spawn_logged(command, &log);
        let listening = crate::support::ports::listening(&report, &mut child)
            .unwrap_or_else(|e| panic!("{name}: {e}:\n{}", cluster::tail(&log, 30)));
        // 0 without a webhook (SANDCAP_CONTROLLERS_ONLY).
        let webhook_port = listening.webhook.map_or(0, |addr| addr.port());
        Sandcap { child, name: name.to_string(), webhook_port, admin_port: listening.admin.port(), log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/readyz` on the admin port answers 200.
    pub async fn ready(&self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.admin_port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if reqwest::get(&url).await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("sandcap {} not ready within 30s:\n{}", self.name, cluster::tail(&self.log, 30));
    }

    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin_port);
        reqwest::get(&url).await.expect("metrics answer").text().await.expect("metrics text")
    }

    /// The process's peak resident memory so far, in bytes.
    pub fn peak_rss(&self) -> u64 {
        crate::support::peak_rss(self.child.id())
    }

    /// Resident memory now (`VmRSS`), in bytes.
    pub fn rss(&self) -> u64 {
        let kib = crate::support::proc_status(self.child.id(), "VmRSS").expect("VmRSS in /proc/<pid>/status");
        kib.trim_end_matches("kB").trim().parse::<u64>().expect("VmRSS in kB") * 1024
    }

    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits up to `timeout` for the process to exit (`Duration::ZERO`: whether it has).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lines of the log that no healthy run writes.
    pub fn problems(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.contains("panicked") || l.to_lowercase().contains("forbidden"))
            .map(String::from)
            .collect()
    }
}

impl Drop for Sandcap {
    fn drop(&mut self) {
        // SIGINT skips the drain window: a scenario that is over has no clients left to wait for.
        cluster::processes::stop_with(&mut self.child, libc::SIGINT);
    }
}

/// `sandcap ARGS` as admin.
pub fn sandcap(c: &Cluster, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("sandcap runs")
}
