//! The fence on the wire: every write request the controllers' client sends, each of kube's
//! retries included, is sent only while the current term's [`Fence`] holds. The checks in
//! `publish.rs`, the recorder and the observer decide whether to start a write; this layer stops
//! one that would go out after the fence closed (a status PATCH retried for 15 s after a 429, the
//! thousandth write of an observer pass). Reads are never fenced: a standby may read.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use http::{Method, Request};
use tower::{BoxError, Layer, Service};

use super::leader::Fence;

/// The fence of the term the controllers run in; none (every write refused) between terms.
#[derive(Clone, Debug, Default)]
pub struct FenceCell(Arc<RwLock<Option<Fence>>>);

impl FenceCell {
    /// Makes `fence` the one writes pass, until the guard is dropped.
    pub fn enter(&self, fence: Fence) -> Term {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(fence);
        Term(self.clone())
    }

    fn holds(&self) -> bool {
        self.0.read().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(Fence::holds)
    }

    pub fn layer(&self) -> FenceLayer {
        FenceLayer(self.clone())
    }
}

/// A term's hold on the [`FenceCell`]: dropped, no write passes.
pub struct Term(FenceCell);

impl Drop for Term {
    fn drop(&mut self) {
        *(self.0).0.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// A write refused because the fence did not hold when it was to be sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this replica does not hold the leader Lease (its last renewal is past the renew deadline, or it stepped down)"
)]
pub struct Fenced;

#[derive(Clone, Debug)]
pub struct FenceLayer(FenceCell);

impl<S> Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> FencedService<S> {
        FencedService { inner, cell: self.0.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct FencedService<S> {
    inner: S,
    cell: FenceCell,
}

impl<S, B> Service<Request<B>> for FencedService<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let read = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if !read && !self.cell.holds() {
            return Box::pin(std::future::ready(Err(Fenced.into())));
        }
        let answer = self.inner.call(request);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests;
