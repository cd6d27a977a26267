"""Installs, upgrades or uninstalls a chart directory as release "sandcap" in "sandcap-system" with
real Helm (its Go SDK, as the chart tests use it), for the end-to-end tests (tests/e2e/crds.rs).

Usage: release.py KUBECONFIG install|upgrade CHART_DIR [VALUES_JSON] [--force-conflicts]
       release.py KUBECONFIG uninstall

Prints {"ok": true, "info": ...} or {"ok": false, "error": ...}: Helm's refusals are answers the
tests check, so they are printed, not raised.
"""

import json
import sys

import helm_python as helm
from helm_python import _native

from test_chart import NAMESPACE, RELEASE

kubeconfig, action, *rest = sys.argv[1:]
with helm.Config(kubeconfig_path=kubeconfig, namespace=NAMESPACE) as config:
    try:
        if action == "uninstall":
            info = config.uninstall(RELEASE)["info"]
        else:
            chart, *flags = rest
            values = next((f for f in flags if f.startswith("{")), "{}")
            options = {"namespace": NAMESPACE, "force_conflicts": "--force-conflicts" in flags}
            # Config.install/upgrade do not pass `force_conflicts` (helm's --force-conflicts);
            # the C ABI beneath them takes it.
            no_handle = _native.HANDLE(0)
            raw = _native.call_string(
                f"helm_{action}", config._raw(), no_handle, no_handle, chart, RELEASE, values, json.dumps(options)
            )
            info = json.loads(raw)["status"]
        print(json.dumps({"ok": True, "info": info}))
    except helm.HelmError as error:
        print(json.dumps({"ok": False, "error": str(error)}))
