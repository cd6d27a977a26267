#!/usr/bin/env bash
# Prints the path of one of agent-sandbox's CRDs: the Sandbox (agents.x-k8s.io, v1beta1,
# namespaced), or with `sandboxclaims` its extensions' SandboxClaim (extensions.agents.x-k8s.io),
# taken from the Go module testcluster/agent-sandbox/go.mod pins (sigs.k8s.io/agent-sandbox; go.sum
# holds its hash), downloaded from the Go module proxy into the module cache on first use. The
# end-to-end and node suites install them for the observer's scenarios, as an admin installing
# agent-sandbox would; nothing is built and no CRD is copied into the repository.
#
#   testcluster/agent-sandbox.sh                 prints e.g. ~/go/pkg/mod/sigs.k8s.io/agent-sandbox@v1.0.1/k8s/crds/agents.x-k8s.io_sandboxes.yaml
#   testcluster/agent-sandbox.sh sandboxclaims   ... extensions.agents.x-k8s.io_sandboxclaims.yaml
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
case "${1:-sandboxes}" in
  sandboxes) file=agents.x-k8s.io_sandboxes.yaml ;;
  sandboxclaims) file=extensions.agents.x-k8s.io_sandboxclaims.yaml ;;
  *) echo "testcluster/agent-sandbox.sh: which CRD? sandboxes or sandboxclaims, not $1" >&2; exit 2 ;;
esac
crd="$dir/k8s/crds/$file"
if [ -z "$dir" ] || [ ! -f "$crd" ]; then
  echo "testcluster/agent-sandbox.sh: sigs.k8s.io/agent-sandbox has no k8s/crds/$file (module directory: ${dir:-none})" >&2
  exit 2
fi
echo "$crd"
