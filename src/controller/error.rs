//! What can go wrong in the controllers.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write the status of {kind} {name}: {source}")]
    WriteStatus {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the {kind} changed since its status was computed; computing it again")]
    Conflict { kind: &'static str },
    #[error("this replica no longer leads: the status is the next leader's to write")]
    NotLeading,
    #[error("cannot read the worker's Service {name}: {source}")]
    ReadService {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the {0} cache was dropped before it was filled")]
    CacheGone(&'static str),
    #[error("the caches were not listed within {0:?}")]
    ListDeadline(Duration),
    #[error("the reconcile took longer than {0:?}")]
    Deadline(Duration),
    #[error("leader election: {0}")]
    LeaderElection(String),
    #[error(transparent)]
    ProbeSetup(#[from] crate::probe::SetupError),
}

impl Error {
    /// The `error` label of the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::WriteStatus { .. } => "write_status",
            Error::Conflict { .. } => "conflict",
            Error::NotLeading => "not_leading",
            Error::ReadService { .. } => "read_service",
            Error::CacheGone(_) => "cache_gone",
            Error::ListDeadline(_) => "list_deadline",
            Error::Deadline(_) => "deadline",
            Error::LeaderElection(_) => "leader_election",
            Error::ProbeSetup(_) => "probe_setup",
        }
    }
}
