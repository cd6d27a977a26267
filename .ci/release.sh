#!/usr/bin/env bash
# The release command on this checkout (release/release.sh, with main's Unreleased notes),
# publishing to an OCI registry on loopback (crane's, in memory) with a throwaway cosign key, then
# what an admin and a scanner do with its artifacts: cosign verify of image and chart and of the
# SBOM attestation, sigstore's policy-tester with the released ClusterImagePolicy (an admission
# policy that requires the signature), the chart pulled from the registry pointing at the image
# by digest, the checksums, the crates recorded in the binary, the SBOM, the packaged chart's
# Artifact Hub changes, and a krew install of the plugin from the manifest and archive, run as
# `kubectl sandcap`. Called from .ci/run; by hand: `bash .ci/release.sh`. About 8 minutes cold
# (cosign, policy-tester, crane, krew and cargo-cyclonedx built once; the binary and image are
# the node suite's).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo ".ci/release.sh: $*" >&2; exit 1; }

work="$(mktemp -d)"
registry_pid=""
trap '[ -z "$registry_pid" ] || kill "$registry_pid" 2>/dev/null; rm -rf "$work"' EXIT
crane="$(bash release/tools/go-tool.sh crane)"
cosign="$(bash release/tools/go-tool.sh cosign)"
"$crane" registry serve --address 127.0.0.1:0 >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 50); do grep -q "serving on port" "$work/registry.log" && break; sleep 0.1; done
registry="127.0.0.1:$(sed -n 's/.*serving on port //p' "$work/registry.log")"
[ "$registry" != "127.0.0.1:" ] || fail "the registry did not start: $(cat "$work/registry.log")"
export COSIGN_PASSWORD="$(head -c 16 /dev/urandom | base64)"
(cd "$work" && "$cosign" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair"

bash release/release.sh --notes-from Unreleased --registry "$registry" --key "$work/cosign.key" --plain-http
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
out="target/dist/v$version"

# Both artifacts verify with the public key, the SBOM is attested, and the chart from the registry
# runs the pushed image by digest.
image="$(sed -n 's/^image //p' "$out/OCI.txt")"
chart="$(sed -n 's/^chart //p' "$out/OCI.txt")"
verify=(--key "$work/cosign.pub" --insecure-ignore-tlog --allow-http-registry --allow-insecure-registry)
for ref in "$image" "$chart"; do
  "$cosign" verify "${verify[@]}" "$ref" >/dev/null 2>&1 || fail "cosign verify $ref"
done
"$cosign" verify-attestation "${verify[@]}" --type cyclonedx "$image" >/dev/null 2>&1 || fail "cosign verify-attestation $image"
(cd "$work" && COSIGN_PASSWORD=x "$cosign" generate-key-pair --output-key-prefix other >/dev/null 2>&1)
! "$cosign" verify --key "$work/other.pub" --insecure-ignore-tlog --allow-http-registry "$image" >/dev/null 2>&1 \
  || fail "the image verified with a key that never signed it"
# The released admission policy, as sigstore's policy-controller would judge a pod's image: the
# signed image by digest and by tag is admitted; an unsigned image of the same repository, or the
# same policy with another key, is refused.
policy_tester="$(bash release/tools/go-tool.sh policy-tester)"
policy="$out/clusterimagepolicy.yaml"
admits() { "$policy_tester" --policy "$1" --image "$2" >"$work/policy.log" 2>&1; }
for ref in "$image" "$registry/sandcap:v$version"; do
  admits "$policy" "$ref" || fail "the released policy refuses $ref: $(tail -1 "$work/policy.log")"
done
"$crane" mutate --insecure --label sandcap.dev/unsigned=true "$image" -t "$registry/sandcap:unsigned" >/dev/null 2>&1 \
  || fail "crane mutate"
! admits "$policy" "$registry/sandcap:unsigned" || fail "the released policy admits an unsigned image"
python3 - "$policy" "$work/other.pub" >"$work/other-policy.yaml" <<'PY'
import re, sys
policy, key = open(sys.argv[1]).read(), open(sys.argv[2]).read()
block = re.search(r"( +)-----BEGIN PUBLIC KEY-----.*?-----END PUBLIC KEY-----\n", policy, re.S)
print(policy.replace(block.group(0), "".join(block.group(1) + line for line in key.splitlines(True))), end="")
PY
! admits "$work/other-policy.yaml" "$image" || fail "a policy with another key admits the image"

helm="target/testcluster/node/helm"
chart_version="$(sed -n 's/^version: //p' charts/sandcap/Chart.yaml)"
# Whole outputs before grep: `cmd | grep -q` fails under pipefail when grep stops reading first.
rendered="$("$helm" template sandcap "oci://$registry/charts/sandcap" --version "$chart_version" --plain-http \
  --namespace sandcap-system 2>/dev/null)"
grep -q "image: \"\?$image\"\?$" <<<"$rendered" || fail "the chart from $registry does not run $image"

(cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "checksums"

unpacked="$work/archive"
mkdir "$unpacked" && tar -xzf "$out/sandcap-v$version-linux-amd64.tar.gz" -C "$unpacked"
[ "$(cd "$unpacked" && ls)" = "$(printf 'LICENSE\nsandcap')" ] || fail "the archive holds $(ls "$unpacked")"
# cargo-auditable's section: the crates a scanner (trivy, grype, cargo audit bin) reads.
grep -q '\.dep-v0' <<<"$(objdump -h "$unpacked/sandcap")" || fail "no .dep-v0 section in the binary"
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

chart="$out/sandcap-$chart_version.tgz"
grep -q 'artifacthub.io/changes' <<<"$("$helm" show chart "$chart")" || fail "no artifacthub.io/changes in $chart"
"$helm" template sandcap "$chart" --namespace sandcap-system >/dev/null || fail "the packaged chart does not render"

# krew, as a user installs a plugin from a manifest and an archive, into a KREW_ROOT of its own.
krew="$(bash release/tools/go-tool.sh krew)"
kubectl="$(ls -d target/testcluster/v*/kubectl | sort -V | tail -1)"
mkdir -p "$work/bin" && ln -s "$repo/$kubectl" "$work/bin/kubectl" && ln -s "$krew" "$work/bin/kubectl-krew"
export KREW_ROOT="$work/krew" PATH="$work/krew/bin:$work/bin:$PATH"
said="$(kubectl krew install --manifest="$out/sandcap.yaml" --archive="$out/sandcap-v$version-linux-amd64.tar.gz" 2>&1)" \
  || fail "kubectl krew install: $(tail -3 <<<"$said")"
said="$(kubectl sandcap version 2>&1)"
grep -q "sandcap $version (commit $(git rev-parse HEAD))" <<<"$said" || fail "kubectl sandcap version: $said"
grep -q '^ALLOWED SandboxProvider/' <<<"$(kubectl sandcap validate examples/provider-full.yaml)" || fail "kubectl sandcap validate"
echo "release: every artifact checked; kubectl sandcap $version installed by krew"
