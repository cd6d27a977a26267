//! Bounded answers: a flood of problems is listed in part and counted, keys are cut and quoted, and
//! a config over its bound is refused without its values.

use sandcap_core::api::{CONFIG_TOO_LARGE, MAX_CONFIG_BYTES};
use sandcap_core::contract::ConfigFailure;
use sandcap_core::validation::{ALREADY_STORED, MAX_PER_KIND, Options, review};
use serde_json::{Value, json};

use super::{D0, allow, deny};
use crate::support::*;

/// A spec flooded with unknown keys: the verdict lists a few, counts the rest, and stays small.
#[test]
fn a_flood_of_unknown_fields_is_listed_in_part_and_counted() {
    let mut p = provider_json();
    let spec = p["spec"].as_object_mut().unwrap();
    for i in 0..300_000 {
        spec.insert(format!("k{i}"), json!(0));
    }
    let v = review(&p, None, &Options::default());
    assert_eq!(v.problems.len(), MAX_PER_KIND);
    assert_eq!(v.problem_count(), 300_000);
    let message = v.message();
    assert!(message.ends_with(&format!("; and {} more unknown fields", 300_000 - MAX_PER_KIND)), "{message}");
    assert!(message.len() < 4096, "{} bytes", message.len());
}

/// Every kind of problem is shown however many problems of another kind there are.
#[test]
fn every_kind_of_problem_is_shown_next_to_a_flood() {
    let mut p = set(provider_json(), "/spec/worker/url", json!("http://worker.example/rpc"));
    p = set(p, &format!("{D0}/configSchema"), json!({"type": "strin"}));
    let spec = p["spec"].as_object_mut().unwrap();
    for i in 0..1000 {
        spec.insert(format!("k{i}"), json!(0));
    }
    let message = deny(&p);
    assert!(message.contains("spec.worker.url: worker URLs are refused"), "{message}");
    assert!(message.contains("spec.environmentDrivers[0].configSchema: is not a valid JSON Schema"), "{message}");
    assert!(message.contains(&format!("and {} more unknown fields", 1000 - MAX_PER_KIND)), "{message}");
}

/// A key of a megabyte is named by its start, quoted, and no problem text is longer than a line.
#[test]
fn huge_and_strange_keys_are_cut_and_quoted_in_paths() {
    let key = format!("x\n{}", "y".repeat(1 << 20));
    let message = deny(&set(provider_json(), &format!("/spec/{}", key.replace('/', "~1")), json!(1)));
    assert!(message.starts_with("spec[\"x\\ny"), "{}", &message[..80]);
    assert!(message.len() < 1024, "{} bytes", message.len());
}

/// Ratcheting counts omitted problems too: an update that keeps a stored flood is allowed with a
/// warning; one that adds to it is denied.
#[test]
fn ratcheting_counts_omitted_problems() {
    let flood = |n: usize| {
        let mut p = provider_json();
        for i in 0..n {
            p["spec"].as_object_mut().unwrap().insert(format!("k{i}"), json!(0));
        }
        p
    };
    let stored = flood(100);
    let same = review(&set(flood(100), "/metadata/labels", json!({"a": "b"})), Some(&stored), &Options::default());
    assert!(same.allowed(), "{}", same.message());
    assert!(same.warnings.iter().any(|w| w.contains(&format!("and {} more unknown fields", 100 - MAX_PER_KIND))));
    let more = review(&flood(101), Some(&stored), &Options::default());
    assert!(!more.allowed());
}

/// A null capability declares nothing, and pruned it would let the legacy field decide unseen: the
/// CRD keeps it (nullable) and the webhook names it, whatever the key.
#[test]
fn a_null_capability_is_refused_by_name() {
    let d0 = "/spec/environmentDrivers/0";
    let null = set(provider_json(), &format!("{d0}/sandboxCapabilities/reusableLeases"), Value::Null);
    let null = set(null, &format!("{d0}/supportsReusableLeases"), json!(true));
    assert_eq!(
        deny(&null),
        "spec.environmentDrivers[0].sandboxCapabilities.reusableLeases: null declares nothing: write true or false, or \
         delete the key"
    );
    let odd = set(provider_json(), &format!("{d0}/sandboxCapabilities/nativeSyncIn"), Value::Null);
    assert!(deny(&odd).starts_with("spec.environmentDrivers[0].sandboxCapabilities.nativeSyncIn: null declares"));
}

/// `{"blob":"xx..."}` of `bytes` bytes as JSON.
fn config_of(bytes: usize) -> Value {
    json!({"blob": "x".repeat(bytes - r#"{"blob":""}"#.len())})
}

#[test]
fn a_lease_config_over_its_bound_is_refused_without_its_values() {
    allow(&set(lease_json(), "/spec/config", config_of(MAX_CONFIG_BYTES)));
    let message = deny(&set(lease_json(), "/spec/config", config_of(MAX_CONFIG_BYTES + 1)));
    assert_eq!(message, format!("spec.config: {CONFIG_TOO_LARGE}"));
    // The status of a lease stored without the webhook says the same words.
    assert_eq!(message, ConfigFailure::ConfigTooLarge.to_string());
    assert!(CONFIG_TOO_LARGE.contains(&MAX_CONFIG_BYTES.to_string()), "{CONFIG_TOO_LARGE}");
    // Nested values and many keys count alike: the bound is the whole config's.
    let nested = json!({"a": {"b": [{"c": "x".repeat(MAX_CONFIG_BYTES)}]}});
    assert_eq!(deny(&set(lease_json(), "/spec/config", nested)), message);
    let keys: serde_json::Map<String, Value> = (0..128).map(|i| (format!("k{i}"), json!("y".repeat(600)))).collect();
    assert_eq!(deny(&set(lease_json(), "/spec/config", Value::Object(keys))), message);
}

#[test]
fn a_stored_config_over_its_bound_does_not_block_updates() {
    let stored = set(lease_json(), "/spec/config", config_of(MAX_CONFIG_BYTES + 1));
    let relabelled = set(stored.clone(), "/metadata/labels", json!({"team": "a"}));
    let v = review(&relabelled, Some(&stored), &Options::default());
    assert!(v.allowed(), "{}", v.message());
    assert_eq!(v.warnings, [format!("{ALREADY_STORED}spec.config: {CONFIG_TOO_LARGE}")]);
}
