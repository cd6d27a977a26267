use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{
    Ca, SERVICE_HOST, SecretVolume, eventually, example, review, sample, served_serial, support, wait_serving,
    webhook_denied,
};

/// `sandcap run --webhook-only` on loopback ports it picks, ready to serve. Killed when dropped, so
/// that a failing test leaves no process behind.
struct Sandcap {
    child: std::process::Child,
    webhook: u16,
    admin: u16,
    /// Holds `listening`, the `--listen-report`.
    dir: tempfile::TempDir,
}

impl Sandcap {
    /// With `--tls-self-signed`; `configure` adds flags and decides where the output goes.
    fn start(configure: impl FnOnce(&mut std::process::Command)) -> Sandcap {
        Sandcap::start_with(&["--tls-self-signed"], configure)
    }

    /// With the certificate flags `tls`.
    fn start_with(tls: &[&str], configure: impl FnOnce(&mut std::process::Command)) -> Sandcap {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("listening");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sandcap"));
        command
            .args(["run", "--webhook-only"])
            .args(tls)
            .args(["--webhook-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--listen-report"])
            .arg(&report)
            .env("RUST_LOG", "info");
        configure(&mut command);
        let mut child = command.spawn().unwrap();
        let listening = support::ports::listening(&report, &mut child).unwrap_or_else(|e| panic!("{e}"));
        let (webhook, admin) = (listening.webhook.expect("a webhook listener").port(), listening.admin.port());
        let sandcap = Sandcap { child, webhook, admin, dir };
        let ready = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            http_get(admin, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        });
        assert!(ready, "sandcap run never became ready");
        sandcap
    }

    fn signal(&self, name: &str) {
        let kill =
            std::process::Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status();
        assert!(kill.unwrap().success());
    }

    /// The exit status and how long it took, or `None` if it still runs after `limit`.
    fn wait(&mut self, limit: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some((status, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Sends one review over TLS (the certificate is made at startup: nothing to trust in advance).
    fn post_review(&self, review: &Value) -> Value {
        let client = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let url = format!("https://127.0.0.1:{}/validate", self.webhook);
            let body = serde_json::to_vec(review).unwrap();
            client.post(url).body(body).send().await.unwrap().json().await.unwrap()
        })
    }

    /// A TCP connection that never starts its TLS handshake: shutdown waits for it (up to the
    /// 5 s handshake timeout), which makes a slow shutdown on demand.
    fn stall_shutdown(&self) -> std::net::TcpStream {
        std::net::TcpStream::connect(("127.0.0.1", self.webhook)).unwrap()
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut text).unwrap();
        text
    }
}

impl Drop for Sandcap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real binary, given a Secret volume: a replacement that is expired, not valid yet, or no
/// longer valid for the Service's name is refused (counted, logged, the served certificate stays);
/// the early one is served once its time comes; a good one from the next handshake.
#[tokio::test]
async fn sandcap_run_refuses_a_replacement_outside_its_dates_or_without_the_service_name() {
    let ca = Ca::new();
    let mut volume = SecretVolume::new();
    let now = time::OffsetDateTime::now_utc();
    let (hour, day) = (time::Duration::HOUR, time::Duration::DAY);
    let first = ca.issue(1, &[SERVICE_HOST], now - hour..now + day);
    volume.publish(&first.cert_pem, &first.key_pem);
    let (cert, key) = (volume.cert().display().to_string(), volume.key().display().to_string());
    let tls = ["--tls-cert", &cert, "--tls-key", &key, "--tls-reload-interval", "50ms"];
    let mut sandcap = Sandcap::start_with(&tls, |command| {
        command.args(["--service-name", "sandcap-webhook", "--pod-namespace", "sandcap-system"]);
        command.args(["--shutdown-drain-window", "0s"]).stdout(std::process::Stdio::piped());
    });
    let webhook: SocketAddr = ([127, 0, 0, 1], sandcap.webhook).into();
    let count = |result: &str| {
        let metrics = http_get(sandcap.admin, "/metrics").unwrap_or_default();
        sample(&metrics, &format!("sandcap_certificate_reloads_total{{result=\"{result}\"}}"))
    };
    assert_eq!((count("success"), count("failure")), (1.0, 0.0));

    let expired = ca.issue(2, &[SERVICE_HOST], now - 2 * day..now - day);
    let other_names = ca.issue(3, &["sandcap-webhook.elsewhere.svc"], now - hour..now + day);
    for (refused, failures) in [(&expired, 1.0), (&other_names, 2.0)] {
        volume.publish(&refused.cert_pem, &refused.key_pem);
        eventually("the refusal to be counted", || async { count("failure") == failures }).await;
        assert_eq!(served_serial(&ca, webhook).await, first.serial, "serial {:#x} was served", refused.serial);
    }

    // Issued by a clock 3 s ahead: refused now, served once it is valid, with no change of files.
    let early = ca.issue(4, &[SERVICE_HOST], now + 3 * time::Duration::SECOND..now + day);
    volume.publish(&early.cert_pem, &early.key_pem);
    eventually("the refusal to be counted", || async { count("failure") == 3.0 }).await;
    assert_eq!(served_serial(&ca, webhook).await, first.serial, "served before its notBefore");
    wait_serving(&ca, webhook, early.serial).await;
    assert_eq!((count("success"), count("failure")), (2.0, 3.0));

    // A wildcard for the namespace's Services still holds the name.
    let good = ca.issue(5, &["*.sandcap-system.svc"], now - hour..now + day);
    volume.publish(&good.cert_pem, &good.key_pem);
    wait_serving(&ca, webhook, good.serial).await;
    assert_eq!((count("success"), count("failure")), (3.0, 3.0));
    let metrics = http_get(sandcap.admin, "/metrics").unwrap();
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), good.not_after as f64);

    sandcap.signal("TERM");
    sandcap.wait(Duration::from_secs(10)).expect("sandcap exits within 10 s of SIGTERM");
    let mut logs = String::new();
    sandcap.child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    for why in [
        "the certificate expired at ".to_string(),
        format!("the certificate is not valid for {SERVICE_HOST}, which the webhook is called by"),
        "the certificate is not valid before ".to_string(),
    ] {
        assert!(logs.contains(&why), "{why:?} in {logs}");
    }
}

#[test]
fn sandcap_run_serves_until_sigterm_and_exits_zero() {
    let mut sandcap = Sandcap::start(|command| {
        command.env("SANDCAP_LOG_FORMAT", "json").env("SANDCAP_SHUTDOWN_DRAIN_WINDOW", "0s");
        command.stdout(std::process::Stdio::piped());
    });
    let answer = sandcap.post_review(&review("CREATE", &webhook_denied(), None));
    assert_eq!(answer["response"]["allowed"], false);
    let mut lease = example("lease-reuse.yaml");
    lease["spec"]["reusePolicy"] = json!("always");
    assert_eq!(sandcap.post_review(&review("CREATE", &lease, None))["response"]["allowed"], false);

    sandcap.signal("TERM");
    let (status, _) = sandcap.wait(Duration::from_secs(10)).expect("sandcap exits within 10 s of SIGTERM");
    assert_eq!(status.code(), Some(0));
    let mut logs = String::new();
    sandcap.child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    let lines: Vec<Value> = logs.lines().map(|l| serde_json::from_str(l).expect("JSON logs")).collect();
    assert_eq!(lines[0]["level"], "INFO");
    let denials: Vec<&Value> = lines.iter().filter(|l| l["message"] == "denied").collect();
    assert_eq!(denials.len(), 2, "{logs}");
    let span = |i: usize| &denials[i]["span"];
    assert_eq!(span(0)["name"], "review");
    assert_eq!((&span(0)["kind"], &span(0)["object"]), (&json!("SandboxProvider"), &json!("acme-kubernetes")));
    assert_eq!(span(0)["allowed"], false);
    assert!(span(0).get("namespace").is_none(), "a provider is cluster-scoped: {}", span(0));
    assert_eq!((&span(1)["kind"], &span(1)["object"]), (&json!("SandboxLease"), &json!("run-42")));
    assert_eq!(span(1)["namespace"], "team-a");
    assert!(!logs.contains("acme-worker"), "request bodies are never logged");
}

/// As `sandcap run ... 2>&1 | head -1`: the reader of the logs is gone by the time of the shutdown.
#[test]
fn a_closed_log_pipe_does_not_stop_the_shutdown() {
    let (reader, writer) = std::io::pipe().unwrap();
    let mut sandcap = Sandcap::start(|command| {
        command.arg("--shutdown-drain-window=0s").stdout(writer.try_clone().unwrap()).stderr(writer);
    });
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(reader), &mut first).unwrap();
    assert!(first.contains("INFO"), "{first}");
    // The reader was dropped with the BufReader; the review's log line meets the closed pipe too.
    assert_eq!(sandcap.post_review(&review("CREATE", &webhook_denied(), None))["response"]["allowed"], false);

    sandcap.signal("TERM");
    let (status, took) = sandcap.wait(Duration::from_secs(10)).expect("sandcap exits within 10 s of SIGTERM");
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_shutdown_past_its_deadline_exits_non_zero() {
    let mut sandcap = Sandcap::start(|command| {
        command
            .args(["--shutdown-timeout", "1s", "--shutdown-drain-window", "0s"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
    });
    let _stalled = sandcap.stall_shutdown();
    std::thread::sleep(Duration::from_millis(100));
    sandcap.signal("TERM");
    let (status, took) = sandcap.wait(Duration::from_secs(4)).expect("sandcap exits at its deadline");
    assert_eq!(status.code(), Some(1));
    assert!(took >= Duration::from_millis(900), "{took:?}");
    let stderr = sandcap.stderr();
    assert!(stderr.contains("sandcap: shutdown did not finish within 1s"), "{stderr}");
}

#[test]
fn a_second_signal_exits_at_once() {
    let mut sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    });
    let _stalled = sandcap.stall_shutdown();
    std::thread::sleep(Duration::from_millis(100));
    sandcap.signal("TERM");
    assert!(sandcap.wait(Duration::from_millis(500)).is_none(), "the stalled connection holds up the shutdown");
    sandcap.signal("INT");
    let (status, took) = sandcap.wait(Duration::from_secs(2)).expect("sandcap exits on the second signal");
    assert_eq!(status.code(), Some(1));
    assert!(took < Duration::from_millis(500), "{took:?}");
    let stderr = sandcap.stderr();
    assert!(stderr.contains("sandcap: SIGINT received again during shutdown; exiting at once"), "{stderr}");
}

/// SIGTERM: not ready at once, yet every review is answered through the drain window, on open
/// connections and new ones alike; then the port closes and the process exits 0.
#[test]
fn sigterm_keeps_answering_through_the_drain_window() {
    let mut sandcap = Sandcap::start(|command| {
        command.args(["--shutdown-drain-window", "3s"]).stdout(std::process::Stdio::piped());
    });
    let kept_alive = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let allowed = |client: &reqwest::Client| {
        let url = format!("https://127.0.0.1:{}/validate", sandcap.webhook);
        let body = serde_json::to_vec(&review("CREATE", &example("provider-full.yaml"), None)).unwrap();
        let answer: Value = runtime.block_on(async { client.post(url).body(body).send().await?.json().await }).unwrap();
        answer["response"]["allowed"] == true
    };
    assert!(allowed(&kept_alive));

    let signalled = std::time::Instant::now();
    sandcap.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    let readyz = http_get(sandcap.admin, "/readyz").unwrap();
    assert!(readyz.starts_with("HTTP/1.1 503") && readyz.ends_with("not ready: shutting down\n"), "{readyz}");
    for _ in 0..10 {
        assert!(allowed(&kept_alive), "the open connection is served");
        let fresh = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        assert!(allowed(&fresh), "a new connection is served");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(signalled.elapsed() < Duration::from_secs(3), "the checks took longer than the window");

    let (status, _) = sandcap.wait(Duration::from_secs(10)).expect("sandcap exits after the window");
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() >= Duration::from_secs(3), "{:?}", signalled.elapsed());
    assert!(std::net::TcpStream::connect(("127.0.0.1", sandcap.webhook)).is_err());
    let mut logs = String::new();
    sandcap.child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    let phases = ["shutting down: not ready", "drain window over", "no longer accepting", "stopped"];
    let mut at = 0;
    for phase in phases {
        at += logs[at..].find(phase).unwrap_or_else(|| panic!("{phase:?}, in this order, in {logs}"));
    }
}

/// Ctrl-C is a person at a terminal, with nothing routing clients to the process: no window.
#[test]
fn sigint_skips_the_drain_window() {
    let mut sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null());
    });
    sandcap.signal("INT");
    let (status, took) = sandcap.wait(Duration::from_secs(5)).expect("sandcap exits on SIGINT");
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_drain_window_past_the_shutdown_timeout_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(["run", "--webhook-only", "--tls-self-signed", "--shutdown-timeout", "5s"])
        .args(["--webhook-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sandcap: --shutdown-drain-window (10s) must be shorter than --shutdown-timeout (5s)"),
        "{stderr}"
    );
}

/// Port 0 is how every harness starts sandcap: the report names the ports the system picked, whole,
/// and they are the ones served.
#[test]
fn sandcap_run_reports_the_ports_it_bound() {
    let sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null());
    });
    let text = std::fs::read_to_string(sandcap.dir.path().join("listening")).unwrap();
    assert_eq!(text, format!("webhook 127.0.0.1:{}\nadmin 127.0.0.1:{}\n", sandcap.webhook, sandcap.admin));
    assert!(sandcap.webhook != 0 && sandcap.admin != 0 && sandcap.webhook != sandcap.admin, "{text}");
    assert_eq!(std::fs::read_dir(sandcap.dir.path()).unwrap().count(), 1, "nothing but the report is left");
    assert!(http_get(sandcap.admin, "/healthz").unwrap().ends_with("ok\n"));
}

/// The process metrics every exporter serves and dashboards expect, of this very process.
#[test]
fn sandcap_run_serves_the_process_metrics() {
    let sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null());
    });
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let metrics = http_get(sandcap.admin, "/metrics").unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", sandcap.child.id())).unwrap();
    let vm_rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    let vm_rss = vm_rss.trim().trim_end_matches(" kB").parse::<f64>().unwrap() * 1024.0;
    let rss = sample(&metrics, "process_resident_memory_bytes");
    assert!((rss - vm_rss).abs() < 16.0 * 1024.0 * 1024.0, "{rss} against VmRSS {vm_rss}");
    let started = sample(&metrics, "process_start_time_seconds");
    assert!(now - 60.0 < started && started <= now, "{started} against {now}");
    assert!(sample(&metrics, "process_open_fds") >= 3.0, "{metrics}");
    assert!(metrics.contains("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total "), "{metrics}");
    assert!(sample(&metrics, "process_threads") >= 2.0, "{metrics}");
}

/// A minimal HTTP/1.1 GET, so the polling loop needs no runtime.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}
