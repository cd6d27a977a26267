//! The signals that stop `sandcap run`: SIGTERM (the kubelet) and SIGINT (a terminal) on Unix;
//! elsewhere Ctrl-C, read as SIGINT. `sandcap run` is for Linux pods, but the binary is also the
//! kubectl plugin, which builds for macOS and Windows too.

use std::io;

pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal's name, `SIGTERM` or `SIGINT`.
    pub async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => "SIGINT",
                // No way to be told: wait for the process to be killed.
                Err(_) => std::future::pending().await,
            }
        }
    }
}
