//! Compiled schemas remembered process-wide: the apiserver sends the same provider again and
//! again, every lease of a driver checks its config against the same schema, and compiling costs
//! more than every admission rule together. The cache is bounded in bytes and holds only schemas
//! within budget, compiled or refused.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use jsonschema::Validator;
use serde_json::Value;

use super::SchemaError;

pub(super) type Compiled = Result<Arc<Validator>, SchemaError>;

/// Whether [`compile`](super::compile) would answer `schema` from the cache, compiling nothing: a
/// caller on an async worker may then call it there. An entry evicted in between costs one
/// compile, within the budget all the same.
pub fn is_cached(schema: &Value) -> bool {
    cache().entries.iter().any(|(s, _, _)| s == schema)
}

pub(super) fn cache() -> MutexGuard<'static, Cache> {
    // A panic while holding the lock cannot leave the cache inconsistent for a reader: every
    // change is a whole push or pop.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Compiled schemas and refusals, most recently used first, bounded by the sum of their weights.
pub(super) struct Cache {
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
pub(super) fn held_copy(weight: usize) -> usize {
    weight * 16 + 1024
}

static CACHE: Mutex<Cache> = Mutex::new(Cache { entries: VecDeque::new(), held: 0 });

impl Cache {
    /// Searched by comparing schemas, which costs less than writing one out as a key; the schemas
    /// held are few and small.
    pub(super) fn get(&mut self, schema: &Value) -> Option<Compiled> {
        let i = self.entries.iter().position(|(s, _, _)| s == schema)?;
        if i == 0 {
            return Some(self.entries[0].2.clone());
        }
        let entry = self.entries.remove(i)?;
        let compiled = entry.2.clone();
        self.entries.push_front(entry);
        Some(compiled)
    }

    pub(super) fn insert(&mut self, schema: &Value, weight: usize, compiled: Compiled) {
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
    use crate::config_schema::{Deadline, compile};

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

    /// Found by fuzzing: thousands of small refused schemas must not grow the cache past its
    /// bounds, counted in entries and in bytes as a parsed copy weighs.
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
