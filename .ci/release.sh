#!/usr/bin/env bash
# The release command on this checkout (release/release.sh, with main's Unreleased notes), then
# what an admin and a scanner do with its artifacts: the checksums, the crates recorded in the
# binary, the SBOM, the packaged chart's Artifact Hub changes, and a krew install of the plugin
# from the manifest and archive, run as `kubectl sandcap`. Called from .ci/run; by hand:
# `bash .ci/release.sh`. About 6 minutes cold (a release build of its own), 1 warm.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

bash release/release.sh --notes-from Unreleased
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
out="target/dist/v$version"
fail() { echo ".ci/release.sh: $*" >&2; exit 1; }

(cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "checksums"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$out/sandcap-v$version-linux-amd64.tar.gz" -C "$work"
[ "$(cd "$work" && ls)" = "$(printf 'LICENSE\nsandcap')" ] || fail "the archive holds $(ls "$work")"
# cargo-auditable's section: the crates a scanner (trivy, grype, cargo audit bin) reads.
objdump -h "$work/sandcap" | grep -q '\.dep-v0' || fail "no .dep-v0 section in the binary"
python3 - "$out/sandcap-v$version.cdx.json" <<'PY' || fail "SBOM"
import json, sys
sbom = json.load(open(sys.argv[1]))
assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.5", sbom.get("specVersion")
names = {c["name"] for c in sbom["components"]}
for crate in ("sandcap-core", "kube-client", "rustls", "axum", "tokio"):
    assert crate in names, crate
assert "criterion" not in names and "proptest" not in names, "no dev-dependencies"
print(f"SBOM: {len(names)} crates")
PY

helm="target/testcluster/node/helm"
chart="$(ls "$out"/sandcap-*.tgz | grep -v "sandcap-v")"
"$helm" show chart "$chart" | grep -q 'artifacthub.io/changes' || fail "no artifacthub.io/changes in $chart"
"$helm" template sandcap "$chart" --namespace sandcap-system >/dev/null || fail "the packaged chart does not render"

# krew, as a user installs a plugin from a manifest and an archive, into a KREW_ROOT of its own.
krew="target/release-tools/krew"
if [ ! -x "$krew" ]; then
  (cd release/tools/krew && go build -trimpath -o "$repo/$krew" sigs.k8s.io/krew/cmd/krew)
fi
kubectl="$(ls -d target/testcluster/v*/kubectl | sort -V | tail -1)"
mkdir -p "$work/bin" && ln -s "$repo/$kubectl" "$work/bin/kubectl" && ln -s "$repo/$krew" "$work/bin/kubectl-krew"
export KREW_ROOT="$work/krew" PATH="$work/krew/bin:$work/bin:$PATH"
kubectl krew install --manifest="$out/sandcap.yaml" --archive="$out/sandcap-v$version-linux-amd64.tar.gz" >/dev/null 2>&1 \
  || fail "kubectl krew install: $(kubectl krew install --manifest="$out/sandcap.yaml" --archive="$out/sandcap-v$version-linux-amd64.tar.gz" 2>&1 | tail -3)"
kubectl sandcap version | grep -q "sandcap $version (commit $(git rev-parse HEAD))" || fail "kubectl sandcap version: $(kubectl sandcap version 2>&1)"
kubectl sandcap validate examples/provider-full.yaml | grep -q '^ALLOWED SandboxProvider/' || fail "kubectl sandcap validate"
echo "release: every artifact checked; kubectl sandcap $version installed by krew"
