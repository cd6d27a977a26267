//! The clients `sandcap run` talks to the apiserver with. Every request has a deadline: kube's
//! client has no read timeout of its own, and retries 429, 503 and 504 up to 15 times with a
//! backoff that grows to minutes (honouring `Retry-After`). Its retries stay, bounded by the
//! deadline, which counts from the first attempt to the answer's head (a watch's head comes at
//! once; its body is kube-runtime's watcher's to time).

use std::time::Duration;

use axum::http::header;
use kube::Client;
use kube::client::ClientBuilder;
use kube::client::retry::RetryPolicy;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::timeout::TimeoutLayer;

use crate::controller::fenced::FenceCell;
use crate::controller::leader::RenewalClock;
use crate::controller::{ControllersClient, ElectionClient};
use crate::metrics::{ApiLabels, Metrics};

/// A request of the controllers or the certificate keeper, retries included: well within a
/// reconcile's own deadline (60 s), so a throttling or stalled apiserver fails a reconcile, which
/// is retried, instead of holding its slot.
pub const API_DEADLINE: Duration = Duration::from_secs(15);
/// A request of the leader election: a renewal that cannot be made in this long is failed while
/// the renew deadline still leaves time to stop writing (`controller/leader.rs`).
pub const ELECTION_DEADLINE: Duration = Duration::from_secs(2);

/// Requests of the controllers queued for their client's fence and retries at once (they wait
/// for room beyond that); a few status writes and watches in flight is the usual load.
const CONTROLLERS_QUEUED: usize = 1024;

/// The client of the certificate keeper, the controllers' (fenced), and the leader election's own.
pub struct Clients {
    pub api: Client,
    pub controllers: ControllersClient,
    pub election: ElectionClient,
}

impl Clients {
    /// From the in-cluster service account or the kubeconfig, as `kube::Config::infer` finds it.
    /// Each request either makes is counted in `sandcap_api_requests_total` (once, however often
    /// kube retries it), so the cost of the controllers is visible.
    pub async fn infer(metrics: &Metrics) -> Result<Clients, kube::Error> {
        let config = client_config(kube::Config::infer().await.map_err(kube::Error::InferConfig)?);
        let requests = metrics.api_requests.clone();
        let count = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            requests.get_or_create(&ApiLabels::of(request.method(), request.uri())).inc();
            request
        });
        let api = ClientBuilder::try_from(config.clone())?
            .with_layer(&count)
            .with_layer(&TimeoutLayer::new(API_DEADLINE))
            .build();
        // kube's retries, moved above the fence so that each attempt passes it; the buffer makes
        // kube's boxed stack cloneable, as retrying needs.
        let fence = FenceCell::default();
        let mut unretried = config.clone();
        unretried.default_retry = false;
        let controllers = ClientBuilder::try_from(unretried)?
            .with_layer(&BufferLayer::new(CONTROLLERS_QUEUED))
            .with_layer(&fence.layer())
            .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
            .with_layer(&count)
            .with_layer(&TimeoutLayer::new(API_DEADLINE))
            .build();
        let clock = RenewalClock::default();
        let election = ClientBuilder::try_from(config)?
            .with_layer(&count)
            .with_layer(&TimeoutLayer::new(ELECTION_DEADLINE))
            .with_layer(&clock.layer())
            .build();
        let controllers = ControllersClient { client: controllers, fence };
        Ok(Clients { api, controllers, election: ElectionClient { client: election, clock } })
    }
}

/// Names sandcap in the User-Agent of every request. A write that names no field manager is
/// recorded under the User-Agent up to its first `/`, and kube sends none (the apiserver then
/// says `unknown`).
pub fn client_config(mut config: kube::Config) -> kube::Config {
    let agent = concat!("sandcap/", env!("CARGO_PKG_VERSION"));
    config.headers.push((header::USER_AGENT, header::HeaderValue::from_static(agent)));
    config
}
