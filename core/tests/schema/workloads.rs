//! A provider's `spec.workloads`: each binding names a sandbox_provider driver, selects by at
//! least one label, and names the environment label a reusing policy needs.

use sandcap_core::schema::Server;
use serde_json::{Value, json};

use super::{check, errors, provider_case};

fn binding(binding: Value) -> Value {
    provider_case("/spec/workloads", json!([binding]))
}

fn job(extra: Value) -> Value {
    let mut b = json!({"kind": "Job", "selector": {"matchLabels": {"paperclip.io/managed-by": "paperclip-k8s-plugin"}}, "driverKey": "kubernetes"});
    b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    binding(b)
}

fn denied_with(object: &Value, part: &str) {
    let errors = errors(object, None, Server::default());
    assert!(errors.iter().any(|e| e.contains(part)), "{part} in {errors:?}");
}

#[test]
fn a_binding_of_the_hosts_kubernetes_provider_passes() {
    assert_eq!(check(&job(json!({})), None, Server::default()), Ok(()));
    let reuse = job(json!({"policy": "ReuseByEnvironment", "environmentLabel": "paperclip.io/agent-id"}));
    assert_eq!(check(&reuse, None, Server::default()), Ok(()));
    let sandbox = job(
        json!({"kind": "Sandbox", "selector": {"matchExpressions": [{"key": "paperclip.io/run-id", "operator": "Exists"}]}}),
    );
    assert_eq!(check(&sandbox, None, Server::default()), Ok(()));
}

#[test]
fn the_driver_must_be_one_of_the_providers_sandbox_provider_drivers() {
    denied_with(
        &job(json!({"driverKey": "docker"})),
        "every workloads[].driverKey must name one of environmentDrivers",
    );
    let mut other_kind = job(json!({}));
    other_kind["spec"]["environmentDrivers"][0]["kind"] = json!("environment_driver");
    denied_with(&other_kind, "with kind sandbox_provider");
}

#[test]
fn a_selector_selects_by_at_least_one_label_with_well_formed_requirements() {
    denied_with(&job(json!({"selector": {}})), "select workloads by at least one label");
    denied_with(&job(json!({"selector": {"matchLabels": {}}})), "select workloads by at least one label");
    let no_values = json!({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}});
    denied_with(&job(no_values), "In and NotIn take at least one value");
    let values = json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}});
    denied_with(&job(values), "Exists and DoesNotExist none");
    denied_with(&job(json!({"selector": {"matchLabels": {"bad key!": "x"}}})), "every key must be a label key");
    denied_with(&job(json!({"selector": {"matchLabels": {"a": "not a value"}}})), "should match");
    denied_with(&job(json!({"kind": "Deployment"})), "Unsupported value: \"Deployment\"");
}

#[test]
fn a_reusing_policy_needs_the_label_that_gives_the_environment() {
    denied_with(
        &job(json!({"policy": "ReuseByEnvironment"})),
        "environmentLabel is required when policy is ReuseByEnvironment",
    );
}

#[test]
fn at_most_eight_bindings() {
    let one = job(json!({}))["spec"]["workloads"][0].clone();
    let nine = provider_case("/spec/workloads", Value::Array(vec![one; 9]));
    denied_with(&nine, "must have at most 8 items");
}
