//! The verdicts of `check` over what it fetched: pure, so each is tested without a cluster.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::cli::cluster::RequestError;

/// Where two JSON documents first differ, as a path (`spec.versions[0].name`), or `None`.
pub fn first_difference(want: &Value, have: &Value, path: &str) -> Option<String> {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (key, value) in w {
                let at = format!("{path}.{key}");
                match h.get(key) {
                    None => return Some(format!("{at} is missing")),
                    Some(other) => {
                        if let Some(found) = first_difference(value, other, &at) {
                            return Some(found);
                        }
                    }
                }
            }
            h.keys().find(|k| !w.contains_key(*k)).map(|k| format!("{path}.{k} is not this sandcap's"))
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => {
            w.iter().zip(h).enumerate().find_map(|(i, (w, h))| first_difference(w, h, &format!("{path}[{i}]")))
        }
        (Value::Array(w), Value::Array(h)) => Some(format!("{path} has {} items, this sandcap's {}", h.len(), w.len())),
        _ if want == have => None,
        _ => Some(format!("{path} differs")),
    }
}

/// Where a CRD's spec in the cluster first differs from the generated one, ignoring what the
/// apiserver fills in itself when the generated spec leaves it out (`conversion: {strategy:
/// None}`, `names.listKind: <kind>List`).
pub fn crd_drift(generated: &Value, live: &Value) -> Option<String> {
    let mut live = live.clone();
    if let Some(spec) = live.as_object_mut() {
        if generated.get("conversion").is_none()
            && spec.get("conversion") == Some(&serde_json::json!({"strategy": "None"}))
        {
            spec.remove("conversion");
        }
        let list_kind = generated["names"]["kind"].as_str().map(|k| format!("{k}List"));
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut)
            && generated["names"].get("listKind").is_none()
            && names.get("listKind").and_then(Value::as_str) == list_kind.as_deref()
        {
            names.remove("listKind");
        }
    }
    first_difference(generated, &live, "spec")
}

/// A clock on another machine may be this far ahead of or behind this one.
pub const CLOCK_SKEW: i64 = 5;
/// The duration kube-lease-manager assumes when a Lease names none.
const DEFAULT_LEASE_SECONDS: i64 = 15;

/// Why no leader is known to hold the Lease `shown`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoLeader {
    #[error(
        "no Lease {shown}: no controller was ever elected there (is sandcap running, with leader election, in this \
         namespace?)"
    )]
    NoLease { shown: String },
    #[error("Lease {shown} is held by nobody: no controller runs (the last leader released it)")]
    HeldByNobody { shown: String },
    #[error("Lease {shown} is held by {holder} but was never renewed")]
    NeverRenewed { shown: String, holder: String },
    #[error(
        "Lease {shown} is held by {holder}, last renewed {age}s ago, longer than its {duration}s: the leader is gone \
         and no replica took over"
    )]
    Gone { shown: String, holder: String, age: i64, duration: i64 },
}

/// Whether a leader holds `lease` (`shown` names it) and renewed it within its duration.
pub fn leader(lease: Option<&Lease>, shown: &str, now: Timestamp) -> Result<String, NoLeader> {
    let shown_ = || shown.to_string();
    let Some(spec) = lease.map(|l| l.spec.clone().unwrap_or_default()) else {
        return Err(NoLeader::NoLease { shown: shown_() });
    };
    let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else {
        return Err(NoLeader::HeldByNobody { shown: shown_() });
    };
    let Some(renewed) = spec.renew_time.or(spec.acquire_time) else {
        return Err(NoLeader::NeverRenewed { shown: shown_(), holder });
    };
    let duration = spec.lease_duration_seconds.map_or(DEFAULT_LEASE_SECONDS, i64::from);
    let age = (now.as_second() - renewed.0.as_second()).max(0);
    if age > duration + CLOCK_SKEW {
        return Err(NoLeader::Gone { shown: shown_(), holder, age, duration });
    }
    Ok(format!("{holder} holds Lease {shown}, renewed {age}s ago (every {duration}s at most)"))
}

/// An object whose latest change the controllers have not resolved although it is old enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lagging {
    pub name: String,
    pub generation: i64,
    pub observed: Option<i64>,
    pub changed_ago: i64,
}

/// Whether the object (`meta`, its status's `observedGeneration`) changed more than `within` ago
/// and is still not resolved for that change. The change's time is the last write of its spec or
/// metadata (`managedFields`, outside the status subresource), else its creation.
pub fn lagging(meta: &ObjectMeta, observed: Option<i64>, now: Timestamp, within: Duration) -> Option<Lagging> {
    let generation = meta.generation.unwrap_or(0);
    if observed.is_some_and(|o| o >= generation) {
        return None;
    }
    let changed = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() != Some("status"))
        .filter_map(|m| m.time.as_ref())
        .chain(meta.creation_timestamp.as_ref())
        .map(|t| t.0.as_second())
        .max()?;
    let changed_ago = now.as_second() - changed;
    let within = i64::try_from(within.as_secs()).unwrap_or(i64::MAX);
    let name = match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    };
    (changed_ago > within).then_some(Lagging { name, generation, observed, changed_ago })
}

/// Why the dry run shows no webhook refusing what only it refuses; each carries the apiserver's
/// message.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotRefused {
    #[error(
        "a server-side dry run of a provider with an unknown field was admitted: no webhook refused it (does the \
         webhook configuration's rule cover sandboxproviders, with failurePolicy Fail?)"
    )]
    Admitted,
    #[error("webhook {webhook} refused the dry run, but not for its unknown field: {message}")]
    OtherProblem { webhook: String, message: String },
    #[error("the apiserver cannot call the webhook: {0}")]
    Uncalled(String),
    #[error("the dry run failed before the webhook answered: {0}")]
    BeforeTheWebhook(String),
}

/// The answer to the dry run of an object only the webhook refuses: `Ok` when one of `webhooks`
/// refused it for `field`. `result` is the apiserver's message on failure.
pub fn admission(result: Result<(), String>, webhooks: &[String], field: &str) -> Result<String, NotRefused> {
    let message = result.err().ok_or(NotRefused::Admitted)?;
    let by = webhooks.iter().find(|w| message.contains(&format!("admission webhook \"{w}\" denied the request")));
    match by {
        Some(w) if message.contains(field) => {
            Ok(format!("webhook {w} refused a server-side dry run of a provider with an unknown field, as it must"))
        }
        Some(w) => Err(NotRefused::OtherProblem { webhook: w.clone(), message }),
        None if message.contains("failed calling webhook") => Err(NotRefused::Uncalled(message)),
        None => Err(NotRefused::BeforeTheWebhook(message)),
    }
}

/// What a real create (not a dry run) of the check's provider came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RealCreate {
    Stored,
    /// Refused by the apiserver: its HTTP status and message.
    Refused {
        code: u16,
        message: String,
    },
    /// No answer from the apiserver.
    Failed(String),
}

const CONFIRM: &str = "(--confirm-dry-run-only)";

/// Why an account that must create only in a dry run is not known to be limited so.
#[derive(Debug, thiserror::Error)]
pub enum NotDryRunOnly {
    #[error(
        "a real create by this account was not refused before the webhooks {CONFIRM}: no admission policy limits it \
         to dry runs (yet: a policy takes effect a few seconds after it is created); HTTP {code}: {message}"
    )]
    NotRefusedFirst { code: u16, message: String },
    #[error(
        "a real create by this account was stored and is deleted again {CONFIRM}: nothing limits it to dry runs (yet: \
         a policy takes effect a few seconds after it is created)"
    )]
    Stored,
    /// Stored, and the delete failed too.
    #[error("{}; {delete}: delete it by hand", NotDryRunOnly::Stored)]
    StoredAndKept { delete: RequestError },
    #[error("whether this account creates only in dry runs is unknown {CONFIRM}: the real create failed: {0}")]
    Unknown(String),
}

/// Whether an account that must create only in a dry run is limited so: its real create was
/// forbidden by anything but an admission webhook, i.e. by an admission policy (the apiserver runs
/// them before webhooks, so a webhook that answered means every policy let the create through) or
/// by RBAC.
pub fn dry_run_only(outcome: &RealCreate) -> Result<String, NotDryRunOnly> {
    match outcome {
        RealCreate::Refused { code: 403, message } if !message.contains("admission webhook \"") => {
            Ok(format!("a real create was refused first, so this account creates only in dry runs: {message}"))
        }
        RealCreate::Refused { code, message } => {
            Err(NotDryRunOnly::NotRefusedFirst { code: *code, message: message.clone() })
        }
        RealCreate::Stored => Err(NotDryRunOnly::Stored),
        RealCreate::Failed(e) => Err(NotDryRunOnly::Unknown(e.clone())),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, MicroTime, Time};
    use serde_json::json;

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn a_crd_matches_when_only_server_defaults_were_added() {
        let generated = json!({"group": "g", "names": {"kind": "K", "plural": "ks"}, "versions": [{"name": "v1"}]});
        let mut live = generated.clone();
        live["conversion"] = json!({"strategy": "None"});
        live["names"]["listKind"] = json!("KList");
        assert_eq!(crd_drift(&generated, &live), None);
        live["names"]["listKind"] = json!("Other");
        assert_eq!(crd_drift(&generated, &live).as_deref(), Some("spec.names.listKind is not this sandcap's"));
        live["names"]["listKind"] = json!("KList");
        live["conversion"] = json!({"strategy": "Webhook"});
        assert_eq!(crd_drift(&generated, &live).as_deref(), Some("spec.conversion is not this sandcap's"));
    }

    #[test]
    fn a_crd_differs_at_the_first_changed_missing_or_extra_field() {
        let generated = json!({"versions": [{"name": "v1", "schema": {"maxLength": 63, "enum": ["a", "b"]}}]});
        let changed = json!({"versions": [{"name": "v1", "schema": {"maxLength": 64, "enum": ["a", "b"]}}]});
        assert_eq!(crd_drift(&generated, &changed).as_deref(), Some("spec.versions[0].schema.maxLength differs"));
        let missing = json!({"versions": [{"name": "v1", "schema": {"enum": ["a", "b"]}}]});
        assert_eq!(crd_drift(&generated, &missing).as_deref(), Some("spec.versions[0].schema.maxLength is missing"));
        let extra = json!({"versions": [{"name": "v1", "schema": {"maxLength": 63, "enum": ["a", "b"], "x": 1}}]});
        assert_eq!(crd_drift(&generated, &extra).as_deref(), Some("spec.versions[0].schema.x is not this sandcap's"));
        let shorter = json!({"versions": [{"name": "v1", "schema": {"maxLength": 63, "enum": ["a"]}}]});
        assert_eq!(
            crd_drift(&generated, &shorter).as_deref(),
            Some("spec.versions[0].schema.enum has 1 items, this sandcap's 2")
        );
    }

    fn lease(holder: Option<&str>, renewed: Option<i64>, duration: Option<i32>) -> Lease {
        Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: renewed.map(|s| MicroTime(at(s))),
                lease_duration_seconds: duration,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_leader_must_hold_the_lease_and_have_renewed_it_within_its_duration() {
        let now = at(1_000);
        let shown = "sandcap-system/sandcap-controller";
        let ok = leader(Some(&lease(Some("pod-a"), Some(990), Some(15))), shown, now).unwrap();
        assert_eq!(ok, "pod-a holds Lease sandcap-system/sandcap-controller, renewed 10s ago (every 15s at most)");
        assert!(leader(Some(&lease(Some("pod-a"), Some(980), Some(15))), shown, now).is_ok(), "within the skew");
        let gone = leader(Some(&lease(Some("pod-a"), Some(979), Some(15))), shown, now).unwrap_err().to_string();
        assert!(gone.contains("last renewed 21s ago, longer than its 15s"), "{gone}");
        assert!(leader(Some(&lease(Some("pod-a"), Some(1_003), None)), shown, now).unwrap().contains("renewed 0s ago"));
        let refused = |lease: Option<&Lease>| leader(lease, shown, now).unwrap_err().to_string();
        assert!(refused(Some(&lease(None, None, None))).contains("held by nobody"));
        assert!(refused(Some(&lease(Some(""), Some(999), None))).contains("held by nobody"));
        assert!(refused(Some(&lease(Some("p"), None, None))).contains("never renewed"));
        assert!(refused(None).starts_with("no Lease sandcap-system/sandcap-controller"));
    }

    fn meta(generation: i64, created: i64, writes: &[(i64, Option<&str>)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("run-42".into()),
            namespace: Some("team-a".into()),
            generation: Some(generation),
            creation_timestamp: Some(Time(at(created))),
            managed_fields: Some(
                writes
                    .iter()
                    .map(|(t, sub)| ManagedFieldsEntry {
                        time: Some(Time(at(*t))),
                        subresource: sub.map(String::from),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn an_object_lags_when_its_change_is_older_than_the_grace_and_not_observed() {
        let (now, within) = (at(1_000), Duration::from_secs(60));
        assert_eq!(lagging(&meta(2, 0, &[(900, None)]), Some(2), now, within), None, "resolved");
        assert_eq!(lagging(&meta(2, 0, &[(950, None)]), Some(1), now, within), None, "changed 50s ago: in time");
        let late = lagging(&meta(2, 0, &[(900, None), (990, Some("status"))]), Some(1), now, within).unwrap();
        assert_eq!(late, Lagging { name: "team-a/run-42".into(), generation: 2, observed: Some(1), changed_ago: 100 });
        let never = lagging(&meta(1, 800, &[]), None, now, within).unwrap();
        assert_eq!((never.observed, never.changed_ago), (None, 200), "never resolved, created 200s ago");
    }

    #[test]
    fn only_a_forbidden_real_create_that_no_webhook_answered_confirms_dry_runs_only() {
        let refused = |code: u16, message: &str| RealCreate::Refused { code, message: message.into() };
        let policy = "sandboxproviders.sandcap.dev \"sandcap-check-dry-run\" is forbidden: ValidatingAdmissionPolicy \
                      'sandcap-check-dry-run-only' with binding 'sandcap-check-dry-run-only' denied request: dry runs only";
        let ok = dry_run_only(&refused(403, policy)).unwrap();
        assert!(ok.ends_with(&format!("creates only in dry runs: {policy}")), "{ok}");
        let rbac =
            "sandboxproviders.sandcap.dev is forbidden: User \"system:serviceaccount:s:t\" cannot create resource";
        assert!(dry_run_only(&refused(403, rbac)).is_ok(), "RBAC forbids it even more");

        // The webhook answered (403 with sandcap's denials), or could not be called: every policy
        // had let the create through.
        let webhook =
            "admission webhook \"validate.sandcap.dev\" denied the request: spec...sandcapCheck: unknown field";
        let through = dry_run_only(&refused(403, webhook)).unwrap_err().to_string();
        assert!(through.starts_with("a real create by this account was not refused before the webhooks"), "{through}");
        assert!(through.ends_with(&format!("HTTP 403: {webhook}")), "{through}");
        let unreachable =
            "Internal error occurred: failed calling webhook \"validate.sandcap.dev\": connection refused";
        assert!(dry_run_only(&refused(500, unreachable)).is_err());
        let stored = dry_run_only(&RealCreate::Stored).unwrap_err().to_string();
        assert!(stored.contains("was stored and is deleted again"), "{stored}");
        let unknown = dry_run_only(&RealCreate::Failed("no answer within 10s".into())).unwrap_err().to_string();
        assert!(unknown.ends_with("the real create failed: no answer within 10s"), "{unknown}");
    }

    #[test]
    fn only_a_refusal_by_the_webhook_for_the_unknown_field_passes() {
        let hooks = ["validate.sandcap.dev".to_string()];
        let denied = "admission webhook \"validate.sandcap.dev\" denied the request: spec.environmentDrivers[0].sandcapCheck: unknown field";
        assert!(admission(Err(denied.into()), &hooks, "sandcapCheck").is_ok());
        let other = admission(Err(denied.into()), &hooks, "somethingElse").unwrap_err().to_string();
        assert!(other.contains("not for its unknown field"), "{other}");
        let unreachable =
            "Internal error occurred: failed calling webhook \"validate.sandcap.dev\": connect: connection refused";
        let e = admission(Err(unreachable.into()), &hooks, "sandcapCheck").unwrap_err().to_string();
        assert!(e.starts_with("the apiserver cannot call the webhook: "), "{e}");
        assert_eq!(admission(Ok(()), &hooks, "sandcapCheck"), Err(NotRefused::Admitted));
        assert!(NotRefused::Admitted.to_string().contains("was admitted"));
        let crd = admission(
            Err("SandboxProvider.sandcap.dev \"x\" is invalid: spec.version: Required value".into()),
            &hooks,
            "f",
        );
        assert!(crd.unwrap_err().to_string().starts_with("the dry run failed before the webhook answered"));
    }
}
