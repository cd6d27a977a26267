"""The chart's README.md is what helm-docs writes from values.yaml's `# --` comments (with
README.md.gotmpl), and every value in it is described. `SANDCAP_UPDATE_CHART_README=1` writes it."""

from __future__ import annotations

import os
import subprocess

from test_chart import CHART, REPO

README = CHART / "README.md"


def generated() -> str:
    helm_docs = REPO / os.environ.get("SANDCAP_HELM_DOCS", "target/release-tools/helm-docs")
    run = subprocess.run(
        [str(helm_docs), "--chart-search-root", str(CHART.parent), "--chart-to-generate", str(CHART),
         "--skip-version-footer", "--dry-run", "--log-level", "warning"],
        capture_output=True, text=True, check=True,
    )
    assert run.stdout.strip(), run.stderr
    return run.stdout.rstrip("\n") + "\n"


def test_readme_is_generated_from_values() -> None:
    text = generated()
    if os.environ.get("SANDCAP_UPDATE_CHART_README") == "1":
        README.write_text(text)
    assert README.read_text() == text, (
        "charts/sandcap/README.md is stale: SANDCAP_UPDATE_CHART_README=1 bash .ci/chart.sh writes it"
    )


def test_every_value_is_described() -> None:
    rows = [line.split(" | ") for line in README.read_text().splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) > 50, "the values table"
    undescribed = [row[0].lstrip("| ") for row in rows if not row[-1].rstrip(" |").strip()]
    assert not undescribed, f"values without a `# --` comment: {undescribed}"


def test_readme_points_nowhere_outside_the_repository() -> None:
    assert "http://" not in README.read_text() and "https://" not in README.read_text()
