//! `sandcap crds`: the CustomResourceDefinitions, generated from the types in [`crate::api`].

use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::{SandboxLease, SandboxProvider};

/// Both CRDs as one multi-document YAML stream, one file each in `crds/` (named so that
/// `cat crds/*.yaml` gives back exactly this stream).
pub fn crds() -> [(String, String); 2] {
    crd_values().map(|(name, crd)| {
        (
            format!("{name}.yaml"),
            format!("---\n{}", serde_saphyr::to_string_with_options(&crd, crd_yaml_options()).expect("CRDs serialize")),
        )
    })
}

/// Both CRDs by name, as JSON exactly as `crds/` holds them.
pub fn crd_values() -> [(String, Value); 2] {
    [SandboxLease::crd(), SandboxProvider::crd()].map(|crd| {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut crd = serde_json::to_value(&crd).expect("CRDs serialize");
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

pub fn crds_yaml() -> String {
    crds().into_iter().map(|(_, yaml)| yaml).collect()
}
