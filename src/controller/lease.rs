//! The lease controller: resolve each lease against its provider's published status.
//!
//! Secrets are read with a GET per reconcile and dropped when it ends: the operator keeps no
//! Secret values in memory, and the Secret watch that re-triggers leases carries metadata only.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::{Conditions, Context, Error, apply_status, now};
use crate::api::{SandboxLease, SandboxLeaseStatus, SecretKeyRef};
use crate::contract::{self, Capability, LeaseResolution, SecretLookup, Verified};

/// Watches re-trigger leases when what they depend on changes; this periodic pass only catches a
/// provider deleted while a watch was down (a re-list reports no deletions).
const RESYNC: Duration = Duration::from_secs(3600);

/// Resolves one lease and applies its status if it differs from the published one.
pub async fn reconcile_lease(lease: Arc<SandboxLease>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.observe(lease.as_ref(), reconcile(&lease, &ctx)).await
}

async fn reconcile(lease: &SandboxLease, ctx: &Context) -> Result<Action, Error> {
    // Before the first provider list arrives every lease would look orphaned: wait for it.
    ctx.providers.wait_until_ready().await.map_err(|_| Error::CacheGone("SandboxProvider"))?;
    let provider = ctx.providers.get(&ObjectRef::new(&lease.spec.provider_ref.name));
    let provider = provider.as_deref();
    let namespace = lease.namespace().unwrap_or_default();
    let resolution = {
        // Config is resolved only after the identity check passes, so only then are Secrets read.
        let identity = contract::check_identity(lease, provider);
        let secrets = match identity {
            Ok(_) => LeaseSecrets::read(&ctx.client, &namespace, lease).await?,
            Err(_) => LeaseSecrets::default(),
        };
        let verified = provider.map_or_else(Verified::nothing, contract::verified_from_status);
        contract::resolve_checked_lease(lease, provider, identity, &verified, |r| secrets.lookup(r))
    };
    let desired = lease_status(lease, &resolution, &now());
    if lease.status.as_ref() != Some(&desired) {
        let api = Api::<SandboxLease>::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, &lease.name_any(), &desired).await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// The status a lease should have after this resolution: pure, so tests can check it.
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

/// The `configFrom` Secrets of one lease, as one reconcile read them.
#[derive(Default)]
pub struct LeaseSecrets(BTreeMap<String, Read>);

enum Read {
    Found(BTreeMap<String, ByteString>),
    Missing,
    /// Why it cannot be read; safe to show.
    Unreadable(&'static str),
}

impl LeaseSecrets {
    async fn read(client: &Client, namespace: &str, lease: &SandboxLease) -> Result<LeaseSecrets, Error> {
        let api = Api::<Secret>::namespaced(client.clone(), namespace);
        let mut secrets = LeaseSecrets::default();
        for source in &lease.spec.config_from {
            let name = &source.secret_key_ref.name;
            if !secrets.0.contains_key(name) {
                secrets.record(name, api.get_opt(name).await).map_err(|source| Error::ReadSecret {
                    namespace: namespace.to_string(),
                    name: name.clone(),
                    source,
                })?;
            }
        }
        Ok(secrets)
    }

    /// Records what a GET of Secret `name` returned. Missing, forbidden and undecodable are answers
    /// the status reports (config narrowing); any other error is transient and fails the reconcile
    /// instead, so an apiserver hiccup never flips capabilities off. A decoding error's text is not
    /// passed on: it could quote the Secret.
    pub fn record(&mut self, name: &str, got: Result<Option<Secret>, kube::Error>) -> Result<(), kube::Error> {
        let read = match got {
            Ok(Some(secret)) => Read::Found(secret.data.unwrap_or_default()),
            Ok(None) => Read::Missing,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                Read::Unreadable("sandcap is not allowed to get it (403 Forbidden)")
            }
            Err(kube::Error::SerdeError(_)) => Read::Unreadable("the apiserver's answer could not be decoded"),
            Err(e) => return Err(e),
        };
        self.0.insert(name.to_string(), read);
        Ok(())
    }

    pub fn lookup(&self, r: &SecretKeyRef) -> SecretLookup {
        match self.0.get(&r.name) {
            None | Some(Read::Missing) => SecretLookup::MissingSecret,
            Some(Read::Unreadable(why)) => SecretLookup::Unreadable(why.to_string()),
            Some(Read::Found(data)) => {
                data.get(&r.key).map_or(SecretLookup::MissingKey, |v| SecretLookup::Found(v.0.clone()))
            }
        }
    }
}
