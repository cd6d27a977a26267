//! The CRDs the apiserver would hold, with their CEL rules compiled, once per thread.

use std::cell::RefCell;
use std::collections::HashMap;

use kube::CustomResourceExt;
use kube_cel::cel::extractors::This;
use kube_cel::cel::{self, Context, FunctionContext};
use kube_cel::{CompiledSchema, KubeCelExt};
use serde_json::Value;

use crate::api::{SandboxLease, SandboxProvider};
use crate::vocabulary::Kind;

/// The CRDs' schemas as JSON and their compiled CEL rules, built once per thread (the compiled
/// programs are not `Sync`), indexed by [`Kind`].
pub(super) struct Crd {
    pub(super) schema: Value,
    pub(super) cel: CompiledSchema,
}

pub(super) struct Crds {
    pub(super) kinds: [Crd; 2],
    pub(super) context: Context<'static>,
    pub(super) patterns: RefCell<HashMap<String, regex::Regex>>,
}

thread_local! {
    pub(super) static CRDS: Crds = Crds::new();
}

impl Crds {
    pub(super) fn new() -> Crds {
        let crd = |kind| {
            let schema = crd_schema(kind);
            let cel = kube_cel::compile_schema(&schema);
            assert!(!cel.has_errors(), "the CRDs' CEL rules compile: {:?}", cel.compilation_errors());
            Crd { schema, cel }
        };
        // In `Kind` order.
        let kinds = Kind::ALL.map(crd);
        let mut context = Context::default().with_all();
        context.add_function("size", size);
        Crds { kinds, context, patterns: RefCell::default() }
    }
}

/// CEL's `size()`, counting a string's code points as the CEL specification and the apiserver
/// do (the cel crate counts its bytes, which would cut a key of accented letters elsewhere).
fn size(ftx: &FunctionContext, This(this): This<cel::Value>) -> cel::ResolveResult {
    match this {
        cel::Value::String(s) => Ok(cel::Value::Int(s.chars().count() as i64)),
        other => cel::functions::size(ftx, This(other)).map(cel::Value::Int),
    }
}

/// The `openAPIV3Schema` of the CRD of `kind`, as JSON.
pub fn crd_schema(kind: Kind) -> Value {
    let crd = match kind {
        Kind::SandboxProvider => SandboxProvider::crd(),
        Kind::SandboxLease => SandboxLease::crd(),
    };
    let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema.expect("the derived CRDs have a schema")).expect("serializes")
}

impl Crds {
    pub(super) fn matches(&self, pattern: &str, s: &str) -> bool {
        let mut patterns = self.patterns.borrow_mut();
        if !patterns.contains_key(pattern) {
            let re = regex::Regex::new(pattern).expect("the CRDs' patterns compile");
            patterns.insert(pattern.to_string(), re);
        }
        patterns[pattern].is_match(s)
    }
}
