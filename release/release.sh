#!/usr/bin/env bash
# The release artifacts of the checkout's version (Cargo.toml's), from a clean checkout, into
# target/dist/v<version>/ (docs/releasing.md):
#
#   release/release.sh [--download-url URL] [--notes-from VERSION]
#                      [--key COSIGN_KEY [--registry HOST[:PORT][/PATH] [--plain-http]]]
#
#   sandcap-v<V>-linux-amd64.tar.gz   `sandcap` built with cargo-auditable (its crates and their
#                                     versions in a section of the binary, which scanners read,
#                                     also from the image) and LICENSE
#   sandcap-v<V>.cdx.json             CycloneDX SBOM of the binary's crates (cargo-cyclonedx)
#   sandcap-<chart version>.tgz       the packaged chart, with `artifacthub.io/changes` from the
#                                     version's CHANGELOG.md section
#   sandcap.yaml                      the krew manifest of the archive, checked by krew's own
#                                     validate-krew-manifest (uri: --download-url + the archive)
#   RELEASE-NOTES.md                  the version's CHANGELOG.md section
#   SHA256SUMS                        of all of the above
#
# With --key (a key pair of `cosign generate-key-pair`; COSIGN_PASSWORD in the environment; no
# transparency log, which needs the internet: keyless signing in a release CI with an OIDC
# identity is the alternative), also
#   SHA256SUMS.sigstore.json          cosign's signature of SHA256SUMS (a Sigstore bundle: cosign
#                                     verify-blob --key cosign.pub --bundle ... SHA256SUMS)
# With --registry (which needs --key: nothing is tagged unsigned), also the OCI artifacts:
#   REGISTRY/sandcap:v<V>             the image (testcluster/images/build.sh, from the binary
#                                     above), signed, with the SBOM attested (cosign attest
#                                     --type cyclonedx)
#   REGISTRY/charts/sandcap:<chart>   the chart, signed, its image.repository and image.digest
#                                     set to the pushed image: `helm install oci://...` runs it
#                                     by digest
#   OCI.txt                           both references with their digests
#   clusterimagepolicy.yaml           a policy of sigstore's policy-controller that admits the
#                                     repository's images only with a signature of this key
# Every signature and the attestation are pushed in both of cosign's formats (see below).
#
# The order, so that no release tag ever names an unsigned artifact, and what is signed is what
# was pushed: everything is built and packaged first (the chart names the image by the digest of
# its local OCI layout); the image is pushed by that digest, untagged (crane push to
# REPO@sha256:..., whose reported digest must be the layout's); the chart is pushed with helm to
# a staging registry of this command's own on loopback (helm push always tags) and copied from
# there to REGISTRY/charts/sandcap by the digest helm reported, untagged; both digests are signed
# and the SBOM attested (by digest: no tag is read back), then SHA256SUMS is signed; only then are
# the release tags set (crane tag REPO@sha256:... TAG) and read back, failing if a concurrent push
# moved one. A failure anywhere before leaves digests without tags, which nothing installs by
# name; rerunning the command publishes the release.
#
# --download-url: where the archives will be downloadable (default: a file:// URL of the output
# directory, for trying the manifest with `kubectl krew install --manifest --archive` here).
# --plain-http: the registry speaks HTTP; only for a registry on loopback (localhost, 127.0.0.0/8,
# ::1, as .ci/release.sh and the node suite start one), refused for any other. For a loopback
# registry TLS verification is off as well (cosign --allow-insecure-registry, crane --insecure);
# for any other it stays on (registry_flags below).
# --notes-from: the CHANGELOG.md section to use, default the version's own; `Unreleased` to try a
# release of main. --tools-only builds the tools below and stops (before running the command
# where the registries they come from cannot be reached). SANDCAP_RELEASE_ALLOW_DIRTY=1 builds from a checkout with changes (the
# artifacts then say nothing reliable about a commit; for trying the command only).
# COSIGN_PASSWORD is taken out of the environment at the start: only the cosign calls that use the
# key get it, never a build step (cargo's build scripts, buildah, go), which run others' code.
# SANDCAP_RELEASE_COSIGN: a cosign to run instead of the one built (.ci/release.sh's wrapper,
# which records the calls and injects faults).
#
# Tools, each built once into target/release-tools from the registries: cargo-auditable and
# cargo-cyclonedx (crates.io, release/tools/cargo-tools.sh), helm (testcluster/node/helm),
# validate-krew-manifest, crane and cosign (release/tools/go-tool.sh).
#
# `source release/release.sh` defines the helpers below and returns (.ci/release.sh checks them).

# Whether a registry (HOST[:PORT][/PATH]) is on this host's loopback: localhost, 127.0.0.0/8, ::1.
registry_on_loopback() {
  local host="${1%%/*}"
  case "$host" in
    \[*\]*) host="${host#\[}"; host="${host%%\]*}" ;; # [::1]:5000
    *:*:*) ;;                                        # a bare IPv6 address
    *) host="${host%:*}" ;;                          # HOST:PORT
  esac
  if [ "${host,,}" = localhost ] || [ "$host" = ::1 ]; then return 0; fi
  [[ "$host" =~ ^127\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || return 1
  local octet
  for octet in "${BASH_REMATCH[@]:1}"; do [ "$((10#$octet))" -le 255 ] || return 1; done
}

# The flags that loosen a tool's transport security for a registry, one a line: none unless the
# registry is on loopback; there, no TLS verification, and plain HTTP with a third argument (crane
# falls back to HTTP by itself where --insecure allows it). helm talks to the staging registry only.
#   registry_flags cosign|crane REGISTRY [PLAIN_HTTP]
registry_flags() {
  registry_on_loopback "$2" || return 0
  case "$1" in
    cosign) echo --allow-insecure-registry; [ -z "${3:-}" ] || echo --allow-http-registry ;;
    crane) echo --insecure ;;
    *) echo "registry_flags: unknown tool $1" >&2; return 2 ;;
  esac
}

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

say() { echo "release.sh: $*"; }
die() { echo "release.sh: $*" >&2; exit 1; }
# Runs a command (`keyed` and one), silent while it succeeds; when it fails, dies with its last lines.
quietly() {
  local said what=("$@"); [ "$1" != keyed ] || what=("${@:2}")
  said="$("$@" 2>&1)" || die "$(basename "${what[0]}") ${what[1]:-}: $(tail -3 <<<"$said")"
}

download_url=""
notes_from=""
registry=""
key=""
plain_http=""
tools_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --download-url) download_url="$2"; shift 2 ;;
    --notes-from) notes_from="$2"; shift 2 ;;
    --registry) registry="$2"; shift 2 ;;
    --key) key="$(realpath "$2")"; shift 2 ;;
    --plain-http) plain_http=1; shift ;;
    --tools-only) tools_only=1; shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
  esac
done
[ -z "$registry" ] || [ -n "$key" ] || die "--registry needs --key: nothing is tagged unsigned"
if [ -n "$registry" ] && [ -n "$plain_http" ] && ! registry_on_loopback "$registry"; then
  die "--plain-http is for a registry on loopback only: $registry is not (TLS verification stays on)"
fi
# The key's password, for the calls that use the key only (keyed below); no other step, nor any
# process they start, has it in its environment.
cosign_password="${COSIGN_PASSWORD-}" has_password="${COSIGN_PASSWORD+1}"
unset COSIGN_PASSWORD
keyed() {
  if [ -n "$has_password" ]; then COSIGN_PASSWORD="$cosign_password" "$@"; else "$@"; fi
}

export PATH="$repo/target/release-tools/bin:$PATH"
bash release/tools/cargo-tools.sh cargo-auditable cargo-cyclonedx
helm="$repo/target/testcluster/node/helm"
[ -x "$helm" ] || bash testcluster/node-build.sh helm
validate="$(bash release/tools/go-tool.sh validate-krew-manifest)"
if [ -n "$registry$tools_only" ]; then
  crane="$(bash release/tools/go-tool.sh crane)"
fi
if [ -n "$key$tools_only" ]; then
  cosign="$(bash release/tools/go-tool.sh cosign)"
  cosign="${SANDCAP_RELEASE_COSIGN:-$cosign}"
fi
[ -z "$tools_only" ] || { say "tools built"; exit 0; }

version="$(cargo metadata --no-deps --format-version 1 --locked | python3 -c \
  'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "sandcap"))')"
chart_version="$(sed -n 's/^version: //p' charts/sandcap/Chart.yaml)"
[ -n "$version" ] && [ -n "$chart_version" ] || die "cannot read the versions"
if [ -n "$(git status --porcelain --untracked-files=no)" ] && [ "${SANDCAP_RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
  die "the checkout has changes: release from a clean checkout (SANDCAP_RELEASE_ALLOW_DIRTY=1 to try anyway)"
fi
commit="$(git rev-parse HEAD)"
notes_from="${notes_from:-$version}"
out="$repo/target/dist/v$version"
rm -rf "$out" && mkdir -p "$out"
download_url="${download_url:-file://$out}"
say "sandcap $version (chart $chart_version) at $commit into $out"


# The binary the image holds (testcluster/images/build.sh builds it with the same script, so that
# one of the two is a no-op).
say "cargo auditable build"
bash release/build-binary.sh
platform=linux-amd64
stage="$(mktemp -d)"
staging_pid=""
trap '[ -z "$staging_pid" ] || kill "$staging_pid" 2>/dev/null; rm -rf "$stage"' EXIT
cp target/release/sandcap LICENSE "$stage/"
archive="sandcap-v$version-$platform.tar.gz"
# Reproducible: sorted names, fixed owner and time (the commit's).
epoch="$(git log -1 --format=%ct)"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$stage" -cf - sandcap LICENSE \
  | gzip -n -9 >"$out/$archive"
grep -q "(commit $commit)" <<<"$("$stage/sandcap" version)" || die "the binary does not name commit $commit"

say "cargo cyclonedx"
cargo cyclonedx --format json --spec-version 1.5 --target x86_64-unknown-linux-gnu \
  --override-filename "sandcap-v$version.cdx" --quiet
mv "sandcap-v$version.cdx.json" "$out/"
rm -f core/sandcap-v*.cdx.json

say "release notes and the chart"
python3 release/notes.py "$notes_from" notes >"$out/RELEASE-NOTES.md"
cp -r charts/sandcap "$stage/chart"
# Chart.yaml ends with its annotations (tests/chart/test_artifacthub.py): the changes join them.
{
  echo "  artifacthub.io/changes: |"
  python3 release/notes.py "$notes_from" changes | sed 's/^/    /'
} >>"$stage/chart/Chart.yaml"
if [ -n "$registry" ]; then
  say "the image"
  bash testcluster/images/build.sh >/dev/null
  mkdir "$stage/image" && tar -xf target/images/sandcap.tar -C "$stage/image"
  # The digest the image will be pushed by: its manifest's, as the layout's index names it.
  image_digest="$(python3 -c 'import json, sys; m = json.load(open(sys.argv[1]))["manifests"]
print(m[0]["digest"] if len(m) == 1 else f"{len(m)} manifests")' "$stage/image/index.json")"
  [[ "$image_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "target/images/sandcap.tar: not one image: $image_digest"
  image="$registry/sandcap@$image_digest"
  # The chart runs exactly the image it was released with.
  sed -i -e 's|^  repository: sandcap$|  repository: '"$registry/sandcap"'|' \
    -e 's|^  digest: ""$|  digest: '"${image#*@}"'|' "$stage/chart/values.yaml"
  sed -i 's|^      image: sandcap:.*$|      image: '"$image"'|' "$stage/chart/Chart.yaml"
  grep -q "digest: ${image#*@}" "$stage/chart/values.yaml" || die "the chart's image.digest was not set"
fi
"$helm" lint --strict "$stage/chart" >/dev/null
"$helm" package "$stage/chart" --destination "$out" >/dev/null

say "krew manifest"
sha="$(sha256sum "$out/$archive" | cut -d' ' -f1)"
cat >"$out/sandcap.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: sandcap
spec:
  version: v$version
  shortDescription: Explain and check sandbox-provider capabilities
  description: |
    kubectl sandcap explains, from the live cluster, why each capability of a
    SandboxLease or SandboxProvider is on or off and what to change (explain),
    checks that sandcap works end to end (check), previews a contract switch
    (plan), and judges manifests offline as the cluster would (validate,
    resolve).
  caveats: |
    sandcap's CRDs and its controller must be installed in the cluster for
    explain, check and plan; validate and resolve work offline.
  platforms:
    - selector:
        matchLabels:
          os: linux
          arch: amd64
      uri: $download_url/$archive
      sha256: $sha
      files:
        - from: sandcap
          to: .
        - from: LICENSE
          to: .
      bin: sandcap
YAML
# Its own install check downloads the uri; .ci/release.sh installs from the archive instead.
quietly "$validate" --skip-install --manifest "$out/sandcap.yaml"

if [ -n "$registry" ]; then
  mapfile -t crane_flags < <(registry_flags crane "$registry" "$plain_http")
  mapfile -t cosign_flags < <(registry_flags cosign "$registry" "$plain_http")

  # Nothing below is tagged until every signature is made (the header's order).
  say "the image and the chart, pushed to $registry by digest, untagged"
  quietly "$crane" push "${crane_flags[@]}" --image-refs "$stage/image.pushed" "$stage/image" "$image"
  pushed="$(cat "$stage/image.pushed")"
  [ "${pushed##*@}" = "$image_digest" ] || die "crane push reported $pushed, not the layout's $image"
  # helm push tags what it pushes: into a registry of this command's own, in memory on loopback,
  # then by the digest helm reported into the release's repository.
  "$crane" registry serve --address 127.0.0.1:0 >"$stage/staging.log" 2>&1 &
  staging_pid=$!
  for _ in $(seq 100); do grep -q "serving on port" "$stage/staging.log" && break; sleep 0.1; done
  staging="127.0.0.1:$(sed -n 's/.*serving on port //p' "$stage/staging.log")"
  [ "$staging" != "127.0.0.1:" ] || die "the staging registry did not start: $(cat "$stage/staging.log")"
  pushed="$("$helm" push "$out/sandcap-$chart_version.tgz" "oci://$staging/charts" --plain-http 2>&1)" \
    || die "helm push (to the staging registry): $(tail -3 <<<"$pushed")"
  chart_digest="$(sed -n 's/^Digest: //p' <<<"$pushed")"
  [[ "$chart_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "helm push reported no digest: $pushed"
  chart="$registry/charts/sandcap@$chart_digest"
  quietly "$crane" copy "${crane_flags[@]}" "$staging/charts/sandcap@$chart_digest" "$chart"
  kill "$staging_pid" 2>/dev/null || true; staging_pid=""

  say "signing both by digest, the SBOM attested"
  signing=(--key "$key" --yes --use-signing-config=false --tlog-upload=false "${cosign_flags[@]}")
  # Each in both of cosign's formats: the Sigstore bundle (an OCI referrer, cosign 3's default)
  # and the `.sig`/`.att` tags, the only format in which policy-controller (0.13) checks a
  # signature made with a key, and the one Kyverno and older cosigns read.
  for bundle in true false; do
    for ref in "$image" "$chart"; do
      quietly keyed "$cosign" sign "${signing[@]}" --new-bundle-format="$bundle" "$ref"
    done
    quietly keyed "$cosign" attest "${signing[@]}" --new-bundle-format="$bundle" --type cyclonedx \
      --predicate "$out/sandcap-v$version.cdx.json" "$image"
  done
  printf 'image %s\nchart %s\n' "$image" "$chart" >"$out/OCI.txt"
  # What a cluster that admits only signed images applies (sigstore's policy-controller): the
  # pushed repository, by tag or digest, only with a signature of this key.
  public_key="$(keyed "$cosign" public-key --key "$key" 2>/dev/null)" || die "cosign public-key --key $key"
  cat >"$out/clusterimagepolicy.yaml" <<YAML
apiVersion: policy.sigstore.dev/v1beta1
kind: ClusterImagePolicy
metadata:
  name: sandcap-signed
spec:
  images:
    - glob: "$registry/sandcap@*"
    - glob: "$registry/sandcap:*"
  authorities:
    - name: sandcap-release-key
      key:
        hashAlgorithm: sha256
        data: |
$(sed 's/^/          /' <<<"$public_key")
YAML
fi

(cd "$out" && sha256sum -- * >SHA256SUMS)
if [ -n "$key" ]; then
  say "signing SHA256SUMS"
  quietly keyed "$cosign" sign-blob --key "$key" --yes --use-signing-config=false --tlog-upload=false \
    --bundle "$out/SHA256SUMS.sigstore.json" "$out/SHA256SUMS"
  chmod 644 "$out/SHA256SUMS.sigstore.json" # cosign writes it for its owner only
fi

if [ -n "$registry" ]; then
  # Every signature is made: the release tags, each read back (a concurrent push to a tag between
  # would leave it naming something this release did not sign).
  say "signed: tagging $registry/sandcap:v$version and $registry/charts/sandcap:$chart_version"
  quietly "$crane" tag "${crane_flags[@]}" "$image" "v$version"
  quietly "$crane" tag "${crane_flags[@]}" "$chart" "$chart_version"
  for tagged in "$registry/sandcap:v$version=$image_digest" "$registry/charts/sandcap:$chart_version=$chart_digest"; do
    now="$("$crane" digest "${crane_flags[@]}" "${tagged%=*}" 2>&1)" || die "crane digest ${tagged%=*}: $now"
    [ "$now" = "${tagged#*=}" ] || die "${tagged%=*} names $now, not the signed ${tagged#*=}: a concurrent push?"
  done
fi
say "done:"
(cd "$out" && ls -l)
