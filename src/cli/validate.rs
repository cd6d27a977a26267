//! `sandcap validate`: what the cluster would answer for every object in the files.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

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
    /// Whose request to judge: `apply` (kubectl apply, client-side: a null in the file is dropped
    /// before the apiserver sees it) or `create` (kubectl create and replace, and any client
    /// that sends the file as it is).
    #[arg(long, value_enum, default_value_t)]
    pub client: Client,
}

/// The client whose request `validate` judges (docs/contract.md, "Command line").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// `kubectl apply` (client-side): what it sends has no null member.
    #[default]
    Apply,
    /// `kubectl create`, `kubectl replace`: the file as it is, nulls included.
    Create,
}

/// `value` without its null members, at any depth, and where they were (at most
/// [`MAX_NULL_PATHS`] named): what a client-side `kubectl apply` sends of a file.
pub(super) fn without_nulls(value: &Value, path: &str, dropped: &mut Vec<String>) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, v)| {
                    let at = format!("{path}.{k}");
                    if v.is_null() {
                        dropped.push(at);
                        return None;
                    }
                    Some((k.clone(), without_nulls(v, &at, dropped)))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items.iter().enumerate().map(|(i, v)| without_nulls(v, &format!("{path}[{i}]"), dropped)).collect(),
        ),
        other => other.clone(),
    }
}

/// The most null members a note names; the rest are counted.
const MAX_NULL_PATHS: usize = 4;

/// The null members [`without_nulls`] found, as a note names them.
pub(super) fn null_paths(dropped: &[String]) -> String {
    let mut paths: Vec<&str> = dropped.iter().take(MAX_NULL_PATHS).map(|p| &p[1..]).collect();
    let more = dropped.len().saturating_sub(MAX_NULL_PATHS);
    let counted = format!("and {more} more");
    if more > 0 {
        paths.push(&counted);
    }
    paths.join(", ")
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
    /// Where the other client's verdict differs: a null `kubectl apply` drops and `kubectl
    /// create` sends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
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
            let mut dropped = Vec::new();
            let applied = without_nulls(&object, "", &mut dropped);
            let (sent, other) = match args.client {
                Client::Apply => (&applied, &object),
                Client::Create => (&object, &applied),
            };
            let judgment = judge(sent, &options, args.kubernetes_version);
            let (allowed, message, warnings) = (judgment.allowed(), judgment.message(), judgment.warnings().to_vec());
            let mut notes = Vec::new();
            if !dropped.is_empty() {
                let theirs = judge(other, &options, args.kubernetes_version);
                let verdict =
                    if theirs.allowed() { "allowed".to_string() } else { format!("denied: {}", theirs.message()) };
                let (this, that) = match args.client {
                    Client::Apply => ("kubectl apply", "kubectl create"),
                    Client::Create => ("kubectl create", "kubectl apply"),
                };
                notes.push(format!(
                    "the file has a null at {}: kubectl apply drops it before the cluster sees it, kubectl create \
                     sends it; this verdict is {this}'s, under {that} (--client) the object is {verdict}",
                    null_paths(&dropped)
                ));
            }
            records.push(ValidateRecord { kind, name, allowed, message, warnings, notes });
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
            r.notes.iter().try_for_each(|n| writeln!(out, "NOTE {}/{}: {n}", r.kind, r.name))?;
        }
    }
    Ok(i32::from(denied))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kubectl_apply_sends_no_null_member_and_each_is_named() {
        let file = json!({"spec": {"a": null, "list": [{"b": null, "c": 1}], "d": {"e": null}}});
        let mut dropped = Vec::new();
        let sent = without_nulls(&file, "", &mut dropped);
        assert_eq!(sent, json!({"spec": {"list": [{"c": 1}], "d": {}}}));
        assert_eq!(dropped, [".spec.a", ".spec.d.e", ".spec.list[0].b"], "in the keys' order");
        assert_eq!(null_paths(&dropped), "spec.a, spec.d.e, spec.list[0].b");
        let many: Vec<String> = (0..6).map(|i| format!(".a{i}")).collect();
        assert_eq!(null_paths(&many), "a0, a1, a2, a3, and 2 more");
    }
}
