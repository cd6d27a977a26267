//! Where a plan's objects come from: every provider and lease of the live cluster, or the files
//! given. Both are read as JSON and typed by one function, so the plan cannot tell them apart.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use super::diff::Stored;
use crate::api::{SandboxLease, SandboxProvider};
use crate::cli::cluster::{ClusterArgs, bounded, runtime};
use crate::cli::error::CliError;
use crate::cli::manifests::{Loaded, Manifests};
use crate::validation;
use crate::vocabulary::Kind;

/// How many objects one list request asks for.
const PAGE: u32 = 250;
/// How a live object is named in an error.
const CLUSTER: &str = "the cluster";

/// Every provider and lease in the cluster, a page at a time, each request bounded in time.
pub fn live(cluster: &ClusterArgs) -> Result<Stored, CliError> {
    runtime()?.block_on(async {
        let client = cluster.connect().await?.client;
        let mut objects = Vec::new();
        for resource in [ApiResource::erase::<SandboxProvider>(&()), ApiResource::erase::<SandboxLease>(&())] {
            list(&client, &resource, cluster.request_timeout, &mut objects).await?;
        }
        typed(vec![Loaded { shown: CLUSTER.into(), objects }])
    })
}

async fn list(
    client: &Client,
    resource: &ApiResource,
    timeout: Duration,
    objects: &mut Vec<Value>,
) -> Result<(), CliError> {
    let api = Api::<DynamicObject>::all_with(client.clone(), resource);
    let what = format!("listing {}s", resource.kind);
    let mut token = None::<String>;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = bounded(timeout, &what, api.list(&params)).await.map_err(CliError::Usage)?;
        for object in page.items {
            let mut json = serde_json::to_value(&object).expect("a listed object serializes");
            // A list's items need not repeat their kind.
            json["kind"] = resource.kind.clone().into();
            objects.push(json);
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(());
        }
    }
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
