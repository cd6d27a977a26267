//! Waiting for what the controllers write: a check polled until it holds, and a lease's reason
//! for a capability.

use std::time::{Duration, Instant};

use kube::Client;
use serde_json::Value;

use crate::harness::objects::{explanation, get};

/// How long a scenario waits for the controllers to resolve a change.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `check` until it returns `Some` or `timeout` passes; panics naming `what`.
pub async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, timeout: Duration, check: impl Fn() -> F) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the lease's `capability` has `reason` (for the lease's current generation).
pub async fn lease_reason(client: &Client, namespace: &str, name: &str, capability: &str, reason: &str) -> Value {
    let what = format!("lease {namespace}/{name}: {capability} {reason}");
    eventually(&what, WAIT, || async {
        let lease = get(client, "SandboxLease", Some(namespace), name).await?;
        let status = &lease["status"];
        (explanation(status, capability)?.0 == reason
            && status["observedGeneration"] == lease["metadata"]["generation"])
            .then(|| status.clone())
    })
    .await
}

/// Waits until every lease in `names` has `reason` for `capability`.
pub async fn all_leases(client: &Client, namespace: &str, names: &[String], capability: &str, reason: &str) {
    for name in names {
        lease_reason(client, namespace, name, capability, reason).await;
    }
}
