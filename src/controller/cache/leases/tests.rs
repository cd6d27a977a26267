//! The lease table's tests.

use super::*;
use crate::controller::audit::Finding;
use crate::controller::fixtures::{LeaseFixture, lease};
use sandcap_core::api::SandboxLeaseStatus;
use sandcap_core::vocabulary::Capability;

fn apply(writer: &mut Writer, lease: LeaseFixture) -> Vec<LeaseKey> {
    writer.apply(Event::Apply(lease.build().into()))
}

const NONE: Vec<LeaseKey> = Vec::new();

fn names(mut leases: Vec<LeaseKey>) -> Vec<String> {
    leases.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
    leases.into_iter().map(|l| format!("{l:?}")).collect()
}

#[test]
fn a_lease_is_found_by_its_provider_and_by_each_secret_it_reads() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("s", "a").config_from("t", "b"));
    apply(&mut writer, lease("team-b", "two").of("p", "k"));
    apply(&mut writer, lease("team-a", "other").of("q", "k"));
    assert_eq!(names(leases.of_provider("p")), ["team-a/one", "team-b/two"]);
    assert_eq!(names(leases.of_secret("team-a", "s")), ["team-a/one"]);
    assert_eq!(names(leases.of_secret("team-a", "t")), ["team-a/one"]);
    // A lease reads Secrets of its own namespace only.
    assert!(leases.of_secret("team-b", "s").is_empty());
    assert!(leases.of_provider("nobody").is_empty());
}

#[test]
fn one_key_and_one_copy_of_each_name_are_kept_per_lease() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("s", "a"));
    apply(&mut writer, lease("team-a", "two").of("p", "k").config_from("s", "a"));
    let table = leases.table.read();
    let [one, two] = ["one", "two"].map(|n| table.entries.get_key_value(&LeaseKey::new("team-a".into(), n)).unwrap());
    assert!(Arc::ptr_eq(&one.0.0.0, &two.0.0.0), "one namespace");
    assert!(Arc::ptr_eq(&one.1.provider, &two.1.provider) && Arc::ptr_eq(&one.1.secrets[0], &two.1.secrets[0]));
    let indexed = table.index.of_provider("p");
    assert!(indexed.iter().all(|k| Arc::ptr_eq(&k.0, &one.0.0) || Arc::ptr_eq(&k.0, &two.0.0)), "the table's keys");
    assert_eq!(table.names.names.len(), 3, "team-a, p, s");
}

#[test]
fn a_lease_is_triggered_when_new_or_when_its_generation_moves_not_by_a_status_write() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    assert_eq!(names(apply(&mut writer, lease("team-a", "l").of("p", "k"))), ["team-a/l"]);
    let mut written = lease("team-a", "l").of("p", "k").build();
    written.status = Some(Default::default());
    assert_eq!(writer.apply(Event::Apply(written.into())), NONE);
    let mut moved = lease("team-a", "l").of("q", "k").build();
    moved.metadata.generation = Some(2);
    assert_eq!(names(writer.apply(Event::Apply(moved.into()))), ["team-a/l"]);
    assert!(leases.of_provider("p").is_empty());
    assert_eq!(names(leases.of_provider("q")), ["team-a/l"]);
    assert!(leases.table.read().index.is_empty_but(1), "no empty entry is kept");
}

#[test]
fn a_status_write_changes_the_published_status_alone() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    apply(&mut writer, lease("team-a", "l").of("p", "k").config_from("s", "a"));
    let key = LeaseKey::new("team-a".into(), "l");
    let spec = |leases: &Leases| leases.table.read().entries[&key].kept.spec().as_ptr();
    let before = spec(&leases);
    let mut written = lease("team-a", "l").of("p", "k").config_from("s", "a").build();
    let mut status = SandboxLeaseStatus::default();
    status.capabilities.set(Capability::ReusableLeases, true);
    written.status = Some(status);
    assert_eq!(writer.apply(Event::Apply(written.into())), NONE);
    assert!(leases.get(&key).unwrap().grants_any(), "the new status is the published one");
    assert_eq!(spec(&leases), before, "the spec kept is not allocated again");
    assert_eq!(names(leases.of_secret("team-a", "s")), ["team-a/l"]);
}

#[test]
fn a_renamed_secret_reference_no_longer_relates_the_old_secret() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("old", "a"));
    // A spec change moves the generation (the CRDs have a status subresource).
    let mut renamed = lease("team-a", "one").of("p", "k").config_from("new", "a").build();
    renamed.metadata.generation = Some(2);
    writer.apply(Event::Apply(renamed.into()));
    assert!(leases.of_secret("team-a", "old").is_empty());
    assert_eq!(names(leases.of_secret("team-a", "new")), ["team-a/one"]);
}

#[test]
fn a_deleted_lease_is_in_no_relation_and_nothing_of_it_is_kept() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    apply(&mut writer, lease("team-a", "one").of("p", "k").config_from("s", "a"));
    apply(&mut writer, lease("team-a", "two").of("p", "k").config_from("s", "a"));
    let deleted = writer.apply(Event::Delete(lease("team-a", "one").of("p", "k").build().into()));
    assert_eq!(deleted, NONE);
    assert!(leases.get(&LeaseKey::new("team-a".into(), "one")).is_none());
    assert_eq!(names(leases.of_provider("p")), ["team-a/two"]);
    assert_eq!(names(leases.of_secret("team-a", "s")), ["team-a/two"]);
    writer.apply(Event::Delete(lease("team-a", "two").of("p", "k").build().into()));
    let table = leases.table.read();
    assert!(table.entries.is_empty() && table.index.is_empty_but(0));
}

#[test]
fn names_no_lease_reads_any_more_are_dropped() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    for round in 0..4 {
        for i in 0..1000 {
            apply(
                &mut writer,
                lease("team-a", &format!("l-{i}")).of("p", "k").config_from(&format!("s-{round}-{i}"), "a"),
            );
        }
    }
    let held = leases.table.read().names.names.len();
    assert!(held <= 2 * 1002, "{held} names held for 1002 in use");
}

#[test]
fn what_is_known_of_a_lease_is_kept_for_it_and_counted_until_it_is_gone() {
    let gauge = Gauge::default();
    let (leases, mut writer) = table(gauge.clone(), Default::default());
    let at = |generation: i64| {
        let mut l = lease("team-a", "l").of("p", "k").build();
        l.metadata.generation = Some(generation);
        l
    };
    writer.apply(Event::Apply(at(1).into()));
    let key = LeaseKey::new("team-a".into(), "l");
    let first = leases.get(&key).unwrap();
    let finding = |l: &CachedLease| leases.known(l, |known, _| known.finding(l.meta().generation)).unwrap();
    assert!(finding(&first).is_none(), "not judged yet");
    let broken = Arc::new(Finding { conforms: false, message: "breaks".into() });
    let judged =
        |l: &CachedLease, f: &Arc<Finding>| leases.known(l, |known, g| known.judged(l.meta().generation, f.clone(), g));
    judged(&first, &broken);
    assert_eq!(gauge.get(), 1);
    let mut written = at(1);
    written.status = Some(Default::default());
    writer.apply(Event::Apply(written.into()));
    assert!(Arc::ptr_eq(&finding(&leases.get(&key).unwrap()).unwrap(), &broken), "a status write keeps it");
    writer.apply(Event::Apply(at(2).into()));
    let second = leases.get(&key).unwrap();
    assert!(finding(&second).is_none(), "a new generation is judged again");
    assert_eq!(gauge.get(), 1, "and counts as it was until then");
    judged(&second, &Arc::new(Finding { conforms: true, message: "ok".into() }));
    assert_eq!(gauge.get(), 0);
    judged(&second, &broken);
    writer.apply(Event::Delete(at(2).into()));
    assert_eq!(gauge.get(), 0, "a deleted lease no longer counts");
    assert!(leases.known(&second, |_, _| ()).is_none(), "nothing is known of it");
}

#[test]
fn a_lease_created_again_under_its_name_is_a_new_lease() {
    let gauge = Gauge::default();
    let (leases, mut writer) = table(gauge.clone(), Default::default());
    writer.apply(Event::Apply(lease("team-a", "l").of("p", "k").build().into()));
    let key = LeaseKey::new("team-a".into(), "l");
    let old = leases.get(&key).unwrap();
    let broken = Arc::new(Finding { conforms: false, message: "breaks".into() });
    leases.known(&old, |known, g| known.judged(Some(1), broken, g));
    let mut again = lease("team-a", "l").of("p", "k").build();
    again.metadata.uid = Some("another-uid".into());
    assert_eq!(writer.apply(Event::Apply(again.into())), vec![key.clone()]);
    assert!(leases.known(&old, |_, _| ()).is_none(), "the old one is forgotten");
    let new = leases.get(&key).unwrap();
    assert!(leases.known(&new, |known, _| known.finding(Some(1))).unwrap().is_none(), "judged afresh");
    assert_eq!(gauge.get(), 0, "the old one no longer counts");
}

#[tokio::test]
async fn a_relist_forgets_the_leases_it_no_longer_holds_and_marks_the_table_listed() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    let [kept, gone] = ["kept", "gone"].map(|name| CachedLease::from(lease("team-a", name).of("p", "k").build()));
    for event in [Event::Init, Event::InitApply(kept.clone()), Event::InitApply(gone), Event::InitDone] {
        writer.apply(event);
    }
    assert!(leases.listed().await);
    assert_eq!(leases.count(), 2);
    writer.apply(Event::Init);
    assert_eq!(writer.apply(Event::InitApply(kept)), NONE, "unchanged");
    let relisted = writer.apply(Event::InitDone);
    assert_eq!(relisted, NONE);
    assert_eq!(names(leases.keys()), ["team-a/kept"]);
    assert_eq!(leases.get(&LeaseKey::new("team-a".into(), "kept")).unwrap().name_any(), "kept");
}

#[tokio::test]
async fn a_table_whose_writer_is_gone_before_the_list_is_never_listed() {
    let (leases, writer) = table(Gauge::default(), Default::default());
    drop(writer);
    assert!(!leases.listed().await);
}

#[tokio::test]
async fn the_observer_wakes_for_what_it_reads_and_not_for_a_new_status() {
    let (leases, mut writer) = table(Gauge::default(), Default::default());
    let woke = || async { tokio::time::timeout(std::time::Duration::from_millis(10), leases.changed()).await.is_ok() };
    let mut l = lease("team-a", "pc-1").of("p", "k").build();
    writer.apply(Event::Apply(l.clone().into()));
    assert!(woke().await, "a new lease");
    l.status = Some(SandboxLeaseStatus::default());
    writer.apply(Event::Apply(l.clone().into()));
    assert!(!woke().await, "a new status of the same generation");
    l.metadata.labels = Some([(sandcap_core::workloads::OBSERVED_FROM_LABEL.into(), "job".into())].into());
    writer.apply(Event::Apply(l.clone().into()));
    assert!(woke().await, "the observed-from label, without a new generation");
    assert_eq!(names(leases.observed()), ["team-a/pc-1"]);
    writer.apply(Event::Delete(l.into()));
    assert!(woke().await, "a deleted lease");
    assert!(leases.observed().is_empty());
}
