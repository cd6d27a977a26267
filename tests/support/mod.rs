//! Shared by the probe and controller tests: the reference worker as a real process, test objects,
//! and an in-memory Kubernetes API (kube-fake-client) that records every status write.
#![allow(dead_code)]

pub mod apiserver;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use kube_fake_client::ClientBuilder;
use kube_fake_client::{PatchType, interceptor};
use prometheus_client::registry::Registry;
use sandcap::api::{SandboxLease, SandboxProvider};
use sandcap::controller::Context;
use sandcap::metrics::Metrics;
use sandcap::probe::Prober;
use serde_json::{Value, json};

pub const ALL_METHODS: [&str; 6] = [
    "environmentDestroyLease",
    "environmentExecute",
    "environmentReleaseLease",
    "environmentResumeLease",
    "environmentSyncIn",
    "environmentSyncOut",
];

/// The reference worker (`examples/reference-worker.rs`) running as a child process; killed on drop.
pub struct Worker {
    child: Child,
    pub url: String,
}

impl Worker {
    /// Starts it on a free port with `args` (`--methods ...`, `--mode ...`, `--delay ...`).
    pub fn start(args: &[&str]) -> Worker {
        let mut child = Command::new(worker_binary())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the reference worker starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("it prints its address");
        let addr =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Worker { child, url: format!("http://{addr}/rpc") }
    }

    pub fn with_methods(methods: &[&str]) -> Worker {
        Worker::start(&["--methods", &methods.join(",")])
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo test` builds the examples next to the test binaries (target/<profile>/examples).
fn worker_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let path = profile_dir.join("examples").join(format!("reference-worker{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --example reference-worker` (a plain `cargo test` builds it)",
        path.display()
    );
    path
}

/// A provider whose worker is reached by URL (the tests run the controller with URLs allowed).
pub fn provider(name: &str, url: &str, capabilities: Value) -> SandboxProvider {
    serde_json::from_value(json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxProvider",
        "metadata": {"name": name},
        "spec": {
            "pluginKey": "acme.kubernetes-sandbox-provider",
            "version": "1.4.0",
            "worker": {"url": url},
            "environmentDrivers": [{
                "driverKey": "kubernetes",
                "kind": "sandbox_provider",
                "displayName": "Kubernetes",
                "configSchema": {
                    "type": "object",
                    "properties": {"backend": {"type": "string"}, "apiToken": {"type": "string", "minLength": 8}},
                    "additionalProperties": false
                },
                "sandboxCapabilities": capabilities
            }]
        }
    }))
    .expect("a valid provider")
}

/// Declares every capability true (the two opt-in keys need it).
pub fn all_true() -> Value {
    json!({"reusableLeases": true, "nativeSyncIn": true, "nativeSyncOut": true,
           "persistentProcessSessions": true, "independentControlCommands": true, "incrementalSessionOutput": true})
}

/// A lease of `provider`'s `kubernetes` driver; `spec` is merged over the minimal spec.
pub fn lease(namespace: &str, name: &str, provider: &str, spec: Value) -> SandboxLease {
    let mut base = json!({"providerRef": {"name": provider, "driverKey": "kubernetes"}});
    base.as_object_mut().expect("object").extend(spec.as_object().expect("spec is an object").clone());
    serde_json::from_value(json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxLease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": base
    }))
    .expect("a valid lease")
}

pub fn secret(namespace: &str, name: &str, key: &str, value: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some(namespace.into());
    s.data = Some([(key.to_string(), k8s_openapi::ByteString(value.as_bytes().to_vec()))].into());
    s
}

/// One status write the in-memory API received.
#[derive(Clone, Debug)]
pub struct StatusWrite {
    pub name: String,
    pub field_manager: Option<String>,
    pub force: bool,
    pub server_side_apply: bool,
}

/// The in-memory API with both CRDs (status subresources on) and a log of status writes.
pub struct FakeApi {
    pub client: Client,
    pub writes: Arc<Mutex<Vec<StatusWrite>>>,
}

impl FakeApi {
    pub async fn new() -> FakeApi {
        let writes: Arc<Mutex<Vec<StatusWrite>>> = Arc::default();
        let log = writes.clone();
        let client = ClientBuilder::new()
            .with_resource::<SandboxProvider>()
            .with_resource::<SandboxLease>()
            .with_status_subresource::<SandboxProvider>()
            .with_status_subresource::<SandboxLease>()
            .with_interceptor_funcs(interceptor::Funcs::new().patch(release_lease_ownership).patch_status(move |ctx| {
                log.lock().unwrap().push(StatusWrite {
                    name: ctx.name.to_string(),
                    field_manager: ctx.params.field_manager.clone(),
                    force: ctx.params.force,
                    server_side_apply: ctx.patch_type == PatchType::ApplyPatch,
                });
                Ok(None)
            }))
            .build()
            .await
            .expect("the in-memory API builds");
        FakeApi { client: Client::new(ClusterScoped(client), "default"), writes }
    }

    pub fn write_count(&self) -> usize {
        self.writes.lock().unwrap().len()
    }

    pub fn providers(&self) -> Api<SandboxProvider> {
        Api::all(self.client.clone())
    }

    pub fn leases(&self, namespace: &str) -> Api<SandboxLease> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Create and return as stored (uid, generation, resourceVersion set).
    pub async fn create_provider(&self, p: &SandboxProvider) -> SandboxProvider {
        self.providers().create(&PostParams::default(), p).await.expect("create provider")
    }

    pub async fn create_lease(&self, l: &SandboxLease) -> SandboxLease {
        let ns = l.metadata.namespace.as_deref().expect("namespaced");
        self.leases(ns).create(&PostParams::default(), l).await.expect("create lease")
    }

    pub async fn create_secret(&self, s: &Secret) {
        let ns = s.metadata.namespace.as_deref().expect("namespaced");
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), s)
            .await
            .expect("create secret");
    }

    /// Sets a provider's status directly (as an earlier reconcile would have), bypassing the log.
    pub async fn set_provider_status(
        &self,
        name: &str,
        status: &sandcap::api::SandboxProviderStatus,
    ) -> SandboxProvider {
        let before = self.write_count();
        let patch = json!({"status": status});
        let p =
            self.providers().patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("status");
        self.writes.lock().unwrap().truncate(before);
        p
    }
}

/// A filled, ready reflector store, as the controller's watch would leave it.
pub fn store_of<K>(objects: impl IntoIterator<Item = K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for obj in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(obj));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

pub fn metrics() -> (Metrics, Registry) {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    (metrics, registry)
}

/// A reconcile context over `api`, with URLs allowed so tests can point providers at local workers.
pub fn context(api: &FakeApi, providers: Store<SandboxProvider>, metrics: Metrics) -> Arc<Context> {
    let prober = Prober::new(Duration::from_secs(2), true, "test");
    Context::new(api.client.clone(), providers, prober, metrics, Duration::from_secs(300), "test")
}

/// Polls `check` every 50 ms until it returns true; panics with `what` after 20 seconds.
pub async fn eventually<F: Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

/// kube-fake-client 0.3 registers every custom resource as namespaced (its registry has no scope
/// information), so it refuses the cluster-scoped SandboxProvider. This service stores providers in
/// a hidden namespace of the fake and takes that namespace back out of every answer, so the code
/// under test sees cluster-scoped providers exactly as from a real apiserver.
#[derive(Clone)]
struct ClusterScoped(Client);

const PROVIDERS: &str = "/apis/sandcap.dev/v1alpha1/sandboxproviders";
const HIDDEN_NAMESPACE: &str = "cluster-scoped";

impl tower::Service<http::Request<kube::client::Body>> for ClusterScoped {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let Some(rest) = parts.uri.path().strip_prefix(PROVIDERS).map(str::to_string) else {
                return inner.send(http::Request::from_parts(parts, body)).await;
            };
            let query = parts.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
            let moved =
                format!("/apis/sandcap.dev/v1alpha1/namespaces/{HIDDEN_NAMESPACE}/sandboxproviders{rest}{query}");
            parts.uri = moved.parse().expect("a valid path");
            let (parts, body) = inner.send(http::Request::from_parts(parts, body)).await?.into_parts();
            let bytes = body.collect_bytes().await?;
            let Ok(mut answer) = serde_json::from_slice::<Value>(&bytes) else {
                return Ok(http::Response::from_parts(parts, bytes.into()));
            };
            let objects = match answer.get_mut("items").and_then(Value::as_array_mut) {
                Some(items) => items.iter_mut().collect(),
                None => vec![&mut answer],
            };
            for object in objects {
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("namespace");
                }
            }
            Ok(http::Response::from_parts(parts, serde_json::to_vec(&answer).expect("serializes").into()))
        })
    }
}

/// kube-fake-client 0.3 keeps a field manager's ownership of a field after a strategic-merge patch
/// deletes the field; a real apiserver drops it. The leader-election lock releases a Lease that way
/// and then takes it by a non-forced apply, which the fake would refuse as a conflict forever. So a
/// patch that clears a Lease's holder is replayed here as an update, which leaves no owners behind.
fn release_lease_ownership(ctx: interceptor::PatchContext<'_>) -> kube_fake_client::Result<Option<Value>> {
    let releases = ctx.patch_type != PatchType::ApplyPatch
        && ctx.patch.get("kind").and_then(Value::as_str) == Some("Lease")
        && ctx.patch.pointer("/spec/holderIdentity").is_some_and(Value::is_null);
    if !releases {
        return Ok(None);
    }
    let lease: Lease = ctx.client.get(ctx.namespace, ctx.name)?;
    let mut merged = serde_json::to_value(&lease)?;
    merge(&mut merged, ctx.patch);
    let lease: Lease = serde_json::from_value(merged)?;
    let updated = ctx.client.update(ctx.namespace, &lease, &PostParams::default())?;
    Ok(Some(serde_json::to_value(updated)?))
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let map = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}
