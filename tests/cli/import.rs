//! `sandcap import` without node: manifest JSON, and hostile tarballs, each refused within its
//! budget before anything is evaluated (docs/cli.md, "sandcap import"). The package itself, under
//! node: tests/bridge/import.rs.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Value, json};

use super::{sandcap, stderr, stdout, write};

const SERVICE: [&str; 2] = ["--worker-service", "sandbox-system/acme-worker:9000"];

fn manifest(drivers: Value) -> Value {
    json!({"id": "acme.sandbox_k8s", "apiVersion": 1, "version": "1.4.0", "displayName": "Acme",
           "capabilities": ["environment.drivers.register"], "entrypoints": {"worker": "./dist/worker.js"},
           "environmentDrivers": drivers})
}

fn driver(extra: Value) -> Value {
    let mut d = json!({"driverKey": "kubernetes", "kind": "sandbox_provider", "displayName": "Kubernetes",
                       "configSchema": {"type": "object", "properties": {"namespace": {"type": "string"}}}});
    d.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    d
}

fn import_stdin(input: &str, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(["import", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn import_of_manifest_json_writes_the_provider_the_cluster_admits() {
    let caps = json!({"sandboxCapabilities": {"reusableLeases": true, "nativeSyncIn": false}});
    let o = import_stdin(&manifest(json!([driver(caps.clone())])).to_string(), &SERVICE);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let provider: Value = serde_saphyr::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        provider,
        json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider",
               "metadata": {"name": "acme.sandbox-k8s"},
               "spec": {"pluginKey": "acme.sandbox_k8s", "version": "1.4.0",
                        "worker": {"service": {"namespace": "sandbox-system", "name": "acme-worker", "port": 9000,
                                               "path": "/rpc"}},
                        "environmentDrivers": [driver(caps)]}})
    );
    assert!(stderr(&o).contains("NOTE: spec.worker.service.path is /rpc"), "{}", stderr(&o));
    assert!(stderr(&o).contains("sandcap's copy of the host's manifest rules"), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "provider.yaml", &stdout(&o));
    let validated = sandcap(&["validate", &file]);
    assert!(stdout(&validated).starts_with("ALLOWED SandboxProvider/acme.sandbox-k8s\n"));
    let pair =
        "WARNING SandboxProvider/acme.sandbox-k8s: spec.environmentDrivers[0]: nativeSyncIn is false, nativeSyncOut";
    assert!(stdout(&validated).contains(pair) && stderr(&o).contains(pair), "the webhook's warnings are said");
    let named =
        import_stdin(&manifest(json!([driver(json!({}))])).to_string(), &[&SERVICE[..], &["--name", "acme"]].concat());
    assert!(stdout(&named).contains("name: acme\n"), "{}", stdout(&named));
}

#[test]
fn import_refuses_what_the_host_refuses_and_says_what_the_cluster_adds() {
    let refused = import_stdin(
        &manifest(json!([driver(json!({"sandboxCapabilities": {"nativeSyncIn": null}}))])).to_string(),
        &SERVICE,
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(stdout(&refused).is_empty());
    assert!(
        stderr(&refused).contains(
            "REFUSED -: the host's manifest validator refuses it: environmentDrivers.0.sandboxCapabilities.nativeSyncIn: \
             Invalid input: expected boolean, received null"
        ),
        "{}",
        stderr(&refused)
    );
    let v2 = manifest(json!([driver(
        json!({"sandboxCapabilities": {"duplexCommandStream": true}, "supportsLoginPty": true})
    )]));
    let denied = import_stdin(&v2.to_string(), &SERVICE);
    assert_eq!(denied.status.code(), Some(1), "{}", stderr(&denied));
    assert!(stdout(&denied).is_empty());
    let text = stderr(&denied);
    assert!(text.contains("NOTE: driver kubernetes: supportsLoginPty (true) is left out"), "{text}");
    assert!(
        text.contains("NOTE: driver kubernetes: sandboxCapabilities.duplexCommandStream is not a key of contract v1"),
        "{text}"
    );
    assert!(text.contains("DENIED SandboxProvider/acme.sandbox-k8s: "), "{text}");
    let admitted = import_stdin(&v2.to_string(), &[&SERVICE[..], &["--contract", "v2"]].concat());
    assert_eq!(admitted.status.code(), Some(0), "{}", stderr(&admitted));
    assert!(stdout(&admitted).contains("duplexCommandStream: true") && !stdout(&admitted).contains("supportsLoginPty"));
}

#[test]
fn import_says_where_the_object_has_a_null() {
    let nulls = manifest(json!([driver(json!({"configSchema": {"type": "object", "default": null}}))]));
    let o = import_stdin(&nulls.to_string(), &SERVICE);
    let note = "NOTE: the object has a null at spec.environmentDrivers[0].configSchema.default: kubectl apply drops it";
    assert!(stderr(&o).contains(note), "{}", stderr(&o));
    assert!(stdout(&o).contains("default: null"), "kept as the manifest has it: {}", stdout(&o));
}

#[test]
fn import_needs_the_worker_address_and_readable_input() {
    let input = manifest(json!([driver(json!({}))])).to_string();
    let o = import_stdin(&input, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("give --worker-service NAMESPACE/NAME:PORT"), "{}", stderr(&o));
    let url = import_stdin(&input, &["--worker-url", "https://worker.example/rpc"]);
    assert_eq!(url.status.code(), Some(1), "a worker URL needs --allow-worker-urls");
    let allowed = import_stdin(&input, &["--worker-url", "https://worker.example/rpc", "--allow-worker-urls"]);
    assert!(stdout(&allowed).contains("url: https://worker.example/rpc"), "{}", stderr(&allowed));
    for (bad, needle) in [("[1]", "not a JSON object"), ("{", "neither a package directory")] {
        let o = import_stdin(bad, &SERVICE);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
    let missing = sandcap(&[&["import", "no/such/file.json"][..], &SERVICE].concat());
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("no/such/file.json: cannot read"), "{}", stderr(&missing));
}

/// A gzip tarball of raw entries: (name, type, size, data), the name written into the header
/// as it is (the tar crate would refuse the hostile ones).
fn tarball(dir: &Path, entries: &[(&str, tar::EntryType, u64, &[u8])]) -> String {
    let path = dir.join("package.tgz");
    let mut gz = GzEncoder::new(std::fs::File::create(&path).unwrap(), Compression::fast());
    for (name, kind, size, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(*kind);
        header.set_size(*size);
        header.set_mode(0o644);
        if kind.is_symlink() || kind.is_hard_link() {
            header.set_link_name("/etc/passwd").unwrap();
        }
        header.set_cksum();
        gz.write_all(header.as_bytes()).unwrap();
        if data.is_empty() {
            // Zeros, as many as the header says.
            let zeros = vec![0u8; 1 << 20];
            let mut left = *size;
            while left > 0 {
                let n = left.min(zeros.len() as u64);
                gz.write_all(&zeros[..n as usize]).unwrap();
                left -= n;
            }
        } else {
            gz.write_all(data).unwrap();
        }
        gz.write_all(&vec![0u8; ((512 - size % 512) % 512) as usize]).unwrap();
    }
    gz.write_all(&[0u8; 1024]).unwrap();
    gz.finish().unwrap();
    path.display().to_string()
}

fn refused(path: &str, needle: &str) {
    let o = sandcap(&[&["import", path][..], &SERVICE].concat());
    assert_eq!(o.status.code(), Some(2), "{needle}: {}", stderr(&o));
    assert!(stdout(&o).is_empty());
    assert!(stderr(&o).contains(needle), "{needle}: {}", stderr(&o));
}

#[test]
fn hostile_tarballs_are_refused_within_their_budgets() {
    use tar::EntryType::{Block, Char, Directory, Fifo, Link, Regular, Symlink};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifest: &[u8] = b"export default {};";
    refused(
        &tarball(d, &[("package/../../escape.js", Regular, 18, manifest)]),
        "entry package/../../escape.js: is not a relative path under package/",
    );
    assert!(!d.join("escape.js").exists() && !Path::new("/tmp/escape.js").exists());
    refused(
        &tarball(d, &[("/package/manifest.js", Regular, 18, manifest)]),
        "entry /package/manifest.js: is not a relative path",
    );
    refused(
        &tarball(d, &[("other/manifest.js", Regular, 18, manifest)]),
        "entry other/manifest.js: is not a relative path under package/",
    );
    refused(&tarball(d, &[("package/manifest.js", Symlink, 0, b"")]), "entry package/manifest.js: is a link");
    refused(&tarball(d, &[("package/manifest.js", Link, 0, b"")]), "entry package/manifest.js: is a link");
    for kind in [Char, Block, Fifo] {
        refused(
            &tarball(d, &[("package/dev", kind, 0, b"")]),
            "entry package/dev: is not a regular file or a directory",
        );
    }
    let many: Vec<String> = (0..10_001).map(|i| format!("package/d{i}/")).collect();
    let many: Vec<(&str, tar::EntryType, u64, &[u8])> =
        many.iter().map(|n| (n.as_str(), Directory, 0, &b""[..])).collect();
    refused(&tarball(d, &many), "has more than 10000 entries");
    refused(
        &tarball(d, &[("package/big", Regular, 64 * 1024 * 1024 + 1, b"")]),
        "decompresses to more than 67108864 bytes",
    );
    let mib: Vec<String> = (0..65).map(|i| format!("package/f{i}")).collect();
    let mib: Vec<(&str, tar::EntryType, u64, &[u8])> =
        mib.iter().map(|n| (n.as_str(), Regular, 1 << 20, &b""[..])).collect();
    refused(&tarball(d, &mib), "decompresses to more than 67108864 bytes");
    let large = d.join("large.tgz");
    let mut bytes = vec![0x1f, 0x8b];
    bytes.resize(16 * 1024 * 1024 + 1, 0);
    std::fs::write(&large, bytes).unwrap();
    refused(&large.display().to_string(), "is larger than 16777216 bytes");
    let truncated = d.join("truncated.tgz");
    std::fs::write(&truncated, [0x1f, 0x8b, 8, 0]).unwrap();
    refused(&truncated.display().to_string(), "is not a gzip tarball");
    let no_manifest = tarball(d, &[("package/package.json", Regular, 2, b"{}")]);
    refused(&no_manifest, "no manifest (paperclipPlugin.manifest in package.json, dist/manifest.js or manifest.js)");
}
