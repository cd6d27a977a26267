//! The review places: [`Limits::max_in_flight`](crate::listener::Limits) requests may hold a body
//! at once, one client address at most its share of them. A request first takes one of its
//! client's own places, then one of the pool: the pool's queue thus holds at most a share of each
//! client's requests, so a client with requests to spare (a flood of streams, trickled bodies)
//! waits behind itself and never ahead of another client.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(super) struct Places {
    pool: Arc<Semaphore>,
    share: usize,
    /// Each client's own places, while it holds or waits for one: the map is no larger than the
    /// requests open.
    clients: Mutex<HashMap<IpAddr, Arc<Semaphore>>>,
}

/// Why a request got no place in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// Its client held its whole share all along: a load of the client's own making.
    Share,
    /// The pool was full: the load of several clients.
    Pool,
}

/// A request's place; dropping it gives the place back.
pub(super) struct Place {
    permits: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
    client: IpAddr,
    places: Arc<Places>,
}

impl Drop for Place {
    fn drop(&mut self) {
        drop(self.permits.take());
        self.places.forget_if_unused(self.client);
    }
}

impl Places {
    /// `total` places, `share` of them at most for one client (at least 1, at most `total`).
    pub(super) fn new(total: usize, share: usize) -> Arc<Places> {
        Arc::new(Places {
            pool: Arc::new(Semaphore::new(total)),
            share: share.clamp(1, total.max(1)),
            clients: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, Arc<Semaphore>>> {
        // Nothing panics while holding the lock; a poisoned map is still consistent.
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a request of `client`, waiting up to `wait` for it.
    pub(super) async fn take(self: &Arc<Places>, client: IpAddr, wait: Duration) -> Result<Place, Full> {
        // One address, one client: `::ffff:10.0.0.1` is 10.0.0.1.
        let client = client.to_canonical();
        let own = Arc::clone(self.lock().entry(client).or_insert_with(|| Arc::new(Semaphore::new(self.share))));
        let mut full = Full::Share;
        let taking = async {
            // Neither semaphore is ever closed.
            let own = own.acquire_owned().await.ok()?;
            full = Full::Pool;
            let pool = Arc::clone(&self.pool).acquire_owned().await.ok()?;
            Some((own, pool))
        };
        let permits = tokio::time::timeout(wait, taking).await.ok().flatten();
        match permits {
            Some(permits) => Ok(Place { permits: Some(permits), client, places: Arc::clone(self) }),
            None => {
                self.forget_if_unused(client);
                Err(full)
            }
        }
    }

    /// Drops `client`'s entry once nobody holds or waits for one of its places (each holds a
    /// reference to its semaphore).
    fn forget_if_unused(&self, client: IpAddr) {
        let mut clients = self.lock();
        if clients.get(&client).is_some_and(|own| Arc::strong_count(own) == 1) {
            clients.remove(&client);
        }
    }

    /// Places free in the pool.
    pub(super) fn available(&self) -> usize {
        self.pool.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const NOW: Duration = Duration::from_millis(20);

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    #[tokio::test]
    async fn past_its_share_a_client_waits_for_its_own_places_only() {
        let places = Places::new(16, 4);
        let flood: Vec<Place> = futures::future::join_all((0..4).map(|_| places.take(ip(2), NOW)))
            .await
            .into_iter()
            .map(|place| place.expect("within its share"))
            .collect();
        assert_eq!(places.take(ip(2), NOW).await.err(), Some(Full::Share));
        assert_eq!(places.available(), 12, "a refused request takes no place");
        let honest = places.take(ip(3), NOW).await;
        assert!(honest.is_ok(), "another client gets one of the rest at once");
        drop(flood);
        assert_eq!(places.available(), 15);
    }

    #[tokio::test]
    async fn a_waiting_client_gets_its_own_place_back() {
        let places = Places::new(16, 1);
        let held = places.take(ip(2), NOW).await.unwrap();
        let waiting = tokio::spawn({
            let places = Arc::clone(&places);
            async move { places.take(ip(2), Duration::from_secs(5)).await.is_ok() }
        });
        tokio::time::sleep(NOW).await;
        drop(held);
        assert!(waiting.await.unwrap(), "the place given back goes to the client's waiting request");
    }

    #[tokio::test]
    async fn when_every_client_holds_its_share_the_pool_is_full() {
        let places = Places::new(4, 2);
        let _held = [
            places.take(ip(2), NOW).await.unwrap(),
            places.take(ip(2), NOW).await.unwrap(),
            places.take(ip(3), NOW).await.unwrap(),
            places.take(ip(3), NOW).await.unwrap(),
        ];
        assert_eq!(places.take(ip(4), NOW).await.err(), Some(Full::Pool));
    }

    #[tokio::test]
    async fn an_ipv4_mapped_address_shares_the_share() {
        let places = Places::new(16, 1);
        let _held = places.take(ip(2), NOW).await.unwrap();
        let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped());
        assert_eq!(places.take(mapped, NOW).await.err(), Some(Full::Share));
    }

    #[tokio::test]
    async fn a_client_is_forgotten_once_it_holds_and_waits_for_nothing() {
        let places = Places::new(16, 1);
        let held = places.take(ip(2), NOW).await.unwrap();
        assert!(places.take(ip(2), NOW).await.is_err());
        assert_eq!(places.lock().len(), 1, "still held");
        drop(held);
        assert!(places.lock().is_empty());
        let other = places.take(ip(3), NOW).await;
        assert!(other.is_ok());
        drop(other);
        assert!(places.lock().is_empty());
        assert_eq!(places.available(), 16);
    }

    #[test]
    fn the_share_is_at_least_one_and_at_most_all() {
        assert_eq!(Places::new(16, 0).share, 1);
        assert_eq!(Places::new(16, 64).share, 16);
    }
}
