//! Self-managed certificates against the real apiserver, with the chart's RBAC: the certificate
//! keeper's whole life ([`self_managed`]) and the policy that lets sandcap change only the caBundle
//! ([`ca_bundle`]); what both set up and read is [`keeper`].

mod ca_bundle;
mod keeper;
mod self_managed;

pub use ca_bundle::only_the_ca_bundle_is_sandcaps_to_change;
pub use self_managed::self_managed_certificates_with_the_charts_rbac;
