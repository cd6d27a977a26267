//! What sandcap asked the apiserver for, by the cluster's audit log (every request of a
//! ServiceAccount is audited: see [`crate::harness::cluster::Cluster::audit`]).

use crate::harness::cluster::Cluster;

/// The status patches sandcap made to the objects named `names`, by the apiserver's audit log.
pub fn status_patches(c: &Cluster, names: &[&str]) -> usize {
    c.audit()
        .iter()
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["subresource"] == "status"
                && names.iter().any(|n| e["objectRef"]["name"] == *n)
                && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
        })
        .count()
}
