//! The walks over a schema before anything is compiled: its weight and depth ([`measure`]) and
//! its distinct patterns ([`patterns`]), each giving up at the first limit, so that a hostile
//! schema costs a walk of its own bytes.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use super::{Budget, Limit, SchemaError};
use crate::text::push_key;

/// Weighs the schema and measures its depth, stopping at the first limit; returns the weight.
pub(super) fn measure(schema: &Value, budget: &Budget) -> Result<usize, SchemaError> {
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
pub(super) fn patterns(schema: &Value, budget: &Budget) -> Result<Vec<(String, String)>, SchemaError> {
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
