//! The bounds on every spec object's keys, the config's and the configSchema's included.

use sandcap_core::schema::Server;
use serde_json::{Value, json};

use super::{D0, SKIPPED, check, errors};
use crate::support::*;

/// `object` with keys `typo0`, `typo1`, ... added at `pointer` until it holds `keys` keys.
fn with_keys(object: Value, pointer: &str, keys: usize) -> Value {
    let mut target = object.pointer(pointer).and_then(Value::as_object).cloned().expect("an object");
    let mut i = 0;
    while target.len() < keys {
        target.insert(format!("typo{i}"), json!(1));
        i += 1;
    }
    set(object, pointer, Value::Object(target))
}

/// Every object in `spec` keeps unknown keys for the webhook to name, and counts them: 16 keys are
/// the webhook's to judge, 17 the apiserver refuses (a flood of unknown keys never reaches the
/// webhook).
#[test]
fn every_spec_object_is_bounded_in_its_keys_unknown_keys_included() {
    let provider_objects = ["/spec", "/spec/worker", "/spec/worker/service", D0];
    let lease_objects =
        ["/spec", "/spec/providerRef", "/spec/workloadRef", "/spec/configFrom/0", "/spec/configFrom/0/secretKeyRef"];
    let cases =
        provider_objects.map(|p| (provider_json(), p)).into_iter().chain(lease_objects.map(|p| (lease_json(), p)));
    for (object, pointer) in cases {
        let path = pointer.trim_start_matches('/').replace("/environmentDrivers/0", ".environmentDrivers[0]");
        let path = path.replace("/configFrom/0", ".configFrom[0]").replace('/', ".");
        assert_eq!(check(&with_keys(object.clone(), pointer, 16), None, Server::V1_37), Ok(()), "{path}");
        assert_eq!(
            errors(&with_keys(object, pointer, 17), None, Server::V1_37),
            [format!("{path}: Too many: 17: must have at most 16 items"), SKIPPED.to_string()],
        );
    }
    // The apiserver counts after defaulting (a lease's `policy`) and after dropping the null of a
    // field that is neither nullable nor defaulted; it keeps a nullable field's null and an
    // unknown key's null, and counts them.
    let lease = json!({"providerRef": {"name": "acme", "driverKey": "kubernetes"}});
    let lease = with_keys(set(lease_json(), "/spec", lease), "/spec", 15);
    for fits in [
        lease.clone(),
        set(lease.clone(), "/spec/config", Value::Null),
        set(lease.clone(), "/spec/policy", Value::Null),
    ] {
        assert_eq!(check(&fits, None, Server::V1_37), Ok(()), "{fits}");
    }
    for counted in ["/spec/environment", "/spec/typo99"] {
        assert_eq!(
            errors(&set(lease.clone(), counted, Value::Null), None, Server::V1_37),
            ["spec: Too many: 17: must have at most 16 items", SKIPPED],
            "{counted}"
        );
    }
    let flood = with_keys(lease_json(), "/spec", 100_000);
    assert_eq!(errors(&flood, None, Server::V1_37)[0], "spec: Too many: 100000: must have at most 16 items");
}

#[test]
fn config_and_config_schema_are_bounded_in_their_keys() {
    let schema = format!("{D0}/configSchema");
    let cases = [
        (lease_json(), "/spec/config".to_string(), "spec.config", 128),
        (provider_json(), schema.clone(), "spec.environmentDrivers[0].configSchema", 64),
        (provider_json(), format!("{schema}/properties"), "spec.environmentDrivers[0].configSchema.properties", 128),
    ];
    for (object, pointer, path, max) in cases {
        assert_eq!(check(&with_keys(object.clone(), &pointer, max), None, Server::V1_37), Ok(()), "{path}");
        assert_eq!(
            errors(&with_keys(object, &pointer, max + 1), None, Server::V1_37),
            [format!("{path}: Too many: {}: must have at most {max} items", max + 1), SKIPPED.to_string()],
        );
    }
    // Below its top level, config is the configSchema's to judge (and the request size's to bound).
    let nested =
        json!({"deep": {"keys": (0..1000).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>()}});
    assert_eq!(check(&set(lease_json(), "/spec/config", nested), None, Server::V1_37), Ok(()));
}
