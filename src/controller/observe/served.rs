//! Which workload kinds the apiserver serves, and at which version: discovered at the start and
//! every interval, so that a kind not installed (agent-sandbox) is a state the providers'
//! `WorkloadsObserved` condition reports, and its installation is noticed.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use kube::Client;

use sandcap_core::workloads::{KINDS, KindRow, WorkloadKind};

/// Per kind: `Some(api_version)` where served, `None` where the apiserver serves no such
/// resource; a kind not yet discovered (discovery failed so far) is absent.
pub type Kinds = BTreeMap<WorkloadKind, Option<String>>;

/// The last discovery, shared by the observer and the provider reconciles; `None` where the
/// observer does not run (`--observe-workloads=false`).
#[derive(Clone, Default)]
pub struct Served(Option<Arc<RwLock<Kinds>>>);

impl Served {
    /// What the observer's discovery fills.
    pub fn observed() -> Served {
        Served(Some(Arc::default()))
    }

    /// Whether the observer runs.
    pub fn on(&self) -> bool {
        self.0.is_some()
    }

    pub fn kinds(&self) -> Kinds {
        self.0.as_ref().map(|k| k.read().expect("not poisoned").clone()).unwrap_or_default()
    }

    /// Takes a discovery's answers; whether any kind changed.
    pub fn update(&self, found: Kinds) -> bool {
        let Some(kinds) = &self.0 else { return false };
        let mut kinds = kinds.write().expect("not poisoned");
        let before = kinds.clone();
        kinds.extend(found);
        *kinds != before
    }
}

/// Asks the apiserver where each kind of [`KINDS`] is served. A kind whose discovery fails (the
/// apiserver away) is left out, and keeps what was known of it.
pub async fn discover(client: &Client) -> Kinds {
    let Ok(groups) = client.list_api_groups().await.map_err(|error| tracing::warn!(%error, "API discovery failed"))
    else {
        return Kinds::new();
    };
    let mut found = Kinds::new();
    for row in &KINDS {
        let Some(group) = groups.groups.iter().find(|g| g.name == row.group) else {
            found.insert(row.kind, None);
            continue;
        };
        // The preferred version first, then the others as the apiserver lists them.
        let preferred = group.preferred_version.iter().map(|v| v.group_version.clone());
        let versions = preferred.chain(group.versions.iter().map(|v| v.group_version.clone()));
        let mut served = Some(None);
        for version in versions {
            match serves(client, &version, row).await {
                Ok(true) => {
                    served = Some(Some(version));
                    break;
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, version, "API discovery failed");
                    served = None;
                    break;
                }
            }
        }
        if let Some(served) = served {
            found.insert(row.kind, served);
        }
    }
    found
}

/// Whether `group_version` serves the kind's resource, listable and watchable.
async fn serves(client: &Client, group_version: &str, row: &KindRow) -> Result<bool, kube::Error> {
    let resources = client.list_api_group_resources(group_version).await?;
    Ok(resources
        .resources
        .iter()
        .any(|r| r.name == row.plural && ["list", "watch"].iter().all(|verb| r.verbs.iter().any(|v| v == verb))))
}
