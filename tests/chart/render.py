"""Renders charts/sandcap with real Helm and prints the objects as one JSON list, for the
end-to-end tests (tests/e2e), which apply the chart's own RBAC to a real apiserver.

Usage: render.py VALUES_JSON   (release "sandcap", namespace "sandcap-system")
"""

import json
import sys

import helm_python as helm
import yaml

from test_chart import CHART, NAMESPACE, RELEASE

with helm.Chart.load(CHART) as chart:
    manifests = chart.render(json.loads(sys.argv[1]), name=RELEASE, namespace=NAMESPACE, is_install=True)
objects = [doc for path, text in sorted(manifests.items()) if path.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc]
json.dump(objects, sys.stdout)
