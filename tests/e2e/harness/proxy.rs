//! The HTTP CONNECT proxy through which the test clusters' apiservers reach webhooks: it stands in
//! for cluster networking (Services, kube-proxy, endpoint propagation) on loopback.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The HTTP CONNECT proxy the apiserver dials webhooks through. `CONNECT host:port` goes to one of
/// the backends of a Service set with [`Proxy::route`] and [`Proxy::add_backend`] (a Service's
/// address -> loopback ports, taken in turn, one per connection, as kube-proxy picks an endpoint
/// per connection), or else to `host:port` itself when that is a loopback address; anything else
/// is refused, so no traffic ever leaves the machine. A removed backend keeps its open tunnels, as
/// conntrack keeps a deleted pod's connections.
pub struct Proxy {
    table: Table,
}

/// The routes and what became of the connections, shared by the proxy's connections.
#[derive(Clone, Default)]
struct Table {
    /// `host:port` -> its backends.
    routes: Arc<Mutex<HashMap<String, Service>>>,
    /// Connections sent to a backend that did not accept them (a closed port).
    unreachable: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Service {
    backends: Vec<Backend>,
    /// Round robin: the index of the next connection.
    next: usize,
}

struct Backend {
    port: u16,
    /// When new connections stop going here: a removal as endpoint propagation delivers it, late.
    until: Option<Instant>,
}

impl Service {
    fn pick(&mut self) -> Option<u16> {
        let now = Instant::now();
        self.backends.retain(|b| b.until.is_none_or(|until| now < until));
        let port = self.backends.get(self.next % self.backends.len().max(1))?.port;
        self.next = self.next.wrapping_add(1);
        Some(port)
    }
}

impl Table {
    /// A connection to `target` as routed; else the status line to answer the CONNECT with.
    async fn connect(&self, target: &str) -> Result<tokio::net::TcpStream, &'static [u8]> {
        let routed = self.routes.lock().unwrap().get_mut(target).and_then(Service::pick);
        let address = match routed {
            Some(port) => format!("127.0.0.1:{port}"),
            None if target.starts_with("127.0.0.1:") || target.starts_with("localhost:") => target.to_string(),
            None => return Err(b"HTTP/1.1 403 Forbidden\r\n\r\n"),
        };
        tokio::net::TcpStream::connect(&address).await.map_err(|_| {
            self.unreachable.fetch_add(1, Ordering::Relaxed);
            &b"HTTP/1.1 502 Bad Gateway\r\n\r\n"[..]
        })
    }
}

impl Proxy {
    pub fn start(socket: &Path) -> Proxy {
        let listener = std::os::unix::net::UnixListener::bind(socket).expect("proxy socket");
        listener.set_nonblocking(true).expect("nonblocking");
        let table = Table::default();
        let shared = table.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).expect("tokio listener");
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(tunnel(client, shared.clone()));
                }
            });
        });
        Proxy { table }
    }

    /// Sends connections for `host_port` (a Service's `ClusterIP:port`, as the apiserver dials it)
    /// to this loopback port alone.
    pub fn route(&self, host_port: &str, to: u16) {
        let service = Service { backends: vec![Backend { port: to, until: None }], next: 0 };
        self.table.routes.lock().unwrap().insert(host_port.to_string(), service);
    }

    /// Forgets `host_port`'s backends (a Service deleted, or about to be re-created).
    pub fn unroute(&self, host_port: &str) {
        self.table.routes.lock().unwrap().remove(host_port);
    }

    /// Adds a backend to `host_port`'s, as a pod that turns ready joins its Service's endpoints.
    pub fn add_backend(&self, host_port: &str, to: u16) {
        let mut routes = self.table.routes.lock().unwrap();
        routes.entry(host_port.to_string()).or_default().backends.push(Backend { port: to, until: None });
    }

    /// New connections to `host_port` stop going to `to` after `lag`, as a deleted pod's removal
    /// from its Service reaches the apiserver and the nodes seconds after the deletion.
    pub fn remove_backend(&self, host_port: &str, to: u16, lag: Duration) {
        let until = Instant::now() + lag;
        let mut routes = self.table.routes.lock().unwrap();
        for backend in routes.get_mut(host_port).into_iter().flat_map(|s| &mut s.backends).filter(|b| b.port == to) {
            backend.until = Some(until);
        }
    }

    /// Opens (and closes) one connection to `host_port` as routed, as any client of the Service
    /// would: whether a backend accepted it.
    pub async fn dial(&self, host_port: &str) -> bool {
        self.table.connect(host_port).await.is_ok()
    }

    /// Connections so far that went to a backend that no longer accepted them.
    pub fn unreachable(&self) -> usize {
        self.table.unreachable.load(Ordering::Relaxed)
    }
}

async fn tunnel(mut client: tokio::net::UnixStream, table: Table) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        if client.read_exact(&mut byte).await.is_err() {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let target = head.strip_prefix("CONNECT ").and_then(|rest| rest.split_whitespace().next()).unwrap_or_default();
    match table.connect(target).await {
        Ok(mut upstream) => {
            if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        }
        Err(answer) => {
            let _ = client.write_all(answer).await;
        }
    }
}
