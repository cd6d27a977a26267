//! What the live worker verified, and how it is read back from a provider's status.

use std::collections::BTreeSet;

use crate::api::SandboxProvider;

/// What the live worker verified: the methods it advertised (a worker's own words: a method no key
/// needs verifies nothing, but still counts as an answer), or why nothing is verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified(Result<BTreeSet<String>, Unverified>);

/// Why nothing is verified; the message is the `WorkerNotVerified` explanation's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// The probe failed, answered `ok: false` or listed no methods, or no more is known.
    #[error("the worker verified no methods (probe failed, answered ok: false, or listed none)")]
    NoMethods,
    #[error("no probe of the worker yet")]
    NotProbed,
    /// The last probe asked another worker than the one `spec.worker` names now: its address
    /// (`None` when an earlier status did not record it) and the one named now (`None` when
    /// `spec.worker` makes none).
    #[error(
        "the last probe asked {}, not the worker spec.worker names now ({}); nothing is verified until it answers",
        .probed.as_deref().unwrap_or("an earlier spec.worker"),
        .now.as_deref().unwrap_or("(no address)")
    )]
    OtherWorker { probed: Option<String>, now: Option<String> },
    /// The worker says it is another plugin, or another version, than the provider names.
    #[error("{0}; nothing is verified")]
    OtherPlugin(super::identity::OtherPlugin),
}

impl Default for Verified {
    fn default() -> Self {
        Verified::nothing()
    }
}

impl Verified {
    pub fn nothing() -> Self {
        Verified(Err(Unverified::NoMethods))
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
    pub fn why_nothing(&self) -> Option<&Unverified> {
        self.0.as_ref().err()
    }
}

/// The methods a provider's status says its worker verified (what `resolve`, the lease
/// controller and `explain` use when they do not probe themselves): nothing unless the probe
/// succeeded and asked the worker that `spec.worker` names now. A status from before the
/// worker's address was recorded counts while it was written for the provider's current
/// generation. A worker that said it is another plugin (or version) verifies nothing.
pub fn verified_from_status(provider: &SandboxProvider) -> Verified {
    let status = provider.status.as_ref();
    let Some(worker) = status.and_then(|s| s.worker.as_ref()) else {
        return Verified(Err(Unverified::NotProbed));
    };
    let named_now = provider.spec.worker.address();
    let same_worker = match &worker.address {
        Some(probed) => named_now.as_ref() == Some(probed),
        None => status.and_then(|s| s.observed_generation) == provider.metadata.generation,
    };
    if !same_worker {
        return Verified(Err(Unverified::OtherWorker { probed: worker.address.clone(), now: named_now }));
    }
    if let Some(Err(other)) = worker.plugin.as_ref().map(|p| super::identity::check_worker_plugin(&provider.spec, p)) {
        return Verified(Err(Unverified::OtherPlugin(other)));
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
