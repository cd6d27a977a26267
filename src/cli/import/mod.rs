//! `sandcap import`: a plugin package (a directory, a tarball `npm pack` made) or its manifest
//! JSON as the SandboxProvider that registers it, the drivers as the manifest declares them
//! (docs/contract.md, "Declarations from the manifest"). The manifest passes the host's rules
//! first (its own validator when the package has it, else [`host`]); the object is then judged
//! by `sandcap validate`'s engine, and what the cluster adds is said on stderr.

mod fetch;
mod host;
mod tarball;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use kube::Resource;
use serde_json::{Map, Value, json};

use super::error::CliError;
use super::validate::{null_paths, without_nulls};
use crate::bridge::{Budgets, Confinement, PackageError, load_manifest};
use crate::run::RulesArgs;
use sandcap_core::api::SandboxProvider;
use sandcap_core::judge::{Server, judge};

/// The path sandcap bridge serves its probe at by default.
const BRIDGE_PATH: &str = "/rpc";

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The plugin package's directory, a gzip tarball of it as `npm pack` makes (entries under
    /// `package/`), its manifest as a JSON file (`-` for stdin), or the URL of a running `sandcap
    /// bridge`'s manifest (`http://HOST:PORT/manifest`: no plugin code runs here).
    pub source: PathBuf,
    /// The SandboxProvider's metadata.name (default: the plugin id as a DNS-1123 name).
    #[arg(long)]
    pub name: Option<String>,
    /// The Service in front of the worker (sandcap bridge), for spec.worker.service.
    #[arg(long, value_name = "NAMESPACE/NAME:PORT", value_parser = parse_service, conflicts_with = "worker_url")]
    pub worker_service: Option<Service>,
    /// The Service's HTTP path of the probe endpoint (default: /rpc, sandcap bridge's own).
    #[arg(long, value_name = "PATH", requires = "worker_service")]
    pub worker_path: Option<String>,
    /// The worker's URL, for spec.worker.url (a cluster admits it only with --allow-worker-urls).
    #[arg(long, value_name = "URL")]
    pub worker_url: Option<String>,
    /// The node executable that evaluates a package's manifest (a JavaScript module).
    #[arg(long, value_name = "PATH", default_value = "node")]
    pub node: PathBuf,
    /// Judge as an operator started with these would.
    #[command(flatten)]
    pub rules: RulesArgs,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Service {
    namespace: String,
    name: String,
    port: i64,
}

fn parse_service(text: &str) -> Result<Service, String> {
    let shape = || format!("{text:?} is not NAMESPACE/NAME:PORT (e.g. sandbox-system/acme-worker:9000)");
    let (namespace, rest) = text.split_once('/').ok_or_else(shape)?;
    let (name, port) = rest.rsplit_once(':').ok_or_else(shape)?;
    let port = port.parse().map_err(|_| shape())?;
    if namespace.is_empty() || name.is_empty() {
        return Err(shape());
    }
    Ok(Service { namespace: namespace.into(), name: name.into(), port })
}

/// What the import says on stderr, line by line, each starting `NOTE: `.
struct Notes(Vec<String>);

impl Notes {
    fn add(&mut self, note: String) {
        self.0.push(note);
    }
}

pub(super) fn import(args: &ImportArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let mut notes = Notes(Vec::new());
    let worker = worker(args, &mut notes)?;
    let shown = args.source.display().to_string();
    let err = &mut std::io::stderr().lock();
    let refused = |err: &mut dyn Write, problems: &[String]| {
        writeln!(err, "REFUSED {shown}: the host's manifest validator refuses it: {}", problems.join("; ")).map(|()| 1)
    };
    // sandcap's copy of the host's rules judges every manifest, whatever the package bundles: a
    // package's own @paperclipai/shared is its code, and may say anything.
    let (manifest, validated) = match read(&args.source, &args.node)? {
        Loaded::Refused(problems) => return Ok(refused(err, &problems)?),
        Loaded::Validated(manifest) => (manifest, true),
        Loaded::Unvalidated(manifest) => (manifest, false),
    };
    let problems = host::problems(&manifest);
    if !problems.is_empty() {
        return Ok(refused(err, &problems)?);
    }
    if !validated {
        notes.add(format!(
            "{shown} was checked by sandcap's copy of the host's manifest rules for id, version and \
             environmentDrivers (no @paperclipai/shared of the package judged it here)"
        ));
    }
    let id = manifest.get("id").and_then(Value::as_str).unwrap_or_default();
    let name = match &args.name {
        Some(name) => name.clone(),
        None => dns_name(id).ok_or_else(|| {
            CliError::Usage(format!("the plugin id {id:?} makes no DNS-1123 name: give one with --name"))
        })?,
    };
    let drivers = drivers(&manifest, args, &mut notes);
    let object = json!({
        "apiVersion": SandboxProvider::api_version(&()),
        "kind": SandboxProvider::kind(&()),
        "metadata": {"name": name},
        "spec": {"pluginKey": id, "version": manifest["version"], "worker": worker, "environmentDrivers": drivers},
    });
    let mut nulls = Vec::new();
    without_nulls(&object, "", &mut nulls);
    if !nulls.is_empty() {
        notes.add(format!(
            "the object has a null at {}: kubectl apply drops it before the cluster sees it, kubectl create sends it \
             as the manifest has it",
            null_paths(&nulls)
        ));
    }
    let judgment = judge(&object, &args.rules.options(), Server::V1_37);
    let at = format!("SandboxProvider/{name}");
    notes.0.iter().try_for_each(|n| writeln!(err, "NOTE: {n}"))?;
    judgment.warnings().iter().try_for_each(|w| writeln!(err, "WARNING {at}: {w}"))?;
    if !judgment.allowed() {
        writeln!(err, "DENIED {at}: {}", judgment.message())?;
        return Ok(1);
    }
    out.write_all(serde_saphyr::to_string(&object).expect("an object serializes").as_bytes())?;
    Ok(0)
}

/// `spec.worker` from the flags: the manifest does not say where its worker will run.
fn worker(args: &ImportArgs, notes: &mut Notes) -> Result<Value, CliError> {
    match (&args.worker_service, &args.worker_url) {
        (Some(s), _) => {
            let path = args.worker_path.clone().unwrap_or_else(|| {
                notes.add(format!("spec.worker.service.path is {BRIDGE_PATH}, sandcap bridge's (--worker-path)"));
                BRIDGE_PATH.into()
            });
            Ok(json!({"service": {"namespace": s.namespace, "name": s.name, "port": s.port, "path": path}}))
        }
        (None, Some(url)) => Ok(json!({"url": url})),
        (None, None) => Err(CliError::Usage(
            "where the worker answers is not in the manifest: give --worker-service NAMESPACE/NAME:PORT (the Service \
             in front of sandcap bridge) or --worker-url URL"
                .into(),
        )),
    }
}

/// A manifest as read, and who judged it.
enum Loaded {
    /// The host's own validator admitted it (and it is its output).
    Validated(Map<String, Value>),
    /// Nobody has judged it yet.
    Unvalidated(Map<String, Value>),
    /// The host's own validator refused it: a verdict on the manifest, not a failure to read it.
    Refused(Vec<String>),
}

fn read(source: &Path, node: &Path) -> Result<Loaded, CliError> {
    let shown = source.display().to_string();
    let unreadable = |source| CliError::Read { path: shown.clone(), source };
    let budgets = Budgets::default();
    let package = |dir: &Path| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(unreadable)?;
        match runtime.block_on(load_manifest(dir, node, &budgets, Confinement::Boxed)) {
            Ok(m) if m.validated => Ok(Loaded::Validated(m.manifest)),
            Ok(m) => Ok(Loaded::Unvalidated(m.manifest)),
            Err(PackageError::Refused { problems, .. }) => Ok(Loaded::Refused(problems)),
            Err(e) => Err(CliError::Parse { path: shown.clone(), message: e.to_string() }),
        }
    };
    let mut text = Vec::new();
    let limit = budgets.max_manifest as u64;
    let url = source.to_str().filter(|s| s.starts_with("http://") || s.starts_with("https://"));
    if let Some(url) = url {
        text = fetch::manifest(url, limit, budgets.initialize_timeout)?;
    } else if source == Path::new("-") {
        std::io::stdin().lock().take(limit + 1).read_to_end(&mut text).map_err(unreadable)?;
    } else if source.is_dir() {
        return package(source);
    } else {
        std::fs::File::open(source).and_then(|f| f.take(limit + 1).read_to_end(&mut text)).map_err(unreadable)?;
        if text.starts_with(&[0x1f, 0x8b]) {
            let (_dir, root) = tarball::extract(source)
                .map_err(|e| CliError::Parse { path: shown.clone(), message: format!("the tarball {e}") })?;
            return package(&root);
        }
    }
    if text.len() as u64 > limit {
        return Err(CliError::Parse { path: shown, message: format!("a manifest is at most {limit} bytes") });
    }
    match serde_json::from_slice(&text) {
        Ok(Value::Object(manifest)) => Ok(Loaded::Unvalidated(manifest)),
        Ok(_) => Err(CliError::Parse { path: shown, message: "the manifest is not a JSON object".into() }),
        Err(e) => Err(CliError::Parse {
            path: shown,
            message: format!("neither a package directory, a gzip tarball nor manifest JSON ({e})"),
        }),
    }
}

/// The manifest's drivers as the SandboxProvider declares them: every member as the manifest
/// has it, but the host's fields sandcap does not model, which are dropped with a note (the
/// webhook refuses a field it does not know, and no capability depends on these). A key the
/// cluster's contract version refuses stays, with a note, and the cluster's verdict follows.
fn drivers(manifest: &Map<String, Value>, args: &ImportArgs, notes: &mut Notes) -> Vec<Value> {
    let contract = args.rules.contract.contract();
    let drivers = manifest.get("environmentDrivers").and_then(Value::as_array).cloned().unwrap_or_default();
    if drivers.is_empty() {
        notes.add("the manifest declares no environmentDrivers: a SandboxProvider declares 1 to 64".into());
    }
    drivers
        .into_iter()
        .map(|mut driver| {
            let key = driver.get("driverKey").and_then(Value::as_str).unwrap_or_default().to_string();
            let Some(fields) = driver.as_object_mut() else { return driver };
            for field in host::HOST_ONLY_FIELDS {
                if let Some(value) = fields.remove(field) {
                    notes.add(format!(
                        "driver {key}: {field} ({value}) is left out: sandcap does not model it and the webhook \
                         refuses a driver field it does not know; the host reads it from the plugin's own manifest, \
                         and no capability depends on it"
                    ));
                }
            }
            let caps = fields.get("sandboxCapabilities").and_then(Value::as_object);
            let refused = |k: &&String| !contract.capabilities().any(|c| c.key() == k.as_str());
            for refusal in caps.into_iter().flat_map(|c| c.keys()).filter(refused).filter_map(|k| contract.refusal(k)) {
                notes.add(format!(
                    "driver {key}: sandboxCapabilities.{refusal} (the host admits it; sandcap keeps a declared \
                     capability as the manifest has it, so the cluster refuses the object)"
                ));
            }
            driver
        })
        .collect()
}

/// `id` as a DNS-1123 subdomain: `_` read as `-`, each dot-separated label trimmed of the `-`
/// it may not start or end with, at most 253 characters. `None` when nothing is left.
fn dns_name(id: &str) -> Option<String> {
    let replaced = id.replace('_', "-");
    let labels: Vec<&str> = replaced.split('.').map(|l| l.trim_matches('-')).filter(|l| !l.is_empty()).collect();
    let mut name: String = labels.join(".").chars().take(253).collect();
    while name.ends_with(['.', '-']) {
        name.pop();
    }
    (!name.is_empty() && sandcap_core::api::is_dns_subdomain(&name)).then_some(name)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn a_plugin_id_becomes_a_dns_name() {
        assert_eq!(dns_name("sandcap.bridge-test").as_deref(), Some("sandcap.bridge-test"));
        assert_eq!(dns_name("acme_k8s.sandbox_").as_deref(), Some("acme-k8s.sandbox"));
        assert_eq!(dns_name("a.-b.._c-").as_deref(), Some("a.b.c"));
        assert_eq!(dns_name(&"a".repeat(300)).map(|n| n.len()), Some(253));
        assert_eq!(dns_name("_.-"), None);
    }

    #[test]
    fn the_worker_service_flag() {
        let s = parse_service("sandbox-system/acme-worker:9000").unwrap();
        assert_eq!(s, Service { namespace: "sandbox-system".into(), name: "acme-worker".into(), port: 9000 });
        for bad in ["acme-worker:9000", "ns/acme-worker", "ns/acme:http", "/a:1", "ns/:1"] {
            assert!(parse_service(bad).is_err(), "{bad}");
        }
    }

    fn args(extra: &[&str]) -> ImportArgs {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ImportArgs,
        }
        Cli::parse_from(["import", "m.json"].iter().chain(extra)).args
    }

    #[test]
    fn the_worker_address_comes_from_the_flags_only() {
        let mut notes = Notes(Vec::new());
        let service = worker(&args(&["--worker-service", "ns/w:9000"]), &mut notes).unwrap();
        assert_eq!(service, json!({"service": {"namespace": "ns", "name": "w", "port": 9000, "path": "/rpc"}}));
        assert!(notes.0[0].contains("sandcap bridge's"), "the default path is said");
        let path = worker(&args(&["--worker-service", "ns/w:9000", "--worker-path", "/"]), &mut notes).unwrap();
        assert_eq!(path["service"]["path"], "/");
        assert_eq!(worker(&args(&["--worker-url", "http://w:1/"]), &mut notes).unwrap(), json!({"url": "http://w:1/"}));
        let missing = worker(&args(&[]), &mut notes).unwrap_err().to_string();
        assert!(missing.contains("--worker-service NAMESPACE/NAME:PORT"), "{missing}");
    }

    #[test]
    fn host_only_fields_are_left_out_and_refused_keys_kept_each_with_a_note() {
        let manifest = json!({"environmentDrivers": [
            {"driverKey": "k", "supportsLoginPty": true, "sandboxCapabilities": {"duplexCommandStream": true}},
        ]});
        let mut notes = Notes(Vec::new());
        let v1 = drivers(manifest.as_object().unwrap(), &args(&[]), &mut notes);
        assert_eq!(v1, [json!({"driverKey": "k", "sandboxCapabilities": {"duplexCommandStream": true}})]);
        assert_eq!(notes.0.len(), 2, "{:?}", notes.0);
        assert!(notes.0[0].starts_with("driver k: supportsLoginPty (true) is left out"));
        assert!(
            notes.0[1].starts_with("driver k: sandboxCapabilities.duplexCommandStream is not a key of contract v1")
        );
        let mut notes = Notes(Vec::new());
        drivers(manifest.as_object().unwrap(), &args(&["--contract", "v2"]), &mut notes);
        assert_eq!(notes.0.len(), 1, "v2 has the key: {:?}", notes.0);
    }
}
