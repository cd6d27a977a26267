//! The plugin package, found as the host finds it: `package.json`'s `paperclipPlugin.manifest`
//! (or the conventional `dist/manifest.js`, then `manifest.js`), a built ES module whose default
//! export is the manifest; the worker is the manifest's `entrypoints.worker`, inside the package.
//!
//! The manifest is JavaScript, so node evaluates it ([`LOAD_MANIFEST`]): imported as the host
//! imports it, passed through the host's own validator (`pluginManifestV1Schema` of the package's
//! `@paperclipai/shared`, the SDK's dependency) when the package has it, and written back as JSON,
//! bounded in size and time. `sandcap import` loads manifests with it too ([`load_manifest`]), so
//! the provider it writes declares what the bridge reports.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;

use serde_json::{Map, Value};
use tokio::io::AsyncReadExt;

use super::Budgets;
use super::confine::{self, Confinement, Unconfinable};
use super::worker::worker_env;

/// Why the package cannot be run: the bridge stops at once (nothing would answer).
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: not a JSON object")]
    PackageJson { path: String },
    #[error("{dir}: no manifest (paperclipPlugin.manifest in package.json, dist/manifest.js or manifest.js)")]
    NoManifest { dir: String },
    #[error("cannot run {node} to load the manifest: {source}")]
    Node { node: String, source: std::io::Error },
    #[error("the manifest {path} did not load: {detail}")]
    Load { path: String, detail: String },
    #[error("the manifest {path} {problem}")]
    Manifest { path: String, problem: String },
    #[error("the host's validator refuses the manifest {path}: {}", problems.join("; "))]
    Refused { path: String, problems: Vec<String> },
    #[error(transparent)]
    Unconfinable(#[from] Unconfinable),
}

/// The package, its manifest as the worker is given it, and what the probe's answer names.
#[derive(Clone, Debug)]
pub struct Package {
    pub dir: PathBuf,
    pub manifest_path: PathBuf,
    /// The manifest as the host's validator parsed it (or, without the validator, as exported).
    pub manifest: Map<String, Value>,
    /// Whether the host's validator judged it.
    pub validated: bool,
    pub worker: PathBuf,
}

impl Package {
    pub fn id(&self) -> &str {
        self.manifest.get("id").and_then(Value::as_str).unwrap_or_default()
    }

    pub fn version(&self) -> &str {
        self.manifest.get("version").and_then(Value::as_str).unwrap_or_default()
    }

    /// The identity the probe's answer carries: `id`, `version` and the manifest's
    /// `environmentDrivers` as the manifest has them (none: an empty list).
    pub fn identity(&self) -> Value {
        let drivers = self.manifest.get("environmentDrivers").cloned().unwrap_or_else(|| Value::Array(vec![]));
        serde_json::json!({"id": self.id(), "version": self.version(), "environmentDrivers": drivers})
    }
}

/// Imports the manifest module given as a file URL (`argv[1]`), validates it with the host's schema
/// when `@paperclipai/shared` is installed in the package (`argv[2]`), and writes
/// `{"validated": bool, "manifest": ...}`, `{"refused": ["path: message", ...]}` (the host's
/// issues) or `{"error": "..."}` on stdout.
const LOAD_MANIFEST: &str = r#"
import { readFileSync, existsSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
const [manifestUrl, packageDir] = process.argv.slice(1);
// stdout carries the answer alone: what the manifest module itself prints goes to stderr.
const answer = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr);
let out;
try {
  const mod = await import(manifestUrl);
  const raw = mod["default"] ?? mod;
  const shared = path.join(packageDir, "node_modules", "@paperclipai", "shared");
  let validated = false, manifest = raw;
  if (existsSync(path.join(shared, "package.json"))) {
    const pj = JSON.parse(readFileSync(path.join(shared, "package.json"), "utf8"));
    const entry = pj.exports?.["."]?.import ?? pj.exports?.["."]?.default ?? pj.main ?? "index.js";
    const { pluginManifestV1Schema } = await import(pathToFileURL(path.join(shared, entry)).href);
    if (pluginManifestV1Schema) {
      const parsed = pluginManifestV1Schema.safeParse(raw);
      if (!parsed.success) {
        out = { refused: parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`) };
      } else {
        manifest = parsed.data;
        validated = true;
      }
    }
  }
  out ??= { validated, manifest };
} catch (err) {
  out = { error: err instanceof Error ? err.message : String(err) };
}
// The callback: a manifest module that leaves timers behind must not keep node from exiting.
answer(JSON.stringify(out), () => process.exit(0));
"#;

/// Reads `stream` to its end, keeping its first `keep` bytes: a writer is never left blocked (or,
/// node, buffering without bound) on a pipe that nobody reads.
async fn drain(stream: &mut (impl tokio::io::AsyncRead + Unpin), keep: usize) -> std::io::Result<Vec<u8>> {
    let (mut kept, mut buffer) = (Vec::new(), vec![0; 8192]);
    loop {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Ok(kept);
        }
        let room = keep.saturating_sub(kept.len());
        kept.extend_from_slice(&buffer[..n.min(room)]);
    }
}

/// A package's manifest as node loaded it: what `sandcap import` reads and the bridge runs.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub dir: PathBuf,
    pub path: PathBuf,
    /// As the host's validator parsed it (or, without the validator, as exported).
    pub manifest: Map<String, Value>,
    /// Whether the host's validator judged it.
    pub validated: bool,
}

/// Finds the package in `dir` and loads its manifest with `node`.
pub async fn load(dir: &Path, node: &Path, budgets: &Budgets) -> Result<Package, PackageError> {
    with_worker(load_manifest(dir, node, budgets, Confinement::AsTheWorker).await?)
}

/// Finds the package's manifest in `dir` and loads it with `node`, `confinement` deciding where
/// the module runs: an object with an `id`, a `version` and, if any, a list of
/// `environmentDrivers`.
pub async fn load_manifest(
    dir: &Path,
    node: &Path,
    budgets: &Budgets,
    confinement: Confinement,
) -> Result<Manifest, PackageError> {
    let dir = absolute(dir);
    let manifest_path = manifest_path(&dir)?;
    let loaded = run_loader(&dir, &manifest_path, node, budgets, confinement).await?;
    manifest_from(&dir, &manifest_path, loaded)
}

/// Where the manifest module is, in the host's order.
pub fn manifest_path(dir: &Path) -> Result<PathBuf, PackageError> {
    let pj_path = dir.join("package.json");
    let text = std::fs::read(&pj_path).map_err(|source| PackageError::Read { path: display(&pj_path), source })?;
    let package: Map<String, Value> =
        serde_json::from_slice(&text).map_err(|_| PackageError::PackageJson { path: display(&pj_path) })?;
    let declared = package.get("paperclipPlugin").and_then(|p| p.get("manifest")).and_then(Value::as_str);
    if let Some(relative) = declared {
        // The host resolves it whether or not it exists, and fails loading it when it does not.
        return Ok(normalize(&dir.join(relative)));
    }
    [dir.join("dist").join("manifest.js"), dir.join("manifest.js")]
        .into_iter()
        .find(|p| p.exists())
        .ok_or_else(|| PackageError::NoManifest { dir: display(dir) })
}

async fn run_loader(
    dir: &Path,
    manifest: &Path,
    node: &Path,
    budgets: &Budgets,
    confinement: Confinement,
) -> Result<Value, PackageError> {
    let mut child =
        loader_command(dir, manifest, node, confinement).await?.spawn().map_err(|source| match confinement {
            Confinement::Boxed => PackageError::Unconfinable(Unconfinable::no_namespace(&source)),
            Confinement::AsTheWorker => PackageError::Node { node: display(node), source },
        })?;
    let pid = child.id();
    let (mut stdout, mut stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let limit = budgets.max_manifest as u64 + 1024;
    let reading = async {
        let mut out = Vec::new();
        let answer = async {
            let read = (&mut stdout).take(limit + 1).read_to_end(&mut out).await;
            if out.len() as u64 > limit {
                // Past the budget now: node would keep in memory whatever is not read.
                let _ = child.start_kill();
            }
            read
        };
        let (a, err) = tokio::join!(answer, drain(&mut stderr, 4096));
        a.and(err).map(|err| (out, err))
    };
    let failed = |detail: String| PackageError::Load { path: display(manifest), detail };
    let read = tokio::time::timeout(budgets.initialize_timeout, reading).await;
    if confinement == Confinement::Boxed {
        confine::kill_group(pid);
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    let (out, err) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => return Err(failed(format!("reading node's output: {e}"))),
        Err(_) => {
            return Err(failed(format!("no answer within {}", humantime::format_duration(budgets.initialize_timeout))));
        }
    };
    if out.len() as u64 > limit {
        return Err(failed(format!("the manifest is larger than {} bytes", budgets.max_manifest)));
    }
    loaded(manifest, &out, &err)
}

/// node, to load `manifest` of the package in `dir`: boxed unless `confinement` says otherwise.
async fn loader_command(
    dir: &Path,
    manifest: &Path,
    node: &Path,
    confinement: Confinement,
) -> Result<tokio::process::Command, PackageError> {
    let url = url::Url::from_file_path(manifest)
        .map_err(|()| PackageError::Load { path: display(manifest), detail: "not an absolute path".into() })?;
    let mut command = tokio::process::Command::new(node);
    if confinement == Confinement::Boxed {
        command.args(confine::node_options(node, dir).await?);
        confine::isolate(&mut command, dir);
    }
    command
        .args(["--input-type=module", "-e", LOAD_MANIFEST, url.as_str()])
        .arg(dir)
        .env_clear()
        .envs(worker_env(None, &[]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(command)
}

/// The manifest the loader wrote to `out` (`err`: its stderr), or why there is none.
fn loaded(manifest: &Path, out: &[u8], err: &[u8]) -> Result<Value, PackageError> {
    let failed = |detail: String| PackageError::Load { path: display(manifest), detail };
    let answer: Value = serde_json::from_slice(out).map_err(|_| {
        let stderr = String::from_utf8_lossy(err);
        failed(format!("node wrote no manifest ({})", telling(&stderr).unwrap_or("no error text")))
    })?;
    if let Some(Value::Array(issues)) = answer.get("refused") {
        let problems = issues.iter().take(32).map(|i| i.as_str().unwrap_or("?").chars().take(500).collect()).collect();
        return Err(PackageError::Refused { path: display(manifest), problems });
    }
    if let Some(error) = answer.get("error") {
        let text = error.as_str().unwrap_or("an error").chars().take(2000).collect::<String>();
        return Err(failed(text));
    }
    Ok(answer)
}

/// The line of node's stderr that says why it ended: a fatal error (a heap past the box's cap),
/// else the first error, else the first line that is not one of node's warnings.
fn telling(stderr: &str) -> Option<&str> {
    let lines = || stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    let warning = |l: &str| l.contains("Warning:") || l.starts_with("(Use `node");
    lines()
        .find(|l| l.contains("FATAL ERROR"))
        .or_else(|| lines().find(|l| l.contains("Error")))
        .or_else(|| lines().find(|l| !warning(l)))
}

fn manifest_from(dir: &Path, manifest_path: &Path, loaded: Value) -> Result<Manifest, PackageError> {
    let problem = |problem: &str| PackageError::Manifest { path: display(manifest_path), problem: problem.into() };
    let validated = loaded.get("validated").and_then(Value::as_bool).unwrap_or(false);
    let Some(Value::Object(manifest)) = loaded.get("manifest").cloned() else {
        return Err(problem("does not export an object"));
    };
    for field in ["id", "version"] {
        if manifest.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(problem(&format!("has no {field} string")));
        }
    }
    if manifest.get("environmentDrivers").is_some_and(|d| !d.is_array()) {
        return Err(problem("has environmentDrivers that is not a list"));
    }
    Ok(Manifest { dir: dir.to_path_buf(), path: manifest_path.to_path_buf(), manifest, validated })
}

fn with_worker(Manifest { dir, path: manifest_path, manifest, validated }: Manifest) -> Result<Package, PackageError> {
    let problem = |problem: &str| PackageError::Manifest { path: display(&manifest_path), problem: problem.into() };
    let worker = manifest.get("entrypoints").and_then(|e| e.get("worker")).and_then(Value::as_str);
    let worker = worker.filter(|w| !w.is_empty()).ok_or_else(|| problem("has no entrypoints.worker"))?;
    let worker = worker_entrypoint(&dir, worker).ok_or_else(|| PackageError::Manifest {
        path: display(&manifest_path),
        problem: format!("names a worker {worker} that is not a file inside {}", display(&dir)),
    })?;
    Ok(Package { dir, manifest_path, manifest, validated, worker })
}

/// The worker entrypoint, as the host resolves it for a package at a path: relative to the
/// package, and only inside it.
pub fn worker_entrypoint(dir: &Path, relative: &str) -> Option<PathBuf> {
    let path = normalize(&dir.join(relative));
    (path.starts_with(dir) && path.is_file()).then_some(path)
}

fn absolute(dir: &Path) -> PathBuf {
    normalize(&std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()))
}

/// `path` with `.` and `..` taken out, as node's `path.resolve` does (without reading links).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests;
