//! `sandcap explain lease|provider NAME`: from the live cluster, every capability with the reason
//! status gives and the chain behind it, and what to change. This file fetches (bounded in time)
//! and prints; [`report`] builds the explanation from the fetched objects, purely.
//!
//! `configFrom` Secrets are read as metadata only (`PartialObjectMetadata`): their data never
//! leaves the apiserver, so no value can reach the output. Which namespaces sandcap reads Secrets
//! in is a flag of `sandcap run` that nothing in the cluster records; `--secret-namespaces` takes
//! the same value with the same default, and the lease's `ConfigResolved` condition shows what
//! sandcap itself concluded.

mod fix;
mod gates;
mod lease;
mod provider;
mod report;
mod secret;
mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::cluster::{ClusterArgs, bounded, runtime};
use super::error::CliError;
use super::output::Output;
use crate::controller::SecretScope;
use lease::{LeaseFacts, LeaseReport, lease_report};
use provider::{ProviderReport, provider_report};
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::vocabulary::CONFIG_SOURCE_LABEL;
use secret::{Lookup, SecretReport};
/// How a stored lease is resolved and what a `Valid` condition refuses, which `plan` shares.
pub(super) use {gates::refusal, lease::LeaseInputs};

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    #[command(subcommand)]
    pub what: Explained,
    /// The lease's namespace [default: the kubeconfig context's, or the pod's].
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t, global = true)]
    pub output: Output,
    /// The namespaces sandcap reads configFrom Secrets in, as given to `sandcap run
    /// --secret-namespaces` (the chart's secretNamespaces): `*` every namespace, or a
    /// comma-separated list; empty, as there by default, none.
    #[arg(
        long,
        default_value = crate::run::SECRET_NAMESPACES,
        value_parser = crate::run::secret_scope,
        global = true,
        value_name = "NAMESPACES"
    )]
    pub secret_namespaces: SecretScope,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum Explained {
    /// A SandboxLease (`sbl`): its capabilities, pinned identity, narrowings and configFrom Secrets.
    Lease { name: String },
    /// A SandboxProvider (`sbp`): its worker's last probe and each driver's capabilities.
    Provider { name: String },
}

pub(in crate::cli) fn explain(args: &ExplainArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let runtime = runtime()?;
    let report = runtime.block_on(async {
        let connection = args.cluster.connect().await?;
        let client = connection.client;
        let timeout = args.cluster.request_timeout;
        let providers = Api::<SandboxProvider>::all(client.clone());
        let fetch_provider = |name: String| {
            let providers = providers.clone();
            async move {
                let what = format!("reading SandboxProvider {name}");
                bounded(timeout, &what, providers.get_opt(&name)).await.map_err(CliError::from)
            }
        };
        Ok::<_, CliError>(match &args.what {
            Explained::Provider { name } => {
                let provider = fetch_provider(name.clone())
                    .await?
                    .ok_or_else(|| CliError::Usage(format!("SandboxProvider {name} not found")))?;
                Report::Provider(Box::new(provider_report(&provider)))
            }
            Explained::Lease { name } => {
                let namespace = args.namespace.clone().unwrap_or(connection.default_namespace);
                let leases = Api::<SandboxLease>::namespaced(client.clone(), &namespace);
                let what = format!("reading SandboxLease {namespace}/{name}");
                let lease = bounded(timeout, &what, leases.get_opt(name))
                    .await?
                    .ok_or_else(|| CliError::Usage(format!("SandboxLease {namespace}/{name} not found")))?;
                let provider = fetch_provider(lease.spec.provider_ref.name.clone()).await?;
                let secrets = secrets(&client, &lease, &namespace, &args.secret_namespaces, timeout).await;
                Report::Lease(Box::new(lease_report(&LeaseFacts {
                    lease: &lease,
                    provider: provider.as_ref(),
                    secrets,
                })))
            }
        })
    })?;
    if !args.output.write_data(out, &report)? {
        match report {
            Report::Lease(r) => table::lease(out, &r)?,
            Report::Provider(r) => table::provider(out, &r)?,
        }
    }
    Ok(0)
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Report {
    Lease(Box<LeaseReport>),
    Provider(Box<ProviderReport>),
}

/// Each `configFrom` Secret as the caller sees it: its metadata only, once per name.
async fn secrets(
    client: &Client,
    lease: &SandboxLease,
    namespace: &str,
    scope: &SecretScope,
    timeout: std::time::Duration,
) -> Vec<SecretReport> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let in_scope = match scope {
        SecretScope::All => true,
        SecretScope::Namespaces(namespaces) => namespaces.iter().any(|n| n == namespace),
    };
    let scope_text = match scope {
        SecretScope::All => "every namespace".to_string(),
        SecretScope::Namespaces(n) if n.is_empty() => "no namespace".to_string(),
        SecretScope::Namespaces(n) => n.join(", "),
    };
    let mut seen: BTreeMap<String, Lookup> = BTreeMap::new();
    let mut reports = Vec::new();
    for source in &lease.spec.config_from {
        let r = &source.secret_key_ref;
        if !seen.contains_key(&r.name) {
            let what = format!("reading the metadata of Secret {namespace}/{}", r.name);
            let lookup = match bounded(timeout, &what, api.get_metadata_opt(&r.name)).await {
                Ok(Some(meta)) => Lookup::Found {
                    labelled: meta
                        .metadata
                        .labels
                        .is_some_and(|l| l.get(CONFIG_SOURCE_LABEL).is_some_and(|v| v == "true")),
                },
                Ok(None) => Lookup::NotFound,
                Err(why) => Lookup::Unknown(why.to_string()),
            };
            seen.insert(r.name.clone(), lookup);
        }
        reports.push(SecretReport::new(&r.name, &r.key, namespace, &seen[&r.name], in_scope, &scope_text));
    }
    reports
}
