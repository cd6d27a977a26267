//! The probe's rules, without a worker: answers, address classes, endpoints.

use serde_json::{Value, json};

use super::answer::MAX_METHODS;
use super::*;
use crate::api::ServiceRef;

fn answer(v: Value) -> Result<Vec<String>, ProbeError> {
    parse_answer(v.to_string().as_bytes(), 7)
}

fn cidrs(list: &[&str]) -> AllowedCidrs {
    AllowedCidrs::new(list.iter().map(|c| c.parse().unwrap()))
}

fn host_class(url: &str, allowed: &AllowedCidrs) -> Option<AddressClass> {
    allowed.refuses_host(&Url::parse(url).unwrap())
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
fn every_refused_class_is_recognised_in_each_form() {
    use AddressClass::*;
    let cases = [
        ("127.0.0.1", Loopback),
        ("127.255.0.9", Loopback),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("169.254.0.1", LinkLocal),
        ("169.254.170.2", LinkLocal),
        ("fe80::1", LinkLocal),
        ("febf::1", LinkLocal),
        ("::ffff:169.254.3.4", LinkLocal),
        ("169.254.169.254", Metadata),
        ("::ffff:169.254.169.254", Metadata),
        ("fd00:ec2::254", Metadata),
        ("100.100.100.200", Metadata),
        ("0.0.0.0", Unspecified),
        ("0.1.2.3", Unspecified),
        ("::", Unspecified),
        ("::ffff:0.0.0.0", Unspecified),
    ];
    for (ip, class) in cases {
        assert_eq!(classify(ip.parse().unwrap()), Some(class), "{ip}");
    }
    for ip in ["10.96.0.10", "192.168.1.1", "8.8.8.8", "100.100.100.201", "fd00:ec2::253", "fec0::1", "2001:db8::1"] {
        assert_eq!(classify(ip.parse().unwrap()), None, "{ip}");
    }
}

#[test]
fn url_hosts_are_classed_after_the_parser_normalises_them() {
    use AddressClass::*;
    let none = AllowedCidrs::default();
    let cases = [
        ("http://2130706433/rpc", Loopback),
        ("http://0x7f.1/rpc", Loopback),
        ("http://0177.0.0.1/rpc", Loopback),
        ("http://127.1/rpc", Loopback),
        ("http://[::1]:8080/rpc", Loopback),
        ("http://[::ffff:7f00:1]/rpc", Loopback),
        ("http://[0:0:0:0:0:ffff:127.0.0.1]/", Loopback),
        ("http://LOCALHOST./rpc", Loopback),
        ("http://worker.localhost/rpc", Loopback),
        ("http://user:pw@[fe80::1]/", LinkLocal),
        ("http://2852039166/latest/meta-data/", Metadata),
        ("http://169.254.169.254/", Metadata),
        ("http://metadata.google.internal/computeMetadata/v1/", Metadata),
        ("http://Metadata/", Metadata),
        ("http://instance-data/", Metadata),
        ("http://[fd00:ec2::254]/", Metadata),
        ("http://0/", Unspecified),
        ("http://[::]/", Unspecified),
    ];
    for (url, class) in cases {
        assert_eq!(host_class(url, &none), Some(class), "{url}");
    }
    for url in ["http://worker.example/rpc", "http://10.0.0.7:8080/", "http://acme.sandbox-system.svc:8080/"] {
        assert_eq!(host_class(url, &none), None, "{url}");
    }
}

#[test]
fn allowed_cidrs_let_through_exactly_what_they_cover() {
    let loopback = cidrs(&["127.0.0.0/8", "::1/128"]);
    assert_eq!(host_class("http://127.0.0.1:9/rpc", &loopback), None);
    assert_eq!(host_class("http://localhost:9/rpc", &loopback), None);
    assert_eq!(host_class("http://[::ffff:127.0.0.1]/", &loopback), None, "the mapped form of an allowed address");
    assert_eq!(host_class("http://169.254.169.254/", &loopback), Some(AddressClass::Metadata));
    assert_eq!(host_class("http://metadata/", &loopback), Some(AddressClass::Metadata));
    let one = cidrs(&["127.0.0.2/32"]);
    assert_eq!(host_class("http://127.0.0.1/", &one), Some(AddressClass::Loopback));
    assert_eq!(host_class("http://127.0.0.2/", &one), None);
    let any = AllowedCidrs::any();
    assert_eq!(host_class("http://169.254.169.254/", &any), None);
    assert_eq!(host_class("http://[fe80::1]/", &any), None);
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
    let none = AllowedCidrs::default();
    assert_eq!(
        endpoint(&service("acme-worker", None), false, &none).unwrap().as_str(),
        "http://acme-worker.sandbox-system.svc:8080/"
    );
    assert_eq!(
        endpoint(&service("acme-worker", Some("/rpc")), false, &none).unwrap().as_str(),
        "http://acme-worker.sandbox-system.svc:8080/rpc"
    );
    for name in ["evil.com:80/x?", "Upper", "", "-x", "a@b"] {
        assert!(endpoint(&service(name, None), false, &none).is_err(), "{name}");
    }
    assert!(endpoint(&service("w", Some("rpc")), false, &none).is_err());
    // A Service named like a refused host is still a cluster name under its namespace.
    assert!(endpoint(&service("localhost", None), false, &none).is_ok());
    assert!(endpoint(&service("metadata", None), false, &none).is_ok());
}

#[test]
fn worker_urls_need_the_flag_and_are_redacted() {
    let none = AllowedCidrs::default();
    let worker = WorkerRef { url: Some("https://user:pw@w.example:9443/rpc?token=abc".into()), ..Default::default() };
    let refused = endpoint(&worker, false, &none).unwrap_err();
    assert_eq!(refused.reason(), "endpoint");
    assert!(refused.to_string().contains("--allow-worker-urls") && !refused.to_string().contains("pw"));
    let url = endpoint(&worker, true, &none).unwrap();
    assert_eq!(redacted(&url), "https://w.example:9443/rpc");
    let bad = WorkerRef { url: Some("file:///etc/passwd".into()), ..Default::default() };
    assert!(endpoint(&bad, true, &none).unwrap_err().to_string().contains("only http and https"));
    assert!(endpoint(&WorkerRef::default(), true, &none).is_err());
}

#[test]
fn refused_worker_urls_fail_closed_with_their_class() {
    let metadata = WorkerRef { url: Some("http://169.254.169.254/latest/meta-data/".into()), ..Default::default() };
    let error = endpoint(&metadata, true, &AllowedCidrs::default()).unwrap_err();
    assert_eq!(error, ProbeError::RefusedAddress(AddressClass::Metadata));
    assert_eq!(error.reason(), "refused_address");
    assert_eq!(
        error.to_string(),
        "the worker's host is a refused address (cloud metadata); worker URLs reach one only where the \
         operator's --worker-url-allowed-cidrs allows it"
    );
    assert!(endpoint(&metadata, true, &cidrs(&["169.254.169.254/32"])).is_ok());
}
