//! What each watch event does, one handler per watch: what `changes.rs` (the lease table, for
//! leases) finds an event changed goes to the controllers' queues and, of a deleted provider, to
//! `forget` (what is known of it; the lease table forgets a deleted lease itself). A handler is driven by its watch's task alone, so it
//! owns its change detection.
//!
//! Before a watch's first list has completed no related lease is triggered: every lease is then
//! being listed too, and its own watch triggers it.

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher::Event;

use super::changes::{Change, ProviderView, Seen, provider_view, secret_view};
use super::leases::{Leases, Writer};
use super::{LeaseKey, Queue};
use crate::controller::cached::CachedLease;
use sandcap_core::api::SandboxProvider;

/// Provider events: a provider's own spec changes, and the leases that read a changed provider.
pub(super) struct ProviderEvents<F> {
    seen: Seen<SandboxProvider, ProviderView>,
    own: Queue<SandboxProvider>,
    related: Queue<CachedLease>,
    leases: Leases,
    forget: F,
}

impl<F: Fn(&str, &str)> ProviderEvents<F> {
    pub(super) fn new(own: Queue<SandboxProvider>, related: Queue<CachedLease>, leases: Leases, forget: F) -> Self {
        ProviderEvents { seen: Seen::new(provider_view), own, related, leases, forget }
    }

    pub(super) fn handle(&mut self, event: Event<SandboxProvider>) {
        let listed = self.seen.listed();
        for change in self.seen.observe(event) {
            let (before, after) = (change.before, change.after);
            match after {
                // A deleted object is forgotten, not triggered: its trigger would stay counted as waiting.
                None => {
                    if let Some(uid) = change.key.extra.uid.as_deref() {
                        (self.forget)(uid, &change.key.name);
                    }
                }
                Some(after) if before.map(|b| b.generation) != Some(after.generation) => {
                    self.own.send_own(change.key.clone());
                }
                Some(_) => {}
            }
            if listed && before.map(|b| b.lease_view) != after.map(|a| a.lease_view) {
                self.leases.of_provider(&change.key.name).into_iter().for_each(|l| self.related.send(l));
            }
        }
    }
}

/// Lease events: the lease table, and each lease's own spec changes.
pub(super) struct LeaseEvents<J> {
    table: Writer,
    own: Queue<CachedLease>,
    judge_early: J,
}

impl<J: Fn(&LeaseKey)> LeaseEvents<J> {
    /// `judge_early` is handed each new generation a live event brings, before its reconcile is
    /// queued; a listing's are not (at a start, that is every lease at once).
    pub(super) fn new(own: Queue<CachedLease>, table: Writer, judge_early: J) -> Self {
        LeaseEvents { table, own, judge_early }
    }

    pub(super) fn handle(&mut self, event: Event<CachedLease>) {
        let live = matches!(event, Event::Apply(_));
        let triggered = self.table.apply(event);
        if live {
            triggered.iter().for_each(|key| (self.judge_early)(key));
        }
        triggered.into_iter().for_each(|l| self.own.send_own(l));
    }
}

/// The events of one Secret watch: the leases that read a changed Secret (its data changed, or it
/// was deleted, or lost its label, which the watch's selector shows as a deletion).
pub(super) struct SecretEvents {
    content: Seen<Secret, u64>,
    related: Queue<CachedLease>,
    leases: Leases,
}

impl SecretEvents {
    pub(super) fn new(related: Queue<CachedLease>, leases: Leases) -> Self {
        SecretEvents { content: Seen::new(secret_view), related, leases }
    }

    pub(super) fn handle(&mut self, event: Event<Secret>) {
        let listed = self.content.listed();
        let changed = self.content.observe(event);
        if listed {
            for Change { key: secret, .. } in changed {
                let namespace = secret.namespace.as_deref().unwrap_or_default();
                let leases = self.leases.of_secret(namespace, &secret.name);
                leases.into_iter().for_each(|l| self.related.send(l));
            }
        }
    }
}

#[cfg(test)]
mod tests;
