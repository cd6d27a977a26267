use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Response, StatusCode};
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tower::retry::RetryLayer;

use super::*;
use crate::controller::leader::RenewalClock;

fn request(method: Method) -> Request<Body> {
    Request::builder().method(method).uri("/apis/sandcap.dev/v1alpha1/sandboxleases").body(Body::empty()).unwrap()
}

/// An apiserver that answers `first` once, then 200, counting what reaches it; `on_first` runs
/// as the first answer goes.
fn apiserver(
    first: StatusCode,
    reached: Arc<AtomicUsize>,
    on_first: impl Fn() + Clone + Send + 'static,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = BoxError, Future: Send + 'static> + Clone {
    tower::service_fn(move |_: Request<Body>| {
        let n = reached.fetch_add(1, Ordering::SeqCst);
        let on_first = on_first.clone();
        async move {
            let status = if n == 0 {
                on_first();
                first
            } else {
                StatusCode::OK
            };
            Ok::<_, BoxError>(Response::builder().status(status).body(Body::empty()).unwrap())
        }
    })
}

#[tokio::test]
async fn between_terms_reads_pass_and_writes_do_not() {
    let (cell, reached) = (FenceCell::default(), Arc::new(AtomicUsize::new(0)));
    let service = cell.layer().layer(apiserver(StatusCode::OK, reached.clone(), || ()));
    assert!(service.clone().oneshot(request(Method::GET)).await.is_ok());
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        let refused = service.clone().oneshot(request(method)).await.unwrap_err();
        assert!(refused.is::<Fenced>(), "{refused}");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 1, "no write reached the apiserver");
    let term = cell.enter(Fence::Open);
    assert!(service.clone().oneshot(request(Method::PATCH)).await.is_ok());
    drop(term);
    assert!(service.oneshot(request(Method::PATCH)).await.unwrap_err().is::<Fenced>());
}

/// kube retries a throttled write; the retry is a request of its own, and finds the fence closed.
#[tokio::test(start_paused = true)]
async fn a_retry_after_the_fence_closed_is_not_sent() {
    let (cell, reached) = (FenceCell::default(), Arc::new(AtomicUsize::new(0)));
    let (clock, closed) = (RenewalClock::default(), CancellationToken::new());
    clock.record(tokio::time::Instant::now());
    let _term = cell.enter(Fence::Lease { clock, deadline: Duration::from_secs(10), closed: closed.clone() });
    let step_down = move || closed.cancel();
    let throttled = apiserver(StatusCode::TOO_MANY_REQUESTS, reached.clone(), step_down);
    let client = RetryLayer::new(RetryPolicy::server_retry()).layer(cell.layer().layer(throttled));
    let answer = client.oneshot(request(Method::PATCH)).await;
    assert!(answer.unwrap_err().is::<Fenced>(), "the retry was refused");
    assert_eq!(reached.load(Ordering::SeqCst), 1, "only the first attempt reached the apiserver");
}
