"""Artifact Hub's metadata in Chart.yaml against what the chart really installs and runs: the CRDs
of files/crds/, the image of appVersion, the license of Cargo.toml and LICENSE."""

from __future__ import annotations

import re
import tomllib

import yaml

from test_chart import CHART, REPO

CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
ANNOTATIONS = CHART_YAML["annotations"]


def annotation(name: str):
    return yaml.safe_load(ANNOTATIONS[f"artifacthub.io/{name}"])


def test_crds_are_the_ones_the_chart_installs() -> None:
    installed = []
    for path in sorted((CHART / "files" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        served = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
        installed.append((crd["spec"]["names"]["kind"], served[0], crd["metadata"]["name"]))
    listed = [(c["kind"], c["version"], c["name"]) for c in annotation("crds")]
    assert sorted(listed) == sorted(installed)
    assert all(c["displayName"] and c["description"] for c in annotation("crds"))
    assert not any(key.startswith("sandcap.dev/") for key in ANNOTATIONS), "Artifact Hub's own keys only"


def test_images_are_the_release_of_app_version() -> None:
    assert annotation("images") == [{"name": "sandcap", "image": f"sandcap:{CHART_YAML['appVersion']}"}]


def test_license_is_the_crates_and_is_in_the_repository() -> None:
    cargo = tomllib.loads((REPO / "Cargo.toml").read_text())
    assert ANNOTATIONS["artifacthub.io/license"] == cargo["workspace"]["package"]["license"] == "Apache-2.0"
    assert re.search(r"Apache License\s+Version 2\.0", (REPO / "LICENSE").read_text())
    assert CHART_YAML["appVersion"] == cargo["workspace"]["package"]["version"]
