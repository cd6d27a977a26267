//! The budgets of docs/webhook.md ("Budgets"), against the real `sandcap` binary: each hostile
//! class of tests/support/hostile.rs alone, then 64 full-size reviews at once, reading the
//! process's peak resident memory (`VmHWM`) from /proc. Time is measured in the benchmark
//! (benches/hostile.rs, a release build): these tests run a debug build on a machine that may be
//! busy, so they hold `/healthz` only to answering at all while a review runs.

mod support;

use std::time::Duration;

use support::hostile::{self, Reviewed, Sandcap, client};

/// The budgets, in bytes (docs/webhook.md).
const ONE_REVIEW_PEAK: u64 = 128 * 1024 * 1024;
const CONCURRENT_PEAK: u64 = 224 * 1024 * 1024;
const MAX_ANSWER: usize = 64 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hostile_review_alone_stays_within_the_single_review_budget() {
    for (class, body) in hostile::reviews() {
        assert!(body.len() <= hostile::MAX_BODY, "{class}: {} bytes", body.len());
        let sandcap = Sandcap::start().await;
        let Reviewed { status, len, slowest_healthz: slowest, .. } = sandcap.review_polling_healthz(body).await;
        assert!(matches!(status, 200 | 400), "{class}: status {status}");
        assert!(len <= MAX_ANSWER, "{class}: a {len}-byte answer");
        assert!(slowest < Duration::from_secs(5), "{class}: /healthz took {slowest:?}");
        let peak = sandcap.peak();
        eprintln!("{class}: status {status}, {len}-byte answer, peak {} MiB, /healthz at most {slowest:?}", peak >> 20);
        assert!(peak <= ONE_REVIEW_PEAK, "{class}: peak {} MiB", peak >> 20);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_full_size_reviews_at_once_are_all_answered_within_budget() {
    let sandcap = Sandcap::start().await;
    let provider = hostile::review(&hostile::flooded(
        hostile::provider_with_schema("flood", serde_json::json!({})),
        hostile::MAX_BODY - 64 * 1024,
    ));
    let lease = hostile::review(&hostile::flooded(hostile::lease("flood"), hostile::MAX_BODY - 64 * 1024));
    let client = client();
    let requests = (0..64).map(|i| {
        let body = if i % 2 == 0 { provider.clone() } else { lease.clone() };
        let request = client.post(&sandcap.webhook).header("content-type", "application/json").body(body);
        tokio::spawn(async move {
            let response = request.send().await.expect("an answer");
            (response.status().as_u16(), response.bytes().await.expect("a body").len())
        })
    });
    let answers = futures::future::join_all(requests).await;
    for answer in answers {
        let (status, len) = answer.unwrap();
        // A verdict, or a refusal the apiserver shows: 429 (too many in flight), 408 (not answered
        // within the request timeout, as a debug build on a busy machine may not be).
        assert!(matches!(status, 200 | 408 | 429), "status {status}");
        assert!(len <= MAX_ANSWER, "a {len}-byte answer");
    }
    let peak = sandcap.peak();
    eprintln!("64 at once: peak {} MiB", peak >> 20);
    assert!(peak <= CONCURRENT_PEAK, "peak {} MiB", peak >> 20);
}

/// Transparent huge pages would keep each 2 MiB of heap that holds one live byte resident
/// (src/main.rs): sandcap turns them off for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandcap_runs_without_transparent_huge_pages() {
    let sandcap = Sandcap::start().await;
    assert_eq!(sandcap.proc_status("THP_enabled").as_deref(), Some("0"));
}
