//! `sandcap validate`: what the cluster would answer for every object in the files.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::error::CliError;
use super::manifests::{Loaded, Manifests};
use super::output::Output;
use crate::run::RulesArgs;
use sandcap_core::judge::judge;
use sandcap_core::schema;
use sandcap_core::validation;
use sandcap_core::vocabulary::Kind;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// YAML or JSON files, directories (their .json, .yaml and .yml files) or `-` for stdin;
    /// multi-document and `kind: List` files are read object by object.
    #[arg(required_unless_present = "filename")]
    pub files: Vec<PathBuf>,
    /// The same as a FILE argument, as kubectl takes it.
    #[arg(short, long = "filename", value_name = "FILE")]
    pub filename: Vec<PathBuf>,
    /// Read the subdirectories of a directory too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// Judge as an operator started with these would.
    #[command(flatten)]
    pub rules: RulesArgs,
    /// Write the apiserver's messages as this Kubernetes minor does: 1.35 or 1.37, the oldest and
    /// the newest minor tested (they write the same forms).
    #[arg(long, default_value = "1.37", value_parser = parse_server)]
    pub kubernetes_version: schema::Server,
}

/// A `--kubernetes-version` whose message forms sandcap does not know.
#[derive(Debug, thiserror::Error)]
#[error("the message forms are known for 1.35 and 1.37 (the minors sandcap is tested on)")]
struct UnknownServer;

fn parse_server(minor: &str) -> Result<schema::Server, UnknownServer> {
    match minor {
        "1.35" => Ok(schema::Server::V1_35),
        "1.37" => Ok(schema::Server::V1_37),
        _ => Err(UnknownServer),
    }
}

#[derive(Serialize)]
struct ValidateRecord {
    kind: String,
    name: String,
    allowed: bool,
    message: String,
    warnings: Vec<String>,
}

pub(super) fn validate(args: &ValidateArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let options = args.rules.options();
    let mut records = Vec::new();
    let mut manifests = Manifests::new(args.recursive);
    let mut loaded = Vec::new();
    for path in args.files.iter().chain(&args.filename) {
        loaded.extend(manifests.load(path)?);
    }
    for Loaded { shown, objects } in loaded {
        for object in objects {
            let (kind, name) = validation::identify(&object);
            if Kind::from_kind(&kind).is_none() {
                return Err(CliError::Object {
                    path: shown,
                    kind,
                    name,
                    message: "unknown kind: sandcap validates SandboxProvider and SandboxLease".into(),
                });
            }
            let judgment = judge(&object, &options, args.kubernetes_version);
            let (allowed, message, warnings) = (judgment.allowed(), judgment.message(), judgment.warnings().to_vec());
            records.push(ValidateRecord { kind, name, allowed, message, warnings });
        }
    }
    let denied = records.iter().any(|r| !r.allowed);
    if !args.output.write_data(out, &records)? {
        for r in &records {
            if r.allowed {
                writeln!(out, "ALLOWED {}/{}", r.kind, r.name)?;
            } else {
                writeln!(out, "DENIED {}/{}: {}", r.kind, r.name, r.message)?;
            }
            r.warnings.iter().try_for_each(|w| writeln!(out, "WARNING {}/{}: {w}", r.kind, r.name))?;
        }
    }
    Ok(i32::from(denied))
}
