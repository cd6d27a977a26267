//! `sandcap resolve`: the capability resolution the controller would write, from files and, with
//! `--worker-url`, one live probe.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use super::error::CliError;
use super::manifests::{Loaded, Manifests};
use super::output::Output;
use crate::probe::{self, ProbeOutcome, Prober};
use crate::run::RulesArgs;
use sandcap_core::addresses::WorkerPolicy;
use sandcap_core::api::{
    Capabilities, DriverDeclaration, Explanation, LeasePolicy, SandboxLease, SandboxProvider, SecretKeyRef,
};
use sandcap_core::contract::{self, Refusals, SecretLookup, Verified};
use sandcap_core::judge::judge;
use sandcap_core::schema;
use sandcap_core::validation::{self, Options};
use sandcap_core::vocabulary::Kind;

#[derive(Debug, clap::Args)]
pub struct ResolveArgs {
    /// The SandboxProvider manifest (`-` for stdin, as for every file here).
    #[arg(long)]
    pub provider: PathBuf,
    /// Resolve only this driver (default: the lease's driver, or every driver).
    #[arg(long)]
    pub driver: Option<String>,
    /// A SandboxLease manifest: resolve at lease level, with every narrowing.
    #[arg(long)]
    pub lease: Option<PathBuf>,
    /// Secret manifests for the lease's configFrom, files or directories; a Secret not given is a
    /// missing Secret.
    #[arg(long = "secret")]
    pub secrets: Vec<PathBuf>,
    /// Read the subdirectories of a --secret directory too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// The worker's verified methods (default: the provider file's status.worker.supportedMethods).
    #[arg(long, value_delimiter = ',', conflicts_with = "worker_url")]
    pub worker_methods: Option<Vec<String>>,
    /// Probe the worker at this http(s) URL live (JSON-RPC `initialize`) and use what it verifies;
    /// a failed probe verifies nothing.
    #[arg(long)]
    pub worker_url: Option<String>,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// What today's rules refuse grants nothing; they are judged as by this operator.
    #[command(flatten)]
    pub rules: RulesArgs,
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

pub(super) fn resolve(args: &ResolveArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let inputs = std::iter::once(&args.provider).chain(&args.lease).chain(&args.secrets);
    Manifests::stdin_at_most_once(inputs.map(PathBuf::as_path))?;
    let mut manifests = Manifests::new(args.recursive);
    let options = args.rules.options();
    let (provider, provider_refused): (SandboxProvider, _) =
        load_one(&mut manifests, &args.provider, Kind::SandboxProvider, &options)?;
    let verified = match (&args.worker_methods, &args.worker_url) {
        (Some(methods), _) => Verified::methods(methods.iter().map(|m| m.trim()).filter(|m| !m.is_empty())),
        (None, Some(url)) => probe_live(url, &provider)?,
        (None, None) => contract::verified_from_status(&provider),
    };
    let records = match &args.lease {
        Some(lease_path) => {
            let (lease, lease_refused): (SandboxLease, _) =
                load_one(&mut manifests, lease_path, Kind::SandboxLease, &options)?;
            if let Some(driver) = args.driver.as_ref().filter(|d| **d != lease.spec.provider_ref.driver_key) {
                let key = &lease.spec.provider_ref.driver_key;
                let message = format!("--driver {driver} does not match the lease's providerRef.driverKey {key}");
                return Err(CliError::Usage(message));
            }
            let secrets = load_secrets(&mut manifests, &args.secrets)?;
            let refusals = Refusals { lease: lease_refused, provider: provider_refused };
            vec![lease_record(&lease, &provider, &verified, &refusals, &secrets, &options)]
        }
        None => driver_records(args, &provider, &verified, provider_refused.as_deref(), &options)?,
    };
    let written = match records.as_slice() {
        [one] => args.output.write_data(out, one)?,
        all => args.output.write_data(out, &all)?,
    };
    if !written {
        records.iter().try_for_each(|r| write_table(out, r))?;
    }
    Ok(0)
}

/// What `lease` resolves to against `provider` (absent when the lease names another).
fn lease_record(
    lease: &SandboxLease,
    provider: &SandboxProvider,
    verified: &Verified,
    refusals: &Refusals,
    secrets: &Secrets,
    options: &Options,
) -> ResolveRecord {
    // The lease names its provider: a file for another provider means that provider is absent.
    let provider = (provider.metadata.name == Some(lease.spec.provider_ref.name.clone())).then_some(provider);
    let r = contract::resolve_lease(options.contract.contract(), lease, provider, verified, refusals, |r| {
        secrets.lookup(r)
    });
    ResolveRecord {
        driver_key: r.driver_key,
        effective_policy: r.effective_policy,
        capabilities: r.resolution.capabilities,
        explanations: r.resolution.explanations,
    }
}

/// What each of `provider`'s drivers (or `--driver`'s alone) resolves to, for any lease.
fn driver_records(
    args: &ResolveArgs,
    provider: &SandboxProvider,
    verified: &Verified,
    refused: Option<&str>,
    options: &Options,
) -> Result<Vec<ResolveRecord>, CliError> {
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
    let record = |d: &DriverDeclaration| {
        let r = contract::resolve_driver(options.contract.contract(), verified, d, refused);
        let policy = contract::effective_policy(&r);
        ResolveRecord {
            driver_key: d.driver_key.clone(),
            effective_policy: policy,
            capabilities: r.capabilities,
            explanations: r.explanations,
        }
    };
    Ok(drivers.into_iter().map(record).collect())
}

/// One live probe; a failure is reported on stderr and verifies nothing, as in the controller.
fn probe_live(url: &str, provider: &SandboxProvider) -> Result<Verified, CliError> {
    let url = probe::parse_worker_url(url).map_err(|e| CliError::Usage(format!("--worker-url {e}")))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the probe: {e}")))?;
    let prober = Prober::new(probe::DEFAULT_TIMEOUT, WorkerPolicy::any(), "sandcap-resolve")
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let outcome = runtime.block_on(prober.probe_url(&url, &provider.spec));
    if let ProbeOutcome::Failed(failure) = &outcome {
        // Not eprintln!, which panics when stderr is a closed pipe (see main.rs). The caller chose
        // the URL, so the detail is theirs to see.
        let _ = writeln!(std::io::stderr(), "sandcap: {}; nothing is verified", failure.detail());
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

/// Loads exactly one object of `kind`, and what today's rules refuse of it (judged as the
/// operator `options` describe would): such an object grants nothing, as in the cluster.
fn load_one<T: serde::de::DeserializeOwned>(
    manifests: &mut Manifests,
    path: &Path,
    kind: Kind,
    options: &Options,
) -> Result<(T, Option<String>), CliError> {
    let loaded = manifests.load(path)?;
    let shown = match loaded.as_slice() {
        [one] => one.shown.clone(),
        _ => path.display().to_string(),
    };
    let mut objects: Vec<Value> = loaded.into_iter().flat_map(|l| l.objects).collect();
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
    let refusal = judge(&object, options, schema::Server::default()).refusal();
    // The types are tolerant (unknown keys are kept aside); what they cannot read at all (a
    // string where a list belongs) has no resolution to give.
    let typed = serde_json::from_value(object).map_err(|e| CliError::Object {
        path: shown,
        kind: found,
        name,
        message: match &refusal {
            Some(refusal) => format!("{refusal} ({e})"),
            None => e.to_string(),
        },
    })?;
    Ok((typed, refusal))
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

fn load_secrets(manifests: &mut Manifests, paths: &[PathBuf]) -> Result<Secrets, CliError> {
    let mut secrets = BTreeMap::new();
    let mut loaded = Vec::new();
    for path in paths {
        loaded.extend(manifests.load(path)?);
    }
    for Loaded { shown, objects } in loaded {
        for object in objects {
            let (kind, name) = validation::identify(&object);
            let err = |message: String| CliError::Object {
                path: shown.clone(),
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
