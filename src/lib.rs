//! sandcap: admission webhook and operator for sandbox-provider plugin capabilities.
//!
//! The pure core is [`vocabulary`] (the contract's words), [`api`] (the resources, whose schema
//! carries the rules the apiserver enforces), [`contract`] (capability resolution), [`schema`]
//! (the apiserver's verdict on an object, offline), [`validation`] (the webhook's rules) and
//! [`judge`] (both layers' verdict, for `sandcap validate` and the controllers' audit);
//! everything else is a thin shell that feeds them and writes their answers somewhere. The layers,
//! and which module may use which, are in docs/architecture.md.

pub mod admin;
pub mod admission;
pub mod api;
pub mod certs;
pub mod cli;
pub mod config_schema;
pub mod contract;
pub mod controller;
pub mod decode;
pub mod judge;
pub mod listener;
pub mod metrics;
pub mod probe;
pub mod run;
pub mod schema;
pub mod telemetry;
pub mod text;
pub mod tls;
pub mod validation;
pub mod vocabulary;
pub mod webhook;
