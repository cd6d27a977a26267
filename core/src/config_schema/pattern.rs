//! One regular expression compiled within the budget, on its own, before the schema that holds it
//! ([`check_pattern`]), and the limits `jsonschema` then compiles and matches it with
//! ([`pattern_options`]).

use jsonschema::{FancyRegex, PatternOptions};
use regex_automata::meta;

use super::{Budget, Limit};

pub(super) fn pattern_options(budget: &Budget) -> PatternOptions<FancyRegex> {
    PatternOptions::fancy_regex()
        .size_limit(budget.pattern_bytes)
        .dfa_size_limit(budget.pattern_cache_bytes)
        .backtrack_limit(budget.backtrack_steps)
}

/// What compiling one pattern found.
pub(super) enum PatternCheck {
    /// It compiles within the limits; what it takes, in bytes.
    Fits(usize),
    Over(Limit),
    Invalid(String),
}

/// Compiles one pattern as `jsonschema` will (its ECMA-262 translation, then the regex engine
/// with the budget's limits) and measures it. `left` is what the schema's patterns may still
/// take. A pattern that needs backtracking (look-around, backreferences) cannot be measured:
/// it is compiled by fancy-regex within the same limits and charged [`UNMEASURED_PATTERN`].
pub(super) fn check_pattern(pattern: &str, budget: &Budget, left: usize) -> PatternCheck {
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
