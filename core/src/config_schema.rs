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
//! Compiled schemas are remembered process-wide (the apiserver sends the same provider again and
//! again, every lease of a driver checks its config against the same schema, and compiling costs
//! more than every admission rule together), in a cache bounded in bytes that holds only schemas
//! within budget.

use std::collections::{BTreeSet, VecDeque};
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jsonschema::{FancyRegex, PatternOptions, Validator};
use regex_automata::meta;
use serde_json::Value;

use crate::text::push_key;

/// The limits one `configSchema` must fit. See docs/contract.md ("configSchema compile budget")
/// for why each is what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The schema's weight: one unit per JSON value plus the bytes of its strings and keys (about
    /// its size as compact JSON).
    pub max_weight: usize,
    /// Nesting of JSON values (each `properties` level is two).
    pub max_depth: usize,
    /// Distinct regular expressions (`pattern` values and `patternProperties` keys).
    pub max_patterns: usize,
    /// What one compiled pattern may take (the regex engine's NFA size limit), in bytes.
    pub pattern_bytes: usize,
    /// What the schema's compiled patterns may take together, in bytes.
    pub patterns_bytes: usize,
    /// The regex engine's lazy-DFA cache per pattern, in bytes (used when matching).
    pub pattern_cache_bytes: usize,
    /// Backtracking steps per match (patterns with look-around or backreferences).
    pub backtrack_steps: usize,
    /// Compiling the schema's patterns and the schema itself.
    pub deadline: Duration,
}

/// The one budget of the webhook, the controller and the CLI.
pub const BUDGET: Budget = Budget {
    max_weight: 128 * 1024,
    max_depth: 64,
    max_patterns: 64,
    pattern_bytes: 4 * 1024 * 1024,
    patterns_bytes: 8 * 1024 * 1024,
    pattern_cache_bytes: 256 * 1024,
    backtrack_steps: 1_000_000,
    deadline: Duration::from_secs(1),
};

/// The limit a schema broke, with what was found where it can be told.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Limit {
    #[error("it weighs more than {max} bytes")]
    Weight { max: usize },
    #[error("it nests deeper than {max} levels")]
    Depth { max: usize },
    #[error("it has {found} distinct patterns, more than {max}")]
    Patterns { found: usize, max: usize },
    #[error("the pattern compiles to more than {max} bytes")]
    PatternSize { max: usize },
    #[error("its patterns compile to more than {max} bytes together")]
    PatternsSize { max: usize },
    #[error("compiling it takes longer than {}", humantime::format_duration(*.max))]
    Deadline { max: Duration },
}

/// Why a `configSchema` was not compiled. `at` is the path inside the schema (`.properties.a.pattern`,
/// empty for the schema as a whole), to follow the schema's own field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaError {
    OverBudget { at: String, limit: Limit },
    Invalid { at: String, message: String },
}

impl SchemaError {
    pub fn at(&self) -> &str {
        match self {
            SchemaError::OverBudget { at, .. } | SchemaError::Invalid { at, .. } => at,
        }
    }

    /// The problem without its path.
    pub fn problem(&self) -> String {
        match self {
            SchemaError::OverBudget { limit, .. } => format!("exceeds the compile budget: {limit}"),
            SchemaError::Invalid { message, .. } => format!("is not a valid JSON Schema: {message}"),
        }
    }
}

impl fmt::Display for SchemaError {
    /// `configSchema<at>: <problem>`, the form status messages use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configSchema{}: {}", self.at(), self.problem())
    }
}

impl std::error::Error for SchemaError {}

/// A keyword's location in `schema` (a JSON Pointer, as a validation error's `schema_path`) in
/// the form of [`SchemaError::at`] (`.properties.token.type`): a segment is an index where the
/// schema holds a list, else a key. Every segment comes from the schema, never from the instance
/// that failed it.
pub fn keyword_path(schema: &Value, pointer: &str) -> String {
    let mut path = String::new();
    let mut at = Some(schema);
    for segment in pointer.split('/').skip(1) {
        let key = segment.replace("~1", "/").replace("~0", "~");
        at = match (at, key.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(i)) => {
                let _ = write!(path, "[{i}]");
                items.get(i)
            }
            (at, _) => {
                push_key(&mut path, &key);
                at.and_then(|v| v.get(&key))
            }
        };
    }
    path
}

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
    if let Some(known) = cache().get(schema) {
        return known;
    }
    // One compile at a time in the whole process: what compiling may take in memory is then one
    // schema's worth, however many reviews and reconciles ask at once. Waiting counts against the
    // deadline. The schema may have been compiled meanwhile.
    let _compiling = COMPILING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = cache().get(schema) {
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
            (Ok(validator), pattern_bytes + patterns * budget.pattern_cache_bytes + held_copy(weight))
        }
        // Time depends on the machine's load and, with a shared deadline, on the other schemas of
        // the object. Within the other limits a schema compiles well within the deadline on an
        // idle core (8 MiB of patterns in about a third of it), so a refusal for time is not the
        // schema's own verdict: it is not remembered.
        Err(e @ SchemaError::OverBudget { limit: Limit::Deadline { .. }, .. }) => return Err(e),
        // A refusal keeps only the schema (within the weight limit) and its message, so that a
        // stored hostile schema costs its compile once, not once per lease.
        Err(e) => (Err(e), held_copy(weight)),
    };
    cache().insert(schema, held, result.clone());
    result
}

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

/// Whether [`compile`] would answer `schema` from the cache, compiling nothing: a caller on an
/// async worker may then call it there. An entry evicted in between costs one compile, within
/// the budget all the same.
pub fn is_cached(schema: &Value) -> bool {
    cache().entries.iter().any(|(s, _, _)| s == schema)
}

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    // A panic while holding the lock cannot leave the cache inconsistent for a reader: every
    // change is a whole push or pop.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

fn check_deadline(budget: &Budget, deadline: Instant) -> Result<(), SchemaError> {
    if Instant::now() > deadline {
        return Err(SchemaError::OverBudget { at: String::new(), limit: Limit::Deadline { max: budget.deadline } });
    }
    Ok(())
}

fn pattern_options(budget: &Budget) -> PatternOptions<FancyRegex> {
    PatternOptions::fancy_regex()
        .size_limit(budget.pattern_bytes)
        .dfa_size_limit(budget.pattern_cache_bytes)
        .backtrack_limit(budget.backtrack_steps)
}

/// What compiling one pattern found.
enum PatternCheck {
    /// It compiles within the limits; what it takes, in bytes.
    Fits(usize),
    Over(Limit),
    Invalid(String),
}

/// Compiles one pattern as `jsonschema` will (its ECMA-262 translation, then the regex engine
/// with the budget's limits) and measures it. `left` is what the schema's patterns may still
/// take. A pattern that needs backtracking (look-around, backreferences) cannot be measured:
/// it is compiled by fancy-regex within the same limits and charged [`UNMEASURED_PATTERN`].
fn check_pattern(pattern: &str, budget: &Budget, left: usize) -> PatternCheck {
    let Ok(translated) = jsonschema_regex::to_rust_regex(pattern) else {
        return PatternCheck::Invalid("the pattern is not an ECMA-262 regular expression".into());
    };
    let limit = budget.pattern_bytes.min(left);
    let over = || {
        if limit < budget.pattern_bytes {
            Limit::PatternsSize { max: budget.patterns_bytes }
        } else {
            Limit::PatternSize { max: budget.pattern_bytes }
        }
    };
    let config = meta::Config::new().nfa_size_limit(Some(limit)).hybrid_cache_capacity(budget.pattern_cache_bytes);
    match meta::Builder::new().configure(config).build(&translated) {
        Ok(regex) => return PatternCheck::Fits(regex.memory_usage()),
        Err(e) if e.size_limit().is_some() => return PatternCheck::Over(over()),
        // Not a regular language: fancy-regex decides.
        Err(_) => {}
    }
    let built = fancy_regex::RegexBuilder::new(&translated)
        .delegate_size_limit(limit)
        .delegate_dfa_size_limit(budget.pattern_cache_bytes)
        .backtrack_limit(budget.backtrack_steps)
        .build();
    match built {
        Ok(_) if UNMEASURED_PATTERN > left => PatternCheck::Over(Limit::PatternsSize { max: budget.patterns_bytes }),
        Ok(_) => PatternCheck::Fits(UNMEASURED_PATTERN),
        Err(fancy_regex::Error::CompileError(e)) if matches!(e.as_ref(), fancy_regex::CompileError::InnerError(inner) if inner.size_limit().is_some()) => {
            PatternCheck::Over(over())
        }
        Err(_) => PatternCheck::Invalid("the pattern is not a regular expression this engine compiles".into()),
    }
}

/// What a pattern that cannot be measured is charged: four times what the longest of the
/// common honest patterns takes (`^\p{L}{1,63}$`, about 2.7 MB, is the exception).
const UNMEASURED_PATTERN: usize = 256 * 1024;

/// Weighs the schema and measures its depth, stopping at the first limit; returns the weight.
fn measure(schema: &Value, budget: &Budget) -> Result<usize, SchemaError> {
    fn spend(left: &mut usize, n: usize, budget: &Budget) -> Result<(), Limit> {
        *left = left.checked_sub(n).ok_or(Limit::Weight { max: budget.max_weight })?;
        Ok(())
    }
    fn walk(value: &Value, depth: usize, left: &mut usize, budget: &Budget) -> Result<(), Limit> {
        if depth > budget.max_depth {
            return Err(Limit::Depth { max: budget.max_depth });
        }
        spend(left, 1, budget)?;
        match value {
            Value::String(s) => spend(left, s.len(), budget),
            Value::Array(items) => items.iter().try_for_each(|item| walk(item, depth + 1, left, budget)),
            Value::Object(map) => map.iter().try_for_each(|(key, child)| {
                spend(left, key.len(), budget)?;
                walk(child, depth + 1, left, budget)
            }),
            _ => Ok(()),
        }
    }
    let mut left = budget.max_weight;
    walk(schema, 1, &mut left, budget).map_err(|limit| SchemaError::OverBudget { at: String::new(), limit })?;
    Ok(budget.max_weight - left)
}

/// Every distinct pattern with the path of its first use, in document order. Found wherever a
/// `pattern` holds a string or a `patternProperties` holds an object, which includes a few places
/// `jsonschema` would not compile (inside `const`, say): counting those is the safe side.
fn patterns(schema: &Value, budget: &Budget) -> Result<Vec<(String, String)>, SchemaError> {
    fn walk<'v>(value: &'v Value, path: &mut String, seen: &mut BTreeSet<&'v str>, found: &mut Vec<(String, String)>) {
        let len = path.len();
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    push_key(path, key);
                    match (key.as_str(), child) {
                        ("pattern", Value::String(p)) if seen.insert(p) => found.push((path.clone(), p.clone())),
                        ("patternProperties", Value::Object(patterns)) => {
                            for p in patterns.keys() {
                                if seen.insert(p) {
                                    let at = path.len();
                                    push_key(path, p);
                                    found.push((path.clone(), p.clone()));
                                    path.truncate(at);
                                }
                            }
                        }
                        _ => {}
                    }
                    walk(child, path, seen, found);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let _ = write!(path, "[{i}]");
                    walk(item, path, seen, found);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
    let (mut seen, mut found) = (BTreeSet::new(), Vec::new());
    walk(schema, &mut String::new(), &mut seen, &mut found);
    if found.len() > budget.max_patterns {
        let limit = Limit::Patterns { found: found.len(), max: budget.max_patterns };
        return Err(SchemaError::OverBudget { at: String::new(), limit });
    }
    Ok(found)
}

type Compiled = Result<Arc<Validator>, SchemaError>;

/// Compiled schemas and refusals, most recently used first, bounded by the sum of their weights.
struct Cache {
    entries: VecDeque<(Value, usize, Compiled)>,
    held: usize,
}

/// What the cache may hold: a few dozen honest schemas, and never more than a small part of the
/// chart's memory limit (docs/webhook.md, "Memory").
const CACHE_BYTES: usize = 32 * 1024 * 1024;
/// Schemas the cache holds at most, whatever they weigh: every lookup compares against them.
const CACHE_ENTRIES: usize = 256;

/// What keeping a copy of a schema of `weight` takes: a parsed JSON value is several times its
/// text (found by fuzzing: weighed as its text, a cache of small refused schemas grew past the
/// budget), plus the entry itself.
fn held_copy(weight: usize) -> usize {
    weight * 16 + 1024
}

static CACHE: Mutex<Cache> = Mutex::new(Cache { entries: VecDeque::new(), held: 0 });

static COMPILING: Mutex<()> = Mutex::new(());

impl Cache {
    /// Searched by comparing schemas, which costs less than writing one out as a key; the schemas
    /// held are few and small.
    fn get(&mut self, schema: &Value) -> Option<Compiled> {
        let i = self.entries.iter().position(|(s, _, _)| s == schema)?;
        if i == 0 {
            return Some(self.entries[0].2.clone());
        }
        let entry = self.entries.remove(i)?;
        let compiled = entry.2.clone();
        self.entries.push_front(entry);
        Some(compiled)
    }

    fn insert(&mut self, schema: &Value, weight: usize, compiled: Compiled) {
        if weight > CACHE_BYTES || self.entries.iter().any(|(s, _, _)| s == schema) {
            return;
        }
        while self.held + weight > CACHE_BYTES || self.entries.len() >= CACHE_ENTRIES {
            let Some((_, evicted, _)) = self.entries.pop_back() else { break };
            self.held -= evicted;
        }
        self.held += weight;
        self.entries.push_front((schema.clone(), weight, compiled));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing: thousands of small refused schemas must not grow the cache past its
    /// bounds, counted in entries and in bytes as a parsed copy weighs.
    #[test]
    fn a_schema_is_cached_once_compiled_or_refused() {
        for schema in [serde_json::json!({"title": "is_cached"}), serde_json::json!({"type": "is-cached-refused"})] {
            assert!(!is_cached(&schema));
            // Another test may fill the cache at the same time and evict it at once: try again.
            let cached = (0..10).any(|_| {
                let _ = compile(&schema, Deadline::Own);
                is_cached(&schema)
            });
            assert!(cached, "{schema}");
        }
    }

    #[test]
    fn many_small_schemas_stay_within_the_cache_bounds() {
        for i in 0..2 * CACHE_ENTRIES {
            let _ = compile(&serde_json::json!({"type": format!("no-such-type-{i}")}), Deadline::Own);
        }
        let cache = cache();
        assert!(cache.entries.len() <= CACHE_ENTRIES, "{} entries", cache.entries.len());
        assert!(cache.held <= CACHE_BYTES);
        assert!(cache.entries.iter().all(|(_, held, _)| *held >= 1024));
    }
}
