//! `explain`'s human output: the facts, then every capability with its gates and what to change,
//! then every condition and the notes.

use std::io::{self, Write};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::gates::probe_summary;
use super::lease::LeaseReport;
use super::provider::ProviderReport;
use super::report::{CapabilityReport, DeclarationReport, Gate};
use sandcap_core::api::WorkerStatus;

pub fn lease(out: &mut dyn Write, r: &LeaseReport) -> io::Result<()> {
    let observed =
        r.observed_generation.map_or_else(|| "no status yet".into(), |g| format!("status for generation {g}"));
    writeln!(out, "SandboxLease {}/{} (generation {}, {observed})", r.namespace, r.name, r.generation.unwrap_or(0))?;
    let p = &r.provider;
    let found = match (&p.uid, p.found) {
        (Some(uid), true) => format!("found, uid {uid}"),
        _ => "not found".into(),
    };
    fact(out, "provider", &format!("{} ({found}), driver {}", p.name, p.driver_key))?;
    let pinned = r.pinned.as_ref().map_or_else(
        || "not pinned".into(),
        |p| format!("uid {}, pluginKey {}, driver {}", p.provider_uid, p.plugin_key, p.driver_key),
    );
    fact(out, "pinned", &pinned)?;
    if let Some(w) = &r.workload {
        let how = if w.observed { ", observed: sandcap keeps this lease in step with it" } else { "" };
        fact(out, "workload", &format!("{} {} ({}){how}", w.kind, w.name, w.api_version))?;
    }
    if let Some(identity) = r.capabilities.first().and_then(|c| c.gates.iter().find(|g| g.gate == Gate::Identity)) {
        fact(out, "identity", &identity.detail)?;
    }
    let effective = r.effective_policy.map_or_else(|| "none yet".into(), |p| p.to_string());
    fact(out, "policy", &format!("{} requested, {effective} effective", r.requested_policy))?;
    worker(out, r.worker.as_ref())?;
    if let Some(d) = &r.declaration {
        declaration(out, d)?;
    }
    for s in &r.config_from {
        fact(out, "configFrom", &format!("Secret {} key {}: {}", s.name, s.key, s.detail))?;
    }
    capabilities(out, &r.capabilities)?;
    conditions_and_notes(out, &r.conditions, &r.notes)
}

pub fn provider(out: &mut dyn Write, r: &ProviderReport) -> io::Result<()> {
    let observed =
        r.observed_generation.map_or_else(|| "no status yet".into(), |g| format!("status for generation {g}"));
    writeln!(out, "SandboxProvider {} (generation {}, {observed})", r.name, r.generation.unwrap_or(0))?;
    fact(out, "plugin", &format!("{} {}", r.plugin_key, r.version))?;
    fact(out, "worker at", &r.worker_at)?;
    worker(out, r.worker.as_ref())?;
    for d in &r.drivers {
        writeln!(out)?;
        declaration(out, &d.declaration)?;
        capabilities(out, &d.capabilities)?;
    }
    conditions_and_notes(out, &r.conditions, &r.notes)
}

fn fact(out: &mut dyn Write, name: &str, value: &str) -> io::Result<()> {
    writeln!(out, "  {name:<13} {value}")
}

fn worker(out: &mut dyn Write, w: Option<&WorkerStatus>) -> io::Result<()> {
    match w {
        None => fact(out, "worker", "not probed yet"),
        Some(w) => {
            fact(out, "worker", &probe_summary(w))?;
            let methods = if w.supported_methods.is_empty() { "none".into() } else { w.supported_methods.join(", ") };
            fact(out, "", &format!("methods: {methods}"))
        }
    }
}

fn declaration(out: &mut dyn Write, d: &DeclarationReport) -> io::Result<()> {
    let kind = d.kind.map_or_else(|| "kind omitted".into(), |k| format!("kind {k}"));
    let keys: Vec<String> = d.sandbox_capabilities.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let keys = if keys.is_empty() { "none".into() } else { keys.join(", ") };
    let mut text = format!("driver {} ({kind}): sandboxCapabilities {keys}", d.driver_key);
    if let Some(legacy) = d.supports_reusable_leases {
        let decides = if d.legacy_decides { "decides reusableLeases" } else { "ignored: the nested key wins" };
        text.push_str(&format!("; supportsReusableLeases: {legacy} ({decides})"));
    }
    fact(out, "declaration", &text)
}

fn capabilities(out: &mut dyn Write, capabilities: &[CapabilityReport]) -> io::Result<()> {
    for c in capabilities {
        writeln!(out)?;
        match (c.granted, c.reason, &c.message) {
            (Some(granted), Some(reason), Some(message)) => {
                let on = if granted { "on" } else { "OFF" };
                writeln!(out, "{} {on}: {reason}: {message}", c.capability)?;
            }
            _ => writeln!(out, "{} not resolved yet (as the objects are now: {})", c.capability, c.reason_now)?,
        }
        if c.reason.is_some_and(|r| r != c.reason_now) {
            writeln!(out, "  as the objects are now: {}", c.reason_now)?;
        }
        // Identity is the same for every capability: shown once above, and here only where it stops.
        // Passing identity and validity gates are the common case: the facts above say them once.
        let said_once = |gate: Gate| matches!(gate, Gate::Identity | Gate::LeaseValid | Gate::ProviderValid);
        for g in c.gates.iter().filter(|g| !(said_once(g.gate) && g.passes)) {
            writeln!(out, "  {} {:<15} {}", if g.passes { "pass" } else { "stop" }, g.gate.as_str(), g.detail)?;
        }
        if let Some(fix) = &c.fix {
            writeln!(out, "  to change: {fix}")?;
        }
    }
    Ok(())
}

fn conditions_and_notes(out: &mut dyn Write, conditions: &[Condition], notes: &[String]) -> io::Result<()> {
    writeln!(out)?;
    if conditions.is_empty() {
        writeln!(out, "no conditions")?;
    } else {
        writeln!(out, "{:<24} {:<8} {:<28} MESSAGE", "CONDITION", "STATUS", "REASON")?;
        for c in conditions {
            writeln!(out, "{:<24} {:<8} {:<28} {}", c.type_, c.status, c.reason, c.message)?;
        }
    }
    notes.iter().try_for_each(|n| writeln!(out, "note: {n}"))
}
