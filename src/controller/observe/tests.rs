//! One pass of the observer over a filled lease table and filled watches: which names it writes,
//! and which it leaves.

use std::collections::BTreeMap;

use kube::runtime::watcher::Event;
use serde_json::json;

use super::watches::Item;
use super::*;
use crate::controller::fixtures::{self, lease};
use sandcap_core::api::SandboxProvider;
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL};

fn item(uid: &str, labels: &[(&str, &str)]) -> Item {
    Item { uid: uid.into(), labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
}

const RUN: (&str, &str) = ("app", "run");

fn provider() -> SandboxProvider {
    let mut p = fixtures::provider("p").driver("k").build();
    p.spec.workloads = ["Job", "Sandbox"]
        .map(|kind| {
            serde_json::from_value(json!({"kind": kind, "selector": {"matchLabels": {"app": "run"}}, "driverKey": "k"}))
                .unwrap()
        })
        .into();
    p
}

/// An observed lease as the observer would have written it for `kind`'s workload `uid`.
fn observed(name: &str, kind: &str, uid: &str) -> sandcap_core::api::SandboxLease {
    let mut l = lease("ns", name).of("p", "k").build();
    l.metadata.labels = Some(BTreeMap::from([(OBSERVED.into(), kind.to_lowercase())]));
    let api_version = if kind == "Job" { "batch/v1" } else { "agents.x-k8s.io/v1beta1" };
    l.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    }]);
    l
}

const OBSERVED: &str = sandcap_core::workloads::OBSERVED_FROM_LABEL;

#[tokio::test]
async fn a_pass_creates_what_is_missing_leaves_the_hand_made_and_the_unknown_kinds_and_deletes_the_rest() {
    let metrics = fixtures::metrics();
    let mut parts = fixtures::context(&metrics);
    // Stored: a hand-made lease under a workload's name; an observed lease of a Job that is gone;
    // an observed lease of a Sandbox, a kind this pass does not know.
    for stored in [
        lease("ns", "pc-taken").of("p", "k").build(),
        observed("pc-gone", "Job", "u-gone"),
        observed("pc-sb", "Sandbox", "u-sb"),
    ] {
        parts.leases.apply(Event::Apply(stored.into()));
    }
    let enabled = |name: &str| {
        let mut meta = kube::core::PartialObjectMeta::<k8s_openapi::api::core::v1::Namespace>::default();
        meta.metadata.name = Some(name.into());
        meta.metadata.labels = Some(BTreeMap::from([(NAMESPACE_LABEL.into(), NAMESPACE_ENABLED.into())]));
        meta
    };
    let namespaces = watches::Namespaces::listed_for_tests(vec![enabled("ns")]);
    let jobs = Workloads::listed_with(
        WorkloadKind::Job,
        "batch/v1",
        vec![
            ("ns", "pc-new", item("u-new", &[RUN])),
            ("ns", "pc-taken", item("u-taken", &[RUN])),
            ("ns", "pc-other", item("u-o", &[])),
        ],
    );
    let mut observer = Observer {
        ctx: parts.ctx.clone(),
        namespaces,
        changed: Default::default(),
        watches: BTreeMap::from([((WorkloadKind::Job, "app=run".to_string()), jobs)]),
        opted_in: 0,
        reported: Reported::default(),
        backoff: Default::default(),
        awaiting: Default::default(),
        shutdown: CancellationToken::new(),
    };
    let providers = [provider()];
    let binder = Binder::new(&providers);
    let known = BTreeSet::from([WorkloadKind::Job]);
    let desired = observer.desired(&binder, &known);
    let steps = observer.steps(&desired, &known);
    let mut writes: Vec<(String, Step)> = steps.into_iter().map(|w| (w.name, w.step)).collect();
    writes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(writes, [("pc-gone".to_string(), Step::Delete), ("pc-new".to_string(), Step::Create)]);
    assert_eq!(metrics.observed_workloads.get_or_create(&KindLabels { kind: "Job" }).get(), 2);
}
