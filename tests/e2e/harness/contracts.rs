//! Contract versions as the scenarios choose and check them: the chart's values of a version,
//! the verdicts on the corpus's entries about versions, and statuses resolved under a version.

use std::collections::BTreeMap;

use kube::Client;
use sandcap_core::versions::ContractVersion::{self, V1, V2};
use serde_json::{Value, json};

use crate::harness::objects::get;
use crate::harness::waits::{WAIT, eventually};

/// The keys v2 adds to v1's six.
pub const ADDED_IN_V2: [&str; 3] = ["concurrentSyncOperations", "duplexCommandStream", "runnerWebSocketIngress"];

/// The chart's values that choose `version`.
pub fn values_of(version: ContractVersion) -> Value {
    json!({"contract": {"version": version.as_str()}})
}

/// What the corpus's entries about versions must get under `contract` (the differential test has
/// already shown that `sandcap validate` says the same): v2's keys admitted by v2 and refused by
/// v1 by name, with the version that declares them; the removed key and a misspelt key refused
/// by both.
pub fn the_keys_of_each_version(contract: ContractVersion, verdicts: &BTreeMap<String, Option<String>>) {
    let verdict = |name: &str| {
        verdicts.get(&format!("providers.yaml:{name}")).unwrap_or_else(|| panic!("the corpus has no {name}")).clone()
    };
    let choose = "delete it, or choose contract v2, which declares it";
    match contract {
        V1 => {
            let refused = verdict("contract-v2-nine-keys").expect("v1 refuses the keys of v2");
            for key in ADDED_IN_V2 {
                assert!(refused.contains(&format!("Invalid value: {key} ")), "{key} is not named: {refused}");
            }
            assert_eq!(refused.matches(choose).count(), ADDED_IN_V2.len(), "{refused}");
            let refused = verdict("contract-v2-key-false").expect("v1 refuses a v2 key declared false");
            assert!(refused.contains("duplexCommandStream is not a key of contract v1"), "{refused}");
        }
        V2 => {
            assert_eq!(verdict("contract-v2-nine-keys"), None);
            assert_eq!(verdict("contract-v2-key-false"), None);
            assert_eq!(verdict("bad-removed-key-sync-operations"), None, "v2 declares concurrentSyncOperations");
        }
    }
    for name in ["bad-removed-key-sync-and-exec", "bad-removed-key-beside-v2-keys"] {
        let refused = verdict(name).unwrap_or_else(|| panic!("contract {contract} admits {name}"));
        assert!(refused.contains("concurrentSyncAndExec was removed from the contract"), "{refused}");
    }
    let typo = verdict("bad-typo-v2-capability-key").expect("a misspelt key is refused");
    let listed = format!("unknown capability key \"runnerWebsocketIngress\": the keys of contract {contract} are ");
    assert!(typo.contains(&listed), "{typo}");
}

/// `capability -> reason` of a status's explanations.
pub fn reasons(status: &Value) -> BTreeMap<String, String> {
    let explanations = status["explanations"].as_array().cloned().unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    explanations.iter().map(|e| (text(&e["capability"]), text(&e["reason"]))).collect()
}

/// Every key of `version` with reason `Granted`, except the keys of each `(keys, reason)`.
pub fn expected(version: ContractVersion, off: &[(&[&str], &str)]) -> BTreeMap<String, String> {
    let reason_of = |key: &str| off.iter().find(|(keys, _)| keys.contains(&key)).map_or("Granted", |(_, r)| r);
    version.contract().capabilities().map(|cap| (cap.key().to_string(), reason_of(cap.key()).to_string())).collect()
}

/// Waits until the object's status was written under `version` for its current generation.
pub async fn resolved_under(
    client: &Client,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    version: ContractVersion,
) -> Value {
    eventually(&format!("{kind} {name} resolved under contract {version}"), WAIT, || async {
        let object = get(client, kind, namespace, name).await?;
        let status = &object["status"];
        (status["contract"] == version.as_str() && status["observedGeneration"] == object["metadata"]["generation"])
            .then(|| status.clone())
    })
    .await
}

/// Waits until the lease's explanations are exactly `want`, under `version`.
pub async fn lease_reasons(
    client: &Client,
    namespace: &str,
    name: &str,
    version: ContractVersion,
    want: &BTreeMap<String, String>,
) -> Value {
    eventually(&format!("lease {namespace}/{name}: {want:?}"), WAIT, || async {
        let status = resolved_under(client, "SandboxLease", Some(namespace), name, version).await;
        (reasons(&status) == *want).then_some(status)
    })
    .await
}
