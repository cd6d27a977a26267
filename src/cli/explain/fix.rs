//! What to change so that a capability is granted: one sentence per reason, in the words status
//! already uses (the reasons of [`sandcap_core::vocabulary`], the fields of the resources).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::secret::SecretReport;
use sandcap_core::api::{DriverDeclaration, MAX_CONFIG_BYTES};
use sandcap_core::contract::{IdentityFailure, KeyRule, Refusals, Verified};
use sandcap_core::vocabulary::{CONFIG_SOURCE_LABEL, Capability, ConditionReason, Reason, WorkerMethod};

/// What a fix may name.
pub struct FixContext<'a> {
    pub provider: &'a str,
    pub driver: &'a str,
    /// `(namespace, name)` of the lease, when a lease is explained.
    pub lease: Option<(&'a str, &'a str)>,
    pub identity: Option<&'a IdentityFailure>,
    /// What today's rules refuse of the lease and the provider (their `Valid` conditions).
    pub refusals: &'a Refusals,
    /// The driver's declaration, when the provider declares the driver.
    pub declaration: Option<&'a DriverDeclaration>,
    /// The last probe's message.
    pub worker: Option<&'a str>,
    pub verified: &'a Verified,
    /// The lease's `ConfigResolved` condition.
    pub config: Option<&'a Condition>,
    pub secrets: &'a [SecretReport],
}

/// What to change so that the gate behind `reason` lets `cap` through; `None` when it is granted.
pub fn fix(rule: &KeyRule, reason: Reason, ctx: &FixContext) -> Option<String> {
    let (provider, driver, key) = (ctx.provider, ctx.driver, rule.capability.key());
    let lease = ctx.lease.map_or_else(String::new, |(ns, name)| format!(" {ns}/{name}"));
    Some(match reason {
        Reason::Granted => return None,
        Reason::LeaseNotValid => format!(
            "change lease{lease} so that today's rules admit it (sandcap validate on its manifest lists the same \
             problems): {}",
            ctx.refusals.lease.as_deref().unwrap_or("see its Valid condition")
        ),
        Reason::PluginIdentityFailed => identity(ctx),
        Reason::ProviderNotValid => format!(
            "change provider {provider} so that today's rules admit it (sandcap validate on its manifest lists the \
             same problems): {}",
            ctx.refusals.provider.as_deref().unwrap_or("see its Valid condition")
        ),
        Reason::WorkerNotVerified => format!(
            "make the worker of provider {provider} answer initialize with its methods (last probe: {}); see \
             kubectl sandcap explain provider {provider}",
            ctx.worker.unwrap_or("none yet")
        ),
        Reason::MissingWorkerMethods => {
            let missing: Vec<WorkerMethod> =
                rule.methods.iter().copied().filter(|m| !ctx.verified.has(m.as_str())).collect();
            format!(
                "the worker of provider {provider} must list {} in initialize's supportedMethods",
                WorkerMethod::list(&missing)
            )
        }
        Reason::DeclaredFalse => declared_false(rule, ctx),
        Reason::NotOptedIn => format!("set sandboxCapabilities.{key}: true on driver {driver} of provider {provider}"),
        Reason::NarrowedByLeasePolicy => {
            format!("set spec.policy: ReuseByEnvironment and spec.environment on lease{lease}")
        }
        Reason::NarrowedByJobBackend => {
            format!("a Job-backed lease never syncs natively: lease{lease} needs another backend for {key}")
        }
        Reason::NarrowedByNativeFileSyncUnsupported => {
            format!("remove spec.nativeFileSyncUnsupported from lease{lease}, if its sandbox syncs files natively")
        }
        Reason::NarrowedByConfigResolution => config(ctx),
    })
}

/// Which field says false decides the fix: the legacy `supportsReusableLeases` when the nested
/// key is absent; an opt-in key stays off when removed, so only `true` turns it on.
fn declared_false(rule: &KeyRule, ctx: &FixContext) -> String {
    let cap = rule.capability;
    let (provider, driver, key) = (ctx.provider, ctx.driver, cap.key());
    let nested_absent =
        ctx.declaration.is_some_and(|d| d.sandbox_capabilities.as_ref().and_then(|n| n.get(cap)).is_none());
    let on = format!("on driver {driver} of provider {provider}");
    if cap == Capability::ReusableLeases && nested_absent {
        format!("set sandboxCapabilities.{key}: true (it wins over the legacy supportsReusableLeases: false) {on}")
    } else if rule.opt_in {
        format!("set sandboxCapabilities.{key}: true {on} ({key} is opt-in: removing it leaves it off)")
    } else {
        format!("set sandboxCapabilities.{key}: true, or remove it to follow the worker, {on}")
    }
}

fn identity(ctx: &FixContext) -> String {
    let (provider, driver) = (ctx.provider, ctx.driver);
    match ctx.identity {
        Some(IdentityFailure::ProviderNotFound { .. }) => format!(
            "create SandboxProvider {provider} (providerRef is immutable: to use another provider, create a new lease)"
        ),
        Some(
            IdentityFailure::PinnedProviderGone { .. }
            | IdentityFailure::ProviderRecreated { .. }
            | IdentityFailure::PluginKeyChanged { .. }
            | IdentityFailure::DriverChanged { .. },
        ) => format!(
            "the lease stays pinned to the provider it was first resolved with: re-create the lease to pin it to \
             provider {provider} as it is now"
        ),
        Some(IdentityFailure::DriverNotDeclared { .. }) => format!(
            "declare driver {driver} in provider {provider}, or create a new lease with a driverKey the provider declares"
        ),
        Some(IdentityFailure::NotSandboxProvider { .. }) => {
            format!("set kind: sandbox_provider on driver {driver} of provider {provider}")
        }
        None => "re-create the lease to pin it to the provider as it is now".into(),
    }
}

fn config(ctx: &FixContext) -> String {
    let (provider, driver) = (ctx.provider, ctx.driver);
    let Some(condition) = ctx.config else {
        return "the lease's config did not resolve; its ConfigResolved condition says why".into();
    };
    let said = format!("ConfigResolved: {}", condition.message);
    let namespace = ctx.lease.map_or("", |(ns, _)| ns);
    match ConditionReason::parse(&condition.reason) {
        Some(ConditionReason::SecretNotFound) => match ctx.secrets.iter().find(|s| !s.sandcap_reads_it) {
            Some(s) if s.found == Some(false) => {
                format!("create Secret {namespace}/{} with key {}, labelled {CONFIG_SOURCE_LABEL}=true", s.name, s.key)
            }
            Some(s) if s.found.is_none() => {
                format!("{said}; whether Secret {namespace}/{} exists: {}", s.name, s.detail)
            }
            Some(s) if s.labelled == Some(false) => {
                format!("label the Secret: kubectl label secret -n {namespace} {} {CONFIG_SOURCE_LABEL}=true", s.name)
            }
            Some(_) => format!(
                "add namespace {namespace} to the namespaces sandcap reads Secrets in (the chart's secretNamespaces, \
                 sandcap run --secret-namespaces)"
            ),
            None => format!(
                "{said}, yet every configFrom Secret is found, labelled and in scope as this command sees them: sandcap \
                 reads Secrets only in the namespaces of its --secret-namespaces (give the same value here with \
                 --secret-namespaces), or it has not seen the Secret yet"
            ),
        },
        Some(ConditionReason::SecretKeyNotFound) => format!("{said}: add that key to the Secret"),
        Some(ConditionReason::SecretNotJson | ConditionReason::SecretNotAnObject) => {
            format!("{said}: that key must hold a JSON object")
        }
        Some(ConditionReason::ConfigNotAnObject) => "make spec.config a JSON object".into(),
        Some(ConditionReason::ConfigTooLarge | ConditionReason::SecretTooLarge) => {
            format!("{said}: keep spec.config and each configFrom value within {MAX_CONFIG_BYTES} bytes as JSON")
        }
        Some(ConditionReason::SchemaViolated) => format!(
            "{said}: change the lease's config (spec.config and its configFrom Secrets) to pass the configSchema of \
             driver {driver}"
        ),
        Some(ConditionReason::SchemaDoesNotCompile | ConditionReason::SchemaOverBudget) => format!(
            "{said}: fix the configSchema of driver {driver} in provider {provider} (kubectl sandcap explain provider \
             {provider})"
        ),
        _ => said,
    }
}
