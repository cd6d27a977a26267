//! The probe's resolver: looks a worker's host name up and keeps only the addresses the address
//! policy ([`sandcap_core::addresses`]) lets a worker reach.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use sandcap_core::addresses::{AddressClass, AllowedCidrs};

/// Resolves host names for the probe and keeps only the addresses worker URLs may reach, so the
/// check holds for the address actually connected to, whatever the name (one that rebinds
/// between checks included). A Service's name is resolved the same way: a ClusterIP, which no
/// class holds, or, for an ExternalName Service, whatever its external name leads to.
pub(super) struct GuardedResolver {
    pub(super) allowed: AllowedCidrs,
    pub(super) lookup: Lookup,
}

impl std::fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedResolver").field("allowed", &self.allowed).finish_non_exhaustive()
    }
}

/// Looks a host name up: the system's resolver ([`system_lookup`]), or a table in tests.
pub(super) type Lookup =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send>> + Send + Sync>;

pub(super) fn system_lookup() -> Lookup {
    Arc::new(|name| Box::pin(async move { Ok(tokio::net::lookup_host((name.as_str(), 0)).await?.collect()) }))
}

/// Why [`GuardedResolver`] gave no address; found again in the request error's causes.
#[derive(Debug, thiserror::Error)]
pub(super) enum ResolveError {
    #[error("the name does not resolve")]
    Lookup,
    #[error("the name resolves only to {0} addresses")]
    Refused(AddressClass),
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allowed = self.allowed.clone();
        let found = (self.lookup)(name.as_str().to_string());
        Box::pin(async move {
            let found = found.await.map_err(|_| ResolveError::Lookup)?;
            let mut refused = None;
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|addr| match allowed.refuses(addr.ip()) {
                    Some(class) => {
                        refused.get_or_insert(class);
                        false
                    }
                    None => true,
                })
                .collect();
            match refused {
                Some(class) if kept.is_empty() => Err(ResolveError::Refused(class).into()),
                _ if kept.is_empty() => Err(ResolveError::Lookup.into()),
                _ => Ok(Box::new(kept.into_iter()) as Addrs),
            }
        })
    }
}
