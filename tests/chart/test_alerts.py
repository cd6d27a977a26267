"""Tests of the chart's PrometheusRule (prometheusRule.*): every expression parses as PromQL
(promql-parser, Prometheus' grammar) and reads only series sandcap exports, with their real labels
and label values; Prometheus' own promtool accepts the rules with every lint and runs their unit
tests (alerts.promtool.yaml); every alert has a severity, waits, and has a runbook of its own in
docs/operations.md, where every metric an alert reads is documented.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
from typing import Any

import helm_python as helm
import promql_parser
import pytest
import yaml

from test_chart import KUBE_VERSION_RANGE, NAMESPACE, assert_lints_strict, of_kind, one, render, validate_object
from test_conventions import REPO, section

OPERATIONS_PATH = "docs/operations.md"
OPERATIONS = (REPO / OPERATIONS_PATH).read_text()

ALERTS_ON = {"prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}}
SCENARIOS: dict[str, dict[str, Any]] = {
    "prometheusRule": ALERTS_ON,
    "prometheusRule-no-leader-election": {**ALERTS_ON, "replicaCount": 1, "leaderElection": {"enabled": False}},
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    assert_lints_strict(SCENARIOS[scenario])


@pytest.mark.parametrize("kube_version", KUBE_VERSION_RANGE)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rule_validates_against_the_crd(scenario: str, kube_version: str) -> None:
    """The PrometheusRule CRD's model (its `for` pattern included), the rest strictly."""
    for obj in render(SCENARIOS[scenario]):
        validate_object(obj, kube_version)


@pytest.mark.parametrize(
    "values",
    [
        {"prometheusRule": {"enable": True}},
        {"prometheusRule": {"certificateExpiryWarningDays": 0}},
        {"prometheusRule": {"certificateExpiryCriticalDays": "7"}},
        {"prometheusRule": {"webhookLatencySeconds": 0}},
    ],
)
def test_schema_rejects_bad_alert_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


# Labels Prometheus Operator puts on every series a ServiceMonitor scrapes; `le` is a histogram
# bucket's bound.
TARGET_LABELS = {"namespace", "pod", "service", "endpoint", "container", "job", "instance"}


def exported_metrics() -> dict[str, set[str]]:
    """Every series name sandcap exports (src/metrics/mod.rs, and the process collector's) with its
    labels, as the Prometheus client writes them: counters get `_total`, histograms `_bucket` (with
    `le`), `_sum`, `_count`."""
    source = (REPO / "src" / "metrics" / "mod.rs").read_text()
    label_sets = {
        name: set(re.findall(r"pub (\w+):", body))
        for name, body in re.findall(r"pub struct (\w+) \{(.*?)\n\}", source, re.S)
    }
    families = {}
    for field, labels, kind, plain in re.findall(r"pub (\w+): (?:Family<(\w+), (\w+)>|(\w+)),", source):
        families[field] = (label_sets[labels] if labels else set(), kind or plain)
    metrics: dict[str, set[str]] = {}
    for field, name in re.findall(r"(\w+): registered\(\s*r,\s*\"(\w+)\"", source):
        labels, kind = families[field]
        base = f"sandcap_{name}"
        if kind == "Counter":
            metrics[f"{base}_total"] = labels
        elif kind == "Histogram":
            metrics |= {f"{base}_bucket": labels | {"le"}, f"{base}_sum": labels, f"{base}_count": labels}
        else:
            assert kind == "Gauge", kind
            metrics[base] = labels
    assert len(metrics) >= 11, metrics
    # The process collector's (src/metrics/process.rs), without the prefix, as client_golang names them.
    process = (REPO / "src" / "metrics" / "process.rs").read_text()
    counters = set(re.findall(r'encode_descriptor\(\s*"(process_\w+)"', process))
    gauges = set(re.findall(r'\(\s*"(process_\w+)",', process)) - counters
    assert counters and gauges, "the process collector's names"
    metrics |= {f"{name}_total": set() for name in counters} | {name: set() for name in gauges}
    return metrics


def label_values() -> dict[str, set[str]]:
    """The values a label can take, where the rules match on them."""
    admission = (REPO / "core" / "src" / "admission.rs").read_text()
    decisions = re.search(r"pub enum Decision \(as_str, parse\) \{(.*?)\}", admission, re.S)
    assert decisions
    return {"verdict": set(re.findall(r'= "(\w+)"', decisions.group(1)))}


def rules(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in one(render(values), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]


# promql-parser's MatchOp is not hashable: pairs, not a dict.
OPERATORS = [
    (promql_parser.MatchOp.Equal, "="),
    (promql_parser.MatchOp.NotEqual, "!="),
    (promql_parser.MatchOp.Re, "=~"),
    (promql_parser.MatchOp.NotRe, "!~"),
]


def operator(op: Any) -> str:
    return next(text for match_op, text in OPERATORS if match_op == op)


Selector = tuple[str, dict[str, tuple[str, str]]]


def selectors(node: Any) -> list[Selector]:
    """(metric name, {label: (operator, value)}) of each series under `node`."""
    found: list[Selector] = []

    def visit(n: Any) -> None:
        if type(n).__name__ == "VectorSelector":
            found.append((n.name, {m.name: (operator(m.op), m.value) for m in n.matchers.matchers}))

    promql_parser.walk(node, visit)
    return found


def groupings(node: Any) -> list[tuple[set[str], list[Selector]]]:
    """The labels each aggregation (`by`, `without`) and vector matching (`on`, `ignoring`) names,
    with the series it applies to."""
    found: list[tuple[set[str], list[Selector]]] = []

    def visit(n: Any) -> None:
        kind = type(n).__name__
        if kind == "AggregateExpr" and n.modifier is not None:
            found.append((set(n.modifier.labels), selectors(n.expr)))
        elif kind == "BinaryExpr" and n.modifier is not None and n.modifier.matching is not None:
            found.append((set(n.modifier.matching.labels), selectors(n.lhs) + selectors(n.rhs)))

    promql_parser.walk(node, visit)
    return found


def test_no_prometheus_rule_by_default() -> None:
    assert not of_kind(render({}), "PrometheusRule")


def test_prometheus_rule_is_labelled_for_rule_selectors() -> None:
    rule = one(render(ALERTS_ON), "PrometheusRule")
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    groups = {g["name"] for g in rule["spec"]["groups"]}
    assert groups == {"sandcap.certificates", "sandcap.webhook", "sandcap.controllers"}


def test_alerts_cover_the_issue() -> None:
    names = {r["alert"] for r in rules(ALERTS_ON)}
    assert names == {
        "SandcapCertificateExpiresSoon",
        "SandcapCertificateExpiresVerySoon",
        "SandcapWebhookErrors",
        "SandcapWebhookSlow",
        "SandcapDown",
        "SandcapNoLeader",
        "SandcapControllersNotRunning",
        "SandcapSeveralLeaders",
        "SandcapReconcileFailures",
    }


def read_problems(where: str, tree: Any) -> list[str]:
    """What is wrong with what the parsed query `tree` reads: every series must be one sandcap
    serves (and documented, for its own), with labels that series has (or a scrape target's),
    values those labels take, this release's namespace (so two installs never mix), and groupings
    by labels its series have. The alerts' and the dashboard's queries are held to it."""
    metrics, values = exported_metrics(), label_values()
    documented = set(re.findall(r"^\| `(sandcap_\w+)`", section(OPERATIONS, "Metrics"), re.M))
    found: list[str] = []
    read = selectors(tree)
    if not read:
        found.append(f"{where}: reads no series")
    for name, matchers in read:
        if name not in metrics:
            found.append(f"{where}: {name} is not a series sandcap serves")
            continue
        if name.startswith("sandcap_") and re.sub(r"_(bucket|sum|count)$", "", name) not in documented:
            found.append(f"{where}: {name} is not in {OPERATIONS_PATH}'s metrics")
        if not set(matchers) <= metrics[name] | TARGET_LABELS:
            found.append(f"{where}: {name} has no label {set(matchers) - metrics[name] - TARGET_LABELS}")
        if matchers.get("namespace") != ("=", NAMESPACE):
            found.append(f"{where}: {name} is not selected by the release namespace")
        for label, (op, value) in matchers.items():
            alternatives = value.split("|") if op == "=~" else [value]
            if label in values and not set(alternatives) <= values[label]:
                found.append(f"{where}: {label} never takes {value}")
    for labels, under in groupings(tree):
        known = set().union(TARGET_LABELS, *(metrics.get(name, set()) for name, _ in under))
        if not labels <= known:
            found.append(f"{where}: groups by {labels - known}, on none of {[n for n, _ in under]}")
    return found


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_alert_expressions_read_real_metrics_with_real_labels(scenario: str) -> None:
    """Every expression parses as PromQL and reads only what sandcap serves ([`read_problems`])."""
    found = [p for rule in rules(SCENARIOS[scenario]) for p in read_problems(rule["alert"], promql_parser.parse(rule["expr"]))]
    assert found == []


def test_alert_expressions_are_checked_for_what_they_read() -> None:
    """Guards the test above: a misspelt metric, a label the series lacks and a bad expression are
    caught."""
    metrics = exported_metrics()
    assert "sandcap_admission_requests_total" in metrics and "sandcap_leader" in metrics
    assert metrics["sandcap_admission_duration_seconds_bucket"] == {"kind", "le"}
    assert metrics["sandcap_reconcile_failures_total"] == {"kind", "error"}
    [(name, _)] = selectors(promql_parser.parse('sandcap_leaders{namespace="x"}'))
    assert name not in metrics
    [(labels, under)] = groupings(promql_parser.parse('sum by (verb) (sandcap_leader{result="x"})'))
    assert labels == {"verb"} and under == [("sandcap_leader", {"result": ("=", "x")})]
    assert not {"verb", "result"} & metrics["sandcap_leader"]
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(sandcap_leader[5m])")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_alerts_wait_have_severity_and_a_runbook_in_the_repo(scenario: str) -> None:
    anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", OPERATIONS, re.M)}
    for rule in rules(SCENARIOS[scenario]):
        assert re.fullmatch(r"Sandcap[A-Z]\w+", rule["alert"])
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert re.fullmatch(r"\d+[mh]", rule["for"]), rule
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"]
        path, _, anchor = annotations["runbook_url"].partition("#")
        # Its own runbook: a section of the operations page named after the alert.
        assert path == OPERATIONS_PATH and anchor == rule["alert"].lower(), annotations["runbook_url"]
        assert anchor in anchors, annotations["runbook_url"]
        runbook = section(OPERATIONS, rule["alert"])
        assert runbook.strip() and ("warning" in runbook.lower() or "critical" in runbook.lower()), rule["alert"]
        # The alerts' table names every alert.
        assert f"`{rule['alert']}`" in section(OPERATIONS, "Alerts"), rule["alert"]


def test_several_leaders_only_with_leader_election() -> None:
    """Without leader election every replica runs the controllers (replicaCount 1 is expected)."""
    alerts = {r["alert"] for r in rules(SCENARIOS["prometheusRule-no-leader-election"])}
    assert "SandcapSeveralLeaders" not in alerts and "SandcapNoLeader" in alerts


def test_alert_thresholds_come_from_values() -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "certificateExpiryWarningDays": 45,
            "certificateExpiryCriticalDays": 3,
            "webhookLatencySeconds": 0.5,
        }
    }
    exprs = {r["alert"]: r["expr"] for r in rules(values)}
    assert exprs["SandcapCertificateExpiresSoon"].endswith("< 45 * 86400")
    assert exprs["SandcapCertificateExpiresVerySoon"].endswith("< 3 * 86400")
    assert exprs["SandcapWebhookSlow"].endswith("> 0.5")
    defaults = {r["alert"]: r["expr"] for r in rules(ALERTS_ON)}
    assert defaults["SandcapCertificateExpiresSoon"].endswith("< 30 * 86400")
    assert defaults["SandcapWebhookSlow"].endswith("> 0.25")


def promtool() -> str:
    """Prometheus' own rule checker; .ci/chart.sh fetches it and says where."""
    path = os.environ.get("SANDCAP_PROMTOOL", str(REPO / "target" / "promtool" / "promtool"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no promtool at {path}: run `bash .ci/chart.sh` (it fetches one) or set SANDCAP_PROMTOOL")
    return path


def rule_file(tmp_path: pathlib.Path, values: dict[str, Any], annotations: bool = True) -> pathlib.Path:
    groups = one(render(values), "PrometheusRule")["spec"]["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        if not annotations:
            del rule["annotations"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_promtool_accepts_the_rules(scenario: str, tmp_path: pathlib.Path) -> None:
    """Expressions, durations, labels and annotation templates, with every lint check fatal."""
    rules_yaml = rule_file(tmp_path, SCENARIOS[scenario])
    check = subprocess.run(
        [promtool(), "check", "rules", "--lint=all", "--lint-fatal", str(rules_yaml)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr


def test_alerts_fire_on_what_they_are_meant_for(tmp_path: pathlib.Path) -> None:
    """tests/chart/alerts.promtool.yaml: each alert fires on the series meant to raise it (after
    its `for`), and not on healthy series or another install's."""
    tests = yaml.safe_load((pathlib.Path(__file__).parent / "alerts.promtool.yaml").read_text())
    tests["rule_files"] = [str(rule_file(tmp_path, ALERTS_ON, annotations=False))]
    alerts = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]}
    assert alerts == {r["alert"] for r in rules(ALERTS_ON)}, "every alert has a unit test"
    path = tmp_path / "alerts.test.yaml"
    path.write_text(yaml.safe_dump(tests))
    run = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
