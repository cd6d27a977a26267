//! Events off the reconcile path. A reconcile hands its Events to a bounded queue and goes on; one
//! publisher task writes them to the apiserver (events.k8s.io/v1), one at a time. A full queue
//! (the apiserver throttles, or a burst) drops the newest Event and counts it in
//! `sandcap_events_dropped_total`: an Event is a notice, the status is the record, and no
//! reconcile ever waits for one or holds its slot for one.
//!
//! kube's `Recorder` is not used: it publishes inline and sweeps its whole cache on every publish
//! (a burst of N Events costs O(N²)). Here a repeat of an Event within [`SERIES_TTL`] bumps the
//! first one's series, as the `Recorder` and client-go do, from a cache of at most [`CACHE_MAX`]
//! Events whose expiry costs O(1) per publish.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::leader::Fence;
use sandcap_core::vocabulary::FIELD_MANAGER;

/// Events waiting for the publisher; past it, new ones are dropped.
pub const QUEUE: usize = 256;
/// Events remembered for their series.
pub const CACHE_MAX: usize = 1024;
/// A repeat within this long is counted in the first Event's series.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// After the controllers stop, how long the queued Events may still take.
const DRAIN: Duration = Duration::from_secs(2);

/// Where reconciles put their Events.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(Event, ObjectReference)>,
    dropped: Counter,
}

impl Events {
    /// Queues `event` about `regarding`, or drops it if the queue is full.
    pub fn record(&self, event: Event, regarding: ObjectReference) {
        if self.queue.try_send((event, regarding)).is_err() {
            self.dropped.inc();
        }
    }
}

/// The queue's other end.
pub struct Publisher {
    client: Client,
    instance: String,
    queue: mpsc::Receiver<(Event, ObjectReference)>,
    dropped: Counter,
    fence: Fence,
    series: Series,
}

/// A queue of [`QUEUE`] Events and its publisher, which writes for `instance` while `fence` holds.
pub fn channel(client: Client, instance: &str, dropped: Counter, fence: Fence) -> (Events, Publisher) {
    let (queue, receiver) = mpsc::channel(QUEUE);
    let events = Events { queue, dropped: dropped.clone() };
    let series = Series::default();
    (events, Publisher { client, instance: instance.into(), queue: receiver, dropped, fence, series })
}

impl Publisher {
    /// Publishes until `stop`, then what is queued for up to [`DRAIN`]; what is left is dropped.
    pub async fn run(mut self, stop: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                next = self.queue.recv() => match next {
                    Some((event, regarding)) => self.publish(event, regarding).await,
                    None => return,
                },
                () = stop.cancelled() => break,
            }
        }
        let drained = tokio::time::timeout(DRAIN, async {
            while let Ok((event, regarding)) = self.queue.try_recv() {
                self.publish(event, regarding).await;
            }
        });
        if drained.await.is_err() {
            self.queue.close();
            while self.queue.try_recv().is_ok() {
                self.dropped.inc();
            }
        }
    }

    async fn publish(&mut self, event: Event, regarding: ObjectReference) {
        if !self.fence.holds() {
            // A replica that no longer leads says nothing more about the objects.
            self.dropped.inc();
            return;
        }
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let key = Key::of(&event, &regarding);
        let now = Timestamp::now();
        let written = match self.series.repeat(&key, Instant::now()) {
            Some((name, count)) => {
                let series = EventSeries { count, last_observed_time: MicroTime(now) };
                let patch = serde_json::json!({ "series": series });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| name)
            }
            None => {
                let object = new_event(&event, regarding, &self.instance, now);
                let name = object.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &object).await.map(|_| name)
            }
        };
        match written {
            Ok(name) => self.series.written(key, name, Instant::now()),
            Err(error) => {
                self.dropped.inc();
                tracing::warn!(reason = %event.reason, %error, "cannot record an Event");
            }
        }
    }
}

/// What makes two Events the same, for their series: everything but the time.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    warning: bool,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
}

impl Key {
    fn of(event: &Event, regarding: &ObjectReference) -> Key {
        Key {
            warning: matches!(event.type_, EventType::Warning),
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
        }
    }
}

/// The Events written in the last [`SERIES_TTL`], at most [`CACHE_MAX`], oldest first.
#[derive(Default)]
struct Series {
    written: HashMap<Key, (String, i32, Instant)>,
    order: VecDeque<(Instant, Key)>,
}

impl Series {
    /// If `key` was written within the TTL: its Event's name and the count to write.
    fn repeat(&mut self, key: &Key, now: Instant) -> Option<(String, i32)> {
        self.expire(now);
        self.written.get(key).map(|(name, count, _)| (name.clone(), count.saturating_add(1)))
    }

    fn written(&mut self, key: Key, name: String, now: Instant) {
        match self.written.get_mut(&key) {
            Some(entry) => entry.1 = entry.1.saturating_add(1),
            None => {
                while self.written.len() >= CACHE_MAX {
                    let Some((_, oldest)) = self.order.pop_front() else { break };
                    self.written.remove(&oldest);
                }
                self.order.push_back((now, key.clone()));
                self.written.insert(key, (name, 1, now));
            }
        }
    }

    /// A series lives from its first Event: the front of `order` is always the oldest.
    fn expire(&mut self, now: Instant) {
        while let Some((first, _)) = self.order.front() {
            if now.duration_since(*first) < SERIES_TTL {
                break;
            }
            if let Some((_, key)) = self.order.pop_front() {
                self.written.remove(&key);
            }
        }
    }
}

fn new_event(event: &Event, regarding: ObjectReference, instance: &str, now: Timestamp) -> K8sEvent {
    let prefix = regarding.name.clone().unwrap_or_else(|| FIELD_MANAGER.into());
    K8sEvent {
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        event_time: Some(MicroTime(now)),
        note: event.note.clone(),
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(format!("{prefix}.{:x}", now.as_nanosecond())),
            ..ObjectMeta::default()
        },
        regarding: Some(regarding),
        reporting_controller: Some(FIELD_MANAGER.into()),
        reporting_instance: Some(instance.into()),
        type_: Some(if matches!(event.type_, EventType::Warning) { "Warning" } else { "Normal" }.into()),
        related: event.secondary.clone(),
        ..K8sEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str) -> Event {
        Event { type_: EventType::Normal, reason: reason.into(), note: None, action: "Resolve".into(), secondary: None }
    }

    fn key(reason: &str) -> Key {
        Key::of(&event(reason), &ObjectReference { name: Some("p".into()), ..ObjectReference::default() })
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let dropped = Counter::default();
        let (events, _publisher) = channel(client, "test", dropped.clone(), Fence::Open);
        for _ in 0..QUEUE + 10 {
            events.record(event("CapabilitiesGranted"), ObjectReference::default());
        }
        assert_eq!(dropped.get(), 10, "the queue holds {QUEUE}, the rest is counted");
    }

    #[test]
    fn a_repeat_within_the_ttl_counts_in_the_first_events_series_and_expires_with_it() {
        let mut series = Series::default();
        let t0 = Instant::now();
        assert_eq!(series.repeat(&key("A"), t0), None);
        series.written(key("A"), "p.1".into(), t0);
        assert_eq!(series.repeat(&key("A"), t0 + Duration::from_secs(60)), Some(("p.1".into(), 2)));
        series.written(key("A"), "p.1".into(), t0 + Duration::from_secs(60));
        assert_eq!(series.repeat(&key("A"), t0 + Duration::from_secs(61)), Some(("p.1".into(), 3)));
        assert_eq!(series.repeat(&key("B"), t0), None, "another reason is another Event");
        assert_eq!(series.repeat(&key("A"), t0 + SERIES_TTL), None, "expired with its first Event");
        assert!(series.written.is_empty() && series.order.is_empty());
    }

    #[test]
    fn the_cache_holds_at_most_its_bound_and_forgets_the_oldest() {
        let mut series = Series::default();
        let t0 = Instant::now();
        for i in 0..CACHE_MAX + 5 {
            series.written(key(&format!("R{i}")), format!("p.{i}"), t0);
        }
        assert_eq!((series.written.len(), series.order.len()), (CACHE_MAX, CACHE_MAX));
        assert_eq!(series.repeat(&key("R0"), t0), None, "the oldest went first");
        assert!(series.repeat(&key(&format!("R{}", CACHE_MAX + 4)), t0).is_some());
    }
}
