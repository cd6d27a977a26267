//! sandcap's objects and what the controllers write, read through a client: by kind as JSON, their
//! conditions and explanations, and the holder of the leader Lease.

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::harness::install;

pub fn resource(kind: &str) -> ApiResource {
    let gvk = match kind {
        "SandboxProvider" | "SandboxLease" => GroupVersionKind::gvk("sandcap.dev", "v1alpha1", kind),
        "Secret" => GroupVersionKind::gvk("", "v1", kind),
        "Event" => GroupVersionKind::gvk("events.k8s.io", "v1", kind),
        "SandboxClaim" => GroupVersionKind::gvk("extensions.agents.x-k8s.io", "v1beta1", kind),
        other => panic!("no resource for {other}"),
    };
    ApiResource::from_gvk(&gvk)
}

fn api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource(kind)),
        None => Api::all_with(client.clone(), &resource(kind)),
    }
}

/// The object as JSON, or `None` if it does not exist.
pub async fn get(client: &Client, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
    let object = api(client, kind, namespace).get_opt(name).await.expect("GET answers")?;
    Some(serde_json::to_value(object).expect("JSON"))
}

pub async fn delete(client: &Client, kind: &str, namespace: Option<&str>, name: &str) {
    let _ = api(client, kind, namespace).delete(name, &DeleteParams::default()).await;
}

/// The condition `kind` of a status, if present.
pub fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

/// `(reason, message)` of `capability` in a status's explanations.
pub fn explanation(status: &Value, capability: &str) -> Option<(String, String)> {
    status["explanations"].as_array()?.iter().find(|e| e["capability"] == capability).map(|e| {
        (e["reason"].as_str().unwrap_or_default().to_string(), e["message"].as_str().unwrap_or_default().to_string())
    })
}

/// The holder of the controllers' leader Lease.
pub async fn holder(client: &Client) -> Option<String> {
    let api = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), install::NAMESPACE);
    api.get_opt("sandcap-controller").await.ok()??.spec?.holder_identity
}
