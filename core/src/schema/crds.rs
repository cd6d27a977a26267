//! The CRDs the apiserver would hold, with their CEL rules compiled, once per thread.

use std::cell::RefCell;
use std::collections::HashMap;

use kube_cel::cel::extractors::This;
use kube_cel::cel::{self, Context, FunctionContext};
use kube_cel::{CompiledSchema, KubeCelExt};
use serde_json::Value;

use crate::api::crd_schema;
use crate::versions::ContractVersion;
use crate::vocabulary::Kind;

/// The CRDs' schemas as JSON and their compiled CEL rules, built once per thread (the compiled
/// programs are not `Sync`), indexed by [`ContractVersion`], then [`Kind`].
pub(super) struct Crd {
    pub(super) schema: Value,
    pub(super) cel: CompiledSchema,
}

pub(super) struct Crds {
    pub(super) kinds: [[Crd; 2]; 2],
    pub(super) context: Context<'static>,
    pub(super) patterns: RefCell<HashMap<String, regex::Regex>>,
}

thread_local! {
    pub(super) static CRDS: Crds = Crds::new();
}

impl Crds {
    pub(super) fn new() -> Crds {
        let crd = |version, kind| {
            let schema = crd_schema(kind, version);
            let cel = kube_cel::compile_schema(&schema);
            assert!(!cel.has_errors(), "the CRDs' CEL rules compile: {:?}", cel.compilation_errors());
            Crd { schema, cel }
        };
        // In `ContractVersion`, then `Kind` order.
        let kinds = ContractVersion::ALL.map(|version| Kind::ALL.map(|kind| crd(version, kind)));
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
