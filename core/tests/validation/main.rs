//! The webhook's rules (docs/contract.md, "Resources and who enforces what": the webhook layer),
//! one test each: what the apiserver cannot check from the CRD. Layer 1 (the CRD itself) has its
//! own tests (schema/).

#[path = "../support/mod.rs"]
mod support;

mod bounded;
mod crd;
mod rules;

use sandcap_core::validation::{Options, review};
use serde_json::Value;

fn deny(object: &Value) -> String {
    let v = review(object, None, &Options::default());
    assert!(!v.allowed(), "expected a denial for {object}");
    for p in &v.problems {
        assert!(!p.message.contains("; "), "a problem must not contain the separator: {p}");
    }
    v.message()
}

fn allow(object: &Value) -> Vec<String> {
    let v = review(object, None, &Options::default());
    assert!(v.allowed(), "expected allowed, got: {}", v.message());
    v.warnings
}

const D0: &str = "/spec/environmentDrivers/0";
