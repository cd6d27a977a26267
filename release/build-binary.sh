#!/usr/bin/env bash
# The release binary, target/release/sandcap, as the image and the release archive hold it:
# stripped, --locked (exactly the reviewed Cargo.lock), and built with cargo-auditable, which
# records the crates and their versions in a section of the binary that scanners (trivy, grype,
# `cargo audit bin`) read, from the image too. The reference worker of the test images is built
# in the same invocation: its dev-dependencies change the features of shared crates, so building
# sandcap without it would build it again, differently. A no-op when both are up to date.
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
  cargo auditable build --quiet --release --locked --bin sandcap --example reference-worker
