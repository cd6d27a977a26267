//! `sandcap check`: whether sandcap works end to end, one line per check, in order, stopping at
//! the first failure (exit 1): the CRDs are this binary's; the webhook configuration's `caBundle`
//! verifies the serving certificate; the webhook refuses a server-side dry run that only it
//! refuses; a leader holds the controllers' Lease; the controllers have resolved every change
//! older than `--resolve-within`. `--wait` retries until every check passes.
//!
//! What it needs (RBAC, the same from a laptop or from a pod such as a `helm test`):
//!
//! | API group | resource | verbs | where |
//! |---|---|---|---|
//! | `apiextensions.k8s.io` | `customresourcedefinitions` | get | `sandboxproviders.sandcap.dev`, `sandboxleases.sandcap.dev` |
//! | `admissionregistration.k8s.io` | `validatingwebhookconfigurations` | get | `--webhook-configuration` |
//! | `sandcap.dev` | `sandboxproviders` | create (a dry run: nothing is stored), list | cluster |
//! | `sandcap.dev` | `sandboxleases` | list | cluster |
//! | `coordination.k8s.io` | `leases` | get | `--leader-election-name` in `--namespace` |
//! | `""` | `secrets` | get | `--cert-secret` in `--namespace`; only when the webhook cannot be reached over the network (outside the cluster) |
//!
//! and, in a cluster, a connection to the webhook Service's port (a NetworkPolicy on sandcap's
//! pods must let the checking pod in).

mod certificate;
mod steps;
mod verdicts;

use std::io::Write;
use std::time::{Duration, Instant};

use kube::Client;

use super::cluster::{ClusterArgs, runtime};
use super::error::CliError;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The namespace sandcap runs in: its leader-election Lease and certificate Secret are there.
    #[arg(short, long, default_value = "sandcap-system")]
    pub namespace: String,
    /// The ValidatingWebhookConfiguration that registers sandcap's webhook.
    #[arg(long, default_value = crate::run::WEBHOOK_CONFIG_NAME, value_name = "NAME")]
    pub webhook_configuration: String,
    /// The controllers' leader-election Lease (`sandcap run --leader-election-name`).
    #[arg(long, default_value = crate::run::LEADER_ELECTION_NAME, value_name = "NAME")]
    pub leader_election_name: String,
    /// The Secret whose `tls.crt` the webhook serves, read only when the webhook cannot be reached
    /// from here.
    #[arg(long, default_value = crate::run::CERT_SECRET_NAME, value_name = "NAME")]
    pub cert_secret: String,
    /// Objects changed longer ago than this must be resolved (status.observedGeneration caught up).
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub resolve_within: Duration,
    /// Retry until every check passes, for at most this long (e.g. `2m`), as install scripts want.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub wait: Option<Duration>,
    /// How long one check may take in all.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Ok,
    /// Not a failure: the check could not tell, or something is due soon.
    Warn,
    Fail,
}

/// The checks in order: each assumes the ones before it passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Crds,
    Webhook,
    Admission,
    Leader,
    Controllers,
}

impl Check {
    const ALL: [Check; 5] = [Check::Crds, Check::Webhook, Check::Admission, Check::Leader, Check::Controllers];

    fn name(self) -> &'static str {
        match self {
            Check::Crds => "crds",
            Check::Webhook => "webhook",
            Check::Admission => "admission",
            Check::Leader => "leader",
            Check::Controllers => "controllers",
        }
    }
}

/// One check's answer.
#[derive(Clone, Debug)]
pub struct Line {
    pub check: &'static str,
    pub level: Level,
    pub message: String,
}

impl Line {
    fn new(level: Level, message: impl Into<String>) -> Line {
        Line { check: "", level, message: message.into() }
    }

    fn ok(message: impl Into<String>) -> Line {
        Line::new(Level::Ok, message)
    }

    fn fail(message: impl Into<String>) -> Line {
        Line::new(Level::Fail, message)
    }
}

pub(in crate::cli) fn check(args: &CheckArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let client = args.cluster.connect().await?.client;
        let deadline = args.wait.map(|w| Instant::now() + w);
        let mut said = String::new();
        loop {
            let lines = attempt(&client, args).await;
            let failed = lines.last().filter(|l| l.level == Level::Fail);
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now())).unwrap_or_default();
            if let Some(failed) = failed.filter(|_| !left.is_zero()) {
                // Once per failure, not once per attempt.
                let now = format!("not yet: {}: {}; retrying", failed.check, failed.message);
                if now != said {
                    // Not eprintln!, which panics when stderr is a closed pipe (see main.rs).
                    let _ = writeln!(std::io::stderr(), "{now}");
                    said = now;
                }
                tokio::time::sleep(RETRY.min(left)).await;
                continue;
            }
            for l in &lines {
                let level = match l.level {
                    Level::Ok => "ok",
                    Level::Warn => "warn",
                    Level::Fail => "FAIL",
                };
                writeln!(out, "{level:<5} {:<12} {}", l.check, l.message)?;
            }
            return Ok(i32::from(failed.is_some()));
        }
    })
}

const RETRY: Duration = Duration::from_secs(2);

/// Runs the checks in order until one fails; each within `--timeout`.
async fn attempt(client: &Client, args: &CheckArgs) -> Vec<Line> {
    let mut lines = Vec::new();
    for check in Check::ALL {
        let work = async {
            match check {
                Check::Crds => steps::crds(client, args).await,
                Check::Webhook => steps::webhook(client, args).await,
                Check::Admission => steps::admission(client, args).await,
                Check::Leader => steps::leader(client, args).await,
                Check::Controllers => steps::controllers(client, args).await,
            }
        };
        let within = humantime::format_duration(args.timeout);
        let mut line = tokio::time::timeout(args.timeout, work)
            .await
            .unwrap_or_else(|_| Line::fail(format!("no answer within {within} (--timeout)")));
        line.check = check.name();
        let failed = line.level == Level::Fail;
        lines.push(line);
        if failed {
            break;
        }
    }
    lines
}
