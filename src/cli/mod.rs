//! The command line (docs/contract.md, "Command line"). `run` starts the servers
//! ([`crate::run::run`], under the tokio runtime `main` builds); the offline commands
//! `validate`, `resolve` and `crds` read manifests from files and call the same pure functions the
//! webhook and the controllers call.

mod crds;
mod error;
mod manifests;
mod resolve;
mod validate;

use std::io::Write;

use clap::{Parser, Subcommand};

pub use crds::{crds, crds_yaml};
pub use error::CliError;
pub use manifests::load_objects;
pub use resolve::{ResolveArgs, TableOutput};
pub use validate::{Output, ValidateArgs, judge};

#[derive(Debug, Parser)]
#[command(name = "sandcap", version, about = "Admission webhook and operator for sandbox-provider capabilities")]
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
    #[command(flatten)]
    Offline(Offline),
}

/// The commands that need no runtime and no cluster: [`run`] runs them.
#[derive(Debug, Subcommand)]
pub enum Offline {
    /// Print what the cluster would answer for every object in the files, offline.
    Validate(ValidateArgs),
    /// Print the capability resolution the controller would write.
    Resolve(ResolveArgs),
    /// Print the CustomResourceDefinitions (the YAML that crds/ holds).
    Crds,
}

/// Runs an offline command, writing to `out`. Returns the process exit code.
pub fn run(command: Offline, out: &mut dyn Write) -> Result<i32, CliError> {
    let code = match command {
        Offline::Validate(args) => validate::validate(&args, out)?,
        Offline::Resolve(args) => resolve::resolve(&args, out)?,
        Offline::Crds => {
            out.write_all(crds_yaml().as_bytes())?;
            0
        }
    };
    out.flush()?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
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
