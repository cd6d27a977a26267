use sandcap::listener;
use sandcap_core::validation::Options;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::{
    example, post, post_review, read_until_closed, review, review_full_provider, sample, serving, tls_connect,
    webhook_denied,
};

#[tokio::test]
async fn an_allowed_provider_and_lease() {
    let (harness, client, _ca, _volume) = serving().await;
    for file in ["provider-full.yaml", "provider-legacy.yaml", "lease-reuse.yaml", "lease-job.yaml"] {
        let response = post_review(&client, &harness, &review("CREATE", &example(file), None)).await;
        assert_eq!(response["allowed"], true, "{file}: {response}");
        assert!(response.get("status").is_none());
    }
    let metrics = harness.metrics().await;
    let series = r#"sandcap_admission_requests_total{kind="SandboxProvider",operation="CREATE",verdict="allowed"}"#;
    assert_eq!(sample(&metrics, series), 2.0, "{metrics}");
    assert!(metrics.contains(r#"sandcap_admission_duration_seconds_count{kind="SandboxLease"} 2"#), "{metrics}");
}

#[tokio::test]
async fn a_denied_provider_gets_the_contract_message_and_its_warnings() {
    let (harness, client, _ca, _volume) = serving().await;
    // The removed keys are the CRD's to reject now; an unknown field is still the webhook's.
    let mut provider = example("provider-removed-key.yaml");
    provider["spec"]["environmentDrivers"][0]["sandboxCapabilities"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| !k.starts_with("concurrent"));
    provider["spec"]["environmentDrivers"][0]["displayname"] = json!("typo");
    let response = post_review(&client, &harness, &review("CREATE", &provider, None)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.environmentDrivers[0].displayname: unknown field"),
        "{response}"
    );
    // Word for word what `sandcap validate` says about the same object.
    let offline = sandcap_core::validation::review(&provider, None, &Options::default());
    assert_eq!(response["status"]["message"], offline.message());
    assert_eq!(response["warnings"], json!(offline.warnings));
    let metrics = harness.metrics().await;
    let series = r#"sandcap_admission_requests_total{kind="SandboxProvider",operation="CREATE",verdict="denied"}"#;
    assert_eq!(sample(&metrics, series), 1.0, "{metrics}");
}

#[tokio::test]
async fn an_allowed_provider_carries_warnings_each_under_120_characters() {
    let (harness, client, _ca, _volume) = serving().await;
    let mut provider = example("provider-full.yaml");
    provider["spec"]["environmentDrivers"][1]["sandboxCapabilities"] = json!({"nativeSyncIn": true});
    provider["spec"]["environmentDrivers"][0]["supportsReusableLeases"] = json!(true);
    let response = post_review(&client, &harness, &review("CREATE", &provider, None)).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        response["warnings"],
        json!([
            "spec.environmentDrivers[0]: supportsReusableLeases=true and sandboxCapabilities.reusableLeases=true; nested wins",
            "spec.environmentDrivers[1]: sandboxCapabilities is never read unless kind is sandbox_provider"
        ])
    );
    let warnings = response["warnings"].as_array().unwrap();
    assert!(warnings.iter().all(|w| w.as_str().unwrap().chars().count() < 120), "{warnings:?}");
}

#[tokio::test]
async fn updates_of_immutable_fields_are_left_to_the_crd() {
    // `self == oldSelf` in the CRD (core/tests/schema) refuses them before the webhook is asked.
    let (harness, client, _ca, _volume) = serving().await;
    let old = example("provider-full.yaml");
    let mut new = old.clone();
    new["spec"]["pluginKey"] = json!("other.plugin");
    assert_eq!(post_review(&client, &harness, &review("UPDATE", &new, Some(&old))).await["allowed"], true);
}

#[tokio::test]
async fn updates_of_objects_stored_with_problems_are_allowed_with_warnings() {
    let (harness, client, _ca, _volume) = serving().await;
    // Stored while no webhook ran (a typo'd field the CRD keeps): a CREATE of it is denied.
    let stored = webhook_denied();
    let mut labelled = stored.clone();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let response = post_review(&client, &harness, &review("UPDATE", &labelled, Some(&stored))).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings: Vec<&str> = response["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    let prefix = "already stored, not blocking this update: spec.environmentDrivers[0].displayname: ";
    assert!(warnings.iter().any(|w| w.starts_with(prefix)), "{warnings:?}");
    assert!(warnings.iter().all(|w| w.len() < 120), "{warnings:?}");

    // What the update brings in is denied.
    let mut broken = labelled.clone();
    broken["spec"]["environmentDrivers"][0]["configSchema"] = json!({"type": "strin"});
    let response = post_review(&client, &harness, &review("UPDATE", &broken, Some(&stored))).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("spec.environmentDrivers[0].configSchema: ") && !message.contains("; "), "{message}");
}

#[tokio::test]
async fn dry_run_requests_are_reviewed_like_any_other() {
    let (harness, client, _ca, _volume) = serving().await;
    for (object, allowed) in [(example("provider-full.yaml"), true), (webhook_denied(), false)] {
        let mut dry = review("CREATE", &object, None);
        dry["request"]["dryRun"] = json!(true);
        let wet = post_review(&client, &harness, &review("CREATE", &object, None)).await;
        let dry = post_review(&client, &harness, &dry).await;
        assert_eq!(dry["allowed"], allowed);
        assert_eq!(dry, wet);
    }
}

#[tokio::test]
async fn deletes_and_other_kinds_are_allowed_without_review() {
    let (harness, client, _ca, _volume) = serving().await;
    let broken = json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": "b"}});
    let mut delete = review("DELETE", &Value::Null, Some(&broken));
    delete["request"]["kind"]["kind"] = json!("SandboxProvider");
    assert_eq!(post_review(&client, &harness, &delete).await["allowed"], true);
    let mut pod = review("CREATE", &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}), None);
    pod["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    assert_eq!(post_review(&client, &harness, &pod).await["allowed"], true);
}

#[tokio::test]
async fn hostile_bodies_get_a_client_error_with_a_reason() {
    let (harness, client, _ca, _volume) = serving().await;
    let provider = example("provider-full.yaml");
    let mut v1beta1 = review("CREATE", &provider, None);
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut no_request = review("CREATE", &provider, None);
    no_request.as_object_mut().unwrap().remove("request");
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"{not json".to_vec(), "the body is not JSON"),
        ("empty", Vec::new(), "the body is not JSON"),
        ("binary", vec![0xff, 0x00, 0xfe, 0x01], "the body is not JSON"),
        ("a JSON list", b"[1, 2]".to_vec(), "not an AdmissionReview object"),
        ("another object", br#"{"apiVersion": "v1", "kind": "Pod"}"#.to_vec(), "apiVersion: unsupported"),
        ("v1beta1", serde_json::to_vec(&v1beta1).unwrap(), "apiVersion: unsupported \"admission.k8s.io/v1beta1\""),
        ("no request", serde_json::to_vec(&no_request).unwrap(), "request: required"),
        ("deeply nested", deep.into_bytes(), "recursion limit exceeded"),
    ];
    for (case, body, reason) in cases {
        let (status, answer) = post(&client, &harness, body).await;
        assert_eq!(status, 400, "{case}: {answer}");
        let response = &answer["response"];
        assert_eq!((&response["allowed"], &response["status"]["code"]), (&json!(false), &json!(400)), "{case}");
        assert_eq!(response["status"]["reason"], "BadRequest", "{case}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{case}: {message}");
    }
    // Deeply nested inside a well-formed review: within serde_json's 128 levels it reaches the
    // rules (schema compilation included) without exhausting the stack.
    let mut schema = json!({"type": "object"});
    for _ in 0..118 {
        schema = json!({"not": schema});
    }
    let mut deep_schema = provider.clone();
    deep_schema["spec"]["environmentDrivers"][0]["configSchema"] = schema;
    let response = post_review(&client, &harness, &review("CREATE", &deep_schema, None)).await;
    assert!(response["allowed"].is_boolean());
    let metrics = harness.metrics().await;
    assert_eq!(
        sample(&metrics, r#"sandcap_admission_requests_total{kind="other",operation="unknown",verdict="invalid"}"#),
        8.0
    );
}

#[tokio::test]
async fn objects_of_the_wrong_shape_are_denied_with_the_field() {
    let (harness, client, _ca, _volume) = serving().await;
    let mut not_an_object = review("CREATE", &example("provider-full.yaml"), None);
    not_an_object["request"]["object"] = json!("a string");
    let response = post_review(&client, &harness, &not_an_object).await;
    assert_eq!(response["status"]["code"], 400);
    assert_eq!(response["status"]["message"], "request.object: required for CREATE, a JSON object");

    // Wrong types are the CRD's to report (the apiserver asks the webhook only about objects its
    // schema admitted); the webhook skips them and still names the problems that are its own.
    let mut wrong = webhook_denied();
    wrong["spec"]["version"] = json!(14);
    wrong["spec"]["worker"] = json!("svc");
    let response = post_review(&client, &harness, &review("CREATE", &wrong, None)).await;
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("spec.environmentDrivers[0].displayname: unknown field"), "{message}");
}

#[tokio::test]
async fn oversized_bodies_wrong_paths_and_methods_are_refused() {
    let (harness, client, _ca, _volume) = serving().await;
    let huge = vec![b' '; listener::MAX_BODY + 1];
    assert_eq!(post(&client, &harness, huge).await.0, 413);
    let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status() };
    assert_eq!(status(client.post(harness.url("/mutate")).body("{}")).await, 404);
    assert_eq!(status(client.get(harness.url("/validate"))).await, 405);
    assert_eq!(status(client.put(harness.url("/validate")).body("{}")).await, 405);
    // Still serving.
    review_full_provider(&client, &harness).await;
}

#[tokio::test]
async fn an_oversized_chunked_body_is_cut_off_while_streaming() {
    let (harness, _client, ca, _volume) = serving().await;
    let tls = tls_connect(&ca, harness.webhook, &[]).await;
    let (mut reader, mut writer) = tokio::io::split(tls);
    // Written concurrently with reading: the server stops reading once the limit is passed.
    tokio::spawn(async move {
        let head = b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        writer.write_all(head).await?;
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..=listener::MAX_BODY / chunk.len() + 1 {
            writer.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await?;
            writer.write_all(&chunk).await?;
            writer.write_all(b"\r\n").await?;
        }
        writer.write_all(b"0\r\n\r\n").await
    });
    let answer = String::from_utf8_lossy(&read_until_closed(&mut reader).await).to_string();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}
