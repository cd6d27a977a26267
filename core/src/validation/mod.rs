//! The webhook's rules (docs/contract.md, "Resources and who enforces what": the webhook layer):
//! only what the apiserver cannot check from the CRD — `configSchema` compiles, worker URLs without
//! `--allow-worker-urls` or to refused addresses, unknown fields the schema keeps (so none is
//! pruned silently) — and the warnings. Everything the CRD can state is stated there
//! ([`crate::api`]) and nowhere here. One pure function over the raw JSON object: the webhook and
//! `sandcap validate` both call [`review`], so they can never disagree, and every problem is
//! reported at once with its Kubernetes field path.
//!
//! This file holds the review (the ratchet against the stored object) and what it reads of an
//! object; `rules.rs` the rules per kind, `fields.rs` the fields each object may have,
//! `verdict.rs` the bounded answer.

mod fields;
mod rules;
mod verdict;

use std::time::Instant;

use serde_json::Value;

use crate::addresses::WorkerPolicy;
use crate::config_schema;
pub use crate::decode::Shape;
use crate::versions::ContractVersion;
use rules::check;
pub use verdict::{MAX_MESSAGE, MAX_PER_KIND, MAX_WARNING_LEN, MAX_WARNINGS, Problem, Verdict, truncate_warning};

/// Operator settings that change what is admitted.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub workers: WorkerPolicy,
    /// The contract version the cluster enforces: its CRD is layer 1 ([`crate::judge`]).
    pub contract: ContractVersion,
}

/// Starts the warning for a problem that the stored object already has (see [`review`]).
pub const ALREADY_STORED: &str = "already stored, not blocking this update: ";

/// Reviews an object of either kind with the rules the apiserver cannot check (layer 2 of
/// docs/contract.md). The apiserver calls the webhook only for objects its CRD schema admitted, so
/// a part of the wrong shape here is skipped, not reported: layer 1 ([`crate::schema`]) names it.
///
/// On UPDATE `old` is the stored object, and the review ratchets, as the apiserver ratchets CRD
/// validation: a problem that `old` has too (the same problem at the same path) was admitted under
/// other rules or settings (an older sandcap, `--allow-worker-urls`, no webhook at all), and
/// refusing it now would block every update of the object, a label included, until someone fixes
/// it. It becomes a warning starting with [`ALREADY_STORED`]; only problems this update brings in
/// deny it.
///
/// Compiling the objects' `configSchema`s shares one deadline ([`config_schema::BUDGET`]), so a
/// review's time is bounded whatever the object holds.
pub fn review(object: &Value, old: Option<&Value>, options: &Options) -> Verdict {
    let deadline = Instant::now() + config_schema::BUDGET.deadline;
    let mut verdict = check(object, options, deadline);
    // Without a problem there is nothing to ratchet, and the stored object need not be reviewed.
    if let Some(old) = old.filter(|_| !verdict.allowed()) {
        let stored = check(old, options, deadline);
        let (kept, introduced): (Vec<Problem>, _) =
            verdict.problems.into_iter().partition(|p| stored.problems.contains(p));
        verdict.problems = introduced;
        // Omitted problems cannot be paired one by one: as many as the stored object has are
        // taken to be its own.
        let stored_omitted = |kind| stored.omitted.iter().find(|(k, _)| *k == kind).map_or(0, |(_, n)| *n);
        let (mut still, mut already) = (Vec::new(), Vec::new());
        for (kind, n) in verdict.omitted {
            match n.checked_sub(stored_omitted(kind)) {
                Some(0) | None => already.push(format!("and {n} more {kind}")),
                Some(_) => still.push((kind, n)),
            }
        }
        verdict.omitted = still;
        for p in kept.iter().map(ToString::to_string).chain(already) {
            verdict.warn(format!("{ALREADY_STORED}{p}"));
        }
    }
    verdict.finish_warnings();
    verdict
}

/// The object's kind and name for reporting (`<kind>/<name>`), whatever shape it has.
pub fn identify(object: &Value) -> (String, String) {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("(no kind)").to_string();
    let metadata = object.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .or_else(|| metadata.and_then(|m| m.get("generateName")))
        .and_then(Value::as_str)
        .unwrap_or("(no name)")
        .to_string();
    (kind, name)
}

/// What [`review`] and [`identify`] read of an object, and on UPDATE of the stored object too
/// (ratcheting reviews it by the same rules). The webhook builds only these parts: the rest (`status`, `metadata.managedFields`, the last-applied annotation) is often most of the
/// bytes, and reviewing the parts gives the verdict of reviewing the whole (a property test in
/// core/tests/properties.rs and the fuzz target hold the two to that).
pub const REVIEWED: Shape = Shape::Keys(&[
    ("kind", Shape::Whole),
    ("metadata", Shape::Keys(&[("name", Shape::Whole), ("generateName", Shape::Whole)])),
    ("spec", Shape::Whole),
]);

pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
