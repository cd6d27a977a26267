#!/usr/bin/env bash
# The release artifacts of the checkout's version (Cargo.toml's), from a clean checkout, into
# target/dist/v<version>/ (README.md, "Releasing"):
#
#   release/release.sh [--download-url URL] [--notes-from VERSION]
#                      [--registry HOST[:PORT][/PATH] --key COSIGN_KEY [--plain-http]]
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
# With --registry, also the OCI artifacts, pushed there and signed with cosign's --key (a key pair
# of `cosign generate-key-pair`; COSIGN_PASSWORD in the environment; no transparency log, which
# needs the internet: keyless signing in a release CI with an OIDC identity is the alternative):
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
# --download-url: where the archives will be downloadable (default: a file:// URL of the output
# directory, for trying the manifest with `kubectl krew install --manifest --archive` here).
# --plain-http: the registry speaks HTTP (a registry on loopback, as .ci/release.sh starts one).
# --notes-from: the CHANGELOG.md section to use, default the version's own; `Unreleased` to try a
# release of main. --tools-only builds the tools below and stops (before running the command
# where the registries they come from cannot be reached). SANDCAP_RELEASE_ALLOW_DIRTY=1 builds from a checkout with changes (the
# artifacts then say nothing reliable about a commit; for trying the command only).
#
# Tools, each built once into target/release-tools from the registries: cargo-auditable and
# cargo-cyclonedx (crates.io, release/tools/cargo-tools.sh), helm (testcluster/node/helm),
# validate-krew-manifest, crane and cosign (release/tools/go-tool.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

say() { echo "release.sh: $*"; }
die() { echo "release.sh: $*" >&2; exit 1; }
# Runs a command, silent while it succeeds; when it fails, dies with its last lines.
quietly() { local said; said="$("$@" 2>&1)" || die "$(basename "$1") ${2:-}: $(tail -3 <<<"$said")"; }

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
[ -z "$registry" ] || [ -n "$key" ] || die "--registry needs --key: nothing is pushed unsigned"

export PATH="$repo/target/release-tools/bin:$PATH"
bash release/tools/cargo-tools.sh cargo-auditable cargo-cyclonedx
helm="$repo/target/testcluster/node/helm"
[ -x "$helm" ] || bash testcluster/node-build.sh helm
validate="$(bash release/tools/go-tool.sh validate-krew-manifest)"
if [ -n "$registry$tools_only" ]; then
  crane="$(bash release/tools/go-tool.sh crane)"
  cosign="$(bash release/tools/go-tool.sh cosign)"
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
trap 'rm -rf "$stage"' EXIT
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
  say "the image, pushed to $registry"
  bash testcluster/images/build.sh >/dev/null
  insecure=(); [ -z "$plain_http" ] || insecure=(--insecure)
  mkdir "$stage/image" && tar -xf target/images/sandcap.tar -C "$stage/image"
  "$crane" push "${insecure[@]}" "$stage/image" "$registry/sandcap:v$version" >/dev/null 2>&1
  image="$registry/sandcap@$("$crane" digest "${insecure[@]}" "$registry/sandcap:v$version")"
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
  say "the chart, pushed to $registry/charts; signing both"
  pushed="$("$helm" push "$out/sandcap-$chart_version.tgz" "oci://$registry/charts" ${plain_http:+--plain-http} 2>&1)"
  chart="$registry/charts/sandcap@$(sed -n 's/^Digest: //p' <<<"$pushed")"
  [ "${chart#*@}" != "" ] || die "helm push: $pushed"
  registry_flags=(--allow-insecure-registry); [ -z "$plain_http" ] || registry_flags+=(--allow-http-registry)
  signing=(--key "$key" --yes --use-signing-config=false --tlog-upload=false "${registry_flags[@]}")
  # Each in both of cosign's formats: the Sigstore bundle (an OCI referrer, cosign 3's default)
  # and the `.sig`/`.att` tags, the only format in which policy-controller (0.13) checks a
  # signature made with a key, and the one Kyverno and older cosigns read.
  for bundle in true false; do
    for ref in "$image" "$chart"; do
      quietly "$cosign" sign "${signing[@]}" --new-bundle-format="$bundle" "$ref"
    done
    quietly "$cosign" attest "${signing[@]}" --new-bundle-format="$bundle" --type cyclonedx \
      --predicate "$out/sandcap-v$version.cdx.json" "$image"
  done
  printf 'image %s\nchart %s\n' "$image" "$chart" >"$out/OCI.txt"
  # What a cluster that admits only signed images applies (sigstore's policy-controller): the
  # pushed repository, by tag or digest, only with a signature of this key.
  public_key="$("$cosign" public-key --key "$key" 2>/dev/null)" || die "cosign public-key --key $key"
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
say "done:"
(cd "$out" && ls -l)
