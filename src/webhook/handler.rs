//! The review handler: admission control (places for bodies, `places.rs`, and for reviews), the
//! body deadline, the review on a blocking thread, and its log line and metrics.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::Semaphore;

use super::places::{Full, Places};
use crate::listener::Limits;
use crate::metrics::{AdmissionLabels, KindLabels, Metrics};
use sandcap_core::admission::{self, Answer, Decision};
use sandcap_core::text;
use sandcap_core::validation::Options;

struct WebhookState {
    options: Options,
    metrics: Metrics,
    /// One place per buffered body ([`Limits::max_in_flight`]), a share of them per client.
    places: Arc<Places>,
    queue_timeout: Duration,
    body_timeout: Duration,
    /// One place per review being decoded and judged ([`Limits::review_threads`]).
    reviews: Arc<Semaphore>,
}

/// `POST /validate`; other paths are 404 and other methods 405.
pub(super) fn webhook_router(options: Options, metrics: Metrics, limits: &Limits) -> Router {
    let state = WebhookState {
        options,
        metrics,
        places: Places::new(limits.max_in_flight, limits.per_client_in_flight),
        queue_timeout: limits.queue_timeout,
        body_timeout: limits.body_timeout,
        reviews: Arc::new(Semaphore::new(limits.review_threads)),
    };
    Router::new().route("/validate", post(validate)).with_state(Arc::new(state))
}

/// Takes a place before reading the body, so that waiting requests hold no body in memory, then
/// reviews on a blocking thread. The body must arrive within the body deadline, counted from the
/// request's head, or the client gets 408 and the place is free again: a trickled body holds its
/// place for seconds, not for the request timeout. (Reading the body before taking a place would
/// let any number of bodies fill memory at once.) Past the request timeout the client gets 408
/// and the review still finishes on its thread, holding its places: its cost is bounded by the
/// review's own budgets (the body limit, [`sandcap_core::config_schema::BUDGET`]), not by the timeout.
async fn validate(State(state): State<Arc<WebhookState>>, request: Request) -> Response {
    let started = Instant::now();
    let invalid = || admission::Summary { verdict: Some(Decision::Invalid), ..Default::default() };
    // The listener names every request's client; without it, all requests share one share.
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |ConnectInfo(peer)| peer.ip());
    let place = match state.places.take(client, state.queue_timeout).await {
        Ok(place) => place,
        Err(full) => return overloaded(&state, client, full, started),
    };
    let read = tokio::time::timeout_at((started + state.body_timeout).into(), Bytes::from_request(request, &()));
    let body = match read.await {
        Ok(Ok(body)) => body,
        // Too large (413) or cut off: a client error, answered by axum's own rejection.
        Ok(Err(rejection)) => {
            let status = rejection.status();
            tracing::info_span!("review").in_scope(|| tracing::info!(%status, "unreadable request body"));
            count(&state.metrics, &invalid(), started);
            return rejection.into_response();
        }
        Err(_) => {
            tracing::info_span!("review").in_scope(|| tracing::info!(%client, "request body not received in time"));
            count(&state.metrics, &invalid(), started);
            return (StatusCode::REQUEST_TIMEOUT, "request body not received in time\n").into_response();
        }
    };
    let Ok(thread) = state.reviews.clone().acquire_owned().await else {
        // Only a closed semaphore fails, and nothing closes it.
        count(&state.metrics, &invalid(), started);
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let options = state.options.clone();
    let review = tokio::task::spawn_blocking(move || {
        let _places = (place, thread);
        admission::handle(&body, &options)
    });
    let Ok(Answer { status, body, outcome }) = review.await else {
        // handle() does not panic (the fuzz target holds it to that); if it ever did, the client
        // still gets an answer and the process keeps serving.
        count(&state.metrics, &invalid(), started);
        tracing::error!("an admission review panicked");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    log(&outcome);
    count(&state.metrics, &outcome, started);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The answer to a review that found no place: 429, to retry after a second.
fn overloaded(state: &WebhookState, client: IpAddr, full: Full, started: Instant) -> Response {
    let outcome = admission::Summary { verdict: Some(Decision::Overloaded), ..Default::default() };
    count(&state.metrics, &outcome, started);
    let free = state.places.available();
    // A client past its own share is that client's doing, and a flood of them must not flood the
    // log; a full pool is everybody's.
    match full {
        Full::Share => tracing::debug!(%client, "refused an admission review: its client holds its share"),
        Full::Pool => tracing::warn!(%client, free, "refused an admission review: too many in flight"),
    }
    let message = "too many admission reviews in flight; retry shortly\n";
    (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "1")], message).into_response()
}

/// Allowed reviews are logged at debug level only. The span is built after the review and only
/// when its event is enabled, so at the default level an allowed review costs no span (its
/// registration and formatted fields) for a line that is never written.
///
/// The object's name is `object`, not `name`: the JSON format writes the span's own name under
/// `span.name`, and a reader keeps only one of two equal keys.
fn log(outcome: &admission::Summary) {
    let allowed = outcome.allowed();
    if allowed && !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let namespace = (!outcome.namespace.is_empty()).then_some(outcome.namespace.as_str());
    let span = tracing::info_span!(
        "review",
        uid = outcome.uid.as_str(),
        kind = outcome.kind_label(),
        object = outcome.name.as_str(),
        namespace,
        operation = outcome.operation_label(),
        dry_run = outcome.dry_run,
        allowed,
    );
    // The answer carried the whole message; a log line carries its count and its start, quoted
    // (control characters escaped), so a client cannot flood the log or forge lines in it.
    let reason = text::prefix(&outcome.message, LOGGED_REASON);
    span.in_scope(|| match outcome.verdict {
        Some(Decision::Allowed) => tracing::debug!("allowed"),
        Some(Decision::Denied) => tracing::info!(problems = outcome.problems, reason, "denied"),
        _ => tracing::info!(reason, "invalid admission review"),
    });
}

/// How much of a denial message a log line shows.
const LOGGED_REASON: usize = 256;

fn count(metrics: &Metrics, outcome: &admission::Summary, started: Instant) {
    let kind = outcome.kind_label();
    let verdict = outcome.verdict.unwrap_or(Decision::Invalid).as_str();
    metrics
        .admission_requests
        .get_or_create(&AdmissionLabels { kind, operation: outcome.operation_label(), verdict })
        .inc();
    metrics.admission_duration.get_or_create(&KindLabels { kind }).observe(started.elapsed().as_secs_f64());
}
