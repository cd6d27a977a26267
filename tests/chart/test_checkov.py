"""checkov, the infrastructure-as-code scanner, on the chart's default render (the install's
objects and the `helm test` ones, as `helm template` prints them): every check that fails is one
docs/security.md explains (its table under "checkov findings"), and every one it explains still
fails, so the table cannot go stale.

checkov lives in a venv of its own, installed by .ci/chart.sh; SANDCAP_CHECKOV names its binary
(default target/checkov-venv/bin/checkov). Run by hand without it, the test skips and says so.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

import pytest
import yaml

from test_chart import REPO, CHART, render



def checkov() -> pathlib.Path:
    configured = os.environ.get("SANDCAP_CHECKOV")
    binary = pathlib.Path(configured or REPO / "target" / "checkov-venv" / "bin" / "checkov")
    if not binary.exists():
        if configured:
            pytest.fail(f"SANDCAP_CHECKOV={configured} does not exist")
        pytest.skip("checkov is not installed: `bash .ci/chart.sh` installs it in target/checkov-venv")
    return binary


def explained() -> set[str]:
    """The check IDs of docs/security.md's checkov table."""
    security = (REPO / "docs" / "security.md").read_text()
    start = security.index("checkov findings on the default render")
    end = security.find("\n\n", security.index("\n|", start))
    table = security[start : end if end >= 0 else len(security)]
    first_cells = re.findall(r"^\| ([^|]+) \|", table, re.M)
    return {check for cell in first_cells for check in re.findall(r"`(CKV2?_K8S_\d+)`", cell)}


def test_every_checkov_finding_is_explained_in_the_security_notes(tmp_path: pathlib.Path) -> None:
    manifest = tmp_path / "sandcap.yaml"
    manifest.write_text(yaml.safe_dump_all(render({}, hooks=True), sort_keys=False))
    # --skip-download: no request to the vendor's platform (CI reaches package registries only).
    result = subprocess.run(
        [checkov(), "--file", manifest, "--framework", "kubernetes", "--skip-download", "--quiet", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["resource_count"] > 20, report["summary"]
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    unexplained = sorted(failed - explained())
    assert not unexplained, f"checkov findings docs/security.md does not explain: {unexplained}"
    fixed = sorted(explained() - failed)
    assert not fixed, f"docs/security.md explains findings checkov no longer reports (remove them): {fixed}"
