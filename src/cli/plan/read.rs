//! Where a plan's objects come from: every provider and lease of the live cluster, or the files
//! given. Both are read as JSON and typed by one function, so the plan cannot tell them apart.

use std::path::PathBuf;

use kube::api::{ApiResource, DynamicObject};

use super::diff::Stored;
use crate::cli::cluster::{ClusterArgs, list_pages, runtime};
use crate::cli::error::CliError;
use crate::cli::manifests::{Loaded, Manifests};
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::validation;
use sandcap_core::vocabulary::Kind;

/// How a live object is named in an error.
const CLUSTER: &str = "the cluster";

/// Every provider and lease in the cluster, a page at a time, each request bounded in time.
pub fn live(cluster: &ClusterArgs) -> Result<Stored, CliError> {
    runtime()?.block_on(async {
        let client = cluster.connect().await?.client;
        let mut objects = Vec::new();
        for resource in [ApiResource::erase::<SandboxProvider>(&()), ApiResource::erase::<SandboxLease>(&())] {
            let each = |page: Vec<DynamicObject>| {
                objects.extend(page.into_iter().map(|object| {
                    let mut json = serde_json::to_value(&object).expect("a listed object serializes");
                    // A list's items need not repeat their kind.
                    json["kind"] = resource.kind.clone().into();
                    json
                }))
            };
            list_pages(&client, &resource, cluster.request_timeout, each).await?;
        }
        typed(vec![Loaded { shown: CLUSTER.into(), objects }])
    })
}

/// Every object of the files (kubectl's `-f`, `-R`).
pub fn files(paths: &[PathBuf], recursive: bool) -> Result<Stored, CliError> {
    let mut manifests = Manifests::new(recursive);
    let mut loaded = Vec::new();
    for path in paths {
        loaded.extend(manifests.load(path)?);
    }
    typed(loaded)
}

/// The providers and leases, typed as the controllers read them; anything else is an error
/// naming it.
fn typed(loaded: Vec<Loaded>) -> Result<Stored, CliError> {
    let mut stored = Stored::default();
    for Loaded { shown, objects } in loaded {
        for object in objects {
            let (kind, name) = validation::identify(&object);
            let error = |message: String| CliError::Object {
                path: shown.clone(),
                kind: kind.clone(),
                name: name.clone(),
                message,
            };
            match Kind::from_kind(&kind) {
                Some(Kind::SandboxProvider) => {
                    stored.providers.push(serde_json::from_value(object).map_err(|e| error(e.to_string()))?);
                }
                Some(Kind::SandboxLease) => {
                    stored.leases.push(serde_json::from_value(object).map_err(|e| error(e.to_string()))?);
                }
                None => return Err(error("unknown kind: sandcap plans SandboxProvider and SandboxLease".into())),
            }
        }
    }
    Ok(stored)
}
