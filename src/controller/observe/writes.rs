//! The observer's writes, under its own field manager, and the Events of what it will not write.

use std::collections::HashSet;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType};

use super::awaiting::Awaiting;
use super::backoff::{Backoff, REPORT_AFTER};
use crate::controller::context::Context;
use crate::metrics::OperationLabels;
use sandcap_core::api::{API_VERSION, SandboxLease};
use sandcap_core::vocabulary::Kind;
use sandcap_core::workloads::{Desired, KeptLease, OBSERVER_FIELD_MANAGER, Step, Workload};

/// Writes at once, at most: a start with thousands of workloads creates their leases in a
/// bounded stream, as the lease controller resolves them.
const CONCURRENCY: usize = 16;

/// One step to take about one name.
pub struct Write {
    pub step: Step,
    pub namespace: String,
    pub name: String,
    pub desired: Option<Desired>,
    pub kept: Option<KeptLease>,
}

/// Takes `writes` of names that `backoff` lets be written and whose last write the watch has
/// shown (`awaiting`), [`CONCURRENCY`] at a time. A write that fails is logged and left to a
/// later pass: one the apiserver refuses for a newer version (409) or a lease already gone (404)
/// is the normal race with the watch, which brings the newer state, and is retried at the next
/// pass; any other waits as `backoff` says, and a run of refusals is reported on the provider
/// that binds the workload.
pub async fn apply(ctx: &Context, writes: Vec<Write>, backoff: &mut Backoff, awaiting: &mut Awaiting) {
    let wanted: HashSet<(&str, &str)> = writes.iter().map(|w| (w.namespace.as_str(), w.name.as_str())).collect();
    backoff.retain(|key| wanted.contains(&(key.0.as_str(), key.1.as_str())));
    awaiting.retain(|key| wanted.contains(&(key.0.as_str(), key.1.as_str())));
    let now = Instant::now();
    let due = writes.into_iter().filter(|w| {
        let key = (w.namespace.clone(), w.name.clone());
        backoff.due(&key, now) && !awaiting.unseen(&key, judged(w), now)
    });
    let done: Vec<(Write, Result<(), kube::Error>)> = futures::stream::iter(due)
        .map(|write| async move {
            let result = one(ctx, &write).await;
            (write, result)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    for (write, result) in done {
        let operation = match write.step {
            Step::Create => "create",
            Step::Update => "update",
            _ => "delete",
        };
        let key = (write.namespace.clone(), write.name.clone());
        match result {
            Ok(()) => {
                awaiting.wrote(key.clone(), judged(&write).map(str::to_string), Instant::now());
                backoff.written(&key);
                ctx.metrics.observer_writes.get_or_create(&OperationLabels { operation }).inc();
                tracing::info!(namespace = write.namespace, name = write.name, operation, "observed lease written");
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                tracing::debug!(namespace = write.namespace, name = write.name, operation, %status, "observed lease moved on");
            }
            Err(error) => {
                let (refusals, retry_in) = backoff.refused(key, Instant::now());
                let retry = humantime::format_duration(retry_in).to_string();
                let error = said(&error);
                tracing::warn!(
                    namespace = write.namespace,
                    name = write.name,
                    operation,
                    error,
                    refusals,
                    retry,
                    "observed lease write failed"
                );
                if refusals == REPORT_AFTER {
                    report_refused(ctx, &write, &error, &retry);
                }
            }
        }
    }
}

/// A Warning Event on the provider whose binding wants the lease (the admission policy lets
/// sandcap write Events about its own kinds only), naming the workload and why.
fn report_refused(ctx: &Context, write: &Write, why: &str, retry: &str) {
    let Some(desired) = &write.desired else { return };
    let note = format!(
        "{} {}/{}: its observed lease cannot be written ({REPORT_AFTER} refusals in a row, the next attempt in {retry}): {why}",
        desired.kind, write.namespace, write.name
    );
    let regarding = ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some(Kind::SandboxProvider.as_str().into()),
        name: Some(desired.spec.provider_ref.name.clone()),
        ..ObjectReference::default()
    };
    ctx.writes.events.record(warning("ObservedLeaseRefused", note.chars().take(1024).collect()), regarding);
}

/// What the apiserver said of a write, once (kube's own text repeats its message).
fn said(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("HTTP {} {}: {}", status.code, status.reason, status.message),
        other => other.to_string(),
    }
}

/// The version of the lease `write` was judged against (`None`: there was none).
fn judged(write: &Write) -> Option<&str> {
    write.kept.as_ref().and_then(|kept| kept.resource_version.as_deref())
}

async fn one(ctx: &Context, write: &Write) -> Result<(), kube::Error> {
    let api: Api<SandboxLease> = Api::namespaced(ctx.client.clone(), &write.namespace);
    let manager = Some(OBSERVER_FIELD_MANAGER.to_string());
    match (&write.step, &write.desired, &write.kept) {
        (Step::Create, Some(desired), _) => {
            let lease: SandboxLease = serde_json::from_value(desired.object()).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams { field_manager: manager, ..PostParams::default() }, &lease).await.map(drop)
        }
        (Step::Update, Some(desired), Some(kept)) => {
            let params = PatchParams { field_manager: manager, ..PatchParams::default() };
            api.patch(&write.name, &params, &Patch::Merge(desired.patch(kept))).await.map(drop)
        }
        (Step::Replace | Step::Delete, _, Some(kept)) => {
            // The version judged, and no other: a lease changed since is judged again.
            let preconditions = Preconditions { resource_version: kept.resource_version.clone(), uid: None };
            let params = DeleteParams { preconditions: Some(preconditions), ..DeleteParams::default() };
            api.delete(&write.name, &params).await.map(drop)
        }
        _ => Ok(()),
    }
}

/// The Events of what the observer will not write, each recorded once per workload (by uid)
/// while the state lasts.
#[derive(Default)]
pub struct Reported {
    taken: HashSet<String>,
    ambiguous: HashSet<String>,
    seen: HashSet<String>,
}

impl Reported {
    /// A lease the observer did not make holds the name `desired` would have: an Event on it.
    pub fn taken(&mut self, ctx: &Context, desired: &Desired) {
        self.seen.insert(desired.owner.uid.clone());
        if !self.taken.insert(desired.owner.uid.clone()) {
            return;
        }
        let note = format!(
            "{} {} matches provider {}'s workloads, but this lease was not made by sandcap: it is left as it is, and the workload gets no observed lease",
            desired.kind, desired.name, desired.spec.provider_ref.name
        );
        let regarding = ObjectReference {
            api_version: Some(API_VERSION.into()),
            kind: Some(Kind::SandboxLease.as_str().into()),
            namespace: Some(desired.namespace.clone()),
            name: Some(desired.name.clone()),
            ..ObjectReference::default()
        };
        ctx.writes.events.record(warning("LeaseNameTaken", note), regarding);
    }

    /// Bindings that give `workload` different leases: an Event on each provider named.
    pub fn ambiguous(&mut self, ctx: &Context, workload: &Workload, bindings: &[String]) {
        self.seen.insert(workload.uid.to_string());
        if !self.ambiguous.insert(workload.uid.to_string()) {
            return;
        }
        let note = format!(
            "{} {}/{} matches {} that give it different leases: it gets none until one binding selects it",
            workload.kind,
            workload.namespace,
            workload.name,
            bindings.join(", ")
        );
        let providers: HashSet<&str> = bindings.iter().filter_map(|b| b.split('/').next()).collect();
        for provider in providers {
            let regarding = ObjectReference {
                api_version: Some(API_VERSION.into()),
                kind: Some(Kind::SandboxProvider.as_str().into()),
                name: Some(provider.into()),
                ..ObjectReference::default()
            };
            ctx.writes.events.record(warning("WorkloadBindingAmbiguous", note.clone()), regarding);
        }
    }

    /// Forgets what was reported of workloads this pass did not report again, so that it is
    /// reported again should it come back.
    pub fn forget_others(&mut self) {
        let seen = std::mem::take(&mut self.seen);
        self.taken.retain(|uid| seen.contains(uid));
        self.ambiguous.retain(|uid| seen.contains(uid));
    }
}

fn warning(reason: &str, note: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: "Observe".into(),
        secondary: None,
    }
}
