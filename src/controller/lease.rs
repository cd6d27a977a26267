//! The lease controller: resolve each lease against its provider's published status and the
//! `configFrom` Secrets in the cache (see [`super::cache`]): a reconcile makes no request but the
//! status write, and only when the status changed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::cache::SecretCache;
use super::context::Context;
use super::error::Error;
use super::status::{Conditions, apply_status, now};
use crate::api::{SandboxLease, SandboxLeaseStatus, SandboxProvider};
use crate::contract::{self, Capability, LeaseResolution, Verified};

/// The watches re-trigger a lease whenever something it reads changes; this periodic pass is a
/// safety net only, and costs no request when nothing changed.
const RESYNC: Duration = Duration::from_secs(3600);

/// Resolves one lease and applies its status if it differs from the published one.
pub async fn reconcile_lease(lease: Arc<SandboxLease>, ctx: Arc<Context>) -> Result<Action, Error> {
    let provider = ctx.caches.providers.get(&ObjectRef::new(&lease.spec.provider_ref.name));
    // Checking the config compiles the driver's configSchema unless it is cached: CPU work
    // (bounded by the compile budget), off the async workers.
    let resolution = tokio::task::block_in_place(|| resolve(&lease, provider.as_deref(), &ctx.caches.secrets));
    let desired = lease_status(&lease, &resolution, &now());
    if lease.status.as_ref() != Some(&desired) {
        let namespace = lease.namespace().unwrap_or_default();
        let api = Api::<SandboxLease>::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, &lease.name_any(), &desired).await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// The lease against its provider's published status (if the provider exists) and the cached
/// `configFrom` Secrets of its namespace.
fn resolve(lease: &SandboxLease, provider: Option<&SandboxProvider>, secrets: &SecretCache) -> LeaseResolution {
    let namespace = lease.namespace().unwrap_or_default();
    let verified = provider.map_or_else(Verified::nothing, contract::verified_from_status);
    contract::resolve_lease(lease, provider, &verified, |r| secrets.lookup(&namespace, r))
}

/// The status a lease should have after this resolution: pure, everything it reads is passed in.
/// `pinned` is set once, from the first resolution whose identity check passed, and kept.
pub fn lease_status(lease: &SandboxLease, r: &LeaseResolution, now: &Time) -> SandboxLeaseStatus {
    let previous = lease.status.as_ref();
    let conditions = Conditions {
        generation: lease.metadata.generation,
        previous: previous.map(|s| s.conditions.as_slice()).unwrap_or_default(),
        now,
    };
    let pinned = previous.and_then(|s| s.pinned.clone()).or_else(|| r.pin.clone());
    let identity = match (&r.identity, &pinned) {
        (Ok(()), Some(p)) => {
            let message = format!(
                "pinned to provider uid {}, pluginKey {}, driver {}",
                p.provider_uid, p.plugin_key, p.driver_key
            );
            conditions.set("PluginIdentity", true, "Pinned", message)
        }
        // Identity holds but nothing to pin: the provider has no uid (never from a real apiserver).
        (Ok(()), None) => {
            conditions.set("PluginIdentity", false, "PluginIdentityFailed", "the provider has no uid to pin".into())
        }
        (Err(why), _) => conditions.set("PluginIdentity", false, why.reason(), why.to_string()),
    };
    let config = match &r.config {
        Some(Ok(())) => {
            let message = format!("config and {} configFrom entries resolved and valid", lease.spec.config_from.len());
            conditions.set_tri("ConfigResolved", "True", "ConfigResolved", message)
        }
        Some(Err(why)) => conditions.set_tri("ConfigResolved", "False", why.reason(), why.to_string()),
        None => {
            let message = "config is resolved once the plugin identity check passes".to_string();
            conditions.set_tri("ConfigResolved", "Unknown", "PluginIdentityFailed", message)
        }
    };
    let caps = &r.resolution.capabilities;
    let granted: Vec<&str> = Capability::ALL.into_iter().filter(|c| caps.get(*c)).map(Capability::key).collect();
    let resolved = match &r.identity {
        Ok(()) => {
            let list = if granted.is_empty() { "none".to_string() } else { granted.join(", ") };
            conditions.set("Resolved", true, "Resolved", format!("{} of 6 capabilities granted: {list}", granted.len()))
        }
        Err(_) => {
            let message = "every capability is off: the plugin identity check failed".to_string();
            conditions.set("Resolved", false, "PluginIdentityFailed", message)
        }
    };
    SandboxLeaseStatus {
        observed_generation: lease.metadata.generation,
        conditions: vec![resolved, config, identity],
        pinned,
        effective_policy: Some(r.effective_policy),
        capabilities: r.resolution.capabilities,
        explanations: r.resolution.explanations.clone(),
    }
}
