//! `sandcap crds`: the CustomResourceDefinitions of one contract version, generated from the types
//! in [`sandcap_core::api`] and the version's table ([`sandcap_core::versions`]).

use serde_json::Value;

use crate::run::contract_version;
use sandcap_core::versions::ContractVersion;
use sandcap_core::vocabulary::Kind;

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// The contract version whose CRDs to print (docs/contract.md, "Contract versions").
    #[arg(long = "contract", default_value = "v1", value_parser = contract_version)]
    pub contract: ContractVersion,
}

/// Where the CRDs of `version` are kept, under `crds/` and the chart's `files/crds/`: the
/// default version's at the top, so that `kubectl apply -f crds/` installs it.
pub fn crd_dir(version: ContractVersion) -> &'static str {
    match version {
        ContractVersion::V1 => "",
        ContractVersion::V2 => "v2",
    }
}

/// Both CRDs of `version`, one file each (named so that `cat crds/*.yaml` gives back exactly what
/// `sandcap crds` prints).
pub fn crds(version: ContractVersion) -> [(String, String); 2] {
    crd_values(version).map(|(name, crd)| {
        (
            format!("{name}.yaml"),
            format!("---\n{}", serde_saphyr::to_string_with_options(&crd, crd_yaml_options()).expect("CRDs serialize")),
        )
    })
}

/// Both CRDs of `version` by name, as JSON exactly as `crds/` holds them.
pub fn crd_values(version: ContractVersion) -> [(String, Value); 2] {
    [Kind::SandboxLease, Kind::SandboxProvider].map(|kind| {
        let mut crd = sandcap_core::api::crd(kind, version);
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
        unwrap_descriptions(&mut crd);
        (name, crd)
    })
}

/// Descriptions stay on one line each (see `unwrap_descriptions`), not folded at 80 columns.
fn crd_yaml_options() -> serde_saphyr::SerializerOptions {
    serde_saphyr::ser_options! { prefer_block_scalars: false }
}

/// Doc comments are wrapped at the source's line width; `kubectl explain` reflows text itself and
/// would show each wrap as a stray line break.
fn unwrap_descriptions(node: &mut Value) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(d)) = map.get_mut("description") {
                *d = d.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
            }
            map.values_mut().for_each(unwrap_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

pub fn crds_yaml(version: ContractVersion) -> String {
    crds(version).into_iter().map(|(_, yaml)| yaml).collect()
}
