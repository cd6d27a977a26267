//! The gate order, walked in one place: for one key, every gate the contract applies to it, in
//! the order docs/contract.md ("Status") lists the reasons, each with the reason and message it
//! removes the key with. The resolution reads the first gate that removes a key; `sandcap
//! explain` shows them all.

use super::resolution::{Declared, MAX_REFUSAL_IN_EXPLANATION, Narrowing};
use super::verified::Verified;
use crate::text;
use crate::versions::{KeyRule, NarrowedBy, SYNC_PAIR};
use crate::vocabulary::{Gate, LeasePolicy, Reason, WorkerMethod};

/// One gate's verdict on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateVerdict {
    pub gate: Gate,
    /// What the gate removes the key with; `None` when it lets the key through.
    pub removal: Option<Removal>,
}

/// The reason and message status gives a key when this gate is the first to remove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    pub reason: Reason,
    pub message: String,
}

impl Removal {
    fn new(reason: Reason, message: String) -> Removal {
        Removal { reason, message }
    }
}

/// The gates before the lease's own narrowings, in the contract's order.
const BEFORE_NARROWINGS: [Gate; 5] =
    [Gate::LeaseValid, Gate::Identity, Gate::ProviderValid, Gate::Worker, Gate::Declaration];

/// Every gate of `rule`: the fixed ones, then the narrowings its rule lists. Lazy, so that the
/// resolution words no gate past the first that removes the key.
pub fn gates<'a>(
    rule: &'a KeyRule,
    verified: &'a Verified,
    declared: &'a Declared,
    narrowing: &'a Narrowing,
) -> impl Iterator<Item = GateVerdict> + 'a {
    let narrowings = NarrowedBy::ALL.into_iter().filter(|n| rule.narrowed_by(*n)).map(NarrowedBy::gate);
    BEFORE_NARROWINGS
        .into_iter()
        .chain(narrowings)
        .map(|gate| GateVerdict { gate, removal: removal(gate, rule, verified, declared, narrowing) })
}

fn removal(
    gate: Gate,
    rule: &KeyRule,
    verified: &Verified,
    declared: &Declared,
    narrowing: &Narrowing,
) -> Option<Removal> {
    let narrowed = |by: NarrowedBy| narrowing.removes(by).map(|message| Removal::new(by.reason(), message));
    let cap = rule.capability;
    match gate {
        Gate::LeaseValid => {
            narrowing.refusals.lease.as_deref().map(|p| Removal::new(Reason::LeaseNotValid, refused("the lease", p)))
        }
        Gate::Identity => {
            narrowing.identity_failure.as_ref().map(|why| Removal::new(Reason::PluginIdentityFailed, why.to_string()))
        }
        Gate::ProviderValid => narrowing
            .refusals
            .provider
            .as_deref()
            .map(|p| Removal::new(Reason::ProviderNotValid, refused("the provider", p))),
        Gate::Worker => worker(rule, verified),
        Gate::Declaration => match declared.get(cap) {
            Some(false) => Some(Removal::new(Reason::DeclaredFalse, format!("the driver declares {cap}: false"))),
            None if rule.opt_in => Some(Removal::new(
                Reason::NotOptedIn,
                format!("{cap} is opt-in and the driver does not declare it true"),
            )),
            _ => None,
        },
        Gate::Policy => narrowed(NarrowedBy::LeasePolicy),
        Gate::JobBackend => narrowed(NarrowedBy::JobBackend),
        Gate::NativeFileSync => narrowed(NarrowedBy::NativeFileSyncUnsupported),
        Gate::Config => narrowed(NarrowedBy::ConfigResolution),
    }
}

fn worker(rule: &KeyRule, verified: &Verified) -> Option<Removal> {
    if let Some(why) = verified.why_nothing() {
        return Some(Removal::new(Reason::WorkerNotVerified, why.to_string()));
    }
    let missing: Vec<WorkerMethod> = rule.methods.iter().copied().filter(|m| !verified.has(m.as_str())).collect();
    let message = match (rule.methods, missing.as_slice()) {
        (_, []) => return None,
        ([a, b], [absent]) if rule.methods == SYNC_PAIR => {
            let present = if absent == a { b } else { a };
            format!("the worker advertises {present} but not {absent}; the host uses the sync methods only as a pair")
        }
        _ => format!("the worker does not advertise {}", WorkerMethod::list(&missing)),
    };
    Some(Removal::new(Reason::MissingWorkerMethods, message))
}

impl Narrowing {
    /// The message of the explanation when this lease's `narrowed_by` applies; `None` when it
    /// does not.
    fn removes(&self, narrowed_by: NarrowedBy) -> Option<String> {
        match narrowed_by {
            NarrowedBy::LeasePolicy => self
                .policy
                .filter(|p| *p != LeasePolicy::ReuseByEnvironment)
                .map(|p| format!("the lease policy is {}, not ReuseByEnvironment", p.as_str())),
            NarrowedBy::JobBackend => self.job_backend.as_ref().map(ToString::to_string),
            NarrowedBy::NativeFileSyncUnsupported => {
                self.native_file_sync_unsupported.then(|| "the lease sets nativeFileSyncUnsupported: true".into())
            }
            NarrowedBy::ConfigResolution => self.config_failure.as_ref().map(ToString::to_string),
        }
    }
}

/// The explanation of a refusal: whose, and its first problems.
fn refused(whose: &str, problems: &str) -> String {
    let message = format!("{whose} breaks today's rules, so nothing is granted (see its Valid condition): {problems}");
    text::clip(&message, MAX_REFUSAL_IN_EXPLANATION)
}
