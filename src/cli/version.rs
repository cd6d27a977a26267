//! `sandcap version`: the release, the git commit it was built from, the platform, and the
//! contract versions it can enforce; what a bug report and `kubectl version` habits ask for.

use std::io::Write;

use serde::Serialize;

use super::error::CliError;
use super::output::Output;
use sandcap_core::versions::ContractVersion;

/// The release and its commit, as `--version` prints them too.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SANDCAP_GIT_COMMIT"), ")");

#[derive(Debug, clap::Args)]
pub struct VersionArgs {
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Version {
    version: &'static str,
    git_commit: &'static str,
    /// `os/arch`, as Go's `GOOS/GOARCH` names them (what kubectl and krew print).
    platform: String,
    contracts: Vec<&'static str>,
}

pub(super) fn version(args: &VersionArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let version = Version {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: env!("SANDCAP_GIT_COMMIT"),
        platform: platform(),
        contracts: ContractVersion::ALL.map(ContractVersion::as_str).to_vec(),
    };
    if !args.output.write_data(out, &version)? {
        writeln!(out, "sandcap {VERSION}, {}, contracts {}", version.platform, version.contracts.join(", "))?;
    }
    Ok(0)
}

fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}
