#!/usr/bin/env bash
# The cargo subcommands of the release and the image, pinned here alone, each built once from
# crates.io into target/release-tools/bin (cargo-auditable about 90 s cold, cargo-cyclonedx 90 s).
#   release/tools/cargo-tools.sh NAME...      prints nothing; exits non-zero if a build fails
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD/target/release-tools"
# One install at a time: .ci/prebuild.sh may be installing the same tool in the background.
mkdir -p "$root"
exec 9>"$root/cargo-tools.lock"
flock 9
for name in "$@"; do
  case "$name" in
    cargo-auditable) version=0.7.7 ;;
    cargo-cyclonedx) version=0.5.9 ;;
    *) echo "cargo-tools.sh: unknown tool $name" >&2; exit 2 ;;
  esac
  if ! cargo install --list --root "$root" 2>/dev/null | grep -qx "$name v$version:"; then
    cargo install --locked --quiet --root "$root" "$name@$version"
  fi
done
