//! What is known of each object: kept by its kind's table, counted in the gauge, forgotten with it.

use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use crate::controller::cache::LeaseKey;
use crate::controller::cache::leases::{EARLY_MAX, Writer};
use crate::controller::fixtures::{Parts, context, lease, metrics, provider};
use crate::controller::known::nonconforming;
use sandcap_core::api::SandboxLease;
use sandcap_core::vocabulary::Kind;

fn gauge(metrics: &Metrics, kind: Kind) -> i64 {
    nonconforming(metrics, kind).get()
}

/// A lease with `extra` keys in its spec (kept by the CRD, refused by the webhook), at `generation`.
fn lease_with(extra: Value, generation: i64) -> SandboxLease {
    let mut l = lease("team-a", "l").of("p", "k").build();
    l.spec.extra = serde_json::from_value(extra).unwrap();
    l.metadata.generation = Some(generation);
    l
}

/// `l` as the lease watch brings it, and as the table then hands it to its reconcile.
fn watched(writer: &mut Writer, ctx: &Context, l: SandboxLease) -> Arc<CachedLease> {
    let key = LeaseKey::of(&CachedLease::from(l.clone()));
    writer.apply(Event::Apply(l.into()));
    ctx.caches.leases.get(&key).expect("kept")
}

#[tokio::test]
async fn each_generation_is_judged_once_and_counted_until_the_object_is_gone() {
    let metrics = metrics();
    let Parts { ctx, leases: mut writer, .. } = context(&metrics);
    let first = watched(&mut writer, &ctx, lease_with(json!({"typo": 1}), 1));
    let found = finding(&ctx, first.as_ref(), &first.spec).await;
    assert!(!found.conforms);
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 1);
    // The same generation is not judged again (a status write brings it back): what it found is
    // handed back as it is.
    let mut status_only = lease_with(json!({"typo": 1}), 1);
    status_only.status = Some(Default::default());
    let again = watched(&mut writer, &ctx, status_only);
    assert!(Arc::ptr_eq(&found, &finding(&ctx, again.as_ref(), &again.spec).await));
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 1, "counted once");
    // A new generation counts as the last one did until it is judged; fixed, it conforms.
    let fixed = watched(&mut writer, &ctx, lease_with(json!({}), 2));
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 1);
    assert!(finding(&ctx, fixed.as_ref(), &fixed.spec).await.conforms);
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 0);
    // Broken again, then deleted.
    let broken = watched(&mut writer, &ctx, lease_with(json!({"typo": 1}), 3));
    assert!(!finding(&ctx, broken.as_ref(), &broken.spec).await.conforms);
    let p = provider("p").driver("k").build();
    assert!(finding(&ctx, &p, &p.spec).await.conforms);
    assert_eq!((gauge(&metrics, Kind::SandboxLease), gauge(&metrics, Kind::SandboxProvider)), (1, 0));
    writer.apply(Event::Delete(lease_with(json!({}), 3).into()));
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 0, "a deleted lease no longer counts");
}

#[tokio::test]
async fn a_providers_finding_is_kept_by_uid_until_it_is_deleted() {
    let metrics = metrics();
    let ctx = context(&metrics).ctx;
    let mut p = provider("p").driver("k").build();
    p.spec.version = "1.4".into();
    let found = finding(&ctx, &p, &p.spec).await;
    assert!(!found.conforms && found.message.starts_with("the CRD would refuse it today"), "{}", found.message);
    assert!(Arc::ptr_eq(&found, &finding(&ctx, &p, &p.spec).await), "judged once per generation");
    assert_eq!(gauge(&metrics, Kind::SandboxProvider), 1);
    ctx.provider_table.forget("p-uid");
    assert_eq!(gauge(&metrics, Kind::SandboxProvider), 0);
    // A reconcile that was running as it was deleted does not bring it back, nor its count.
    let late = finding(&ctx, &p, &p.spec).await;
    assert!(!late.conforms);
    assert_eq!(gauge(&metrics, Kind::SandboxProvider), 0, "a deleted provider stays forgotten");
    ctx.provider_table.forget("never seen");
    assert_eq!(gauge(&metrics, Kind::SandboxProvider), 0);
    // Created again under its name: a uid of its own, judged afresh.
    let again = provider("p").uid("p-uid-2").driver("k").build();
    assert!(finding(&ctx, &again, &again.spec).await.conforms);
}

#[tokio::test]
async fn an_early_judgment_is_taken_by_the_reconcile_of_its_generation_only() {
    let metrics = metrics();
    let Parts { ctx, leases: mut writer, .. } = context(&metrics);
    let leases = &ctx.caches.leases;
    let l = watched(&mut writer, &ctx, lease_with(json!({"typo": 1}), 1));
    let key = LeaseKey::of(l.as_ref());
    leases.judge_early(&key, &ctx.audits);
    assert!(leases.known(&l, |known, _| known.waits_early()).unwrap());
    assert!(!finding(&ctx, l.as_ref(), &l.spec).await.conforms, "the early judgment of its generation");
    assert!(!leases.known(&l, |known, _| known.waits_early()).unwrap(), "taken");
    // An early judgment of a generation since replaced is not taken for the new one.
    leases.judge_early(&key, &ctx.audits);
    let fixed = watched(&mut writer, &ctx, lease_with(json!({}), 2));
    assert!(finding(&ctx, fixed.as_ref(), &fixed.spec).await.conforms);
    // Nor kept for a lease deleted before its reconcile.
    leases.judge_early(&key, &ctx.audits);
    writer.apply(Event::Delete(lease_with(json!({}), 2).into()));
    assert!(leases.known(&fixed, |_, _| ()).is_none());
}

#[tokio::test]
async fn at_most_early_max_judgments_wait_for_their_reconciles() {
    let metrics = metrics();
    let Parts { ctx, leases: mut writer, .. } = context(&metrics);
    let leases = &ctx.caches.leases;
    let all: Vec<_> = (0..EARLY_MAX + 3)
        .map(|i| watched(&mut writer, &ctx, lease("team-a", &format!("l{i}")).of("p", "k").build()))
        .collect();
    all.iter().for_each(|l| leases.judge_early(&LeaseKey::of(l), &ctx.audits));
    let waiting = || all.iter().filter(|l| leases.known(l, |known, _| known.waits_early()).unwrap()).count();
    assert_eq!(waiting(), EARLY_MAX);
    // One over the bound is judged when its reconcile asks, as without early judgments.
    let last = all.last().unwrap();
    assert!(finding(&ctx, last.as_ref(), &last.spec).await.conforms);
    // A new generation of one that waits replaces its judgment.
    let mut first = lease("team-a", "l0").of("p", "k").build();
    first.metadata.generation = Some(2);
    let first = watched(&mut writer, &ctx, first);
    leases.judge_early(&LeaseKey::of(&first), &ctx.audits);
    assert_eq!(waiting(), EARLY_MAX);
    assert!(finding(&ctx, first.as_ref(), &first.spec).await.conforms);
    assert_eq!(waiting(), EARLY_MAX - 1, "taken: room for another");
}
