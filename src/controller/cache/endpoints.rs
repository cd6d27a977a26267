//! The endpoints of Services, from their EndpointSlices (`discovery.k8s.io/v1`): where the
//! provider controller probes a `spec.worker.service` worker, one probe per endpoint.
//!
//! Only what the probe reads is kept of a slice: the Service it belongs to, its ports and, of each
//! endpoint that serves, its addresses and its Pod's name. An endpoint counts while its slice marks
//! it `serving` (a terminating Pod can still hold a run, and kube-proxy falls back to such
//! endpoints when none is ready); an unset `serving` reads as `ready`, and an unset `ready` as
//! true, as the API says consumers should. FQDN slices are not probed (sandcap probes addresses).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

/// The label that ties a slice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

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
    /// The serving endpoints' addresses and Pods.
    serving: Vec<(IpAddr, Option<Arc<str>>)>,
}

#[derive(Default)]
struct Table {
    /// By namespace and slice name.
    slices: HashMap<(String, String), Slice>,
    /// The slices of each Service.
    by_service: HashMap<ServiceKey, BTreeSet<String>>,
}

/// Read side of the cache.
#[derive(Clone)]
pub struct Endpoints {
    table: Arc<RwLock<Table>>,
    listed: watch::Receiver<bool>,
}

/// Write side: applies the watch's events.
pub struct Writer {
    table: Arc<RwLock<Table>>,
    listed: watch::Sender<bool>,
    /// The slices of the list in progress (between `Init` and `InitDone`).
    listing: Option<HashSet<(String, String)>>,
}

pub fn table() -> (Endpoints, Writer) {
    let (listed_tx, listed) = watch::channel(false);
    let table = Arc::new(RwLock::new(Table::default()));
    (Endpoints { table: table.clone(), listed }, Writer { table, listed: listed_tx, listing: None })
}

impl Endpoints {
    /// The serving members of Service `service` at the port named `port_name` (empty: the
    /// unnamed port), sorted and without duplicates.
    pub fn serving(&self, service: &ServiceKey, port_name: &str) -> Vec<Member> {
        let table = self.table.read().expect("not poisoned");
        let Some(names) = table.by_service.get(service) else { return Vec::new() };
        let members: BTreeSet<Member> = names
            .iter()
            .filter_map(|name| table.slices.get(&(service.0.clone(), name.clone())))
            .filter_map(|slice| Some((slice, slice.ports.iter().find(|(name, _)| name == port_name)?.1)))
            .flat_map(|(slice, port)| {
                slice.serving.iter().map(move |(ip, pod)| Member { ip: *ip, port, pod: pod.clone() })
            })
            .collect();
        members.into_iter().collect()
    }

    /// Waits until the first list has completed; `false` if the writer is gone first.
    pub async fn listed(&self) -> bool {
        self.listed.clone().wait_for(|listed| *listed).await.is_ok()
    }
}

impl Writer {
    /// Applies one watch event; returns the Services whose serving endpoints or ports it changed.
    pub fn apply(&mut self, event: Event<EndpointSlice>) -> Vec<ServiceKey> {
        let mut table = self.table.write().expect("not poisoned");
        let mut changed = BTreeSet::new();
        match event {
            Event::Init => self.listing = Some(HashSet::new()),
            Event::InitApply(slice) | Event::Apply(slice) => {
                let key = (slice.namespace().unwrap_or_default(), slice.name_any());
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(key.clone());
                }
                table.put(key, kept(&slice), &mut changed);
            }
            Event::Delete(slice) => {
                table.remove(&(slice.namespace().unwrap_or_default(), slice.name_any()), &mut changed);
            }
            Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    let gone: Vec<_> = table.slices.keys().filter(|k| !listing.contains(*k)).cloned().collect();
                    gone.iter().for_each(|key| table.remove(key, &mut changed));
                    table.slices.shrink_to_fit();
                    table.by_service.shrink_to_fit();
                }
                self.listed.send_replace(true);
            }
        }
        changed.into_iter().collect()
    }
}

impl Table {
    fn put(&mut self, key: (String, String), slice: Option<Slice>, changed: &mut BTreeSet<ServiceKey>) {
        let Some(slice) = slice else { return self.remove(&key, changed) };
        if self.slices.get(&key) == Some(&slice) {
            return;
        }
        self.remove(&key, changed);
        let service = (key.0.clone(), slice.service.clone());
        self.by_service.entry(service.clone()).or_default().insert(key.1.clone());
        self.slices.insert(key, slice);
        changed.insert(service);
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
            let pod: Option<Arc<str>> = e
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name.as_deref())
                .map(Into::into);
            e.addresses.iter().filter_map(move |a| Some((a.parse::<IpAddr>().ok()?, pod.clone())))
        })
        .collect();
    Some(Slice { service, ports, serving })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn slice(name: &str, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "w", "labels": {SERVICE_NAME_LABEL: "acme"}},
            "addressType": "IPv4",
            "ports": [{"name": "rpc", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9090}],
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn endpoint(ip: &str, pod: &str, conditions: serde_json::Value) -> serde_json::Value {
        json!({"addresses": [ip], "conditions": conditions, "targetRef": {"kind": "Pod", "name": pod, "namespace": "w"}})
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
        assert_eq!(changed, vec![key.clone()]);
        let pods: Vec<_> =
            endpoints.serving(&key, "rpc").iter().map(|m| (m.address(), m.pod.clone().unwrap())).collect();
        let expected = [("10.0.0.1:8080", "ready"), ("10.0.0.2:8080", "unknown"), ("10.0.0.3:8080", "draining")];
        assert_eq!(pods, expected.map(|(a, p)| (a.to_string(), Arc::from(p))));
        assert_eq!(endpoints.serving(&key, "metrics")[0].port, 9090);
        assert!(endpoints.serving(&key, "").is_empty(), "no unnamed port");
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
        assert_eq!(endpoints.serving(&key, "rpc").len(), 2);

        writer.apply(Event::Init);
        writer.apply(Event::InitApply(one));
        assert_eq!(writer.apply(Event::InitDone), vec![key.clone()]);
        assert_eq!(endpoints.serving(&key, "rpc").len(), 1, "acme-2 went during the gap");
        writer.apply(Event::Delete(slice("acme-1", json!([]))));
        assert!(endpoints.serving(&key, "rpc").is_empty());
        assert!(writer.table.read().unwrap().by_service.is_empty());
    }
}
