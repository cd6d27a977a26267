//! `sandcap check`: whether sandcap works end to end, one line per check, in order, stopping at
//! the first failure (exit 1): the CRDs are this binary's; the webhook configuration's `caBundle`
//! verifies the serving certificate; the webhook refuses a server-side dry run that only it
//! refuses; a leader holds the controllers' Lease; the controllers have resolved every change
//! older than `--resolve-within`; every provider is Ready (a warning names each that is not, and
//! the command that follows a worker's new plugin version); every workload kind a provider binds is served, some namespace
//! opts in, and sandcap's ServiceAccount may do what the observer does. `--wait` retries until
//! every check passes.
//!
//! The RBAC it needs, the same from a laptop or from a pod (a `helm test`), is listed in
//! docs/contract.md ("Command line"); tests/e2e/plugin/check.rs runs it with exactly that.

mod args;
mod certificate;
mod providers;
mod steps;
mod verdicts;
mod workload_verdicts;
mod workloads;

use std::io::Write;
use std::time::{Duration, Instant};

use kube::Client;

pub use args::CheckArgs;
use args::{Level, Line};

use super::cluster::runtime;
use super::error::CliError;
use sandcap_core::vocabulary::Check;

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
            if !args.output.write_data(out, &lines)? {
                for l in &lines {
                    let level = match l.level {
                        Level::Ok => "ok",
                        Level::Warn => "warn",
                        Level::Fail => "FAIL",
                    };
                    let see = l.see.as_ref().map(|see| format!(" (see {see})")).unwrap_or_default();
                    writeln!(out, "{level:<5} {:<12} {}{see}", l.check, l.message)?;
                }
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
                Check::Providers => providers::providers(client, args).await,
                Check::Workloads => workloads::workloads(client, args).await,
            }
        };
        let within = humantime::format_duration(args.timeout);
        let mut line = tokio::time::timeout(args.timeout, work)
            .await
            .unwrap_or_else(|_| Line::fail(format!("no answer within {within} (--timeout)")));
        line.check = check.name();
        line.see = (line.level != Level::Ok).then(|| check.troubleshooting());
        let failed = line.level == Level::Fail;
        lines.push(line);
        if failed {
            break;
        }
    }
    lines
}
