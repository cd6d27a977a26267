//! The contract's words: the two kinds, capability keys, explanation reasons, condition types and
//! reasons, worker method names and driver kinds, and the words of the `explain` and `check`
//! commands (which version has which key is [`crate::versions`]'s). It depends on nothing in the crate, so every module may use it:
//! [`crate::api`] writes these words into the CRD schema, [`crate::contract`] (which also reads
//! the types of [`crate::api`]) resolves with them, and the controllers write them into status.
//!
//! Each enum is declared once with its wire spelling; the string table, the list of all values
//! and the serde and schema spellings all come from that one declaration.

/// Declares a closed set of words: the enum (serde and schemars spell each variant as given),
/// `ALL` in declaration order, the spelling and its inverse. Exported for the shells' own closed
/// sets (the probe's failure classes); its users depend on serde and schemars.
#[macro_export]
#[doc(hidden)]
macro_rules! __words {
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

pub use crate::__words as words;

/// The field manager of every write: status, the certificate Secret, the webhook's caBundle.
pub const FIELD_MANAGER: &str = "sandcap";

/// The label a Secret must carry to serve as a lease's `configFrom` (an admin's explicit choice):
/// only such Secrets are watched, so no other Secret is ever requested or held in memory.
pub const CONFIG_SOURCE_LABEL: &str = "sandcap.dev/config-source";

words! {
    /// The worker methods the capability keys need ([`crate::versions`] says which key needs
    /// which), as a worker's `supportedMethods` spells them. A worker may advertise others: those
    /// verify nothing, so they stay the worker's own words.
    pub enum WorkerMethod (as_str, parse) {
        ResumeLease = "environmentResumeLease",
        ReleaseLease = "environmentReleaseLease",
        DestroyLease = "environmentDestroyLease",
        SyncIn = "environmentSyncIn",
        SyncOut = "environmentSyncOut",
        Execute = "environmentExecute",
        DuplexChannelOpen = "duplexChannelOpen",
        RunnerIngressEndpoint = "environmentRunnerIngressEndpoint",
    }
}

impl WorkerMethod {
    /// `a, b`: how messages name several methods.
    pub fn list(methods: &[WorkerMethod]) -> String {
        methods.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
    }
}

words! {
    /// The two kinds sandcap defines (and reviews, and reconciles).
    pub enum Kind (as_str, from_kind) {
        SandboxProvider = "SandboxProvider",
        SandboxLease = "SandboxLease",
    }
}

words! {
    /// Every capability key of some contract version ([`crate::versions`] says which version has
    /// which, and what each needs).
    pub enum Capability (key, from_key) {
        ReusableLeases = "reusableLeases",
        NativeSyncIn = "nativeSyncIn",
        NativeSyncOut = "nativeSyncOut",
        PersistentProcessSessions = "persistentProcessSessions",
        IndependentControlCommands = "independentControlCommands",
        IncrementalSessionOutput = "incrementalSessionOutput",
        ConcurrentSyncOperations = "concurrentSyncOperations",
        DuplexCommandStream = "duplexCommandStream",
        RunnerWebSocketIngress = "runnerWebSocketIngress",
    }
}

impl Capability {
    /// What the key means to an admin, for `kubectl explain`.
    pub fn meaning(self) -> &'static str {
        match self {
            Capability::ReusableLeases => "leases may be resumed, released and destroyed (opt-in)",
            Capability::NativeSyncIn => "the plugin syncs files into the sandbox itself",
            Capability::NativeSyncOut => "the plugin syncs files out of the sandbox itself",
            Capability::PersistentProcessSessions => "processes survive between executions",
            Capability::IndependentControlCommands => "control commands run alongside an execution",
            Capability::IncrementalSessionOutput => "output streams while a session runs (opt-in)",
            Capability::ConcurrentSyncOperations => "sync operations may run concurrently (opt-in)",
            Capability::DuplexCommandStream => "a command's input and output share one duplex channel (opt-in)",
            Capability::RunnerWebSocketIngress => {
                "the runner accepts WebSocket connections at its own endpoint (opt-in)"
            }
        }
    }

    /// The printer column that shows the key.
    pub fn column(self) -> &'static str {
        match self {
            Capability::ReusableLeases => "Reuse",
            Capability::NativeSyncIn => "SyncIn",
            Capability::NativeSyncOut => "SyncOut",
            Capability::PersistentProcessSessions => "Sessions",
            Capability::IndependentControlCommands => "Control",
            Capability::IncrementalSessionOutput => "Output",
            Capability::ConcurrentSyncOperations => "ConcurrentSync",
            Capability::DuplexCommandStream => "Duplex",
            Capability::RunnerWebSocketIngress => "Ingress",
        }
    }
}

words! {
    /// Why a capability is on or off: the gates, in the order docs/contract.md
    /// ("Status") lists them.
    /// `Granted` means none removed it. The first three fail closed (docs/contract.md, "Fail
    /// closed"): each turns every capability off.
    pub enum Reason (as_str, parse) {
        LeaseNotValid = "LeaseNotValid",
        PluginIdentityFailed = "PluginIdentityFailed",
        ProviderNotValid = "ProviderNotValid",
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

words! {
    /// The kinds of workload a provider's `spec.workloads` binds; each is a row of
    /// [`crate::workloads::KINDS`].
    pub enum WorkloadKind (as_str, parse) {
        Job = "Job",
        Sandbox = "Sandbox",
        SandboxClaim = "SandboxClaim",
    }
}

words! {
    /// A condition's status, as Kubernetes spells it; a condition in another status was not
    /// written by sandcap.
    pub enum ConditionStatus (as_str, parse) {
        True = "True",
        False = "False",
        Unknown = "Unknown",
    }
}

impl ConditionStatus {
    /// The status of a condition that is either met or not.
    pub fn met(met: bool) -> ConditionStatus {
        if met { ConditionStatus::True } else { ConditionStatus::False }
    }

    /// Whether `status`, as written in a condition, is this one.
    pub fn is(self, status: &str) -> bool {
        self.as_str() == status
    }
}

words! {
    /// The types of the conditions sandcap writes (docs/contract.md, "Status"): `Resolved`,
    /// `ConfigResolved` and `PluginIdentity` on a lease; `WorkerVerified`, `Ready` and
    /// `ConfigSchemasCompiled` on a provider; `Valid` on both.
    pub enum ConditionType (as_str, parse) {
        Resolved = "Resolved",
        ConfigResolved = "ConfigResolved",
        PluginIdentity = "PluginIdentity",
        WorkerVerified = "WorkerVerified",
        Ready = "Ready",
        ConfigSchemasCompiled = "ConfigSchemasCompiled",
        WorkloadsObserved = "WorkloadsObserved",
        DeclarationsMatchManifest = "DeclarationsMatchManifest",
        // Both kinds: the stored object against today's rules (the CRD's and the webhook's)
        Valid = "Valid",
    }
}

words! {
    /// The reasons of those conditions, and of the Events that record a provider's capability
    /// changes and an object's `Valid` turning.
    pub enum ConditionReason (as_str, parse) {
        // SandboxLease `Resolved`; the two refusals also a provider's `Ready`
        Resolved = "Resolved",
        LeaseNotValid = "LeaseNotValid",
        ProviderNotValid = "ProviderNotValid",
        // SandboxLease `PluginIdentity` (and `Resolved`, `ConfigResolved` when it fails)
        Pinned = "Pinned",
        PluginIdentityFailed = "PluginIdentityFailed",
        ProviderNotFound = "ProviderNotFound",
        PinnedProviderGone = "PinnedProviderGone",
        ProviderRecreated = "ProviderRecreated",
        PluginKeyChanged = "PluginKeyChanged",
        DriverChanged = "DriverChanged",
        DriverNotDeclared = "DriverNotDeclared",
        NotSandboxProvider = "NotSandboxProvider",
        // SandboxLease `ConfigResolved`
        ConfigResolved = "ConfigResolved",
        ConfigNotAnObject = "ConfigNotAnObject",
        ConfigTooLarge = "ConfigTooLarge",
        SecretNotFound = "SecretNotFound",
        SecretKeyNotFound = "SecretKeyNotFound",
        SecretNotJson = "SecretNotJson",
        SecretNotAnObject = "SecretNotAnObject",
        SecretTooLarge = "SecretTooLarge",
        SchemaViolated = "SchemaViolated",
        // SandboxProvider `WorkerVerified` and `Ready`
        ProbeSucceeded = "ProbeSucceeded",
        ProbeFailed = "ProbeFailed",
        NoMethodsAdvertised = "NoMethodsAdvertised",
        PluginIdentityMismatch = "PluginIdentityMismatch",
        CapabilitiesResolved = "CapabilitiesResolved",
        WorkerNotVerified = "WorkerNotVerified",
        // SandboxProvider `ConfigSchemasCompiled` (the last two also on a lease's `ConfigResolved`)
        Compiled = "Compiled",
        SchemaDoesNotCompile = "SchemaDoesNotCompile",
        SchemaOverBudget = "SchemaOverBudget",
        // SandboxProvider `WorkloadsObserved`
        Observing = "Observing",
        KindNotServed = "KindNotServed",
        Discovering = "Discovering",
        ObserverOff = "ObserverOff",
        // SandboxProvider `DeclarationsMatchManifest`
        MatchesManifest = "MatchesManifest",
        DiffersFromManifest = "DiffersFromManifest",
        // Events on a SandboxProvider
        CapabilitiesGranted = "CapabilitiesGranted",
        CapabilitiesRevoked = "CapabilitiesRevoked",
        // `Valid` on both kinds, and the Events when it turns
        Conforms = "Conforms",
        BreaksCurrentRules = "BreaksCurrentRules",
    }
}

// The words of `sandcap explain` and `sandcap check` (docs/contract.md, "Command line").

words! {
    /// The gates of the resolution that `sandcap explain` shows for each capability, in the order
    /// the contract applies them.
    pub enum Gate (as_str, parse) {
        LeaseValid = "leaseValid",
        Identity = "identity",
        ProviderValid = "providerValid",
        Worker = "worker",
        Declaration = "declaration",
        Policy = "policy",
        JobBackend = "jobBackend",
        NativeFileSync = "nativeFileSync",
        Config = "config",
    }
}

words! {
    /// The checks of `sandcap check`, in the order it runs them: each assumes the ones before it
    /// passed.
    pub enum Check (name, parse) {
        Crds = "crds",
        Webhook = "webhook",
        Admission = "admission",
        Leader = "leader",
        Controllers = "controllers",
        Providers = "providers",
        Workloads = "workloads",
    }
}

impl Check {
    /// Where docs/troubleshooting.md says what to do when this check warns or fails: its section
    /// `### check: NAME`.
    pub fn troubleshooting(self) -> String {
        format!("docs/troubleshooting.md#check-{}", self.name())
    }
}
