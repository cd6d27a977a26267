#!/usr/bin/env bash
# The main job of sandcap on this machine, with no cluster: judge the example manifests as the
# admission webhook would, then resolve capabilities as the controllers would.
set -u
cd "$(dirname "$0")/.."
cargo build --quiet --locked --bin sandcap || exit 1
sandcap=target/debug/sandcap
methods=environmentResumeLease,environmentReleaseLease,environmentDestroyLease,environmentSyncIn,environmentSyncOut,environmentExecute

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

# Exits 1: provider-removed-key.yaml is denied, which is the point of the example.
step $sandcap validate examples/*.yaml
step $sandcap resolve --provider examples/provider-full.yaml --driver kubernetes --worker-methods "$methods"
step $sandcap resolve --provider examples/provider-full.yaml --lease examples/lease-reuse.yaml \
  --secret examples/secrets/acme-credentials.yaml --worker-methods "$methods"
step $sandcap resolve --provider examples/provider-full.yaml --lease examples/lease-job.yaml \
  --worker-methods environmentSyncIn,environmentExecute
step $sandcap resolve --provider examples/provider-legacy.yaml -o json \
  --worker-methods environmentResumeLease,environmentReleaseLease,environmentDestroyLease
exit 0
