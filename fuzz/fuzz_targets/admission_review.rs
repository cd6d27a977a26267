//! Arbitrary bytes as an AdmissionReview body: the decode and review path the webhook runs.
//! Whatever comes in, the answer is a 200 or a 400 carrying an AdmissionReview of at most 64 KiB,
//! never a panic; and building only the parts of an object that the rules read never changes the
//! verdict. libFuzzer's memory limits are set to the single-review budget (docs/testing.md), so
//! a review that allocates past it is a finding.
//!
//! From the repository root (the corpus folder must exist):
//!
//!     mkdir -p fuzz/corpus/admission_review
//!     RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none admission_review fuzz/corpus/admission_review fuzz/seeds -- \
//!         -dict=fuzz/admission.dict -rss_limit_mb=128 -malloc_limit_mb=64 -max_len=65536

#![no_main]

use libfuzzer_sys::fuzz_target;
use sandcap_core::addresses::WorkerPolicy;
use sandcap_core::admission;
use sandcap_core::validation::{self, MAX_WARNING_LEN, Options, REVIEWED, Shape};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let allow_worker_urls = data.first().is_some_and(|b| b & 1 == 1);
    let workers = WorkerPolicy { allow_urls: allow_worker_urls, ..WorkerPolicy::default() };
    let options = Options { workers, ..Options::default() };
    let answer = admission::handle(data, &options);
    assert!(matches!(answer.status, 200 | 400), "status {}", answer.status);
    assert!(answer.body.len() <= 64 * 1024, "a {}-byte answer", answer.body.len());
    let body: Value = serde_json::from_slice(&answer.body).expect("the answer is JSON");
    let response = &body["response"];
    assert_eq!(response["allowed"].as_bool(), Some(answer.outcome.allowed()));
    if !answer.outcome.allowed() {
        assert!(!response["status"]["message"].as_str().unwrap_or_default().is_empty(), "a denial says why");
        assert!(matches!(response["status"]["code"].as_u64(), Some(400 | 403)));
    }
    for warning in response["warnings"].as_array().into_iter().flatten() {
        assert!(warning.as_str().is_some_and(|w| w.len() < MAX_WARNING_LEN));
    }
    if let Ok(review) = serde_json::from_slice::<Value>(data) {
        let parts = |shape: Shape, v: &Value| shape.decode(&v.to_string()).expect("serde_json's own output decodes");
        let (object, old) = (&review["request"]["object"], &review["request"]["oldObject"]);
        let old_parts = parts(REVIEWED, old);
        let from_parts = validation::review(&parts(REVIEWED, object), Some(&old_parts), &options);
        let whole = validation::review(object, Some(old), &options);
        // A refusal for time depends on the machine's load, not on the input.
        let timed_out = |v: &validation::Verdict| v.problems.iter().any(|p| p.message.contains("takes longer than"));
        if !timed_out(&from_parts) && !timed_out(&whole) {
            assert_eq!(from_parts, whole);
        }
    }
});
