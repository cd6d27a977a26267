//! The webhook's added latency: sequential creates of both kinds without a webhook, through a
//! webhook that only echoes the uid (`echo.rs`), and through sandcap's, rounds of each in turn.

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install::Install;
use crate::harness::objects::resource;
use crate::support::{all_true, lease, provider};
use crate::{NS, echo, median, ms, quantile};

/// Sequential creates of each kind in each round of the webhook's latency.
const CREATES: usize = 200;
/// Rounds through each webhook, in turn.
const WEBHOOK_ROUNDS: usize = 3;

/// [`CREATES`] sequential creates of `make(i)`; (median, p99).
async fn creates(
    client: &Client,
    kind: &str,
    namespace: Option<&str>,
    make: impl Fn(usize) -> Value,
) -> (Duration, Duration) {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource(kind)),
        None => Api::all_with(client.clone(), &resource(kind)),
    };
    let mut times = Vec::with_capacity(CREATES);
    for i in 0..CREATES {
        let object: DynamicObject = serde_json::from_value(make(i)).expect("object");
        let started = Instant::now();
        api.create(&PostParams::default(), &object).await.expect("create");
        times.push(started.elapsed());
    }
    times.sort();
    (quantile(&times, 0.5), quantile(&times, 0.99))
}

/// The creates of both kinds without a webhook, through a webhook that only echoes the uid (on
/// sandcap's transport, see `echo`), and through sandcap's, in turn ([`WEBHOOK_ROUNDS`] each): the
/// median of the rounds' medians and p99s, and what each webhook adds to them.
pub async fn latency(c: &Cluster, install: &Install, admin: &Client) {
    let worker_url = "http://127.0.0.1:9/rpc";
    let round = |tag: String| {
        let admin = admin.clone();
        async move {
            let leases =
                creates(&admin, "SandboxLease", Some(NS), |i| lease(NS, &format!("{tag}-{i}"), "p-0", json!({}))).await;
            let providers =
                creates(&admin, "SandboxProvider", None, |i| provider(&format!("{tag}-{i}"), worker_url, all_true()))
                    .await;
            [leases, providers]
        }
    };
    let (echo_port, _echo) = echo::start(c).await;
    let webhook = Sandcap::start(c, install, "bench-webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    webhook.ready().await;
    let mut rounds: [Vec<[(Duration, Duration); 2]>; 3] = Default::default();
    let mut tags = Vec::new();
    for r in 0..WEBHOOK_ROUNDS {
        for (w, port) in [(0, None), (1, Some(echo_port)), (2, Some(webhook.webhook_port))] {
            let _registration = port.map(|port| install.register_webhook(c, port, &c.ca.pem));
            // The apiserver picks a changed registration up within a second or so.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let tag = format!("webhook-{r}-{w}");
            rounds[w].push(round(tag.clone()).await);
            tags.push(tag);
        }
    }
    let of = |w: usize, kind: usize, pick: fn((Duration, Duration)) -> Duration| {
        median(rounds[w].iter().map(|r| pick(r[kind])).collect())
    };
    println!(
        "creates through the apiserver, {CREATES} sequential each, median of {WEBHOOK_ROUNDS} rounds in turn (median / p99):"
    );
    for (kind, name) in ["SandboxLease", "SandboxProvider"].into_iter().enumerate() {
        let [none, echo, ours] = [0, 1, 2].map(|w| (of(w, kind, |r| r.0), of(w, kind, |r| r.1)));
        let added = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1000.0;
        println!(
            "  {name:<16} no webhook {} / {} | echo {} / {} | sandcap {} / {} | added by echo {:+.2} / {:+.2} ms, by sandcap {:+.2} / {:+.2} ms (sandcap - echo at p99: {:+.2} ms)",
            ms(none.0),
            ms(none.1),
            ms(echo.0),
            ms(echo.1),
            ms(ours.0),
            ms(ours.1),
            added(echo.0, none.0),
            added(echo.1, none.1),
            added(ours.0, none.0),
            added(ours.1, none.1),
            added(ours.1, echo.1),
        );
    }
    let providers = Api::<DynamicObject>::all_with(admin.clone(), &resource("SandboxProvider"));
    for tag in tags {
        for i in 0..CREATES {
            let _ = providers.delete(&format!("{tag}-{i}"), &Default::default()).await;
        }
    }
    let leases: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    leases.delete_collection(&Default::default(), &ListParams::default()).await.expect("delete leases");
}
