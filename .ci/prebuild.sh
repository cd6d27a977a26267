#!/usr/bin/env bash
# Builds, in the background and at the lowest CPU priority, what the suites of README's test
# command build later anyway: the Kubernetes binaries of both minors and the node's, the node's
# other Go binaries, the release binary and the images, and the release check's tools. Started by
# .ci/run before the test command, so the Go builds (about half of a cold run's CPU) use the
# cores while cargo links, while the suites wait on a cluster, and while downloads run, instead
# of after. Each builder takes a lock (flock) and skips what is built, so a suite that needs a
# binary before this gets to it builds it itself, and one that needs it while this builds it waits
# for this build instead of starting another. A step that fails is reported and skipped: the suite
# that needs it builds it again, in the foreground, and fails there with the build's own output.
#
#   bash .ci/prebuild.sh        one line per step on stderr, "prebuild: STEP N s" or "... failed"
set -uo pipefail
cd "$(dirname "$0")/.."
# With the kernel's autogroup scheduling, a session (.ci/run starts this one with setsid) is a
# group of its own that shares the cores fairly with the others, whatever its processes' nice:
# the group's own nice is lowered too.
echo 19 >/proc/self/autogroup 2>/dev/null || true
started=$SECONDS
step() {
  local begun=$SECONDS name="$1"
  shift
  if "$@" >>target/prebuild.log 2>&1; then
    echo "prebuild: $name $((SECONDS - begun)) s (at $((SECONDS - started)) s)" >&2
  else
    echo "prebuild: $name failed after $((SECONDS - begun)) s (target/prebuild.log has its output)" >&2
  fi
}
mkdir -p target
: >target/prebuild.log
# In the order the suites ask for them: the end-to-end suite's control planes, then the node
# suite's binaries, release binary and images, then the release check's tools.
for module in testcluster/k8s-*/; do
  minor="${module#testcluster/k8s-}"
  minor="${minor%/}"
  step "control plane $minor (testcluster/build.sh $minor)" bash testcluster/build.sh "$minor"
done
step "node's Kubernetes binaries (testcluster/build.sh --node)" bash testcluster/build.sh --node
step "node's other binaries (testcluster/node-build.sh)" bash testcluster/node-build.sh
step "crane" bash release/tools/go-tool.sh crane
step "release binary (release/build-binary.sh)" bash release/build-binary.sh
step "images (testcluster/images/build.sh)" bash testcluster/images/build.sh
for tool in helm-docs krew validate-krew-manifest cosign policy-tester; do
  step "$tool" bash release/tools/go-tool.sh "$tool"
done
step cargo-cyclonedx bash release/tools/cargo-tools.sh cargo-cyclonedx
echo "prebuild: done in $((SECONDS - started)) s" >&2
