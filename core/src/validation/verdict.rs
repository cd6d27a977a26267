//! The answer for one object, bounded whatever the object holds.

use std::fmt;

use crate::text;

/// Kubernetes refuses admission warnings longer than this, so ours stay below it.
pub const MAX_WARNING_LEN: usize = 120;

/// One problem: `<field path>: <problem>`. `kind` names the rule, in the plural form the
/// summary of omitted problems uses ("unknown fields").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
    pub kind: &'static str,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The answer for one object: allowed when there are no problems.
///
/// Bounded whatever the object holds: at most [`MAX_PER_KIND`] problems of each kind are kept
/// (every kind found is shown), the others only counted in `omitted`; at most [`MAX_WARNINGS`]
/// warnings. A denial of an object of 300,000 unknown keys is a few kilobytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub problems: Vec<Problem>,
    /// Problems found beyond [`MAX_PER_KIND`], by kind, in the order the kinds were first found.
    pub omitted: Vec<(&'static str, usize)>,
    pub warnings: Vec<String>,
}

/// Problems of one kind that a denial lists; more are counted.
pub const MAX_PER_KIND: usize = 8;
/// Warnings an answer carries; more are counted in a last warning.
pub const MAX_WARNINGS: usize = 16;
/// The longest problem text (a `configSchema`'s compile error can quote the schema).
const MAX_PROBLEM: usize = 512;
/// The longest denial message. A denial lists a bounded number of problems of each kind
/// ([`MAX_PER_KIND`]), which stays well below it; this is the last bound.
pub const MAX_MESSAGE: usize = 16 * 1024;

impl Verdict {
    pub fn allowed(&self) -> bool {
        self.problems.is_empty() && self.omitted.is_empty()
    }

    /// Problems found, listed or counted.
    pub fn problem_count(&self) -> usize {
        self.problems.len() + self.omitted.iter().map(|(_, n)| n).sum::<usize>()
    }

    /// The denial message of docs/contract.md: one `<path>: <problem>` per problem, joined by
    /// `; `, then `and <n> more <kind>` for each kind with problems omitted.
    pub fn message(&self) -> String {
        let listed = self.problems.iter().map(ToString::to_string);
        let omitted = self.omitted.iter().map(|(kind, n)| format!("and {n} more {kind}"));
        listed.chain(omitted).collect::<Vec<_>>().join("; ")
    }

    /// Adds a problem of `kind`: listed, cut to 512 bytes (`MAX_PROBLEM`), while fewer than
    /// [`MAX_PER_KIND`] of its kind are; counted after that. The path arrives as `Display` (often
    /// `format_args!`) and is written out only here: a review that finds nothing formats no path
    /// at all, and one that finds many formats only those it lists.
    pub fn add(&mut self, kind: &'static str, path: impl fmt::Display, message: impl AsRef<str>) {
        if !self.lists(kind) {
            return self.omit(kind);
        }
        let message = text::clip(message.as_ref(), MAX_PROBLEM);
        self.problems.push(Problem { path: path.to_string(), message, kind });
    }

    /// Whether another problem of `kind` would be listed rather than counted.
    pub(super) fn lists(&self, kind: &str) -> bool {
        self.problems.iter().filter(|p| p.kind == kind).count() < MAX_PER_KIND
    }

    pub(super) fn omit(&mut self, kind: &'static str) {
        match self.omitted.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.omitted.push((kind, 1)),
        }
    }

    /// Counts the warnings that did not fit in a last one.
    pub(super) fn finish_warnings(&mut self) {
        if self.warnings.len() > MAX_WARNINGS {
            self.warnings.truncate(MAX_WARNINGS - 1);
            self.warnings.push(format!("and more warnings (at most {MAX_WARNINGS} are shown)"));
        }
    }

    /// Keeps one warning more than is shown, to know that some did not fit.
    pub(super) fn warn(&mut self, warning: String) {
        if self.warnings.len() <= MAX_WARNINGS {
            self.warnings.push(truncate_warning(warning));
        }
    }
}

/// The apiserver drops warnings of 120 characters or more; a longer one keeps its start (which
/// names the field) and ends in an ellipsis, cut on a character boundary. Applied where warnings
/// are made, so the webhook and `sandcap validate` give the same text.
pub fn truncate_warning(warning: String) -> String {
    const ELLIPSIS: &str = "...";
    // Bytes bound characters from above, so counting bytes keeps every client's count in range.
    if warning.len() < MAX_WARNING_LEN {
        return warning;
    }
    format!("{}{ELLIPSIS}", text::prefix(&warning, MAX_WARNING_LEN - 1 - ELLIPSIS.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_cut_below_the_limit_on_a_char_boundary() {
        let short = "x".repeat(MAX_WARNING_LEN - 1);
        assert_eq!(truncate_warning(short.clone()), short);
        for filler in ["y", "é", "😀"] {
            let long = filler.repeat(200);
            let cut = truncate_warning(long);
            assert!(cut.len() < MAX_WARNING_LEN, "{} bytes", cut.len());
            assert!(cut.ends_with("..."));
        }
    }
}
