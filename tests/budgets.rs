//! The budgets of docs/webhook.md ("Budgets"), against the real `sandcap` binary: each hostile
//! class of tests/support/hostile.rs alone, then 64 full-size reviews at once, reading the
//! process's peak resident memory (`VmHWM`) from /proc. Time is measured in the benchmark
//! (benches/hostile.rs, a release build): these tests run a debug build on a machine that may be
//! busy, so they hold `/healthz` only to answering at all while a review runs.

mod support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::hostile;

/// The budgets, in bytes (docs/webhook.md).
const ONE_REVIEW_PEAK: u64 = 128 * 1024 * 1024;
const CONCURRENT_PEAK: u64 = 224 * 1024 * 1024;
const MAX_ANSWER: usize = 64 * 1024;

/// `sandcap run --webhook-only --tls-self-signed` on free loopback ports; killed on drop.
struct Sandcap {
    child: Child,
    webhook: String,
    admin: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Sandcap {
    async fn start() -> Sandcap {
        let (webhook, admin) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
        let child = Command::new(env!("CARGO_BIN_EXE_sandcap"))
            .args(["run", "--webhook-only", "--tls-self-signed", "--webhook-addr", &webhook, "--admin-addr", &admin])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandcap starts");
        let sandcap = Sandcap { child, webhook: format!("https://{webhook}/validate"), admin: format!("http://{admin}") };
        for _ in 0..200 {
            if reqwest::get(format!("{}/readyz", sandcap.admin)).await.is_ok_and(|r| r.status() == 200) {
                return sandcap;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("sandcap did not get ready");
    }

    /// Peak resident memory since the start, from /proc.
    fn peak(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status");
        kib * 1024
    }
}

impl Drop for Sandcap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Sends `body` while polling `/healthz`; returns the answer's status and length and the
/// slowest `/healthz` answer seen meanwhile.
async fn send(sandcap: &Sandcap, body: Vec<u8>) -> (u16, usize, Duration) {
    let review = client().post(&sandcap.webhook).header("content-type", "application/json").body(body).send();
    let review = tokio::spawn(async move {
        let response = review.await.expect("an answer");
        let status = response.status().as_u16();
        (status, response.bytes().await.expect("a body").len())
    });
    let mut slowest = Duration::ZERO;
    while !review.is_finished() {
        let started = Instant::now();
        let healthz = reqwest::get(format!("{}/healthz", sandcap.admin)).await.expect("/healthz answers");
        assert_eq!(healthz.status(), 200);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, len) = review.await.unwrap();
    (status, len, slowest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hostile_review_alone_stays_within_the_single_review_budget() {
    for (class, body) in hostile::reviews() {
        assert!(body.len() <= hostile::MAX_BODY, "{class}: {} bytes", body.len());
        let sandcap = Sandcap::start().await;
        let (status, len, slowest) = send(&sandcap, body).await;
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
