//! The parsers of `run`'s flags whose values clap does not know: a duration within bounds, and
//! the namespaces whose Secrets leases may read (which `explain` takes too).

use std::convert::Infallible;
use std::time::Duration;

use crate::controller::SecretScope;

/// Why a duration flag's value is refused.
#[derive(Debug, thiserror::Error)]
pub enum DurationError {
    #[error(transparent)]
    NotADuration(#[from] humantime::DurationError),
    #[error("{value} is outside {} to {}", humantime::format_duration(*.min), humantime::format_duration(*.max))]
    OutOfRange { value: String, min: Duration, max: Duration },
}

/// A duration flag's parser that refuses values outside `min..=max` (a zero interval would be a
/// hot loop, a timeout of hours would keep a hung worker's grants).
pub(super) fn within(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, DurationError> + Clone + Send + Sync {
    move |value| {
        let duration = humantime::parse_duration(value)?;
        if duration < min || duration > max {
            return Err(DurationError::OutOfRange { value: value.to_string(), min, max });
        }
        Ok(duration)
    }
}

/// `--secret-namespaces`: `*` is every namespace; otherwise a comma-separated list (empty: none).
pub fn secret_scope(text: &str) -> Result<SecretScope, Infallible> {
    Ok(if text.trim() == "*" {
        SecretScope::All
    } else {
        SecretScope::Namespaces(text.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect())
    })
}
