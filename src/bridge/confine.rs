//! The box a plugin package's manifest module is evaluated in when `sandcap import` loads it on
//! an admin's machine: the module is someone else's code, run only to read the object it exports.
//!
//! - Node.js's permission model (`--permission`, `--experimental-permission` before Node 23.5;
//!   Node 20 or later): file reads only inside the package directory (so a bare import cannot
//!   resolve into a `node_modules` above it), no file writes, no child processes, no worker
//!   threads, no native addons or WASI where the running Node restricts them;
//! - a network namespace of its own (Linux: `unshare(CLONE_NEWNET)` as root, else with a user
//!   namespace), whose only interface, loopback, is down: no connection leaves it;
//! - a process group of its own, killed when the load ends; the package as working directory; an
//!   empty environment but `PATH`; a heap of at most [`HEAP_MB`] MiB and the loader's time budget.
//!
//! Where the box cannot be had (another platform, an older Node, no namespace allowed), the load
//! fails closed: nothing of the package is evaluated.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The V8 heap the manifest module may use; a manifest is a few kilobytes of JSON.
pub const HEAP_MB: u32 = 128;

/// Whether the manifest module runs in the box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// In the box: `sandcap import`, on the admin's machine.
    Boxed,
    /// As the worker runs: `sandcap bridge`, in the pod that runs the plugin's worker anyway.
    AsTheWorker,
}

/// Why the box cannot be had: the module is not evaluated.
#[derive(Debug, thiserror::Error)]
#[error(
    "the manifest module is not evaluated: {0}; import the plugin's manifest as JSON instead (a file, or - for stdin)"
)]
pub struct Unconfinable(String);

impl Unconfinable {
    /// Spawning failed where the box's network namespace is made.
    pub fn no_namespace(error: &std::io::Error) -> Unconfinable {
        Unconfinable(format!(
            "no network namespace could be made for it ({error}); run as root or where user namespaces are allowed"
        ))
    }
}

/// The node options that put the module in the box, for the `node` that will run it.
pub async fn node_options(node: &Path, dir: &Path) -> Result<Vec<String>, Unconfinable> {
    if !cfg!(target_os = "linux") {
        return Err(Unconfinable("only Linux gives it a network namespace of its own".into()));
    }
    let flag = permission_flag(&node_version(node).await?)?;
    let dir = std::fs::canonicalize(dir).map_err(|e| Unconfinable(format!("{}: {e}", dir.display())))?;
    Ok(vec![flag.into(), format!("--allow-fs-read={}", dir.display()), format!("--max-old-space-size={HEAP_MB}")])
}

/// The permission model's flag for Node `version` (`vMAJOR.MINOR.PATCH`).
fn permission_flag(version: &str) -> Result<&'static str, Unconfinable> {
    let mut parts = version.trim().trim_start_matches('v').split('.').map(|p| p.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) else {
        return Err(Unconfinable(format!("node answered {version:?} for its version")));
    };
    match (major, minor) {
        (..20, _) => Err(Unconfinable(format!("Node {version} has no permission model (Node 20 or later has)"))),
        (20..23, _) | (23, ..5) => Ok("--experimental-permission"),
        _ => Ok("--permission"),
    }
}

async fn node_version(node: &Path) -> Result<String, Unconfinable> {
    let mut command = tokio::process::Command::new(node);
    command.arg("--version").env_clear().stdin(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(10), command.output())
        .await
        .map_err(|_| Unconfinable(format!("{} --version did not answer", node.display())))?
        .map_err(|e| Unconfinable(format!("cannot run {}: {e}", node.display())))?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Puts the process `command` will start in a process group and a network namespace of its own,
/// in the package's directory. Spawning fails (with the system's error) where no namespace can
/// be made.
pub fn isolate(command: &mut tokio::process::Command, dir: &Path) {
    command.current_dir(dir).process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: unshare is async-signal-safe and changes only the child's own namespaces.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNET) == 0 || libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0 {
                return Ok(());
            }
            Err(std::io::Error::last_os_error())
        });
    }
}

/// Kills the process group [`isolate`] made, whatever the module left running in it.
pub fn kill_group(pid: Option<u32>) {
    #[cfg(target_os = "linux")]
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: a signal to the loader's own process group (its pid, from process_group(0)).
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pid;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_permission_flag_follows_the_node_release_and_older_nodes_are_refused() {
        assert_eq!(permission_flag("v20.20.2\n").unwrap(), "--experimental-permission");
        assert_eq!(permission_flag("v22.14.0").unwrap(), "--experimental-permission");
        assert_eq!(permission_flag("v23.4.0").unwrap(), "--experimental-permission");
        assert_eq!(permission_flag("v23.5.0").unwrap(), "--permission");
        assert_eq!(permission_flag("v24.11.1").unwrap(), "--permission");
        for refused in ["v18.20.4", "", "banana"] {
            assert!(permission_flag(refused).is_err(), "{refused}");
        }
    }
}
