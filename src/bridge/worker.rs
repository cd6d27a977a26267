//! One worker process, from its start to its end: started as the host starts it (node, the
//! entrypoint, stdio pipes, a scrubbed environment), sent `initialize` once, its stdout read as
//! the protocol under the budgets, its calls into the host refused, its stderr logged, and a
//! periodic `health` call. Whatever ends it, the process (and its process group) is killed.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Budgets;
use super::lines::{Flood, Line, Rate, next_line};
use super::reap;
use super::rpc::{self, Incoming, NotRpc, Refused};

/// How to start a worker, and what to tell it.
#[derive(Clone, Debug)]
pub struct Spawn {
    pub node: PathBuf,
    pub entrypoint: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    /// The `initialize` params ([`rpc::initialize_params`]).
    pub params: Arc<Value>,
    /// The member `plugin` of the probe's answer.
    pub identity: Arc<Value>,
    /// Where the running worker's pid is kept for the reaper.
    pub live: reap::Live,
}

/// The environment the host gives a worker (`plugin-worker-manager.js`, `spawnProcess`, and
/// `plugin-loader.js`'s `buildPluginWorkerEnv`): nothing of the bridge's own but `PATH`,
/// `NODE_PATH`, `NODE_ENV` and `TZ`, the plugin's id, and the variables named by `--pass-env`.
pub fn worker_env(plugin_id: Option<&str>, pass: &[String]) -> Vec<(OsString, OsString)> {
    let var = |name: &str| std::env::var_os(name);
    let mut env: Vec<(OsString, OsString)> =
        vec![("PAPERCLIP_DEPLOYMENT_MODE".into(), "".into()), ("PAPERCLIP_DEPLOYMENT_EXPOSURE".into(), "".into())];
    env.extend(pass.iter().filter_map(|name| var(name).map(|value| (name.into(), value))));
    env.push(("PATH".into(), var("PATH").unwrap_or_default()));
    env.push(("NODE_PATH".into(), var("NODE_PATH").unwrap_or_default()));
    if let Some(id) = plugin_id {
        env.push(("PAPERCLIP_PLUGIN_ID".into(), id.into()));
    }
    env.push(("NODE_ENV".into(), var("NODE_ENV").unwrap_or_else(|| "production".into())));
    env.push(("TZ".into(), var("TZ").unwrap_or_else(|| "UTC".into())));
    env
}

/// Why a worker process ended (it is killed in every case).
#[derive(Debug, thiserror::Error)]
pub enum Ended {
    #[error("cannot start the worker: {0}")]
    Spawn(std::io::Error),
    #[error("the worker exited ({0})")]
    Exited(String),
    #[error("the worker did not answer {method} within {}", humantime::format_duration(*.timeout))]
    Hung { method: &'static str, timeout: Duration },
    #[error("the worker declined initialize (JSON-RPC error {})", .0.map_or("without a code".into(), |c| c.to_string()))]
    Declined(Option<i64>),
    #[error("the worker answered initialize, but {0}")]
    Refused(Refused),
    #[error("the worker wrote a stdout line longer than {0} bytes")]
    LineTooLong(usize),
    #[error("the worker flooded its stdout: {0}")]
    Flood(Flood),
    #[error("the worker wrote more than {0} stdout lines that are not JSON-RPC messages")]
    Garbage(usize),
    #[error("the worker does not read its stdin: more than {0} answers to its calls wait to be written")]
    NotReading(usize),
    #[error("the bridge is stopping")]
    Stopped,
}

/// The request ids the bridge uses: one `initialize`, then `health` calls.
const INITIALIZE_ID: u64 = 1;

/// Runs one worker process until it ends; `ready` is called once, with the probe's `result`.
pub async fn run(
    spawn: &Spawn,
    budgets: &Budgets,
    stop: &CancellationToken,
    ready: impl FnOnce(Box<RawValue>),
) -> Ended {
    let mut command = Command::new(&spawn.node);
    command
        .arg(&spawn.entrypoint)
        .env_clear()
        .envs(spawn.env.iter().cloned())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    own_group(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Ended::Spawn(e),
    };
    let pid = child.id();
    spawn.live.set(pid);
    tracing::info!(pid, entrypoint = %spawn.entrypoint.display(), "worker started");
    let (stdin, stdout, stderr) =
        (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let (answers, queue) = mpsc::channel(budgets.max_queued_answers);
    let writer = tokio::spawn(write_stdin(stdin, queue));
    let logger = tokio::spawn(log_stderr(BufReader::new(stderr), budgets.clone()));
    let mut session = Session { spawn, budgets, answers, ready: Some(ready), pending: None };
    let ended = tokio::select! {
        ended = session.read(BufReader::with_capacity(64 * 1024, stdout)) => ended,
        status = child.wait() => Ended::Exited(status.map_or_else(|e| e.to_string(), |s| s.to_string())),
        () = stop.cancelled() => Ended::Stopped,
    };
    kill(&mut child, pid).await;
    spawn.live.set(None);
    // What the worker started and left, detached or not, is the bridge's now: ended before the
    // next worker starts.
    let orphans = reap::sweep().await;
    if orphans > 0 {
        tracing::info!(orphans, "ended what the worker left running");
    }
    writer.abort();
    logger.abort();
    ended
}

/// The worker in a process group of its own, so that whatever it starts is killed with it, and
/// (Linux) killed if the bridge dies without killing it.
fn own_group(command: &mut Command) {
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's. The bridge runs on
    // one thread (a current-thread runtime), the thread PR_SET_PDEATHSIG watches.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            Ok(())
        });
    }
}

async fn kill(child: &mut Child, pid: Option<u32>) {
    #[cfg(target_os = "linux")]
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: a signal to the worker's own process group (its pid, from process_group(0)).
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pid;
    let _ = child.start_kill();
    let _ = child.wait().await;
}

async fn write_stdin(mut stdin: ChildStdin, mut queue: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = queue.recv().await {
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
}

/// The worker's stderr, to the bridge's log: lines cut at a length, at most so many a second
/// (the rest counted and dropped); never a reason to stop the worker.
async fn log_stderr<R: AsyncBufRead + Unpin>(mut stderr: R, budgets: Budgets) {
    let (mut buffer, mut rate) = (Vec::new(), Rate::new(budgets.stderr_lines_per_sec, u64::MAX));
    let mut dropped = 0u64;
    loop {
        let line = match next_line(&mut stderr, &mut buffer, budgets.max_line).await {
            Ok(Line::Text(line)) => line,
            Ok(Line::TooLong) => b"(a stderr line longer than the line cap)".to_vec(),
            Ok(Line::End) | Err(_) => return,
        };
        if rate.count(0, Instant::now()).is_err() {
            dropped += 1;
            continue;
        }
        if dropped > 0 {
            tracing::warn!(dropped, "worker stderr lines dropped (too many a second)");
            dropped = 0;
        }
        let text = String::from_utf8_lossy(&line[..line.len().min(budgets.max_stderr_line)]);
        tracing::warn!(stream = "stderr", "[plugin stderr] {text}");
    }
}

struct Session<'a, F> {
    spawn: &'a Spawn,
    budgets: &'a Budgets,
    answers: mpsc::Sender<Vec<u8>>,
    ready: Option<F>,
    /// The bridge's one outstanding request: its id, method and deadline.
    pending: Option<(u64, &'static str, Instant)>,
}

impl<F: FnOnce(Box<RawValue>)> Session<'_, F> {
    async fn read<R: AsyncBufRead + Unpin>(&mut self, mut stdout: R) -> Ended {
        let budgets = self.budgets;
        let initialize = rpc::request(INITIALIZE_ID, "initialize", &self.spawn.params);
        if let Err(ended) = self.send(initialize) {
            return ended;
        }
        self.pending = Some((INITIALIZE_ID, "initialize", Instant::now() + budgets.initialize_timeout));
        let (mut buffer, mut rate, mut garbage) =
            (Vec::new(), Rate::new(budgets.lines_per_sec, budgets.bytes_per_sec), 0);
        let mut next_health = Instant::now() + budgets.health_interval;
        let mut next_id = INITIALIZE_ID;
        loop {
            let deadline = self.pending.map_or(next_health, |(_, _, at)| at);
            let line = tokio::select! {
                line = next_line(&mut stdout, &mut buffer, budgets.max_line) => line,
                () = tokio::time::sleep_until(deadline.into()) => {
                    if let Some((_, method, _)) = self.pending {
                        let timeout = if method == "initialize" { budgets.initialize_timeout } else { budgets.health_timeout };
                        return Ended::Hung { method, timeout };
                    }
                    next_id += 1;
                    if let Err(ended) = self.send(rpc::request(next_id, "health", &Value::Object(Default::default()))) {
                        return ended;
                    }
                    self.pending = Some((next_id, "health", Instant::now() + budgets.health_timeout));
                    next_health = Instant::now() + budgets.health_interval;
                    continue;
                }
            };
            let line = match line {
                Ok(Line::Text(line)) => line,
                Ok(Line::TooLong) => return Ended::LineTooLong(budgets.max_line),
                // The process is ending: its exit status is the better reason.
                Ok(Line::End) | Err(_) => std::future::pending().await,
            };
            if let Err(flood) = rate.count(line.len(), Instant::now()) {
                return Ended::Flood(flood);
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match rpc::classify(&line) {
                Ok(message) => {
                    if let Some(ended) = self.handle(message) {
                        return ended;
                    }
                }
                Err(not_rpc) => {
                    garbage += 1;
                    log_garbage(&not_rpc, &line);
                    if garbage > budgets.max_garbage_lines {
                        return Ended::Garbage(budgets.max_garbage_lines);
                    }
                }
            }
        }
    }

    fn handle(&mut self, message: Incoming<'_>) -> Option<Ended> {
        match message {
            Incoming::Request { id, method } => {
                tracing::debug!(method = %method, "refused a call into the host");
                self.send(rpc::not_a_host(id, &method)).err()
            }
            Incoming::Notification { method } => {
                tracing::debug!(method = %method, "notification from the worker");
                None
            }
            Incoming::Response { id, outcome } => {
                let (expected, method, _) = self.pending?;
                if id != Some(expected) {
                    return None;
                }
                self.pending = None;
                match (method, outcome) {
                    ("initialize", Ok(result)) => {
                        match rpc::probe_result(result, &self.spawn.identity, self.budgets.max_result) {
                            Ok(answer) => {
                                if let Some(ready) = self.ready.take() {
                                    ready(answer);
                                }
                                None
                            }
                            Err(refused) => Some(Ended::Refused(refused)),
                        }
                    }
                    ("initialize", Err(code)) => Some(Ended::Declined(code)),
                    // A health answer, an error included, says the worker is alive.
                    _ => None,
                }
            }
        }
    }

    fn send(&self, line: Vec<u8>) -> Result<(), Ended> {
        match self.answers.try_send(line) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(Ended::NotReading(self.budgets.max_queued_answers)),
            // The writer stopped: stdin is closed, the process is ending.
            Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
        }
    }
}

fn log_garbage(not_rpc: &NotRpc, line: &[u8]) {
    let excerpt = String::from_utf8_lossy(&line[..line.len().min(200)]);
    tracing::warn!(line_length = line.len(), "the worker wrote {not_rpc} on stdout: {excerpt}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workers_environment_is_the_hosts_scrubbed_one() {
        let env = worker_env(Some("acme.k"), &["SANDCAP_BRIDGE_TEST_UNSET".into(), "PATH".into()]);
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert!(names.contains(&"PAPERCLIP_PLUGIN_ID") && names.contains(&"NODE_ENV") && names.contains(&"TZ"));
        assert!(!names.contains(&"HOME") && !names.contains(&"SANDCAP_BRIDGE_TEST_UNSET"), "{names:?}");
        let id = env.iter().find(|(k, _)| k == "PAPERCLIP_PLUGIN_ID").unwrap();
        assert_eq!(id.1, "acme.k");
    }
}
