#!/usr/bin/env bash
# Prints the path of agent-sandbox's Sandbox CRD (agents.x-k8s.io, v1beta1, namespaced), taken from
# the Go module testcluster/agent-sandbox/go.mod pins (sigs.k8s.io/agent-sandbox; go.sum holds its
# hash), downloaded from the Go module proxy into the module cache on first use. The end-to-end and
# node suites install it for the observer's scenarios, as an admin installing agent-sandbox would;
# nothing is built and the CRD is not copied into the repository.
#
#   testcluster/agent-sandbox.sh        prints e.g. ~/go/pkg/mod/sigs.k8s.io/agent-sandbox@v1.0.1/k8s/crds/agents.x-k8s.io_sandboxes.yaml
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
module="$root/testcluster/agent-sandbox"

if ! command -v go >/dev/null 2>&1; then
  echo "testcluster/agent-sandbox.sh: Go is not installed; the agent-sandbox CRD comes from its Go module. Install Go 1.26 (https://go.dev/doc/install)." >&2
  exit 3
fi
# The version go.mod requires, verified against go.sum (no checksum database needed).
dir="$(cd "$module" && GOFLAGS=-mod=readonly GOWORK=off go mod download -json sigs.k8s.io/agent-sandbox \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
crd="$dir/k8s/crds/agents.x-k8s.io_sandboxes.yaml"
if [ -z "$dir" ] || [ ! -f "$crd" ]; then
  echo "testcluster/agent-sandbox.sh: sigs.k8s.io/agent-sandbox has no k8s/crds/agents.x-k8s.io_sandboxes.yaml (module directory: ${dir:-none})" >&2
  exit 2
fi
echo "$crd"
