//! A Service worker, probed at every endpoint that may serve a run (docs/contract.md, "What
//! verifies"; docs/controller.md, "A Service worker, endpoint by endpoint").
//!
//! What each endpoint last answered is kept with what else is known of the provider
//! ([`crate::controller::cache::ProviderTable`]), until the provider is deleted: an
//! endpoint new to the Service (a new address, or a new Pod at an old one) is probed in the
//! reconcile its EndpointSlice triggers; one that did not change waits for its own schedule (the
//! interval while it answers, retries from seconds while it fails). A replica that starts leading
//! knows nothing yet and probes every endpoint once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, ResourceExt};
use reqwest::Url;

use super::{RETRY_MIN, share_of};
use crate::controller::cache::endpoints::{Member, Serving};
use crate::controller::cache::providers::Probed;
use crate::controller::context::{Context, RECONCILE_DEADLINE};
use crate::controller::error::Error;
use crate::metrics::ProbeLabels;
use crate::probe::{ProbeError, ProbeOutcome, Target, ca_bundle};
use sandcap_core::api::{ProbeResult, SandboxProvider, ServiceRef, WorkerPlugin, WorkerScheme, WorkerStatus};
use sandcap_core::contract::{self, EndpointAnswer, EndpointProbe};

/// A Service with more serving endpoints than this verifies nothing: probing them all, 16 at a
/// time within the probe timeout, must fit in one reconcile's deadline.
pub const MAX_ENDPOINTS: usize = 128;
/// Endpoints of one provider probed at once (the provider controller runs 16 reconciles at once,
/// so at most 256 probes are in flight).
const ENDPOINTS_AT_ONCE: usize = 16;
/// How long one reconcile may spend probing: three quarters of its deadline, so that the status
/// is written in the rest. An endpoint not answered by then (128 endpoints, 16 at a time, with
/// a timeout of a minute would take 8 minutes) counts as failed, so the round publishes a status
/// that grants nothing it has not verified; the answers received are kept, and the retry probes
/// only the endpoints still due.
pub const PROBE_BUDGET: Duration = Duration::from_secs(RECONCILE_DEADLINE.as_secs() * 3 / 4);

/// How long after its last probe an endpoint is probed again: after `interval` (plus its share
/// of a tenth of it) while it answers; while it fails, after as long as it has been failing, at
/// least [`RETRY_MIN`], at most `interval`, each retry spread by its share of a tenth.
fn due_after(probed: &Probed, interval: Duration, share: u64) -> Duration {
    let spread = |d: Duration| d + d / 10 * share as u32 / 1000;
    match probed.failing_since {
        Some(since) => spread(probed.at.duration_since(since).clamp(RETRY_MIN, interval.max(RETRY_MIN))),
        None => spread(interval),
    }
}

/// The worker status of a provider whose worker is `service`, probing the endpoints that are
/// due, and how long until the next one is; `None` for an `ExternalName` Service, which has no
/// endpoints and is probed at its name.
pub async fn probe_endpoints(
    provider: &SandboxProvider,
    service: &ServiceRef,
    ctx: &Context,
    now: &Time,
) -> Result<Option<(WorkerStatus, Duration)>, Error> {
    let round = Round { provider, service, ctx, uid: provider.uid().unwrap_or_default() };
    let port_name = match service_port(ctx, service).await? {
        Port::Named(name) => name,
        Port::ExternalName => return Ok(None),
        Port::Missing => {
            let (namespace, name, port) = (&service.namespace, &service.name, &service.port);
            let message =
                format!("the Service {namespace}/{name} does not exist or has no port {port}, so nothing is verified");
            return Ok(Some(round.failed(message, now)));
        }
    };
    let key = (service.namespace.clone(), service.name.clone());
    let Serving { members, unvouched } = ctx.caches.endpoints.serving(&key, &port_name, &ctx.endpoint_trust);
    if members.len() > MAX_ENDPOINTS {
        let message = format!(
            "the Service {}/{} has {} serving endpoints, more than the {MAX_ENDPOINTS} sandcap probes, so nothing is verified",
            service.namespace,
            service.name,
            members.len()
        );
        return Ok(Some(round.failed(message, now)));
    }
    let ca = match ca_bundle(&provider.spec.worker) {
        Ok(ca) => ca,
        Err(error) => return Ok(Some(round.failed(error.to_string(), now))),
    };
    let Due { mut kept, due, departed } = round.due(members);
    let probed_now = round.probe_all(due, ca.as_deref()).await;
    let any_probed = !probed_now.is_empty();
    kept.extend(probed_now);
    kept.sort_by(|a, b| a.member.cmp(&b.member));
    let (mut worker, next) = round.worker(&kept, unvouched, now);
    ctx.provider_table.with(&round.uid, |known, _| (known.endpoints, known.departed) = (kept, departed));
    // A probe that found what status says moves lastProbeTime once per interval at most, so a
    // rollout's reconciles, or a new leader probing every endpoint once, write only what changed.
    if let Some(published) = published_worker(provider) {
        let same = WorkerStatus { last_probe_time: published.last_probe_time.clone(), ..worker.clone() } == *published;
        let recent =
            published.last_probe_time.as_ref().and_then(|t| Duration::try_from(now.0.duration_since(t.0)).ok());
        if same && (!any_probed || recent.is_some_and(|r| r < ctx.probe_interval)) {
            worker.last_probe_time = published.last_probe_time.clone();
        }
    }
    Ok(Some((worker, next)))
}

/// The worker status published for the provider's current generation.
fn published_worker(provider: &SandboxProvider) -> Option<&WorkerStatus> {
    let published = provider.status.as_ref().filter(|s| s.observed_generation == provider.metadata.generation);
    published.and_then(|s| s.worker.as_ref())
}

/// One reconcile's probe of one provider's endpoints.
struct Round<'a> {
    provider: &'a SandboxProvider,
    service: &'a ServiceRef,
    ctx: &'a Context,
    uid: String,
}

impl Round<'_> {
    /// The status of a Service that verifies nothing, for `message`; what its endpoints answered is
    /// forgotten.
    fn failed(&self, message: String, now: &Time) -> (WorkerStatus, Duration) {
        let worker = WorkerStatus {
            probe: ProbeResult::Failed,
            last_probe_time: Some(now.clone()),
            address: self.provider.spec.worker.address(),
            message,
            ..WorkerStatus::default()
        };
        self.ctx.provider_table.with(&self.uid, |known, _| {
            (known.endpoints, known.departed) = (Vec::new(), Vec::new());
            known.settling.decide(None, 0, Instant::now(), self.ctx.probe_interval);
        });
        (worker, self.ctx.probe_interval)
    }

    /// Of `members`, the answers kept (not due yet), those due, and the fresh answers of endpoints
    /// no longer serving.
    fn due(&self, members: Vec<Member>) -> Due {
        let started = Instant::now();
        let fresh = |p: &Probed| {
            // An answer judged against another plugin identity than the spec's now is due.
            started.duration_since(p.at) < self.due_after(p) && p.outcome.judged_for(&self.provider.spec)
        };
        let previous = self.ctx.provider_table.with(&self.uid, |known, _| {
            let departed = std::mem::take(&mut known.departed);
            departed.into_iter().chain(std::mem::take(&mut known.endpoints)).collect()
        });
        split(previous, members, fresh)
    }

    fn due_after(&self, probed: &Probed) -> Duration {
        due_after(probed, self.ctx.probe_interval, share_of(&self.uid, &probed.member.address()))
    }

    /// Probes `due`, [`ENDPOINTS_AT_ONCE`] at a time, within [`PROBE_BUDGET`]: an endpoint not
    /// answered by then counts as a probe that timed out.
    async fn probe_all(&self, due: Vec<(Member, Option<Instant>)>, ca: Option<&[u8]>) -> Vec<Probed> {
        let deadline = Instant::now() + PROBE_BUDGET;
        let unanswered_if_cut = due.clone();
        let probes = futures::stream::iter(due)
            .map(|(member, failing_before)| self.probe(member, failing_before, ca))
            .buffer_unordered(ENDPOINTS_AT_ONCE);
        let mut probed = probes.take_until(tokio::time::sleep_until(deadline.into())).collect::<Vec<_>>().await;
        for cut in unanswered(unanswered_if_cut, &probed, Instant::now()) {
            count(self.ctx, self.provider, &cut.member, &cut.outcome, PROBE_BUDGET);
            probed.push(cut);
        }
        probed
    }

    /// Probes `member`, failing since `failing_before` if it was.
    async fn probe(&self, member: Member, failing_before: Option<Instant>, ca: Option<&[u8]>) -> Probed {
        let (path, host) = (self.service.path.as_deref().unwrap_or("/"), self.service.host());
        // Over https the certificate is verified for the Service's name, at the endpoint.
        let (url, address) = match self.service.scheme.unwrap_or_default() {
            WorkerScheme::Http => (format!("http://{}{path}", member.address()), None),
            WorkerScheme::Https => {
                (format!("https://{host}:{}{path}", member.port), Some(SocketAddr::new(member.ip, member.port)))
            }
        };
        let started = Instant::now();
        let outcome = match Url::parse(&url) {
            Ok(url) => self.ctx.prober.probe_at(Target { url: &url, address, ca }, &self.provider.spec).await,
            Err(e) => {
                ProbeOutcome::Failed(ProbeError::Endpoint(format!("no URL for {}: {e}", member.address())).into())
            }
        };
        let at = Instant::now();
        count(self.ctx, self.provider, &member, &outcome, at - started);
        let failing_since = match outcome {
            ProbeOutcome::Failed(_) => Some(failing_before.unwrap_or(at)),
            ProbeOutcome::Succeeded { .. } => None,
        };
        Probed { member, outcome, at, failing_since }
    }

    /// The worker status the answers of `kept` agree on (the contract's rule), and how long until
    /// the next endpoint is due.
    fn worker(&self, kept: &[Probed], unvouched: usize, now: &Time) -> (WorkerStatus, Duration) {
        let addresses: Vec<String> = kept.iter().map(|p| p.member.address()).collect();
        let endpoints: Vec<EndpointProbe> = kept
            .iter()
            .zip(&addresses)
            .map(|(p, address)| EndpointProbe {
                address,
                pod: p.member.pod.as_deref(),
                answer: match &p.outcome {
                    ProbeOutcome::Succeeded { methods, .. } => EndpointAnswer::Methods(methods),
                    ProbeOutcome::Failed(_) => EndpointAnswer::Failed,
                },
            })
            .collect();
        let agreement = contract::agree(self.ctx.contract.contract(), &endpoints);
        let serving = serving_digest(&endpoints);
        let decision = self.ctx.provider_table.with(&self.uid, |known, _| {
            known.settling.decide(agreement.methods, serving, Instant::now(), self.ctx.probe_interval)
        });
        let (probe, supported_methods) = match decision.methods {
            Some(methods) => (ProbeResult::Succeeded, methods),
            None => (ProbeResult::Failed, Vec::new()),
        };
        let mut message = left_out(agreement.message, unvouched);
        if let Some(held) = &decision.held {
            message = format!("{message}; {}", held.message());
        }
        let worker = WorkerStatus {
            supported_methods,
            probe,
            last_probe_time: Some(now.clone()),
            address: self.provider.spec.worker.address(),
            message,
            endpoints: Some(agreement.status),
            plugin: claimed_plugin(kept),
        };
        let held_until = decision.held.map(|h| h.until);
        let next = kept.iter().map(|p| p.at + self.due_after(p)).chain(held_until).min();
        let next = next.map(|at| at.saturating_duration_since(Instant::now()));
        (worker, next.unwrap_or(self.ctx.probe_interval).max(Duration::from_millis(100)))
    }
}

/// Of one probe round, what is kept of the answers known before it.
struct Due {
    /// Answers not due yet, of serving endpoints.
    kept: Vec<Probed>,
    /// Serving endpoints to probe, each with since when it has been failing.
    due: Vec<(Member, Option<Instant>)>,
    /// Fresh answers of endpoints no longer serving, newest first.
    departed: Vec<Probed>,
}

/// Sorts the answers known before a round (`previous`, serving or departed) by the endpoints
/// serving now (`members`): a member whose answer is `fresh` keeps it, whatever it did in between.
fn split(previous: Vec<Probed>, members: Vec<Member>, fresh: impl Fn(&Probed) -> bool) -> Due {
    let mut previous: HashMap<Member, Probed> = previous.into_iter().map(|p| (p.member.clone(), p)).collect();
    let mut kept = Vec::with_capacity(members.len());
    let mut due = Vec::new();
    for member in members {
        match previous.remove(&member) {
            Some(p) if fresh(&p) => kept.push(p),
            last => due.push((member, last.and_then(|p| p.failing_since))),
        }
    }
    let mut departed: Vec<Probed> = previous.into_values().filter(&fresh).collect();
    departed.sort_by_key(|p| std::cmp::Reverse(p.at));
    departed.truncate(MAX_ENDPOINTS);
    Due { kept, due, departed }
}

/// Who serves and what each answered, hashed: a grant held back waits for it to stay unchanged.
fn serving_digest(endpoints: &[EndpointProbe<'_>]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for endpoint in endpoints {
        std::hash::Hash::hash(&(endpoint.address, endpoint.pod), &mut hasher);
        match endpoint.answer {
            EndpointAnswer::Methods(methods) => std::hash::Hash::hash(methods, &mut hasher),
            EndpointAnswer::Failed => std::hash::Hash::hash("failed", &mut hasher),
        }
    }
    std::hash::Hasher::finish(&hasher)
}

/// The plugin the endpoints say they are: one that is another plugin's, else the first that said.
fn claimed_plugin(kept: &[Probed]) -> Option<WorkerPlugin> {
    let other =
        kept.iter().find(|p| matches!(&p.outcome, ProbeOutcome::Failed(f) if f.error.reason() == "other_plugin"));
    other.or_else(|| kept.iter().find(|p| p.outcome.plugin().is_some())).and_then(|p| p.outcome.plugin()).cloned()
}

/// The endpoints of `due` that have no answer in `probed` (the probe budget ran out first), each
/// failed as a probe that timed out at `at`.
fn unanswered(due: Vec<(Member, Option<Instant>)>, probed: &[Probed], at: Instant) -> Vec<Probed> {
    let answered: std::collections::HashSet<&Member> = probed.iter().map(|p| &p.member).collect();
    due.into_iter()
        .filter(|(member, _)| !answered.contains(member))
        .map(|(member, failing_before)| Probed {
            member,
            outcome: ProbeOutcome::Failed(ProbeError::Timeout(PROBE_BUDGET).into()),
            at,
            failing_since: Some(failing_before.unwrap_or(at)),
        })
        .collect()
}

/// `message`, saying how many serving endpoints were not probed because the cluster does not
/// vouch for them or the operator does not allow their address (their number only: who wrote
/// them is for the operator to find).
fn left_out(message: String, unvouched: usize) -> String {
    if unvouched == 0 {
        return message;
    }
    let note = format!(
        "{unvouched} serving endpoint(s) of the Service were not probed: their EndpointSlice is not the EndpointSlice controller's, their targetRef is not a Pod of the Service's namespace, or their address is outside the operator's --worker-endpoint-cidrs"
    );
    if message.is_empty() { note } else { format!("{message}; {note}") }
}

/// What the Service says of the port a provider names.
enum Port {
    /// Its name (empty for an unnamed port), which the Service's EndpointSlices name it by.
    Named(String),
    /// No such Service, or no such port.
    Missing,
    ExternalName,
}

async fn service_port(ctx: &Context, service: &ServiceRef) -> Result<Port, Error> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &service.namespace);
    let found = api
        .get_opt(&service.name)
        .await
        .map_err(|source| Error::ReadService { name: format!("{}/{}", service.namespace, service.name), source })?;
    let Some(spec) = found.and_then(|s| s.spec) else { return Ok(Port::Missing) };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(Port::ExternalName);
    }
    let port = spec.ports.unwrap_or_default().into_iter().find(|p| p.port == service.port);
    Ok(port.map_or(Port::Missing, |p| Port::Named(p.name.unwrap_or_default())))
}

/// The probe metric and the log line of one endpoint's probe; the detail is for the operator only.
fn count(ctx: &Context, provider: &SandboxProvider, member: &Member, outcome: &ProbeOutcome, took: Duration) {
    let labels = ProbeLabels { result: outcome.label(), reason: outcome.reason() };
    let (provider, endpoint, pod) = (provider.name_any(), member.address(), member.pod.as_deref().unwrap_or(""));
    ctx.metrics.probed(&provider, &labels, took);
    match outcome {
        ProbeOutcome::Failed(failure) => tracing::info!(
            %provider, %endpoint, pod, result = labels.result, reason = labels.reason, detail = %failure.detail(), "probed endpoint"
        ),
        ProbeOutcome::Succeeded { .. } => {
            tracing::debug!(%provider, %endpoint, pod, result = labels.result, "probed endpoint")
        }
    }
}

#[cfg(test)]
mod tests;
