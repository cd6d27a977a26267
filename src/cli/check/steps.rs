//! The five checks' requests: each reads what its verdict needs ([`super::verdicts`],
//! [`super::certificate`]) and turns the verdict into one line.

use std::time::SystemTime;

use k8s_openapi::api::admissionregistration::v1::{ValidatingWebhook, ValidatingWebhookConfiguration};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::args::{CheckArgs, Level, Line};
use super::certificate::{self, NotPresented, PemError};
use super::verdicts::{self, Lagging, NotDryRunOnly, RealCreate};
use crate::certs::TLS_CRT;
use crate::cli::cluster::{RequestError, bounded, list_pages, within};
use crate::cli::crds::crd_values;
use sandcap_core::api::{SandboxLease, SandboxProvider};

/// The unknown field of the dry run: the CRD keeps unknown fields for the webhook to refuse.
pub const DRY_RUN_FIELD: &str = "sandcapCheck";
/// The name of the dry run's provider.
const DRY_RUN_NAME: &str = "sandcap-check-dry-run";
/// A serving certificate with fewer days left is a warning (as the alert's runbook in docs/operations.md suggests on
/// `sandcap_certificate_expiry_timestamp_seconds`).
const DAYS_WARNING: u64 = 30;
/// How many objects the controllers check names when they lag.
const NAMED: usize = 5;

pub async fn crds(client: &Client, args: &CheckArgs) -> Line {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut names = Vec::new();
    for (name, generated) in crd_values(args.contract) {
        let live = match bounded(args.cluster.request_timeout, &format!("reading CRD {name}"), api.get_opt(&name)).await
        {
            Ok(Some(live)) => live,
            Ok(None) => return Line::fail(format!("CRD {name} not found: {APPLY_CRDS}")),
            Err(e) => return Line::fail(e),
        };
        let live = serde_json::to_value(&live.spec).expect("a CRD serializes");
        if let Some(at) = verdicts::crd_drift(&generated["spec"], &live) {
            return Line::fail(format!(
                "CRD {name} is not this sandcap's ({}, contract {}): {at}; its rules are stale, {APPLY_CRDS}",
                env!("CARGO_PKG_VERSION"),
                args.contract
            ));
        }
        names.push(name);
    }
    Line::ok(format!(
        "CRDs {} are this sandcap's ({}, contract {})",
        names.join(" and "),
        env!("CARGO_PKG_VERSION"),
        args.contract
    ))
}

const APPLY_CRDS: &str = "apply this version's: helm upgrade with crds.install on, or kubectl apply --server-side -f crds/ (crds/v2/ for contract v2, or sandcap crds --contract VERSION)";

pub async fn webhook(client: &Client, args: &CheckArgs) -> Line {
    let config = match webhook_configuration(client, args).await {
        Ok(config) => config,
        Err(line) => return line,
    };
    let name = &args.webhook_configuration;
    let mut verified = None;
    let mut seen = Vec::new();
    for hook in config.webhooks.iter().flatten() {
        let Some(bundle) = hook.client_config.ca_bundle.as_ref().map(|b| b.0.clone()).filter(|b| !b.is_empty()) else {
            return Line::fail(format!(
                "webhook {} of ValidatingWebhookConfiguration {name} has no caBundle (self-managed certificates: \
                 sandcap writes it once it runs; cert-manager: its cainjector)",
                hook.name
            ));
        };
        let Some(target) = Target::of(hook) else {
            return Line::fail(format!("webhook {} names neither a service nor a URL", hook.name));
        };
        if seen.contains(&(target.shown.clone(), bundle.clone())) {
            continue;
        }
        seen.push((target.shown.clone(), bundle.clone()));
        let (chain, source) = match serving_chain(client, args, &target).await {
            Ok(found) => found,
            Err(line) => return line,
        };
        let now = SystemTime::now();
        match certificate::verify(&bundle, &chain, &target.server_name, now) {
            Ok(v) => verified = verified.or(Some((v.days_left(now), v.not_after, source, target.server_name))),
            Err(e) => {
                return Line::fail(format!(
                    "the caBundle of ValidatingWebhookConfiguration {name} does not verify the serving certificate \
                     {source} for {}: {e}",
                    target.server_name
                ));
            }
        }
    }
    let Some((days, until, source, server_name)) = verified else {
        return Line::fail(format!("ValidatingWebhookConfiguration {name} has no webhooks"));
    };
    let text = format!(
        "the caBundle of ValidatingWebhookConfiguration {name} verifies the serving certificate {source} for \
         {server_name}; it expires in {days} days ({})",
        humantime::format_rfc3339_seconds(until)
    );
    if days < DAYS_WARNING { Line::new(Level::Warn, format!("{text}: renew it")) } else { Line::ok(text) }
}

async fn webhook_configuration(client: &Client, args: &CheckArgs) -> Result<ValidatingWebhookConfiguration, Line> {
    let name = &args.webhook_configuration;
    let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let what = format!("reading ValidatingWebhookConfiguration {name}");
    match bounded(args.cluster.request_timeout, &what, api.get_opt(name)).await {
        Ok(Some(config)) => Ok(config),
        Ok(None) => Err(Line::fail(format!(
            "ValidatingWebhookConfiguration {name} not found (the chart installs it; --webhook-configuration names \
             another)"
        ))),
        Err(e) => Err(Line::fail(e)),
    }
}

/// Where a webhook is served, and the name the apiserver verifies its certificate for.
struct Target {
    host: String,
    port: u16,
    server_name: String,
    shown: String,
    /// Registered by Service, as the chart registers it: its pods serve the certificate Secret.
    service: bool,
}

impl Target {
    fn of(hook: &ValidatingWebhook) -> Option<Target> {
        let config = &hook.client_config;
        if let Some(s) = &config.service {
            let host = crate::certs::service_host(&s.name, &s.namespace);
            let port = u16::try_from(s.port.unwrap_or(443)).ok()?;
            let shown = format!("Service {}/{} port {port}", s.namespace, s.name);
            return Some(Target { server_name: host.clone(), host, port, shown, service: true });
        }
        let uri: http::Uri = config.url.as_deref()?.parse().ok()?;
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(443);
        Some(Target { server_name: host.clone(), host, port, shown: format!("{uri}"), service: false })
    }
}

/// The chain the webhook serves, from a handshake with it (in the cluster, or wherever it is
/// reachable), else, for a webhook registered by Service, from the Secret its pods mount (from
/// outside the cluster).
async fn serving_chain(
    client: &Client,
    args: &CheckArgs,
    target: &Target,
) -> Result<(Vec<rustls::pki_types::CertificateDer<'static>>, String), Line> {
    let timeout = args.cluster.request_timeout;
    let why = match certificate::presented(&target.host, target.port, &target.server_name, timeout).await {
        Ok(chain) => return Ok((chain, format!("served at {}", target.shown))),
        Err(NotPresented::Handshake(e)) => {
            return Err(Line::fail(format!(
                "{} accepts connections but completes no TLS handshake: {e}",
                target.shown
            )));
        }
        Err(NotPresented::Unreachable(why)) => why,
    };
    let unseen = |why: String| {
        Line::new(
            Level::Warn,
            format!(
                "cannot see the serving certificate: {} is not reachable from here ({why}); the dry run shows whether \
                 the apiserver reaches the webhook",
                target.shown
            ),
        )
    };
    if !target.service {
        return Err(unseen(why));
    }
    let (ns, secret) = (&args.namespace, &args.cert_secret);
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let read = bounded(timeout, &format!("reading Secret {ns}/{secret}"), api.get_opt(secret)).await;
    let chain = match read {
        Ok(Some(s)) => match s.data.and_then(|mut d| d.remove(TLS_CRT)) {
            Some(pem) => certificate::from_pem(&pem.0).map_err(SecretChainError::Pem),
            None => Err(SecretChainError::NoCertificate),
        },
        Ok(None) => Err(SecretChainError::NotFound),
        Err(e) => Err(SecretChainError::Request(e)),
    };
    match chain {
        Ok(chain) => {
            Ok((chain, format!("in Secret {ns}/{secret} ({} is not reachable from here: {why})", target.shown)))
        }
        Err(e) => Err(unseen(format!("{why}; Secret {ns}/{secret}: {e}"))),
    }
}

/// Why the certificate Secret holds no chain.
#[derive(Debug, thiserror::Error)]
enum SecretChainError {
    #[error("not found")]
    NotFound,
    #[error("no {TLS_CRT}")]
    NoCertificate,
    #[error("{TLS_CRT} {0}")]
    Pem(PemError),
    #[error(transparent)]
    Request(RequestError),
}

pub async fn admission(client: &Client, args: &CheckArgs) -> Line {
    let config = match webhook_configuration(client, args).await {
        Ok(config) => config,
        Err(line) => return line,
    };
    let webhooks: Vec<String> = config.webhooks.iter().flatten().map(|w| w.name.clone()).collect();
    let probe = json!({
        "apiVersion": sandcap_core::api::API_VERSION,
        "kind": "SandboxProvider",
        "metadata": {"name": DRY_RUN_NAME},
        "spec": {
            "pluginKey": "sandcap.check",
            "version": "1.0.0",
            "worker": {"service": {"namespace": args.namespace, "name": "sandcap-check", "port": 8080}},
            "environmentDrivers": [{"driverKey": "check", "kind": "sandbox_provider", DRY_RUN_FIELD: true}],
        },
    });
    let probe: SandboxProvider = serde_json::from_value(probe).expect("a provider");
    let api = Api::<SandboxProvider>::all(client.clone());
    let confirmed = if args.confirm_dry_run_only {
        match dry_run_only(&api, &probe, args).await {
            Ok(text) => format!("; {text}"),
            Err(text) => return Line::fail(text),
        }
    } else {
        String::new()
    };
    let params = PostParams { dry_run: true, field_manager: Some(sandcap_core::vocabulary::FIELD_MANAGER.into()) };
    let result = match within(args.cluster.request_timeout, api.create(&params, &probe)).await {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(crate::cli::cluster::api_error(&e)),
        None => Err("the dry run got no answer in time".to_string()),
    };
    match verdicts::admission(result, &webhooks, DRY_RUN_FIELD) {
        Ok(text) => Line::ok(format!("{text}{confirmed}")),
        Err(text) => Line::fail(text),
    }
}

/// `--confirm-dry-run-only`: a real create of `probe`, which must be refused ([`verdicts::dry_run_only`]).
/// What gets stored is deleted at once; the check fails then, and `--wait` tries again.
async fn dry_run_only(
    api: &Api<SandboxProvider>,
    probe: &SandboxProvider,
    args: &CheckArgs,
) -> Result<String, NotDryRunOnly> {
    let timeout = args.cluster.request_timeout;
    let params = PostParams { dry_run: false, field_manager: Some(sandcap_core::vocabulary::FIELD_MANAGER.into()) };
    let outcome = match within(timeout, api.create(&params, probe)).await {
        Some(Ok(_)) => RealCreate::Stored,
        Some(Err(kube::Error::Api(status))) => {
            RealCreate::Refused { code: status.code, message: status.message.clone() }
        }
        Some(Err(e)) => RealCreate::Failed(e.to_string()),
        None => RealCreate::Failed(format!("no answer within {}", humantime::format_duration(timeout))),
    };
    let verdict = verdicts::dry_run_only(&outcome);
    if outcome != RealCreate::Stored {
        return verdict;
    }
    let what = format!("deleting SandboxProvider {DRY_RUN_NAME}");
    match bounded(timeout, &what, api.delete(DRY_RUN_NAME, &DeleteParams::default())).await {
        Ok(_) => verdict,
        Err(delete) => Err(NotDryRunOnly::StoredAndKept { delete }),
    }
}

pub async fn leader(client: &Client, args: &CheckArgs) -> Line {
    let (ns, name) = (&args.namespace, &args.leader_election_name);
    if name.is_empty() {
        return Line::new(Level::Warn, "not checked: leader election is off (--leader-election-name \"\")");
    }
    let shown = format!("{ns}/{name}");
    let api = Api::<Lease>::namespaced(client.clone(), ns);
    match bounded(args.cluster.request_timeout, &format!("reading Lease {shown}"), api.get_opt(name)).await {
        Ok(lease) => match verdicts::leader(lease.as_ref(), &shown, Timestamp::now()) {
            Ok(text) => Line::ok(text),
            Err(text) => Line::fail(text),
        },
        Err(e) => Line::fail(e),
    }
}

pub async fn controllers(client: &Client, args: &CheckArgs) -> Line {
    let mut counts = Vec::new();
    let mut lagging: Vec<(String, Lagging)> = Vec::new();
    let mut more = 0usize;
    for (kind, resource) in [
        ("SandboxProvider", ApiResource::erase::<SandboxProvider>(&())),
        ("SandboxLease", ApiResource::erase::<SandboxLease>(&())),
    ] {
        let mut listed = 0usize;
        let each = |page: Vec<DynamicObject>| {
            let now = Timestamp::now();
            for object in &page {
                listed += 1;
                let observed =
                    object.data.get("status").and_then(|s| s.get("observedGeneration")).and_then(Value::as_i64);
                if let Some(late) = verdicts::lagging(&object.metadata, observed, now, args.resolve_within) {
                    if lagging.len() < NAMED { lagging.push((kind.to_string(), late)) } else { more += 1 }
                }
            }
        };
        if let Err(e) = list_pages(client, &resource, args.cluster.request_timeout, each).await {
            return Line::fail(e);
        }
        counts.push(format!("{listed} {kind}{}", if listed == 1 { "" } else { "s" }));
    }
    let within = humantime::format_duration(args.resolve_within);
    if lagging.is_empty() {
        return Line::ok(format!("every change older than {within} is resolved ({} listed)", counts.join(" and ")));
    }
    let named: Vec<String> = lagging
        .iter()
        .map(|(kind, l)| {
            let observed = l.observed.map_or_else(|| "no status".into(), |o| format!("status for {o}"));
            format!("{kind} {} (generation {}, {observed}, changed {}s ago)", l.name, l.generation, l.changed_ago)
        })
        .collect();
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    Line::fail(format!(
        "changed more than {within} ago and not resolved: {}{more}; are the controllers running (kubectl logs of the \
         leader)?",
        named.join(", ")
    ))
}
