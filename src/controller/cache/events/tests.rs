//! The watch event handlers' tests.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use super::*;
use crate::controller::cache::LeaseKey;
use crate::controller::cache::leases::table;
use crate::controller::cache::{Queues, Triggers};
use crate::controller::engine::Cause;
use crate::controller::fixtures::{LeaseFixture, ProviderFixture, lease, provider, secret};
use sandcap_core::api::SandboxLease;
use sandcap_core::vocabulary::CONFIG_SOURCE_LABEL;

/// What the handlers write to: both queues (read back from their receiving ends), the lease
/// table (its writer, until the lease handler takes it), the providers' uids forgotten and the
/// leases handed to be judged early.
struct Outputs {
    queues: Queues,
    triggers: Triggers,
    table: Leases,
    writer: Option<Writer>,
    forgotten: Rc<RefCell<Vec<String>>>,
    judged_early: Rc<RefCell<Vec<String>>>,
}

type Forget = Box<dyn Fn(&str, &str)>;
type JudgeEarly = Box<dyn Fn(&LeaseKey)>;

impl Outputs {
    fn new() -> Outputs {
        let (queues, triggers) = Queues::new();
        let (table, writer) = table(Default::default(), Default::default());
        let (forgotten, judged_early) = Default::default();
        Outputs { queues, triggers, table, writer: Some(writer), forgotten, judged_early }
    }

    fn forget(&self) -> Forget {
        let forgotten = self.forgotten.clone();
        Box::new(move |uid, _name| forgotten.borrow_mut().push(uid.to_string()))
    }

    fn providers(&self) -> ProviderEvents<Forget> {
        let (own, related) = (self.queues.providers.clone(), self.queues.leases.clone());
        ProviderEvents::new(own, related, self.table.clone(), self.forget())
    }

    fn leases(&mut self) -> LeaseEvents<JudgeEarly> {
        let writer = self.writer.take().expect("one lease handler");
        let judged = self.judged_early.clone();
        let judge_early: JudgeEarly = Box::new(move |key| judged.borrow_mut().push(format!("{key:?}")));
        LeaseEvents::new(self.queues.leases.clone(), writer, judge_early)
    }

    fn secrets(&self) -> SecretEvents {
        SecretEvents::new(self.queues.leases.clone(), self.table.clone())
    }

    /// As the lease watch has it, before any of these events.
    fn relate(&mut self, lease: LeaseFixture) {
        self.writer.as_mut().expect("no lease handler yet").apply(Event::Apply(cached(lease)));
    }

    /// Each of the calls below tells what happened since the last one.
    fn provider_triggers(&mut self) -> Vec<String> {
        drain(&mut self.triggers.providers).into_iter().map(|(p, _)| p.name).collect()
    }

    fn lease_triggers(&mut self) -> Vec<String> {
        names(drain(&mut self.triggers.leases).into_iter().map(|(l, _)| l).collect())
    }

    /// The lease triggers since the last call, each with its cause.
    fn lease_causes(&mut self) -> Vec<(String, Cause)> {
        drain(&mut self.triggers.leases).into_iter().map(|(l, cause)| (format!("{l:?}"), cause)).collect()
    }

    fn forgotten(&self) -> Vec<String> {
        self.forgotten.take()
    }

    fn judged_early(&self) -> Vec<String> {
        self.judged_early.take()
    }
}

fn drain<T>(rx: &mut UnboundedReceiver<T>) -> Vec<T> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// Each lease as `<namespace>/<name>`, sorted.
fn names(leases: Vec<LeaseKey>) -> Vec<String> {
    let mut names: Vec<String> = leases.iter().map(|l| format!("{l:?}")).collect();
    names.sort();
    names
}

/// The events of a (re-)list of `objects`.
fn list<K>(objects: impl IntoIterator<Item = K>) -> Vec<Event<K>> {
    let listed = objects.into_iter().map(Event::InitApply);
    std::iter::once(Event::Init).chain(listed).chain([Event::InitDone]).collect()
}

fn cached(lease: LeaseFixture) -> CachedLease {
    lease.build().into()
}

const NONE: [&str; 0] = [];

// ---- providers --------------------------------------------------------------------------

fn probed() -> ProviderFixture {
    provider("p").driver("k").probed_ok(&["environmentExecute"])
}

/// `out` with a lease of `p` and one of another provider, and a provider handler past its
/// first list of `p`.
fn listed_provider() -> (Outputs, ProviderEvents<Forget>) {
    let mut out = Outputs::new();
    out.relate(lease("team-a", "l").of("p", "k"));
    out.relate(lease("team-a", "other").of("q", "k"));
    let mut on = out.providers();
    list([probed().build()]).into_iter().for_each(|e| on.handle(e));
    // What the list triggered is the test of its own below.
    out.provider_triggers();
    out.lease_triggers();
    (out, on)
}

#[test]
fn a_listed_provider_triggers_itself_and_none_of_its_leases() {
    let mut out = Outputs::new();
    out.relate(lease("team-a", "l").of("p", "k"));
    let mut on = out.providers();
    list([probed().build()]).into_iter().for_each(|e| on.handle(e));
    assert_eq!(out.provider_triggers(), ["p"]);
    assert_eq!(out.lease_triggers(), NONE, "each lease is triggered by its own list");
    assert_eq!(out.forgotten(), NONE);
}

#[test]
fn a_provider_whose_lease_view_changed_triggers_its_leases_not_itself() {
    let (mut out, mut on) = listed_provider();
    on.handle(Event::Apply(provider("p").driver("k").probed_ok(&["environmentSyncIn"]).build()));
    assert_eq!(out.provider_triggers(), NONE, "no spec change");
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}

#[test]
fn a_providers_spec_change_triggers_it_and_its_leases() {
    let (mut out, mut on) = listed_provider();
    on.handle(Event::Apply(probed().generation(2).declares(&["nativeSyncIn"]).build()));
    assert_eq!(out.provider_triggers(), ["p"]);
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}

#[test]
fn a_leases_own_change_goes_first_and_a_providers_change_is_related() {
    let (mut out, mut on) = listed_provider();
    on.handle(Event::Apply(probed().generation(2).declares(&["nativeSyncIn"]).build()));
    assert_eq!(out.lease_causes(), [("team-a/l".to_string(), Cause::Related)]);
    let mut leases = out.leases();
    leases.handle(Event::Apply(cached(lease("team-a", "new").of("p", "k"))));
    assert_eq!(out.lease_causes(), [("team-a/new".to_string(), Cause::Own)]);
}

#[test]
fn a_reprobe_that_answers_as_before_triggers_nothing() {
    let (mut out, mut on) = listed_provider();
    on.handle(Event::Apply(probed().at("2030-01-01T00:05:00Z").build()));
    assert_eq!(out.provider_triggers(), NONE);
    assert_eq!(out.lease_triggers(), NONE);
}

#[test]
fn a_deleted_provider_is_forgotten_and_triggers_its_leases_not_itself() {
    let (mut out, mut on) = listed_provider();
    on.handle(Event::Delete(probed().build()));
    assert_eq!(out.forgotten(), ["p-uid"]);
    assert_eq!(out.provider_triggers(), NONE);
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}

#[test]
fn a_provider_deleted_during_a_watch_gap_is_found_by_the_relist() {
    let (mut out, mut on) = listed_provider();
    list([]).into_iter().for_each(|e| on.handle(e));
    assert_eq!(out.forgotten(), ["p-uid"]);
    assert_eq!(out.provider_triggers(), NONE);
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}

// ---- leases -----------------------------------------------------------------------------

#[test]
fn a_new_lease_is_related_to_what_it_reads_and_triggers_itself() {
    let mut out = Outputs::new();
    let mut on = out.leases();
    on.handle(Event::Apply(cached(lease("team-a", "l").of("p", "k").config_from("s", "config.json"))));
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
    assert_eq!(names(out.table.of_provider("p")), ["team-a/l"]);
    assert_eq!(names(out.table.of_secret("team-a", "s")), ["team-a/l"]);
    assert_eq!(out.judged_early(), ["team-a/l"], "handed over before its reconcile is queued");
}

/// A lease handler that has seen `team-a/l` of `p`, its trigger taken (the test above's).
fn applied_lease() -> (Outputs, LeaseEvents<JudgeEarly>) {
    let mut out = Outputs::new();
    let mut on = out.leases();
    on.handle(Event::Apply(cached(lease("team-a", "l").of("p", "k"))));
    out.lease_triggers();
    out.judged_early();
    (out, on)
}

#[test]
fn a_lease_status_write_triggers_nothing() {
    let (mut out, mut on) = applied_lease();
    let mut written: SandboxLease = lease("team-a", "l").of("p", "k").build();
    written.status = Some(Default::default());
    on.handle(Event::Apply(written.into()));
    assert_eq!(out.lease_triggers(), NONE);
    assert_eq!(out.judged_early(), NONE, "its generation was handed over already");
}

#[test]
fn a_lease_that_names_another_provider_moves_to_it_and_triggers_itself() {
    let (mut out, mut on) = applied_lease();
    let mut moved = lease("team-a", "l").of("q", "k").build();
    moved.metadata.generation = Some(2);
    on.handle(Event::Apply(moved.into()));
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
    assert_eq!(out.judged_early(), ["team-a/l"]);
    assert_eq!(names(out.table.of_provider("p")), NONE);
    assert_eq!(names(out.table.of_provider("q")), ["team-a/l"]);
}

#[test]
fn a_deleted_lease_is_forgotten_and_unrelated_not_triggered() {
    let (mut out, mut on) = applied_lease();
    on.handle(Event::Delete(cached(lease("team-a", "l").of("p", "k"))));
    assert!(out.table.get(&LeaseKey::new("team-a".into(), "l")).is_none());
    assert_eq!(out.lease_triggers(), NONE);
    assert_eq!(names(out.table.of_provider("p")), NONE);
}

#[test]
fn a_lease_deleted_during_a_watch_gap_is_forgotten_and_unrelated() {
    let mut out = Outputs::new();
    let mut on = out.leases();
    let [kept, gone] = ["kept", "gone"].map(|name| cached(lease("team-a", name).of("p", "k")));
    list([kept.clone(), gone]).into_iter().for_each(|e| on.handle(e));
    assert_eq!(out.lease_triggers(), ["team-a/gone", "team-a/kept"]);
    assert_eq!(out.judged_early(), NONE, "a listing's leases are judged by their reconciles");
    list([kept]).into_iter().for_each(|e| on.handle(e));
    assert!(out.table.get(&LeaseKey::new("team-a".into(), "gone")).is_none());
    assert_eq!(out.lease_triggers(), NONE, "the kept lease is unchanged");
    assert_eq!(names(out.table.of_provider("p")), ["team-a/kept"]);
}

// ---- Secrets ----------------------------------------------------------------------------

fn labelled(data: &str) -> Secret {
    secret("team-a", "s", json!({"config.json": data}), json!({CONFIG_SOURCE_LABEL: "true"}))
}

/// `out` with a lease that reads `team-a/s` and one of another namespace that reads a Secret
/// of the same name, and a Secret handler past its first list of `s`.
fn listed_secret() -> (Outputs, SecretEvents) {
    let mut out = Outputs::new();
    out.relate(lease("team-a", "l").of("p", "k").config_from("s", "config.json"));
    out.relate(lease("team-b", "other").of("p", "k").config_from("s", "config.json"));
    let mut on = out.secrets();
    list([labelled("e30=")]).into_iter().for_each(|e| on.handle(e));
    (out, on)
}

#[test]
fn a_listed_secret_triggers_no_lease() {
    let (mut out, _on) = listed_secret();
    assert_eq!(out.lease_triggers(), NONE, "each lease is triggered by its own list");
}

#[test]
fn a_secrets_new_data_triggers_the_leases_of_its_namespace_that_read_it() {
    let (mut out, mut on) = listed_secret();
    on.handle(Event::Apply(labelled("e30K")));
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}

#[test]
fn a_secret_whose_labels_alone_changed_triggers_nothing() {
    let (mut out, mut on) = listed_secret();
    let data = json!({"config.json": "e30="});
    on.handle(Event::Apply(secret("team-a", "s", data, json!({CONFIG_SOURCE_LABEL: "true", "team": "a"}))));
    assert_eq!(out.lease_triggers(), NONE);
}

#[test]
fn a_secret_created_after_the_list_triggers_the_leases_waiting_for_it() {
    let mut out = Outputs::new();
    out.relate(lease("team-a", "l").of("p", "k").config_from("s", "config.json"));
    let mut on = out.secrets();
    list([]).into_iter().for_each(|e| on.handle(e));
    on.handle(Event::Apply(labelled("e30=")));
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}

#[test]
fn a_deleted_or_unlabelled_secret_triggers_the_leases_that_read_it() {
    let (mut out, mut on) = listed_secret();
    on.handle(Event::Delete(labelled("e30=")));
    assert_eq!(out.lease_triggers(), ["team-a/l"]);
}
