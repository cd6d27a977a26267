//! What `check` is given (its flags) and what each check gives back (one line).

use std::time::Duration;

use serde::Serialize;

use crate::cli::cluster::ClusterArgs;
use crate::cli::output::Output;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The namespace sandcap runs in: its leader-election Lease and certificate Secret are there.
    #[arg(short, long, default_value = "sandcap-system")]
    pub namespace: String,
    /// The contract version sandcap runs with (`sandcap run --contract`): the CRDs must be its.
    #[arg(long = "contract", default_value = "v1", value_parser = crate::run::contract_version)]
    pub contract: sandcap_core::versions::ContractVersion,
    /// The ValidatingWebhookConfiguration that registers sandcap's webhook.
    #[arg(long, default_value = crate::run::WEBHOOK_CONFIG_NAME, value_name = "NAME")]
    pub webhook_configuration: String,
    /// The controllers' leader-election Lease (`sandcap run --leader-election-name`); empty when
    /// sandcap runs with `--leader-elect=false`, which skips the check.
    #[arg(long, default_value = crate::run::LEADER_ELECTION_NAME, value_name = "NAME")]
    pub leader_election_name: String,
    /// The Secret whose `tls.crt` the webhook serves, read only when the webhook cannot be reached
    /// from here.
    #[arg(long, default_value = crate::run::CERT_SECRET_NAME, value_name = "NAME")]
    pub cert_secret: String,
    /// sandcap's ServiceAccount, in `-n`: the workloads check asks the apiserver
    /// (SubjectAccessReview) whether it may do what the observer does; empty skips that question.
    #[arg(long, default_value = "sandcap", value_name = "NAME")]
    pub service_account: String,
    /// Whether sandcap observes workloads (`sandcap run --observe-workloads`): with `false` the
    /// workloads check only names the providers whose bindings then observe nothing.
    #[arg(
        long,
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub observe_workloads: bool,
    /// Objects changed longer ago than this must be resolved (status.observedGeneration caught up).
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub resolve_within: Duration,
    /// Retry until every check passes, for at most this long (e.g. `2m`), as install scripts want.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub wait: Option<Duration>,
    /// This account may create only in a server-side dry run, as an admission policy limits the
    /// chart's helm test: before the dry run, make sure a real create of the same provider is
    /// refused (a policy takes effect a moment after it is created); one that is stored is deleted.
    #[arg(long)]
    pub confirm_dry_run_only: bool,
    /// `table`: a line per check; `json` or `yaml`: a record per check (`check`, `level`,
    /// `message`), the same ones.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// How long one check may take in all.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// Not a failure: the check could not tell, or something is due soon.
    Warn,
    Fail,
}

/// One check's answer.
#[derive(Clone, Debug, Serialize)]
pub struct Line {
    pub check: &'static str,
    pub level: Level,
    pub message: String,
    /// A line that warns or fails: the section of docs/troubleshooting.md that says what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub see: Option<String>,
}

impl Line {
    pub fn new(level: Level, message: impl Into<String>) -> Line {
        Line { check: "", level, message: message.into(), see: None }
    }

    pub fn ok(message: impl Into<String>) -> Line {
        Line::new(Level::Ok, message)
    }

    /// Any failure, in its own words.
    pub fn fail(message: impl std::fmt::Display) -> Line {
        Line::new(Level::Fail, message.to_string())
    }
}
