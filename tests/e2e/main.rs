//! The end-to-end suite: the real `sandcap` binary against a real kube-apiserver and etcd of every
//! Kubernetes minor in testcluster/ (built once by testcluster/build.sh, cached under target/).
//!
//!   cargo test --test e2e                      every scenario on every minor
//!   cargo test --test e2e -- 1.37::webhook     a filter, as with any cargo test
//!   SANDCAP_E2E_MINORS=1.37 cargo test --test e2e
//!   SANDCAP_E2E=skip cargo test                 skips the suite (it says so)
//!
//! One cluster per minor is started on first use and shared by that minor's scenarios, which run
//! one at a time: the controllers are cluster-wide, so two scenarios' sandcaps would fight.
//! Each scenario uses its own namespaces and object names and removes its webhook registration.
//! What the scenarios share is the harness (harness/): the cluster, sandcap installed as the chart
//! installs it, and the reads and waits of what the controllers write.

mod audit;
mod certs;
mod controllers;
mod conventions;
mod crds;
mod endpoints;
mod hardening;
mod harness;
mod leading;
mod listing;
mod observed_writes;
mod plugin;
mod rollover;
#[path = "../support/mod.rs"]
mod support;
mod switching;
mod tenants;
mod versions;
mod webhook;
mod writes;

use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Trial};

use harness::cluster::{self, Cluster};

/// A scenario: an async test of one cluster.
type Scenario = fn(Arc<Cluster>) -> futures::future::BoxFuture<'static, ()>;

macro_rules! scenarios {
    ($($module:ident::$name:ident),* $(,)?) => {
        vec![$((concat!(stringify!($module), "::", stringify!($name)), (|c| Box::pin($module::$name(c))) as Scenario)),*]
    };
}

fn scenarios() -> Vec<(&'static str, Scenario)> {
    scenarios![
        webhook::crds_are_served_with_their_names_columns_and_descriptions,
        webhook::denials_warnings_and_dry_run_through_the_apiserver,
        controllers::status_narrowing_and_recovery_with_the_charts_rbac,
        controllers::a_probe_with_the_same_answer_re_resolves_no_lease,
        controllers::leases_follow_their_provider_after_a_restart,
        controllers::a_standby_takes_over_and_every_lease_follows,
        controllers::recovers_from_an_apiserver_outage,
        endpoints::every_endpoint_of_a_service_worker_must_advertise_a_method,
        endpoints::a_probe_round_past_its_budget_publishes_a_failed_status,
        leading::a_leader_whose_controllers_stop_steps_down_and_stands_again,
        leading::a_hung_apiserver_stops_the_leader_before_a_standby_leads,
        leading::a_throttling_apiserver_loses_no_update,
        controllers::a_hostile_provider_stored_without_the_webhook,
        controllers::workloads_get_observed_leases_kept_by_sandcap,
        listing::the_caches_ask_for_streaming_lists,
        listing::without_watch_list_each_cache_lists_in_pages,
        audit::objects_stored_without_the_webhook_are_audited,
        certs::self_managed_certificates_with_the_charts_rbac,
        certs::only_the_ca_bundle_is_sandcaps_to_change,
        hardening::only_sandcaps_own_secret_lease_and_events,
        hardening::the_charts_pods_pass_the_restricted_pod_security_standard,
        plugin::check_passes_and_names_each_failure,
        plugin::explain_and_check_by_service_with_the_documented_rbac,
        conventions::the_built_in_roles_cover_sandcaps_resources,
        conventions::leases_are_selected_by_provider_and_driver,
        conventions::the_helm_test_may_do_what_check_does_and_no_more,
        rollover::rolling_restarts_refuse_nothing,
        rollover::without_a_drain_window_requests_are_refused,
        versions::the_corpus_under_contract_v2,
        versions::leases_resolve_the_nine_keys_of_contract_v2,
        switching::switching_v1_v2_v1_keeps_every_object,
        writes::a_status_is_one_merge_patch_written_once_per_new_lease,
        tenants::leases_at_the_config_bound_keep_the_leader_within_its_limit,
        crds::an_upgrade_brings_the_crds_new_rules_and_uninstall_keeps_them,
    ]
}

/// Built and started on first use, so a filter that selects one minor builds and starts one
/// cluster, and the first minor's scenarios run while the next minor builds (`.ci/prebuild.sh`).
struct LazyCluster {
    minor: String,
    cell: OnceLock<Arc<Cluster>>,
}

impl LazyCluster {
    fn get(&self) -> Arc<Cluster> {
        let start = || {
            let bin = cluster::testcluster::build(&self.minor).unwrap_or_else(|e| panic!("e2e: {e}"));
            Arc::new(Cluster::start(bin))
        };
        self.cell.get_or_init(start).clone()
    }
}

fn main() {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    if std::env::var("SANDCAP_E2E").as_deref() == Ok("skip") {
        eprintln!("e2e: skipped (SANDCAP_E2E=skip): nothing ran against a real kube-apiserver");
        return;
    }
    sandcap::tls::install_default_provider();
    let minors = match cluster::testcluster::minors() {
        Ok(minors) => minors,
        Err(error) => {
            eprintln!("e2e: {error}");
            std::process::exit(3);
        }
    };
    let clusters: Vec<Arc<LazyCluster>> =
        minors.into_iter().map(|minor| Arc::new(LazyCluster { minor, cell: OnceLock::new() })).collect();
    let mut trials = Vec::new();
    for lazy in &clusters {
        for (name, scenario) in scenarios() {
            let lazy = lazy.clone();
            trials.push(Trial::test(format!("{}::{name}", lazy.minor), move || {
                let cluster = lazy.get();
                let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
                runtime.block_on(scenario(cluster));
                runtime.shutdown_timeout(std::time::Duration::from_secs(5));
                Ok(())
            }));
        }
    }
    let conclusion = libtest_mimic::run(&args, trials);
    // The trials are gone, so this drops the last reference: the clusters stop here.
    drop(clusters);
    conclusion.exit();
}
