//! The CRDs the apiserver would hold, with their CEL rules compiled, once per thread.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

use kube_cel::cel::extractors::This;
use kube_cel::cel::{self, Context, FunctionContext};
use kube_cel::{CompiledSchema, KubeCelExt};
use serde_json::Value;

use crate::api::crd_schema;
use crate::versions::ContractVersion;
use crate::vocabulary::Kind;

/// A CRD's schema as JSON and its compiled CEL rules.
pub(super) struct Crd {
    pub(super) schema: Value,
    pub(super) cel: CompiledSchema,
}

/// The CRDs of each contract version, built once per thread (the compiled programs are not
/// `Sync`) and only for a version and kind the thread judges: a process enforces one version, and
/// the controllers' audit judges each kind on a thread of its own.
pub(super) struct Crds {
    /// By version, then kind, in `Kind` order.
    versions: [[OnceCell<Crd>; 2]; 2],
    pub(super) context: Context<'static>,
    pub(super) patterns: RefCell<HashMap<String, regex::Regex>>,
}

thread_local! {
    pub(super) static CRDS: Crds = Crds::new();
}

impl Crds {
    pub(super) fn new() -> Crds {
        let mut context = Context::default().with_all();
        context.add_function("size", size);
        Crds { versions: Default::default(), context, patterns: RefCell::default() }
    }

    /// The CRD of `kind` under `version`, compiled on first use.
    pub(super) fn crd(&self, version: ContractVersion, kind: Kind) -> &Crd {
        self.versions[version as usize][kind as usize].get_or_init(|| {
            let schema = crd_schema(kind, version);
            let cel = kube_cel::compile_schema(&schema);
            assert!(!cel.has_errors(), "the CRDs' CEL rules compile: {:?}", cel.compilation_errors());
            Crd { schema, cel }
        })
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
