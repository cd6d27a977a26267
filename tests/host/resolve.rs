//! Generated cases (driver declaration, the worker's supportedMethods, the lease: policy,
//! backend, native-sync flag, config outcome, pinned identity) through the host's published
//! resolver and through `sandcap resolve`, under `v1` (its six keys) and `v2` (nine).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::{CASES_PER_SEED, Rng, SEEDS, npm, sandcap, write};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Pin {
    /// No `status.pinned`: the first resolution pins the provider as it is.
    None,
    /// Pinned to this provider.
    Same,
    /// Pinned to a provider that was re-created (another uid): the host's "pinned plugin gone".
    Stale,
}

struct Case {
    contract: &'static str,
    driver: Value,
    methods: Vec<&'static str>,
    reuse: bool,
    backend: Option<&'static str>,
    sync_unsupported: Option<bool>,
    config_fails: bool,
    /// The lease's config fails the driver's `configSchema` (its Secrets resolve).
    config_invalid: bool,
    pin: Pin,
}

fn keys(contract: &str) -> Vec<&'static str> {
    let mut keys = crate::v1_keys();
    if contract == "v2" {
        keys.extend(crate::v2_only_keys());
    }
    keys
}

fn generate(rng: &mut Rng, contract: &'static str) -> Case {
    let mut caps = Map::new();
    for key in keys(contract) {
        if let Some(v) = rng.pick(&[(None, 4), (Some(true), 4), (Some(false), 2)]) {
            caps.insert(key.into(), Value::Bool(v));
        }
    }
    let mut driver = json!({"driverKey": "k", "displayName": "K", "configSchema": {"type": "object"}});
    driver["kind"] = json!(rng.pick(&[("sandbox_provider", 19), ("environment_driver", 1)]));
    if !caps.is_empty() || rng.chance(0.5) {
        driver["sandboxCapabilities"] = Value::Object(caps);
    }
    if let Some(legacy) = rng.pick(&[(None, 12), (Some(true), 5), (Some(false), 3)]) {
        driver["supportsReusableLeases"] = json!(legacy);
    }
    let methods =
        if rng.chance(0.03) { vec![] } else { crate::methods().into_iter().filter(|_| rng.chance(0.75)).collect() };
    Case {
        contract,
        driver,
        methods,
        reuse: rng.chance(0.5),
        backend: rng.pick(&[(None, 8), (Some("sandbox-cr"), 4), (Some("job"), 5), (Some("Job"), 3)]),
        sync_unsupported: rng.pick(&[(None, 14), (Some(true), 4), (Some(false), 2)]),
        config_fails: rng.chance(0.2),
        pin: rng.pick(&[(Pin::None, 9), (Pin::Same, 9), (Pin::Stale, 2)]),
        config_invalid: false,
    }
    .with_invalid_config(rng.chance(0.15))
}

impl Case {
    /// A driver whose `configSchema` requires a member the lease's config (`{}`) lacks: the
    /// host's resolver is not told (its config resolution is of Secrets, and it leaves the
    /// schema to the plugin's `environmentValidateConfig` when the environment is saved).
    fn with_invalid_config(mut self, invalid: bool) -> Case {
        if invalid {
            self.driver["configSchema"] = json!({"type": "object", "required": ["region"]});
        }
        self.config_invalid = invalid;
        self
    }
}

/// The case as the host's resolver takes it (host.mjs, `resolve`).
fn host_input(c: &Case) -> Value {
    let mut metadata = Map::new();
    if let Some(b) = c.backend {
        metadata.insert("backend".into(), json!(b));
    }
    if let Some(u) = c.sync_unsupported {
        metadata.insert("nativeFileSyncUnsupported".into(), json!(u));
    }
    json!({
        "driver": c.driver,
        "pinnedPluginDeclaresDriver": c.pin != Pin::Stale,
        "verifiedMethods": c.methods,
        "leasePolicy": if c.reuse { "reuse_by_environment" } else { "ephemeral" },
        "leaseMetadata": metadata,
        "configResolutionFailed": c.config_fails,
    })
}

/// The case as sandcap takes it: a provider wrapping the driver, a lease of it.
fn sandcap_files(c: &Case) -> (Value, Value) {
    let provider = json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider",
        "metadata": {"name": "host-diff", "uid": "uid-1"},
        "spec": {"pluginKey": "sandcap.host-differential", "version": "1.0.0",
                 "worker": {"service": {"namespace": "sandbox-system", "name": "worker", "port": 8080}},
                 "environmentDrivers": [c.driver]},
    });
    let mut spec = json!({"providerRef": {"name": "host-diff", "driverKey": "k"}});
    spec["policy"] = json!(if c.reuse { "ReuseByEnvironment" } else { "Ephemeral" });
    if c.reuse {
        spec["environment"] = json!("env-1");
    }
    if let Some(b) = c.backend {
        spec["backend"] = json!(b);
    }
    if let Some(u) = c.sync_unsupported {
        spec["nativeFileSyncUnsupported"] = json!(u);
    }
    if c.config_fails {
        spec["configFrom"] = json!([{"secretKeyRef": {"name": "not-given", "key": "config.json"}}]);
    }
    let mut lease = json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
                           "metadata": {"name": "run", "namespace": "team-a"}, "spec": spec});
    let uid = match c.pin {
        Pin::None => None,
        Pin::Same => Some("uid-1"),
        Pin::Stale => Some("uid-0"),
    };
    if let Some(uid) = uid {
        lease["status"] =
            json!({"pinned": {"providerUID": uid, "pluginKey": "sandcap.host-differential", "driverKey": "k"}});
    }
    (provider, lease)
}

fn run_sandcap(i: usize, c: &Case, dir: &std::path::Path) -> Value {
    let (provider, lease) = sandcap_files(c);
    let p = write(dir, &format!("p{i}.json"), &provider.to_string());
    let l = write(dir, &format!("l{i}.json"), &lease.to_string());
    // An empty list: a method no key needs (the flag takes a list of at least one).
    let methods = if c.methods.is_empty() { "environmentHealth".to_string() } else { c.methods.join(",") };
    let args = ["resolve", "--provider", &p, "--lease", &l, "--contract", c.contract, "-o", "json"];
    // The configSchema compile budget's 1 s is wall-clock time: on a loaded machine, ask again.
    let mut last = Value::Null;
    for _ in 0..5 {
        let o = sandcap(&[&args[..], &["--worker-methods", &methods]].concat());
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        last = serde_json::from_slice(&o.stdout).unwrap();
        if !last.to_string().contains("compiling it takes longer than") {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("case {i}: the configSchema never compiled within its budget: {last}\n{provider}\n{lease}")
}

/// The documented class of a difference (host grants `key`, sandcap does not), or `None`.
fn class(c: &Case, key: &str, reason: &str) -> Option<&'static str> {
    let has = |m: &str| c.methods.contains(&m);
    let declared = &c.driver["sandboxCapabilities"];
    match (key, reason) {
        (_, "LeaseNotValid") if c.backend == Some("Job") => Some("(iv) backend spelt Job"),
        ("nativeSyncIn" | "nativeSyncOut", "MissingWorkerMethods")
            if has("environmentSyncIn") != has("environmentSyncOut") =>
        {
            Some("(i) one sync method verified")
        }
        ("reusableLeases", "NotOptedIn")
            if c.reuse && declared.get(key).is_none() && c.driver.get("supportsReusableLeases").is_none() =>
        {
            Some("(ii) reusableLeases undeclared on a reuse lease")
        }
        ("concurrentSyncOperations", "NarrowedByJobBackend") if c.backend == Some("job") => {
            Some("(iii) concurrentSyncOperations on a Job lease")
        }
        ("concurrentSyncOperations", "NarrowedByNativeFileSyncUnsupported") if c.sync_unsupported == Some(true) => {
            Some("(iii) concurrentSyncOperations on a nativeFileSyncUnsupported lease")
        }
        (_, "NarrowedByConfigResolution") if c.config_invalid && !c.config_fails => {
            Some("(v) a config that fails the driver's configSchema")
        }
        _ => None,
    }
}

#[test]
fn sandcap_resolve_against_the_hosts_resolver() {
    if npm::skipped() {
        return;
    }
    let started = Instant::now();
    let mut cases = Vec::new();
    for seed in SEEDS {
        let mut rng = Rng::new(seed);
        for n in 0..CASES_PER_SEED {
            cases.push(generate(&mut rng, if n % 2 == 0 { "v1" } else { "v2" }));
        }
    }
    let host = npm::host(&json!({"resolve": cases.iter().map(host_input).collect::<Vec<_>>()}));
    let host = host["resolve"].as_array().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ours: Vec<Mutex<Value>> = cases.iter().map(|_| Mutex::new(Value::Null)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(2, |n| n.get()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(c) = cases.get(i) else { break };
                    *ours[i].lock().unwrap() = run_sandcap(i, c, dir.path());
                }
            });
        }
    });

    let (mut by_class, mut cases_by_class) = (BTreeMap::<&str, usize>::new(), BTreeMap::<&str, usize>::new());
    let (mut agreeing, mut grants) = (0, 0);
    for (i, c) in cases.iter().enumerate() {
        let ours = ours[i].lock().unwrap();
        let theirs = &host[i];
        assert!(theirs.get("error").is_none(), "case {i}: {theirs}");
        let mut classes = Vec::new();
        for (n, key) in keys(c.contract).into_iter().enumerate() {
            let explanation = &ours["explanations"][n];
            assert_eq!(explanation["capability"], key);
            let (h, s) = (theirs[key] == true, ours["capabilities"][key] == true);
            grants += usize::from(s);
            let detail =
                || format!("case {i} ({}), {key}: host {h}, sandcap {explanation}\n{}", c.contract, host_input(c));
            assert!(h || !s, "sandcap grants what the host does not: {}", detail());
            if h && !s {
                let reason = explanation["reason"].as_str().unwrap();
                let class = class(c, key, reason).unwrap_or_else(|| panic!("an undocumented difference: {}", detail()));
                *by_class.entry(class).or_default() += 1;
                if !classes.contains(&class) {
                    classes.push(class);
                    *cases_by_class.entry(class).or_default() += 1;
                }
            }
        }
        agreeing += usize::from(classes.is_empty());
    }
    eprintln!(
        "tests/host: {} cases (seeds {SEEDS:x?}, v1 and v2 alternating), {agreeing} agreeing on every key, \
         {grants} grants by sandcap, all granted by the host too; differences (capabilities, cases) by class:",
        cases.len()
    );
    for (class, n) in &by_class {
        eprintln!("  {class}: {n} capabilities in {} cases", cases_by_class[class]);
    }
    eprintln!("tests/host: resolve comparison took {:.1}s", started.elapsed().as_secs_f64());
    for class in [
        "(i) one sync method verified",
        "(ii) reusableLeases undeclared on a reuse lease",
        "(iii) concurrentSyncOperations on a Job lease",
        "(iii) concurrentSyncOperations on a nativeFileSyncUnsupported lease",
        "(iv) backend spelt Job",
        "(v) a config that fails the driver's configSchema",
    ] {
        assert!(by_class.contains_key(class), "no case of {class}: the generator no longer covers it");
    }
}
