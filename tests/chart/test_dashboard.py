"""Tests of the chart's Grafana dashboard (dashboard.*, files/dashboards/sandcap.json): the
ConfigMap the Grafana sidecar picks up, and every panel's every query parsed as PromQL
(promql-parser, Prometheus' grammar) and checked against the series sandcap serves, with their
real labels, as the alerts' are (test_alerts.py), so that a renamed metric or label fails here
rather than leaving a panel empty.
"""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import promql_parser
import pytest

from test_alerts import ALERTS_ON, groupings, read_problems, rules
from test_chart import KUBE_VERSION_RANGE, NAMESPACE, assert_lints_strict, of_kind, one, render, validate_object
from test_conventions import REPO, section

ON = {"dashboard": {"enabled": True}}
SCENARIOS: dict[str, dict[str, Any]] = {
    "dashboard": ON,
    "dashboard-elsewhere": {
        "dashboard": {"enabled": True, "namespace": "monitoring", "annotations": {"grafana_folder": "Sandcap"}}
    },
}
# What Grafana puts in place of the variables a query names, as a query of the last 5 minutes would.
VARIABLES = {"$__rate_interval": "5m", "$namespace": NAMESPACE}


def dashboard(values: dict[str, Any]) -> dict[str, Any]:
    config_map = one(render(values), "ConfigMap")
    [(key, text)] = config_map["data"].items()
    assert key == "sandcap.json"
    return json.loads(text)


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def problems(board: dict[str, Any]) -> list[str]:
    """What is wrong with the queries of `board`: each must parse, read only what sandcap serves
    (test_alerts.read_problems, as the alerts' expressions), and name in its legend only labels its
    result keeps."""
    found: list[str] = []
    for panel in panels(board):
        for target in panel["targets"]:
            where = f"panel {panel['title']!r}, {target['refId']}"
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            try:
                tree = promql_parser.parse(expr)
            except ValueError as error:
                found.append(f"{where}: does not parse: {error}")
                continue
            found += read_problems(where, tree)
            kept = set().union(*(labels for labels, _ in groupings(tree)))
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            if not legend <= kept - {"le"}:
                found.append(f"{where}: the legend names {legend - kept}, which the query does not keep")
    return found


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    assert_lints_strict(SCENARIOS[scenario])


@pytest.mark.parametrize("kube_version", KUBE_VERSION_RANGE)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_config_map_validates(scenario: str, kube_version: str) -> None:
    for obj in render(SCENARIOS[scenario]):
        validate_object(obj, kube_version)


def test_no_dashboard_by_default() -> None:
    assert not [c for c in of_kind(render({}), "ConfigMap") if "sandcap.json" in c.get("data", {})]


def test_the_sidecar_finds_it_where_asked() -> None:
    config_map = one(render(ON), "ConfigMap")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    elsewhere = one(render(SCENARIOS["dashboard-elsewhere"]), "ConfigMap")
    assert elsewhere["metadata"]["namespace"] == "monitoring"
    assert elsewhere["metadata"]["annotations"] == {"grafana_folder": "Sandcap"}


@pytest.mark.parametrize("values", [{"dashboard": {"enable": True}}, {"dashboard": {"namespace": "Not_A_Name"}}])
def test_schema_rejects_bad_dashboard_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


def test_one_dashboard_per_install_for_its_namespace() -> None:
    board = dashboard(ON)
    assert NAMESPACE in board["title"] and board["uid"] == f"sandcap-{NAMESPACE}"
    assert len(board["uid"]) <= 40, "Grafana refuses longer uids"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["namespace"]["type"] == "constant" and variables["namespace"]["query"] == NAMESPACE
    assert variables["datasource"] == variables["datasource"] | {"type": "datasource", "query": "prometheus"}
    assert "__RELEASE_NAMESPACE__" not in json.dumps(board)


def test_every_query_reads_what_sandcap_serves() -> None:
    assert problems(dashboard(ON)) == []


def test_a_renamed_metric_or_label_fails() -> None:
    """Guards the test above with the mistakes it exists for."""
    text = json.dumps(dashboard(ON))
    for mistake, expected in [
        (("sandcap_leader{", "sandcap_leaders{"), "sandcap_leaders is not a series sandcap serves"),
        (("by (verdict)", "by (decision)"), "groups by {'decision'}"),
        (('verdict=\\"denied\\"', 'verdict=\\"refused\\"'), "verdict never takes refused"),
        (("{{kind}} {{error}}", "{{kind}} {{reason}}"), "the legend names {'reason'}"),
        (('namespace=\\"$namespace\\"', 'namespace=\\"other\\"'), "is not selected by the release namespace"),
        (("(rate(sandcap_reconciles_total", "(rate(sandcap_reconciles_total["), "does not parse"),
    ]:
        old, new = mistake
        assert old in text, old
        found = problems(json.loads(text.replace(old, new, 1)))
        assert any(expected in problem for problem in found), (mistake, found)


def test_panels_fit_the_grid_and_have_unique_ids_and_descriptions() -> None:
    board = dashboard(ON)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["description"] and panel["targets"], panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_operations_md_names_every_panel() -> None:
    documented = section((REPO / "docs" / "operations.md").read_text(), "Dashboard")
    for panel in panels(dashboard(ON)):
        assert f"**{panel['title']}**" in documented, panel["title"]


def test_every_alerts_runbook_points_at_its_panels() -> None:
    titles = {p["title"] for p in panels(dashboard(ON))}
    operations = (REPO / "docs" / "operations.md").read_text()
    for rule in rules(ALERTS_ON):
        runbook = section(operations, rule["alert"])
        line = next((l for l in runbook.splitlines() if l.startswith("On the [dashboard](#dashboard):")), "")
        named = set(re.findall(r"\*\*(.+?)\*\*", line))
        assert named and named <= titles, f"{rule['alert']}: {named - titles or 'no panel named'}"
