//! `kubectl sandcap check` and `kubectl sandcap explain` against the real apiserver, with sandcap
//! installed with the chart's RBAC: a healthy install passes every check, and each failure is the
//! check that names it ([`check`]); `check` needs no more than the RBAC docs/contract.md lists, and
//! `explain` names an unlabelled Secret without its value ([`explain`]); how both run the command
//! and read what it says is [`commands`].

mod check;
mod commands;
mod explain;

pub use check::check_passes_and_names_each_failure;
pub use explain::explain_and_check_by_service_with_the_documented_rbac;
