//! A driver's `configSchema`, compiled within one budget. The webhook (to accept a schema), the
//! lease controller (to check a lease's config) and the CLI all compile through [`compile`], so a
//! schema the webhook admitted is one the controller can afford, and a schema stored without the
//! webhook (while it was unreachable, or before the budget existed) costs the controller no more
//! than the budget either: it is refused with the limit it broke, never compiled past it.
//!
//! What costs memory and time when a JSON Schema compiles is its regular expressions (`pattern`,
//! the keys of `patternProperties`): a counted repetition of a Unicode class (`\w{30000}`, or
//! `\p{L}{5000}`) compiles to hundreds of megabytes. Each distinct pattern is therefore compiled
//! first on its own, with the regex engine's own size limits, in a fixed order, checking the
//! deadline between patterns; only a schema whose every pattern fits is handed to `jsonschema`,
//! with the same limits. The walk that finds the patterns also weighs the schema and measures its
//! depth, and gives up at the first limit, so a hostile schema costs a walk of its own bytes.
//!
//! This file holds the order of the steps; `budget.rs` the limits, `walk.rs` the walks over the
//! schema, `pattern.rs` one pattern's compile, `cache.rs` the compiled schemas remembered
//! process-wide, `error.rs` what a refusal says and where.

mod budget;
mod cache;
mod error;
mod pattern;
mod walk;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use jsonschema::Validator;
use serde_json::Value;

pub use budget::{BUDGET, Budget, Limit};
pub use cache::is_cached;
pub use error::{SchemaError, keyword_path};
use pattern::{PatternCheck, check_pattern, pattern_options};
use walk::{measure, patterns};

/// When compiling must have finished.
#[derive(Clone, Copy, Debug)]
pub enum Deadline {
    /// The whole of [`Budget::deadline`], from when compiling starts.
    Own,
    /// A deadline shared with other work: the webhook gives every schema of one object the same.
    Shared(Instant),
}

/// Compiles `schema` within [`BUDGET`], from the cache when it was compiled before.
pub fn compile(schema: &Value, deadline: Deadline) -> Result<Arc<Validator>, SchemaError> {
    compile_within(schema, &BUDGET, deadline)
}

/// [`compile`] with another budget (tests and the fuzz target use small ones).
pub fn compile_within(schema: &Value, budget: &Budget, deadline: Deadline) -> Result<Arc<Validator>, SchemaError> {
    let weight = measure(schema, budget)?;
    if let Some(known) = cache::cache().get(schema) {
        return known;
    }
    // One compile at a time in the whole process: what compiling may take in memory is then one
    // schema's worth, however many reviews and reconciles ask at once. Waiting counts against the
    // deadline. The schema may have been compiled meanwhile.
    let _compiling = COMPILING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = cache::cache().get(schema) {
        return known;
    }
    let deadline = match deadline {
        Deadline::Own => Instant::now() + budget.deadline,
        Deadline::Shared(at) => at,
    };
    let (result, held) = match compile_measured(schema, budget, deadline) {
        // What the compiled schema holds: its patterns as measured, the matching cache each may
        // grow, and its own size several times over (compiled keywords, names, locations, and the
        // copy the cache keeps to compare).
        Ok((validator, (pattern_bytes, patterns))) => {
            let held = pattern_bytes + patterns * budget.pattern_cache_bytes + cache::held_copy(weight);
            (Ok(validator), held)
        }
        // Time depends on the machine's load and, with a shared deadline, on the other schemas of
        // the object. Within the other limits a schema compiles well within the deadline on an
        // idle core (8 MiB of patterns in about a third of it), so a refusal for time is not the
        // schema's own verdict: it is not remembered.
        Err(e @ SchemaError::OverBudget { limit: Limit::Deadline { .. }, .. }) => return Err(e),
        // A refusal keeps only the schema (within the weight limit) and its message, so that a
        // stored hostile schema costs its compile once, not once per lease.
        Err(e) => (Err(e), cache::held_copy(weight)),
    };
    cache::cache().insert(schema, held, result.clone());
    result
}

static COMPILING: Mutex<()> = Mutex::new(());

/// Compiles a schema that passed [`measure`]; returns it with what its patterns take and how many
/// there are.
fn compile_measured(
    schema: &Value,
    budget: &Budget,
    deadline: Instant,
) -> Result<(Arc<Validator>, (usize, usize)), SchemaError> {
    let patterns = patterns(schema, budget)?;
    let mut left = budget.patterns_bytes;
    for (at, pattern) in &patterns {
        check_deadline(budget, deadline)?;
        match check_pattern(pattern, budget, left) {
            PatternCheck::Fits(bytes) => left = left.saturating_sub(bytes),
            PatternCheck::Over(limit) => return Err(SchemaError::OverBudget { at: at.clone(), limit }),
            PatternCheck::Invalid(message) => return Err(SchemaError::Invalid { at: at.clone(), message }),
        }
    }
    check_deadline(budget, deadline)?;
    let validator = jsonschema::options()
        .with_pattern_options(pattern_options(budget))
        .build(schema)
        .map(Arc::new)
        .map_err(|e| SchemaError::Invalid { at: String::new(), message: e.to_string() })?;
    check_deadline(budget, deadline)?;
    Ok((validator, (budget.patterns_bytes - left, patterns.len())))
}

fn check_deadline(budget: &Budget, deadline: Instant) -> Result<(), SchemaError> {
    if Instant::now() > deadline {
        return Err(SchemaError::OverBudget { at: String::new(), limit: Limit::Deadline { max: budget.deadline } });
    }
    Ok(())
}
