//! Arbitrary bytes as a driver's `configSchema` and a lease's config: the compile and the config
//! check the lease controller runs for every lease, through the same budget
//! (`sandcap_core::config_schema::BUDGET`). Whatever the schema, compiling it ends within the
//! budget's deadline and never panics; libFuzzer's `-rss_limit_mb`/`-malloc_limit_mb` (docs/testing.md)
//! make any allocation beyond the budget a finding.
//!
//! The input is `<schema JSON>\n<config JSON>`; the seeds are in fuzz/seeds/config_schema.
//!
//!     mkdir -p fuzz/corpus/config_schema
//!     RUSTC_BOOTSTRAP=1 cargo fuzz run config_schema fuzz/corpus/config_schema fuzz/seeds/config_schema -- \
//!         -rss_limit_mb=192 -malloc_limit_mb=64 -dict=fuzz/config_schema.dict

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sandcap_core::api::{DriverDeclaration, SandboxLease};
use sandcap_core::config_schema::{BUDGET, Deadline, Limit, SchemaError};
use sandcap_core::contract::{self, ConfigFailure, SecretLookup};
use serde_json::Value;

fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (schema, config) = text.split_once('\n').unwrap_or((text, "{}"));
    let (Ok(schema), Ok(config)) = (serde_json::from_str::<Value>(schema), serde_json::from_str::<Value>(config)) else {
        return;
    };
    let started = thread_cpu_time();
    let compiled = sandcap_core::config_schema::compile(&schema, Deadline::Own);
    // The deadline is checked between patterns and around the final build, so one step may run
    // past it; a step is bounded by the per-pattern limits. CPU time, not wall time: a fuzzer
    // sharing a busy machine may wait for a core for seconds, which no budget can bound.
    let spent = thread_cpu_time() - started;
    assert!(spent < BUDGET.deadline + Duration::from_secs(2), "compiling took {spent:?} of CPU time");
    if let Err(e) = &compiled {
        assert!(e.to_string().len() < 4096, "an unbounded message: {} bytes", e.to_string().len());
        assert!(matches!(e, SchemaError::OverBudget { .. } | SchemaError::Invalid { .. }));
    }

    let driver: DriverDeclaration =
        serde_json::from_value(serde_json::json!({"driverKey": "k", "kind": "sandbox_provider", "displayName": "K", "configSchema": schema}))
            .expect("a driver with any schema value deserializes");
    let lease: SandboxLease = serde_json::from_value(serde_json::json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease", "metadata": {"name": "l", "namespace": "n"},
        "spec": {"providerRef": {"name": "p", "driverKey": "k"}, "config": config},
    }))
    .expect("a lease with any config value deserializes");
    // A refusal for time depends on the machine's load: the second compile may have had the time.
    if matches!(compiled, Err(SchemaError::OverBudget { limit: Limit::Deadline { .. }, .. })) {
        return;
    }
    match contract::resolve_config(&lease, &driver, |_| SecretLookup::MissingSecret) {
        Ok(_) => assert!(compiled.is_ok(), "a config passed a schema that did not compile"),
        Err(ConfigFailure::SchemaOverBudget(_) | ConfigFailure::SchemaDoesNotCompile(_)) => assert!(compiled.is_err()),
        Err(_) => {}
    }
});
