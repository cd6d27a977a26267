//! The bridge as a good PID 1 (the example image runs it as the container's only process): what
//! the worker's tree leaves behind is the bridge's to end and to reap.
//!
//! The bridge makes itself a child subreaper (Linux's `PR_SET_CHILD_SUBREAPER`, what PID 1 is
//! anyway), so a process the worker started and left, a `detached` child in a session of its own
//! included, becomes the bridge's child once its parent is gone. When a worker ends, every such
//! orphan is killed and reaped before the next worker starts ([`sweep`]); while a worker runs,
//! orphans that have exited are reaped every [`REAP_EVERY`] ([`reaper`]). The live worker itself
//! is never touched here: tokio waits for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How often exited orphans are reaped while a worker runs.
pub const REAP_EVERY: Duration = Duration::from_secs(5);
/// Passes of a sweep: a killed orphan's own children become the bridge's in turn.
const SWEEP_PASSES: usize = 20;

/// The pid of the worker running now (0: none), which the reaper leaves to tokio.
#[derive(Clone, Debug, Default)]
pub struct Live(Arc<AtomicU32>);

impl Live {
    pub fn set(&self, pid: Option<u32>) {
        self.0.store(pid.unwrap_or(0), Ordering::Relaxed);
    }

    fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Makes orphans of the worker's tree the bridge's children (a no-op where Linux is not).
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with an integer argument changes only this process's own attribute.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Reaps the bridge's exited children but the live worker, every [`REAP_EVERY`], until dropped.
pub async fn reaper(live: Live) {
    let mut every = tokio::time::interval(REAP_EVERY);
    loop {
        every.tick().await;
        let live = live.get();
        for child in children() {
            if child.pid != live && child.exited {
                wait(child.pid);
            }
        }
    }
}

/// Kills and reaps every child of the bridge: called once a worker is gone, when its children,
/// however detached, are orphans the bridge inherited. Returns how many it ended.
pub async fn sweep() -> usize {
    let mut ended = 0;
    for _ in 0..SWEEP_PASSES {
        let found = children();
        if found.is_empty() {
            break;
        }
        for child in found {
            if !child.exited {
                signal_kill(child.pid);
                ended += 1;
            }
            wait(child.pid);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ended
}

struct Child {
    pid: u32,
    exited: bool,
}

/// The bridge's children, from `/proc` (none where there is no `/proc`).
fn children() -> Vec<Child> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (state, parent) = parse_stat(&stat)?;
            (parent == me).then_some(Child { pid, exited: state == 'Z' })
        })
        .collect()
}

/// The state and parent pid of a `/proc/<pid>/stat` line: `pid (comm) state ppid ...`, where comm
/// may hold spaces and parentheses, so the fields are read after its last `)`.
fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

fn signal_kill(pid: u32) {
    #[cfg(target_os = "linux")]
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: a signal to a child of this process, found in /proc just now.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

fn wait(pid: u32) {
    #[cfg(target_os = "linux")]
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        let mut status = 0;
        // SAFETY: waits without blocking for one child of this process; `status` is ours.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_line_is_read_after_the_commands_name_whatever_it_holds() {
        assert_eq!(parse_stat("42 (node) S 1 42 42 0"), Some(('S', 1)));
        assert_eq!(parse_stat("43 (a) b (c) Z 7 43"), Some(('Z', 7)));
        assert_eq!(parse_stat("44 (no end"), None);
    }
}
