//! What `run`'s flags configure: the controllers' options, and the self-managed certificates'.

use std::time::Duration;

use super::RunArgs;
use crate::certs::CertOptions;
use crate::controller::{ControllerOptions, ObserverOptions};

/// Two GETs per replica per check; renewal starts months before expiry, so a minute is plenty.
const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(60);

pub(super) fn controller_options(args: &RunArgs) -> ControllerOptions {
    ControllerOptions {
        probe_interval: args.probe_interval,
        probe_timeout: args.probe_timeout,
        endpoint_trust: args.endpoints.trust(),
        cache_sync_timeout: args.cache_sync_timeout,
        rules: args.rules.options(),
        leader_elect: args.leader_elect,
        lease_name: args.leader_election_name.clone(),
        lease_namespace: args.leader_election_namespace().to_string(),
        identity: args.identity(),
        secret_namespaces: args.secret_namespaces.clone(),
        observer: args.observe_workloads.then(|| ObserverOptions {
            own_namespace: args.pod_namespace.clone(),
            discovery_interval: args.discovery_interval,
        }),
    }
}

pub(super) fn cert_options(args: &RunArgs) -> CertOptions {
    CertOptions {
        secret_name: args.cert_secret_name.clone(),
        namespace: args.pod_namespace.clone(),
        service_name: args.service_name.clone(),
        webhook_config_name: args.webhook_config_name.clone(),
        check_interval: CERT_CHECK_INTERVAL,
    }
}
