//! Hostile input, one builder per class of docs/webhook.md's budgets: shared by the budget tests
//! against the real binary (tests/budgets.rs), the benchmark that prints what each class costs
//! (benches/hostile.rs) and the end-to-end suite (a hostile provider stored without the webhook).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// The apiserver's request body limit, which the webhook's own limit follows.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Patterns that compile to megabytes each, in the constructs and places that cost: counted
/// repetitions of ASCII, Unicode and negated classes, nested repetitions, in `pattern`,
/// `patternProperties` keys and `propertyNames`.
pub fn costly_patterns() -> Vec<String> {
    let mut patterns = Vec::new();
    for i in 0..12 {
        patterns.push(format!(r"\w{{{}}}", 30_000 + i));
        patterns.push(format!(r"[^a]{{{}}}", 9_000 + i));
        patterns.push(format!(r"\p{{L}}{{{}}}", 60 + i));
        patterns.push(format!(r"((a|b|c){{{}}}){{200}}", 200 + i));
    }
    patterns
}

/// A `configSchema` that puts every pattern of [`costly_patterns`] to use.
pub fn costly_schema() -> Value {
    let patterns = costly_patterns();
    let mut properties = Map::new();
    let mut pattern_properties = Map::new();
    for (i, p) in patterns.iter().enumerate() {
        match i % 3 {
            0 => drop(properties.insert(format!("p{i}"), json!({"type": "string", "pattern": p}))),
            1 => drop(pattern_properties.insert(p.clone(), json!({"type": "string"}))),
            _ => drop(properties.insert(format!("n{i}"), json!({"type": "object", "propertyNames": {"pattern": p}}))),
        }
    }
    json!({"type": "object", "properties": properties, "patternProperties": pattern_properties})
}

/// A provider with a Service worker (admitted without `--allow-worker-urls`) whose one driver
/// `kubernetes` has `schema` as its `configSchema`.
pub fn provider_with_schema(name: &str, schema: Value) -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxProvider",
        "metadata": {"name": name},
        "spec": {
            "pluginKey": "acme.hostile",
            "version": "1.0.0",
            "worker": {"service": {"namespace": "default", "name": "worker", "port": 8080}},
            "environmentDrivers": [{
                "driverKey": "kubernetes", "kind": "sandbox_provider", "displayName": "K",
                "configSchema": schema
            }]
        }
    })
}

/// `object` with its `spec` padded with unknown keys until the review is about `bytes` long.
pub fn flooded(mut object: Value, bytes: usize) -> Value {
    let spec = object["spec"].as_object_mut().expect("a spec");
    // Each key costs about its length plus 4 bytes (`"":0,`) in the review.
    for i in 0.. {
        let key = format!("unknownField{i}");
        if i * (key.len() + 4) > bytes {
            break;
        }
        spec.insert(key, json!(0));
    }
    object
}

pub fn lease(name: &str) -> Value {
    json!({
        "apiVersion": "sandcap.dev/v1alpha1",
        "kind": "SandboxLease",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"providerRef": {"name": "p", "driverKey": "kubernetes"}}
    })
}

/// An `admission.k8s.io/v1` CREATE review of `object`, as bytes.
pub fn review(object: &Value) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap_or("SandboxProvider");
    let resource = if kind == "SandboxLease" { "sandboxleases" } else { "sandboxproviders" };
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "sandcap.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "sandcap.dev", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "attacker"},
            "object": object
        }
    }))
    .expect("serializes")
}

/// Every hostile class as a review just under the body limit (or as large as the class needs),
/// by name: what the budget tests and the benchmark send.
pub fn reviews() -> Vec<(&'static str, Vec<u8>)> {
    let near_limit = MAX_BODY - 64 * 1024;
    let mut deep = json!("leaf");
    for _ in 0..120 {
        deep = json!([deep]);
    }
    vec![
        ("configSchema regexes", review(&provider_with_schema("regexes", costly_schema()))),
        ("unknown keys, provider", review(&flooded(provider_with_schema("flood", json!({})), near_limit))),
        ("unknown keys, lease", review(&flooded(lease("flood"), near_limit))),
        (
            "deep nesting",
            review(&json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
            "metadata": {"name": "deep"}, "spec": {"config": deep}})),
        ),
    ]
}

/// An honest review of about 1 KB, the baseline of the benchmark.
pub fn honest_review() -> Vec<u8> {
    let schema = json!({"type": "object", "properties": {"image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"}}});
    review(&provider_with_schema("honest", schema))
}

/// `sandcap run --webhook-only --tls-self-signed` on loopback ports it picks; killed on drop.
pub struct Sandcap {
    child: Child,
    pub webhook: String,
    pub admin: String,
}

impl Sandcap {
    pub async fn start() -> Sandcap {
        sandcap::tls::install_default_provider();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let report = dir.path().join("listening");
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandcap"))
            .args(["run", "--webhook-only", "--tls-self-signed"])
            .args(["--webhook-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--listen-report"])
            .arg(&report)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandcap starts");
        let listening = super::ports::listening(&report, &mut child).unwrap_or_else(|e| panic!("{e}"));
        let webhook = listening.webhook.expect("a webhook listener");
        let sandcap = Sandcap {
            child,
            webhook: format!("https://{webhook}/validate"),
            admin: format!("http://{}", listening.admin),
        };
        for _ in 0..200 {
            if reqwest::get(format!("{}/readyz", sandcap.admin)).await.is_ok_and(|r| r.status() == 200) {
                return sandcap;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("sandcap did not get ready");
    }

    /// Peak resident memory since the start, from /proc.
    pub fn peak(&self) -> u64 {
        super::peak_rss(self.child.id())
    }

    /// The field `name` of its /proc/<pid>/status.
    pub fn proc_status(&self, name: &str) -> Option<String> {
        super::proc_status(self.child.id(), name)
    }
}

impl Drop for Sandcap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().danger_accept_invalid_certs(true).timeout(Duration::from_secs(60)).build().unwrap()
}

/// What one review got, and how `/healthz` answered meanwhile.
pub struct Reviewed {
    pub status: u16,
    pub len: usize,
    pub elapsed: Duration,
    pub slowest_healthz: Duration,
}

impl Sandcap {
    /// Sends `body` to `/validate` while polling `/healthz` every 20 ms.
    pub async fn review_polling_healthz(&self, body: Vec<u8>) -> Reviewed {
        let started = Instant::now();
        let review = client().post(&self.webhook).header("content-type", "application/json").body(body).send();
        let review = tokio::spawn(async move {
            let response = review.await.expect("an answer");
            let status = response.status().as_u16();
            (status, response.bytes().await.expect("a body").len(), started.elapsed())
        });
        let mut slowest_healthz = Duration::ZERO;
        while !review.is_finished() {
            let asked = Instant::now();
            let healthz = reqwest::get(format!("{}/healthz", self.admin)).await.expect("/healthz answers");
            assert_eq!(healthz.status(), 200);
            slowest_healthz = slowest_healthz.max(asked.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (status, len, elapsed) = review.await.expect("the review task");
        Reviewed { status, len, elapsed, slowest_healthz }
    }
}
