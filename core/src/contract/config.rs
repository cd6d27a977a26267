//! A lease's config: `config`, the `configFrom` Secrets merged over it, checked against the
//! driver's `configSchema`. No value ever leaves this module in an error (it may be a secret).

use serde_json::Value;

use crate::api::{CONFIG_TOO_LARGE, DriverDeclaration, MAX_CONFIG_BYTES, ResolvableLease, SecretKeyRef};
use crate::config_schema::{self, Deadline, SchemaError};
use crate::vocabulary::ConditionReason;

/// Why a lease's config could not be resolved; never carries a value (it may be a secret). The
/// variant names the `ConfigResolved` condition's reason ([`ConfigFailure::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigFailure {
    #[error("spec.config is not a JSON object")]
    ConfigNotAnObject,
    /// Over [`MAX_CONFIG_BYTES`]: a lease stored without the webhook, which refuses it.
    #[error("spec.config: {CONFIG_TOO_LARGE}")]
    ConfigTooLarge,
    #[error("configFrom Secret {name} does not exist")]
    SecretNotFound { name: String },
    #[error("configFrom Secret {name} has no key {key}")]
    SecretKeyNotFound { name: String, key: String },
    // serde_json's error text can quote the input, so only its position is kept.
    #[error("configFrom Secret {name} key {key} is not valid JSON (line {line}, column {column})")]
    SecretNotJson { name: String, key: String, line: usize, column: usize },
    #[error("configFrom Secret {name} key {key} does not hold a JSON object")]
    SecretNotAnObject { name: String, key: String },
    #[error("configFrom Secret {name} key {key} {CONFIG_TOO_LARGE}")]
    SecretTooLarge { name: String, key: String },
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
            ConfigFailure::ConfigTooLarge => ConditionReason::ConfigTooLarge,
            ConfigFailure::SecretNotFound { .. } => ConditionReason::SecretNotFound,
            ConfigFailure::SecretKeyNotFound { .. } => ConditionReason::SecretKeyNotFound,
            ConfigFailure::SecretNotJson { .. } => ConditionReason::SecretNotJson,
            ConfigFailure::SecretNotAnObject { .. } => ConditionReason::SecretNotAnObject,
            ConfigFailure::SecretTooLarge { .. } => ConditionReason::SecretTooLarge,
            ConfigFailure::SchemaDoesNotCompile(_) => ConditionReason::SchemaDoesNotCompile,
            ConfigFailure::SchemaOverBudget(_) => ConditionReason::SchemaOverBudget,
            ConfigFailure::SchemaViolated(_) => ConditionReason::SchemaViolated,
        }
    }
}

/// A lease's config that failed to resolve, as a resolution narrows by it; the message is the
/// `NarrowedByConfigResolution` explanation's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FailedConfig {
    /// Resolved with the Secrets it reads.
    #[error(transparent)]
    Resolved(ConfigFailure),
    /// The message of the lease's `ConfigResolved` condition: a reader of status without the
    /// Secrets' data (sandcap's alone) knows no more of the failure.
    #[error("{0}")]
    Published(String),
}

/// What a `configFrom` Secret lookup found. A Secret sandcap may not read (unlabelled, or out of
/// the namespaces it serves) is `MissingSecret`: nothing about it may leak. `TooLarge`: a value
/// over [`MAX_CONFIG_BYTES`], which sandcap's cache does not keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretLookup {
    Found(Vec<u8>),
    MissingSecret,
    MissingKey,
    TooLarge,
}

/// Resolves a lease's config: `config` (or `{}`), each `configFrom` object merged over it in
/// order, then checked against the driver's `configSchema`. The error never includes a value.
pub fn resolve_config(
    lease: &impl ResolvableLease,
    driver: &DriverDeclaration,
    secret: impl Fn(&SecretKeyRef) -> SecretLookup,
) -> Result<Value, ConfigFailure> {
    if lease.spec().config_too_large() {
        return Err(ConfigFailure::ConfigTooLarge);
    }
    let mut config = match &lease.spec().config {
        None => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(ConfigFailure::ConfigNotAnObject),
    };
    for source in &lease.spec().config_from {
        let r = &source.secret_key_ref;
        let (name, key) = (r.name.clone(), r.key.clone());
        let bytes = match secret(r) {
            SecretLookup::Found(bytes) if bytes.len() <= MAX_CONFIG_BYTES => bytes,
            SecretLookup::Found(_) | SecretLookup::TooLarge => return Err(ConfigFailure::SecretTooLarge { name, key }),
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{ProviderRef, SandboxLease, SandboxLeaseSpec};

    fn lease(config: Value, secret: &str) -> SandboxLease {
        let r = SecretKeyRef { name: "creds".into(), key: secret.into(), ..SecretKeyRef::default() };
        let spec = SandboxLeaseSpec {
            provider_ref: ProviderRef { name: "p".into(), driver_key: "k".into(), ..ProviderRef::default() },
            config: Some(config),
            config_from: vec![crate::api::ConfigSource { secret_key_ref: r, ..Default::default() }],
            ..SandboxLeaseSpec::default()
        };
        SandboxLease::new("l", spec)
    }

    #[test]
    fn a_config_source_over_the_bound_fails_by_name_never_by_value() {
        let big = "v4lue".repeat(MAX_CONFIG_BYTES / 5 + 1);
        let driver = DriverDeclaration::default();
        let secret = |bytes: Vec<u8>| move |_: &SecretKeyRef| SecretLookup::Found(bytes.clone());
        let inline = resolve_config(&lease(json!({"a": big}), "c"), &driver, secret(b"{}".to_vec()));
        assert_eq!(inline, Err(ConfigFailure::ConfigTooLarge));
        let mut dropped = lease(json!({"a": big}), "c");
        dropped.spec.drop_config_over_bound();
        assert_eq!(resolve_config(&dropped, &driver, secret(b"{}".to_vec())), Err(ConfigFailure::ConfigTooLarge));

        let over = format!(r#"{{"a": "{big}"}}"#).into_bytes();
        let from_secret = resolve_config(&lease(json!({}), "c"), &driver, secret(over)).unwrap_err();
        let kept_out = resolve_config(&lease(json!({}), "c"), &driver, |_: &SecretKeyRef| SecretLookup::TooLarge);
        assert_eq!(Err(from_secret.clone()), kept_out);
        assert_eq!(from_secret.reason(), ConditionReason::SecretTooLarge);
        assert_eq!(
            from_secret.to_string(),
            "configFrom Secret creds key c is over 65536 bytes as JSON, the most a config source may hold"
        );
        assert_eq!(ConfigFailure::ConfigTooLarge.reason(), ConditionReason::ConfigTooLarge);
        assert!(!ConfigFailure::ConfigTooLarge.to_string().contains("v4lue"));
        let at_bound = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_CONFIG_BYTES - 8)).into_bytes();
        assert!(resolve_config(&lease(json!({}), "c"), &driver, secret(at_bound)).is_ok());
    }
}
