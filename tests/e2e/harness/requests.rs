//! What sandcap asked the apiserver for, by the cluster's audit log (every request of a
//! ServiceAccount is audited: see [`crate::harness::cluster::Cluster::audit`]).

use crate::harness::cluster::Cluster;

/// The status patches sandcap made to the objects named `names`, by the apiserver's audit log.
pub fn status_patches(c: &Cluster, names: &[&str]) -> usize {
    c.audit()
        .iter()
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["subresource"] == "status"
                && names.iter().any(|n| e["objectRef"]["name"] == *n)
                && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
        })
        .count()
}

/// sandcap's writes of SandboxLeases themselves (not their status) in `namespace`, by the audit
/// log: `"<verb> <name>"`, in order (the observer's creates, patches and deletes).
pub fn lease_writes(c: &Cluster, namespace: &str) -> Vec<String> {
    c.audit()
        .iter()
        .filter(|e| {
            matches!(e["verb"].as_str(), Some("create" | "update" | "patch" | "delete" | "deletecollection"))
                && e["stage"] == "ResponseComplete"
                && e["objectRef"]["resource"] == "sandboxleases"
                && e["objectRef"]["subresource"].is_null()
                && e["objectRef"]["namespace"] == namespace
                && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
        })
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}
