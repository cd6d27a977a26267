//! The step both reconciles end with, written once so that both kinds publish alike: the status a
//! reconcile computed, with the audit's `Valid` condition added, replaces the published one (one
//! merge patch, field manager [`FIELD_MANAGER`]) only if it differs, and only then are the Events of
//! what turned recorded: a provider's capabilities, either kind's `Valid`.
//!
//! So a status write that the watch brings back, or a restart that finds every status published,
//! writes nothing and repeats no Event.

use std::borrow::Cow;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::IgnoredAny;

use super::audit::Finding;
use super::cached::CachedLease;
use super::context::{Context, Stateful};
use super::error::Error;
use super::known::{Verdict, Verdicts};
use super::status::{Conditions, kind_label};
use sandcap_core::api::{
    DriverStatus, SandboxLease, SandboxLeaseStatus, SandboxProvider, SandboxProviderStatus, StatusPatch,
};
use sandcap_core::text;
use sandcap_core::vocabulary::{ConditionReason as Why, ConditionStatus, ConditionType as Type, FIELD_MANAGER, Kind};

/// The apiserver refuses an Event whose note is longer.
const MAX_NOTE: usize = 1024;

/// An object whose status a controller publishes, as its cache holds it.
pub trait Publish: Stateful {
    const KIND: Kind;
    /// The resource its status is written to (a cached lease is trimmed; the apiserver's is whole).
    type Written: Resource<DynamicType = ()>;
    type Status: Serialize;

    /// Where its status is written.
    fn api(&self, client: Client) -> Api<Self::Written>;
    /// The published conditions, as far as [`Conditions`] reads them.
    fn published_conditions(&self) -> Cow<'_, [Condition]>;
    /// Whether `desired` is the status published now.
    fn unchanged(&self, desired: &Self::Status) -> bool;
    fn conditions(status: &mut Self::Status) -> &mut Vec<Condition>;
    /// The Events of what `desired` turns, compared with the published status, besides `Valid`.
    fn turned(&self, _desired: &Self::Status) -> Vec<Event> {
        Vec::new()
    }
    /// What `status` counts in once published.
    fn verdict(status: &Self::Status) -> Verdict;
}

impl Publish for SandboxProvider {
    const KIND: Kind = Kind::SandboxProvider;
    type Written = SandboxProvider;
    type Status = SandboxProviderStatus;

    fn api(&self, client: Client) -> Api<SandboxProvider> {
        Api::all(client)
    }

    fn published_conditions(&self) -> Cow<'_, [Condition]> {
        Cow::Borrowed(self.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default())
    }

    fn unchanged(&self, desired: &SandboxProviderStatus) -> bool {
        self.status.as_ref() == Some(desired)
    }

    fn conditions(status: &mut SandboxProviderStatus) -> &mut Vec<Condition> {
        &mut status.conditions
    }

    fn turned(&self, desired: &SandboxProviderStatus) -> Vec<Event> {
        capability_changes(self.status.as_ref().map(|s| s.drivers.as_slice()).unwrap_or_default(), desired)
    }

    fn verdict(status: &SandboxProviderStatus) -> Verdict {
        let ready = status.conditions.iter().find(|c| c.type_ == Type::Ready.as_str());
        ready.map_or(Verdict::None, |c| Verdict::Ready(Box::new((c.status.clone(), c.reason.clone()))))
    }
}

/// A lease's published status is known by its digest and its conditions' times ([`CachedLease`]).
impl Publish for CachedLease {
    const KIND: Kind = Kind::SandboxLease;
    type Written = SandboxLease;
    type Status = SandboxLeaseStatus;

    fn api(&self, client: Client) -> Api<SandboxLease> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }

    fn published_conditions(&self) -> Cow<'_, [Condition]> {
        Cow::Owned(self.conditions())
    }

    fn unchanged(&self, desired: &SandboxLeaseStatus) -> bool {
        self.is_published(desired)
    }

    fn conditions(status: &mut SandboxLeaseStatus) -> &mut Vec<Condition> {
        &mut status.conditions
    }

    fn verdict(status: &SandboxLeaseStatus) -> Verdict {
        Verdict::Capabilities(status.explanations.iter().map(|e| (e.capability, e.reason)).collect())
    }
}

/// Publishes `desired`, `obj`'s status computed at `now`, with `finding`'s `Valid` condition. The
/// Events follow a successful write: a failed one is retried, and the Events with it.
pub async fn publish<K: Publish>(
    ctx: &Context,
    obj: &K,
    desired: K::Status,
    finding: &Finding,
    now: &Time,
) -> Result<(), Error> {
    let verdict = K::verdict(&desired);
    let counted = |verdict| K::known(ctx, obj, |known, _| known.published(verdict, &Verdicts::of(&ctx.metrics)));
    let Some(Write { status, events }) = decide(obj, desired, finding, now) else {
        counted(verdict);
        return Ok(());
    };
    if !ctx.writes.fence.holds() {
        return Err(Error::NotLeading);
    }
    let version = obj.meta().resource_version.as_deref();
    replace_status(obj.api(ctx.client.clone()), K::KIND, &obj.name_any(), version, &status).await?;
    counted(verdict);
    // kube's Recorder puts a cluster-scoped provider's Events in `default`, a lease's in its
    // namespace.
    let reference = obj.object_ref(&());
    for event in events {
        ctx.writes.events.record(event, reference.clone());
    }
    Ok(())
}

/// A status to write and the Events to record once it is written.
struct Write<S> {
    status: S,
    events: Vec<Event>,
}

/// What publishing `desired` comes to, without I/O: nothing if, with its `Valid` condition, it is
/// the published status; otherwise the whole status and the Events of what turned.
fn decide<K: Publish>(obj: &K, mut desired: K::Status, finding: &Finding, now: &Time) -> Option<Write<K::Status>> {
    let previous = obj.published_conditions();
    let valid = valid(finding, &Conditions { generation: obj.meta().generation, previous: &previous, now });
    K::conditions(&mut desired).push(valid.clone());
    if obj.unchanged(&desired) {
        return None;
    }
    let mut events = obj.turned(&desired);
    events.extend(valid_turned(&previous, &valid));
    Some(Write { status: desired, events })
}

/// Each kind's status write, by [`Kind`].
static STATUS_PATCHES: LazyLock<[StatusPatch; 2]> =
    LazyLock::new(|| [Kind::SandboxProvider, Kind::SandboxLease].map(StatusPatch::new));

/// Replaces the whole status with `status`, as field manager [`FIELD_MANAGER`].
///
/// sandcap owns every field of the status, so it needs none of the per-field ownership a
/// server-side apply computes; of the writes that replace a whole status the apiserver serves a
/// merge patch fastest (docs/controller.md, "Scale"), and [`StatusPatch`] names null what the new
/// status leaves out. `managedFields` stays true for `kubectl` users: the apiserver records the
/// fields it sets under `sandcap` (operation `Update`, subresource `status`). The apiserver
/// answers with the whole object, which the watch brings back anyway: it is skipped, not decoded
/// (its managed fields alone are as large as the rest).
async fn replace_status<K>(
    api: Api<K>,
    kind: Kind,
    name: &str,
    version: Option<&str>,
    status: &impl Serialize,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>,
{
    let failed = |source| Error::WriteStatus { kind: kind_label::<K>(), name: name.to_string(), source };
    let value = serde_json::to_value(status).map_err(|e| failed(kube::Error::SerdeError(e)))?;
    let mut patch = STATUS_PATCHES[kind as usize].patch(value);
    // The status was computed from this version of the object: a newer one (a spec change, or
    // another leader's status) refuses the write with 409, so a late write never undoes it.
    if let Some(version) = version {
        patch["metadata"] = serde_json::json!({ "resourceVersion": version });
    }
    let patch = Patch::Merge(patch);
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    let mut request = kube::core::Request::new(api.resource_url())
        .patch_subresource("status", name, &params, &patch)
        .map_err(|e| failed(kube::Error::BuildRequest(e)))?;
    request.extensions_mut().insert("patch_status");
    match api.into_client().request::<IgnoredAny>(request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(Error::Conflict { kind: kind_label::<K>() }),
        Err(error) => Err(failed(error)),
    }
}

/// The `Valid` condition of `finding`, among the status's other `conditions`.
fn valid(finding: &Finding, conditions: &Conditions) -> Condition {
    let reason = if finding.conforms { Why::Conforms } else { Why::BreaksCurrentRules };
    conditions.set(Type::Valid, finding.conforms, reason, finding.message.clone())
}

/// The Event when `valid` turns: Warning when the object starts breaking the rules (first seen
/// breaking them included), Normal when it conforms again. An object first seen conforming has
/// nothing to report.
fn valid_turned(previous: &[Condition], valid: &Condition) -> Option<Event> {
    let broke_before = previous.iter().any(|c| c.type_ == Type::Valid.as_str() && ConditionStatus::False.is(&c.status));
    let conforms = ConditionStatus::True.is(&valid.status);
    let turned = if conforms { broke_before } else { !broke_before };
    turned.then(|| Event {
        type_: if conforms { EventType::Normal } else { EventType::Warning },
        reason: valid.reason.clone(),
        note: Some(text::clip(&valid.message, MAX_NOTE)),
        action: "Validate".into(),
        secondary: None,
    })
}

/// One Event per driver and direction, compared with the drivers published `before`. A driver
/// seen for the first time has nothing to turn on or off.
fn capability_changes(before: &[DriverStatus], desired: &SandboxProviderStatus) -> Vec<Event> {
    let mut events = Vec::new();
    for driver in &desired.drivers {
        let Some(old) = before.iter().find(|d| d.driver_key == driver.driver_key) else { continue };
        for on in [true, false] {
            let changed: Vec<String> = driver
                .explanations
                .iter()
                .filter(|e| e.granted == on && old.capabilities.get(e.capability) != on)
                .map(|e| if on { e.capability.to_string() } else { format!("{} ({})", e.capability, e.reason) })
                .collect();
            if changed.is_empty() {
                continue;
            }
            events.push(Event {
                type_: if on { EventType::Normal } else { EventType::Warning },
                reason: if on { Why::CapabilitiesGranted } else { Why::CapabilitiesRevoked }.to_string(),
                note: Some(format!(
                    "driver {}: {} now {}",
                    driver.driver_key,
                    changed.join(", "),
                    if on { "on" } else { "off" }
                )),
                action: "Resolve".into(),
                secondary: None,
            });
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{T0, later, lease, provider, time};
    use sandcap_core::api::{Capabilities, Explanation};
    use sandcap_core::vocabulary::{Capability, DriverKind, Reason};

    fn conforming() -> Finding {
        Finding { conforms: true, message: "the CRD and the webhook would admit it today".into() }
    }

    fn broken(problem: &str) -> Finding {
        Finding { conforms: false, message: format!("the webhook would refuse it today: {problem}") }
    }

    fn valid_at(finding: &Finding, previous: &[Condition], now: &str) -> Condition {
        valid(finding, &Conditions { generation: Some(1), previous, now: &time(now) })
    }

    /// Each Event to record: (type, reason, note).
    fn events<S>(write: &Write<S>) -> Vec<(EventType, &str, &str)> {
        write.events.iter().map(|e| (e.type_, e.reason.as_str(), e.note.as_deref().unwrap_or_default())).collect()
    }

    /// A provider status whose driver `k` resolved `capabilities` (on, or off as declared false).
    fn drivers(capabilities: &[(Capability, bool)]) -> SandboxProviderStatus {
        let mut resolved = Capabilities::default();
        let explanations = capabilities.iter().map(|&(capability, granted)| {
            resolved.set(capability, granted);
            let reason = if granted { Reason::Granted } else { Reason::DeclaredFalse };
            Explanation { capability, granted, reason, message: String::new() }
        });
        let explanations = explanations.collect();
        let driver = DriverStatus {
            driver_key: "k".into(),
            kind: Some(DriverKind::SandboxProvider),
            declared: Default::default(),
            capabilities: resolved,
            explanations,
        };
        SandboxProviderStatus { observed_generation: Some(1), drivers: vec![driver], ..Default::default() }
    }

    /// `p` with the status `desired` published as `finding` makes it.
    fn published(p: &SandboxProvider, desired: SandboxProviderStatus, finding: &Finding) -> SandboxProvider {
        let write = decide(p, desired, finding, &time(T0)).expect("written");
        SandboxProvider { status: Some(write.status), ..p.clone() }
    }

    #[test]
    fn a_status_is_written_with_its_valid_condition_last_and_then_never_again() {
        let p = provider("p").driver("k").build();
        let desired = drivers(&[(Capability::NativeSyncIn, true)]);
        let write = decide(&p, desired.clone(), &conforming(), &time(T0)).expect("a first status");
        let valid = write.status.conditions.last().expect("Valid");
        assert_eq!((valid.type_.as_str(), valid.status.as_str(), valid.reason.as_str()), ("Valid", "True", "Conforms"));
        assert_eq!((valid.observed_generation, &valid.last_transition_time), (Some(1), &time(T0)));
        assert!(write.events.is_empty(), "first seen conforming, its driver first seen");
        let p = SandboxProvider { status: Some(write.status), ..p };
        assert!(decide(&p, desired, &conforming(), &later(T0, 3600)).is_none(), "the same status, later");

        let l = lease("team-a", "l").of("p", "k").build();
        let desired = SandboxLeaseStatus { observed_generation: Some(1), ..Default::default() };
        let write = decide(&CachedLease::from(l.clone()), desired.clone(), &broken("x"), &time(T0)).expect("first");
        let note = "the webhook would refuse it today: x";
        assert_eq!(events(&write), [(EventType::Warning, "BreaksCurrentRules", note)], "first seen breaking");
        let l = CachedLease::from(SandboxLease { status: Some(write.status), ..l });
        assert!(decide(&l, desired.clone(), &broken("x"), &later(T0, 3600)).is_none(), "no Event repeated");
        let fixed = decide(&l, desired, &conforming(), &later(T0, 3600)).expect("fixed");
        assert_eq!(events(&fixed), [(EventType::Normal, "Conforms", "the CRD and the webhook would admit it today")]);
        assert_eq!(fixed.status.conditions.last().unwrap().last_transition_time, later(T0, 3600));
    }

    #[test]
    fn a_capability_that_turns_is_an_event_per_driver_and_direction_before_valids() {
        let (sync_in, sync_out) = (Capability::NativeSyncIn, Capability::NativeSyncOut);
        let p = provider("p").driver("k").build();
        let p = published(&p, drivers(&[(sync_in, true), (sync_out, false)]), &conforming());
        let write = decide(&p, drivers(&[(sync_in, false), (sync_out, true)]), &broken("x"), &later(T0, 60));
        assert_eq!(
            events(&write.expect("turned")),
            [
                (EventType::Normal, "CapabilitiesGranted", "driver k: nativeSyncOut now on"),
                (EventType::Warning, "CapabilitiesRevoked", "driver k: nativeSyncIn (DeclaredFalse) now off"),
                (EventType::Warning, "BreaksCurrentRules", "the webhook would refuse it today: x"),
            ]
        );
        // Written, as anything else that changed, with no Event.
        let moved = SandboxProviderStatus { observed_generation: Some(2), ..drivers(&[(sync_in, true)]) };
        assert!(decide(&p, moved, &conforming(), &later(T0, 60)).expect("written").events.is_empty());
        let mut first_seen = drivers(&[(sync_in, false), (sync_out, true)]);
        first_seen.drivers[0].driver_key = "j".into();
        assert!(decide(&p, first_seen, &conforming(), &later(T0, 60)).expect("written").events.is_empty());
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_verdict_stays() {
        let first = valid_at(&broken("x"), &[], T0);
        let again = valid_at(&broken("y"), std::slice::from_ref(&first), "2030-01-01T01:00:00Z");
        assert_eq!(
            (again.message.as_str(), &again.last_transition_time),
            ("the webhook would refuse it today: y", &time(T0))
        );
        let fixed = valid_at(&conforming(), &[again], "2030-01-01T02:00:00Z");
        assert_eq!((fixed.status.as_str(), fixed.last_transition_time), ("True", later(T0, 7200)));
    }

    #[test]
    fn an_event_when_the_verdict_turns_and_only_then() {
        let bad = broken(&"é".repeat(2000));
        let (valid, broken) = (valid_at(&conforming(), &[], T0), valid_at(&bad, &[], T0));
        assert!(valid_turned(&[], &valid).is_none(), "first seen conforming");
        let warning = valid_turned(&[], &broken).expect("first seen breaking the rules");
        assert_eq!((warning.type_, warning.reason.as_str()), (EventType::Warning, "BreaksCurrentRules"));
        assert!(warning.note.as_ref().is_some_and(|n| n.len() <= MAX_NOTE && n.starts_with("the webhook")));
        assert!(valid_turned(std::slice::from_ref(&valid), &broken).is_some(), "conforming, then breaking");
        assert!(valid_turned(std::slice::from_ref(&broken), &broken).is_none(), "still breaking");
        let normal = valid_turned(std::slice::from_ref(&broken), &valid).expect("conforms again");
        assert_eq!((normal.type_, normal.reason.as_str()), (EventType::Normal, "Conforms"));
        assert!(valid_turned(std::slice::from_ref(&valid), &valid).is_none(), "still conforming");
    }
}

#[cfg(test)]
mod requests;
