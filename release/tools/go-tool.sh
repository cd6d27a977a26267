#!/usr/bin/env bash
# The Go tools of the release and its checks, each from its module here (go.mod pins it, go.sum
# holds its checksums), built once into target/release-tools/NAME; prints the binary's path.
#   release/tools/go-tool.sh helm-docs|krew|validate-krew-manifest|crane|cosign|policy-tester
# Cold, on 2 cores: cosign and policy-tester about 3 minutes each, the others under a minute each.
set -euo pipefail
cd "$(dirname "$0")"
case "$1" in
  helm-docs) module=helm-docs package=github.com/norwoodj/helm-docs/cmd/helm-docs ;;
  krew) module=krew package=sigs.k8s.io/krew/cmd/krew ;;
  validate-krew-manifest) module=krew package=sigs.k8s.io/krew/cmd/validate-krew-manifest ;;
  crane) module=crane package=github.com/google/go-containerregistry/cmd/crane ;;
  cosign) module=cosign package=github.com/sigstore/cosign/v3/cmd/cosign ;;
  policy-tester) module=policy-tester package=github.com/sigstore/policy-controller/cmd/tester ;;
  *) echo "go-tool.sh: unknown tool $1" >&2; exit 2 ;;
esac
binary="$(cd ../.. && pwd)/target/release-tools/$1"
mkdir -p "$(dirname "$binary")"
# One build of a tool at a time: .ci/prebuild.sh may be building it in the background.
exec 9>"$binary.lock"
flock 9
if [ ! -x "$binary" ]; then
  (cd "$module" && go build -trimpath -o "$binary" "$package")
fi
echo "$binary"
