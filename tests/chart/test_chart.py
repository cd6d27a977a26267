"""Tests of charts/sandcap, rendered and linted by real Helm (Helm 4's Go SDK through the
helm-python-sdk package; no helm binary, no cluster).

Every scenario's objects are validated against the Kubernetes OpenAPI schemas in strict mode
(kubernetes-validate). cert-manager and Prometheus Operator objects have no schema there: they are
parsed with models generated from those projects' CRDs and must survive a round trip unchanged,
so a misspelt field (dropped by the model) fails just like an unknown field in strict mode.

Run: pip install -r tests/chart/requirements.txt && pytest tests/chart
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import shutil
from functools import cache
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.cert_manager import v1 as cert_manager
from cloudcoil.models.prometheus_operator import v1 as prometheus_operator

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "sandcap"
KUBE_VERSION = "1.35"
# The oldest Kubernetes sandcap supports and the newest schemas kubernetes-validate ships: the chart
# must fit both.
KUBE_VERSION_RANGE = ("1.35", "1.37")
RELEASE = "sandcap"
NAMESPACE = "sandcap-system"
NONROOT = 65532

# Objects kubernetes-validate has no schema for, and the CRD-generated model to check them with.
CRD_MODELS = {
    ("cert-manager.io/v1", "Issuer"): cert_manager.Issuer,
    ("cert-manager.io/v1", "Certificate"): cert_manager.Certificate,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): prometheus_operator.ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): prometheus_operator.PrometheusRule,
}

EGRESS = [{"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}]

SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "selfManaged": {"certificates": {"mode": "selfManaged", "selfManaged": {"secretName": "my-tls"}}},
    "certManager": {"certificates": {"mode": "certManager"}},
    "certManager-issuerRef": {
        "certificates": {
            "mode": "certManager",
            "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"}},
        }
    },
    "replicas=1": {"replicaCount": 1},
    "replicas=3": {"replicaCount": 3, "podAntiAffinity": "hard"},
    "serviceMonitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "networkPolicy": {"networkPolicy": {"enabled": True, "egress": EGRESS}},
    "networkPolicy-ingress-only": {
        "networkPolicy": {"enabled": True, "webhookFrom": [{"ipBlock": {"cidr": "172.18.0.0/16"}}]}
    },
    "secretNamespaces": {"secretNamespaces": ["team-a", "team-b"]},
    "secretsClusterWide": {"secretsClusterWide": True},
    "priorityClassName": {"priorityClassName": "system-cluster-critical"},
    "webhook-options": {
        "webhook": {
            "failurePolicy": "Ignore",
            "timeoutSeconds": 10,
            "exemptNamespaces": ["kube-system"],
            "namespaceSelector": {"matchLabels": {"sandcap.dev/validate": "true"}},
        }
    },
    "no-leader-election": {"replicaCount": 1, "leaderElection": {"enabled": False}},
    "no-caBundle-policy": {"certificates": {"selfManaged": {"caBundleOnlyPolicy": False}}},
    "no-scoped-writes-policy": {"scopedWritesPolicy": False},
    "no-workloads": {"workloads": {"enabled": False}},
    "existing-serviceaccount": {"serviceAccount": {"create": False, "name": "platform-sa"}},
    "image-digest": {"image": {"repository": "registry.example/sandcap", "digest": "sha256:" + "a" * 64}},
}


def merged(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's defaults with `values` over them, as an install would see them."""
    with helm.Chart.load(CHART) as chart:
        return chart.merge_values(values)


@cache
def _render(values_json: str, hooks: bool) -> tuple[dict[str, Any], ...]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(json.loads(values_json), name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc and (hooks or not is_hook(doc)))
    return tuple(objects)


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})


def render(values: dict[str, Any], hooks: bool = False) -> list[dict[str, Any]]:
    """The objects an install applies; with `hooks`, also those `helm test` creates."""
    return copy.deepcopy(list(_render(json.dumps(values, sort_keys=True), hooks)))


def render_text(values: dict[str, Any], **options: Any) -> dict[str, str]:
    with helm.Chart.load(CHART) as chart:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE, **options)


def chart_crds(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The CRDs the chart installs: templates/crds.yaml renders them from files/crds/ (those of the
    contract version, test_contract.py)."""
    return of_kind(render(values or {}), "CustomResourceDefinition")


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def policy(objects: list[dict[str, Any]], suffix: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The ValidatingAdmissionPolicy `<release>-<suffix>` and its binding, if rendered."""
    name = f"{RELEASE}-{suffix}"
    found = [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy") and o["metadata"]["name"] == name]
    if not found:
        return None
    kinds = {o["kind"]: o for o in found}
    assert len(found) == 2 and set(kinds) == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    return kinds["ValidatingAdmissionPolicy"], kinds["ValidatingAdmissionPolicyBinding"]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}


def is_aggregated(role: dict[str, Any]) -> bool:
    """A ClusterRole whose rules kube-controller-manager copies into view, edit or admin."""
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in role["metadata"].get("labels", {}))


def rbac_rules(objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(o, rule) for o in objects if o["kind"] in ("Role", "ClusterRole") for rule in o.get("rules", [])]


def assert_lints_strict(values: dict[str, Any]) -> None:
    """`helm lint --strict` of the chart with `values` finds no warning and no error."""
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    assert not [m for m in report["messages"] if m["severity"] >= 2] and not report["errors"], report


def validate_object(obj: dict[str, Any], kube_version: str = KUBE_VERSION) -> None:
    model = CRD_MODELS.get((obj["apiVersion"], obj["kind"]))
    if model is None:
        # Raises SchemaNotFoundError for a kind it does not know: such an object fails the test.
        kubernetes_validate.validate(obj, kube_version, strict=True)
        return
    round_trip = model.model_validate(obj).model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert round_trip == obj, f"{obj['kind']} has fields its CRD does not define:\n{obj}\n!=\n{round_trip}"


# ---- Helm itself ------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    assert_lints_strict(SCENARIOS[scenario])


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCont": 3},
        {"webhook": {"failurePolicy": "fail"}},
        {"webhook": {"timeoutSeconds": 31}},
        {"certificates": {"mode": "helmGenerated"}},
        {"certificates": {"selfManaged": {"secretNmae": "x"}}},
        {"certificates": {"selfManaged": {"caBundleOnlyPolicy": "yes"}}},
        {"image": {"digest": "latest"}},
        {"secretNamespaces": ["Team_A"]},
        {"controller": {"probeInterval": "often"}},
        {"controller": {"workerUrlAllowedCidrs": ["127.0.0.1"]}},
        {"controller": {"workerUrlAllowedCidrs": "127.0.0.0/8"}},
    ],
)
def test_schema_rejects_typos_and_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


def test_every_value_is_commented() -> None:
    """Each setting an admin can change has a comment right above it (values.yaml is the manual).
    Settings are the keys the schema declares; inside free-form blocks (resources, securityContext)
    the block's own comment covers its contents."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = []
    stack: list[tuple[int, dict[str, Any] | None]] = [(-1, schema)]
    previous = ""
    for line in (CHART / "values.yaml").read_text().splitlines():
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if match:
            indent, key = len(match.group(1)), match.group(2)
            while stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1]
            node = (parent or {}).get("properties", {}).get(key) if parent is not None else None
            if parent is not None and "properties" in parent:
                assert node is not None, f"values.yaml key {key!r} is not in values.schema.json"
                if "properties" not in node and not previous.lstrip().startswith("#"):
                    missing.append(key)
            stack.append((indent, node if node and "properties" in node else None))
        if line.strip():
            previous = line
    assert not missing, f"values without a comment above them: {missing}"


# ---- every rendered object is valid ---------------------------------------------------------


def test_validators_are_strict() -> None:
    """Guards the honesty of the next test: both validators must reject an unknown field."""
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}},
            KUBE_VERSION,
            strict=True,
        )
    certificate = next(o for o in render(SCENARIOS["certManager"]) if o["kind"] == "Certificate")
    certificate["spec"]["dnsNamez"] = ["typo.example"]
    with pytest.raises(AssertionError, match="fields its CRD does not define"):
        validate_object(certificate)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_objects_validate(scenario: str) -> None:
    objects = render(SCENARIOS[scenario])
    assert objects
    for obj in objects:
        validate_object(obj)


EVERYTHING_ON = {
    "replicaCount": 3,
    "priorityClassName": "system-cluster-critical",
    "secretNamespaces": ["team-a"],
    "serviceMonitor": {"enabled": True},
    "networkPolicy": {"enabled": True, "egress": EGRESS},
    "webhook": {"exemptNamespaces": ["kube-system"]},
}


@pytest.mark.parametrize("kube_version", KUBE_VERSION_RANGE)
@pytest.mark.parametrize("mode", ["selfManaged", "certManager"])
def test_objects_fit_the_supported_kubernetes_range(kube_version: str, mode: str) -> None:
    for obj in render({**EVERYTHING_ON, "certificates": {"mode": mode}}):
        validate_object(obj, kube_version)


def test_names_follow_the_release_name() -> None:
    """Another release name: every name sandcap is told about matches the object it names."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render({}, name="platform", namespace="infra")
    objects = [d for p, t in manifests.items() if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    variables = env(objects)
    assert (
        variables["SANDCAP_WEBHOOK_CONFIG_NAME"]
        == one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
        == "platform-sandcap"
    )
    assert (
        variables["SANDCAP_SERVICE_NAME"] == one(objects, "Service")["metadata"]["name"] == "platform-sandcap-webhook"
    )
    assert variables["SANDCAP_CERT_SECRET_NAME"] == "platform-sandcap-webhook-tls"
    # Nothing lands outside the release's namespace (the Events' grant is cluster-wide).
    assert {o["metadata"].get("namespace") for o in objects} == {"infra", None}


@pytest.mark.parametrize("mode", ["selfManaged", "certManager"])
def test_notes_tell_the_admin_how_to_check(mode: str) -> None:
    notes = render_text({"certificates": {"mode": mode}})["sandcap/templates/NOTES.txt"]
    assert "kubectl -n sandcap-system rollout status deployment/sandcap" in notes
    assert 'denied by "validate.sandcap.dev"' in notes and "--dry-run=server" in notes
    if mode == "selfManaged":
        assert "get secret sandcap-webhook-tls" in notes
    else:
        assert "get certificate sandcap-webhook" in notes


# ---- the admission webhook ------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_webhook_configuration(scenario: str) -> None:
    values = merged(SCENARIOS[scenario])
    objects = render(SCENARIOS[scenario])
    config = one(objects, "ValidatingWebhookConfiguration")
    service = one(objects, "Service")
    for hook in config["webhooks"]:
        assert hook["sideEffects"] == "None"
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["failurePolicy"] == values["webhook"]["failurePolicy"]
        assert hook["timeoutSeconds"] == values["webhook"]["timeoutSeconds"]
        assert "caBundle" not in hook["clientConfig"], "the chart must not carry key material"
        target = hook["clientConfig"]["service"]
        assert target == {"name": service["metadata"]["name"], "namespace": NAMESPACE, "path": "/validate", "port": 443}
        resources = set()
        for rule in hook["rules"]:
            assert rule["apiGroups"] == ["sandcap.dev"]
            assert rule["operations"] == ["CREATE", "UPDATE"]
            assert "*" not in json.dumps(rule)
            resources.update(rule["resources"])
        assert resources == {"sandboxproviders", "sandboxleases"}


def test_webhook_defaults_are_safe() -> None:
    hook = one(render({}), "ValidatingWebhookConfiguration")["webhooks"][0]
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 5)
    assert "namespaceSelector" not in hook


def test_webhook_namespace_exemptions() -> None:
    hook = one(render(SCENARIOS["webhook-options"]), "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["namespaceSelector"] == {
        "matchLabels": {"sandcap.dev/validate": "true"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}],
    }


# ---- certificates ---------------------------------------------------------------------------


def test_self_managed_renders_identically() -> None:
    """GitOps: no generated key material, so every render (install or upgrade) is byte-identical."""
    first = render_text({}, is_install=True)
    assert first == render_text({}, is_install=True)
    assert first == render_text({}, is_upgrade=True, revision=7)
    # The CRDs' schema names a `caBundle` field (a provider's worker CA); no object sets one.
    everything = "\n".join(text for name, text in first.items() if not name.endswith("crds.yaml"))
    assert "BEGIN" not in everything and "caBundle:" not in everything
    assert not of_kind(render({}), "Secret")


@pytest.mark.parametrize("scenario", ["default", "selfManaged"])
def test_self_managed_wiring(scenario: str) -> None:
    objects = render(SCENARIOS[scenario])
    variables = env(objects)
    secret = variables["SANDCAP_CERT_SECRET_NAME"]
    assert variables["SANDCAP_SELF_MANAGED_CERTS"] == "true"
    assert (
        variables["SANDCAP_WEBHOOK_CONFIG_NAME"] == one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    )
    assert variables["SANDCAP_SERVICE_NAME"] == one(objects, "Service")["metadata"]["name"]
    assert (variables["SANDCAP_TLS_CERT"], variables["SANDCAP_TLS_KEY"]) == ("/tls/tls.crt", "/tls/tls.key")
    if scenario == "selfManaged":
        assert secret == "my-tls"

    volume = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"]
    assert volume["secretName"] == secret and volume["optional"] is True
    assert [i["key"] for i in volume["items"]] == ["tls.crt", "tls.key"], "the CA key must not be mounted"

    # sandcap may touch exactly this Secret and this webhook configuration, by name.
    names = {
        (rule["resources"][0], tuple(rule["verbs"])): rule.get("resourceNames")
        for _, rule in rbac_rules(objects)
        if rule["resources"] in (["secrets"], ["validatingwebhookconfigurations"])
    }
    assert names == {
        ("secrets", ("create",)): None,
        ("secrets", ("get", "update")): [secret],
        ("validatingwebhookconfigurations", ("get", "patch")): [variables["SANDCAP_WEBHOOK_CONFIG_NAME"]],
    }
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io")]
    assert "annotations" not in one(objects, "ValidatingWebhookConfiguration")["metadata"]


@pytest.mark.parametrize("scenario", ["certManager", "certManager-issuerRef"])
def test_cert_manager_wiring(scenario: str) -> None:
    objects = render(SCENARIOS[scenario])
    certificates = {c["metadata"]["name"]: c for c in of_kind(objects, "Certificate")}
    serving = certificates[f"{RELEASE}-webhook"]
    service = one(objects, "Service")["metadata"]["name"]
    assert serving["spec"]["dnsNames"] == [service, f"{service}.{NAMESPACE}", f"{service}.{NAMESPACE}.svc"]
    config = one(objects, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{RELEASE}-webhook"}
    volume = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"]
    assert volume["secretName"] == serving["spec"]["secretName"] and "optional" not in volume
    assert "SANDCAP_SELF_MANAGED_CERTS" not in env(objects)
    assert not [r for _, r in rbac_rules(objects) if "validatingwebhookconfigurations" in r["resources"]]
    assert not [r for _, r in rbac_rules(objects) if "secrets" in r["resources"]]
    if scenario == "certManager":
        ca = certificates[f"{RELEASE}-ca"]
        assert ca["spec"]["isCA"] is True
        issuers = {i["metadata"]["name"]: i["spec"] for i in of_kind(objects, "Issuer")}
        assert issuers == {
            f"{RELEASE}-selfsigned": {"selfSigned": {}},
            f"{RELEASE}-ca": {"ca": {"secretName": ca["spec"]["secretName"]}},
        }
        assert serving["spec"]["issuerRef"]["name"] == f"{RELEASE}-ca"
    else:
        assert not of_kind(objects, "Issuer") and list(certificates) == [f"{RELEASE}-webhook"]
        assert serving["spec"]["issuerRef"] == {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"}


# ---- the caBundle-only policy ----------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["default", "selfManaged", "existing-serviceaccount"])
def test_ca_bundle_only_policy_binds_sandcaps_account_to_its_configuration(scenario: str) -> None:
    objects = render(SCENARIOS[scenario])
    found = policy(objects, "cabundle-only")
    assert found
    vap, binding = found
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    config = one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["UPDATE", "DELETE"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": [config],
        }
    ]
    # Only sandcap's own ServiceAccount: Helm, a different user, must still be able to upgrade.
    sa = one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{sa}"'
    # The webhook configuration sandcap patches is the one the policy guards.
    assert env(objects)["SANDCAP_WEBHOOK_CONFIG_NAME"] == config
    assert [v["message"] for v in spec["validations"]] == [
        "sandcap's ServiceAccount may not delete its webhook configuration",
        f"sandcap's ServiceAccount may change only webhooks[*].clientConfig.caBundle of {config}",
    ]


@pytest.mark.parametrize(
    "values",
    [
        SCENARIOS["no-caBundle-policy"],
        # cert-manager's cainjector writes the caBundle; sandcap may not touch the configuration at all.
        SCENARIOS["certManager"],
    ],
)
def test_ca_bundle_only_policy_can_be_turned_off(values: dict[str, Any]) -> None:
    assert policy(render(values), "cabundle-only") is None


def test_ca_bundle_only_policy_is_on_by_default() -> None:
    assert merged({})["certificates"]["selfManaged"]["caBundleOnlyPolicy"] is True


# ---- RBAC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_rbac_wildcards(scenario: str) -> None:
    for role, rule in rbac_rules(render(SCENARIOS[scenario])):
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in item for item in rule.get(field, [])), f"{role['metadata']['name']}: {rule}"
        # Users delete their leases through the built-in roles; sandcap itself deletes only the
        # leases it observed (the writes policy keeps it to those), and never a collection.
        observed = rule == OBSERVED_LEASES and role["metadata"]["name"] == RELEASE
        deletes = set() if is_aggregated(role) else {"deletecollection"} if observed else {"delete", "deletecollection"}
        assert not set(rule["verbs"]) & {"escalate", "bind", "impersonate", *deletes}


# The observer's writes: the observed leases, one per workload (src/controller/observe/).
OBSERVED_LEASES = {"apiGroups": ["sandcap.dev"], "resources": ["sandboxleases"], "verbs": ["create", "patch", "delete"]}
# What the observer reads, as metadata only: the workloads of each kind core/src/workloads/ knows,
# and the namespaces that opt in.
OBSERVED_READS = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
    {"apiGroups": ["agents.x-k8s.io"], "resources": ["sandboxes"], "verbs": ["list", "watch"]},
    {"apiGroups": ["extensions.agents.x-k8s.io"], "resources": ["sandboxclaims"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]


def workload_kinds() -> list[tuple[str, str]]:
    """(group, plural) of every workload kind, as core/src/workloads/mod.rs's KINDS table has them."""
    source = (REPO / "core" / "src" / "workloads" / "mod.rs").read_text()
    table = source[source.index("pub const KINDS") :]
    found = re.findall(r'group: "([^"]+)",\s*plural: "([^"]+)"', table)
    assert len(found) == 3, found
    return found


def test_cluster_role_grants_only_what_the_controllers_use() -> None:
    roles = {r["metadata"]["name"]: r for r in of_kind(render({}), "ClusterRole")}
    before = [
        {
            "apiGroups": ["sandcap.dev"],
            "resources": ["sandboxproviders", "sandboxleases"],
            "verbs": ["list", "watch"],
        },
    ]
    after = [
        {
            "apiGroups": ["sandcap.dev"],
            "resources": ["sandboxproviders/status", "sandboxleases/status"],
            "verbs": ["patch"],
        },
        # The endpoints of worker Services, each probed (docs/contract.md, "What verifies").
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    assert roles[RELEASE]["rules"] == before + [OBSERVED_LEASES] + after + OBSERVED_READS
    off = {r["metadata"]["name"]: r for r in of_kind(render(SCENARIOS["no-workloads"]), "ClusterRole")}
    assert off[RELEASE]["rules"] == before + after


def test_the_observer_reads_every_workload_kind_and_nothing_else() -> None:
    """One list/watch rule per kind of core/src/workloads/'s table, no more: a new kind there
    needs its rule here (and in docs/controller.md)."""
    reads = [(r["apiGroups"][0], r["resources"][0]) for r in OBSERVED_READS if r["resources"] != ["namespaces"]]
    assert reads == workload_kinds()


def test_workloads_switch_reaches_sandcap_and_its_helm_test() -> None:
    """`workloads.enabled` (default on) is `sandcap run --observe-workloads`
    (SANDCAP_OBSERVE_WORKLOADS) and `check --observe-workloads`: off, sandcap observes nothing
    and has none of the observer's rights, and the check does not ask for them."""
    assert merged({})["workloads"]["enabled"] is True
    for values, value in (({}, "true"), (SCENARIOS["no-workloads"], "false")):
        assert env(render(values))["SANDCAP_OBSERVE_WORKLOADS"] == value
        [pod] = [o for o in render(values, hooks=True) if o["kind"] == "Pod"]
        assert f"--observe-workloads={value}" in pod["spec"]["containers"][0]["args"]
    off = render(SCENARIOS["no-workloads"])
    granted = [r for _, r in rbac_rules(off)]
    for rule in [OBSERVED_LEASES] + OBSERVED_READS:
        assert rule not in granted, rule
    with pytest.raises(helm.HelmValuesError):
        render({"workloads": {"enabled": "yes"}})


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_events_where_the_objects_they_are_about_live(scenario: str) -> None:
    """kube's Recorder writes an Event about a cluster-scoped SandboxProvider in "default"
    (kube-runtime's events.rs) and one about a SandboxLease in the lease's namespace, which may be
    any: one cluster-wide grant of create and patch (a repeated Event is a patch), and no other."""
    objects = render(SCENARIOS[scenario])
    writers = [(role["kind"], role["metadata"]["name"], rule) for role, rule in rbac_rules(objects)]
    assert [w for w in writers if "events" in w[2]["resources"]] == [
        ("ClusterRole", RELEASE, {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]})
    ]


def test_leader_election_role() -> None:
    objects = render({})
    role = next(r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("leader-election"))
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["sandcap-controller"],
            # kube-lease-manager never updates (replaces) the Lease; the e2e suite elects with this.
            "verbs": ["get", "patch"],
        },
    ]
    assert env(objects)["SANDCAP_LEADER_ELECT"] == "true"
    off = render(SCENARIOS["no-leader-election"])
    assert env(off)["SANDCAP_LEADER_ELECT"] == "false"
    assert not [r for _, r in rbac_rules(off) if "leases" in r["resources"]]


def secret_readers(objects: list[dict[str, Any]]) -> dict[tuple[str, str | None], list[str]]:
    """Who may read Secrets beyond the certificate Secret: (kind, namespace) -> verbs."""
    return {
        (role["kind"], role["metadata"].get("namespace")): rule["verbs"]
        for role, rule in rbac_rules(objects)
        if "secrets" in rule["resources"] and "resourceNames" not in rule and rule["verbs"] != ["create"]
    }


def test_secret_access_is_opt_in_per_namespace() -> None:
    assert secret_readers(render({})) == {}
    objects = render(SCENARIOS["secretNamespaces"])
    assert secret_readers(objects) == {
        ("Role", "team-a"): ["list", "watch"],
        ("Role", "team-b"): ["list", "watch"],
    }
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    for binding in of_kind(objects, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert secret_readers(render(SCENARIOS["secretsClusterWide"])) == {("ClusterRole", None): ["list", "watch"]}


def test_sandcap_reads_secrets_exactly_where_rbac_allows() -> None:
    """The controller watches Secrets only where it may (a watch it is refused would never heal)."""
    assert env(render({}))["SANDCAP_SECRET_NAMESPACES"] == ""
    assert env(render(SCENARIOS["secretNamespaces"]))["SANDCAP_SECRET_NAMESPACES"] == "team-a,team-b"
    assert env(render(SCENARIOS["secretsClusterWide"]))["SANDCAP_SECRET_NAMESPACES"] == "*"


def test_bindings_point_at_rendered_roles_and_service_account() -> None:
    for scenario in ("default", "secretNamespaces", "secretsClusterWide", "existing-serviceaccount"):
        objects = render(SCENARIOS[scenario])
        roles = {
            (r["kind"], r["metadata"]["name"], r["metadata"].get("namespace"))
            for r in of_kind(objects, "Role") + of_kind(objects, "ClusterRole")
        }
        sa = one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        for binding in of_kind(objects, "RoleBinding") + of_kind(objects, "ClusterRoleBinding"):
            ref = binding["roleRef"]
            assert (
                ref["kind"],
                ref["name"],
                binding["metadata"].get("namespace") if ref["kind"] == "Role" else None,
            ) in roles
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert not of_kind(render(SCENARIOS["existing-serviceaccount"]), "ServiceAccount")


# ---- the pods -------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_security_context_hardened(scenario: str) -> None:
    pod = one(render(SCENARIOS[scenario]), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is True
    assert "hostNetwork" not in pod and "hostPID" not in pod
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == NONROOT
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc.get("privileged", False) is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_probes_and_ports() -> None:
    c = container(render({}))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"webhook": 10250, "admin": 8080}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    variables = env(render({}))
    assert variables["SANDCAP_WEBHOOK_ADDR"] == "0.0.0.0:10250" and variables["SANDCAP_ADMIN_ADDR"] == "0.0.0.0:8080"
    assert variables["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert variables["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in one(render({}), "Service")["spec"]["ports"]}
    assert service_ports == {"https": (443, "webhook"), "metrics": (8080, "admin")}


def test_worker_urls_reach_refused_addresses_only_where_allowed() -> None:
    defaults = env(render({}))
    assert defaults["SANDCAP_ALLOW_WORKER_URLS"] == "false"
    assert "SANDCAP_WORKER_URL_ALLOWED_CIDRS" not in defaults, "an empty list must not reach the flag parser"
    allowed = env(render({"controller": {"allowWorkerUrls": True, "workerUrlAllowedCidrs": ["127.0.0.0/8", "::1/128"]}}))
    assert allowed["SANDCAP_ALLOW_WORKER_URLS"] == "true"
    assert allowed["SANDCAP_WORKER_URL_ALLOWED_CIDRS"] == "127.0.0.0/8,::1/128"


def test_worker_service_endpoints_are_those_the_cluster_vouches_for_unless_widened() -> None:
    defaults = env(render({}))
    assert defaults["SANDCAP_ENDPOINT_SLICES"] == "managed"
    assert "SANDCAP_WORKER_ENDPOINT_CIDRS" not in defaults, "an empty list must not reach the flag parser"
    widened = env(render({"controller": {"endpointSlices": "any", "workerEndpointCidrs": ["10.244.0.0/16", "fd00::/64"]}}))
    assert widened["SANDCAP_ENDPOINT_SLICES"] == "any"
    assert widened["SANDCAP_WORKER_ENDPOINT_CIDRS"] == "10.244.0.0/16,fd00::/64"


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_pdb_only_with_more_than_one_replica(replicas: int) -> None:
    objects = render({"replicaCount": replicas})
    assert one(objects, "Deployment")["spec"]["replicas"] == replicas
    pdbs = of_kind(objects, "PodDisruptionBudget")
    if replicas == 1:
        assert pdbs == []
    else:
        assert len(pdbs) == 1 and pdbs[0]["spec"]["minAvailable"] == 1
        assert pdbs[0]["spec"]["selector"] == one(objects, "Deployment")["spec"]["selector"]
    assert (
        of_kind(render({"replicaCount": replicas, "podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget")
        == []
    )


def test_high_availability_defaults() -> None:
    deployment = one(render({}), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["labelSelector"] == {
        "matchLabels": deployment["spec"]["selector"]["matchLabels"]
    }
    hard = one(render(SCENARIOS["replicas=3"]), "Deployment")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(hard) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert "affinity" not in one(render({"podAntiAffinity": "none"}), "Deployment")["spec"]["template"]["spec"]


def test_priority_class_and_image() -> None:
    pod = one(render(SCENARIOS["priorityClassName"]), "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert "priorityClassName" not in one(render({}), "Deployment")["spec"]["template"]["spec"]
    assert container(render({}))["image"] == "sandcap:0.1.0"
    assert container(render(SCENARIOS["image-digest"]))["image"] == "registry.example/sandcap@sha256:" + "a" * 64


# ---- optional objects -----------------------------------------------------------------------


def test_service_monitor_only_when_enabled() -> None:
    assert not of_kind(render({}), "ServiceMonitor")
    objects = render(SCENARIOS["serviceMonitor"])
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(objects, "Service")["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]


def test_network_policy_only_when_enabled() -> None:
    assert not of_kind(render({}), "NetworkPolicy")
    ingress_only = one(render(SCENARIOS["networkPolicy-ingress-only"]), "NetworkPolicy")["spec"]
    assert ingress_only["policyTypes"] == ["Ingress"] and "egress" not in ingress_only
    webhook = ingress_only["ingress"][0]
    assert webhook["ports"] == [{"port": "webhook", "protocol": "TCP"}]
    # The `helm test` pod follows (test_conventions.py).
    assert webhook["from"][0] == {"ipBlock": {"cidr": "172.18.0.0/16"}}
    spec = one(render(SCENARIOS["networkPolicy"]), "NetworkPolicy")["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert {p["port"] for p in spec["egress"][0]["ports"]} == {53}, "DNS is always allowed once egress is restricted"
    assert spec["egress"][1:] == EGRESS


# ---- the CRDs, installed and upgraded as templates ------------------------------------------

CRD_NAMES = {"sandboxproviders.sandcap.dev", "sandboxleases.sandcap.dev"}


def without_release_metadata(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as `sandcap crds` prints it: without the labels and annotations the chart adds."""
    crd = copy.deepcopy(crd)
    crd["metadata"].pop("labels", None)
    crd["metadata"].pop("annotations", None)
    return crd


def test_crds_are_templates_kept_on_uninstall() -> None:
    with helm.Chart.load(CHART) as chart:
        # A crds/ directory would be installed once, before the templates, without Helm's
        # ownership metadata: the templates' CRDs would then conflict with it.
        assert chart.crds == []
    crds = chart_crds()
    assert {c["metadata"]["name"] for c in crds} == CRD_NAMES
    for crd in crds:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "sandcap"
    unkept = chart_crds({"crds": {"keep": False}})
    assert [without_release_metadata(c) for c in unkept] == [without_release_metadata(c) for c in crds]
    assert all("annotations" not in c["metadata"] for c in unkept)
    assert chart_crds({"crds": {"install": False}}) == []
    notes = render_text({"crds": {"install": False}})["sandcap/templates/NOTES.txt"]
    assert "apply crds/ yourself" in notes


@pytest.mark.parametrize("values", [{"crds": {"install": False}}, {"crds": {"install": True, "keep": False}}])
def test_crd_values_lint(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    assert not [m for m in report["messages"] if m["severity"] >= 2] and not report["errors"], report


@pytest.mark.parametrize("values", [{"crds": {"instal": False}}, {"crds": {"keep": "yes"}}, {"crds": True}])
def test_crd_values_reject_typos(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


def upgrade_manifest(chart_dir: pathlib.Path) -> list[dict[str, Any]]:
    """What `helm upgrade` would apply from the chart at `chart_dir` (its templates; never crds/)."""
    with helm.Chart.load(chart_dir) as chart:
        manifests = chart.render({}, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
    return [d for p, t in sorted(manifests.items()) if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]


def capability_rules(crd: dict[str, Any]) -> list[dict[str, Any]]:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec["properties"]["environmentDrivers"]["items"]["properties"]["sandboxCapabilities"][
        "x-kubernetes-validations"
    ]


def test_an_upgrade_applies_a_changed_rule(tmp_path: pathlib.Path) -> None:
    """An older chart whose provider CRD lacks a rule (a removed key allowed, typos unnamed):
    the upgrade's manifest carries the provider CRD with the new rules, so Helm patches it (the
    e2e suite shows the apiserver then enforcing them). With the CRDs in crds/, as before, the
    upgrade's manifest holds no CRD at all."""
    old = tmp_path / "old"
    shutil.copytree(CHART, old)
    provider = old / "files" / "crds" / "sandboxproviders.sandcap.dev.yaml"
    crd = yaml.safe_load(provider.read_text())
    rules = capability_rules(crd)
    removed = next(r for r in rules if "concurrentSyncOperations" in r["rule"])
    rules.remove(removed)
    for rule in rules:
        rule.pop("messageExpression", None)
    provider.write_text("---\n" + yaml.safe_dump(crd, sort_keys=False))
    chart_yaml = old / "Chart.yaml"
    chart_yaml.write_text(re.sub(r"(?m)^version: .*$", "version: 0.1.0", chart_yaml.read_text()))

    def crd_in(objects: list[dict[str, Any]]) -> dict[str, Any]:
        crds = of_kind(objects, "CustomResourceDefinition")
        return next(c for c in crds if c["metadata"]["name"] == "sandboxproviders.sandcap.dev")

    before, after = crd_in(upgrade_manifest(old)), crd_in(upgrade_manifest(CHART))
    assert before["metadata"]["labels"]["helm.sh/chart"] == "sandcap-0.1.0"
    assert after["metadata"]["labels"]["helm.sh/chart"] != "sandcap-0.1.0"
    assert removed in capability_rules(after) and removed not in capability_rules(before)
    assert any("messageExpression" in r for r in capability_rules(after))
    assert not any("messageExpression" in r for r in capability_rules(before))
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}

    layout = tmp_path / "crds-dir"
    shutil.copytree(CHART, layout)
    shutil.move(layout / "files" / "crds", layout / "crds")
    (layout / "templates" / "crds.yaml").unlink()
    assert not of_kind(upgrade_manifest(layout), "CustomResourceDefinition")


def test_reuse_values_from_a_release_without_crd_values(tmp_path: pathlib.Path) -> None:
    """`helm upgrade --reuse-values` renders with the previous release's values instead of this
    chart's defaults: from chart 0.1.0 there is no `crds` block, and the CRDs are still rendered,
    kept."""
    chart = tmp_path / "sandcap"
    shutil.copytree(CHART, chart)
    values = yaml.safe_load((chart / "values.yaml").read_text())
    del values["crds"]
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    with helm.Chart.load(chart) as loaded:
        manifests = loaded.render({}, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
    objects = [d for p, t in manifests.items() if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    crds = of_kind(objects, "CustomResourceDefinition")
    assert {c["metadata"]["name"] for c in crds} == CRD_NAMES
    assert all(c["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"} for c in crds)
    assert "installed and upgraded with this release, kept on uninstall" in manifests["sandcap/templates/NOTES.txt"]


# ---- graceful rollover ----------------------------------------------------------------------

# How long sandcap may wait for the reviews in flight once the drain window is over (the webhook
# listener's drain timeout, src/listener.rs): the least its stop needs past the window.
IN_FLIGHT_DRAIN = 15


def shutdown_settings(values: dict[str, Any]) -> tuple[int, int, int, int]:
    """(preStop sleep, drain window, sandcap's stop timeout, grace period) of the rendered pod, in seconds."""
    pod = one(render(values), "Deployment")["spec"]["template"]["spec"]
    [c] = pod["containers"]
    variables = {e["name"]: e.get("value") for e in c["env"]}
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    window, timeout = (int(variables[f"SANDCAP_SHUTDOWN_{n}"].removesuffix("s")) for n in ("DRAIN_WINDOW", "TIMEOUT"))
    return pre_stop, window, timeout, pod["terminationGracePeriodSeconds"]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"shutdown": {"preStopSleepSeconds": 0}},
        {"shutdown": {"preStopSleepSeconds": 10, "drainWindowSeconds": 20, "timeoutSeconds": 40}},
        {"shutdown": {"drainWindowSeconds": 0, "timeoutSeconds": 15}},
    ],
)
def test_a_stopping_pod_is_never_killed_before_its_drain_ends(values: dict[str, Any]) -> None:
    """Every shutdown value reaches the pod, and the kubelet's grace period covers the preStop
    sleep, the drain window and the in-flight drain, so that a pod stopping as it should is
    never killed."""
    settings = merged(values)["shutdown"]
    pre_stop, window, timeout, grace = shutdown_settings(values)
    assert (pre_stop, window, timeout) == (
        settings["preStopSleepSeconds"],
        settings["drainWindowSeconds"],
        settings["timeoutSeconds"],
    )
    assert grace == pre_stop + timeout
    assert timeout >= window + IN_FLIGHT_DRAIN
    assert grace >= pre_stop + window + IN_FLIGHT_DRAIN
    objects = render(values)
    for kube_version in KUBE_VERSION_RANGE:
        validate_object(one(objects, "Deployment"), kube_version)


def test_shutdown_defaults() -> None:
    """5 s unaware (preStop) + 5 s knowing (drain window) of answering after the deletion, more than
    endpoint removals take to spread in most clusters; a grace period of Kubernetes' default 30 s."""
    assert shutdown_settings({}) == (5, 5, 25, 30)
    container_spec = container(render({}))
    # No shell in the image: the kubelet's own sleep action.
    assert container_spec["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}


def test_no_pre_stop_hook_without_a_sleep() -> None:
    """A sleep of 0 s needs another feature gate (PodLifecycleSleepActionAllowZero): no hook at all."""
    assert "lifecycle" not in container(render({"shutdown": {"preStopSleepSeconds": 0}}))


@pytest.mark.parametrize(
    "values",
    [
        {"shutdown": {"drainWindowSeconds": 11}},
        {"shutdown": {"drainWindowSeconds": 30, "timeoutSeconds": 44}},
    ],
)
def test_a_timeout_too_short_for_the_drain_window_is_refused(values: dict[str, Any]) -> None:
    refusal = r"shutdown.timeoutSeconds \(\d+\) must be at least shutdown.drainWindowSeconds \(\d+\) \+ 15"
    with pytest.raises(helm.HelmRenderError, match=refusal):
        render(values)


@pytest.mark.parametrize(
    "values",
    [
        {"shutdown": {"drainWindow": 5}},
        {"shutdown": {"drainWindowSeconds": "5s"}},
        {"shutdown": {"preStopSleepSeconds": -1}},
        {"shutdown": {"timeoutSeconds": 10}},
        {"shutdown": {"drainWindowSeconds": 121}},
    ],
)
def test_shutdown_schema_rejects_typos_and_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)
