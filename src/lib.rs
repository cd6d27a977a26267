//! sandcap: admission webhook and operator for sandbox-provider plugin capabilities.
//!
//! The pure core is [`contract`] (capability resolution) and [`validation`] (admission rules);
//! everything else is a thin shell that feeds them and writes their answers somewhere.

pub mod admission;
pub mod api;
pub mod certs;
pub mod cli;
pub mod contract;
pub mod controller;
pub mod metrics;
pub mod probe;
pub mod server;
pub mod tls;
pub mod validation;
