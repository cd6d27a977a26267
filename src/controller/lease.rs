//! The lease controller: resolve each lease against its provider's published status and the
//! `configFrom` Secrets in the cache (see [`super::cache`]): a reconcile makes no request but the
//! status write, and only when the status changed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Conditions, Context, Error, apply_status, now};
use crate::api::{SandboxLease, SandboxLeaseStatus};
use crate::contract::{self, Capability, LeaseResolution, Verified};
use crate::vocabulary::{ConditionReason as Why, ConditionType as Type};

/// The watches re-trigger a lease whenever something it reads changes; this periodic pass is a
/// safety net only, and costs no request when nothing changed.
const RESYNC: Duration = Duration::from_secs(3600);

/// Resolves one lease and applies its status if it differs from the published one.
pub async fn reconcile_lease(lease: Arc<SandboxLease>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.observe(lease.as_ref(), reconcile(&lease, &ctx)).await
}

async fn reconcile(lease: &SandboxLease, ctx: &Context) -> Result<Action, Error> {
    ctx.queues.leases.started(&ObjectRef::from_obj(lease));
    let provider = ctx.caches.providers.get(&ObjectRef::new(&lease.spec.provider_ref.name));
    let provider = provider.as_deref();
    let namespace = lease.namespace().unwrap_or_default();
    // Checking the config compiles the driver's configSchema unless it is cached: CPU work
    // (bounded by the compile budget), off the async workers.
    let resolution = tokio::task::block_in_place(|| {
        let verified = provider.map_or_else(Verified::nothing, contract::verified_from_status);
        let secrets = |r: &_| ctx.caches.secrets.lookup(&namespace, r);
        contract::resolve_lease(lease, provider, &verified, secrets)
    });
    let desired = lease_status(lease, &resolution, &now());
    if lease.status.as_ref() != Some(&desired) {
        let api = Api::<SandboxLease>::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, &lease.name_any(), &desired).await?;
    }
    Ok(Action::requeue(RESYNC))
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
            conditions.set(Type::PluginIdentity, true, Why::Pinned, message)
        }
        // Identity holds but nothing to pin: the provider has no uid (never from a real apiserver).
        (Ok(()), None) => {
            let message = "the provider has no uid to pin".into();
            conditions.set(Type::PluginIdentity, false, Why::PluginIdentityFailed, message)
        }
        (Err(why), _) => conditions.set(Type::PluginIdentity, false, why.reason(), why.to_string()),
    };
    let config = match &r.config {
        Some(Ok(())) => {
            let message = format!("config and {} configFrom entries resolved and valid", lease.spec.config_from.len());
            conditions.set_tri(Type::ConfigResolved, "True", Why::ConfigResolved, message)
        }
        Some(Err(why)) => conditions.set_tri(Type::ConfigResolved, "False", why.reason(), why.to_string()),
        None => {
            let message = "config is resolved once the plugin identity check passes".to_string();
            conditions.set_tri(Type::ConfigResolved, "Unknown", Why::PluginIdentityFailed, message)
        }
    };
    let caps = &r.resolution.capabilities;
    let granted: Vec<&str> = Capability::ALL.into_iter().filter(|c| caps.get(*c)).map(Capability::key).collect();
    let resolved = match &r.identity {
        Ok(()) => {
            let list = if granted.is_empty() { "none".to_string() } else { granted.join(", ") };
            let message = format!("{} of {} capabilities granted: {list}", granted.len(), Capability::ALL.len());
            conditions.set(Type::Resolved, true, Why::Resolved, message)
        }
        Err(_) => {
            let message = "every capability is off: the plugin identity check failed".to_string();
            conditions.set(Type::Resolved, false, Why::PluginIdentityFailed, message)
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

/// The leases that resolve against provider `name` (its spec or status changed, or it was deleted).
pub fn leases_for_provider(leases: &Store<SandboxLease>, name: &str) -> Vec<ObjectRef<SandboxLease>> {
    leases.state_filter(|l| l.spec.provider_ref.name == name).iter().map(|l| ObjectRef::from_obj(l.as_ref())).collect()
}

/// The leases in `namespace` whose `configFrom` reads Secret `name`.
pub fn leases_for_secret(leases: &Store<SandboxLease>, namespace: &str, name: &str) -> Vec<ObjectRef<SandboxLease>> {
    leases
        .state_filter(|l| {
            l.metadata.namespace.as_deref() == Some(namespace)
                && l.spec.config_from.iter().any(|c| c.secret_key_ref.name == name)
        })
        .iter()
        .map(|l| ObjectRef::from_obj(l.as_ref()))
        .collect()
}
