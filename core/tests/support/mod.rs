//! The core's test support: fluent builders for typed test objects and the raw JSON manifests the
//! webhook sees (contract, validation, schema, properties).
#![allow(dead_code)]

use sandcap_core::api::{
    ConfigSource, DeclaredCapabilities, DriverDeclaration, LeasePolicy, ProviderRef, SandboxLease, SandboxLeaseSpec,
    SandboxProvider, SandboxProviderSpec, SecretKeyRef, ServiceRef, WorkerRef, WorkloadRef,
};
use sandcap_core::contract::{Capability, SecretLookup, Verified};
use sandcap_core::versions::ContractVersion;
use sandcap_core::vocabulary::DriverKind;
use serde_json::{Value, json};

/// Every method any contract version needs: a worker that serves them all.
fn every_method() -> Vec<&'static str> {
    let mut methods: Vec<&'static str> = Vec::new();
    for method in ContractVersion::ALL.into_iter().flat_map(|v| v.contract().worker_methods()) {
        if !methods.contains(&method) {
            methods.push(method);
        }
    }
    methods
}

pub fn all_verified() -> Verified {
    Verified::methods(every_method())
}

pub fn verified_without(missing: &[&str]) -> Verified {
    Verified::methods(every_method().into_iter().filter(|m| !missing.contains(m)))
}

pub fn driver(key: &str) -> DriverDeclaration {
    DriverDeclaration {
        driver_key: key.into(),
        kind: Some(DriverKind::SandboxProvider),
        display_name: Some("Kubernetes".into()),
        ..Default::default()
    }
}

pub fn with_caps(mut d: DriverDeclaration, caps: &[(Capability, bool)]) -> DriverDeclaration {
    let mut declared = d.sandbox_capabilities.take().unwrap_or_default();
    for (cap, v) in caps {
        declared.set(*cap, Some(*v));
    }
    d.sandbox_capabilities = Some(declared);
    d
}

pub fn all_declared_true() -> DeclaredCapabilities {
    let mut c = DeclaredCapabilities::default();
    for cap in Capability::ALL {
        c.set(cap, Some(true));
    }
    c
}

pub fn provider(name: &str, uid: &str, drivers: Vec<DriverDeclaration>) -> SandboxProvider {
    let mut p = SandboxProvider::new(
        name,
        SandboxProviderSpec {
            plugin_key: "acme.kubernetes-sandbox-provider".into(),
            version: "1.4.0".into(),
            worker: WorkerRef {
                service: Some(ServiceRef {
                    namespace: "sandbox-system".into(),
                    name: "acme-worker".into(),
                    port: 8080,
                    path: Some("/rpc".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            environment_drivers: drivers,
            ..Default::default()
        },
    );
    p.metadata.uid = Some(uid.into());
    p
}

pub fn lease(provider: &str, driver_key: &str) -> SandboxLease {
    let mut l = SandboxLease::new(
        "run-42",
        SandboxLeaseSpec {
            provider_ref: ProviderRef { name: provider.into(), driver_key: driver_key.into(), ..Default::default() },
            ..Default::default()
        },
    );
    l.metadata.namespace = Some("team-a".into());
    l
}

pub fn reuse(mut l: SandboxLease) -> SandboxLease {
    l.spec.policy = Some(LeasePolicy::ReuseByEnvironment);
    l.spec.environment = Some("env-7".into());
    l
}

pub fn job_workload(mut l: SandboxLease, api_version: &str, kind: &str) -> SandboxLease {
    l.spec.workload_ref = Some(WorkloadRef {
        api_version: api_version.into(),
        kind: kind.into(),
        name: "w".into(),
        ..Default::default()
    });
    l
}

pub fn config_from(mut l: SandboxLease, refs: &[(&str, &str)]) -> SandboxLease {
    l.spec.config_from = refs
        .iter()
        .map(|(name, key)| ConfigSource {
            secret_key_ref: SecretKeyRef { name: (*name).into(), key: (*key).into(), ..Default::default() },
            ..Default::default()
        })
        .collect();
    l
}

/// A Secret store: (name, key, value) triples.
pub fn secrets(
    entries: &'static [(&'static str, &'static str, &'static str)],
) -> impl Fn(&SecretKeyRef) -> SecretLookup {
    move |r| {
        let in_secret: Vec<_> = entries.iter().filter(|(n, _, _)| *n == r.name).collect();
        if in_secret.is_empty() {
            return SecretLookup::MissingSecret;
        }
        in_secret
            .iter()
            .find(|(_, k, _)| *k == r.key)
            .map_or(SecretLookup::MissingKey, |(_, _, v)| SecretLookup::Found(v.as_bytes().to_vec()))
    }
}

pub fn no_secrets(_: &SecretKeyRef) -> SecretLookup {
    SecretLookup::MissingSecret
}

/// A valid provider manifest as raw JSON (what the webhook sees).
pub fn provider_json() -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxProvider",
        "metadata": {"name": "acme-kubernetes"},
        "spec": {
            "pluginKey": "acme.kubernetes-sandbox-provider",
            "version": "1.4.0",
            "worker": {"service": {"namespace": "sandbox-system", "name": "acme-worker", "port": 8080, "path": "/rpc"}},
            "environmentDrivers": [{
                "driverKey": "kubernetes",
                "kind": "sandbox_provider",
                "displayName": "Kubernetes",
                "description": "Runs sandboxes as pods.",
                "configSchema": {"type": "object", "properties": {"backend": {"type": "string", "enum": ["sandbox-cr", "job"]}}},
                "sandboxCapabilities": {"reusableLeases": true, "nativeSyncIn": true, "nativeSyncOut": true}
            }]
        }
    })
}

/// A valid lease manifest as raw JSON.
pub fn lease_json() -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxLease",
        "metadata": {"name": "run-42", "namespace": "team-a"},
        "spec": {
            "providerRef": {"name": "acme-kubernetes", "driverKey": "kubernetes"},
            "policy": "ReuseByEnvironment",
            "environment": "env-7",
            "backend": "sandbox-cr",
            "workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "run-42"},
            "nativeFileSyncUnsupported": false,
            "config": {"backend": "sandbox-cr"},
            "configFrom": [{"secretKeyRef": {"name": "acme-credentials", "key": "config.json"}}]
        }
    })
}

/// Sets `value` at a JSON pointer, creating nothing: the parent must exist.
pub fn set(mut v: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a parent");
    let target = v.pointer_mut(parent).unwrap_or_else(|| panic!("no parent at {parent}"));
    match target {
        Value::Object(map) => {
            map.insert(key.into(), value);
        }
        Value::Array(items) => items[key.parse::<usize>().expect("index")] = value,
        _ => panic!("parent of {pointer} is not a container"),
    }
    v
}

pub fn remove(mut v: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a parent");
    v.pointer_mut(parent).and_then(Value::as_object_mut).expect("parent object").remove(key);
    v
}
