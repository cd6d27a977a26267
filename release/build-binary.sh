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
# The same environment whoever calls: cargo gives every test it runs variables of its own
# (`SANDCAP_GIT_COMMIT` from build.rs among them), and a build script that reads one reruns, and
# sandcap is built again (minutes), whenever it differs from the last build's; so the node
# suite's build (inside `cargo test`), .ci/prebuild.sh's and release.sh's would each undo the
# others'. Only what finds the toolchain and the caches is passed on, and the commit
# `sandcap version` names.
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
keep=()
for name in HOME CARGO_HOME RUSTUP_HOME RUSTUP_TOOLCHAIN CARGO_TARGET_DIR CARGO_INCREMENTAL TMPDIR; do
  if [ -n "${!name:-}" ]; then keep+=("$name=${!name}"); fi
done
env -i "${keep[@]}" PATH="$PWD/target/release-tools/bin:$PATH" SANDCAP_GIT_COMMIT="$commit" \
  CARGO_PROFILE_RELEASE_STRIP=symbols cargo auditable build --quiet --release --locked --bin sandcap
