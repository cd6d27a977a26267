//! The limits a `configSchema` must fit ([`Budget`], the one [`BUDGET`]) and the [`Limit`] a
//! refused schema broke.

use std::time::Duration;

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
