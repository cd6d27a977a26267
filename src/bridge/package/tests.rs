use super::*;
use serde_json::json;

fn from_loaded(dir: &Path, manifest_path: &Path, loaded: Value) -> Result<Package, PackageError> {
    with_worker(manifest_from(dir, manifest_path, loaded)?)
}

fn package(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn the_manifest_is_found_in_the_hosts_order() {
    let declared = package(&[("package.json", r#"{"paperclipPlugin": {"manifest": "./out/m.js"}}"#)]);
    assert_eq!(manifest_path(declared.path()).unwrap(), declared.path().join("out/m.js"));
    let conventional = package(&[("package.json", "{}"), ("dist/manifest.js", ""), ("manifest.js", "")]);
    assert_eq!(manifest_path(conventional.path()).unwrap(), conventional.path().join("dist/manifest.js"));
    let root = package(&[("package.json", "{}"), ("manifest.js", "")]);
    assert_eq!(manifest_path(root.path()).unwrap(), root.path().join("manifest.js"));
    let none = package(&[("package.json", "{}")]);
    assert!(matches!(manifest_path(none.path()), Err(PackageError::NoManifest { .. })));
    let broken = package(&[("package.json", "[1]")]);
    assert!(matches!(manifest_path(broken.path()), Err(PackageError::PackageJson { .. })));
}

#[test]
fn the_worker_is_inside_the_package() {
    let dir = package(&[("dist/worker.js", ""), ("../outside.js", "")]);
    assert_eq!(worker_entrypoint(dir.path(), "./dist/worker.js"), Some(dir.path().join("dist/worker.js")));
    assert_eq!(worker_entrypoint(dir.path(), "dist/../dist/worker.js"), Some(dir.path().join("dist/worker.js")));
    assert_eq!(worker_entrypoint(dir.path(), "../outside.js"), None, "a path out of the package");
    assert_eq!(worker_entrypoint(dir.path(), "dist/missing.js"), None);
    assert_eq!(worker_entrypoint(dir.path(), "dist"), None, "a directory");
}

#[test]
fn the_identity_is_the_manifests() {
    let dir = package(&[("dist/worker.js", "")]);
    let drivers =
        json!([{"driverKey": "k", "kind": "sandbox_provider", "sandboxCapabilities": {"nativeSyncIn": true}}]);
    let manifest = json!({"id": "acme.k", "version": "1.2.3", "apiVersion": 1,
        "entrypoints": {"worker": "./dist/worker.js"}, "environmentDrivers": drivers});
    let found = from_loaded(dir.path(), &dir.path().join("m.js"), json!({"validated": true, "manifest": manifest}));
    let found = found.unwrap();
    assert!(found.validated);
    assert_eq!(found.identity(), json!({"id": "acme.k", "version": "1.2.3", "environmentDrivers": drivers}));
    let bare = json!({"id": "a", "version": "1.0.0", "entrypoints": {"worker": "dist/worker.js"}});
    let found = from_loaded(dir.path(), Path::new("m.js"), json!({"manifest": bare})).unwrap();
    assert_eq!(found.identity()["environmentDrivers"], json!([]), "no drivers: an empty list");
}

#[test]
fn a_manifest_without_what_the_bridge_needs_is_refused() {
    let dir = package(&[("dist/worker.js", "")]);
    let judge = |manifest: Value| {
        from_loaded(dir.path(), Path::new("m.js"), json!({"manifest": manifest})).unwrap_err().to_string()
    };
    assert!(judge(json!({"version": "1", "entrypoints": {"worker": "dist/worker.js"}})).contains("has no id"));
    assert!(judge(json!({"id": "a", "entrypoints": {"worker": "dist/worker.js"}})).contains("has no version"));
    assert!(judge(json!({"id": "a", "version": "1"})).contains("entrypoints.worker"));
    assert!(
        judge(json!({"id": "a", "version": "1", "entrypoints": {"worker": "../x.js"}})).contains("not a file inside")
    );
    let drivers =
        json!({"id": "a", "version": "1", "entrypoints": {"worker": "dist/worker.js"}, "environmentDrivers": {}});
    assert!(judge(drivers).contains("not a list"));
    assert!(judge(json!([])).contains("does not export an object"));
}

#[test]
fn the_telling_line_of_nodes_stderr_is_its_fatal_error_not_its_warnings() {
    let oom = "(node:1) ExperimentalWarning: Permission is an experimental feature\n(Use `node --trace-warnings ...`)\n\n<--- Last few GCs --->\nFATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n";
    assert_eq!(telling(oom), Some("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory"));
    let thrown = "(node:1) ExperimentalWarning: x\nfile:///m.js:1\nSyntaxError: Unexpected token\n";
    assert_eq!(telling(thrown), Some("SyntaxError: Unexpected token"));
    assert_eq!(telling("(node:1) ExperimentalWarning: x\n"), None);
}
