//! The audit of stored objects: every provider and lease judged against today's rules, the CRD's
//! and the webhook's, by the function `sandcap validate` calls ([`sandcap_core::judge`]), with the
//! operator's own webhook settings. The finding is kept and counted (the gauge
//! `sandcap_nonconforming_objects`) by the object's table ([`super::cache`]: the lease and provider tables), and published by
//! [`super::publish`] as the `Valid` condition and an Event when the verdict turns.
//!
//! An object gets here without the webhook's say when it was stored while the webhook was
//! unreachable or not registered, or before a rule was added. There is no old object to ratchet
//! against, as the webhook does on UPDATE: every problem is reported.
//!
//! Judged once per generation: the spec (with the kind and the name) is all that is judged, and
//! only a spec change moves the generation, so a status write, a probe or a provider's change
//! judges nothing again. A new sandcap, which may bring new rules, judges every object as it
//! starts, since nothing is kept across runs.
//!
//! A lease's new generation is judged early: its watch event hands it to the audit thread
//! ([`super::cache::Leases::judge_early`]) before it queues the reconcile, which then finds the
//! judgment made or under way instead of starting it (a host waits for a new lease to resolve, and
//! the thread judges on another core while the reconcile is queued and started).

use std::panic;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, LazyLock};
use std::thread;

use kube::{Resource, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use sandcap_core::judge::{Judgment, Options, Server, judge};
use sandcap_core::versions::ContractVersion;
use sandcap_core::vocabulary::Kind;

/// The message of an object that conforms.
const CONFORMS: &str = "the CRD and the webhook would admit it today";
static CONFORMING: LazyLock<Arc<Finding>> =
    LazyLock::new(|| Arc::new(Finding { conforms: true, message: CONFORMS.into() }));

/// What the `Valid` condition says of one generation of an object.
#[derive(Debug, PartialEq, Eq)]
pub struct Finding {
    pub conforms: bool,
    /// [`CONFORMS`], or which layer would refuse the object and its problems, at most
    /// [`sandcap_core::judge::MAX_MESSAGE`] bytes.
    pub message: String,
}

impl Finding {
    /// What an object gets if judging it failed (a bug: nothing it holds should make judging
    /// panic), so that its status is still written and someone looks.
    fn unjudged() -> Finding {
        Finding { conforms: false, message: "sandcap could not judge it: an internal error (see sandcap's log)".into() }
    }

    /// The finding of a judgment: its problems bounded as the webhook's denials are. Every
    /// conforming object shares one finding: most objects conform.
    pub fn of(judgment: &Judgment) -> Arc<Finding> {
        match judgment.refusal() {
            None => CONFORMING.clone(),
            Some(message) => Arc::new(Finding { conforms: false, message }),
        }
    }

    /// Adds `by` to `gauge` if it does not conform (`sandcap_nonconforming_objects`).
    pub fn count(&self, gauge: &Gauge, by: i64) {
        if !self.conforms {
            gauge.inc_by(by);
        }
    }

    /// The problems of an object that does not conform, for the explanations of what it refuses
    /// to grant ([`sandcap_core::contract::Refusals`]).
    pub fn refusal(&self) -> Option<String> {
        (!self.conforms).then(|| self.message.clone())
    }
}

/// Where objects are judged: one thread per kind. What each object's judgment found is kept by
/// its kind's table ([`super::cache`]: the lease and provider tables).
pub struct Audits {
    /// Where each kind's objects are judged, in [`Kind`] order.
    judges: [Sender<Job>; 2],
    contract: ContractVersion,
}

/// A finding on its way from a judging thread.
pub type Pending = oneshot::Receiver<Arc<Finding>>;

/// One object to judge, and where its finding goes.
struct Job {
    object: Value,
    reply: oneshot::Sender<Arc<Finding>>,
}

impl Audits {
    /// Judges with `options`, the `run` flags this process's webhook runs with.
    pub fn new(options: Options) -> Audits {
        let judges = Kind::ALL.map(|kind| judge_on_a_thread(kind, options.clone()));
        Audits { judges, contract: options.contract }
    }

    /// The contract version it judges by, which the reconciles resolve under too.
    pub fn contract(&self) -> ContractVersion {
        self.contract
    }

    /// Hands `obj`, whose spec is `spec`, to its kind's thread.
    pub fn submit<K: Resource<DynamicType = ()>>(&self, obj: &K, spec: &impl Serialize) -> Pending {
        let kind = Kind::from_kind(&K::kind(&())).expect("the controllers reconcile sandcap kinds");
        let (reply, finding) = oneshot::channel();
        // The thread outlives `self` and answers every job (a panic is caught there).
        let _ = self.judges[kind as usize].send(Job { object: stored(obj, spec), reply });
        finding
    }
}

/// The finding a judging thread sends.
pub async fn judged(pending: Pending) -> Arc<Finding> {
    pending.await.unwrap_or_else(|_| Arc::new(Finding::unjudged()))
}

/// A thread that judges `kind`'s objects until the last [`Audits`] holding its sender is gone.
/// Judging is CPU work bounded by the webhook's budgets (a provider's may compile `configSchema`s
/// for up to the compile budget's second), so it runs off the async workers, and one thread per
/// kind keeps a lease from ever waiting behind a provider. Its own thread also holds the CRDs'
/// compiled rules once ([`sandcap_core::judge`] compiles them per thread), not once per worker thread.
fn judge_on_a_thread(kind: Kind, options: Options) -> Sender<Job> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let judging = move || {
        // Compiled before the first job, not by it: a lease created right after a start would
        // wait for it.
        sandcap_core::schema::prepare(kind, options.contract);
        for Job { object, reply } in queue {
            let judged = panic::catch_unwind(|| Finding::of(&judge(&object, &options, Server::default())));
            let finding = judged.unwrap_or_else(|_| {
                let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                tracing::error!(kind = kind.as_str(), name, "judging a stored object panicked");
                Arc::new(Finding::unjudged())
            });
            let _ = reply.send(finding);
        }
    };
    thread::Builder::new().name(format!("audit-{kind}")).spawn(judging).expect("a thread starts");
    jobs
}

/// What is judged of a stored object, as the controllers' caches hold it: its kind, name and spec
/// (the unknown keys the CRD keeps included: the types keep them too).
pub fn stored<K: Resource<DynamicType = ()>>(obj: &K, spec: &impl Serialize) -> Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": obj.name_any()},
        "spec": serde_json::to_value(spec).expect("a spec serializes"),
    })
}

#[cfg(test)]
mod tests;
