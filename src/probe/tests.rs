//! The probe's rules, without a worker: answers, address classes, endpoints.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::answer::MAX_METHODS;
use super::*;

fn cidrs(list: &[&str]) -> AllowedCidrs {
    AllowedCidrs::new(list.iter().map(|c| c.parse().unwrap()))
}

fn policy(allow_urls: bool, allowed_cidrs: AllowedCidrs) -> WorkerPolicy {
    WorkerPolicy { allow_urls, allowed_cidrs }
}

/// URLs allowed, to no refused address.
fn urls() -> WorkerPolicy {
    policy(true, AllowedCidrs::default())
}
use sandcap_core::addresses::{AddressClass, AllowedCidrs};
use sandcap_core::api::ServiceRef;

fn answer(v: Value) -> Result<Vec<String>, ProbeError> {
    parse_answer(v.to_string().as_bytes(), 7).map(|a| a.methods)
}

#[test]
fn good_answer_is_sorted_and_deduplicated() {
    let got = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true,
        "supportedMethods": ["environmentSyncOut", "environmentExecute", "environmentSyncOut"]}}));
    assert_eq!(got.unwrap(), ["environmentExecute", "environmentSyncOut"]);
}

#[test]
fn an_answer_without_supported_methods_lists_none_and_so_verifies_nothing() {
    for result in [json!({"ok": true}), json!({"ok": true, "supportedMethods": null})] {
        let got = answer(json!({"jsonrpc": "2.0", "id": 7, "result": result}));
        assert_eq!(got.unwrap(), Vec::<String>::new(), "{result}");
    }
}

#[test]
fn every_malformed_shape_fails_without_quoting_values() {
    let secret = "s3cr3t-token";
    let cases = [
        json!({"jsonrpc": "1.0", "id": 7, "result": {"ok": true, "supportedMethods": []}}),
        json!({"jsonrpc": "2.0", "id": 8, "result": {"ok": true, "supportedMethods": [secret]}}),
        json!({"jsonrpc": "2.0", "id": "7", "result": {"ok": true, "supportedMethods": []}}),
        json!({"jsonrpc": "2.0", "id": 7}),
        json!({"jsonrpc": "2.0", "id": 7, "result": secret}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": secret, "supportedMethods": []}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"supportedMethods": []}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": secret}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": [1]}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": [format!("a b{secret}")]}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": vec!["m"; MAX_METHODS + 1]}}),
    ];
    for case in cases {
        let err = answer(case.clone()).expect_err(&case.to_string());
        assert_eq!(err.reason(), "malformed", "{case}");
        assert!(!err.to_string().contains(secret), "{err}");
    }
    let err = parse_answer(format!("not json {secret}").as_bytes(), 7).unwrap_err();
    assert_eq!(err, ProbeError::NotJson { line: 1, column: 2 });
    assert_eq!(err.to_string(), "the answer is not a JSON-RPC object (line 1, column 2)");
}

#[test]
fn ok_false_and_rpc_errors_are_named_by_class_and_code_only() {
    let err = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": false}})).unwrap_err();
    assert_eq!(err.to_string(), "the worker answered ok: false");
    let secret = "ami-role AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG";
    let err = answer(json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": secret}})).unwrap_err();
    assert_eq!(err.to_string(), "the worker answered JSON-RPC error -32601");
    let err = answer(json!({"jsonrpc": "2.0", "id": 7, "error": {"message": secret, "data": secret}})).unwrap_err();
    assert_eq!(err.to_string(), "the worker answered JSON-RPC error without a code");
    assert_eq!(err.reason(), "rpc_error");
}

#[test]
fn service_endpoint_defaults_path_and_rejects_odd_names() {
    let service = |name: &str, path: Option<&str>| WorkerRef {
        service: Some(ServiceRef {
            namespace: "sandbox-system".into(),
            name: name.into(),
            port: 8080,
            path: path.map(Into::into),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        endpoint(&service("acme-worker", None), &WorkerPolicy::default()).unwrap().as_str(),
        "http://acme-worker.sandbox-system.svc:8080/"
    );
    assert_eq!(
        endpoint(&service("acme-worker", Some("/rpc")), &WorkerPolicy::default()).unwrap().as_str(),
        "http://acme-worker.sandbox-system.svc:8080/rpc"
    );
    for name in ["evil.com:80/x?", "Upper", "", "-x", "a@b"] {
        assert!(endpoint(&service(name, None), &WorkerPolicy::default()).is_err(), "{name}");
    }
    assert!(endpoint(&service("w", Some("rpc")), &WorkerPolicy::default()).is_err());
    // A Service named like a refused host is still a cluster name under its namespace.
    assert!(endpoint(&service("localhost", None), &WorkerPolicy::default()).is_ok());
    assert!(endpoint(&service("metadata", None), &WorkerPolicy::default()).is_ok());
}

#[test]
fn worker_urls_need_the_flag_and_are_redacted() {
    let worker = WorkerRef { url: Some("https://user:pw@w.example:9443/rpc?token=abc".into()), ..Default::default() };
    let refused = endpoint(&worker, &WorkerPolicy::default()).unwrap_err();
    assert_eq!(refused.reason(), "endpoint");
    assert!(refused.to_string().contains("--allow-worker-urls") && !refused.to_string().contains("pw"));
    let url = endpoint(&worker, &urls()).unwrap();
    assert_eq!(redacted(&url), "https://w.example:9443/rpc");
    let bad = WorkerRef { url: Some("file:///etc/passwd".into()), ..Default::default() };
    assert!(endpoint(&bad, &urls()).unwrap_err().to_string().contains("only http and https"));
    assert!(endpoint(&WorkerRef::default(), &urls()).is_err());
}

#[test]
fn refused_worker_urls_fail_closed_with_their_class() {
    let metadata = WorkerRef { url: Some("http://169.254.169.254/latest/meta-data/".into()), ..Default::default() };
    let error = endpoint(&metadata, &urls()).unwrap_err();
    assert_eq!(error, ProbeError::RefusedAddress(AddressClass::Metadata));
    assert_eq!(error.reason(), "refused_address");
    assert_eq!(
        error.to_string(),
        "the worker's host is a refused address (cloud metadata); worker URLs reach one only where the \
         operator's --worker-url-allowed-cidrs allows it"
    );
    assert!(endpoint(&metadata, &policy(true, cidrs(&["169.254.169.254/32"]))).is_ok());
}

/// A prober whose resolver answers from `table` (a name not in it does not resolve).
fn prober_resolving(table: &[(&str, &[&str])], allowed: AllowedCidrs) -> Prober {
    let table: std::collections::HashMap<String, Vec<SocketAddr>> = table
        .iter()
        .map(|(name, ips)| (name.to_string(), ips.iter().map(|ip| SocketAddr::new(ip.parse().unwrap(), 0)).collect()))
        .collect();
    let table = Arc::new(table);
    let lookup: resolver::Lookup = Arc::new(move |name| {
        let found = table.get(&name).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound));
        Box::pin(async move { found })
    });
    Prober::with_lookup(Duration::from_secs(2), policy(false, allowed), "test", lookup).unwrap()
}

fn service_provider(port: u16) -> SandboxProvider {
    let service =
        ServiceRef { namespace: "team-a".into(), name: "acme".into(), port: port.into(), ..Default::default() };
    let mut provider: SandboxProvider = serde_json::from_value(json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": "acme"},
        "spec": {"pluginKey": "acme", "version": "1.0.0", "worker": {}, "environmentDrivers": []}
    }))
    .unwrap();
    provider.spec.worker = WorkerRef { service: Some(service), ..Default::default() };
    provider
}

/// An ExternalName Service (or any Service name) is resolved like a URL's host: what it leads to
/// is held against the same classes, with worker URLs off.
#[tokio::test]
async fn a_service_name_that_leads_to_a_refused_address_is_refused_as_a_url_is() {
    let host = "acme.team-a.svc";
    for (ips, class) in [
        (&["169.254.169.254"][..], AddressClass::Metadata),
        (&["127.0.0.1", "::1"][..], AddressClass::Loopback),
        (&["64:ff9b::a9fe:a9fe"][..], AddressClass::Metadata),
    ] {
        let outcome = prober_resolving(&[(host, ips)], AllowedCidrs::default()).probe(&service_provider(8080)).await;
        let ProbeOutcome::Failed(failure) = outcome else { panic!("{ips:?}: {outcome:?}") };
        assert_eq!(failure.error, ProbeError::RefusedAddress(class), "{ips:?}");
        assert_eq!(
            failure.to_string(),
            "probe of http://acme.team-a.svc:8080/ failed: the worker's address is refused by the address \
             policy; sandcap's log has the detail"
        );
    }
    // The same table, with the address allowed, connects there: the table is what was used.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let prober = prober_resolving(&[(host, &["127.0.0.1"])], cidrs(&["127.0.0.0/8"]));
    let provider = service_provider(port);
    let (outcome, ()) = tokio::join!(prober.probe(&provider), async {
        let (socket, _) = listener.accept().await.unwrap();
        drop(socket);
    });
    let ProbeOutcome::Failed(failure) = outcome else { panic!("{outcome:?}") };
    assert_eq!(failure.error.class(), Some(FailureClass::Unreachable), "{failure:?}");
}

#[test]
fn what_the_answer_adds_is_skipped_and_past_the_bound_reading_stops() {
    // Members sandcap does not read, however large, are passed over (no tree is built of them).
    let filler = vec![json!({"k": [1, 2, 3]}); 20_000];
    let got = answer(json!({"jsonrpc": "2.0", "id": 7, "extra": filler, "result": {"ok": true,
        "instanceInfo": filler, "supportedMethods": ["environmentExecute"]}}));
    assert_eq!(got.unwrap(), ["environmentExecute"]);
    let err =
        answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": vec!["m"; 100_000]}}));
    assert_eq!(err.unwrap_err().to_string(), format!("the answer lists more than {MAX_METHODS} supportedMethods"));
    let err = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": ["a", 1]}}));
    assert!(err.unwrap_err().to_string().ends_with("result.supportedMethods[1] is not a method name"));
}
