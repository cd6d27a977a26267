//! Workers that crash, hang, flood their stdout, write garbage or call the host in a loop: each is
//! killed and restarted with backoff (or, calling the host politely, kept and answered), the
//! bridge's memory stays within its budget, and every probe is answered within the probe timeout,
//! "unreachable" while no worker is initialized.

use std::time::Duration;

use crate::harness::{Bridge, PROBE_TIMEOUT, RSS_BUDGET, misbehaving, node, probe_for, records, starts};

/// Runs `script` behind a bridge with `args`, probing it for `duration`; checks the budgets.
async fn behind_bridge(
    script: &str,
    args: &[&str],
    duration: Duration,
) -> Option<(tempfile::TempDir, Bridge, crate::harness::Probes)> {
    let node = node()?;
    let package = misbehaving(script);
    let bridge = Bridge::start(package.path(), &node, args);
    let probes = probe_for(&bridge.url, duration).await;
    let peak = bridge.peak_rss();
    eprintln!(
        "{script}: {probes:?}, peak RSS {:.1} MiB, {} worker starts",
        peak as f64 / 1048576.0,
        starts(package.path()).len()
    );
    assert!(peak <= RSS_BUDGET, "{script}: peak RSS {peak} bytes, over the budget of {RSS_BUDGET}");
    assert!(probes.slowest < PROBE_TIMEOUT, "{script}: a probe took {:?}", probes.slowest);
    assert!(probes.other.is_empty(), "{script}: probes failed otherwise than unreachable: {:?}", probes.other);
    Some((package, bridge, probes))
}

/// The `restart_in` of each restart the bridge logged, in milliseconds.
fn restart_delays(bridge: &Bridge) -> Vec<u64> {
    let delays = bridge.lines_with("restarting").into_iter().filter_map(|line| {
        let value = line.split("restart_in=").nth(1)?.split(' ').next()?.to_string();
        humantime::parse_duration(&value).ok().map(|d| d.as_millis() as u64)
    });
    delays.collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_crashes_is_restarted_with_doubling_backoff() {
    let args = ["--restart-backoff", "250ms", "--restart-backoff-max", "2s"];
    let Some((package, bridge, probes)) = behind_bridge("crash", &args, Duration::from_secs(7)).await else { return };
    assert_eq!(probes.succeeded, 0);
    assert!(probes.unreachable > 10, "{probes:?}");
    let delays = restart_delays(&bridge);
    assert!(delays.len() >= 4, "restarts: {delays:?}\n{}", bridge.log().join("\n"));
    assert_eq!(delays[..4], [250, 500, 1000, 2000], "1 backoff, doubling, at most the cap");
    assert!(delays[4..].iter().all(|&d| d == 2000), "{delays:?}");
    let starts = starts(package.path());
    for (i, gap) in starts.windows(2).map(|w| w[1] - w[0]).enumerate() {
        assert!(gap >= delays[i] * 9 / 10, "start {} came {gap} ms after the one before, backoff {}", i + 1, delays[i]);
    }
    assert!(bridge.lines_with("the worker exited (exit status: 3)").len() >= 4);
    assert!(bridge.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_never_answers_initialize_is_killed_at_the_timeout() {
    let args = ["--initialize-timeout", "1s", "--restart-backoff", "200ms"];
    let Some((package, bridge, probes)) = behind_bridge("hang", &args, Duration::from_secs(5)).await else { return };
    assert_eq!(probes.succeeded, 0);
    assert!(bridge.lines_with("the worker did not answer initialize within 1s").len() >= 2, "{:?}", bridge.log());
    assert!(starts(package.path()).len() >= 2);
    bridge.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_floods_its_stdout_is_restarted() {
    let Some((_package, bridge, probes)) = behind_bridge("flood", &[], Duration::from_secs(6)).await else { return };
    bridge.wait_for("the worker flooded its stdout: more than", Duration::from_secs(5));
    assert!(probes.unreachable > 0, "{probes:?}");
    bridge.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_writes_garbage_is_restarted() {
    let Some((_package, bridge, probes)) = behind_bridge("garbage", &[], Duration::from_secs(4)).await else { return };
    assert_eq!(probes.succeeded, 0, "it never answers initialize before its garbage ends it");
    bridge.wait_for("more than 32 stdout lines that are not JSON-RPC messages", Duration::from_secs(5));
    assert!(bridge.lines_with("a line that is not JSON on stdout: debug output").len() >= 32);
    bridge.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_writes_a_line_past_the_cap_is_restarted() {
    let Some((_package, bridge, probes)) = behind_bridge("overlong", &[], Duration::from_secs(4)).await else { return };
    assert_eq!(probes.succeeded, 0);
    bridge.wait_for("the worker wrote a stdout line longer than 1048576 bytes", Duration::from_secs(5));
    bridge.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_calls_the_host_in_a_loop_is_refused_every_call_and_kept() {
    let Some((package, bridge, probes)) = behind_bridge("host-loop", &[], Duration::from_secs(6)).await else { return };
    assert!(probes.succeeded > 10, "{probes:?}");
    let last = records(package.path(), "calls.log").pop().expect("the worker recorded its calls");
    let calls: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert!(calls["answered"].as_u64().unwrap() > 200, "{calls}");
    assert_eq!(
        calls["codes"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["-32601"],
        "method not found, every one"
    );
    assert_eq!(starts(package.path()).len(), 1, "never restarted:\n{}", bridge.log().join("\n"));
    assert!(bridge.lines_with("restarting").is_empty());
    bridge.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_calls_the_host_without_reading_the_answers_is_restarted() {
    let Some((_package, bridge, _)) = behind_bridge("host-flood", &[], Duration::from_secs(5)).await else { return };
    bridge.wait_for("the worker does not read its stdin: more than 64 answers", Duration::from_secs(5));
    bridge.stop();
}

/// The bridge's children that are zombies (state `Z` in `/proc/<pid>/stat`).
fn zombie_children(bridge: u32) -> Vec<u32> {
    let entries = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    entries
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
            fields.first() == Some(&"Z") && fields.get(1) == Some(&bridge.to_string().as_str())
        })
        .collect()
}

/// A worker that leaves a detached process (a session of its own, out of its process group) and
/// an orphan behind, then exits: before the next worker starts, the detached one is ended, and no
/// zombie is left to the bridge (PID 1 in the example image) for longer than its reap interval.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_worker_leaves_behind_is_ended_and_reaped() {
    let args = ["--restart-backoff", "1s", "--restart-backoff-max", "1s"];
    let Some((package, bridge, _)) = behind_bridge("detach", &args, Duration::from_secs(8)).await else { return };
    let detached: Vec<u32> = records(package.path(), "detached.log").iter().filter_map(|l| l.parse().ok()).collect();
    assert!(detached.len() >= 3, "the workers' detached pids: {detached:?}");
    // Every worker but the one running now has been replaced: what it left is gone.
    for pid in &detached[..detached.len() - 1] {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the detached {pid} outlived its worker");
    }
    assert!(!bridge.lines_with("ended what the worker left running").is_empty(), "{}", bridge.log().join("\n"));
    let zombies = zombie_children(bridge.pid());
    assert!(zombies.len() <= 2, "zombies of the bridge: {zombies:?}");
    std::thread::sleep(Duration::from_secs(6));
    let lasting: Vec<u32> = zombie_children(bridge.pid()).into_iter().filter(|z| zombies.contains(z)).collect();
    assert!(lasting.is_empty(), "zombies not reaped within the reap interval: {lasting:?}");
    assert!(bridge.stop().success());
    let last = detached.last().expect("a pid");
    assert!(
        !std::path::Path::new(&format!("/proc/{last}")).exists(),
        "the last worker's detached {last} outlived the bridge"
    );
}
