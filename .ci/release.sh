#!/usr/bin/env bash
# The release command on this checkout (release/release.sh, with main's Unreleased notes),
# publishing to an OCI registry on loopback (crane's, in memory) with a throwaway cosign key, then
# what an admin and a scanner do with its artifacts. First the release's order (release.sh's
# header): its transport helpers loosen TLS for a loopback registry only; a run with a fault
# injected after the push, before the first signature, fails and leaves no release tag; in the
# run that publishes, cosign (through a wrapper that records each call) signs the digests pushed
# even while a concurrent push moves the image's release tag to another image, no release tag
# names a release digest before the last signature is made, and COSIGN_PASSWORD reaches cosign's
# calls only, never the build steps (cargo, go, buildah, python3, git: shims that record it).
# Then cosign verify-blob of SHA256SUMS's signature, cosign verify of image and chart and of the
# SBOM attestation, sigstore's policy-tester with the released ClusterImagePolicy (an admission
# policy that requires the signature), the chart pulled from the registry pointing at the image
# by digest, the checksums, the crates recorded in the binary, the SBOM, the packaged chart's
# Artifact Hub changes, and a krew install of the plugin from the manifest and archive, run as
# `kubectl sandcap`. Called from .ci/run; by hand: `bash .ci/release.sh`. About 8 minutes cold
# (cosign, policy-tester, crane, krew and cargo-cyclonedx built once; the binary and image are
# the node suite's); the faulted run adds one more warm run of the release's builds (cargo's
# up-to-date check, cargo-cyclonedx, the image's up-to-date check, helm lint and package).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== .ci/release.sh"
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
COSIGN_PASSWORD="$(head -c 16 /dev/urandom | base64)"
export COSIGN_PASSWORD
(cd "$work" && "$cosign" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
chart_version="$(sed -n 's/^version: //p' charts/sandcap/Chart.yaml)"
out="target/dist/v$version"
image_tag="$registry/sandcap:v$version"
chart_tag="$registry/charts/sandcap:$chart_version"

# TLS verification and HTTPS are given up for a registry on loopback only (release.sh's helpers,
# as every crane and cosign call of the release gets its flags from them).
(
  # shellcheck source=/dev/null
  source release/release.sh
  for remote in registry.example.com ghcr.io/sandcap 10.0.0.1:5000 192.168.1.20:5000/charts \
    127.0.0.1.example.com:5000 localhost.example.com 128.0.0.1 127.256.0.1 "[::2]:5000" 0.0.0.0:5000; do
    ! registry_on_loopback "$remote" || fail "$remote taken for loopback"
    for tool in cosign crane; do
      flags="$(registry_flags "$tool" "$remote" 1)"
      [ -z "$flags" ] || fail "$tool would get $flags for $remote"
    done
  done
  for loopback in 127.0.0.1:5000 127.10.0.1/charts localhost:5000 "[::1]:5000" ::1; do
    [ "$(registry_flags cosign "$loopback")" = --allow-insecure-registry ] || fail "cosign's flags for $loopback"
    [ "$(registry_flags cosign "$loopback" 1 | tr '\n' ' ')" = "--allow-insecure-registry --allow-http-registry " ] \
      || fail "cosign's flags for $loopback over HTTP"
  done
)
said="$(bash release/release.sh --registry registry.example.com --key "$work/cosign.key" --plain-http 2>&1)" \
  && fail "release.sh --plain-http with a registry not on loopback ran"
grep -q 'loopback only' <<<"$said" || fail "release.sh --plain-http registry.example.com: $said"

# cosign as release.sh runs it (SANDCAP_RELEASE_COSIGN): each call recorded, tab-separated (its
# subcommand, whether it had COSIGN_PASSWORD, what each release tag names at that moment, its
# arguments, its last argument last); CHECK_FAULT=SUBCOMMAND fails the first such call;
# CHECK_IMPOSTOR=1 pushes another image to the image's release tag at the first signature, as a
# concurrent push would.
cat >"$work/cosign" <<'SH'
#!/usr/bin/env bash
set -uo pipefail
named() { "$CHECK_CRANE" digest "$1" 2>/dev/null || echo -; }
last="${!#}"
if [ "$1" = sign ] && [ -n "${CHECK_IMPOSTOR:-}" ] && [ ! -e "$CHECK_LOG.impostor" ]; then
  "$CHECK_CRANE" mutate --label sandcap.dev/impostor=true "$last" -t "$CHECK_IMAGE_TAG" >"$CHECK_LOG.impostor" 2>&1 \
    || { echo "the impostor's push failed: $(cat "$CHECK_LOG.impostor")" >&2; exit 1; }
fi
printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "${COSIGN_PASSWORD+password}" "$(named "$CHECK_IMAGE_TAG")" \
  "$(named "$CHECK_CHART_TAG")" "$*" "$last" >>"$CHECK_LOG"
[ "$1" != "${CHECK_FAULT:-}" ] || { echo "cosign $1: the injected fault" >&2; exit 1; }
exec "$CHECK_COSIGN" "$@"
SH
chmod +x "$work/cosign"
export CHECK_CRANE="$crane" CHECK_COSIGN="$cosign" CHECK_LOG="$work/cosign.log" \
  CHECK_IMAGE_TAG="$image_tag" CHECK_CHART_TAG="$chart_tag"
# The build steps' commands, each recording a call that has COSIGN_PASSWORD in its environment.
mkdir "$work/shims"
for tool in cargo go buildah python3 git; do
  real="$(command -v "$tool")" || continue
  # shellcheck disable=SC2016 # the shim's own $* and $@
  printf '#!/bin/sh\n[ -z "${COSIGN_PASSWORD+set}" ] || echo "%s $*" >>"%s"\nexec "%s" "$@"\n' \
    "$tool" "$work/password-leaks" "$real" >"$work/shims/$tool"
  chmod +x "$work/shims/$tool"
done
release=(bash release/release.sh --notes-from Unreleased --registry "$registry" --key "$work/cosign.key" --plain-http)
tags() { "$crane" ls "$1" 2>/dev/null | grep -v '^sha256-' || true; }

# A fault after the push, before the first signature: the release fails, and tags nothing.
CHECK_FAULT=sign SANDCAP_RELEASE_COSIGN="$work/cosign" PATH="$work/shims:$PATH" "${release[@]}" >"$work/faulted.log" 2>&1 \
  && fail "release.sh succeeded with cosign failing"
grep -q 'the injected fault' "$work/faulted.log" || fail "release.sh failed before the fault: $(tail -3 "$work/faulted.log")"
first="$(cut -f6 "$work/cosign.log" | head -1)"
"$crane" manifest "$first" >/dev/null 2>&1 || fail "the fault came before the push: $first is not in $registry"
[ -z "$(tags "$registry/sandcap")$(tags "$registry/charts/sandcap")" ] \
  || fail "a failed release left tags: $(tags "$registry/sandcap") $(tags "$registry/charts/sandcap")"
rm "$work/cosign.log"

# The release, a concurrent push moving the image's tag while it signs.
CHECK_IMPOSTOR=1 SANDCAP_RELEASE_COSIGN="$work/cosign" PATH="$work/shims:$PATH" "${release[@]}"
[ ! -e "$work/password-leaks" ] || fail "COSIGN_PASSWORD in the environment of: $(cat "$work/password-leaks")"
image="$(sed -n 's/^image //p' "$out/OCI.txt")"
chart="$(sed -n 's/^chart //p' "$out/OCI.txt")"
layout_digest="$(python3 - target/images/sandcap.tar <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as archive:
    index = next(m for m in archive.getmembers() if m.name.lstrip("./") == "index.json")
    print(json.load(archive.extractfile(index))["manifests"][0]["digest"])
PY
)"
[ "$image" = "$registry/sandcap@$layout_digest" ] || fail "OCI.txt names $image, not the image built ($layout_digest)"
[ "$("$crane" digest "$image_tag")" = "$layout_digest" ] || fail "$image_tag is not the image built"
[ "$registry/charts/sandcap@$("$crane" digest "$chart_tag")" = "$chart" ] || fail "$chart_tag is not $chart"
python3 - "$work/cosign.log" "$image" "$chart" <<'PY' || fail "cosign's calls ($work/cosign.log)"
import sys
log, image, chart = sys.argv[1:]
calls = [line.rstrip("\n").split("\t") for line in open(log)]
subs = sorted(c[0] for c in calls)
assert subs == sorted(["sign"] * 4 + ["attest"] * 2 + ["public-key", "sign-blob"]), subs
impostor = calls[0][2]
assert impostor != "-" and impostor != image.split("@")[1], f"the impostor did not take the tag: {impostor}"
for sub, password, image_tag, chart_tag, args, last in calls:
    assert password == "password", f"cosign {sub} without COSIGN_PASSWORD"
    # Nothing is tagged before every signature is made: the tags name the impostor or nothing.
    assert image_tag in ("-", impostor) and chart_tag == "-", f"tagged while signing: {image_tag} {chart_tag} at {sub}"
    if sub in ("sign", "attest"):
        # What is signed is what was pushed, by its digest: never the tag's (the impostor).
        assert last in ((image, chart) if sub == "sign" else (image,)), f"cosign {sub} {last}"
        assert "--allow-insecure-registry" in args.split(), "the loopback registry's flags"
signed = [c[5] for c in calls if c[0] == "sign"]
assert signed.count(image) == 2 and signed.count(chart) == 2, signed
print(f"release order: {len(calls)} cosign calls, by digest, before any tag; the impostor {impostor[:19]} never signed")
PY

# SHA256SUMS is signed: verified as an admin would, with the public key; another key, or a changed
# SHA256SUMS, does not verify.
sums=(--bundle "$out/SHA256SUMS.sigstore.json" --insecure-ignore-tlog)
"$cosign" verify-blob --key "$work/cosign.pub" "${sums[@]}" "$out/SHA256SUMS" >/dev/null 2>&1 \
  || fail "cosign verify-blob SHA256SUMS"
(cd "$work" && COSIGN_PASSWORD=x "$cosign" generate-key-pair --output-key-prefix other >/dev/null 2>&1)
! "$cosign" verify-blob --key "$work/other.pub" "${sums[@]}" "$out/SHA256SUMS" >/dev/null 2>&1 \
  || fail "SHA256SUMS verified with a key that never signed it"
{ cat "$out/SHA256SUMS"; printf '%064d  sandcap-v%s-linux-amd64.tar.gz\n' 0 "$version"; } >"$work/SHA256SUMS.changed"
! "$cosign" verify-blob --key "$work/cosign.pub" "${sums[@]}" "$work/SHA256SUMS.changed" >/dev/null 2>&1 \
  || fail "a changed SHA256SUMS verified"

# Both artifacts verify with the public key, the SBOM is attested, and the chart from the registry
# runs the pushed image by digest.
image="$(sed -n 's/^image //p' "$out/OCI.txt")"
chart="$(sed -n 's/^chart //p' "$out/OCI.txt")"
verify=(--key "$work/cosign.pub" --insecure-ignore-tlog --allow-http-registry --allow-insecure-registry)
for ref in "$image" "$chart"; do
  "$cosign" verify "${verify[@]}" "$ref" >/dev/null 2>&1 || fail "cosign verify $ref"
done
"$cosign" verify-attestation "${verify[@]}" --type cyclonedx "$image" >/dev/null 2>&1 || fail "cosign verify-attestation $image"
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
