//! sandcap's pure core: the sandbox-provider contract and every rule of it, with no I/O.
//!
//! [`vocabulary`] holds the contract's words, [`api`] the resources (whose schema carries the
//! rules the apiserver enforces), [`contract`] capability and config resolution, [`schema`] the
//! apiserver's verdict on an object offline, [`validation`] the webhook's rules, [`judge`] both
//! layers' verdict, [`admission`] AdmissionReview bytes in and answer out, and [`addresses`] the
//! address policy for workers. This crate depends on no async runtime, HTTP stack or Kubernetes
//! client (`tests/purity.rs` checks it): the binary crate's shells read from the network, the
//! cluster or files and write the core's answers somewhere. The layers inside it, and which module
//! may use which, are in docs/architecture.md.

pub mod addresses;
pub mod admission;
pub mod api;
pub mod config_schema;
pub mod contract;
pub mod decode;
pub mod judge;
pub mod schema;
pub mod text;
pub mod validation;
pub mod versions;
pub mod vocabulary;
pub mod workloads;
