//! The lease controller: resolve each lease against its provider's published status and the
//! `configFrom` Secrets in the cache (see [`super::cache`]): a reconcile makes no request but the
//! status write, and only when the status changed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::cache::SecretCache;
use super::cached::CachedLease;
use super::context::{self, Context};
use super::engine::Next;
use super::error::Error;
use super::publish::publish;
use super::status::{Conditions, now};
use sandcap_core::api::{Pinned, ResolvableLease, SandboxLeaseStatus, SandboxProvider};
use sandcap_core::config_schema;
use sandcap_core::contract::{self, Contract, LeaseResolution, Reason, Refusals, Verified};
use sandcap_core::vocabulary::{ConditionReason as Why, ConditionStatus, ConditionType as Type};

/// The watches re-trigger a lease whenever something it reads changes; this periodic pass over
/// every lease is a safety net only, and costs no request when nothing changed.
pub const RESYNC: Duration = Duration::from_secs(3600);

/// Resolves one lease, judges its spec against today's rules ([`super::audit`]) and
/// [`publish`]es its status: written if it differs from the published one, with an Event when
/// its `Valid` condition turned.
pub async fn reconcile_lease(lease: Arc<CachedLease>, ctx: Arc<Context>) -> Result<Next, Error> {
    let provider = ctx.caches.providers.get(&ObjectRef::new(&lease.spec.provider_ref.name));
    if awaits_first_probe(&lease, provider.as_deref()) {
        return Ok(Next::Change);
    }
    // Both objects judged against today's rules: what they refuse grants nothing. Each judgment is
    // remembered per generation by its kind's table, so this costs a lookup once an object has
    // been judged.
    let finding = context::finding(&ctx, lease.as_ref(), &lease.spec).await;
    let provider_finding = match &provider {
        Some(p) => Some(context::finding(&ctx, p.as_ref(), &p.spec).await),
        None => None,
    };
    let refusals = Refusals { lease: finding.refusal(), provider: provider_finding.and_then(|f| f.refusal()) };
    // Checking the config compiles the driver's configSchema unless it is cached: CPU work
    // (bounded by the compile budget), off the async workers. A cached one is checked here, spared
    // the hand-over of the worker's other tasks to another thread.
    let resolve = || resolve(ctx.contract.contract(), &lease, provider.as_deref(), &refusals, &ctx.caches.secrets);
    let resolution =
        if compiles_nothing(&lease, provider.as_deref()) { resolve() } else { tokio::task::block_in_place(resolve) };
    let now = now();
    let desired = lease_status(&lease, &resolution, &now);
    publish(&ctx, lease.as_ref(), desired, &finding, &now).await?;
    // Nothing to schedule: the loop's pass every [`RESYNC`] comes back to every lease.
    Ok(Next::Change)
}

/// Whether `lease` grants nothing now (it has no status, or one with every capability off) and its
/// provider exists but has not published a probe yet. Its status would grant nothing and be
/// rewritten as soon as the probe is published (a new worker status re-triggers the provider's
/// leases), so it is written once, then. Waiting grants nothing meanwhile; a lease whose status
/// grants something is always rewritten, so that it never stays granted on an unprobed provider.
fn awaits_first_probe(lease: &CachedLease, provider: Option<&SandboxProvider>) -> bool {
    !lease.grants_any() && provider.is_some_and(|p| p.status.as_ref().is_none_or(|s| s.worker.is_none()))
}

/// Whether resolving `lease` compiles no configSchema: its driver declares none, or the compiled
/// one is cached.
fn compiles_nothing(lease: &CachedLease, provider: Option<&SandboxProvider>) -> bool {
    let driver = provider
        .and_then(|p| p.spec.environment_drivers.iter().find(|d| d.driver_key == lease.spec.provider_ref.driver_key));
    driver.and_then(|d| d.config_schema.as_ref()).is_none_or(config_schema::is_cached)
}

/// The lease against its provider's published status (if the provider exists), what today's
/// rules refuse of the two, and the cached `configFrom` Secrets of its namespace.
fn resolve(
    contract: &Contract,
    lease: &CachedLease,
    provider: Option<&SandboxProvider>,
    refusals: &Refusals,
    secrets: &SecretCache,
) -> LeaseResolution {
    let namespace = lease.namespace().unwrap_or_default();
    let verified = provider.map_or_else(Verified::nothing, contract::verified_from_status);
    contract::resolve_lease(contract, lease, provider, &verified, refusals, |r| secrets.lookup(&namespace, r))
}

/// The status a lease should have after this resolution: pure, everything it reads is passed in.
/// `pinned` is set once, from the first resolution whose identity check passed, and kept.
pub fn lease_status(lease: &CachedLease, r: &LeaseResolution, now: &Time) -> SandboxLeaseStatus {
    let previous = lease.conditions();
    let conditions = Conditions { generation: lease.meta().generation, previous: &previous, now };
    let pinned = lease.pinned().cloned().or_else(|| r.pin.clone());
    let identity = identity_condition(&conditions, r, pinned.as_ref());
    let config = config_condition(&conditions, lease, r);
    let resolved = resolved_condition(&conditions, lease, r);
    SandboxLeaseStatus {
        observed_generation: lease.meta().generation,
        conditions: vec![resolved, config, identity],
        pinned,
        effective_policy: Some(r.effective_policy),
        contract: Some(r.contract),
        capabilities: r.resolution.capabilities,
        explanations: r.resolution.explanations.clone(),
    }
}

/// `PluginIdentity`: whether the lease is pinned to the provider it resolved against.
fn identity_condition(conditions: &Conditions, r: &LeaseResolution, pinned: Option<&Pinned>) -> Condition {
    match (&r.identity, pinned) {
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
    }
}

/// `ConfigResolved`: unknown until the identity check passes.
fn config_condition(conditions: &Conditions, lease: &CachedLease, r: &LeaseResolution) -> Condition {
    match &r.config {
        Some(Ok(())) => {
            let message = format!("config and {} configFrom entries resolved and valid", lease.spec.config_from.len());
            conditions.set_tri(Type::ConfigResolved, ConditionStatus::True, Why::ConfigResolved, message)
        }
        Some(Err(why)) => {
            conditions.set_tri(Type::ConfigResolved, ConditionStatus::False, why.reason(), why.to_string())
        }
        None => {
            let message = "config is resolved once the plugin identity check passes".to_string();
            conditions.set_tri(Type::ConfigResolved, ConditionStatus::Unknown, Why::PluginIdentityFailed, message)
        }
    }
}

/// `Resolved`: the capabilities granted, or why every one is off.
fn resolved_condition(conditions: &Conditions, lease: &CachedLease, r: &LeaseResolution) -> Condition {
    let caps = &r.resolution.capabilities;
    let keys = r.contract.contract().keys.len();
    let granted: Vec<&str> = caps.entries().filter(|(_, on)| *on).map(|(c, _)| c.key()).collect();
    let refused = r
        .resolution
        .explanations
        .iter()
        .map(|e| e.reason)
        .find(|reason| matches!(reason, Reason::LeaseNotValid | Reason::ProviderNotValid));
    match (&r.identity, refused) {
        (_, Some(Reason::LeaseNotValid)) => {
            let message = "every capability is off: today's rules refuse the lease (see its Valid condition)";
            conditions.set(Type::Resolved, false, Why::LeaseNotValid, message.into())
        }
        (Ok(()), Some(_)) => {
            let message = format!(
                "every capability is off: today's rules refuse provider {} (see its Valid condition)",
                lease.spec.provider_ref.name
            );
            conditions.set(Type::Resolved, false, Why::ProviderNotValid, message)
        }
        (Ok(()), None) => {
            let list = if granted.is_empty() { "none".to_string() } else { granted.join(", ") };
            let message = format!("{} of {keys} capabilities granted: {list}", granted.len());
            conditions.set(Type::Resolved, true, Why::Resolved, message)
        }
        (Err(_), _) => {
            let message = "every capability is off: the plugin identity check failed".to_string();
            conditions.set(Type::Resolved, false, Why::PluginIdentityFailed, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    use super::*;
    use crate::controller::fixtures::{T0, later, lease, provider, time};
    use sandcap_core::api::SandboxLease;
    use sandcap_core::versions::V1;
    use sandcap_core::vocabulary::Capability;

    const METHODS: [&str; 3] = ["environmentExecute", "environmentSyncIn", "environmentSyncOut"];

    /// The status `lease`, as the cache keeps it, gets against `provider` (no Secrets in the
    /// cache) at `now`.
    fn status_at(lease: &SandboxLease, provider: Option<&SandboxProvider>, now: &Time) -> SandboxLeaseStatus {
        let lease = CachedLease::from(lease.clone());
        lease_status(&lease, &resolve(&V1, &lease, provider, &Refusals::default(), &SecretCache::default()), now)
    }

    fn condition<'s>(status: &'s SandboxLeaseStatus, type_: &str) -> &'s Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("{type_} in {status:?}"))
    }

    fn verdict<'s>(status: &'s SandboxLeaseStatus, type_: &str) -> (&'s str, &'s str) {
        let c = condition(status, type_);
        (c.status.as_str(), c.reason.as_str())
    }

    /// `lease` as published after a reconcile against `provider` at [`T0`].
    fn published(lease: SandboxLease, provider: &SandboxProvider) -> SandboxLease {
        let status = status_at(&lease, Some(provider), &time(T0));
        SandboxLease { status: Some(status), ..lease }
    }

    #[test]
    fn a_lease_granting_nothing_waits_for_its_new_providers_first_probe_and_nothing_else() {
        let l = lease("team-a", "l").of("p", "k").build();
        let unprobed = provider("p").driver("k").declares(&["nativeSyncIn"]).build();
        let failed = provider("p").driver("k").probe_failed("the worker is unreachable").build();
        let waits =
            |l: &SandboxLease, p: Option<&SandboxProvider>| awaits_first_probe(&CachedLease::from(l.clone()), p);
        assert!(waits(&l, Some(&unprobed)), "written once, when the probe is published");
        assert!(!waits(&l, Some(&failed)), "a failed probe is a probe");
        assert!(!waits(&l, None), "a missing provider is written at once");
        let without_worker = SandboxProvider { status: Some(Default::default()), ..unprobed.clone() };
        assert!(waits(&l, Some(&without_worker)), "a status without a probe is no probe");
        let granting =
            published(l.clone(), &provider("p").driver("k").declares(&["nativeSyncIn"]).probed_ok(&METHODS).build());
        assert!(granting.status.as_ref().unwrap().capabilities.get(Capability::NativeSyncIn), "the fixture grants");
        assert!(!waits(&granting, Some(&unprobed)), "a status that grants something is rewritten at once");
        let nothing = published(l, &failed);
        assert!(waits(&nothing, Some(&unprobed)), "a status that grants nothing waits too");
    }

    #[test]
    fn the_first_resolution_whose_identity_holds_pins_the_provider() {
        let p = provider("p").driver("k").declares(&["nativeSyncIn"]).probed_ok(&METHODS).build();
        let status = status_at(&lease("team-a", "l").of("p", "k").build(), Some(&p), &time(T0));
        let pinned = status.pinned.as_ref().expect("pinned");
        assert_eq!(
            (pinned.provider_uid.as_str(), pinned.plugin_key.as_str(), pinned.driver_key.as_str()),
            ("p-uid", "acme.sandbox", "k")
        );
        assert_eq!(verdict(&status, "PluginIdentity"), ("True", "Pinned"));
        assert_eq!(verdict(&status, "ConfigResolved"), ("True", "ConfigResolved"));
        assert_eq!(verdict(&status, "Resolved"), ("True", "Resolved"));
        assert!(condition(&status, "Resolved").message.contains("of 6 capabilities granted: "));
        assert!(status.capabilities.get(Capability::NativeSyncIn));
    }

    #[test]
    fn a_recreated_provider_keeps_the_pin_and_turns_everything_off() {
        let p = provider("p").driver("k").declares(&["nativeSyncIn"]).probed_ok(&METHODS).build();
        let l = published(lease("team-a", "l").of("p", "k").build(), &p);
        let recreated =
            provider("p").uid("another").driver("k").declares(&["nativeSyncIn"]).probed_ok(&METHODS).build();
        let status = status_at(&l, Some(&recreated), &later(T0, 60));
        assert_eq!(status.pinned.as_ref().unwrap().provider_uid, "p-uid", "the pin never moves");
        assert_eq!(verdict(&status, "PluginIdentity"), ("False", "ProviderRecreated"));
        assert_eq!(verdict(&status, "Resolved"), ("False", "PluginIdentityFailed"));
        assert_eq!(verdict(&status, "ConfigResolved"), ("Unknown", "PluginIdentityFailed"));
        assert!(status.explanations.iter().all(|e| !e.granted), "{status:?}");
    }

    #[test]
    fn without_its_provider_a_lease_pins_nothing_and_resolves_no_config() {
        let status = status_at(&lease("team-a", "l").of("gone", "k").build(), None, &time(T0));
        assert!(status.pinned.is_none());
        assert_eq!(verdict(&status, "PluginIdentity"), ("False", "ProviderNotFound"));
        assert_eq!(verdict(&status, "ConfigResolved"), ("Unknown", "PluginIdentityFailed"));
        assert_eq!(verdict(&status, "Resolved"), ("False", "PluginIdentityFailed"));
    }

    #[test]
    fn a_schema_compiled_before_is_checked_without_leaving_the_async_worker() {
        let l = CachedLease::from(lease("team-a", "l").of("p", "k").build());
        let plain = provider("p").driver("k").probed_ok(&METHODS).build();
        assert!(compiles_nothing(&l, Some(&plain)) && compiles_nothing(&l, None));
        let schema = json!({"type": "object", "title": "compiles_nothing"});
        let with_schema = provider("p").driver("k").config_schema(schema.clone()).probed_ok(&METHODS).build();
        assert!(!compiles_nothing(&l, Some(&with_schema)));
        // Another test may fill the cache at the same time and evict it at once: try again.
        assert!((0..10).any(|_| {
            let _ = config_schema::compile(&schema, config_schema::Deadline::Own);
            compiles_nothing(&l, Some(&with_schema))
        }));
    }

    #[test]
    fn a_lease_or_provider_that_todays_rules_refuse_resolves_to_nothing_and_says_whose_fault() {
        let p = provider("p").driver("k").declares(&["nativeSyncIn", "nativeSyncOut"]).probed_ok(&METHODS).build();
        let l = CachedLease::from(lease("team-a", "l").of("p", "k").build());
        let refusal = |problem: &str| Some(format!("the webhook would refuse it today: {problem}: unknown field"));
        for (refusals, reason) in [
            (Refusals { lease: refusal("spec.bakend"), provider: None }, "LeaseNotValid"),
            (Refusals { lease: None, provider: refusal("spec.environmentDrivers[0].x") }, "ProviderNotValid"),
        ] {
            let status = lease_status(&l, &resolve(&V1, &l, Some(&p), &refusals, &SecretCache::default()), &time(T0));
            assert_eq!(verdict(&status, "Resolved"), ("False", reason));
            assert!(status.explanations.iter().all(|e| !e.granted && e.reason.as_str() == reason), "{status:?}");
            assert_eq!(status.effective_policy, Some(contract::LeasePolicy::Ephemeral));
            // The identity still holds, and the pin is taken: a later fix needs no re-creation.
            assert_eq!(verdict(&status, "PluginIdentity"), ("True", "Pinned"));
        }
    }

    #[test]
    fn config_failures_name_their_reason() {
        let schema = json!({"type": "object", "properties": {"size": {"type": "integer"}}});
        let p = provider("p").driver("k").config_schema(schema).probed_ok(&METHODS).build();
        let missing =
            status_at(&lease("team-a", "l").of("p", "k").config_from("creds", "c").build(), Some(&p), &time(T0));
        assert_eq!(verdict(&missing, "ConfigResolved"), ("False", "SecretNotFound"));
        let violated = lease("team-a", "l").of("p", "k").with_config(json!({"size": "big"})).build();
        let violated = status_at(&violated, Some(&p), &time(T0));
        assert_eq!(verdict(&violated, "ConfigResolved"), ("False", "SchemaViolated"));
        assert_eq!(verdict(&violated, "Resolved"), ("True", "Resolved"), "a config failure narrows, it does not fail");
        // Stored without the webhook, before the bound: the cache dropped the config.
        let over = lease("team-a", "l").of("p", "k").with_config(json!({"size": "9".repeat(70_000)})).build();
        let over = status_at(&over, Some(&p), &time(T0));
        assert_eq!(verdict(&over, "ConfigResolved"), ("False", "ConfigTooLarge"));
        let message = &condition(&over, "ConfigResolved").message;
        assert_eq!(message, &format!("spec.config: {}", sandcap_core::api::CONFIG_TOO_LARGE));
        let narrowed = over.explanations.iter().find(|e| e.capability == Capability::PersistentProcessSessions);
        assert_eq!(narrowed.map(|e| (e.granted, e.reason.as_str())), Some((false, "NarrowedByConfigResolution")));
    }

    #[test]
    fn an_unchanged_resolution_is_not_rewritten_and_a_changed_condition_alone_moves_its_time() {
        let p = provider("p").driver("k").probed_ok(&METHODS).build();
        let l = published(lease("team-a", "l").of("p", "k").build(), &p);
        let again = status_at(&l, Some(&p), &later(T0, 3600));
        assert_eq!(Some(&again), l.status.as_ref());
        assert!(CachedLease::from(l.clone()).is_published(&again), "nothing to write");

        let mut edited = l.clone();
        edited.spec.config_from = lease("x", "x").config_from("creds", "c").build().spec.config_from;
        let status = status_at(&edited, Some(&p), &later(T0, 3600));
        assert_eq!(condition(&status, "ConfigResolved").last_transition_time, later(T0, 3600));
        assert_eq!(condition(&status, "PluginIdentity").last_transition_time, time(T0));
        assert_eq!(condition(&status, "Resolved").last_transition_time, time(T0));
    }
}
