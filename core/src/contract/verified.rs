//! What the live worker verified, and how it is read back from a provider's status.

use std::collections::BTreeSet;

use crate::api::SandboxProvider;

/// What the live worker verified: its methods, or why nothing is verified (the probe failed,
/// never ran, listed none, or asked another worker than the one `spec.worker` names now).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified(Result<BTreeSet<String>, String>);

/// Why nothing is verified, when no more is known.
const VERIFIED_NOTHING: &str = "the worker verified no methods (probe failed, answered ok: false, or listed none)";

impl Default for Verified {
    fn default() -> Self {
        Verified::nothing()
    }
}

impl Verified {
    pub fn nothing() -> Self {
        Verified(Err(VERIFIED_NOTHING.into()))
    }

    /// Nothing is verified, for the reason given (the explanation's message).
    pub fn nothing_because(why: String) -> Self {
        Verified(Err(why))
    }

    /// An empty list verifies nothing, exactly like a failed probe.
    pub fn methods<I, S>(methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let set: BTreeSet<String> = methods.into_iter().map(Into::into).collect();
        if set.is_empty() { Verified::nothing() } else { Verified(Ok(set)) }
    }

    pub fn has(&self, method: &str) -> bool {
        self.0.as_ref().is_ok_and(|s| s.contains(method))
    }

    pub fn is_nothing(&self) -> bool {
        self.0.is_err()
    }

    /// Why nothing is verified; `None` when something is.
    pub fn why_nothing(&self) -> Option<&str> {
        self.0.as_ref().err().map(String::as_str)
    }
}

/// The methods a provider's status says its worker verified (what `resolve`, the lease
/// controller and `explain` use when they do not probe themselves): nothing unless the probe
/// succeeded and asked the worker that `spec.worker` names now. A status from before the
/// worker's address was recorded counts while it was written for the provider's current
/// generation.
pub fn verified_from_status(provider: &SandboxProvider) -> Verified {
    let status = provider.status.as_ref();
    let Some(worker) = status.and_then(|s| s.worker.as_ref()) else {
        return Verified::nothing_because("no probe of the worker yet".into());
    };
    let named_now = provider.spec.worker.address();
    let same_worker = match &worker.address {
        Some(probed) => named_now.as_ref() == Some(probed),
        None => status.and_then(|s| s.observed_generation) == provider.metadata.generation,
    };
    if !same_worker {
        let probed = worker.address.as_deref().unwrap_or("an earlier spec.worker");
        let now = named_now.as_deref().unwrap_or("(no address)");
        return Verified::nothing_because(format!(
            "the last probe asked {probed}, not the worker spec.worker names now ({now}); nothing is verified until \
             it answers"
        ));
    }
    verified_from_worker(Some(worker))
}

/// What a published worker status verifies: its methods only if the probe succeeded.
pub fn verified_from_worker(worker: Option<&crate::api::WorkerStatus>) -> Verified {
    match worker {
        Some(w) if w.probe == crate::api::ProbeResult::Succeeded => {
            Verified::methods(w.supported_methods.iter().cloned())
        }
        _ => Verified::nothing(),
    }
}
