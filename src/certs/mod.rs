//! Self-managed webhook certificates (`sandcap run --self-managed-certs`): sandcap keeps its own CA
//! and serving certificate in one Secret shared by every replica, renews them long before they
//! expire and keeps the `caBundle` of its ValidatingWebhookConfiguration in sync, so the chart
//! carries no key material (identical renders, no GitOps drift) and the webhook never lapses.
//!
//! The pure core decides ([`rotation::decide`]) and produces the next Secret contents ([`carry_out`]); the
//! thin shell ([`reconcile`], [`run_self_managed`]) reads the Secret and the webhook configuration,
//! and writes with resourceVersion preconditions, so any number of replicas can run it at once:
//! a replica that loses a race gets a conflict, re-reads, and finds the winner's work.
//!
//! Lifecycle, with the apiserver trusting the published bundle at every step:
//! 1. no Secret: create a CA and a serving certificate; publish the CA;
//! 2. serving certificate in its last third: issue a new one from the same CA (bundle unchanged);
//! 3. CA in its last third: create the next CA and publish it next to the current one;
//! 4. once the next CA has been in every webhook's caBundle for [`CA_PUBLISH_GRACE`]: it signs a new
//!    serving certificate and becomes the CA; the old CA stays in the bundle (retired) because
//!    pods keep serving the old certificate until the kubelet refreshes the mounted Secret;
//! 5. [`CA_RETIRE_GRACE`] after that switch the retired CA leaves the bundle.

mod keeper;
mod material;
mod rotation;

pub use keeper::{BundleSync, CertOptions, Reconciled, RotationError, reconcile, run_self_managed};
pub use material::*;
pub use rotation::{Rotation, carry_out};
