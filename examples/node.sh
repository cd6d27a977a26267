#!/usr/bin/env bash
# A single-node Kubernetes on this machine, with no Docker engine, where sandcap's
# Helm chart runs as real pods (kind's idea without its container). Built from the same sources as
# the end-to-end tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl of the newest minor in testcluster/, containerd 2, CoreDNS, helm and the
# pause binary from their Go modules (testcluster/build.sh --node, testcluster/node-build.sh); runc and
# the CNI plugins from Debian; the images (sandcap, the reference worker, the SDK plugin behind the bridge, pause) from the
# repository's Dockerfile on local stand-in bases (testcluster/images/build.sh), imported into the
# node's containerd. The node also has an OCI registry of its own, `127.0.0.1:5000` inside its network
# namespace (crane's, in memory; release/tools/go-tool.sh): containerd pulls from it over plain
# HTTP, so what `release/release.sh --registry 127.0.0.1:5000 --plain-http` publishes there installs as
# an admin installs a release, `helm install oci://127.0.0.1:5000/charts/sandcap --plain-http`.
#
#   ./examples/node.sh up          build what is missing, start the node (idempotent); prints the
#                                  KUBECONFIG to use inside it and the images the node holds
#   ./examples/node.sh exec -- CMD run CMD inside the node's namespaces (kubectl, helm, curl, ...)
#   ./examples/node.sh down        stop and remove everything the node started
#   ./examples/node.sh status      whether it runs
#   ./examples/node.sh restart C   stop component C (containerd, kubelet, ...) and start it again
#
# Isolation: everything lives in the network namespace `sandcap-node` and a private mount
# namespace (its own /run, /var/lib/cni, /var/log/pods and /var/log/containers): the node's
# addresses, the pod and Service CIDRs, the bridge and kube-proxy's rules exist only there. The
# cgroups it creates are under `sandcap-node` in each hierarchy. What it cannot keep to itself:
# the kubelet sets five kernel tunables (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_maxkeys, kernel.keys.root_maxbytes); `down` restores their earlier values.
# State and logs: target/node/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
state="$root/target/node"
netns=sandcap-node
node_name=sandcap-node
node_ip=10.200.0.2
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/16
dns_ip=10.96.0.10
# Inside the node's own network namespace: no other process on this machine can hold the port.
registry=127.0.0.1:5000
cgroup_root=/sandcap-node
tunables=(vm.overcommit_memory kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

say() { echo "node.sh: $*" >&2; }
die() { say "$*"; exit 1; }

holder_pid() {
  [ -f "$state/holder.pid" ] && kill -0 "$(cat "$state/holder.pid")" 2>/dev/null && cat "$state/holder.pid"
}

# Runs a command inside the node's network and mount namespaces.
inside() {
  local holder
  holder="$(holder_pid)" || die "the node is not running (./examples/node.sh up)"
  nsenter --target "$holder" --mount --net --wd="$PWD" -- env \
    PATH="$k8s_bin:$node_bin:/usr/sbin:/usr/bin:/sbin:/bin" KUBECONFIG="$state/admin.kubeconfig" "$@"
}

binaries() {
  k8s_bin="$(bash "$root/testcluster/build.sh" --node "$minor" | awk '{print $2}')"
  node_bin="$(bash "$root/testcluster/node-build.sh" | tail -1)"
  crane="$(bash "$root/release/tools/go-tool.sh" crane)"
}

minor="$(ls -d "$root"/testcluster/k8s-*/ | sed 's|.*/k8s-||; s|/$||' | sort -V | tail -1)"
k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' "$root/testcluster/k8s-$minor/go.mod")"
k8s_bin="$root/target/testcluster/$k8s_version"
node_bin="$root/target/testcluster/node"

# The node's PKI: one CA, the apiserver's serving certificate, the apiserver's client certificate
# for kubelets, and the service-account key pair. Clients authenticate with tokens.
pki() {
  local dir="$state/pki"
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sandcap-node CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  cat >"$dir/apiserver.ext" <<EOF
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:10.96.0.1,IP:$node_ip,IP:127.0.0.1
extendedKeyUsage=serverAuth
EOF
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$dir/apiserver.key" \
    -out "$dir/apiserver.csr" 2>/dev/null
  openssl x509 -req -in "$dir/apiserver.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 30 -extfile "$dir/apiserver.ext" -out "$dir/apiserver.crt" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$dir/client.ext"
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
    -keyout "$dir/kubelet-client.key" -out "$dir/kubelet-client.csr" 2>/dev/null
  openssl x509 -req -in "$dir/kubelet-client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 30 -extfile "$dir/client.ext" -out "$dir/kubelet-client.crt" 2>/dev/null
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  # token,user,uid,"groups": each component with the identity its bootstrap RBAC expects.
  local t
  : >"$dir/tokens.csv"
  for who in admin kubelet controller-manager scheduler proxy coredns; do
    t="$(openssl rand -hex 16)"
    echo "$t" >"$dir/$who.token"
  done
  {
    echo "$(cat "$dir/admin.token"),admin,admin,system:masters"
    echo "$(cat "$dir/kubelet.token"),system:node:$node_name,kubelet,system:nodes"
    echo "$(cat "$dir/controller-manager.token"),system:kube-controller-manager,kcm"
    echo "$(cat "$dir/scheduler.token"),system:kube-scheduler,scheduler"
    echo "$(cat "$dir/proxy.token"),system:kube-proxy,proxy"
    echo "$(cat "$dir/coredns.token"),system:coredns,coredns"
  } >"$dir/tokens.csv"
  for who in admin kubelet controller-manager scheduler proxy coredns; do
    kubeconfig "$who" >"$state/$who.kubeconfig"
  done
}

kubeconfig() {
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster: {server: "https://$node_ip:6443", certificate-authority: "$state/pki/ca.crt"}
users:
- name: $1
  user: {token: "$(cat "$state/pki/$1.token")"}
contexts:
- name: node
  context: {cluster: node, user: $1, namespace: default}
current-context: node
EOF
}

configs() {
  mkdir -p "$state/cni/net.d" "$state/containerd" "$state/kubelet"
  cat >"$state/cni/net.d/10-sandcap-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandcap-node",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$state/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$state/containerd/config.toml" <<EOF
version = 3
root = "$state/containerd/root"
state = "$state/containerd/state"

[grpc]
  address = "$state/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.runtime']
  # This machine's root has no CAP_SYS_RESOURCE, so no process may lower its OOM score below
  # containerd's own (the pod sandbox asks for -998).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "/usr/bin/runc"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$state/cni/net.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$state/containerd/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pause_image"
EOF
  mkdir -p "$state/containerd/certs.d/$registry"
  cat >"$state/containerd/certs.d/$registry/hosts.toml" <<EOF
server = "http://$registry"
[host."http://$registry"]
  capabilities = ["pull", "resolve"]
EOF
  echo "nameserver $dns_ip" >"$state/kubelet/resolv.conf"
  cat >"$state/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$state/pki/ca.crt"}
authorization: {mode: Webhook}
# This machine has cgroup v1 hierarchies and no systemd: cgroupfs, and v1 allowed explicitly.
cgroupDriver: cgroupfs
cgroupRoot: "$cgroup_root"
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "unix://$state/containerd/containerd.sock"
clusterDNS: ["$dns_ip"]
clusterDomain: cluster.local
resolvConf: "$state/kubelet/resolv.conf"
podCIDR: "$pod_cidr"
# A shared test machine: never evict for its disk or memory, and leave its kernel alone where
# the kubelet allows it.
evictionHard: {memory.available: "0%", nodefs.available: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
healthzBindAddress: "127.0.0.1"
readOnlyPort: 0
EOF
  cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$state/proxy.kubeconfig"}
mode: iptables
clusterCIDR: "$pod_cidr"
hostnameOverride: "$node_name"
bindAddress: "$node_ip"
healthzBindAddress: "127.0.0.1:10256"
metricsBindAddress: "127.0.0.1:10249"
# Replies from a pod to a pod behind a Service on the same bridge come back through the node.
iptables: {masqueradeAll: true}
# The conntrack tables are the machine's: leave them as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  cat >"$state/Corefile" <<EOF
.:53 {
    bind $node_ip
    errors
    health 127.0.0.1:8082
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $state/coredns.kubeconfig node
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
EOF
}

# Starts a component inside the namespaces, logging to target/node/<name>.log; its pid (the
# component's own: the shell writes it, then becomes the component) in <name>.pid.
start() {
  local name="$1"; shift
  echo "$@" >"$state/$name.cmd"
  rm -f "$state/$name.pid"
  # shellcheck disable=SC2016
  inside sh -c 'echo $$ >"$0"; exec "$@"' "$state/$name.pid" "$@" >>"$state/$name.log" 2>&1 </dev/null &
  for _ in $(seq 50); do [ -s "$state/$name.pid" ] && return; sleep 0.1; done
  die "$name did not start (see $state/$name.log)"
}

wait_for() {
  local what="$1" seconds="$2"; shift 2
  for _ in $(seq $((seconds * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  die "$what did not come up within ${seconds}s (logs: $state/)"
}

up() {
  if holder_pid >/dev/null; then
    say "already up"
    print_info
    return
  fi
  command -v runc >/dev/null || die "runc is missing: apt-get install runc containernetworking-plugins iptables"
  [ -x /usr/lib/cni/bridge ] || die "the CNI plugins are missing: apt-get install containernetworking-plugins"
  binaries
  bash "$root/testcluster/images/build.sh" >"$root/target/images-build.log" 2>&1 \
    || { tail -20 "$root/target/images-build.log" >&2; die "the images did not build"; }
  # shellcheck source=/dev/null
  source "$root/target/images/images.env"
  sandcap_image="$SANDCAP_IMAGE" worker_image="$SANDCAP_WORKER_IMAGE" pause_image="$SANDCAP_PAUSE_IMAGE"
  bridge_image="$SANDCAP_BRIDGE_IMAGE"
  archives="$SANDCAP_IMAGE_ARCHIVE $SANDCAP_WORKER_IMAGE_ARCHIVE $SANDCAP_BRIDGE_IMAGE_ARCHIVE $SANDCAP_PAUSE_IMAGE_ARCHIVE"

  down quiet
  # A fresh node each time: nothing of an earlier one (etcd's data, pods, images) is reused.
  rm -rf "$state"
  mkdir -p "$state"
  for t in "${tunables[@]}"; do echo "$t=$(sysctl -n "$t")"; done >"$state/tunables.saved"
  pki
  configs
  printf 'image: %s\nworker-image: %s\nbridge-image: %s\npause-image: %s\n' \
    "$sandcap_image" "$worker_image" "$bridge_image" "$pause_image" >"$state/images"

  printf 'nameserver %s\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' "$dns_ip" \
    >"$state/resolv.conf"
  # `ip netns add` makes /run/netns a mount point the first time; down undoes that too.
  [ -d /run/netns ] || touch "$state/made-run-netns"
  ip netns add "$netns"
  # The holder keeps both namespaces alive; every component joins them.
  nsenter --net="/run/netns/$netns" unshare --mount --propagation private -- bash -c '
    set -e
    for d in /run /var/lib/cni /var/log/pods /var/log/containers; do mkdir -p "$d"; mount -t tmpfs -o mode=0755 tmpfs "$d"; done
    mount --bind '"$state/resolv.conf"' /etc/resolv.conf
    ip link set lo up
    ip link add node0 type veth peer name node0-peer
    ip addr add '"$node_ip"'/24 dev node0
    ip link set node0-peer up
    ip link set node0 up
    ip route add default dev node0
    exec sleep infinity' </dev/null >"$state/holder.log" 2>&1 &
  echo $! >"$state/holder.pid"
  wait_for "the node's namespaces" 10 inside ip -4 addr show node0

  # The apiserver's own record of who deleted a SandboxLease (the node suite asks it whether
  # sandcap or the garbage collector did); nothing else is audited.
  cat >"$state/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [delete]
  resources: [{group: sandcap.dev, resources: [sandboxleases]}]
- level: None
EOF
  start etcd "$k8s_bin/etcd" --name node --data-dir "$state/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster node=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
  start kube-apiserver "$k8s_bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$node_ip" --bind-address 0.0.0.0 --secure-port 6443 \
    --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
    --client-ca-file "$state/pki/ca.crt" --token-auth-file "$state/pki/tokens.csv" \
    --kubelet-client-certificate "$state/pki/kubelet-client.crt" --kubelet-client-key "$state/pki/kubelet-client.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-cluster-ip-range "$service_cidr" --allow-privileged=true \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$state/pki/sa.pub" \
    --service-account-signing-key-file "$state/pki/sa.key" --cert-dir "$state/apiserver-certs" \
    --audit-policy-file "$state/audit-policy.yaml" --audit-log-path "$state/audit.log"
  wait_for kube-apiserver 60 inside kubectl get --raw /readyz
  start kube-controller-manager "$k8s_bin/kube-controller-manager" \
    --kubeconfig "$state/controller-manager.kubeconfig" --authentication-kubeconfig "$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$state/controller-manager.kubeconfig" --use-service-account-credentials \
    --service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/ca.crt" \
    --cluster-cidr "$pod_cidr" --service-cluster-ip-range "$service_cidr" --bind-address 127.0.0.1 \
    --leader-elect=false
  start kube-scheduler "$k8s_bin/kube-scheduler" --kubeconfig "$state/scheduler.kubeconfig" \
    --authentication-kubeconfig "$state/scheduler.kubeconfig" --authorization-kubeconfig "$state/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
  start registry "$crane" registry serve --address "$registry"
  wait_for registry 30 inside "$crane" catalog --insecure "$registry"
  start containerd "$node_bin/containerd" --config "$state/containerd/config.toml"
  wait_for containerd 30 inside "$node_bin/ctr" --address "$state/containerd/containerd.sock" version
  for archive in $archives; do
    inside "$node_bin/ctr" --address "$state/containerd/containerd.sock" -n k8s.io images import \
      "$archive" >>"$state/import.log" 2>&1 || die "cannot import $archive (see $state/import.log)"
  done
  # The kubelet's cgroup root must exist in every hierarchy it uses (cpuset needs its CPUs and
  # memory nodes set before anything can join it).
  for hierarchy in /sys/fs/cgroup/*/; do
    mkdir -p "$hierarchy${cgroup_root#/}"
  done
  if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset$cgroup_root/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$cgroup_root/cpuset.mems"
  fi
  start kubelet "$k8s_bin/kubelet" --config "$state/kubelet/config.yaml" --kubeconfig "$state/kubelet.kubeconfig" \
    --root-dir "$state/kubelet/root" --cert-dir "$state/kubelet/pki" --hostname-override "$node_name" \
    --node-ip "$node_ip"
  start kube-proxy "$k8s_bin/kube-proxy" --config "$state/kube-proxy.yaml"
  start coredns "$node_bin/coredns" -conf "$state/Corefile"
  wait_for "the node to be Ready" 120 inside kubectl wait --for=condition=Ready "node/$node_name" --timeout=1s
  # CoreDNS runs on the node itself, so its Service points at the node's address.
  inside kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $dns_ip
  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kube-dns-node, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints: [{addresses: ["$node_ip"], conditions: {ready: true}}]
ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}]
EOF
  wait_for "cluster DNS" 60 inside getent hosts kubernetes.default.svc.cluster.local
  print_info
}

print_info() {
  cat <<EOF
export KUBECONFIG=$state/admin.kubeconfig
$(cat "$state/images")
registry: $registry
Kubernetes $k8s_version, one node ($node_name, $node_ip) in network namespace $netns; run commands in it with
  ./examples/node.sh exec -- kubectl get nodes
  ./examples/node.sh exec -- helm install ...
Stop it with: ./examples/node.sh down
EOF
}

# Stops everything the node started: the components, every process left in its namespaces or
# cgroups (containerd's shims, the pods), the namespaces themselves (and with them every mount,
# address and rule), its cgroups, and the kernel tunables the kubelet set.
down() {
  local quiet="${1:-}" pids
  if [ -d "$state" ]; then
    for f in "$state"/*.pid; do
      [ -e "$f" ] || continue
      kill -TERM "$(cat "$f")" 2>/dev/null || true
    done
  fi
  for _ in $(seq 50); do
    pids="$(node_pids)"
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    sleep 0.2
  done
  pids="$(node_pids)"
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  sleep 0.2
  ip netns del "$netns" 2>/dev/null || true
  if [ -f "$state/made-run-netns" ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
    umount /run/netns 2>/dev/null || true
    rmdir /run/netns 2>/dev/null || true
    rm -f "$state/made-run-netns"
  fi
  for hierarchy in /sys/fs/cgroup/*/; do
    [ -d "$hierarchy${cgroup_root#/}" ] || continue
    find "$hierarchy${cgroup_root#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  if [ -f "$state/tunables.saved" ]; then
    while IFS= read -r line; do sysctl -q -w "$line" >/dev/null; done <"$state/tunables.saved"
    rm -f "$state/tunables.saved"
  fi
  rm -f "$state"/*.pid "$state"/*.cmd
  [ -n "$quiet" ] || say "down: nothing of the node is left running"
}

# Every process in the node's network namespace or under its cgroups.
node_pids() {
  {
    ip netns pids "$netns" 2>/dev/null || true
    for hierarchy in /sys/fs/cgroup/*/; do
      [ -d "$hierarchy${cgroup_root#/}" ] || continue
      find "$hierarchy${cgroup_root#/}" -name cgroup.procs -exec cat {} + 2>/dev/null || true
    done
    [ ! -f "$state/holder.pid" ] || cat "$state/holder.pid"
  } | sort -u | while read -r pid; do if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi; done
}

# Stops a component and starts it again as `up` did (the node suite restarts containerd).
restart() {
  local name="$1" pid
  [ -f "$state/$name.cmd" ] || die "no component $name"
  pid="$(cat "$state/$name.pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  # shellcheck disable=SC2046
  start "$name" $(cat "$state/$name.cmd")
  say "restarted $name"
}

case "${1:-}" in
  up) up ;;
  restart) holder_pid >/dev/null || die "the node is not running"; restart "${2:?which component}" ;;
  down) down ;;
  status) if holder_pid >/dev/null; then print_info; else echo "not running"; exit 1; fi ;;
  exec)
    shift
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "usage: ./examples/node.sh exec -- CMD [ARG...]"
    inside "$@"
    ;;
  *) echo "usage: $0 up|down|status|exec -- CMD" >&2; exit 2 ;;
esac
