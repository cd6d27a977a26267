//! sandcap: admission webhook and operator for sandbox-provider plugin capabilities.
//!
//! The rules live in the pure core, the `sandcap-core` crate (core/), which this crate's code
//! imports as `sandcap_core::...`, so that an import says which side of the core line it is on.
//! This crate holds the shells that feed the core and write its answers somewhere: the webhook and
//! admin listeners, the controllers, the worker probe, the bridge to SDK workers, certificates and the command line. The
//! layers, and which module may use which, are in docs/architecture.md.

pub mod admin;
pub mod bridge;
pub mod certs;
pub mod cli;
pub mod controller;
pub mod listener;
pub mod metrics;
pub mod probe;
pub mod run;
pub mod telemetry;
pub mod tls;
pub mod webhook;
