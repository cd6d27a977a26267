//! The clusters' child processes: started so that they die with the test process however it ends,
//! their output appended to a log, and stopped by signal.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Spawns `command` with stdout and stderr appended to `log`. Every child is started by one
/// thread that never ends, with `PR_SET_PDEATHSIG` (which fires when the *spawning thread* dies):
/// so children die exactly when the test process does, however it ends.
pub fn spawn_logged(command: Command, log: &Path) -> Child {
    type Job = (Command, PathBuf, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for (mut command, log, reply) in rx {
                let _ = reply.send(spawn_here(&mut command, &log));
            }
        });
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    let program = command.get_program().to_string_lossy().into_owned();
    spawner.lock().unwrap().send((command, log.to_path_buf(), reply)).expect("spawner thread");
    answer.recv().expect("spawner answers").unwrap_or_else(|e| panic!("cannot start {program}: {e}"))
}

fn spawn_here(command: &mut Command, log: &Path) -> std::io::Result<Child> {
    let out = fs::OpenOptions::new().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.stdin(Stdio::null()).stdout(out).stderr(err).spawn()
}

pub fn stop(child: &mut Child) {
    // SIGTERM first: etcd and the apiserver flush and exit in well under a second.
    stop_with(child, libc::SIGTERM);
}

/// Sends `signal`, then SIGKILL if the process has not exited 10 s later.
pub fn stop_with(child: &mut Child, signal: i32) {
    unsafe { libc::kill(child.id() as i32, signal) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of a log, for a failure message.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
