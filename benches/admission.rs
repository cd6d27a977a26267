//! The admission core without transport: decoding plus every rule, against decoding alone
//! (`serde_json` into a `Value`), on the same realistic 2-4 KB provider review the load test sends.
//!
//!     cargo bench --bench admission

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sandcap::admission;
use sandcap::validation::Options;

const REVIEW: &[u8] = include_bytes!("provider-review.json");

fn bench(c: &mut Criterion) {
    assert!(admission::handle(REVIEW, &Options::default()).outcome.allowed(), "the benchmark review must be allowed");
    let mut group = c.benchmark_group("admission");
    group.bench_function("serde_json decode only (baseline)", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(REVIEW)).unwrap())
    });
    let object = serde_json::from_slice::<serde_json::Value>(REVIEW).unwrap()["request"]["object"].clone();
    group.bench_function("review only (object already decoded)", |b| {
        b.iter(|| sandcap::validation::review(black_box(&object), None, &Options::default()))
    });
    group.bench_function("decode + review + encode", |b| {
        b.iter(|| admission::handle(black_box(REVIEW), &Options::default()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
