//! The command line (docs/contract.md, "Command line"). `run` starts the servers
//! ([`crate::run::run`], under the tokio runtime `main` builds), `bridge` an SDK worker's probe
//! endpoint ([`crate::bridge::run`]); the offline commands
//! `validate`, `resolve`, `import` and `crds` read manifests from files and call the same pure functions the
//! webhook and the controllers call; `explain` and `check` read the live cluster ([`cluster`]), and
//! `plan` reads either.
//! Installed as `kubectl-sandcap`, the binary is a kubectl plugin: `kubectl sandcap ...`.

mod check;
mod cluster;
mod completion;
mod crds;
mod error;
mod explain;
mod import;
mod manifests;
mod output;
mod plan;
mod resolve;
mod validate;
mod version;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use check::CheckArgs;
pub use cluster::ClusterArgs;
pub use completion::{CompletionArgs, HELPER_NAME};
pub use crds::{CrdsArgs, crd_dir, crd_values, crds, crds_yaml};
pub use error::CliError;
pub use explain::{ExplainArgs, Explained};
pub use import::ImportArgs;
pub use manifests::{MAX_ENTRIES, MAX_INPUT, MAX_TOTAL, load_objects};
pub use output::Output;
pub use plan::PlanArgs;
pub use resolve::ResolveArgs;
pub use validate::ValidateArgs;
pub use version::{VERSION, VersionArgs};

/// The name kubectl finds a plugin by: `kubectl sandcap` runs `kubectl-sandcap` from the PATH.
pub const PLUGIN_NAME: &str = "kubectl-sandcap";

#[derive(Debug, Parser)]
#[command(name = "sandcap", version = VERSION, about = "Admission webhook and operator for sandbox-provider capabilities")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook (HTTPS) and the controllers, with an admin port for probes and
    /// metrics. Stops gracefully on SIGTERM (answering through --shutdown-drain-window first) or
    /// SIGINT.
    Run(Box<crate::run::RunArgs>),
    /// Run a plugin package's SDK worker (node, stdio JSON-RPC) and serve sandcap's probe for it
    /// over HTTP: the worker's own initialize answer with the manifest's plugin id, version and
    /// environment drivers. Restarts the worker with backoff; stops on SIGTERM or SIGINT.
    Bridge(Box<crate::bridge::BridgeArgs>),
    #[command(flatten)]
    Tool(Tool),
}

/// The commands that answer and exit (all but `run`): [`run`] runs them.
#[derive(Debug, Subcommand)]
pub enum Tool {
    /// Print what the cluster would answer for every object in the files, offline.
    Validate(ValidateArgs),
    /// Print the capability resolution the controller would write.
    Resolve(ResolveArgs),
    /// Print the SandboxProvider of a plugin package (directory or npm tarball) or its manifest
    /// JSON: the drivers as the manifest declares them, refused where the host or the cluster
    /// would refuse them.
    Import(Box<ImportArgs>),
    /// Print the CustomResourceDefinitions of a contract version (the YAML that crds/ holds).
    Crds(CrdsArgs),
    /// Explain, from the live cluster, why each capability of a lease or provider is on or off,
    /// and what to change.
    Explain(Box<ExplainArgs>),
    /// Check, against the live cluster, that sandcap works end to end: one line per check, exit 1
    /// at the first that fails.
    Check(Box<CheckArgs>),
    /// Before switching contract version: every stored object the new version would refuse and
    /// every lease that would gain or lose a capability, from the live cluster or from files.
    Plan(Box<PlanArgs>),
    /// Print the release, the git commit it was built from, the platform and the contract
    /// versions it enforces.
    Version(VersionArgs),
    /// Print a shell completion script. For `kubectl sandcap`, link or copy the binary as
    /// `kubectl_complete-sandcap` next to `kubectl-sandcap` on the PATH instead.
    Completion(CompletionArgs),
    /// Answer a shell completion request as Cobra does (what `kubectl_complete-sandcap` runs).
    #[command(name = "__complete", hide = true)]
    Complete {
        #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<OsString>,
    },
}

/// Parses the command line. Invoked as [`PLUGIN_NAME`] (by kubectl), usage and help say
/// `kubectl sandcap`; invoked as [`HELPER_NAME`] (kubectl completing `kubectl sandcap`), every
/// argument is a word to complete.
pub fn parse() -> Cli {
    let mut args = std::env::args_os();
    let invoked_as = args.next();
    let name = invoked_as.as_deref().map(Path::new).and_then(Path::file_name);
    if name.is_some_and(|n| n == HELPER_NAME) {
        return Cli { command: Command::Tool(Tool::Complete { words: args.collect() }) };
    }
    let command = if name.is_some_and(|n| n == PLUGIN_NAME) { plugin_command() } else { Cli::command() };
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
}

/// The command line as kubectl's plugin.
pub fn plugin_command() -> clap::Command {
    Cli::command().bin_name("kubectl sandcap")
}

/// Runs a command other than `run`, writing to `out`. Returns the process exit code.
pub fn run(command: Tool, out: &mut dyn Write) -> Result<i32, CliError> {
    let code = match command {
        Tool::Validate(args) => validate::validate(&args, out)?,
        Tool::Resolve(args) => resolve::resolve(&args, out)?,
        Tool::Import(args) => import::import(&args, out)?,
        Tool::Crds(args) => {
            out.write_all(crds_yaml(args.contract).as_bytes())?;
            0
        }
        Tool::Explain(args) => explain::explain(&args, out)?,
        Tool::Check(args) => check::check(&args, out)?,
        Tool::Plan(args) => plan::plan(&args, out)?,
        Tool::Version(args) => version::version(&args, out)?,
        Tool::Completion(args) => completion::script(&args, out)?,
        Tool::Complete { words } => completion::answer(&words, out)?,
    };
    out.flush()?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::controller::SecretScope;
    use crate::run::RunArgs;
    use crate::telemetry::LogFormat;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["sandcap", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn run_defaults_follow_the_flag_table() {
        let args = run_args(&[]).unwrap();
        assert_eq!(args.webhook_addr.to_string(), "0.0.0.0:8443");
        assert_eq!(args.admin_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(args.tls_reload_interval, Duration::from_secs(10));
        assert_eq!((args.probe_interval, args.probe_timeout), (Duration::from_secs(300), Duration::from_secs(5)));
        assert!(args.leader_elect && !args.webhook_only && !args.tls_self_signed);
        assert_eq!(args.leader_election_namespace(), args.pod_namespace);
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(args.drain_window(), Duration::from_secs(10));
        assert_eq!(args.secret_namespaces, SecretScope::Namespaces(vec![]), "no Secret watch unless asked for");
        assert_eq!(run_args(&["--secret-namespaces", "*"]).unwrap().secret_namespaces, SecretScope::All);
        let controllers = run_args(&["--controllers-only", "--shutdown-drain-window", "1m"]).unwrap();
        assert_eq!(controllers.drain_window(), Duration::ZERO, "no webhook, no clients to wait for");
    }

    #[test]
    fn run_reads_durations_and_boolean_values() {
        let args =
            run_args(&["--tls-reload-interval", "1m 30s", "--leader-elect=false", "--log-format", "json"]).unwrap();
        assert_eq!(args.tls_reload_interval, Duration::from_secs(90));
        assert!(!args.leader_elect);
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(run_args(&["--leader-elect"]).unwrap().leader_elect);
        assert!(run_args(&["--probe-interval", "soon"]).is_err());
    }

    #[test]
    fn run_refuses_contradicting_certificate_and_mode_flags() {
        assert!(run_args(&["--tls-cert", "c.pem"]).is_err(), "a certificate needs its key");
        assert!(run_args(&["--tls-cert", "c", "--tls-key", "k", "--tls-self-signed"]).is_err());
        assert!(run_args(&["--webhook-only", "--controllers-only"]).is_err());
    }
}
