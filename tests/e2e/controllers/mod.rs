//! The controllers through the real apiserver, running with exactly the chart's RBAC: statuses
//! ([`status`]), restarts, a standby and an apiserver outage ([`restarts`]), a probe that changes
//! nothing ([`probes`]), a provider over the schema budget ([`hostile`]), and the observer's leases
//! of running Jobs and Sandboxes ([`workloads`]).

mod claims;
mod hostile;
mod probes;
mod refused;
mod restarts;
mod status;
mod workloads;

pub use hostile::a_hostile_provider_stored_without_the_webhook;
pub use probes::a_probe_with_the_same_answer_re_resolves_no_lease;
pub use restarts::{
    a_standby_takes_over_and_every_lease_follows, leases_follow_their_provider_after_a_restart,
    recovers_from_an_apiserver_outage,
};
pub use status::status_narrowing_and_recovery_with_the_charts_rbac;
pub use workloads::workloads_get_observed_leases_kept_by_sandcap;
