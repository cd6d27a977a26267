//! The command line (docs/contract.md, "Command line"). `run` starts the servers
//! ([`crate::run::run`], under the tokio runtime `main` builds); the offline commands
//! `validate`, `resolve` and `crds` read manifests from files and call the same pure functions the
//! webhook and the controllers call.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use clap::{Parser, Subcommand, ValueEnum};
use ipnet::IpNet;
use kube::CustomResourceExt;
use serde::Serialize;
use serde_json::Value;

use crate::api::{Capabilities, Explanation, LeasePolicy, SandboxLease, SandboxProvider, SecretKeyRef};
use crate::contract::{self, SecretLookup, Verified};
use crate::probe::{self, AllowedCidrs, ProbeOutcome, Prober};
use crate::schema;
use crate::validation::{self, Options};
use crate::vocabulary::Kind;

#[derive(Debug, Parser)]
#[command(name = "sandcap", version, about = "Admission webhook and operator for sandbox-provider capabilities")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook (HTTPS) and the controllers, with an admin port for probes and
    /// metrics. Stops gracefully on SIGTERM or SIGINT.
    Run(Box<crate::run::RunArgs>),
    #[command(flatten)]
    Offline(Offline),
}

/// The commands that need no runtime and no cluster: [`run`] runs them.
#[derive(Debug, Subcommand)]
pub enum Offline {
    /// Print what the cluster would answer for every object in the files, offline.
    Validate(ValidateArgs),
    /// Print the capability resolution the controller would write.
    Resolve(ResolveArgs),
    /// Print the CustomResourceDefinitions (the YAML that crds/ holds).
    Crds,
}

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum TableOutput {
    #[default]
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// YAML or JSON files; multi-document and `kind: List` files are read object by object.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// Judge as an operator started with --allow-worker-urls would.
    #[arg(long, env = "SANDCAP_ALLOW_WORKER_URLS")]
    pub allow_worker_urls: bool,
    /// Judge as an operator started with this --worker-url-allowed-cidrs would.
    #[arg(long, env = "SANDCAP_WORKER_URL_ALLOWED_CIDRS", value_delimiter = ',', value_name = "CIDRS")]
    pub worker_url_allowed_cidrs: Vec<IpNet>,
    /// Write the apiserver's messages as this Kubernetes minor does: 1.33 or 1.37 (their forms
    /// differ slightly).
    #[arg(long, default_value = "1.37", value_parser = parse_server)]
    pub kubernetes_version: schema::Server,
}

fn parse_server(minor: &str) -> Result<schema::Server, String> {
    match minor {
        "1.33" => Ok(schema::Server::V1_33),
        "1.37" => Ok(schema::Server::V1_37),
        _ => Err("the message forms are known for 1.33 and 1.37".into()),
    }
}

#[derive(Debug, clap::Args)]
pub struct ResolveArgs {
    /// The SandboxProvider manifest.
    #[arg(long)]
    pub provider: PathBuf,
    /// Resolve only this driver (default: the lease's driver, or every driver).
    #[arg(long)]
    pub driver: Option<String>,
    /// A SandboxLease manifest: resolve at lease level, with every narrowing.
    #[arg(long)]
    pub lease: Option<PathBuf>,
    /// Secret manifests for the lease's configFrom; a Secret not given is a missing Secret.
    #[arg(long = "secret")]
    pub secrets: Vec<PathBuf>,
    /// The worker's verified methods (default: the provider file's status.worker.supportedMethods).
    #[arg(long, value_delimiter = ',', conflicts_with = "worker_url")]
    pub worker_methods: Option<Vec<String>>,
    /// Probe the worker at this http(s) URL live (JSON-RPC `initialize`) and use what it verifies;
    /// a failed probe verifies nothing.
    #[arg(long)]
    pub worker_url: Option<String>,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: TableOutput,
}

/// A failure of the command itself (as opposed to a denial): one line, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {kind}/{name}: {message}")]
    Object { path: String, kind: String, name: String, message: String },
    #[error("{0}")]
    Usage(String),
    /// The output could not be written (a closed pipe, a full disk): a truncated output must not
    /// pass for a complete one.
    #[error("cannot write the output: {0}")]
    Write(#[from] std::io::Error),
}

/// Runs an offline command, writing to `out`. Returns the process exit code.
pub fn run(command: Offline, out: &mut dyn Write) -> Result<i32, CliError> {
    let code = match command {
        Offline::Validate(args) => validate(&args, out)?,
        Offline::Resolve(args) => resolve(&args, out)?,
        Offline::Crds => {
            out.write_all(crds_yaml().as_bytes())?;
            0
        }
    };
    out.flush()?;
    Ok(code)
}

/// Both CRDs as one multi-document YAML stream, one file each in `crds/` (named so that
/// `cat crds/*.yaml` gives back exactly this stream).
pub fn crds() -> [(String, String); 2] {
    [SandboxLease::crd(), SandboxProvider::crd()].map(|crd| {
        let file = format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or_default());
        let mut crd = serde_json::to_value(&crd).expect("CRDs serialize");
        unwrap_descriptions(&mut crd);
        (
            file,
            format!("---\n{}", serde_saphyr::to_string_with_options(&crd, crd_yaml_options()).expect("CRDs serialize")),
        )
    })
}

/// Descriptions stay on one line each (see `unwrap_descriptions`), not folded at 80 columns.
fn crd_yaml_options() -> serde_saphyr::SerializerOptions {
    serde_saphyr::ser_options! { prefer_block_scalars: false }
}

/// Doc comments are wrapped at the source's line width; `kubectl explain` reflows text itself and
/// would show each wrap as a stray line break.
fn unwrap_descriptions(node: &mut Value) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(d)) = map.get_mut("description") {
                *d = d.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
            }
            map.values_mut().for_each(unwrap_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

pub fn crds_yaml() -> String {
    crds().into_iter().map(|(_, yaml)| yaml).collect()
}

/// Reads every object in a YAML or JSON file (multi-document; `kind: List` items expanded).
pub fn load_objects(path: &Path) -> Result<Vec<Value>, CliError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Read { path: shown.clone(), source })?;
    let mut objects = Vec::new();
    let mut reader = text.as_bytes();
    // Empty and null documents are skipped by the parser, so they are not counted.
    for (i, doc) in serde_saphyr::read_with_options::<_, Value>(&mut reader, yaml_options()).enumerate() {
        let value = doc.map_err(|e| CliError::Parse {
            path: shown.clone(),
            message: format!("document {}: not valid YAML or JSON: {}", i + 1, one_line(&e)),
        })?;
        match value {
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                match map.get("items") {
                    Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
                    _ => {
                        return Err(CliError::Parse {
                            path: shown,
                            message: format!("document {}: a List without an items array", i + 1),
                        });
                    }
                }
            }
            Value::Object(_) => objects.push(value),
            other => {
                return Err(CliError::Parse {
                    path: shown,
                    message: format!(
                        "document {}: expected a Kubernetes object, got {}",
                        i + 1,
                        crate::validation::type_name(&other)
                    ),
                });
            }
        }
    }
    Ok(objects)
}

/// The parser's budget (anchors, aliases, events, nodes) refuses alias bombs before they expand;
/// the rest keeps the reading of YAML that sandcap had before (YAML 1.2 scalars): `yes` and
/// `0755` stay strings, `<<` is an ordinary key.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        // As deep as the webhook reads a review's JSON.
        budget: serde_saphyr::budget! { max_depth: 128 },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
    }
}

/// The parser's words for a person (its default adds hints for the programmer), on one line as
/// every CLI error.
fn one_line(e: &serde_saphyr::Error) -> String {
    let options = serde_saphyr::render_options! {
        formatter: &serde_saphyr::UserMessageFormatter,
        snippets: serde_saphyr::SnippetMode::Off,
    };
    e.render_with_options(options).split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Serialize)]
struct ValidateRecord {
    kind: String,
    name: String,
    allowed: bool,
    message: String,
    warnings: Vec<String>,
}

/// What `kubectl apply` would print for one object: the apiserver's own verdict (layer one, the
/// CRD) if it rejects, else the webhook's (layer two), which the apiserver asks only then. `Ok`
/// holds the warnings of an admitted object, `Err` the denial message and any warnings.
pub fn judge(object: &Value, options: &Options, server: schema::Server) -> Result<Vec<String>, (String, Vec<String>)> {
    if let Err(rejection) = schema::check(object, None, server) {
        return Err((rejection.message(), Vec::new()));
    }
    let verdict = validation::review(object, None, options);
    if verdict.allowed() { Ok(verdict.warnings) } else { Err((verdict.message(), verdict.warnings)) }
}

fn validate(args: &ValidateArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let options = Options {
        allow_worker_urls: args.allow_worker_urls,
        worker_url_allowed_cidrs: AllowedCidrs::new(args.worker_url_allowed_cidrs.iter().copied()),
    };
    let mut records = Vec::new();
    for path in &args.files {
        for object in load_objects(path)? {
            let (kind, name) = validation::identify(&object);
            if Kind::from_kind(&kind).is_none() {
                return Err(CliError::Object {
                    path: path.display().to_string(),
                    kind,
                    name,
                    message: "unknown kind: sandcap validates SandboxProvider and SandboxLease".into(),
                });
            }
            records.push(match judge(&object, &options, args.kubernetes_version) {
                Ok(warnings) => ValidateRecord { kind, name, allowed: true, message: String::new(), warnings },
                Err((message, warnings)) => ValidateRecord { kind, name, allowed: false, message, warnings },
            });
        }
    }
    let denied = records.iter().any(|r| !r.allowed);
    match args.output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&records).expect("records serialize")),
        Output::Text => records.iter().try_for_each(|r| {
            if r.allowed {
                writeln!(out, "ALLOWED {}/{}", r.kind, r.name)?;
            } else {
                writeln!(out, "DENIED {}/{}: {}", r.kind, r.name, r.message)?;
            }
            r.warnings.iter().try_for_each(|w| writeln!(out, "WARNING {}/{}: {w}", r.kind, r.name))
        }),
    }?;
    Ok(i32::from(denied))
}

/// One driver's resolution, in the JSON shape docs/contract.md ("Command line") gives.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResolveRecord {
    driver_key: String,
    effective_policy: LeasePolicy,
    capabilities: Capabilities,
    explanations: Vec<Explanation>,
}

fn resolve(args: &ResolveArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let provider: SandboxProvider = load_one(&args.provider, Kind::SandboxProvider)?;
    let verified = match (&args.worker_methods, &args.worker_url) {
        (Some(methods), _) => Verified::methods(methods.iter().map(|m| m.trim()).filter(|m| !m.is_empty())),
        (None, Some(url)) => probe_live(url, &provider)?,
        (None, None) => contract::verified_from_status(&provider),
    };
    let records = match &args.lease {
        Some(lease_path) => {
            let lease: SandboxLease = load_one(lease_path, Kind::SandboxLease)?;
            if let Some(driver) = &args.driver
                && *driver != lease.spec.provider_ref.driver_key
            {
                return Err(CliError::Usage(format!(
                    "--driver {driver} does not match the lease's providerRef.driverKey {}",
                    lease.spec.provider_ref.driver_key
                )));
            }
            let secrets = load_secrets(&args.secrets)?;
            // The lease names its provider: a file for another provider means that provider is absent.
            let provider = (provider.metadata.name == Some(lease.spec.provider_ref.name.clone())).then_some(&provider);
            let r = contract::resolve_lease(&lease, provider, &verified, |r| secrets.lookup(r));
            vec![ResolveRecord {
                driver_key: r.driver_key,
                effective_policy: r.effective_policy,
                capabilities: r.resolution.capabilities,
                explanations: r.resolution.explanations,
            }]
        }
        None => {
            let drivers: Vec<_> = provider
                .spec
                .environment_drivers
                .iter()
                .filter(|d| args.driver.as_ref().is_none_or(|k| *k == d.driver_key))
                .collect();
            if drivers.is_empty() {
                return Err(CliError::Usage(format!(
                    "{}: the provider declares no driver {}",
                    args.provider.display(),
                    args.driver.as_deref().unwrap_or("at all")
                )));
            }
            drivers
                .into_iter()
                .map(|d| {
                    let r = contract::resolve_driver(&verified, d);
                    let policy = contract::effective_policy(&r);
                    ResolveRecord {
                        driver_key: d.driver_key.clone(),
                        effective_policy: policy,
                        capabilities: r.capabilities,
                        explanations: r.explanations,
                    }
                })
                .collect()
        }
    };
    match args.output {
        TableOutput::Json if records.len() == 1 => {
            writeln!(out, "{}", serde_json::to_string_pretty(&records[0]).expect("serializes"))
        }
        TableOutput::Json => writeln!(out, "{}", serde_json::to_string_pretty(&records).expect("serializes")),
        TableOutput::Table => records.iter().try_for_each(|r| write_table(out, r)),
    }?;
    Ok(0)
}

/// One live probe; a failure is reported on stderr and verifies nothing, as in the controller.
fn probe_live(url: &str, provider: &SandboxProvider) -> Result<Verified, CliError> {
    let url = probe::parse_worker_url(url).map_err(|e| CliError::Usage(format!("--worker-url {e}")))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the probe: {e}")))?;
    let prober = Prober::new(probe::DEFAULT_TIMEOUT, true, AllowedCidrs::any(), "sandcap-resolve");
    let outcome = runtime.block_on(prober.probe_url(&url, &provider.spec));
    if let ProbeOutcome::Failed(failure) = &outcome {
        // Not eprintln!, which panics when stderr is a closed pipe (see main.rs).
        let _ = writeln!(std::io::stderr(), "sandcap: {failure}; nothing is verified");
    }
    Ok(outcome.verified())
}

fn write_table(out: &mut dyn Write, r: &ResolveRecord) -> std::io::Result<()> {
    writeln!(out, "DRIVER {}  EFFECTIVE POLICY {}", r.driver_key, r.effective_policy.as_str())?;
    writeln!(out, "{:<28} {:<8} {:<36} MESSAGE", "CAPABILITY", "GRANTED", "REASON")?;
    for e in &r.explanations {
        writeln!(out, "{:<28} {:<8} {:<36} {}", e.capability.key(), e.granted, e.reason.as_str(), e.message)?;
    }
    Ok(())
}

/// Loads exactly one object of `kind`, refusing one the webhook would deny.
fn load_one<T: serde::de::DeserializeOwned>(path: &Path, kind: Kind) -> Result<T, CliError> {
    let shown = path.display().to_string();
    let mut objects = load_objects(path)?;
    if objects.len() != 1 {
        return Err(CliError::Parse {
            path: shown,
            message: format!("expected one {kind}, found {} objects", objects.len()),
        });
    }
    let object = objects.remove(0);
    let (found, name) = validation::identify(&object);
    if found != kind.as_str() {
        return Err(CliError::Object { path: shown, kind: found, name, message: format!("expected a {kind}") });
    }
    // The worker URL is the caller's own to probe (or not: --worker-url replaces it).
    let options = Options { allow_worker_urls: true, worker_url_allowed_cidrs: AllowedCidrs::any() };
    if let Err((message, _)) = judge(&object, &options, schema::Server::default()) {
        return Err(CliError::Object { path: shown, kind: found, name, message: format!("denied: {message}") });
    }
    serde_json::from_value(object).map_err(|e| CliError::Object {
        path: shown,
        kind: found,
        name,
        message: e.to_string(),
    })
}

/// Secrets given with `--secret`, by name.
struct Secrets(BTreeMap<String, BTreeMap<String, Vec<u8>>>);

impl Secrets {
    fn lookup(&self, r: &SecretKeyRef) -> SecretLookup {
        match self.0.get(&r.name) {
            None => SecretLookup::MissingSecret,
            Some(data) => data.get(&r.key).map_or(SecretLookup::MissingKey, |v| SecretLookup::Found(v.clone())),
        }
    }
}

fn load_secrets(paths: &[PathBuf]) -> Result<Secrets, CliError> {
    let mut secrets = BTreeMap::new();
    for path in paths {
        for object in load_objects(path)? {
            let (kind, name) = validation::identify(&object);
            let err = |message: String| CliError::Object {
                path: path.display().to_string(),
                kind: kind.clone(),
                name: name.clone(),
                message,
            };
            if kind != "Secret" {
                return Err(err("expected a Secret".into()));
            }
            let mut data = BTreeMap::new();
            if let Some(map) = object.get("data").and_then(Value::as_object) {
                for (key, value) in map {
                    let encoded = value.as_str().ok_or_else(|| err(format!("data.{key} is not a string")))?;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .map_err(|_| err(format!("data.{key} is not valid base64")))?;
                    data.insert(key.clone(), bytes);
                }
            }
            // stringData wins over data, as the apiserver merges them.
            if let Some(map) = object.get("stringData").and_then(Value::as_object) {
                for (key, value) in map {
                    let text = value.as_str().ok_or_else(|| err(format!("stringData.{key} is not a string")))?;
                    data.insert(key.clone(), text.as_bytes().to_vec());
                }
            }
            secrets.insert(name, data);
        }
    }
    Ok(Secrets(secrets))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::run::RunArgs;
    use crate::telemetry::LogFormat;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["sandcap", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn run_defaults_follow_the_flag_table() {
        let args = run_args(&[]).unwrap();
        assert_eq!(args.webhook_addr.to_string(), "0.0.0.0:8443");
        assert_eq!(args.admin_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(args.tls_reload_interval, Duration::from_secs(10));
        assert_eq!((args.probe_interval, args.probe_timeout), (Duration::from_secs(300), Duration::from_secs(5)));
        assert!(args.leader_elect && !args.webhook_only && !args.tls_self_signed);
        assert_eq!(args.leader_election_namespace(), args.pod_namespace);
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.shutdown_timeout, Duration::from_secs(30));
    }

    #[test]
    fn run_reads_durations_and_boolean_values() {
        let args =
            run_args(&["--tls-reload-interval", "1m 30s", "--leader-elect=false", "--log-format", "json"]).unwrap();
        assert_eq!(args.tls_reload_interval, Duration::from_secs(90));
        assert!(!args.leader_elect);
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(run_args(&["--leader-elect"]).unwrap().leader_elect);
        assert!(run_args(&["--probe-interval", "soon"]).is_err());
    }

    #[test]
    fn run_refuses_contradicting_certificate_and_mode_flags() {
        assert!(run_args(&["--tls-cert", "c.pem"]).is_err(), "a certificate needs its key");
        assert!(run_args(&["--tls-cert", "c", "--tls-key", "k", "--tls-self-signed"]).is_err());
        assert!(run_args(&["--webhook-only", "--controllers-only"]).is_err());
    }
}
