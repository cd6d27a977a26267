//! Hostile input, one builder per class of docs/webhook.md's budgets: shared by the budget tests
//! against the real binary (tests/budgets.rs), the benchmark that prints what each class costs
//! (benches/hostile.rs) and the end-to-end suite (a hostile provider stored without the webhook).

use serde_json::{Map, Value, json};

/// The apiserver's request body limit, which the webhook's own limit follows.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Patterns that compile to megabytes each, in the constructs and places that cost: counted
/// repetitions of ASCII, Unicode and negated classes, nested repetitions, in `pattern`,
/// `patternProperties` keys and `propertyNames`.
pub fn costly_patterns() -> Vec<String> {
    let mut patterns = Vec::new();
    for i in 0..12 {
        patterns.push(format!(r"\w{{{}}}", 30_000 + i));
        patterns.push(format!(r"[^a]{{{}}}", 9_000 + i));
        patterns.push(format!(r"\p{{L}}{{{}}}", 60 + i));
        patterns.push(format!(r"((a|b|c){{{}}}){{200}}", 200 + i));
    }
    patterns
}

/// A `configSchema` that puts every pattern of [`costly_patterns`] to use.
pub fn costly_schema() -> Value {
    let patterns = costly_patterns();
    let mut properties = Map::new();
    let mut pattern_properties = Map::new();
    for (i, p) in patterns.iter().enumerate() {
        match i % 3 {
            0 => drop(properties.insert(format!("p{i}"), json!({"type": "string", "pattern": p}))),
            1 => drop(pattern_properties.insert(p.clone(), json!({"type": "string"}))),
            _ => drop(properties.insert(format!("n{i}"), json!({"type": "object", "propertyNames": {"pattern": p}}))),
        }
    }
    json!({"type": "object", "properties": properties, "patternProperties": pattern_properties})
}

/// A provider with a Service worker (admitted without `--allow-worker-urls`) whose one driver
/// `kubernetes` has `schema` as its `configSchema`.
pub fn provider_with_schema(name: &str, schema: Value) -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxProvider",
        "metadata": {"name": name},
        "spec": {
            "pluginKey": "acme.hostile",
            "version": "1.0.0",
            "worker": {"service": {"namespace": "default", "name": "worker", "port": 8080}},
            "environmentDrivers": [{
                "driverKey": "kubernetes", "kind": "sandbox_provider", "displayName": "K",
                "configSchema": schema
            }]
        }
    })
}

/// `object` with its `spec` padded with unknown keys until the review is about `bytes` long.
pub fn flooded(mut object: Value, bytes: usize) -> Value {
    let spec = object["spec"].as_object_mut().expect("a spec");
    // Each key costs about its length plus 4 bytes (`"":0,`) in the review.
    for i in 0.. {
        let key = format!("unknownField{i}");
        if i * (key.len() + 4) > bytes {
            break;
        }
        spec.insert(key, json!(0));
    }
    object
}

pub fn lease(name: &str) -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxLease",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"providerRef": {"name": "p", "driverKey": "kubernetes"}}
    })
}

/// An `admission.k8s.io/v1` CREATE review of `object`, as bytes.
pub fn review(object: &Value) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap_or("SandboxProvider");
    let resource = if kind == "SandboxLease" { "sandboxleases" } else { "sandboxproviders" };
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "sandcap.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "sandcap.dev", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "attacker"},
            "object": object
        }
    }))
    .expect("serializes")
}

/// Every hostile class as a review just under the body limit (or as large as the class needs),
/// by name: what the budget tests and the benchmark send.
pub fn reviews() -> Vec<(&'static str, Vec<u8>)> {
    let near_limit = MAX_BODY - 64 * 1024;
    let mut deep = json!("leaf");
    for _ in 0..120 {
        deep = json!([deep]);
    }
    vec![
        ("configSchema regexes", review(&provider_with_schema("regexes", costly_schema()))),
        ("unknown keys, provider", review(&flooded(provider_with_schema("flood", json!({})), near_limit))),
        ("unknown keys, lease", review(&flooded(lease("flood"), near_limit))),
        ("deep nesting", review(&json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
            "metadata": {"name": "deep"}, "spec": {"config": deep}}))),
    ]
}

/// An honest review of about 1 KB, the baseline of the benchmark.
pub fn honest_review() -> Vec<u8> {
    let schema = json!({"type": "object", "properties": {"image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"}}});
    review(&provider_with_schema("honest", schema))
}
