//! The admission core without transport, on the same realistic 2-4 KB provider review the load
//! test sends: the webhook's whole answer, its parts (decoding only what the rules read, then the
//! rules), and as the baseline `serde_json` decoding the whole review into a `Value`.
//!
//!     cargo bench --bench admission

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sandcap_core::admission;
use sandcap_core::validation::{Options, REVIEWED};

// The `sandcap` binary's allocator, so the figures are the webhook's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REVIEW: &[u8] = include_bytes!("provider-review.json");

fn bench(c: &mut Criterion) {
    assert!(admission::handle(REVIEW, &Options::default()).outcome.allowed(), "the benchmark review must be allowed");
    let mut group = c.benchmark_group("admission");
    group.bench_function("serde_json decode only (baseline)", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(REVIEW)).unwrap())
    });
    let object = serde_json::from_slice::<serde_json::Value>(REVIEW).unwrap()["request"]["object"].clone();
    let object_json = object.to_string();
    group.bench_function("decode what the rules read of the object", |b| {
        b.iter(|| REVIEWED.decode(black_box(&object_json)).unwrap())
    });
    group.bench_function("review only (object already decoded)", |b| {
        b.iter(|| sandcap_core::validation::review(black_box(&object), None, &Options::default()))
    });
    group.bench_function("sandcap validate: layer 1 (CRD schema and CEL) + layer 2", |b| {
        b.iter(|| {
            sandcap_core::judge::judge(black_box(&object), &Options::default(), sandcap_core::schema::Server::default())
        })
    });
    group.bench_function("decode + review + encode", |b| {
        b.iter(|| admission::handle(black_box(REVIEW), &Options::default()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
