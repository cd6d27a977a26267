//! How each cache's watch lists its objects: by a streaming list (`sendInitialEvents=true`), in
//! which the watch request itself sends every object as an event of its own, then a bookmark that
//! ends the list, and goes on watching: one request instead of one per page of 500 and a watch,
//! and no page of objects built by the apiserver or decoded by sandcap at once.
//!
//! kube-runtime does not fall back by itself when the apiserver refuses streaming lists (its
//! `WatchList` feature gate, beta, turned off): it would retry the same request forever. So a
//! refusal switches that watch to a paged list then watch, for the life of the process, and says
//! so once. Nothing else switches it: a transient error (the network, a 5xx, 429, a timeout, 410
//! Gone) is passed on and the watcher retries it with backoff, as with any watch.
//!
//! Either way the watcher reports `Init`, one `InitApply` per object and `InitDone`, so what
//! reads the events cannot tell the two apart.

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// The watch of `api`, by streaming lists, falling back to the paged lists of `config` when the
/// apiserver refuses them; `dyntype` names the kind (`&()` for a kind known at compile time). An
/// `Api<PartialObjectMeta<K>>` watches the objects' metadata alone: the apiserver sends nothing
/// else of them.
pub(crate) fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    dyntype: &K::DynamicType,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + use<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let watched = Watched { kind: K::kind(dyntype).into_owned(), namespace: api.namespace().map(String::from) };
    falling_back(config, watched, move |config| watcher::watcher(api.clone(), config))
}

/// What a watch watches, for its log line.
struct Watched {
    kind: String,
    /// `None` for every namespace.
    namespace: Option<String>,
}

/// The events of `start(streaming lists)`, until it refuses them; from then on those of
/// `start(config)` (the refusal itself is said by a log line, not passed on).
fn falling_back<K, S>(
    config: watcher::Config,
    watched: Watched,
    mut start: impl FnMut(watcher::Config) -> S + Send + 'static,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Send,
    S: Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
{
    let streaming = start(config.clone().streaming_lists()).boxed();
    let state = (streaming, true, start, config, watched);
    futures::stream::unfold(state, |(mut events, mut streaming, mut start, config, watched)| async move {
        loop {
            let item = events.next().await?;
            let Some(message) = item.as_ref().err().filter(|_| streaming).and_then(refusal) else {
                return Some((item, (events, streaming, start, config, watched)));
            };
            tracing::warn!(
                kind = watched.kind,
                namespace = watched.namespace,
                // Not `message`: that is the log line's own text.
                refusal = message,
                "the apiserver refuses streaming lists; this watch lists in pages from now on"
            );
            streaming = false;
            events = start(config.clone()).boxed();
        }
    })
}

/// The apiserver's message when `error` is its refusal of a streaming list. It validates a
/// watch's list options before serving it (`ValidateListOptions`) and answers `sendInitialEvents`
/// with the `WatchList` gate off as 422 Invalid of kind `ListOptions`, on the request that starts
/// the watch. A paged list and the watch after it ask for neither `sendInitialEvents` nor
/// `resourceVersionMatch`, so no such answer can come to them.
fn refusal(error: &watcher::Error) -> Option<&str> {
    let watcher::Error::WatchStartFailed(kube::Error::Api(status)) = error else { return None };
    let of_list_options = status.details.as_ref().is_some_and(|d| d.kind == "ListOptions");
    (status.is_invalid() && of_list_options).then_some(status.message.as_str())
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};
    use kube::runtime::watcher::InitialListStrategy;

    use super::*;
    use crate::controller::tests::capture;

    /// The message of [`refused`].
    const REFUSAL: &str = "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";

    /// What the apiserver answers a streaming list with its `WatchList` gate off (as
    /// `kube-apiserver --feature-gates=WatchList=false` of 1.35 and 1.37 answers it).
    fn refused() -> watcher::Error {
        let cause = StatusCause {
            reason: "FieldValueForbidden".into(),
            message: "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
                .into(),
            field: "sendInitialEvents".into(),
        };
        let details = StatusDetails {
            group: "meta.k8s.io".into(),
            kind: "ListOptions".into(),
            causes: vec![cause],
            name: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        };
        let status = Status::failure(REFUSAL, "Invalid").with_code(422).with_details(details);
        watcher::Error::WatchStartFailed(kube::Error::Api(status.boxed()))
    }

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("the apiserver's message", reason).with_code(code).boxed())
    }

    /// Errors a watch meets that say nothing of streaming lists.
    fn not_refusals() -> Vec<watcher::Error> {
        vec![
            watcher::Error::WatchStartFailed(api_error(500, "InternalError")),
            watcher::Error::WatchStartFailed(api_error(503, "ServiceUnavailable")),
            watcher::Error::WatchStartFailed(api_error(429, "TooManyRequests")),
            watcher::Error::WatchStartFailed(api_error(504, "Timeout")),
            watcher::Error::WatchStartFailed(api_error(410, "Expired")),
            watcher::Error::WatchStartFailed(api_error(403, "Forbidden")),
            // Invalid, but of something else than the list options.
            watcher::Error::WatchStartFailed(api_error(422, "Invalid")),
            watcher::Error::WatchError(Status::failure("too old resource version", "Expired").with_code(410).boxed()),
            watcher::Error::WatchFailed(kube::Error::Service("connection reset by peer".into())),
            watcher::Error::WatchStartFailed(kube::Error::Service("operation timed out".into())),
            watcher::Error::NoResourceVersion,
        ]
    }

    #[test]
    fn only_invalid_list_options_on_a_watch_start_refuse_streaming_lists() {
        assert_eq!(refusal(&refused()), Some(REFUSAL));
        for error in not_refusals() {
            assert_eq!(refusal(&error), None, "{error}");
        }
        // The same answer in the middle of a watch, or to a list, is not a refusal to start one.
        let watcher::Error::WatchStartFailed(kube::Error::Api(status)) = refused() else { unreachable!() };
        assert_eq!(refusal(&watcher::Error::WatchError(status.clone())), None);
        assert_eq!(refusal(&watcher::Error::InitialListFailed(kube::Error::Api(status))), None);
    }

    fn object(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object
    }

    fn list(names: &[&str]) -> Vec<watcher::Result<Event<ConfigMap>>> {
        let listed = names.iter().map(|n| Ok(Event::InitApply(object(n))));
        std::iter::once(Ok(Event::Init)).chain(listed).chain([Ok(Event::InitDone)]).collect()
    }

    /// A fake watcher: each start hands out the next of `runs` and records the strategy asked for.
    struct Starts {
        asked: Arc<Mutex<Vec<InitialListStrategy>>>,
        runs: VecDeque<Vec<watcher::Result<Event<ConfigMap>>>>,
    }

    /// Everything the watch yields over `runs` (the items as text), and the strategies started.
    async fn run(runs: Vec<Vec<watcher::Result<Event<ConfigMap>>>>) -> (Vec<String>, Vec<InitialListStrategy>) {
        let mut starts = Starts { asked: Arc::default(), runs: runs.into() };
        let asked = starts.asked.clone();
        let config = watcher::Config::default().labels("a=b");
        let watched = Watched { kind: "ConfigMap".into(), namespace: Some("team-a".into()) };
        let events = falling_back(config.clone(), watched, move |asked_for: watcher::Config| {
            // Only the strategy differs from what the caller configured.
            let expected =
                watcher::Config { initial_list_strategy: asked_for.initial_list_strategy.clone(), ..config.clone() };
            assert_eq!(asked_for, expected);
            starts.asked.lock().unwrap().push(asked_for.initial_list_strategy);
            futures::stream::iter(starts.runs.pop_front().unwrap_or_default())
        });
        let yielded = events
            .map(|item| match item {
                Ok(event) => event.to_string(),
                Err(error) => format!("error: {error}"),
            })
            .collect()
            .await;
        let asked = asked.lock().unwrap().clone();
        (yielded, asked)
    }

    #[tokio::test]
    async fn a_streaming_list_is_asked_for_and_errors_are_passed_on_for_the_watcher_to_retry() {
        let (lines, _guard) = capture();
        let mut events = vec![Ok(Event::Init), Ok(Event::InitApply(object("a"))), Ok(Event::InitDone)];
        events.extend(not_refusals().into_iter().map(Err));
        events.push(Ok(Event::Apply(object("b"))));
        let (yielded, asked) = run(vec![events]).await;
        assert_eq!(asked, [InitialListStrategy::StreamingList], "never falls back");
        assert_eq!(yielded.len(), 3 + not_refusals().len() + 1, "{yielded:#?}");
        assert_eq!(yielded[..3], ["Init", "InitApply(a)", "InitDone"]);
        assert!(yielded[3..3 + not_refusals().len()].iter().all(|y| y.starts_with("error: ")), "{yielded:#?}");
        assert_eq!(yielded.last().map(String::as_str), Some("Apply(b)"));
        assert!(lines.lock().unwrap().is_empty(), "nothing logged");
    }

    #[tokio::test]
    async fn a_refusal_switches_to_paged_lists_for_good_and_is_logged_once() {
        let (lines, _guard) = capture();
        let mut paged = list(&["a", "b"]);
        paged.extend([Err(refused()), Ok(Event::Apply(object("c")))]);
        let (yielded, asked) = run(vec![vec![Err(refused())], paged]).await;
        assert_eq!(asked, [InitialListStrategy::StreamingList, InitialListStrategy::ListWatch]);
        let refusal_text = format!("error: {}", refused());
        assert_eq!(yielded, ["Init", "InitApply(a)", "InitApply(b)", "InitDone", &refusal_text, "Apply(c)"]);

        let logs = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert_eq!(logs.lines().count(), 1, "{logs}");
        let refusal = format!("refusal={REFUSAL:?}");
        for part in [
            "WARN",
            "the apiserver refuses streaming lists; this watch lists in pages from now on",
            "kind=\"ConfigMap\"",
            "namespace=\"team-a\"",
            &refusal,
        ] {
            assert!(logs.contains(part), "{part} in {logs}");
        }
    }

    #[tokio::test]
    async fn a_refusal_after_streamed_lists_starts_the_paged_list_afresh() {
        // A watch whose re-list (after 410 Gone) is refused: the apiserver's gate was turned off.
        let (_lines, _guard) = capture();
        let gone = watcher::Error::WatchError(Status::failure("too old", "Expired").with_code(410).boxed());
        let mut streamed = list(&["a", "b"]);
        streamed.extend([Err(gone), Err(refused())]);
        let (yielded, asked) = run(vec![streamed, list(&["a"])]).await;
        assert_eq!(asked, [InitialListStrategy::StreamingList, InitialListStrategy::ListWatch]);
        let after_gone: Vec<&str> = yielded.iter().skip(5).map(String::as_str).collect();
        // A new Init, so a reader finds `b` deleted during the gap at InitDone.
        assert_eq!(after_gone, ["Init", "InitApply(a)", "InitDone"], "{yielded:#?}");
    }
}
