//! What a switch of contract version changes, from the stored objects alone: which objects the new
//! version's rules refuse (or admit again), and which capabilities each lease gains or loses, with
//! the reason of the `explain` chain on the side where the capability is off. Pure: the objects
//! are read before ([`super::read`]).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use serde::Serialize;

use super::super::explain::{LeaseInputs, refusal};
use crate::controller::stored;
use sandcap_core::addresses::WorkerPolicy;
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::contract::{Contract, ContractVersion, Refusals, Resolution};
use sandcap_core::judge::{Options, Server, judge};
use sandcap_core::text;
use sandcap_core::vocabulary::{Capability, ConditionType, Kind, Reason};

/// The most of one message a plan shows: `sandcap validate` and `sandcap explain` give the whole.
pub const MAX_SHOWN: usize = 1024;
/// The exit code when something changes but no object is newly refused.
pub const CHANGES: i32 = 1;
/// The exit code when the new version refuses an object the old one admits (2 is every command's
/// own failure).
pub const REFUSED: i32 = 3;

/// The objects a plan reads, live or from files.
#[derive(Debug, Default)]
pub struct Stored {
    pub providers: Vec<SandboxProvider>,
    pub leases: Vec<SandboxLease>,
}

/// The switch planned, and the operator's worker policy the objects are judged with.
pub struct Switch {
    pub target: ContractVersion,
    /// `None`: each object's own `status.contract` (v1 when it records none).
    pub from: Option<ContractVersion>,
    pub workers: WorkerPolicy,
}

/// What the switch does to an object's admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Admission {
    /// Admitted under the old version, refused under the new one.
    Refused,
    /// Refused under both: the switch changes nothing for it, but it grants nothing either.
    StillRefused,
    /// Refused under the old version, admitted under the new one.
    Admitted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    Gains,
    Loses,
}

/// An object the new version refuses, or whose admission the switch changes.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectChange {
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The version it is compared from.
    pub from: ContractVersion,
    pub admission: Admission,
    /// The refusal: the new version's, or for `admitted` the old one's.
    pub message: String,
}

/// A capability a lease gains or loses, and why it is off where it is off.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityChange {
    pub capability: Capability,
    pub change: Change,
    /// Where it is off: the old version for a gain, the new one for a loss.
    pub off_under: ContractVersion,
    /// The first gate that removes it there; `None` when it is not a key of that version.
    pub reason: Option<Reason>,
    pub message: String,
}

#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseChange {
    pub namespace: String,
    pub name: String,
    pub from: ContractVersion,
    pub changes: Vec<CapabilityChange>,
}

#[derive(Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub providers: usize,
    pub leases: usize,
    pub refused: usize,
    pub still_refused: usize,
    pub admitted: usize,
    pub leases_changing: usize,
    pub gains: usize,
    pub losses: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The version planned.
    pub contract: ContractVersion,
    /// Providers by name, then leases by namespace and name.
    pub objects: Vec<ObjectChange>,
    /// The leases that gain or lose a capability, by namespace and name.
    pub leases: Vec<LeaseChange>,
    pub summary: Summary,
}

impl Plan {
    /// [`REFUSED`] when the new version refuses an object the old one admits, else [`CHANGES`]
    /// when anything changes, else 0.
    pub fn exit_code(&self) -> i32 {
        let s = &self.summary;
        if s.refused > 0 {
            REFUSED
        } else if s.admitted + s.leases_changing > 0 {
            CHANGES
        } else {
            0
        }
    }
}

pub fn plan(stored: &Stored, switch: &Switch) -> Plan {
    let mut providers: Vec<&SandboxProvider> = stored.providers.iter().collect();
    providers.sort_by_key(|p| p.metadata.name.clone());
    let mut leases: Vec<&SandboxLease> = stored.leases.iter().collect();
    leases.sort_by_key(|l| (l.metadata.namespace.clone(), l.metadata.name.clone()));
    let mut judged = Judged { workers: &switch.workers, providers: HashMap::new() };
    let target = switch.target;
    let mut objects = Vec::new();
    for &p in &providers {
        let from = switch.from.or(p.status.as_ref().and_then(|s| s.contract)).unwrap_or_default();
        let (was, is) = (judged.provider(p, from), judged.provider(p, target));
        objects.extend(admission(Kind::SandboxProvider, None, p.metadata.name.clone(), from, was, is));
    }
    let by_name: BTreeMap<&str, &SandboxProvider> =
        providers.iter().filter_map(|p| Some((p.metadata.name.as_deref()?, *p))).collect();
    let mut changed = Vec::new();
    for lease in leases {
        let status = lease.status.as_ref();
        let from = switch.from.or(status.and_then(|s| s.contract)).unwrap_or_default();
        let provider = by_name.get(lease.spec.provider_ref.name.as_str()).copied();
        let recorded = status.map(|s| (s.contract.unwrap_or_default(), s.conditions.as_slice()));
        let resolve = |judged: &mut Judged, version: ContractVersion| {
            let lease_refusal = refusal_under(lease, &lease.spec, recorded, version, judged.workers);
            let refusals =
                Refusals { lease: lease_refusal.clone(), provider: provider.and_then(|p| judged.provider(p, version)) };
            (lease_refusal, LeaseInputs::read(lease, provider, refusals).resolve(version.contract()))
        };
        let ((was, before), (is, after)) = (resolve(&mut judged, from), resolve(&mut judged, target));
        let (namespace, name) = (lease.metadata.namespace.clone().unwrap_or_default(), lease.metadata.name.clone());
        objects.extend(admission(Kind::SandboxLease, Some(namespace.clone()), name.clone(), from, was, is));
        let changes = diff(from.contract(), &before, target.contract(), &after);
        if !changes.is_empty() {
            changed.push(LeaseChange { namespace, name: name.unwrap_or_default(), from, changes });
        }
    }
    let count = |a: Admission| objects.iter().filter(|o| o.admission == a).count();
    let each = |c: Change| changed.iter().flat_map(|l| &l.changes).filter(|x| x.change == c).count();
    let summary = Summary {
        providers: stored.providers.len(),
        leases: stored.leases.len(),
        refused: count(Admission::Refused),
        still_refused: count(Admission::StillRefused),
        admitted: count(Admission::Admitted),
        leases_changing: changed.len(),
        gains: each(Change::Gains),
        losses: each(Change::Loses),
    };
    Plan { contract: target, objects, leases: changed, summary }
}

/// The providers' refusals per version, each judged at most once: many leases read one provider.
struct Judged<'a> {
    workers: &'a WorkerPolicy,
    providers: HashMap<(String, ContractVersion), Option<String>>,
}

impl Judged<'_> {
    fn provider(&mut self, p: &SandboxProvider, version: ContractVersion) -> Option<String> {
        let key = (p.metadata.name.clone().unwrap_or_default(), version);
        let recorded = p.status.as_ref().map(|s| (s.contract.unwrap_or_default(), s.conditions.as_slice()));
        let workers = self.workers;
        self.providers.entry(key).or_insert_with(|| refusal_under(p, &p.spec, recorded, version, workers)).clone()
    }
}

/// What the rules of `version` refuse of an object: its `Valid` condition when sandcap wrote it
/// under that version (`recorded`: status's contract and conditions) for the object's generation,
/// which is what the cluster concluded with the operator's own flags; else its judgment now, of
/// the form the controllers judge, with `workers`.
fn refusal_under<K: Resource<DynamicType = ()>>(
    object: &K,
    spec: &impl Serialize,
    recorded: Option<(ContractVersion, &[Condition])>,
    version: ContractVersion,
    workers: &WorkerPolicy,
) -> Option<String> {
    let generation = object.meta().generation;
    let refused = if let Some((under, conditions)) = recorded
        && under == version
        && conditions.iter().any(|c| c.type_ == ConditionType::Valid.as_str() && c.observed_generation == generation)
    {
        refusal(conditions)
    } else {
        let options = Options { workers: workers.clone(), contract: version };
        judge(&stored(object, spec), &options, Server::default()).refusal()
    };
    refused.map(|m| text::clip(&m, MAX_SHOWN))
}

/// The object's line of the plan, if the new version refuses it or the switch changes its
/// admission (`was`, `is`: its refusals under the old and the new version).
fn admission(
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
    from: ContractVersion,
    was: Option<String>,
    is: Option<String>,
) -> Option<ObjectChange> {
    let (admission, message) = match (was, is) {
        (None, Some(now)) => (Admission::Refused, now),
        (Some(_), Some(now)) => (Admission::StillRefused, now),
        (Some(then), None) => (Admission::Admitted, then),
        (None, None) => return None,
    };
    Some(ObjectChange { kind, namespace, name: name.unwrap_or_default(), from, admission, message })
}

/// The capabilities on under one resolution and off under the other, over both versions' keys (a
/// key of one version only is off under the other).
pub fn diff(from: &Contract, before: &Resolution, to: &Contract, after: &Resolution) -> Vec<CapabilityChange> {
    Capability::ALL
        .into_iter()
        .filter_map(|cap| {
            let (change, contract, off) = match (before.is_granted(cap), after.is_granted(cap)) {
                (false, true) => (Change::Gains, from, before),
                (true, false) => (Change::Loses, to, after),
                _ => return None,
            };
            let (reason, message) = match off.explanations.iter().find(|e| e.capability == cap) {
                Some(e) => (Some(e.reason), text::clip(&e.message, MAX_SHOWN)),
                None => (None, format!("not a key of contract {}", contract.version)),
            };
            Some(CapabilityChange { capability: cap, change, off_under: contract.version, reason, message })
        })
        .collect()
}
