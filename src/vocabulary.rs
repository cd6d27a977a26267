//! The contract's words: capability keys, explanation reasons, worker method names, driver kinds
//! and the removed keys. Both [`crate::api`] (which writes them into the CRD schema) and
//! [`crate::contract`] (which resolves with them) depend on this module, never on each other.
//!
//! Each enum is declared once with its wire spelling; the string table, the list of all values
//! and the serde and schema spellings all come from that one declaration.

/// Declares a closed set of words: the enum (serde and schemars spell each variant as given),
/// `ALL` in declaration order, the spelling and its inverse.
macro_rules! words {
    ($(#[$meta:meta])* pub enum $name:ident ($as_str:ident, $parse:ident) {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal,)*
    }) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
            ::serde::Serialize, ::serde::Deserialize, ::schemars::JsonSchema,
        )]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)*
        }

        impl $name {
            pub const ALL: [$name; [$($text),*].len()] = [$($name::$variant),*];

            pub fn $as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            pub fn $parse(text: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|w| w.$as_str() == text)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.$as_str())
            }
        }
    };
}

pub(crate) use words;

pub const METHOD_RESUME_LEASE: &str = "environmentResumeLease";
pub const METHOD_RELEASE_LEASE: &str = "environmentReleaseLease";
pub const METHOD_DESTROY_LEASE: &str = "environmentDestroyLease";
pub const METHOD_SYNC_IN: &str = "environmentSyncIn";
pub const METHOD_SYNC_OUT: &str = "environmentSyncOut";
pub const METHOD_EXECUTE: &str = "environmentExecute";

/// Capability keys that were once part of the contract; the CRD names them when it rejects them.
pub const REMOVED_KEYS: [&str; 2] = ["concurrentSyncAndExec", "concurrentSyncOperations"];

words! {
    /// The six capability keys.
    pub enum Capability (key, from_key) {
        ReusableLeases = "reusableLeases",
        NativeSyncIn = "nativeSyncIn",
        NativeSyncOut = "nativeSyncOut",
        PersistentProcessSessions = "persistentProcessSessions",
        IndependentControlCommands = "independentControlCommands",
        IncrementalSessionOutput = "incrementalSessionOutput",
    }
}

impl Capability {
    /// Every one of these methods must be verified by the worker.
    pub fn required_methods(self) -> &'static [&'static str] {
        match self {
            Capability::ReusableLeases => &[METHOD_RESUME_LEASE, METHOD_RELEASE_LEASE, METHOD_DESTROY_LEASE],
            Capability::NativeSyncIn | Capability::NativeSyncOut => &[METHOD_SYNC_IN, METHOD_SYNC_OUT],
            Capability::PersistentProcessSessions
            | Capability::IndependentControlCommands
            | Capability::IncrementalSessionOutput => &[METHOD_EXECUTE],
        }
    }

    /// Opt-in keys are off unless the declaration says `true`; the others follow the worker.
    pub fn opt_in(self) -> bool {
        matches!(self, Capability::ReusableLeases | Capability::IncrementalSessionOutput)
    }

    pub fn is_sync(self) -> bool {
        matches!(self, Capability::NativeSyncIn | Capability::NativeSyncOut)
    }

    /// What the key means to an admin, for `kubectl explain`.
    pub fn meaning(self) -> &'static str {
        match self {
            Capability::ReusableLeases => "leases may be resumed, released and destroyed (opt-in)",
            Capability::NativeSyncIn => "the plugin syncs files into the sandbox itself",
            Capability::NativeSyncOut => "the plugin syncs files out of the sandbox itself",
            Capability::PersistentProcessSessions => "processes survive between executions",
            Capability::IndependentControlCommands => "control commands run alongside an execution",
            Capability::IncrementalSessionOutput => "output streams while a session runs (opt-in)",
        }
    }
}

words! {
    /// Why a capability is on or off: the gates, in the order API.md section 3 checks them.
    /// `Granted` means none removed it.
    pub enum Reason (as_str, parse) {
        PluginIdentityFailed = "PluginIdentityFailed",
        WorkerNotVerified = "WorkerNotVerified",
        MissingWorkerMethods = "MissingWorkerMethods",
        DeclaredFalse = "DeclaredFalse",
        NotOptedIn = "NotOptedIn",
        NarrowedByLeasePolicy = "NarrowedByLeasePolicy",
        NarrowedByJobBackend = "NarrowedByJobBackend",
        NarrowedByNativeFileSyncUnsupported = "NarrowedByNativeFileSyncUnsupported",
        NarrowedByConfigResolution = "NarrowedByConfigResolution",
        Granted = "Granted",
    }
}

words! {
    /// A lease's policy: what it asks for (`spec.policy`) and what it gets (`status.effectivePolicy`).
    #[derive(Default)]
    pub enum LeasePolicy (as_str, parse) {
        #[default]
        Ephemeral = "Ephemeral",
        ReuseByEnvironment = "ReuseByEnvironment",
    }
}

words! {
    /// The kind of a driver declaration; capabilities are read only for `sandbox_provider`.
    pub enum DriverKind (as_str, parse) {
        SandboxProvider = "sandbox_provider",
        EnvironmentDriver = "environment_driver",
    }
}
