//! The endpoints of Services, from their EndpointSlices (`discovery.k8s.io/v1`): where the
//! provider controller probes a `spec.worker.service` worker, one probe per endpoint.
//!
//! Only what the probe reads is kept of a slice: the Service it belongs to, its ports and, of each
//! endpoint that serves, its addresses and its Pod's name. An endpoint counts while its slice marks
//! it `serving` (a terminating Pod can still hold a run, and kube-proxy falls back to such
//! endpoints when none is ready); an unset `serving` reads as `ready`, and an unset `ready` as
//! true, as the API says consumers should. FQDN slices are not probed (sandcap probes addresses).
//!
//! Who may write EndpointSlices in a worker's namespace may otherwise choose where sandcap
//! connects, so by default only what the cluster vouches for is probed
//! ([`EndpointSlices::Managed`]): slices the EndpointSlice controller manages, and of them only the
//! endpoints whose `targetRef` is a Pod of the Service's namespace. The rest is kept, so that the
//! provider's status can say what was left out, and so that an operator's `--endpoint-slices=any`
//! reads it.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::relist::{self, Shared, shared};
use crate::controller::capacity::give_back;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

/// The label that ties a slice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that names a slice's manager, and the EndpointSlice controller's value of it (the
/// mirroring controller's slices copy hand-made Endpoints, so they are not vouched for).
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const ENDPOINTSLICE_CONTROLLER: &str = "endpointslice-controller.k8s.io";

/// Which endpoints of a worker Service are probed (`sandcap run --endpoint-slices`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EndpointSlices {
    /// Those the cluster vouches for: in slices the EndpointSlice controller manages, with a Pod of
    /// the Service's namespace as their `targetRef`.
    #[default]
    Managed,
    /// Every endpoint of every slice labelled with the Service's name, hand-made slices included.
    Any,
}

/// Which endpoints of a worker Service the operator lets sandcap probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointTrust {
    pub slices: EndpointSlices,
    /// The addresses endpoints may have (`--worker-endpoint-cidrs`); empty, any address.
    pub cidrs: Vec<IpNet>,
}

impl EndpointTrust {
    fn admits(&self, managed: bool, own_pod: bool, ip: &IpAddr) -> bool {
        (self.slices == EndpointSlices::Any || (managed && own_pod))
            && (self.cidrs.is_empty() || self.cidrs.iter().any(|cidr| cidr.contains(ip)))
    }
}

/// The members of a Service that are probed, and how many serving endpoints were left out
/// because the cluster does not vouch for them or their address is not one the operator allows.
#[derive(Debug, Default, PartialEq)]
pub struct Serving {
    pub members: Vec<Member>,
    pub unvouched: usize,
}

/// A Service, by namespace and name.
pub type ServiceKey = (String, String);

/// One endpoint that may serve a run at one port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub ip: IpAddr,
    pub port: u16,
    /// The Pod behind it (`targetRef.name`), if any: a new Pod at an old address is a new member.
    pub pod: Option<Arc<str>>,
}

impl Member {
    /// `ip:port`, with an IPv6 address in brackets.
    pub fn address(&self) -> String {
        std::net::SocketAddr::new(self.ip, self.port).to_string()
    }
}

/// What is kept of one slice.
#[derive(Clone, Debug, Default, PartialEq)]
struct Slice {
    service: String,
    /// Port name (empty for an unnamed port) to port number.
    ports: Vec<(String, u16)>,
    /// Managed by the EndpointSlice controller.
    managed: bool,
    /// The serving endpoints' addresses and Pods, and whether the Pod is of the slice's namespace.
    serving: Vec<(IpAddr, Option<Arc<str>>, bool)>,
}

#[derive(Default)]
pub struct Table {
    /// By namespace and slice name.
    slices: HashMap<(String, String), Slice>,
    /// The slices of each Service.
    by_service: HashMap<ServiceKey, BTreeSet<String>>,
}

/// Read side of the cache.
#[derive(Clone)]
pub struct Endpoints {
    table: Shared<Table>,
}

/// Write side: applies the watch's events, and returns the Services whose serving endpoints or
/// ports each changed.
pub(crate) type Writer = relist::Writer<Table>;

pub(crate) fn table() -> (Endpoints, Writer) {
    let (table, writer) = shared(Table::default());
    (Endpoints { table }, writer)
}

impl Endpoints {
    /// The serving members of Service `service` at the port named `port_name` (empty: the
    /// unnamed port) that `trust` lets be probed, sorted and without duplicates.
    pub fn serving(&self, service: &ServiceKey, port_name: &str, trust: &EndpointTrust) -> Serving {
        let table = self.table.read();
        let Some(names) = table.by_service.get(service) else { return Serving::default() };
        let (vouched, unvouched): (Vec<_>, Vec<_>) = names
            .iter()
            .filter_map(|name| table.slices.get(&(service.0.clone(), name.clone())))
            .filter_map(|slice| Some((slice, slice.ports.iter().find(|(name, _)| name == port_name)?.1)))
            .flat_map(|(slice, port)| {
                slice.serving.iter().map(move |(ip, pod, own)| {
                    (trust.admits(slice.managed, *own, ip), Member { ip: *ip, port, pod: pod.clone() })
                })
            })
            .partition(|(vouched, _)| *vouched);
        let members: BTreeSet<Member> = vouched.into_iter().map(|(_, member)| member).collect();
        let unvouched: BTreeSet<Member> = unvouched.into_iter().map(|(_, member)| member).collect();
        Serving { members: members.into_iter().collect(), unvouched: unvouched.len() }
    }

    /// Waits until the first list has completed; `false` if the writer is gone first.
    pub async fn listed(&self) -> bool {
        self.table.listed().await
    }
}

impl relist::Table for Table {
    type Object = EndpointSlice;
    type Key = (String, String);
    type Changes = BTreeSet<ServiceKey>;

    fn put(&mut self, slice: EndpointSlice, changed: &mut BTreeSet<ServiceKey>) -> (String, String) {
        let key = Self::key(&slice);
        match kept(&slice) {
            Some(slice) => self.keep(key.clone(), slice, changed),
            None => self.remove(&key, changed),
        }
        key
    }

    fn remove(&mut self, key: &(String, String), changed: &mut BTreeSet<ServiceKey>) {
        let Some(old) = self.slices.remove(key) else { return };
        let service = (key.0.clone(), old.service);
        if let Some(names) = self.by_service.get_mut(&service) {
            names.remove(&key.1);
            if names.is_empty() {
                self.by_service.remove(&service);
            }
        }
        changed.insert(service);
        give_back(&mut self.slices);
        give_back(&mut self.by_service);
    }

    fn key(slice: &EndpointSlice) -> (String, String) {
        (slice.namespace().unwrap_or_default(), slice.name_any())
    }

    fn keys(&self) -> impl Iterator<Item = &(String, String)> {
        self.slices.keys()
    }
}

impl Table {
    fn keep(&mut self, key: (String, String), slice: Slice, changed: &mut BTreeSet<ServiceKey>) {
        if self.slices.get(&key) == Some(&slice) {
            return;
        }
        relist::Table::remove(self, &key, changed);
        let service = (key.0.clone(), slice.service.clone());
        self.by_service.entry(service.clone()).or_default().insert(key.1.clone());
        self.slices.insert(key, slice);
        changed.insert(service);
    }
}

/// What the probe reads of `slice`; `None` for one of no Service or of FQDN addresses.
fn kept(slice: &EndpointSlice) -> Option<Slice> {
    let service = slice.labels().get(SERVICE_NAME_LABEL)?.clone();
    if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
        return None;
    }
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| Some((p.name.clone().unwrap_or_default(), u16::try_from(p.port?).ok()?)))
        .collect();
    let serving = slice
        .endpoints
        .iter()
        .filter(|e| {
            let conditions = e.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            conditions.and_then(|c| c.serving).unwrap_or(ready)
        })
        .flat_map(|e| {
            let pod_ref = e.target_ref.as_ref().filter(|r| r.kind.as_deref() == Some("Pod"));
            let pod: Option<Arc<str>> = pod_ref.and_then(|r| r.name.as_deref()).map(Into::into);
            // An unset namespace is the slice's own, as for any object reference in a namespace.
            let own = pod.is_some()
                && pod_ref
                    .and_then(|r| r.namespace.as_deref())
                    .is_none_or(|ns| Some(ns) == slice.namespace().as_deref());
            e.addresses.iter().filter_map(move |a| Some((a.parse::<IpAddr>().ok()?, pod.clone(), own)))
        })
        .collect();
    let managed = slice.labels().get(MANAGED_BY_LABEL).is_some_and(|m| m == ENDPOINTSLICE_CONTROLLER);
    Some(Slice { service, managed, ports, serving })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use kube::runtime::watcher::Event;

    use super::*;

    fn slice(name: &str, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "w",
                         "labels": {SERVICE_NAME_LABEL: "acme", MANAGED_BY_LABEL: ENDPOINTSLICE_CONTROLLER}},
            "addressType": "IPv4",
            "ports": [{"name": "rpc", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9090}],
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn endpoint(ip: &str, pod: &str, conditions: serde_json::Value) -> serde_json::Value {
        json!({"addresses": [ip], "conditions": conditions, "targetRef": {"kind": "Pod", "name": pod, "namespace": "w"}})
    }

    fn serving(endpoints: &Endpoints, key: &ServiceKey, port: &str) -> Vec<Member> {
        let serving = endpoints.serving(key, port, &EndpointTrust::default());
        assert_eq!(serving.unvouched, 0, "every endpoint of these slices is vouched for");
        serving.members
    }

    #[test]
    fn only_what_the_cluster_vouches_for_is_probed_unless_the_operator_allows_any() {
        let (endpoints, mut writer) = table();
        let key: ServiceKey = ("w".into(), "acme".into());
        let mut hand_made = slice("forged", json!([endpoint("10.9.0.1", "a", json!({}))]));
        hand_made.metadata.labels.as_mut().unwrap().remove(MANAGED_BY_LABEL);
        let mut mirrored = slice("mirrored", json!([endpoint("10.9.0.2", "b", json!({}))]));
        mirrored
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(MANAGED_BY_LABEL.into(), "endpointslicemirroring-controller.k8s.io".into());
        let others = slice(
            "managed",
            json!([
                endpoint("10.0.0.1", "own", json!({})),
                {"addresses": ["10.9.0.3"], "targetRef": {"kind": "Pod", "name": "theirs", "namespace": "elsewhere"}},
                {"addresses": ["10.9.0.4"], "targetRef": {"kind": "Node", "name": "node-1"}},
                {"addresses": ["10.9.0.5"]},
                {"addresses": ["10.0.0.6"], "targetRef": {"kind": "Pod", "name": "unqualified"}},
            ]),
        );
        for s in [hand_made, mirrored, others] {
            writer.apply(Event::Apply(s));
        }
        let managed = endpoints.serving(&key, "rpc", &EndpointTrust::default());
        let addresses: Vec<_> = managed.members.iter().map(Member::address).collect();
        assert_eq!(addresses, ["10.0.0.1:8080", "10.0.0.6:8080"]);
        assert_eq!(managed.unvouched, 5);
        let any = EndpointTrust { slices: EndpointSlices::Any, ..EndpointTrust::default() };
        let any = endpoints.serving(&key, "rpc", &any);
        assert_eq!((any.members.len(), any.unvouched), (7, 0));
        // The operator's CIDRs apply whichever slices are believed.
        let cidrs = vec!["10.0.0.0/24".parse().unwrap()];
        let within = EndpointTrust { slices: EndpointSlices::Any, cidrs };
        let within = endpoints.serving(&key, "rpc", &within);
        let addresses: Vec<_> = within.members.iter().map(Member::address).collect();
        assert_eq!((addresses, within.unvouched), (vec!["10.0.0.1:8080".to_string(), "10.0.0.6:8080".to_string()], 5));
    }

    #[test]
    fn serving_endpoints_count_ready_or_terminating_and_not_the_others() {
        let (endpoints, mut writer) = table();
        let key: ServiceKey = ("w".into(), "acme".into());
        let changed = writer.apply(Event::Apply(slice(
            "acme-1",
            json!([
                endpoint("10.0.0.1", "ready", json!({"ready": true})),
                endpoint("10.0.0.2", "unknown", json!({})),
                endpoint("10.0.0.3", "draining", json!({"ready": false, "serving": true, "terminating": true})),
                endpoint("10.0.0.4", "starting", json!({"ready": false})),
                endpoint("10.0.0.5", "gone", json!({"ready": false, "serving": false, "terminating": true})),
            ]),
        )));
        assert_eq!(changed, BTreeSet::from([key.clone()]));
        let pods: Vec<_> =
            serving(&endpoints, &key, "rpc").iter().map(|m| (m.address(), m.pod.clone().unwrap())).collect();
        let expected = [("10.0.0.1:8080", "ready"), ("10.0.0.2:8080", "unknown"), ("10.0.0.3:8080", "draining")];
        assert_eq!(pods, expected.map(|(a, p)| (a.to_string(), Arc::from(p))));
        assert_eq!(serving(&endpoints, &key, "metrics")[0].port, 9090);
        assert!(serving(&endpoints, &key, "").is_empty(), "no unnamed port");
    }

    #[test]
    fn only_a_change_of_what_is_probed_is_a_change_and_a_relist_drops_what_it_no_longer_holds() {
        let (endpoints, mut writer) = table();
        let key: ServiceKey = ("w".into(), "acme".into());
        let one = slice("acme-1", json!([endpoint("10.0.0.1", "a", json!({"ready": true}))]));
        writer.apply(Event::Apply(one.clone()));
        let mut relabelled = one.clone();
        relabelled.metadata.annotations = Some([("x".to_string(), "y".to_string())].into());
        assert!(writer.apply(Event::Apply(relabelled)).is_empty(), "nothing the probe reads changed");
        writer.apply(Event::Apply(slice("acme-2", json!([endpoint("10.0.0.2", "b", json!({"ready": true}))]))));
        assert_eq!(serving(&endpoints, &key, "rpc").len(), 2);

        writer.apply(Event::Init);
        writer.apply(Event::InitApply(one));
        assert_eq!(writer.apply(Event::InitDone), BTreeSet::from([key.clone()]));
        assert_eq!(serving(&endpoints, &key, "rpc").len(), 1, "acme-2 went during the gap");
        writer.apply(Event::Delete(slice("acme-1", json!([]))));
        assert!(serving(&endpoints, &key, "rpc").is_empty());
        assert!(endpoints.table.read().by_service.is_empty());
    }
}
