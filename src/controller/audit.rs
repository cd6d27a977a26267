//! The audit of stored objects: every provider and lease judged against today's rules, the CRD's
//! and the webhook's, by the function `sandcap validate` calls ([`crate::judge`]), with the
//! operator's own webhook settings. The finding is counted here, in the gauge
//! `sandcap_nonconforming_objects`, and published by [`super::publish`] as the `Valid` condition
//! and an Event when the verdict turns.
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
//! ([`Audits::judge_early`]) before it queues the reconcile, which then finds the judgment made or
//! under way instead of starting it (a host waits for a new lease to resolve, and the thread judges
//! on another core while the reconcile is queued and started).

use std::collections::HashMap;
use std::panic;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, LazyLock, Mutex};
use std::thread;

use kube::{Resource, ResourceExt};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::judge::{Judgment, Options, Server, judge};
use crate::metrics::{KindLabels, Metrics};
use crate::versions::ContractVersion;
use crate::vocabulary::Kind;

/// The message of an object that conforms.
const CONFORMS: &str = "the CRD and the webhook would admit it today";
/// Early judgments waiting for their reconcile, at most (a burst beyond it, or a start's listing,
/// is judged by the reconciles, as many at once as run).
const EARLY_MAX: usize = 64;
static CONFORMING: LazyLock<Arc<Finding>> =
    LazyLock::new(|| Arc::new(Finding { conforms: true, message: CONFORMS.into() }));

/// What the `Valid` condition says of one generation of an object.
#[derive(Debug, PartialEq, Eq)]
pub struct Finding {
    pub conforms: bool,
    /// [`CONFORMS`], or which layer would refuse the object and its problems, at most
    /// [`crate::judge::MAX_MESSAGE`] bytes.
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
    /// to grant ([`crate::contract::Refusals`]).
    pub fn refusal(&self) -> Option<String> {
        (!self.conforms).then(|| self.message.clone())
    }
}

/// The findings of this run, by uid, and the gauge they make.
pub struct Audits {
    /// Where each kind's objects are judged, in [`Kind`] order.
    judges: [Sender<Job>; 2],
    judged: Mutex<HashMap<String, Judged>>,
    /// Judgments started by [`Audits::judge_early`], by uid, with the generation judged.
    early: Mutex<HashMap<String, (Option<i64>, Pending)>>,
    nonconforming: Family<KindLabels, Gauge>,
    contract: ContractVersion,
}

struct Judged {
    kind: Kind,
    generation: Option<i64>,
    finding: Arc<Finding>,
}

/// A finding on its way from a judging thread.
type Pending = oneshot::Receiver<Arc<Finding>>;

/// One object to judge, and where its finding goes.
struct Job {
    object: Value,
    reply: oneshot::Sender<Arc<Finding>>,
}

impl Audits {
    /// Judges with `options`, the `run` flags this process's webhook runs with. Both kinds' gauges
    /// start at 0, so that the series exist before anything breaks a rule.
    pub fn new(options: Options, metrics: &Metrics) -> Audits {
        let judges = Kind::ALL.map(|kind| judge_on_a_thread(kind, options.clone()));
        let nonconforming = metrics.nonconforming.clone();
        let audits = Audits {
            judges,
            judged: Mutex::default(),
            early: Mutex::default(),
            nonconforming,
            contract: options.contract,
        };
        audits.clear();
        audits
    }

    /// The contract version it judges by, which the reconciles resolve under too.
    pub fn contract(&self) -> ContractVersion {
        self.contract
    }

    /// The finding of `obj`'s current generation, whose spec is `spec`: judged on first sight of
    /// the generation (on its kind's thread), remembered here by uid after. The lease table
    /// remembers the leases' findings itself, next to the rest of each lease ([`Audits::judge`]).
    pub async fn finding<K: Resource<DynamicType = ()>>(&self, obj: &K, spec: &impl Serialize) -> Arc<Finding> {
        let kind = Kind::from_kind(&K::kind(&())).expect("the controllers reconcile sandcap kinds");
        let generation = obj.meta().generation;
        let uid = obj.meta().uid.as_deref();
        if let Some(known) = uid.and_then(|uid| self.lookup(uid, generation)) {
            return known;
        }
        let finding = self.judge(obj, spec).await;
        if let Some(uid) = uid {
            let mut judged = self.judged.lock().expect("not poisoned");
            let new = Judged { kind, generation, finding: finding.clone() };
            self.count(&new, 1);
            if let Some(old) = judged.insert(uid.to_string(), new) {
                self.count(&old, -1);
            }
        }
        finding
    }

    /// Judges `obj`, whose spec is `spec`, on its kind's thread, or takes the judgment
    /// [`Audits::judge_early`] started of its generation; remembers nothing.
    pub async fn judge<K: Resource<DynamicType = ()>>(&self, obj: &K, spec: &impl Serialize) -> Arc<Finding> {
        let uid = obj.meta().uid.as_deref();
        let early = uid.and_then(|uid| self.early.lock().expect("not poisoned").remove(uid));
        let finding = match early {
            Some((generation, pending)) if generation == obj.meta().generation => pending,
            _ => self.submit(obj, spec),
        };
        finding.await.unwrap_or_else(|_| Arc::new(Finding::unjudged()))
    }

    /// Starts judging `obj`'s generation, whose spec is `spec`, for the reconcile that
    /// [`Audits::judge`]s it next, unless [`EARLY_MAX`] other judgments wait for theirs. Only the
    /// lease watch calls it, so the room it finds is still there once the object is encoded (off
    /// the lock the reconciles take).
    pub fn judge_early<K: Resource<DynamicType = ()>>(&self, obj: &K, spec: &impl Serialize) {
        let Some(uid) = obj.meta().uid.as_deref() else { return };
        let room = {
            let early = self.early.lock().expect("not poisoned");
            early.len() < EARLY_MAX || early.contains_key(uid)
        };
        if room {
            let pending = self.submit(obj, spec);
            self.early.lock().expect("not poisoned").insert(uid.to_string(), (obj.meta().generation, pending));
        }
    }

    /// Hands `obj` to its kind's thread.
    fn submit<K: Resource<DynamicType = ()>>(&self, obj: &K, spec: &impl Serialize) -> Pending {
        let kind = Kind::from_kind(&K::kind(&())).expect("the controllers reconcile sandcap kinds");
        let (reply, finding) = oneshot::channel();
        // The thread outlives `self` and answers every job (a panic is caught there).
        let _ = self.judges[kind as usize].send(Job { object: stored(obj, spec), reply });
        finding
    }

    fn lookup(&self, uid: &str, generation: Option<i64>) -> Option<Arc<Finding>> {
        let judged = self.judged.lock().expect("not poisoned");
        judged.get(uid).filter(|j| j.generation == generation).map(|j| j.finding.clone())
    }

    /// The object is gone: it no longer counts.
    pub fn forget(&self, uid: &str) {
        self.early.lock().expect("not poisoned").remove(uid);
        if let Some(old) = self.judged.lock().expect("not poisoned").remove(uid) {
            self.count(&old, -1);
        }
    }

    /// Forgets every finding and counts 0: the controllers stopped (the leader lease was lost, or
    /// shutdown), and the leader counts.
    pub fn clear(&self) {
        self.judged.lock().expect("not poisoned").clear();
        self.early.lock().expect("not poisoned").clear();
        for kind in Kind::ALL {
            self.nonconforming.get_or_create(&KindLabels { kind: kind.as_str() }).set(0);
        }
    }

    fn count(&self, judged: &Judged, by: i64) {
        judged.finding.count(&self.nonconforming.get_or_create(&KindLabels { kind: judged.kind.as_str() }), by);
    }
}

/// A thread that judges `kind`'s objects until the last [`Audits`] holding its sender is gone.
/// Judging is CPU work bounded by the webhook's budgets (a provider's may compile `configSchema`s
/// for up to the compile budget's second), so it runs off the async workers, and one thread per
/// kind keeps a lease from ever waiting behind a provider. Its own thread also holds the CRDs'
/// compiled rules once ([`crate::judge`] compiles them per thread), not once per worker thread.
fn judge_on_a_thread(kind: Kind, options: Options) -> Sender<Job> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let judging = move || {
        // Compiled before the first job, not by it: a lease created right after a start would
        // wait for it.
        crate::schema::prepare(kind, options.contract);
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
