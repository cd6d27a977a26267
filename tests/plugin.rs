//! The binary as kubectl's plugin, and its live commands without a cluster: named
//! `kubectl-sandcap` its usage says `kubectl sandcap`; `explain` and `check` fail in one line,
//! and within their timeouts however the apiserver misbehaves. The commands against a real
//! apiserver are in tests/e2e/plugin/.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A `kubectl-sandcap` link to the built binary, in a directory of its own.
fn plugin(dir: &Path) -> PathBuf {
    let link = dir.join(sandcap::cli::PLUGIN_NAME);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sandcap"), &link).unwrap();
    link
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program).args(args).env_remove("KUBECONFIG").output().expect("runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn named_kubectl_sandcap_its_usage_says_kubectl_sandcap() {
    let dir = tempfile::tempdir().unwrap();
    let link = plugin(dir.path());
    let help = text(&run(&link, &["--help"]).stdout);
    assert!(help.contains("Usage: kubectl sandcap <COMMAND>"), "{help}");
    for command in ["explain", "check"] {
        let help = text(&run(&link, &[command, "--help"]).stdout);
        assert!(help.contains(&format!("Usage: kubectl sandcap {command}")), "{help}");
    }
    let wrong = run(&link, &["explain", "lease"]);
    assert!(text(&wrong.stderr).contains("Usage: kubectl sandcap explain lease"), "{}", text(&wrong.stderr));
    let plain = text(&run(Path::new(env!("CARGO_BIN_EXE_sandcap")), &["check", "--help"]).stdout);
    assert!(plain.contains("Usage: sandcap check"), "{plain}");
}

fn kubeconfig(dir: &Path, server: &str) -> String {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{server}', insecure-skip-tls-verify: true}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: team-a}}\ncurrent-context: c\n"
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn without_a_usable_kubeconfig_the_live_commands_exit_2_in_one_line() {
    let sandcap = Path::new(env!("CARGO_BIN_EXE_sandcap"));
    for args in [
        &["check", "--kubeconfig", "/nonexistent/kubeconfig"][..],
        &["explain", "lease", "x", "--kubeconfig", "/nonexistent/kubeconfig"],
    ] {
        let o = run(sandcap, args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("sandcap: /nonexistent/kubeconfig: not a usable kubeconfig") && err.lines().count() == 1,
            "{err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), "https://127.0.0.1:1");
    let o = run(sandcap, &["explain", "--kubeconfig", &config, "--context", "nope", "provider", "p"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// An apiserver that accepts connections and never answers must not hold a command past its
/// timeouts.
#[test]
fn a_hung_apiserver_fails_the_first_check_within_its_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("https://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((connection, _)) = listener.accept() {
            held.push(connection);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &server);
    let sandcap = Path::new(env!("CARGO_BIN_EXE_sandcap"));
    let started = Instant::now();
    let o = run(sandcap, &["check", "--kubeconfig", &config, "--request-timeout", "1s", "--timeout", "3s"]);
    let took = started.elapsed();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", text(&o.stderr));
    assert!(out.starts_with("FAIL  crds         reading CRD sandbox"), "{out}");
    assert_eq!(out.lines().count(), 1, "the first failure ends the checks: {out}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let started = Instant::now();
    let o = run(sandcap, &["explain", "lease", "run-42", "--kubeconfig", &config, "--request-timeout", "1s"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("sandcap: reading SandboxLease team-a/run-42: "), "the context's namespace: {err}");
    assert!(started.elapsed() < Duration::from_secs(20));
}
