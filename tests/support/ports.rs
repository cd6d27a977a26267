//! The ports of a process started on port 0. No harness picks a free port and lets a process bind
//! it later: another test's outbound connection may take the port in between. `sandcap run` says
//! what it bound in its `--listen-report` file, the reference worker on its first line of stdout.
//! Also included by examples/cluster.rs.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// What `sandcap run --listen-report` bound.
pub struct Listening {
    /// None with `--controllers-only`.
    pub webhook: Option<SocketAddr>,
    pub admin: SocketAddr,
}

/// Waits for `child`, a `sandcap run --listen-report report`, to bind its ports and report them.
pub fn listening(report: &Path, child: &mut Child) -> Result<Listening, String> {
    wait_for(child, &format!("sandcap's ports in {}", report.display()), || {
        // Renamed into place whole: any text read is the complete report.
        let text = std::fs::read_to_string(report).ok()?;
        let addr = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok());
        Some(Listening { webhook: addr("webhook"), admin: addr("admin")? })
    })
}

/// Polls `found` until it gives a value; an error if `child` exits first or 30 s pass (then it is
/// killed: a harness that fails to start a process leaves none behind).
pub fn wait_for<T>(child: &mut Child, what: &str, found: impl Fn() -> Option<T>) -> Result<T, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = found() {
            return Ok(value);
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("exited ({status}) before giving {what}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no {what} within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A loopback port nothing listens on, held so while the socket lives: bound, never listening, so
/// a connection to it is refused and no other process can take it meanwhile.
pub fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bound to a loopback port");
    let port = socket.local_addr().expect("a bound address").port();
    (socket, port)
}
