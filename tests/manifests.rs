//! Where `validate` and `resolve` read manifests from: files, `-` (stdin) and directories, as
//! kubectl's `-f` does, each within a bound (docs/contract.md, "Command line").

use std::path::Path;
use std::process::{Command, Output};

mod support;

use sandcap::cli::MAX_INPUT;
use sandcap_core::versions::V1;

fn sandcap(args: &[&str], stdin: &[u8]) -> Output {
    // A refused input closes stdin early: the writer must not block the test.
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandcap"));
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    support::output_with_stdin(&mut command, stdin)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn example(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)).expect("example")
}

#[test]
fn validate_reads_stdin_as_dash_positional_or_with_f() {
    for args in [&["validate", "-"][..], &["validate", "-f", "-"], &["validate", "--filename=-"]] {
        let o = sandcap(args, &example("lease-job.yaml"));
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "ALLOWED SandboxLease/batch-7\n", "{args:?}");
    }
    let o = sandcap(&["validate", "-", "-f", "-"], b"");
    assert_eq!((o.status.code(), text(&o.stderr)), (Some(2), "sandcap: - (stdin) can be read only once\n".into()));
    let o = sandcap(&["validate", "-"], b"kind: [");
    assert!(text(&o.stderr).starts_with("sandcap: STDIN: document 1: not valid YAML or JSON"), "{}", text(&o.stderr));
}

#[test]
fn a_directory_gives_its_manifests_in_order_and_its_subdirectories_only_with_r() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("nested")).unwrap();
    std::fs::write(d.join("b-lease.yml"), example("lease-job.yaml")).unwrap();
    std::fs::write(d.join("a-provider.json"), text(&example("provider-full.yaml")).replace("acme-kubernetes", "x"))
        .unwrap();
    std::fs::write(d.join("notes.txt"), "not a manifest").unwrap();
    std::fs::write(d.join("nested/c.yaml"), example("lease-reuse.yaml")).unwrap();
    // A link to a directory is not followed (as kubectl does not), so a loop cannot form.
    std::os::unix::fs::symlink(d, d.join("nested/loop")).unwrap();
    let shown = d.display().to_string();
    let o = sandcap(&["validate", &shown], b"");
    assert_eq!(text(&o.stdout), "ALLOWED SandboxProvider/x\nALLOWED SandboxLease/batch-7\n", "{}", text(&o.stderr));
    let o = sandcap(&["validate", "-R", "-f", &shown], b"");
    let all = "ALLOWED SandboxProvider/x\nALLOWED SandboxLease/batch-7\nALLOWED SandboxLease/run-42\n";
    assert_eq!(text(&o.stdout), all, "{}", text(&o.stderr));
    std::fs::write(d.join("nested/c.yaml"), "kind: ConfigMap\nmetadata: {name: cm}\n").unwrap();
    let o = sandcap(&["validate", "-R", &shown], b"");
    let err = text(&o.stderr);
    assert!(err.starts_with("sandcap: ") && err.contains("nested/c.yaml: ConfigMap/cm: unknown kind"), "{err}");
}

#[test]
fn resolve_reads_any_one_file_from_stdin_and_secrets_from_a_directory() {
    let methods = V1.worker_methods().join(",");
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("creds.yaml"), example("secrets/acme-credentials.yaml")).unwrap();
    let secret_dir = secrets.path().display().to_string();
    let args = ["resolve", "--provider", "-", "--lease", "examples/lease-reuse.yaml", "--secret", &secret_dir];
    let o =
        sandcap(&[&args[..], &["--worker-methods", &methods, "-o", "json"]].concat(), &example("provider-full.yaml"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["explanations"].as_array().unwrap().iter().all(|e| e["granted"] == true), "{r:#}");
    assert!(!text(&o.stdout).contains("s3cr3t"));
    let o = sandcap(&["resolve", "--provider", "-", "--lease", "-"], &example("provider-full.yaml"));
    assert_eq!(text(&o.stderr), "sandcap: - (stdin) can be read only once\n");
}

#[test]
fn an_input_over_the_bound_is_refused_without_reading_it_all() {
    let big = vec![b'#'; usize::try_from(MAX_INPUT).unwrap() + 1];
    let o = sandcap(&["validate", "-"], &big);
    assert_eq!((o.status.code(), text(&o.stderr)), (Some(2), "sandcap: STDIN: larger than 16 MiB\n".into()));
    let exactly = vec![b'#'; usize::try_from(MAX_INPUT).unwrap()];
    let o = sandcap(&["validate", "-"], &exactly);
    assert_eq!(o.status.code(), Some(0), "a comment of exactly the bound is read: {}", text(&o.stderr));
}
