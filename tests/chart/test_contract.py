"""Tests of the chart's contract version (`contract.version`, issue 26): the CRDs it installs, the
version `sandcap run` and the `helm test` check are given, the default an older release's values
get, and the refusal of a version the chart does not carry. Rendered by real Helm through
test_chart's helpers; that crds/ holds what `sandcap crds --contract` prints is tests/crds.rs's.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
from typing import Any

import helm_python as helm
import pytest
import yaml

from test_chart import (
    CHART,
    CRD_NAMES,
    KUBE_VERSION_RANGE,
    NAMESPACE,
    RELEASE,
    REPO,
    chart_crds,
    env,
    is_hook,
    merged,
    of_kind,
    render,
    render_text,
    validate_object,
    without_release_metadata,
)

# Where `sandcap crds --contract` writes each version's CRDs (src/cli/crds.rs, crd_dir), relative
# to the repository; the chart's files/ mirrors the layout.
CRD_DIRS = {"v1": pathlib.Path("crds"), "v2": pathlib.Path("crds", "v2")}


def sandcaps_versions() -> tuple[list[str], str]:
    """The contract versions sandcap knows (core/src/versions.rs) and its default."""
    source = (REPO / "core" / "src" / "versions.rs").read_text()
    block = re.search(r"pub enum ContractVersion \(.*?\) \{(.*?)\n    \}", source, re.S)
    assert block, "core/src/versions.rs declares ContractVersion"
    variants = re.findall(r'(#\[default\]\s*)?\w+ = "([^"]+)",', block.group(1))
    [default] = [version for marked, version in variants if marked]
    return [version for _, version in variants], default


def contract(version: str) -> dict[str, Any]:
    return {"contract": {"version": version}}


def check_args(values: dict[str, Any]) -> list[str]:
    """The arguments of the `helm test` pod's `sandcap check`."""
    [pod] = [o for o in of_kind(render(values, hooks=True), "Pod") if is_hook(o)]
    return pod["spec"]["containers"][0]["args"]


def argument(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, args
    return args[args.index(flag) + 1]


def test_the_chart_knows_sandcaps_versions() -> None:
    """The schema's versions are sandcap's, each has its CRDs in the chart, and the default is
    sandcap's own (a release that never set the value enforces what `sandcap run` would)."""
    versions, default = sandcaps_versions()
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["contract"]["properties"]["version"]["enum"] == versions
    assert list(CRD_DIRS) == versions
    assert merged({})["contract"] == {"version": default}
    files = CHART / "files"
    assert {p.parent for p in files.rglob("*.yaml")} == {files / d for d in CRD_DIRS.values()}


@pytest.mark.parametrize("version", CRD_DIRS)
def test_the_chosen_versions_crds_are_installed(version: str) -> None:
    """The rendered CRDs are the repository's crds/ (or crds/<version>/) but for the labels and
    annotations the chart adds, and the chart's copies are byte for byte the repository's. Each
    version's pattern takes its two files alone: a glob's `*` does not descend into v2/."""
    crds = chart_crds(contract(version))
    assert len(crds) == len(CRD_NAMES) and {c["metadata"]["name"] for c in crds} == CRD_NAMES
    repo = REPO / CRD_DIRS[version]
    for crd in crds:
        validate_object(crd)
        generated = yaml.safe_load((repo / f"{crd['metadata']['name']}.yaml").read_text())
        assert without_release_metadata(crd) == generated, f"{crd['metadata']['name']} differs from {repo}"
    files = sorted((CHART / "files" / CRD_DIRS[version]).glob("*.yaml"))
    assert [p.name for p in files] == sorted(p.name for p in repo.glob("*.yaml"))
    for path in files:
        assert path.read_bytes() == (repo / path.name).read_bytes(), f"{path} differs from {repo / path.name}"


def test_versions_install_different_crds() -> None:
    """Guards the test above: were both versions' CRDs alike, a wrong directory would pass it."""
    v1, v2 = (chart_crds(contract(version)) for version in CRD_DIRS)
    assert [without_release_metadata(c) for c in v1] != [without_release_metadata(c) for c in v2]


def test_run_flag_reads_the_variable_the_chart_sets() -> None:
    """The Deployment passes `--contract` as every `sandcap run` flag: by its SANDCAP_* variable."""
    rules = (REPO / "src" / "run" / "rules.rs").read_text()
    assert '#[arg(long = "contract", env = "SANDCAP_CONTRACT"' in rules


@pytest.mark.parametrize("version", CRD_DIRS)
def test_sandcap_and_the_check_enforce_the_chosen_version(version: str) -> None:
    assert env(render(contract(version)))["SANDCAP_CONTRACT"] == version
    assert argument(check_args(contract(version)), "--contract") == version


def test_v1_by_default() -> None:
    assert env(render({}))["SANDCAP_CONTRACT"] == "v1"
    assert argument(check_args({}), "--contract") == "v1"
    assert chart_crds() == chart_crds(contract("v1"))


def test_reuse_values_from_a_release_without_the_contract_value(tmp_path: pathlib.Path) -> None:
    """`helm upgrade --reuse-values` renders with the previous release's values, not this chart's
    defaults: from a chart without `contract` the release stays on v1, CRDs, sandcap and check."""
    chart = tmp_path / "sandcap"
    shutil.copytree(CHART, chart)
    values = yaml.safe_load((chart / "values.yaml").read_text())
    del values["contract"]
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    with helm.Chart.load(chart) as loaded:
        manifests = loaded.render({}, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
    objects = [d for p, t in sorted(manifests.items()) if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    assert of_kind(objects, "CustomResourceDefinition") == chart_crds(contract("v1"))
    assert env([o for o in objects if not is_hook(o)])["SANDCAP_CONTRACT"] == "v1"
    pod = next(o for o in of_kind(objects, "Pod") if is_hook(o))
    assert argument(pod["spec"]["containers"][0]["args"], "--contract") == "v1"


@pytest.mark.parametrize(
    "values",
    [contract("v3"), contract("V2"), contract(""), {"contract": "v2"}, {"contract": {"versoin": "v2"}}],
)
def test_schema_rejects_unknown_versions(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


@pytest.mark.parametrize(
    "values",
    [
        contract("v3"),
        contract(""),
        # A glob's wildcard: it would install every later version's CRDs.
        contract("*"),
        {"contract": {"version": 2}},
        # sandcap would still be told the version.
        {**contract("v3"), "crds": {"install": False}},
    ],
)
def test_unknown_versions_are_refused_without_the_schema(tmp_path: pathlib.Path, values: dict[str, Any]) -> None:
    """As `helm install --skip-schema-validation` renders (helm lint does not fail on `fail`):
    the chart without its schema."""
    chart = tmp_path / "sandcap"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink()
    version = re.escape(str(values["contract"]["version"]))
    known = re.escape(", ".join(CRD_DIRS))
    refusal = rf'contract.version "{version}" is not a contract version of this chart \({known}\)'
    with helm.Chart.load(chart) as loaded, pytest.raises(helm.HelmRenderError, match=refusal):
        loaded.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def test_lint_strict_v2() -> None:
    report = helm.lint(CHART, contract("v2"), strict=True, namespace=NAMESPACE)
    assert not [m for m in report["messages"] if m["severity"] >= 2] and not report["errors"], report


@pytest.mark.parametrize("kube_version", KUBE_VERSION_RANGE)
def test_v2_objects_and_hooks_validate(kube_version: str) -> None:
    for obj in render(contract("v2"), hooks=True):
        validate_object(obj, kube_version)


@pytest.mark.parametrize("version", CRD_DIRS)
def test_notes_name_the_version_and_its_crds(version: str) -> None:
    notes = render_text(contract(version))["sandcap/templates/NOTES.txt"]
    assert f"contract {version})." in notes.splitlines()[0]
    unmanaged = render_text({**contract(version), "crds": {"install": False}})["sandcap/templates/NOTES.txt"]
    assert f"apply {CRD_DIRS[version]}/ yourself" in unmanaged


def test_configuration_documents_the_contract_value() -> None:
    configuration = (REPO / "docs" / "configuration.md").read_text()
    table = configuration[configuration.index("## Values you will want to look at") :]
    assert re.search(r"^\| `contract\.version` \(default `v1`\) \|", table, re.M)
