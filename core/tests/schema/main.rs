//! The CRD layer (docs/contract.md, "Resources and who enforces what"): one test per rule the CRD
//! carries, through the offline evaluator and through `sandcap validate`'s verdict. The expected
//! texts are what kube-apiserver 1.37.2 answered for the same objects; 1.35.4 answered the same
//! where a minor's forms could differ (`Server::V1_35`, checked on the cases older minors wrote otherwise).

#[path = "../support/mod.rs"]
mod support;

mod bounds;
mod lease;
mod provider;
mod workloads;

use sandcap_core::judge::judge;
use sandcap_core::schema::{Rejection, Server};
use sandcap_core::validation::Options;
use sandcap_core::versions::ContractVersion;
use serde_json::Value;
use support::*;

const D0: &str = "/spec/environmentDrivers/0";
const SEMVER: &str = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$";
const SKIPPED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// The errors of an object with one schema error: `first`, then the apiserver's note that its
/// rules were skipped ([`SKIPPED`]).
fn skipped(first: &str) -> Vec<&str> {
    vec![first, SKIPPED]
}

/// Layer 1 of the default contract version (v1); `version_errors` checks another.
fn check(object: &Value, old: Option<&Value>, server: Server) -> Result<(), Rejection> {
    sandcap_core::schema::check(object, old, server, ContractVersion::V1)
}

fn errors(object: &Value, old: Option<&Value>, server: Server) -> Vec<String> {
    check(object, old, server).expect_err("layer 1 rejects").errors
}

/// The denial `sandcap validate` prints for the object.
fn denial(object: &Value) -> String {
    let judgment = judge(object, &Options::default(), Server::default());
    assert!(!judgment.allowed(), "denied: {judgment:?}");
    judgment.message()
}

fn provider_case(pointer: &str, value: Value) -> Value {
    set(provider_json(), pointer, value)
}
