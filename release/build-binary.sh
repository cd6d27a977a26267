#!/usr/bin/env bash
# The release binary, target/release/sandcap, as the image and the release archive hold it:
# stripped, --locked (exactly the reviewed Cargo.lock), and built with cargo-auditable, which
# records the crates and their versions in a section of the binary that scanners (trivy, grype,
# `cargo audit bin`) read, from the image too. Only the binary: an example in the same invocation
# would compile every dev-dependency (criterion, proptest, ...) optimized and unify their features
# into the shipped binary's crates; the test images' reference worker is the test build's
# (testcluster/images/build.sh). A no-op when it is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
bash release/tools/cargo-tools.sh cargo-auditable
# The commit `sandcap version` names, set here whoever calls: cargo sets it, from build.rs, in the
# environment of every test it runs, and build.rs reruns (and sandcap is built again, minutes)
# whenever it differs from the last build's, so the node suite's build and release.sh's would
# each undo the other's.
if commit="$(git rev-parse HEAD 2>/dev/null)"; then
  export SANDCAP_GIT_COMMIT="$commit"
fi
PATH="$PWD/target/release-tools/bin:$PATH" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo auditable build --quiet --release --locked --bin sandcap
