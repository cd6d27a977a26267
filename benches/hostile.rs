//! What each hostile class of tests/support/hostile.rs costs the real `sandcap` (this bench's
//! release build), next to an honest review measured in the same run: time to answer, peak
//! resident memory of the whole process (a fresh process per class), the slowest `/healthz`
//! meanwhile; then 64 full-size reviews at once; then `sandcap resolve` of a stored provider
//! whose schema is over budget, as the controller would compile it. Prints a table; asserts
//! nothing (the budgets are held by tests/budgets.rs).
//!
//!     cargo bench --bench hostile

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::hostile::{self, Reviewed, Sandcap, client};

/// Best of this many fresh processes per class, so that a busy moment of the machine does not
/// decide a figure.
const RUNS: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // First, while this process is small: a child's peak resident memory as `wait4` reports it
    // starts from its parent's at the fork.
    resolve();
    println!("| input | bytes | answer | time | × honest | peak RSS | × honest | slowest /healthz |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    let mut classes = vec![("honest provider", hostile::honest_review())];
    classes.extend(hostile::reviews());
    let mut baseline: Option<(Duration, u64)> = None;
    for (class, body) in classes {
        let mut best: Option<(Reviewed, u64)> = None;
        for _ in 0..RUNS {
            let sandcap = Sandcap::start().await;
            let reviewed = sandcap.review_polling_healthz(body.clone()).await;
            let peak = sandcap.peak();
            if best.as_ref().is_none_or(|(b, _)| reviewed.elapsed < b.elapsed) {
                best = Some((reviewed, peak));
            }
        }
        let (r, peak) = best.expect("at least one run");
        let (time0, peak0) = *baseline.get_or_insert((r.elapsed, peak));
        println!(
            "| {class} | {} | {} ({} B) | {:.1} ms | {:.1} | {} MiB | {:.2} | {:.1} ms |",
            body.len(),
            r.status,
            r.len,
            ms(r.elapsed),
            r.elapsed.as_secs_f64() / time0.as_secs_f64(),
            peak >> 20,
            peak as f64 / peak0 as f64,
            ms(r.slowest_healthz),
        );
    }
    concurrent().await;
}

/// 64 full-size reviews of unknown keys at once.
async fn concurrent() {
    let sandcap = Sandcap::start().await;
    let body = hostile::review(&hostile::flooded(hostile::lease("flood"), hostile::MAX_BODY - 64 * 1024));
    let client = client();
    let started = Instant::now();
    let answers = futures::future::join_all((0..64).map(|_| {
        let request = client.post(&sandcap.webhook).header("content-type", "application/json").body(body.clone());
        async move { request.send().await.map(|r| r.status().as_u16()) }
    }))
    .await;
    let elapsed = started.elapsed();
    let mut statuses: Vec<String> = answers.iter().map(|a| a.as_ref().map_or("error".into(), u16::to_string)).collect();
    statuses.sort();
    statuses.dedup_by(|a, b| a == b);
    let count = |s: &str| answers.iter().filter(|a| a.as_ref().map_or("error".into(), u16::to_string) == s).count();
    let summary: Vec<String> = statuses.iter().map(|s| format!("{} × {s}", count(s))).collect();
    println!(
        "\n64 reviews of {} bytes at once: {} in {:.2} s, peak RSS {} MiB",
        body.len(),
        summary.join(", "),
        elapsed.as_secs_f64(),
        sandcap.peak() >> 20
    );
}

/// `sandcap resolve --provider <file> --lease <file>`: what the lease controller compiles for a
/// lease of the provider, over budget and honest.
fn resolve() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let lease = dir.path().join("lease.json");
    let mut lease_object = hostile::lease("l");
    lease_object["spec"]["providerRef"]["name"] = "stored".into();
    std::fs::write(&lease, lease_object.to_string()).expect("written");
    let mut baseline = None;
    for (class, schema) in [
        ("honest configSchema", serde_json::json!({"properties": {"image": {"pattern": "^[a-z0-9./:-]+$"}}})),
        ("configSchema regexes", hostile::costly_schema()),
    ] {
        let provider = dir.path().join("provider.json");
        std::fs::write(&provider, hostile::provider_with_schema("stored", schema).to_string()).expect("written");
        let started = Instant::now();
        let (output, max_rss) = run_measured(
            Command::new(env!("CARGO_BIN_EXE_sandcap"))
                .args(["resolve", "--provider"])
                .arg(&provider)
                .arg("--lease")
                .arg(&lease),
        );
        let elapsed = started.elapsed();
        let (time0, rss0) = *baseline.get_or_insert((elapsed, max_rss));
        let verdict = String::from_utf8_lossy(&output);
        let config = verdict.lines().find(|l| l.contains("SchemaOverBudget") || l.contains("config")).unwrap_or("");
        println!(
            "sandcap resolve, {class}: {:.1} ms (× {:.1}), peak RSS {} MiB (× {:.2}); {}",
            ms(elapsed),
            elapsed.as_secs_f64() / time0.as_secs_f64(),
            max_rss >> 20,
            max_rss as f64 / rss0 as f64,
            config.trim()
        );
    }
}

/// Runs `command` to its end; its stdout and peak resident memory in bytes (from `wait4`, which
/// reaps the child: `Child::wait` cannot report the memory).
#[allow(clippy::zombie_processes)]
fn run_measured(command: &mut Command) -> (Vec<u8>, u64) {
    let child = command.stdout(std::process::Stdio::piped()).spawn().expect("sandcap runs");
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.expect("piped");
    let mut output = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut output).expect("stdout");
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills; pid is our own child, not yet reaped.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4");
    (output, usage.ru_maxrss as u64 * 1024)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
