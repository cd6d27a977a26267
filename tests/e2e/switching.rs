//! Switching a cluster's contract version, v1 to v2 and back, by the chart's `contract.version`:
//! the CRDs by `helm upgrade` of the chart's CRD part (real Helm), then sandcap restarted with the
//! chart's `SANDCAP_CONTRACT`. Every stored object stays readable and writable, every status is
//! resolved again under the new version; back on v1, a provider that declares v2's keys is kept
//! (a label update is admitted: the CRD and the webhook ratchet) but refused by the audit, and its
//! leases grant nothing. Before each switch, `sandcap plan` predicts it: the objects the new
//! version refuses and the capabilities each lease gains or loses are what the statuses show
//! afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use sandcap_core::versions::ContractVersion::{self, V1, V2};
use serde_json::{Value, json};

use crate::harness::binary::{Sandcap, sandcap};
use crate::harness::cluster::Cluster;
use crate::harness::contracts::{ADDED_IN_V2, expected, lease_reasons, resolved_under, values_of};
use crate::harness::helm::{adopt, crd_chart, disown, helm};
use crate::harness::install::{self, Install, WebhookRegistration, path_str};
use crate::harness::objects::{condition, delete, resource};
use crate::support::{Worker, all_true, all_true_of, lease, ok, provider};

const NS: &str = "e2e-switch";
const SIX: &str = "e2e-switch-six";
const NINE: &str = "e2e-switch-nine";

/// sandcap as the chart runs it under `version` (webhook and controllers in one process), its
/// webhook registered; both go when dropped.
struct Operator {
    _registration: WebhookRegistration,
    sandcap: Sandcap,
    started: Instant,
}

impl Operator {
    async fn start(c: &Cluster, install: &Install, version: ContractVersion) -> Operator {
        let started = Instant::now();
        let sandcap = Sandcap::start(c, install, &format!("switch-{version}"), &[("SANDCAP_PROBE_INTERVAL", "2s")]);
        sandcap.ready().await;
        let _registration = install.register_webhook(c, sandcap.webhook_port, &c.ca.pem);
        Operator { _registration, sandcap, started }
    }

    fn stop(self) {
        assert!(self.sandcap.problems().is_empty(), "{:?}", self.sandcap.problems());
    }
}

/// The cluster, the CRD chart's directory (its release installed) and the chart rendered for each
/// version (rendered once each: Helm takes seconds).
struct Switching<'a> {
    c: &'a Cluster,
    chart: &'a str,
    installs: Vec<(ContractVersion, Install)>,
}

impl Switching<'_> {
    fn install(&self, version: ContractVersion) -> &Install {
        &self.installs.iter().find(|(v, _)| *v == version).expect("the chart rendered for every version").1
    }
}

/// Plans the switch to `to`, then makes it: `helm upgrade` of the CRD chart, sandcap restarted
/// under `to`; waits until every one of `leases` (in [`NS`]) and `providers` is resolved again
/// under `to`, and holds the plan to what the statuses then show. Returns the new operator, the
/// plan's exit code and what it predicted.
async fn switch(
    s: &Switching<'_>,
    from: Operator,
    to: ContractVersion,
    providers: &[&str],
    leases: &[&str],
) -> (Operator, Option<i32>, Changes) {
    let (c, chart) = (s.c, s.chart);
    let admin = c.admin().await;
    let before = observe(&admin).await;
    let (code, predicted) = plan(c, to);
    from.stop();
    helm(c, &["upgrade", chart, &values_of(to).to_string(), "--force-conflicts"]).expect("the upgrade");
    let served = ok("get crd", c.kubectl(&["get", "crd", "sandboxproviders.sandcap.dev", "-o", "json"]));
    let refuses_v2_keys = ADDED_IN_V2.iter().all(|key| served.contains(&format!("'{key}' in self")));
    assert_eq!(refuses_v2_keys, to == V1, "contract {to}'s CRDs refuse v2's keys only under v1");
    let operator = Operator::start(c, s.install(to), to).await;
    for name in providers {
        resolved_under(&admin, "SandboxProvider", None, name, to).await;
    }
    for name in leases {
        resolved_under(&admin, "SandboxLease", Some(NS), name, to).await;
    }
    println!("to contract {to}: every status resolved again {:.1?} after sandcap started", operator.started.elapsed());
    let after = observe(&admin).await;
    assert_eq!(predicted, happened(&before, &after), "sandcap plan --contract {to}, and what the switch did");
    (operator, code, predicted)
}

/// `kubectl label` of one object as admin: whether it was admitted, and what kubectl said.
fn label(c: &Cluster, what: &[&str], label: &str) -> (bool, String) {
    let o = c.kubectl(&[&["label", "--overwrite"], what, &[label]].concat());
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// What a switch did to this scenario's objects, or what a plan says it will do: `(kind, name,
/// admission)` per object whose admission changes or that the new version refuses, and `(lease,
/// capability, change)` per capability a lease gains or loses.
#[derive(Debug, Default, PartialEq, Eq)]
struct Changes {
    objects: BTreeSet<(String, String, String)>,
    capabilities: BTreeSet<(String, String, String)>,
}

/// `sandcap plan --contract to -o json` as admin, judging as the operator runs (worker URLs on
/// loopback allowed): its exit code, and what it says of this scenario's objects (the cluster
/// holds the other scenarios' too).
fn plan(c: &Cluster, to: ContractVersion) -> (Option<i32>, Changes) {
    let args = ["plan", "--contract", to.as_str(), "-o", "json", "--allow-worker-urls"];
    let o = sandcap(c, &[&args[..], &["--worker-url-allowed-cidrs", "127.0.0.0/8"]].concat());
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("plan -o json: {e}: {o:?}"));
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mine = |o: &Value| o["namespace"] == NS || [SIX, NINE].contains(&o["name"].as_str().unwrap_or_default());
    let items = |key: &str| plan[key].as_array().cloned().unwrap_or_default();
    let objects = items("objects")
        .iter()
        .filter(|o| mine(o))
        .map(|o| (text(&o["kind"]), text(&o["name"]), text(&o["admission"])))
        .collect();
    let capabilities = items("leases")
        .iter()
        .filter(|l| l["namespace"] == NS)
        .flat_map(|l| {
            let changes = l["changes"].as_array().cloned().unwrap_or_default();
            changes
                .iter()
                .map(|ch| (text(&l["name"]), text(&ch["capability"]), text(&ch["change"])))
                .collect::<Vec<_>>()
        })
        .collect();
    (o.status.code(), Changes { objects, capabilities })
}

/// This scenario's objects as their statuses stand: `(kind, name) -> Valid`, `(lease, key) ->
/// granted`.
struct Observed {
    valid: BTreeMap<(String, String), bool>,
    granted: BTreeMap<(String, String), bool>,
}

async fn observe(client: &Client) -> Observed {
    let list = |kind: &str, namespace: Option<&str>| {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource(kind)),
            None => Api::all_with(client.clone(), &resource(kind)),
        };
        async move { api.list(&ListParams::default()).await.expect("a list").items }
    };
    let providers = list("SandboxProvider", None).await;
    let providers = providers.into_iter().filter(|p| [SIX, NINE].contains(&p.metadata.name.as_deref().unwrap_or("")));
    let leases = list("SandboxLease", Some(NS)).await;
    let mut observed = Observed { valid: BTreeMap::new(), granted: BTreeMap::new() };
    for (kind, object) in
        providers.map(|p| ("SandboxProvider", p)).chain(leases.into_iter().map(|l| ("SandboxLease", l)))
    {
        let name = object.metadata.name.clone().unwrap_or_default();
        let status = &object.data["status"];
        observed.valid.insert(
            (kind.to_string(), name.clone()),
            condition(status, "Valid").is_some_and(|v| v["status"] == "True"),
        );
        if kind == "SandboxLease" {
            for (key, on) in status["capabilities"].as_object().cloned().unwrap_or_default() {
                observed.granted.insert((name.clone(), key), on == true);
            }
        }
    }
    observed
}

/// What happened between two observations, in a plan's words (a key of one version only is off
/// under the other).
fn happened(before: &Observed, after: &Observed) -> Changes {
    let mut changes = Changes::default();
    for ((kind, name), was) in &before.valid {
        let is = after.valid[&(kind.clone(), name.clone())];
        let admission = match (was, is) {
            (true, false) => "refused",
            (false, false) => "stillRefused",
            (false, true) => "admitted",
            (true, true) => continue,
        };
        changes.objects.insert((kind.clone(), name.clone(), admission.to_string()));
    }
    for (lease, key) in before.granted.keys().chain(after.granted.keys()) {
        let on = |o: &Observed| o.granted.get(&(lease.clone(), key.clone())).copied().unwrap_or(false);
        let change = match (on(before), on(after)) {
            (false, true) => "gains",
            (true, false) => "loses",
            _ => continue,
        };
        changes.capabilities.insert((lease.clone(), key.clone(), change.to_string()));
    }
    changes
}

/// What a switch between v1 and v2 does to this scenario, or what its plan says: the provider of
/// the nine keys gets `admission`, and its lease `change`s every key of v2; nothing else changes.
fn the_nine_keys(admission: &str, change: &str) -> Changes {
    let objects = BTreeSet::from([("SandboxProvider".to_string(), NINE.to_string(), admission.to_string())]);
    let capabilities = V2.contract().capabilities().map(|c| ("nine".into(), c.key().into(), change.into())).collect();
    Changes { objects, capabilities }
}

/// Back to v1: the provider of the nine keys is kept, refused by today's rules, and grants
/// nothing; the plan said so. Returns sandcap under v1.
async fn back_to_v1_the_nine_keys_are_refused(s: &Switching<'_>, admin: &Client, v2: Operator) -> Operator {
    let all_leases = ["reuse", "job", "plain", "nine"];
    let (v1, code, predicted) = switch(s, v2, V1, &[SIX, NINE], &all_leases).await;
    assert_eq!(code, Some(3), "plan --contract v1 exits 3 when it refuses a stored object");
    assert_eq!(predicted, the_nine_keys("refused", "loses"));
    lease_reasons(admin, NS, "reuse", V1, &expected(V1, &[])).await;
    let all_off = (&V1.contract().capabilities().map(|c| c.key()).collect::<Vec<_>>()[..], "ProviderNotValid");
    let nine = lease_reasons(admin, NS, "nine", V1, &expected(V1, &[all_off])).await;
    assert_eq!(condition(&nine, "Resolved").map(|r| &r["reason"]), Some(&json!("ProviderNotValid")), "{nine:#}");
    let (admitted, said) = label(s.c, &["sbp", NINE], "e2e/contract=v1");
    assert!(admitted, "a label update of a stored object is ratcheted: {said}");
    let status = resolved_under(admin, "SandboxProvider", None, NINE, V1).await;
    let valid = condition(&status, "Valid").expect("Valid");
    let message = valid["message"].as_str().unwrap_or_default();
    assert_eq!(valid["status"], "False", "{status:#}");
    for key in ADDED_IN_V2 {
        assert!(message.contains(key), "Valid does not name {key}: {message}");
    }
    assert_eq!(condition(&status, "Ready").map(|r| &r["reason"]), Some(&json!("ProviderNotValid")), "{status:#}");
    // And a plan back to v2 (not carried out) shows the other side: the provider admitted again and
    // its lease gaining every key.
    let (code, predicted) = plan(s.c, V2);
    assert_eq!(code, Some(1), "plan --contract v2 exits 1 when leases gain and nothing is refused");
    assert_eq!(predicted, the_nine_keys("admitted", "gains"));
    v1
}

pub async fn switching_v1_v2_v1_keeps_every_object(c: Arc<Cluster>) {
    // The admin's CRDs of v1, as the other scenarios leave them, taken over by a release.
    install::crds(&c);
    install::namespaces(&c, &[install::NAMESPACE, NS]);
    adopt(&c);
    let dir = c.dir.join("switch-chart");
    let _ = std::fs::remove_dir_all(&dir);
    let chart = crd_chart(&dir);
    let chart = path_str(&chart);
    helm(&c, &["install", chart, &values_of(V1).to_string(), "--force-conflicts"]).expect("the install");
    let worker = Worker::of_contract(V2);
    let admin = c.admin().await;
    let reuse = json!({"policy": "ReuseByEnvironment", "environment": "env-s"});
    let mut six = provider(SIX, &worker.url, all_true());
    let six_leases = ["reuse", "job", "plain"];
    let mut installs = Vec::new();
    for version in [V1, V2] {
        installs.push((version, Install::chart(&c, values_of(version)).await));
    }
    let s = Switching { c: &c, chart, installs };

    // Under v1: a provider of the six keys and its leases.
    let v1 = Operator::start(&c, s.install(V1), V1).await;
    install::apply(
        &c,
        &[
            six.clone(),
            lease(NS, "reuse", SIX, reuse.clone()),
            lease(NS, "job", SIX, json!({"policy": "ReuseByEnvironment", "environment": "env-s", "backend": "job"})),
            lease(NS, "plain", SIX, json!({})),
        ],
    );
    resolved_under(&admin, "SandboxProvider", None, SIX, V1).await;
    for name in six_leases {
        resolved_under(&admin, "SandboxLease", Some(NS), name, V1).await;
    }
    lease_reasons(&admin, NS, "reuse", V1, &expected(V1, &[])).await;

    // To v2: what was stored is read, written and resolved again under v2. Its keys are opt-in,
    // so no lease gains any, and v2 refuses nothing v1 admits.
    let (v2, code, predicted) = switch(&s, v1, V2, &[SIX], &six_leases).await;
    assert!(matches!(code, Some(0 | 1)), "plan --contract v2 exits {code:?}");
    assert_eq!(predicted, Changes::default());
    let not_opted_in = (&ADDED_IN_V2[..], "NotOptedIn");
    lease_reasons(&admin, NS, "reuse", V2, &expected(V2, &[not_opted_in])).await;
    let sync = ["nativeSyncIn", "nativeSyncOut"];
    lease_reasons(&admin, NS, "job", V2, &expected(V2, &[not_opted_in, (&sync, "NarrowedByJobBackend")])).await;
    for what in [&["sbp", SIX][..], &["sbl", "-n", NS, "reuse"]] {
        let (admitted, said) = label(&c, what, "e2e/contract=v2");
        assert!(admitted, "a label update under v2: {said}");
    }
    six["spec"]["version"] = json!("1.5.0");
    install::apply(&c, &[six.clone()]);
    resolved_under(&admin, "SandboxProvider", None, SIX, V2).await;
    // A provider of the nine keys, and a lease that gets all of them.
    install::apply(&c, &[provider(NINE, &worker.url, all_true_of(V2)), lease(NS, "nine", NINE, reuse.clone())]);
    lease_reasons(&admin, NS, "nine", V2, &expected(V2, &[])).await;

    let v1 = back_to_v1_the_nine_keys_are_refused(&s, &admin, v2).await;

    v1.stop();
    ok("delete leases", c.kubectl(&["delete", "sbl", "-n", NS, "--all"]));
    for name in [SIX, NINE] {
        delete(&admin, "SandboxProvider", None, name).await;
    }
    let info = helm(&c, &["uninstall"]).expect("the uninstall");
    assert!(info.contains("kept due to the resource policy"), "{info}");
    disown(&c);
    install::crds(&c);
}
