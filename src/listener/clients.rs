//! Who holds a port's connections. Every new connection is accepted and admitted here: past its
//! client's share, or at the port's cap, the longest-idle connection of the client holding the
//! most is closed to make room, so that a newcomer (the kubelet's probe, the apiserver) always gets
//! in while some connection is idle. Only when every connection in the way has a request open is
//! the newcomer refused, which its client sees at once rather than waiting in a backlog.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::activity::Activity;

/// How often at most the port logs that its limits closed or refused connections.
const REPORT_EVERY: Duration = Duration::from_secs(60);

pub(super) struct Clients {
    cap: usize,
    share: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    open: HashMap<u64, Entry>,
    held: HashMap<IpAddr, usize>,
    report: Report,
}

struct Entry {
    client: IpAddr,
    activity: Activity,
    close: CancellationToken,
}

/// What the limits did since the last log line.
#[derive(Default)]
struct Report {
    last: Option<Instant>,
    evicted: u64,
    refused: u64,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refused {
    #[error("its client holds its share of connections, each with a request open")]
    ClientShare,
    #[error("the port holds its cap of connections, each with a request open")]
    PortCap,
}

/// An admitted connection's place; dropping it gives the place back.
pub(super) struct Ticket {
    clients: Arc<Clients>,
    id: u64,
    close: CancellationToken,
}

impl Ticket {
    /// Resolves when the connection is closed to make room for another.
    pub(super) async fn evicted(&self) {
        self.close.cancelled().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.clients.lock().remove(self.id);
    }
}

impl Clients {
    /// `cap` connections on the port, `share` of them at most from one client address.
    pub(super) fn new(cap: usize, share: usize) -> Arc<Clients> {
        Arc::new(Clients { cap: cap.max(1), share: share.clamp(1, cap.max(1)), inner: Mutex::default() })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock; a poisoned map is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn admit(self: &Arc<Clients>, client: IpAddr, activity: Activity) -> Result<Ticket, Refused> {
        // One address, one client: `::ffff:10.0.0.1` is 10.0.0.1.
        let client = client.to_canonical();
        let mut inner = self.lock();
        let victim = if inner.held.get(&client).copied().unwrap_or(0) >= self.share {
            Some(inner.longest_idle(|entry| entry.client == client, |_| 0).ok_or(Refused::ClientShare))
        } else if inner.open.len() >= self.cap {
            Some(inner.longest_idle(|_| true, |held| held).ok_or(Refused::PortCap))
        } else {
            None
        };
        match victim {
            Some(Ok(victim)) => {
                if let Some(entry) = inner.remove(victim) {
                    entry.close.cancel();
                }
                inner.report.evicted += 1;
            }
            Some(Err(refused)) => {
                inner.report.refused += 1;
                inner.report_now();
                return Err(refused);
            }
            None => {}
        }
        inner.report_now();
        let id = inner.next;
        inner.next += 1;
        let close = CancellationToken::new();
        inner.open.insert(id, Entry { client, activity, close: close.clone() });
        *inner.held.entry(client).or_default() += 1;
        Ok(Ticket { clients: Arc::clone(self), id, close })
    }

    #[cfg(test)]
    fn held(&self, client: IpAddr) -> usize {
        self.lock().held.get(&client).copied().unwrap_or(0)
    }
}

impl Inner {
    /// Among the connections `eligible` admits that have no request open, the one whose client
    /// ranks highest by `rank` (of the connections it holds), then the longest idle.
    fn longest_idle(&self, eligible: impl Fn(&Entry) -> bool, rank: impl Fn(usize) -> usize) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, entry)| eligible(entry))
            .filter_map(|(id, entry)| Some((*id, entry.activity.idle_since()?, self.held[&entry.client])))
            .min_by_key(|&(id, since, held)| (std::cmp::Reverse(rank(held)), since, id))
            .map(|(id, ..)| id)
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(held) = self.held.get_mut(&entry.client) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(&entry.client);
            }
        }
        Some(entry)
    }

    /// Logs what the limits did, at most once every [`REPORT_EVERY`], so that a flood is visible
    /// without a flood of lines.
    fn report_now(&mut self) {
        let report = &mut self.report;
        if report.evicted + report.refused == 0 || report.last.is_some_and(|at| at.elapsed() < REPORT_EVERY) {
            return;
        }
        let busiest = self.held.iter().max_by_key(|&(_, held)| *held).map(|(ip, held)| (*ip, *held));
        tracing::warn!(
            evicted = report.evicted,
            refused = report.refused,
            open = self.open.len(),
            busiest = ?busiest,
            "connection limits reached: idle connections of the busiest clients closed, or newcomers refused while every connection in the way had a request open",
        );
        *report = Report { last: Some(Instant::now()), ..Report::default() };
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    fn admit(clients: &Arc<Clients>, client: IpAddr) -> (Result<Ticket, Refused>, Activity) {
        let activity = Activity::new();
        (clients.admit(client, activity.clone()), activity)
    }

    #[test]
    fn past_its_share_a_client_loses_its_longest_idle_connection() {
        let clients = Clients::new(10, 2);
        let (oldest, _) = admit(&clients, ip(2));
        let (newer, _) = admit(&clients, ip(2));
        std::thread::sleep(Duration::from_millis(2));
        let (third, _) = admit(&clients, ip(2));
        let (oldest, newer, third) = (oldest.unwrap(), newer.unwrap(), third.unwrap());
        assert!(oldest.close.is_cancelled(), "the longest idle is closed");
        assert!(!newer.close.is_cancelled() && !third.close.is_cancelled());
        assert_eq!(clients.held(ip(2)), 2);
        drop(oldest);
        assert_eq!(clients.held(ip(2)), 2, "an evicted ticket gave its place back already");
    }

    #[test]
    fn a_client_whose_connections_are_all_busy_is_refused_past_its_share() {
        let clients = Clients::new(10, 1);
        let (held, activity) = admit(&clients, ip(2));
        let _busy = activity.begin(false);
        assert_eq!(admit(&clients, ip(2)).0.err(), Some(Refused::ClientShare));
        assert!(!held.unwrap().close.is_cancelled());
        assert!(admit(&clients, ip(3)).0.is_ok(), "another client still gets in");
    }

    #[test]
    fn at_the_cap_the_client_holding_most_gives_way() {
        let clients = Clients::new(4, 3);
        let (kubelet, _) = admit(&clients, ip(9));
        let flood: Vec<_> = (0..3).map(|_| admit(&clients, ip(2)).0.unwrap()).collect();
        let (newcomer, _) = admit(&clients, ip(3));
        assert!(newcomer.is_ok());
        assert!(!kubelet.unwrap().close.is_cancelled(), "the oldest connection, but its client holds one");
        assert_eq!(flood.iter().filter(|t| t.close.is_cancelled()).count(), 1);
        assert_eq!(clients.held(ip(2)), 2);
    }

    #[test]
    fn at_the_cap_with_every_connection_busy_a_newcomer_is_refused() {
        let clients = Clients::new(2, 2);
        let held: Vec<_> = (0..2).map(|_| admit(&clients, ip(2))).collect();
        let _busy: Vec<_> = held.iter().map(|(_, activity)| activity.begin(false)).collect();
        assert_eq!(admit(&clients, ip(3)).0.err(), Some(Refused::PortCap));
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_same_client() {
        let clients = Clients::new(10, 1);
        let (first, _) = admit(&clients, ip(2));
        let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped());
        assert!(admit(&clients, mapped).0.is_ok());
        assert!(first.unwrap().close.is_cancelled());
    }
}
