#!/usr/bin/env bash
# The main job of sandcap on this machine, with no cluster: judge the example manifests as the
# admission webhook would, then resolve capabilities as the controllers would. Exits 1 if a step
# ends otherwise than it should.
set -u
cd "$(dirname "$0")/.."
cargo build --quiet --locked --bin sandcap || exit 1
sandcap="${CARGO_TARGET_DIR:-target}/debug/sandcap"
methods=environmentResumeLease,environmentReleaseLease,environmentDestroyLease,environmentSyncIn,environmentSyncOut,environmentExecute

failed=0
# step EXIT COMMAND...: runs COMMAND, which should exit with EXIT.
step() {
  local want=$1
  shift
  printf '\n\033[1m$ %s\033[0m\n' "$*"
  "$@"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    printf 'demo: exit %s, not %s\n' "$got" "$want" >&2
    failed=1
  fi
}

# Exits 1: provider-removed-key.yaml is denied, which is the point of the example.
step 1 "$sandcap" validate examples/*.yaml
step 0 "$sandcap" resolve --provider examples/provider-full.yaml --driver kubernetes --worker-methods "$methods"
step 0 "$sandcap" resolve --provider examples/provider-full.yaml --lease examples/lease-reuse.yaml \
  --secret examples/secrets/acme-credentials.yaml --worker-methods "$methods"
step 0 "$sandcap" resolve --provider examples/provider-full.yaml --lease examples/lease-job.yaml \
  --worker-methods environmentSyncIn,environmentExecute
step 0 "$sandcap" resolve --provider examples/provider-legacy.yaml -o json \
  --worker-methods environmentResumeLease,environmentReleaseLease,environmentDestroyLease
exit "$failed"
