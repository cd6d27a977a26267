//! `sandcap plan --contract VERSION`: before a cluster switches contract version, what the switch
//! changes. Every stored provider and lease is judged under the new version (what it refuses
//! grants nothing), and every lease resolved under both versions from the inputs `explain` reads
//! (the provider's published worker status, the pinned identity, the lease's spec and its
//! `ConfigResolved` condition); the capabilities that differ are the plan. Live by default, or
//! offline on files (`-f`), where the objects' status is read as on the cluster.

mod diff;
mod read;
#[cfg(test)]
mod tests;

use std::io::Write;
use std::path::PathBuf;

use super::cluster::ClusterArgs;
use super::error::CliError;
use super::output::Output;
use crate::run::{WorkerPolicyArgs, contract_version};
use diff::{Admission, Change, Plan, Switch};
use sandcap_core::versions::ContractVersion;
use sandcap_core::vocabulary::Kind;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The contract version to switch to.
    #[arg(long = "contract", value_parser = contract_version, value_name = "VERSION")]
    pub contract: ContractVersion,
    /// The version to compare with [default: each object's status.contract, the version that
    /// resolved it, else v1].
    #[arg(long, value_parser = contract_version, value_name = "VERSION")]
    pub from: Option<ContractVersion>,
    /// Plan on the objects of these files (as `validate` reads them) instead of the live cluster.
    #[arg(short, long = "filename", value_name = "FILE")]
    pub filename: Vec<PathBuf>,
    /// Read the subdirectories of a directory too.
    #[arg(short = 'R', long, requires = "filename")]
    pub recursive: bool,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// Judge as an operator started with these would.
    #[command(flatten)]
    pub workers: WorkerPolicyArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

pub(super) fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let stored = if args.filename.is_empty() {
        read::live(&args.cluster)?
    } else {
        read::files(&args.filename, args.recursive)?
    };
    let switch = Switch { target: args.contract, from: args.from, workers: args.workers.policy() };
    let plan = diff::plan(&stored, &switch);
    if !args.output.write_data(out, &plan)? {
        write_table(out, &plan)?;
    }
    Ok(plan.exit_code())
}

/// One line per refused or re-admitted object and per capability gained or lost, then the counts.
fn write_table(out: &mut dyn Write, plan: &Plan) -> std::io::Result<()> {
    let to = plan.contract;
    for o in &plan.objects {
        let who = match o.kind {
            Kind::SandboxProvider => format!("provider {}", o.name),
            Kind::SandboxLease => format!("lease {}/{}", o.namespace.as_deref().unwrap_or_default(), o.name),
        };
        match o.admission {
            Admission::Refused => writeln!(out, "{who} refused under {to}: {}", o.message),
            Admission::StillRefused => writeln!(out, "{who} still refused under {to}: {}", o.message),
            Admission::Admitted => writeln!(out, "{who} admitted under {to} (refused under {}: {})", o.from, o.message),
        }?;
    }
    for lease in &plan.leases {
        for c in &lease.changes {
            let (who, key, under) = (format!("lease {}/{}", lease.namespace, lease.name), c.capability, c.off_under);
            let why = match c.reason {
                Some(reason) => format!("{reason} ({})", c.message),
                None => c.message.clone(),
            };
            match c.change {
                Change::Gains => writeln!(out, "{who} gains {key} (under {under}: {why})"),
                Change::Loses => writeln!(out, "{who} loses {key}: {why}"),
            }?;
        }
    }
    let s = &plan.summary;
    writeln!(
        out,
        "summary: contract {to}, providers {}, leases {}, refused {}, still refused {}, admitted {}, leases changing {}, \
         gains {}, losses {}",
        s.providers, s.leases, s.refused, s.still_refused, s.admitted, s.leases_changing, s.gains, s.losses
    )
}
