//! Both layers' verdict on one object, as the cluster would answer a create of it now
//! (docs/contract.md, "Resources and who enforces what"): the CRD's (its structural schema and CEL
//! rules, [`crate::schema`]) and, only when the CRD admits the object, the webhook's
//! ([`crate::validation`]), because the apiserver asks the webhook only then. One function for
//! both callers: `sandcap validate` prints its answer, and the controllers publish it on every
//! stored object (the `Valid` condition), so the two never disagree.
//!
//! Nothing is ratcheted: there is no stored object to compare with, so every problem counts,
//! also those an UPDATE of the object would only warn about.

use serde_json::Value;

use crate::schema::{self, Rejection};
use crate::text;
use crate::validation::{self, Verdict};

pub use crate::schema::Server;
pub use crate::validation::{MAX_MESSAGE, Options};

/// The kind of problem the CRD's errors are, when they are bounded as the webhook's problems are.
const CRD_ERRORS: &str = "CRD errors";

/// What the cluster would answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgment {
    /// The CRD refuses the object, so the webhook is never asked.
    Refused(Rejection),
    /// The CRD admits the object; the webhook's verdict (an admission when it has no problems).
    Reviewed(Verdict),
}

/// Judges `object` as a create: the CRD first, then, if it admits the object, the webhook with
/// the operator's `options`. `server` chooses the apiserver's message forms.
pub fn judge(object: &Value, options: &Options, server: Server) -> Judgment {
    match schema::check(object, None, server, options.contract) {
        Err(rejection) => Judgment::Refused(rejection),
        Ok(()) => Judgment::Reviewed(validation::review(object, None, options)),
    }
}

impl Judgment {
    pub fn allowed(&self) -> bool {
        matches!(self, Judgment::Reviewed(verdict) if verdict.allowed())
    }

    /// What `kubectl apply` prints of a denial: the apiserver's message, every error in full as
    /// the apiserver writes it, or the webhook's. Empty when allowed.
    pub fn message(&self) -> String {
        match self {
            Judgment::Refused(rejection) => rejection.message(),
            Judgment::Reviewed(verdict) => verdict.message(),
        }
    }

    /// The webhook's warnings (the CRD gives none).
    pub fn warnings(&self) -> &[String] {
        match self {
            Judgment::Refused(_) => &[],
            Judgment::Reviewed(verdict) => &verdict.warnings,
        }
    }

    /// Which layer would refuse the object and its problems, bounded ([`MAX_MESSAGE`]): what the
    /// `Valid` condition says and what a refused object's explanations quote. `None` when allowed.
    pub fn refusal(&self) -> Option<String> {
        if self.allowed() {
            return None;
        }
        let layer = match self {
            Judgment::Refused(_) => "the CRD",
            Judgment::Reviewed(_) => "the webhook",
        };
        let message = format!("{layer} would refuse it today: {}", self.problems().message());
        Some(text::clip(&message, MAX_MESSAGE))
    }

    /// The problems, bounded as the webhook's denials are whatever the object holds: the CRD's
    /// errors count as one more kind of problem (`CRD errors`), at most
    /// [`validation::MAX_PER_KIND`] of them listed and the rest counted. No warnings.
    pub fn problems(&self) -> Verdict {
        match self {
            Judgment::Refused(rejection) => {
                let mut verdict = Verdict::default();
                for error in &rejection.errors {
                    // Every error is `<path>: <type>: <detail>`.
                    let (path, detail) = error.split_once(": ").unwrap_or(("", error));
                    verdict.add(CRD_ERRORS, path, detail);
                }
                verdict
            }
            Judgment::Reviewed(verdict) => Verdict { warnings: Vec::new(), ..verdict.clone() },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::MAX_PER_KIND;

    fn lease(spec: Value) -> Value {
        json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease", "metadata": {"name": "l"}, "spec": spec})
    }

    const REF: fn() -> Value = || json!({"name": "p", "driverKey": "k"});

    #[test]
    fn the_webhook_is_asked_only_when_the_crd_admits_the_object() {
        let fine = judge(&lease(json!({"providerRef": REF()})), &Options::default(), Server::default());
        assert!(fine.allowed() && fine.message().is_empty(), "{fine:?}");
        let typo =
            judge(&lease(json!({"providerRef": REF(), "bakend": "job"})), &Options::default(), Server::default());
        assert!(matches!(&typo, Judgment::Reviewed(v) if !v.allowed()), "{typo:?}");
        assert!(typo.message().starts_with("spec.bakend: unknown field"), "{}", typo.message());
        // A CRD error and a typo: only the CRD speaks.
        let both = lease(json!({"providerRef": REF(), "bakend": "job", "policy": "Reuse"}));
        let refused = judge(&both, &Options::default(), Server::default());
        assert!(matches!(refused, Judgment::Refused(_)), "{refused:?}");
        let message = refused.message();
        assert!(
            message.starts_with("SandboxLease.sandcap.dev \"l\" is invalid: [spec.policy: Unsupported"),
            "{message}"
        );
        assert!(!message.contains("bakend"), "{message}");
    }

    #[test]
    fn the_crds_errors_are_bounded_as_the_webhooks_problems_are() {
        let errors: Vec<String> =
            (0..20).map(|i| format!("spec.x{i}: Too long: may not be more than 1 bytes")).collect();
        let judgment = Judgment::Refused(Rejection { kind: "SandboxLease".into(), name: "l".into(), errors });
        let problems = judgment.problems();
        assert_eq!(problems.problems.len(), MAX_PER_KIND);
        assert_eq!(problems.problems[0].to_string(), "spec.x0: Too long: may not be more than 1 bytes");
        assert!(problems.message().ends_with("; and 12 more CRD errors"), "{}", problems.message());
        assert_eq!(problems.problem_count(), 20);
    }
}
