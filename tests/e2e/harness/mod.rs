//! The end-to-end suite's harness: what the scenarios share. A scenario file holds its scenarios
//! and the steps only they take; what two scenario files use lives here, by concern.
//!
//! [`cluster`] is etcd and kube-apiserver with their parts (testcluster.rs, processes.rs,
//! proxy.rs), included by path alone by examples/cluster.rs; benches/cluster.rs includes the whole
//! harness.

pub mod binary;
pub mod cluster;
pub mod contracts;
pub mod differential;
pub mod helm;
pub mod install;
pub mod objects;
pub mod requests;
pub mod waits;
