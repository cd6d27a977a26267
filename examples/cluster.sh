#!/usr/bin/env bash
# A real Kubernetes API on this machine with sandcap installed, to try sandcap with kubectl and no
# cluster: the end-to-end tests' etcd and kube-apiserver (built from their Go modules by
# testcluster/build.sh), the CRDs, the reference worker and `sandcap run` with its webhook.
#
#   ./examples/cluster.sh up [MINOR]    start (default: the newest minor in testcluster/); prints KUBECONFIG
#   ./examples/cluster.sh down          stop everything it started
#
# Everything listens on loopback; state and logs are in target/cluster/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
state="$root/target/cluster"
pidfile="$state/pid"

down() {
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill -TERM "$(cat "$pidfile")"
    for _ in $(seq 100); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
    echo "cluster stopped"
  else
    echo "no cluster running"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  up)
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "a cluster is already running (./examples/cluster.sh down first)" >&2
      exit 1
    fi
    minor="${2:-$(ls -d "$root"/testcluster/k8s-*/ | sed 's|.*/k8s-||; s|/$||' | sort -V | tail -1)}"
    bin_dir="$(bash "$root/testcluster/build.sh" "$minor" | awk '{print $2}')"
    (cd "$root" && cargo build --locked --quiet --bin sandcap --example reference-worker --example cluster)
    mkdir -p "$state"
    : > "$state/cluster.log"
    nohup "$root/target/debug/examples/cluster" "$bin_dir" "$state" >"$state/cluster.log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 600); do
      if grep -q '^ready ' "$state/cluster.log"; then
        cat <<EOF
Kubernetes $(basename "$bin_dir") is up, with sandcap (logs: $state/sandcap.log).

  export KUBECONFIG=$state/kubeconfig
  kubectl apply -f $state/provider-paperclip-local.yaml   # examples/provider-paperclip-kubernetes.yaml
  kubectl apply -f examples/workloads/namespace.yaml -f examples/workloads/job.yaml
  kubectl get sbl -n paperclip-acme                      # the Job's observed lease
  kubectl apply -f $state/provider-local.yaml     # examples/provider-full.yaml, worker on loopback
  kubectl apply -f examples/secrets/acme-credentials.yaml -f examples/lease-reuse.yaml -f examples/lease-job.yaml
  kubectl get sbp,sbl -A
  kubectl apply -f examples/provider-removed-key.yaml   # denied
  target/debug/sandcap check                           # or kubectl sandcap check (docs/cli.md)
  target/debug/sandcap explain lease -n team-a run-42

Stop it with: ./examples/cluster.sh down
EOF
        exit 0
      fi
      if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "the cluster did not start:" >&2
        tail -20 "$state/cluster.log" >&2
        rm -f "$pidfile"
        exit 1
      fi
      sleep 0.2
    done
    echo "the cluster did not become ready in 2 minutes; see $state/cluster.log" >&2
    down
    exit 1
    ;;
  down) down ;;
  *) echo "usage: $0 up [MINOR] | down" >&2; exit 2 ;;
esac
