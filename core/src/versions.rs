//! The contract versions as data (docs/contract.md, "Contract versions"): per version its
//! capability keys, which of them are opt-in, the worker methods each needs, the narrowings that
//! remove each, and the keys it refuses. Everything that depends on the keys derives from these
//! tables: the CRDs' schema, CEL rules and printer columns ([`crate::api`]), the webhook's hints
//! ([`crate::validation`]), resolution ([`crate::contract`]), status and `explain`, and the tables
//! of docs/contract.md (a test compares them).
//!
//! The host applies one contract per installation, so a cluster chooses one version (`--contract`,
//! the chart's `contract.version`); `v1` stays the default.

use crate::vocabulary::{Capability, Gate, Reason, WorkerMethod, words};

words! {
    /// A version of the capability contract.
    #[derive(Default)]
    pub enum ContractVersion (as_str, parse) {
        /// The six keys.
        #[default]
        V1 = "v1",
        /// The host's contract since 2026-09-01: the six and three more.
        V2 = "v2",
    }
}

/// Something about a lease that removes a capability however the worker and the declaration stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NarrowedBy {
    /// The lease asks for another policy than `ReuseByEnvironment`.
    LeasePolicy,
    /// The lease runs on a Job backend.
    JobBackend,
    /// The lease sets `nativeFileSyncUnsupported: true`.
    NativeFileSyncUnsupported,
    /// The lease's config failed to resolve.
    ConfigResolution,
}

impl NarrowedBy {
    /// In the order the gates apply them (docs/contract.md, "Status").
    pub const ALL: [NarrowedBy; 4] = [
        NarrowedBy::LeasePolicy,
        NarrowedBy::JobBackend,
        NarrowedBy::NativeFileSyncUnsupported,
        NarrowedBy::ConfigResolution,
    ];

    /// The reason a capability this removes is off.
    pub fn reason(self) -> Reason {
        match self {
            NarrowedBy::LeasePolicy => Reason::NarrowedByLeasePolicy,
            NarrowedBy::JobBackend => Reason::NarrowedByJobBackend,
            NarrowedBy::NativeFileSyncUnsupported => Reason::NarrowedByNativeFileSyncUnsupported,
            NarrowedBy::ConfigResolution => Reason::NarrowedByConfigResolution,
        }
    }

    /// The gate that applies it.
    pub fn gate(self) -> Gate {
        match self {
            NarrowedBy::LeasePolicy => Gate::Policy,
            NarrowedBy::JobBackend => Gate::JobBackend,
            NarrowedBy::NativeFileSyncUnsupported => Gate::NativeFileSync,
            NarrowedBy::ConfigResolution => Gate::Config,
        }
    }
}

/// One capability key of a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRule {
    pub capability: Capability,
    /// Off unless the declaration says `true`; the others follow the worker when omitted.
    pub opt_in: bool,
    /// Every one of these methods must be verified by the worker.
    pub methods: &'static [WorkerMethod],
    /// What about a lease removes it, in [`NarrowedBy::ALL`] order.
    pub narrowed_by: &'static [NarrowedBy],
}

impl KeyRule {
    pub fn narrowed_by(&self, narrowing: NarrowedBy) -> bool {
        self.narrowed_by.contains(&narrowing)
    }
}

/// A key a version refuses although a driver may declare it, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemovedKey {
    pub key: &'static str,
    pub why: &'static str,
}

/// One version of the contract.
#[derive(Debug, PartialEq, Eq)]
pub struct Contract {
    pub version: ContractVersion,
    /// In the order status lists them.
    pub keys: &'static [KeyRule],
    pub removed: &'static [RemovedKey],
}

/// The sync methods, which the host uses only as a pair.
pub const SYNC_PAIR: &[WorkerMethod] = &[WorkerMethod::SyncIn, WorkerMethod::SyncOut];
const REUSE: &[WorkerMethod] = &[WorkerMethod::ResumeLease, WorkerMethod::ReleaseLease, WorkerMethod::DestroyLease];
const EXECUTE: &[WorkerMethod] = &[WorkerMethod::Execute];
const SYNC_NARROWINGS: &[NarrowedBy] = &[NarrowedBy::JobBackend, NarrowedBy::NativeFileSyncUnsupported];
const SESSION_NARROWINGS: &[NarrowedBy] = &[NarrowedBy::ConfigResolution];

const fn key(
    capability: Capability,
    opt_in: bool,
    methods: &'static [WorkerMethod],
    narrowed_by: &'static [NarrowedBy],
) -> KeyRule {
    KeyRule { capability, opt_in, methods, narrowed_by }
}

/// The six keys of docs/contract.md, the same in every version.
const SIX: [KeyRule; 6] = [
    key(Capability::ReusableLeases, true, REUSE, &[NarrowedBy::LeasePolicy]),
    key(Capability::NativeSyncIn, false, SYNC_PAIR, SYNC_NARROWINGS),
    key(Capability::NativeSyncOut, false, SYNC_PAIR, SYNC_NARROWINGS),
    key(Capability::PersistentProcessSessions, false, EXECUTE, SESSION_NARROWINGS),
    key(Capability::IndependentControlCommands, false, EXECUTE, &[]),
    key(Capability::IncrementalSessionOutput, true, EXECUTE, SESSION_NARROWINGS),
];

/// The keys v2 adds. `concurrentSyncOperations` is narrowed as the sync pair is although the host
/// does not narrow it: concurrent native syncs are of no use to a lease whose native sync is off,
/// and the difference can only remove a capability, never grant one.
const ADDED_IN_V2: [KeyRule; 3] = [
    key(Capability::ConcurrentSyncOperations, true, SYNC_PAIR, SYNC_NARROWINGS),
    key(Capability::DuplexCommandStream, true, &[WorkerMethod::DuplexChannelOpen], SESSION_NARROWINGS),
    key(Capability::RunnerWebSocketIngress, true, &[WorkerMethod::RunnerIngressEndpoint], &[]),
];

const NINE: [KeyRule; 9] = concat(SIX, ADDED_IN_V2);

/// `a` then `b`; `N` must be their total length (checked when the constant is built).
const fn concat<const A: usize, const B: usize, const N: usize>(a: [KeyRule; A], b: [KeyRule; B]) -> [KeyRule; N] {
    assert!(A + B == N && A > 0);
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

const EXEC_CONCURRENCY: RemovedKey = RemovedKey {
    key: "concurrentSyncAndExec",
    why: "was removed from the contract (concurrency is no longer declared)",
};

pub static V1: Contract = Contract {
    version: ContractVersion::V1,
    keys: &SIX,
    removed: &[
        EXEC_CONCURRENCY,
        RemovedKey {
            key: "concurrentSyncOperations",
            why: "was removed from the contract (concurrency is no longer declared)",
        },
    ],
};

pub static V2: Contract = Contract { version: ContractVersion::V2, keys: &NINE, removed: &[EXEC_CONCURRENCY] };

impl ContractVersion {
    pub fn contract(self) -> &'static Contract {
        match self {
            ContractVersion::V1 => &V1,
            ContractVersion::V2 => &V2,
        }
    }
}

impl Contract {
    pub fn rule(&self, capability: Capability) -> Option<&'static KeyRule> {
        self.keys.iter().find(|r| r.capability == capability)
    }

    pub fn has(&self, capability: Capability) -> bool {
        self.rule(capability).is_some()
    }

    pub fn capabilities(&self) -> impl Iterator<Item = Capability> + use<> {
        self.keys.iter().map(|r| r.capability)
    }

    /// Every worker method some key of this version needs, in the order the keys first need them,
    /// as a worker spells them in `supportedMethods` (what a worker is started with).
    pub fn worker_methods(&self) -> Vec<&'static str> {
        let mut methods: Vec<&'static str> = Vec::new();
        for method in self.keys.iter().flat_map(|r| r.methods).map(|m| m.as_str()) {
            if !methods.contains(&method) {
                methods.push(method);
            }
        }
        methods
    }

    /// The versions whose keys include `key`, for a message that tells an admin which contract
    /// would admit a key this one refuses.
    pub fn admitted_by(key: &str) -> Vec<ContractVersion> {
        ContractVersion::ALL
            .into_iter()
            .filter(|v| v.contract().keys.iter().any(|r| r.capability.key() == key))
            .collect()
    }

    /// Why this version refuses `key`, a key it does not have: removed, or a key of another
    /// version (which is named). `None` for a key no version knows.
    pub fn refusal(&self, key: &str) -> Option<String> {
        let others = Contract::admitted_by(key);
        let choose = match others.as_slice() {
            [] => String::new(),
            versions => {
                let names: Vec<&str> = versions.iter().map(|v| v.as_str()).collect();
                format!(", or choose contract {}, which declares it", names.join(" or "))
            }
        };
        if let Some(removed) = self.removed.iter().find(|r| r.key == key) {
            return Some(format!("{key} {}: delete it{choose}", removed.why));
        }
        if others.is_empty() {
            return None;
        }
        Some(format!(
            "{key} is not a key of contract {}, the one this cluster enforces: delete it{choose}",
            self.version
        ))
    }

    /// The keys this version refuses by name (its removed keys and the other versions' keys), in
    /// a fixed order.
    pub fn refused_keys(&self) -> Vec<&'static str> {
        let mut refused: Vec<&'static str> = self.removed.iter().map(|r| r.key).collect();
        for other in ContractVersion::ALL.map(ContractVersion::contract) {
            for cap in other.capabilities() {
                if !self.has(cap) && !refused.contains(&cap.key()) {
                    refused.push(cap.key());
                }
            }
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_is_a_key_of_some_version_and_v2_extends_v1() {
        for cap in Capability::ALL {
            assert!(!Contract::admitted_by(cap.key()).is_empty(), "{cap}");
        }
        assert_eq!(&V2.keys[..V1.keys.len()], V1.keys, "v2 keeps the six as they are");
        assert_eq!(V1.worker_methods().len(), 6);
        assert_eq!(V2.worker_methods().len(), 8);
    }

    #[test]
    fn a_refused_key_names_the_version_that_declares_it() {
        assert_eq!(
            V1.refusal("duplexCommandStream").unwrap(),
            "duplexCommandStream is not a key of contract v1, the one this cluster enforces: delete it, or choose \
             contract v2, which declares it"
        );
        assert_eq!(
            V1.refusal("concurrentSyncOperations").unwrap(),
            "concurrentSyncOperations was removed from the contract (concurrency is no longer declared): delete it, \
             or choose contract v2, which declares it"
        );
        assert_eq!(
            V2.refusal("concurrentSyncAndExec").unwrap(),
            "concurrentSyncAndExec was removed from the contract (concurrency is no longer declared): delete it"
        );
        assert_eq!(V2.refusal("reuseableLeases"), None);
        assert_eq!(
            V1.refused_keys(),
            ["concurrentSyncAndExec", "concurrentSyncOperations", "duplexCommandStream", "runnerWebSocketIngress"]
        );
        assert_eq!(V2.refused_keys(), ["concurrentSyncAndExec"]);
    }
}
