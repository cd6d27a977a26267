"""Tests of the values cluster admins expect from charts like cert-manager's and Kyverno's: extra
args, env, volumes and mounts (a private CA for https workers), commonLabels, rbac.create, the
ServiceAccount's, Service's and Deployment's annotations, revisionHistoryLimit and updateStrategy,
the nodeSelector's platform defaults, `global` (imageRegistry, imagePullSecrets) and the webhook's
container port, 10250. Rendered by real Helm through test_chart's helpers.
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
    assert_lints_strict,
    CHART,
    KUBE_VERSION_RANGE,
    NAMESPACE,
    RELEASE,
    REPO,
    container,
    env,
    is_hook,
    merged,
    of_kind,
    one,
    render,
    render_text,
    validate_object,
)
from test_conventions import CONFIGURATION, section

UPGRADE = (REPO / "docs" / "upgrade.md").read_text()
VALUES_YAML = (CHART / "values.yaml").read_text()

CA_MOUNT = "/etc/sandcap/worker-ca"

# Every new value set at once (and then some), for the lint and the Kubernetes schemas.
EVERYTHING: dict[str, Any] = {
    "global": {"imageRegistry": "registry.example.com", "imagePullSecrets": ["shared", {"name": "regcred"}]},
    "imagePullSecrets": [{"name": "regcred"}],
    "commonLabels": {"team": "platform", "cost-center": "42"},
    "podLabels": {"team": "sandcap-pods"},
    "extraArgs": ["--probe-timeout", "10s"],
    "extraEnv": [
        {"name": "SSL_CERT_FILE", "value": f"{CA_MOUNT}/ca-bundle.crt"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ],
    "extraVolumes": [{"name": "worker-ca", "configMap": {"name": "worker-ca-bundle"}}],
    "extraVolumeMounts": [{"name": "worker-ca", "mountPath": CA_MOUNT, "readOnly": True}],
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/sandcap"}},
    "service": {"annotations": {"mesh.example/inject": "false"}},
    "deployment": {"annotations": {"reloader.example/auto": "true"}},
    "podAnnotations": {"prometheus.io/scrape": "true"},
    "revisionHistoryLimit": 3,
    "updateStrategy": {"rollingUpdate": {"maxSurge": "50%"}},
    "nodeSelector": {"kubernetes.io/arch": "arm64", "pool": "infra"},
    "serviceMonitor": {"enabled": True, "labels": {"team": "monitoring"}},
    "prometheusRule": {"enabled": True},
    "networkPolicy": {"enabled": True, "webhookFrom": [{"ipBlock": {"cidr": "172.18.0.0/16"}}]},
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "everything": EVERYTHING,
    "everything-certManager": {**EVERYTHING, "certificates": {"mode": "certManager"}},
    "no-rbac": {"rbac": {"create": False}},
    "no-rbac-existing-serviceaccount": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "platform-sa"},
        "secretNamespaces": ["team-a"],
    },
    "recreate": {"updateStrategy": {"type": "Recreate"}, "replicaCount": 1},
    "no-arch": {"nodeSelector": {"kubernetes.io/arch": None}},
}


def deployment(values: dict[str, Any]) -> dict[str, Any]:
    return one(render(values), "Deployment")


def pod_spec(values: dict[str, Any]) -> dict[str, Any]:
    return deployment(values)["spec"]["template"]["spec"]


def check_pod(values: dict[str, Any]) -> dict[str, Any]:
    return one([o for o in render(values, hooks=True) if is_hook(o)], "Pod")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    assert_lints_strict(SCENARIOS[scenario])


@pytest.mark.parametrize("kube_version", KUBE_VERSION_RANGE)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_objects_validate(scenario: str, kube_version: str) -> None:
    for obj in render(SCENARIOS[scenario], hooks=True):
        validate_object(obj, kube_version)


@pytest.mark.parametrize(
    "values",
    [
        {"extraArgs": "--probe-timeout=10s"},
        {"extraArgs": [10]},
        {"extraEnv": [{"value": "x"}]},
        {"extraEnv": [{"name": "X", "valu": "typo"}]},
        {"extraEnv": [{"name": "X", "value": 1}]},
        {"extraVolumes": [{"configMap": {"name": "x"}}]},
        {"extraVolumes": [{"name": "tls", "emptyDir": {}}]},
        {"extraVolumes": [{"name": "Worker_CA", "emptyDir": {}}]},
        {"extraVolumeMounts": [{"name": "worker-ca"}]},
        {"extraVolumeMounts": [{"name": "worker-ca", "mountPath": "relative"}]},
        {"commonLabels": {"team": 42}},
        {"commonLabels": {"app.kubernetes.io/name": "other"}},
        {"commonLabels": {"helm.sh/chart": "other"}},
        {"commonLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
        {"commonLabels": []},
        {"rbac": {"create": "false"}},
        {"rbac": {"enabled": False}},
        {"service": {"annotations": {"a": 1}}},
        {"deployment": {"annotations": []}},
        {"deployment": {"labels": {"a": "b"}}},
        {"revisionHistoryLimit": -1},
        {"revisionHistoryLimit": "10"},
        {"updateStrategy": {"type": "OnDelete"}},
        {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "one"}}},
        {"updateStrategy": {"rollingUpdate": {"maxSurge": -1}}},
        {"updateStrategy": {"rollingupdate": {}}},
        {"nodeSelector": {"kubernetes.io/arch": 64}},
        {"global": {"imageRegistry": 5}},
        {"global": {"imageRegistry": "registry.example.com//x"}},
        {"global": {"imagePullSecrets": [{"nmae": "regcred"}]}},
        {"global": {"imagePullSecrets": [""]}},
        {"global": []},
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


def test_global_stays_open_for_umbrella_charts() -> None:
    """Keys an umbrella chart shares with its other subcharts are not sandcap's to refuse."""
    assert render({"global": {"storageClass": "fast", "postgresql": {"auth": {"username": "x"}}}})


# ---- extraArgs, extraEnv, extraVolumes, extraVolumeMounts ---------------------------------------


def test_extras_are_empty_by_default() -> None:
    values = merged({})
    assert [values[k] for k in ("extraArgs", "extraEnv", "extraVolumes", "extraVolumeMounts")] == [[], [], [], []]
    c = container(render({}))
    assert c["args"] == ["run"]
    assert [m["name"] for m in c["volumeMounts"]] == ["tls"]
    assert [v["name"] for v in pod_spec({})["volumes"]] == ["tls"]


def test_extras_are_appended_after_the_charts_own() -> None:
    objects = render(EVERYTHING)
    c = container(objects)
    assert c["args"] == ["run", "--probe-timeout", "10s"]
    names = [e["name"] for e in c["env"]]
    assert names[-2:] == ["SSL_CERT_FILE", "NODE"] and names[0] == "POD_NAME"
    assert c["env"][-1] == EVERYTHING["extraEnv"][-1]
    assert c["volumeMounts"][0]["name"] == "tls" and c["volumeMounts"][1:] == EVERYTHING["extraVolumeMounts"]
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["volumes"][0]["name"] == "tls" and spec["volumes"][1:] == EVERYTHING["extraVolumes"]
    # The chart's own settings are untouched: the root filesystem stays read-only.
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert env(objects)["SANDCAP_TLS_CERT"] == "/tls/tls.crt"


def documented_ca_example() -> dict[str, Any]:
    """The private-CA example of values.yaml, above extraVolumes' `# --` comment, as values."""
    comment = VALUES_YAML[VALUES_YAML.index("# A private CA for `https` worker URLs, for example:") :]
    comment = comment[: comment.index("\n# -- Extra volumes of sandcap's pods")]
    lines = [line[len("#   ") :] for line in comment.splitlines() if line.startswith("#   ")]
    return yaml.safe_load("\n".join(lines))


def test_the_documented_private_ca_example_works() -> None:
    """values.yaml's example mounts a bundle and points SSL_CERT_FILE at a file inside the mount."""
    example = documented_ca_example()
    assert set(example) == {"extraVolumes", "extraVolumeMounts", "extraEnv"}
    objects = render(example)
    c = container(objects)
    [mount] = [m for m in c["volumeMounts"] if m["name"] != "tls"]
    assert mount["readOnly"] is True
    path = env(objects)["SSL_CERT_FILE"]
    assert pathlib.PurePosixPath(path).parent == pathlib.PurePosixPath(mount["mountPath"])
    [volume] = [v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] != "tls"]
    assert volume["name"] == mount["name"] and "configMap" in volume
    for kube_version in KUBE_VERSION_RANGE:
        validate_object(one(objects, "Deployment"), kube_version)


def lock_dependencies(package: str) -> list[str]:
    """The dependencies Cargo.lock records for `package` (one version of it)."""
    lock = (REPO / "Cargo.lock").read_text()
    block = re.search(rf'\[\[package\]\]\nname = "{re.escape(package)}"\n(.*?)(?:\n\n|\Z)', lock, re.S)
    assert block, f"Cargo.lock has no package {package}"
    deps = re.search(r"dependencies = \[\n(.*?)\]", block.group(1), re.S)
    return [d.strip().strip('",').split(" ")[0] for d in deps.group(1).splitlines()] if deps else []


def test_the_ca_comment_names_what_the_probe_reads() -> None:
    """values.yaml tells admins to set SSL_CERT_FILE because the probe's client (reqwest) verifies
    through rustls-platform-verifier, which on Linux takes its roots from rustls-native-certs,
    which reads SSL_CERT_FILE instead of the system's bundle. Should that chain change in
    Cargo.lock, the comment (and docs/configuration.md's row) must change with it."""
    assert "rustls-platform-verifier" in lock_dependencies("reqwest")
    assert "rustls-native-certs" in lock_dependencies("rustls-platform-verifier")
    comment = VALUES_YAML[VALUES_YAML.index("# -- Extra volumes of sandcap's pods") :]
    comment = comment[: comment.index("\nextraVolumes:")]
    assert "SSL_CERT_FILE" in comment and "*instead*" in comment and "rustls-native-certs" in comment
    table = section(CONFIGURATION, "Values you will want to look at")
    row = next(line for line in table.splitlines() if "`extraVolumes`" in line)
    assert "SSL_CERT_FILE" in row and "instead" in row


# ---- commonLabels ---------------------------------------------------------------------------------

COMMON = {"team": "platform", "cost-center": "42"}


def selectors(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Every label selector the chart renders (matchLabels and the Service's selector)."""
    found: list[dict[str, str]] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "matchLabels" or (k == "selector" and isinstance(v, dict) and "matchLabels" not in v):
                    if isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
                        found.append(v)
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)

    for obj in objects:
        walk(obj.get("spec", {}))
    return found


@pytest.mark.parametrize("scenario", ["everything", "everything-certManager"])
def test_common_labels_on_every_object_and_never_in_a_selector(scenario: str) -> None:
    objects = render(SCENARIOS[scenario], hooks=True)
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Pod", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds
    for obj in objects:
        labels = obj["metadata"]["labels"]
        expected = dict(COMMON)
        if obj["kind"] == "ServiceMonitor":
            expected["team"] = "monitoring"  # serviceMonitor.labels wins
        assert labels.items() >= expected.items(), (obj["kind"], obj["metadata"]["name"], labels)
    template = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert template == {
        "app.kubernetes.io/name": "sandcap",
        "app.kubernetes.io/instance": RELEASE,
        "cost-center": "42",
        "team": "sandcap-pods",  # podLabels wins
    }
    found = selectors(objects)
    assert len(found) >= 5, found
    for selector in found:
        assert not set(selector) & set(COMMON), selector


def test_no_common_labels_by_default() -> None:
    assert merged({})["commonLabels"] == {}
    for obj in render({}, hooks=True):
        assert not set(obj["metadata"]["labels"]) - {
            "helm.sh/chart",
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/part-of",
            "app.kubernetes.io/component",
            "rbac.authorization.k8s.io/aggregate-to-view",
            "rbac.authorization.k8s.io/aggregate-to-edit",
            "rbac.authorization.k8s.io/aggregate-to-admin",
        }, obj["metadata"]


def test_common_labels_leave_the_rendered_text_free_of_blank_lines() -> None:
    """The labels are spliced into hand-written YAML: no stray blank or whitespace-only lines."""
    for text in render_text({}, is_install=True).values():
        for line in text.splitlines():
            assert line == line.rstrip(), repr(line)
    for path, text in render_text(EVERYTHING, is_install=True).items():
        assert "labels:\n\n" not in text and not re.search(r"^[ ]+$", text, re.M), path


# ---- rbac.create and serviceAccount ---------------------------------------------------------------


def sandcaps_rbac(objects: list[dict[str, Any]], account: str) -> list[tuple[str, str]]:
    """The Roles, ClusterRoles and bindings for sandcap's own ServiceAccount (not the `helm test`
    account's, not the aggregated roles)."""
    bindings = [
        o
        for o in objects
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s.get("name") == account for s in o.get("subjects", []))
    ]
    bound = {b["roleRef"]["name"] for b in bindings}
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole") and o["metadata"]["name"] in bound]
    return [(o["kind"], o["metadata"]["name"]) for o in bindings + roles]


def test_rbac_is_created_by_default() -> None:
    assert merged({})["rbac"] == {"create": True}
    assert len(sandcaps_rbac(render({}), "sandcap")) >= 8


@pytest.mark.parametrize("scenario", ["no-rbac", "no-rbac-existing-serviceaccount"])
def test_rbac_create_false_renders_none_of_sandcaps_rbac(scenario: str) -> None:
    values = SCENARIOS[scenario]
    objects = render(values, hooks=True)
    account = one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert sandcaps_rbac(objects, account) == []
    installed = [o for o in objects if not is_hook(o)]
    # Only the aggregated roles (their own flag) are left of the install's RBAC; nothing binds them.
    rbac = {(o["kind"], o["metadata"]["name"]) for o in installed if o["apiVersion"].startswith("rbac.")}
    assert rbac == {("ClusterRole", "sandcap-view"), ("ClusterRole", "sandcap-edit")}
    # The `helm test` account's RBAC follows helmTest.enabled.
    assert of_kind([o for o in objects if is_hook(o)], "ClusterRoleBinding")
    # The admission policies that narrow what RBAC would grant stay: they guard grants made by hand too.
    policies = {o["metadata"]["name"] for o in installed if o["kind"] == "ValidatingAdmissionPolicy"}
    assert policies == {"sandcap-cabundle-only", "sandcap-scoped-writes"}
    # sandcap is still told which Secrets it may read: the admin's grant must match.
    if "secretNamespaces" in values:
        assert env(objects)["SANDCAP_SECRET_NAMESPACES"] == "team-a"
    notes = render_text(values)["sandcap/templates/NOTES.txt"]
    assert "rbac.create is off" in notes and "--set rbac.create=true --show-only templates/rbac.yaml" in notes
    assert "rbac.create is off" not in render_text({})["sandcap/templates/NOTES.txt"]


def test_rbac_create_false_keeps_the_refusals() -> None:
    """The refusals are about what sandcap is told to read and create, whoever grants it."""
    with pytest.raises(helm.HelmRenderError, match="the release namespace"):
        render({"rbac": {"create": False}, "secretNamespaces": [NAMESPACE]})
    with pytest.raises(helm.HelmRenderError, match="keep scopedWritesPolicy on"):
        render({"rbac": {"create": False}, "secretsClusterWide": True, "scopedWritesPolicy": False})


def test_the_documented_rbac_command_prints_what_rbac_create_leaves_out() -> None:
    """NOTES.txt's `--set rbac.create=true --show-only templates/rbac.yaml` is what the admin grants."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render({"rbac": {"create": True}}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    shown = [d for d in yaml.safe_load_all(manifests["sandcap/templates/rbac.yaml"]) if d]
    assert {(o["kind"], o["metadata"]["name"]) for o in shown} == set(sandcaps_rbac(render({}), "sandcap"))


def test_service_account_annotations() -> None:
    annotations = EVERYTHING["serviceAccount"]["annotations"]
    [account] = [o for o in of_kind(render(EVERYTHING), "ServiceAccount")]
    assert account["metadata"]["annotations"] == annotations
    assert "annotations" not in one(render({}), "ServiceAccount")["metadata"]
    comment = VALUES_YAML[VALUES_YAML.index("  # -- Annotations for the ServiceAccount") :]
    assert "eks.amazonaws.com/role-arn" in comment[:400] and "iam.gke.io/gcp-service-account" in comment[:400]


# ---- annotations ----------------------------------------------------------------------------------


def test_service_and_deployment_annotations() -> None:
    objects = render(EVERYTHING)
    assert one(objects, "Service")["metadata"]["annotations"] == EVERYTHING["service"]["annotations"]
    d = one(objects, "Deployment")
    assert d["metadata"]["annotations"] == EVERYTHING["deployment"]["annotations"]
    # podAnnotations go on the pods, not on the Deployment.
    assert d["spec"]["template"]["metadata"]["annotations"] == EVERYTHING["podAnnotations"]
    defaults = render({})
    assert "annotations" not in one(defaults, "Service")["metadata"]
    assert "annotations" not in one(defaults, "Deployment")["metadata"]
    assert "annotations" not in one(defaults, "Deployment")["spec"]["template"]["metadata"]
    assert merged({})["deployment"] == {"annotations": {}} and merged({})["service"]["annotations"] == {}


# ---- revisionHistoryLimit and updateStrategy ------------------------------------------------------

ZERO_DOWNTIME = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_rollout_defaults() -> None:
    """Kubernetes' default history, and the zero-downtime rolling update chart 0.2.0 rendered."""
    spec = deployment({})["spec"]
    assert spec["revisionHistoryLimit"] == 10
    assert spec["strategy"] == ZERO_DOWNTIME
    assert merged({})["updateStrategy"] == ZERO_DOWNTIME and merged({})["revisionHistoryLimit"] == 10


@pytest.mark.parametrize(
    ("values", "strategy", "history"),
    [
        ({"revisionHistoryLimit": 0}, ZERO_DOWNTIME, 0),
        (
            {"updateStrategy": {"rollingUpdate": {"maxSurge": "50%"}}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}},
            10,
        ),
        # Kubernetes refuses rollingUpdate with Recreate; Helm would keep the default's.
        ({"updateStrategy": {"type": "Recreate"}}, {"type": "Recreate"}, 10),
    ],
)
def test_rollout_values_reach_the_deployment(values: dict[str, Any], strategy: dict[str, Any], history: int) -> None:
    d = deployment(values)
    assert d["spec"]["strategy"] == strategy and d["spec"]["revisionHistoryLimit"] == history
    for kube_version in KUBE_VERSION_RANGE:
        validate_object(d, kube_version)


# ---- nodeSelector ---------------------------------------------------------------------------------

PLATFORM = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, PLATFORM),
        ({"nodeSelector": {"pool": "infra"}}, {**PLATFORM, "pool": "infra"}),
        ({"nodeSelector": {"kubernetes.io/arch": "arm64"}}, {**PLATFORM, "kubernetes.io/arch": "arm64"}),
        ({"nodeSelector": {"kubernetes.io/arch": None}}, {"kubernetes.io/os": "linux"}),
        # The image is Linux only: the OS can be replaced (test_hardening.py) but not dropped.
        ({"nodeSelector": {"kubernetes.io/os": None, "kubernetes.io/arch": None}}, {"kubernetes.io/os": "linux"}),
    ],
)
def test_node_selector_defaults_to_the_images_platform(values: dict[str, Any], expected: dict[str, str]) -> None:
    assert pod_spec(values)["nodeSelector"] == expected
    assert check_pod(values)["spec"]["nodeSelector"] == expected


def test_node_selector_default_is_in_values() -> None:
    """`helm show values` shows the platform, not an empty map."""
    assert merged({})["nodeSelector"] == PLATFORM


# ---- global ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "image"),
    [
        ({}, "sandcap:0.1.0"),
        ({"global": {"imageRegistry": "registry.example.com"}}, "registry.example.com/sandcap:0.1.0"),
        ({"global": {"imageRegistry": "registry.example.com/mirror/"}}, "registry.example.com/mirror/sandcap:0.1.0"),
        (
            {
                "global": {"imageRegistry": "registry.example.com"},
                "image": {"repository": "team/sandcap", "tag": "1.2.3"},
            },
            "registry.example.com/team/sandcap:1.2.3",
        ),
        (
            {"global": {"imageRegistry": "registry.example.com"}, "image": {"digest": "sha256:" + "c" * 64}},
            "registry.example.com/sandcap@sha256:" + "c" * 64,
        ),
    ],
)
def test_global_image_registry_prefixes_both_images(values: dict[str, Any], image: str) -> None:
    assert container(render(values))["image"] == image
    assert check_pod(values)["spec"]["containers"][0]["image"] == image


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({}, None),
        ({"global": {"imagePullSecrets": ["shared"]}}, ["shared"]),
        ({"global": {"imagePullSecrets": [{"name": "shared"}]}}, ["shared"]),
        (
            {
                "imagePullSecrets": [{"name": "regcred"}],
                "global": {"imagePullSecrets": ["shared", {"name": "regcred"}]},
            },
            ["regcred", "shared"],
        ),
    ],
)
def test_global_image_pull_secrets_join_the_charts(values: dict[str, Any], names: list[str] | None) -> None:
    for spec in (pod_spec(values), check_pod(values)["spec"]):
        if names is None:
            assert "imagePullSecrets" not in spec
        else:
            assert spec["imagePullSecrets"] == [{"name": n} for n in names]


def test_global_is_documented_as_read() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["global"]
    assert set(schema["properties"]) == {"imageRegistry", "imagePullSecrets"}
    assert "additionalProperties" not in schema, "an umbrella chart's other globals must pass"
    assert merged({})["global"] == {"imageRegistry": "", "imagePullSecrets": []}


# ---- the webhook's port ---------------------------------------------------------------------------


def test_webhook_listens_on_10250_behind_service_port_443() -> None:
    objects = render({})
    assert merged({})["webhook"]["port"] == 10250
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports["webhook"] == 10250 and env(objects)["SANDCAP_WEBHOOK_ADDR"] == "0.0.0.0:10250"
    https = next(p for p in one(objects, "Service")["spec"]["ports"] if p["name"] == "https")
    assert (https["port"], https["targetPort"]) == (443, "webhook"), "the Service forwards by name"
    hook = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["service"]["port"] == 443, "the apiserver's side does not change"
    policy = one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]["ingress"][0]
    assert policy["ports"] == [{"port": "webhook", "protocol": "TCP"}], "the chart's NetworkPolicy follows by name"


@pytest.mark.parametrize(
    "values",
    [
        {"hostNetwork": True},
        {"hostNetwork": True, "webhook": {"port": 10260}, "admin": {"port": 10250}},
    ],
)
def test_host_network_refuses_the_kubelets_port(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmRenderError, match="10250 .* is the kubelet's"):
        render(values)
    assert render({**values, "webhook": {"port": 10260}, "admin": {"port": 10261}})


def test_the_port_choice_is_explained() -> None:
    comment = VALUES_YAML[VALUES_YAML.index("  # -- Container port of the HTTPS admission listener") :]
    comment = comment[: comment.index("  port: 10250")]
    for word in ("cert-manager", "GKE", "443", "10250", "8443", "hostNetwork"):
        assert word in comment, word
    host_network = VALUES_YAML[VALUES_YAML.index("# -- Run the pods in their node's network namespace") :]
    host_network = host_network[: host_network.index("\nhostNetwork:")]
    assert "8443" not in host_network and "10250" in host_network


def test_docs_document_the_upgrade_and_the_values() -> None:
    upgrade = section(UPGRADE, "From chart 0.2.0")
    assert "**The webhook's container port moves from 8443 to 10250**" in upgrade
    for words in ("stays 443", "NetworkPolicy", "firewall", "webhook.port=8443", "hostNetwork", "kubernetes.io/arch"):
        assert words in upgrade, words
    table = section(CONFIGURATION, "Values you will want to look at")
    for value in ("webhook.port", "extraVolumes", "extraVolumeMounts", "rbac.create", "nodeSelector", "commonLabels"):
        assert f"`{value}`" in table, value
    assert "`10250`" in table and "kubernetes.io/arch: amd64" in table


def test_chart_version_is_a_minor_above_0_2() -> None:
    """New values and new defaults: a minor bump (docs/versioning.md)."""
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    major, minor, _ = (int(x) for x in version.split("."))
    assert (major, minor) >= (0, 3), version


# ---- helm upgrade --reuse-values from chart 0.2.0 -------------------------------------------------

NEW_KEYS = (
    "commonLabels",
    "extraArgs",
    "extraVolumes",
    "extraVolumeMounts",
    "rbac",
    "deployment",
    "revisionHistoryLimit",
    "updateStrategy",
    "workloads",
)


def test_reuse_values_from_a_release_without_the_new_values(tmp_path: pathlib.Path) -> None:
    """`helm upgrade --reuse-values` renders with the previous release's values, chart 0.2.0's
    defaults: none of the new keys, `global` empty, `nodeSelector` {}. The chart renders what
    0.2.0 did where it can (RBAC, the zero-downtime strategy, Linux) instead of failing."""
    chart = tmp_path / "sandcap"
    shutil.copytree(CHART, chart)
    values = yaml.safe_load((chart / "values.yaml").read_text())
    for key in NEW_KEYS:
        del values[key]
    values["global"] = {}
    values["nodeSelector"] = {}
    del values["service"]["annotations"]
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    with helm.Chart.load(chart) as loaded:
        manifests = loaded.render({}, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
    objects = [d for p, t in manifests.items() if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    d = one(objects, "Deployment")
    assert d["spec"]["strategy"] == ZERO_DOWNTIME and d["spec"]["revisionHistoryLimit"] == 10
    assert d["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert d["spec"]["template"]["spec"]["containers"][0]["args"] == ["run"]
    assert len(sandcaps_rbac(objects, "sandcap")) >= 8
    # Observing workloads is on by default, also where the old release's values lack the key.
    assert env(objects)["SANDCAP_OBSERVE_WORKLOADS"] == "true"
