#!/usr/bin/env bash
# Builds the test node's binaries other than Kubernetes' own (those are `testcluster/build.sh --node`)
# from their Go modules (the Go module proxy is the only source): containerd 2.x with its runc shim
# and ctr, CoreDNS, helm v4 and the sandbox image's pause.
#
#   testcluster/node-build.sh [MODULE...]     default: every module (containerd coredns helm pause)
#
# Each module is testcluster/node/<MODULE>/ (a go.mod whose tool directives pin the version):
#   containerd  containerd, containerd-shim-runc-v2, ctr   (github.com/containerd/containerd/v2)
#   coredns     coredns                                   (github.com/coredns/coredns)
#   helm        helm                                      (helm.sh/helm/v4)
#   pause       pause                                     (testcluster/node/pause/main.go)
# All are static (CGO_ENABLED=0), -trimpath, stripped, and stamped with their release's version.
# Binaries land in target/testcluster/node/; a module whose binaries are there with the stamp of
# the go.mod, go.sum and sources they were built from (<module>.stamp) is not rebuilt, so only the
# first run pays (docs/benchmarks/2026-12/suites.md has the times). Prints the directory, one line.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if ! command -v go >/dev/null 2>&1; then
  echo "testcluster/node-build.sh: Go is not installed; the test node's containerd, CoreDNS, helm and pause are built with it. Install Go 1.26 (https://go.dev/doc/install)." >&2
  exit 3
fi

all=(containerd coredns helm pause)
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  modules=("${all[@]}")
fi
out="$root/target/testcluster/node"
mkdir -p "$out"
# One build at a time: .ci/prebuild.sh may be building the same modules in the background.
exec 9>"$out.lock"
flock 9

# The version a module requires of PATH (its tool's module), from go.mod.
required() {
  awk -v path="$2" '$1 == path && $2 ~ /^v/ { print $2; exit }' "$1/go.mod"
}

for name in "${modules[@]}"; do
  module="$root/testcluster/node/$name"
  if [ ! -f "$module/go.mod" ]; then
    echo "testcluster/node-build.sh: no module $name (expected $module/go.mod; modules: ${all[*]})" >&2
    exit 2
  fi
  tags=""
  shim_tags=""
  case "$name" in
    containerd)
      version="$(required "$module" github.com/containerd/containerd/v2)"
      binaries=(containerd containerd-shim-runc-v2 ctr)
      pkg=github.com/containerd/containerd/v2
      ldflags="-s -w -X $pkg/version.Version=$version -X $pkg/version.Package=$pkg"
      # containerd's Makefile with STATIC=1 (osusergo netgo static_build, urfave_cli_no_docs),
      # without the btrfs, devmapper and zfs snapshotters (the node uses overlayfs); the shim also
      # gets the Makefile's no_grpc. The CRI plugin is built in.
      tags="urfave_cli_no_docs osusergo netgo static_build no_btrfs no_devmapper no_zfs"
      shim_tags="$tags no_grpc"
      ;;
    coredns)
      version="$(required "$module" github.com/coredns/coredns)"
      binaries=(coredns)
      ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version"
      ;;
    helm)
      version="$(required "$module" helm.sh/helm/v4)"
      binaries=(helm)
      # What helm's Makefile stamps for a release tag: the version, no "unreleased" metadata.
      ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version"
      ldflags+=" -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
      ;;
    pause)
      version=local
      binaries=(pause)
      ldflags="-s -w"
      ;;
    *)
      echo "testcluster/node-build.sh: unknown module $name (modules: ${all[*]})" >&2
      exit 2
      ;;
  esac
  if [ -z "$version" ]; then
    echo "testcluster/node-build.sh: $module/go.mod requires no version of $name's module" >&2
    exit 2
  fi
  stamp="$out/$name.stamp"
  fresh="$(mktemp)"
  {
    echo "flags: $ldflags | $tags | $shim_tags"
    for file in "$module"/go.mod "$module"/go.sum "$module"/*.go; do
      [ -f "$file" ] && { echo "== $(basename "$file")"; cat "$file"; }
    done
  } >"$fresh"
  built=1
  for binary in "${binaries[@]}"; do
    [ -x "$out/$binary" ] || built=0
  done
  if [ "$built" = 1 ] && cmp -s "$stamp" "$fresh"; then
    rm -f "$fresh"
    continue
  fi
  started=$SECONDS
  echo "testcluster/node-build.sh: building $name $version (${binaries[*]})" >&2
  (
    cd "$module"
    export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
    case "$name" in
      containerd)
        go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/containerd" "$pkg/cmd/containerd"
        go build -trimpath -tags "$shim_tags" -ldflags "$ldflags" -o "$out/containerd-shim-runc-v2" "$pkg/cmd/containerd-shim-runc-v2"
        go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/ctr" "$pkg/cmd/ctr"
        ;;
      coredns) go build -trimpath -ldflags "$ldflags" -o "$out/coredns" github.com/coredns/coredns ;;
      helm) go build -trimpath -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v4/cmd/helm ;;
      pause) go build -trimpath -ldflags "$ldflags" -o "$out/pause" . ;;
    esac
  ) || { rm -f "$fresh"; exit 1; }
  chmod 644 "$fresh"
  mv "$fresh" "$stamp"
  echo "testcluster/node-build.sh: $name built in $((SECONDS - started)) s" >&2
done
echo "$out"
