//! What a Service worker verifies: the methods every endpoint that may serve a run advertises
//! (docs/contract.md, "What verifies"). A run reaches whichever endpoint the Service hands it to,
//! so a method one endpoint lacks is not verified for any run, and an endpoint that did not
//! answer verifies nothing of the worker.

use std::collections::BTreeSet;

use crate::api::{EndpointDifference, EndpointsStatus, MAX_NAMED_ENDPOINTS};
use crate::versions::Contract;

/// One endpoint's last probe.
#[derive(Clone, Copy, Debug)]
pub struct EndpointProbe<'a> {
    /// `ip:port`.
    pub address: &'a str,
    pub pod: Option<&'a str>,
    pub answer: EndpointAnswer<'a>,
}

#[derive(Clone, Copy, Debug)]
pub enum EndpointAnswer<'a> {
    /// It answered `ok: true` with these `supportedMethods`.
    Methods(&'a [String]),
    /// Its probe failed (why is the log's to say).
    Failed,
}

/// What the endpoints verify together.
#[derive(Clone, Debug, PartialEq)]
pub struct Agreement {
    /// The methods every endpoint advertises, sorted; `None` when nothing is verified (no
    /// endpoint, or one that failed).
    pub methods: Option<Vec<String>>,
    pub status: EndpointsStatus,
    /// What status says of it, for the `WorkerVerified` condition.
    pub message: String,
}

/// The intersection of what `endpoints` answered. An endpoint is named in the status (at most
/// [`MAX_NAMED_ENDPOINTS`], failures first) when it failed, or when it lacks a method of
/// `contract`'s keys that another endpoint advertises.
pub fn agree(contract: &Contract, endpoints: &[EndpointProbe<'_>]) -> Agreement {
    let answers: Vec<BTreeSet<&str>> = endpoints
        .iter()
        .filter_map(|e| match e.answer {
            EndpointAnswer::Methods(methods) => Some(methods.iter().map(String::as_str).collect()),
            EndpointAnswer::Failed => None,
        })
        .collect();
    let common: BTreeSet<&str> = match answers.split_first() {
        Some((first, rest)) => rest.iter().fold(first.clone(), |acc, a| acc.intersection(a).copied().collect()),
        None => BTreeSet::new(),
    };
    let advertised: BTreeSet<&str> = answers.iter().flatten().copied().collect();
    let differing = differing(contract, endpoints, &advertised);

    let serving = endpoints.len();
    let failed = serving - answers.len();
    let agreeing = answers.iter().filter(|a| a.len() == common.len()).count();
    let status = EndpointsStatus {
        serving: serving as u32,
        answered: answers.len() as u32,
        agreeing: agreeing as u32,
        differing,
    };
    let (methods, message) = if serving == 0 {
        (None, "no endpoint serves the Service's port, so nothing is verified".to_string())
    } else if failed > 0 {
        let first = status.differing.first().map(|d| format!(" ({})", d.name()));
        (
            None,
            format!(
                "{failed} of {serving} endpoints failed their probe{}, so nothing is verified",
                first.unwrap_or_default()
            ),
        )
    } else {
        let lacking = answers.len() - agreeing;
        let lacking = if lacking > 0 { format!("; {lacking} lack a method another advertises") } else { String::new() };
        let message = format!(
            "{serving} of {serving} endpoints answered ok: true; {} supportedMethods every one advertises{lacking}",
            common.len()
        );
        (Some(common.iter().map(|m| m.to_string()).collect()), message)
    };
    Agreement { methods, status, message }
}

/// The endpoints to name in the status: those that failed, and those that lack a method of
/// `contract`'s keys that another advertised (`advertised`); failures first, at most
/// [`MAX_NAMED_ENDPOINTS`].
fn differing(
    contract: &Contract,
    endpoints: &[EndpointProbe<'_>],
    advertised: &BTreeSet<&str>,
) -> Vec<EndpointDifference> {
    let known: BTreeSet<&str> = contract.keys.iter().flat_map(|k| k.methods.iter().map(|m| m.as_str())).collect();
    // Each with its address, by which they are sorted (failures first).
    let mut differing: Vec<(&str, EndpointDifference)> = endpoints
        .iter()
        .filter_map(|e| {
            let (lacks, failed) = match e.answer {
                EndpointAnswer::Failed => (Vec::new(), true),
                EndpointAnswer::Methods(methods) => {
                    let own: BTreeSet<&str> = methods.iter().map(String::as_str).collect();
                    let lacks: Vec<String> =
                        advertised.difference(&own).filter(|m| known.contains(*m)).map(|m| m.to_string()).collect();
                    if lacks.is_empty() {
                        return None;
                    }
                    (lacks, false)
                }
            };
            // An endpoint is named by its Pod; by its address only where it names none.
            let address = e.pod.is_none().then(|| e.address.to_string());
            Some((e.address, EndpointDifference { pod: e.pod.map(Into::into), address, lacks, failed }))
        })
        .collect();
    differing.sort_by(|(a, x), (b, y)| (!x.failed, a).cmp(&(!y.failed, b)));
    differing.truncate(MAX_NAMED_ENDPOINTS);
    differing.into_iter().map(|(_, d)| d).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::ContractVersion;

    fn methods(list: &[&str]) -> Vec<String> {
        list.iter().map(|m| m.to_string()).collect()
    }

    fn probe<'a>(address: &'a str, answer: EndpointAnswer<'a>) -> EndpointProbe<'a> {
        EndpointProbe { address, pod: Some("pod"), answer }
    }

    #[test]
    fn every_endpoint_must_advertise_a_method_for_it_to_be_verified() {
        let contract = ContractVersion::V2.contract();
        let full = methods(&["environmentSyncIn", "environmentSyncOut", "custom"]);
        let old = methods(&["environmentSyncIn", "custom"]);
        let agreement = agree(
            contract,
            &[
                probe("10.0.0.1:80", EndpointAnswer::Methods(&full)),
                probe("10.0.0.2:80", EndpointAnswer::Methods(&old)),
            ],
        );
        assert_eq!(agreement.methods, Some(methods(&["custom", "environmentSyncIn"])));
        assert_eq!((agreement.status.serving, agreement.status.answered, agreement.status.agreeing), (2, 2, 1));
        let lacking = &agreement.status.differing;
        assert_eq!(lacking.len(), 1, "{lacking:?}");
        assert_eq!(
            (lacking[0].pod.as_deref(), lacking[0].address.as_deref(), lacking[0].lacks.clone()),
            (Some("pod"), None, methods(&["environmentSyncOut"])),
            "named by its Pod"
        );
        assert!(agreement.message.contains("1 lack a method"), "{}", agreement.message);
    }

    #[test]
    fn a_method_outside_the_contract_is_never_repeated_in_status() {
        let contract = ContractVersion::V2.contract();
        let a = methods(&["environmentSyncIn", "x-worker-wrote-this"]);
        let b = methods(&["environmentSyncIn"]);
        let agreement =
            agree(contract, &[probe("a:1", EndpointAnswer::Methods(&a)), probe("b:1", EndpointAnswer::Methods(&b))]);
        assert!(agreement.status.differing.is_empty(), "{:?}", agreement.status.differing);
        assert_eq!(agreement.status.agreeing, 1, "a lacks nothing the contract names, but does not agree");
    }

    #[test]
    fn one_failed_endpoint_or_none_at_all_verifies_nothing() {
        let contract = ContractVersion::V2.contract();
        let full = methods(&["environmentSyncIn"]);
        let podless = EndpointProbe { address: "a:1", pod: None, answer: EndpointAnswer::Failed };
        let agreement = agree(contract, &[probe("b:1", EndpointAnswer::Methods(&full)), podless]);
        assert_eq!(agreement.methods, None);
        let named = &agreement.status.differing[0];
        assert!(named.failed && named.address.as_deref() == Some("a:1"), "by its address, having no Pod: {named:?}");
        assert!(agreement.message.starts_with("1 of 2 endpoints failed their probe (a:1)"), "{}", agreement.message);
        let failed = agree(contract, &[probe("b:1", EndpointAnswer::Failed)]);
        assert!(failed.message.starts_with("1 of 1 endpoints failed their probe (pod pod)"), "{}", failed.message);
        let none = agree(contract, &[]);
        assert_eq!((none.methods, none.status.serving), (None, 0));
    }

    #[test]
    fn at_most_eight_endpoints_are_named_failures_first() {
        let contract = ContractVersion::V2.contract();
        let full = methods(&["environmentSyncIn", "environmentSyncOut"]);
        let old = methods(&["environmentSyncIn"]);
        let addresses: Vec<String> = (0..20).map(|i| format!("10.0.0.{i}:80")).collect();
        let mut endpoints: Vec<EndpointProbe> =
            addresses.iter().map(|a| probe(a, EndpointAnswer::Methods(&old))).collect();
        endpoints.push(probe("10.9.9.9:80", EndpointAnswer::Methods(&full)));
        endpoints.push(EndpointProbe { address: "10.9.9.8:80", pod: Some("failing"), answer: EndpointAnswer::Failed });
        let agreement = agree(contract, &endpoints);
        assert_eq!(agreement.status.differing.len(), MAX_NAMED_ENDPOINTS);
        assert_eq!(agreement.status.differing[0].pod.as_deref(), Some("failing"));
        assert_eq!(agreement.status.serving, 22);
    }

    /// A rolling update (maxSurge 1, maxUnavailable 0) of three replicas to a build without a
    /// method, and back: at every step the method is verified exactly when no serving endpoint
    /// lacks it, so it turns off once, at the first new endpoint, and on once, after the last one.
    #[test]
    fn a_rollout_turns_a_method_off_once_and_a_rollback_on_once() {
        let contract = ContractVersion::V1.contract();
        let full = methods(&["environmentSyncIn", "environmentSyncOut"]);
        let new = methods(&["environmentSyncIn"]);
        // Each step: (old endpoints serving, new endpoints serving).
        let rollout = [(3, 0), (3, 1), (2, 1), (2, 2), (1, 2), (1, 3), (0, 3)];
        let rollback: Vec<(usize, usize)> = rollout.iter().rev().copied().collect();
        for steps in [rollout.to_vec(), rollback] {
            let mut changes = 0;
            let mut last = None;
            for (old, young) in steps {
                let addresses: Vec<String> = (0..old + young).map(|i| format!("10.0.0.{i}:80")).collect();
                let endpoints: Vec<EndpointProbe> = addresses
                    .iter()
                    .enumerate()
                    .map(|(i, a)| probe(a, EndpointAnswer::Methods(if i < old { &full } else { &new })))
                    .collect();
                let on = agree(contract, &endpoints).methods.unwrap().contains(&"environmentSyncOut".to_string());
                assert_eq!(on, young == 0, "at {old} old and {young} new");
                changes += usize::from(last.is_some_and(|l| l != on));
                last = Some(on);
            }
            assert_eq!(changes, 1);
        }
    }
}
