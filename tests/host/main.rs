//! sandcap against the host's own published packages (@paperclipai/server and
//! @paperclipai/shared 2026.916.1, pinned by tests/host/package-lock.json and installed by the
//! test): generated cases through the host's resolver and `sandcap resolve`, and generated driver
//! declarations through the host's manifest validator and `sandcap validate` (and, in manifests,
//! `sandcap import`), under contract
//! `v1` and `v2`. Every difference must be one of docs/contract.md's "Differences from the
//! host's published resolver", each asserted by class, and sandcap never grants what the host
//! does not. Needs node and npm (SANDCAP_HOST=skip skips it).

mod example;
mod manifest;
mod npm;
mod resolve;

use std::path::Path;

use sandcap_core::versions::{V1, V2};
use sandcap_core::vocabulary::WorkerMethod;

/// The keys of contract v1, in status order, as the core's contract versions list them.
pub fn v1_keys() -> Vec<&'static str> {
    V1.keys.iter().map(|k| k.capability.key()).collect()
}

/// The keys v2 adds to v1.
pub fn v2_only_keys() -> Vec<&'static str> {
    let v1 = v1_keys();
    V2.keys.iter().map(|k| k.capability.key()).filter(|k| !v1.contains(k)).collect()
}

/// Every worker method a key needs, in the vocabulary's order.
pub fn methods() -> Vec<&'static str> {
    WorkerMethod::ALL.iter().map(|m| m.as_str()).collect()
}
use std::process::{Command, Output};

/// Deterministic cases: splitmix64, seeded.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// One of `items`, each with its weight.
    pub fn pick<T: Copy>(&mut self, items: &[(T, u32)]) -> T {
        let total: u32 = items.iter().map(|(_, w)| w).sum();
        let mut at = (self.next_u64() % u64::from(total)) as u32;
        for (item, w) in items {
            if at < *w {
                return *item;
            }
            at -= w;
        }
        unreachable!()
    }
}

/// The two seeds every generated suite runs, 500 cases each.
pub const SEEDS: [u64; 2] = [0x5A4D_CA90_0001, 0x5A4D_CA90_0002];
pub const CASES_PER_SEED: usize = 500;

pub fn sandcap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sandcap runs")
}

pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}
