//! The capability contract: `effective = verified ∩ declared ∩ narrowing` (docs/contract.md, "Capabilities").
//!
//! Pure functions only. The webhook, the controllers and `sandcap resolve` all call these, so there
//! is exactly one place where a capability is granted or removed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::api::{Capabilities, DriverDeclaration, Explanation, Pinned, SandboxLease, SandboxProvider, SecretKeyRef};
use crate::config_schema::{self, Deadline, SchemaError};
use crate::text;
use crate::vocabulary::ConditionReason;
pub use crate::vocabulary::{
    Capability, LeasePolicy, METHOD_DESTROY_LEASE, METHOD_EXECUTE, METHOD_RELEASE_LEASE, METHOD_RESUME_LEASE,
    METHOD_SYNC_IN, METHOD_SYNC_OUT, REMOVED_KEYS, Reason,
};

/// What the live worker verified: its methods, or why nothing is verified (the probe failed,
/// never ran, listed none, or asked another worker than the one `spec.worker` names now).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified(Result<BTreeSet<String>, String>);

/// Why nothing is verified, when no more is known.
const VERIFIED_NOTHING: &str = "the worker verified no methods (probe failed, answered ok: false, or listed none)";

impl Default for Verified {
    fn default() -> Self {
        Verified::nothing()
    }
}

impl Verified {
    pub fn nothing() -> Self {
        Verified(Err(VERIFIED_NOTHING.into()))
    }

    /// Nothing is verified, for the reason given (the explanation's message).
    pub fn nothing_because(why: String) -> Self {
        Verified(Err(why))
    }

    /// An empty list verifies nothing, exactly like a failed probe.
    pub fn methods<I, S>(methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let set: BTreeSet<String> = methods.into_iter().map(Into::into).collect();
        if set.is_empty() { Verified::nothing() } else { Verified(Ok(set)) }
    }

    pub fn has(&self, method: &str) -> bool {
        self.0.as_ref().is_ok_and(|s| s.contains(method))
    }

    pub fn is_nothing(&self) -> bool {
        self.0.is_err()
    }

    /// Why nothing is verified; `None` when something is.
    pub fn why_nothing(&self) -> Option<&str> {
        self.0.as_ref().err().map(String::as_str)
    }
}

/// A driver's declaration as the host reads it: per key `Some(bool)` or omitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Declared([Option<bool>; 6]);

impl Declared {
    /// Folds the legacy `supportsReusableLeases` in when the nested key is absent.
    pub fn from_driver(driver: &DriverDeclaration) -> Self {
        let mut declared = Declared::default();
        if let Some(nested) = &driver.sandbox_capabilities {
            for cap in Capability::ALL {
                declared.0[cap as usize] = nested.get(cap);
            }
        }
        if declared.get(Capability::ReusableLeases).is_none() {
            declared.0[Capability::ReusableLeases as usize] = driver.supports_reusable_leases;
        }
        declared
    }

    pub fn get(&self, cap: Capability) -> Option<bool> {
        self.0[cap as usize]
    }

    /// Whether the declaration allows the capability (before the worker is asked).
    pub fn allows(&self, cap: Capability) -> bool {
        self.get(cap).unwrap_or(!cap.opt_in())
    }

    /// The present keys, as `status.drivers[].declared` shows them.
    pub fn present(&self) -> BTreeMap<String, bool> {
        Capability::ALL.into_iter().filter_map(|c| self.get(c).map(|v| (c.key().to_string(), v))).collect()
    }
}

/// What today's rules (the CRD's and the webhook's, [`crate::judge`]) refuse of the objects a
/// resolution reads: each refused object's problems, as its `Valid` condition states them. A
/// refused object grants nothing (docs/contract.md, "Fail closed"); the caller judges, this module
/// only obeys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    pub lease: Option<String>,
    pub provider: Option<String>,
}

/// How much of a refusal's problems each explanation repeats: the `Valid` condition has them all.
pub const MAX_REFUSAL_IN_EXPLANATION: usize = 1024;

impl Refusals {
    /// The refusal of a provider alone (provider-level resolution, or a lease that today's rules admit).
    pub fn provider(problems: Option<String>) -> Refusals {
        Refusals { lease: None, provider: problems }
    }
}

/// Everything about one lease that can only remove capabilities. Each failure carries the message
/// the explanation shows (never a secret value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narrowing {
    pub refusals: Refusals,
    pub identity_failure: Option<String>,
    /// The lease's requested policy; `None` at provider level (nothing narrowed).
    pub policy: Option<LeasePolicy>,
    pub job_backend: Option<String>,
    pub native_file_sync_unsupported: bool,
    pub config_failure: Option<String>,
}

/// One driver's resolved capabilities with an explanation for each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    pub capabilities: Capabilities,
    pub explanations: Vec<Explanation>,
}

impl Resolution {
    pub fn is_granted(&self, cap: Capability) -> bool {
        self.capabilities.get(cap)
    }
}

/// Resolves every capability through the gates in the order docs/contract.md ("Status") lists them.
pub fn resolve(verified: &Verified, declared: &Declared, narrowing: &Narrowing) -> Resolution {
    let mut capabilities = Capabilities::default();
    let explanations = Capability::ALL
        .into_iter()
        .map(|cap| {
            let (reason, message) = first_gate(cap, verified, declared, narrowing);
            let granted = reason == Reason::Granted;
            capabilities.set(cap, granted);
            Explanation { capability: cap, granted, reason, message }
        })
        .collect();
    Resolution { capabilities, explanations }
}

fn first_gate(cap: Capability, verified: &Verified, declared: &Declared, narrowing: &Narrowing) -> (Reason, String) {
    if let Some(problems) = &narrowing.refusals.lease {
        return (Reason::LeaseNotValid, refused("the lease", problems));
    }
    if let Some(why) = &narrowing.identity_failure {
        return (Reason::PluginIdentityFailed, why.clone());
    }
    if let Some(problems) = &narrowing.refusals.provider {
        return (Reason::ProviderNotValid, refused("the provider", problems));
    }
    if let Some(why) = verified.why_nothing() {
        return (Reason::WorkerNotVerified, why.to_string());
    }
    let missing: Vec<&str> = cap.required_methods().iter().copied().filter(|m| !verified.has(m)).collect();
    if !missing.is_empty() {
        let message = if cap.is_sync() && missing.len() == 1 {
            let present = if missing[0] == METHOD_SYNC_IN { METHOD_SYNC_OUT } else { METHOD_SYNC_IN };
            format!(
                "the worker advertises {present} but not {}; the host uses the sync methods only as a pair",
                missing[0]
            )
        } else {
            format!("the worker does not advertise {}", missing.join(", "))
        };
        return (Reason::MissingWorkerMethods, message);
    }
    match declared.get(cap) {
        Some(false) => {
            return (Reason::DeclaredFalse, format!("the driver declares {cap}: false"));
        }
        None if cap.opt_in() => {
            return (Reason::NotOptedIn, format!("{cap} is opt-in and the driver does not declare it true"));
        }
        _ => {}
    }
    if cap == Capability::ReusableLeases
        && let Some(policy) = narrowing.policy
        && policy != LeasePolicy::ReuseByEnvironment
    {
        return (
            Reason::NarrowedByLeasePolicy,
            format!("the lease policy is {}, not ReuseByEnvironment", policy.as_str()),
        );
    }
    if cap.is_sync() {
        if let Some(why) = &narrowing.job_backend {
            return (Reason::NarrowedByJobBackend, why.clone());
        }
        if narrowing.native_file_sync_unsupported {
            return (
                Reason::NarrowedByNativeFileSyncUnsupported,
                "the lease sets nativeFileSyncUnsupported: true".into(),
            );
        }
    }
    if matches!(cap, Capability::PersistentProcessSessions | Capability::IncrementalSessionOutput)
        && let Some(why) = &narrowing.config_failure
    {
        return (Reason::NarrowedByConfigResolution, why.clone());
    }
    let message = if declared.get(cap) == Some(true) {
        format!("declared true and the worker verified {}", cap.required_methods().join(", "))
    } else {
        format!("the driver defers to the worker, which verified {}", cap.required_methods().join(", "))
    };
    (Reason::Granted, message)
}

/// The explanation of a refusal: whose, and its first problems.
fn refused(whose: &str, problems: &str) -> String {
    let message = format!("{whose} breaks today's rules, so nothing is granted (see its Valid condition): {problems}");
    text::clip(&message, MAX_REFUSAL_IN_EXPLANATION)
}

/// Provider-level resolution of one driver: verified ∩ declared. A driver that is not
/// `kind: sandbox_provider` is never read as a sandbox provider, and a provider that today's
/// rules refuse (`refused`, its problems) is not trusted: either way nothing is granted.
pub fn resolve_driver(verified: &Verified, driver: &DriverDeclaration, refused: Option<&str>) -> Resolution {
    let identity_failure = driver_kind_failure(driver).map(|f| f.to_string());
    let refusals = Refusals::provider(refused.map(str::to_string));
    let narrowing = Narrowing { refusals, identity_failure, ..Narrowing::default() };
    resolve(verified, &Declared::from_driver(driver), &narrowing)
}

/// Why a driver's capabilities are never read, if they are not: it is not `kind: sandbox_provider`.
pub fn driver_kind_failure(driver: &DriverDeclaration) -> Option<IdentityFailure> {
    (!driver.is_sandbox_provider()).then(|| IdentityFailure::NotSandboxProvider {
        driver: driver.driver_key.clone(),
        kind: driver.kind.map_or_else(|| "(omitted)".into(), |k| k.to_string()),
    })
}

/// Why a lease's exact-plugin identity check failed. The message is the condition's; the variant
/// names the `PluginIdentity` condition's reason ([`IdentityFailure::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityFailure {
    #[error("provider {name} does not exist (yet); the lease is not pinned")]
    ProviderNotFound { name: String },
    #[error("pinned provider {name} (uid {uid}) no longer exists")]
    PinnedProviderGone { name: String, uid: String },
    #[error("provider {name} was re-created: pinned uid {pinned}, found uid {found}")]
    ProviderRecreated { name: String, pinned: String, found: String },
    #[error("provider {name} now has pluginKey {found}, pinned {pinned}")]
    PluginKeyChanged { name: String, pinned: String, found: String },
    #[error("lease pinned driver {pinned} but now asks for {wanted}")]
    DriverChanged { pinned: String, wanted: String },
    #[error("provider {name} does not declare driver {driver}")]
    DriverNotDeclared { name: String, driver: String },
    #[error("driver {driver} is declared with kind {kind}, not sandbox_provider; its capabilities are never read")]
    NotSandboxProvider { driver: String, kind: String },
}

impl IdentityFailure {
    /// The reason of the `PluginIdentity` condition: the variant's name.
    pub fn reason(&self) -> ConditionReason {
        match self {
            IdentityFailure::ProviderNotFound { .. } => ConditionReason::ProviderNotFound,
            IdentityFailure::PinnedProviderGone { .. } => ConditionReason::PinnedProviderGone,
            IdentityFailure::ProviderRecreated { .. } => ConditionReason::ProviderRecreated,
            IdentityFailure::PluginKeyChanged { .. } => ConditionReason::PluginKeyChanged,
            IdentityFailure::DriverChanged { .. } => ConditionReason::DriverChanged,
            IdentityFailure::DriverNotDeclared { .. } => ConditionReason::DriverNotDeclared,
            IdentityFailure::NotSandboxProvider { .. } => ConditionReason::NotSandboxProvider,
        }
    }
}

/// Why a lease's config could not be resolved; never carries a value (it may be a secret). The
/// variant names the `ConfigResolved` condition's reason ([`ConfigFailure::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigFailure {
    #[error("spec.config is not a JSON object")]
    ConfigNotAnObject,
    #[error("configFrom Secret {name} does not exist")]
    SecretNotFound { name: String },
    #[error("configFrom Secret {name} has no key {key}")]
    SecretKeyNotFound { name: String, key: String },
    // serde_json's error text can quote the input, so only its position is kept.
    #[error("configFrom Secret {name} key {key} is not valid JSON (line {line}, column {column})")]
    SecretNotJson { name: String, key: String, line: usize, column: usize },
    #[error("configFrom Secret {name} key {key} does not hold a JSON object")]
    SecretNotAnObject { name: String, key: String },
    #[error("the driver's {0}")]
    SchemaDoesNotCompile(SchemaError),
    /// The schema is not compiled: see [`crate::config_schema::BUDGET`].
    #[error("the driver's {0}")]
    SchemaOverBudget(SchemaError),
    /// Which keywords failed, by their place in the schema (`configSchema.properties.cpu.maximum`),
    /// at most five.
    #[error("the resolved config fails the driver's configSchema at {}", .0.join(", "))]
    SchemaViolated(Vec<String>),
}

impl ConfigFailure {
    /// The reason of the `ConfigResolved` condition: the variant's name.
    pub fn reason(&self) -> ConditionReason {
        match self {
            ConfigFailure::ConfigNotAnObject => ConditionReason::ConfigNotAnObject,
            ConfigFailure::SecretNotFound { .. } => ConditionReason::SecretNotFound,
            ConfigFailure::SecretKeyNotFound { .. } => ConditionReason::SecretKeyNotFound,
            ConfigFailure::SecretNotJson { .. } => ConditionReason::SecretNotJson,
            ConfigFailure::SecretNotAnObject { .. } => ConditionReason::SecretNotAnObject,
            ConfigFailure::SchemaDoesNotCompile(_) => ConditionReason::SchemaDoesNotCompile,
            ConfigFailure::SchemaOverBudget(_) => ConditionReason::SchemaOverBudget,
            ConfigFailure::SchemaViolated(_) => ConditionReason::SchemaViolated,
        }
    }
}

/// The policy a lease actually gets: reuse exactly when its resolution grants reusableLeases
/// (which the lease's own policy already narrows). Over a provider-level resolution: the best
/// policy any lease of that driver could get.
pub fn effective_policy(resolution: &Resolution) -> LeasePolicy {
    if resolution.is_granted(Capability::ReusableLeases) {
        LeasePolicy::ReuseByEnvironment
    } else {
        LeasePolicy::Ephemeral
    }
}

/// The identity a lease pins on its first resolution.
pub fn pin_for(provider: &SandboxProvider, driver_key: &str) -> Option<Pinned> {
    Some(Pinned {
        provider_uid: provider.metadata.uid.clone()?,
        plugin_key: provider.spec.plugin_key.clone(),
        driver_key: driver_key.to_string(),
    })
}

/// Checks the exact-plugin identity of a lease against the provider as it is now.
/// Returns the driver on success, or the reason every capability must be off.
pub fn check_identity<'p>(
    lease: &SandboxLease,
    provider: Option<&'p SandboxProvider>,
) -> Result<&'p DriverDeclaration, IdentityFailure> {
    let wanted = &lease.spec.provider_ref;
    let name = || wanted.name.clone();
    let pinned = lease.status.as_ref().and_then(|s| s.pinned.as_ref());
    let Some(provider) = provider else {
        return Err(match pinned {
            Some(p) => IdentityFailure::PinnedProviderGone { name: name(), uid: p.provider_uid.clone() },
            None => IdentityFailure::ProviderNotFound { name: name() },
        });
    };
    if let Some(p) = pinned {
        let uid = provider.metadata.uid.as_deref().unwrap_or("");
        if p.provider_uid != uid {
            let found = if uid.is_empty() { "(none)" } else { uid }.to_string();
            return Err(IdentityFailure::ProviderRecreated { name: name(), pinned: p.provider_uid.clone(), found });
        }
        if p.plugin_key != provider.spec.plugin_key {
            let (pinned, found) = (p.plugin_key.clone(), provider.spec.plugin_key.clone());
            return Err(IdentityFailure::PluginKeyChanged { name: name(), pinned, found });
        }
        if p.driver_key != wanted.driver_key {
            let (pinned, wanted) = (p.driver_key.clone(), wanted.driver_key.clone());
            return Err(IdentityFailure::DriverChanged { pinned, wanted });
        }
    }
    let Some(driver) = provider.spec.environment_drivers.iter().find(|d| d.driver_key == wanted.driver_key) else {
        return Err(IdentityFailure::DriverNotDeclared { name: name(), driver: wanted.driver_key.clone() });
    };
    driver_kind_failure(driver).map_or(Ok(driver), Err)
}

/// Why a lease is Job-backed, if it is. The CRD admits `backend` only in lowercase; a stored
/// lease from before that rule is Job-backed in any case and with any surrounding space (and
/// grants nothing anyway, as today's rules refuse it).
pub fn job_backend(lease: &SandboxLease) -> Option<String> {
    if let Some(backend) = lease.spec.backend.as_deref().filter(|b| b.trim().eq_ignore_ascii_case("job")) {
        return Some(format!("the lease is Job-backed (spec.backend: {backend:?})"));
    }
    lease
        .spec
        .workload_ref
        .as_ref()
        .filter(|w| w.is_batch_job())
        .map(|w| format!("the lease is Job-backed (spec.workloadRef is batch/v1 Job {})", w.name))
}

/// What a `configFrom` Secret lookup found. A Secret sandcap may not read (unlabelled, or out of
/// the namespaces it serves) is `MissingSecret`: nothing about it may leak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretLookup {
    Found(Vec<u8>),
    MissingSecret,
    MissingKey,
}

/// Resolves a lease's config: `config` (or `{}`), each `configFrom` object merged over it in
/// order, then checked against the driver's `configSchema`. The error never includes a value.
pub fn resolve_config(
    lease: &SandboxLease,
    driver: &DriverDeclaration,
    secret: impl Fn(&SecretKeyRef) -> SecretLookup,
) -> Result<Value, ConfigFailure> {
    let mut config = match &lease.spec.config {
        None => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(ConfigFailure::ConfigNotAnObject),
    };
    for source in &lease.spec.config_from {
        let r = &source.secret_key_ref;
        let (name, key) = (r.name.clone(), r.key.clone());
        let bytes = match secret(r) {
            SecretLookup::Found(bytes) => bytes,
            SecretLookup::MissingSecret => return Err(ConfigFailure::SecretNotFound { name }),
            SecretLookup::MissingKey => return Err(ConfigFailure::SecretKeyNotFound { name, key }),
        };
        let overlay: Value = match serde_json::from_slice(&bytes) {
            Ok(overlay) => overlay,
            Err(e) => return Err(ConfigFailure::SecretNotJson { name, key, line: e.line(), column: e.column() }),
        };
        let Value::Object(_) = overlay else {
            return Err(ConfigFailure::SecretNotAnObject { name, key });
        };
        merge(&mut config, overlay);
    }
    if let Some(schema) = &driver.config_schema {
        check_config(schema, &config)?;
    }
    Ok(config)
}

/// Recursive merge: objects merge key by key, anything else replaces.
fn merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (k, v) in overlay {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, overlay) => *base = overlay,
    }
}

fn check_config(schema: &Value, config: &Value) -> Result<(), ConfigFailure> {
    let validator = config_schema::compile(schema, Deadline::Own).map_err(|e| match e {
        SchemaError::OverBudget { .. } => ConfigFailure::SchemaOverBudget(e),
        SchemaError::Invalid { .. } => ConfigFailure::SchemaDoesNotCompile(e),
    })?;
    // Which keywords failed, by their place in the schema, which the lease's readers may see:
    // never the config's value (it may be a secret) nor where in the config it failed (its keys
    // may be the Secret's, which they may not read).
    let mut problems: Vec<String> = Vec::new();
    for error in validator.iter_errors(config) {
        let at = format!("configSchema{}", config_schema::keyword_path(schema, error.schema_path().as_str()));
        if !problems.contains(&at) {
            problems.push(at);
        }
        if problems.len() == 5 {
            break;
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(ConfigFailure::SchemaViolated(problems)) }
}

/// Everything the lease controller and `sandcap resolve --lease` decide for one lease.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseResolution {
    pub driver_key: String,
    pub effective_policy: LeasePolicy,
    pub resolution: Resolution,
    /// Set when the identity check passed and the lease had not been pinned yet.
    pub pin: Option<Pinned>,
    pub identity: Result<(), IdentityFailure>,
    /// `None` when config was not resolved because the identity check failed.
    pub config: Option<Result<(), ConfigFailure>>,
}

/// Resolves a lease against its provider (if it exists), the provider's verified methods and
/// what today's rules refuse of the two.
pub fn resolve_lease(
    lease: &SandboxLease,
    provider: Option<&SandboxProvider>,
    verified: &Verified,
    refusals: &Refusals,
    secret: impl Fn(&SecretKeyRef) -> SecretLookup,
) -> LeaseResolution {
    let driver_key = lease.spec.provider_ref.driver_key.clone();
    let driver = match check_identity(lease, provider) {
        Ok(driver) => driver,
        Err(why) => {
            let narrowing = Narrowing {
                refusals: refusals.clone(),
                identity_failure: Some(why.to_string()),
                ..Narrowing::default()
            };
            return LeaseResolution {
                driver_key,
                effective_policy: LeasePolicy::Ephemeral,
                resolution: resolve(verified, &Declared::default(), &narrowing),
                pin: None,
                identity: Err(why),
                config: None,
            };
        }
    };
    let provider = provider.expect("the identity check passed, so the provider exists");
    let config = resolve_config(lease, driver, secret).map(|_| ());
    let narrowing = Narrowing {
        refusals: refusals.clone(),
        identity_failure: None,
        policy: Some(lease.spec.policy()),
        job_backend: job_backend(lease),
        native_file_sync_unsupported: lease.spec.native_file_sync_unsupported.unwrap_or(false),
        config_failure: config.clone().err().map(|f| f.to_string()),
    };
    let resolution = resolve(verified, &Declared::from_driver(driver), &narrowing);
    let already_pinned = lease.status.as_ref().is_some_and(|s| s.pinned.is_some());
    LeaseResolution {
        driver_key,
        effective_policy: effective_policy(&resolution),
        resolution,
        pin: if already_pinned { None } else { pin_for(provider, &lease.spec.provider_ref.driver_key) },
        identity: Ok(()),
        config: Some(config),
    }
}

/// The methods a provider's status says its worker verified (what `resolve`, the lease
/// controller and `explain` use when they do not probe themselves): nothing unless the probe
/// succeeded and asked the worker that `spec.worker` names now. A status from before the
/// worker's address was recorded counts while it was written for the provider's current
/// generation.
pub fn verified_from_status(provider: &SandboxProvider) -> Verified {
    let status = provider.status.as_ref();
    let Some(worker) = status.and_then(|s| s.worker.as_ref()) else {
        return Verified::nothing_because("no probe of the worker yet".into());
    };
    let named_now = provider.spec.worker.address();
    let same_worker = match &worker.address {
        Some(probed) => named_now.as_ref() == Some(probed),
        None => status.and_then(|s| s.observed_generation) == provider.metadata.generation,
    };
    if !same_worker {
        let probed = worker.address.as_deref().unwrap_or("an earlier spec.worker");
        let now = named_now.as_deref().unwrap_or("(no address)");
        return Verified::nothing_because(format!(
            "the last probe asked {probed}, not the worker spec.worker names now ({now}); nothing is verified until \
             it answers"
        ));
    }
    verified_from_worker(Some(worker))
}

/// What a published worker status verifies: its methods only if the probe succeeded.
pub fn verified_from_worker(worker: Option<&crate::api::WorkerStatus>) -> Verified {
    match worker {
        Some(w) if w.probe == crate::api::ProbeResult::Succeeded => {
            Verified::methods(w.supported_methods.iter().cloned())
        }
        _ => Verified::nothing(),
    }
}
