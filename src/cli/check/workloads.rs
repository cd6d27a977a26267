//! The `workloads` check's requests: the SandboxProviders that bind workloads, whether discovery
//! serves each bound kind, the namespaces that opt in, and (by SubjectAccessReview) whether
//! sandcap's ServiceAccount may do what the observer does. The verdict is
//! [`super::workload_verdicts`]'s.

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, PostParams};
use kube::core::ApiResource;
use kube::{Api, Client};
use sandcap_core::api::SandboxProvider;
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, WorkloadKind, namespace_observed};

use super::args::{CheckArgs, Line};
use super::workload_verdicts::{self, Observation, Rights, bound_kinds};
use crate::cli::cluster::{RequestError, bounded, list_pages};

pub async fn workloads(client: &Client, args: &CheckArgs) -> Line {
    match observe(client, args).await {
        Ok(o) => {
            let (level, text) = workload_verdicts::workloads(&o);
            Line::new(level, text)
        }
        Err(e) => Line::fail(e),
    }
}

async fn observe(client: &Client, args: &CheckArgs) -> Result<Observation, RequestError> {
    let timeout = args.cluster.request_timeout;
    let mut bindings = Vec::new();
    let resource = ApiResource::erase::<SandboxProvider>(&());
    list_pages(client, &resource, timeout, |page| {
        for provider in page {
            let kinds = provider.data["spec"]["workloads"].as_array().cloned().unwrap_or_default();
            let kinds: Vec<WorkloadKind> = WorkloadKind::ALL
                .into_iter()
                .filter(|k| kinds.iter().any(|w| w["kind"].as_str() == Some(k.as_str())))
                .collect();
            if !kinds.is_empty() {
                bindings.push((provider.metadata.name.unwrap_or_default(), kinds));
            }
        }
    })
    .await?;
    let mut o = Observation { bindings, observing: args.observe_workloads, ..Default::default() };
    if o.bindings.is_empty() || !o.observing {
        return Ok(o);
    }
    let kinds = bound_kinds(&o.bindings);
    for kind in &kinds {
        o.served.push((*kind, served(client, args, *kind).await?));
    }
    let api = Api::<Namespace>::all(client.clone());
    let selector = ListParams::default().labels(&format!("{NAMESPACE_LABEL}={NAMESPACE_ENABLED}"));
    let what = format!("listing Namespaces labelled {NAMESPACE_LABEL}={NAMESPACE_ENABLED}");
    for ns in bounded(timeout, &what, api.list_metadata(&selector)).await?.items {
        let name = ns.metadata.name.unwrap_or_default();
        let labels: BTreeMap<String, String> = ns.metadata.labels.unwrap_or_default();
        if namespace_observed(&name, &labels, &args.namespace) {
            o.observed_namespaces += 1;
        } else {
            o.never_observed.push(name);
        }
    }
    o.rights = rights(client, args, &kinds).await;
    Ok(o)
}

/// The group/version discovery serves `kind`'s resource as (the group's preferred version
/// first), or `None`.
async fn served(client: &Client, args: &CheckArgs, kind: WorkloadKind) -> Result<Option<String>, RequestError> {
    let timeout = args.cluster.request_timeout;
    let row = kind.row();
    let groups = bounded(timeout, "discovery (GET /apis)", client.list_api_groups()).await?;
    let Some(group) = groups.groups.into_iter().find(|g| g.name == row.group) else {
        return Ok(None);
    };
    let preferred = group.preferred_version.map(|p| p.group_version);
    let mut versions: Vec<String> = group.versions.into_iter().map(|v| v.group_version).collect();
    versions.sort_by_key(|v| Some(v) != preferred.as_ref());
    for version in versions {
        let what = format!("discovery (GET /apis/{version})");
        let resources = bounded(timeout, &what, client.list_api_group_resources(&version)).await?;
        if resources.resources.iter().any(|r| r.name == row.plural) {
            return Ok(Some(version));
        }
    }
    Ok(None)
}

/// Whether sandcap's ServiceAccount may list and watch each bound kind and the namespaces, and
/// create, patch and delete SandboxLeases, cluster-wide: a SubjectAccessReview each.
async fn rights(client: &Client, args: &CheckArgs, kinds: &[WorkloadKind]) -> Rights {
    if args.service_account.is_empty() {
        return Rights::NotAsked;
    }
    let ns = &args.namespace;
    let account = format!("{ns}/{}", args.service_account);
    let mut wanted: Vec<(&str, &str, &str)> = Vec::new();
    for kind in kinds {
        let row = kind.row();
        wanted.extend(["list", "watch"].map(|verb| (verb, row.group, row.plural)));
    }
    wanted.extend(["list", "watch"].map(|verb| (verb, "", "namespaces")));
    wanted.extend(["create", "patch", "delete"].map(|verb| (verb, sandcap_core::api::GROUP, "sandboxleases")));
    let api = Api::<SubjectAccessReview>::all(client.clone());
    let mut denied = Vec::new();
    for (verb, group, resource) in wanted {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!("system:serviceaccount:{ns}:{}", args.service_account)),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".into(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let what = format!("asking whether {account} may {verb} {resource} (SubjectAccessReview)");
        match bounded(args.cluster.request_timeout, &what, api.create(&PostParams::default(), &review)).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => denied.push(if group.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}.{group}")
            }),
            Err(RequestError::Failed { error: kube::Error::Api(status), .. }) if status.code == 403 => {
                return Rights::Unknown(format!(
                    "this account may not create SubjectAccessReviews (authorization.k8s.io) to ask about \
                     ServiceAccount {account}"
                ));
            }
            Err(e) => return Rights::Unknown(e.to_string()),
        }
    }
    Rights::Asked { account, denied }
}
