//! The I/O shell: reads the Secret and the webhook configuration, writes what [`super::rotation`]
//! decides, keeps every caBundle in line, guarded by resourceVersions so replicas can race.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use sandcap_core::vocabulary::FIELD_MANAGER;

use super::material::*;
use super::rotation::*;

/// Where the certificates live; see the `--cert-secret-name`, `--webhook-config-name` and
/// `--service-name` flags of `sandcap run`.
#[derive(Clone, Debug)]
pub struct CertOptions {
    /// Secret (in `namespace`) holding the CA and serving certificate.
    pub secret_name: String,
    /// sandcap's own namespace (POD_NAMESPACE).
    pub namespace: String,
    /// The webhook Service; its DNS names go into the serving certificate.
    pub service_name: String,
    /// The ValidatingWebhookConfiguration whose caBundle sandcap keeps in sync (and no other).
    pub webhook_config_name: String,
    /// How often the Secret and caBundle are checked.
    pub check_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    #[error("could not generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("other replicas kept changing the Secret or webhook configuration ({MAX_ATTEMPTS} conflicts in a row)")]
    Contended,
}

/// What happened to the webhook configuration's caBundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleSync {
    UpToDate,
    Patched,
    /// The ValidatingWebhookConfiguration does not exist (yet): nothing to keep in sync, and a
    /// next CA is never promoted because no apiserver could have seen it.
    ConfigMissing,
}

/// One reconcile's result: what this replica wrote to the Secret, if anything, and the caBundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    pub rotation: Rotation,
    pub ca_bundle: BundleSync,
}

/// Both 409s mean another writer got there first: `AlreadyExists` on create, `Conflict` on a
/// stale resourceVersion.
fn lost_race(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Without a field manager the apiserver records the write under `unknown`, and `kubectl get
/// --show-managed-fields` cannot tell who owns the certificates.
fn post_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() }
}

/// Writes `material` into the Secret as read (`current`), guarded by its resourceVersion.
/// `Ok(false)`: another replica wrote first.
async fn write_secret(
    api: &Api<Secret>,
    opts: &CertOptions,
    current: Option<&Secret>,
    material: &Material,
) -> Result<bool, kube::Error> {
    let result = match current {
        Some(existing) => {
            let mut secret = existing.clone();
            secret.data = Some(material.to_secret_data());
            secret.string_data = None;
            api.replace(&opts.secret_name, &post_params(), &secret).await
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(opts.secret_name.clone()),
                    namespace: Some(opts.namespace.clone()),
                    labels: Some(BTreeMap::from([
                        ("app.kubernetes.io/managed-by".to_string(), "sandcap".to_string()),
                        ("app.kubernetes.io/component".to_string(), "webhook-certificate".to_string()),
                    ])),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".into()),
                data: Some(material.to_secret_data()),
                ..Secret::default()
            };
            api.create(&post_params(), &secret).await
        }
    };
    match result {
        Ok(_) => Ok(true),
        Err(e) if lost_race(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets every webhook's caBundle to `bundle` with one JSON patch that only touches those fields,
/// guarded by the resourceVersion read. `Ok(None)`: someone changed the configuration meanwhile.
async fn sync_ca_bundle(
    api: &Api<ValidatingWebhookConfiguration>,
    opts: &CertOptions,
    config: Option<&ValidatingWebhookConfiguration>,
    bundle: &str,
) -> Result<Option<BundleSync>, kube::Error> {
    let Some(config) = config else {
        return Ok(Some(BundleSync::ConfigMissing));
    };
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bundle);
    let mut ops = vec![json!({
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": config.metadata.resource_version,
    })];
    for (i, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes()) {
            ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
        }
    }
    if ops.len() == 1 {
        return Ok(Some(BundleSync::UpToDate));
    }
    let patch = Patch::Json::<()>(serde_json::from_value(json!(ops)).expect("a JSON patch built above"));
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    match api.patch(&opts.webhook_config_name, &params, &patch).await {
        Ok(_) => Ok(Some(BundleSync::Patched)),
        Err(e) if lost_race(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn next_ca_published(stored: &Stored, config: Option<&ValidatingWebhookConfiguration>) -> bool {
    let (Stored::Usable(material), Some(config)) = (stored, config) else {
        return false;
    };
    let Some(next) = &material.next_ca else {
        return false;
    };
    let webhooks = config.webhooks.as_deref().unwrap_or_default();
    !webhooks.is_empty()
        && webhooks
            .iter()
            .all(|w| w.client_config.ca_bundle.as_ref().is_some_and(|b| bundle_contains(&b.0, &next.cert)))
}

/// One round at time `now`: read the Secret and the webhook configuration, write what [`decide`]
/// says, then bring the caBundle in line with the Secret. Safe to run on every replica at once.
pub async fn reconcile(client: &Client, opts: &CertOptions, now: SystemTime) -> Result<Reconciled, RotationError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &opts.namespace);
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let names = dns_names(&opts.service_name, &opts.namespace);
    let mut written = Rotation::Keep;
    for _ in 0..MAX_ATTEMPTS {
        let secret = secrets.get_opt(&opts.secret_name).await?;
        let config = configs.get_opt(&opts.webhook_config_name).await?;
        let stored = Stored::from_secret(secret.as_ref());
        let action = decide(&stored, &names, next_ca_published(&stored, config.as_ref()), now);
        let material = carry_out(&stored, &action, &names, now)?;
        if action != Rotation::Keep {
            if !write_secret(&secrets, opts, secret.as_ref(), &material).await? {
                continue;
            }
            written = action;
        }
        if let Some(ca_bundle) = sync_ca_bundle(&configs, opts, config.as_ref(), &material.ca_bundle()).await? {
            return Ok(Reconciled { rotation: written, ca_bundle });
        }
    }
    Err(RotationError::Contended)
}

/// Keeps the certificates current until `shutdown`: a [`reconcile`] every `check_interval`, sooner
/// after a failure. Errors are logged and retried; they never end the loop.
pub async fn run_self_managed(client: Client, opts: CertOptions, shutdown: CancellationToken) {
    tracing::info!(
        secret = %opts.secret_name, namespace = %opts.namespace, webhook_config = %opts.webhook_config_name,
        "managing the webhook certificates"
    );
    loop {
        let wait = match reconcile(&client, &opts, SystemTime::now()).await {
            Ok(outcome) => {
                if outcome.rotation != Rotation::Keep {
                    tracing::info!(secret = %opts.secret_name, "{}", outcome.rotation);
                }
                match outcome.ca_bundle {
                    BundleSync::Patched => {
                        tracing::info!(webhook_config = %opts.webhook_config_name, "caBundle updated")
                    }
                    BundleSync::ConfigMissing => tracing::warn!(
                        webhook_config = %opts.webhook_config_name,
                        "ValidatingWebhookConfiguration not found: its caBundle cannot be kept in sync"
                    ),
                    BundleSync::UpToDate => {}
                }
                opts.check_interval
            }
            Err(error) => {
                tracing::warn!(%error, "self-managed certificates: will retry");
                RETRY_AFTER.min(opts.check_interval)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
