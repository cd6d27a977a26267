//! sandcap: admission webhook and operator for sandbox-provider plugin capabilities.
//!
//! The rules live in the pure core, the `sandcap-core` crate (core/), re-exported here under the
//! same names so that every shell and test reads `sandcap::contract` and the like. This crate
//! holds the shells that feed the core and write its answers somewhere: the webhook and admin
//! listeners, the controllers, the worker probe, certificates and the command line. The layers,
//! and which module may use which, are in docs/architecture.md.

pub use sandcap_core::{
    addresses, admission, api, config_schema, contract, decode, judge, schema, text, validation, versions, vocabulary,
};

pub mod admin;
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
