#!/usr/bin/env bash
# Builds the real etcd, kube-apiserver and kubectl of each Kubernetes minor in testcluster/ from
# their Go modules (the Go module proxy is the only source), envtest-style, for the end-to-end tests
# and examples/cluster.sh.
#
#   testcluster/build.sh [--node] [MINOR...]     default: every testcluster/k8s-* module (1.35 1.37;
#                                                with --node, those that have the node's tools: 1.37)
#
# Binaries land in target/testcluster/v<version>/ (the version is the k8s.io/kubernetes requirement
# of that module). A directory that already holds all three binaries and the go.sum they were
# built from is reused, so only the first run pays (docs/benchmarks/2026-12/suites.md has the times). Prints one line per
# minor: "<minor> <directory>".
#
# --node also builds the node's Kubernetes binaries of each minor: kubelet, kube-controller-manager,
# kube-scheduler and kube-proxy (only a module that lists them as tools, today k8s-1.37), into the
# same directory, stamped separately (node.go.sum), so the default run (the end-to-end suite's)
# never pays for them. The rest of the node (containerd, CoreDNS, helm, pause) is
# testcluster/node-build.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if ! command -v go >/dev/null 2>&1; then
  echo "testcluster/build.sh: Go is not installed; the end-to-end tests build kube-apiserver and etcd with it. Install Go 1.26 (https://go.dev/doc/install), or set SANDCAP_E2E=skip to skip them." >&2
  exit 3
fi

node=0
minors=()
for arg in "$@"; do
  case "$arg" in
    --node) node=1 ;;
    -*) echo "testcluster/build.sh: unknown option $arg (usage: testcluster/build.sh [--node] [MINOR...])" >&2; exit 2 ;;
    *) minors+=("$arg") ;;
  esac
done
node_tools=(kubelet kube-controller-manager kube-scheduler kube-proxy)

# Static, like the release build (hack/lib/golang.sh builds every server binary with cgo off).
go_build() {
  local module="$1" out="$2"
  shift 2
  (cd "$module" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$out/" "$@")
}

mkdir -p "$root/target"
if [ ${#minors[@]} -eq 0 ]; then
  for dir in "$root"/testcluster/k8s-*/; do
    # With --node and no minor named, only the modules that have the node's tools.
    if [ "$node" = 1 ] && ! grep -Eq "^[[:space:]]*(tool[[:space:]]+)?k8s\.io/kubernetes/cmd/kubelet\$" "$dir/go.mod"; then
      continue
    fi
    minors+=("$(basename "$dir" | sed 's/^k8s-//')")
  done
fi

for minor in "${minors[@]}"; do
  # One build of a minor at a time: .ci/prebuild.sh builds in the background what a suite asks
  # for later, and the suite waits here for that minor's build (not for the others') instead of
  # building the same binaries beside it.
  exec 9>"$root/target/testcluster-$minor.lock"
  flock 9
  module="$root/testcluster/k8s-$minor"
  if [ ! -f "$module/go.mod" ]; then
    echo "testcluster/build.sh: no module for Kubernetes $minor (expected $module/go.mod)" >&2
    exit 2
  fi
  version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' "$module/go.mod")"
  if [ "$node" = 1 ]; then
    for tool in "${node_tools[@]}"; do
      if ! grep -Eq "^[[:space:]]*(tool[[:space:]]+)?k8s\.io/kubernetes/cmd/$tool\$" "$module/go.mod"; then
        echo "testcluster/build.sh: the Kubernetes $minor module has no $tool tool; --node needs kubelet, kube-controller-manager, kube-scheduler and kube-proxy as tool directives in $module/go.mod" >&2
        exit 2
      fi
    done
  fi
  out="$root/target/testcluster/$version"
  stamp="$out/go.sum"
  node_stamp="$out/node.go.sum"
  build_control=1
  if [ -x "$out/etcd" ] && [ -x "$out/kube-apiserver" ] && [ -x "$out/kubectl" ] && cmp -s "$stamp" "$module/go.sum"; then
    build_control=0
  fi
  build_node=0
  if [ "$node" = 1 ]; then
    build_node=1
    if cmp -s "$node_stamp" "$module/go.sum"; then
      build_node=0
      for tool in "${node_tools[@]}"; do
        [ -x "$out/$tool" ] || build_node=1
      done
    fi
  fi
  if [ "$build_control" = 0 ] && [ "$build_node" = 0 ]; then
    echo "$minor $out"
    continue
  fi
  mkdir -p "$out"
  major_minor="${version#v}"
  major="${major_minor%%.*}"
  minor_number="$(echo "$major_minor" | cut -d. -f2)"
  # What the release build stamps (hack/lib/version.sh), so /version, kubectl version and the
  # apiserver's own compatibility checks see the real version instead of v0.0.0-master.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_number"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  # One `go build` per set of commands: the packages they share are compiled once, and one
  # command's compile overlaps another's link (docs/benchmarks/2026-12/suites.md has the times).
  # etcd's command is named for its package path, .../server/v3: `go build -o DIR/` writes it as
  # `server`.
  if [ "$build_control" = 1 ]; then
    started=$SECONDS
    echo "testcluster/build.sh: building etcd, kube-apiserver and kubectl $version (cold: about 10 minutes per minor on 2 cores)" >&2
    go_build "$module" "$out" go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
    mv "$out/server" "$out/etcd"
    cp "$module/go.sum" "$stamp"
    echo "testcluster/build.sh: $version built in $((SECONDS - started)) s" >&2
  fi
  if [ "$build_node" = 1 ]; then
    started=$SECONDS
    echo "testcluster/build.sh: building kubelet, kube-controller-manager, kube-scheduler and kube-proxy $version (cold: about 5 minutes once the control plane is built on 2 cores)" >&2
    go_build "$module" "$out" "${node_tools[@]/#/k8s.io/kubernetes/cmd/}"
    cp "$module/go.sum" "$node_stamp"
    echo "testcluster/build.sh: node binaries of $version built in $((SECONDS - started)) s" >&2
  fi
  echo "$minor $out"
done
