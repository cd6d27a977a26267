use std::time::Duration;

use crate::{
    Ca, SecretVolume, eventually, review_full_provider, sample, served_serial, serving, start, wait_ready, wait_serving,
};

#[tokio::test]
async fn readyz_waits_for_a_certificate_and_metrics_show_it() {
    let ca = Ca::new();
    let mut volume = SecretVolume::new();
    // The Secret is not mounted yet (an optional volume, filled in later).
    let harness = start(volume.source()).await;
    assert_eq!(reqwest::get(harness.admin_url("/healthz")).await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let not_ready = reqwest::get(harness.admin_url("/readyz")).await.unwrap();
    assert_eq!(not_ready.status(), 503);

    let leaf = ca.leaf(7);
    volume.publish(&leaf.cert_pem, &leaf.key_pem);
    wait_ready(&harness).await;
    let metrics = reqwest::get(harness.admin_url("/metrics")).await.unwrap();
    assert!(metrics.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let metrics = metrics.text().await.unwrap();
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), leaf.not_after as f64, "{metrics}");
    assert_eq!(sample(&metrics, r#"sandcap_certificate_reloads_total{result="success"}"#), 1.0, "{metrics}");
    // The missing files were one failure, counted once however many polls saw them.
    assert_eq!(sample(&metrics, r#"sandcap_certificate_reloads_total{result="failure"}"#), 1.0, "{metrics}");
}

#[tokio::test]
async fn certificates_rotate_without_a_restart_and_bad_pairs_are_ignored() {
    let (harness, client, ca, mut volume) = serving().await;
    let (a, b) = (ca.leaf(0xA1), ca.leaf(0xB2));
    assert_eq!(served_serial(&ca, harness.webhook).await, 1);
    volume.publish(&a.cert_pem, &a.key_pem);
    wait_serving(&ca, harness.webhook, a.serial).await;

    // A connection opened before the swap keeps working across it.
    review_full_provider(&client, &harness).await;
    volume.publish(&b.cert_pem, &b.key_pem);
    wait_serving(&ca, harness.webhook, b.serial).await;
    review_full_provider(&client, &harness).await;
    let metrics = harness.metrics().await;
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), b.not_after as f64);
    let failures = |metrics: &str| sample(metrics, r#"sandcap_certificate_reloads_total{result="failure"}"#);
    assert_eq!(failures(&metrics), 0.0);

    // A certificate with another certificate's key.
    let (c, d) = (ca.leaf(0xC3), ca.leaf(0xD4));
    volume.publish(&c.cert_pem, &d.key_pem);
    eventually("the mismatch to be counted", || async { failures(&harness.metrics().await) == 1.0 }).await;
    assert_eq!(served_serial(&ca, harness.webhook).await, b.serial);

    // A certificate written in place and caught half way.
    std::fs::write(volume.dir.path().join("..data").join("tls.crt"), &c.cert_pem[..c.cert_pem.len() / 2]).unwrap();
    std::fs::write(volume.dir.path().join("..data").join("tls.key"), &c.key_pem).unwrap();
    eventually("the half-written pair to be counted", || async { failures(&harness.metrics().await) >= 2.0 }).await;
    assert_eq!(served_serial(&ca, harness.webhook).await, b.serial);
    let metrics = harness.metrics().await;
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), b.not_after as f64);

    // Finished writing: now it loads.
    std::fs::write(volume.dir.path().join("..data").join("tls.crt"), &c.cert_pem).unwrap();
    wait_serving(&ca, harness.webhook, c.serial).await;
}
